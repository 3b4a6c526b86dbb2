"""The verifier on multi-piece messages (docs/semantics.md, "Multi-piece messages").

Schedules with messages are made from the existing algorithms' verified schedules in two
ways: their transfers grouped by (step, src, dst) and joined in ir.from_transfers (every
such schedule must verify), and random joins of adjacent ops whose matching ops are
adjacent too (holding, matching and delivery stay true; progress may fail, and must then
agree with an independent message-by-message walk written here). Mutations of them must
each be caught by the named pass with a specific reason.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import passes
from collsched.algorithms import Request, generate, registry
from collsched.inputs.topology import homogeneous, load_topology
from collsched.ir import RECV, SEND, from_op_lists, from_transfers, to_op_lists
from collsched.model.policy import mark_fifo_links
from collsched.verify import match, verify

from switches import c_kernels, setting

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"

J = ("fg", 0, 1)  # from_op_lists' phase, fifo, join: a joined foreground op


# --- schedules with messages -----------------------------------------------------------------

def captured_transfers(name: str, req: Request):
    """The transfers an algorithm gave ir.from_transfers (through registry.block_transfers)."""
    got = []

    def record(*args, **kw):
        got.append((args, kw))
        return from_transfers(*args, **kw)

    with setting(registry, "from_transfers", record):
        generate(name, req)
    (nranks, nseg, step, src, dst, origin, seg, phase), kw = got[0]
    n = len(step)
    seg = np.zeros(n, np.int32) if seg is None else np.asarray(seg)
    return nranks, nseg, [np.asarray(a) for a in (step, src, dst, origin, seg)]


def grouped(name: str, p: int, nseg: int, pick=None):
    """The algorithm's transfers sorted by (step, src, dst) and joined per (step, src, dst)
    where pick (a bool per candidate join; None: all) says so: (unjoined, joined)."""
    nranks, k, (step, src, dst, origin, seg) = captured_transfers(name, Request(p, nseg=nseg))
    order = np.lexsort((np.arange(len(step)), dst, src, step))
    step, src, dst, origin, seg = (a[order] for a in (step, src, dst, origin, seg))
    join = np.r_[False, (step[1:] == step[:-1]) & (src[1:] == src[:-1]) & (dst[1:] == dst[:-1])]
    if pick is not None:
        cand = np.nonzero(join)[0]
        join[cand] &= np.resize(np.asarray(pick, bool), len(cand)) if len(pick) else False
    args = (nranks, k, step, src, dst, origin, seg)
    return (from_transfers(*args, algorithm=name),
            from_transfers(*args, algorithm=name, join=join.astype(np.uint8)))


def joinable(s):
    """Candidate joins (send op i, recv op j): send i-1 and i go to one peer in a row, their
    recvs are j-1 and j in a row, each pair in one phase and i, j unmarked... as fields of
    the pairs; joining any subset keeps holding, matching and delivery true."""
    m = match(s)
    recv_of = np.full(s.total_ops, -1, np.int64)
    recv_of[m.send_op] = m.recv_op
    rank = s.rank_of_op
    i = np.nonzero(s.kind == SEND)[0]
    i = i[(i > 0)]
    i = i[(s.kind[i - 1] == SEND) & (rank[i - 1] == rank[i]) & (s.peer[i - 1] == s.peer[i])
          & (s.phase[i - 1] == s.phase[i])]
    j = recv_of[i]
    ok = (j > 0) & (recv_of[i - 1] == j - 1) & (s.phase[j - 1] == s.phase[j])
    return i[ok], j[ok]


def with_joins(s, pairs, pick):
    """A copy of s with the picked candidate pairs joined at both ends (FIFO marks off the
    joined sends: a message's mark is its head's)."""
    t = copy.deepcopy(s)
    i, j = pairs
    sel = np.resize(np.asarray(pick, bool), len(i)) if len(pick) and len(i) else np.zeros(len(i), bool)
    t.join = np.zeros(t.total_ops, np.uint8)
    t.join[i[sel]] = 1
    t.join[j[sel]] = 1
    t.fifo[t.join == 1] = 0
    return t


# --- an independent reference: the walk, message by message ------------------------------------

def message_walk(s, serial: bool) -> bool:
    """Whether every rank's walk ends under the verifier's rules (docs/semantics.md), run
    message by message on Python lists: a recv message is posted when the walk reaches it
    (serial: once the rank's previous recv message completed; the call's first other op
    waits for the leading background recv messages); a send message goes once every
    piece it forwards was delivered (its recv message complete: posted, and its matching
    send message issued), and a FIFO head (dataflow) or every send (serial) once the
    previous send message to that peer (serial: any peer) completed (its recv posted)."""
    p = s.nranks
    msgs = []
    for r in range(p):
        ml = []
        for i in range(int(s.offsets[r]), int(s.offsets[r + 1])):
            piece = (int(s.origin[i]), int(s.segment[i]))
            if s.join[i]:
                ml[-1]["pieces"].append(piece)
            else:
                ml.append({"kind": int(s.kind[i]), "peer": int(s.peer[i]), "pieces": [piece],
                           "bg": int(s.phase[i]), "fifo": int(s.fifo[i])})
        msgs.append(ml)
    seqs: dict = {}
    for r, ml in enumerate(msgs):
        for i, m in enumerate(ml):
            pair = (r, m["peer"]) if m["kind"] == SEND else (m["peer"], r)
            seqs.setdefault((pair, m["kind"]), []).append((r, i))
    partner = {}
    for (pair, kind), ends in seqs.items():
        if kind == SEND:
            for a, b in zip(ends, seqs.get((pair, RECV), [])):
                partner[a], partner[b] = b, a
    deliverer = [{} for _ in range(p)]
    for r, ml in enumerate(msgs):
        for i, m in enumerate(ml):
            if m["kind"] == RECV:
                for piece in m["pieces"]:
                    deliverer[r].setdefault(piece, i)
    lead = [0] * p
    for r, ml in enumerate(msgs):
        while serial and lead[r] < len(ml) and ml[lead[r]]["kind"] == RECV and ml[lead[r]]["bg"]:
            lead[r] += 1
    issued, posted = set(), set()

    def received(r, i):
        return (r, i) in posted and partner[(r, i)] in issued

    def previous(r, i, kind, peer=None):
        return next((j for j in range(i - 1, -1, -1) if msgs[r][j]["kind"] == kind
                     and (peer is None or msgs[r][j]["peer"] == peer)), None)

    pos = [0] * p
    moved = True
    while moved:
        moved = False
        for r in range(p):
            while pos[r] < len(msgs[r]):
                i, m = pos[r], msgs[r][pos[r]]
                ok = not (lead[r] and i == lead[r]) or received(r, i - 1)
                if m["kind"] == RECV:
                    j = previous(r, i, RECV) if serial else None
                    ok = ok and (j is None or received(r, j))
                else:
                    ok = ok and all(received(r, deliverer[r][pc]) for pc in m["pieces"] if pc[0] != r)
                    j = previous(r, i, SEND) if serial else (
                        previous(r, i, SEND, m["peer"]) if m["fifo"] else None)
                    ok = ok and (j is None or partner[(r, j)] in posted)
                if not ok:
                    break
                (posted if m["kind"] == RECV else issued).add((r, i))
                pos[r] += 1
                moved = True
    return all(pos[r] == len(msgs[r]) for r in range(p))


def verdicts(s, serial):
    """verify's violations with the C walk and with the Python waves (they must agree)."""
    with c_kernels(True):
        fast = [str(v) for v in verify(s, serial=serial)]
    with c_kernels(False):
        waves = [str(v) for v in verify(s, serial=serial)]
    assert fast == waves
    return fast


