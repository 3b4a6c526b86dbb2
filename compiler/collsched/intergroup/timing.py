"""Both cost models of intergroup schedules on a topology: the DAG (port) model and the
fluid model (docs/intergroup.md, "Models").

An intergroup schedule (schedule.py) is timed as the allgather models time theirs
(docs/semantics.md, "Cost model used by the simulator" and "The fluid model"), with the
executor's rules for ranges (docs/semantics.md, "Intergroup schedules"): a send waits for
every earlier receive of its rank's list whose range meets its own (none for bytes of the
rank's own block), a receive is posted when the rank's walk reaches it.

"dag": one transfer per matched send/receive, of m = hi - lo bytes; it takes
L(s, r) + m / b_flow(s, r) (size-dependent factors as model/dag.py applies them) and waits
for: the sender's previous send (released at ready + os(m)), the receiver's previous
receive (at ready + duration - early, early = duration - m / recv port rate), the previous
transfer on the same pair (start + g(m); a FIFO send: its end), the receives its range
needs (their end), and, for a message of at least the eager limit, the receiver's walk
reaching the receive (the issue time of the last send before it in the receiver's list:
the rendezvous rule). A shared WAN link serves its transfers one after the other in start
order; a transfer queued at a link holds neither port (model/dag.py's docstring). In half
duplex the sends keep list order, the receives theirs, and each host's one port takes
whichever ready transfer can start first (model/dag.py's _GreedyPorts rule, which that
model falls back to for every schedule compiled for full duplex: here it is the rule).
Unlike model/dag.py it is timed by one event loop in Python over a heap (no C kernel, no
waves): about 10 microseconds per transfer.

"fluid": each rank walks its list (a receive is posted at once; a send is issued once the
receives its range needs have delivered; a FIFO send once the previous message to its
peer has completed, holding back the walk), each transfer waits its latency, then moves
its bytes as a flow, and the flows in progress share the NICs, shared links and pair
links max-min fairly under the TCP window cap: model/fluid.py's network, costs and
sharing (_Network, _flow_costs, _share_flows), imported, not copied; the sharing is
solved again after each event only for the flows connected to the ones that changed
(_share_flows(local=True)). An event simulation: 256 ranks (40,000-50,000 transfers) in
4-7 s.

Both return an `InterTiming`: run time, average elapsed time, per-rank exits, per-transfer
start and end (its `timeline` is a model/dag.py Timeline, so collsched.plot.gantt draws
it) and per-operation start and end.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..ir import FOREGROUND, RECV, SEND
from ..model import fluid
from ..model.dag import Timeline, message_overheads
from .schedule import InterSchedule

MODELS = ("dag", "fluid")


@dataclass
class Transfers:
    """The matched transfers of an intergroup schedule, in sender list order, and what
    each waits for by the execution rules (transfer ids; -1: none)."""

    src: np.ndarray
    dst: np.ndarray
    group: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    send_op: np.ndarray  # the operation of each end, indices into the schedule's columns
    recv_op: np.ndarray
    fifo: np.ndarray  # bool
    prev_send: np.ndarray  # the sender's previous send
    prev_recv: np.ndarray  # the receiver's previous receive
    prev_pair: np.ndarray  # the previous transfer src -> dst
    walk_send: np.ndarray  # the last send before the receive in the receiver's list
    data_start: np.ndarray  # CSR: data[data_start[t]:data_start[t + 1]] are the receives
    data: np.ndarray  # at the sender, earlier in its list, whose ranges meet t's

    @property
    def n(self) -> int:
        return len(self.src)

    @property
    def nbytes(self) -> np.ndarray:
        return self.hi - self.lo

    def needs(self, t: int) -> list[int]:
        return self.data[self.data_start[t]:self.data_start[t + 1]].tolist()


def match_transfers(s: InterSchedule) -> Transfers:
    """Pairs the k-th send a -> b with the k-th receive at b from a (docs/semantics.md
    rule 3). Raises ValueError when the two ends do not agree (run the verifier first)."""
    n_ranks = s.nranks
    rank = s.rank_of_op.astype(np.int64)
    ops = np.arange(s.total_ops, dtype=np.int64)
    is_send = s.kind == SEND
    so, ro = ops[is_send], ops[~is_send]
    skey = rank[so] * n_ranks + s.peer[so]
    rkey = s.peer[ro].astype(np.int64) * n_ranks + rank[ro]
    so, ro = so[np.argsort(skey, kind="stable")], ro[np.argsort(rkey, kind="stable")]
    if len(so) != len(ro) or not np.array_equal(np.sort(skey), np.sort(rkey)):
        raise ValueError("sends and receives do not pair up (does the schedule verify?)")
    for col in (s.group, s.lo, s.hi):
        if not np.array_equal(col[so], col[ro]):
            raise ValueError("a send and its matching receive name different ranges")
    order = np.argsort(so, kind="stable")  # transfers in sender list order
    so, ro = so[order], ro[order]
    n = len(so)
    tr_of_op = np.full(s.total_ops, -1, np.int64)
    tr_of_op[so], tr_of_op[ro] = np.arange(n), np.arange(n)
    src, dst = rank[so], rank[ro]
    pair = src * n_ranks + dst
    by_pair = np.lexsort((np.arange(n), pair))
    same = np.r_[False, pair[by_pair][1:] == pair[by_pair][:-1]][:n]
    prev_pair = np.full(n, -1, np.int64)
    prev_pair[by_pair[same]] = by_pair[np.nonzero(same)[0] - 1]
    last_send = _last_before(is_send, rank)
    data_start, data = _data_needs(s, rank, tr_of_op, so)
    return Transfers(
        src=src, dst=dst, group=s.group[so].astype(np.int64), lo=s.lo[so], hi=s.hi[so],
        send_op=so, recv_op=ro, fifo=s.fifo[so] == 1,
        prev_send=_as_transfer(last_send[so], tr_of_op),
        prev_recv=_as_transfer(_last_before(~is_send, rank)[ro], tr_of_op),
        prev_pair=prev_pair, walk_send=_as_transfer(last_send[ro], tr_of_op),
        data_start=data_start, data=data)


def _last_before(eligible: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Per op: the last eligible op before it in the same rank's list, or -1."""
    total = len(eligible)
    last = np.maximum.accumulate(np.where(eligible, np.arange(total), -1)) if total else eligible
    prev = np.r_[-1, last[:-1]].astype(np.int64) if total else np.zeros(0, np.int64)
    ok = prev >= 0
    ok[ok] = rank[prev[ok]] == rank[ok]
    return np.where(ok, prev, -1)


