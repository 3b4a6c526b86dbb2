"""The verifier of collectives beyond allgather (collectives/verify.py): hand-built good
programs of every collective pass; every kind of mutation is caught by the right pass at
the right rank and op."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched.collectives.program import (RECV, RECV_REDUCE, SEND, Builder, Op, Piece,
                                           from_op_lists)
from collsched.collectives.verify import (VerificationFailed, check, order_preserving,
                                          verify)

# --- good programs, built here (independent of the algorithm modules) ----------------------


def alltoall_ring(P: int, nseg: int = 1, split: bool = False):
    b = Builder("alltoall", P, nseg, algorithm="ring")
    for k in range(1, P):
        for r in range(P):
            d = (r + k) % P
            if split:
                for g in range(nseg):
                    b.add(k, r, d, [(r, d, g)])
            else:
                b.add(k, r, d, [(r, d, g) for g in range(nseg)])
    return b.build()


def alltoall_relay(P: int, nseg: int = 1):
    """Every block from s to d (s, d != 0) goes through rank 0; rank 0's own go direct."""
    b = Builder("alltoall", P, nseg, algorithm="relay")
    for s in range(1, P):
        b.add(0, s, 0, [(s, d, g) for d in range(P) if d != s for g in range(nseg)])
    for d in range(1, P):
        b.add(1, 0, d, [(s, d, g) for s in range(P) if s != d for g in range(nseg)])
    return b.build()


def bcast_chain(P: int, nseg: int = 1, root: int = 0):
    """A pipelined chain root -> root+1 -> ...: segment g leaves position i at step i + g."""
    b = Builder("bcast", P, nseg, root=root, algorithm="chain")
    for i in range(P - 1):
        for g in range(nseg):
            b.add(i + g, (root + i) % P, (root + i + 1) % P, [(0, 0, g)])
    return b.build()


def bcast_binomial(P: int, nseg: int = 1, root: int = 0):
    b = Builder("bcast", P, nseg, root=root, algorithm="binomial")
    step, have = 0, 1
    while have < P:
        for v in range(have):
            if v + have < P:
                b.add(step, (v + root) % P, (v + have + root) % P, [(0, 0, g) for g in range(nseg)])
        have *= 2
        step += 1
    return b.build()


def reduce_chain(P: int, nseg: int = 1, root: int = 0):
    """Ordered: ranks above the root pass down (acc (op) in at the receiver), ranks below
    pass up (in (op) acc)."""
    b = Builder("reduce", P, nseg, root=root, algorithm="chain")
    for g in range(nseg):
        for i in range(P - 1, root, -1):  # i -> i - 1
            b.add(P - 1 - i + g, i, i - 1, [(0, 0, g)], reduce=True, local_first=True)
        for i in range(0, root):  # i -> i + 1
            b.add(i + g, i, i + 1, [(0, 0, g)], reduce=True)
    return b.build()


def allreduce_rd(P: int, nseg: int = 1):
    """Recursive doubling (P a power of two): ordered. Written per rank: in an exchange
    each rank sends its value before it receives the partner's (Builder puts a step's
    receives first, which would make the send wait for the receive: a deadlock)."""
    segs = [(0, 0, g) for g in range(nseg)]
    lists = [[] for _ in range(P)]
    k = 0
    while (1 << k) < P:
        for r in range(P):
            q = r ^ (1 << k)
            lists[r] += [("send", q, segs), ("recv-reduce", q, segs, *(("local-first",) if q > r else ()))]
        k += 1
    return from_op_lists("allreduce", P, nseg, lists, algorithm="rd")


def allreduce_ring(P: int):
    """Reduce-scatter then allgather on a ring, segment s of P ends complete at rank s:
    wraps around the ring, so not MPI's order: commutative_only."""
    b = Builder("allreduce", P, P, algorithm="ring")
    for t in range(P - 1):
        for r in range(P):
            s = (r - t - 1) % P
            b.add(t, r, (r + 1) % P, [(0, 0, s)], reduce=True)
    for t in range(P - 1):
        for r in range(P):
            s = (r - t) % P
            b.add(P - 1 + t, r, (r + 1) % P, [(0, 0, s)])
    prog = b.build()
    prog.commutative_only = True
    return prog