def one(violations, check):
    assert violations, "expected the schedule to be rejected"
    assert violations[0].check == check, [str(v) for v in violations]
    return violations[0]


# --- schedules that must verify --------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["ring", "bruck", "spreading"]), p=st.integers(2, 9),
       nseg=st.integers(1, 3), serial=st.booleans(), pick=st.lists(st.booleans(), max_size=40))
def test_transfers_grouped_by_step_verify(name, p, nseg, serial, pick):
    """Pieces a rank sends one peer in one step, joined into messages (some or all): the
    schedule verifies in dataflow order, and serially where every step's pieces are one
    message (one receive per step: with several the serial walk waits for the second
    before the step's sends, which the unjoined segmented ring does too), as the message
    walk says; its piece pairs are the unjoined schedule's, first_piece where the send
    ops are message heads."""
    plain, s = grouped(name, p, nseg, pick or None)
    assert verify(plain) == [] and verdicts(s, False) == [] and message_walk(s, False)
    found = verdicts(s, serial)
    assert (found == []) == message_walk(s, serial)
    if serial and not pick:
        assert found == []
    m, m0 = match(s), match(plain)
    assert np.array_equal(m.send_op, m0.send_op) and np.array_equal(m.recv_op, m0.recv_op)
    if s.has_messages:
        assert np.array_equal(m.first_piece, s.join[m.send_op] == 0)
        assert np.array_equal(m.first_piece, s.join[m.recv_op] == 0)
    else:
        assert m.first_piece is None