def _as_transfer(op: np.ndarray, tr_of_op: np.ndarray) -> np.ndarray:
    return np.where(op >= 0, tr_of_op[np.maximum(op, 0)], -1)


def _data_needs(s: InterSchedule, rank, tr_of_op, send_ops):
    """CSR (start, receive transfers) per send transfer: the *new* receives earlier in the
    sender's list, of the same group, whose ranges meet the send's (rule 2, as the
    runtime's walk derives it: runtime/src/inter_check.c keeps the ranges each new receive
    brings and a send waits for those it meets; a duplicate brings nothing to wait for)."""
    recv_ops = np.nonzero(s.kind == RECV)[0]
    # A receive is new when it meets neither the rank's own block nor an earlier receive
    # (rule 4: a duplicate lies wholly within what is held or already on its way).
    owner, cand = _earlier_receives_meeting(s, rank, recv_ops, recv_ops)
    dup = np.zeros(len(recv_ops), bool)
    dup[owner] = True
    own_g, own_lo, own_hi = (np.array(col, np.int64)[rank[recv_ops]] for col in
                             zip(*(s.groups.own_range(r) for r in range(s.nranks))))
    dup |= (s.group[recv_ops] == own_g) & (s.lo[recv_ops] < own_hi) & (own_lo < s.hi[recv_ops])
    owner, cand = _earlier_receives_meeting(s, rank, send_ops, recv_ops[~dup])
    needs = tr_of_op[recv_ops[~dup][cand]]
    # send_ops are in transfer order (transfer t is send_ops[t]), so owner is the transfer.
    start = np.zeros(len(send_ops) + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=len(send_ops)), out=start[1:])
    return start, needs[np.argsort(owner, kind="stable")]


