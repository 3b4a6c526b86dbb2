"""The event model of collectives beyond allgather (alltoall, bcast, reduce, allreduce).

`simulate(prog, topology, nbytes=...)` times one call of a Program (program.py) under the
execution rules of docs/semantics.md, "Collectives beyond allgather", and the cost model
of "Cost model used by the simulator", extended to messages of several pieces and to
reductions. fluid.py times the same rules with flows shared max-min (the SMPI-faithful
one); both use the executor below (_Executor), which differs only in its network.

Execution (the executor, per rank, from its arrival):
- the walk goes down the list in order: a receive is posted at once (a FENCE first waits
  until every earlier receive is settled); a SEND is issued once every earlier receive
  whose pieces meet its pieces is settled (for each of its pieces, the last such receive:
  receives of one piece are applied in list order), FIFO, once the previous send to
  the same peer has completed and, CHAIN, once the previous send of the list has; until then the walk waits (in-order issue);
- a receive completes when its message has arrived and it is posted; it is *settled*
  (applied) when the walk needs it, as the runtime (runtime/src/coll_exec.c) settles:
  for a send or a FENCE that waits for it, or at the end, where every receive is settled
  in list order. Settling waits until it completed, every earlier send of the list
  reading one of its pieces (since the previous receive of that piece) has completed, and
  the previous receive of each of its pieces is settled (settling those first). A
  RECV_REDUCE then costs gamma x its bytes of its host's CPU (inputs/compute.py), one
  reduction after the other per host, and the walk waits for it; a plain receive costs
  nothing (with gamma = 0 settling when needed gives the same times as settling at once);
- a message below the topology's eager limit moves as soon as it is issued; a larger one,
  or a FIFO (synchronous) one, once its receive is posted too (rendezvous);
- a rank finishes when every receive is settled and every send has completed.

Messages: one message of an op = one latency + the sum of its pieces' bytes (alltoall and
bcast: bytes of the block / buffer, segments by program.piece_units; reduce and allreduce:
elements of elem_bytes bytes, a segment never splits an element). Costs as the allgather
DAG model's (model/dag.py), per message of m bytes between ranks s and r:
duration = L(s, r) x latency_factor(m) + m_eff / b_flow(s, r) (Topology.effective_sizes,
flow_bandwidth); ports single, per rank: full duplex, a send holds s's send port for
os(m) (Topology.send_overhead) and the next message to the same peer waits g(m) after the
start (Topology.gap); a receive holds r's receive port while its bytes arrive, the last
m_eff / recv_rate of its duration (recv_rate: Topology.port_bandwidth, the NIC across a
shared WAN link), and two receives' such intervals never overlap, in either order (a
short LAN message may land during a long WAN message's latency, as its flow would: the
allgather DAG keeps list order instead); half duplex, one port for both, taken one
transfer after the other. A shared WAN link (links.SharedLinks.link_of, the route's
bottleneck) serves its transfers one after the other in start order, each holding it
m_eff / bandwidth (the latencies overlap); a transfer queued at a link holds neither port
while it waits.
Port order (event driven, unlike model/dag.py's DAG): each rank's sends wait in a queue
in the order they may move (issued, and posted when rendezvous), ties by list position;
the queue's head takes the sender's port as soon as both ports allow it, and a receiving
port serves the heads aimed at it greedily in simulated time (the earliest that can
start, ties by list positions). List order is kept where the walk already imposes it,
and no port order can deadlock (every wait is for a known time). Deterministic: ties go
by event order, then list position, then transfer index.
"""
from __future__ import annotations

import bisect
import heapq
from collections import deque
import dataclasses
from dataclasses import dataclass

import numpy as np

from ..inputs.compute import reduction_gamma
from .program import RECV_REDUCE, REDUCING, SEND, Program, piece_units

INF = float("inf")


