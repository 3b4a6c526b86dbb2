"""The intergroup verifier (intergroup/verify.py; docs/semantics.md#intergroup-schedules):
every registered plan, as an InterSchedule, verifies clean over random shapes and sizes;
planted errors (a dropped op, swapped ranges, a changed peer, a deadlocked order, a partly
duplicate receive, a missing delivery, a send of bytes not held) are caught by the pass
that owns them."""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from collsched.intergroup import PLANS, Groups
from collsched.intergroup.schedule import InterSchedule, from_plan
from collsched.intergroup.verify import PASSES, verify
from collsched.ir import RECV, SEND
from collsched.verify import Violation

HYP = settings(max_examples=40, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
block = st.integers(0, 1 << 23)


@st.composite
def groups(draw):
    """1..12 ranks per group; equal blocks (8 MiB included) or a vector with zeros."""
    p, q = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    if draw(st.booleans()):
        return Groups.equal(p, q, draw(block), draw(block))
    small = st.one_of(st.just(0), st.integers(0, 64), block)
    return Groups(tuple(draw(st.lists(small, min_size=p, max_size=p))),
                  tuple(draw(st.lists(small, min_size=q, max_size=q))))


def lists_of(s: InterSchedule) -> list[list[tuple]]:
    """Per rank: (kind, peer, group, lo, hi, fifo) of each op, in list order."""
    return [[(int(s.kind[i]), int(s.peer[i]), int(s.group[i]), int(s.lo[i]), int(s.hi[i]),
              int(s.fifo[i])) for i in range(int(s.offsets[r]), int(s.offsets[r + 1]))]
            for r in range(s.nranks)]


def build(g: Groups, lists: list[list[tuple]]) -> InterSchedule:
    ops = [op for ops in lists for op in ops]
    col = (lambda j, t: np.array([op[j] for op in ops], t))
    offsets = np.zeros(len(lists) + 1, np.int64)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    return InterSchedule(groups=g, offsets=offsets, kind=col(0, np.uint8), peer=col(1, np.int32),
                         group=col(2, np.uint8), lo=col(3, np.int64), hi=col(4, np.int64),
                         fifo=col(5, np.uint8))


def checks(violations: list[Violation]) -> set[str]:
    return {v.check for v in violations}


@HYP
@given(groups(), st.sampled_from(sorted(PLANS)))
def test_every_plan_verifies_clean(g, name):
    s = from_plan(PLANS[name](g))
    assert verify(s) == []


def test_passes_are_named_in_order():
    assert PASSES == ("shape", "matching", "holding", "duplicates", "delivery", "progress")


@HYP
@given(groups(), st.sampled_from(sorted(PLANS)), st.data())
def test_dropped_op_breaks_matching(g, name, data):
    lists = lists_of(from_plan(PLANS[name](g)))
    ranks = [r for r, ops in enumerate(lists) if ops]
    assume(ranks)
    r = data.draw(st.sampled_from(ranks))
    del lists[r][data.draw(st.integers(0, len(lists[r]) - 1))]
    assert checks(verify(build(g, lists))) == {"matching"}


@HYP
@given(groups(), st.sampled_from(sorted(PLANS)), st.data())
def test_swapped_ranges_break_matching(g, name, data):
    lists = lists_of(from_plan(PLANS[name](g)))
    pairs = [(r, i, j) for r, ops in enumerate(lists) for i in range(len(ops))
             for j in range(i + 1, len(ops)) if ops[i][2:5] != ops[j][2:5]]
    assume(pairs)
    r, i, j = data.draw(st.sampled_from(pairs[:200]))
    a, b = lists[r][i], lists[r][j]
    lists[r][i], lists[r][j] = a[:2] + b[2:5] + a[5:], b[:2] + a[2:5] + b[5:]
    assert checks(verify(build(g, lists))) == {"matching"}


@HYP
@given(groups(), st.sampled_from(sorted(PLANS)), st.data())
def test_changed_peer_is_caught(g, name, data):
    lists = lists_of(from_plan(PLANS[name](g)))
    ranks = [r for r, ops in enumerate(lists) if ops]
    assume(ranks)
    r = data.draw(st.sampled_from(ranks))
    i = data.draw(st.integers(0, len(lists[r]) - 1))
    op = lists[r][i]
    new = data.draw(st.integers(0, g.nranks + 2).filter(lambda x: x != op[1]))
    lists[r][i] = (op[0], new) + op[2:]
    expected = "shape" if new >= g.nranks or new == r else "matching"
    assert checks(verify(build(g, lists))) == {expected}


@HYP
@given(groups(), st.sampled_from(sorted(PLANS)), st.data())
def test_partly_duplicate_receive_is_caught(g, name, data):
    """b_0 sends all of A to a rank of A at the end of both lists: that rank holds its own
    block already and (but for a root gathering's root) not the others, so the receive is
    partly new, partly held."""
    lists = lists_of(from_plan(PLANS[name](g)))
    gets_a = [any(op[0] == RECV and op[2] == 0 for op in lists[x]) for x in range(g.p)]
    xs = [x for x in range(g.p) if 0 < g.sizes_a[x] < g.total(0) and not gets_a[x]]
    assume(xs)
    x = data.draw(st.sampled_from(xs))
    b0 = g.rank(1, 0)
    lists[b0].append((SEND, x, 0, 0, g.total(0), 0))
    lists[x].append((RECV, b0, 0, 0, g.total(0), 0))
    found = verify(build(g, lists))
    assert checks(found) == {"duplicates"}
    assert found[0].rank == x and found[0].op == len(lists[x]) - 1


@HYP
@given(groups(), st.sampled_from(sorted(PLANS)))
def test_wholly_duplicate_receive_is_allowed(g, name):
    """Two ranks of a group, at the end of their lists, send each other the remote group's
    data again: both hold all of it already (MPICH's broadcast does this), which the rules
    allow."""
    grp = 0 if g.p >= 2 else 1
    remote = 1 - grp
    assume(g.size(grp) >= 2 and g.total(remote) > 0)
    lists = lists_of(from_plan(PLANS[name](g)))
    x, y = g.rank(grp, 0), g.rank(grp, 1)
    lists[x] += [(SEND, y, remote, 0, g.total(remote), 0), (RECV, y, remote, 0, g.total(remote), 0)]
    lists[y] += [(SEND, x, remote, 0, g.total(remote), 0), (RECV, x, remote, 0, g.total(remote), 0)]
    assert verify(build(g, lists)) == []


@st.composite
def triangle(draw):
    """A plan and a byte range Z of one group that two ranks r, s of it never hold."""
    g, name = draw(groups()), draw(st.sampled_from(sorted(PLANS)))
    s = from_plan(PLANS[name](g))
    lists = lists_of(s)
    found = []
    for grp in (0, 1):
        ranks = [g.rank(grp, i) for i in range(g.size(grp))]
        off = g.offsets(grp)
        for third in range(g.size(grp)):
            lo, hi = off[third], off[third + 1]
            if hi == lo:
                continue
            never = [r for r in ranks if r != g.rank(grp, third)
                     and not any(op[0] == RECV and op[2] == grp and op[3] < hi and lo < op[4]
                                 for op in lists[r])]
            if len(never) >= 2:
                found.append((never[0], never[1], grp, lo, hi))
    assume(found)
    return g, lists, draw(st.sampled_from(found))


@HYP
@given(triangle())
def test_deadlocked_order_is_caught(case):
    """r and s each forward Z to the other, each only after receiving it from the other:
    holding is satisfied (the receive comes first in each list) but neither walk can go on."""
    g, lists, (r, s, grp, lo, hi) = case
    lists[r] += [(RECV, s, grp, lo, hi, 0), (SEND, s, grp, lo, hi, 0)]
    lists[s] += [(RECV, r, grp, lo, hi, 0), (SEND, r, grp, lo, hi, 0)]
    found = verify(build(g, lists))
    assert checks(found) == {"progress"}
    assert {v.rank for v in found} == {r, s}


def deadlock_example(order_ok: bool) -> tuple[Groups, list[list[tuple]]]:
    """p = 1, q = 2: b_0 and b_1 swap their blocks, each forwarding the other's to a_0. In
    the bad order each forwards before sending its own block: a cycle of waits."""
    g = Groups((4,), (3, 5))
    a0, b0, b1 = 0, 1, 2

    def b_list(me, other, own, theirs):
        fwd, give = (SEND, a0, 1) + theirs + (0,), (SEND, other, 1) + own + (0,)
        return [(RECV, a0, 0, 0, 4, 0), (RECV, other, 1) + theirs + (0,)] + (
            [give, fwd] if order_ok else [fwd, give])

    lists = [[(SEND, b0, 0, 0, 4, 0), (SEND, b1, 0, 0, 4, 0), (RECV, b0, 1, 3, 8, 0),
              (RECV, b1, 1, 0, 3, 0)],
             b_list(b0, b1, (0, 3), (3, 8)), b_list(b1, b0, (3, 8), (0, 3))]
    return g, lists


def test_deadlock_example():
    g, good = deadlock_example(True)
    assert verify(build(g, good)) == []
    g, bad = deadlock_example(False)
    found = verify(build(g, bad))
    assert [(v.check, v.rank, v.op) for v in found] == [("progress", 1, 2), ("progress", 2, 2)]
    assert "deadlock" in str(found[0]) and "rank 2" in str(found[0])


def test_a_send_does_not_wait_for_duplicates():
    """b_0 and b_1 each get A from a_0, then again from each other (duplicates), and each
    sends it on to the other after the duplicate in its list: a send waits for the new
    receive only (as the runtime derives it), so the walks finish; were duplicates waited
    for, each would wait for the other."""
    g = Groups((4,), (2, 2))
    a0, b0, b1 = 0, 1, 2
    lists = [[(SEND, b0, 0, 0, 4, 0), (SEND, b1, 0, 0, 4, 0), (RECV, b0, 1, 0, 2, 0),
              (RECV, b1, 1, 2, 4, 0)],
             [(RECV, a0, 0, 0, 4, 0), (RECV, b1, 0, 0, 4, 0), (SEND, b1, 0, 0, 4, 0),
              (SEND, a0, 1, 0, 2, 0)],
             [(RECV, a0, 0, 0, 4, 0), (RECV, b0, 0, 0, 4, 0), (SEND, b0, 0, 0, 4, 0),
              (SEND, a0, 1, 2, 4, 0)]]
    assert verify(build(g, lists)) == []
    # Without the new receive the forward is not held.
    lists[1][0] = (RECV, a0, 0, 0, 3, 0)
    lists[0][0] = (SEND, b0, 0, 0, 3, 0)
    assert checks(verify(build(g, lists))) == {"duplicates"}  # A[0, 4) from b_1: partly new


def fifo_example(fifo: int) -> tuple[Groups, list[list[tuple]]]:
    """b_1 sends B[2, 3) and B[3, 4) to b_0 (the second FIFO or not), then B[2, 4) to a_0;
    a_0 forwards it to b_0, which forwards it to b_1 (a duplicate there) before posting its
    receives from b_1."""
    g = Groups((2,), (2, 2))
    a0, b0, b1 = 0, 1, 2
    lists = [[(SEND, b0, 0, 0, 2, 0), (SEND, b1, 0, 0, 2, 0), (RECV, b1, 1, 2, 4, 0),
              (SEND, b0, 1, 2, 4, 0), (RECV, b0, 1, 0, 2, 0)],
             [(RECV, a0, 0, 0, 2, 0), (RECV, a0, 1, 2, 4, 0), (SEND, b1, 1, 2, 4, 0),
              (RECV, b1, 1, 2, 3, 0), (RECV, b1, 1, 3, 4, 0), (SEND, a0, 1, 0, 2, 0)],
             [(SEND, b0, 1, 2, 3, 0), (SEND, b0, 1, 3, 4, fifo), (SEND, a0, 1, 2, 4, 0),
              (RECV, a0, 0, 0, 2, 0), (RECV, b0, 1, 2, 4, 0)]]
    return g, lists


def test_fifo_wait_deadlock():
    """With FIFO, b_1's second send waits for b_0 to post the first message's receive,
    which b_0 reaches only after forwarding what b_1 sends after that second send."""
    g, lists = fifo_example(0)
    assert verify(build(g, lists)) == []
    g, lists = fifo_example(1)
    found = verify(build(g, lists))
    assert [(v.check, v.rank, v.op) for v in found] == [
        ("progress", 0, 3), ("progress", 1, 2), ("progress", 2, 1)]
    assert "previous message" in found[2].reason
    lists[1][3] = (RECV, 2, 1, 2, 3, 1)  # FIFO on a receive
    assert [(v.check, v.rank, v.op) for v in verify(build(g, lists))] == [("shape", 1, 3)]


@pytest.mark.parametrize("mutate, check", [
    (lambda L: L[0].pop(), "matching"),
    (lambda L: L.__setitem__(1, [(SEND, 0, 1, 0, 3, 0)]), "delivery"),
])
def test_small_mutations(mutate, check):
    g = Groups((4,), (3,))
    lists = [[(SEND, 1, 0, 0, 4, 0), (RECV, 1, 1, 0, 3, 0)],
             [(RECV, 0, 0, 0, 4, 0), (SEND, 0, 1, 0, 3, 0)]]
    assert verify(build(g, lists)) == []
    if check == "delivery":  # b_0 drops its receive and a_0 its send: b_0 misses A
        lists[0] = [(RECV, 1, 1, 0, 3, 0)]
    mutate(lists)
    assert checks(verify(build(g, lists))) == {check}


def test_send_of_bytes_not_held():
    g = Groups((4, 4), (3,))
    lists = [[(SEND, 2, 0, 0, 8, 0), (RECV, 2, 1, 0, 3, 0)],   # a_0 sends a_1's block too
             [(RECV, 2, 1, 0, 3, 0)],
             [(RECV, 0, 0, 0, 8, 0), (SEND, 0, 1, 0, 3, 0), (SEND, 1, 1, 0, 3, 0)]]
    found = verify(build(g, lists))
    assert [(v.check, v.rank, v.op) for v in found] == [("holding", 0, 0)]
    assert "[4, 8)" in found[0].reason


def test_shape_violations_name_the_field():
    g = Groups((4,), (3,))
    good = [[(SEND, 1, 0, 0, 4, 0), (RECV, 1, 1, 0, 3, 0)],
            [(RECV, 0, 0, 0, 4, 0), (SEND, 0, 1, 0, 3, 0)]]
    for r, i, op, word in [(0, 0, (SEND, 0, 0, 0, 4, 0), "itself"),
                           (0, 0, (SEND, 5, 0, 0, 4, 0), "out of range"),
                           (0, 0, (SEND, 1, 2, 0, 4, 0), "group"),
                           (0, 0, (SEND, 1, 0, 0, 5, 0), "outside"),
                           (0, 0, (SEND, 1, 0, 2, 2, 0), "empty"),
                           (0, 0, (7, 1, 0, 0, 4, 0), "kind"),
                           (0, 1, (RECV, 1, 1, 0, 3, 1), "FIFO")]:
        lists = [list(x) for x in good]
        lists[r][i] = op
        found = verify(build(g, lists))
        assert [(v.check, v.rank, v.op) for v in found] == [("shape", r, i)], word
        assert word in found[0].reason
    s = build(g, good)
    s.offsets = np.array([0, 3, 4], np.int64)
    assert [v.check for v in verify(s)] == ["shape"]


def test_large_blocks_cost_what_small_ones_do():
    """Interval arithmetic: 8 MiB blocks verify as fast as 8-byte ones (same op count; a
    walk over bytes would take minutes). Best of three runs, against a loaded machine."""
    import time

    times = []
    for k in (8, 8 << 20):
        s = from_plan(PLANS["kang-v"](Groups.equal(24, 9, k, k)))
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            assert verify(s) == []
            best = min(best, time.perf_counter() - t)
        times.append(best)
    assert times[1] < 5 * times[0] + 0.2
