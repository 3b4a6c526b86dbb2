"""Both allgather cost models time a multi-piece message (Schedule.join; docs/semantics.md,
"Multi-piece messages", rule 6) as one transfer: one latency, the sum of its pieces' bytes,
eager or rendezvous by that sum, its ports held for the whole of it; a send message starts
only once its sender holds every piece; serial schedules chain messages. The C timing
(kernels/dag.c) keeps computing what its Python references compute, extra feeds included."""
import dataclasses
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from collsched.inputs import msgcosts
from collsched.inputs.topology import homogeneous, load_topology
from collsched.ir import RECV, SEND, from_op_lists, from_transfers
from collsched.model.dag import Plan
from collsched.model.fluid import fluid_timeline, simulate_fluid
from collsched.model.simulate import simulate, simulate_pattern
from collsched.verify import match, verify

from switches import c_kernels, dag_reference

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
MODELS = {"dag": lambda *a: simulate(*a)[0], "fluid": fluid_timeline}


def lat_bw(topo):
    return float(topo.latency[0, 1]), float(topo.bandwidth[0, 1])


def exchange(k, joined, serial=False):
    """Two ranks, k segments each: every rank sends its k pieces to the other, in one
    message (joined) or k."""
    if joined:
        lists = [[("send", 1 - r, r, g, "fg", 0, int(g > 0)) for g in range(k)]
                 + [("recv", 1 - r, 1 - r, g, "fg", 0, int(g > 0)) for g in range(k)]
                 for r in range(2)]
    else:  # interleaved: what serial execution proves deadlock-free
        lists = [[op for g in range(k) for op in (("send", 1 - r, r, g), ("recv", 1 - r, 1 - r, g))]
                 for r in range(2)]
    s = from_op_lists(2, k, lists)
    s.serial = serial
    assert not verify(s)
    return s


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("k", [1, 2, 5])
def test_a_message_of_k_pieces_costs_one_latency(model, k):
    topo = homogeneous(2)
    L, b = lat_bw(topo)
    m = 100_000  # per piece
    tl = MODELS[model](exchange(k, True), topo, k * m)
    assert len(tl.start) == 2  # one transfer per message
    assert list(tl.nbytes) == [k * m, k * m]
    if k > 1:
        assert list(tl.pieces) == [k, k]
    assert np.allclose(tl.start, 0.0)
    assert np.allclose(tl.end, L + k * m / b, rtol=1e-12)
    assert np.allclose(tl.exits, L + k * m / b, rtol=1e-12)


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("k", [2, 4])
def test_serial_without_joins_pays_the_latencies_the_message_saves(model, k):
    """A serial rank sends one message at a time, each waiting for the previous to arrive:
    k pieces apart cost k (L + m/b), in one message L + k m/b; the difference is exactly
    the k - 1 latencies saved."""
    topo = homogeneous(2)
    L, b = lat_bw(topo)
    m = 100_000
    apart = MODELS[model](exchange(k, False, serial=True), topo, k * m)
    whole = MODELS[model](exchange(k, True, serial=True), topo, k * m)
    assert len(apart.start) == 2 * k and len(whole.start) == 2
    assert np.allclose(apart.exits, k * (L + m / b), rtol=1e-12)
    assert np.allclose(whole.exits, L + k * m / b, rtol=1e-12)
    assert np.allclose(apart.exits - whole.exits, (k - 1) * L, rtol=1e-9)
    # The sends of the unjoined chain follow each other, each after the previous has arrived.
    for r in range(2):
        mine = np.nonzero(apart.src == r)[0]
        assert np.all(apart.start[mine][1:] >= apart.end[mine][:-1] - 1e-15)


