"""Model check: the compiler's predicted time against SimGrid SMPI's, for every baseline.

For each network model (CM02 and SMPI by default), bundled topology and message size,
every baseline runs in the lab (flat arrival pattern, the topology's TCP window) and is
predicted by the cost models with the costs that network model implies (netmodel.py);
the ratio predicted / measured is reported. Target: within +-15% from 64 KiB per rank on
tryton-48 and wan-3x16, under both models.

With `measured` (a directory; `--measured DIR`) the same runs are predicted with the
topologies `collsched measure` wrote for them, DIR/<topology>-<MODEL>.yaml (measured first
when missing): SimGrid still runs the bundled topology (LabConfig.predict_topology).

With `user` (bench --suite model --platform FILE.xml --hostfile FILE --topology T.yaml) the
check runs on the user's SimGrid platform instead of the bundled topologies: every baseline
on as many ranks as T has (fewer where an algorithm needs it), predicted from T.
"""
from __future__ import annotations

import datetime
import os
import subprocess
from pathlib import Path

from .. import resources
from ..algorithms import REGISTRY, Request
from .runner import LabConfig, run_lab

TOPOLOGIES = {"tryton-48": 48, "wan-3x16": 48, "three-site-grid": 20}
SIZES = (64 << 10, 256 << 10, 1 << 20)
BASELINES = ("ring", "nex", "lnbc", "rd", "bruck", "spreading")
TOLERANCE = 0.15
TARGET_TOPOLOGIES = ("tryton-48", "wan-3x16")  # the target: within TOLERANCE from 64 KiB up
NETWORK_MODELS = ("CM02", "SMPI")  # issue 25: the lab reports under both
# One piece per block: what the compiler picks under CM02 for every case here. Under SMPI's
# factors its segment policy picks up to 29 pieces (2026-11-25: spreading, 48 ranks,
# 256 KiB: 65,000 messages in flight), which SimGrid takes hours for; the model check
# checks the cost model per message, the mini-benchmarks judge the compiler's choices.
SEGMENTS = 1
# --sweep-budget of the measurements the check makes itself (seconds of round trip after
# which a swept direction stops). The default 0.25 s stops wan-3x16's WAN directions under
# SMPI before SimGrid's 64 KiB factor threshold (a 64 KiB round trip A-B takes 0.27 s, B-C
# is over budget at 0 B): the fitted last segment then times a 64 KiB WAN message at 0.30 of
# SimGrid's. 10 s covers the threshold on every bundled topology (2026-11-25, 5-25 s each).
MEASURE_SWEEP_BUDGET_S = 10.0


def _ranks_for(alg: str, hosts: int) -> int:
    p = hosts
    while REGISTRY[alg].check(Request(p)) is not None:
        p -= 1
        if alg == "rd":
            p = 1 << (p.bit_length() - 1)
    return p


def user_cases(user: dict) -> dict:
    """{topology path: ranks} of a user's platform run (user: topology, platform, hostfile),
    checked before anything runs: the topology's ranks, as many slots in the host file."""
    from ..errors import InputError
    from ..inputs.topology import load_topology
    from .simgrid_platform import user_platform

    if user.get("topology") is None:
        raise InputError("--platform", str(user.get("platform")), "expected --topology with it")
    ranks = load_topology(user["topology"]).nranks
    if ranks < 2:
        raise InputError(user["topology"], "placement", "expected at least 2 ranks")
    user_platform("smpi", user.get("platform"), user.get("hostfile"), ranks, user["topology"])
    return {str(user["topology"]): ranks}


