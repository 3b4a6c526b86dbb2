"""lnbc, magpie and mpichg2 on one site: a gather to rank 0 and a broadcast from it, timed
at the root (O(the root's list) = O(P log P nseg)).

These are not rank-symmetric (model_sym does not apply) and their full DAG has about
P^2 log P transfers. Every block passes through rank 0, whose one send port carries the
broadcast's (P - 1) nseg pieces per round - about log2 P rounds - and whose receive port
the gather's (P - 1) nseg pieces: the root is the bottleneck, and its list alone is
walked with dag.Plan's rules (sender port os, receiving port early, the link's FIFO or
gap chain, the forwarded piece's receipt, rendezvous), the other end of each transfer
taken as ready: a gather sender holds its block (mpichg2's binomial gather: a sender
y forwarding its subtree holds block o when the root held o - y, the subtree being the
translate of the root's own first rounds), a broadcast child's port is free but for the
root's own earlier messages to it and, in mpichg2, its own gather before (its port, and the
rendezvous of its first receive). The run time is the end of the root's last transfer.
Its error against the full DAG model is measured per algorithm (docs/compact-model.md;
the tests hold the bounds).
"""
from __future__ import annotations

import numpy as np

from ..ir import RECV
from . import native
from .model_sym import _piece_bytes

ALGORITHMS = ("lnbc", "magpie", "mpichg2")


def predict(desc, sites, nbytes: int) -> dict:
    p = desc.nranks
    if p < 2:
        return {"predicted_s": 0.0, "method": "root walk", "levels": []}
    ops = native.generate(desc, 0)
    pieces = _piece_bytes(nbytes, desc.nseg)
    costs = [sites.costs(0, 0, int(m)) for m in pieces]
    eager = sites.eager_limit
    send_rel = -np.inf  # the root's send port: previous send's start + os
    recv_rel = None  # (start + duration) of the previous receive: minus the next's early
    link_end = {}  # (kind, peer) -> (start, end, g, os) of the previous transfer on the link
    got = np.full((p, desc.nseg), -np.inf)  # when the root holds each piece
    last_fwd_feed = -np.inf  # rendezvous: the root posts a receive after this
    end_all = 0.0
    kind, peer, origin, seg = (ops[f].astype(np.int64) for f in ("kind", "peer", "origin", "segment"))
    fifo = pieces[seg] >= desc.fifo_min_piece  # the mark of the sender's op (either end)
    dur = np.array([c.duration for c in costs])
    os_ = np.array([c.os for c in costs])
    g = np.array([c.g for c in costs])
    early = np.array([c.early for c in costs])
    gathers_subtrees = desc.algorithm == "mpichg2"
    # Runs of sends to one peer (a broadcast round) are timed at once: along one link,
    # st_j = max(st_{j-1} + a_j, f_j) (a_j: the port's os, the link's FIFO end or gap,
    # the child's port; f_j: the piece's receipt), a running max.
    brk = np.r_[True, (kind[1:] != kind[:-1]) | (peer[1:] != peer[:-1]), True]
    bounds = np.nonzero(brk)[0]
    i = 0
    for r in range(len(bounds) - 1):
        lo, hi = int(bounds[r]), int(bounds[r + 1])
        if kind[lo] != RECV and hi - lo > 1:
            y = int(peer[lo])
            sg = seg[lo:hi]
            st0 = _send_start(lo, send_rel, link_end.get((kind[lo], y)), fifo, dur, g, early, sg[0],
                              gathers_subtrees, got, y, p, pieces, eager, desc.nseg)
            f = np.where(origin[lo:hi] != 0, got[origin[lo:hi], sg], -np.inf)
            st0 = max(st0, f[0])
            gap = np.maximum(np.maximum(os_[sg[:-1]], np.where(fifo[lo + 1:hi], dur[sg[:-1]], g[sg[:-1]])),
                             dur[sg[1:]] - early[sg[1:]])
            A = np.r_[0.0, np.cumsum(gap)]
            st = A + np.maximum.accumulate(np.r_[st0, f[1:] - A[1:]])
            en = st + dur[sg]
            send_rel = st[-1] + os_[sg[-1]]
            link_end[(kind[lo], y)] = (st[-1], en[-1], g[sg[-1]], os_[sg[-1]])
            end_all = max(end_all, float(en.max()))
            fw = np.nonzero(origin[lo:hi] != 0)[0]
            if len(fw):
                last_fwd_feed = float(f[fw[-1]])
            continue
        for i in range(lo, hi):
            s_ = int(seg[i])
            c = costs[s_]
            y, o = int(peer[i]), int(origin[i])
            prev = link_end.get((kind[i], y))
            if kind[i] == RECV:
                st = 0.0
                if recv_rel is not None:
                    st = max(st, recv_rel - c.early)
                if prev is not None:  # the sender's previous message on this link
                    st = max(st, prev[1] if fifo[i] else prev[0] + prev[2], prev[0] + prev[3])
                if pieces[s_] >= eager:
                    st = max(st, last_fwd_feed)
                if o != y:  # a forwarded subtree (mpichg2's binomial gather): the sender's
                    # subtree is the translate of the root's own part received before (same
                    # rounds, same lists), so it holds block o when the root held o - y
                    st = max(st, float(got[(o - y) % p, s_]))
                recv_rel = st + c.duration
                got[o, s_] = st + c.duration
            else:
                st = _send_start(i, send_rel, prev, fifo, dur, g, early, s_, gathers_subtrees, got, y,
                                 p, pieces, eager, desc.nseg)
                if o != 0:
                    st = max(st, float(got[o, s_]))
                    last_fwd_feed = float(got[o, s_])
                send_rel = st + c.os
            en = st + c.duration
            link_end[(kind[i], y)] = (st, en, c.g, c.os)
            end_all = max(end_all, en)
    # Where latency dominates the root is not last: a block's chain of hops is. Some block
    # makes `depth` hops one after another (each forwarded once it has arrived).
    chain = depth(desc.algorithm, p) * costs[-1].duration
    t = max(end_all, chain)
    return {"predicted_s": float(t), "method": "root walk and hop chain (approximate)",
            "levels": [{"level": "ranks", "site": sites.names[0], "ranks": p, "seconds": float(t),
                        "root_s": float(end_all), "chain_s": float(chain), "root_ops": int(len(ops))}]}