def test_serial_chains_of_messages():
    """Two messages per direction in a serial schedule: the second starts when the first
    has arrived, in both models."""
    topo = homogeneous(2)
    L, b = lat_bw(topo)
    m = 50_000
    lists = [[("send", 1 - r, r, 0), ("send", 1 - r, r, 1, "fg", 0, 1),
              ("recv", 1 - r, 1 - r, 0), ("recv", 1 - r, 1 - r, 1, "fg", 0, 1),
              ("send", 1 - r, r, 2), ("send", 1 - r, r, 3, "fg", 0, 1),
              ("recv", 1 - r, 1 - r, 2), ("recv", 1 - r, 1 - r, 3, "fg", 0, 1)] for r in range(2)]
    s = from_op_lists(2, 4, lists)
    s.serial = True
    assert not verify(s)
    for model in MODELS.values():
        tl = model(s, topo, 4 * m)
        assert len(tl.start) == 4 and list(tl.pieces) == [2, 2, 2, 2]
        for r in range(2):
            first, second = np.nonzero(tl.src == r)[0]
            assert tl.end[first] == pytest.approx(L + 2 * m / b, rel=1e-12)
            assert tl.start[second] == pytest.approx(tl.end[first], rel=1e-12)
            assert tl.end[second] == pytest.approx(2 * (L + 2 * m / b), rel=1e-12)


def late_piece_schedule(join=True):
    """P = 4: rank 3 gets piece 0 from rank 0 and piece 1 from rank 1 (late), then sends
    pieces 0, 1 and its own 3 to rank 2 in one message; rank 2 passes everything on."""
    t = [(0, 0, 3, 0, 0), (0, 1, 3, 1, 0),
         (1, 3, 2, 0, 0), (1, 3, 2, 1, 1), (1, 3, 2, 3, 1), (1, 2, 3, 2, 0),
         (2, 2, 0, 1, 0), (2, 2, 0, 2, 1), (2, 2, 0, 3, 1),
         (2, 2, 1, 0, 0), (2, 2, 1, 2, 1), (2, 2, 1, 3, 1)]
    a = np.array(t)
    s = from_transfers(4, 1, a[:, 0], a[:, 1], a[:, 2], a[:, 3], algorithm="test",
                       join=a[:, 4] if join else None)
    assert not verify(s)
    return s


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_send_message_waits_for_its_latest_piece(model):
    """The message 3 -> 2 carries piece 0 (in at L + m/b) and piece 1 (rank 1 arrives at
    D): it starts when piece 1 is in, D + L + m/b, not when its first piece is."""
    topo = homogeneous(4)
    L, b = lat_bw(topo)
    m, D = 1 << 20, 0.1
    arrivals = np.array([0.0, D, 0.0, 0.0])
    tl = MODELS[model](late_piece_schedule(), topo, m, arrivals)
    msg = np.nonzero((tl.src == 3) & (tl.dst == 2))[0]
    assert len(msg) == 1 and tl.pieces[msg[0]] == 3
    early = np.nonzero((tl.src == 0) & (tl.dst == 3))[0][0]
    late = np.nonzero((tl.src == 1) & (tl.dst == 3))[0][0]
    assert tl.end[early] < 0.05 < D
    assert tl.end[late] == pytest.approx(D + L + m / b, rel=1e-12)
    assert tl.start[msg[0]] == pytest.approx(tl.end[late], rel=1e-12)


def test_the_plan_keeps_the_other_feeds_as_extra_edges():
    s = late_piece_schedule()
    plan = Plan(s, homogeneous(4), 1 << 20)
    assert plan.n == 6 and plan.extra is not None
    xoff, xpred = plan.extra
    msg = int(np.nonzero((plan.src == 3) & (plan.dst == 2))[0][0])
    late = int(np.nonzero((plan.src == 1) & (plan.dst == 3))[0][0])
    early = int(np.nonzero((plan.src == 0) & (plan.dst == 3))[0][0])
    feeds = {int(plan.pred[msg, 3])} | set(xpred[xoff[msg]:xoff[msg + 1]].tolist())
    assert feeds == {early, late}
    # Without joins: one transfer per piece, no extra edge, as before messages existed.
    plain = Plan(late_piece_schedule(join=False), homogeneous(4), 1 << 20)
    assert plain.n == 12 and plain.extra is None and plain.pieces is None


