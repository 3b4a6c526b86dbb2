"""The simulator's C timing (kernels/dag.c) computes exactly what its Python paths
compute: its reference _PyGraph, and the numpy waves production runs without the kernels.
Same start and end of every transfer and exit of every rank to the bit, same metrics,
over the algorithms, bundled and random topologies, both duplex modes, serial and
dataflow execution, flat and random arrivals; and the same ModelCycle for port orders
that wait on each other."""
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from collsched import kernels
from collsched.model import dag as dag_module
from collsched.algorithms import Request, generate
from collsched.errors import InputError
from collsched.ir import from_op_lists
from collsched import passes
from collsched.model.dag import ModelCycle
from collsched.model.simulate import simulate, simulate_pattern
from collsched.inputs.topology import load_topology

from test_pools import draw_arrivals, draw_grid, grid_yaml
from switches import c_kernels, dag_reference

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
ALGORITHMS = ["ring", "bruck", "nex", "lnbc", "spreading", "min3", "magpie", "bdr", "bslb"]


def schedule(alg, topo, nbytes, arrivals):
    s = generate(alg, Request(topo.nranks, nbytes=nbytes, full_duplex=topo.full_duplex,
                              topology=topo, arrivals=arrivals))
    s = passes.apply(s, topo, nbytes)  # as compile_schedule does: gating, FIFO pairs wait for the end
    return s


def timed(sched, topo, nbytes, pattern, serial_sends):
    """Everything the simulator says: per iteration start, end and exits, and metrics."""
    tls, per_iter, mean = simulate_pattern(sched, topo, nbytes, pattern, serial_sends=serial_sends)
    return ([(t.start.tobytes(), t.end.tobytes(), t.exits.tobytes()) for t in tls], per_iter, mean)


def assert_alike(sched, topo, nbytes, pattern, serial_sends=None, waves=False):
    """The kernel and a Python path agree: the reference (_PyGraph), or with waves=True the
    numpy waves that production runs without the kernels."""
    with c_kernels(False), (nullcontext() if waves else dag_reference()):
        ref = timed(sched, topo, nbytes, pattern, serial_sends)
    with c_kernels(True):
        fast = timed(sched, topo, nbytes, pattern, serial_sends)
    assert len(fast[0]) == len(ref[0])
    for (s1, e1, x1), (s2, e2, x2) in zip(fast[0], ref[0]):
        assert s1 == s2 and e1 == e2 and x1 == x2
    assert fast[1] == ref[1] and fast[2] == ref[2]


def test_kernel_is_built_and_used():
    assert kernels.status() == "c", kernels.status()
    topo = load_topology(TOPOLOGIES / "three-site-grid.yaml", 20)
    s = schedule("ring", topo, 1 << 20, None)
    with c_kernels(True):
        assert dag_module.Plan(s, topo, 1 << 20)._kernel is not None
    with c_kernels(False):
        assert dag_module.Plan(s, topo, 1 << 20)._kernel is None


@pytest.mark.parametrize("name,p", [("three-site-grid", 20), ("wan-3x16", 48), ("tryton-48", 48)])
@pytest.mark.parametrize("duplex", ["full", "half"])
@pytest.mark.parametrize("alg", ALGORITHMS)
def test_bundled_topologies(name, p, duplex, alg):
    topo = load_topology(TOPOLOGIES / f"{name}.yaml", p).with_duplex(duplex == "full")
    rng = np.random.default_rng(p + len(alg))
    nbytes = 1 << 20
    a = rng.uniform(0, 0.01, p)
    # Arrival-aware schedules (bdr, bslb, min3 on tryton) are serial: both executions timed.
    s = schedule(alg, topo, nbytes, a)
    pattern = np.stack([np.zeros(p), a, rng.uniform(0, 0.002, p)])
    for serial in (None, not s.serial):
        assert_alike(s, topo, nbytes, pattern, serial)
    # And with the waves, which production runs without the kernels.
    assert_alike(s, topo, nbytes, pattern, waves=True)


def test_serial_schedules_are_covered():
    topo = load_topology(TOPOLOGIES / "tryton-48.yaml", 48)
    a = np.random.default_rng(5).uniform(0, 0.01, 48)
    assert schedule("min3", topo, 1 << 20, a).serial  # else test_bundled_topologies misses it