@dataclass
class CollTiming:
    """One call's times (seconds). elapsed of rank r = finish_s[r] - arrivals_s[r]; run time
    = max finish - min arrival (the BDR paper's metrics)."""

    run_time_s: float
    finish_s: np.ndarray
    arrivals_s: np.ndarray
    avg_elapsed_s: float
    model: str

    @property
    def elapsed_s(self) -> np.ndarray:
        return self.finish_s - self.arrivals_s

    def to_dict(self) -> dict:
        return {"model": self.model, "run_time_s": self.run_time_s,
                "avg_elapsed_s": self.avg_elapsed_s,
                "finish_s": [float(x) for x in self.finish_s],
                "arrivals_s": [float(x) for x in self.arrivals_s]}


def unit_bytes(collective: str, nbytes: int, elem_bytes: int) -> tuple[int, int]:
    """(units, bytes per unit) that segments split: bytes, or whole elements of a
    reduction (an nbytes that is not a whole number of elements is split by bytes)."""
    nbytes = int(nbytes)
    if collective in REDUCING and elem_bytes > 1 and nbytes % int(elem_bytes) == 0:
        return nbytes // int(elem_bytes), int(elem_bytes)
    return nbytes, 1


def segment_bytes(prog: Program, nbytes: int, elem_bytes: int = 4) -> list[int]:
    """Bytes of each segment index (of one alltoall block / of the vector)."""
    units, per = unit_bytes(prog.collective, nbytes, elem_bytes)
    return [u * per for u in piece_units(units, prog.nseg)]


def check_inputs(prog: Program, topology, nbytes, elem_bytes, arrivals) -> np.ndarray:
    """Arrivals as an array; ValueError (one line) for what a model cannot time."""
    if topology is None:
        raise ValueError("collective model: a topology is required (give --topology)")
    if topology.nranks < prog.nranks:
        raise ValueError(f"collective model: the topology has {topology.nranks} ranks, the "
                         f"program {prog.nranks}")
    if isinstance(nbytes, bool) or int(nbytes) != nbytes or nbytes < 0:
        raise ValueError(f"collective model: nbytes: expected a non-negative integer, got {nbytes!r}")
    if isinstance(elem_bytes, bool) or int(elem_bytes) != elem_bytes or elem_bytes < 1:
        raise ValueError(f"collective model: elem_bytes: expected a positive integer, got {elem_bytes!r}")
    p = prog.nranks
    a = np.zeros(p) if arrivals is None else np.asarray(arrivals, np.float64).reshape(-1)
    if a.shape != (p,) or not np.all(np.isfinite(a)):
        raise ValueError(f"collective model: arrivals: expected {p} finite times, got shape {a.shape}")
    return a


