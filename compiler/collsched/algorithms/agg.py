"""`agg`: arrival-aware allgather with multi-piece messages, planned for serial execution
on a cluster (docs/agg.md).

The list scheduler of agg_plan.py keeps every receive port busy from the first arrival on:
whenever a receive port frees it takes, from a free send port, the pieces the receiver
still needs from that holder (rarest first, up to a cap) as one message, paying one
latency for all of them. A rank receives and relays in the background before it arrives
(the PAT engine's serial background part); its own piece leaves after its arrival.

Lists come from one global order of planned message starts (ir.from_transfers with step =
the message's index in that order, join for the message's further pieces), as min3 does:
a forwarded piece leaves after it has arrived, so every wait points backwards and the
k-th send message a->b meets the k-th receive message at b from a. An op that starts
before its rank arrives is background (a message carrying the sender's own piece never
is: it starts at the arrival or later).

Messages grow with time (agg_plan.Settings.grow = GROW transfer times of one piece per
extra piece): early, few pieces exist and small messages spread them fast; later, large
ones amortise the latency. Segments (Request.nseg) make the early messages smaller still.
Without arrivals (or flat ones) the same scheduler runs with every rank at 0.
"""
from __future__ import annotations

import numpy as np

from ..ir import BACKGROUND, FOREGROUND, from_transfers, segment_bytes as item_bytes
from .agg_ahead import plan_ahead
from .agg_plan import Message, Settings, plan
from .registry import Request, register

# Settings.grow in transfer times of one piece (docs/agg.md: 3 was the best of 0..4 on the
# lab's tryton-48 patterns).
GROW = 3.0
# agg_ahead's longest wait for a busy holder, in transfer times of one piece (0.3 was the
# best of 0, 0.3, 1 there).
MAX_WAIT = 0.3


def _arrivals(req: Request) -> np.ndarray:
    p = req.nranks
    a = np.zeros(p) if req.arrivals is None else np.asarray(req.arrivals, np.float64)
    return a - a.min() if p else a


def _topology(req: Request):
    from ..inputs.topology import homogeneous

    if req.topology is not None:
        return req.topology
    return homogeneous(req.nranks, full_duplex=req.full_duplex)


def _refuse(req: Request):
    topo = req.topology
    if topo is None or req.nranks < 2:
        return None
    if topo.nranks != req.nranks:
        return f"the topology places {topo.nranks} ranks, expected {req.nranks}"
    sites = len(set(topo.rank_site()))
    if sites > 1:
        return f"agg plans for one site (a cluster); the topology has {sites} sites (use min3)"
    return None


