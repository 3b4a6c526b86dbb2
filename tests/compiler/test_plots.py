"""The plots people look at (issue 23 item 7): each drawn from small real inputs, then
checked through matplotlib's own objects: axis limits, legends, error bars, scales,
titles, and that no tick label overlaps another or leaves the figure."""
from __future__ import annotations

from itertools import combinations
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402

from collsched.pipeline import compile_schedule, simulate_file  # noqa: E402
from collsched.plot import gantt, gantt_figure  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRYTON = str(ROOT / "topologies" / "tryton-48.yaml")
GRID = "topologies/three-site-grid.yaml"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def visible_labels(fig, ax, which: str):
    """The drawn tick labels of one axis (inside its view limits, non-empty), with their
    window extents."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    axis = ax.xaxis if which == "x" else ax.yaxis
    lo, hi = sorted(axis.get_view_interval())
    out = []
    for tick in axis.get_major_ticks():
        label = tick.label1
        if label.get_visible() and label.get_text() and lo <= tick.get_loc() <= hi:
            out.append((label.get_text(), label.get_window_extent(r)))
    return out


def assert_readable(fig, ax):
    """No two tick labels of an axis overlap; none is cut by the figure's edge."""
    whole = fig.bbox
    for which in ("x", "y"):
        labels = visible_labels(fig, ax, which)
        assert labels, f"no {which} tick labels"
        for text, box in labels:
            assert (box.x0 >= whole.x0 - 0.5 and box.x1 <= whole.x1 + 0.5
                    and box.y0 >= whole.y0 - 0.5 and box.y1 <= whole.y1 + 0.5), \
                f"{which} label {text!r} cut by the figure: {box} outside {whole}"
        for (ta, a), (tb, b) in combinations(labels, 2):
            assert not a.overlaps(b), f"{which} labels {ta!r} and {tb!r} overlap"


def legend_texts(ax) -> list[str]:
    leg = ax.get_legend()
    assert leg is not None, "no legend"
    return [t.get_text() for t in leg.get_texts()]


# --- the Gantt chart (collsched plot, make demo) -------------------------------------------

def _timeline(tmp_path, algorithm, ranks, pap=None):
    out = tmp_path / f"{algorithm}.sched"
    compile_schedule(algorithm, ranks, 65536, topology=TRYTON, pap=pap, output=out)
    sched, _, mean, timelines = simulate_file(out, topology=TRYTON, pap=pap)
    return timelines[0], mean


def test_gantt_axes_span_the_schedule_and_fill_the_figure(tmp_path):
    tl, mean = _timeline(tmp_path, "ring", 16)  # make demo's chart
    fig = gantt_figure(tl, "ring on tryton-48", 64)
    ax = fig.axes[0]
    span_ms = float(tl.exits.max() - tl.arrivals.min()) * 1e3
    assert "(ms)" in ax.get_xlabel()
    lo, hi = ax.get_xlim()
    assert -0.03 * span_ms <= lo <= 0 and span_ms <= hi <= 1.03 * span_ms
    y0, y1 = sorted(ax.get_ylim())
    assert y0 == pytest.approx(-0.5) and y1 == pytest.approx(15.5)
    # the lanes take most of the figure: no blank band under the chart
    pos = ax.get_position()
    assert pos.height > 0.7 and pos.y0 < 0.15
    assert_readable(fig, ax)


def test_gantt_legend_names_what_is_drawn(tmp_path):
    tl, _ = _timeline(tmp_path, "ring", 8)
    ring = legend_texts(gantt_figure(tl, "ring", 64).axes[0])
    assert "receive" in ring and "rank arrives" in ring and "rank exits" in ring
    assert not any("background" in t for t in ring)  # ring has no background pre-steps
    assert any("number on a bar" in t for t in ring)
    pap = tmp_path / "pap.yaml"
    pap.write_text(yaml.safe_dump({"unit": "ms", "arrivals": [1.5, 2.9, 0.4, 2.8, 0.9, 1.3, 2.5, 1.2]}))
    tl, _ = _timeline(tmp_path, "bdr", 8, pap=str(pap))
    bdr = legend_texts(gantt_figure(tl, "bdr", 64).axes[0])
    assert "receive, background pre-step" in bdr and "receive, foreground" in bdr


def test_gantt_file_is_written(tmp_path):
    tl, _ = _timeline(tmp_path, "ring", 4)
    gantt(tl, "ring", tmp_path / "g.png")
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"


