"""The `platforms` suite (issue 21; docs/platforms.md): the Min3 workflow, measure -> pool
tree -> schedule, on the bundled multi-site SimGrid platforms that nobody tuned for.

For every bundled platform (topologies/NAME.xml + NAME.hosts, hand-written, and NAME.yaml,
the true description of the same network):

1. the files agree (platforms_check.compare_files) and, with `check`, SimGrid runs the
   network the YAML describes (platforms_check.check_smpi: every host pair alone, every
   wide-area resource filled);
2. `collsched measure --backend smpi --platform XML --hostfile HOSTS` writes the measured
   topology (its wall time is a target: under 10 minutes for 48 hosts);
3. the measured topology against the true one (`compare_topologies`): every rank pair's
   latency and one-flow bandwidth within 5%, every ordered site pair's wide-area capacity
   (its route's bottleneck) within 10%, the site grouping and the grouping of site pairs
   by shared bottleneck exact;
4. per message size (256 KiB and 4 MiB per rank): every allgather algorithm of the
   registry and the native selectors under SMPI CM02 on the platform XML, compiled and
   predicted from the measured topology; min3 also compiled from the true description;
   the lower bound from the measured topology against every run;
5. the targets: min3(measured) within 10% of min3(true); the bound never above a run;
   min3 predicted (DAG and fluid) within 15% of SMPI; min3 faster than every other.

`run_platforms_suite` returns (report, text); `write_doc` writes docs/benchmarks.md's
section `lab-platforms` (platforms_report.py renders it, with the plot).
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import resources, runtime_build
from ..algorithms import REGISTRY
from ..errors import InputError
from ..inputs.links import host_matrices

PLATFORMS = ("four-site", "hub-3site")
SIZES = (256 << 10, 4 << 20)
NATIVES = ("native", "native:ompi", "native:mpich", "native:mvapich2", "native:impi")
COMPILE_MODEL = "auto"  # the cost model that ranks a compiled algorithm's candidates: compile's default
ITERATIONS = 1  # flat arrivals: one iteration says it all (min3's predictions cost a minute each)
SECTION = "lab-platforms"
# the targets
PAIR_TOLERANCE = 0.05  # latency and bandwidth of every rank pair
CAPACITY_TOLERANCE = 0.10  # wide-area capacities
MIN3_TOLERANCE = 0.10  # min3(measured) / min3(true)
FIDELITY = 0.15  # min3 predicted / SMPI
MEASURE_BUDGET_S = 600.0  # measure on the 48-host platform
MEASURE_TIMEOUT_S = 3600
CHECK_TOLERANCE = 0.01  # SimGrid against the YAML's formulas (SMPI adds ~15 ns per message)
# Filled links: every flow is timed from when its own two ends left the barrier, and ranks
# leave it up to a wide-area latency apart, which the replay (all at once) does not know.
FILL_TOLERANCE = 0.05


@dataclass(frozen=True)
class Bundle:
    name: str
    yaml: Path  # the true description
    xml: Path  # the SimGrid platform
    hosts: Path  # its host file

    @property
    def ranks(self) -> int:
        from .simgrid_platform import load_platform

        return len(load_platform(str(self.xml), str(self.hosts)).hosts)


def bundle(name: str) -> Bundle:
    """A bundled platform by name (topologies/NAME.yaml, .xml, .hosts)."""
    d = resources.topologies_dir()
    b = Bundle(name, d / f"{name}.yaml", d / f"{name}.xml", d / f"{name}.hosts")
    for p in (b.yaml, b.xml, b.hosts):
        if not p.is_file():
            raise InputError("--platforms", name, f"expected a bundled platform ({', '.join(PLATFORMS)}): "
                                                  f"{p} is missing")
    return b


def algorithms() -> list[str]:
    """Every compiled allgather algorithm (min3 first), then the native selectors."""
    return ["min3"] + sorted(a for a in REGISTRY if a != "min3") + list(NATIVES)


# ---------------------------------------------------------------- measure

def measure(b: Bundle, out: Path, extra: tuple[str, ...] = (), progress=None) -> dict:
    """`collsched measure` on the platform under SMPI; the measured topology at `out`."""
    cmd = [sys.executable, "-m", "collsched", "measure", "--backend", "smpi", "--ranks", str(b.ranks),
           "--platform", str(b.xml), "--hostfile", str(b.hosts), "-o", str(out), "--json", *extra]
    if progress:
        progress(f"{b.name}: measure")
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=MEASURE_TIMEOUT_S)
    wall = time.monotonic() - t0
    if done.returncode != 0 or not out.exists():
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise InputError("collsched measure", b.name, f"expected a measured topology (exit {done.returncode}: {tail})")
    summary = None
    try:
        summary = json.loads(done.stdout)
    except ValueError:
        pass
    shown = ["collsched", *cmd[3:cmd.index("--platform")], "--platform", _rel_path(b.xml),
             "--hostfile", _rel_path(b.hosts), "-o", out.name]
    return {"command": " ".join(shown), "wall_s": wall, "summary": summary,
            "within_budget": wall <= MEASURE_BUDGET_S if b.ranks >= 48 else None}


# ---------------------------------------------------------------- measured vs true

def _load(path, ranks: int):
    from ..pipeline import resolve_topology

    return resolve_topology(ranks, str(path), None)


def _rank_matrices(topo):
    """Per rank pair (P x P): latency, bandwidth (the description's b) and one flow's rate
    (b capped by the TCP window)."""
    lat, bw = host_matrices(topo)
    rh = np.asarray(topo.rank_host)
    L, B = lat[np.ix_(rh, rh)], bw[np.ix_(rh, rh)]
    flow = B.copy()
    if topo.tcp_window:
        with np.errstate(divide="ignore"):
            flow = np.minimum(B, float(topo.tcp_window) / (2 * L))
    return L, B, flow


def _rel(a, b):
    return np.abs(a / b - 1.0)


def _sites_of(topo) -> dict[str, frozenset]:
    """site -> the ranks on it."""
    out: dict[str, set] = {}
    for r, h in enumerate(topo.rank_host):
        out.setdefault(topo.host_site[int(h)], set()).add(r)
    return {s: frozenset(v) for s, v in out.items()}


def _bottlenecks(topo) -> dict:
    """(site a, site b) -> (capacity of the route's bottleneck, its resource name); {} without
    a network."""
    net = topo.network
    if net is None:
        return {}
    out = {}
    for pair, route in net.routes.items():
        if not route.resources:
            continue
        k = min(route.resources, key=lambda r: net.resources[r].capacity)
        out[pair] = (net.resources[k].capacity, net.resources[k].name)
    return out


def compare_topologies(true_path, measured_path, ranks: int) -> dict:
    """The measured topology against the true description (module doc, item 3)."""
    true, meas = _load(true_path, ranks), _load(measured_path, ranks)
    Lt, Bt, Ft = _rank_matrices(true)
    Lm, Bm, Fm = _rank_matrices(meas)
    rh = np.asarray(true.rank_host)
    off = rh[:, None] != rh[None, :]
    lat_err = float(_rel(Lm[off], Lt[off]).max()) if off.any() else 0.0
    flow_err = float(_rel(Fm[off], Ft[off]).max()) if off.any() else 0.0
    worst = np.unravel_index(np.argmax(np.where(off, _rel(Fm, Ft), -1)), Ft.shape)
    st, sm = _sites_of(true), _sites_of(meas)
    grouping = set(st.values()) == set(sm.values())
    # true site -> measured site, by their ranks
    name = {a: next((b for b, v in sm.items() if v == ranks_a), None) for a, ranks_a in st.items()}
    bt, bm = _bottlenecks(true), _bottlenecks(meas)
    pairs = []
    for (a, b), (cap, res) in sorted(bt.items()):
        ma, mb = name.get(a), name.get(b)
        got = bm.get((ma, mb)) if ma and mb else None
        pairs.append({"pair": f"{a}->{b}", "true_Bps": cap, "true_resource": res,
                      "measured_Bps": got[0] if got else None, "measured_resource": got[1] if got else None,
                      "error": abs(got[0] / cap - 1) if got else None})
    cap_err = max((p["error"] for p in pairs if p["error"] is not None), default=None)
    missing = [p["pair"] for p in pairs if p["error"] is None]

    def groups(rows, key):
        g: dict = {}
        for p in rows:
            if p[key] is not None:
                g.setdefault(p[key], set()).add(p["pair"])
        return {frozenset(v) for v in g.values()}

    sharing = not missing and groups(pairs, "true_resource") == groups(pairs, "measured_resource")
    window = (true.tcp_window, meas.tcp_window)
    return {
        "latency_max_error": lat_err, "flow_bandwidth_max_error": flow_err,
        "flow_bandwidth_worst": {"src": int(worst[0]), "dst": int(worst[1]), "true_Bps": float(Ft[worst]),
                                 "measured_Bps": float(Fm[worst])},
        "nominal_bandwidth_max_error": float(_rel(Bm[off], Bt[off]).max()) if off.any() else 0.0,
        "sites_true": len(st), "sites_measured": len(sm), "site_grouping_exact": grouping,
        "measured_has_links": meas.network is not None and meas.network.origin == "links",
        "capacities": pairs, "capacity_max_error": cap_err, "capacity_missing": missing,
        "bottleneck_grouping_exact": bool(sharing), "tcp_window": list(window),
        "pairs_met": lat_err <= PAIR_TOLERANCE and flow_err <= PAIR_TOLERANCE,
        "capacities_met": cap_err is not None and not missing and cap_err <= CAPACITY_TOLERANCE,
    }


# ---------------------------------------------------------------- runs

def _config(b: Bundle, topology, nbytes: int, workdir):
    from .runner import LabConfig

    fields = {f.name for f in dataclasses.fields(LabConfig)}
    if "platform" not in fields:
        raise InputError("bench --suite platforms", "LabConfig",
                         "expected the lab runner's --platform (issue 21, lab/runner.py)")
    cfg = LabConfig(backend="smpi", topology=str(topology), ranks=b.ranks, nbytes=nbytes,
                    iterations=ITERATIONS, flat_iterations=0, network_model="CM02", fluid=True,
                    workdir=workdir, platform=str(b.xml), hostfile=str(b.hosts))
    if "compile_model" in fields:  # plan as `collsched compile` does (its default model, auto)
        cfg.compile_model = COMPILE_MODEL
    return cfg


def _run(b: Bundle, topology, nbytes: int, algorithm: str, workdir) -> dict:
    """One algorithm's row (runner.run_lab), or {"algorithm", "error"} when it failed."""
    from .runner import LabRunError, run_lab

    try:
        rep = run_lab(_config(b, topology, nbytes, workdir), [algorithm])
    except InputError as exc:  # the algorithm refuses this rank count (rd: a power of two)
        if "LabConfig" in str(exc):
            raise
        return {"algorithm": algorithm, "refused": str(exc).splitlines()[0][:300]}
    except (LabRunError, ValueError) as exc:
        return {"algorithm": algorithm, "error": str(exc).splitlines()[0][:300]}
    row = rep["results"][0]
    row.pop("command", None)
    row["network_notes"] = rep.get("network_notes", [])
    return row


def lower_bound(topology, ranks: int, nbytes: int) -> dict:
    """The LP lower bound on the average elapsed time of a flat allgather, from `topology`
    with the costs the lab predicts with under SMPI CM02 (netmodel.network_setup)."""
    from ..model.lowerbound import pattern_lower_bound
    from .arrivals import arrival_pattern
    from .netmodel import network_setup

    topo = network_setup("CM02", _load(topology, ranks)).topology
    pattern = arrival_pattern(1, ITERATIONS, ranks, 0.0)
    lp = pattern_lower_bound(topo, nbytes, pattern)
    return {"avg_elapsed_s": float(lp.avg_elapsed_s), "method": lp.method}


def run_case(b: Bundle, measured: Path, nbytes: int, names: list[str], workdir: Path, progress=None) -> dict:
    """Every algorithm on the platform, compiled from the measured topology; min3 also from
    the true description; the bound; the targets of this platform and size."""
    rows = []
    for name in names:
        if progress:
            progress(f"{b.name} {nbytes >> 10} KiB: {name}")
        rows.append(_run(b, measured, nbytes, name, workdir / f"{name}-{nbytes}"))
    if progress:
        progress(f"{b.name} {nbytes >> 10} KiB: min3 from the true description")
    true_min3 = _run(b, b.yaml, nbytes, "min3", workdir / f"min3-true-{nbytes}")
    bound = lower_bound(measured, b.ranks, nbytes)
    case = {"nbytes": nbytes, "results": rows, "min3_true": true_min3, "bound": bound}
    case["targets"] = case_targets(case)
    return case


def _ok(row) -> bool:
    return row is not None and "error" not in row and "refused" not in row and row.get("data_ok", False)


def _ran(row) -> bool:
    return "refused" not in row


def case_targets(case: dict) -> dict:
    rows = {r["algorithm"]: r for r in case["results"]}
    m3, m3t = rows.get("min3"), case["min3_true"]
    out = {"data_ok": all(_ok(r) for r in case["results"] if _ran(r)) and _ok(m3t),
           "failed": [r["algorithm"] for r in case["results"] if _ran(r) and not _ok(r)],
           "refused": [r["algorithm"] for r in case["results"] if not _ran(r)]}
    if _ok(m3) and _ok(m3t):
        ratio = m3["avg_elapsed_s"] / m3t["avg_elapsed_s"]
        out.update(min3_ratio=ratio, min3_ratio_met=ratio <= 1 + MIN3_TOLERANCE)
    runs = [r["avg_elapsed_s"] for r in case["results"] if _ok(r)] + ([m3t["avg_elapsed_s"]] if _ok(m3t) else [])
    lb = case["bound"]["avg_elapsed_s"]
    out["bound_s"] = lb
    out["bound_over_fastest"] = lb / min(runs) if runs else None
    out["bound_met"] = bool(runs) and lb <= min(runs) * (1 + 1e-9)
    if _ok(m3):
        for model, key in (("dag", "predicted_avg_elapsed_s"), ("fluid", "fluid_avg_elapsed_s")):
            if m3.get(key) is not None:
                r = m3[key] / m3["avg_elapsed_s"]
                out[f"{model}_ratio"] = r
                out[f"{model}_met"] = abs(r - 1) <= FIDELITY
        others = [r for r in case["results"] if _ok(r) and r["algorithm"] != "min3"]
        best = min(others, key=lambda r: r["avg_elapsed_s"], default=None)
        out["best_other"] = best["algorithm"] if best else None
        out["best_other_s"] = best["avg_elapsed_s"] if best else None
        out["min3_fastest"] = best is None or m3["avg_elapsed_s"] < best["avg_elapsed_s"]
        out["speedup_over_best_other"] = best["avg_elapsed_s"] / m3["avg_elapsed_s"] if best else None
    return out


# ---------------------------------------------------------------- the suite

def _flows_program() -> Path | None:
    p = runtime_build.program("smpi", "collsched-flows")
    return p if p.exists() else None


def run_platform(b: Bundle, sizes, names, workdir: Path, check: bool = True, measured: str | None = None,
                 measure_args: tuple[str, ...] = (), progress=None) -> dict:
    """One bundled platform: files, SimGrid check, measure, comparison, runs."""
    from . import platforms_check

    true = _load(b.yaml, b.ranks)
    workdir.mkdir(parents=True, exist_ok=True)
    out = {"platform": b.name, "yaml": _rel_path(b.yaml), "xml": _rel_path(b.xml), "hosts": _rel_path(b.hosts),
           "ranks": b.ranks, "sites": len(set(true.host_site)),
           "file_differences": platforms_check.compare_files(b.xml, b.hosts, true)}
    if check:
        prog = _flows_program()
        if prog is None:
            out["smpi_check"] = {"skipped": "collsched-flows is not built (make measure)"}
        else:
            if progress:
                progress(f"{b.name}: SimGrid check")
            t0 = time.monotonic()
            out["smpi_check"] = platforms_check.check_smpi(b.xml, b.hosts, true, prog, workdir=workdir)
            out["smpi_check"]["wall_s"] = time.monotonic() - t0
    mpath = Path(measured) if measured else workdir / f"{b.name}-measured.yaml"
    out["measure"] = {"given": str(measured)} if measured else measure(b, mpath, measure_args, progress)
    out["measured_topology"] = mpath.read_text()
    out["comparison"] = compare_topologies(b.yaml, mpath, b.ranks)
    out["cases"] = [run_case(b, mpath, n, names, workdir, progress) for n in sizes]
    return out


def _rel_path(p: Path) -> str:
    root = resources.source_root()
    try:
        return str(Path(p).resolve().relative_to(root)) if root else str(p)
    except ValueError:
        return str(p)


def run_platforms_suite(platforms=PLATFORMS, sizes=SIZES, names=None, workdir=None, check: bool = True,
                        measured: dict | None = None, measure_args: tuple[str, ...] = (),
                        progress=None) -> tuple[dict, str]:
    """The suite (module doc). platforms: bundled names; names: algorithms (None: every
    compiled one and the native selectors); measured: {platform: topology file} to skip
    its measurement (platforms may be Bundle objects too: a test's own). Returns (report, text)."""
    import tempfile

    from .platforms_report import text_report

    names = list(names) if names else algorithms()
    if "min3" not in names:
        names.insert(0, "min3")
    bundles = [p if isinstance(p, Bundle) else bundle(p) for p in platforms]
    started = datetime.datetime.now(datetime.timezone.utc)
    load = os.getloadavg()[0]
    keep = workdir is not None
    root = Path(workdir or tempfile.mkdtemp(prefix="collsched-platforms-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    try:
        results = [run_platform(b, sizes, names, root / b.name, check, (measured or {}).get(b.name),
                                measure_args, progress) for b in bundles]
    finally:
        if not keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    report = {"suite": "platforms", "backend": "smpi", "network_model": "CM02", "compile_model": COMPILE_MODEL,
              "iterations": ITERATIONS, "sizes": list(sizes), "algorithms": names,
              "started": started.isoformat(timespec="seconds"),
              "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "load_before": load, "load_after": os.getloadavg()[0],
              "tolerances": {"pairs": PAIR_TOLERANCE, "capacities": CAPACITY_TOLERANCE, "min3": MIN3_TOLERANCE,
                             "fidelity": FIDELITY, "measure_s": MEASURE_BUDGET_S},
              "platforms": results}
    report["summary"] = summary(report)
    return report, text_report(report)


def summary(report: dict) -> dict:
    """Every target over every platform and size: met or not."""
    plats = report["platforms"]
    cases = [c for p in plats for c in p["cases"]]
    t = [c["targets"] for c in cases]

    def every(key):
        vals = [x.get(key) for x in t]
        return None if any(v is None for v in vals) or not vals else all(vals)

    return {"data_ok": all(x["data_ok"] for x in t),
            "files_agree": all(not p["file_differences"] for p in plats),
            "smpi_check_ok": _checked(plats),
            "pairs_met": all(p["comparison"]["pairs_met"] for p in plats),
            "capacities_met": all(p["comparison"]["capacities_met"] for p in plats),
            "site_grouping_exact": all(p["comparison"]["site_grouping_exact"] for p in plats),
            "bottleneck_grouping_exact": all(p["comparison"]["bottleneck_grouping_exact"] for p in plats),
            "min3_ratio_met": every("min3_ratio_met"), "bound_met": every("bound_met"),
            "dag_met": every("dag_met"), "fluid_met": every("fluid_met"), "min3_fastest": every("min3_fastest"),
            "measure_within_budget": all(p["measure"].get("within_budget") is not False for p in plats)}


def _checked(plats) -> bool | None:
    """SimGrid ran the YAML's network on every checked platform (None: none checked)."""
    done = [p["smpi_check"] for p in plats if "skipped" not in p.get("smpi_check", {"skipped": 1})]
    if not done:
        return None
    return all(c["single_max_error"] <= CHECK_TOLERANCE and c["fill_max_error"] <= FILL_TOLERANCE for c in done)


def combine(reports: list[dict]) -> dict:
    """One report from several runs of the suite (e.g. one platform per process)."""
    out = dict(reports[0])
    out["platforms"] = [p for r in reports for p in r["platforms"]]
    for p in out["platforms"]:  # the targets as this code states them
        for case in p["cases"]:
            for row in case["results"]:  # a compile-time refusal recorded as an error
                if str(row.get("error", "")).startswith("--algorithm:"):
                    row["refused"] = row.pop("error")
            case["targets"] = case_targets(case)
    out["started"] = min(r["started"] for r in reports)
    out["finished"] = max(r["finished"] for r in reports)
    out["load_before"] = max(r["load_before"] for r in reports)
    out["load_after"] = max(r["load_after"] for r in reports)
    out["summary"] = summary(out)
    return out


def write_doc(report: dict, doc, plot=None) -> None:
    """docs/benchmarks.md's section `lab-platforms` from a report (never by hand); with
    `plot`, the figure too, linked from the section."""
    from .benchdoc import replace_section
    from .platforms_report import markdown, plot_report

    rel = None
    if plot:
        plot_report(report, plot)
        rel = os.path.relpath(plot, os.path.dirname(os.path.abspath(doc)))
    replace_section(doc, SECTION, markdown(report, rel))


def main(argv=None) -> int:
    """python -m collsched.lab.platforms: the suite without the CLI (the Makefile's
    bench-platforms; `--combine` merges the JSON reports of separate runs)."""
    import argparse

    from .platforms_report import text_report

    ap = argparse.ArgumentParser(prog="python -m collsched.lab.platforms")
    ap.add_argument("--platforms", default=",".join(PLATFORMS))
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="bytes per rank, comma-separated")
    ap.add_argument("--algorithms", default=None, help="comma-separated (default: every one)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--no-check", action="store_true", help="skip the SimGrid check of the platform files")
    ap.add_argument("--measured", action="append", default=[], help="PLATFORM=FILE: skip its measurement")
    ap.add_argument("--json", default=None, help="write the report here")
    ap.add_argument("--combine", nargs="+", default=None, help="JSON reports to merge instead of running")
    ap.add_argument("--doc", default=None, help="docs/benchmarks.md: write the section lab-platforms")
    ap.add_argument("--plot", default=None, help="the figure (PNG) the section links")
    a = ap.parse_args(argv)
    if a.combine:
        report = combine([json.loads(Path(f).read_text()) for f in a.combine])
        text = text_report(report)
    else:
        from ..inputs.units import parse_bytes

        measured = dict(m.split("=", 1) for m in a.measured)
        report, text = run_platforms_suite(
            [p.strip() for p in a.platforms.split(",") if p.strip()],
            [parse_bytes(s) for s in a.sizes.split(",")],
            [x.strip() for x in a.algorithms.split(",")] if a.algorithms else None,
            a.workdir, not a.no_check, measured, progress=lambda t: print(t, file=sys.stderr, flush=True))
    if a.json:
        from ..files import write_atomic

        write_atomic(a.json, json.dumps(report, indent=1, default=str) + "\n")
    if a.doc:
        write_doc(report, a.doc, a.plot)
    print(text)
    return 0 if report["summary"]["data_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
