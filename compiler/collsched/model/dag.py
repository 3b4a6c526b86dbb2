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

from .dag_graph import (LINK_PASSES, ModelCycle, _END, _G, _KernelGraph, _LINK, _NK, _OS,  # noqa: F401
                        _PORT_END, _GreedyPorts, _PyGraph, _edge_lists)


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
    # Multi-piece messages (docs/semantics.md): the rows are messages, origin and segment
    # their first piece's, nbytes the whole message's; pieces[i] how many it carries.
    # None: one piece per row.
    pieces: np.ndarray | None = None


class Plan:
    """The transfer DAG of a schedule: built once, timed for any arrival pattern.

    A multi-piece message (Schedule.join; docs/semantics.md, "Multi-piece messages") is one
    transfer of the plan: one latency and the sum of its pieces' bytes, its ports and links
    held for the whole of it. It waits, as a single-piece transfer waits for the one that
    delivered its piece, for every message that delivered one of its pieces: the first in
    the feed column, the others as extra edges (self.extra: a CSR of (offsets, preds), each
    of kind _END and offset 0; None without). A schedule without joined ops gets exactly
    the plan it always had."""

    def __init__(self, sched: Schedule, topo, nbytes: int, matching=None, serial_sends=False):
        m = matching if matching is not None else match(sched)
        s = sched
        rank = s.rank_of_op
        so, ro = m.send_op, m.recv_op
        order = np.argsort(so, kind="stable")  # transfers in sender list order
        so, ro = so[order], ro[order]
        self._sizes = s.piece_bytes(nbytes)  # per segment index
        self.nranks = s.nranks
        msg = _Messages(s, rank, so, ro, self._sizes) if s.has_messages else None
        if msg is not None:
            so, ro = msg.send_head, msg.recv_head
        self.n = n = len(so)
        self.src, self.dst = rank[so], rank[ro]
        self.origin, self.segment = s.origin[so], s.segment[so]  # a message's first piece
        self.phase = s.phase[ro]  # the receiving end's phase (BDR: a late rank receives in the background)
        send_phase = s.phase[so]
        self.nbytes = self._sizes[self.segment] if msg is None else msg.nbytes
        self.pieces = None if msg is None else msg.count
        self.extra = None

        tr_of_op = np.full(s.total_ops, -1, np.int64)
        if msg is None:
            tr_of_op[so] = np.arange(n)
            tr_of_op[ro] = np.arange(n)
        else:  # every op of a message: its message
            tr_of_op[msg.piece_send] = msg.of_piece
            tr_of_op[msg.piece_recv] = msg.of_piece

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
        heads = None if msg is None else s.join == 0  # the ops that order ports: messages' first
        ports = (so, ro, rank, tr_of_op, s, serial_sends, port_free_early, no_offset, heads)
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
        for column in self._data_columns(s, rank, ro, tr_of_op, msg, topo.eager_limit):
            preds.append(column)
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
        own = self.origin == src if msg is None else msg.own
        self.send_waits_arrival = own | (send_phase == FOREGROUND)
        self.recv_waits_arrival = self.phase == FOREGROUND
        # os(m) and g(m) of every transfer: the same for every arrival pattern timed.
        if msg is None:
            self.os_all = self._per_transfer(self.os)
            self.g_all = self._per_transfer(self.g)
        else:  # many sizes: per message, as Topology.send_overhead and gap compute them
            self.os_all, self.g_all = message_overheads(topo, src, dst, self.nbytes, meff)
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

    def _data_columns(self, s, rank, ro, tr_of_op, msg, eager_limit):
        """The feed and posting columns (kind _END, offset 0); sets self.extra."""
        n, src, dst = self.n, self.src, self.dst
        # The transfer that brought a forwarded piece to the sender (a message: the first
        # such, and the others as extra edges).
        if msg is None:
            feed = np.full(n, -1, np.int64)
            fwd = np.nonzero(self.origin != src)[0]
            if len(fwd):
                rkey = (dst.astype(np.int64) * s.nranks + self.origin) * s.nseg + self.segment
                fkey = (src[fwd].astype(np.int64) * s.nranks + self.origin[fwd]) * s.nseg + self.segment[fwd]
                feed[fwd] = self._receipt(rkey, fkey, s.nranks * s.nranks * s.nseg)
            extra = None
        else:
            feed, extra = msg.feeds(s, rank, self._receipt)
        # Rendezvous: a message of at least the eager limit moves only once its receive is
        # posted, and the executor posts a receive when its walk reaches it, i.e. after the
        # piece of the last forwarded send before it in the list has arrived (every piece
        # of that send's message). (Exact when pieces arrive in list order, as in every
        # generated schedule.)
        fwd_op = (s.kind == SEND) & (s.origin != rank)
        last_fwd = np.maximum.accumulate(np.where(fwd_op, np.arange(s.total_ops), -1))[ro]
        gated = (last_fwd >= s.offsets[rank[ro]]) & (self.nbytes >= eager_limit)
        posting = np.full(n, -1, np.int64)
        posting[gated] = feed[tr_of_op[last_fwd[gated]]]
        if extra is not None:
            self.extra = _with_posting(extra, np.nonzero(gated)[0], tr_of_op[last_fwd[gated]], n)
        return feed, posting

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
        no_offset = self._ports[-2]
        offsets = offsets + list(rest_o)
        self._columns = preds + list(rest_p), kinds + list(rest_k), offsets
        self._stacked = None
        self._zero_offset = np.array([o is no_offset for o in offsets], np.uint8)
        self._kernel = self._csr = None
        self._order = self._topological_waves(self.pred)  # ModelCycle if even these cycle
        self._greedy = _GreedyPorts(self)

    def _port_columns(self, full_duplex, so, ro, rank, tr_of_op, s, serial_sends,
                      port_free_early, no_offset, heads):
        """The two port columns (pred, kind, offset): the sender's and the receiver's previous
        use of its port, in list order (heads: the ops that are a message's first, None:
        every op)."""
        preds, kinds, offsets = [], [], []
        if full_duplex:
            sends, recvs = s.kind == SEND, s.kind == RECV
            if heads is not None:
                sends &= heads
                recvs &= heads
            # Previous send in the sender's list; previous recv in the receiver's list.
            preds.append(self._previous_in_list(so, rank, tr_of_op, sends, s.total_ops))
            # Serial sends (the PAT engine's execution: one synchronous send at a time) hold
            # the port until the message has arrived, not only for os(m).
            kinds.append(_END if serial_sends else _OS)
            offsets.append(no_offset)
            preds.append(self._previous_in_list(ro, rank, tr_of_op, recvs, s.total_ops))
            kinds.append(_END if serial_sends else _PORT_END)
            # Serial receives are posted one at a time, each once the previous has arrived;
            # a synchronous send moves only once matched: no overlap with the previous one.
            offsets.append(no_offset if serial_sends else -port_free_early)
        else:
            # One port: the previous op of any kind, released after os (send) or at the end (recv).
            everything = np.ones(s.total_ops, bool) if heads is None else heads
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
            indeg = valid.sum(1)
            if self.extra is not None:  # a message's other feeds
                xoff, xpred = self.extra
                rows = np.r_[rows, np.repeat(np.arange(n), np.diff(xoff))]
                cols = np.r_[cols, xpred]
                indeg = indeg + np.diff(xoff)
            succ_start = np.zeros(n + 1, np.int64)
            np.cumsum(np.bincount(cols, minlength=n), out=succ_start[1:])
            self._csr = (indeg, rows[np.argsort(cols, kind="stable")], succ_start)
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
                        start, end, a, exits, self.pieces)

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
            if self.extra is not None:  # a message's other feeds: their ends, like a column's
                xend, xkey = self._extra_max(wave, rel, key)
                ready = np.maximum(ready, xend)
                st = np.maximum(st, xend)
            start[wave] = st
            if track:
                key[wave] = np.maximum(st, key[p].max(1))
                if self.extra is not None:
                    key[wave] = np.maximum(key[wave], xkey)
            en = st + self.duration[wave]
            end[wave] = en
            rel[wave, _OS] = ready + self.os_all[wave]
            rel[wave, _G] = st + self.g_all[wave]
            rel[wave, _END] = en
            rel[wave, _PORT_END] = ready + self.duration[wave]
            rel[wave, _LINK] = st + self.wan_time[wave]
        return start, end, key[:n]

    def _extra_max(self, wave, rel, key):
        """Per transfer of a wave: the latest end and key among its extra edges (-inf: none)."""
        xoff, xpred = self.extra
        lens = xoff[wave + 1] - xoff[wave]
        xend = np.full(len(wave), -np.inf)
        xkey = np.full(len(wave), -np.inf)
        if lens.any():
            within = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
            q = xpred[np.repeat(xoff[wave], lens) + within]
            at = np.repeat(np.arange(len(wave)), lens)
            np.maximum.at(xend, at, rel[q, _END] + 0.0)
            np.maximum.at(xkey, at, key[q])
        return xend, xkey

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