# --- the lab's bar chart (collsched bench --plot) --------------------------------------------

NAMES = ["ring", "nex", "lnbc", "bruck", "spreading", "bdr", "bslb", "min3", "native",
         "native:ompi", "native:mpich", "native:bruck", "native:rdb", "native:ring"]


def lab_report(times_s, iterations=3, topology="topologies/tryton-48.yaml", model="CM02",
               spread=0.05, names=NAMES):
    """A report shaped as runner.run_lab returns it."""
    rows = []
    for k, (name, t) in enumerate(zip(names, times_s)):
        per = [t * (1 + spread * ((j % 3) - 1)) for j in range(iterations)]
        per = list(np.array(per) - np.mean(per) + t)
        row = {"algorithm": name, "avg_elapsed_s": t, "run_time_s": 1.2 * t, "absorption_s": 0.0,
               "imbalance_s": 0.001, "imbalance_factor": 1.0, "flat_run_time_s": t, "data_ok": True,
               "elapsed_per_iteration_s": per}
        if not name.startswith("native"):
            row["predicted_avg_elapsed_s"] = t * 0.98
            row["model_ratio"] = 0.98
        rows.append(row)
    return {"backend": "smpi", "results": rows,
            "inputs": {"topology": topology, "ranks": 28, "nbytes": 37448, "iterations": iterations,
                       "max_delay_ms": 5.0, "seed": 1, "flat_iterations": 2, "late_ms": 0.0,
                       "network_model": model, "tcp_gamma": 4194304, "shared_data": "auto",
                       "collective": "allgather", "algorithms": list(names)}}


def _bars(ax):
    from matplotlib.container import BarContainer
    return [c for c in ax.containers if isinstance(c, BarContainer)]


def test_report_chart_labels_title_and_error_bars():
    from collsched.lab.report import report_figure

    times = np.linspace(0.008, 0.07, len(NAMES))
    fig = report_figure(lab_report(times, iterations=8, model="SMPI"))
    ax = fig.axes[0]
    assert_readable(fig, ax)
    title = ax.get_title()
    for part in ("tryton-48", "P = 28", "37448 B", "SimGrid SMPI", "network model SMPI", "8 iterations"):
        assert part in title
    measured = _bars(ax)[0]
    assert measured.errorbar is not None  # iterations > 1
    segments = measured.errorbar.lines[2][0].get_segments()
    assert len(segments) == len(NAMES)
    assert any("Error bars: lowest and highest of the 8 iterations" in t.get_text() for t in fig.texts)
    assert "(ms)" in ax.get_ylabel() and ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0


def test_report_chart_one_iteration_has_no_error_bars():
    from collsched.lab.report import report_figure

    fig = report_figure(lab_report([0.01, 0.02, 0.03], iterations=1, names=NAMES[:3]))
    ax = fig.axes[0]
    assert _bars(ax)[0].errorbar is None
    assert not any("Error bars" in t.get_text() for t in fig.texts)
    assert_readable(fig, ax)


def test_report_chart_cuts_the_axis_when_bars_differ_by_a_few_percent():
    from collsched.lab.report import report_figure

    times = [0.0100, 0.0102, 0.0099, 0.0101]
    fig = report_figure(lab_report(times, spread=0.005, names=["ring", "bruck", "native", "native:ompi"]))
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert lo > 0.5 * 9.9  # the axis starts near the bars, not at 0 ...
    assert (hi - lo) < 0.2 * hi  # ... so a 2% difference is a visible one
    assert "not from 0" in ax.get_ylabel()
    assert any("does not start at 0" in t.get_text() for t in fig.texts)


def test_report_chart_of_a_wide_area_run_is_in_seconds_on_a_log_axis():
    from collsched.lab.report import report_figure

    names = ["min3", "magpie", "mpichg2", "bcast-trees", "ring", "lnbc", "native:mpich"]
    times = [43.6, 100.5, 156.4, 114.9, 107.3, 702.3, 626.3]  # lab-grid-1m, seconds
    fig = report_figure(lab_report(times, iterations=1, topology=GRID, names=names))
    ax = fig.axes[0]
    assert "(s, log scale)" in ax.get_ylabel() and ax.get_yscale() == "log"
    heights = [b.get_height() for b in _bars(ax)[0]]
    assert heights == pytest.approx(times)  # plotted in seconds, not ms
    assert "three-site-grid" in ax.get_title()
    assert_readable(fig, ax)