def bdr_in_messages(p: int, nseg: int, arrivals, pick=None):
    """BDR's transfers (serial, with background pre-step receives), each block cut into
    nseg segments sent as one message (all of them, or where pick says)."""
    from collsched.algorithms import bdr
    got = []

    def record(*args, **kw):
        got.append((args, kw))
        return from_transfers(*args, **kw)

    with setting(bdr, "from_transfers", record):
        generate("bdr", Request(p, nbytes=65536, topology=homogeneous(p), arrivals=np.asarray(arrivals)))
    (_, _, step, src, dst, origin, _, phase), kw = got[0]
    step, src, dst, origin, phase, rphase = (np.repeat(np.asarray(a), nseg) for a in
                                             (step, src, dst, origin, phase, kw["recv_phase"]))
    seg = np.tile(np.arange(nseg), len(step) // nseg)
    join = seg > 0
    if pick is not None:
        join[join] &= np.resize(np.asarray(pick, bool), int(join.sum()))
    s = from_transfers(p, nseg, step, src, dst, origin, seg, phase, algorithm="bdr",
                       recv_phase=rphase, join=join.astype(np.uint8))
    s.serial = True
    return s


@settings(max_examples=60, deadline=None)
@given(a=st.lists(st.sampled_from([0.0, 1e-3, 2e-3, 5e-3]), min_size=3, max_size=8),
       nseg=st.integers(2, 3), pick=st.lists(st.booleans(), max_size=20))
def test_serial_background_messages(a, nseg, pick):
    """Serial BDR whose blocks travel as messages of their segments, background pre-step
    receives included: verifies with whole blocks per message (each late rank's leading
    background receive messages a chain the call waits for), and in any case agrees with
    the message walk."""
    s = bdr_in_messages(len(a), nseg, a, pick or None)
    found = verdicts(s, True)
    assert all(v.endswith("[progress]") for v in found), found
    assert (found == []) == message_walk(s, True)
    if not pick:
        assert found == [] and verdicts(s, False) == []
        assert not s.has_background or (s.join[s.phase == 1] == 1).any()


def test_serial_background_message_deadlock():
    """Rank 0 is late: the call waits for its two leading background receive messages, the
    second from rank 2, whose send message to 0 waits (serial) for its send to 1 to be
    matched, which rank 1 posts only after its receive from 0 completed: rank 0's first
    foreground message. Dataflow runs it."""
    lists = [[("recv", 1, 1, 0, "bg"), ("recv", 1, 1, 1, "bg", 0, 1), ("recv", 2, 2, 0, "bg"),
              ("recv", 2, 2, 1, "bg", 0, 1), ("send", 1, 0, 0), ("send", 1, 0, 1, *J),
              ("send", 2, 0, 0), ("send", 2, 0, 1, *J)],
             [("send", 0, 1, 0), ("send", 0, 1, 1, *J), ("recv", 0, 0, 0), ("recv", 0, 0, 1, *J),
              ("send", 2, 1, 0), ("send", 2, 1, 1, *J), ("recv", 2, 2, 0), ("recv", 2, 2, 1, *J)],
             [("recv", 0, 0, 0), ("recv", 0, 0, 1, *J), ("send", 1, 2, 0), ("send", 1, 2, 1, *J),
              ("send", 0, 2, 0), ("send", 0, 2, 1, *J), ("recv", 1, 1, 0), ("recv", 1, 1, 1, *J)]]
    s = from_op_lists(3, 2, lists)
    assert verdicts(s, False) == [] and message_walk(s, False)
    found = verdicts(s, True)
    assert not message_walk(s, True)
    assert found[0] == ("rank 0, op 4: deadlock: waits for its background receives (rank 2 issuing "
                        "its message at op 4 (2 pieces)), which never happens [progress]"), found


@functools.cache
def base_schedules():
    """Verified schedules of the existing algorithms, some serial with background parts
    (made once, at the first test that asks)."""
    a = np.array([0.0, 3e-3, 1e-3, 6e-3, 0.0, 2e-3, 4e-3])
    topo = homogeneous(7)
    grid = load_topology(TOPOLOGIES / "three-site-grid.yaml", 9)
    out = [generate("ring", Request(6, nseg=2)), generate("bruck", Request(7, nseg=2)),
           generate("spreading", Request(5, nseg=3)), generate("rd", Request(8)),
           generate("bdr", Request(7, nbytes=65536, topology=topo, arrivals=a)),
           generate("min3", Request(7, nbytes=65536, nseg=2, topology=topo, arrivals=a)),
           generate("min3", Request(9, nbytes=1 << 20, nseg=2, topology=grid))]
    for s in out:
        s.transfers = None
        assert verify(s) == [] and (not s.has_background or verify(s, serial=True) == [])
    mark_fifo_links(out[0], homogeneous(6), 1 << 20)  # LAN, large pieces: FIFO marks
    assert out[0].fifo.any() and len(out) == NBASES
    return tuple(out)


NBASES = 7


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, NBASES - 1), serial=st.booleans(),
       pick=st.lists(st.booleans(), min_size=1, max_size=60),
       fifo=st.lists(st.booleans(), max_size=60))