def _send_start(i, send_rel, prev, fifo, dur, g, early, s_, gathers_subtrees, got, y, p, pieces,
                eager, nseg) -> float:
    """The earliest start of the root's send i to y but for its piece's receipt: its port,
    the link's previous transfer (FIFO: its end; else its start + g), the child's port
    and, for mpichg2's first send to a child, the child's own gather before (module
    docstring)."""
    st = max(0.0, send_rel)
    if prev is not None:
        st = max(st, prev[1] if fifo[i] else prev[0] + prev[2], prev[0] + dur[s_] - early[s_])
    elif gathers_subtrees:
        # The child's gather comes first in its list: its receiving port frees `early`
        # before its last gather receipt, and with rendezvous it posts its first broadcast
        # receive only after that receipt (the translate of the root's receipt of blocks
        # 1 .. lowbit(y) - 1, cut at P).
        low = y & -y
        sub = got[1:min(low, p - y)]
        gate = float(sub.max()) if sub.size else -np.inf
        st = max(st, gate if pieces[s_] >= eager else gate - early[s_])
    return st


def depth(algorithm: str, p: int) -> int:
    """Hops of a long chain of forwards (a lower estimate of the longest). lnbc and magpie
    gather block o in one hop and broadcast it down a binomial tree, rank r popcount(r)
    hops from the root, to every r but o: 1 + popcount(r) where some o is off r's path.
    mpichg2's binomial gather brings block o up popcount(o) hops and its broadcast down
    popcount(r) to each r outside o's gather subtree: taken as maxpop + maxpop - 1."""
    if p < 2:
        return 0
    top = (1 << (p.bit_length() - 1)) - 1  # the largest all-ones rank below p
    maxpop = max(bin(p - 1).count("1"), bin(top).count("1"))
    if algorithm == "mpichg2":
        return max(1, 2 * maxpop - 1)
    return 1 + maxpop if p - 1 > maxpop + 1 else maxpop
