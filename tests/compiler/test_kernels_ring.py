"""The ring engine's kernel (kernels/ring.c) computes exactly what min3.ring._schedule_ring
computes: the same transfers and times to the bit, the same port state after, with the ring
forced on every large pool it fits (the bundled grids and random full-duplex grids, also
sites that arrive at different times). Each test checks that the kernel did run: a grid on
which the ring does not fit would compare the Python reference with itself."""
import copy
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from collsched import kernels
from collsched.algorithms import Request, min3 as min3_module
from collsched.algorithms.min3 import ring, schedule
from collsched.inputs.topology import load_topology

from test_pools import draw_grid, grid_yaml
from switches import c_kernels

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


@contextmanager
def ring_engine():
    """Every pool of single ranks as a large one (test_min3.engine("ring")), counting the
    pools the kernel schedules."""
    saved = schedule.EXACT_LEAF_LIMIT, schedule.RING_ENGINE, ring._ring_kernel
    calls = []

    def counted(*args):
        calls.append(len(args[3]))
        return saved[2](*args)

    schedule.EXACT_LEAF_LIMIT, schedule.RING_ENGINE = 0, True
    ring._ring_kernel = counted
    try:
        yield calls
    finally:
        schedule.EXACT_LEAF_LIMIT, schedule.RING_ENGINE, ring._ring_kernel = saved


def min3_plan(topo, nbytes, arrivals=None, nseg=1):
    plan, _, model = min3_module.pool_schedule(
        Request(topo.nranks, nbytes=nbytes, nseg=nseg, full_duplex=topo.full_duplex,
                topology=topo, arrivals=arrivals))
    state = [getattr(model, a).tobytes() for a in
             ("send_free", "recv_free", "recv_after", "recv_overlap", "link_free", "wan_free")]
    return tuple(c.tobytes() for c in plan.columns()), state


def assert_ring_alike(topo, nbytes, arrivals=None, nseg=1) -> int:
    """Native and Python agree; returns how many pools the kernel scheduled."""
    with ring_engine() as calls:
        with c_kernels(False):
            ref = min3_plan(topo, nbytes, arrivals, nseg)
        assert calls == []
        with c_kernels(True):
            fast = min3_plan(topo, nbytes, arrivals, nseg)
    assert len(fast[0][0]) == len(ref[0][0])
    assert fast[0] == ref[0]
    assert fast[1] == ref[1]
    return len(calls)


def site_arrivals(topo, seed):
    """One arrival time per site: the ring still fits (one arrival per pool), starting late."""
    rng = np.random.default_rng(seed)
    at = {s: rng.uniform(0, 0.005) for s in topo.sites()}
    return np.array([at[s] for s in topo.rank_site()])


def test_ring_kernel_is_built_and_loaded():
    assert kernels.status() == "c", kernels.status()
    assert hasattr(kernels.library(), "cs_ring")


@pytest.mark.parametrize("name,p,nbytes,nsegs", [
    ("wan-3x16", 48, 1 << 20, (1, 3)),
    ("three-site-grid", 20, 1 << 18, (1, 2, 3)),
    ("grid-8x128", 256, 1 << 16, (1,)),
])
def test_ring_on_bundled_topologies(name, p, nbytes, nsegs):
    t = load_topology(TOPOLOGIES / f"{name}.yaml", p).with_duplex(True)
    for arrivals in (None, site_arrivals(t, p)):
        for nseg in nsegs:
            assert assert_ring_alike(t, nbytes, arrivals, nseg) >= 2


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=grid_yaml(max_sites=4, max_hosts=6), data=st.data(), nbytes=st.integers(0, 2 << 20),
       nseg=st.integers(1, 3), by_site=st.booleans())
def test_ring_on_random_grids(tmp_path, doc, data, nbytes, nseg, by_site):
    doc["duplex"] = "full"  # the ring's condition, with one arrival per pool
    assume(len(doc["sites"]) >= 2)
    topo = draw_grid(tmp_path, doc, data, min_ranks=3)
    arrivals = site_arrivals(topo, data.draw(st.integers(0, 99), label="seed")) if by_site else None
    ran = assert_ring_alike(topo, nbytes, arrivals, nseg)
    assume(ran)  # grids whose sites are no pools of their own test nothing here


def dyadic(draw, size, lo, hi):
    """Quarters in [lo, hi]: exact sums, so the ties of every comparison come up often."""
    return np.array(draw(st.lists(st.integers(4 * lo, 4 * hi), min_size=size, max_size=size))) / 4


@st.composite
def ring_inputs(draw):
    """A pool of n ranks (any order) among p, cost arrays, transfers planned above inside
    and outside it, and holders: _schedule_ring's inputs without the pool tree around them."""
    n = draw(st.integers(2, 8))
    p = n + draw(st.integers(0, 3))
    ranks = np.array(draw(st.permutations(range(p)))[:n], np.int64)
    m = lambda lo, hi: dyadic(draw, p * p, lo, hi).reshape(p, p)
    dur = m(1, 4)
    model = SimpleNamespace(dur=dur, early=np.minimum(m(0, 2), dur), os=np.minimum(m(0, 2), dur),
                            g=np.minimum(m(0, 2), dur), fifo=m(0, 1) > 0.5, link_free=m(0, 8),
                            arrival=dyadic(draw, p, 0, 4), send_free=dyadic(draw, p, 0, 8),
                            recv_free=dyadic(draw, p, 0, 8), recv_after=dyadic(draw, p, 0, 8))
    plan = min3_module._Plan()
    freed = [[0.0] for _ in range(p)]  # when a rank's ports free above: back to back there
    for _ in range(draw(st.integers(0, 30))):
        s, r = draw(st.integers(0, p - 1)), draw(st.integers(0, p - 1))
        start = draw(st.one_of(st.integers(0, 40).map(lambda q: q / 4),
                               st.sampled_from(freed[s] + freed[r])))
        plan.add(s, r, 0, start, start + float(dur[s, r]))
        freed[s].append(start + float(model.os[s, r]))
        freed[r].append(plan.end[-1])
    n_items = draw(st.integers(1, 12))
    holders = []
    for _ in range(n_items):
        who = draw(st.lists(st.sampled_from(ranks.tolist()), unique=True, max_size=n))
        holders.append({g: draw(st.integers(0, 16)) / 4 for g in who})
    return model, plan, holders, ranks, n_items


@settings(max_examples=300, deadline=None)
@given(inputs=ring_inputs())
def test_ring_kernel_on_tied_timelines(inputs):
    """_schedule_ring itself, on inputs whose times tie everywhere: the backfilling's
    comparisons (a ring transfer ending exactly when the next receive's bytes land, a send
    freeing its port exactly at the next start), the queues' ties between pieces."""
    results = []
    for on in (False, True):
        model, plan, holders, ranks, n_items = copy.deepcopy(inputs)
        with ring_engine() as calls, c_kernels(on):
            ring._schedule_ring(model, plan, holders, ranks, n_items, len(plan.src))
        assert len(calls) == on
        results.append((tuple(c.tobytes() for c in plan.columns()), holders,
                        [getattr(model, a).tobytes() for a in
                         ("send_free", "recv_free", "recv_after", "link_free")]))
    assert results[1] == results[0]
