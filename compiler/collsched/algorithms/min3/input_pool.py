"""Pools of pools: the paper's ScheduleInputPool (Fig. 5) with a heap over (piece,
sub-pool), FindMin (Fig. 4) on Python lists in small pools (_ListSearch), with numpy and
per-site receiver sides shared by all holders in large ones (_ArraySearch), relays through
a third site where shared WAN links make them worth a look, and the same search in C
(_input_pool_kernel)."""
from __future__ import annotations

import heapq

import numpy as np

from ... import kernels
from .model import _Model, _Plan

# Relays through a third site are searched in pools of pools where (ranks in the pool) x
# (ranks of the largest sub-pool) is at most this (three-site-grid's root: 20 x 12).
RELAY_SEARCH_LIMIT = 4096
# Pools of pools of at most this many ranks are searched on Python lists, larger ones
# with numpy (same results).
LIST_SEARCH_LIMIT = 64

def _find_min(model: _Model, hold: dict, receivers: np.ndarray) -> tuple[float, int, int]:
    """FindMin (Fig. 4): earliest completion of a piece from its holders to a sub-pool."""
    srcs = np.fromiter(hold.keys(), np.int64, len(hold))
    ready = np.fromiter(hold.values(), np.float64, len(hold))
    x = np.maximum(model.send_free[srcs], ready)
    ix = (srcs[:, None], receivers[None, :])
    port = np.maximum(model.recv_after[receivers],
                      model.recv_free[receivers] - model.early[ix] * model.recv_overlap[receivers])
    t = np.maximum(np.maximum(x[:, None], model.link_free[ix]), port)
    if len(model.wan_free) > 1:
        t = np.maximum(t, model.wan_ready(*ix))
    t += model.dur[ix]
    i, j = np.unravel_index(int(np.argmin(t)), t.shape)
    return float(t[i, j]), int(srcs[i]), int(receivers[j])


def _nest_rows(tree, node, ranks) -> np.ndarray:
    """Per rank of `ranks` (in that order), the pools it lies in below `node`, outermost
    first, padded with -(rank + 1): the rows of two ranks first differ at the level where
    their pools part (for _enters_once)."""
    paths = {r: [] for r in np.asarray(ranks).tolist()}
    stack = [node]
    while stack:  # a pool's sub-pools are appended after the pool itself: top down
        cur = stack.pop()
        for c in tree.successors(cur):
            for r in np.asarray(tree.nodes[c]["ranks"]).tolist():
                paths[r].append(c)
            stack.append(c)
    depth = max(len(x) for x in paths.values()) + 1
    return np.array([path + [-(r + 1)] * (depth - len(path)) for r, path in paths.items()], np.int64)


def _enters_once(nest, s, x, holders) -> bool:
    """May a relay's first hop s -> x go without its piece entering a pool a second time?
    `nest` rows (_nest_rows) indexed like s, x and the holders: the hop enters x's pool at
    the level where s and x part, and none of the piece's holders may be in it already.
    (Two relays of one piece through one sub-pool made it enter a pool inside twice.)"""
    row_s, row_x = nest[s], nest[x]
    k = 0
    while row_s[k] == row_x[k]:
        k += 1
    entered = row_x[k]
    return all(nest[h][k] != entered for h in holders)