def test_progress_agrees_with_the_message_walk(which, serial, pick, fifo):
    """Random joins of adjacent ops on both ends (and random FIFO marks on message heads):
    nothing but progress can fail, and it fails exactly when the message walk does."""
    base = base_schedules()[which]
    s = with_joins(base, joinable(base), pick)
    if fifo:
        heads = np.nonzero((s.kind == SEND) & (s.join == 0))[0]
        s.fifo[heads] |= np.resize(np.asarray(fifo, np.uint8), len(heads))
    found = verdicts(s, serial)
    assert all(v.endswith("[progress]") for v in found), found
    assert (found == []) == message_walk(s, serial), found


def gossip(rng, p: int, nseg: int, round_end: float):
    """A random allgather as transfers in rounds: each moves a piece its sender holds (from
    the start or from an earlier transfer, of this round too) to a rank lacking it; within
    a round a rank's list has its receives first, so a send may forward what the round
    brought. Sorted by (round, src, dst) in each round, with the candidate joins: pieces
    one rank sends another in one round. Holding, matching and delivery hold; the walk
    may run into cycles, through messages or not."""
    held = [{(r, g) for g in range(nseg)} for r in range(p)]
    rows, rnd = [], 0
    while True:
        lacking = [(r, o, g) for r in range(p) for o in range(p) for g in range(nseg)
                   if (o, g) not in held[r]]
        if not lacking:
            break
        dst, o, g = rng.choice(lacking)
        src = rng.choice(sorted(r for r in range(p) if (o, g) in held[r]))
        rows.append((rnd, src, dst, o, g))
        held[dst].add((o, g))
        rnd += rng.random() < round_end
    order = sorted(range(len(rows)), key=lambda i: (rows[i][0], rows[i][1], rows[i][2], i))
    step, src, dst, origin, seg = (np.array([rows[i][c] for i in order]) for c in range(5))
    cand = np.r_[False, (step[1:] == step[:-1]) & (src[1:] == src[:-1]) & (dst[1:] == dst[:-1])]
    return (p, nseg, step, src, dst, origin, seg), cand


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), p=st.integers(3, 6), nseg=st.integers(1, 2),
       round_end=st.floats(0.02, 0.5), serial=st.booleans(), pick=st.lists(st.booleans(), max_size=30))