GOOD = {
    "alltoall_ring": lambda P, n: alltoall_ring(P, n),
    "alltoall_ring_split": lambda P, n: alltoall_ring(P, n, split=True),
    "alltoall_relay": alltoall_relay,
    "bcast_chain": lambda P, n: bcast_chain(P, n, root=P // 2),
    "bcast_binomial": lambda P, n: bcast_binomial(P, n, root=P - 1),
    "reduce_chain": lambda P, n: reduce_chain(P, n, root=P // 2),
    "allreduce_rd": lambda P, n: allreduce_rd(1 << (P.bit_length() - 1), n),
    "allreduce_ring": lambda P, n: allreduce_ring(P),
}


def names(prog):
    return {(v.check, v.rank, v.op) for v in verify(prog)}


@pytest.mark.parametrize("name", sorted(GOOD))
@pytest.mark.parametrize("P", [1, 2, 3, 5, 8])
def test_good_programs_pass(name, P):
    for nseg in (1, 3):
        prog = GOOD[name](P, nseg)
        assert verify(prog) == [], (name, P, nseg, verify(prog)[:3])
        check(prog)


def test_order_preserving_flags():
    assert order_preserving(reduce_chain(6, 2, root=3))
    assert order_preserving(allreduce_rd(8))
    assert order_preserving(alltoall_ring(4))
    ring = allreduce_ring(5)
    assert not order_preserving(ring)
    ring.commutative_only = False
    found = verify(ring)
    assert found and {v.check for v in found} == {"order"}
    assert "commutative_only" in found[0].reason


# --- mutations -----------------------------------------------------------------------------


def mutate(prog, rank, fn):
    ops = [list(lst) for lst in prog.ops]
    fn(ops[rank])
    return dataclasses.replace(prog, ops=ops)


def with_ops(prog, ops):
    return dataclasses.replace(prog, ops=[list(lst) for lst in ops])


def all_ops(prog):
    return [(r, i, op) for r, lst in enumerate(prog.ops) for i, op in enumerate(lst)]


programs = st.sampled_from(sorted(GOOD)).flatmap(
    lambda n: st.tuples(st.just(n), st.integers(2, 7), st.integers(1, 3)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs, st.data())
def test_dropped_send_is_a_matching_violation_at_its_peer(case, data):
    name, P, nseg = case
    prog = GOOD[name](P, nseg)
    sends = [(r, i, op) for r, i, op in all_ops(prog) if op.kind == SEND]
    r, i, op = data.draw(st.sampled_from(sends))
    bad = mutate(prog, r, lambda lst: lst.pop(i))
    found = verify(bad)
    assert found and all(v.check == "matching" for v in found)
    # the peer's receives from r lost their partner: the last one has none
    assert any(v.rank == op.peer and bad.ops[v.rank][v.op].peer == r for v in found)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs, st.data())
def test_dropped_recv_is_a_matching_violation(case, data):
    name, P, nseg = case
    prog = GOOD[name](P, nseg)
    recvs = [(r, i, op) for r, i, op in all_ops(prog) if op.kind != SEND]
    r, i, op = data.draw(st.sampled_from(recvs))
    found = verify(mutate(prog, r, lambda lst: lst.pop(i)))
    assert found and all(v.check == "matching" for v in found)
    assert any(v.rank == op.peer for v in found)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs, st.data())
def test_dropped_transfer_is_caught(case, data):
    """Both ends of one transfer dropped: the data never arrives (or a relay forwards what
    it never got, or a reduction misses a contribution)."""
    name, P, nseg = case
    prog = GOOD[name](P, nseg)
    sends = [(r, i, op) for r, i, op in all_ops(prog) if op.kind == SEND and op.pieces]
    r, i, op = data.draw(st.sampled_from(sends))
    k = sum(1 for o in prog.ops[r][:i] if o.kind == SEND and o.peer == op.peer)
    peer_recvs = [j for j, o in enumerate(prog.ops[op.peer]) if o.kind != SEND and o.peer == r]
    j = peer_recvs[k]
    ops = [list(lst) for lst in prog.ops]
    ops[r].pop(i)
    ops[op.peer].pop(j)
    found = verify(with_ops(prog, ops))
    assert found
    assert found[0].check in ("holding", "delivery"), found[0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs, st.data())
def test_swapped_pieces_in_a_message_break_matching(case, data):
    name, P, nseg = case
    prog = GOOD[name](P, nseg)
    multi = [(r, i, op) for r, i, op in all_ops(prog) if op.kind == SEND and len(set(op.pieces)) > 1]
    if not multi:
        return
    r, i, op = data.draw(st.sampled_from(multi))
    pieces = list(op.pieces)
    pieces[0], pieces[-1] = pieces[-1], pieces[0]
    bad = mutate(prog, r, lambda lst: lst.__setitem__(i, dataclasses.replace(op, pieces=tuple(pieces))))
    found = verify(bad)
    assert [v.check for v in found] == ["matching"]
    assert found[0].rank == op.peer and bad.ops[op.peer][found[0].op].peer == r


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["alltoall_ring", "alltoall_ring_split", "alltoall_relay", "bcast_chain",
                        "bcast_binomial"]), st.integers(2, 7), st.integers(2, 3), st.data())
