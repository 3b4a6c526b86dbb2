"""The C kernels (compiler/collsched/kernels/) compute exactly what the Python reference
computes: the same transfers and times to the bit, the same port state after, over random
grids, clusters with and without imbalance, both duplex modes and segmented pieces."""
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import kernels
from collsched.algorithms import Request, min3 as min3_module
from collsched.inputs.topology import homogeneous, load_topology

from test_pools import draw_arrivals, draw_grid, grid_yaml
from switches import c_kernels

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def test_kernels_are_built_and_loaded():
    """`make test` builds them (make deps): CI must run the C kernels it ships."""
    assert kernels.status() == "c", kernels.status()


def test_compile_reports_which_paths_ran():
    from collsched.pipeline import compile_schedule

    assert compile_schedule("ring", 4, 1024).summary()["kernels"] == "c"
    with c_kernels(False):
        assert compile_schedule("ring", 4, 1024).summary()["kernels"] == "python (COLLSCHED_KERNELS=0)"


def min3_plan(topo, nbytes, arrivals=None, nseg=1):
    plan, _, model = min3_module.pool_schedule(
        Request(topo.nranks, nbytes=nbytes, nseg=nseg, full_duplex=topo.full_duplex,
                topology=topo, arrivals=arrivals))
    state = [getattr(model, a).tobytes() for a in
             ("send_free", "recv_free", "recv_after", "recv_overlap", "link_free", "wan_free")]
    return tuple(c.tobytes() for c in plan.columns()), state


def assert_min3_alike(topo, nbytes, arrivals=None, nseg=1):
    with c_kernels(False):
        ref = min3_plan(topo, nbytes, arrivals, nseg)
    with c_kernels(True):
        fast = min3_plan(topo, nbytes, arrivals, nseg)
    assert len(fast[0][0]) == len(ref[0][0])
    assert fast == ref


@pytest.mark.parametrize("name,p", [("three-site-grid", 20), ("wan-3x16", 48), ("tryton-48", 28)])
@pytest.mark.parametrize("duplex", ["full", "half"])
def test_min3_on_bundled_topologies(name, p, duplex):
    t = load_topology(TOPOLOGIES / f"{name}.yaml", p).with_duplex(duplex == "full")
    rng = np.random.default_rng(p)
    for arrivals in (None, rng.uniform(0, 0.005, p)):
        for nseg in (1, 3):
            assert_min3_alike(t, 1 << 18, arrivals, nseg)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=grid_yaml(max_sites=4, max_hosts=5), data=st.data(), nbytes=st.integers(0, 2 << 20),
       nseg=st.integers(1, 3), imbalanced=st.booleans())
def test_min3_on_random_grids(tmp_path, doc, data, nbytes, nseg, imbalanced):
    topo = draw_grid(tmp_path, doc, data)
    arrivals = draw_arrivals(data, topo.nranks) if imbalanced else None
    assert_min3_alike(topo, nbytes, arrivals, nseg)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 30), nbytes=st.integers(1, 1 << 20), full=st.booleans(), data=st.data())
def test_min3_on_clusters(p, nbytes, full, data):
    topo = homogeneous(p, full_duplex=full)
    a = None
    if data.draw(st.booleans(), label="imbalanced"):
        tau = float(topo.transfer_time(nbytes)[0, 1])
        a = np.array(data.draw(st.lists(st.floats(0, 1), min_size=p, max_size=p), label="a")) * 5 * tau
    assert_min3_alike(topo, nbytes, a)


def test_grid_compile_benchmark_records_both_paths(tmp_path, capsys):
    from collsched.lab.bench_compiler import run_grid_compile_bench

    doc = tmp_path / "bench.md"
    assert run_grid_compile_bench(TOPOLOGIES, 1, doc=doc, as_json=True,
                                  cases=[("three-site-grid", 20, 1 << 16, 0.010, "min3", 0.0),
                                         ("tryton-48", 8, 37448, 0.100, "agg", 0.005)]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)["results"]
    assert [r["kernels"] for r in rows] == ["c", "python (COLLSCHED_KERNELS=0)"] * 2
    assert [r["algorithm"] for r in rows] == ["min3", "min3", "agg", "agg"]
    assert all(0 < r["compile_time_s"] < 5 and r["runs"] == 1 for r in rows)
    text = doc.read_text()
    assert "<!-- BEGIN compiler-min3 -->" in text and "| min3 | three-site-grid | 20 | 65536 | c |" in text
    assert "| agg | tryton-48 | 8 | 37448 | c |" in text


def test_progress_proof_gives_the_same_verdicts(monkeypatch):
    """Valid schedules, and ones made to deadlock by swapping two ops of a rank, get the same
    violations from the C walk and the Python waves; the walk's every verdict is its
    reference's (verify._progress_completes, on the same fields)."""
    import copy

    from collsched.pipeline import compile_schedule
    from collsched.verify import _progress_completes, verify

    kernel = kernels.progress_completes

    def checked(**f):
        got = kernel(**f)
        assert got == int(_progress_completes(f["rank"], f["offsets"], f["blocking"], f["first"],
                                              f["last"], f["dep0"], f["dep1"], f["dep2"]))
        return got
    monkeypatch.setattr(kernels, "progress_completes", checked)

    rng = np.random.default_rng(5)
    base = [compile_schedule(a, p, 65536).schedule for a, p in
            (("ring", 13), ("bruck", 12), ("bdr", 11), ("rd", 16), ("lnbc", 9))]
    deadlocks = 0
    for trial in range(300):
        s = copy.deepcopy(base[trial % len(base)])
        r = int(rng.integers(s.nranks))
        lo, hi = int(s.offsets[r]), int(s.offsets[r + 1])
        i, j = rng.integers(lo, hi, 2)
        for name in ("kind", "peer", "origin", "segment", "phase", "fifo"):
            a = getattr(s, name)
            a[i], a[j] = a[j], a[i]
        for serial in (False, True):
            with c_kernels(True):
                fast = [str(v) for v in verify(s, serial=serial)]
            with c_kernels(False):
                waves = [str(v) for v in verify(s, serial=serial)]
            assert fast == waves
            deadlocks += any(v.startswith("progress") or "deadlock" in v for v in fast)
    assert deadlocks > 0


@settings(max_examples=300, deadline=None)
@given(data=st.data(), nranks=st.integers(1, 6))
def test_progress_walk_on_random_dependencies(data, nranks):
    """The walk itself, against verify._progress_completes, on arbitrary blocking ops and
    dependencies (most of them deadlock; schedules rarely reach these corners)."""
    from collsched.verify import _progress_completes

    counts = data.draw(st.lists(st.integers(0, 5), min_size=nranks, max_size=nranks), label="ops")
    offsets = np.r_[0, np.cumsum(counts)].astype(np.int64)
    n = int(offsets[-1])
    rank = np.repeat(np.arange(nranks), counts).astype(np.int64)
    blocking = np.array(sorted(data.draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n), label="b")) if n else [],
                        np.int64)
    first = np.searchsorted(blocking, offsets[:-1]).astype(np.int64)
    last = np.searchsorted(blocking, offsets[1:]).astype(np.int64)
    deps = [np.array(data.draw(st.lists(st.integers(-1, max(n - 1, -1)), min_size=n, max_size=n), label="d"),
                     np.int64) for _ in range(3)]
    ref = _progress_completes(rank, offsets, blocking, first, last, *deps)
    got = kernels.progress_completes(nranks=nranks, rank=rank, offsets=offsets, blocking=blocking,
                                    first=first, last=last, dep0=deps[0], dep1=deps[1], dep2=deps[2])
    assert got == int(ref)