class _Messages:
    """The multi-piece messages of a schedule as the plan's transfers (Schedule.join).

    so, ro: the matched pieces (send op, recv op) in sender list order, so a message's
    pieces are consecutive, its first piece (the head op) first; the k-th send message of
    a pair meets the k-th receive message with the same pieces (verify), so the receiving
    head is the first piece's recv op."""

    def __init__(self, s: Schedule, rank, so, ro, sizes):
        self.piece_send, self.piece_recv = so, ro
        first = s.join[so] == 0
        self.first = np.nonzero(first)[0]  # each message's first piece
        self.of_piece = np.cumsum(first) - 1  # the message of every piece
        self.send_head, self.recv_head = so[self.first], ro[self.first]
        self.count = np.diff(np.r_[self.first, len(so)]).astype(np.int64)
        piece_bytes = sizes[s.segment[so]]
        self.nbytes = (np.add.reduceat(piece_bytes, self.first) if len(so)
                       else np.zeros(0, piece_bytes.dtype))
        own = (s.origin[so] == rank[so]).astype(np.uint8)
        self.own = np.maximum.reduceat(own, self.first).astype(bool) if len(so) else own.astype(bool)

    def feeds(self, s: Schedule, rank, receipt):
        """(feed column, extra pairs): per message the message that delivered its first
        forwarded piece to the sender (-1: none), and (message, feed) pairs of the others,
        each pair once and none repeating the column."""
        so, ro, n = self.piece_send, self.piece_recv, len(self.first)
        psrc, pdst = rank[so], rank[ro]
        origin, segment = s.origin[so], s.segment[so]
        feed = np.full(n, -1, np.int64)
        fwd = np.nonzero(origin != psrc)[0]
        if not len(fwd):
            return feed, None
        rkey = (pdst.astype(np.int64) * s.nranks + origin) * s.nseg + segment
        fkey = (psrc[fwd].astype(np.int64) * s.nranks + origin[fwd]) * s.nseg + segment[fwd]
        x = self.of_piece[fwd]  # nondecreasing
        q = self.of_piece[receipt(rkey, fkey, s.nranks * s.nranks * s.nseg)]
        lead = np.r_[True, x[1:] != x[:-1]]
        feed[x[lead]] = q[lead]
        rest = q != feed[x]
        return feed, ((x[rest], q[rest]) if rest.any() else None)