def test_piece_renamed_at_both_ends_is_a_delivery_or_holding_violation(name, P, nseg, data):
    prog = GOOD[name](P, nseg)
    sends = [(r, i, op) for r, i, op in all_ops(prog) if op.kind == SEND and op.pieces]
    r, i, op = data.draw(st.sampled_from(sends))
    k = sum(1 for o in prog.ops[r][:i] if o.kind == SEND and o.peer == op.peer)
    j = [j for j, o in enumerate(prog.ops[op.peer]) if o.kind != SEND and o.peer == r][k]
    p = op.pieces[0]
    other = Piece(p.src, p.dst, (p.seg + 1) % nseg)
    pieces = (other,) + op.pieces[1:]
    ops = [list(lst) for lst in prog.ops]
    ops[r][i] = dataclasses.replace(op, pieces=pieces)
    ops[op.peer][j] = dataclasses.replace(ops[op.peer][j], pieces=pieces)
    found = verify(with_ops(prog, ops))
    assert found and found[0].check in ("holding", "delivery")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["reduce_chain", "allreduce_rd", "allreduce_ring"]), st.integers(2, 7),
       st.integers(1, 3), st.data())
def test_duplicated_reduce_is_a_doubled_contribution_at_the_copy(name, P, nseg, data):
    prog = GOOD[name](P, nseg)
    reds = [(r, i, op) for r, i, op in all_ops(prog) if op.kind == RECV_REDUCE]
    r, j, rop = data.draw(st.sampled_from(reds))
    k = sum(1 for o in prog.ops[r][:j] if o.kind != SEND and o.peer == rop.peer)
    src = rop.peer
    i = [i for i, o in enumerate(prog.ops[src]) if o.kind == SEND and o.peer == r][k]
    ops = [list(lst) for lst in prog.ops]
    ops[src].insert(i + 1, ops[src][i])
    ops[r].insert(j + 1, rop)
    found = verify(with_ops(prog, ops))
    assert found and found[0].check == "delivery"
    assert ("delivery", r, j + 1) in {(v.check, v.rank, v.op) for v in found}
    assert "doubled" in [v for v in found if (v.rank, v.op) == (r, j + 1)][0].reason


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["reduce_chain", "allreduce_rd"]), st.integers(2, 7), st.integers(1, 3),
       st.data())
def test_wrong_order_needs_the_commutative_flag(name, P, nseg, data):
    prog = GOOD[name](P, nseg)
    reds = [(r, i, op) for r, i, op in all_ops(prog) if op.kind == RECV_REDUCE]
    r, i, op = data.draw(st.sampled_from(reds))
    bad = mutate(prog, r, lambda lst: lst.__setitem__(i, dataclasses.replace(op, local_first=not op.local_first)))
    found = verify(bad)
    assert found and {v.check for v in found} == {"order"}
    assert (r, i) in {(v.rank, v.op) for v in found}
    assert not order_preserving(bad)
    bad.commutative_only = True
    assert verify(bad) == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs, st.data())
def test_fence_cycle_deadlocks(case, data):
    """Two ranks each start with a receive from the other and a fenced sync send to it."""
    name, P, nseg = case
    prog = GOOD[name](P, nseg)
    a, b = data.draw(st.sampled_from([(a, b) for a in range(prog.nranks) for b in range(prog.nranks) if a < b]))
    ops = [list(lst) for lst in prog.ops]
    ops[a][:0] = [Op(RECV, b, ()), Op(SEND, b, (), fence=True)]
    ops[b][:0] = [Op(RECV, a, ()), Op(SEND, a, (), fence=True)]
    found = verify(with_ops(prog, ops))
    assert found and {v.check for v in found} == {"progress"}
    assert {(a, 1), (b, 1)} <= {(v.rank, v.op) for v in found}
    assert "deadlock" in found[0].reason


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["reduce_chain", "allreduce_rd", "allreduce_ring"]), st.integers(2, 7),
       st.data())
