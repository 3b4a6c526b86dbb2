"""BSLB (Proficz 2021, Listing 3) as a compiled schedule: the gather follows the predicted
arrival order, the broadcast follows MPICH's binomial tree, only the late root receives in
the background, and every schedule verifies and simulates for random arrival patterns."""
import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import schedfile
from collsched.algorithms import Request, generate
from collsched.algorithms.bslb import binomial_children
from collsched.inputs.arrivals import write_pap
from collsched.errors import InputError
from collsched.ir import BACKGROUND, RECV, SEND
from collsched.pipeline import compile_schedule
from collsched.model.simulate import simulate
from collsched.inputs.topology import homogeneous, load_topology
from collsched.verify import verify

TRYTON = Path(__file__).resolve().parents[2] / "topologies" / "tryton-48.yaml"
M = 65536


def arrivals_strategy(p):
    """Arrival patterns with ties (a few levels) or spread out, in seconds."""
    levels = st.sampled_from([0.0, 1e-3, 5e-3])
    return st.one_of(st.lists(levels, min_size=p, max_size=p),
                     st.lists(st.floats(0, 0.05), min_size=p, max_size=p)).map(np.array)


def binomial_parent(r):
    return r & (r - 1)  # clear the lowest set bit


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(2, 48), nseg=st.integers(1, 3), full=st.booleans(), data=st.data())
def test_random_patterns_verify_and_follow_the_paper(p, nseg, full, data):
    a = data.draw(arrivals_strategy(p), label="arrivals")
    s = generate("bslb", Request(p, nbytes=M, nseg=nseg, full_duplex=full, arrivals=a))
    assert verify(s) == []
    expected_order = sorted(range(1, p), key=lambda r: (a[r], r))
    # The root receives every other block first, in predicted arrival order, segments in order.
    root_ops = s.ops_of(0)
    gather = root_ops[:(p - 1) * nseg]
    assert [(k, peer, o, seg) for k, peer, o, seg, _ in gather] == \
        [("recv", r, r, seg) for r in expected_order for seg in range(nseg)]
    # Then it broadcasts as a binomial bcast sends one message: child by child, largest
    # subtree first, blocks in the order it received them.
    assert [(k, peer, o, seg) for k, peer, o, seg, _ in root_ops[(p - 1) * nseg:]] == \
        [("send", c, o, seg) for c in binomial_children(0, p) for o in [0] + expected_order
         if o != c for seg in range(nseg)]
    root_late = a[0] > a.min()
    assert all(ph == ("bg" if root_late else "fg") for *_, ph in gather)
    # Nothing else is background.
    bg = np.nonzero(s.phase == BACKGROUND)[0]
    assert np.all(s.rank_of_op[bg] == 0) and np.all(s.kind[bg] == RECV)
    for r in range(1, p):
        ops = s.ops_of(r)
        # A non-root first hands its own block to the root, then only talks to the tree.
        assert [op[:4] for op in ops[:nseg]] == [("send", 0, r, seg) for seg in range(nseg)]
        rest = ops[nseg:]
        assert {peer for k, peer, *_ in rest if k == "recv"} == {binomial_parent(r)}
        assert {peer for k, peer, *_ in rest if k == "send"} == set(binomial_children(r, p))
        assert sum(k == "recv" for k, *_ in rest) == (p - 1) * nseg


@pytest.mark.parametrize("p,children", [
    (1, []), (2, [1]), (5, [4, 2, 1]), (8, [4, 2, 1]), (9, [8, 4, 2, 1]), (48, [32, 16, 8, 4, 2, 1])])
def test_root_serves_the_largest_subtree_first(p, children):
    assert binomial_children(0, p) == children


@settings(max_examples=60, deadline=None)
@given(p=st.integers(2, 64))
def test_binomial_tree_spans_every_rank_once(p):
    seen = [0]
    for r in range(p):
        for c in binomial_children(r, p):
            assert binomial_parent(c) == r
            seen.append(c)
    assert sorted(seen) == list(range(p))
    # ceil(log2 P) children at the root, and no path longer than that.
    assert len(binomial_children(0, p)) == (p - 1).bit_length()
    assert max(bin(r).count("1") for r in range(p)) <= (p - 1).bit_length()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(3, 32), nseg=st.integers(1, 2), data=st.data())
