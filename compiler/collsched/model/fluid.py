"""Fluid cost model: the runtime's execution rules, with flows sharing links fairly.

The simulator (simulate.py) times a schedule as a DAG: each host port serves one
transfer after another, in list order. That is what the Min3 planner needs (a plan is
timed as it is built) and it is exact where a port carries one flow at a time. Where the
runtime lets several flows through one port at once, SimGrid (and TCP) share the port
between them instead: lnbc's root feeds its binomial children side by side, bruck's
pieces of one step overtake each other on a shared WAN link. The DAG model cannot
express that: it predicts lnbc on tryton-48 too fast (docs/lab.md compares both models
with SMPI).

This model replays the execution instead (docs/semantics.md):
- each rank walks its list in order: a receive is posted at once; a send is issued once
  the rank holds the piece and, when it is marked FIFO, once the previous message to
  the same peer has completed - and until then the walk waits, holding back everything
  listed after it (the executor's PMPI_Wait);
- serial schedules instead run a send chain and a receive chain per rank, each one
  operation at a time;
- background operations may go before the rank's arrival, foreground ones not, and a
  rank holds its own piece from its arrival;
- a message of at least the eager limit moves once its receive is posted (rendezvous),
  and so does every synchronous send (a serial schedule's, a FIFO one) whatever its size.
A transfer then waits its latency and moves its bytes as a flow. The flows in progress
share every resource they cross max-min fairly (progressive filling): the sender's and
the receiver's NIC, each a split-duplex port at the site's LAN rate (in half duplex one
capacity for both directions), every shared resource
of the route between two sites (a wide-area link shared by both directions, or the
direction of a split one: network.py; several site pairs may cross the same one), and on
matrix topologies the pair's own link; a flow also never
exceeds what one TCP window allows (Topology.flow_bandwidth). These are the platform
and the network model the lab gives SimGrid (lab/platform.py, CM02): the model check
compares the two (docs/lab.md). With message-size-dependent costs (Topology.message_costs,
e.g. SimGrid's SMPI model) a flow waits L x latency_factor(m), is charged
m / bandwidth_factor(m) bytes, and shares by SimGrid's weight-S penalty (_flow_costs).

It is an event simulation, about a microsecond per flow and resource at each event: fine
for the lab's schedules (thousands of transfers), not for a million; `compile` and the
planners keep the DAG model.
"""
from __future__ import annotations

import heapq

import numpy as np

from ..ir import BACKGROUND, RECV, SEND, Schedule
from ..inputs.links import host_matrices, site_classes
from .dag import Timeline
from .simulate import Metrics, _metrics, mean_metrics
from ..verify import match
from . import fluid_share

_EPS = 1e-12  # relative: rates and remainders this close count as equal


class _Network:
    """Resources per transfer and their capacities, as the lab's platform has them."""

    def __init__(self, topo, src, dst):
        rank_host = np.asarray(topo.rank_host)
        hs, hd = rank_host[src], rank_host[dst]
        nh = len(topo.hosts)
        lat, bw = host_matrices(topo)
        classes = site_classes(topo, lat, bw)
        if classes is not None:  # sites: NICs at the site's LAN rate, shared WAN links
            sites, members, lan, _ = classes
            nic = np.empty(nh)
            for s in sites:
                nic[members[s]] = lan[s][1]
            shared = topo.shared_links
            routes = [tuple(r) for r in shared.routes]
            wan = shared.route_of[src, dst]  # index into routes, -1: no shared resource
            wan_bw = shared.bandwidth
            pair = None
        else:  # pairs: NICs as fast as the host's fastest pair, one link per host pair
            off = np.where(np.eye(nh, dtype=bool), -np.inf, np.maximum(bw, bw.T))
            off = np.where(np.isfinite(off), off, -np.inf)
            nic = off.max(1)
            wan, wan_bw, routes = np.full(len(src), -1), np.zeros(0), []
            pair = hs * nh + hd
        self.capacity = [float(x) for x in np.r_[nic, nic, wan_bw]]
        self.resources = []
        pair_ids: dict[int, int] = {}

        def pair_link(x, y):
            k = int(x) * nh + int(y)
            if k not in pair_ids:
                pair_ids[k] = len(self.capacity)
                self.capacity.append(float(bw[x, y]))
            return pair_ids[k]

        down = nh if topo.full_duplex else 0
        for t in range(len(src)):
            if hs[t] == hd[t]:
                self.resources.append(())  # the host's loopback: the flow's own rate only
                continue
            # The route: sender's NIC up, every shared resource of the site pair's route
            # (each link, or the direction of a split one) or the pair link, receiver's
            # NIC down. (No
            # cross traffic: SMPI's runs show none - ring on tryton-48 moves at the full NIC
            # rate, where SimGrid's 5% for the ACKs would slow it by 5%.)
            # Half duplex: one port per host, its up and down flows share one capacity.
            res = [(int(hs[t]), 1.0), (down + int(hd[t]), 1.0)]
            if wan[t] >= 0:
                res.extend((2 * nh + k, 1.0) for k in routes[wan[t]])
            if pair is not None:
                res.append((pair_link(hs[t], hd[t]), 1.0))
            self.resources.append(tuple(res))