def test_data_dependency_cycle_deadlocks(name, P, data):
    """Each of two ranks forwards (after its receive) what it receives from the other."""
    prog = GOOD[name](P, 1)
    a, b = data.draw(st.sampled_from([(a, b) for a in range(prog.nranks) for b in range(prog.nranks) if a < b]))
    ops = [list(lst) for lst in prog.ops]
    x = (Piece(0, 0, 0),)
    ops[a][:0] = [Op(RECV, b, x), Op(SEND, b, x)]
    ops[b][:0] = [Op(RECV, a, x), Op(SEND, a, x)]
    found = verify(with_ops(prog, ops))
    assert found and {v.check for v in found} == {"progress"}
    assert {(a, 1), (b, 1)} <= {(v.rank, v.op) for v in found}


def _fifo_program(fifo: bool):
    """Rank 0 (the root) sends a sync then the data to rank 1, then the data to rank 2;
    rank 1 posts the sync's receive behind a fence on a sync from rank 2, which rank 2
    sends (fenced) once it holds the data."""
    x = [(0, 0, 0)]
    f = ("fifo",) if fifo else ()
    lists = [
        [("send", 1, [], *f), ("send", 1, x, *f), ("send", 2, x)],
        [("recv", 2, []), ("recv", 0, [], "fence"), ("recv", 0, x)],
        [("recv", 0, x), ("send", 1, [], "fence")],
    ]
    return from_op_lists("bcast", 3, 1, lists)


def test_fifo_send_waits_for_the_posted_receive():
    """Conservative completion: rank 0's second FIFO send waits until rank 1 posted the
    first's receive, which waits (a cycle) for the data that send carries."""
    assert verify(_fifo_program(False)) == []
    found = verify(_fifo_program(True))
    assert found and {v.check for v in found} == {"progress"}
    assert {(v.rank, v.op) for v in found} == {(0, 1), (1, 1), (2, 1)}
    assert all("deadlock" in v.reason for v in found)


def chain_program(chain: bool):
    """Alltoall, P = 3: rank 1 posts its receive from 0 behind a fence on the block from 2,
    which rank 2 sends (fenced) once it holds rank 0's block. Rank 0's send to 2, chained,
    waits for its send to 1 to complete: a cycle (a deadlock) only with the chain."""
    c = ("chain",) if chain else ()
    lists = [
        [("send", 1, [(0, 1, 0)]), ("send", 2, [(0, 2, 0)], *c), ("recv", 1, [(1, 0, 0)]),
         ("recv", 2, [(2, 0, 0)])],
        [("recv", 2, [(2, 1, 0)]), ("recv", 0, [(0, 1, 0)], "fence"), ("send", 0, [(1, 0, 0)]),
         ("send", 2, [(1, 2, 0)])],
        [("recv", 0, [(0, 2, 0)]), ("send", 1, [(2, 1, 0)], "fence"), ("send", 0, [(2, 0, 0)]),
         ("recv", 1, [(1, 2, 0)])],
    ]
    return from_op_lists("alltoall", 3, 1, lists)


def test_chained_send_waits_for_the_previous_send_to_complete():
    assert verify(chain_program(False)) == []
    found = verify(chain_program(True))
    assert found and {v.check for v in found} == {"progress"}
    first = found[0]
    assert (first.rank, first.op) == (0, 1)
    assert first.reason == ("deadlock: send to/from 2 is never issued: waits for rank 1 to post "
                            "its receive (op 1)")
    assert str(chain_program(True).ops[0][1]).endswith(" chain")