def test_report_replots_from_its_markdown_section(tmp_path):
    from collsched.lab.report import main, markdown, report_from_markdown

    report = lab_report(np.linspace(0.008, 0.03, 6), iterations=8, names=NAMES[:5] + ["native"])
    back = report_from_markdown(markdown(report))
    assert back["backend"] == "smpi" and back["inputs"]["topology"] == "topologies/tryton-48.yaml"
    assert back["inputs"]["ranks"] == 28 and back["inputs"]["iterations"] == 8
    assert [r["algorithm"] for r in back["results"]] == NAMES[:5] + ["native"]
    assert back["results"][1]["avg_elapsed_s"] == pytest.approx(report["results"][1]["avg_elapsed_s"], abs=1e-6)
    assert "predicted_avg_elapsed_s" not in back["results"][-1]
    doc = tmp_path / "bench.md"
    doc.write_text("<!-- BEGIN lab-x -->\n" + markdown(report) + "<!-- END lab-x -->\n")
    assert main(["--doc", str(doc), "--section", "lab-x", "--plot", str(tmp_path / "x.png")]) == 0
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"


# --- the compile-time chart (bench --suite compiler) ---------------------------------------

def test_compile_time_on_log_axes():
    from collsched.lab.bench_compiler import compile_time_figure, rows_from_markdown

    rows = [{"ranks": p, "timings_s": {"generate": g, "verify": v, "simulate": s, "write": w},
             "cvw_s": g + v + w, "total_s": g + v + s + w + 0.001}
            for p, g, v, s, w in [(64, 0.001, 0.001, 0.002, 0.0), (256, 0.02, 0.01, 0.024, 0.002),
                                  (1024, 0.584, 0.269, 0.670, 0.028)]]
    fig = compile_time_figure(rows, "ring", 1 << 20)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_xscale() == "log"
    assert "ring" in ax.get_title()
    assert any(line.get_ydata()[0] == pytest.approx(2.0) for line in ax.get_lines())  # the target
    assert_readable(fig, ax)
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    section = doc.split("<!-- BEGIN compiler -->")[1].split("<!-- END compiler -->")[0]
    parsed, alg, nbytes = rows_from_markdown(section)
    assert alg and nbytes > 0 and [r["ranks"] for r in parsed] == sorted(r["ranks"] for r in parsed)


# --- the recurring suite's charts (bench --suite recurring) ---------------------------------

def test_recurring_charts_name_the_run_and_key_the_strips():
    from collsched.lab.recurring_report import elapsed_figure, strip_figure

    n = 12
    labels = ["a", "b", "c"] * 4
    report = {"backend": "smpi", "network_model": "CM02",
              "inputs": {"ranks": 28, "bytes": 37448, "iterations": n, "warmup_iterations": 3,
                         "topology": "/x/topologies/tryton-48.yaml"},
              "evaluation": {"native": {"elapsed_per_iteration_s": [0.0123] * n},
                             "cache-pat:/d": {"elapsed_per_iteration_s": [0.009 + 1e-4 * k for k in range(n)]}},
              "variants": {"pat": {"cache": "cache-pat:/d", "hits": {"mapped": ["regular"] + labels[1:]}}},
              "scenario": {"labels": labels}}
    fig = elapsed_figure(report)
    ax = fig.axes[0]
    assert "tryton-48" in ax.get_title() and "network model CM02" in ax.get_title()
    assert "(ms)" in ax.get_ylabel()
    assert {"native", "cache (pat)", "end of warm-up"} <= set(legend_texts(ax))
    assert_readable(fig, ax)
    strips = strip_figure(report)
    assert "the true class's entry" in legend_texts(strips.axes[0])
    bars = strips.axes[0].patches
    assert len(bars) == n and bars[0].get_facecolor() != bars[1].get_facecolor()


# --- the model check's scatter (bench --suite model) ----------------------------------------

def test_model_check_from_its_recorded_tables():
    from collsched.lab.modelcheck import BASELINES, figure, rows_from_markdown
    from collsched.lab.report import section_text

    rows = rows_from_markdown(section_text(str(ROOT / "docs" / "benchmarks.md"), "lab-model-check"))
    assert {r["algorithm"] for r in rows} <= set(BASELINES) and len(rows) > 20
    assert {r["network_model"] for r in rows} == {"CM02", "SMPI"}
    fig = figure(rows)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert_readable(fig, ax)
    key = legend_texts(fig.axes[-1])
    assert {"hollow: DAG model", "filled: fluid model", "predicted = measured", "tryton-48"} <= set(key)
    assert "tryton-48" in fig._suptitle.get_text()


