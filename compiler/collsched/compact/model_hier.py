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
   owns, ascending origin); timed as a ring of n_X members whose block is R_0's |R_0|
   blocks (the largest R_k), by the class DAG again, with each step-0 piece released
   when its origin site's entry into X ended and every class no earlier than X's ports
   are free after phase 2.

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
    from .model import fifo_of
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
    recv_free = np.zeros(S)  # a receive may start from here (port minus early, or posting)
    t_end = 0.0
    # Phase 1.
    for x in range(S):
        n = sizes[x]
        if n < 2:
            levels.append({"level": "site", "phase": 1, "site": sites.names[x], "ranks": n, "seconds": 0.0})
            continue
        r, ops = _ring(sites, x, pieces, eager, mark)
        last_send = int(np.argmax(r.start))
        c_last = sites.costs(x, x, int(pieces[-1]))
        send_free[x] = r.start[last_send] + c_last.os
        # the last receive of the member: the class ending last (rank 0's view)
        recv_end = float(r.end.max())
        recv_free[x] = recv_end  # minus early below, per piece of phase 2
        if pieces.max() >= eager and n >= 3:
            feed = r.feed[r.feed >= 0]
            recv_free[x] = float(r.end[feed].max())  # posting: the last forwarded piece's arrival
        else:
            recv_free[x] = recv_end - sites.costs(x, x, int(pieces[0])).early
        t_end = max(t_end, float(r.end.max()))
        levels.append({"level": "site", "phase": 1, "site": sites.names[x], "ranks": n,
                       "seconds": float(r.end.max()), "classes": r.n})
    # Phase 2: the plan's entries in list order.
    hold = np.full((S, S), np.inf)
    np.fill_diagonal(hold, 0.0)
    link_free = {}
    fwd_gate = np.full(S, -np.inf)
    step_gate = {}  # (site, step) -> the forwarded arrivals its later receives wait for
    p2_end = 0.0
    big = pieces.max() >= eager
    for e in plan.entries:
        X, Y, O = e.src, e.dst, e.origin
        m = int(pieces.max())
        c = sites.costs(X, Y, m)
        nO, nX, nY = sizes[O], sizes[X], sizes[Y]
        start = max(hold[X, O], send_free[X], link_free.get((X, Y), 0.0),
                    recv_free[Y] - (0.0 if big else 0.0),
                    step_gate.get((Y, e.step), -np.inf) if big else -np.inf)
        npieces = nO * nseg
        pairs = min(nO, math.lcm(nX, nY))
        k_send = math.ceil(nO / min(nO, nX)) * nseg
        k_recv = math.ceil(nO / min(nO, nY)) * nseg
        k_pair = math.ceil(nO / pairs) * nseg
        marked = mark(X, Y, m)
        chain = c.duration if marked else c.g
        rport = c.duration - c.early
        spans = [(npieces * c.wan_time, c.wan_time), (k_send * c.os, c.os),
                 (k_recv * rport, rport), (k_pair * chain, chain)]
        busy, each = max(spans)
        end = start + busy - each + c.duration
        hold[Y, O] = end
        link_free[(X, Y)] = start + npieces * c.wan_time if c.link >= 0 else start + k_pair * (c.g if not marked else 0.0)
        send_free[X] = start + k_send * c.os
        recv_free[Y] = max(recv_free[Y], start + k_recv * rport - c.early if not big else recv_free[Y])
        if X != O:  # a relay: Y's later receives are posted after this block's arrival at X
            fwd_gate[X] = max(fwd_gate[X], hold[X, O])
            step_gate[(X, e.step + 1)] = max(step_gate.get((X, e.step + 1), -np.inf), fwd_gate[X])
        p2_end = max(p2_end, end)
    t_end = max(t_end, p2_end)
    levels.append({"level": "sites", "phase": 2, "entries": len(plan.entries), "plan": plan.kind,
                   "seconds": float(p2_end)})
    # Phase 3: per site, the ring of the remote blocks.
    first = np.r_[0, np.cumsum(sizes)]
    for x in range(S):
        n = sizes[x]
        if n < 2 or S < 2:
            continue
        # R_0: blocks i = 0, n, 2n, ... of every other site, ascending origin rank.
        site_of_block = np.concatenate([np.full(len(range(0, sizes[o], n)), o) for o in range(S) if o != x])
        nb = len(site_of_block)
        if nb == 0:
            continue
        ring_pieces = np.tile(pieces, nb)
        arrive = np.repeat(hold[x, site_of_block], nseg)  # per piece of R_0
        port = max(send_free[x], recv_free[x] if not big else 0.0)

        def base(info, arrive=arrive, port=port, nseg_r=len(ring_pieces)):
            own = info["own"]
            b = np.full(len(own), port)
            b[own] = np.maximum(port, arrive[info["seg"][own]])
            return b
        r, _ = _ring(sites, x, ring_pieces, eager, mark, base=base)
        end = float(r.end.max())
        t_end = max(t_end, end)
        levels.append({"level": "site", "phase": 3, "site": sites.names[x], "ranks": n,
                       "remote_blocks": int(nb), "seconds": end, "classes": r.n,
                       "starts_s": float(r.start.min())})
    return {"predicted_s": float(t_end), "method": "per-level (rings: class DAG; plan: site events)",
            "levels": levels}
