"""The cost model's transfer DAG and its timing (simulate.py is the public face).

Every transfer waits for a few earlier ones: the previous use of the sender's port, the
previous use of the receiver's port, the previous transfer on the same rank pair, the
transfer that delivered the piece to the sender, the one after which the receiver posts
the receive (rendezvous) and, on a shared WAN link (links.py), the transfer before it on
that link. That is a DAG; its longest paths are computed in waves (all transfers whose
predecessors are known, at once), a handful of numpy calls per wave rather than per
transfer. Where the C kernels are built, _PyGraph's C twin (kernels/dag.c) times every
plan instead, with the same results, faster (docs/benchmarks.md, "Compiler"). _PyGraph
times the same DAG transfer by transfer on Python lists, with the same float operations
and so the same results: it is the kernel's one reference, which the C mirrors statement
for statement and the tests compare the kernel and the waves with.

Shared WAN links: a flow from site A to B is charged its route's bottleneck only (link_of:
exact for `wan:`, one link per route; fluid.py charges all: docs/semantics.md), served
FIFO in start order, each transfer holding the link for its bytes at the link's bandwidth:
the next may start once they have passed (the latency overlaps). That order depends on
the timing, so it is found by iteration: time without the link order, sort each link's
transfers by start, time again with that order, until the order no longer changes (at
most LINK_PASSES times). Fair sharing ends a batch of flows at the same moment
as FIFO service does; single flows in a batch end earlier or later.

A transfer waiting in a link's queue holds neither host port: the executor has posted it
(sends are nonblocking, receives posted ahead) and SimGrid lets the rank's other flows
through meanwhile. So the ports release it as if it had started when it was ready
(_PORT_END, and os(m) from that moment); the link, the data it forwards and FIFO pairs see
its real start and end. Without this a rank's list order stalled every later flow behind
one queued at a busy WAN link (spreading on wan-3x16 was predicted far slower than the
lab measured it).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.ma  # noqa: F401 - np.unique imports it lazily: at start-up, not in a timed stage

from .. import kernels
from ..ir import FOREGROUND, RECV, SEND, Schedule
from ..verify import match

# Which release time of a predecessor counts: start + os(m), start + g(m), end, start +
# the bytes' time on its shared link, and end as the ports see it (_PORT_END, below).
_OS, _G, _END, _LINK, _PORT_END = 0, 1, 2, 3, 4
_NK = 5
LINK_PASSES = 4


class ModelCycle(ValueError):
    """The port orders of the schedule wait on each other: the model cannot order them."""


@dataclass
class Timeline:
    """Per transfer: endpoints, piece, bytes and times (seconds); per rank: exit time."""

    src: np.ndarray
    dst: np.ndarray
    origin: np.ndarray
    segment: np.ndarray
    phase: np.ndarray
    nbytes: np.ndarray
    start: np.ndarray
    end: np.ndarray
    arrivals: np.ndarray
    exits: np.ndarray


class Plan:
    """The transfer DAG of a schedule: built once, timed for any arrival pattern."""

    def __init__(self, sched: Schedule, topo, nbytes: int, matching=None, serial_sends=False):
        m = matching if matching is not None else match(sched)
        s = sched
        rank = s.rank_of_op
        so, ro = m.send_op, m.recv_op
        order = np.argsort(so, kind="stable")  # transfers in sender list order
        so, ro = so[order], ro[order]
        self.n = n = len(so)
        self.src, self.dst = rank[so], rank[ro]
        self.origin, self.segment = s.origin[so], s.segment[so]
        self.phase = s.phase[ro]  # the receiving end's phase (BDR: a late rank receives in the background)
        send_phase = s.phase[so]
        self._sizes = s.piece_bytes(nbytes)  # per segment index
        self.nbytes = self._sizes[self.segment]
        self.nranks = s.nranks

        tr_of_op = np.full(s.total_ops, -1, np.int64)
        tr_of_op[so] = np.arange(n)
        tr_of_op[ro] = np.arange(n)

        src, dst = self.src, self.dst
        # Size-dependent costs (inputs/msgcosts.py): L * lf(m); bandwidth terms for m / bf(m).
        lat_factor, meff = topo.effective_sizes(src, dst, self.nbytes)
        pair_lat = topo.latency[src, dst] * lat_factor
        flow_bw = topo.flow_bandwidth()
        self.duration = pair_lat + meff / flow_bw[src, dst]
        # How long before its end a transfer stops holding the receiving port: its latency,
        # and, for a flow slowed by its TCP window, the time beyond what its bytes take at
        # the port's own rate (several such flows share one receiving NIC side by side).
        recv_rate = topo.port_bandwidth[1]
        port_free_early = self.duration - meff / recv_rate[src, dst]
        self._early, self._serial = port_free_early, serial_sends  # for _GreedyPorts
        self.os = self._pairwise(topo.send_overhead, src, dst)
        self.g = self._pairwise(topo.gap, src, dst)

        # A receiving port is busy only while bytes arrive: a transfer may start while the
        # previous one into the same port is still in flight, as long as its first byte
        # lands after that one's last (Start + L >= previous TotalTime). Eq. 3 of the Min3
        # paper keeps the port busy for the whole latency, which makes every message over a
        # long WAN link cost its full latency in sequence; real links pipeline them.
        no_offset = np.zeros(n)
        ports = (so, ro, rank, tr_of_op, s, serial_sends, port_free_early, no_offset)
        self._ports = ports  # kept for the half-duplex fallback below; dropped after it
        preds, kinds, offsets = self._port_columns(topo.full_duplex, *ports)
        # Previous transfer on the same directed link.
        link = src.astype(np.int64) * s.nranks + dst
        lo = np.lexsort((np.arange(n), link))
        same = np.r_[False, link[lo][1:] == link[lo][:-1]][:n]  # n = 0: a one-rank schedule
        prev_link = np.full(n, -1, np.int64)
        prev_link[lo[same]] = lo[np.nonzero(same)[0] - 1]
        preds.append(prev_link)
        # FIFO per link: a send marked FIFO goes only once the previous (synchronous) message
        # to the same peer has completed; unmarked sends are held back by the gap g(m) only.
        kinds.append(np.where(s.fifo[so] == 1, _END, _G))
        offsets.append(no_offset)
        # The transfer that brought a forwarded piece to the sender.
        feed = np.full(n, -1, np.int64)
        fwd = np.nonzero(self.origin != src)[0]
        if len(fwd):
            rkey = (dst.astype(np.int64) * s.nranks + self.origin) * s.nseg + self.segment
            fkey = (src[fwd].astype(np.int64) * s.nranks + self.origin[fwd]) * s.nseg + self.segment[fwd]
            feed[fwd] = self._receipt(rkey, fkey, s.nranks * s.nranks * s.nseg)
        preds.append(feed)
        kinds.append(_END)
        offsets.append(no_offset)
        # Rendezvous: a message of at least the eager limit moves only once its receive is
        # posted, and the executor posts a receive when its walk reaches it, i.e. after the
        # piece of the last forwarded send before it in the list has arrived. (Exact when
        # pieces arrive in list order, as in every generated schedule.)
        fwd_op = (s.kind == SEND) & (s.origin != rank)
        last_fwd = np.maximum.accumulate(np.where(fwd_op, np.arange(s.total_ops), -1))[ro]
        gated = (last_fwd >= s.offsets[rank[ro]]) & (self.nbytes >= topo.eager_limit)
        posting = np.full(n, -1, np.int64)
        posting[gated] = feed[tr_of_op[last_fwd[gated]]]
        preds.append(posting)
        kinds.append(_END)
        offsets.append(no_offset)
        # The columns, stacked into pred, kind and offset when first asked for (the Python
        # paths); the C kernel reads them as they are (stacking copies every column).
        self._columns = preds, kinds, offsets
        self._rest = preds[2:], kinds[2:], offsets[2:]  # all but the port columns
        self._stacked = None
        self._zero_offset = np.array([o is no_offset for o in offsets], np.uint8)  # all +0.0
        # Shared WAN links: which one each transfer crosses, and how long it holds it.
        self.wan = np.full(n, -1, np.int64)
        self.wan_time = np.zeros(n)
        if n:
            links = topo.shared_links
            if links.any:
                self.wan = links.link_of[src, dst]
                on = self.wan >= 0
                self.wan_time[on] = meff[on] / links.bandwidth[self.wan[on]]
        self.on_wan = np.nonzero(self.wan >= 0)[0]

        # Readiness independent of the data: arrivals (filled in per pattern in `time`).
        own = self.origin == src
        self.send_waits_arrival = own | (send_phase == FOREGROUND)
        self.recv_waits_arrival = self.phase == FOREGROUND
        # os(m) and g(m) of every transfer: the same for every arrival pattern timed.
        self.os_all = self._per_transfer(self.os)
        self.g_all = self._per_transfer(self.g)
        # With the C kernels every plan is timed as _PyGraph times it, in C; without, in
        # numpy waves (docs/benchmarks.md, "the second Python paths": _PyGraph in production
        # would save milliseconds on small plans and cost seconds on large ones).
        self._greedy = None
        try:
            self._prepare_timing()
        except ModelCycle:
            if topo.full_duplex:
                raise
            self._use_greedy_ports()
        self._ports = self._rest = None

    def _prepare_timing(self):
        self._order = self._csr = self._kernel = None
        if kernels.available():
            self._kernel = _KernelGraph(self)
            if not self._kernel.acyclic:  # a cycle: _topological_waves reports it
                self._kernel = None
        if self._kernel is None:
            self._order = self._topological_waves(self.pred)

    def _use_greedy_ports(self):
        """Half duplex where the lists give no single-port order (docs/semantics.md).

        A schedule compiled for full duplex has every rank send and receive in the same
        step (ring: send to the right, receive from the left), so "list order is port
        order" on one port makes every rank's first transfer wait for its neighbour's:
        a cycle. Such schedules keep the full-duplex constraints (sends in list order,
        receives in list order, data, FIFO, rendezvous) and their one port serves its
        sends and receives interleaved greedily in simulated time (_GreedyPorts)."""
        preds, kinds, offsets = self._port_columns(True, *self._ports)
        rest_p, rest_k, rest_o = self._rest
        no_offset = self._ports[-1]
        offsets = offsets + list(rest_o)
        self._columns = preds + list(rest_p), kinds + list(rest_k), offsets
        self._stacked = None
        self._zero_offset = np.array([o is no_offset for o in offsets], np.uint8)
        self._kernel = self._csr = None
        self._order = self._topological_waves(self.pred)  # ModelCycle if even these cycle
        self._greedy = _GreedyPorts(self)

    def _port_columns(self, full_duplex, so, ro, rank, tr_of_op, s, serial_sends,
                      port_free_early, no_offset):
        """The two port columns (pred, kind, offset): the sender's and the receiver's previous
        use of its port, in list order."""
        preds, kinds, offsets = [], [], []
        if full_duplex:
            # Previous send in the sender's list; previous recv in the receiver's list.
            preds.append(self._previous_in_list(so, rank, tr_of_op, s.kind == SEND, s.total_ops))
            # Serial sends (the PAT engine's execution: one synchronous send at a time) hold
            # the port until the message has arrived, not only for os(m).
            kinds.append(_END if serial_sends else _OS)
            offsets.append(no_offset)
            preds.append(self._previous_in_list(ro, rank, tr_of_op, s.kind == RECV, s.total_ops))
            kinds.append(_END if serial_sends else _PORT_END)
            # Serial receives are posted one at a time, each once the previous has arrived;
            # a synchronous send moves only once matched: no overlap with the previous one.
            offsets.append(no_offset if serial_sends else -port_free_early)
        else:
            # One port: the previous op of any kind, released after os (send) or at the end (recv).
            everything = np.ones(s.total_ops, bool)
            for ops, receiving in ((so, False), (ro, True)):
                p = self._previous_in_list(ops, rank, tr_of_op, everything, s.total_ops)
                prev_op = self._previous_op(ops, rank, s)
                prev_send = (prev_op >= 0) & (s.kind[np.maximum(prev_op, 0)] == SEND)
                preds.append(p)
                kinds.append(_END if serial_sends else np.where(prev_send, _OS, _PORT_END))
                offsets.append(np.where(~prev_send & (not serial_sends), -port_free_early, 0.0)
                               if receiving else no_offset)
        return preds, kinds, offsets

    @property
    def pred(self) -> np.ndarray:
        """(n, k) int64: the transfers each waits for (-1: none), one column per rule."""
        return self._stack()[0]

    @property
    def kind(self) -> np.ndarray:
        """(n, k) int8: which release time of pred counts (_OS .. _PORT_END)."""
        return self._stack()[1]

    @property
    def offset(self) -> np.ndarray:
        """(n, k): added to that release time."""
        return self._stack()[2]

    def _stack(self):
        if self._stacked is None:
            preds, kinds, offsets = self._columns
            n = self.n
            self._stacked = (np.stack(preds, 1),
                             np.stack([np.broadcast_to(np.asarray(k, np.int8), n) for k in kinds], 1),
                             np.stack(offsets, 1))
            self._columns = None  # only _KernelGraph reads them, when the plan is built
        return self._stacked

    @staticmethod
    def _pairwise(fn, src, dst):
        # Topology methods return (P, P) matrices for a size; evaluate per transfer size.
        def at(nbytes):
            return fn(nbytes)[src, dst]
        return at

    @staticmethod
    def _previous_in_list(ops, rank, tr_of_op, eligible, total):
        """For each op in `ops`: transfer of the previous eligible op in the same rank's list."""
        # The last eligible op before each op in global (rank-major) order, by a running max.
        last = np.maximum.accumulate(np.where(eligible, np.arange(total), -1))
        cand = np.r_[-1, last[:-1]][ops]
        prev = np.full(len(ops), -1, np.int64)
        has = cand >= 0
        has &= rank[np.maximum(cand, 0)] == rank[ops]
        prev[has] = tr_of_op[cand[has]]
        return prev

    @staticmethod
    def _receipt(rkey, fkey, nkeys):
        """For each of fkey: the first transfer whose rkey it is (the next key's if none)."""
        n = len(rkey)
        if nkeys <= 2 * n + 1024:
            # A table by key: a receipt per piece and rank, as every valid schedule has, is
            # found without sorting; anything else takes the general way below.
            table = np.full(nkeys, -1, np.int64)
            table[rkey] = np.arange(n)
            found = table[fkey]
            if (found >= 0).all() and np.array_equal(table[rkey], np.arange(n)):
                return found
        srt = np.argsort(rkey, kind="stable")
        return srt[np.searchsorted(rkey[srt], fkey)]

    @staticmethod
    def _previous_op(ops, rank, s):
        prev = ops - 1
        ok = (prev >= 0) & (rank[np.maximum(prev, 0)] == rank[ops])
        return np.where(ok, prev, -1)

    def _topological_waves(self, pred, chain=None) -> list[np.ndarray]:
        """Transfers by wave: each after all its predecessors in `pred`, and after
        chain[v] if given (>= 0; the shared-link order, each transfer before at most one)."""
        n = self.n
        if self._csr is None:
            # Successor lists of `pred` (the plan's own) in CSR form, kept for later passes.
            valid = pred >= 0
            rows = np.repeat(np.arange(n), pred.shape[1])[valid.ravel()]
            cols = pred.ravel()[valid.ravel()]
            succ_start = np.zeros(n + 1, np.int64)
            np.cumsum(np.bincount(cols, minlength=n), out=succ_start[1:])
            self._csr = (valid.sum(1), rows[np.argsort(cols, kind="stable")], succ_start)
        indeg, succ, succ_start = self._csr
        indeg = indeg.copy()
        chain_next = None
        if chain is not None:
            linked = np.nonzero(chain >= 0)[0]
            indeg[linked] += 1
            chain_next = np.full(n, -1, np.int64)
            chain_next[chain[linked]] = linked
        waves = []
        frontier = np.nonzero(indeg == 0)[0]
        done = 0
        while len(frontier):
            waves.append(frontier)
            done += len(frontier)
            lens = succ_start[frontier + 1] - succ_start[frontier]
            if lens.sum() == 0 and (chain_next is None or (chain_next[frontier] < 0).all()):
                break
            starts = np.repeat(succ_start[frontier], lens)
            within = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
            targets = succ[starts + within]
            if chain_next is not None:
                nxt = chain_next[frontier]
                targets = np.concatenate([targets, nxt[nxt >= 0]])
            touched, dec = np.unique(targets, return_counts=True)  # O(wave), not O(n)
            indeg[touched] -= dec
            frontier = touched[indeg[touched] == 0]
        if done != n:
            stuck = int(np.nonzero(indeg > 0)[0][0])
            raise ModelCycle(
                f"transfer {int(self.src[stuck])}->{int(self.dst[stuck])} of piece "
                f"({int(self.origin[stuck])},{int(self.segment[stuck])}) waits on itself through "
                "the port orders of the cost model (reorder the ranks' lists)")
        return waves

    def time(self, arrivals: np.ndarray) -> Timeline:
        a = np.asarray(arrivals, np.float64)
        base = np.maximum(np.where(self.send_waits_arrival, a[self.src], -np.inf),
                          np.where(self.recv_waits_arrival, a[self.dst], -np.inf))
        base = np.where(np.isfinite(base), base, a.min() if len(a) else 0.0)
        timed = self._kernel.time(base) if self._kernel is not None else None
        if self._greedy is not None:
            start, end = self._greedy.time(base)
        elif timed is not None:
            start, end = timed
        elif self._kernel is not None:  # cannot happen (kernels/dag.c): the reference says why
            self._order = self._topological_waves(self.pred)
            start, end = self._time_waves(base)
        else:
            start, end = self._time_waves(base)
        exits = a.copy()
        np.maximum.at(exits, self.src, end)
        np.maximum.at(exits, self.dst, end)
        return Timeline(self.src, self.dst, self.origin, self.segment, self.phase, self.nbytes,
                        start, end, a, exits)

    def _time_waves(self, base):
        start, end, key = self._longest_paths(base, self.pred, self.kind, self.offset, self._order)
        chain = None
        for _ in range(LINK_PASSES if len(self.on_wan) else 0):
            # Each shared link serves its transfers in start order. The sort key is the
            # start made monotone along the graph's edges (rounding can put a successor's
            # start an ulp before its predecessor's); ties go by DAG order. So the new
            # edges agree with the old ones and the graph stays acyclic.
            waves = self._order if chain is None else waves_now
            rank_in_dag = np.empty(self.n, np.int64)
            rank_in_dag[np.concatenate(waves)] = np.arange(self.n)
            t = self.on_wan
            t = t[np.lexsort((rank_in_dag[t], key[t], self.wan[t]))]
            prev = np.full(self.n, -1, np.int64)
            same = self.wan[t][1:] == self.wan[t][:-1]
            prev[t[1:][same]] = t[:-1][same]
            if chain is not None and np.array_equal(prev, chain):
                break  # the order the timing was made with is the order it produced
            chain = prev
            pred = np.column_stack([self.pred, chain])
            kind = np.column_stack([self.kind, np.full(self.n, _LINK, np.int8)])
            offset = np.column_stack([self.offset, np.zeros(self.n)])
            waves_now = self._topological_waves(self.pred, chain)
            start, end, key = self._longest_paths(base, pred, kind, offset, waves_now)
        return start, end

    def _longest_paths(self, base, pred_all, kind_all, offset_all, waves):
        n = self.n
        start = np.zeros(n)
        end = np.zeros(n)
        # Release times of each finished transfer, indexed [transfer, kind]; row n = "none".
        rel = np.full((n + 1, _NK), -np.inf)
        key = np.full(n + 1, -np.inf)  # start, made monotone along the edges
        track = len(self.on_wan) > 0  # only the shared-link order needs it
        chained = pred_all.shape[1] > self.pred.shape[1]  # the link order is the last column
        for wave in waves:
            p = pred_all[wave]
            k = kind_all[wave]
            p = np.where(p >= 0, p, n)
            x = rel[p, k] + offset_all[wave]
            # ready: the start but for the shared link's queue (the last column, if any)
            ready = np.maximum(base[wave], x[:, :-1].max(1)) if chained else None
            st = np.maximum(base[wave], x.max(1))
            if not chained:
                ready = st
            start[wave] = st
            if track:
                key[wave] = np.maximum(st, key[p].max(1))
            en = st + self.duration[wave]
            end[wave] = en
            rel[wave, _OS] = ready + self.os_all[wave]
            rel[wave, _G] = st + self.g_all[wave]
            rel[wave, _END] = en
            rel[wave, _PORT_END] = ready + self.duration[wave]
            rel[wave, _LINK] = st + self.wan_time[wave]
        return start, end, key[:n]

    def _per_transfer(self, fn) -> np.ndarray:
        """os(m) or g(m) of every transfer; pieces take only a few distinct sizes."""
        if self.n and np.all(self._sizes == self._sizes[0]):
            # One size (nseg divides the bytes): the loop below would copy fn's values whole.
            return np.asarray(fn(int(self._sizes[0])), np.float64)
        out = np.empty(self.n)
        for size in np.unique(self.nbytes):
            sel = self.nbytes == size
            out[sel] = fn(int(size))[sel]
        return out