def rendezvous_schedule(join):
    """P = 3, two segments: rank 2 forwards rank 1's pieces to rank 0 before its receive
    from rank 0, so it posts that receive only once rank 1's pieces are in."""
    j = int(join)
    lists = [
        [("send", 2, 0, 0), ("send", 2, 0, 1, "fg", 0, j),
         ("send", 1, 0, 0), ("send", 1, 0, 1, "fg", 0, j),
         ("recv", 2, 1, 0), ("recv", 2, 1, 1, "fg", 0, j),
         ("recv", 2, 2, 0), ("recv", 2, 2, 1, "fg", 0, j)],
        [("recv", 0, 0, 0), ("recv", 0, 0, 1, "fg", 0, j),
         ("send", 2, 1, 0), ("send", 2, 1, 1, "fg", 0, j),
         ("recv", 2, 2, 0), ("recv", 2, 2, 1, "fg", 0, j)],
        [("recv", 1, 1, 0), ("recv", 1, 1, 1, "fg", 0, j),
         ("send", 0, 1, 0), ("send", 0, 1, 1, "fg", 0, j),
         ("recv", 0, 0, 0), ("recv", 0, 0, 1, "fg", 0, j),
         ("send", 0, 2, 0), ("send", 0, 2, 1, "fg", 0, j),
         ("send", 1, 2, 0), ("send", 1, 2, 1, "fg", 0, j)]]
    s = from_op_lists(3, 2, lists)
    assert not verify(s)
    return s


@pytest.mark.parametrize("model", sorted(MODELS))
def test_eager_or_rendezvous_by_the_sum(model):
    """Pieces of 40,000 B are below the 64 KiB eager limit, a message of two is not: joined,
    rank 0's message to rank 2 waits until rank 2 posts its receive (after rank 1's pieces
    are in, at T); apart, the first piece goes eagerly before T."""
    topo = homogeneous(3)
    assert 40_000 < topo.eager_limit <= 80_000
    L, b = lat_bw(topo)
    m, D = 40_000, 0.1
    arrivals = np.array([0.0, D, 0.0])
    whole = MODELS[model](rendezvous_schedule(True), topo, 2 * m, arrivals)
    T = D + L + 2 * m / b  # rank 1's message is in at rank 2
    from1 = np.nonzero((whole.src == 1) & (whole.dst == 2))[0]
    assert whole.end[from1] == pytest.approx([T], rel=1e-12)
    to2 = np.nonzero((whole.src == 0) & (whole.dst == 2))[0]
    assert len(to2) == 1 and whole.start[to2[0]] == pytest.approx(T, rel=1e-12)
    apart = MODELS[model](rendezvous_schedule(False), topo, 2 * m, arrivals)
    to2 = np.nonzero((apart.src == 0) & (apart.dst == 2))[0]
    assert len(to2) == 2 and apart.start[to2[0]] < T - L / 2  # (the second follows its bytes)
    # The same message below the eager limit (a larger limit) goes eagerly too.
    eager = MODELS[model](rendezvous_schedule(True), dataclasses.replace(topo, eager_limit=80_001),
                          2 * m, arrivals)
    to2 = np.nonzero((eager.src == 0) & (eager.dst == 2))[0]
    assert eager.start[to2[0]] < T - L / 2


def test_size_dependent_factors_at_the_message_size():
    """With SimGrid's SMPI factors a message's latency and bandwidth factors are those of
    its whole size, not of its pieces'."""
    base = homogeneous(2)
    topo = base.with_message_costs(msgcosts.simgrid_smpi(base.host_site))
    k, m = 4, 10_000
    src, dst = np.array([0]), np.array([1])
    lf, meff = topo.effective_sizes(src, dst, np.array([k * m]))
    want = float(topo.latency[0, 1] * lf[0] + meff[0] / topo.flow_bandwidth()[0, 1])
    lf1, _ = topo.effective_sizes(src, dst, np.array([m]))
    assert lf1[0] != lf[0]  # the sizes fall in different rows of the table
    tl = simulate(exchange(k, True), topo, k * m)[0]
    assert np.allclose(tl.end, want, rtol=1e-12)
    fl = fluid_timeline(exchange(k, True), topo, k * m)
    assert np.allclose(fl.end, want, rtol=1e-9)


# --- random schedules of messages -----------------------------------------------------------