def test_chain_on_the_first_send_or_after_completed_sends_is_harmless():
    ring = alltoall_ring(4)
    chained = with_ops(ring, [[dataclasses.replace(o, chain=o.kind == SEND) for o in lst]
                              for lst in ring.ops])
    assert verify(chained) == []  # every send waits for the previous: still no cycle


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(P=st.integers(2, 5), data=st.data())
def test_verify_verdict_on_random_chains_matches_a_rendezvous_run(P, data):
    """Random chain and fence flags on a ring alltoall: verify() finds a deadlock exactly
    when a run with rendezvous sends (a send completes once its receive is posted: the
    verifier's conservative completion) cannot finish, whatever the interleaving."""
    import random

    ring = alltoall_ring(P)
    ops = []
    for lst in ring.ops:
        row = []
        for o in lst:
            flags = data.draw(st.tuples(st.booleans(), st.booleans()))
            row.append(dataclasses.replace(o, chain=flags[0] and o.kind == SEND, fence=flags[1]))
        ops.append(row)
    prog = with_ops(ring, ops)
    found = verify(prog)
    assert not found or {v.check for v in found} == {"progress"}
    rng = random.Random(data.draw(st.integers(0, 1 << 20)))
    assert execute(prog, rng, eager=0.0)[0] == (not found)


@pytest.mark.parametrize("field,value,needle", [
    ("collective", "gather", "collective"), ("nseg", 0, "nseg"), ("root", 9, "root"),
])
def test_program_shape(field, value, needle):
    prog = dataclasses.replace(reduce_chain(4), **{field: value})
    found = verify(prog)
    assert found and found[0].check == "shape" and needle in found[0].reason


@pytest.mark.parametrize("op,needle", [
    (Op(7, 1, ()), "kind"),
    (Op(SEND, 0, ()), "itself"),
    (Op(SEND, 4, ()), "peer"),
    (Op(SEND, 1, ((0, 0, 3),)), "segment"),
    (Op(SEND, 1, ((1, 0, 0),)), "src = dst = 0"),
    (Op(RECV, 1, (), fifo=True), "FIFO"),
    (Op(RECV, 1, (), local_first=True), "local-first"),
    (Op(RECV, 1, (), chain=True), "chain flag on a receive"),
    (Op(RECV_REDUCE, 1, (), chain=True), "chain flag on a receive"),
    (Op(SEND, 1, ((0, 0),)), "three integers"),
])
def test_op_shape(op, needle):
    prog = reduce_chain(4)
    bad = mutate(prog, 0, lambda lst: lst.insert(0, op))
    found = verify(bad)
    assert found and found[0].check == "shape" and (found[0].rank, found[0].op) == (0, 0)
    assert needle in found[0].reason


def test_recv_reduce_only_in_reductions_and_alltoall_ranges():
    prog = alltoall_ring(3)
    bad = mutate(prog, 1, lambda lst: lst.append(Op(RECV_REDUCE, 0, ())))
    assert "recv-reduce" in verify(bad)[0].reason
    bad = mutate(prog, 1, lambda lst: lst.append(Op(SEND, 0, ((3, 0, 0),))))
    assert "src and dst" in verify(bad)[0].reason


def test_holding_and_delivery_named():
    # rank 1 forwards rank 2's block for rank 0 before receiving it
    prog = from_op_lists("alltoall", 3, 1, [
        [("send", 1, [(0, 1, 0)]), ("send", 2, [(0, 2, 0)]), ("recv", 1, [(1, 0, 0)]),
         ("recv", 1, [(2, 0, 0)])],
        [("recv", 0, [(0, 1, 0)]), ("send", 0, [(1, 0, 0)]), ("send", 0, [(2, 0, 0)]),
         ("send", 2, [(1, 2, 0)]), ("recv", 2, [(2, 1, 0)]), ("recv", 2, [(2, 0, 0)])],
        [("recv", 0, [(0, 2, 0)]), ("recv", 1, [(1, 2, 0)]), ("send", 1, [(2, 1, 0)]),
         ("send", 1, [(2, 0, 0)])],
    ])
    found = verify(prog)
    assert [(v.check, v.rank, v.op) for v in found] == [("holding", 1, 2)]
    # a bcast root that receives, a rank that receives twice, one that never does
    prog = from_op_lists("bcast", 3, 1, [
        [("send", 1, [(0, 0, 0)]), ("recv", 1, [(0, 0, 0)])],
        [("recv", 0, [(0, 0, 0)]), ("send", 0, [(0, 0, 0)])],
        [],
    ])
    found = verify(prog)
    assert [(v.check, v.rank, v.op) for v in found] == [("delivery", 0, 1), ("delivery", 2, None)]