def _max_min(flows, resources, cap, weight, capacity) -> dict:
    """Weighted max-min fair rates of `flows` (progressive filling, as SimGrid's solver):
    a common level rises, each flow moving at level x its weight, until a resource it
    crosses is full (each flow counts on it with its coefficient) or the flow reaches its
    own cap."""
    rate = {}
    left = {}
    users: dict[int, list] = {}
    for f in flows:
        for r, c in resources[f]:
            users.setdefault(r, []).append((f, c))
            left[r] = capacity[r]
    load = {r: sum(c * weight[f] for f, c in u) for r, u in users.items()}
    count = {r: len(u) for r, u in users.items()}  # open flows per resource (load can keep
    open_flows = set(flows)                          # a rounding residue once they are gone)
    while open_flows:
        level = min((max(left[r], 0.0) / load[r] for r in load if count[r]), default=np.inf)
        level = min(level, min(cap[f] / weight[f] for f in open_flows))
        limit = level * (1 + _EPS)
        done = {f for f in open_flows if cap[f] / weight[f] <= limit}
        for r, u in users.items():
            if count[r] and max(left[r], 0.0) / load[r] <= limit:
                done.update(f for f, _ in u if f in open_flows)
        for f in done:
            rate[f] = level * weight[f]
            for r, c in resources[f]:
                left[r] -= c * rate[f]
                load[r] -= c * weight[f]
                count[r] -= 1
        open_flows -= done
    return rate


