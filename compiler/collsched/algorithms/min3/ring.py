"""Large pools of single ranks in full duplex with equal arrivals: a pipelined ring in
rank order with backfilling into the gaps the pools above left (_schedule_ring), and the
same in C (_ring_kernel)."""
from __future__ import annotations

import bisect
import heapq

import numpy as np

from ... import kernels
from .model import _Model, _Plan


def _ring_fits(model: _Model, plan: _Plan, above: int, ranks: np.ndarray) -> bool:
    """The ring engine's conditions: full duplex, one arrival time for the whole pool,
    pieces entering it from the pools above (a site of a grid; on a cluster that is one
    pool the rounds plan a little shorter, and faster: docs/grid.md), and no transfer
    planned above between two of its ranks (the ring owns its links)."""
    if not above or not model.full_duplex or np.ptp(model.arrival[ranks]) > 0:
        return False
    inside = np.zeros(len(model.arrival), bool)
    inside[ranks] = True
    src, dst = plan.head(above)[:2]
    return bool(inside[dst].any()) and not (inside[src] & inside[dst]).any()


def _schedule_ring(model: _Model, plan: _Plan, holders: list, ranks: np.ndarray,
                   n_items: int, above: int) -> None:
    """Every piece travels the ring of the pool's ranks (in rank order) from each rank that
    holds it to the next one that does; each rank forwards what it holds, earliest first.

    The transfers the pools above planned for these ranks stay where they are; a ring
    transfer goes into a gap of their timelines if it fits there as the simulator orders
    ports (by start): after the op before it has released the port, and releasing it
    before the op after it needs it (sends: start + os(m); receives: the bytes land after
    the previous message's and before the next one's).
    """
    if kernels.available():
        return _ring_kernel(model, plan, holders, ranks, n_items, above)
    m = [int(r) for r in ranks]
    n = len(m)
    loc = {g: i for i, g in enumerate(m)}
    nxt = np.roll(np.asarray(m), -1)
    dur = model.dur[ranks, nxt].tolist()
    early = model.early[ranks, nxt].tolist()  # of the ring transfer into rank i + 1
    os_, gap, fifo = model.os[ranks, nxt].tolist(), model.g[ranks, nxt].tolist(), model.fifo[ranks, nxt].tolist()
    link = model.link_free[ranks, nxt].tolist()
    floor = float(model.arrival[m[0]])  # one arrival for the pool (_ring_fits)
    sends, recvs = _timelines_above(model, plan, above, loc)
    send_starts = [[e[0] for e in x] for x in sends]
    recv_starts = [[e[0] for e in x] for x in recvs]
    # Ring state: the last ring send of each rank (its port and link) and ring receive.
    send_free = [floor] * n
    recv_free = [0.0] * n
    initial, queue = _ring_queues(holders, loc, n_items)

    def earliest(i):
        j = (i + 1) % n
        t = max(queue[i][0][0], send_free[i], link[i], recv_free[j] - early[i])
        if not (sends[i] or recvs[j]):
            return t  # most ranks: nothing planned above
        while True:
            t2 = _recv_fit(recvs[j], recv_starts[j], early[i], dur[i],
                           _send_fit(sends[i], send_starts[i], os_[i], t))
            if t2 == t:
                return t
            t = t2

    # Transfers in start order: a rank's heap entry is its next transfer's start.
    live = [None] * n
    heap = []

    def wake(i):
        if queue[i]:
            t = earliest(i)
            if live[i] is None or t < live[i]:
                live[i] = t
                heapq.heappush(heap, (t, i))

    for i in range(n):
        wake(i)
    src, dst, item, start, end = [], [], [], [], []
    while heap:
        t, i = heapq.heappop(heap)
        if live[i] != t:
            continue  # superseded
        live[i] = None
        # t is still exact: only rank i's own transfers move its ports, its link and the
        # receiving port of i + 1, and its queue's head only gets earlier (wake).
        _, d = heapq.heappop(queue[i])
        j = (i + 1) % n
        en = t + dur[i]
        link[i] = en if fifo[i] else t + gap[i]
        send_free[i] = t + os_[i]
        recv_free[j] = en
        src.append(m[i]), dst.append(m[j]), item.append(d), start.append(t), end.append(en)
        if (j + 1) % n not in initial[d]:
            heapq.heappush(queue[j], (en, d))
            if queue[j][0] == (en, d):
                wake(j)  # a new head: j's next transfer may come earlier
        wake(i)
    plan.extend(src, dst, item, start, end)
    # The model's ports: free after the later of the ring's and the pools' above.
    model.link_free[ranks, nxt] = link
    model.send_free[ranks] = np.maximum(model.send_free[ranks], send_free)
    model.recv_free[ranks] = np.maximum(model.recv_free[ranks], recv_free)
    if start:
        last = np.full(len(model.arrival), -np.inf)
        np.maximum.at(last, np.asarray(dst, np.int64), np.asarray(start))
        model.recv_after[ranks] = np.maximum(model.recv_after[ranks], last[ranks])


def _timelines_above(model: _Model, plan: _Plan, above: int, loc: dict) -> tuple[list, list]:
    """The timelines the pools above planned, by start: per ring rank (local index) its
    sends (start, start + os: the port is free again) and receives (start, end, start +
    early: its bytes begin to land)."""
    sends = [[] for _ in range(len(loc))]
    recvs = [[] for _ in range(len(loc))]
    for s, r, _, st, en in zip(*(c.tolist() for c in plan.head(above))):
        if s in loc:
            sends[loc[s]].append((st, st + float(model.os[s, r])))
        if r in loc:
            recvs[loc[r]].append((st, en, st + float(model.early[s, r])))
    for x in sends + recvs:
        x.sort()
    return sends, recvs


