"""Site-level tree packing for the forest allgather (docs/forest.md): which site trees
carry each site's blocks.

Every block of site X must reach every other site Y. Its *site tree* gives each Y a
parent: X itself (a direct edge X -> Y) or a relay site Z that got the block directly
from X (X -> Z -> Y; the first edge is the one that serves Z). Blocks of X are split
fractionally over such trees; `route_fractions` returns, per (X, Y), the fraction of X's
bytes that reaches Y directly and through each relay Z.

The fractions come from an LP (PuLP, bundled CBC): minimise the congestion C, the largest
ratio load / capacity over the shared wide-area resources (links.SharedLinks; a site pair
without one gets min(|X|, |Y|) flows of its pair's bandwidth), among trees whose paths
have a latency of at most Lmax. ForestColl minimises C alone (the cut bound of a
throughput-optimal packing); on a grid the latencies of 2-80 ms are of the order of C,
so we pick the Lmax that minimises Lmax + C over a geometric ladder of candidates.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

LADDER = 1.04  # Lmax candidates at least this factor apart
MAX_LPS = 16


@dataclass
class SiteGraph:
    """Site-level view of a topology (compact site indices)."""

    site: np.ndarray  # (P,) site index per rank
    members: list  # per site, its ranks (sorted)
    latency: np.ndarray  # (S, S) smallest rank-pair latency, s
    flow: np.ndarray  # (S, S) largest one-flow bandwidth (window-capped), B/s
    resources: dict  # (X, Y) -> tuple of resource ids (shared links), or () for a private path
    capacity: np.ndarray  # (K,) bytes/s per resource id (shared ones, then private ones)
    bottleneck: dict  # (X, Y) -> resource id whose queue the planner models, or -1


def site_graph(topo) -> SiteGraph:
    p = topo.nranks
    labels = topo.rank_site()
    first: dict[str, int] = {}
    site = np.array([first.setdefault(lab, len(first)) for lab in labels], np.int64)
    s = len(first)
    members = [np.nonzero(site == k)[0] for k in range(s)]
    lat = np.asarray(topo.latency, np.float64)
    flow = np.asarray(topo.flow_bandwidth(), np.float64)
    bw = np.asarray(topo.bandwidth, np.float64)
    slat = np.zeros((s, s))
    sflow = np.zeros((s, s))
    sbw = np.zeros((s, s))
    for x in range(s):
        for y in range(s):
            if x == y:
                continue
            blk = np.ix_(members[x], members[y])
            slat[x, y] = lat[blk].min()
            sflow[x, y] = flow[blk].max()
            sbw[x, y] = bw[blk].max()
    resources, bottleneck, caps = {}, {}, []
    links = topo.shared_links if p > 1 else None
    if links is not None and links.any:
        caps = [float(c) for c in links.bandwidth]
    for x in range(s):
        for y in range(s):
            if x == y:
                continue
            rx, ry = int(members[x][0]), int(members[y][0])
            if links is not None and links.any and links.route_of[rx, ry] >= 0:
                resources[x, y] = tuple(int(k) for k in links.routes[links.route_of[rx, ry]])
                bottleneck[x, y] = int(links.link_of[rx, ry])
            else:  # a private path per rank pair: as many parallel flows as the smaller site
                caps.append(min(len(members[x]), len(members[y])) * min(sflow[x, y], sbw[x, y]))
                resources[x, y] = (len(caps) - 1,)
                bottleneck[x, y] = -1
    return SiteGraph(site, members, slat, sflow, resources, np.array(caps, np.float64), bottleneck)


def _routes(g: SiteGraph, x: int, y: int, piece: float = 0.0):
    """(relay or -1, time) of the trees' paths from x to y, direct or through one relay:
    per hop its latency plus one piece at one flow's (window-capped) bandwidth."""
    s = len(g.members)

    def hop(u, v):
        return g.latency[u, v] + piece / g.flow[u, v]

    out = [(-1, hop(x, y))]
    for z in range(s):
        if z not in (x, y):
            out.append((z, hop(x, z) + hop(z, y)))
    return out


