"""`collsched sweep`: the verdict per cell (winner, PAP-aware speedup, bdr's targets), the
paper's table layout, the cache that lets an interrupted sweep resume, and a small grid run
end to end under SMPI."""
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from collsched.runtime_build import build_dir
from collsched.cli import main
from collsched.errors import InputError
from collsched.lab import runner as sw_runner
from collsched.lab import sweep as sw

ROOT = Path(__file__).resolve().parents[2]
BUILD = build_dir()
MINIBENCH = BUILD / "smpi" / "bin" / "collsched-minibench"
needs_smpi = pytest.mark.skipif(shutil.which("smpirun") is None or not MINIBENCH.exists(),
                                reason="SimGrid SMPI or build/smpi/bin/collsched-minibench missing (make)")
SMALL = dict(ranks=(4, 8), floats=(128 * 1024,), delays_ms=(0.0, 5.0), algorithms=("ring", "nex", "native"),
             iterations=2)


def row(avg, pred=None, ok=True, **extra):
    r = {"avg_elapsed_s": avg, "data_ok": ok, **extra}
    if pred is not None:
        r["predicted_avg_elapsed_s"] = pred
    return r


def cell(results, delay=5.0):
    return {"ranks": 28, "floats": 256 * 1024, "max_delay_ms": delay, "results": results}


def test_pap_aware_winner_gets_its_speedup_over_the_best_regular():
    j = sw.judge_cell(cell({"ring": row(2.0, 2.0), "nex": row(1.9, 1.9), "bdr": row(1.0, 1.0),
                            "bslb": row(1.5, 1.5), "native": row(2.5)}))
    assert j["winner"] == "bdr" and j["best_regular"] == "nex"
    assert j["pap_aware_speedup"] == pytest.approx(1.9)
    assert j["bdr_speedup_measured"] == pytest.approx(2.0)
    assert sw._cell_text(j) == "BDR1.90"


def test_regular_winner_and_failed_runs():
    j = sw.judge_cell(cell({"ring": row(1.0), "bdr": row(0.5, ok=False), "nex": {"error": "crashed"}}))
    assert j["winner"] == "ring" and j["failed"] == ["bdr", "nex"]
    assert sw._cell_text(j) == "RING*"  # the star says a run is missing from the verdict
    assert sw._cell_text(sw.judge_cell(cell({"ring": {"error": "x"}}))) == "FAILED"


@pytest.mark.parametrize("delay,ring,bdr,bdr_pred,met", [
    (0.0, 1.0, 1.015, 1.0, True),     # 1.5% slower than ring: within the 2% target
    (0.0, 1.0, 1.03, 1.0, False),     # 3% slower
    (5.0, 2.0, 1.0, 1.05, True),      # measured 2.0x, predicted 1.905x: within 10%
    (50.0, 2.0, 1.0, 1.5, False),     # measured 2.0x, predicted 1.33x
    (1.0, 2.0, 1.0, 1.5, None),       # maxDelay 1 ms: no target
])
def test_bdr_targets(delay, ring, bdr, bdr_pred, met):
    c = cell({"ring": row(ring, ring), "bdr": row(bdr, bdr_pred)}, delay)
    assert sw.bdr_target(c, sw.judge_cell(c)) is met


def test_floats_and_bytes_per_rank():
    assert sw.parse_floats("128K, 2M,1000") == (131072, 2097152, 1000)
    for bad in ("12Q", "0", "-1K", ","):
        with pytest.raises(InputError, match="--floats"):
            sw.parse_floats(bad)
    assert sw.bytes_per_rank(128 * 1024, 12) == 43690  # 524288 / 12 = 43690.67, rounded down
    assert [sw.floats_label(n) for n in sw.PAPER_FLOATS] == ["128K", "256K", "512K", "1M", "2M"]