def run_model_check(progress=None, sizes=SIZES, topologies=TOPOLOGIES,
                    network_models=NETWORK_MODELS, measured=None, user=None) -> list[dict]:
    """measured: a directory; then every case is predicted with DIR/<topology>-<MODEL>.yaml
    (measured first when missing) instead of the bundled topology (rows: topology_source).
    user: {topology, platform, hostfile}: the user's platform instead (module docstring)."""
    if user is not None:
        if measured is not None:
            from ..errors import InputError

            raise InputError("--measured", str(measured), "expected no --measured with --platform "
                                                          "(--topology is the prediction topology)")
        topologies = user_cases(user)
    given = {(t, m): None for m in network_models for t in topologies}
    predict = given if measured is None else measured_topologies(measured, topologies,
                                                                 network_models, progress)
    rows = []
    for model in network_models:
        rows += _run_one_model(model, progress, sizes, topologies, predict, user)
    return rows


def measured_path(directory, topology: str, model: str) -> Path:
    return Path(directory) / f"{topology}-{model}.yaml"


def measured_topologies(directory, topologies=TOPOLOGIES, network_models=NETWORK_MODELS,
                        progress=None) -> dict:
    """{(topology, model): path}: DIR/<topology>-<MODEL>.yaml, each checked to load for the
    topology's hosts before anything runs; a missing one is measured by `collsched measure`'s
    API (SMPI on the bundled topology's platform under that model, its default settings but
    --sweep-budget MEASURE_SWEEP_BUDGET_S)."""
    from ..errors import InputError
    from ..pipeline import resolve_topology

    d = Path(directory)
    if not d.is_dir():
        raise InputError("--measured", str(directory),
                         "expected an existing directory of measured topologies "
                         "(<topology>-<MODEL>.yaml; missing ones are measured into it)")
    paths, missing = {}, []
    for model in network_models:
        for topo, hosts in topologies.items():
            path = measured_path(d, topo, model)
            paths[(topo, model)] = str(path)
            if path.exists():
                resolve_topology(hosts, str(path), None)  # bad file: its InputError, now
            else:
                missing.append((topo, hosts, model, path))
    for topo, hosts, model, path in missing:
        from .measure import MeasureConfig, measure

        if progress:
            progress(f"measure {topo} under {model} -> {path}")
        measure(MeasureConfig("smpi", hosts, platform_from=str(resources.topologies_dir() / f"{topo}.yaml"),
                              network_model=model, fit_budget_s=MEASURE_SWEEP_BUDGET_S), path)
    return paths


def single_message_ratios(cfg: LabConfig) -> dict:
    """One message of cfg.nbytes alone between every two ranks: the time the prediction
    topology gives it over the time the run's topology does under the network model's rule
    (what SimGrid does with one message: the given check's ratios of 1.00). The range over
    the pairs says whether a measured topology got single messages right; what remains is
    concurrency (shared links, several flows between one pair)."""
    import dataclasses

    import numpy as np

    from ..pipeline import resolve_topology
    from .netmodel import SIMGRID_EAGER_LIMIT, network_setup
    from .platform import DEFAULT_TCP_GAMMA

    run = resolve_topology(cfg.ranks, cfg.topology, None)
    run = dataclasses.replace(run, tcp_window=float(run.tcp_window or DEFAULT_TCP_GAMMA))
    run = network_setup(cfg.network_model, run).topology
    pred = dataclasses.replace(resolve_topology(cfg.ranks, cfg.predict_topology, None),
                               eager_limit=SIMGRID_EAGER_LIMIT)
    off = ~np.eye(cfg.ranks, dtype=bool)
    ratio = pred.transfer_time(cfg.nbytes)[off] / run.transfer_time(cfg.nbytes)[off]
    return {"single_ratio_min": float(ratio.min()), "single_ratio_max": float(ratio.max())}