# --- the sweep's heat map (collsched sweep --plot) ------------------------------------------

def test_sweep_heat_map_names_the_run_and_keeps_labels_apart():
    from collsched.lab.sweep import heatmap_figure

    ranks, floats, delays = [4, 8, 12, 16, 20], [131072, 262144, 1048576], [0.0, 5.0, 50.0, 500.0]
    cells = []
    for p in ranks:
        for n in floats:
            for d in delays:
                judged = ({"winner": "bdr", "pap_aware_speedup": 1.0 + d / 1000} if d >= 50
                          else {"winner": "native", "pap_aware_speedup": 0.8})
                cells.append({"ranks": p, "floats": n, "max_delay_ms": d, "judged": judged})
    sweep = {"settings": {"ranks": ranks, "floats": floats, "delays_ms": delays, "iterations": 4,
                          "topology": "topologies/tryton-48.yaml", "network_model": "SMPI"},
             "cells": cells}
    fig = heatmap_figure(sweep)
    title = fig._suptitle.get_text()
    assert "tryton-48," in title and "network model SMPI" in title and "4 iterations" in title
    panels = [ax for ax in fig.axes if ax.get_title().startswith("P = ")]
    assert [ax.get_title() for ax in panels] == [f"P = {p}" for p in ranks]
    for ax in panels:
        assert_readable(fig, ax)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    title_box = fig._suptitle.get_window_extent(r)
    assert not any(title_box.overlaps(ax.title.get_window_extent(r)) for ax in panels)


# --- the pool tree (collsched pools --plot) -------------------------------------------------

@pytest.mark.parametrize("name", ["tryton-48", "three-site-grid", "grid-8x128"])
def test_pool_tree_boxes_stay_apart_and_inside(name):
    from collsched.inputs.pools import plot_figure, pool_tree
    from collsched.inputs.topology import load_topology

    topo = load_topology(str(ROOT / "topologies" / f"{name}.yaml"))
    tree = pool_tree(topo)
    fig = plot_figure(tree, f"pool tree of {name}")
    ax = fig.axes[0]
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = [t.get_bbox_patch().get_window_extent(r) for t in ax.texts]
    assert len(boxes) == sum(len(tree.nodes[n]["ranks"]) > 1 for n in tree.nodes) or len(boxes) == 1
    for a, b in combinations(boxes, 2):
        assert not a.overlaps(b)
    for t in list(ax.texts) + list(fig.texts):  # pool boxes and the key: inside the figure
        box = t.get_window_extent(r)
        assert box.x0 >= 0 and box.x1 <= fig.bbox.x1 and box.y0 >= 0 and box.y1 <= fig.bbox.y1


# --- the trace report's figure (collsched trace --plot) ------------------------------------

def test_trace_figure_keys_the_imbalance_line(tmp_path):
    from collsched.patterns import tracefile as T
    from collsched.patterns.analysis import analyse
    from collsched.patterns.plots import report_figure
    from collsched.patterns.scenario import recurring

    sc = recurring(16, 2, 20, seed=0)
    calls = [T.call_from_times(0, 0, k, 1 << 20, 0.05 * (k + 1) + row) for k, row in enumerate(sc.patterns)]
    T.write_trace(tmp_path / "s.trace", 16, ["main"], [T.Comm(1, tuple(range(16)))], calls)
    fig, shown = report_figure(analyse(tmp_path / "s.trace", TRYTON).reports, "s.trace")
    heat, hist = fig.axes[0], fig.axes[1]
    assert shown == 1 and "omega = T (above: imbalanced)" in legend_texts(hist)
    assert "(ms)" in fig.axes[2].get_ylabel()  # the colour bar says its unit
    for ax in (heat, hist):
        assert_readable(fig, ax)


def test_report_chart_marks_wrong_data_and_drops_an_empty_key():
    from collsched.lab.report import report_figure

    report = lab_report([0.01, 0.012], iterations=1, names=["native", "native:ompi"])
    report["results"][1]["data_ok"] = False
    fig = report_figure(report)
    ax = fig.axes[0]
    assert legend_texts(ax) == ["measured (smpi)"]  # no prediction anywhere: no orange key
    assert [p.get_hatch() for p in _bars(ax)[0]] == [None, "xx"]
    assert any("wrong data (native:ompi)" in t.get_text() for t in fig.texts)