def test_paper_grid_splits_into_tables_3_and_4():
    s = {"settings": {"ranks": list(sw.PAPER_RANKS), "floats": list(sw.PAPER_FLOATS),
                      "delays_ms": list(sw.PAPER_DELAYS_MS)},
         "cells": [{"ranks": p, "floats": n, "max_delay_ms": d} for p in sw.PAPER_RANKS
                   for n in sw.PAPER_FLOATS for d in sw.PAPER_DELAYS_MS]}
    tables = sw.layout(s, lambda c: f"{c['ranks']}/{c['max_delay_ms']:g}")
    assert [name for name, _ in tables] == ["Table 3", "Table 4"]
    assert [p for p, _ in tables[0][1]] == [4, 8, 12, 16, 20, 24]
    assert [p for p, _ in tables[1][1]] == [28, 32, 36, 40, 44, 48]
    p, rows = tables[1][1][0]
    assert rows[1] == ["256K", "28/0", "28/1", "28/5", "28/10", "28/50", "28/100", "28/500"]
    assert len(sw.grid(sw.SweepConfig())) == 420  # the paper's 2,100 experiments / 5 algorithms


def test_bad_configs_are_refused(tmp_path):
    for bad, flag in ((dict(ranks=(1,)), "--ranks"), (dict(algorithms=("nope",)), "nope"),
                      (dict(iterations=0), "--iterations"), (dict(delays_ms=(-1.0,)), "--max-delays-ms"),
                      (dict(ranks=(48,), floats=(10,)), "--floats")):
        with pytest.raises(InputError, match=flag):
            sw.SweepConfig(**bad).check()
    with pytest.raises(InputError, match="--topology"):
        sw.run_sweep(sw.SweepConfig(topology="nowhere.yaml", cache=str(tmp_path / "c.json")), root=ROOT)


def test_cache_refuses_other_settings_and_retries_failures(tmp_path):
    path = tmp_path / "cache.json"
    cache = sw.SweepCache(path, {"iterations": 4})
    cache.put("a", {"avg_elapsed_s": 1.0})
    cache.put("b", {"error": "crashed"})
    again = sw.SweepCache(path, {"iterations": 4})
    assert again.get("a") == {"avg_elapsed_s": 1.0} and again.get("b") is None
    with pytest.raises(InputError, match="--fresh"):
        sw.SweepCache(path, {"iterations": 8})
    path.write_text("{not json")
    with pytest.raises(InputError, match="sweep cache"):
        sw.SweepCache(path, {"iterations": 4})


def test_failed_runs_are_retried_once_then_on_the_next_sweep(tmp_path, monkeypatch):
    calls = []

    def fake_run_lab(cfg, algorithms):
        calls.append((cfg.ranks, algorithms[0]))
        flaky = algorithms[0] == "bdr" and calls.count((cfg.ranks, "bdr")) == 1
        if algorithms[0] == "nex" or flaky:
            raise sw_runner.LabRunError(f"{algorithms[0]}: smpirun failed (exit 134): Aborted")
        return {"results": [{"algorithm": algorithms[0], "avg_elapsed_s": 1.0, "data_ok": True}]}

    monkeypatch.setattr(sw, "run_lab", fake_run_lab)
    cfg = sw.SweepConfig(ranks=(4,), floats=(1024,), delays_ms=(0.0,), algorithms=("ring", "bdr", "nex"),
                         cache=str(tmp_path / "c.json"))
    first = sw.run_sweep(cfg, root=ROOT)
    assert calls == [(4, "ring"), (4, "bdr"), (4, "bdr"), (4, "nex"), (4, "nex")]
    results = first["cells"][0]["results"]
    assert results["bdr"]["avg_elapsed_s"] == 1.0
    assert results["nex"]["attempts"] == 2 and "exit 134" in results["nex"]["error"]
    calls.clear()
    second = sw.run_sweep(cfg, root=ROOT)
    assert second["runs_done"] == 1 and calls == [(4, "nex"), (4, "nex")]
    calls.clear()
    sw.run_sweep(cfg, root=ROOT, redo=("ring",))
    assert calls == [(4, "ring"), (4, "nex"), (4, "nex")]


