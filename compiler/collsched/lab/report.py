"""Human-readable and plotted forms of a lab report (see runner.run_lab)."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .runner import ONLINE, PAP_AWARE

GRID_BASELINES = ("magpie", "mpichg2", "bcast-trees")  # the Min3 paper's (docs/grid-baselines.md)
# The BDR paper's best case (Proficz 2021, section 5): BDR 1.9x faster than the best
# regular algorithm at P = 28, 256K floats, maxDelay 5 ms, on its 1 GbE cluster.
PAPER_BEST = "1.9x (BDR, P = 28, 256K floats, maxDelay 5 ms, on the paper's 1 GbE cluster)"
# Issue 25's target: the algorithm the compiler ranks best by its model is within 5% of the
# best measured among its algorithms.
PICK_TOLERANCE = 0.05


def compiler_pick(rows: list[dict]) -> dict | None:
    """Among the compiled algorithms of a run (those with a prediction, every byte right):
    the one the compiler ranks fastest, as `--algorithm auto` ranks (pipeline._fluid_check):
    by the DAG model, then among the finalists within FLUID_CHECK of its best that the run
    also timed with the fluid model, by the fluid model; and how it measured against the
    best measured. None with fewer than two of them."""
    from ..pipeline import FLUID_CHECK, FLUID_FINALISTS

    ours = [r for r in rows if r.get("predicted_avg_elapsed_s") is not None and r["data_ok"]]
    if len(ours) < 2:
        return None
    dag = sorted(ours, key=lambda r: (r["predicted_avg_elapsed_s"], r["algorithm"]))
    near = [r for r in dag if r["predicted_avg_elapsed_s"] <= dag[0]["predicted_avg_elapsed_s"] * (1 + FLUID_CHECK)
            and r.get("fluid_avg_elapsed_s") is not None][:FLUID_FINALISTS]
    by = "fluid" if len(near) >= 2 else "dag"
    pick = min(near, key=lambda r: (r["fluid_avg_elapsed_s"], r["algorithm"])) if by == "fluid" else dag[0]
    best = min(ours, key=lambda r: (r["avg_elapsed_s"], r["algorithm"]))
    ratio = pick["avg_elapsed_s"] / best["avg_elapsed_s"] if best["avg_elapsed_s"] > 0 else 1.0
    return {"algorithm": pick["algorithm"], "measured_s": pick["avg_elapsed_s"],
            "predicted_s": pick["fluid_avg_elapsed_s" if by == "fluid" else "predicted_avg_elapsed_s"],
            "model": by, "best": best["algorithm"],
            "best_measured_s": best["avg_elapsed_s"], "ratio": ratio,
            "within_target": ratio <= 1 + PICK_TOLERANCE, "candidates": len(ours)}


# The lab table's columns (print_report, markdown; report_from_markdown reads them back by
# name, and the 8 columns of sections written before the gap columns too). "LP bound ms" is
# the LP lower bound on the average elapsed time for the row's measured arrivals (cost
# model, runner.measured_gaps); "gap" and "run gap": measured / bound - 1 for the average
# elapsed time and the run time.
COLUMNS = ("algorithm", "avg elapsed ms", "run time ms", "LP bound ms", "gap", "run gap", "absorption ms",
           "omega/tau", "predicted ms", "pred/meas", "data")


def row_gaps(row: dict) -> tuple[float | None, float | None]:
    """(average elapsed, run time) gaps of a row's measured times to its LP bounds:
    measured / bound - 1; None where the row has no bound (native rows have one too: the
    bound holds for any schedule)."""
    from ..pipeline import gap_to

    return (gap_to(row.get("avg_elapsed_s"), row.get("lower_bound_avg_elapsed_s")),
            gap_to(row.get("run_time_s"), row.get("lower_bound_run_time_s")))


def percent(gap: float | None) -> str:
    """A gap as the table prints it: +12.3%, or - where there is none."""
    return "-" if gap is None else f"{gap * 100:+.1f}%"


def table_cells(r: dict) -> list[str]:
    """One row of the lab table (COLUMNS), "-" for what the row lacks."""
    pred, bound = r.get("predicted_avg_elapsed_s"), r.get("lower_bound_avg_elapsed_s")
    gap, run_gap = row_gaps(r)

    def ms(v, fmt=".3f"):
        return "-" if v is None else f"{v * 1e3:{fmt}}"

    return [r["algorithm"], ms(r["avg_elapsed_s"]), ms(r["run_time_s"]), ms(bound), percent(gap),
            percent(run_gap), ms(r.get("absorption_s")),
            "-" if r.get("imbalance_factor") is None else f"{r['imbalance_factor']:.2f}",
            ms(pred), f"{r['model_ratio']:.3f}" if "model_ratio" in r else "-",
            "ok" if r["data_ok"] else "WRONG"]


def gap_note(rows: list[dict]) -> str | None:
    """The LP bound the gap columns divide by, in words, and the row nearest to it; None
    when no row has a bound (or, with a note, why it was skipped)."""
    bounded = [r for r in rows if r.get("lower_bound_avg_elapsed_s") is not None]
    if not bounded:
        why = next((r["lower_bound_note"] for r in rows if r.get("lower_bound_note")), None)
        return f"Gaps to the LP lower bound: {why}." if why else None

    def span(key):  # one figure where the rows' bounds agree to the table's precision
        lo, hi = (f"{f(r[key] for r in bounded) * 1e3:.3f}" for f in (min, max))
        return f"{lo} ms" if lo == hi else f"{lo}-{hi} ms (the rows' arrivals differ)"

    ok = [r for r in bounded if r["data_ok"]]
    best = min(ok, key=lambda r: (row_gaps(r)[0], r["algorithm"])) if ok else None
    nearest = (f"; nearest: {best['algorithm']}, {percent(row_gaps(best)[0])} (average elapsed time)"
               if best else "")
    method = ", ".join(sorted({r["lower_bound_method"] for r in bounded if r.get("lower_bound_method")}))
    return (f"Gaps (measured / bound - 1) to the LP lower bound for the measured arrivals (cost model, "
            f"lowerbound.py; {method}): average elapsed time {span('lower_bound_avg_elapsed_s')}, run "
            f"time {span('lower_bound_run_time_s')}{nearest}.")


def network_text(report: dict) -> str:
    """The network a run had, in words (SMPI: the model and the costs the predictions used)."""
    if report["backend"] != "smpi":
        return "real MPI (predictions with the topology's own costs)"
    net = report.get("network") or {}
    model = report["inputs"]["network_model"]
    return f"network model {model}" + (f" (predictions: {net['message_costs']})" if net else "")


def notes(report: dict) -> list[str]:
    """What the table alone does not say: how arrival-aware algorithms got their schedules,
    their speedup over the best regular algorithm, and the lower bounds for the pattern."""
    rows = report["results"]
    i = report["inputs"]
    out = []
    ahead = [r["algorithm"] for r in rows if r["algorithm"] in PAP_AWARE and r["algorithm"] not in ONLINE]
    if ahead and i["max_delay_ms"] > 0:
        out.append(f"{', '.join(ahead)}: compiled ahead, one schedule per iteration, because the "
                   "mini-benchmark's arrival pattern of each iteration is known from the seed and "
                   "equals what PAT_Edge predicts there"
                   + ("; bdr builds its schedule online from the ranks' predictions."
                      if any(r["algorithm"] in ONLINE for r in rows) else "."))
    regular = [r for r in rows if r["algorithm"] not in PAP_AWARE and r["data_ok"]]
    aware = [r for r in rows if r["algorithm"] in PAP_AWARE and r["data_ok"]]
    if regular and aware and i["max_delay_ms"] > 0:
        best = min(regular, key=lambda r: r["avg_elapsed_s"])
        out.append(f"Speedup over the best regular algorithm ({best['algorithm']}, "
                   f"{best['avg_elapsed_s'] * 1e3:.3f} ms), average elapsed time: "
                   + ", ".join(f"{r['algorithm']} {best['avg_elapsed_s'] / r['avg_elapsed_s']:.2f}x"
                               for r in aware)
                   + f"; the BDR paper's best case: {PAPER_BEST}.")
    # The Min3 paper's claim: on average 52% better than its baselines (improvement =
    # 1 - Min3's time / the baseline's, averaged over the baselines).
    min3 = [r for r in rows if r["algorithm"] == "min3" and r["data_ok"]]
    grid = [r for r in rows if r["algorithm"] in GRID_BASELINES and r["data_ok"]]
    if min3 and grid:
        gain = [1.0 - min3[0]["avg_elapsed_s"] / r["avg_elapsed_s"] for r in grid]
        out.append("Min3's improvement over the grid baselines (1 - min3 / baseline, average "
                   "elapsed time): " + ", ".join(f"{r['algorithm']} {g:.1%}" for r, g in zip(grid, gain))
                   + f"; average {sum(gain) / len(gain):.1%} (the Min3 paper: 52% on average).")
    pick = compiler_pick(rows)
    if pick:
        how = ("the DAG model, its finalists re-timed by the fluid model, as --algorithm auto"
               if pick["model"] == "fluid" else "the DAG model")
        out.append(f"The compiler's pick (the fastest of the {pick['candidates']} compiled algorithms "
                   f"by {how}): {pick['algorithm']}, measured "
                   f"{pick['measured_s'] * 1e3:.3f} ms, {pick['ratio']:.3f}x the best measured of them "
                   f"({pick['best']}, {pick['best_measured_s'] * 1e3:.3f} ms); target within "
                   f"{PICK_TOLERANCE:.0%}: {'met' if pick['within_target'] else 'MISSED'}.")
    out += report.get("network_notes", [])
    line = gap_note(rows)
    if line:
        out.append(line)
    b = report.get("bounds")
    if b:
        serial = (f", {b['serial_avg_elapsed_s'] * 1e3:.3f} ms for a serial one with one piece "
                  "per message (bdr, bslb, arrival-aware min3 on a cluster; not agg)" if aware else "")
        out.append(f"Lower bounds on the average elapsed time for this pattern (cost model, "
                   f"lowerbound.py): {b['lp_avg_elapsed_s'] * 1e3:.3f} ms for any schedule "
                   f"({b['lp_method']}){serial}.")
    return out


def print_report(report: dict) -> None:
    i = report["inputs"]
    title = (f"{report['backend']}: allgather, {i['ranks']} ranks, {i['nbytes']} B/rank, "
             f"maxDelay {i['max_delay_ms']} ms, {i['iterations']} iterations, seed {i['seed']}"
             + (f", network model {i['network_model']}" if report["backend"] == "smpi" else ""))
    t = Table(title=title)
    for col in COLUMNS:
        t.add_column(col, justify="right" if col != "algorithm" else "left")
    for r in report["results"]:
        t.add_row(*table_cells(r))
    console = Console(width=max(150, Console().width))
    console.print(t)
    for line in notes(report):
        console.print(line)


def plot_report(report: dict, path) -> None:
    """The bar chart of a lab report (report_figure), written to `path`."""
    from .charts import save

    save(report_figure(report), path)


def report_figure(report: dict):
    """Measured and predicted average elapsed time per algorithm, as a Figure: the time
    unit from the values (seconds for wide-area runs), error bars from the iterations'
    spread when there are several, the value axis as charts.value_axis picks it, the
    topology, P, size, backend and network model in the title."""
    import matplotlib.pyplot as plt
    import numpy as np

    from .charts import (backend_text, caption, category_width, finish, rotate_labels, time_unit,
                         topology_name, value_axis)

    rows = report["results"]
    i = report["inputs"]
    meas = np.array([r["avg_elapsed_s"] for r in rows])
    pred = np.array([r.get("predicted_avg_elapsed_s") or np.nan for r in rows])
    spread = [r.get("elapsed_per_iteration_s") or [] for r in rows]
    lows = np.array([min(s) if len(s) > 1 else m for s, m in zip(spread, meas)])
    highs = np.array([max(s) if len(s) > 1 else m for s, m in zip(spread, meas)])
    k, unit = time_unit(np.concatenate([highs, pred[np.isfinite(pred)]]))
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(category_width(len(rows)), 4.6))
    has_pred = np.isfinite(pred)
    bars = any(len(s) > 1 for s in spread)
    measured = ax.bar(x - 0.2, meas * k, 0.4, label=f"measured ({report['backend']})", color="tab:blue",
           yerr=np.vstack([(meas - lows) * k, (highs - meas) * k]) if bars else None,
           error_kw={"ecolor": "0.15", "capsize": 2.5, "lw": 0.9})
    if has_pred.any():
        ax.bar(x[has_pred] + 0.2, pred[has_pred] * k, 0.4, label="predicted (cost model)",
               color="tab:orange")
    wrong = [j for j, r in enumerate(rows) if not r.get("data_ok", True)]
    for j in wrong:  # a run that returned wrong data: its bar hatched, said in the caption
        measured[j].set_hatch("xx")
    bound = np.array([r.get("lower_bound_avg_elapsed_s") or np.nan for r in rows])
    has_bound = np.isfinite(bound)
    values = np.concatenate([lows, highs, pred[has_pred], bound[has_bound]]) * k
    how = value_axis(ax, float(values.min()), float(values.max()), unit, "average elapsed time")
    if has_bound.any():  # the LP bound per category, and each measured bar's gap to it
        ax.hlines(bound[has_bound] * k, x[has_bound] - 0.42, x[has_bound] + 0.42, colors="black",
                  linestyles="dashed", lw=1.1, label="LP lower bound", zorder=3)
        for j in np.flatnonzero(has_bound):
            ax.annotate(percent(row_gaps(rows[j])[0]), (x[j] - 0.2, highs[j] * k), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=6.5, color="0.2")
    rotate_labels(ax, [r["algorithm"] for r in rows])
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    delay = f", maxDelay {i['max_delay_ms']:g} ms" if i.get("max_delay_ms") else ", no imbalance"
    ax.set_title(f"allgather on {topology_name(i.get('topology'))}: P = {i['ranks']}, "
                 f"{i['nbytes']} B/rank{delay}\n"
                 f"{backend_text(report['backend'], i.get('network_model'))}, "
                 f"{i['iterations']} iteration{'s' if i['iterations'] != 1 else ''}, seed {i['seed']}",
                 fontsize=9.5, pad=22)
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False,
              borderaxespad=0.1)
    notes = []
    if has_bound.any():
        notes.append("Dashed: LP lower bound (cost model, measured arrivals); the labels: measured / bound - 1.")
    if bars:
        notes.append(f"Error bars: lowest and highest of the {i['iterations']} iterations' "
                     "average elapsed times (the bar: their mean).")
    elif i["iterations"] > 1:
        notes.append(f"{i['iterations']} iterations; their spread was not recorded (no error bars).")
    if has_pred.any() and not has_pred.all():
        notes.append("No orange bar: no prediction (the MPI library's own algorithms).")
    if wrong:
        notes.append("Hatched: the run returned wrong data (" + ", ".join(rows[j]["algorithm"] for j in wrong) + ").")
    if how == "cut":
        notes.append("The value axis does not start at 0: the bars differ by a few % only.")
    caption(fig, notes)
    finish(fig, len(notes))
    return fig


def markdown(report: dict, plot_rel: str | None = None) -> str:
    """A lab report as a Markdown section for docs/benchmarks.md."""
    import datetime

    i = report["inputs"]
    backend = report["backend"]
    model = f" ({i['network_model']})" if backend == "smpi" else ""
    flag = f" --network-model {i['network_model']}" if backend == "smpi" else ""
    lines = [f"## Lab: mini-benchmark on {backend}{model}", "",
             f"Measured {datetime.date.today().isoformat()} by `collsched bench --backend {backend}{flag}` "
             f"(BDR paper Listing 4): topology `{i['topology'] or 'homogeneous'}`, P = {i['ranks']}, "
             f"{i['nbytes']} bytes per rank, maxDelay {i['max_delay_ms']} ms, {i['iterations']} iterations "
             f"(+{i['flat_iterations']} flat for the absorption time), seed {i['seed']}"
             + (f", {network_text(report)}, TCP window {i['tcp_gamma']} B" if backend == "smpi" else "")
             + ". Predicted = the cost model for the measured arrivals; every byte checked.", "",
             "| " + " | ".join(COLUMNS) + " |",
             "|:--|" + "--:|" * (len(COLUMNS) - 2) + ":--|"]
    for r in report["results"]:
        lines.append("| " + " | ".join(table_cells(r)) + " |")
    extra = notes(report)
    if extra:
        lines += [""] + [f"- {line}" for line in extra]
    if plot_rel:
        lines += ["", f"![mini-benchmark]({plot_rel})"]
    return "\n".join(lines) + "\n"


def section_text(doc: str, section: str) -> str:
    """The text between `<!-- BEGIN section -->` and `<!-- END section -->` of a page."""
    import re

    from ..errors import InputError
    from ..files import read_input

    text = read_input(doc, "doc").decode()
    m = re.search(rf"<!-- BEGIN {re.escape(section)} -->\n(.*?)<!-- END {re.escape(section)} -->",
                  text, re.S)
    if not m:
        raise InputError(doc, section, "no such section")
    return m.group(1)


def report_from_markdown(text: str) -> dict:
    """A lab report (as much of it as the chart needs) read back from the section that
    markdown() wrote: inputs from its first paragraph, one row per table line. The
    iterations' spread is not in the section: a chart from it has no error bars."""
    import re

    from ..errors import InputError

    def find(pattern, conv=str, default=None):
        m = re.search(pattern, text)
        if m is None and default is None:
            raise InputError("section", pattern, "not found: expected a section markdown() wrote")
        return conv(m.group(1)) if m else default

    topology = find(r"topology `([^`]+)`")
    inputs = {"topology": None if topology == "homogeneous" else topology,
              "ranks": find(r"P = (\d+)", int), "nbytes": find(r"(\d+) bytes per rank", int),
              "max_delay_ms": find(r"maxDelay ([\d.]+) ms", float),
              "iterations": find(r"(\d+) iterations", int), "seed": find(r"seed (\d+)", int),
              "network_model": find(r"--network-model (\w+)", str, "")}
    results, names = [], None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "algorithm":  # the header: columns by name (COLUMNS, or the older 8)
            names = {c: k for k, c in enumerate(cells)}
            continue
        if names is None or len(cells) != len(names) or not re.fullmatch(r"-?[\d.]+", cells[1]):
            continue

        def seconds(col):
            k = names.get(col)
            return float(cells[k]) / 1e3 if k is not None and re.fullmatch(r"-?[\d.]+", cells[k]) else None

        row = {"algorithm": cells[0], "avg_elapsed_s": seconds("avg elapsed ms"),
               "run_time_s": seconds("run time ms"), "data_ok": cells[names["data"]] == "ok"}
        for col, key in (("predicted ms", "predicted_avg_elapsed_s"), ("LP bound ms", "lower_bound_avg_elapsed_s")):
            if seconds(col) is not None:
                row[key] = seconds(col)
        results.append(row)
    if not results:
        raise InputError("section", "table", "no result rows")
    return {"backend": find(r"--backend (\w+)"), "inputs": inputs, "results": results}


def main(argv=None) -> int:
    """python -m collsched.lab.report (REPORT.json | --doc DOC --section S) --plot PNG: the
    chart of a lab run again, from `collsched bench --json`'s output or from the section
    it wrote in docs/benchmarks.md (no error bars then: the section keeps means only)."""
    import argparse
    import json

    from ..errors import InputError
    from ..files import read_input

    ap = argparse.ArgumentParser(prog="python -m collsched.lab.report")
    ap.add_argument("report", nargs="?", help="the JSON of collsched bench --json")
    ap.add_argument("--doc")
    ap.add_argument("--section")
    ap.add_argument("--plot", required=True)
    a = ap.parse_args(argv)
    if a.report:
        try:
            report = json.loads(read_input(a.report, "report"))
        except (ValueError, UnicodeDecodeError):
            raise InputError(a.report, "", "expected the JSON of collsched bench --json") from None
    elif a.doc and a.section:
        report = report_from_markdown(section_text(a.doc, a.section))
    else:
        ap.error("give REPORT.json or --doc and --section")
    plot_report(report, a.plot)
    print(f"{a.plot}: {len(report['results'])} algorithms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