def test_late_root_has_the_gather_done_when_it_arrives(p, nseg, data):
    """Background receives: everything reaches a root that arrives after the gather."""
    topo = homogeneous(p)
    others = np.array(data.draw(st.lists(st.floats(0, 0.01), min_size=p - 1, max_size=p - 1)))
    # The root receives its (p - 1) * nseg pieces one at a time, each paying the latency.
    piece = -(-M // nseg)
    gather_time = (p - 1) * nseg * (topo.latency[0, 1] + piece / topo.bandwidth[0, 1])
    a = np.r_[others.max() + gather_time + 1e-3, others]
    s = generate("bslb", Request(p, nbytes=M, nseg=nseg, topology=topo, arrivals=a))
    tl, m = simulate(s, topo, M, a)
    into_root = tl.dst == 0
    assert np.all(tl.end[into_root] <= a[0] + 1e-12)
    # The same schedule with foreground receives starts the gather only when the root comes
    # (the broadcast of the root's own block may hide it for small P: never slower, not always faster).
    fg = dataclasses.replace(s, phase=np.zeros_like(s.phase))
    tl_fg, m_fg = simulate(fg, topo, M, a)
    assert np.all(tl_fg.start[tl_fg.dst == 0] >= a[0])
    assert m.avg_elapsed_s <= m_fg.avg_elapsed_s + 1e-12


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(2, 40), data=st.data())
def test_knowing_the_order_never_hurts_the_gather(p, data):
    """The root's port serves senders in list order: arrival order finishes the gather first."""
    topo = homogeneous(p)
    a = data.draw(arrivals_strategy(p), label="arrivals")
    a[0] = 0.0  # root on time: compare only the order, not the phases
    known = generate("bslb", Request(p, nbytes=M, topology=topo, arrivals=a))
    blind = generate("bslb", Request(p, nbytes=M, topology=topo, arrivals=np.zeros(p)))
    gather_end = [simulate(s, topo, M, a)[0] for s in (known, blind)]
    last = [tl.end[tl.dst == 0].max() for tl in gather_end]
    assert last[0] <= last[1] + 1e-12


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 40), nbytes=st.integers(1, 1 << 20), data=st.data())
def test_simulation_respects_the_roots_receive_port(p, nbytes, data):
    topo = homogeneous(p)
    a = data.draw(arrivals_strategy(p), label="arrivals")
    tl, m = simulate(generate("bslb", Request(p, topology=topo, arrivals=a)), topo, nbytes, a)
    assert np.all(tl.exits >= a)
    assert m.run_time_s >= (p - 1) * nbytes / topo.bandwidth[0, 1] * (1 - 1e-9)


def root_receive_order(s) -> list[int]:
    """The ranks the root receives from, in its list's order (each once)."""
    return list(dict.fromkeys(peer for kind, peer, *_ in s.ops_of(0) if kind == "recv"))


def test_flat_arrivals_take_ranks_in_order():
    s = generate("bslb", Request(6, arrivals=np.zeros(6)))
    assert s.same_ops(generate("bslb", Request(6)))
    assert root_receive_order(s) == [1, 2, 3, 4, 5]
    assert not s.has_background


def test_compiles_on_tryton_and_round_trips():
    p = 28
    a = np.linspace(0.005, 0, p)  # rank 0 last: background gather
    with tempfile.TemporaryDirectory() as tmp:
        pap = str(Path(tmp) / "pap.yaml")
        write_pap(pap, [a], unit="s")
        out = Path(tmp) / "bslb.sched"
        res = compile_schedule("bslb", p, 37448, topology=str(TRYTON), pap=pap, output=out)
        back = schedfile.read(out)
    assert back.same_ops(res.schedule) and back.has_background
    assert root_receive_order(res.schedule) == list(range(p - 1, 0, -1))
    assert res.metrics.run_time_s > 0
    sends = res.schedule.kind == SEND
    assert np.all(res.schedule.fifo[sends] == 1)  # LAN, 37 KB pieces: FIFO per link


def test_refuses_patterns_of_the_wrong_size():
    with pytest.raises(InputError, match="one predicted arrival per rank"):
        generate("bslb", Request(4, arrivals=np.zeros(3)))
    with pytest.raises(InputError, match="finite"):
        generate("bslb", Request(3, arrivals=np.array([0, np.nan, 1])))


def test_tryton_topology_loads_for_all_sweep_sizes():
    """The sweep's largest cell: P = 48 compiles quickly and verifies."""
    topo = load_topology(TRYTON, 48)
    a = np.random.default_rng(1).uniform(0, 0.5, 48)
    s = generate("bslb", Request(48, nbytes=4 * (2 << 20) // 48, topology=topo, arrivals=a))
    assert verify(s) == []