def _solve(g: SiteGraph, nbytes: int, lmax: float, piece: float):
    """(congestion C in s, fractions) of the min-congestion packing with path latency <= lmax."""
    import pulp

    s = len(g.members)
    lp = pulp.LpProblem("forest_sites", pulp.LpMinimize)
    if hasattr(lp, "add_variable"):
        def var(name, lo, hi=None):
            return lp.add_variable(name, lowBound=lo, upBound=hi)
    else:
        def var(name, lo, hi=None):
            return pulp.LpVariable(name, lowBound=lo, upBound=hi)
    c = var("C", 0.0)
    f = {}
    load = {}
    for x in range(s):
        size = float(len(g.members[x]) * nbytes)
        for y in range(s):
            if x == y:
                continue
            terms = []
            for z, lat in _routes(g, x, y, piece):
                if lat > lmax * (1 + 1e-9):
                    continue
                v = var(f"f_{x}_{y}_{z + 1}", 0.0, 1.0)
                f[x, y, z] = v
                terms.append(v)
                hop = (x, y) if z < 0 else (z, y)
                for k in g.resources[hop]:
                    load.setdefault(k, []).append((v, size))
            if not terms:
                return None
            lp += pulp.lpSum(terms) == 1
    for (x, y, z), v in f.items():
        if z >= 0:
            if (x, z, -1) not in f:
                return None
            lp += v <= f[x, z, -1]
    scale = float(g.capacity.max()) if len(g.capacity) else 1.0
    for k, terms in load.items():
        # load_k / cap_k <= C, in units where a byte at the largest capacity takes 1 / scale s
        lp += pulp.lpSum(v * (sz / scale) for v, sz in terms) <= c * (g.capacity[k] / scale)
    lp += c
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        solver = pulp.PULP_CBC_CMD(msg=False)
    status = lp.solve(solver)
    if pulp.LpStatus[status] != "Optimal":
        return None
    frac = {key: max(0.0, float(v.value() or 0.0)) for key, v in f.items()}
    return float(c.value() or 0.0), frac


def route_fractions(g: SiteGraph, nbytes: int, piece: float = 0.0):
    """(fractions {(X, Y, Z or -1): share}, Lmax, C, tried): the packing minimising Lmax + C;
    Lmax bounds a path's latencies plus, per hop, one piece of `piece` bytes at one flow's
    bandwidth (the TCP window caps a flow, not a link: ForestColl has no such term)."""
    s = len(g.members)
    if s < 2:
        return {}, 0.0, 0.0, []
    lowest = max(min(lat for _, lat in _routes(g, x, y, piece)) for x in range(s) for y in range(s) if x != y)
    cands = sorted({lat for x in range(s) for y in range(s) if x != y
                    for _, lat in _routes(g, x, y, piece) if lat >= lowest})
    ladder = []
    for lat in cands:
        if not ladder or lat > ladder[-1] * LADDER:
            ladder.append(lat)
    best, tried = None, []
    for lmax in ladder[:MAX_LPS]:
        if best is not None and lmax >= best[0]:
            break
        got = _solve(g, nbytes, lmax, piece)
        if got is None:
            continue
        c, frac = got
        tried.append((lmax, c))
        if best is None or lmax + c < best[0] * (1 - 1e-9):
            best = (lmax + c, frac, lmax, c)
    if best is None:  # direct edges only
        frac = {(x, y, -1): 1.0 for x in range(s) for y in range(s) if x != y}
        return frac, float(g.latency.max()), float("nan"), tried
    return best[1], best[2], best[3], tried


def congestion(g: SiteGraph, nbytes: int, frac: dict) -> float:
    """max over resources of load / capacity (s) of the fractions (tests, docs)."""
    load = np.zeros(len(g.capacity))
    for (x, y, z), share in frac.items():
        hop = (x, y) if z < 0 else (z, y)
        for k in g.resources[hop]:
            load[k] += share * len(g.members[x]) * nbytes
    return float(np.max(load / g.capacity)) if len(load) else 0.0