@needs_smpi
def test_small_grid_runs_resumes_and_prints(tmp_path):
    cfg = sw.SweepConfig(**SMALL, cache=str(tmp_path / "cache.json"))
    seen = []

    def interrupt_after_five(done, total, text):
        seen.append(text)
        if done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sw.run_sweep(cfg, root=ROOT, progress=interrupt_after_five)
    assert seen[0] == "P=4 N=128K maxDelay=0ms ring"
    sweep = sw.run_sweep(cfg, root=ROOT)
    assert sweep["runs_done"] == 12 - 5  # the first five came from the cache
    again = sw.run_sweep(cfg, root=ROOT)
    assert again["runs_done"] == 0
    assert again["cells"] == sweep["cells"]  # SMPI is deterministic; the cache holds it all
    sw.summarize(sweep)
    for c in sweep["cells"]:
        assert c["bytes_per_rank"] == 4 * 128 * 1024 // c["ranks"]
        assert all(r["data_ok"] for r in c["results"].values())
        assert c["judged"]["winner"] in SMALL["algorithms"] and not c["judged"]["failed"]
        assert "predicted_avg_elapsed_s" in c["results"]["ring"]
    console = Console(record=True, width=140)
    sw.print_tables(sweep, console)
    text = console.export_text()
    assert "Table 3: fastest algorithm" in text and "Table 4: fastest algorithm" in text
    assert "P = 8" in text and "2 iterations per cell" in text and "bdr vs ring" not in text
    winners = {c["judged"]["winner"].upper() for c in sweep["cells"]}
    assert all(w in text for w in winners)


@needs_smpi
def test_cli_writes_json_plot_and_doc(tmp_path):
    args = ["sweep", "--ranks", "4,8", "--floats", "128K", "--max-delays-ms", "0,5",
            "--algorithms", "ring,nex,native", "--iterations", "2", "--cache", str(tmp_path / "c.json"),
            "--json", str(tmp_path / "s.json"), "--plot", str(tmp_path / "s.png"),
            "--doc", str(tmp_path / "bench.md"), "--section", "sweep-test"]
    assert main(args) == 0
    doc = json.loads((tmp_path / "s.json").read_text())
    assert len(doc["cells"]) == 4 and doc["settings"]["iterations"] == 2
    assert (tmp_path / "s.png").stat().st_size > 10_000
    md = (tmp_path / "bench.md").read_text()
    assert "<!-- BEGIN sweep-test -->" in md and "| **P = 4** |" in md and "![sweep heat map](s.png)" in md
    assert main(args[:-2] + ["--iterations", "3"]) == 2  # same cache, other settings: refused


PLATFORMS = ROOT / "tests" / "data" / "platforms"


def test_sweep_on_a_users_platform(tmp_path, monkeypatch):
    """--platform with --hostfile: every cell's run goes to that platform, the cache's settings
    name it (and change with its contents), too few slots for the largest P is one line."""
    seen = []

    def fake_run_lab(cfg, algorithms):
        seen.append((cfg.ranks, cfg.platform, cfg.hostfile, cfg.topology))
        return {"results": [{"algorithm": algorithms[0], "avg_elapsed_s": 1.0, "data_ok": True}]}

    monkeypatch.setattr(sw, "run_lab", fake_run_lab)
    xml, hosts = str(PLATFORMS / "two-zone.xml"), str(PLATFORMS / "two-zone.hosts")
    cfg = sw.SweepConfig(ranks=(4, 5), floats=(1024,), delays_ms=(0.0,), algorithms=("ring",),
                         topology=str(PLATFORMS / "two-zone.yaml"), platform=xml, hostfile=hosts,
                         cache=str(tmp_path / "c.json"))
    sweep = sw.run_sweep(cfg, root=ROOT)
    assert [s[:3] for s in seen] == [(4, xml, hosts), (5, xml, hosts)]
    settings = sweep["settings"]
    assert settings["platform"] == xml and settings["hostfile"] == hosts and len(settings["platform_digest"]) == 16
    assert "two-zone.xml (predicted from two-zone.yaml)" in sw.header_text(sweep)
    assert sw.SweepConfig(topology="t.yaml", platform=xml).cache_path(ROOT).name == "t-on-two-zone-cache.json"
    other = tmp_path / "other.hosts"
    other.write_text("e0:5\n")
    with pytest.raises(InputError, match="--fresh"):  # another placement: not the cached runs
        sw.run_sweep(sw.SweepConfig(**{**cfg.__dict__, "hostfile": str(other)}), root=ROOT)
    with pytest.raises(InputError, match="expected at least 8 slots"):
        sw.SweepConfig(ranks=(8,), floats=(1024,), platform=xml, hostfile=hosts).check()
    assert main(["sweep", "--platform", xml, "--hostfile", hosts, "--ranks", "4"]) == 2  # no --topology