def _with_posting(extra, gated, posted_after, n):
    """Plan.extra as a CSR (offsets (n + 1), preds): the extra feed pairs, and for every
    gated (rendezvous) message the extra feeds of the send message after which its receive
    is posted (posted_after), as the posting column holds that message's first one."""
    x, q = extra
    by_x = np.argsort(x, kind="stable")
    x, q = x[by_x], q[by_x]
    xoff = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(x, minlength=n), out=xoff[1:])
    lens = xoff[posted_after + 1] - xoff[posted_after]
    if lens.any():
        within = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
        x = np.r_[x, np.repeat(gated, lens)]
        q = np.r_[q, q[np.repeat(xoff[posted_after], lens) + within]]
    key = np.unique(x.astype(np.int64) * max(n, 1) + q)  # by message, then pred; each once
    x, q = key // max(n, 1), key % max(n, 1)
    np.cumsum(np.bincount(x, minlength=n), out=xoff[1:])
    return xoff, q


def message_overheads(topo, src, dst, nbytes, meff):
    """(os(m), g(m)) of every message, as Topology.send_overhead and gap give them for its
    size m (meff: its effective size), per transfer instead of per size (a plan of
    messages has many sizes)."""
    m = np.asarray(nbytes, np.float64)
    if topo.os_a is None:
        os_all = meff / topo.port_bandwidth[0][src, dst]
    else:
        os_all = topo.os_a[src, dst] + m * topo.os_per_byte[src, dst]
    if topo.g_a is None:
        g_all = meff / topo.bandwidth[src, dst]
    else:
        g_all = topo.g_a[src, dst] + m * topo.g_per_byte[src, dst]
    return np.asarray(os_all, np.float64), np.asarray(g_all, np.float64)
