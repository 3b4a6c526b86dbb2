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
    link_end = {}  # peer -> (start, end, g) of the previous transfer on the link
    peer_recv = {}  # peer -> start + duration of the previous transfer into it from the root
    got = {}
    last_fwd_feed = -np.inf  # rendezvous: the root posts a receive after this
    end_all = 0.0
    kind, peer, origin, seg = (ops[f].astype(np.int64) for f in ("kind", "peer", "origin", "segment"))
    fifo = pieces[seg] >= desc.fifo_min_piece  # the mark of the sender's op (either end)
    gathers_subtrees = desc.algorithm == "mpichg2"
    for i in range(len(ops)):
        s_ = int(seg[i])
        c = costs[s_]
        y, o = int(peer[i]), int(origin[i])
        st = 0.0
        prev = link_end.get((kind[i], y))
        if kind[i] == RECV:
            if recv_rel is not None:
                st = max(st, recv_rel - c.early)
            if prev is not None:  # the sender's previous message on this link
                st = max(st, prev[1] if fifo[i] else prev[0] + prev[2], prev[0] + prev[3])
            if pieces[s_] >= eager:
                st = max(st, last_fwd_feed)
            if o != y:  # a forwarded subtree (mpichg2's binomial gather): the sender's subtree
                # is the translate of the root's own part received before (same rounds, same
                # lists), so it holds block o when the root held block o - y
                st = max(st, got.get(((o - y) % p, s_), 0.0))
            recv_rel = st + c.duration
            got[(o, s_)] = st + c.duration
        else:
            st = max(st, send_rel)
            if o != 0:
                st = max(st, got[(o, s_)])
                last_fwd_feed = got[(o, s_)]
            if prev is not None:
                st = max(st, prev[1] if fifo[i] else prev[0] + prev[2])
                st = max(st, prev[0] + c.duration - c.early)  # the child's receiving port
            elif gathers_subtrees:
                # The child's gather comes first in its list: its receiving port frees
                # `early` before its last gather receipt, and with rendezvous it posts its
                # first broadcast receive only after that receipt (the translate of the
                # root's receipt of blocks 1 .. lowbit(y) - 1).
                low = y & -y
                gate = max((got.get((j, t), -np.inf) for j in range(1, min(low, p - y))
                            for t in range(desc.nseg)), default=-np.inf)
                st = max(st, gate if pieces[s_] >= eager else gate - c.early)
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