def retime(msgs: list[Message], topo, p: int, nseg: int, ibytes, arrivals,
           full_duplex: bool = True) -> np.ndarray:
    """Exit times of the messages' lists under serial execution (docs/semantics.md), as the
    cost model times them: each message starts once its sender's previous send message and
    its receiver's previous receive message have ended, the sender holds every piece (its
    own from its arrival) and, for a foreground end, that rank has arrived. Half duplex:
    one port per rank, for its sends and receives alike."""
    a = np.asarray(arrivals, np.float64)
    send_end = [0.0] * p
    recv_end = [0.0] * p if full_duplex else send_end
    exit_ = a.tolist()
    got = [dict() for _ in range(p)]  # item -> time delivered
    k = nseg
    cache = {}
    for m in msgs:
        s, r = m.src, m.dst
        t = max(send_end[s], recv_end[r])
        if m.start >= a[s]:
            t = max(t, a[s])
        if m.start >= a[r]:
            t = max(t, a[r])
        for i in m.items:
            t = max(t, a[s] if i // k == s else got[s][i])
        nb = int(sum(ibytes[i % k] for i in m.items))
        if nb not in cache:
            cache[nb] = topo.transfer_time(nb)
        end = t + float(cache[nb][s, r])
        send_end[s] = recv_end[r] = end
        if not full_duplex:
            send_end[r] = end
        for i in m.items:
            got[r][i] = end
        exit_[s] = max(exit_[s], end)
        exit_[r] = max(exit_[r], end)
    return np.maximum(np.array(exit_), a)


def settings_for(req: Request, topo) -> Settings:
    """The planner's settings for a request: one piece per message if Request.aggregate is
    False, else messages that grow GROW piece times per extra piece."""
    from ..model.simulate import piece_time

    if req.aggregate is False:
        return Settings(cap=1)
    k = max(req.nseg, 1)
    return Settings(grow=GROW * piece_time(topo, int(item_bytes(req.nbytes, k).max())))


def plan_request(req: Request, settings: Settings | None = None) -> list[Message]:
    """The planned messages of a request in planned start order: the look-ahead scheduler
    (agg_ahead) in full duplex, the matching one (agg_plan) in half duplex."""
    from ..model.simulate import piece_time

    p, k = req.nranks, max(req.nseg, 1)
    topo = _topology(req)
    st = settings_for(req, topo) if settings is None else settings
    ib, a = item_bytes(req.nbytes, k), _arrivals(req)
    if not req.full_duplex:
        return plan(topo, p, k, ib, a, st, full_duplex=False)
    wait = MAX_WAIT * piece_time(topo, int(ib.max()))
    msgs = plan_ahead(topo, p, k, ib, a, st, max_wait=wait)
    msgs.sort(key=lambda m: m.start)  # stable: committed order among equal starts
    return msgs


@register("agg", "arrival-aware allgather with multi-piece messages: a serial list scheduler "
                 "that aggregates what a receiver needs from a holder (docs/agg.md)", _refuse)
def build(req: Request):
    """The serial plan, or spreading's direct dataflow schedule where the cost model times
    that one faster (flat arrivals: a serial plan pays a latency per message in turn)."""
    from ..model.simulate import simulate
    from .spreading import build as spreading

    p, k = req.nranks, max(req.nseg, 1)
    a = _arrivals(req)
    msgs = plan_request(req) if p > 1 else []
    sched = to_schedule(msgs, p, k, a)
    if p < 2:
        return sched
    topo = _topology(req)
    mine = float(np.mean(retime(msgs, topo, p, k, item_bytes(req.nbytes, k), a, req.full_duplex) - a))
    direct = spreading(req)
    theirs = simulate(direct, topo, req.nbytes, a)[1].avg_elapsed_s
    if theirs < mine:
        direct.planned_run_time_s = None
        return direct
    return sched


def to_schedule(msgs: list[Message], p: int, k: int, a: np.ndarray):
    """The schedule of planned messages (global order = planned start, then plan order)."""
    order = sorted(range(len(msgs)), key=lambda i: (msgs[i].start, i))
    step, src, dst, item, sph, rph, join = [], [], [], [], [], [], []
    for idx, i in enumerate(order):
        m = msgs[i]
        bs = BACKGROUND if m.start < a[m.src] else FOREGROUND
        br = BACKGROUND if m.start < a[m.dst] else FOREGROUND
        for j, it in enumerate(m.items):
            step.append(idx)
            src.append(m.src)
            dst.append(m.dst)
            item.append(it)
            sph.append(bs)
            rph.append(br)
            join.append(1 if j else 0)
    step = np.array(step, np.int64)
    item = np.array(item, np.int64)
    src, dst = np.array(src, np.int64), np.array(dst, np.int64)
    sph, rph = np.array(sph, np.uint8), np.array(rph, np.uint8)
    origin, seg = item // k, item % k
    sched = from_transfers(p, k, step, src, dst, origin, seg, sph, algorithm="agg",
                           recv_phase=rph, join=np.array(join, np.uint8))
    sched.serial = bool(msgs)  # nothing to run serially without messages
    ends = [m.end for m in msgs]
    sched.planned_run_time_s = float(max(ends) - a.min()) if ends else 0.0
    return sched