class Plan:
    """A program's static structure: ops numbered flat (rank-major), their matching
    transfers, each op's dependencies (module docstring), the messages' sizes."""

    def __init__(self, prog: Program, nbytes: int, elem_bytes: int):
        p = prog.nranks
        self.p = p
        seg = segment_bytes(prog, nbytes, elem_bytes)
        self.first = first = [0] * (p + 1)
        for r in range(p):
            first[r + 1] = first[r] + len(prog.ops[r])
        n_ops = first[p]
        self.rank = [0] * n_ops
        self.kind, self.fence, self.fifo = [0] * n_ops, [False] * n_ops, [False] * n_ops
        self.tr = [-1] * n_ops
        self.deps: list = [()] * n_ops  # send: receives to be settled; recv: see below
        self.war: list = [()] * n_ops  # recv: earlier sends reading its pieces
        self.prev: list = [()] * n_ops  # recv: previous receives of its pieces
        self.fifo_prev = [-1] * n_ops  # send: previous send to the same peer (FIFO)
        self.chain_prev = [-1] * n_ops  # chained send: the previous send of the list
        self.fence_deps: list = [()] * n_ops
        self.recvs_of: list = [[] for _ in range(p)]  # each rank's receive ops, in list order
        sends: dict = {}  # (src, dst) -> [send op]
        recvs: dict = {}
        msg_bytes: dict = {}
        rank_l, kind_l, fence_l, fifo_l = self.rank, self.kind, self.fence, self.fifo
        deps_l, war_l, prev_l, fprev_l = self.deps, self.war, self.prev, self.fifo_prev
        for r in range(p):
            last_recv: dict = {}  # piece -> last receive op writing it
            readers: dict = {}  # piece -> sends reading it since its last receive
            last_send_to: dict = {}
            last_send = -1
            since_fence: list = []
            o = first[r]
            for op in prog.ops[r]:
                pieces = op.pieces
                rank_l[o], kind_l[o] = r, op.kind
                if op.fence:
                    fence_l[o] = True
                    self.fence_deps[o] = tuple(since_fence)
                    since_fence = []
                if op.kind == SEND:
                    fifo_l[o] = op.fifo
                    if len(pieces) == 1:
                        x = pieces[0]
                        q = last_recv.get(x)
                        if q is not None:
                            deps_l[o] = (q,)
                        rd = readers.get(x)
                        if rd is None:
                            readers[x] = [o]
                        else:
                            rd.append(o)
                        msg_bytes[o] = seg[x.seg]
                    else:
                        deps_l[o] = tuple(sorted({last_recv[x] for x in pieces if x in last_recv}))
                        for x in pieces:
                            readers.setdefault(x, []).append(o)
                        msg_bytes[o] = sum(seg[x.seg] for x in pieces)
                    fprev_l[o] = last_send_to.get(op.peer, -1)
                    last_send_to[op.peer] = o
                    if op.chain:
                        self.chain_prev[o] = last_send
                    last_send = o
                    key = (r, op.peer)
                    lst = sends.get(key)
                    if lst is None:
                        sends[key] = [o]
                    else:
                        lst.append(o)
                else:
                    if len(pieces) == 1:
                        x = pieces[0]
                        rd = readers.pop(x, None)
                        if rd:
                            war_l[o] = tuple(rd)
                        q = last_recv.get(x)
                        if q is not None:
                            prev_l[o] = (q,)
                        last_recv[x] = o
                    else:
                        war_l[o] = tuple({s for x in pieces for s in readers.pop(x, ())})
                        prev_l[o] = tuple(sorted({last_recv[x] for x in pieces if x in last_recv}))
                        for x in pieces:
                            last_recv[x] = o
                    since_fence.append(o)
                    self.recvs_of[r].append(o)
                    key = (op.peer, r)
                    lst = recvs.get(key)
                    if lst is None:
                        recvs[key] = [o]
                    else:
                        lst.append(o)
                o += 1
        self._match(prog, sends, recvs, msg_bytes)

    def _match(self, prog, sends, recvs, msg_bytes):
        """The k-th send a -> b meets the k-th receive at b from a (semantics, rule 5)."""
        src, dst, so, ro, size = [], [], [], [], []
        if set(sends) != set(recvs) or any(len(sends[k]) != len(recvs[k]) for k in sends):
            bad = sorted(k for k in set(sends) | set(recvs)
                         if len(sends.get(k, ())) != len(recvs.get(k, ())))[0]
            raise ValueError(f"collective model: ranks {bad[0]} -> {bad[1]}: "
                             f"{len(sends.get(bad, ()))} sends but {len(recvs.get(bad, ()))} receives")
        first = self.first
        for key in sorted(sends):
            for s, r in zip(sends[key], recvs[key]):
                ps = prog.ops[key[0]][s - first[key[0]]].pieces
                pr = prog.ops[key[1]][r - first[key[1]]].pieces
                if ps != pr:
                    raise ValueError(f"collective model: ranks {key[0]} -> {key[1]}: a send and "
                                     "its matching receive name different pieces")
                t = len(so)
                self.tr[s] = self.tr[r] = t
                src.append(key[0]), dst.append(key[1]), so.append(s), ro.append(r)
                size.append(msg_bytes[s])
        self.src = np.asarray(src, np.int64)
        self.dst = np.asarray(dst, np.int64)
        self.send_op, self.recv_op = so, ro
        self.size = np.asarray(size, np.float64)
        self.n = len(so)


