"""Grid-aware allreduce on the sites of the pool tree: `hier` (site leaders) and
`hier-spread` (the wide-area traffic spread over every member of a site).

Sites: the largest pools of the topology's pool tree (inputs/pools.py) whose ranks all
carry one site label (a site whose own LAN splits across a slow link becomes two sites;
two ranks on one host stay in their site); ranks that a split of a several-site pool
leaves alone (single-host sites, or sites joined by links as fast as their LANs) are
grouped by their site label. Sites are ordered by their lowest rank, members in rank
order. On a one-site topology both algorithms reduce to their intra-site phases.

- hier (reduce inside sites, one exchange over each slow link, broadcast inside sites):
  every site reduces to its leader (its lowest rank) by a binomial tree (reduce.binomial_up),
  the leaders combine their site partials over the wide area (below), every leader
  broadcasts the result in its site by a binomial tree. Wide-area bytes leave each site
  from one host.
- hier-spread: every site reduce-scatters inside (direct: each member sends every other
  member the slices that member owns, the owner combines them in rank order), each member
  combines its slices with its counterparts in the other sites (the owners of the same
  slices) over the wide area, and every site allgathers inside (each owner sends its
  slices to every other member). The vector is cut into K slices, K the largest site's
  member count; in a site of n members member i owns the slices j with j n // K == i. The
  wide-area traffic of each site pair then runs as up to K flows between different hosts:
  it pays where one flow cannot fill a wide-area link (a TCP window over a long latency,
  wan-3x16) and costs K times the messages where one flow can.

The wide-area phase, per slice, among the S owners of that slice (one per site):
- exchange: every owner sends its site's partial to the S - 1 others (send first) and
  combines theirs in site order: each slow link crossed once each way, one wide-area
  latency, n bytes per slice over every link;
- rsag: the slice is cut again into S parts, part h homed at site h; reduce-scatter (each
  owner sends part h to site h's owner, which combines the S partials in site order), then
  allgather (site h's owner sends the reduced part h to the others): two wide-area
  latencies, 2 n / S bytes per slice over every link - for links whose bandwidth, not
  latency, dominates (three-site-grid).
Option `wan` (req.options): "exchange", "rsag" or "auto" (default): the one the site-level
model predicts faster (latency + bytes / rate per site pair, rate = min(link bandwidth,
flows x one flow's bandwidth), flows the distinct owner pairs; the rsag form twice with
n / S bytes); the choice and both predictions go to prog.notes.

Every message carries one segment index s of every part it moves (Program.nseg = K x H x
nseg, H = S under rsag, else 1; piece (j, h, s) is segment (j H + h) nseg + s), so the
phases pipeline segment by segment. Order: MPI's when every site is a contiguous rank
range (each combine appends a neighbouring interval: members by rank inside a site,
sites by rank across), else the program is commutative-only.
"""
from __future__ import annotations

import numpy as np

from ...inputs import pools
from ..program import MAX_SEGMENTS, Piece
from .reduce import XBuilder, binomial_down, binomial_up
from .registry import CollRequest, register

WAN_MODES = ("exchange", "rsag")


def pool_sites(topo) -> list[list[int]]:
    """Ranks of each site (module docstring), sites by lowest rank, members in rank order."""
    tree = pools.pool_tree(topo)
    label = topo.rank_site()
    out: list[list[int]] = []

    def walk(node):
        ranks = [int(r) for r in tree.nodes[node]["ranks"]]
        if len({label[r] for r in ranks}) == 1:
            out.append(sorted(ranks))
            return
        loose: dict[str, list[int]] = {}
        for c in pools.children(tree, node):
            kid = [int(r) for r in tree.nodes[c]["ranks"]]
            if len(kid) == 1:
                loose.setdefault(label[kid[0]], []).append(kid[0])
            else:
                walk(c)
        out.extend(sorted(g) for g in loose.values())

    walk(0)
    return sorted(out, key=lambda g: g[0])