def _find_relay(model: _Model, hold: dict, relays: np.ndarray, receivers: np.ndarray,
                group_of: np.ndarray, nest: dict):
    """The best two-hop delivery holder -> x -> receiver through a rank x of a sub-pool that
    already has the piece: (estimated completion, holder, x, receiver).

    Beyond the paper: its FindMin sends a piece into a sub-pool only from the ranks that hold
    it, so every piece of a site crosses the WAN from that site. With shared WAN links that
    piles one site's pieces onto one link (three-site-grid: NTH's 8 pieces on NTH -> UT,
    while UK -> UT idles after UK's 4); a relay through another site of the same sub-pool
    spreads them over both links. The piece still enters each pool once: x's pools get it
    from this hop (which may not enter one already holding it: _enters_once), and the
    recursion below sees them as holding it."""
    srcs = np.fromiter(hold.keys(), np.int64, len(hold))
    ready = np.fromiter(hold.values(), np.float64, len(hold))
    x = np.maximum(model.send_free[srcs], ready)
    ix = (srcs[:, None], relays[None, :])
    port = np.maximum(model.recv_after[relays],
                      model.recv_free[relays] - model.early[ix] * model.recv_overlap[relays])
    t1 = np.maximum(np.maximum(x[:, None], model.link_free[ix]), port)
    t1 = np.maximum(t1, model.wan_ready(*ix)) + model.dur[ix]
    # The first hop stays inside the relay's sub-pool: from another one, the piece would
    # enter that sub-pool a second time; nor may it enter a pool inside twice.
    ok = np.array([[_enters_once(nest, s, x, hold) for x in relays.tolist()] for s in srcs.tolist()],
                  bool).reshape(len(srcs), len(relays))
    t1 = np.where((group_of[srcs][:, None] == group_of[relays][None, :]) & ok, t1, np.inf)
    via = np.argmin(t1, axis=0)  # best holder for each relay
    t1 = t1[via, np.arange(len(relays))]
    ix2 = (relays[:, None], receivers[None, :])
    port2 = np.maximum(model.recv_after[receivers],
                       model.recv_free[receivers] - model.early[ix2] * model.recv_overlap[receivers])
    t2 = np.maximum(np.maximum(model.send_free[relays], t1)[:, None], model.link_free[ix2])
    t2 = np.maximum(np.maximum(t2, port2), model.wan_ready(*ix2)) + model.dur[ix2]
    i, j = np.unravel_index(int(np.argmin(t2)), t2.shape)
    return float(t2[i, j]), int(srcs[via[i]]), int(relays[i]), int(receivers[j])


def _schedule_input_pool(model: _Model, plan: _Plan, holders: list, groups: list, items,
                         nest_rows=None, receivers=None) -> None:
    """ScheduleInputPool (Fig. 5) with InitSched (Fig. 3) and UpdateAfterSched (Fig. 6).

    `holders[d]` maps each rank of this pool holding piece d to when it holds it (one rank
    on entry); `groups` are the sub-pools' rank arrays. The heap holds, per (piece, sub-pool
    lacking it), a lower bound of its MinTime: port times only grow, so a popped entry is
    the true minimum once its recomputed value is no larger than the next entry's. A new
    holder can only bring its piece's pairs forward; they are recomputed at once.

    `receivers` (beyond the paper; None: every rank of each sub-pool): per sub-pool, the
    ranks that may receive a piece entering it directly (gateways, schedule._gateways; a
    relay's first hop may still go to any rank). The pool's local order is then the
    receivers, sub-pool by sub-pool, followed by the other ranks: the search (and the C
    kernel) takes sub-pool j's receivers as one range of it (goff), membership apart.
    """
    group_of = {}
    for j, g in enumerate(groups):
        for r in np.asarray(g).tolist():
            group_of[r] = j
    pool = np.concatenate([np.asarray(g, np.int64) for g in groups])
    if receivers is not None and all(len(a) == len(g) for a, g in zip(receivers, groups)):
        receivers = None  # no restriction after all
    order = None
    if receivers is not None:
        may = np.zeros(len(model.arrival), bool)
        for a in receivers:
            may[np.asarray(a, np.int64)] = True
        order = np.r_[np.nonzero(may[pool])[0], np.nonzero(~may[pool])[0]]
        pool = pool[order]
        receivers = [np.asarray(g, np.int64)[may[np.asarray(g, np.int64)]] for g in groups]
    # Relays (_find_relay) where the shared WAN links make them worth a look and the search
    # stays small; large pools (grid-8x128's continents) send from the holders only.
    use_relays = (len(model.wan_free) > 1 and len(groups) > 1
                  and len(pool) * max(len(g) for g in groups) <= RELAY_SEARCH_LIMIT
                  and bool((model.wan_of[np.ix_(pool, pool)] >= 0).any()))
    # The pools below this one, for relays only (_enters_once): nest_rows() gives them.
    nest = nest_rows() if use_relays else None
    if nest is not None and order is not None:
        nest = nest[order]  # rows in the pool's local order
    if receivers is None:
        receivers = groups
    if kernels.available():  # the same search in C; use_relays decided above
        if receivers is groups:
            return _input_pool_kernel(model, plan, holders, groups, items, use_relays, nest)
        return _input_pool_kernel(model, plan, holders, groups, items, use_relays, nest,
                                  receivers=receivers, pool=pool)
    pending = {}
    heap = []
    # The same search on plain lists for small pools (numpy's per-call cost dominates there).
    search = (_ListSearch if len(pool) <= LIST_SEARCH_LIMIT else _ArraySearch)(
        model, plan, holders, groups, pool, group_of, use_relays, nest, receivers)
    best = search.best

    for d in items:
        todo = set(range(len(groups)))
        for h in holders[d]:
            todo.discard(group_of[h])
        pending[d] = todo
        for j in todo:
            heap.append((best(d, j, todo)[0], d, j))
    heapq.heapify(heap)
    while heap:
        t, d, j = heapq.heappop(heap)
        if j not in pending[d]:
            continue  # an outdated duplicate of a pair already scheduled
        t2, hops = best(d, j, pending[d])
        if heap and t2 > heap[0][0]:
            heapq.heappush(heap, (t2, d, j))
            continue
        search.take(d, hops)
        pending[d].discard(j)
        for j2 in pending[d]:
            heapq.heappush(heap, (best(d, j2, pending[d])[0], d, j2))
    search.close()


