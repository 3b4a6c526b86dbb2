"""Small pools of single ranks: the exact greedy with one heap entry per receiving rank
(_schedule_leaf_pool), and the same in C (_leaf_pool_kernel)."""
from __future__ import annotations

import heapq
import operator

import numpy as np

from ... import kernels
from .model import _Model, _Plan, _preference


def _schedule_leaf_pool(model: _Model, plan: _Plan, holders: list, ranks: np.ndarray,
                        n_items: int, nseg: int) -> None:
    """ScheduleInputPool for a pool whose sub-pools are single ranks.

    The same greedy as _schedule_input_pool, with MinTime kept per receiving rank (the
    minimum over the pieces it lacks) instead of per (piece, rank): a port-time change then
    invalidates one heap entry instead of one per piece. Runs on plain lists of the pool's
    own block of the cost matrices (single values from numpy arrays are slow).
    """
    direct = model.direct  # no relays: a receiver never becomes a source (Python only)
    if kernels.available() and not direct:
        return _leaf_pool_kernel(model, plan, holders, ranks, n_items, nseg)
    ports = _LeafLists(model, ranks)
    members, n = ports.members, len(ports.members)
    loc = {g: i for i, g in enumerate(members)}
    # The lists are updated in place (ports.commit): these names stay bound to them.
    dur, early, link, after = ports.dur, ports.early, ports.link, ports.after
    send_free, recv_free, overlap, arrival = ports.send_free, ports.recv_free, ports.overlap, ports.arrival
    p = len(model.dur)
    held = [{loc[g]: t for g, t in holders[d].items()} for d in range(n_items)]
    lacking = []
    for i, g in enumerate(members):
        lack = [d for d in range(n_items) if i not in held[d]]
        lack.sort(key=lambda d: _preference(p, nseg, g, d))
        lacking.append(lack)
    # No transfer into r completes before its port frees plus the fastest byte time.
    bytes_min = [min(dur[s][r] - early[s][r] for s in range(n) if s != r) for r in range(n)]
    dur_min = [min(dur[s][r] for s in range(n) if s != r) for r in range(n)]
    # Columns (per receiver r, a list over senders s), for best_for.
    dur_to = [list(c) for c in zip(*dur)]
    early_to = [list(c) for c in zip(*early)]
    link_to = ports.link_to

    def best_for(r):
        """FindMin over every piece r lacks: (time, sender, piece)."""
        best, bs, bd = np.inf, -1, -1
        rf, ov, af = recv_free[r], overlap[r], after[r]
        floor = max(rf + (bytes_min[r] if ov else dur_min[r]), min(send_free) + dur_min[r])
        # A transfer s -> r of a piece s holds from `ready` takes max(c[s], ready) + dur:
        # the rest of the max depends on s only. cs + dur bounds every candidate from
        # below, so once the best reaches the smallest of them nothing can beat it.
        port = [rf - e for e in early_to[r]] if ov else [rf] * n
        c = list(map(max, send_free, link_to[r], port, [af] * n))
        dr = dur_to[r]
        at_c = list(map(operator.add, c, dr))
        at_c[r] = np.inf  # r lacks the pieces it looks for
        low = min(at_c)
        floor = max(floor, low)
        for d in lacking[r]:
            for s, ready in held[d].items():
                t = at_c[s] if ready <= c[s] else ready + dr[s]
                if t < best:
                    best, bs, bd = t, s, d
            if best <= floor:
                break  # nothing can beat it
        return best, bs, bd

    # Ties between receivers (equal completion times, the rule on a uniform cluster):
    # the lower rank, or in a serial plan (arrival-aware on a cluster) the neediest
    # receiver - the one lacking the most pieces, then the latest to arrive. Its exit is
    # the furthest away; serving it first lowers the average elapsed time on tryton-48
    # (docs/grid.md, "Neediest receiver first"). One integer per receiver, (need, arrival order, rank)
    # packed in that order, ranks a tie; kernels/leaf_pool.c packs it alike.
    neediest = model.serial
    order = sorted(range(n), key=lambda i: (-arrival[i], i)) if neediest else range(n)
    rank_of = dict(enumerate(order))  # tie % n -> receiver
    place = {r: i for i, r in rank_of.items()}

    def tie(r):
        return (n_items - len(lacking[r])) * n + place[r] if neediest else r

    key = {}  # receiver -> (lower bound on its best time, its tie) of its newest heap entry
    heap = []
    for r in range(n):
        if lacking[r]:
            key[r] = (best_for(r)[0], tie(r))
            heap.append(key[r])
    heapq.heapify(heap)
    while heap:
        entry = heapq.heappop(heap)
        r = rank_of[entry[1] % n]
        if entry != key.get(r):
            continue  # superseded by a newer entry
        t, s, d = best_for(r)
        while heap and heap[0] != key.get(rank_of[heap[0][1] % n]):
            heapq.heappop(heap)
        if heap and ((t, entry[1]) > heap[0] if neediest else t > heap[0][0]):
            key[r] = (t, entry[1])
            heapq.heappush(heap, key[r])
            continue
        start, end = ports.commit(s, r, held[d][s])
        plan.add(members[s], members[r], d, start, end)
        if not direct:
            held[d][r] = end
        lacking[r].remove(d)
        del key[r]
        if lacking[r]:
            key[r] = (t, tie(r))  # a lower bound: its ports only got later
            heapq.heappush(heap, key[r])
        # The new holder may serve d earlier than anyone so far (UpdateAfterSched, l. 2-6).
        sf = max(send_free[r], end)
        dr, lr = dur[r], link[r]
        for y in (() if direct else range(n)):
            if y != r and y not in held[d]:
                t3 = max(sf, lr[y], after[y], recv_free[y] - (early[r][y] if overlap[y] else 0.0)) + dr[y]
                if t3 < key[y][0]:
                    key[y] = (t3, key[y][1])
                    heapq.heappush(heap, key[y])
    ports.write_back()
    for d in range(n_items):
        holders[d].update({members[i]: t for i, t in held[d].items()})


