"""Mutation tests: each kind of broken schedule is rejected with the right reason."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from collsched.algorithms import Request, generate
from collsched.ir import from_op_lists, to_op_lists
from collsched.verify import (_Ctx, check_holding, check_matching, check_progress, check_shape,
                              check_wide_area, verify)


def ring_lists(p=5, nseg=1):
    return to_op_lists(generate("ring", Request(p, nseg=nseg)))


def rebuild(lists, p=5, nseg=1):
    return from_op_lists(p, nseg, lists)


def one(violations, check):
    assert violations, "expected the schedule to be rejected"
    assert violations[0].check == check, [str(v) for v in violations]
    return violations[0]


def test_baseline_is_valid():
    assert verify(rebuild(ring_lists())) == []


def test_dropped_recv():
    lists = ring_lists()
    i = next(i for i, op in enumerate(lists[2]) if op[0] == "recv")
    del lists[2][i]
    v = one(verify(rebuild(lists)), "matching")
    assert "no matching recv" in v.reason and v.rank == 1


def test_swapped_order_of_two_recvs():
    lists = ring_lists()
    recvs = [i for i, op in enumerate(lists[3]) if op[0] == "recv"]
    a, b = recvs[1], recvs[2]
    lists[3][a], lists[3][b] = lists[3][b], lists[3][a]
    v = one(verify(rebuild(lists)), "matching")
    assert v.rank == 3 and "expects piece" in v.reason


RELAY = [  # rank 1 relays: it forwards rank 2's block to 0 and rank 0's block to 2
    [("send", 1, 0, 0), ("recv", 1, 1, 0), ("recv", 1, 2, 0)],
    [("recv", 0, 0, 0), ("send", 0, 1, 0), ("recv", 2, 2, 0), ("send", 0, 2, 0),
     ("send", 2, 0, 0), ("send", 2, 1, 0)],
    [("send", 1, 2, 0), ("recv", 1, 0, 0), ("recv", 1, 1, 0)],
]


def test_forward_before_receive():
    lists = [list(ops) for ops in RELAY]
    assert verify(from_op_lists(3, 1, lists)) == []
    lists[1][2], lists[1][3] = lists[1][3], lists[1][2]  # forward (2) before receiving it
    v = one(verify(from_op_lists(3, 1, lists)), "holding")
    assert (v.rank, v.op) == (1, 2) and "before holding it" in v.reason


def test_duplicate_delivery():
    p = 5
    lists = ring_lists(p)
    # Last step: rank 1 -> rank 2 carries a piece rank 2 does not forward; make it rank 1's
    # own block instead, which rank 2 already received in step 0.
    send_i = max(i for i, op in enumerate(lists[1]) if op[0] == "send")
    recv_i = max(i for i, op in enumerate(lists[2]) if op[0] == "recv")
    lists[1][send_i] = ("send", 2, 1, 0, "fg")
    lists[2][recv_i] = ("recv", 1, 1, 0, "fg")
    vs = verify(rebuild(lists, p))
    v = one(vs, "delivery")
    assert v.rank == 2 and "a second time" in v.reason
    assert any("never receives" in x.reason for x in vs)


def test_receiving_own_piece():
    lists = [[("recv", 1, 0, 0)], [("send", 0, 0, 0)]]
    v = one(verify(from_op_lists(2, 1, lists)), "holding")
    assert "own piece" in v.reason


def test_shape_errors():
    v = one(verify(from_op_lists(2, 1, [[("send", 0, 0, 0)], [("recv", 0, 0, 0)]])), "shape")
    assert "peer is the rank itself" in v.reason
    v = one(verify(from_op_lists(2, 1, [[("send", 1, 0, 3)], [("recv", 0, 0, 3)]])), "shape")
    assert "segment out of range" in v.reason
    bg_after_fg = [[("send", 1, 0, 0, "fg"), ("recv", 1, 1, 0, "bg")], [("recv", 0, 0, 0), ("send", 0, 1, 0)]]
    v = one(verify(from_op_lists(2, 1, bg_after_fg)), "shape")
    assert "background op after a foreground op" in v.reason


DEADLOCK = [
    [("send", 1, 0, 0), ("recv", 1, 3, 0)],
    [("recv", 0, 0, 0), ("recv", 2, 3, 0), ("send", 0, 3, 0), ("send", 2, 0, 0)],
    [("recv", 3, 3, 0), ("recv", 1, 0, 0), ("send", 3, 0, 0), ("send", 1, 3, 0)],
    [("send", 2, 3, 0), ("recv", 2, 0, 0)],
]


def progress_of(lists):
    c = _Ctx(from_op_lists(4, 1, lists))
    assert not (check_shape(c) or check_matching(c) or check_holding(c))
    return check_progress(c)


def test_deadlock_detected():
    v = one(progress_of(DEADLOCK), "progress")
    assert "deadlock" in v.reason and v.rank in (1, 2)


def test_same_ops_reordered_make_progress():
    fixed = [list(ops) for ops in DEADLOCK]
    fixed[1][2], fixed[1][3] = fixed[1][3], fixed[1][2]  # rank 1 forwards piece 0 first
    assert progress_of(fixed) == []


def test_wide_area_rejects_second_crossing():
    # Two sites {0,1} and {2,3}: spreading sends rank 0's block into site B twice.
    s = generate("spreading", Request(4))
    v = one(check_wide_area(_Ctx(s), [np.array([0, 0, 1, 1])]), "wide-area")
    assert "a second time" in v.reason


def test_violation_names_rank_and_op():
    lists = ring_lists()
    del lists[2][0]
    text = str(verify(rebuild(lists))[0])
    assert text.startswith("rank ") and ", op " in text and "[matching]" in text


# Both ranks send twice before receiving: fine if sends never wait, but under FIFO per link
# the second send waits until the peer has posted the receive of the first, which comes
# after the peer's own second send.
SENDS_FIRST = [  # (kind, peer, origin, segment, phase, FIFO)
    [("send", 1, 0, 0, "fg", 1), ("send", 1, 0, 1, "fg", 1), ("recv", 1, 1, 0), ("recv", 1, 1, 1)],
    [("send", 0, 1, 0, "fg", 1), ("send", 0, 1, 1, "fg", 1), ("recv", 0, 0, 0), ("recv", 0, 0, 1)],
]


def test_fifo_per_link_deadlock_detected():
    v = one(verify(from_op_lists(2, 2, SENDS_FIRST)), "progress")
    assert v.op == 1 and "the receive of the previous message" in v.reason


def test_same_lists_without_fifo_make_progress():
    unmarked = [[op[:4] for op in ops] for ops in SENDS_FIRST]
    assert verify(from_op_lists(2, 2, unmarked)) == []


def test_receiving_first_makes_fifo_progress():
    fixed = [ops[2:] + ops[:2] for ops in SENDS_FIRST]
    assert verify(from_op_lists(2, 2, fixed)) == []


def test_fifo_flag_on_a_recv_is_a_shape_error():
    lists = [[("send", 1, 0, 0), ("recv", 1, 1, 0, "fg", 1)], [("recv", 0, 0, 0), ("send", 0, 1, 0)]]
    assert "FIFO flag on a recv" in one(verify(from_op_lists(2, 1, lists)), "shape").reason


@pytest.mark.parametrize("levels", [
    [np.array([0, 0, 1, 1]), np.array([0, 1, 2, 3])],  # nested: the finest level filters
    [np.array([0, 0, 0, 0]), np.array([0, 0, 1, 1])],
    [np.array([0, 0, 1, 1]), np.array([0, 1, 1, 0])],  # not nested: every level in full
    [np.array([0, 1, 1, 0]), np.array([0, 0, 1, 1])],
])
def test_wide_area_levels_nested_or_not(levels):
    """A second crossing at a coarse level is found whether or not the levels are nested
    (nested ones are checked on the transfers that cross the finest level only)."""
    s = generate("spreading", Request(4))
    found = {v.reason for v in check_wide_area(_Ctx(s), levels)}
    assert found
    for level, pool in enumerate(levels):
        alone = {v.reason.replace("(level 0)", f"(level {level})")
                 for v in check_wide_area(_Ctx(s), [pool])}
        assert alone <= found


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.integers(0, 40), max_size=30), queries=st.lists(st.integers(0, 40), max_size=20))
def test_first_receipt_by_table_and_by_sort_agree(keys, queries):
    from collsched.verify import _first_receipt

    recvs = np.arange(0, 3 * len(keys), 3, dtype=np.int64)  # ascending op indices
    rkey, fkey = np.array(keys, np.int64), np.array(queries, np.int64)
    table = _first_receipt(recvs, rkey, fkey, 41)  # small key space: the table (if no key twice)
    by_sort = _first_receipt(recvs, rkey, fkey, 10**9)  # too many keys for a table: sorted
    first = {}
    for op, k in zip(recvs.tolist(), keys):
        first.setdefault(k, op)
    assert table.tolist() == by_sort.tolist() == [first.get(q, -1) for q in queries]