class _Executor:
    """The walks, settling and completion of docs/semantics.md's rules 1-6 over a network.

    The network calls `ready(t, now)` hooks: net.ready(t, now) is called once transfer t
    may move (issued, and posted if it must wait for that); the network later calls
    `transfer_end(t, now)`. Timed events of the executor's own (arrivals, the end of a
    reduction's CPU time) go through net.timer(when, event)."""

    def __init__(self, plan: Plan, arrivals: np.ndarray, eager: list, cpu_time: list,
                 host: list, net, detached=None):
        self.plan, self.net = plan, net
        # detached[t]: the send completes for its sender once issued (SimGrid's small messages)
        self.detached = detached or [False] * plan.n
        self.arrival = arrivals.tolist()
        self.eager, self.cpu_time, self.host = eager, cpu_time, host
        n_ops, n = len(plan.kind), plan.n
        self.ptr = plan.first[:-1]
        self.issued, self.posted, self.end = [INF] * n, [INF] * n, [INF] * n
        self.sent = [INF] * n  # when the send completed for its sender
        self.started = [False] * n
        self.settled = [INF] * n_ops  # receive ops
        self.applying = [False] * n_ops
        self.needed = [False] * n_ops  # a send, a fence or the end waits for its settling
        self.endp = [0] * plan.p  # rule 6: the next receive to settle at the end
        self.cpu_free: dict = {}
        self.waiters: dict = {}  # ("s", recv op) / ("c", send op) -> [("walk", r) | ("apply", o)]
        self.finish = list(self.arrival)
        self.todo: deque = deque()

    # -- waiting ----------------------------------------------------------------------
    def _wait(self, key, who) -> None:
        self.waiters.setdefault(key, []).append(who)

    def _wake(self, key, now) -> None:
        """Resume what waited on key (after the current step: never re-entered)."""
        self.todo.extend(self.waiters.pop(key, ()))

    def _drain(self, now) -> None:
        todo = self.todo
        while todo:
            kind, x = todo.popleft()
            if kind == "walk":
                self.walk(x, now)
            else:
                self.try_apply(x, now)

    # -- the walk ---------------------------------------------------------------------
    def arrive(self, r, now) -> None:
        self.walk(r, now)
        self._drain(now)

    def walk(self, r, now) -> None:
        pl = self.plan
        i, stop = self.ptr[r], pl.first[r + 1]
        settled, kind, deps = self.settled, pl.kind, pl.deps
        while i < stop:
            if pl.fence[i]:
                blocked = -1
                for d in pl.fence_deps[i]:
                    if settled[d] == INF:
                        blocked = d
                        break
                if blocked >= 0:
                    self._wait(("s", blocked), ("walk", r))
                    self._need(blocked, now)
                    break
            t = pl.tr[i]
            if kind[i] != SEND:
                self.posted[t] = now
                self._maybe_start(t, now)
                if self.end[t] < INF:  # an eager message that came first
                    self.try_apply(i, now)
                i += 1
                continue
            blocked = -1
            for d in deps[i]:
                if settled[d] == INF:
                    blocked = d
                    break
            if blocked >= 0:
                self._wait(("s", blocked), ("walk", r))
                self._need(blocked, now)
                break
            q = pl.fifo_prev[i]
            if pl.fifo[i] and q >= 0 and self.sent[pl.tr[q]] == INF:
                self._wait(("c", q), ("walk", r))
                break
            q = pl.chain_prev[i]
            if q >= 0 and self.sent[pl.tr[q]] == INF:
                self._wait(("c", q), ("walk", r))
                break
            self.issued[t] = now
            if self.detached[t]:
                self.sent[t] = now
                self._wake(("c", i), now)
            self._maybe_start(t, now)
            i += 1
        self.ptr[r] = i
        if i == stop:
            self._end(r, now)

    def _end(self, r, now) -> None:
        """Rule 6: settle every receive in list order, one after the other."""
        recvs, k = self.plan.recvs_of[r], self.endp[r]
        while k < len(recvs):
            o = recvs[k]
            if self.settled[o] == INF:
                self.endp[r] = k
                self._wait(("s", o), ("walk", r))
                self._need(o, now)
                return
            k += 1
        self.endp[r] = k

    def _need(self, o, now) -> None:
        """The walk settles receive o now (the runtime settles when something needs it)."""
        if not self.needed[o]:
            self.needed[o] = True
            self.try_apply(o, now)

    def _maybe_start(self, t, now) -> None:
        if self.started[t] or self.issued[t] == INF:
            return
        if not self.eager[t] and self.posted[t] == INF:
            return
        self.started[t] = True
        self.net.ready(t, now)

    # -- completion and settling --------------------------------------------------------
    def transfer_end(self, t, now) -> None:
        pl = self.plan
        self.end[t] = now
        s, r = pl.send_op[t], pl.recv_op[t]
        fin = self.finish
        src, dst = pl.rank[s], pl.rank[r]
        if now > fin[dst]:
            fin[dst] = now
        if not self.detached[t]:
            self.sent[t] = now
            if now > fin[src]:
                fin[src] = now
            self._wake(("c", s), now)
        if self.posted[t] < INF:
            self.try_apply(r, now)
        self._drain(now)

    def try_apply(self, o, now) -> None:
        """Settle receive op o once its conditions hold (module docstring)."""
        if self.applying[o] or self.settled[o] < INF or not self.needed[o]:
            return
        pl = self.plan
        t = pl.tr[o]
        if self.end[t] == INF or self.posted[t] == INF:
            return
        for q in pl.prev[o]:
            if self.settled[q] == INF:
                self._wait(("s", q), ("apply", o))
                self._need(q, now)
                return
        for q in pl.war[o]:
            if self.sent[pl.tr[q]] == INF:
                self._wait(("c", q), ("apply", o))
                return
        self.applying[o] = True
        cost = self.cpu_time[t] if pl.kind[o] == RECV_REDUCE else 0.0
        if cost > 0:
            h = self.host[pl.rank[o]]
            begin = max(now, self.cpu_free.get(h, 0.0))
            self.cpu_free[h] = begin + cost
            self.net.timer(begin + cost, ("settle", o))
        else:
            self.settle(o, now)

    def settle(self, o, now) -> None:
        self.settled[o] = now
        r = self.plan.rank[o]
        if now > self.finish[r]:
            self.finish[r] = now
        self._wake(("s", o), now)

    def event(self, ev, now) -> None:
        what, x = ev
        if what == "settle":
            self.settle(x, now)
            self._drain(now)
        else:
            self.arrive(x, now)

    def check_done(self) -> None:
        pl = self.plan
        stuck = [r for r in range(pl.p) if self.ptr[r] < pl.first[r + 1]]
        if not stuck and INF in self.end:
            stuck = [pl.rank[pl.recv_op[self.end.index(INF)]]]
        if not stuck:
            stuck = [pl.rank[o] for o in range(len(pl.kind))
                     if pl.kind[o] != SEND and self.settled[o] == INF][:1]
        if stuck:
            raise ValueError(f"collective model: the program cannot complete (rank {stuck[0]} "
                             "waits forever; does it verify?)")


