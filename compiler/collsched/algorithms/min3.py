"""Min3-Allgather (Gupta & Vadhiyar, HPDC 2007, Figures 3-7), optionally arrival-aware.

Down the pool tree (pools.py), top first, each pool schedules the transfers that give every
one of its sub-pools one copy of every piece (ScheduleInputPool, Fig. 5): among all
(piece, sub-pool lacking it) the transfer that would *complete* first is taken (FindMin,
Fig. 4: best source among the pool's holders of the piece, best receiver in the sub-pool),
the hosts' port times are updated (UpdateAfterSched, Fig. 6) and the search repeats. The
sub-pools then recurse with the piece's new holder inside each as its source (Fig. 7).
Each piece thus enters each pool exactly once: the schedule is wide-area optimal.

Transfer times follow the simulator's cost model (docs/semantics.md), so that what the
scheduler plans is what `simulate` predicts: Eq. 1-3 with send overhead os(m), gap g(m),
a receive port that frees when the bytes have landed, FIFO links where policy.py marks them,
and the moment the sender holds the piece (the paper's FindMin leaves that implicit).

Arrival-aware (Request.arrivals): a rank sends nothing before it arrives (its send port,
and its own piece, become available at its arrival), but it may receive before: those
receives are the leading part of its list and run in the background (ir.BACKGROUND).

Ordering: every op gets the planned start time of its transfer as its sort key (ties:
the order in which the greedy took the transfers). A forwarded piece leaves after it
arrived, so this one global order makes every wait point backwards: no deadlock, also
under the PAT engine's serial execution, and the k-th send a->b meets the k-th recv at b
from a. Each port's ops start in the order the greedy took them, so the simulator sees
the ports in the greedy's order: its prediction is never later than the plan.

Three engines, one rule (the transfer that completes first is taken; ties go to the
piece of the receiver's nearest ring predecessor, see docs/grid.md):
- pools of pools: the paper's heap over (piece, sub-pool), numpy FindMin;
- small pools of single ranks: the same greedy with one heap entry per receiving rank;
- large pools of single ranks (thousands of pieces per rank pair): vectorized rounds in
  which every receiver takes the earliest transfer it can get and every sender serves
  one receiver (_schedule_rounds). This is what makes 1024 ranks compile in seconds.
"""
from __future__ import annotations

import heapq

import numpy as np

from .. import pools as pooltree
from ..links import port_bandwidth, shared_links
from ..ir import BACKGROUND, FOREGROUND, from_transfers
from . import Request, register

# A pool of single ranks is scheduled exactly (one transfer at a time) when it moves at most
# this many (rank, piece) pairs; larger ones in vectorized rounds.
EXACT_LEAF_LIMIT = 6_000
# Senders a receiver tries per round before waiting for the next one (round engine).
ROUND_TRIES = 4
# How far past its frontier a pool looks each round, in transfer times. Wider windows take
# more transfers per round (fewer rounds: 1024 ranks on grid-8x128 compile in about a
# third of the time of window 1) at a few percent of predicted time (docs/grid.md).
ROUND_WINDOW = 4.0
# Relays through a third site are searched in pools of pools where (ranks in the pool) x
# (ranks of the largest sub-pool) is at most this (three-site-grid's root: 20 x 12).
RELAY_SEARCH_LIMIT = 4096