def _walks(p, tr_of_op, kind, origin, segment, offsets, gate, arrival, fifo, eager, lat, prev_pair, piece,
           dst_l, serial, span):
    """fluid_timeline's ranks: walks (dataflow) or send and receive chains (serial) that
    issue sends and post receives as pieces arrive. Returns the shared state (start, finish,
    the heap of starting flows, each chain's send in flight, the work list) and callbacks.

    Transfers are messages: piece[t] lists what message t delivers ((dst, origin, segment)
    each); span[i] the number of ops of the message whose first op is i (0 on the others,
    which the walks step over). A send message waits for every piece of it."""
    n = len(lat)
    inf = float("inf")
    posted, issued, start, finish = [inf] * n, [inf] * n, [inf] * n, [inf] * n
    held: dict = {}  # (rank, origin, segment) -> when the rank holds the piece
    waiting: dict = {}  # a condition's key -> ranks (or chains) to resume when it is met
    ptr = offsets[:-1]  # dataflow: the walk's next op; serial: unused
    send_at = [offsets[r] for r in range(p)]  # serial: next op of each chain
    recv_at = [offsets[r] for r in range(p)]
    recv_busy = [-1] * p  # serial: the receive in flight of each rank's chain
    send_busy = [-1] * p
    starts: list = []  # heap of (time the bytes begin to move, transfer)

    def holds(r, o, g):
        return arrival[r] if o == r else held.get((r, o, g), inf)

    def try_start(t):
        if start[t] < inf or issued[t] == inf or (not eager[t] and posted[t] == inf):
            return
        start[t] = issued[t] if eager[t] else max(issued[t], posted[t])
        heapq.heappush(starts, (start[t] + lat[t], t))

    def wait(key, who):
        waiting.setdefault(key, []).append(who)

    def walk(r, now):
        """Dataflow: advance rank r's walk as far as its waits allow."""
        i, end = ptr[r], offsets[r + 1]
        while i < end:
            t = tr_of_op[i]
            if kind[i] == RECV:
                posted[t] = max(now, gate[i])
                try_start(t)
                if finish[t] < inf:
                    deliver(t)  # an eager message that came first
                i += span[i]
                continue
            h, j = _holds_all(holds, origin, segment, span, r, i)
            if h == inf:
                wait(("piece", r, origin[j], segment[j]), r)
                break
            ready = max(now, h, gate[i])
            q = prev_pair[t]
            if fifo[t] and q >= 0:
                if finish[q] == inf:
                    wait(("done", q), r)
                    break
                ready = max(ready, finish[q])
            issued[t] = ready
            try_start(t)
            i += span[i]
        ptr[r] = i

    def chain_send(r, now):
        """Serial: issue rank r's next send once the previous one has completed."""
        if send_busy[r] >= 0 and finish[send_busy[r]] == inf:
            return
        i = _next_message(kind, span, offsets, r, send_at[r], SEND)
        if i >= offsets[r + 1]:
            send_busy[r] = -1
            return
        t = tr_of_op[i]
        h, j = _holds_all(holds, origin, segment, span, r, i)
        if h == inf:
            wait(("piece", r, origin[j], segment[j]), ("send", r))
            return
        issued[t] = max(now, h, gate[i])
        send_busy[r], send_at[r] = t, i + span[i]
        try_start(t)

    def chain_recv(r, now):
        """Serial: post rank r's next receive once the previous one has completed."""
        if recv_busy[r] >= 0 and piece[recv_busy[r]][0] not in held:
            return
        i = _next_message(kind, span, offsets, r, recv_at[r], RECV)
        if i >= offsets[r + 1]:
            recv_busy[r] = -1
            return
        t = tr_of_op[i]
        posted[t] = max(now, gate[i])
        recv_busy[r], recv_at[r] = t, i + span[i]
        try_start(t)
        if finish[t] < inf:
            deliver(t)

    todo: list = []  # walks and chains to advance, in order; never re-entered

    def resume(key, now):
        for who in waiting.pop(key, ()):
            todo.append((who, now))

    def advance():
        while todo:
            who, now = todo.pop(0)
            if isinstance(who, tuple):
                (chain_send if who[0] == "send" else chain_recv)(who[1], now)
            else:
                walk(who, now)

    def deliver(t):
        """Message t's pieces are the receiver's once the bytes are in and it was posted."""
        if piece[t][0] in held or posted[t] == inf:
            return
        when = max(finish[t], posted[t])
        for x in piece[t]:
            held[x] = when
            resume(("piece",) + x, when)
        if serial:
            todo.append((("recv", dst_l[t]), when))

    return start, finish, starts, send_busy, todo, deliver, resume, advance, issued


def _holds_all(holds, origin, segment, span, r, i):
    """When rank r holds every piece of the send message at op i (holds(r, origin,
    segment): when it holds one; inf: not yet), and the first piece it lacks (or i)."""
    h = -float("inf")
    for j in range(i, i + span[i]):
        x = holds(r, origin[j], segment[j])
        if x == float("inf"):
            return x, j
        h = x if x > h else h
    return h, i


def _next_message(kind, span, offsets, r, i, k):
    """Rank r's next message of kind k from op i on (its first op; offsets[r + 1]: none)."""
    end = offsets[r + 1]
    while i < end and (kind[i] != k or not span[i]):
        i += 1
    return i


