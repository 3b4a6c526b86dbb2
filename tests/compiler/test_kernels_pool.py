"""Min3's pools-of-pools search in C (kernels/input_pool.c) computes exactly what
min3.input_pool._schedule_input_pool computes in Python: the same transfers and times to the bit, the
same port state after, and the same holders in the same insertion order (pool_schedule's
recursion reads them), on the bundled grids and random ones, both duplex modes, with and
without arrivals, segmented pieces. The Python side runs _ListSearch in small pools and
_ArraySearch in large ones (test_min3_speed_identity proves them alike); the C mirrors
_ListSearch at every size."""
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import kernels
from collsched.algorithms import Request, min3 as min3_module
from collsched.algorithms.min3 import input_pool, schedule
from collsched.inputs.topology import load_topology

from test_pools import draw_arrivals, draw_grid, grid_yaml, write_yaml
from switches import c_kernels

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


@contextmanager
def patched(module, name, wrap):
    saved = getattr(module, name)
    setattr(module, name, wrap(saved))
    try:
        yield
    finally:
        setattr(module, name, saved)


def run(topo, nbytes, arrivals, nseg, stats, rounds=True):
    """pool_schedule's plan and model state, the holders after each pool of pools, and in
    `stats` how the pools were searched. rounds=False replaces the round engine (pure numpy,
    after all pools of pools, seeing only the model and holders compared here) by nothing:
    on grid-8x128 it takes seconds and tests nothing of the search."""
    seen = []

    def record(f):
        def schedule_input_pool(model, plan, holders, groups, items, nest_rows=None):
            f(model, plan, holders, groups, items, nest_rows)
            # insertion order counts; times to the bit (float.hex)
            seen.append([[(r, float.hex(t)) for r, t in h.items()] for h in holders])
        return schedule_input_pool

    def count(f):
        def input_pool_kernel(*a):
            stats["kernel"] += 1
            stats["relays"] += bool(a[5])  # use_relays
            stats["large"] += sum(len(g) for g in a[3]) > input_pool.LIST_SEARCH_LIMIT
            return f(*a)
        return input_pool_kernel

    def two_hops(f):
        def take(self, d, hops):
            stats["two_hops"] += len(hops) == 2
            return f(self, d, hops)
        return take

    saved_take = input_pool._ListSearch.take
    input_pool._ListSearch.take = two_hops(saved_take)
    try:
        with patched(schedule, "_schedule_input_pool", record), \
                patched(input_pool, "_input_pool_kernel", count), \
                patched(schedule, "_schedule_rounds", (lambda f: f) if rounds else (lambda f: lambda *a: None)):
            plan, _, model = min3_module.pool_schedule(
                Request(topo.nranks, nbytes=nbytes, nseg=nseg, full_duplex=topo.full_duplex,
                        topology=topo, arrivals=arrivals))
    finally:
        input_pool._ListSearch.take = saved_take
    state = [getattr(model, a).tobytes() for a in
             ("send_free", "recv_free", "recv_after", "recv_overlap", "link_free", "wan_free")]
    return tuple(c.tobytes() for c in plan.columns()), state, seen  # times to the bit


def new_stats():
    return dict(kernel=0, relays=0, large=0, two_hops=0)


def assert_alike(topo, nbytes, arrivals=None, nseg=1, rounds=True):
    """The kernel and Python agree; returns (Python's stats, the kernel's stats)."""
    py, c = new_stats(), new_stats()
    with c_kernels(False):
        ref = run(topo, nbytes, arrivals, nseg, py, rounds)
    with c_kernels(True):
        fast = run(topo, nbytes, arrivals, nseg, c, rounds)
    assert py["kernel"] == 0 and c["kernel"] == len(ref[2])  # every pool of pools in C
    assert c["two_hops"] == 0  # _ListSearch did not run
    assert len(fast[0][0]) == len(ref[0][0])
    assert fast[0] == ref[0]  # the plan: transfers, start and end times
    assert fast[1] == ref[1]  # the model's port state
    assert fast[2] == ref[2]  # the holders, in order, after each pool
    return py, c


def test_kernel_is_built_and_loaded():
    assert kernels.status() == "c", kernels.status()
    assert hasattr(kernels.library(), "cs_input_pool")


