"""hier per level (algorithms/hier.py): rings inside the sites by the class DAG, the
inter-site plan by a site-level event model of its entries (docs/compact-model.md).

Each rank's list is phase 1, then phase 2, then phase 3 (hier numbers the steps so), so
a rank's ports go from one phase to the next in order, while the data of one phase may
flow on before the previous has ended everywhere (phase 3 forwards a remote block as
soon as it has arrived). The levels and how they are joined:

1. Site X's ring of its own blocks (n_X members, one block each): the DAG over the
   ring's symmetric classes on X's LAN (model_sym.time_lists), exact for the phase
   alone. What phase 2 needs of it: when a member's send port is free (its last send's
   start + os), when its receiving port is (the last receive's end - early) and, for
   pieces of at least the eager limit, when it posts its next receive (rendezvous: the
   arrival of the piece of its last forwarded send).
2. The plan's entries (X -> Y, origin O) in list order: n_O blocks from their owners in
   X (member i mod n_X) to their owners in Y (i mod n_Y). An entry starts when X holds
   O's blocks (0 for X = O; else that entry's end), X's members' send ports are free,
   Y's are (or, rendezvous, post) and the X -> Y link is free. Its pieces then go at the
   pace of its bottleneck among: the shared link (every piece holds it m / beta), a
   sender member's port (os per piece, ceil(n_O / min(n_O, n_X)) blocks each), a
   receiver's (m / NIC rate per piece), a member pair's chain (FIFO: the whole
   transfer; else g); it ends one transfer after its last piece starts. Members of one
   site are taken together (a site's send port = its busiest member's).
3. Site X's ring of the remote blocks: member k circulates R_k (the remote blocks it
   owns, ascending origin); over the ring's steps a member sends every R but its
   successor's, about the mean |R_k| per step: timed as rings of n_X members whose block
   is floor and ceil of that mean blocks (interpolated between the two), by the class
   DAG again, each step-0 piece released when the latest member's piece at that position
   arrived (the latest-arriving blocks), and every class no earlier than X's ports are
   free after phase 2.

The prediction is the latest end over the sites. Cost: the class DAGs are O(n_X nseg)
and O(P nseg) per site, the plan O(S^2): seconds at P = 65,536.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from ..ir import RECV, SEND
from .model_sym import _piece_bytes, time_lists
from .native import OP_DTYPE

SOURCE = "compact model (hier)"
# Rounds of one piece in plain floats (_chain) rather than numpy (the tests switch it off
# to compare: the same operations, the same results).
SCALAR_ROUNDS = True


def plan_of(desc):
    """(SitePlan, FIFO thresholds [src site][dst site]) a hier description's tail holds
    (compact/hier.py)."""
    from ..algorithms import site_plan
    from . import hier as compact_hier
    tail = compact_hier.decode_tail(desc.tail)
    first = tuple(int(x) for x in np.r_[0, np.cumsum(tail.sizes)[:-1]])
    kind = site_plan.PLANS[tail.plan] if tail.plan < len(site_plan.PLANS) else "?"
    return site_plan.SitePlan(kind, tuple(tail.sizes), first, tuple(tail.entries), desc.bytes_max), tail.fifo


def ring_list(n: int, nseg: int, fifo: np.ndarray) -> np.ndarray:
    """Rank 0's list of a ring allgather over n ranks with nseg pieces per block (the
    compact ring generator's order: step k receives block -1-k from n-1, then sends block
    -k to 1, each block's pieces in order); fifo[s]: the FIFO bit of piece s's sends."""
    k = np.repeat(np.arange(n - 1), 2 * nseg)
    half = np.tile(np.repeat([0, 1], nseg), n - 1)  # 0: the receive, 1: the send
    seg = np.tile(np.arange(nseg), 2 * (n - 1))
    out = np.zeros(len(k), OP_DTYPE)
    out["kind"] = np.where(half == 0, RECV, SEND)
    out["peer"] = np.where(half == 0, n - 1, 1 % n)
    out["origin"] = np.where(half == 0, (-1 - k) % n, (-k) % n)
    out["segment"] = seg
    out["flags"] = np.where(half == 1, np.asarray(fifo, np.uint8)[seg] << 1, 0)
    return out


def _marker(sites, fifo):
    """mark(a, b, m): is a send of m bytes from site a to site b FIFO? From the tail's
    thresholds when given, else policy.fifo_link on the sites' sample pair (the pass)."""
    from .model_sites import fifo_of
    if fifo is not None:
        return lambda a, b, m: m >= fifo[a][b]
    return lambda a, b, m: fifo_of(sites, a, b)(m)