class _ArraySearch:
    """FindMin and relays over the model's numpy arrays (large pools).

    FindMin from a holder s into sub-pool j, max(x, link, port, shared link) + dur over
    the receivers, depends on s only through x (its send port and the piece), its rows of
    the cost matrices and its row of link_free. Holders whose rows toward j are equal (a
    site's ranks) share one receiver side, max(port, shared link), per model state
    (`_receiver_side`), and x drops out once it is at most all of it. link_free is 0
    except toward receivers s has sent to: it can only make those later, so it matters
    only if the first minimum is one of them (then the general _find_min decides)."""

    def __init__(self, model, plan, holders, groups, pool, group_of, use_relays, nest, receivers=None):
        receivers = groups if receivers is None else receivers
        # self.groups: the ranks each sub-pool receives into (all of it, or its gateways)
        self.model, self.plan, self.holders, self.groups = model, plan, holders, receivers
        self.pool, self.group_of, self.use_relays = pool, group_of, use_relays
        # _enters_once's rows by global rank (relays only)
        self.nest = None if nest is None else dict(zip(pool.tolist(), map(tuple, nest.tolist())))
        self.group_arr = np.full(len(model.send_free), -1, np.int64)
        for j, g in enumerate(groups):
            self.group_arr[np.asarray(g, np.int64)] = j
        self.state = 0  # counts commits: the receiver sides of an older state are stale
        self.sides = {}
        # Per sub-pool j: each pool rank's row class toward j (dur, early, shared link).
        self.row_class, self.class_rows = [], []
        pool_list = pool.tolist()
        for g in receivers:
            ix = np.ix_(pool, g)
            rows = (model.dur[ix], model.early[ix], model.wan_of[ix])
            classes, label = {}, {}
            for i, s in enumerate(pool_list):
                key = b"".join(r[i].tobytes() for r in rows)
                label[s] = classes.setdefault(key, len(classes))
            first = {}
            for i, s in enumerate(pool_list):
                first.setdefault(label[s], i)
            self.row_class.append(label)
            self.class_rows.append([tuple(r[i] for r in rows) for _, i in sorted(first.items())])
        # Where link_free is not 0 inside the pool: sender -> its receivers.
        self.sent_to = {}
        for s, r in zip(*np.nonzero(model.link_free[np.ix_(pool, pool)])):
            self.sent_to.setdefault(pool_list[s], set()).add(pool_list[r])

    def _receiver_side(self, j, k):
        """(smallest side, time, receiver, its index, side, dur) of row class k into
        sub-pool j: side = max(port, shared link) per receiver; time and receiver: the
        first minimum of side + dur."""
        got = self.sides.get((j, k))
        if got is not None and got[0] == self.state:
            return got[1]
        m, g = self.model, self.groups[j]
        dur, early, wan_of = self.class_rows[j][k]
        side = np.maximum(m.recv_after[g], m.recv_free[g] - early * m.recv_overlap[g])
        if len(m.wan_free) > 1:
            side = np.maximum(side, m.wan_free[wan_of])
        t = side + dur
        i = int(np.argmin(t))
        out = (float(side.min()), float(t[i]), int(g[i]), i, side, dur)
        self.sides[j, k] = (self.state, out)
        return out

    def _find_min(self, hold, j):
        """_find_min(model, hold, groups[j]), holder by holder (np.argmin's first holder)."""
        t, bs, br = np.inf, -1, -1
        m, label = self.model, self.row_class[j]
        for s, ready in hold.items():
            k = label.get(s)
            v = None
            if k is not None:
                x = max(m.send_free[s], ready)
                smallest, v, r, i, side, dur = self._receiver_side(j, k)
                if x > smallest:  # else every receiver's max(x, side) is its side
                    tx = np.maximum(x, side) + dur
                    i = int(np.argmin(tx))
                    v, r = float(tx[i]), int(self.groups[j][i])
                if r in self.sent_to.get(s, ()) and max(x, m.link_free[s, r], side[i]) + dur[i] != v:
                    v = None  # its link to r is still busy: ask the general search
            if v is None:
                v, _, r = _find_min(m, {s: ready}, self.groups[j])
            if v < t or bs < 0:
                t, bs, br = v, s, r
        return t, bs, br

    def best(self, d, j, pending_d):
        """(time, hops): the earliest delivery of piece d into sub-pool j."""
        hold = self.holders[d]
        t, s, r = self._find_min(hold, j)
        if self.use_relays:
            relays = np.array([x for x in self.pool.tolist() if x not in hold
                               and self.group_of[x] not in pending_d], np.int64)
            if len(relays):
                t2, s2, x, r2 = _find_relay(self.model, hold, relays, self.groups[j], self.group_arr,
                                            self.nest)
                if t2 < t:
                    return t2, ((s2, x), (x, r2))
        return t, ((s, r),)

    def take(self, d, hops):
        for s, r in hops:
            start, end = self.model.commit(s, r, self.holders[d][s])
            self.plan.add(s, r, d, start, end)
            self.holders[d][r] = end
            self.state += 1
            self.sent_to.setdefault(s, set()).add(r)

    def close(self):
        pass