@pytest.mark.parametrize("name,p,nbytes", [("three-site-grid", 20, 1 << 20), ("wan-3x16", 48, 1 << 20),
                                           ("grid-8x128", 256, 64 << 10)])
@pytest.mark.parametrize("duplex", ["full", "half"])
def test_input_pool_on_bundled_topologies(name, p, nbytes, duplex):
    t = load_topology(TOPOLOGIES / f"{name}.yaml", p).with_duplex(duplex == "full")
    rng = np.random.default_rng(p)
    total = new_stats()
    for arrivals in (None, rng.uniform(0, 0.005, p)):
        for nseg in (1, 3):
            py, c = assert_alike(t, nbytes, arrivals, nseg, rounds=name != "grid-8x128")
            for k in total:
                total[k] += c[k] if k != "two_hops" else py[k]
    assert total["kernel"] > 0
    if name == "three-site-grid":  # the relay search ran, and relays were taken
        assert total["relays"] > 0 and total["two_hops"] > 0
    if name == "grid-8x128":  # a pool the Python searches with _ArraySearch
        assert total["large"] > 0


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=grid_yaml(max_sites=4, max_hosts=5), data=st.data(), nbytes=st.integers(0, 2 << 20),
       nseg=st.integers(1, 3), imbalanced=st.booleans())
def test_input_pool_on_random_grids(tmp_path, doc, data, nbytes, nseg, imbalanced):
    topo = draw_grid(tmp_path, doc, data)
    arrivals = draw_arrivals(data, topo.nranks) if imbalanced else None
    assert_alike(topo, nbytes, arrivals, nseg)


@st.composite
def relay_grid_yaml(draw):
    """Three or four sites, WAN links 10x apart: about one in four takes relays (two hops),
    which grid_yaml's grids rarely do."""
    n = draw(st.integers(3, 4))
    sites = [{"name": f"s{i}", "hosts": draw(st.integers(1, 8)),
              "lan": {"latency": "50us", "bandwidth": f"{draw(st.sampled_from([100, 1000, 10000]))}Mbit/s"}}
             for i in range(n)]
    nic = [int(s["lan"]["bandwidth"].removesuffix("Mbit/s")) for s in sites]
    wan = [{"between": [f"s{i}", f"s{j}"], "latency": f"{draw(st.integers(1, 80))}ms",
            "bandwidth": f"{min(nic[i], nic[j], draw(st.sampled_from([5, 50, 500])))}Mbit/s"}
           for i in range(n) for j in range(i + 1, n)]  # at most both NICs (docs/inputs.md)
    return {"name": "relay-grid", "duplex": draw(st.sampled_from(["full", "half"])), "sites": sites,
            "wan": wan, "tcp_window": "4MiB"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=relay_grid_yaml(), data=st.data(), nbytes=st.integers(1 << 14, 4 << 20),
       nseg=st.integers(1, 3), imbalanced=st.booleans())
def test_input_pool_on_random_relay_grids(tmp_path, doc, data, nbytes, nseg, imbalanced):
    topo = draw_grid(tmp_path, doc, data)
    arrivals = draw_arrivals(data, topo.nranks, latest=0.05) if imbalanced else None
    assert_alike(topo, nbytes, arrivals, nseg)


def test_relays_on_a_grid_with_one_slow_wan_link(tmp_path):
    """A grid drawn by hand whose slow link s0 -> s1 makes the search relay pieces through s2
    (two hops), next to three-site-grid's relays."""
    doc = {"name": "relay", "duplex": "full",
           "sites": [{"name": f"s{i}", "hosts": h, "lan": {"latency": "10us", "bandwidth": "10000Mbit/s"}}
                     for i, h in enumerate((8, 4, 6))],
           "wan": [{"between": ["s0", "s1"], "latency": "20ms", "bandwidth": "100Mbit/s"},
                   {"between": ["s0", "s2"], "latency": "30ms", "bandwidth": "1000Mbit/s"},
                   {"between": ["s1", "s2"], "latency": "10ms", "bandwidth": "100Mbit/s"}]}
    topo = load_topology(write_yaml(tmp_path, doc), 18)
    py, c = assert_alike(topo, 1 << 20)
    assert c["relays"] > 0 and py["two_hops"] > 0