def test_missing_contribution_named():
    prog = reduce_chain(4, root=0)
    ops = [list(lst) for lst in prog.ops]
    # rank 1 overwrites instead of combining: its own contribution is lost
    i = next(i for i, o in enumerate(ops[1]) if o.kind == RECV_REDUCE)
    ops[1][i] = dataclasses.replace(ops[1][i], kind=RECV, local_first=False)
    found = verify(with_ops(prog, ops))
    assert [(v.check, v.rank, v.op) for v in found] == [("delivery", 0, None)]
    assert "rank 1" in found[0].reason


def test_check_raises_with_the_first_violation():
    prog = mutate(reduce_chain(3), 0, lambda lst: lst.insert(0, Op(SEND, 0, ())))
    with pytest.raises(VerificationFailed, match="peer is the rank itself"):
        check(prog)


def test_order_preserving_needs_a_valid_program():
    prog = mutate(reduce_chain(3), 0, lambda lst: lst.insert(0, Op(SEND, 1, ())))
    assert not order_preserving(prog)


# --- an independent check: concrete executions of verified programs ------------------------


def execute(prog, rng, eager: float = 0.5):
    """Run `prog` once under the rules, with concrete values and a random interleaving
    (a non-FIFO send completes eagerly with probability `eager`, else once the peer
    posted the receive). Reductions use a non-commutative operation: tuple concatenation,
    `in (op) acc` = in + acc, local-first acc + in. Returns each rank's final holdings
    (alltoall, bcast: the set of pieces; reductions: the accumulator per segment)."""
    P, ops = prog.nranks, prog.ops
    match = {}
    for a in range(P):
        for b in range(P):
            s = [i for i, o in enumerate(ops[a]) if o.kind == SEND and o.peer == b]
            r = [i for i, o in enumerate(ops[b]) if o.kind != SEND and o.peer == a]
            assert len(s) == len(r)
            for i, j in zip(s, r):
                match[(a, i)], match[(b, j)] = (b, j), (a, i)
    reducing = prog.collective in ("reduce", "allreduce")
    if reducing:
        hold = [[(r,)] * prog.nseg for r in range(P)]
    else:
        hold = [set() for _ in range(P)]
    walk = [0] * P
    issued, done, arrived, settled, msg = set(), set(), set(), set(), {}

    def meets(o1, o2):
        return bool(set(o1.pieces) & set(o2.pieces))

    def walk_ok(r):
        i = walk[r]
        o = ops[r][i]
        earlier = [j for j in range(i) if ops[r][j].kind != SEND]
        if o.fence and any((r, j) not in settled for j in earlier):
            return False
        if o.kind == SEND:
            if any((r, j) not in settled for j in earlier if meets(ops[r][j], o)):
                return False
            if o.fifo:
                prev = [j for j in range(i) if ops[r][j].kind == SEND and ops[r][j].peer == o.peer]
                if prev and (r, prev[-1]) not in done:
                    return False
            if o.chain:
                prev = [j for j in range(i) if ops[r][j].kind == SEND]
                if prev and (r, prev[-1]) not in done:
                    return False
        return True

    def settle_ok(r, j):
        o = ops[r][j]
        if (r, j) not in arrived:
            return False
        for k in range(j):
            q = ops[r][k]
            if q.kind == SEND and meets(q, o) and (r, k) not in done:
                return False
            if q.kind != SEND and meets(q, o) and (r, k) not in settled:
                return False
        return True

    def own(r, p):
        return p[0] == r if prog.collective == "alltoall" else r == prog.root

    while True:
        acts = []
        for r in range(P):
            if walk[r] < len(ops[r]) and walk_ok(r):
                acts.append(("walk", r))
            for j in range(walk[r]):
                g = (r, j)
                o = ops[r][j]
                if o.kind == SEND:
                    peer = match[g]
                    if g not in done and (peer[1] < walk[peer[0]] or (not o.fifo and rng.random() < eager)):
                        acts.append(("done", g))
                elif g not in arrived and match[g] in issued:
                    acts.append(("arrive", g))
                elif g in arrived and g not in settled and settle_ok(r, j):
                    acts.append(("settle", g))
        if not acts:
            break
        kind, x = acts[rng.randrange(len(acts))]
        if kind == "walk":
            g = (x, walk[x])
            o = ops[x][walk[x]]
            if o.kind == SEND:
                if reducing:
                    msg[g] = [hold[x][p[2]] for p in o.pieces]
                else:
                    assert all(p in hold[x] or own(x, p) for p in o.pieces), (g, o)
                    msg[g] = list(o.pieces)
                issued.add(g)
            walk[x] += 1
        elif kind == "done":
            done.add(x)
        elif kind == "arrive":
            arrived.add(x)
        else:
            r, j = x
            o = ops[r][j]
            for p, v in zip(o.pieces, msg[match[x]]):
                if not reducing:
                    hold[r].add(v)
                elif o.kind == RECV:
                    hold[r][p[2]] = v
                else:
                    hold[r][p[2]] = hold[r][p[2]] + v if o.local_first else v + hold[r][p[2]]
            settled.add(x)
    finished = all(walk[r] == len(ops[r]) for r in range(P)) and len(settled) + len(done) == sum(map(len, ops))
    return finished, hold


