"""Tables, plots, the command line and the benchmarks section of the collectives lab
(coll_bench.py runs the cases).

- `cmd_bench(a)`: `collsched bench --collective alltoall|bcast|reduce|allreduce ...`;

- `print_report(report)`: one case as a terminal table;
- `markdown(reports, plot_rel)`: cases as Markdown (the section `collsched bench
  --collective C --doc D` writes);
- `plot_reports(reports, path)`: measured average elapsed time per algorithm, one panel per
  case, with the fluid model's prediction and the lower bound;
- `fidelity_rows(reports)`: per compiled algorithm the fluid and DAG models against SMPI.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from ..errors import InputError
from .charts import backend_text, topology_name
from .coll_bench import DEFAULT_ALGORITHMS, CollConfig, check_algorithms, check_case, run_coll, size_text
from .netmodel import check_model


def _ms(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x * 1e3:.3f}"


def _ratio(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def _pct(x) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def title(report: dict) -> str:
    i = report["inputs"]
    what = "per pair" if i["collective"] == "alltoall" else "vector"
    extra = f", root {i['root']}" if "root" in i else ""
    extra += f", {i['dtype']} {i['op']}" if "dtype" in i else ""
    return (f"{i['collective']}, {topology_name(i.get('topology'))}, P = {i['ranks']}, "
            f"{size_text(i['nbytes'])} {what}{extra}, maxDelay {i['max_delay_ms']:g} ms, "
            f"{i['iterations']} iteration{'s' * (i['iterations'] != 1)}, seed {i['seed']}, "
            f"{backend_text(report['backend'], i.get('network_model'))}")


def _compiled_as(r: dict) -> str:
    if r["kind"] != "compiled":
        return r.get("native", "")
    return f"{r.get('compiled', '?')}, {r.get('nseg', '?')} seg"


COLUMNS = ("algorithm", "runs as", "avg elapsed ms", "run time ms", "fluid ms", "fluid/meas",
           "dag ms", "dag/meas", "gap avg to LB", "gap run to LB", "vs best native", "data")


def row_cells(r: dict) -> list[str]:
    sp = r.get("speedup_over_best_native")
    return [r["algorithm"], _compiled_as(r), _ms(r["avg_elapsed_s"]), _ms(r["run_time_s"]),
            _ms(r.get("predicted_fluid_avg_elapsed_s")), _ratio(r.get("fluid_ratio")),
            _ms(r.get("predicted_dag_avg_elapsed_s")), _ratio(r.get("dag_ratio")),
            _pct(r.get("gap_avg_elapsed")), _pct(r.get("gap_run_time")),
            "-" if sp is None else f"{sp:.2f}x", "ok" if r["data_ok"] else "WRONG"]


def bound_text(report: dict) -> str | None:
    b = report.get("bound")
    if not b:
        return None
    terms = ", ".join(f"{k} {_ms(v)} ms" for k, v in b.get("terms", {}).items() if k != "avg_elapsed_s")
    avg = f"; average elapsed time for the measured arrivals {_ms(b['avg_elapsed_s'])} ms" \
        if "avg_elapsed_s" in b else ""
    return (f"Lower bound (collectives/bounds.py, any schedule): run time {_ms(b['run_time_s'])} ms for the "
            f"measured arrivals, {_ms(b['flat_run_time_s'])} ms flat ({terms}){avg}.")


def notes(report: dict) -> list[str]:
    out = []
    bt = bound_text(report)
    if bt:
        out.append(bt)
    comp = [r for r in report["results"] if r["kind"] == "compiled" and r["data_ok"]]
    nat = [r for r in report["results"] if r["kind"] == "native" and r["data_ok"]]
    if comp and nat:
        bc = min(comp, key=lambda r: r["avg_elapsed_s"])
        bn = min(nat, key=lambda r: r["avg_elapsed_s"])
        out.append(f"Best compiled: {bc['algorithm']} {_ms(bc['avg_elapsed_s'])} ms average elapsed; best native: "
                   f"{bn['algorithm']} {_ms(bn['avg_elapsed_s'])} ms ({bn['avg_elapsed_s'] / bc['avg_elapsed_s']:.2f}x).")
    bad = [r["algorithm"] for r in report["results"] if not r["data_ok"]]
    if bad:
        out.append(f"WRONG DATA: {', '.join(bad)} (errors, fallbacks or failed calls: see the JSON).")
    out += report.get("network_notes", [])
    return out


def print_report(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title(report))
    for col in COLUMNS:
        t.add_column(col, justify="left" if col in ("algorithm", "runs as") else "right")
    for r in report["results"]:
        t.add_row(*row_cells(r))
    console = Console(width=max(140, Console().width))
    console.print(t)
    for line in notes(report):
        console.print(line)


def markdown(reports: list[dict], plot_rel: str | None = None, heading: str = "####") -> str:
    """Each case: a title line, the table, its notes; the plot below them."""
    lines = []
    for rep in reports:
        lines += [f"{heading} {title(rep)}", "", "| " + " | ".join(COLUMNS) + " |",
                  "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(c.replace("|", "/") for c in row_cells(r)) + " |" for r in rep["results"]]
        lines.append("")
        lines += [f"- {n}" for n in notes(rep)]
        lines.append("")
    if plot_rel:
        lines.append(f"![measured average elapsed time per algorithm]({plot_rel})")
    return "\n".join(lines).rstrip() + "\n"


def fidelity_rows(reports: list[dict]) -> list[dict]:
    """Per compiled row of every report: the models' predictions over SMPI's measurement."""
    out = []
    for rep in reports:
        if rep["backend"] != "smpi":
            continue
        i = rep["inputs"]
        for r in rep["results"]:
            if r["kind"] != "compiled" or "fluid_ratio" not in r:
                continue
            out.append({"collective": i["collective"], "topology": topology_name(i.get("topology")),
                        "ranks": i["ranks"], "nbytes": i["nbytes"], "max_delay_ms": i["max_delay_ms"],
                        "network_model": i.get("network_model"), "algorithm": r["algorithm"],
                        "compiled": r.get("compiled"), "nseg": r.get("nseg"),
                        "measured_s": r["avg_elapsed_s"], "fluid_ratio": r["fluid_ratio"],
                        "dag_ratio": r.get("dag_ratio")})
    return out


def fidelity_markdown(rows: list[dict]) -> str:
    if not rows:
        return "No compiled algorithm was predicted.\n"
    within = sum(abs(r["fluid_ratio"] - 1) <= 0.15 for r in rows)
    dag_within = sum(r["dag_ratio"] is not None and abs(r["dag_ratio"] - 1) <= 0.15 for r in rows)
    lines = [f"Fluid model within +-15% of SMPI in {within} of {len(rows)} cases (DAG model: "
             f"{dag_within} of {len(rows)}).", "",
             "| collective | topology | P | size | maxDelay ms | model | algorithm | measured ms | fluid/SMPI | "
             "dag/SMPI |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["collective"], r["topology"], r["ranks"], r["nbytes"], r["algorithm"])):
        flag = "" if abs(r["fluid_ratio"] - 1) <= 0.15 else " **(off)**"
        lines.append(f"| {r['collective']} | {r['topology']} | {r['ranks']} | {size_text(r['nbytes'])} | "
                     f"{r['max_delay_ms']:g} | {r['network_model']} | {r['algorithm']} ({r['compiled']}, "
                     f"{r['nseg']} seg) | {_ms(r['measured_s'])} | {r['fluid_ratio']:.3f}{flag} | "
                     f"{_ratio(r['dag_ratio'])} |")
    return "\n".join(lines) + "\n"


def _panel(ax, rep: dict, unit_f: float, unit: str) -> None:
    from .charts import rotate_labels

    rows = rep["results"]
    names = [r["algorithm"] for r in rows]
    vals = np.array([r["avg_elapsed_s"] for r in rows]) * unit_f
    colors = ["tab:blue" if r["kind"] == "compiled" else "tab:gray" for r in rows]
    for k, r in enumerate(rows):
        if not r["data_ok"]:
            colors[k] = "tab:red"
    x = np.arange(len(rows))
    ax.bar(x, vals, color=colors, width=0.7)
    pred = [r.get("predicted_fluid_avg_elapsed_s") for r in rows]
    px = [k for k, p in enumerate(pred) if p is not None]
    if px:
        ax.plot(px, [pred[k] * unit_f for k in px], "k_", markersize=18, mew=2, label="fluid model")
    b = rep.get("bound") or {}
    lb = b.get("avg_elapsed_s", b.get("run_time_s"))
    if lb:
        ax.axhline(lb * unit_f, color="tab:green", ls="--", lw=1, label="lower bound")
    rotate_labels(ax, names)
    ax.set_ylabel(f"average elapsed time ({unit})")
    i = rep["inputs"]
    ax.set_title(f"{i['collective']} {topology_name(i.get('topology'))} P={i['ranks']} "
                 f"{size_text(i['nbytes'])} maxDelay {i['max_delay_ms']:g} ms", fontsize=9)
    if px or lb:
        ax.legend(fontsize=7, loc="best")


def figure(reports: list[dict]):
    import matplotlib.pyplot as plt

    from .charts import time_unit

    n = len(reports)
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    for k, rep in enumerate(reports):
        f, unit = time_unit([r["avg_elapsed_s"] for r in rep["results"]])
        _panel(axes[k // cols][k % cols], rep, f, unit)
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].axis("off")
    backend = reports[0]["backend"]
    fig.suptitle(f"collsched collectives lab, {backend_text(backend, reports[0]['inputs'].get('network_model'))}"
                 " (blue: compiled, gray: native, red: wrong data)", fontsize=10)
    fig.tight_layout()
    return fig


def plot_reports(reports: list[dict], path) -> None:
    from .charts import save

    save(figure(reports), path)


def _list(text: str | None, default: str, flag: str) -> list[str]:
    items = [t.strip() for t in (default if text is None else text).split(",") if t.strip()]
    if not items:
        raise InputError(flag, str(text), "expected a comma-separated list")
    return items


def configs_from_args(a) -> tuple[list[CollConfig], list[str]]:
    """Every case `collsched bench --collective C` asks for (comma lists of --ranks, --bytes,
    --network-model multiply), and the algorithms; every option checked before anything runs."""
    from ..pipeline import parse_bytes_arg

    if a.suite != "lab":
        raise InputError("--suite", a.suite, f"expected lab with --collective {a.collective}")
    for flag, value in (("--pap", a.pap), ("--platform", a.platform), ("--measured", a.measured)):
        if value is not None:
            raise InputError(flag, str(value), f"expected only with --collective allgather")
    ranks = []
    for t in _list(a.ranks, "8", "--ranks"):
        if not (t.isascii() and t.isdigit()) or not 2 <= int(t) <= 4096:
            raise InputError("--ranks", t, "expected rank counts of 2 to 4096")
        ranks.append(int(t))
    sizes = []
    for t in _list(a.bytes, "64KiB", "--bytes"):
        lo, hi = parse_bytes_arg(t)
        if lo != hi:
            raise InputError("--bytes", t, "expected sizes, not ranges")
        sizes.append(lo)
    models = [check_model(m) for m in _list(a.network_model, "CM02", "--network-model")]
    algorithms = _list(a.algorithms, DEFAULT_ALGORITHMS[a.collective], "--algorithms")
    cfgs = []
    for model in (models if a.backend == "smpi" else models[:1]):
        for p in ranks:
            for n in sizes:
                cfg = CollConfig(a.collective, backend=a.backend, topology=a.topology, ranks=p, nbytes=n,
                                 root=int(getattr(a, "root", 0) or 0), iterations=a.iterations or 4,
                                 max_delay_ms=a.max_delay_ms, seed=a.seed, network_model=model,
                                 launcher=a.launcher, hostfile=a.hostfile, bind_to=a.bind_to,
                                 workdir=a.keep and str(Path(a.keep) / f"{model}-P{p}-{n}"))
                check_case(cfg)
                check_algorithms(cfg, algorithms)
                cfgs.append(cfg)
    return cfgs, algorithms


def cmd_bench(a) -> int:
    """`collsched bench --collective alltoall|bcast|reduce|allreduce ...`: exit 0, 1 when a
    data check failed, 3 when a launch failed (LabRunError, the CLI's run-failed status)."""
    from rich.progress import Progress

    cfgs, algorithms = configs_from_args(a)
    reports = []
    with Progress(transient=True, disable=a.json) as prog:
        task = prog.add_task("collectives", total=len(cfgs) * len(algorithms))
        for cfg in cfgs:
            label = f"{cfg.collective} P={cfg.ranks} {cfg.nbytes} B {cfg.network_model if cfg.backend == 'smpi' else 'mpi'}"
            reports.append(run_coll(cfg, algorithms, progress=lambda name, label=label: prog.update(
                task, description=f"{label}: {name}", advance=1)))
    if a.json:
        print(json.dumps(reports if len(reports) > 1 else reports[0], indent=1, default=float))
    else:
        for r in reports:
            print_report(r)
    if a.plot:
        plot_reports(reports, a.plot)
    if a.doc:
        rel = os.path.relpath(a.plot, os.path.dirname(os.path.abspath(a.doc))) if a.plot else None
        from .benchdoc import replace_section

        replace_section(a.doc, a.section or "lab-collectives-run", markdown(reports, rel))
    return 0 if all(r["data_ok"] for rep in reports for r in rep["results"]) else 1
