"""Tables, plots and the benchmarks section of the collectives lab (coll_bench.py).

- `print_report(report)`: one case as a terminal table;
- `markdown(reports, plot_rel)`: cases as Markdown (the section `collsched bench
  --collective C --doc D` writes);
- `plot_reports(reports, path)`: measured average elapsed time per algorithm, one panel per
  case, with the fluid model's prediction and the lower bound;
- `fidelity_rows(reports)`: per compiled algorithm the fluid and DAG models against SMPI.
"""
from __future__ import annotations

import math

import numpy as np

from .charts import backend_text, topology_name


def _ms(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x * 1e3:.3f}"


def _ratio(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def _pct(x) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def size_text(n: int) -> str:
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


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
