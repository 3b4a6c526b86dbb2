"""Broadcast algorithms (collectives/algorithms/bcast.py): every program verifies for any
P, root and nseg, and has its shape (binomial tree, chain, scatter + ring allgather, the
arrival-aware tree's late leaves)."""
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched.collectives.algorithms import CollRequest, bcast, generate, names
from collsched.collectives.program import RECV, SEND
from collsched.collectives.verify import verify
from collsched.errors import InputError
from collsched.inputs.topology import homogeneous, load_topology

ROOT = Path(__file__).resolve().parents[2]
SLOW = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALGS = ["binomial", "chain", "scatter-ring", "arrival-tree"]


def req(p, nseg=1, root=0, **kw):
    return CollRequest("bcast", p, nbytes=kw.pop("nbytes", 1 << 16), nseg=nseg, root=root, **kw)


def test_registered():
    assert set(ALGS) <= set(names("bcast"))
    from collsched.collectives.algorithms.registry import REGISTRY
    assert REGISTRY[("bcast", "arrival-tree")].arrival_aware


@given(st.integers(1, 40), st.integers(1, 4), st.data(), st.sampled_from(ALGS), st.booleans())
@settings(max_examples=100, **SLOW)
def test_verified_any_p_root(p, nseg, data, name, with_arrivals):
    root = data.draw(st.integers(0, p - 1))
    arrivals = (np.array(data.draw(st.lists(st.floats(0, 0.01), min_size=p, max_size=p)))
                if with_arrivals else None)
    prog = generate(name, req(p, nseg, root, arrivals=arrivals))
    assert verify(prog) == []
    assert (prog.collective, prog.root, prog.algorithm) == ("bcast", root, name)
    assert prog.nseg == (p * nseg if name == "scatter-ring" else nseg)


def messages(prog):
    return [(r, op) for r, ops in enumerate(prog.ops) for op in ops if op.kind == SEND]


@given(st.integers(1, 40), st.data())
@settings(max_examples=40, **SLOW)
def test_binomial_tree(p, data):
    root = data.draw(st.integers(0, p - 1))
    prog = generate("binomial", req(p, 1, root))
    msgs = messages(prog)
    assert len(msgs) == p - 1
    rounds = (p - 1).bit_length()
    assert sum(1 for r, _ in msgs if r == root) == rounds
    # every non-root receives once, from a parent that differs from it in one bit
    # (relative ranks), the larger subtree first
    for r, ops in enumerate(prog.ops):
        recvs = [op for op in ops if op.kind == RECV]
        assert len(recvs) == (0 if r == root else 1)
        if recvs:
            v, u = (r - root) % p, (recvs[0].peer - root) % p
            assert u < v and bin(u ^ v).count("1") == 1 and u & (v - u) == 0
        sends = [(op.peer - root) % p for op in ops if op.kind == SEND]
        assert [s - (r - root) % p for s in sends] == sorted((s - (r - root) % p for s in sends), reverse=True)


@pytest.mark.parametrize("p,nseg", [(2, 3), (5, 4), (8, 1), (9, 7)])
def test_binomial_pipelined_segments(p, nseg):
    """nseg > 1: one message per segment per edge; a relay's list interleaves receiving
    segment g + 1 with forwarding segment g."""
    prog = generate("binomial", req(p, nseg))
    assert len(messages(prog)) == (p - 1) * nseg
    assert all(len(op.pieces) == 1 for _, op in messages(prog))
    if nseg > 1 and p > 3:  # rank 2 relays to 3: it forwards segment 0 before its last receive
        kinds = [op.kind for op in prog.ops[2]]
        assert kinds.index(SEND) < len(kinds) - 1 - kinds[::-1].index(RECV)


@given(st.integers(1, 40), st.integers(1, 5), st.data())
@settings(max_examples=40, **SLOW)
def test_chain(p, nseg, data):
    root = data.draw(st.integers(0, p - 1))
    prog = generate("chain", req(p, nseg, root))
    for r, ops in enumerate(prog.ops):
        v = (r - root) % p
        assert all(op.peer == (r + 1) % p for op in ops if op.kind == SEND)
        assert all(op.peer == (r - 1) % p for op in ops if op.kind == RECV)
        assert sum(op.kind == SEND for op in ops) == (nseg if v < p - 1 else 0)
        # pipelined: segment g is forwarded before segment g + 1 is awaited
        if 0 < v < p - 1:
            assert [op.kind for op in ops] == [RECV] + [RECV, SEND] * (nseg - 1) + [SEND]