def _edge_lists(plan: Plan):
    """The transfer DAG of a plan as flat Python lists (no object per edge): the in-edges
    of transfer v are first[v]..first[v + 1] of pred, rel (the index of the pred's release
    time, _NK * pred + kind) and offset; its out-edges succ[succ_start[v]..succ_start[v + 1]];
    indeg[v] its number of in-edges."""
    valid = plan.pred >= 0
    q = plan.pred[valid]
    first = np.r_[0, np.cumsum(valid.sum(1))].tolist()
    rel = (_NK * q + plan.kind[valid]).tolist()
    by_pred = np.argsort(q, kind="stable")
    succ = np.nonzero(valid)[0][by_pred].tolist()
    succ_start = np.searchsorted(q[by_pred], np.arange(plan.n + 1)).tolist()
    return first, q.tolist(), plan.offset[valid].tolist(), rel, succ, succ_start, valid.sum(1).tolist()


class _PyGraph:
    """The transfer DAG of a Plan as Python lists, timed transfer by transfer with the
    arithmetic of Plan._longest_paths (the same float operations: the same results). The
    reference of the C kernel (kernels/dag.c); only the tests run it."""

    def __init__(self, plan: Plan):
        n = self.n = plan.n
        self.first, self.pred, self.offset, self.rel, succ, start, indeg = _edge_lists(plan)
        self.duration, self.os_all = plan.duration.tolist(), plan.os_all.tolist()
        self.g_all, self.wan_time = plan.g_all.tolist(), plan.wan_time.tolist()
        self.wan, self.on_wan = plan.wan.tolist(), plan.on_wan.tolist()
        # Levels (the wave of each transfer in Plan._topological_waves) and a topological
        # order, by Kahn's algorithm; levels None if the graph has a cycle.
        level = [0] * n
        order = [v for v in range(n) if not indeg[v]]
        for v in order:  # grows while it is walked
            lv = level[v] + 1
            for w in succ[start[v]:start[v + 1]]:
                if level[w] < lv:
                    level[w] = lv
                indeg[w] -= 1
                if not indeg[w]:
                    order.append(w)
        self.levels = level if len(order) == n else None
        self.order = order

    def time(self, base: np.ndarray):
        """(start, end) arrays, with the shared-link iteration of Plan._time_waves."""
        base = base.tolist()
        start, end, key, level = self._longest_paths(base, None, self.order)
        wan, levels, chain = self.wan, self.levels, None
        for _ in range(LINK_PASSES if self.on_wan else 0):
            # As in Plan._time_waves: each link in (start made monotone, DAG order).
            rank = [0] * self.n
            for i, v in enumerate(sorted(range(self.n), key=levels.__getitem__)):
                rank[v] = i  # position in the waves: by level, then index
            t = sorted(self.on_wan, key=lambda v: (wan[v], key[v], rank[v]))
            prev = {v: u for u, v in zip(t, t[1:]) if wan[u] == wan[v]}
            if chain is not None and prev == chain:
                break
            chain = prev
            # (key, DAG rank) is a topological order of the new graph: keys never decrease
            # along an edge, ranks increase, and the new chain follows that order.
            order = sorted(range(self.n), key=lambda v: (key[v], rank[v]))
            start, end, key, levels = self._longest_paths(base, chain, order)
        return np.array(start, np.float64), np.array(end, np.float64)

    def _longest_paths(self, base, chain, order):
        """Times in `order` (topological), with the edges chain[v] -> v (kind _LINK) too."""
        n, ninf = self.n, -np.inf
        start, end, key, level = [0.0] * n, [0.0] * n, [ninf] * n, [0] * n
        rel = [ninf] * (_NK * n)  # release times [_NK * transfer + kind]
        first, preds, rels, offsets = self.first, self.pred, self.rel, self.offset
        dur, os_all, g_all, wan_time = self.duration, self.os_all, self.g_all, self.wan_time
        no_chain = {}
        for v in order:
            st = base[v]
            km = ninf
            lv = 0
            for e in range(first[v], first[v + 1]):
                x = rel[rels[e]] + offsets[e]
                if x > st:
                    st = x
                q = preds[e]
                k = key[q]
                if k > km:
                    km = k
                k = level[q]
                if k >= lv:
                    lv = k + 1
            ready = st  # the start but for the shared link's queue
            q = (chain or no_chain).get(v, -1)
            if q >= 0:
                x = rel[_NK * q + _LINK] + 0.0
                if x > st:
                    st = x
                k = key[q]
                if k > km:
                    km = k
                k = level[q]
                if k >= lv:
                    lv = k + 1
            en = st + dur[v]
            start[v] = st
            end[v] = en
            key[v] = km if km > st else st
            level[v] = lv
            j = _NK * v
            rel[j] = ready + os_all[v]
            rel[j + 1] = st + g_all[v]
            rel[j + 2] = en
            rel[j + 3] = st + wan_time[v]
            rel[j + 4] = ready + dur[v]
        return start, end, key, level