class _Model:
    """Per rank-pair costs of one piece, and the port state the greedy updates (numpy)."""

    def __init__(self, topo, piece_bytes: int, full_duplex: bool, arrivals: np.ndarray):
        m = float(piece_bytes)
        p = topo.nranks
        eye = np.eye(p, dtype=bool)
        flow = topo.flow_bandwidth()
        _, recv_rate = port_bandwidth(topo)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.dur = np.where(eye, 0.0, topo.latency + m / flow)
            # A receiving port frees when the bytes have landed, `early` before the end.
            self.early = np.where(eye, 0.0, self.dur - m / recv_rate)
            # policy.mark_fifo_links: a FIFO send waits for the previous message on its link.
            self.fifo = ~eye & (topo.latency < m / flow)
        self.os = np.where(eye, 0.0, topo.send_overhead(m))
        self.g = np.where(eye, 0.0, topo.gap(m))
        self.full_duplex = bool(full_duplex)
        self.arrival = np.asarray(arrivals, np.float64)
        # Port state (Eq. 2/3). Full duplex: send and receive ports apart; half duplex:
        # both describe the one port, and a receive may overlap the previous receive only.
        self.send_free = self.arrival.copy()  # nothing leaves a rank before it arrives
        self.recv_free = np.zeros(p)
        self.recv_overlap = np.ones(p, bool)  # may the next receive start `early`?
        # Receives of a rank start in the order they are taken (see the module docstring:
        # a long-latency receive could otherwise start before a short one taken earlier).
        self.recv_after = np.zeros(p)
        self.link_free = np.zeros((p, p))
        # Shared WAN links (links.py): the simulator serves each in start order, a transfer
        # holding it for its bytes at the link's rate; the plan does the same.
        shared = shared_links(topo)
        self.wan_of = shared.link_of
        self.wan_hold = np.where(shared.link_of >= 0,
                                 m / np.r_[shared.bandwidth, 1.0][shared.link_of], 0.0)
        self.wan_free = np.zeros(len(shared.bandwidth) + 1)  # last entry: "no link", 0 forever

    def wan_ready(self, s, r):
        """When the shared link s -> r (if any) takes the next transfer (numpy broadcast)."""
        return self.wan_free[self.wan_of[s, r]] if len(self.wan_free) > 1 else 0.0

    def commit(self, s: int, r: int, ready: float) -> tuple[float, float]:
        """Take transfer s -> r of a piece s holds from `ready` on; returns (start, end)."""
        start = max(self.send_free[s], ready, self.link_free[s, r], self.recv_after[r],
                    float(self.wan_ready(s, r)),
                    self.recv_free[r] - (self.early[s, r] if self.recv_overlap[r] else 0.0))
        end = start + self.dur[s, r]
        if self.wan_of[s, r] >= 0:
            self.wan_free[self.wan_of[s, r]] = start + self.wan_hold[s, r]
        self.link_free[s, r] = end if self.fifo[s, r] else start + self.g[s, r]
        self.recv_after[r] = start
        sent = start + self.os[s, r]
        if self.full_duplex:
            self.send_free[s] = sent
            self.recv_free[r] = end
        else:
            self.recv_free[s], self.send_free[s], self.recv_overlap[s] = sent, max(self.arrival[s], sent), False
            self.recv_free[r], self.send_free[r], self.recv_overlap[r] = end, max(self.arrival[r], end), True
        return float(start), float(end)


class _Plan:
    """Transfers in the order the greedy takes them (global ranks, piece index)."""

    def __init__(self):
        self.src, self.dst, self.item, self.start, self.end = [], [], [], [], []

    def add(self, s, r, d, start, end):
        self.src.append(s), self.dst.append(r), self.item.append(d)
        self.start.append(start), self.end.append(end)

    def extend(self, s, r, d, start, end):
        self.src.extend(s), self.dst.extend(r), self.item.extend(d)
        self.start.extend(start), self.end.extend(end)