class _LeafLists:
    """The pool's block of the model as plain lists (local rank indices), its update rules
    (_Model.commit without shared links: a pool of single ranks has none inside), and the
    write-back into the model."""

    def __init__(self, model: _Model, ranks: np.ndarray):
        self.model, self.ranks, self.ix = model, ranks, np.ix_(ranks, ranks)
        self.members = [int(r) for r in ranks]
        ix = self.ix
        self.dur, self.early = model.dur[ix].tolist(), model.early[ix].tolist()
        self.link = model.link_free[ix].tolist()
        self.link_to = [list(c) for c in zip(*self.link)]  # kept equal to link, transposed
        self.os, self.gap, self.fifo = model.os[ix].tolist(), model.g[ix].tolist(), model.fifo[ix].tolist()
        self.send_free = model.send_free[ranks].tolist()
        self.recv_free = model.recv_free[ranks].tolist()
        self.overlap = model.recv_overlap[ranks].tolist()
        self.after = model.recv_after[ranks].tolist()
        self.arrival = model.arrival[ranks].tolist()

    def commit(self, s: int, r: int, ready: float) -> tuple[float, float]:
        """Take transfer s -> r of a piece s holds from `ready` on; returns (start, end)."""
        send_free, recv_free, overlap, arrival = self.send_free, self.recv_free, self.overlap, self.arrival
        start = max(send_free[s], ready, self.link[s][r], self.after[r],
                    recv_free[r] - (self.early[s][r] if overlap[r] else 0.0))
        end = start + self.dur[s][r]
        self.link[s][r] = self.link_to[r][s] = end if self.fifo[s][r] else start + self.gap[s][r]
        self.after[r] = start
        sent = start + self.os[s][r]
        if self.model.full_duplex:
            send_free[s], recv_free[r] = sent, end
        else:
            recv_free[s], send_free[s], overlap[s] = sent, max(arrival[s], sent), False
            recv_free[r], send_free[r], overlap[r] = end, max(arrival[r], end), True
        return start, end

    def write_back(self) -> None:
        model, ranks = self.model, self.ranks
        model.link_free[self.ix] = np.array(self.link)
        model.send_free[ranks], model.recv_free[ranks] = self.send_free, self.recv_free
        model.recv_overlap[ranks], model.recv_after[ranks] = self.overlap, self.after


def _leaf_pool_kernel(model: _Model, plan: _Plan, holders: list, ranks: np.ndarray,
                      n_items: int, nseg: int) -> None:
    """_schedule_leaf_pool in C (kernels/leaf_pool.c): the same transfers, bit for bit."""
    ranks = np.asarray(ranks, np.int64)
    n = len(ranks)
    loc = {g: i for i, g in enumerate(ranks.tolist())}
    ix = np.ix_(ranks, ranks)
    link = np.ascontiguousarray(model.link_free[ix])
    send_free, recv_free = model.send_free[ranks], model.recv_free[ranks]
    overlap, after = model.recv_overlap[ranks].astype(np.uint8), model.recv_after[ranks]
    held = [(loc[g], t) for h in holders for g, t in h.items()]
    held_off = np.r_[0, np.cumsum([len(h) for h in holders])].astype(np.int64)
    held_rank = np.array([i for i, _ in held], np.int64)
    held_time = np.array([t for _, t in held], np.float64)
    cap = n * n_items - len(held)
    out = [np.empty(cap, np.int64) for _ in range(3)] + [np.empty(cap) for _ in range(2)]
    # neediest_first: the tie rule _schedule_leaf_pool calls `neediest`, on in a serial plan.
    count = kernels.leaf_pool(
        n=n, n_items=n_items, p=len(model.dur), nseg=nseg, full=model.full_duplex,
        neediest_first=model.serial, members=ranks, dur=np.ascontiguousarray(model.dur[ix]),
        early=np.ascontiguousarray(model.early[ix]), link=link,
        os=np.ascontiguousarray(model.os[ix]), gap=np.ascontiguousarray(model.g[ix]),
        fifo=model.fifo[ix].astype(np.uint8), send_free=send_free, recv_free=recv_free,
        overlap=overlap, after=after, arrival=np.ascontiguousarray(model.arrival[ranks]),
        held_off=held_off, held_rank=held_rank, held_time=held_time, out_src=out[0],
        out_dst=out[1], out_item=out[2], out_start=out[3], out_end=out[4])
    src, dst, item, start, end = (a[:count] for a in out)
    plan.extend(ranks[src], ranks[dst], item, start, end)
    model.link_free[ix] = link
    model.send_free[ranks], model.recv_free[ranks] = send_free, recv_free
    model.recv_overlap[ranks], model.recv_after[ranks] = overlap.astype(bool), after
    for r, d, t in zip(ranks[dst].tolist(), item.tolist(), end.tolist()):
        holders[d][r] = t