def random_messages(p, nseg, rng, max_pieces=4, join_prob=0.7):
    """A random allgather in steps: each rank sends some receivers pieces they lack, a
    random part of each batch joined into messages (from_transfers with join)."""
    full = {(o, g) for o in range(p) for g in range(nseg)}
    held = [{(r, g) for g in range(nseg)} for r in range(p)]
    rows, step = [], 0
    while any(h != full for h in held):
        incoming = [set() for _ in range(p)]
        for src in rng.permutation(p).tolist():
            dsts = [d for d in range(p) if d != src and held[src] - held[d] - incoming[d]]
            for dst in rng.permutation(dsts)[:int(rng.integers(1, 3))].tolist():
                cand = sorted(held[src] - held[dst] - incoming[dst])
                k = int(rng.integers(1, min(max_pieces, len(cand)) + 1))
                for j, i in enumerate(rng.permutation(len(cand))[:k].tolist()):
                    rows.append((step, src, dst, *cand[i], int(j > 0 and rng.random() < join_prob)))
                    incoming[dst].add(cand[i])
        for d in range(p):
            held[d] |= incoming[d]
        step += 1
    a = np.array(rows, np.int64).reshape(-1, 6)
    return from_transfers(p, nseg, a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4],
                          algorithm="random", join=a[:, 5])


def messages_of(s):
    """Per matched message (sender list order): (send head op, recv head op, pieces)."""
    m = match(s)
    order = np.argsort(m.send_op, kind="stable")
    so, ro = m.send_op[order], m.recv_op[order]
    out = []
    for a, b in zip(so.tolist(), ro.tolist()):
        if s.join[a]:
            out[-1][2].append((int(s.origin[a]), int(s.segment[a])))
        else:
            out.append((a, b, [(int(s.origin[a]), int(s.segment[a]))]))
    return out


def check_invariants(s, topo, nbytes, arrivals, tl, exact_duration):
    rank = s.rank_of_op
    msgs = messages_of(s)
    assert len(tl.start) == len(msgs)
    sizes = s.piece_bytes(nbytes)
    # Rows are the messages in sender list order: endpoints, sizes, piece counts.
    for i, (so, ro, pieces) in enumerate(msgs):
        assert (tl.src[i], tl.dst[i]) == (rank[so], rank[ro])
        assert tl.nbytes[i] == sum(int(sizes[g]) for _, g in pieces)
        assert (1 if tl.pieces is None else tl.pieces[i]) == len(pieces)
    # No message ends before its latency and its bytes at one flow's rate.
    lf, meff = topo.effective_sizes(tl.src, tl.dst, tl.nbytes)
    least = topo.latency[tl.src, tl.dst] * lf + meff / topo.flow_bandwidth()[tl.src, tl.dst]
    if exact_duration:
        assert np.array_equal(tl.end, tl.start + least)
    assert np.all(tl.end - tl.start >= least * (1 - 1e-9))
    # A send message starts once its sender holds every piece: after each delivering
    # message's end and, for an own piece, the sender's arrival.
    got = {}
    for i, (_, _, pieces) in enumerate(msgs):
        for piece in pieces:
            got[(int(tl.dst[i]), piece)] = tl.end[i]
    for i, (_, _, pieces) in enumerate(msgs):
        src = int(tl.src[i])
        need = [arrivals[src] if o == src else got[(src, (o, g))] for o, g in pieces]
        assert tl.start[i] >= max(need) - 1e-12 * max(1.0, max(need))
    # Exits: after the arrival and every message of the rank.
    assert np.all(tl.exits >= arrivals)
    for i in range(len(msgs)):
        assert tl.exits[tl.src[i]] >= tl.end[i] and tl.exits[tl.dst[i]] >= tl.end[i]
    if s.serial:  # one send message and one receive message at a time per rank, in list order
        for list_op in (0, 1):
            by_op = np.argsort([msg[list_op] for msg in msgs])
            rank_of = rank[[msgs[i][list_op] for i in by_op]]
            start, end = tl.start[by_op], tl.end[by_op]
            same = rank_of[1:] == rank_of[:-1]
            assert np.all(start[1:][same] >= end[:-1][same] * (1 - 1e-12))


TOPOS = ["homogeneous", "three-site-grid", "wan-3x16", "tryton-48"]