@given(st.integers(1, 40), st.integers(1, 3), st.data())
@settings(max_examples=40, **SLOW)
def test_scatter_allgather(p, n, data):
    root = data.draw(st.integers(0, p - 1))
    prog = generate("scatter-ring", req(p, n, root))
    assert prog.nseg == p * n
    msgs = messages(prog)
    for r, op in msgs:
        segs = [pc.seg for pc in op.pieces]
        # whole chunks, contiguous
        assert segs == list(range(segs[0], segs[0] + len(segs))) and len(segs) % n == 0
        assert segs[0] % n == 0
    # scatter: P - 1 messages over the binomial tree, then ring messages of one chunk each,
    # all to the next rank, the root receiving nothing
    multi = [(r, op) for r, op in msgs if len(op.pieces) > n]
    assert all(r != op.peer for r, op in multi)
    ring = [(r, op) for r, op in msgs if op.peer == (r + 1) % p and len(op.pieces) == n]
    assert all(op.peer != root for _, op in ring)
    assert len(msgs) <= (p - 1) + (p - 1) * (p - 1)


def test_scatter_allgather_refuses_too_many_segments():
    with pytest.raises(InputError, match="65535"):
        generate("scatter-ring", req(300, 300))


def test_arrival_tree_late_ranks_are_leaves():
    p = 16
    arr = np.zeros(p)
    late = [3, 8, 9, 14]
    arr[late] = 0.05
    prog = generate("arrival-tree", req(p, 2, 0, arrivals=arr))
    assert verify(prog) == []
    for r in late:
        assert not any(op.kind == SEND for op in prog.ops[r])
    # holders send to their early children before their late ones
    for r, ops in enumerate(prog.ops):
        kids = [op.peer for op in ops if op.kind == SEND and op.pieces[0].seg == 0]
        assert kids == sorted(kids, key=lambda k: arr[k])


def test_arrival_tree_without_arrivals_is_binomial_like():
    """No arrivals, a homogeneous cluster: the greedy tree has binomial depth."""
    p = 16
    edges = bcast.arrival_tree(req(p, topology=homogeneous(p), nbytes=1024))
    depth = {0: 0}
    for _i, u, v in edges:
        depth[v] = depth[u] + 1
    assert len(edges) == p - 1 and max(depth.values()) <= (p - 1).bit_length()


def test_arrival_tree_beats_binomial_when_a_relay_is_late():
    """Under the event model: binomial's first child (relative rank 8, the root of half the
    tree) arriving late delays its subtree; the arrival tree makes it a leaf."""
    from collsched.collectives.model import simulate

    p = 16
    topo = homogeneous(p)
    arr = np.zeros(p)
    arr[8] = 0.01
    t = {a: simulate(generate(a, req(p, topology=topo, arrivals=arr, nbytes=1 << 14)), topo,
                     nbytes=1 << 14, arrivals=arr) for a in ("binomial", "arrival-tree")}
    assert t["arrival-tree"].avg_elapsed_s < t["binomial"].avg_elapsed_s


def test_arrival_tree_refuses_bad_arrivals():
    with pytest.raises(InputError, match="arrival"):
        generate("arrival-tree", req(4, arrivals=np.zeros(3)))
    with pytest.raises(InputError, match="arrival"):
        generate("arrival-tree", req(4, arrivals=np.array([0, 1, np.nan, 2])))


def test_programs_round_trip_through_format_1_2():
    """Every algorithm's name fits the header (16 bytes) and its program survives the file."""
    from collsched.collectives import schedfile

    topo = load_topology(str(ROOT / "topologies" / "three-site-grid.yaml")) if "bcast" == "alltoall" else None
    for name in names("bcast"):
        assert len(name) <= 16
        p = topo.nranks if topo is not None else 5
        prog = generate(name, req(p, 2, topology=topo))
        back = schedfile.decode(schedfile.encode(prog), "x")
        assert back.same_ops(prog) and back.algorithm == name
