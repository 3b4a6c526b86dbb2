"""`--segments auto` (policy.segment_candidates, pipeline.compile_schedule): Min3 tries
1-16 segments where the TCP window caps a path, keeps the fastest predicted plan, and
leaves everything else unsegmented at no extra cost."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from collsched.errors import InputError
from collsched.pipeline import compile_schedule
from collsched.model.policy import AUTO_SEGMENTS, MAX_AUTO_OPS, segment_candidates, window_limited
from collsched.inputs.topology import homogeneous, load_topology

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def topo(name, p):
    return load_topology(TOPOLOGIES / f"{name}.yaml", p)


def test_which_topologies_are_window_limited():
    # wan-3x16: 4 MiB / (2 x 20 ms) = 105 MB/s per flow on 10 Gbit/s links.
    assert window_limited(topo("wan-3x16", 48))
    # A cluster, and the three-site grid's 1.2 Mbit/s links: one flow fills every path.
    assert not window_limited(topo("tryton-48", 28))
    assert not window_limited(topo("three-site-grid", 20))
    assert not window_limited(homogeneous(8))


def test_candidates_only_for_min3_on_window_limited_paths_and_bounded():
    assert segment_candidates("min3", topo("wan-3x16", 48), 48) == list(AUTO_SEGMENTS)
    assert segment_candidates("magpie", topo("wan-3x16", 48), 48) == [1]
    assert segment_candidates("min3", topo("three-site-grid", 20), 20) == [1]
    big = segment_candidates("min3", topo("wan-3x16", 48), 256)
    assert big[0] == 1 and all(2 * 256 * 255 * k <= MAX_AUTO_OPS for k in big[1:])
    assert segment_candidates("min3", topo("wan-3x16", 48), 1024) == [1]


def test_auto_keeps_the_fastest_predicted_candidate():
    path = str(TOPOLOGIES / "wan-3x16.yaml")
    res = compile_schedule("min3", 48, 1 << 20, topology=path)
    tried = res.segments_tried
    assert sorted(tried) == list(AUTO_SEGMENTS)
    best = min(tried, key=lambda k: (tried[k], k))
    assert res.schedule.nseg == best
    assert res.metrics.avg_elapsed_s == tried[best]
    assert best > 1  # on wan-3x16 at 1 MiB pipelining pays (8 segments, docs/grid.md)
    one = compile_schedule("min3", 48, 1 << 20, topology=path, segments=1)
    assert one.segments_tried is None and one.schedule.nseg == 1
    assert one.metrics.avg_elapsed_s == tried[1]
    assert res.metrics.avg_elapsed_s < 0.8 * one.metrics.avg_elapsed_s
    summary = res.summary()
    assert summary["segments"] == best and set(summary["segments_tried"]) == {str(k) for k in AUTO_SEGMENTS}


def test_no_search_where_it_cannot_pay_and_the_same_input_hash():
    path = str(TOPOLOGIES / "three-site-grid.yaml")
    auto = compile_schedule("min3", 20, 1 << 18, topology=path)
    one = compile_schedule("min3", 20, 1 << 18, topology=path, segments=1)
    assert auto.segments_tried is None and auto.schedule.nseg == 1
    assert auto.summary()["segments_tried"] is None
    assert auto.schedule.input_hash == one.schedule.input_hash  # schedules cached before still match
    assert auto.schedule.same_ops(one.schedule)


@pytest.mark.parametrize("bad", [0, 70000, "8", "many", 2.0])
def test_bad_segment_counts_are_refused(bad):
    with pytest.raises(InputError, match="expected 1..65535 or auto"):
        compile_schedule("ring", 4, 1024, segments=bad)


def test_cli_reports_the_search(tmp_path):
    out = tmp_path / "w.sched"
    run = subprocess.run([sys.executable, "-m", "collsched", "compile", "--algorithm", "min3", "--ranks", "48",
                          "--bytes", "256KiB", "--topology", str(TOPOLOGIES / "wan-3x16.yaml"), "-o", str(out),
                          "--json"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    d = json.loads(run.stdout)
    assert d["segments"] in AUTO_SEGMENTS and len(d["segments_tried"]) == len(AUTO_SEGMENTS)
    bad = subprocess.run([sys.executable, "-m", "collsched", "compile", "--algorithm", "ring", "--ranks", "4",
                          "--bytes", "1KiB", "--segments", "lots", "-o", str(tmp_path / "r.sched")],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "--segments: lots: expected 1..65535 or auto" in bad.stderr
    assert not (tmp_path / "r.sched").exists()