def _in_order(k: int, n: int) -> list[int]:
    """The other indices of 0..n-1 in the order index k combines them keeping rank order:
    k-1 down to 0 (each precedes what k holds), then k+1 up to n-1 (each follows)."""
    return list(range(k - 1, -1, -1)) + list(range(k + 1, n))


def _owners(sites: list[list[int]], k: int) -> list[list[int]]:
    """owner[x][j]: the member of site x that owns slice j of K."""
    return [[m[j * len(m) // k] for j in range(k)] for m in sites]


def predict_wan(topo, sites, owner, nbytes: int) -> dict[str, float]:
    """Site-level prediction (s) of each wide-area mode: per sending site, the longest
    latency to another site plus the longer of (its busiest owner's sends one after the
    other - single port - each at min(one flow, link / flows)) and (the busiest link's
    bytes at min(link, flows x one flow)); exchange moves n bytes per site pair, rsag
    twice n / S with two latencies; the slowest site decides."""
    s = len(sites)
    if s < 2:
        return {m: 0.0 for m in WAN_MODES}
    lat, bw, flow = topo.latency, topo.bandwidth, topo.flow_bandwidth()
    k = len(owner[0])
    best = {m: 0.0 for m in WAN_MODES}
    for x in range(s):
        latency, port, link = 0.0, 0.0, 0.0
        share = max(owner[x].count(a) for a in set(owner[x])) / k
        for y in range(s):
            if y == x:
                continue
            a, b = sites[x][0], sites[y][0]
            flows = len({(owner[x][j], owner[y][j]) for j in range(k)})
            latency = max(latency, float(lat[a, b]))
            port += share * nbytes / min(float(flow[a, b]), float(bw[a, b]) / flows)
            link = max(link, nbytes / min(float(bw[a, b]), flows * float(flow[a, b])))
        best["exchange"] = max(best["exchange"], latency + max(port, link))
        best["rsag"] = max(best["rsag"], 2 * (latency + max(port, link) / s))
    return best


def _plan(req: CollRequest, k: int):
    sites = pool_sites(req.topology)
    owner = _owners(sites, k)
    mode = req.options.get("wan", "auto")
    predicted = predict_wan(req.topology, sites, owner, req.nbytes)
    if mode == "auto":
        mode = "rsag" if predicted["rsag"] < predicted["exchange"] else "exchange"
    return sites, owner, mode, predicted


def _check(req: CollRequest, spread: bool) -> str | None:
    topo = req.topology
    if topo is not None and topo.nranks != req.nranks:
        return f"expected a topology with {req.nranks} ranks, got one with {topo.nranks}"
    mode = req.options.get("wan", "auto")
    if mode not in WAN_MODES + ("auto",):
        return f"expected option wan = exchange, rsag or auto, got {mode!r}"
    if req.nseg < 1:
        return f"expected at least 1 segment, got {req.nseg}"
    if topo is None:
        return None
    sites = pool_sites(topo)
    k = max(len(m) for m in sites) if spread else 1
    h = len(sites) if mode != "exchange" else 1
    if k * h * req.nseg > MAX_SEGMENTS:
        return (f"expected {k} slices x {h} parts x nseg <= {MAX_SEGMENTS} segments, "
                f"got nseg {req.nseg}")
    return None


class _Pieces:
    """Piece (j, h, s) -> segment (j H + h) ns + s."""

    def __init__(self, k: int, h: int, ns: int):
        self.k, self.h, self.ns = k, h, ns

    @property
    def nseg(self) -> int:
        return self.k * self.h * self.ns

    def of(self, slices, parts, s) -> tuple[Piece, ...]:
        return tuple(Piece(0, 0, (j * self.h + h) * self.ns + s) for j in slices for h in parts)


def _wan(b: XBuilder, owner, pc: _Pieces, mode: str, step: int) -> int:
    """The wide-area phase among the slices' owners (module docstring). Returns the next
    free step."""
    s_count, ns = len(owner), pc.ns
    allparts = range(pc.h)
    for s in range(ns):
        for y in range(s_count):
            for x in _in_order(y, s_count):
                groups: dict[tuple[int, int], list[int]] = {}
                for j in range(pc.k):
                    groups.setdefault((owner[x][j], owner[y][j]), []).append(j)
                for (a, r), js in groups.items():
                    if mode == "exchange":
                        b.send_first(step + s, a, r, pc.of(js, allparts, s), reduce=True,
                                     local_first=x > y)
                    else:  # reduce-scatter: x's partial of the part homed at y
                        b.add(step + s, a, r, pc.of(js, [y], s), reduce=True, local_first=x > y)
    if mode == "exchange":
        return step + ns
    step += ns
    for s in range(ns):
        for h in range(s_count):
            for x in range(s_count):
                if x == h:
                    continue
                groups = {}
                for j in range(pc.k):
                    groups.setdefault((owner[h][j], owner[x][j]), []).append(j)
                for (a, r), js in groups.items():
                    b.add(step + s, a, r, pc.of(js, [h], s))
    return step + ns


def _finish(b: XBuilder, sites, mode, predicted, k: int, h: int):
    prog = b.build()
    prog.commutative_only = any(m != list(range(m[0], m[0] + len(m))) for m in sites)
    prog.notes.update(sites=[len(m) for m in sites], slices=k, parts=h, wan=mode,
                      wan_predicted_s=predicted)
    return prog


@register("allreduce", "hier", "grid: binomial reduce to each site's leader, the leaders "
          "combine over the wide area (one exchange per slow link, or reduce-scatter + "
          "allgather when bandwidth-bound), binomial broadcast inside sites",
          lambda r: _check(r, False), needs_topology=True)
def hier(req: CollRequest):
    sites, owner, mode, predicted = _plan(req, 1)
    pc = _Pieces(1, len(sites) if mode == "rsag" else 1, req.nseg)
    b = XBuilder("allreduce", req.nranks, pc.nseg, algorithm="hier")
    depth = 0
    for s in range(pc.ns):
        pieces = pc.of([0], range(pc.h), s)
        for m in sites:
            depth = max(depth, binomial_up(b, m, s, pieces))
    step = _wan(b, owner, pc, mode, depth + pc.ns)
    for s in range(pc.ns):
        pieces = pc.of([0], range(pc.h), s)
        for m in sites:
            binomial_down(b, m, step + s, pieces)
    return _finish(b, sites, mode, predicted, 1, pc.h)


@register("allreduce", "hier-spread", "grid: reduce-scatter inside sites, each member "
          "combines its slices with its counterparts in the other sites (exchange or "
          "reduce-scatter + allgather), allgather inside sites",
          lambda r: _check(r, True), needs_topology=True)
def hier_spread(req: CollRequest):
    sites = pool_sites(req.topology)
    k = max(len(m) for m in sites)
    sites, owner, mode, predicted = _plan(req, k)
    pc = _Pieces(k, len(sites) if mode == "rsag" else 1, req.nseg)
    b = XBuilder("allreduce", req.nranks, pc.nseg, algorithm="hier-spread")
    parts = range(pc.h)
    owned = [{r: [j for j in range(k) if owner[x][j] == r] for r in m} for x, m in enumerate(sites)]
    for s in range(pc.ns):
        for x, m in enumerate(sites):
            for i, o in enumerate(m):
                for t in _in_order(i, len(m)):
                    b.add(s, m[t], o, pc.of(owned[x][o], parts, s), reduce=True, local_first=t > i)
    step = _wan(b, owner, pc, mode, pc.ns)
    for s in range(pc.ns):
        for x, m in enumerate(sites):
            for o in m:
                for r in m:
                    if r != o and owned[x][o]:
                        b.add(step + s, o, r, pc.of(owned[x][o], parts, s))
    return _finish(b, sites, mode, predicted, k, pc.h)