def _share_flows(net, starts, size, cap, weight, finish, ended, local=False):
    """fluid_timeline's network: from the heap `starts` of (time its bytes begin, flow),
    move the flows at their max-min fair rates until none is left; set finish[f] as each
    ends and call ended(flows, now) for every batch that ends together.

    local: _share_flows_local, the same sharing solved only where flows changed. The
    intergroup models use it; fluid_timeline keeps this global solve (bit for bit).

    With the C kernels (fluid_share.share_flows): the same loop in kernels/fluid.c, the
    same finish times within a relative 1e-9, for both; no call of ended with no flow."""
    if fluid_share.available():
        return fluid_share.share_flows(net, starts, size, cap, weight, finish, ended, local)
    if local:
        return _share_flows_local(net, starts, size, cap, weight, finish, ended)
    inf = float("inf")
    resources, capacity = net.resources, net.capacity
    active: dict = {}  # transfer -> bytes still to move
    rate: dict = {}
    now = 0.0
    while starts or active:
        t_end, ending = inf, []
        for f, rem in active.items():
            te = now + rem / rate[f] if rate[f] > 0 else inf
            if te < t_end * (1 - _EPS):
                t_end, ending = te, [f]
            elif te <= t_end * (1 + _EPS):
                ending.append(f)
        t_start = starts[0][0] if starts else inf
        if t_start == inf and t_end == inf:
            break  # nothing can move: the verifier would have refused the schedule
        t_next = min(t_start, t_end)
        for f in active:
            active[f] -= rate[f] * (t_next - now)
        now = t_next
        if t_start <= t_end:
            while starts and starts[0][0] <= now:
                _, f = heapq.heappop(starts)
                active[f] = size[f]
            ending = [f for f, rem in active.items() if rem <= _EPS * max(size[f], 1.0)]
        for f in ending:
            del active[f]
            finish[f] = now
        ended(ending, now)
        rate = _max_min(list(active), resources, cap, weight, capacity) if active else {}
        for f in active:
            if not resources[f]:
                rate[f] = cap[f]


def _share_flows_local(net, starts, size, cap, weight, finish, ended):
    """_share_flows(local=True): after each event, share again only among the flows
    connected, through the resources they cross, to those that started or ended (the
    max-min rates of the other components cannot change), and keep every flow's projected
    end in a heap, its remaining bytes brought up to date only when its rate changes. The
    same times up to the solver's relative tolerance, at a cost per event proportional to
    the component instead of every flow in progress."""
    inf = float("inf")
    resources = net.resources
    rem: dict = {}  # flow in progress -> (bytes left at t0, t0)
    rate: dict = {}
    users: dict = {}  # resource -> flows in progress across it
    ends: list = []  # heap of (projected end, version, flow)
    version: dict = {}
    while starts or rem:
        while ends and (ends[0][2] not in rem or ends[0][1] != version[ends[0][2]]):
            heapq.heappop(ends)  # stale: the flow ended or its rate changed since
        t_end = ends[0][0] if ends else inf
        t_start = starts[0][0] if starts else inf
        if t_start == inf and t_end == inf:
            break  # nothing can move: the verifier would have refused the schedule
        now = min(t_start, t_end)
        started, ending = [], []
        while starts and starts[0][0] <= now:
            _, f = heapq.heappop(starts)
            rem[f], rate[f], version[f] = (size[f], now), 0.0, 0
            started.append(f)
        while ends and ends[0][0] <= now * (1 + _EPS):
            _, v, f = heapq.heappop(ends)
            if f in rem and v == version[f]:
                ending.append(f)
        for f in started:
            if size[f] <= _EPS * max(size[f], 1.0):
                ending.append(f)  # nothing to move
        for f in ending:
            del rem[f]
            finish[f] = now
        ended(ending, now)
        for f, r in _local_rates(rate, users, started, ending, resources, cap, weight,
                                 net.capacity).items():
            left, t0 = rem[f]
            left -= rate[f] * (now - t0)
            rem[f], rate[f] = (left, now), r
            version[f] += 1
            if r > 0:
                heapq.heappush(ends, (now + max(left, 0.0) / r, version[f], f))


def _local_rates(rate, users, started, ending, resources, cap, weight, capacity) -> dict:
    """The max-min rates of the flows in progress that share a resource, directly or
    through other flows, with one that started or ended (_share_flows_local)."""
    for f in started:
        for r, _ in resources[f]:
            users.setdefault(r, set()).add(f)
    for f in ending:
        rate.pop(f, None)
        for r, _ in resources[f]:
            users[r].discard(f)
    gone = set(ending)
    component = {f for f in started if f not in gone}
    todo = [r for f in started + ending for r, _ in resources[f]]
    seen = set()
    while todo:
        r = todo.pop()
        if r in seen:
            continue
        seen.add(r)
        for f in users.get(r, ()):
            if f not in component:
                component.add(f)
                todo.extend(x for x, _ in resources[f])
    flows = sorted(component)
    shares = _max_min(flows, resources, cap, weight, capacity) if flows else {}
    return {f: shares[f] if resources[f] else cap[f] for f in flows}