def _preference(nranks: int, nseg: int, rank: int, d: int) -> tuple[int, int]:
    """Tie-break among pieces that complete at the same time: ring predecessors first."""
    return ((rank - d // nseg) % nranks, d)


# --- pools of pools: the paper's heap over (piece, sub-pool) ---------------------------

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


def _find_relay(model: _Model, hold: dict, relays: np.ndarray, receivers: np.ndarray,
                group_of: np.ndarray):
    """The best two-hop delivery holder -> x -> receiver through a rank x of a sub-pool that
    already has the piece: (estimated completion, holder, x, receiver).

    Beyond the paper: its FindMin sends a piece into a sub-pool only from the ranks that hold
    it, so every piece of a site crosses the WAN from that site. With shared WAN links that
    piles one site's pieces onto one link (three-site-grid: NTH's 8 pieces on NTH -> UT,
    while UK -> UT idles after UK's 4); a relay through another site of the same sub-pool
    spreads them over both links. The piece still enters each pool once: x's pools get it
    from this hop, and the recursion below sees them as holding it."""
    srcs = np.fromiter(hold.keys(), np.int64, len(hold))
    ready = np.fromiter(hold.values(), np.float64, len(hold))
    x = np.maximum(model.send_free[srcs], ready)
    ix = (srcs[:, None], relays[None, :])
    port = np.maximum(model.recv_after[relays],
                      model.recv_free[relays] - model.early[ix] * model.recv_overlap[relays])
    t1 = np.maximum(np.maximum(x[:, None], model.link_free[ix]), port)
    t1 = np.maximum(t1, model.wan_ready(*ix)) + model.dur[ix]
    # The first hop stays inside the relay's sub-pool: from another one, the piece would
    # enter that sub-pool a second time.
    t1 = np.where(group_of[srcs][:, None] == group_of[relays][None, :], t1, np.inf)
    via = np.argmin(t1, axis=0)  # best holder for each relay
    t1 = t1[via, np.arange(len(relays))]
    ix2 = (relays[:, None], receivers[None, :])
    port2 = np.maximum(model.recv_after[receivers],
                       model.recv_free[receivers] - model.early[ix2] * model.recv_overlap[receivers])
    t2 = np.maximum(np.maximum(model.send_free[relays], t1)[:, None], model.link_free[ix2])
    t2 = np.maximum(np.maximum(t2, port2), model.wan_ready(*ix2)) + model.dur[ix2]
    i, j = np.unravel_index(int(np.argmin(t2)), t2.shape)
    return float(t2[i, j]), int(srcs[via[i]]), int(relays[i]), int(receivers[j])


def _schedule_input_pool(model: _Model, plan: _Plan, holders: list, groups: list, items) -> None:
    """ScheduleInputPool (Fig. 5) with InitSched (Fig. 3) and UpdateAfterSched (Fig. 6).

    `holders[d]` maps each rank of this pool holding piece d to when it holds it (one rank
    on entry); `groups` are the sub-pools' rank arrays. The heap holds, per (piece, sub-pool
    lacking it), a lower bound of its MinTime: port times only grow, so a popped entry is
    the true minimum once its recomputed value is no larger than the next entry's. A new
    holder can only bring its piece's pairs forward; they are recomputed at once.
    """
    group_of = {}
    for j, g in enumerate(groups):
        for r in np.asarray(g).tolist():
            group_of[r] = j
    pool = np.concatenate([np.asarray(g, np.int64) for g in groups])
    group_arr = np.full(len(model.send_free), -1, np.int64)
    group_arr[pool] = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
    # Relays (_find_relay) where the shared WAN links make them worth a look and the search
    # stays small; large pools (grid-8x128's continents) send from the holders only.
    use_relays = (len(model.wan_free) > 1 and len(groups) > 1
                  and len(pool) * max(len(g) for g in groups) <= RELAY_SEARCH_LIMIT
                  and bool((model.wan_of[np.ix_(pool, pool)] >= 0).any()))
    pending = {}
    heap = []

    def best(d, j):
        """(time, hops): the earliest delivery of piece d into sub-pool j."""
        t, s, r = _find_min(model, holders[d], groups[j])
        if use_relays:
            relays = np.array([x for x in pool.tolist() if x not in holders[d]
                               and group_of[x] not in pending[d]], np.int64)
            if len(relays):
                t2, s2, x, r2 = _find_relay(model, holders[d], relays, groups[j], group_arr)
                if t2 < t:
                    return t2, ((s2, x), (x, r2))
        return t, ((s, r),)

    for d in items:
        todo = set(range(len(groups)))
        for h in holders[d]:
            todo.discard(group_of[h])
        pending[d] = todo
        for j in todo:
            heap.append((best(d, j)[0], d, j))
    heapq.heapify(heap)
    while heap:
        t, d, j = heapq.heappop(heap)
        if j not in pending[d]:
            continue  # an outdated duplicate of a pair already scheduled
        t2, hops = best(d, j)
        if heap and t2 > heap[0][0]:
            heapq.heappush(heap, (t2, d, j))
            continue
        for s, r in hops:
            start, end = model.commit(s, r, holders[d][s])
            plan.add(s, r, d, start, end)
            holders[d][r] = end
        pending[d].discard(j)
        for j2 in pending[d]:
            heapq.heappush(heap, (best(d, j2)[0], d, j2))


# --- small pools of single ranks: exact greedy, one heap entry per receiver -------------

def _schedule_leaf_pool(model: _Model, plan: _Plan, holders: list, ranks: np.ndarray,
                        n_items: int, nseg: int) -> None:
    """ScheduleInputPool for a pool whose sub-pools are single ranks.

    The same greedy as _schedule_input_pool, with MinTime kept per receiving rank (the
    minimum over the pieces it lacks) instead of per (piece, rank): a port-time change then
    invalidates one heap entry instead of one per piece. Runs on plain lists of the pool's
    own block of the cost matrices (single values from numpy arrays are slow).
    """
    members = [int(r) for r in ranks]
    n = len(members)
    loc = {g: i for i, g in enumerate(members)}
    ix = np.ix_(ranks, ranks)
    dur, early, link = model.dur[ix].tolist(), model.early[ix].tolist(), model.link_free[ix].tolist()
    os_, gap, fifo = model.os[ix].tolist(), model.g[ix].tolist(), model.fifo[ix].tolist()
    send_free = model.send_free[ranks].tolist()
    recv_free = model.recv_free[ranks].tolist()
    overlap = model.recv_overlap[ranks].tolist()
    after = model.recv_after[ranks].tolist()
    arrival = model.arrival[ranks].tolist()
    full = model.full_duplex
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

    def best_for(r):
        """FindMin over every piece r lacks: (time, sender, piece)."""
        best, bs, bd = np.inf, -1, -1
        rf, ov, af = recv_free[r], overlap[r], after[r]
        floor = max(rf + (bytes_min[r] if ov else dur_min[r]), min(send_free) + dur_min[r])
        for d in lacking[r]:
            for s, ready in held[d].items():
                t = max(send_free[s], ready, link[s][r], af, rf - (early[s][r] if ov else 0.0)) + dur[s][r]
                if t < best:
                    best, bs, bd = t, s, d
            if best <= floor:
                break  # nothing can beat it
        return best, bs, bd

    key = {}
    heap = []
    for r in range(n):
        if lacking[r]:
            key[r] = best_for(r)[0]
            heap.append((key[r], r))
    heapq.heapify(heap)
    while heap:
        k, r = heapq.heappop(heap)
        if k != key.get(r):
            continue  # superseded by a newer entry
        t, s, d = best_for(r)
        while heap and heap[0][0] != key.get(heap[0][1]):
            heapq.heappop(heap)
        if heap and t > heap[0][0]:
            key[r] = t
            heapq.heappush(heap, (t, r))
            continue
        # Commit (the model's update rules, on the local lists).
        start = max(send_free[s], held[d][s], link[s][r], after[r],
                    recv_free[r] - (early[s][r] if overlap[r] else 0.0))
        end = start + dur[s][r]
        link[s][r] = end if fifo[s][r] else start + gap[s][r]
        after[r] = start
        sent = start + os_[s][r]
        if full:
            send_free[s], recv_free[r] = sent, end
        else:
            recv_free[s], send_free[s], overlap[s] = sent, max(arrival[s], sent), False
            recv_free[r], send_free[r], overlap[r] = end, max(arrival[r], end), True
        plan.add(members[s], members[r], d, start, end)
        held[d][r] = end
        lacking[r].remove(d)
        del key[r]
        if lacking[r]:
            key[r] = t  # a lower bound: its ports only got later
            heapq.heappush(heap, (t, r))
        # The new holder may serve d earlier than anyone so far (UpdateAfterSched, l. 2-6).
        sf = max(send_free[r], end)
        dr, lr = dur[r], link[r]
        for y in range(n):
            if y != r and y not in held[d]:
                t3 = max(sf, lr[y], after[y], recv_free[y] - (early[r][y] if overlap[y] else 0.0)) + dr[y]
                if t3 < key[y]:
                    key[y] = t3
                    heapq.heappush(heap, (t3, y))
    model.link_free[ix] = np.array(link)
    model.send_free[ranks], model.recv_free[ranks] = send_free, recv_free
    model.recv_overlap[ranks], model.recv_after[ranks] = overlap, after
    for d in range(n_items):
        holders[d].update({members[i]: t for i, t in held[d].items()})


# --- large pools of single ranks: vectorized rounds ----------------------------------

def _first_set_bit_from(words: np.ndarray, start_bit: np.ndarray) -> np.ndarray:
    """Per row of uint64 words: the first set bit at or after start_bit, circularly; -1 if none."""
    rows, nw = words.shape
    w0, b0 = start_bit >> 6, (start_bit & 63).astype(np.uint64)
    order = (w0[:, None] + np.arange(nw + 1)[None, :]) % nw
    rot = words[np.arange(rows)[:, None], order]
    high = ~np.uint64(0) << b0  # bits of the first word at or after b0
    rot[:, 0] &= high
    rot[:, nw] &= ~high  # the wrapped-around low bits of the first word, scanned last
    nz = rot != 0
    col = np.argmax(nz, axis=1)
    word = rot[np.arange(rows), col]
    low = word & (~word + np.uint64(1))
    bit = np.log2(np.maximum(low, 1).astype(np.float64)).astype(np.int64)
    out = order[np.arange(rows), col] * 64 + bit
    return np.where(nz.any(1), out, -1)


def _schedule_rounds(model: _Model, plan: _Plan, holders: list, pool_ranks: list,
                     n_items: int, nseg: int) -> None:
    """ScheduleInputPool for large pools of single ranks, all such pools at once, in rounds.

    Each round looks ROUND_WINDOW transfer times past each pool's frontier (the earliest
    moment a rank that still lacks pieces can receive and some rank can send); every
    receiver free by then, earliest first, is paired with a sender free by then, earliest
    first (trying the next ones when that sender has nothing it lacks or its FIFO link is
    still busy), and takes the piece it prefers among those the sender holds by then. Each sender serves one receiver per round; half-duplex
    ranks do one or the other. Times are the exact cost model's, as in the other engines.
    """
    ranks = np.concatenate(pool_ranks).astype(np.int64)
    npool = len(pool_ranks)
    n = len(ranks)
    pool_of = np.repeat(np.arange(npool), [len(r) for r in pool_ranks])
    D, W = n_items, (n_items + 63) // 64
    p = len(model.dur)
    ix = np.ix_(ranks, ranks)
    same_pool = pool_of[:, None] == pool_of[None, :]
    dur, early, link = model.dur[ix], model.early[ix], model.link_free[ix].copy()
    os_, gap, fifo = model.os[ix], model.g[ix], model.fifo[ix]
    send_free, recv_free = model.send_free[ranks].copy(), model.recv_free[ranks].copy()
    overlap, after = model.recv_overlap[ranks].copy(), model.recv_after[ranks].copy()
    arrival = model.arrival[ranks]
    full = model.full_duplex
    other = same_pool & ~np.eye(n, dtype=bool)
    dur_min = np.array([dur[np.ix_(r, r)][~np.eye(len(r), dtype=bool)].min()
                        for r in (np.nonzero(pool_of == q)[0] for q in range(npool))])
    early_max = np.where(other, early, -np.inf).max(0)  # the earliest a receive may start
    # Bit q of a rank's words stands for piece D-1-q: scanning bits upwards from a rank's
    # predecessor's piece walks the ring backwards, its tie-break (_preference).
    held = np.zeros((n, W), np.uint64)  # pieces a rank holds or will hold (taken transfers)
    usable = np.zeros((n, W), np.uint64)  # pieces a rank holds by the pool's horizon
    pad = np.arange(D, W * 64)  # bit positions past the last piece: held, never lacking
    pad_words = np.zeros(W, np.uint64)
    np.bitwise_or.at(pad_words, pad >> 6, np.uint64(1) << (pad & 63).astype(np.uint64))
    held |= pad_words[None, :]
    ready = np.full((n, D), np.inf)
    loc = np.full(p, -1, np.int64)
    loc[ranks] = np.arange(n)
    pr, pd, pt = [], [], []
    for d in range(D):
        for g, t in holders[d].items():
            pr.append(loc[g]), pd.append(d), pt.append(t)
    pend_r, pend_d, pend_t = np.array(pr, np.int64), np.array(pd, np.int64), np.array(pt)
    ready[pend_r, pend_d] = pend_t
    one = np.uint64(1)

    def set_bits(words, r, d):
        q = D - 1 - d
        np.bitwise_or.at(words, (r, q >> 6), one << (q & 63).astype(np.uint64))

    set_bits(held, pend_r, pend_d)
    need = D - np.isfinite(ready).sum(1)
    start_bit = D - 1 - ((ranks * nseg - 1) % D)  # the receiver's preferred piece
    floor = np.zeros(npool)
    for _ in range(4 * (D + 1) * n + 1000):  # each round takes a transfer or moves a frontier
        needy = need > 0
        if not needy.any():
            break
        recv_from = np.maximum(after, recv_free - early_max * overlap)
        t_recv = np.full(npool, np.inf)
        np.minimum.at(t_recv, pool_of[needy], recv_from[needy])
        t_send = np.full(npool, np.inf)
        np.minimum.at(t_send, pool_of, send_free)
        horizon = np.maximum(np.maximum(t_recv, t_send), floor) + ROUND_WINDOW * dur_min
        # Pieces arriving by the horizon become usable.
        due = pend_t <= horizon[pool_of[pend_r]]
        if due.any():
            set_bits(usable, pend_r[due], pend_d[due])
            pend_r, pend_d, pend_t = pend_r[~due], pend_d[~due], pend_t[~due]
        h = horizon[pool_of]
        recv_ok = np.nonzero(needy & (recv_from <= h))[0]
        send_ok = np.nonzero(send_free <= h)[0]
        recv_ok = recv_ok[np.lexsort((recv_ok, recv_from[recv_ok], pool_of[recv_ok]))]
        send_ok = send_ok[np.lexsort((send_ok, send_free[send_ok], pool_of[send_ok]))]
        s_pool = pool_of[send_ok]
        s_first = np.searchsorted(s_pool, np.arange(npool))
        s_count = np.bincount(s_pool, minlength=npool)
        r_pool = pool_of[recv_ok]
        r_pos = np.arange(len(recv_ok)) - np.searchsorted(r_pool, r_pool)
        matched = np.zeros(len(recv_ok), bool)
        busy = np.zeros(n, bool)  # sender taken (half duplex: either role taken)
        got_s, got_r = [], []
        tries = ROUND_TRIES
        shift = 0
        strict = True  # first look for senders whose link is free by the time their ports are
        while shift < tries:
            cand = np.nonzero(~matched & (s_count[r_pool] > 0))[0]
            if len(cand) == 0:
                break
            cnt = s_count[r_pool[cand]]
            s = send_ok[s_first[r_pool[cand]] + (r_pos[cand] + shift) % cnt]
            r = recv_ok[cand]
            # A pair needs a free link (a FIFO link frees only when its last message has
            # landed: the receiver then tries the next sender, as the exact greedy would).
            ok = (s != r) & ~busy[s] & (shift < cnt)
            if strict:
                ok &= link[s, r] <= np.maximum(send_free[s], recv_from[r])
            if not full:
                ok &= ~busy[r]
            ok[ok] = (usable[s[ok]] & ~held[r[ok]]).any(1)
            sel = np.nonzero(ok)[0]
            if len(sel):
                _, first = np.unique(s[sel], return_index=True)  # one receiver per sender
                sel = sel[np.sort(first)]
                if not full:  # one port: a rank sends or receives in a round, earliest first
                    keep = []
                    for i, a, b in zip(sel.tolist(), s[sel].tolist(), r[sel].tolist()):
                        if not (busy[a] or busy[b]):
                            busy[a] = busy[b] = True
                            keep.append(i)
                    sel = np.array(keep, np.int64)
                matched[cand[sel]] = True
                busy[s[sel]] = True
                if not full:
                    busy[r[sel]] = True
                got_s.append(s[sel]), got_r.append(r[sel])
            shift += 1
            if shift == tries and not got_s and strict:
                # Nothing paired: try every sender once, busy links included.
                tries, shift, strict = max(int(s_count.max(initial=0)), 1), 0, False
        if not got_s:
            # Nothing can move before the next event: a port frees or a piece arrives.
            nxt = np.full(npool, np.inf)
            for times, who in ((send_free, np.arange(n)), (recv_from[needy], np.nonzero(needy)[0]),
                               (pend_t, pend_r)):
                later = times > horizon[pool_of[who]]
                np.minimum.at(nxt, pool_of[who[later]], times[later])
            moved = np.isfinite(nxt) & (t_recv < np.inf)
            if not moved.any():
                raise RuntimeError("min3 round scheduler is stuck (a bug): no event left")
            floor = np.where(moved, np.maximum(floor, nxt - dur_min), floor)
            continue
        s, r = np.concatenate(got_s), np.concatenate(got_r)
        q = _first_set_bit_from(usable[s] & ~held[r], start_bit[r])
        d = D - 1 - q
        st = np.maximum.reduce([send_free[s], ready[s, d], link[s, r], after[r],
                                recv_free[r] - early[s, r] * overlap[r]])
        en = st + dur[s, r]
        link[s, r] = np.where(fifo[s, r], en, st + gap[s, r])
        after[r] = st
        sent = st + os_[s, r]
        if full:
            send_free[s], recv_free[r] = sent, en
        else:
            recv_free[s], send_free[s], overlap[s] = sent, np.maximum(arrival[s], sent), False
            recv_free[r], send_free[r], overlap[r] = en, np.maximum(arrival[r], en), True
        ready[r, d] = en
        set_bits(held, r, d)
        need[r] -= 1
        pend_r, pend_d, pend_t = np.r_[pend_r, r], np.r_[pend_d, d], np.r_[pend_t, en]
        plan.extend(ranks[s].tolist(), ranks[r].tolist(), d.tolist(), st.tolist(), en.tolist())
    else:
        raise RuntimeError("min3 round scheduler did not finish (a bug)")
    model.link_free[ix] = np.where(same_pool, link, model.link_free[ix])
    model.send_free[ranks], model.recv_free[ranks] = send_free, recv_free
    model.recv_overlap[ranks], model.recv_after[ranks] = overlap, after


# --- the recursion (Fig. 7) -----------------------------------------------------------

def pool_schedule(req: Request):
    """(plan, tree, model): the greedy's transfers down the whole pool tree (Fig. 7)."""
    from ..topology import homogeneous

    p, k = req.nranks, max(req.nseg, 1)
    topo = req.topology if req.topology is not None else homogeneous(p, full_duplex=req.full_duplex)
    arrivals = np.zeros(p) if req.arrivals is None else np.asarray(req.arrivals, np.float64)
    arrivals = arrivals - arrivals.min() if p else arrivals
    piece = -(-int(req.nbytes) // k)  # the largest piece: segment sizes differ by one byte
    model = _Model(topo, piece, req.full_duplex, arrivals)
    tree = pooltree.pool_tree(topo)
    plan = _Plan()
    n_items = p * k
    # Holders of every piece: {rank: time it holds it}. Only pools above a rank write its
    # entries, and sibling pools share no rank, so pools of pools go first, top-down, and
    # the pools of single ranks after them, in any order.
    holders = [{d // k: float(arrivals[d // k])} for d in range(n_items)]
    leaves = []
    stack = [0]
    while stack:
        node = stack.pop()
        kids = pooltree.children(tree, node)
        if not kids:
            continue
        inside = tree.nodes[node]["ranks"]
        groups = [tree.nodes[c]["ranks"] for c in kids]
        # Pools of single ranks go to the fast engines below, unless a shared WAN link runs
        # inside them (sites whose LAN and WAN fall in one band): only the general engine
        # plans for the link.
        across_wan = bool((model.wan_of[np.ix_(inside, inside)] >= 0).any())
        if all(len(g) == 1 for g in groups) and not across_wan:
            leaves.append(inside)
            continue
        local = _local_holders(holders, inside)
        _schedule_input_pool(model, plan, local, groups, range(n_items))
        for d in range(n_items):  # Fig. 7, lines 4-12: the holder inside each sub-pool
            holders[d].update(local[d])
        stack.extend(reversed(kids))
    large = [r for r in leaves if len(r) * n_items > EXACT_LEAF_LIMIT]
    for ranks in leaves:
        if len(ranks) * n_items <= EXACT_LEAF_LIMIT:
            local = _local_holders(holders, ranks)
            _schedule_leaf_pool(model, plan, local, ranks, n_items, k)
    if large:
        local = _local_holders(holders, np.concatenate(large))
        _schedule_rounds(model, plan, local, large, n_items, k)
    return plan, tree, model


def _local_holders(holders, ranks):
    """Per piece, its holders among `ranks` (one per pool after the parent pool's step)."""
    inside = set(np.asarray(ranks).tolist())
    return [{r: t for r, t in h.items() if r in inside} for h in holders]


def _refuse(req: Request):
    if req.nranks > 1 and req.topology is not None and req.topology.nranks != req.nranks:
        return f"the topology places {req.topology.nranks} ranks, expected {req.nranks}"
    return None


@register("min3", "Min3-Allgather (Gupta & Vadhiyar 2007): greedy down the pool tree; "
                  "arrival-aware with --pap", _refuse)
def build(req: Request):
    p, k = req.nranks, max(req.nseg, 1)
    plan, tree, model = pool_schedule(req)
    src = np.asarray(plan.src, np.int64)
    dst = np.asarray(plan.dst, np.int64)
    item = np.asarray(plan.item, np.int64)
    start = np.asarray(plan.start, np.float64)
    taken = np.arange(len(src))
    order = np.lexsort((taken, start))
    step = np.empty(len(src), np.int64)
    step[order] = taken
    # A receive planned before the rank arrives runs in the background. Sends start no
    # earlier than the sender's arrival, so these receives lead the rank's list.
    recv_phase = np.where(start < model.arrival[dst], BACKGROUND, FOREGROUND).astype(np.uint8)
    sched = from_transfers(p, k, step, src, dst, item // k, item % k,
                           np.full(len(src), FOREGROUND, np.uint8), algorithm="min3",
                           recv_phase=recv_phase)
    end = np.asarray(plan.end, np.float64)
    sched.meta.update({
        "pool_partitions": pooltree.partitions(tree),
        "planned_run_time_s": float(end.max() - model.arrival.min()) if len(end) else 0.0,
        "pools": sum(1 for n in tree.nodes if len(tree.nodes[n]["ranks"]) > 1),
    })
    return sched