def _earlier_receives_meeting(s: InterSchedule, rank, query_ops, recv_ops):
    """Pairs (i, j): receive recv_ops[j] comes before query_ops[i] in the same rank's
    list, is of the same group, and its range meets query_ops[i]'s.

    Receives are sorted by (rank, group, lo) on one integer key; a query's candidates are
    the run from the first receive whose running maximum of hi passes the query's lo to
    the last that starts before its hi, filtered by overlap and list position: exact
    whether or not the receives overlap, and a few numpy calls for the whole list."""
    span = int(s.hi.max(initial=0)) + 1
    rbase = (rank[recv_ops] * 2 + s.group[recv_ops]) * span
    rlo, rhi = rbase + s.lo[recv_ops], rbase + s.hi[recv_ops]
    order = np.argsort(rlo, kind="stable")
    rlo, rhi = rlo[order], rhi[order]
    reach = np.maximum.accumulate(rhi) if len(rhi) else rhi
    qbase = (rank[query_ops] * 2 + s.group[query_ops]) * span
    qlo, qhi = qbase + s.lo[query_ops], qbase + s.hi[query_ops]
    first = np.searchsorted(reach, qlo, "right")
    lens = np.maximum(np.searchsorted(rlo, qhi, "left") - first, 0)
    owner = np.repeat(np.arange(len(query_ops)), lens)
    cand = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens) + first[owner]
    keep = (rhi[cand] > qlo[owner]) & (recv_ops[order][cand] < query_ops[owner])
    return owner[keep], order[cand[keep]]


@dataclass
class InterTiming:
    """One timed call: per-rank exits, per-transfer and per-operation times (seconds)."""

    model: str
    run_time_s: float  # max exit - min arrival
    avg_elapsed_s: float  # mean over ranks of exit - arrival
    exits: np.ndarray
    arrivals: np.ndarray
    transfers: Transfers
    start: np.ndarray  # per transfer: when its bytes begin to move (after the latency: + L)
    end: np.ndarray  # per transfer: when the receiver has them
    timeline: Timeline  # the same, as model/dag.py's Timeline (collsched.plot.gantt)

    def op_times(self, total_ops: int) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) per operation of the schedule: its transfer's."""
        start, end = np.empty(total_ops), np.empty(total_ops)
        tr = self.transfers
        start[tr.send_op], start[tr.recv_op] = self.start, self.start
        end[tr.send_op], end[tr.recv_op] = self.end, self.end
        return start, end