class _PortNetwork:
    """The DAG model's network: single ports per rank, pair gaps, shared WAN links served
    one transfer after the other (module docstring)."""

    def __init__(self, plan: Plan, topo):
        self.heap: list = []
        self.seq = 0
        n, src, dst = plan.n, plan.src, plan.dst
        self.src, self.dst = src.tolist(), dst.tolist()
        self.full = bool(topo.full_duplex)
        if n:
            lf, meff = topo.effective_sizes(src, dst, plan.size)
            meff = np.asarray(meff, np.float64)
            dur = topo.latency[src, dst] * lf + meff / topo.flow_bandwidth()[src, dst]
            early = dur - meff / topo.port_bandwidth[1][src, dst]
            os_, g = np.empty(n), np.empty(n)
            for m in np.unique(plan.size):
                sel = plan.size == m
                os_[sel] = np.where(m > 0, topo.send_overhead(int(m))[src[sel], dst[sel]], 0.0)
                g[sel] = np.where(m > 0, topo.gap(int(m))[src[sel], dst[sel]], 0.0)
            links = topo.shared_links
            wan = links.link_of[src, dst] if links.any else np.full(n, -1, np.int64)
            link_bw = links.bandwidth[np.maximum(wan, 0)] if links.any else np.ones(n)
            wan_time = np.where(wan >= 0, meff / link_bw, 0.0)
        else:
            dur = early = os_ = g = wan = wan_time = np.zeros(0)
        self.dur, self.early = dur.tolist(), early.tolist()
        self.os, self.g = os_.tolist(), g.tolist()
        self.wan, self.wan_time = [int(x) for x in wan], wan_time.tolist()
        p = plan.p
        self.send_free = [0.0] * p
        self.rbusy: list = [[] for _ in range(p)]  # per receiving port: (from, to) its bytes arrive
        self.port_free, self.last_recv = [0.0] * p, [False] * p  # half duplex
        self.pair_free: dict = {}
        self.link_free: dict = {}
        self.ready_at = [0.0] * n
        self.now = 0.0  # the event being handled
        self.queue: list = [[] for _ in range(plan.p)]  # per sender: (ready, prio, transfer)
        self.head = [-1] * plan.p  # the transfer of each queue competing for its receiver
        first, rank = plan.first, plan.rank
        # A port serves, of the transfers that could start, the earliest in its lists.
        self.prio = [so - first[rank[so]] + ro - first[rank[ro]]
                     for so, ro in zip(plan.send_op, plan.recv_op)]

    def timer(self, when, ev) -> None:
        heapq.heappush(self.heap, (when, -1, self.seq, ev))
        self.seq += 1

    def _earliest(self, t) -> float:
        """When t could take its ports (ignoring its shared link's queue)."""
        s, r = self.src[t], self.dst[t]
        c = max(self.ready_at[t], self.pair_free.get((s, r), 0.0))
        if self.full:
            # The receiving port: t's bytes arrive in [start + early, start + dur]; that may
            # not overlap another receive's, before or after it (a LAN message slips in
            # during a WAN message's latency, as its flow would).
            c = max(c, self.send_free[s], self.now)  # no gap in the past
            a, b = self.early[t], self.dur[t]
            for lo, hi in self.rbusy[r]:
                if c + b <= lo:
                    break
                if c + a < hi:
                    c = hi - a
            return c
        return max(c, self.port_free[s],
                   self.port_free[r] - (self.early[t] if self.last_recv[r] else 0.0))

    def ready(self, t, now) -> None:
        """t may move: it joins its sender's queue, served in (ready, list position) order."""
        self.ready_at[t] = self.now = now
        s = self.src[t]
        q = self.queue[s]
        heapq.heappush(q, (now, self.prio[t], t))
        if q[0][2] == t:  # the new head of the queue (the old head's entry goes stale)
            self._offer(s)

    def _offer(self, s) -> None:
        """The head of s's send queue competes for its receiver's port."""
        q = self.queue[s]
        if not q:
            self.head[s] = -1
            return
        t = q[0][2]
        self.head[s] = t
        heapq.heappush(self.heap, (self._earliest(t), self.prio[t], self.seq, ("try", t)))
        self.seq += 1

    def _take(self, t, now) -> None:
        """t takes its ports at `now` (then its shared link, when free) and is timed."""
        s, r = self.src[t], self.dst[t]
        k = self.wan[t]
        start = max(now, self.link_free.get(k, 0.0)) if k >= 0 else now
        if k >= 0:
            self.link_free[k] = start + self.wan_time[t]
        self.pair_free[(s, r)] = start + self.g[t]
        if self.full:
            self.send_free[s] = now + self.os[t]
            busy = self.rbusy[r]
            while busy and busy[0][1] <= now:  # times only grow: what ended is gone for good
                busy.pop(0)
            bisect.insort(busy, (now + self.early[t], now + self.dur[t]))
        else:
            self.port_free[s], self.last_recv[s] = now + self.os[t], False
            self.port_free[r], self.last_recv[r] = now + self.dur[t], True
        self.timer(start + self.dur[t], ("end", t))

    def run(self, ex: _Executor) -> None:
        """Events in time order; at one time the executor's before the ports' choices, and
        ports choose by list position (prio), then by when the transfer became ready."""
        heap = self.heap
        while heap:
            now, _, _, ev = heapq.heappop(heap)
            self.now = now
            what = ev[0]
            if what == "try":
                t = ev[1]
                s = self.src[t]
                if self.head[s] != t:
                    continue  # stale: another transfer went ahead of it in the queue
                c = self._earliest(t)
                if c > now:  # the receiver's port was taken since: wait in line again
                    heapq.heappush(heap, (c, self.prio[t], self.seq, ev))
                    self.seq += 1
                else:
                    heapq.heappop(self.queue[s])
                    self._take(t, now)
                    self._offer(s)
            elif what == "end":
                ex.transfer_end(ev[1], now)
            else:
                ex.event(ev, now)