def _flow_costs(topo, net, src, dst, size):
    """Per transfer: (latency phase, bytes the flow is charged for, max-min weight).

    Constant costs: L, m and 1 / L (SimGrid's CM02 shares by RTT, as TCP does). With
    message_costs (msgcosts.py), as SimGrid's CM02 solver applies the SMPI model's factors
    (network_cm02.cpp, communicate and comm_action_set_bounds): the latency phase is
    L * latency_factor(m); the flow's rate is its max-min share (bounded by the link and the
    TCP window with the unscaled L) times bandwidth_factor(m), i.e. the share moves
    m / bandwidth_factor(m) bytes; and with weight_s > 0 the sharing penalty is
    L + weight_s * sum of 1 / bandwidth over the route's links: the sender's NIC up, every
    shared resource of the sites' route (a link a single host pair crosses is left out:
    links.shared_links) or the pair's link, the receiver's NIC down: the resources _Network
    gives the flow (the platform's links and bandwidths, lab/platform.py)."""
    lat0 = topo.latency[src, dst]
    if topo.message_costs is None:
        lat = lat0.tolist()
        return lat, size.tolist(), [1.0 / x if x > 0 else 1.0 for x in lat]
    lf, moved = topo.effective_sizes(src, dst, size)
    penalty = lat0.astype(np.float64)
    ws = topo.message_costs.weight_s
    if ws > 0:
        inv = [sum(1.0 / net.capacity[r] for r, _ in res) for res in net.resources]
        penalty = penalty + ws * np.asarray(inv, np.float64)
    weight = [1.0 / x if x > 0 else 1.0 for x in penalty.tolist()]
    return (lat0 * lf).tolist(), np.asarray(moved, np.float64).tolist(), weight