def _ring(sites, x, pieces, eager, mark, base=None):
    """Time a ring over site x's members, pieces[s] bytes per piece s of a block."""
    n = sites.sizes[x]
    fifo = np.array([mark(x, x, int(m)) for m in pieces], np.uint8)
    ops = ring_list(n, len(pieces), fifo)
    return time_lists([ops], [0], "add", n, pieces, lambda m: sites.costs(x, x, m), eager,
                      base=base), ops


def predict(plan, sites, nbytes: int, nseg: int, fifo=None) -> dict:
    """predicted_s and levels of hier with this SitePlan on these Sites (module docstring);
    fifo: the tail's FIFO thresholds (None: the FIFO pass's rule on the sites)."""
    mark = _marker(sites, fifo)
    S = sites.nsites
    sizes = tuple(int(n) for n in plan.sizes)
    if sizes != tuple(sites.sizes):
        raise InputError(SOURCE, "sizes", f"expected the plan's site sizes {sizes} to be the "
                         f"topology's {tuple(sites.sizes)}")
    pieces = _piece_bytes(nbytes, nseg)
    eager = sites.eager_limit
    levels = []
    send_free = np.zeros(S)
    recv_rel = np.full(S, -np.inf)  # the last receive's ready + duration (next: minus its early)
    post = np.full(S, -np.inf)  # rendezvous: when a member posts its next receive
    t_end = 0.0
    # Phase 1.
    for x in range(S):
        n = sizes[x]
        if n < 2:
            levels.append({"level": "site", "phase": 1, "site": sites.names[x], "ranks": n, "seconds": 0.0})
            continue
        r, _ = _ring(sites, x, pieces, eager, mark)
        last_send = int(np.argmax(r.start))
        c_last = sites.costs(x, x, int(pieces[-1]))
        send_free[x] = r.start[last_send] + c_last.os
        recv_rel[x] = float(r.end.max())  # symmetric: the member's last receive ends last
        if pieces.max() >= eager and n >= 3:  # posting: the last forwarded piece's arrival
            post[x] = float(r.end[r.feed[r.feed >= 0]].max())
        t_end = max(t_end, float(r.end.max()))
        levels.append({"level": "site", "phase": 1, "site": sites.names[x], "ranks": n,
                       "seconds": float(r.end.max()), "classes": r.n})
    # Phase 2: the plan's entries in list order, piece by piece (_entry).
    arrive = {(x, x): np.zeros(sizes[x] * nseg) for x in range(S)}  # (site, origin) -> per piece
    port = [np.full(sizes[x], send_free[x]) for x in range(S)]  # per member: send port free
    # per member: the previous receive's ready + duration (the next starts its early before)
    rprev = [np.full(sizes[x], recv_rel[x]) for x in range(S)]
    link_free = {}
    step_gate = {}  # (site, step) -> arrivals of pieces it forwarded before (rendezvous)
    big = pieces.max() >= eager
    p2_end = 0.0
    detail = []
    for e in plan.entries:
        X, Y, O = e.src, e.dst, e.origin
        gate = max(post[Y], step_gate.get((Y, e.step), -np.inf)) if big else -np.inf
        start, end, fwd_feed = _entry(sites, sizes, X, Y, O, pieces, mark(X, Y, int(pieces.max())),
                                      arrive[(X, O)], port[X], rprev[Y], gate, link_free)
        arrive[(Y, O)] = end
        if X != O and big:  # a relay: X's receives of later steps are posted after these
            for later in range(e.step + 1, plan.nsteps):
                step_gate[(X, later)] = max(step_gate.get((X, later), -np.inf), fwd_feed)
        p2_end = max(p2_end, float(end.max()))
        detail.append({"src": sites.names[X], "dst": sites.names[Y], "origin": sites.names[O],
                       "step": int(e.step), "start_s": float(start.min()), "end_s": float(end.max())})
    t_end = max(t_end, p2_end)
    levels.append({"level": "sites", "phase": 2, "entries": len(plan.entries), "plan": plan.kind,
                   "seconds": float(p2_end), "detail": detail})
    # Phase 3: per site, the ring of the remote blocks.
    sizes_total = sum(sizes)
    for x in range(S):
        n = sizes[x]
        if n < 2 or S < 2:
            continue
        # The remote blocks by position in R_k (the largest R_k's length), each piece
        # arriving as the latest member's piece at that position (the ring waits for it).
        reps = []
        for o in range(S):
            if o == x:
                continue
            a = arrive[(x, o)].reshape(sizes[o], nseg)
            J = -(-sizes[o] // n)
            pad = np.full((J * n, nseg), -np.inf)
            pad[:sizes[o]] = a
            reps.append(pad.reshape(J, n, nseg).max(1))
        arrive_r = np.concatenate(reps).ravel()
        nb = len(arrive_r) // nseg
        if nb == 0:
            continue
        # Members own nb or fewer remote blocks (R_k sizes differ by at most one per origin
        # site), and in step t a member sends R_{k-t}: over the ring each carries about the
        # mean |R_k|. The ring is timed with floor and ceil of the mean blocks (the latest
        # arriving ones, in list order) and interpolated linearly between the two.
        mean = (sizes_total - n) / n
        port_x = max(float(port[x].max()), float(rprev[x].max()) - sites.costs(x, x, int(pieces.max())).early)
        late = arrive_r.reshape(nb, nseg).max(1)
        ends, starts, classes = {}, [], 0
        if mean < 1:  # most members own none: no ring at 0 blocks, but the few blocks
            # still go round as trains, n - 1 hops each (their pieces pipelined)
            c = sites.costs(x, x, int(pieces.max()))
            pace = max(c.os, c.duration if mark(x, x, int(pieces.max())) else c.g)
            ends[0] = max(port_x, float(arrive_r.max()))
            train = float(arrive_r.max()) + (n - 1) * c.duration + (nseg - 1) * pace
        for cnt in sorted({max(1, math.floor(mean)), max(1, math.ceil(mean))}):
            keep = np.sort(np.argsort(late, kind="stable")[nb - min(cnt, nb):])
            arr = arrive_r.reshape(nb, nseg)[keep].ravel()

            def base(info, arr=arr, port_x=port_x):
                own = info["own"]
                b = np.full(len(own), port_x)
                b[own] = np.maximum(port_x, arr[info["seg"][own]])
                return b
            r, _ = _ring(sites, x, np.tile(pieces, len(keep)), eager, mark, base=base)
            ends[cnt] = float(r.end.max())
            starts.append(float(r.start.min()))
            classes += r.n
        lo, hi = min(ends), max(ends)
        end = ends[lo] if lo == hi else ends[lo] + (mean - lo) / (hi - lo) * (ends[hi] - ends[lo])
        if mean < 1:
            end = max(end, train)
        t_end = max(t_end, end)
        levels.append({"level": "site", "phase": 3, "site": sites.names[x], "ranks": n,
                       "remote_blocks_mean": mean, "seconds": end, "classes": classes,
                       "starts_s": min(starts)})
    return {"predicted_s": float(t_end), "method": "per-level (rings: class DAG; plan: site events)",
            "levels": levels}


def _entry(sites, sizes, X, Y, O, pieces, fifo, ready_data, port, recv_prev, gate, link_free):
    """One plan entry, piece by piece: (start, end) per piece (block i, segment s: index
    i * nseg + s) and the latest arrival of a forwarded piece (for the relay's rendezvous).
    Sender member u = i mod n_X sends its pieces in list order (blocks ascending, segments
    in order), receiver i mod n_Y receives them so; rounds of pieces that no list orders
    between them are vectorised over the members: a piece is
    ready once its data is at X (ready_data), u's port is free (the previous piece's ready
    + os), its pair's previous piece allows (FIFO: ended; else started + g), Y's gate has
    passed and its receiver's port allows (its previous receive's end minus this one's early); the
    shared link then takes the round's pieces in ready order, each holding it m / beta
    (dag.py's link order). `port` (per member of X: ready + os of its last send),
    `recv_prev` (per member of Y: ready + duration of its last receive) and link_free are
    updated."""
    nseg = len(pieces)
    nO, nX, nY = sizes[O], sizes[X], sizes[Y]
    lcm = math.lcm(nX, nY)
    c = [sites.costs(X, Y, int(m)) for m in pieces]
    dur = np.array([x.duration for x in c])
    os_ = np.array([x.os for x in c])
    g = np.array([x.g for x in c])
    rport = np.array([x.duration - x.early for x in c])
    w = np.array([x.wan_time for x in c])
    shared = c[0].link >= 0
    start = np.zeros(nO * nseg)
    end = np.zeros(nO * nseg)
    ready = np.zeros(nO * nseg)
    # Rounds consistent with both ends' list orders (blocks ascending, then segments):
    # block i follows i - n_X at its sender and i - n_Y at its receiver, so it can go in
    # level i // min(n_X, n_Y); within a round (level, segment) no sender and no receiver
    # appears twice.
    mn = min(nX, nY)
    lf = link_free.get((X, Y), -np.inf)
    if mn == 1 and SCALAR_ROUNDS:  # one piece per round: the same steps on Python floats
        lf = _chain(nO, nX, nY, nseg, lcm, fifo, gate, shared, lf, ready_data, port, recv_prev,
                    dur, os_, g, rport, w, start, end)
        link_free[(X, Y)] = lf
        return start, end, (float(ready_data.max()) if X != O and len(ready_data) else -np.inf)
    for level in range(-(-nO // mn)):
        i = np.arange(level * mn, min((level + 1) * mn, nO))
        u, v = i % nX, i % nY
        for sg in range(nseg):
            k = i * nseg + sg
            t = np.maximum(np.maximum(ready_data[k], gate), port[u])  # port: ready + os
            # the pair's previous piece: the previous segment, or the block lcm before
            has = (i - lcm >= 0) if sg == 0 else np.ones(len(i), bool)
            pk = np.maximum(k - 1 if sg > 0 else (i - lcm) * nseg + nseg - 1, 0)
            prev_rel = end[pk] if fifo else start[pk] + g[(sg - 1) % nseg]
            t = np.where(has, np.maximum(t, prev_rel), t)
            # the receiver's port: its previous receive's end minus this one's early
            t = np.maximum(t, recv_prev[v] - (dur[sg] - rport[sg]))
            recv_prev[v] = t + dur[sg]
            ready[k] = t
            st = t
            if shared:  # the link in ready order: st_j = j w + max(lf, cummax(t_l - l w))
                o2 = np.argsort(t, kind="stable")
                j = np.arange(len(o2)) * w[sg]
                st_o = np.maximum(lf, np.maximum.accumulate(t[o2] - j)) + j
                st = np.empty_like(st_o)
                st[o2] = st_o
                lf = float(st_o[-1] + w[sg])
            start[k] = st
            end[k] = st + dur[sg]
            port[u] = t + os_[sg]
    link_free[(X, Y)] = lf
    fwd_feed = float(ready_data.max()) if X != O and len(ready_data) else -np.inf
    return start, end, fwd_feed


def _chain(nO, nX, nY, nseg, lcm, fifo, gate, shared, lf, ready_data, port, recv_prev,
           dur, os_, g, rport, w, start, end) -> float:
    """_entry's rounds where each holds one piece (n_X or n_Y is 1), with the same float
    operations in the same order; fills start and end, updates port and recv_prev, returns
    the link's free time."""
    rd, st_l, en_l = ready_data.tolist(), start.tolist(), end.tolist()
    port_l, rp_l = port.tolist(), recv_prev.tolist()
    durl, osl, gl, rpl, wl = dur.tolist(), os_.tolist(), g.tolist(), rport.tolist(), w.tolist()
    for i in range(nO):
        u, v = i % nX, i % nY
        for sg in range(nseg):
            k = i * nseg + sg
            t = max(max(rd[k], gate), port_l[u])
            pk = k - 1 if sg > 0 else ((i - lcm) * nseg + nseg - 1 if i - lcm >= 0 else -1)
            if pk >= 0:
                t = max(t, en_l[pk] if fifo else st_l[pk] + gl[(sg - 1) % nseg])
            t = max(t, rp_l[v] - (durl[sg] - rpl[sg]))
            rp_l[v] = t + durl[sg]
            st = t
            if shared:  # a round of one: st = 0 w + max(lf, t - 0 w)
                st = max(lf, t - 0.0) + 0.0
                lf = st + wl[sg]
            st_l[k], en_l[k] = st, st + durl[sg]
            port_l[u] = t + osl[sg]
    start[:], end[:] = st_l, en_l
    port[:], recv_prev[:] = port_l, rp_l
    return lf