def topology(name, p, full):
    topo = homogeneous(p) if name == "homogeneous" else load_topology(TOPOLOGIES / f"{name}.yaml", p)
    return topo.with_duplex(full)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), p=st.integers(2, 7), nseg=st.integers(1, 3),
       name=st.sampled_from(TOPOS), serial=st.booleans(), full=st.booleans(),
       nbytes=st.sampled_from([1000, 60_000, 1 << 20]), late=st.booleans())
def test_models_keep_their_invariants_on_random_messages(seed, p, nseg, name, serial, full, nbytes,
                                                         late):
    rng = np.random.default_rng(seed)
    s = random_messages(p, nseg, rng)
    assert not verify(s)
    s.serial = serial
    assume(not verify(s))  # serial chains can deadlock a dataflow schedule
    topo = topology(name, p, full)
    arrivals = rng.uniform(0, 0.01, p) if late else np.zeros(p)
    tl = simulate(s, topo, nbytes, arrivals)[0]
    check_invariants(s, topo, nbytes, arrivals, tl, exact_duration=True)
    fl = fluid_timeline(s, topo, nbytes, arrivals)
    check_invariants(s, topo, nbytes, arrivals, fl, exact_duration=False)


def timed(sched, topo, nbytes, pattern, serial):
    tls, per_iter, mean = simulate_pattern(sched, topo, nbytes, pattern, serial_sends=serial)
    return [(t.start.tobytes(), t.end.tobytes(), t.exits.tobytes()) for t in tls], per_iter, mean


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), p=st.integers(2, 8), nseg=st.integers(1, 3),
       name=st.sampled_from(TOPOS), full=st.booleans(), serial=st.booleans(),
       nbytes=st.sampled_from([1000, 100_000, 1 << 20]))
def test_kernel_times_messages_as_its_references(seed, p, nseg, name, full, serial, nbytes):
    """kernels/dag.c with extra feeds: the same start, end and exit of every message to the
    bit as _PyGraph, and as the numpy waves production runs without the kernels."""
    rng = np.random.default_rng(seed)
    s = random_messages(p, nseg, rng)
    assume(not verify(s, serial=serial))
    topo = topology(name, p, full)
    pattern = np.stack([np.zeros(p), rng.uniform(0, 0.01, p)])
    results = []
    for mode in ("c", "reference", "waves"):
        with c_kernels(mode == "c"), (dag_reference() if mode == "reference" else nullcontext()):
            results.append(timed(s, topo, nbytes, pattern, serial))
    assert results[0] == results[1] == results[2]


def test_kernel_is_used_for_messages():
    s = random_messages(6, 2, np.random.default_rng(3))
    with c_kernels(True):
        plan = Plan(s, homogeneous(6), 1 << 20)
    assert plan.extra is not None and plan._kernel is not None and plan._kernel.n_extra > 0


def test_fluid_metrics_count_messages_once():
    """simulate_fluid's metrics come from the message rows: a rank exits when its last
    message ends."""
    s = exchange(3, True)
    topo = homogeneous(2)
    L, b = lat_bw(topo)
    tl, met = simulate_fluid(s, topo, 3 * 1000)
    assert met.avg_elapsed_s == pytest.approx(L + 3000 / b, rel=1e-12)
    assert met.run_time_s == pytest.approx(L + 3000 / b, rel=1e-12)
    assert {int(k) for k in s.kind} == {SEND, RECV}


def test_gantt_draws_a_message_as_one_bar_with_its_piece_count():
    import matplotlib.pyplot as plt
    from collsched.plot import gantt_figure

    tl = simulate(late_piece_schedule(), homogeneous(4), 1 << 20, np.array([0.0, 0.1, 0.0, 0.0]))[0]
    fig = gantt_figure(tl, "messages")
    try:
        ax = fig.axes[0]
        assert len(ax.patches) == len(tl.start) == 6  # one bar per message
        texts = sorted(t.get_text() for t in ax.texts)
        assert texts.count("x3") == 3 and "0" in texts and "1" in texts
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "xk on a bar: one message of k pieces" in legend
        assert "number on a bar: the rank whose piece it carries" in legend
    finally:
        plt.close(fig)