def _run_one_model(model: str, progress, sizes, topologies, predict, user=None) -> list[dict]:
    rows = []
    on = {} if user is None else {"platform": user["platform"], "hostfile": user["hostfile"]}
    for topo, hosts in topologies.items():
        source = "given" if predict[(topo, model)] is None else "measured"
        for nbytes in sizes:
            by_ranks: dict[int, list[str]] = {}
            for alg in BASELINES:
                by_ranks.setdefault(_ranks_for(alg, hosts), []).append(alg)
            for p, algs in sorted(by_ranks.items()):
                if progress:
                    progress(f"{model} ({source}): {topo} {nbytes} B P={p}")
                path = topo if user is not None else str(resources.topologies_dir() / f"{topo}.yaml")
                cfg = LabConfig("smpi", path, p, nbytes,
                                iterations=1, flat_iterations=0, fluid=True, network_model=model,
                                bounds=False, segments=SEGMENTS,
                                predict_topology=predict[(topo, model)], **on)
                rep = run_lab(cfg, algs)
                single = {} if source == "given" else single_message_ratios(cfg)
                name = topo if user is None else f"{Path(user['platform']).name} ({Path(topo).stem})"
                for r in rep["results"]:
                    rows.append({"network_model": model, "topology": name, "topology_source": source,
                                 "ranks": p, "bytes": nbytes, **single, **r, "platform": rep["platform"]})
    return rows


def _simgrid_version() -> str:
    try:
        out = subprocess.run(["smpirun", "-version"], capture_output=True, text=True, timeout=30)
        text = (out.stdout + out.stderr).strip().splitlines()
        return text[0] if text else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _models(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r.get("network_model", "CM02") for r in rows))


def _sources(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r.get("topology_source", "given") for r in rows))


def _of_model(rows: list[dict], model: str, source: str | None = None) -> list[dict]:
    return [r for r in rows if r.get("network_model", "CM02") == model
            and (source is None or r.get("topology_source", "given") == source)]


def _topology_table(sel: list[dict]) -> list[str]:
    sizes = sorted({r["bytes"] for r in sel})
    lines = ["| algorithm | P | " + " | ".join(f"{s >> 10} KiB: measured ms / DAG / fluid" for s in sizes)
             + " | data |",
             "|:--|--:|" + "--:|" * len(sizes) + ":--|"]
    for alg in BASELINES:
        cells = []
        ok = True
        p = None
        for s in sizes:
            r = next((x for x in sel if x["algorithm"] == alg and x["bytes"] == s), None)
            if r is None:
                cells.append("-")
                continue
            p = r["ranks"]
            ok &= r["data_ok"]
            txt = []
            for ratio in (r.get("model_ratio"), r.get("fluid_ratio")):
                t = "-" if ratio is None else f"{ratio:.2f}"
                txt.append(f"**{t}**" if ratio is not None and abs(ratio - 1) > TOLERANCE else t)
            cells.append(f"{r['avg_elapsed_s'] * 1e3:.2f} / {txt[0]} / {txt[1]}")
        if p is not None:
            lines.append(f"| {alg} | {p} | " + " | ".join(cells) + f" | {'ok' if ok else 'WRONG'} |")
    return lines


def _single_line(sel: list[dict]) -> str:
    """The measured topology's single messages against the run's (single_message_ratios)."""
    parts = []
    for s in sorted({r["bytes"] for r in sel}):
        have = [r for r in sel if r["bytes"] == s and "single_ratio_min" in r]
        if have:
            lo = min(r["single_ratio_min"] for r in have)
            hi = max(r["single_ratio_max"] for r in have)
            parts.append(f"{s >> 10} KiB {lo:.2f}" + ("" if f"{hi:.2f}" == f"{lo:.2f}" else f"-{hi:.2f}"))
    return ("One message alone between two ranks, measured topology / SimGrid's (every rank pair): "
            + (", ".join(parts) if parts else "not computed") + ".")


def _summary(rows: list[dict], model: str, source: str = "given") -> list[str]:
    out = []
    what = model if source == "given" else f"{model}, measured topologies"
    for key, name in (("model_ratio", "DAG"), ("fluid_ratio", "fluid")):
        have = [r for r in rows if r.get(key) is not None]
        within = [r for r in have if abs(r[key] - 1) <= TOLERANCE]
        target = [r for r in have if r["topology"] in TARGET_TOPOLOGIES and r["bytes"] >= 64 << 10]
        target_in = [r for r in target if abs(r[key] - 1) <= TOLERANCE]
        out.append(f"- {what}, {name} model: {len(within)} of {len(have)} cases within "
                   f"+-{TOLERANCE:.0%}; on {' and '.join(TARGET_TOPOLOGIES)} (the target) "
                   f"{len(target_in)} of {len(target)}.")
    return out


