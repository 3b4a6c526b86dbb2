"""Reduce algorithms (collectives/algorithms/reduce.py, arrival_trees.py): every program
passes the verifier for any rank count, root, segment count and arrival pattern; an
independent value executor (below) runs it with a non-commutative "operation" (sequence
concatenation) and finds the root holding every contribution once, in MPI's rank order
unless the program says commutative-only; structural properties of each tree."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched.collectives.algorithms import CollRequest, generate, names
from collsched.collectives.program import RECV, RECV_REDUCE, SEND, piece_units
from collsched.collectives.verify import order_preserving, verify
from collsched.errors import InputError

SLOW = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
REDUCE_ALGS = ("binomial", "chain", "chain-rotated", "rsag", "arrival")


class Deadlock(Exception):
    pass


def run_values(prog):
    """Execute prog with eager sends (a send captures its pieces' values when issued) and
    sequences as values: a rank starts with (r,) per segment, RECV_REDUCE makes
    incoming + own (own + incoming with local_first), RECV overwrites. Rules 1-6 of
    docs/semantics.md: receives posted at once, a send waits for the earlier receives
    that meet its pieces, receives of one piece applied in list order. Returns the final
    value of every (rank, segment); raises Deadlock, or AssertionError on a doubled
    contribution or mismatched pieces. Independent of collectives/verify.py."""
    p, ns = prog.nranks, prog.nseg
    acc = [[(r,)] * ns for r in range(p)]
    msgs = defaultdict(list)  # (src, dst) -> [(pieces, values)]
    taken = defaultdict(int)  # (dst, src) -> receives posted so far
    pc = [0] * p
    pending = [[] for _ in range(p)]  # (op, k-th from its peer)

    def settle(r):
        moved, blocked = False, set()
        for item in list(pending[r]):
            op, k = item
            segs = {q.seg for q in op.pieces}
            if segs & blocked or len(msgs[(op.peer, r)]) <= k:
                blocked |= segs
                continue
            pieces, values = msgs[(op.peer, r)][k]
            assert pieces == op.pieces, f"rank {r}: pieces differ from the matching send"
            for q, v in zip(op.pieces, values):
                own = acc[r][q.seg]
                if op.kind == RECV_REDUCE:
                    assert not set(v) & set(own), f"rank {r}: contribution doubled"
                    acc[r][q.seg] = own + v if op.local_first else v + own
                else:
                    acc[r][q.seg] = v
            pending[r].remove(item)
            moved = True
        return moved

    while True:
        moved = False
        for r in range(p):
            moved |= settle(r)
            while pc[r] < len(prog.ops[r]):
                op = prog.ops[r][pc[r]]
                if op.kind in (RECV, RECV_REDUCE):
                    pending[r].append((op, taken[(r, op.peer)]))
                    taken[(r, op.peer)] += 1
                else:
                    segs = {q.seg for q in op.pieces}
                    if any(segs & {q.seg for q in o.pieces} for o, _ in pending[r]) or \
                            (op.fence and pending[r]):
                        break
                    msgs[(r, op.peer)].append((op.pieces, [acc[r][q.seg] for q in op.pieces]))
                pc[r] += 1
                moved = True
            moved |= settle(r)
        if all(pc[r] == len(prog.ops[r]) and not pending[r] for r in range(p)):
            return acc
        if not moved:
            raise Deadlock(f"stuck at {pc}")


def check_result(prog, ranks):
    """The ranks hold every contribution once per segment; in rank order unless the
    program is commutative-only; the verifier agrees."""
    assert verify(prog) == []
    acc = run_values(prog)
    full = tuple(range(prog.nranks))
    for r in ranks:
        for s in range(prog.nseg):
            assert sorted(acc[r][s]) == list(full), (r, s, acc[r][s])
            if not prog.commutative_only:
                assert acc[r][s] == full, (r, s, acc[r][s])
    # The flag is exact: set when and only when the order is broken.
    ordered = all(acc[r][s] == full for r in ranks for s in range(prog.nseg))
    if prog.nranks > 1:
        assert order_preserving(prog) == ordered
        assert prog.commutative_only == (not ordered)


def sent_units(prog, nunits):
    units = piece_units(nunits, prog.nseg)
    return [sum(units[q.seg] for op in lst if op.kind == SEND for q in op.pieces) for lst in prog.ops]


@st.composite
def reduce_case(draw):
    p = draw(st.integers(1, 40))
    root = draw(st.integers(0, p - 1))
    nseg = draw(st.integers(1, 4))
    arrivals = draw(st.one_of(st.none(), st.lists(st.floats(0, 1e-2), min_size=p, max_size=p)))
    return p, root, nseg, arrivals


def test_all_registered():
    assert set(REDUCE_ALGS) <= set(names("reduce"))


@pytest.mark.parametrize("name", REDUCE_ALGS)
@given(case=reduce_case(), order=st.sampled_from(["auto", "preserve", "any"]))
@settings(max_examples=40, **SLOW)
def test_reduce_correct_and_ordered(name, case, order):
    p, root, nseg, arrivals = case
    req = CollRequest("reduce", p, nbytes=4096, nseg=nseg, root=root,
                      arrivals=None if arrivals is None else np.array(arrivals),
                      options={"order": order} if name == "arrival" else {})
    prog = generate(name, req)
    assert prog.collective == "reduce" and prog.root == root and prog.algorithm == name
    check_result(prog, [root])
    if name in ("binomial", "chain", "rsag") or (name == "arrival" and order == "preserve"):
        assert not prog.commutative_only  # these keep MPI's order by construction
    if name == "chain-rotated":
        assert prog.commutative_only == (p > 2 and root not in (0, p - 1))


@given(st.integers(1, 64), st.integers(0, 63))
@settings(max_examples=60, **SLOW)
def test_binomial_depth_and_messages(p, root):
    root %= p
    prog = generate("binomial", CollRequest("reduce", p, root=root))
    # One message per non-root rank; the root only receives.
    assert [sum(op.kind == SEND for op in lst) for lst in prog.ops] == [int(r != root) for r in range(p)]
    # Depth in unit-time rounds (a rank takes its receives one after the other, then
    # sends): ceil(log2 P) for root 0, at most one more otherwise.
    depth = [0] * p
    for _ in range(p):
        for r in range(p):
            t = 0
            for op in prog.ops[r]:
                if op.kind == RECV_REDUCE:
                    t = max(t, depth[op.peer]) + 1
            depth[r] = t
    bound = (p - 1).bit_length() + (root != 0)
    assert depth[root] <= bound
    if root == 0:
        assert depth[root] == (p - 1).bit_length()


@given(st.integers(2, 40), st.integers(0, 39), st.integers(1, 8))
@settings(max_examples=40, **SLOW)
def test_chain_pipelines_segments(p, root, nseg):
    root %= p
    prog = generate("chain", CollRequest("reduce", p, nseg=nseg, root=root))
    for r, lst in enumerate(prog.ops):
        sends = [op for op in lst if op.kind == SEND]
        # Every non-root rank sends each segment once, one message per segment, to a neighbour.
        assert len(sends) == (0 if r == root else nseg)
        assert all(len(op.pieces) == 1 and abs(op.peer - r) == 1 for op in sends)
        # ... and forwards segment 0 before it receives segment 2 (the hops pipeline).
        kinds = [(op.kind, op.pieces[0].seg) for op in lst]
        if sends and (RECV_REDUCE, 2) in kinds:
            assert kinds.index((SEND, 0)) < kinds.index((RECV_REDUCE, 2))


@given(st.integers(1, 40), st.integers(0, 39), st.integers(1, 3))
@settings(max_examples=40, **SLOW)
def test_rsag_bytes(p, root, nseg):
    """Rabenseifner: a rank of the power-of-two group sends (1 - 1/pof2) n in the
    reduce-scatter plus at most n / 2 in the gather; the whole vector only in the fold."""
    root %= p
    prog = generate("rsag", CollRequest("reduce", p, nseg=nseg, root=root))
    pof2 = 1 << (p.bit_length() - 1)
    assert prog.nseg == pof2 * nseg
    n = prog.nseg * 1000
    sent = sent_units(prog, n)
    rem = p - pof2
    for r in range(p):
        if r < 2 * rem and r % 2 == 0:
            assert sent[r] == n  # folded in
        elif r != root:
            assert sent[r] <= n - n // pof2 + n // 2 + (n if root < 2 * rem and r == root + 1 else 0)


def test_refusals_are_one_line():
    with pytest.raises(InputError, match="segments"):
        generate("rsag", CollRequest("reduce", 40, nseg=3000))
    with pytest.raises(InputError, match="order"):
        generate("arrival", CollRequest("reduce", 4, options={"order": "sideways"}))
    with pytest.raises(InputError, match="arrival times"):
        generate("arrival", CollRequest("reduce", 4, arrivals=np.zeros(3)))
    with pytest.raises(InputError, match="finite arrival times"):
        generate("arrival", CollRequest("allreduce", 2, arrivals=np.array([0.0, np.nan])))
    with pytest.raises(InputError, match="--root"):
        generate("binomial", CollRequest("reduce", 4, root=4))


def test_arrival_reduce_puts_the_late_rank_last():
    """One late rank: it is a direct child of the root, combined last; early ranks send
    before it arrives. The executor catches a broken tree."""
    p = 16
    arr = np.zeros(p)
    arr[5] = 1e-2
    prog = generate("arrival", CollRequest("reduce", p, nbytes=4096, root=0, arrivals=arr))
    check_result(prog, [0])
    assert [op.peer for op in prog.ops[5]] == [0]  # rank 5 only sends, to the root
    assert prog.ops[0][-1].peer == 5  # the root's last combine is rank 5's
    assert not prog.commutative_only or prog.notes["order"] == "any"


def test_executor_catches_a_doubled_contribution():
    from collsched.collectives.program import Builder

    b = Builder("reduce", 3, 1)
    b.add(0, 1, 0, [(0, 0, 0)], reduce=True, local_first=True)
    b.add(1, 1, 2, [(0, 0, 0)], reduce=True)
    b.add(2, 2, 0, [(0, 0, 0)], reduce=True, local_first=True)
    with pytest.raises(AssertionError, match="doubled"):
        run_values(b.build())
