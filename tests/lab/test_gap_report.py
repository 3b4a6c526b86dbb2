"""Issue 20 item 4: every schedule's gap to the LP lower bound, in `compile --json` and in
the lab's report (table, notes, chart, the docs/benchmarks.md section and its read-back).

The gap is measured (or predicted) / bound - 1; these tests give the numbers and check the
columns, that a missing bound prints "-" instead of failing, and that compile --json always
carries the keys (null with a note where the bound is skipped)."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from collsched import pipeline  # noqa: E402
from collsched.algorithms import REGISTRY  # noqa: E402
from collsched.cli import main  # noqa: E402
from collsched.inputs.topology import load_topology  # noqa: E402
from collsched.lab import report as rp  # noqa: E402
from collsched.lab.runner import LabConfig, measured_gaps  # noqa: E402
from collsched.model.lowerbound import pattern_lower_bound  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRYTON = str(ROOT / "topologies" / "tryton-48.yaml")
GAP_KEYS = ("lower_bound_s", "gap", "lower_bound_avg_elapsed_s", "gap_avg_elapsed", "lower_bound_method",
            "lower_bound_time_s", "lower_bound_note")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _row(name, avg, run, bound_avg=None, bound_run=None, pred=None, ok=True, note=None):
    r = {"algorithm": name, "avg_elapsed_s": avg, "run_time_s": run, "absorption_s": 0.0005,
         "imbalance_s": 0.002, "imbalance_factor": 3.0, "data_ok": ok,
         "elapsed_per_iteration_s": [avg * 0.95, avg, avg * 1.05]}
    if bound_avg is not None:
        r.update(lower_bound_avg_elapsed_s=bound_avg, lower_bound_run_time_s=bound_run,
                 lower_bound_method="lp: ranks x sites", lower_bound_note=None)
    elif note:
        r.update(lower_bound_avg_elapsed_s=None, lower_bound_run_time_s=None, lower_bound_method=None,
                 lower_bound_note=note)
    if pred is not None:
        r.update(predicted_avg_elapsed_s=pred, model_ratio=pred / avg)
    return r


def _report(rows, max_delay=5.0):
    return {"backend": "smpi", "results": rows,
            "inputs": {"topology": "topologies/tryton-48.yaml", "ranks": 28, "nbytes": 37448,
                       "max_delay_ms": max_delay, "iterations": 3, "flat_iterations": 2, "seed": 1,
                       "network_model": "CM02", "tcp_gamma": 4194304}}


def test_gap_columns_from_given_numbers():
    r = _row("min3", 0.012, 0.015, bound_avg=0.008, bound_run=0.0125, pred=0.0118)
    assert rp.row_gaps(r) == (pytest.approx(0.5), pytest.approx(0.2))
    cells = dict(zip(rp.COLUMNS, rp.table_cells(r)))
    assert cells["avg elapsed ms"] == "12.000" and cells["run time ms"] == "15.000"
    assert cells["LP bound ms"] == "8.000" and cells["gap"] == "+50.0%" and cells["run gap"] == "+20.0%"
    assert cells["predicted ms"] == "11.800" and cells["data"] == "ok"
    # Below the bound (SimGrid faster than the cost model): a negative gap, shown as such.
    below = dict(zip(rp.COLUMNS, rp.table_cells(_row("x", 0.0099, 0.0124, bound_avg=0.010, bound_run=0.0125))))
    assert below["gap"] == "-1.0%" and below["run gap"] == "-0.8%"
    assert pipeline.gap_to(3.0, 2.0) == pytest.approx(0.5)
    assert pipeline.gap_to(3.0, 0.0) is None and pipeline.gap_to(None, 2.0) is None
    assert pipeline.gap_to(3.0, None) is None


def test_missing_bound_prints_a_dash(capsys, tmp_path):
    rows = [_row("native", 0.010, 0.012),  # no bound keys at all (a report of before issue 20)
            _row("ring", 0.011, 0.013, note="skipped: more than 1024 ranks")]
    for r in rows:
        cells = dict(zip(rp.COLUMNS, rp.table_cells(r)))
        assert cells["LP bound ms"] == cells["gap"] == cells["run gap"] == "-"
    rep = _report(rows)
    rp.print_report(rep)
    out = capsys.readouterr().out
    assert "LP bound" in out and "native" in out
    assert "Gaps to the LP lower bound: skipped: more than 1024 ranks." in rp.notes(rep)
    md = rp.markdown(rep)
    assert "| native | 10.000 | 12.000 | - | - | - |" in md
    rp.plot_report(rep, tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 0
    assert rp.gap_note([_row("native", 0.01, 0.012)]) is None


def test_notes_name_the_bound_and_the_nearest_row():
    rows = [_row("ring", 0.012, 0.015, 0.008, 0.0125), _row("min3", 0.009, 0.013, 0.008, 0.0125),
            _row("bad", 0.0085, 0.013, 0.008, 0.0125, ok=False)]  # wrong data is never "nearest"
    (line,) = [n for n in rp.notes(_report(rows)) if n.startswith("Gaps")]
    assert "average elapsed time 8.000 ms, run time 12.500 ms" in line
    assert "nearest: min3, +12.5%" in line and "lp: ranks x sites" in line
    rows[1]["lower_bound_avg_elapsed_s"] = 0.0081  # rows measured other arrivals: a range
    (line,) = [n for n in rp.notes(_report(rows)) if n.startswith("Gaps")]
    assert "8.000-8.100 ms (the rows' arrivals differ)" in line


def test_section_round_trip_and_old_sections():
    rows = [_row("min3", 0.012, 0.015, 0.008, 0.0125, pred=0.0118), _row("native", 0.010, 0.012)]
    back = rp.report_from_markdown(rp.markdown(_report(rows)))
    m, n = back["results"]
    assert m["lower_bound_avg_elapsed_s"] == pytest.approx(0.008) and m["predicted_avg_elapsed_s"] == pytest.approx(0.0118)
    assert m["run_time_s"] == pytest.approx(0.015) and m["data_ok"]
    assert "lower_bound_avg_elapsed_s" not in n and "predicted_avg_elapsed_s" not in n
    old = ("Measured 2026-11-25 by `collsched bench --backend smpi --network-model CM02` (BDR paper "
           "Listing 4): topology `topologies/tryton-48.yaml`, P = 28, 37448 bytes per rank, maxDelay 5.0 ms, "
           "8 iterations (+2 flat), seed 1.\n\n"
           "| algorithm | avg elapsed ms | run time ms | absorption ms | omega/tau | predicted ms | pred/meas | data |\n"
           "|:--|--:|--:|--:|--:|--:|--:|:--|\n"
           "| ring | 11.650 | 14.132 | 0.053 | 13.42 | 11.647 | 1.000 | ok |\n"
           "| native | 10.343 | 12.832 | 0.053 | 13.42 | - | - | WRONG |\n")
    ring, native = rp.report_from_markdown(old)["results"]
    assert ring["predicted_avg_elapsed_s"] == pytest.approx(0.011647) and native["data_ok"] is False
    assert "lower_bound_avg_elapsed_s" not in ring


def test_chart_draws_the_bound_and_each_gap():
    rows = [_row("ring", 0.012, 0.015, 0.008, 0.0125, pred=0.0119), _row("min3", 0.009, 0.011, 0.008, 0.0125),
            _row("native", 0.010, 0.012)]
    fig = rp.report_figure(_report(rows))
    ax = fig.axes[0]
    (bounds,) = [c for c in ax.collections if c.get_label() == "LP lower bound"]
    ys = sorted(seg[0][1] for seg in bounds.get_segments())
    assert ys == pytest.approx([8.0, 8.0])  # ms; none for the row without a bound
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["+50.0%", "+12.5%"]
    assert "LP lower bound" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("measured / bound - 1" in t.get_text() for t in fig.texts)


def test_measured_gaps_bound_the_measured_arrivals():
    topo = load_topology(TRYTON, 8)
    cfg = LabConfig("smpi", TRYTON, 8, 37448)
    rng = np.random.default_rng(3)
    arrivals = 0.1 + rng.uniform(0, 2e-3, (2, 8))
    lb = pattern_lower_bound(topo, 37448, arrivals)
    cache = {}
    row = {"avg_elapsed_s": lb.avg_elapsed_s * 1.25, "run_time_s": lb.run_time_s * 1.1}
    got = measured_gaps(row, arrivals, topo, cfg, cache)
    assert got["lower_bound_avg_elapsed_s"] == pytest.approx(lb.avg_elapsed_s)
    assert got["lower_bound_run_time_s"] == pytest.approx(lb.run_time_s)
    assert got["gap_avg_elapsed"] == pytest.approx(0.25) and got["gap_run_time"] == pytest.approx(0.1)
    assert got["lower_bound_note"] is None and got["lower_bound_method"] == lb.method
    again = measured_gaps({"avg_elapsed_s": lb.avg_elapsed_s, "run_time_s": lb.run_time_s}, arrivals.copy(),
                          topo, cfg, cache)
    assert len(cache) == 1 and again["gap_avg_elapsed"] == pytest.approx(0.0)  # one LP for equal arrivals
    big = LabConfig("smpi", None, pipeline.MAX_BOUND_RANKS + 1, 64)
    skipped = measured_gaps({"avg_elapsed_s": 1.0, "run_time_s": 1.0}, np.zeros((1, 4)), None, big, {})
    assert skipped["gap_avg_elapsed"] is None and skipped["lower_bound_avg_elapsed_s"] is None
    assert skipped["lower_bound_note"] == f"skipped: more than {pipeline.MAX_BOUND_RANKS} ranks"


def _compile_json(capsys, tmp_path, *extra):
    argv = ["compile", "--ranks", "8", "--bytes", "37448", "--topology", TRYTON, "-o",
            str(tmp_path / "s.sched"), "--json", *extra]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_compile_json_always_has_the_gap_keys(capsys, tmp_path, monkeypatch):
    pap = tmp_path / "a.yaml"
    pap.write_text("unit: ms\narrivals: [0, 0.9, 0.2, 0.6, 0.05, 1.0, 0.5, 0.15]\n")
    for alg in ("ring", "min3", "bdr"):
        d = _compile_json(capsys, tmp_path, "--algorithm", alg, "--pap", str(pap))
        assert all(k in d for k in GAP_KEYS), alg
        assert d["lower_bound_note"] is None and d["lower_bound_time_s"] > 0
        assert d["gap"] == pytest.approx(d["predicted_run_time_s"] / d["lower_bound_s"] - 1)
        assert d["gap_avg_elapsed"] == pytest.approx(d["predicted_avg_elapsed_s"] / d["lower_bound_avg_elapsed_s"] - 1)
        assert d["gap_avg_elapsed"] >= -1e-9, alg  # the bound holds for every verified schedule
    d = _compile_json(capsys, tmp_path, "--algorithm", "auto", "--pap", str(pap))
    gaps, tried = d["auto"]["gap_avg_elapsed"], d["auto"]["predicted_avg_elapsed_s"]
    assert set(gaps) == {n for n, t in tried.items() if not isinstance(t, str)}
    assert gaps[d["algorithm"]] == pytest.approx(d["gap_avg_elapsed"])
    # Skipped (above MAX_BOUND_RANKS, here lowered to 4): the keys stay, null, with the reason.
    monkeypatch.setattr(pipeline, "MAX_BOUND_RANKS", 4)
    d = _compile_json(capsys, tmp_path, "--algorithm", "ring")
    assert all(k in d for k in GAP_KEYS) and d["gap"] is None and d["gap_avg_elapsed"] is None
    assert d["lower_bound_note"] == "skipped: more than 4 ranks"


def test_plain_compile_skips_the_lp():
    """Without --json or --lower-bound the LP is not solved (it costs more than the compile)."""
    res = pipeline.compile_schedule("ring", 28, 37448, topology=TRYTON)
    s = res.summary()
    assert s["lower_bound_s"] is None and s["lower_bound_time_s"] is None and "--json" in s["lower_bound_note"]
    assert "lower_bound" not in res.timings_s


def test_auto_candidates_take_agg_and_forest_only_once_registered():
    grid = load_topology(ROOT / "topologies" / "wan-3x16.yaml", 48)
    cluster = load_topology(TRYTON, 28)
    flat, skewed = np.zeros((1, 28)), np.linspace(0, 1e-3, 28)[None, :]
    assert "forest" not in pipeline.auto_candidates(cluster, skewed)
    assert ("forest" in pipeline.auto_candidates(grid, np.zeros((1, 48)))) == ("forest" in REGISTRY)
    assert "agg" not in pipeline.auto_candidates(cluster, flat)
    assert ("agg" in pipeline.auto_candidates(cluster, skewed)) == ("agg" in REGISTRY)
    assert all(n in REGISTRY for n in pipeline.auto_candidates(grid, np.linspace(0, 1e-3, 48)[None, :]))