_COSTS = {"CM02": "none: every message costs L + m / b, the cost models' own physics",
          "SMPI": "SimGrid's calibrated size-dependent factors (smpi/lat-factor, smpi/bw-factor, "
                  "weight-S 8775 B), which the predictions use too (lab/netmodel.py)",
          "LV08": "latency x 13.01, bandwidth x 0.97, weight-S 20537 B, which the predictions use too"}


_MEASURED = (f"*Measured* tables: the same runs (SimGrid runs the bundled topology's platform "
             "under the same settings), but the compiler and both cost models use the topology "
             "that `collsched measure --backend smpi --platform-from topologies/<topology>.yaml "
             "--network-model <MODEL>` wrote for it (`--measured DIR`: DIR/<topology>-<MODEL>.yaml; "
             f"the check measures a missing one itself with --sweep-budget {MEASURE_SWEEP_BUDGET_S:g}): "
             "a latency and bandwidth matrix from one ping-pong per host pair and size-dependent "
             "costs (message_costs) from a size sweep per link class, used as measured, with "
             "eager_limit 0 (SimGrid's protocol rule, which no ping-pong sees). Under each table, "
             "one message alone between two ranks as the measured topology times it over what "
             "SimGrid takes (the range over all rank pairs): where that is 1.00, the measurement "
             "is right for single messages and what is off is concurrency. The matrix has no "
             "shared links (issue 21): flows of different host pairs crossing one WAN link do not "
             "share it, and the window-capped rate one ping-pong flow sees becomes the capacity "
             "of the pair, which all flows between those two hosts then share (SimGrid caps each "
             "flow by the window instead).")


def markdown(rows: list[dict], plot_rel: str | None) -> str:
    date = datetime.date.today().isoformat()
    models = _models(rows)
    sources = _sources(rows)
    title = "## Lab: cost model against SimGrid SMPI"
    if sources == ["measured"]:
        title += ", predicting with measured topologies"
    lines = [
        title,
        "",
        f"Measured {date} by `collsched bench --suite model"
        f"{' --measured DIR' if 'measured' in sources else ''}` on {_simgrid_version()}, network "
        f"model{'s' if len(models) > 1 else ''} {' and '.join(models)} (one table each), TCP "
        "window from the topology (4 MiB), flat arrival pattern, one iteration after a "
        "warm-up call, every byte checked. Ratio = predicted / measured average elapsed time, "
        "for the two cost models: *DAG* (simulate.py: ports serve one transfer after another; "
        "what `compile` reports and the planners use) and *fluid* (fluid.py: the execution "
        "replayed with flows sharing ports and links max-min fairly; `simulate --model fluid`); "
        f"**bold** is outside +-{TOLERANCE:.0%}. rd runs at the largest power of two that fits. "
        "Every baseline is compiled with one segment per block (what the compiler picks under "
        "CM02 for all of these cases; docs/lab.md, \"Network models\", says why under SMPI too).",
        "",
    ]
    ran = {(r["platform"]["platform"], r["platform"]["hostfile"]) for r in rows
           if isinstance(r.get("platform"), dict) and "platform" in r["platform"]}
    for xml, hosts in sorted(ran):
        lines += [f"SimGrid ran the platform `{xml}` (ranks placed by `{hosts}`), not one generated "
                  "from the topology; the topology predicted and compiled (`--platform`, `--hostfile`).", ""]
    if "measured" in sources:
        lines += [_MEASURED, ""]
    for source in sources:
        for model in models:
            sel_model = _of_model(rows, model, source)
            if not sel_model:
                continue
            how = "" if source == "given" else ", topologies measured by `collsched measure`"
            lines += [f"### Network model {model}{how}", "",
                      f"Size-dependent factors: {_COSTS.get(model, model)}"
                      + (" (SimGrid); the predictions use the measured topology's own." if how else "."), ""]
            for topo in dict.fromkeys(r["topology"] for r in sel_model):
                lines += [f"**{topo}** ({model}{', measured' if how else ''})", ""]
                lines += _topology_table([r for r in sel_model if r["topology"] == topo])
                lines.append("")
                if how:
                    lines += [_single_line([r for r in sel_model if r["topology"] == topo]), ""]
    for source in sources:
        for model in models:
            sel = _of_model(rows, model, source)
            if sel:
                lines += _summary(sel, model, source)
    lines += ["", "What the models capture (details in docs/lab.md):",
              "- both: latency, bandwidth, the TCP window (one flow moves at most window / 2L), "
              "rendezvous messages waiting for their receive, FIFO links, shared WAN links, and "
              "under SMPI the size-dependent latency and bandwidth factors of each message;",
              "- DAG: each host port serves one transfer after another in list order. Where the "
              "runtime lets several flows through one port or link at once, SimGrid shares it: "
              "lnbc on tryton-48 (the root's sends to its children overlap) is predicted too "
              "fast, bruck on wan-3x16 (pieces of one step overtake each other on a shared link) "
              "too slow;",
              "- fluid: the executor's walk (a FIFO send holds back everything after it) and "
              "weighted max-min sharing of every NIC and link, as SimGrid's CM02 solver does "
              "(weight: 1 / latency, plus weight-S / bandwidth under SMPI). It is an event "
              "simulation: the lab's sizes, not a million transfers."]
    if plot_rel:
        lines += ["", f"![model check]({plot_rel})"]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path) -> None:
    from .charts import save

    save(figure(rows), path)