def _registered_programs():
    from collsched.collectives.algorithms import REGISTRY, CollRequest, generate
    from collsched.errors import InputError
    from collsched.inputs.topology import homogeneous

    out = []
    for (coll, name), alg in sorted(REGISTRY.items()):
        if alg.needs_topology or alg.arrival_aware:
            continue
        for P in (2, 3, 5, 6):
            for nseg in (1, 2):
                root = P - 1 if coll in ("bcast", "reduce") else 0
                try:
                    out.append(generate(name, CollRequest(coll, P, 4096, nseg, root, 4, True, homogeneous(P),
                                                          None, {})))
                except InputError:
                    pass
    return out


EXECUTED = [GOOD[n](P, ns) for n in sorted(GOOD) for P in (1, 2, 3, 4, 5) for ns in (1, 2)]


@pytest.mark.parametrize("k", range(8))
def test_verified_programs_compute_the_right_result_under_any_interleaving(k):
    """The claims of verify() against concrete runs: a program it accepts finishes under
    random interleavings and eager or rendezvous sends, delivers every piece, and computes
    every rank's result (reduce: the root's) in MPI's order when order_preserving says so,
    else at least the same contributions once each."""
    import random

    rng = random.Random(k)
    progs = EXECUTED + _registered_programs()
    for prog in progs[k::8]:
        assert verify(prog) == [], (prog.algorithm, prog.nranks)
        ordered = order_preserving(prog)
        for trial in range(2):
            finished, hold = execute(prog, rng, eager=0.0 if trial == 0 else 0.7)
            assert finished, (prog.collective, prog.algorithm, prog.nranks, prog.nseg)
            P = prog.nranks
            if prog.collective == "alltoall":
                for d in range(P):
                    assert {p for p in hold[d] if p[1] == d} >= {(s, d, g) for s in range(P) if s != d
                                                                 for g in range(prog.nseg)}
            elif prog.collective == "bcast":
                for r in range(P):
                    assert r == prog.root or hold[r] == {(0, 0, g) for g in range(prog.nseg)}
            else:
                ranks = [prog.root] if prog.collective == "reduce" else range(P)
                for r in ranks:
                    for g, v in enumerate(hold[r]):
                        assert sorted(v) == list(range(P)), (prog.algorithm, r, g, v)
                        if ordered:
                            assert v == tuple(range(P)), (prog.algorithm, r, g, v)


def test_the_concrete_run_sees_what_verify_rejects():
    """The interpreter is not blind: a wrong combine order gives a wrong tuple, a doubled
    reduce a doubled contribution, a fence cycle no finish."""
    import random

    rng = random.Random(1)
    prog = reduce_chain(4, root=0)
    i = next(i for i, o in enumerate(prog.ops[0]) if o.kind == RECV_REDUCE)
    bad = mutate(prog, 0, lambda lst: lst.__setitem__(i, dataclasses.replace(lst[i], local_first=False)))
    assert execute(bad, rng)[1][0][0] != (0, 1, 2, 3)
    ops = [list(lst) for lst in prog.ops]
    ops[0][:0] = [Op(RECV, 1, ()), Op(SEND, 1, (), fence=True)]
    ops[1][:0] = [Op(RECV, 0, ()), Op(SEND, 0, (), fence=True)]
    assert not execute(with_ops(prog, ops), rng)[0]


def test_numpy_integers_are_integers():
    import numpy as np

    prog = from_op_lists("bcast", 2, 1, [[("send", np.int64(1), [(np.int32(0), 0, np.int64(0))])],
                                         [("recv", 0, [(0, 0, 0)])]])
    prog.nranks = np.int64(2)
    assert verify(prog) == []