class _GreedyPorts:
    """Half-duplex ports served greedily in simulated time (Plan._use_greedy_ports).

    The plan's full-duplex DAG gives each transfer its earliest start but for the port;
    each host's one port then takes, of the transfers whose predecessors are timed, the
    one that can start first (ties: the lower transfer index), and holds it as the
    list-order model does: a send for os(m) from when it is ready, a receive until its
    bytes have arrived (the next receive may start `early` before that), a serial
    schedule's transfers until they end. A shared WAN link serves its transfers in the
    order they are taken. Every release only grows as transfers are taken, so a popped
    transfer whose start has not moved is the earliest: the order is exact, not a guess,
    and no cycle can arise (the DAG without ports is acyclic; ports only delay)."""

    def __init__(self, plan: Plan):
        self.n = plan.n
        (self.first, self.pred, self.offset, self.rel, self.succ, self.succ_start,
         self.indeg) = _edge_lists(plan)
        self.src, self.dst = plan.src.tolist(), plan.dst.tolist()
        self.duration, self.os_all = plan.duration.tolist(), plan.os_all.tolist()
        self.g_all, self.wan_time = plan.g_all.tolist(), plan.wan_time.tolist()
        self.wan = plan.wan.tolist()
        self.early = plan._early.tolist()
        self.serial = bool(plan._serial)
        self.nranks = plan.nranks

    def time(self, base: np.ndarray):
        import heapq

        n, ninf = self.n, -np.inf
        base = base.tolist()
        start, end = [0.0] * n, [0.0] * n
        rel = [ninf] * (_NK * n)
        first, preds, rels, offsets = self.first, self.pred, self.rel, self.offset
        src, dst, early, wan, serial = self.src, self.dst, self.early, self.wan, self.serial
        last = [-1] * self.nranks  # the transfer that last held each host's port
        last_sent = [False] * self.nranks  # ... and whether the host sent it
        link_free: dict[int, float] = {}
        indeg = list(self.indeg)

        def ready_at(v):
            r = base[v]
            for e in range(first[v], first[v + 1]):
                x = rel[rels[e]] + offsets[e]
                if x > r:
                    r = x
            for h, receiving in ((src[v], False), (dst[v], True)):
                u = last[h]
                if u < 0:
                    continue
                if serial:
                    x = end[u]
                elif last_sent[h]:
                    x = rel[_NK * u + _OS]
                else:
                    x = rel[_NK * u + _PORT_END] - (early[v] if receiving else 0.0)
                if x > r:
                    r = x
            return r

        def start_at(v, ready):
            w = wan[v]
            return max(ready, link_free.get(w, ninf)) if w >= 0 else ready

        heap = []
        for v in range(n):
            if not indeg[v]:
                heap.append((start_at(v, ready_at(v)), v))
        heapq.heapify(heap)
        done = 0
        while heap:
            t, v = heapq.heappop(heap)
            ready = ready_at(v)
            st = start_at(v, ready)
            if st > t:  # a port or link was taken since: wait in line again
                heapq.heappush(heap, (st, v))
                continue
            en = st + self.duration[v]
            start[v], end[v] = st, en
            j = _NK * v
            rel[j] = ready + self.os_all[v]
            rel[j + 1] = st + self.g_all[v]
            rel[j + 2] = en
            rel[j + 3] = st + self.wan_time[v]
            rel[j + 4] = ready + self.duration[v]
            last[src[v]], last_sent[src[v]] = v, True
            last[dst[v]], last_sent[dst[v]] = v, False
            if wan[v] >= 0:
                link_free[wan[v]] = rel[j + 3]
            done += 1
            for w in self.succ[self.succ_start[v]:self.succ_start[v + 1]]:
                indeg[w] -= 1
                if not indeg[w]:
                    heapq.heappush(heap, (start_at(w, ready_at(w)), w))
        if done != n:  # cannot happen: _use_greedy_ports proved the DAG acyclic
            raise ModelCycle("half-duplex port order: a transfer was never ready")
        return np.array(start, np.float64), np.array(end, np.float64)