@pytest.mark.parametrize("alg,name,p", [("ring", "grid-8x128", 256), ("min3", "wan-3x16", 48),
                                        ("spreading", "three-site-grid", 20)])
@pytest.mark.parametrize("duplex", ["full", "half"])
def test_waves_and_kernel_agree(alg, name, p, duplex):
    """The large-plan path (numpy waves, shared-link passes included) against C."""
    topo = load_topology(TOPOLOGIES / f"{name}.yaml", p).with_duplex(duplex == "full")
    s = schedule(alg, topo, 1 << 16, None)
    a = np.random.default_rng(p).uniform(0, 0.005, p)
    assert_alike(s, topo, 1 << 16, np.stack([np.zeros(p), a]), waves=True)


@pytest.mark.parametrize("arrivals", ["negative", "minus-zero", "equal", "one-late"])
def test_edge_arrivals(arrivals):
    """Arrivals as simulate() takes them (not shifted to start at 0): the same bits still."""
    p = 20
    topo = load_topology(TOPOLOGIES / "three-site-grid.yaml", p).with_duplex(False)
    a = {"negative": -np.random.default_rng(1).uniform(0, 0.01, p), "minus-zero": np.full(p, -0.0),
         "equal": np.full(p, 0.25), "one-late": np.r_[np.zeros(p - 1), 1.0]}[arrivals]
    for alg in ("min3", "ring"):
        s = schedule(alg, topo, 1 << 20, None)
        with c_kernels(False):
            ref, m_ref = simulate(s, topo, 1 << 20, a)
        with c_kernels(True):
            fast, m_fast = simulate(s, topo, 1 << 20, a)
        for x in ("start", "end", "exits"):
            assert getattr(fast, x).tobytes() == getattr(ref, x).tobytes()
        assert m_fast == m_ref


def cyclic(p, a, b, c, d):
    """Port orders that wait on each other: a sends to b, then c; b receives from d, then a;
    c from a, then d; d sends to c, then b. Ranks 1..3 first do a ring among themselves."""
    lists = [[] for _ in range(p)]
    for r in (1, 2, 3):
        nxt, prv = 1 + r % 3, 1 + (r + 1) % 3
        lists[r] += [("send", nxt, r, 0), ("recv", prv, prv, 0)]
    lists[a] += [("send", b, a, 0), ("send", c, a, 0)]
    lists[b] += [("recv", d, d, 0), ("recv", a, a, 0)]
    lists[c] += [("recv", a, a, 0), ("recv", d, d, 0)]
    lists[d] += [("send", c, d, 0), ("send", b, d, 0)]
    return from_op_lists(p, 1, lists)


@pytest.mark.parametrize("name,p,ranks", [("three-site-grid", 20, (0, 9, 14, 19)),
                                          ("tryton-48", 8, (0, 5, 6, 7))])
@pytest.mark.parametrize("duplex", ["full", "half"])
def test_cycle_is_reported_alike(name, p, ranks, duplex):
    topo = load_topology(TOPOLOGIES / f"{name}.yaml", p).with_duplex(duplex == "full")
    s = cyclic(p, *ranks)
    messages = []
    for on in (False, True):
        with c_kernels(on), pytest.raises(ModelCycle) as exc:
            simulate(s, topo, 1 << 20)
        messages.append(str(exc.value))
    assert messages[0] == messages[1]
    assert "waits on itself" in messages[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=grid_yaml(max_sites=4, max_hosts=5), data=st.data(), nbytes=st.integers(1, 4 << 20),
       alg=st.sampled_from(ALGORITHMS), imbalanced=st.booleans())
def test_random_grids(tmp_path, doc, data, nbytes, alg, imbalanced):
    topo = draw_grid(tmp_path, doc, data, max_ranks=20)
    p = topo.nranks
    a = draw_arrivals(data, p) if imbalanced else np.zeros(p)
    try:
        s = schedule(alg, topo, nbytes, a)
    except InputError:  # e.g. nex on a rank count it does not serve
        assume(False)
    pattern = np.stack([np.zeros(p), a])
    assert_alike(s, topo, nbytes, pattern)
    assert_alike(s, topo, nbytes, pattern, serial_sends=not s.serial, waves=True)