def figure(rows: list[dict]):
    """Predicted against measured time, log-log, one panel per network model (and source
    of the topologies): marker = algorithm, colour = topology, hollow = DAG model, filled =
    fluid model, the diagonal and its +-TOLERANCE band; a Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from .charts import log_axis

    panels = [(s, m) for s in _sources(rows) for m in _models(rows) if _of_model(rows, m, s)]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels) + 2.0, 5.0), squeeze=False)
    markers = {"ring": "o", "nex": "s", "lnbc": "^", "rd": "D", "bruck": "v", "spreading": "P"}
    colors = {"tryton-48": "tab:blue", "wan-3x16": "tab:orange", "three-site-grid": "tab:green"}
    values = [v for r in rows for v in (r["avg_elapsed_s"], r.get("predicted_avg_elapsed_s"),
                                        r.get("fluid_avg_elapsed_s")) if v is not None]
    lo, hi = min(values) * 0.7, max(values) * 1.4
    for ax, (source, model) in zip(axes[0], panels):
        for r in _of_model(rows, model, source):
            ax.scatter(r["avg_elapsed_s"], r["predicted_avg_elapsed_s"], marker=markers[r["algorithm"]],
                       facecolors="none", edgecolors=colors[r["topology"]], s=30, alpha=0.8)
            if r.get("fluid_avg_elapsed_s") is not None:
                ax.scatter(r["avg_elapsed_s"], r["fluid_avg_elapsed_s"], marker=markers[r["algorithm"]],
                           color=colors[r["topology"]], s=30, alpha=0.8)
        xs = [lo, hi]
        ax.plot(xs, xs, color="black", lw=1)
        ax.fill_between(xs, [x * (1 - TOLERANCE) for x in xs], [x * (1 + TOLERANCE) for x in xs],
                        color="gray", alpha=0.2)
        log_axis(ax.xaxis, lo, hi)
        log_axis(ax.yaxis, lo, hi)
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal")
        ax.set_xlabel("measured in SimGrid SMPI (s, log scale)")
        ax.set_ylabel("predicted by the cost model (s, log scale)")
        ax.set_title(f"network model {model}" + (", predicting from measured topologies"
                                                 if source == "measured" else ""), fontsize=9.5)
    handles = [Line2D([], [], marker=m, linestyle="", color="gray", label=a) for a, m in markers.items()]
    handles += [Patch(color=c, label=t) for t, c in colors.items()]
    handles += [Line2D([], [], marker="o", linestyle="", markerfacecolor="none", markeredgecolor="black",
                       label="hollow: DAG model"),
                Line2D([], [], marker="o", linestyle="", color="black", label="filled: fluid model"),
                Line2D([], [], color="black", lw=1, label="predicted = measured"),
                Patch(color="gray", alpha=0.2, label=f"within +-{TOLERANCE:.0%}")]
    axes[0, -1].legend(handles=handles, fontsize=7.5, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                       frameon=False)
    fig.suptitle("allgather baselines: cost models against SimGrid SMPI on "
                 + ", ".join(dict.fromkeys(r["topology"] for r in rows))
                 + " (flat arrivals, one iteration)", fontsize=10)
    fig.tight_layout()
    return fig


def rows_from_markdown(text: str) -> list[dict]:
    """The rows of a section markdown() wrote, as far as figure() needs them (times as
    printed: ms to 2 decimals, ratios to 2)."""
    import re

    rows, topo, model, source, sizes = [], None, None, "given", []
    for line in text.splitlines():
        m = re.match(r"\*\*([\w-]+)\*\* \((\w+)(, measured)?\)", line)
        if m:
            topo, model, source = m.group(1), m.group(2), "measured" if m.group(3) else "given"
            continue
        if line.startswith("| algorithm | P |"):
            sizes = [int(k) << 10 for k in re.findall(r"(\d+) KiB:", line)]
            continue
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if topo is None or len(c) != len(sizes) + 3 or c[0] not in BASELINES:
            continue
        for nbytes, cell in zip(sizes, c[2:-1]):
            if cell == "-":
                continue
            ms, dag, fluid = (x.strip().strip("*") for x in cell.split("/"))
            t = float(ms) / 1e3
            rows.append({"network_model": model, "topology": topo, "topology_source": source,
                         "ranks": int(c[1]), "bytes": nbytes, "algorithm": c[0], "avg_elapsed_s": t,
                         "predicted_avg_elapsed_s": t * float(dag),
                         "fluid_avg_elapsed_s": None if fluid == "-" else t * float(fluid),
                         "data_ok": c[-1] == "ok"})
    return rows


def main(argv=None) -> int:
    """python -m collsched.lab.modelcheck --doc DOC --section S --plot PNG: the model
    check's chart again from the tables of its section (rounded as printed)."""
    import argparse

    from .report import section_text

    ap = argparse.ArgumentParser(prog="python -m collsched.lab.modelcheck")
    ap.add_argument("--doc", required=True)
    ap.add_argument("--section", default="lab-model-check")
    ap.add_argument("--plot", required=True)
    a = ap.parse_args(argv)
    rows = rows_from_markdown(section_text(a.doc, a.section))
    plot(rows, a.plot)
    print(f"{a.plot}: {len(rows)} runs")
    return 0


def run_and_record(doc=None, plot_path=None, progress=None,
                   network_models=NETWORK_MODELS, measured=None, section=None, user=None) -> list[dict]:
    """Runs the check, writes its Markdown into `doc`'s section (default lab-model-check, or
    lab-model-check-measured with `measured`) or prints it; plot_path: the scatter plot.
    user: {topology, platform, hostfile} (run_model_check)."""
    rows = run_model_check(progress=progress, network_models=network_models, measured=measured, user=user)
    rel = None
    if plot_path:
        plot(rows, plot_path)
        if doc:
            rel = os.path.relpath(plot_path, os.path.dirname(os.path.abspath(doc)))
    md = markdown(rows, rel)
    if doc:
        from .benchdoc import replace_section

        replace_section(doc, section or ("lab-model-check" if measured is None
                                         else "lab-model-check-measured"), md)
    else:
        print(md)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