def fluid_timeline(sched: Schedule, topo, nbytes: int, arrivals=None, matching=None,
                   simgrid_eager: bool = False) -> Timeline:
    """Time one call of `sched` under the fluid model (module docstring).

    simgrid_eager: small messages as SimGrid's SMPI runs them rather than as an MPI's eager
    protocol does (below)."""
    s = sched
    p = s.nranks
    a = np.zeros(p) if arrivals is None else np.asarray(arrivals, np.float64)
    m = matching if matching is not None else match(s)
    rank = s.rank_of_op
    order = np.argsort(m.send_op, kind="stable")
    so, ro = m.send_op[order], m.recv_op[order]
    piece_bytes = s.piece_bytes(nbytes)[s.segment[so]]
    tr_of_op = np.full(s.total_ops, -1, np.int64)
    # Multi-piece messages (docs/semantics.md): one flow per message, its pieces' bytes.
    first = s.join[so] == 0 if s.has_messages else np.ones(len(so), bool)
    heads = np.nonzero(first)[0]
    of_piece = np.cumsum(first) - 1  # the message of each piece (sender list order)
    tr_of_op[so], tr_of_op[ro] = of_piece, of_piece
    pdst = rank[ro]
    pieces = list(zip(pdst.tolist(), s.origin[so].tolist(), s.segment[so].tolist()))
    if len(heads) < len(so):
        size = np.add.reduceat(piece_bytes, heads).astype(np.float64)
        bounds = np.r_[heads, len(so)].tolist()
        piece = [tuple(pieces[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        span = np.zeros(s.total_ops, np.int64)
        span[so[heads]] = span[ro[heads]] = np.diff(bounds)
        count = np.diff(bounds)
    else:
        size = piece_bytes.astype(np.float64)
        piece = [(x,) for x in pieces]
        span, count = np.ones(s.total_ops, np.int64), None
    so, ro = so[heads], ro[heads]
    n = len(so)
    src, dst = rank[so], rank[ro]
    flow_bw = topo.flow_bandwidth()
    cap = flow_bw[src, dst].tolist()  # the TCP window's cap with the unscaled latency
    net = _Network(topo, src, dst)
    lat, moved, weight = _flow_costs(topo, net, src, dst, size)
    fifo = (s.fifo[so] == 1).tolist()
    # A synchronous send (every send of a serial schedule, a FIFO one; the runtime's
    # PMPI_Issend) moves only once its receive is posted, whatever its size, as a
    # rendezvous message does: SimGrid never detaches it.
    small = (size < topo.eager_limit) & (s.fifo[so] != 1) & (not s.serial)
    # Below the eager limit an MPI's eager protocol puts the bytes on the wire at once (the
    # receiver buffers them). SimGrid's SMPI does not (smpi_request.cpp, SimGrid 3.32): with
    # smpi/async-small-thresh 0, its default, every message waits in the receiver's mailbox
    # until the receive matches it, as a rendezvous one does; what a small message gets is
    # to be detached below smpi/send-is-detached-thresh (65536 by default, the default
    # eager_limit): the sender's request completes at once, so its rank may leave before the
    # bytes arrive. Without both, wan-3x16 at 36 KiB per rank came out at 0.13 (ring) to 1.2
    # (lnbc) of SMPI's time; with both within 0.4% (docs/lab.md).
    eager = (small & (not simgrid_eager)).tolist()
    size = size.tolist()
    src_l, dst_l = src.tolist(), dst.tolist()
    # Previous transfer on the same pair (sender list order): a FIFO send waits for it.
    prev_pair = [-1] * n
    last: dict = {}
    for t in range(n):
        k = (src_l[t], dst_l[t])
        prev_pair[t], last[k] = last.get(k, -1), t
    kind, origin, segment = s.kind.tolist(), s.origin.tolist(), s.segment.tolist()
    gate = np.where(s.phase == BACKGROUND, 0.0, a[rank]).tolist()  # foreground: after arrival
    arrival = a.tolist()
    offsets = s.offsets.tolist()
    serial = bool(s.serial)

    start, finish, starts, send_busy, todo, deliver, resume, advance, issued = _walks(
        p, tr_of_op, kind, origin, segment, offsets, gate, arrival, fifo, eager, lat, prev_pair, piece,
        dst_l, serial, span.tolist())
    for r in range(p):
        todo += [((("recv", r), 0.0)), ((("send", r), 0.0))] if serial else [(r, 0.0)]
    advance()

    def ended(flows, now):
        for f in flows:
            deliver(f)
            resume(("done", f), now)
            if serial and send_busy[src_l[f]] == f:
                todo.append((("send", src_l[f]), now))
        advance()

    _share_flows(net, starts, moved, cap, weight, finish, ended)

    start_a, end_a = np.array(start), np.array(finish)
    if not np.isfinite(end_a).all():
        raise ValueError("the fluid model could not complete the schedule (does it verify?)")
    exits = a.copy()
    # A detached send is done for its sender once issued (simgrid_eager, above).
    np.maximum.at(exits, src, np.where(small, np.array(issued), end_a) if simgrid_eager else end_a)
    np.maximum.at(exits, dst, end_a)
    return Timeline(src, dst, s.origin[so], s.segment[so], s.phase[ro], np.asarray(size),
                    start_a, end_a, a, exits, count)


def simulate_fluid(sched: Schedule, topo, nbytes: int, arrivals=None,
                   matching=None, simgrid_eager: bool = False) -> tuple[Timeline, Metrics]:
    """simulate.simulate under the fluid model: (timeline, the BDR paper's metrics)."""
    m = matching if matching is not None else match(sched)
    a = np.zeros(sched.nranks) if arrivals is None else np.asarray(arrivals, np.float64)
    tl = fluid_timeline(sched, topo, nbytes, a, m, simgrid_eager)
    flat = fluid_timeline(sched, topo, nbytes, None, m, simgrid_eager) if np.ptp(a) > 0 else tl
    return tl, _metrics(tl, flat, topo, sched, nbytes)


def fluid_pattern(sched: Schedule, topo, nbytes: int, pattern: np.ndarray, matching=None,
                  simgrid_eager: bool = False):
    """simulate.simulate_pattern under the fluid model: (timelines, per-iteration metrics,
    their mean) for every iteration of an arrival pattern (iterations x P seconds).
    simgrid_eager: small messages as SimGrid's SMPI runs them (fluid_timeline); the lab's
    SMPI runs want it."""
    m = matching if matching is not None else match(sched)
    flat = fluid_timeline(sched, topo, nbytes, None, m, simgrid_eager)
    timelines = []
    for a in np.atleast_2d(pattern):
        a = a - a.min()
        timelines.append(flat if not a.any() else fluid_timeline(sched, topo, nbytes, a, m, simgrid_eager))
    per_iter = [_metrics(tl, flat, topo, sched, nbytes) for tl in timelines]
    return timelines, per_iter, mean_metrics(per_iter)