def predict(sched: InterSchedule, topo, model: str = "dag", arrivals=None, *,
            simgrid_eager: bool = False) -> InterTiming:
    """Time one call of `sched` on `topo` (module docstring). `arrivals`: per rank, seconds
    (default all 0). simgrid_eager (fluid only): small messages as SimGrid's SMPI runs them
    (model/fluid.py's fluid_timeline): the lab's SMPI runs want it."""
    if model not in MODELS:
        raise InputError("intergroup model", "model", f"expected one of {', '.join(MODELS)}, got {model!r}")
    if topo.nranks != sched.nranks:
        raise InputError(topo.source, "nranks", f"expected {sched.nranks} ranks (p + q = "
                                                f"{sched.p} + {sched.q}), got {topo.nranks}")
    a = np.zeros(sched.nranks) if arrivals is None else np.asarray(arrivals, np.float64)
    if a.shape != (sched.nranks,) or not np.all(np.isfinite(a)):
        raise InputError("intergroup model", "arrivals", f"expected {sched.nranks} finite times")
    tr = match_transfers(sched)
    exits = a.copy()
    if model == "dag":
        start, end = _time_dag(tr, topo, a)
        np.maximum.at(exits, tr.src, end)
    else:
        start, end, sender_done = _time_fluid(tr, topo, a, simgrid_eager)
        np.maximum.at(exits, tr.src, sender_done)
    np.maximum.at(exits, tr.dst, end)
    g = sched.groups
    offsets = [np.asarray(g.offsets(k)) for k in (0, 1)]
    origin = np.where(tr.group == 0, np.searchsorted(offsets[0], tr.lo, "right") - 1,
                      g.p + np.searchsorted(offsets[1], tr.lo, "right") - 1)
    tl = Timeline(tr.src, tr.dst, origin, np.zeros(tr.n, np.int64),
                  np.full(tr.n, FOREGROUND, np.uint8), tr.nbytes, start, end, a, exits)
    return InterTiming(model, float(exits.max() - a.min()) if len(a) else 0.0,
                       float(np.mean(exits - a)) if len(a) else 0.0, exits, a, tr, start, end, tl)


@dataclass
class _Costs:
    """Per transfer, as model/dag.py charges it: duration, early, os, g, shared link."""

    duration: list
    early: list
    os: list
    g: list
    wan: list
    wan_time: list


def _port_costs(topo, tr: Transfers) -> _Costs:
    src, dst, m = tr.src, tr.dst, tr.nbytes.astype(np.float64)
    lf, meff = topo.effective_sizes(src, dst, m)
    duration = topo.latency[src, dst] * lf + meff / topo.flow_bandwidth()[src, dst]
    recv_rate = topo.port_bandwidth[1] if tr.n else None
    early = duration - meff / recv_rate[src, dst] if tr.n else duration
    os, g = message_overheads(topo, src, dst, m, meff)
    wan, wan_time = np.full(tr.n, -1, np.int64), np.zeros(tr.n)
    links = topo.shared_links if tr.n else None
    if links is not None and links.any:
        wan = links.link_of[src, dst]
        on = wan >= 0
        wan_time[on] = meff[on] / links.bandwidth[wan[on]]
    return _Costs(duration.tolist(), early.tolist(), np.asarray(os).tolist(),
                  np.asarray(g).tolist(), wan.tolist(), wan_time.tolist())


def _dependency_graph(tr: Transfers, gated: np.ndarray):
    """Successor lists (CSR) and in-degrees of the DAG: the port, pair, data and
    rendezvous predecessors of every transfer."""
    n = tr.n
    v_data = np.repeat(np.arange(n), np.diff(tr.data_start))
    walk = np.where(gated, tr.walk_send, -1)
    u = np.concatenate([tr.prev_send, tr.prev_recv, tr.prev_pair, tr.data, walk])
    v = np.concatenate([np.arange(n)] * 3 + [v_data, np.arange(n)])
    keep = u >= 0
    u, v = u[keep], v[keep]
    order = np.argsort(u, kind="stable")
    succ_start = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(u, minlength=n), out=succ_start[1:])
    return succ_start.tolist(), v[order].tolist(), np.bincount(v, minlength=n).tolist()