class _ListSearch:
    """_ArraySearch on Python lists of the pool's own block of the model (local rank
    indices), with the same arithmetic and the same tie-breaks (first holder, then first
    receiver, as np.argmin), written back to the model by close()."""

    def __init__(self, model, plan, holders, groups, pool, group_of, use_relays, nest, receivers=None):
        self.model, self.plan, self.holders, self.use_relays = model, plan, holders, use_relays
        self.nest = None if nest is None else [tuple(r) for r in nest.tolist()]  # local index
        self.members = members = pool.tolist()
        self.pool_ix = ix = np.ix_(pool, pool)
        loc = {g: i for i, g in enumerate(members)}
        # the ranks each sub-pool receives into (all of it, or its gateways), local indices
        self.groups = [[loc[r] for r in np.asarray(g).tolist()]
                       for g in (groups if receivers is None else receivers)]
        self.group = [group_of[g] for g in members]
        self.dur, self.early = model.dur[ix].tolist(), model.early[ix].tolist()
        self.link = model.link_free[ix].tolist()
        self.os, self.gap, self.fifo = model.os[ix].tolist(), model.g[ix].tolist(), model.fifo[ix].tolist()
        self.send_free, self.recv_free = model.send_free[pool].tolist(), model.recv_free[pool].tolist()
        self.overlap, self.after = model.recv_overlap[pool].tolist(), model.recv_after[pool].tolist()
        self.arrival = model.arrival[pool].tolist()
        # Shared links: index per pair (-1: none, the last entry of wan_free, 0 forever).
        self.links = len(model.wan_free) > 1
        self.wan_of, self.wan_hold = model.wan_of[ix].tolist(), model.wan_hold[ix].tolist()
        self.wan_free = model.wan_free.tolist()
        # reach[j][x]: (shared link, shortest transfer over it) from x into sub-pool j, for
        # pruning relays: no delivery through x beats max(x ready, link free) + that.
        self.reach = [[self._reach(x, g) for x in range(len(members))] for g in self.groups]
        # Holders with local keys, in the same (insertion) order.
        self.held = [{loc[g]: t for g, t in h.items()} for h in holders]

    def _reach(self, x, receivers):
        best = {}
        for r in receivers:
            k, d = self.wan_of[x][r], self.dur[x][r]
            if d < best.get(k, np.inf):
                best[k] = d
        return list(best.items())

    def _find_min(self, hold, receivers):
        send_free, link, dur, early = self.send_free, self.link, self.dur, self.early
        after, recv_free, overlap = self.after, self.recv_free, self.overlap
        wan_of, wan_free, links = self.wan_of, self.wan_free, self.links
        best, bs, br = np.inf, -1, -1
        for s, ready in hold.items():
            x = max(send_free[s], ready)
            ls, ds, es, ws = link[s], dur[s], early[s], wan_of[s]
            for r in receivers:
                # max(x, link, after, port[, link free]) + dur, one comparison at a time
                t = ls[r]
                if t < x:
                    t = x
                u = after[r]
                if t < u:
                    t = u
                u = recv_free[r] - es[r] if overlap[r] else recv_free[r]
                if t < u:
                    t = u
                if links:
                    u = wan_free[ws[r]]
                    if t < u:
                        t = u
                t += ds[r]
                if t < best:
                    best, bs, br = t, s, r
        return best, bs, br

    def _find_relay(self, hold, relays, j, bound):
        """_find_relay's best delivery if it completes before `bound`, else (bound, -1, ..).

        Relays and receivers that cannot beat the best so far are skipped (their time is at
        least the first hop's plus the second's duration); they could not be np.argmin's
        first minimum, nor win over the direct delivery the caller compares with."""
        send_free, link, dur, early = self.send_free, self.link, self.dur, self.early
        after, recv_free, overlap = self.after, self.recv_free, self.overlap
        wan_of, wan_free, group = self.wan_of, self.wan_free, self.group
        receivers, reach = self.groups[j], self.reach[j]
        srcs = [(s, max(send_free[s], ready)) for s, ready in hold.items()]
        best, bs, bx, br = bound, -1, -1, -1
        for x in relays:
            # First hop: the best holder in x's own sub-pool (else the piece would enter
            # that sub-pool twice); np.argmin's first holder on ties.
            t1, via = np.inf, -1
            gx, ax, fx, ox = group[x], after[x], recv_free[x], overlap[x]
            for s, xs in srcs:
                if group[s] != gx or not _enters_once(self.nest, s, x, hold):
                    continue
                t = link[s][x]
                if t < xs:
                    t = xs
                if t < ax:
                    t = ax
                u = fx - early[s][x] if ox else fx
                if t < u:
                    t = u
                u = wan_free[wan_of[s][x]]
                if t < u:
                    t = u
                t += dur[s][x]
                if t < t1:
                    t1, via = t, s
            if via < 0:
                continue  # no holder in x's sub-pool: never a candidate (np.inf)
            y = max(send_free[x], t1)
            for k, d in reach[x]:
                w = wan_free[k]
                if (y if y > w else w) + d < best:
                    break
            else:
                continue  # no receiver can be reached through x before `best`
            lx, dx, ex, wx = link[x], dur[x], early[x], wan_of[x]
            for r in receivers:
                dr = dx[r]
                if y + dr >= best:
                    continue
                # max(y, link, after, port, link free) + dur, one comparison at a time
                t = lx[r]
                if t < y:
                    t = y
                u = after[r]
                if t < u:
                    t = u
                u = recv_free[r] - ex[r] if overlap[r] else recv_free[r]
                if t < u:
                    t = u
                u = wan_free[wx[r]]
                if t < u:
                    t = u
                t += dr
                if t < best:
                    best, bs, bx, br = t, via, x, r
        return best, bs, bx, br

    def best(self, d, j, pending_d):
        hold = self.held[d]
        t, s, r = self._find_min(hold, self.groups[j])
        if self.use_relays:
            group = self.group
            relays = [x for x in range(len(group)) if x not in hold and group[x] not in pending_d]
            if relays:
                t2, s2, x, r2 = self._find_relay(hold, relays, j, t)
                if s2 >= 0:
                    return t2, ((s2, x), (x, r2))
        return t, ((s, r),)

    def take(self, d, hops):
        for s, r in hops:
            start, end = self._commit(s, r, self.held[d][s])
            self.plan.add(self.members[s], self.members[r], d, start, end)
            self.held[d][r] = end

    def _commit(self, s, r, ready):
        """_Model.commit on the lists."""
        k = self.wan_of[s][r]
        start = max(self.send_free[s], ready, self.link[s][r], self.after[r],
                    self.wan_free[k] if self.links else 0.0,
                    self.recv_free[r] - (self.early[s][r] if self.overlap[r] else 0.0))
        end = start + self.dur[s][r]
        if k >= 0:
            self.wan_free[k] = start + self.wan_hold[s][r]
        self.link[s][r] = end if self.fifo[s][r] else start + self.gap[s][r]
        self.after[r] = start
        sent = start + self.os[s][r]
        if self.model.full_duplex:
            self.send_free[s] = sent
            self.recv_free[r] = end
        else:
            arrival, send_free, recv_free, overlap = self.arrival, self.send_free, self.recv_free, self.overlap
            recv_free[s], send_free[s], overlap[s] = sent, max(arrival[s], sent), False
            recv_free[r], send_free[r], overlap[r] = end, max(arrival[r], end), True
        return start, end

    def close(self):
        m, pool, ix = self.model, np.asarray(self.members, np.int64), self.pool_ix
        m.link_free[ix] = np.array(self.link)
        m.send_free[pool], m.recv_free[pool] = self.send_free, self.recv_free
        m.recv_overlap[pool], m.recv_after[pool] = self.overlap, self.after
        m.wan_free[:] = self.wan_free
        members = self.members
        for h, held in zip(self.holders, self.held):
            h.clear()
            h.update((members[i], t) for i, t in held.items())