def test_random_gossip_messages_agree_with_the_message_walk(seed, p, nseg, round_end, serial, pick):
    """(A seeded generator, not hypothesis' own random: its draws shrink toward the same
    few choices, and cycles through messages need varied ones.)"""
    import random
    args, cand = gossip(random.Random(seed), p, nseg, round_end)
    plain = from_transfers(*args, algorithm="gossip")
    assert (verdicts(plain, serial) == []) == message_walk(plain, serial)
    join = cand.copy()
    if pick:
        idx = np.nonzero(cand)[0]
        join[idx] &= np.resize(np.asarray(pick, bool), len(idx))
    s = from_transfers(*args, algorithm="gossip", join=join.astype(np.uint8))
    found = verdicts(s, serial)
    assert all(v.endswith("[progress]") for v in found), found
    assert (found == []) == message_walk(s, serial), found


def test_random_gossip_sees_both_verdicts():
    import random
    seen = set()
    for seed in range(100):
        args, cand = gossip(random.Random(seed), 5, 1, 0.05)
        plain = verify(from_transfers(*args, algorithm="gossip")) == []
        s = from_transfers(*args, algorithm="gossip", join=cand.astype(np.uint8))
        ok = verify(s) == []
        assert ok == message_walk(s, False)
        seen.add((plain, ok))
    assert (True, False) in seen and (True, True) in seen  # some deadlock only through messages


def test_some_random_joins_deadlock():
    """The property above sees both verdicts (serial bdr with joined relays deadlocks)."""
    seen = set()
    for base in base_schedules():
        pairs = joinable(base)
        for serial in (False, True):
            for k in range(8):
                s = with_joins(base, pairs, [bool((x >> k) & 1) for x in range(1, 64)])
                ok = verify(s, serial=serial) == []
                assert ok == message_walk(s, serial)
                seen.add(ok)
    assert seen == {True, False}


# --- mutations: each caught by its pass, with a specific reason --------------------------------

def message_of(s, kind, at_least=2):
    """(head, last) of the first message of `kind` with at least `at_least` pieces."""
    head = s.message_head()
    for h in np.nonzero((s.join == 0) & (s.kind == kind))[0]:
        last = h
        while last + 1 < s.total_ops and s.join[last + 1]:
            last += 1
        if last - h + 1 >= at_least:
            return int(h), int(last)
    raise AssertionError("no such message")


def delete_op(s, op):
    lists = [list(x) for x in to_lists(s)]
    r = int(s.rank_of_op[op])
    del lists[r][op - int(s.offsets[r])]
    return from_op_lists(s.nranks, s.nseg, lists)


def to_lists(s):
    """Per rank (kind, peer, origin, segment, phase, fifo, join) tuples."""
    base = to_op_lists(s)
    return [[op + (int(s.fifo[lo + i]), int(s.join[lo + i])) for i, op in enumerate(ops)]
            for ops, lo in zip(base, s.offsets[:-1].tolist())]


@pytest.mark.parametrize("kind", [RECV, SEND])
@pytest.mark.parametrize("name", ["ring", "bruck"])
def test_dropped_piece_at_one_end(name, kind):
    _, s = grouped(name, 6, 3)
    h, last = message_of(s, kind, 3)
    v = one(verify(delete_op(s, last)), "matching")
    n = last - h + 1
    sizes = (n, n - 1) if kind == RECV else (n - 1, n)
    assert f"send message of {sizes[0]} pieces" in v.reason
    assert f"matched by a message of {sizes[1]} at rank" in v.reason


def test_swapped_pieces_inside_a_message():
    _, s = grouped("bruck", 7, 2)
    h, last = message_of(s, RECV, 2)
    for col in ("origin", "segment"):
        a = getattr(s, col)
        a[h], a[last] = a[last], a[h]
    v = one(verify(s), "matching")
    assert "the same pieces in another order" in v.reason
    assert (v.rank, v.op) == (int(s.rank_of_op[h]), h - int(s.offsets[s.rank_of_op[h]]))


def test_split_message_at_one_end():
    _, s = grouped("ring", 5, 2)
    h, last = message_of(s, RECV, 2)
    s.join[last] = 0
    v = one(verify(s), "matching")
    assert "has no matching send message there" in v.reason


