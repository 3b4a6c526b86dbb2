"""collsched trace (cli_trace over patterns.analysis), the report's figures, --pap with a
trace (inputs.arrivals.load_pap), on synthetic traces written with tracefile.write_trace."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from collsched.cli import main
from collsched.errors import InputError
from collsched.inputs.arrivals import load_pap
from collsched.inputs.topology import homogeneous
from collsched.patterns import tracefile as T
from collsched.patterns.analysis import analyse, export_pap
from collsched.patterns.report import Series, load_source, site_report
from collsched.patterns.scenario import recurring

ROOT = Path(__file__).resolve().parents[2]
TRYTON = ROOT / "topologies" / "tryton-48.yaml"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def scenario_trace(path, iterations=60, second_site=True, second_comm=False):
    """Site 0 on comm 0: the recurring scenario at 1 MiB; site 1: balanced 4 KiB calls;
    optionally site 0 on an 8-rank comm too."""
    sc = recurring(28, 3, iterations, seed=0)
    rng = np.random.default_rng(0)
    calls, t, seq = [], 0.0, 0
    for row in sc.patterns:
        t += 0.05
        calls.append(T.call_from_times(0, 0, seq, 1 << 20, t + row,
                                       t + row.max() + 0.01 + rng.uniform(0, 1e-3, 28)))
        seq += 1
        if second_site:
            calls.append(T.call_from_times(1, 0, seq, 4096, t + 0.02 + rng.uniform(0, 1e-5, 28)))
            seq += 1
    comms = [T.Comm(99, tuple(range(28)))]
    if second_comm:
        comms.append(T.Comm(5, tuple(range(8))))
        for i in range(4):
            calls.append(T.call_from_times(0, 1, i, 64, rng.uniform(0, 1e-3, 8)))
    T.write_trace(path, 28, ["main+0x1f", "solver_step"], comms, calls, flags=1)
    return sc


def test_site_report_by_hand():
    a = np.array([[0.0, 2e-3, 1e-3, 0.0], [3e-3, 0.0, 0.0, 0.0]])
    e = a + 5e-3
    s = Series("x", 0, 0, "allgather", np.array([1000, 1000]), a, e)
    topo = homogeneous(4)
    r = site_report(s, topo)
    t = r.t_message[0]
    assert t == pytest.approx(50e-6 + 1000 / 125e6)
    assert r.omega.tolist() == [2e-3, 3e-3]
    assert r.factor == pytest.approx([2e-3 / t, 3e-3 / t])
    assert r.wait == pytest.approx([2e-3 + 0 + 1e-3 + 2e-3, 0 + 3e-3 * 3])
    assert r.wait_rank == pytest.approx([2e-3, 3e-3, 4e-3, 5e-3])
    assert r.last.tolist() == [1, 1, 0, 0] and r.k == 1 and r.latest.tolist() == [1, 1, 0, 0]
    d = r.summary()
    assert d["imbalance_factor"]["worst"] == pytest.approx(3e-3 / t)
    assert d["imbalance_factor"]["fraction_over_1"] == 1.0
    assert d["elapsed_s"]["mean"] == pytest.approx(5e-3)
    assert d["late"]["most_often_last"] == [[0, 1], [1, 1]]


def test_report_text(tmp_path, capsys):
    scenario_trace(tmp_path / "s.trace")
    code, out, err = run(capsys, "trace", tmp_path / "s.trace", "--topology", TRYTON)
    assert code == 0 and err == ""
    assert "28 ranks, 120 calls, 2 call sites" in out
    rows = [l.split() for l in out.splitlines() if l.startswith(("main+0x1f ", "solver_step "))]
    assert rows[0][:6] == ["main+0x1f", "0", "28", "60", "1048576", "8.439"]
    assert rows[1][:5] == ["solver_step", "0", "28", "60", "4096"]
    assert "last to arrive most often" in out and "prediction" not in out


def test_report_json_and_predict(tmp_path, capsys):
    sc = scenario_trace(tmp_path / "s.trace", iterations=120)
    code, out, _ = run(capsys, "trace", tmp_path / "s.trace", "--topology", TRYTON, "--json",
                       "--predict")
    assert code == 0
    d = json.loads(out)
    assert d["kind"] == "trace" and d["world_size"] == 28 and d["calls"] == 240
    assert d["clock_offsets_applied"] is True
    main_site = d["sites"][0]
    assert main_site["site"] == "main+0x1f" and main_site["calls"] == 120
    assert main_site["t_message_s"] == pytest.approx(8.4386e-3, rel=1e-4)
    omega = np.ptp(sc.patterns, axis=1)
    f = main_site["imbalance_factor"]
    assert f["worst"] == pytest.approx(omega.max() / main_site["t_message_s"], rel=1e-5)
    assert f["mean"] == pytest.approx(omega.mean() / main_site["t_message_s"], rel=1e-5)
    assert sum(main_site["late"]["last"]) == 120
    p = main_site["prediction"]
    assert p["classes"] == 3 and p["train"] == 30
    scores = {s["predictor"]: s for s in p["scores"]}
    assert set(scores) == {"last", "sma(4)", "ema(0.5)", "linear", "recurrence"}
    assert scores["recurrence"]["mae_t"] < 0.5
    assert scores["recurrence"]["mae_t"] == min(s["mae_t"] for s in p["scores"])
    code, out, _ = run(capsys, "trace", tmp_path / "s.trace", "--predict", "--train", 60,
                       "--site", "main+0x1f")
    assert code == 0 and "trained on the first 60 calls (3 classes" in out
    assert "solver_step" not in out


def test_plot_writes_a_png(tmp_path, capsys):
    scenario_trace(tmp_path / "s.trace", second_comm=True)
    code, out, _ = run(capsys, "trace", tmp_path / "s.trace", "--plot", tmp_path / "s.png")
    assert code == 0
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_export_pap_round_trip_and_load_pap(tmp_path, capsys):
    scenario_trace(tmp_path / "s.trace", second_comm=True)
    trace = T.read_trace(tmp_path / "s.trace")
    code, out, err = run(capsys, "trace", tmp_path / "s.trace", "--export-pap", tmp_path / "p.yaml")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "--site" in err and "main+0x1f@0" in err and "main+0x1f@1" in err
    code, _, err = run(capsys, "trace", tmp_path / "s.trace", "--export-pap", tmp_path / "p.yaml",
                       "--site", "main+0x1f")
    assert code == 2 and "several communicators" in err
    code, out, _ = run(capsys, "trace", tmp_path / "s.trace", "--export-pap", tmp_path / "p.yaml",
                       "--site", "main+0x1f@0")
    assert code == 0 and "60 iterations" in out
    a = load_pap(tmp_path / "p.yaml", 28)
    assert np.array_equal(a, T.calls_of(trace, "main+0x1f", comm=0))
    # the exported file is a pattern file the report reads as one site
    code, out, _ = run(capsys, "trace", tmp_path / "p.yaml", "--bytes", "1MiB", "--topology", TRYTON)
    assert code == 0 and "pap" in out and "8.439" in out
    code, _, err = run(capsys, "trace", tmp_path / "p.yaml")
    assert code == 2 and "--bytes" in err


def test_load_pap_accepts_a_trace_with_one_site_of_the_size(tmp_path):
    scenario_trace(tmp_path / "one.trace", second_site=False)
    tr = T.read_trace(tmp_path / "one.trace")
    a = load_pap(tmp_path / "one.trace")
    assert np.array_equal(a, T.calls_of(tr)) and a.shape == (60, 28)
    assert np.array_equal(load_pap(tmp_path / "one.trace", 28), a)
    with pytest.raises(InputError) as e:
        load_pap(tmp_path / "one.trace", 16)
    assert "no call site of 16 ranks" in str(e.value)
    scenario_trace(tmp_path / "two.trace")
    with pytest.raises(InputError) as e:
        load_pap(tmp_path / "two.trace", 28)
    assert e.value.field == "calls" and "--export-pap" in e.value.expected
    assert "solver_step@0" in e.value.expected
    # with a second communicator of another size, the size picks the site
    scenario_trace(tmp_path / "comm.trace", second_site=False, second_comm=True)
    assert load_pap(tmp_path / "comm.trace", 8).shape == (4, 8)
    with pytest.raises(InputError, match="several call sites"):
        load_pap(tmp_path / "comm.trace")


def test_compile_takes_a_trace_as_pap(tmp_path, capsys):
    scenario_trace(tmp_path / "one.trace", iterations=4, second_site=False)
    code, out, err = run(capsys, "compile", "--algorithm", "ring", "--ranks", 28, "--bytes", "64KiB",
                         "--pap", tmp_path / "one.trace", "-o", tmp_path / "r.sched", "--json")
    assert code == 0, err


def test_bad_files_exit_2_with_one_line(tmp_path, capsys):
    scenario_trace(tmp_path / "s.trace")
    raw = bytearray((tmp_path / "s.trace").read_bytes())
    raw[100] ^= 0xFF
    (tmp_path / "bad.trace").write_bytes(bytes(raw))
    (tmp_path / "junk.yaml").write_text("iterations: [[0, 1], [2]]\n")
    (tmp_path / "short.trace").write_bytes(b"CSATRACE\x01")
    os.mkfifo(tmp_path / "fifo")
    for f, what in (("bad.trace", "crc32"), ("junk.yaml", "iterations"), ("short.trace", "header"),
                    ("missing", "not found"), ("fifo", "FIFO")):
        code, out, err = run(capsys, "trace", tmp_path / f)
        assert code == 2 and out == "" and len(err.splitlines()) == 1, (f, err)
        assert what in err and str(tmp_path / f) in err
    assert not T.is_trace(tmp_path / "fifo")
    code, _, err = run(capsys, "trace", tmp_path / "s.trace", "--train", 5)
    assert code == 2 and "--predict" in err
    code, _, err = run(capsys, "trace", tmp_path / "s.trace", "--predict", "--train", 60)
    assert code == 2 and "--train" in err and "60 calls" in err
    code, _, err = run(capsys, "trace", tmp_path / "s.trace", "--bytes", "1MiB")
    assert code == 2 and "--bytes" in err and "records its bytes" in err
    code, _, err = run(capsys, "trace", tmp_path / "s.trace", "--site", "nope")
    assert code == 2 and "no call site 'nope'" in err and "solver_step@0" in err


def test_library_calls_match_the_cli(tmp_path):
    scenario_trace(tmp_path / "s.trace")
    res = analyse(tmp_path / "s.trace", str(TRYTON), predict=True)
    assert [r.series.name for r in res.reports] == ["main+0x1f", "solver_step"]
    assert len(res.predictions) == 2 and res.to_json()["sites"][1]["prediction"]["classes"] >= 1
    s = export_pap(tmp_path / "s.trace", tmp_path / "x.yaml", "solver_step")
    assert s.ncalls == 60 and load_pap(tmp_path / "x.yaml").shape == (60, 28)
    src = load_source(tmp_path / "x.yaml", 4096)
    assert src.kind == "pap" and src.series[0].bytes.tolist() == [4096] * 60


def test_runtime_trace_report_json_is_strict(capsys):
    """The runtime's trace (3 ranks, a 2-rank and a 1-rank communicator): every number
    finite, sites too short to score have no prediction."""
    path = Path(__file__).parent / "data" / "arrivals-smpi-3ranks.trace"
    code, out, _ = run(capsys, "trace", path, "--json", "--predict", "--train", 1)
    assert code == 0
    d = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-finite {c}"))
    by = {(s["site"], s["comm"]): s for s in d["sites"]}
    assert by[("first_world", 0)]["prediction"] is None          # one call
    assert by[("world_v+0x16f", 0)]["collective"] == "allgatherv"
    assert by[("halo", 2)]["ranks"] == 1 and by[("halo", 2)]["imbalance_factor"]["worst"] == 0
    step = by[("world_step+0xe6", 0)]
    assert sum(step["late"]["last"]) == 3 and step["late"]["last"][1] >= 2 and step["omega_s"]["max"] == pytest.approx(0.05, abs=1e-6)
    code, out, _ = run(capsys, "trace", path)
    assert code == 0 and "world_step+0xe6" in out