def _input_pool_kernel(model: _Model, plan: _Plan, holders: list, groups: list, items,
                       use_relays: bool, nest: np.ndarray | None, receivers: list | None = None,
                       pool: np.ndarray | None = None) -> None:
    """_schedule_input_pool in C (kernels/input_pool.c, the search of _ListSearch at every
    pool size): the same transfers, model state and holders, bit for bit. With gateways,
    `receivers` per sub-pool and `pool`, the local order (each sub-pool's receivers,
    sub-pool by sub-pool, then any other ranks); else every rank receives, in group order."""
    if receivers is None:
        receivers, pool = groups, np.concatenate([np.asarray(g, np.int64) for g in groups])
    n, ng = len(pool), len(groups)
    loc = {g: i for i, g in enumerate(pool.tolist())}
    goff = np.r_[0, np.cumsum([len(g) for g in receivers])].astype(np.int64)
    group = np.empty(n, np.int64)
    for j, g in enumerate(groups):
        group[[loc[r] for r in np.asarray(g).tolist()]] = j
    ix = np.ix_(pool, pool)
    # The pool's block of each matrix; the matrices themselves for a pool of every rank in
    # order (the top pool: no copies of P x P blocks; link_free is then updated in place).
    whole = n == len(model.dur) and bool((pool == np.arange(n)).all())
    block = (lambda a, t=None: np.ascontiguousarray(a, t)) if whole else \
        (lambda a, t=None: np.ascontiguousarray(a[ix], t))
    link = model.link_free if whole else block(model.link_free)
    send_free, recv_free = model.send_free[pool], model.recv_free[pool]
    overlap, after = model.recv_overlap[pool].astype(np.uint8), model.recv_after[pool]
    wan_free = model.wan_free.copy()
    held = [(loc[g], t) for h in holders for g, t in h.items()]
    held_off = np.r_[0, np.cumsum([len(h) for h in holders])].astype(np.int64)
    held_rank = np.array([i for i, _ in held], np.int64)
    held_time = np.array([t for _, t in held], np.float64)
    items = np.fromiter(items, np.int64)
    cap = 2 * len(items) * ng  # each (piece, sub-pool) once, in at most two hops
    out = [np.empty(cap, np.int64) for _ in range(3)] + [np.empty(cap) for _ in range(2)]
    count = kernels.input_pool(
        n=n, ng=ng, nw=len(wan_free), n_items=len(holders), n_todo=len(items),
        full=model.full_duplex, use_relays=use_relays,
        nest=np.zeros(1, np.int64) if nest is None else np.ascontiguousarray(nest),
        depth=0 if nest is None else nest.shape[1], goff=goff, group=group,
        dur=block(model.dur), early=block(model.early), link=link, os=block(model.os),
        gap=block(model.g), fifo=block(model.fifo).view(np.uint8),
        wan_of=block(model.wan_of, np.int64), wan_hold=block(model.wan_hold), wan_free=wan_free,
        send_free=send_free, recv_free=recv_free, overlap=overlap, after=after,
        arrival=np.ascontiguousarray(model.arrival[pool]), held_off=held_off,
        held_rank=held_rank, held_time=held_time, items=items, out_src=out[0], out_dst=out[1],
        out_item=out[2], out_start=out[3], out_end=out[4])
    src, dst, item, start, end = (a[:count] for a in out)
    dst = pool[dst]
    plan.extend(pool[src], dst, item, start, end)
    dst, item, end = dst.tolist(), item.tolist(), end.tolist()
    if not whole:
        model.link_free[ix] = link
    model.send_free[pool], model.recv_free[pool] = send_free, recv_free
    model.recv_overlap[pool], model.recv_after[pool] = overlap.astype(bool), after
    model.wan_free[:] = wan_free
    for r, d, t in zip(dst, item, end):  # new holders append, in the order taken
        holders[d][r] = t