@pytest.mark.parametrize("change, reason", [
    (lambda l: l[0].__setitem__(1, ("send", 2, 0, 1, *J)), "joined op's peer 2 differs from its message's peer 1"),
    (lambda l: l[0].__setitem__(0, ("send", 1, 0, 0, *J)), "the rank's first op (no message to join)"),
    (lambda l: l[1].__setitem__(1, ("send", 0, 1, 0, *J)), "joined send continues a message of recvs"),
    (lambda l: l[0].__setitem__(1, ("send", 1, 0, 1, "fg", 1, 1)), "FIFO flag on a joined op"),
    (lambda l: l[0].__setitem__(0, ("send", 1, 0, 0, "bg")), "joined op's phase differs from its message's"),
    (lambda l: l[0].__setitem__(1, ("send", 1, 0, 0, *J)), "piece (0,0) twice in the message at op 0"),
])
def test_join_shape(change, reason):
    lists = [[("send", 1, 0, 0), ("send", 1, 0, 1, *J), ("recv", 1, 1, 0), ("recv", 1, 1, 1, *J),
              ("send", 2, 0, 0), ("send", 2, 0, 1, *J), ("recv", 2, 2, 0), ("recv", 2, 2, 1, *J)],
             [("recv", 0, 0, 0), ("recv", 0, 0, 1, *J), ("send", 0, 1, 0), ("send", 0, 1, 1, *J),
              ("send", 2, 1, 0), ("send", 2, 1, 1, *J), ("recv", 2, 2, 0), ("recv", 2, 2, 1, *J)],
             [("recv", 0, 0, 0), ("recv", 0, 0, 1, *J), ("send", 0, 2, 0), ("send", 0, 2, 1, *J),
              ("recv", 1, 1, 0), ("recv", 1, 1, 1, *J), ("send", 1, 2, 0), ("send", 1, 2, 1, *J)]]
    assert verify(from_op_lists(3, 2, lists)) == []
    change(lists)
    v = one(verify(from_op_lists(3, 2, lists)), "shape")
    assert reason in v.reason, v


def test_join_flag_out_of_range():
    s = from_op_lists(2, 2, [[("send", 1, 0, 0), ("send", 1, 0, 1, *J), ("recv", 1, 1, 0), ("recv", 1, 1, 1, *J)],
                             [("recv", 0, 0, 0), ("recv", 0, 0, 1, *J), ("send", 0, 1, 0), ("send", 0, 1, 1, *J)]])
    assert verify(s) == []
    s.join[1] = 2
    assert "join flag is 2" in one(verify(s), "shape").reason


def test_send_message_before_holding_its_second_piece():
    """Rank 1 relays rank 2's block to 0 in one message with its own, before receiving it."""
    lists = [[("recv", 1, 1, 0), ("recv", 1, 2, 0, *J), ("send", 1, 0, 0), ("send", 2, 0, 0)],
             [("send", 0, 1, 0), ("send", 0, 2, 0, *J), ("recv", 0, 0, 0), ("recv", 2, 2, 0),
              ("send", 2, 1, 0)],
             [("recv", 0, 0, 0), ("send", 1, 2, 0), ("recv", 1, 1, 0)]]
    v = one(verify(from_op_lists(3, 1, lists)), "holding")
    assert (v.rank, v.op) == (1, 1)
    assert "forwards piece (2,0) to 0 in its send message at op 0 (2 pieces) before holding it" in v.reason
    assert "receives it only later (op 3)" in v.reason
    fixed = [lists[0], [lists[1][3], lists[1][0], lists[1][1], lists[1][2], lists[1][4]], lists[2]]
    assert verify(from_op_lists(3, 1, fixed)) == []


CYCLE = [  # each rank sends its own piece with one it relays, in one message: a cycle
    [("recv", 2, 2, 0), ("recv", 2, 1, 0, *J), ("send", 1, 0, 0), ("send", 1, 2, 0, *J)],
    [("recv", 0, 0, 0), ("recv", 0, 2, 0, *J), ("send", 2, 1, 0), ("send", 2, 0, 0, *J)],
    [("recv", 1, 1, 0), ("recv", 1, 0, 0, *J), ("send", 0, 2, 0), ("send", 0, 1, 0, *J)],
]