def _send_fit(w: list, starts: list, hold: float, t: float) -> float:
    """Earliest t' >= t at which a rank may start a ring send that holds its port for
    `hold`, between its sends above (w, by start; starts: their starts)."""
    k = bisect.bisect_right(starts, t)
    while True:
        if k and w[k - 1][1] > t:
            t = w[k - 1][1]  # the send before has released the port
        if k < len(w):
            if starts[k] <= t:
                k += 1  # it starts first: it is the one before
                continue
            if t + hold > starts[k]:
                t = starts[k]  # would hold the port when the next one starts
                k += 1
                continue
        return t


def _recv_fit(w: list, starts: list, e: float, d: float, t: float) -> float:
    """Earliest t' >= t at which a rank may start receiving a ring transfer of duration d
    whose bytes begin to land e before its end, between its receives above (w, by start;
    starts: their starts): its bytes land after those of the receive before, and before
    those of the receive after (which land from that one's start + its early)."""
    k = bisect.bisect_right(starts, t)
    while True:
        if k and w[k - 1][1] - e > t:
            t = w[k - 1][1] - e
        if k < len(w):
            if starts[k] <= t:
                k += 1
                continue
            if t + d > w[k][2]:
                t = starts[k]
                k += 1
                continue
        return t


def _ring_queues(holders: list, loc: dict, n_items: int) -> tuple[list, list]:
    """(initial holders of each piece by local index, per rank a heap of (time it holds
    the piece, piece) to forward: each piece a rank holds and its successor lacks)."""
    n = len(loc)
    initial = []
    queue = [[] for _ in range(n)]
    for d in range(n_items):
        h = {loc[g]: t for g, t in holders[d].items()}
        initial.append(h)
        for i, t in h.items():
            if (i + 1) % n not in h:
                queue[i].append((t, d))
    for q in queue:
        heapq.heapify(q)
    return initial, queue


def _ring_kernel(model: _Model, plan: _Plan, holders: list, ranks: np.ndarray,
                 n_items: int, above: int) -> None:
    """_schedule_ring in C (kernels/ring.c): the same transfers, bit for bit."""
    ranks = np.asarray(ranks, np.int64)
    n = len(ranks)
    nxt = np.roll(ranks, -1)
    link = model.link_free[ranks, nxt]
    loc = np.full(len(model.dur), -1, np.int64)
    loc[ranks] = np.arange(n)
    # The timelines above per rank, sorted as the Python sorts its tuples (both sorts are
    # stable, so even equal tuples keep their order).
    s, r, _, st, en = plan.head(above)
    i = loc[s]
    k = i >= 0
    i, s_st, freed = i[k], st[k], st[k] + model.os[s[k], r[k]]
    order = np.lexsort((freed, s_st, i))
    send_off = np.r_[0, np.cumsum(np.bincount(i, minlength=n))].astype(np.int64)
    send_start, send_freed = s_st[order], freed[order]
    j = loc[r]
    k = j >= 0
    j, r_st, r_en, land = j[k], st[k], en[k], st[k] + model.early[s[k], r[k]]
    order = np.lexsort((land, r_en, r_st, j))
    recv_off = np.r_[0, np.cumsum(np.bincount(j, minlength=n))].astype(np.int64)
    recv_start, recv_end, recv_land = r_st[order], r_en[order], land[order]
    # The holders of each piece, in insertion order; every other rank gets it exactly once.
    held_rank = loc[np.array([g for h in holders for g in h], np.int64)]
    if (held_rank < 0).any():  # the Python function fails on it too (loc[g])
        raise KeyError("a holder outside the ring's pool")
    held_time = np.array([t for h in holders for t in h.values()], np.float64)
    nheld = np.array([len(h) for h in holders], np.int64)
    held_off = np.r_[0, np.cumsum(nheld)].astype(np.int64)
    cap = int(((n - nheld) * (nheld > 0)).sum())
    out = [np.empty(cap, np.int64) for _ in range(3)] + [np.empty(cap) for _ in range(2)]
    send_free, recv_free = np.empty(n), np.empty(n)
    count = kernels.ring(
        n=n, n_items=n_items, floor=float(model.arrival[ranks[0]]), dur=model.dur[ranks, nxt],
        early=model.early[ranks, nxt], os=model.os[ranks, nxt], gap=model.g[ranks, nxt],
        fifo=model.fifo[ranks, nxt].astype(np.uint8), link=link, send_off=send_off,
        send_start=send_start, send_freed=send_freed, recv_off=recv_off, recv_start=recv_start,
        recv_end=recv_end, recv_land=recv_land, held_off=held_off, held_rank=held_rank,
        held_time=held_time, cap=cap, out_src=out[0], out_dst=out[1], out_item=out[2],
        out_start=out[3], out_end=out[4], send_free=send_free, recv_free=recv_free)
    src, dst, item, start, end = (a[:count] for a in out)
    dst = ranks[dst]
    plan.extend(ranks[src], dst, item, start, end)
    # The model's ports, as the Python function leaves them.
    model.link_free[ranks, nxt] = link
    model.send_free[ranks] = np.maximum(model.send_free[ranks], send_free)
    model.recv_free[ranks] = np.maximum(model.recv_free[ranks], recv_free)
    if count:
        last = np.full(len(model.arrival), -np.inf)
        np.maximum.at(last, dst, start)
        model.recv_after[ranks] = np.maximum(model.recv_after[ranks], last[ranks])
