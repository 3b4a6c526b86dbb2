"""Pipeline passes: what the pipeline does to every algorithm's schedule between
`generate` and `verify`, so that no algorithm re-runs a later stage itself.

    generate -> gate_link_receives -> mark_fifo -> verify -> simulate -> write

- Receive gating (gate_link_receives): where an algorithm kept its transfers' global
  order (Schedule.transfers, from ir.from_transfers' inputs; Min3 does), a rendezvous
  receive over a shared WAN link is listed after the forward that frees the link, so the
  runtime takes the link's transfers one after another as the plan has them. The gated
  lists are kept only if they make progress under the runtime's rules with the FIFO marks
  they will carry; else the plan's own lists stay. That check is the verifier's
  deadlock walk: whether a gate closes a cycle through a FIFO sender's next message
  depends on every rank's list at once, not on the transfer the gate moves, so it is
  asked here, in the pipeline, where the verifier belongs, rather than by the algorithm.
  The gating needs only the transfers' order and the topology, so any algorithm that
  keeps its order gets it. Schedules with multi-piece messages are left ungated (a
  message is one transfer already; gating would split it).
- FIFO marks (mark_fifo, policy.mark_fifo_links): the sends that wait for the previous
  message on their link (a multi-piece message's head only).

`apply` runs them in that order; anything that builds a schedule outside compile_schedule
and wants what compile would run (tests, benchmarks) calls it after `generate`.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .inputs.links import shared_links
from .ir import BACKGROUND, FOREGROUND, RECV, Schedule, from_transfers
from .model.policy import mark_fifo_links
from .verify import verify

# gate_link_receives: links whose latency is at most this share of a piece's time on them
# (the three-site grid's UT links are gated at 256 KiB, its UK-NTH link is not).
GATE_LATENCY_SHARE = 0.05


def apply(sched: Schedule, topo, nbytes: int) -> Schedule:
    """Every pass, in pipeline order; returns the schedule to verify (a new one where
    gating re-sorted the lists)."""
    sched = gate_link_receives(sched, topo, nbytes)
    mark_fifo(sched, topo, nbytes)
    return sched


def mark_fifo(sched: Schedule, topo, nbytes: int) -> int:
    """The FIFO policy (policy.py): mark the sends that wait for the previous message on
    their link; returns how many."""
    return mark_fifo_links(sched, topo, nbytes)


def gate_link_receives(sched: Schedule, topo, nbytes: int) -> Schedule:
    """The schedule with its receives over filled shared links gated (_gating_keys), if
    it kept its transfers' order and the gated lists make progress; else `sched`. Drops
    Schedule.transfers either way (a pass's input, not part of the result)."""
    t = sched.transfers
    if t is None:
        return sched
    sched.transfers = None
    # Multi-piece messages: not gated. Gating moves single receives past sends, which would
    # split a receive message (its pieces must stay one run of the list, matched by one
    # send message), and the re-sorted lists would drop the join column; a message already
    # takes its link's pieces as one transfer, which is what gating is for.
    if sched.has_messages:
        return sched
    k = max(sched.nseg, 1)
    item = t.origin.astype(np.int64) * k + t.segment
    foreground = (t.send_phase == FOREGROUND) & (t.recv_phase == FOREGROUND)
    send_step, recv_step = _gating_keys(topo, sched.full_duplex, t.src, t.dst, item, t.step,
                                        nbytes // k, foreground)
    if recv_step is None:
        return sched
    lists = from_transfers(sched.nranks, sched.nseg, send_step, t.src, t.dst, t.origin, t.segment,
                           t.send_phase, algorithm=sched.algorithm, recv_phase=t.recv_phase,
                           recv_step=recv_step)
    gated = dataclasses.replace(sched, offsets=lists.offsets, kind=lists.kind, peer=lists.peer,
                                origin=lists.origin, segment=lists.segment, phase=lists.phase,
                                fifo=None)
    return gated if _makes_progress(gated, topo, nbytes) else sched


def _makes_progress(sched: Schedule, topo, nbytes: int) -> bool:
    """Does the schedule make progress under the runtime's rules, with the FIFO marks
    mark_fifo will set, also under serial execution if it has a background part? (A gated
    receive makes its rank's walk the one that lets a FIFO sender's next message go;
    random grids found a cycle through that.)"""
    probe = dataclasses.replace(sched)
    mark_fifo(probe, topo, nbytes)
    return not verify(probe) and not (probe.has_background and verify(probe, serial=True))


def _gating_keys(topo, full_duplex: bool, src, dst, item, step, piece_bytes: int, foreground):
    """Sort keys (send steps, receive steps) that make the runtime take a shared WAN link's
    transfers into one rank one after another, as the plan has them; (step, None) where
    nothing is gated.

    The plan serves a link in turn; the runtime posts every receive as its walk reaches
    it, and a rendezvous message (at least eager_limit bytes) moves once its receive is
    posted - so transfers the plan put one after another on a link all moved at once,
    sharing it, and every piece landed late: on the three-site grid UT pieces planned to
    reach UK one after another all arrived together, at the end, and what UK forwarded
    from them started that much later. So a rendezvous receive over a shared link is listed just
    after the receiver's first forward of the piece it took before over the same link:
    the walk, waiting for that piece (rule 2), posts the receive when the link is free,
    where the plan starts the transfer. On the three-site grid under SMPI that makes Min3
    faster at 256 KiB and 1 MiB (docs/grid.md, "receive gating", has the figures).

    Only where one flow fills the link (window-capped links want several flows in flight,
    policy.py) and its latency is at most GATE_LATENCY_SHARE of the piece's time on it (a
    gated receive is posted when the previous piece has landed, so the next transfer's
    latency is no longer hidden behind it: one latency more per transfer than planned);
    in full duplex, foreground ops, and when the forward comes before the
    receiver's own forward of the gated piece; and a receive moves only past sends, never
    past another receive. So each rank's receives keep the plan's order - the cost model's
    receive-port order (a cycle otherwise: random grids found one), and the order in which
    the k-th send from a peer meets the k-th receive - and its sends keep theirs."""
    if piece_bytes < topo.eager_limit or not full_duplex:
        return step, None
    shared = shared_links(topo)
    wan_of = shared.link_of
    if not (wan_of >= 0).any():
        return step, None
    link_bw = np.r_[shared.bandwidth, np.inf][wan_of]
    filled = ((wan_of >= 0) & (topo.flow_bandwidth() >= link_bw * (1 - 1e-9))
              & (topo.latency <= GATE_LATENCY_SHARE * piece_bytes / link_bw))
    if not filled.any():
        return step, None
    on_link = filled[src, dst] & foreground
    order = np.argsort(step, kind="stable")
    receivers = np.zeros(len(filled), bool)
    receivers[dst[on_link]] = True
    first_send = {}  # (rank, item) -> its first send of the item, by step (link receivers only)
    for j in order[receivers[src[order]]].tolist():
        first_send.setdefault((int(src[j]), int(item[j])), j)
    # The steps of each link receiver's receives, sorted: a receive moves only past sends,
    # so each rank's receive order - the cost model's receive-port order - stays the plan's.
    recv_steps = {int(r): np.sort(step[dst == r]) for r in np.nonzero(receivers)[0]}
    recv_key = step.astype(np.float64)
    previous = {}  # (receiver, link) -> the last transfer into it over the link
    for j in order[on_link[order]].tolist():
        r, lk = int(dst[j]), int(wan_of[src[j], dst[j]])
        i = previous.get((r, lk))
        previous[(r, lk)] = j
        gate = None if i is None else first_send.get((r, int(item[i])))
        own = first_send.get((r, int(item[j])))
        rs = recv_steps[r]
        next_recv = np.searchsorted(rs, step[j], side="right")
        if (gate is not None and foreground[gate] and step[gate] > step[j]
                and (own is None or step[gate] < step[own])
                and (next_recv == len(rs) or rs[next_recv] > step[gate])):
            recv_key[j] = step[gate] + 0.5  # right after the gate, before the next step
    # Dense integer keys for both ends (ir.from_transfers sorts each rank's list by them).
    _, dense = np.unique(np.r_[step.astype(np.float64), recv_key], return_inverse=True)
    n = len(step)
    return dense[:n].astype(np.int64), dense[n:].astype(np.int64)


# The engines a compile can plan for (compile_schedule's engine=): which operations stay
# background (run by the PAT engine before the rank arrives) and which run in the call.
ENGINES = ("pat", "none", "ahead")


def all_foreground(sched: Schedule) -> None:
    """Every operation of `sched` (and of the transfers the passes re-sort) foreground:
    the whole list runs inside the call (engine none). The lists keep their order (the
    background part came first), which the verifier then proves as foreground."""
    sched.phase = np.full_like(sched.phase, FOREGROUND)
    t = sched.transfers
    if t is not None:
        t.send_phase = np.full_like(t.send_phase, FOREGROUND)
        t.recv_phase = np.full_like(t.recv_phase, FOREGROUND)


def leading_receives_only(sched: Schedule) -> None:
    """Engine ahead: per rank, only the leading background receives (those before the
    rank's first other operation, docs/semantics.md) stay background; every other
    operation becomes foreground. The runtime's receive-ahead (docs/cache.md) posts exactly
    those at the end of the call before, so the model times what it runs."""
    lead = np.zeros(len(sched.kind), dtype=bool)
    bg_recv = (sched.phase == BACKGROUND) & (sched.kind == RECV)
    for r in range(sched.nranks):
        lo, hi = int(sched.offsets[r]), int(sched.offsets[r + 1])
        n = int(np.argmin(bg_recv[lo:hi])) if hi > lo and not bg_recv[lo:hi].all() else hi - lo
        lead[lo:lo + n] = True
    sched.phase = np.where(lead, BACKGROUND, FOREGROUND).astype(sched.phase.dtype)
    t = sched.transfers
    if t is not None:  # a transfer stays background only where its receive is a leading one
        ops = {}
        for r in range(sched.nranks):
            for i in range(int(sched.offsets[r]), int(sched.offsets[r + 1])):
                if lead[i]:
                    ops[(int(sched.peer[i]), r, int(sched.origin[i]), int(sched.segment[i]))] = True
        keep = np.array([(int(a), int(b), int(o), int(g)) in ops
                         for a, b, o, g in zip(t.src, t.dst, t.origin, t.segment)], dtype=bool)
        t.recv_phase = np.where(keep, BACKGROUND, FOREGROUND).astype(t.recv_phase.dtype)
        t.send_phase = np.full_like(t.send_phase, FOREGROUND)