class _KernelGraph:
    """_PyGraph in C (kernels/dag.c): the same timing, bit for bit, on the plan's arrays
    renumbered depth first; fast enough for any size, so it replaces the waves too."""

    def __init__(self, plan: Plan):
        n = self.n = plan.n
        preds, kinds, offsets = plan._columns
        if len(preds) != 5:
            raise AssertionError("kernels/dag.c reads five dependency columns (enum K)")
        self.zero_col = plan._zero_offset  # added as the constant +0.0 (same bits), not read
        self.perm, self.edge = np.empty(n, np.int64), np.empty(n * 5, np.int64)
        self.eoff = np.empty(n * int(5 - self.zero_col.sum()))
        self.node = np.empty(4 * n)
        self.on_wan = np.empty(len(plan.on_wan), np.int64)
        self.link_of = np.ascontiguousarray(plan.wan[plan.on_wan], np.int64)
        kind = np.empty((5, n), np.uint8)
        for row, k in zip(kind, kinds):
            row[:] = k  # a scalar or one per transfer
        pred = [np.ascontiguousarray(p, np.int64) for p in preds]
        off = [np.ascontiguousarray(o, np.float64) for o in offsets]

        def f64(a):
            return np.ascontiguousarray(a, np.float64)
        done = kernels.dag_order(
            n=n, pred0=pred[0], pred1=pred[1], pred2=pred[2], pred3=pred[3], pred4=pred[4],
            kind=kind, off0=off[0], off1=off[1], off2=off[2], off3=off[3], off4=off[4],
            zero_col=self.zero_col, dur=f64(plan.duration), os=f64(plan.os_all),
            g=f64(plan.g_all), wan_time=f64(plan.wan_time), n_on_wan=len(plan.on_wan),
            on_wan=np.ascontiguousarray(plan.on_wan, np.int64), perm=self.perm,
            edge=self.edge, eoff=self.eoff, node=self.node, on_wan_out=self.on_wan)
        self.acyclic = done == n
        self.work = None  # the C timing's scratch, kept: its pages are mapped once

    def time(self, base: np.ndarray):
        """(start, end) arrays, as _PyGraph.time computes them; None if a shared-link order
        made a cycle (it cannot)."""
        n = self.n
        if self.work is None:
            self.work = (np.empty(4 * n), np.empty(3 * n, np.int64))
        start, end = np.empty(n), np.empty(n)
        done = kernels.dag_time(
            n=n, edge=self.edge, eoff=self.eoff, zero_col=self.zero_col, node=self.node,
            perm=self.perm, n_on_wan=len(self.on_wan), on_wan=self.on_wan,
            link_of=self.link_of, passes=LINK_PASSES, base=np.ascontiguousarray(base, np.float64),
            work_f=self.work[0], work_i=self.work[1], start=start, end=end)
        return (start, end) if done == n else None