def _time_dag(tr: Transfers, topo, a: np.ndarray):
    """(start, end) per transfer under the DAG model (module docstring)."""
    n = tr.n
    c = _port_costs(topo, tr)
    gated = tr.nbytes >= topo.eager_limit
    succ_start, succ, indeg = _dependency_graph(tr, gated)
    src, dst = tr.src.tolist(), tr.dst.tolist()
    base = np.maximum(a[tr.src], a[tr.dst]).tolist()
    a_src = a[tr.src].tolist()
    ps, pr, pp = tr.prev_send.tolist(), tr.prev_recv.tolist(), tr.prev_pair.tolist()
    ws = np.where(gated, tr.walk_send, -1).tolist()
    fifo = tr.fifo.tolist()
    dstart, data = tr.data_start.tolist(), tr.data.tolist()
    dur, early, os_, gap, wan, wan_time = c.duration, c.early, c.os, c.g, c.wan, c.wan_time
    ninf = -np.inf
    ready, start, end, issue = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
    half = not topo.full_duplex
    last, last_sent = [-1] * topo.nranks, [False] * topo.nranks  # half duplex: port holder
    link_free: dict[int, float] = {}

    def ready_at(v):
        """The earliest start but for a shared link's queue; sets issue[v]."""
        r = base[v]
        d = a_src[v]  # the sender's walk issues the send: data held, FIFO predecessor done
        for k in range(dstart[v], dstart[v + 1]):
            d = max(d, end[data[k]])
        u = ps[v]
        if u >= 0:
            r = max(r, ready[u] + os_[u])
            d = max(d, issue[u])
        u = pr[v]
        if u >= 0:
            r = max(r, ready[u] + dur[u] - early[v])
        u = pp[v]
        if u >= 0:
            r = max(r, end[u] if fifo[v] else start[u] + gap[u])
            if fifo[v]:
                d = max(d, end[u])
        issue[v] = d
        r = max(r, d)
        u = ws[v]
        if u >= 0:  # rendezvous: moves once the receiver's walk has posted the receive
            r = max(r, issue[u])
        if half:
            for h, receiving in ((src[v], False), (dst[v], True)):
                u = last[h]
                if u >= 0:
                    x = (ready[u] + os_[u] if last_sent[h]
                         else ready[u] + dur[u] - (early[v] if receiving else 0.0))
                    r = max(r, x)
        return r

    def start_at(v, r):
        w = wan[v]
        return max(r, link_free.get(w, ninf)) if w >= 0 else r

    def push(v):
        ready[v] = ready_at(v)
        heapq.heappush(heap, (start_at(v, ready[v]), v))

    heap: list = []
    for v in range(n):
        if not indeg[v]:
            push(v)
    done = 0
    while heap:
        t, v = heapq.heappop(heap)
        r = ready_at(v) if half else ready[v]  # full duplex: fixed once pushed
        st = start_at(v, r)
        if st > t:  # a port or a link was taken meanwhile: queue again
            heapq.heappush(heap, (st, v))
            continue
        ready[v], start[v], end[v] = r, st, st + dur[v]
        if wan[v] >= 0:
            link_free[wan[v]] = st + wan_time[v]
        last[src[v]], last_sent[src[v]] = v, True
        last[dst[v]], last_sent[dst[v]] = v, False
        done += 1
        for w in succ[succ_start[v]:succ_start[v + 1]]:
            indeg[w] -= 1
            if not indeg[w]:
                push(w)
    if done != n:
        raise ValueError("the ranks' lists wait on each other: the DAG model cannot order "
                         f"{n - done} of {n} transfers (does the schedule verify?)")
    return np.array(start), np.array(end)