def executor_inputs(plan: Plan, prog: Program, topo, *, fifo_rendezvous=True):
    """(eager per transfer, CPU seconds of reducing each transfer's bytes, host per rank)."""
    gamma = reduction_gamma(topo)
    eager = [(m < topo.eager_limit) and not (fifo_rendezvous and plan.fifo[s])
             for m, s in zip(plan.size.tolist(), plan.send_op)]
    cpu = (plan.size * gamma).tolist()
    host = [int(h) for h in np.asarray(topo.rank_host)[:prog.nranks]]
    return eager, cpu, host


def timing(ex: _Executor, a: np.ndarray, shift: float, model: str) -> CollTiming:
    fin = np.asarray(ex.finish, np.float64) + shift
    arr = a
    return CollTiming(run_time_s=float(fin.max() - arr.min()) if len(arr) else 0.0,
                      finish_s=fin, arrivals_s=arr.copy(),
                      avg_elapsed_s=float(np.mean(fin - arr)) if len(arr) else 0.0, model=model)


def simulate(prog: Program, topology, *, nbytes: int, elem_bytes: int = 4,
             arrivals=None) -> CollTiming:
    """Time one call of `prog` under the event model (module docstring)."""
    a = check_inputs(prog, topology, nbytes, elem_bytes, arrivals)
    topo = _restrict(topology, prog.nranks)
    plan = Plan(prog, int(nbytes), int(elem_bytes))
    shift = float(a.min()) if len(a) else 0.0
    net = _PortNetwork(plan, topo)
    eager, cpu, host = executor_inputs(plan, prog, topo)
    ex = _Executor(plan, a - shift, eager, cpu, host, net)
    for r in range(prog.nranks):
        net.timer(float(a[r] - shift), ("arrive", r))
    net.run(ex)
    ex.check_done()
    return timing(ex, a, shift, "dag")


def _restrict(topo, p: int):
    """The topology's first p ranks (a program may use fewer ranks than it places)."""
    if topo.nranks == p:
        return topo
    keep = np.arange(p)
    sub = {f: getattr(topo, f)[np.ix_(keep, keep)] for f in ("latency", "bandwidth", "os_a",
                                                           "os_per_byte", "g_a", "g_per_byte")
           if getattr(topo, f) is not None}
    return dataclasses.replace(topo, rank_host=np.asarray(topo.rank_host)[:p], **sub)