@pytest.mark.parametrize("serial", [False, True])
def test_cycle_only_through_messages(serial):
    """Rank 0's message {0, 2} waits for 2's message {2, 1}, which waits for 1's {1, 0},
    which waits for 0's: a deadlock; the same lists one piece per message run (dataflow)."""
    s = from_op_lists(3, 1, CYCLE)
    s.serial = serial
    found = verdicts(s, None)
    assert len(found) == 3 and not message_walk(s, serial)
    assert found[0] == ("rank 0, op 2: deadlock: waits to forward piece (2,0) in its send message at "
                        "op 2 (2 pieces) until rank 2 issues its message at op 2 (2 pieces), which "
                        "never happens [progress]")
    split = from_op_lists(3, 1, [[op[:4] for op in ops] for ops in CYCLE])
    assert verify(split) == [] and message_walk(split, False)  # serially its two receives deadlock


def test_ring_with_consecutive_steps_joined_deadlocks():
    """A ring whose steps 2k and 2k+1 are one message: a rank's message forwards what its
    left neighbour's message brings, all the way round."""
    p = 6
    _, _, (step, src, dst, origin, seg) = captured_transfers("ring", Request(p))
    step = step // 2
    order = np.lexsort((np.arange(len(step)), dst, src, step))
    step, src, dst, origin = (a[order] for a in (step, src, dst, origin))
    join = np.r_[False, (step[1:] == step[:-1]) & (src[1:] == src[:-1])].astype(np.uint8)
    assert verify(from_transfers(p, 1, step, src, dst, origin, algorithm="ring")) == []
    s = from_transfers(p, 1, step, src, dst, origin, algorithm="ring", join=join)
    found = verify(s)
    assert len(found) == p and all(v.check == "progress" and "until rank" in v.reason for v in found)
    assert not message_walk(s, False)


# --- the pipeline's passes ---------------------------------------------------------------------

def test_fifo_marks_on_message_heads_by_message_bytes():
    """A message of pieces each too small to pay a latency, together large enough: its head
    is marked; its joined ops never are."""
    topo = homogeneous(5, latency_s=50e-6, bandwidth_Bps=125e6)  # a piece of 6250 B: one latency
    plain, s = grouped("ring", 5, 4)
    nbytes = 4 * 4000  # 4000-byte pieces (below), 16000-byte messages (above)
    assert mark_fifo_links(plain, topo, nbytes) == 0
    marked = mark_fifo_links(s, topo, nbytes)
    heads = (s.kind == SEND) & (s.join == 0)
    assert marked == int(heads.sum()) and np.array_equal(s.fifo.astype(bool), heads)
    assert verify(s) == []


def test_receive_gating_leaves_messages_alone():
    """Gating re-sorts a three-site grid's Min3 lists (256 KiB pieces); with a message in
    the schedule it leaves them (and drops the transfers, as always)."""
    topo = load_topology(TOPOLOGIES / "three-site-grid.yaml", 12)
    nbytes = 512 * 1024
    s = generate("min3", Request(12, nbytes=nbytes, nseg=2, topology=topo))
    gated = passes.gate_link_receives(copy.deepcopy(s), topo, nbytes)
    assert not gated.same_ops(s)  # the case gates something
    i, j = joinable(s)
    assert len(i)
    t = with_joins(s, (i, j), [True])
    t.transfers = s.transfers
    out = passes.gate_link_receives(t, topo, nbytes)
    assert out is t and out.transfers is None and out.has_messages


def test_apply_keeps_messages_verified():
    topo = homogeneous(6)
    _, s = grouped("bruck", 6, 2)
    s = passes.apply(s, topo, 1 << 20)
    assert s.has_messages and not s.fifo[s.join == 1].any() and verify(s) == []


def test_matching_of_one_piece_messages_unchanged():
    s = generate("bruck", Request(7, nseg=2))
    m = match(s)
    assert m.first_piece is None
    t = dataclasses.replace(s, join=np.zeros(s.total_ops, np.uint8))
    assert not t.has_messages and np.array_equal(match(t).send_op, m.send_op)
