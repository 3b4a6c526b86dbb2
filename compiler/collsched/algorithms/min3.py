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
Where one flow fills a sender's port (a cluster: policy.serial_list_schedule), the plan
is made for serial execution - a send holds its port until its message has arrived, a
receive does not overlap the previous one - and the schedule is marked serial, so that
an early rank's sends do not leave all at once and share its NIC. In full duplex such a
plan also lets a rank relay pieces it received in the background before it arrives
(background sends, which the PAT engine runs for serial schedules); only its own piece
waits for its arrival.

Ordering: every op gets the planned start time of its transfer as its sort key (ties:
the order in which the greedy took the transfers). A forwarded piece leaves after it
arrived, so this one global order makes every wait point backwards: no deadlock, also
under the PAT engine's serial execution, and the k-th send a->b meets the k-th recv at b
from a. Each port's ops start in the order the greedy took them (the ring engine's
backfilled ops are checked against their neighbours in start order instead), so the
simulator sees the ports as planned: its prediction is never later than the plan. One
exception: the simulator orders each shared WAN link by its own start times, and lets a
flow queued at a link release its ports early (the planner does not); a transfer it starts
earlier than planned may then take a link first and delay another. On grid-8x128 that puts
the prediction up to 0.5 % (ring) and 4 % (rounds) after the plan. On random grids it is
rare (none in 1,500 examples of the tests' generator); hypothesis found one, 5.6 % after
the plan: on a 5-rank two-site grid a rank's own piece, planned to wait for the link until
6.6 ms, is ready at 0.94 ms and takes the link first (tests/compiler/test_min3.py). The
runtime does the same as the simulator - it posts the send once it may - so the simulator
is the one to believe, and `compile` reports its prediction.

Three engines, one rule (the transfer that completes first is taken; ties go to the
piece of the receiver's nearest ring predecessor; between receivers of a small pool of
single ranks to the lower rank, or in a serial plan to the one lacking the most pieces,
see docs/grid.md):
- pools of pools: the paper's heap over (piece, sub-pool); FindMin on Python lists in
  small pools, with numpy and per-site receiver sides shared by all holders in large ones;
- small pools of single ranks: the same greedy with one heap entry per receiving rank;
- large pools of single ranks (thousands of pieces per rank pair): a pipelined ring in
  arrival order (_schedule_ring) when the pool is full duplex with equal arrivals, else
  vectorized rounds in which every receiver takes the earliest transfer it can get and
  every sender serves one receiver (_schedule_rounds).

The ring is the one engine that departs from "completes first": in a large site whose WAN
pieces trickle in over shared links, the greedy rounds left the receiving ports idle half
the time (grid-8x128, 1 MiB: 2.88 s planned against a 0.86 s bound); every ring link
carries about one piece per rank, so it stays near the port bound. It also places its
transfers into the gaps the pools above left in a port's timeline (backfilling), checked
against the neighbours in list order exactly as the simulator will see them.
"""
from __future__ import annotations

import bisect
import copy
import heapq
import operator

import numpy as np

from .. import native
from ..inputs import pools as pooltree
from ..inputs.links import port_bandwidth, shared_links
from ..model.policy import fifo_link, mark_fifo_links, serial_list_schedule
from ..verify import verify
from ..ir import BACKGROUND, FOREGROUND, from_transfers
from .registry import Request, register

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
# Pools of pools of at most this many ranks are searched on Python lists, larger ones
# with numpy (same results).
LIST_SEARCH_LIMIT = 64
# Large pools of single ranks go to the ring engine where it fits (_ring_fits); False sends
# them all to the round engine (tests compare the two).
RING_ENGINE = True
# _gate_link_receives: links whose latency is at most this share of a piece's time on them
# (three-site grid at 256 KiB: 2.8-3.4% on its UT links; 17% on UK-NTH, not gated).
GATE_LATENCY_SHARE = 0.05


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
            self.fifo = ~eye & fifo_link(topo.latency, m, flow, topo.bandwidth)
        self.os = np.where(eye, 0.0, topo.send_overhead(m))
        self.g = np.where(eye, 0.0, topo.gap(m))
        self.full_duplex = bool(full_duplex)
        self.serial = False  # plan_serial
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

    def plan_serial(self):
        """Plan for serial execution (docs/semantics.md): a send holds its port until the
        message has arrived, and a receive may not overlap the previous one. Full duplex:
        a rank may also relay pieces it received in the background before it arrives (the
        PAT engine runs a serial schedule's background sends; its own piece still waits
        for its arrival, through `holders`)."""
        self.serial = True
        self.os = self.dur.copy()
        self.early = np.zeros_like(self.early)
        if self.full_duplex:
            self.send_free = np.zeros_like(self.send_free)

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
    """Transfers in the order the greedy takes them (global ranks, piece index, times).

    The Python engines add them one at a time, the native ones as arrays; the columns
    src, dst, item, start and end are numpy arrays, joined from the parts when read."""

    _TYPES = (np.int64, np.int64, np.int64, np.float64, np.float64)

    def __init__(self):
        self._parts = []  # (src, dst, item, start, end) arrays
        self._open = ([], [], [], [], [])  # added one at a time since the last part
        self._joined = None
        self._heads = {}

    def add(self, s, r, d, start, end):
        o = self._open
        o[0].append(s), o[1].append(r), o[2].append(d), o[3].append(start), o[4].append(end)
        self._joined = None

    def extend(self, s, r, d, start, end):
        self._close()
        self._parts.append(tuple(np.asarray(x, t) for x, t in zip((s, r, d, start, end), self._TYPES)))
        self._joined = None

    def _close(self):
        if self._open[0]:
            self._parts.append(tuple(np.array(x, t) for x, t in zip(self._open, self._TYPES)))
            self._open = ([], [], [], [], [])

    def columns(self) -> tuple:
        if self._joined is None:
            self._close()
            self._joined = tuple(np.concatenate([p[k] for p in self._parts]) if self._parts
                                 else np.empty(0, t) for k, t in enumerate(self._TYPES))
        return self._joined

    def head(self, n: int) -> tuple:
        """The columns of the first n transfers (they never change: kept once joined)."""
        if self._heads.get(n) is None:
            self._close()
            parts, rows = [], 0
            for p in self._parts:
                if rows >= n:
                    break
                parts.append(p)
                rows += len(p[0])
            self._heads[n] = tuple(np.concatenate([p[k] for p in parts])[:n] if parts else np.empty(0, t)
                                   for k, t in enumerate(self._TYPES))
        return self._heads[n]

    def __len__(self):
        return sum(len(p[0]) for p in self._parts) + len(self._open[0])

    src = property(lambda self: self.columns()[0])
    dst = property(lambda self: self.columns()[1])
    item = property(lambda self: self.columns()[2])
    start = property(lambda self: self.columns()[3])
    end = property(lambda self: self.columns()[4])


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
                         nest_rows=None) -> None:
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
    # Relays (_find_relay) where the shared WAN links make them worth a look and the search
    # stays small; large pools (grid-8x128's continents) send from the holders only.
    use_relays = (len(model.wan_free) > 1 and len(groups) > 1
                  and len(pool) * max(len(g) for g in groups) <= RELAY_SEARCH_LIMIT
                  and bool((model.wan_of[np.ix_(pool, pool)] >= 0).any()))
    # The pools below this one, for relays only (_enters_once): nest_rows() gives them.
    nest = nest_rows() if use_relays else None
    if native.kernels() is not None:  # the same search in C; use_relays decided above
        return _input_pool_native(model, plan, holders, groups, items, use_relays, nest)
    pending = {}
    heap = []
    # The same search on plain lists for small pools (numpy's per-call cost dominates there).
    search = (_ListSearch if len(pool) <= LIST_SEARCH_LIMIT else _ArraySearch)(
        model, plan, holders, groups, pool, group_of, use_relays, nest)
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

    def __init__(self, model, plan, holders, groups, pool, group_of, use_relays, nest):
        self.model, self.plan, self.holders, self.groups = model, plan, holders, groups
        self.pool, self.group_of, self.use_relays = pool, group_of, use_relays
        # _enters_once's rows by global rank (relays only)
        self.nest = None if nest is None else dict(zip(pool.tolist(), map(tuple, nest.tolist())))
        self.group_arr = np.full(len(model.send_free), -1, np.int64)
        self.group_arr[pool] = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
        self.state = 0  # counts commits: the receiver sides of an older state are stale
        self.sides = {}
        # Per sub-pool j: each pool rank's row class toward j (dur, early, shared link).
        self.row_class, self.class_rows = [], []
        pool_list = pool.tolist()
        for g in groups:
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

    def __init__(self, model, plan, holders, groups, pool, group_of, use_relays, nest):
        self.model, self.plan, self.holders, self.use_relays = model, plan, holders, use_relays
        self.nest = None if nest is None else [tuple(r) for r in nest.tolist()]  # local index
        self.members = members = pool.tolist()
        self.pool_ix = ix = np.ix_(pool, pool)
        loc = {g: i for i, g in enumerate(members)}
        self.groups = [[loc[r] for r in np.asarray(g).tolist()] for g in groups]
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


def _input_pool_native(model: _Model, plan: _Plan, holders: list, groups: list, items,
                       use_relays: bool, nest: np.ndarray | None) -> None:
    """_schedule_input_pool in C (native/input_pool.c, the search of _ListSearch at every
    pool size): the same transfers, model state and holders, bit for bit."""
    pool = np.concatenate([np.asarray(g, np.int64) for g in groups])
    n, ng = len(pool), len(groups)
    loc = {g: i for i, g in enumerate(pool.tolist())}
    goff = np.r_[0, np.cumsum([len(g) for g in groups])].astype(np.int64)
    group = np.repeat(np.arange(ng, dtype=np.int64), np.diff(goff))
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
    count = native.call("input_pool", n, ng, len(wan_free), len(holders), len(items),
                        model.full_duplex, use_relays,
                        np.zeros(1, np.int64) if nest is None else np.ascontiguousarray(nest),
                        0 if nest is None else nest.shape[1], goff, group,
                        block(model.dur), block(model.early), link, block(model.os), block(model.g),
                        block(model.fifo).view(np.uint8), block(model.wan_of, np.int64),
                        block(model.wan_hold), wan_free, send_free, recv_free,
                        overlap, after, np.ascontiguousarray(model.arrival[pool]),
                        held_off, held_rank, held_time, items, *out)
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


# --- small pools of single ranks: exact greedy, one heap entry per receiver -------------

def _schedule_leaf_pool(model: _Model, plan: _Plan, holders: list, ranks: np.ndarray,
                        n_items: int, nseg: int) -> None:
    """ScheduleInputPool for a pool whose sub-pools are single ranks.

    The same greedy as _schedule_input_pool, with MinTime kept per receiving rank (the
    minimum over the pieces it lacks) instead of per (piece, rank): a port-time change then
    invalidates one heap entry instead of one per piece. Runs on plain lists of the pool's
    own block of the cost matrices (single values from numpy arrays are slow).
    """
    if native.kernels() is not None:
        return _leaf_pool_native(model, plan, holders, ranks, n_items, nseg)
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
    # Columns (per receiver r, a list over senders s), for best_for.
    dur_to = [list(c) for c in zip(*dur)]
    early_to = [list(c) for c in zip(*early)]
    link_to = [list(c) for c in zip(*link)]  # kept equal to link, transposed

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
    # the furthest away; serving it first lowers the average elapsed time 4-5% on
    # tryton-48 (docs/grid.md). One integer per receiver, (need, arrival order, rank)
    # packed in that order, ranks a tie; native/leaf_pool.c packs it alike.
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
        # Commit (the model's update rules, on the local lists).
        start = max(send_free[s], held[d][s], link[s][r], after[r],
                    recv_free[r] - (early[s][r] if overlap[r] else 0.0))
        end = start + dur[s][r]
        link[s][r] = link_to[r][s] = end if fifo[s][r] else start + gap[s][r]
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
            key[r] = (t, tie(r))  # a lower bound: its ports only got later
            heapq.heappush(heap, key[r])
        # The new holder may serve d earlier than anyone so far (UpdateAfterSched, l. 2-6).
        sf = max(send_free[r], end)
        dr, lr = dur[r], link[r]
        for y in range(n):
            if y != r and y not in held[d]:
                t3 = max(sf, lr[y], after[y], recv_free[y] - (early[r][y] if overlap[y] else 0.0)) + dr[y]
                if t3 < key[y][0]:
                    key[y] = (t3, key[y][1])
                    heapq.heappush(heap, key[y])
    model.link_free[ix] = np.array(link)
    model.send_free[ranks], model.recv_free[ranks] = send_free, recv_free
    model.recv_overlap[ranks], model.recv_after[ranks] = overlap, after
    for d in range(n_items):
        holders[d].update({members[i]: t for i, t in held[d].items()})


def _leaf_pool_native(model: _Model, plan: _Plan, holders: list, ranks: np.ndarray,
                      n_items: int, nseg: int) -> None:
    """_schedule_leaf_pool in C (native/leaf_pool.c): the same transfers, bit for bit."""
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
    count = native.call("leaf_pool", n, n_items, len(model.dur), nseg, model.full_duplex,
                        model.serial, ranks,
                        np.ascontiguousarray(model.dur[ix]), np.ascontiguousarray(model.early[ix]),
                        link, np.ascontiguousarray(model.os[ix]), np.ascontiguousarray(model.g[ix]),
                        model.fifo[ix].astype(np.uint8), send_free, recv_free, overlap, after,
                        np.ascontiguousarray(model.arrival[ranks]), held_off, held_rank, held_time,
                        *out)
    src, dst, item, start, end = (a[:count] for a in out)
    plan.extend(ranks[src], ranks[dst], item, start, end)
    model.link_free[ix] = link
    model.send_free[ranks], model.recv_free[ranks] = send_free, recv_free
    model.recv_overlap[ranks], model.recv_after[ranks] = overlap.astype(bool), after
    for r, d, t in zip(ranks[dst].tolist(), item.tolist(), end.tolist()):
        holders[d][r] = t


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
    pool_start = np.searchsorted(pool_of, np.arange(npool))
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
        # np.bitwise_or.at(words, (r, q >> 6), bits), without its per-element cost: OR the
        # bits that fall into one word together first.
        cell = r * W + (q >> 6)
        bits = one << (q & 63).astype(np.uint64)
        if len(cell) > 1:
            order = np.argsort(cell, kind="stable")
            cell, bits = cell[order], bits[order]
            first = np.concatenate(([True], cell[1:] != cell[:-1]))
            bits = np.bitwise_or.reduceat(bits, np.nonzero(first)[0])
            cell = cell[first]
        words.reshape(-1)[cell] |= bits

    set_bits(held, pend_r, pend_d)

    def proposals(cand, send_ok, s_first, s_count, recv_ok, r_pool, r_pos):
        """(shift, receiver index, sender) of the proposals (every sender once, busy links
        included) that pass every condition but the sender (half duplex: either rank)
        being taken, by shift then receiver. Pool by pool: all its senders against all
        its candidate receivers at once."""
        ks, iis, ss = [], [], []
        pools = r_pool[cand]
        for q in np.unique(pools).tolist():
            idx = cand[pools == q]
            senders = send_ok[s_first[q]:s_first[q] + s_count[q]]
            receivers = recv_ok[idx]
            can = (~held[receivers][:, None, :] & usable[senders][None, :, :]).any(-1)
            can &= senders[None, :] != receivers[:, None]
            i, pos = np.nonzero(can)
            ks.append((pos - r_pos[idx][i]) % len(senders)), iis.append(idx[i]), ss.append(senders[pos])
        if not ks:
            return [], [], []
        k, i, s = np.concatenate(ks), np.concatenate(iis), np.concatenate(ss)
        order = np.lexsort((i, k))
        return k[order].tolist(), i[order].tolist(), s[order].tolist()

    def pair_up(ks, iis, ss, recv_ok):
        """The proposals taken, shift by shift, as the strict shifts take them: each
        receiver once; a sender by the first receiver asking it while it is free. Half
        duplex: a sender only by its first asker among those whose ranks were both free
        before this shift, and only if neither was taken since."""
        recv = recv_ok.tolist()
        matched, got_s, got_r = set(), [], []
        if full:
            busy = set()
            for i, sd in zip(iis, ss):
                if i not in matched and sd not in busy:
                    matched.add(i), busy.add(sd)
                    got_s.append(sd), got_r.append(recv[i])
            return got_s, got_r
        busy, newly, claimed, shift = set(), set(), set(), -1
        for k, i, sd in zip(ks, iis, ss):
            if k != shift:
                busy |= newly
                newly, claimed, shift = set(), set(), k
            rv = recv[i]
            if i in matched or sd in busy or rv in busy or sd in claimed:
                continue
            claimed.add(sd)
            if sd not in newly and rv not in newly:
                newly.update((sd, rv))
                matched.add(i)
                got_s.append(sd), got_r.append(rv)
        return got_s, got_r

    need = D - np.isfinite(ready).sum(1)
    start_bit = D - 1 - ((ranks * nseg - 1) % D)  # the receiver's preferred piece
    floor = np.zeros(npool)
    for _ in range(4 * (D + 1) * n + 1000):  # each round takes a transfer or moves a frontier
        needy = need > 0
        if not needy.any():
            break
        recv_from = np.maximum(after, recv_free - early_max * overlap)
        # Per pool (ranks of a pool are contiguous): the earliest needy receiver, sender.
        t_recv = np.minimum.reduceat(np.where(needy, recv_from, np.inf), pool_start)
        t_send = np.minimum.reduceat(send_free, pool_start)
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
        # Pairing: at shift k, every receiver not yet paired asks its pool's sender
        # (its position + k) mod count; a sender takes the first receiver asking it.
        matched = np.zeros(len(recv_ok), bool)
        busy = np.zeros(n, bool)  # sender taken (half duplex: either role taken)
        got_s, got_r = [], []
        cand = np.nonzero(s_count[r_pool] > 0)[0]
        for shift in range(ROUND_TRIES if len(cand) else 0):
            # First look for senders whose link is free by the time their ports are.
            cand = np.nonzero(~matched & (s_count[r_pool] > 0))[0]
            if len(cand) == 0:
                break
            cnt = s_count[r_pool[cand]]
            s = send_ok[s_first[r_pool[cand]] + (r_pos[cand] + shift) % cnt]
            r = recv_ok[cand]
            # A pair needs a free link (a FIFO link frees only when its last message has
            # landed: the receiver then tries the next sender, as the exact greedy would).
            ok = (s != r) & ~busy[s] & (shift < cnt)
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
        if got_s:
            got_s, got_r = np.concatenate(got_s), np.concatenate(got_r)
        elif len(cand):
            # Nothing paired: every sender is tried once, busy links included, in the same
            # order. Few receivers can take anything then: only those that some sender of
            # their pool can serve are looked at, and only the proposals that could be
            # taken (`proposals`), then taken in order (`pair_up`).
            starts = s_first[s_count > 0]
            union = np.zeros((npool, W), np.uint64)
            union[s_count > 0] = np.bitwise_or.reduceat(usable[send_ok], starts, axis=0)
            cand = cand[(union[r_pool[cand]] & ~held[recv_ok[cand]]).any(1)]
            got_s, got_r = pair_up(*proposals(cand, send_ok, s_first, s_count, recv_ok, r_pool, r_pos),
                                   recv_ok)
        if not len(got_s):
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
        s, r = np.asarray(got_s, np.int64), np.asarray(got_r, np.int64)
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
        plan.extend(ranks[s], ranks[r], d, st, en)
    else:
        raise RuntimeError("min3 round scheduler did not finish (a bug)")
    model.link_free[ix] = np.where(same_pool, link, model.link_free[ix])
    model.send_free[ranks], model.recv_free[ranks] = send_free, recv_free
    model.recv_overlap[ranks], model.recv_after[ranks] = overlap, after


# --- large pools of single ranks: a pipelined ring with backfilling --------------------

def _ring_fits(model: _Model, plan: _Plan, above: int, ranks: np.ndarray) -> bool:
    """The ring engine's conditions: full duplex, one arrival time for the whole pool,
    pieces entering it from the pools above (a site of a grid; on a cluster that is one
    pool the rounds plan 0.2-3 % shorter, and faster), and no transfer planned above
    between two of its ranks (the ring owns its links)."""
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
    if native.kernels() is not None:
        return _ring_native(model, plan, holders, ranks, n_items, above)
    m = [int(r) for r in ranks]
    n = len(m)
    loc = {g: i for i, g in enumerate(m)}
    nxt = np.roll(np.asarray(m), -1)
    dur = model.dur[ranks, nxt].tolist()
    early = model.early[ranks, nxt].tolist()  # of the ring transfer into rank i + 1
    os_, gap, fifo = model.os[ranks, nxt].tolist(), model.g[ranks, nxt].tolist(), model.fifo[ranks, nxt].tolist()
    link = model.link_free[ranks, nxt].tolist()
    floor = float(model.arrival[m[0]])  # one arrival for the pool (_ring_fits)
    # The timelines above, by start: per rank its sends (start, start + os: the port is
    # free again) and receives (start, end, start + early: its bytes begin to land).
    sends = [[] for _ in range(n)]
    recvs = [[] for _ in range(n)]
    for s, r, _, st, en in zip(*(c.tolist() for c in plan.head(above))):
        if s in loc:
            sends[loc[s]].append((st, st + float(model.os[s, r])))
        if r in loc:
            recvs[loc[r]].append((st, en, st + float(model.early[s, r])))
    for x in sends + recvs:
        x.sort()
    send_starts = [[e[0] for e in x] for x in sends]
    recv_starts = [[e[0] for e in x] for x in recvs]

    def send_fit(i, t):
        """Earliest t' >= t at which rank i may start a ring send between its sends above."""
        w, starts = sends[i], send_starts[i]
        k = bisect.bisect_right(starts, t)
        while True:
            if k and w[k - 1][1] > t:
                t = w[k - 1][1]  # the send before has released the port
            if k < len(w):
                if starts[k] <= t:
                    k += 1  # it starts first: it is the one before
                    continue
                if t + os_[i] > starts[k]:
                    t = starts[k]  # would hold the port when the next one starts
                    k += 1
                    continue
            return t

    def recv_fit(j, t, sender):
        """Earliest t' >= t at which rank j may start receiving a ring transfer from
        `sender`: its bytes land after those of the receive before, and before those of
        the receive after (which land from that one's start + its early)."""
        w, starts = recvs[j], recv_starts[j]
        e, d = early[sender], dur[sender]
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

    # Ring state: the last ring send of each rank (its port and link) and ring receive.
    send_free = [floor] * n
    recv_free = [0.0] * n
    initial = []
    queue = [[] for _ in range(n)]  # per rank: (time it holds the piece, piece) to forward
    for d in range(n_items):
        h = {loc[g]: t for g, t in holders[d].items()}
        initial.append(h)
        for i, t in h.items():
            if (i + 1) % n not in h:
                queue[i].append((t, d))
    for q in queue:
        heapq.heapify(q)

    def earliest(i):
        j = (i + 1) % n
        t = max(queue[i][0][0], send_free[i], link[i], recv_free[j] - early[i])
        if not (sends[i] or recvs[j]):
            return t  # most ranks: nothing planned above
        while True:
            t2 = recv_fit(j, send_fit(i, t), i)
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


def _ring_native(model: _Model, plan: _Plan, holders: list, ranks: np.ndarray,
                 n_items: int, above: int) -> None:
    """_schedule_ring in C (native/ring.c): the same transfers, bit for bit."""
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
    count = native.call("ring", n, n_items, float(model.arrival[ranks[0]]),
                        model.dur[ranks, nxt], model.early[ranks, nxt], model.os[ranks, nxt],
                        model.g[ranks, nxt], model.fifo[ranks, nxt].astype(np.uint8), link,
                        send_off, send_start, send_freed, recv_off, recv_start, recv_end,
                        recv_land, held_off, held_rank, held_time, cap, *out,
                        send_free, recv_free)
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


# --- the recursion (Fig. 7) -----------------------------------------------------------

def pool_schedule(req: Request):
    """(plan, tree, model): the greedy's transfers down the whole pool tree (Fig. 7)."""
    from ..inputs.topology import homogeneous

    p, k = req.nranks, max(req.nseg, 1)
    topo = req.topology if req.topology is not None else homogeneous(p, full_duplex=req.full_duplex)
    arrivals = np.zeros(p) if req.arrivals is None else np.asarray(req.arrivals, np.float64)
    arrivals = arrivals - arrivals.min() if p else arrivals
    piece = -(-int(req.nbytes) // k)  # the largest piece: segment sizes differ by one byte
    model = _Model(topo, piece, req.full_duplex, arrivals)
    if serial_list_schedule(topo, req.arrivals):
        model.plan_serial()
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
        _schedule_input_pool(model, plan, local, groups, range(n_items),
                             lambda: _nest_rows(tree, node, np.concatenate(groups)))
        for d in range(n_items):  # Fig. 7, lines 4-12: the holder inside each sub-pool
            holders[d].update(local[d])
        stack.extend(reversed(kids))
    large = [r for r in leaves if len(r) * n_items > EXACT_LEAF_LIMIT]
    for ranks in leaves:
        if len(ranks) * n_items <= EXACT_LEAF_LIMIT:
            local = _local_holders(holders, ranks)
            _schedule_leaf_pool(model, plan, local, ranks, n_items, k)
    above = len(plan)  # the transfers the pools of pools planned
    fits = [RING_ENGINE and _ring_fits(model, plan, above, r) for r in large]
    for ranks in (r for r, f in zip(large, fits) if f):
        _schedule_ring(model, plan, _local_holders(holders, ranks), ranks, n_items, above)
    large = [r for r, f in zip(large, fits) if not f]
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
    src, dst, item, start, end = plan.columns()
    taken = np.arange(len(src))
    order = np.lexsort((taken, start))
    step = np.empty(len(src), np.int64)
    step[order] = taken
    # An op planned before its rank arrives runs in the background: receives, and in serial
    # plans relays of pieces received so (their own piece waits for the arrival). Lists go
    # by planned start, so these ops lead them.
    recv_phase = np.where(start < model.arrival[dst], BACKGROUND, FOREGROUND).astype(np.uint8)
    send_phase = np.where(start < model.arrival[src], BACKGROUND, FOREGROUND).astype(np.uint8)
    def lists(step, recv_step=None):
        sched = from_transfers(p, k, step, src, dst, item // k, item % k, send_phase,
                               algorithm="min3", recv_phase=recv_phase, recv_step=recv_step)
        sched.serial = model.serial  # policy.serial_list_schedule
        return sched

    gated_step, recv_step = _gate_link_receives(model, src, dst, item, step, req.topology,
                                                req.nbytes // k,
                                                (send_phase == FOREGROUND) & (recv_phase == FOREGROUND))
    sched = lists(step) if recv_step is None else lists(gated_step, recv_step)
    if recv_step is not None and not _makes_progress(sched, req.topology, req.nbytes):
        sched = lists(step)  # a gate the walk could deadlock on (with FIFO sends): none
    sched.meta.update({
        "pool_partitions": pooltree.partitions(tree),
        "planned_run_time_s": float(end.max() - model.arrival.min()) if len(end) else 0.0,
        "pools": sum(1 for n in tree.nodes if len(tree.nodes[n]["ranks"]) > 1),
    })
    return sched


def _makes_progress(sched, topo, nbytes: int) -> bool:
    """Does the schedule make progress under the runtime's rules, with the FIFO marks the
    pipeline will set (policy.mark_fifo_links), also under serial execution if it has a
    background part? (A gated receive makes its rank's walk the one that lets a FIFO
    sender's next message go; random grids found a cycle through that.)"""
    probe = copy.copy(sched)
    mark_fifo_links(probe, topo, nbytes)
    return not verify(probe) and not (probe.has_background and verify(probe, serial=True))


def _gate_link_receives(model: _Model, src, dst, item, step, topo, piece_bytes: int, foreground):
    """Sort keys (send steps, receive steps) that make the runtime take a shared WAN link's
    transfers into one rank one after another, as the plan has them.

    The plan serves a link in turn; the runtime posts every receive as its walk reaches
    it, and a rendezvous message (at least eager_limit bytes) moves once its receive is
    posted - so transfers the plan put one after another on a link all moved at once,
    sharing it, and every piece landed late: on the three-site grid four UT pieces
    planned to reach UK 5.9 s apart all arrived at 23 s, and what UK forwarded from them
    started that much later. So a rendezvous receive over a shared link is listed just
    after the receiver's first forward of the piece it took before over the same link:
    the walk, waiting for that piece (rule 2), posts the receive when the link is free,
    where the plan starts the transfer. Three-site grid, SMPI: 11.94 -> 11.33 s at 256
    KiB, 46.86 -> 43.62 s at 1 MiB (docs/grid.md).

    Only where one flow fills the link (window-capped links want several flows in flight,
    policy.py) and its latency is at most GATE_LATENCY_SHARE of the piece's time on it (a
    gated receive is posted when the previous piece has landed, so the next transfer's
    latency is no longer hidden behind it: one latency more per transfer than planned);
    in full duplex, foreground ops, and when the forward comes before the
    receiver's own forward of the gated piece; and a receive moves only past sends, never
    past another receive. So each rank's receives keep the plan's order - the cost model's
    receive-port order (a cycle otherwise: random grids found one), and the order in which
    the k-th send from a peer meets the k-th receive - and its sends keep theirs."""
    if (piece_bytes < getattr(topo, "eager_limit", 65536) or not model.full_duplex
            or not (model.wan_of >= 0).any()):
        return step, None
    shared = shared_links(topo)
    link_bw = np.r_[shared.bandwidth, np.inf][model.wan_of]
    filled = ((model.wan_of >= 0) & (topo.flow_bandwidth() >= link_bw * (1 - 1e-9))
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
        r, lk = int(dst[j]), int(model.wan_of[src[j], dst[j]])
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