def _time_fluid(tr: Transfers, topo, a: np.ndarray, simgrid_eager: bool,
                local_sharing: bool = True):
    """(start, end, when each send is done for its sender) per transfer under the fluid
    model. start is when the transfer's latency phase begins. local_sharing: solve the
    sharing again only where flows changed (the tests compare it with the global solve)."""
    n = tr.n
    inf = float("inf")
    size = tr.nbytes.astype(np.float64)
    net = fluid._Network(topo, tr.src, tr.dst)
    lat, moved, weight = fluid._flow_costs(topo, net, tr.src, tr.dst, size)
    cap = topo.flow_bandwidth()[tr.src, tr.dst].tolist() if n else []
    small = (size < topo.eager_limit) & ~tr.fifo
    eager = (small & (not simgrid_eager)).tolist()
    posted, issued, start, finish, delivered = ([inf] * n for _ in range(5))
    starts: list = []  # heap of (time the bytes begin to move, transfer)
    waiting: dict = {}  # transfer -> ranks whose walk waits for it
    walks = _Walks(tr, a, posted, issued, delivered, finish, waiting)

    def try_start(t):
        if start[t] < inf or issued[t] == inf or (not eager[t] and posted[t] == inf):
            return
        start[t] = issued[t] if eager[t] else max(issued[t], posted[t])
        heapq.heappush(starts, (start[t] + lat[t], t))

    walks.try_start = try_start
    for r in range(len(a)):
        walks.todo.append((r, float(a[r])))
    walks.advance()

    def ended(flows, now):
        for f in flows:
            walks.deliver(f)
            walks.resume(("done", f), now)
        walks.advance()

    fluid._share_flows(net, starts, moved, cap, weight, finish, ended, local=local_sharing)
    start_a, end_a = np.array(start), np.array(finish)
    if n and not np.isfinite(end_a).all():
        raise ValueError("the fluid model could not complete the schedule (does it verify?)")
    # A detached send (SMPI, below its threshold) is done for its sender once issued.
    sender_done = np.where(small, np.array(issued), end_a) if simgrid_eager else end_a
    return start_a, end_a, sender_done


class _Walks:
    """The fluid model's ranks: each walks its list as the executor does (rule 2)."""

    def __init__(self, tr: Transfers, a, posted, issued, delivered, finish, waiting):
        self.tr, self.a = tr, a.tolist()
        self.posted, self.issued, self.delivered, self.finish = posted, issued, delivered, finish
        self.waiting = waiting
        nr = len(a)
        # Each rank's operations as transfer ids, sends marked: a list per rank.
        ops = [[] for _ in range(nr)]
        for t, (s, op) in enumerate(zip(tr.src.tolist(), tr.send_op.tolist())):
            ops[s].append((op, t, True))
        for t, (d, op) in enumerate(zip(tr.dst.tolist(), tr.recv_op.tolist())):
            ops[d].append((op, t, False))
        self.ops = [[(t, is_send) for _, t, is_send in sorted(o)] for o in ops]
        self.ptr = [0] * nr
        self.needs = [tr.needs(t) for t in range(tr.n)]
        self.prev_pair, self.fifo = tr.prev_pair.tolist(), tr.fifo.tolist()
        self.todo: deque = deque()  # (rank, now) walks to advance, in order; never re-entered
        self.try_start = None

    def walk(self, r, now):
        inf = float("inf")
        ops, i = self.ops[r], self.ptr[r]
        while i < len(ops):
            t, is_send = ops[i]
            if not is_send:
                self.posted[t] = max(now, self.a[r])
                self.try_start(t)
                if self.finish[t] < inf:
                    self.deliver(t)  # an eager message that came first
                i += 1
                continue
            ready = max(now, self.a[r])
            blocked = next((d for d in self.needs[t] if self.delivered[d] == inf), None)
            q = self.prev_pair[t]
            if blocked is None and self.fifo[t] and q >= 0 and self.finish[q] == inf:
                blocked = ("done", q)
            if blocked is not None:
                self.waiting.setdefault(blocked, []).append(r)
                break
            for d in self.needs[t]:
                ready = max(ready, self.delivered[d])
            if self.fifo[t] and q >= 0:
                ready = max(ready, self.finish[q])
            self.issued[t] = ready
            self.try_start(t)
            i += 1
        self.ptr[r] = i

    def deliver(self, t):
        """A transfer's range is the receiver's once its bytes are in and it was posted."""
        if self.delivered[t] < float("inf") or self.posted[t] == float("inf"):
            return
        self.delivered[t] = max(self.finish[t], self.posted[t])
        self.resume(t, self.delivered[t])

    def resume(self, key, now):
        for r in self.waiting.pop(key, ()):
            self.todo.append((r, now))

    def advance(self):
        while self.todo:
            r, now = self.todo.popleft()
            self.walk(r, now)
