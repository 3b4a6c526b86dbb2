"""Grid-aware allreduce on the sites of the pool tree: `hier` (site leaders) and
`hier-spread` (the wide-area traffic spread over every member of a site).

Sites come from the topology's pool tree (inputs/pools.py), walked from the root: a pool
whose sub-pools are single ranks, or single hosts (several ranks per host) under one site
label, is a LAN and becomes a site; any other pool is split into its sub-pools (so a
measured topology without site labels still splits where its bandwidth does, and a site
whose own LAN splits across a slow link becomes two sites). A LAN pool that carries
several site labels (single-host sites, or sites joined by links as fast as their LANs)
and the single ranks a split leaves alone are grouped by site label. Sites are ordered by
their lowest rank, members in rank order. On a one-site topology both algorithms reduce
to their intra-site phases.

- hier (reduce inside sites, one exchange over each slow link, broadcast inside sites):
  every site reduces to its leader (its lowest rank), the leaders combine their site
  partials over the wide area (below), every leader broadcasts the result in its site.
  Inside sites (option `intra`): "binomial" trees (reduce.binomial_up / binomial_down),
  or pipelined "chain"s (the last member -> .. -> the leader, each hop appending its own
  value; the leader -> member 1 -> ..); "auto" (default) takes the chain once there are
  at least as many segments as members (the pipeline fills; a binomial tree's root sends
  to log2 n children at once, which share its port). Wide-area bytes leave each site
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
  latencies, and the link between sites x and y carries w_x + w_y of every slice each
  way (w_h: part h's share). Pipelined (below), the shares solve max sum w subject to
  w_x + w_y <= c_xy (c_xy: the pair's rate, the slower direction of min(link bandwidth,
  flows x one flow's bandwidth), flows the distinct owner pairs; `part_weights`, a small
  simplex), scaled to sum 1: the slowest links then carry the least. On three-site-grid,
  where every link from UT is slow, UT homes nothing and every link carries what the cut
  around UT must; with equal links the shares are 1/S (2 n / S per link), as when not
  pipelined.
Option `wan` (req.options): "exchange", "rsag" or "auto" (default): the one the site-level
model predicts faster (`predict_wan`: exchange = the longest latency + n at the slowest
pair's rate, or the busiest owner's sends one after the other; rsag = twice the longest
latency + n max (w_x + w_y) / c_xy); the choice, the shares and both predictions go to
prog.notes.

Every message carries one segment index s of every part unit it moves: part h is u_h of
U units (U = 8 S, fewer when the format's segment limit asks; u_h ~ w_h U, 0 allowed: a
site can home nothing), Program.nseg = K x U x nseg (U = 1 under exchange), unit t of part
h of slice j, index s, is segment ((j U + offset_h + t) nseg + s). So the phases pipeline
segment by segment. The wide area is *pipelined* when nseg > 1 and one segment takes at
least two round trips of the longest wide-area latency over the slowest pair: then the
wide-area sends are FIFO (each waits for the previous one to the same peer, so segment 0
crosses first instead of every segment sharing the link and arriving together, and the
allgather of a segment overlaps the reduce-scatter of the next in the other direction)
and the rsag parts take the weighted shares; otherwise the sends are not FIFO (a
synchronous send costs a round trip) and the parts are equal (1/S each, U = S: the two
phases then run one after the other, and equal parts are within a few per cent of the best
shares for that case).

Order: MPI's when every site is a contiguous rank range (each combine appends a
neighbouring interval: members by rank inside a site, sites by rank across), else the
program is commutative-only.
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
    label, host = topo.rank_site(), topo.rank_host
    out: list[list[int]] = []

    def by_label(ranks):
        groups: dict[str, list[int]] = {}
        for r in ranks:
            groups.setdefault(label[r], []).append(r)
        out.extend(sorted(g) for g in groups.values())

    def walk(node):
        ranks = [int(r) for r in tree.nodes[node]["ranks"]]
        kids = [[int(r) for r in tree.nodes[c]["ranks"]] for c in pools.children(tree, node)]
        one_label = len({label[r] for r in ranks}) == 1
        if all(len(k) == 1 for k in kids) or (one_label and all(len({host[r] for r in k}) == 1 for k in kids)):
            by_label(ranks)  # a LAN (of hosts, or of single-rank hosts)
            return
        by_label([k[0] for k in kids if len(k) == 1])
        for c, k in zip(pools.children(tree, node), kids):
            if len(k) > 1:
                walk(c)

    walk(0)
    return sorted(out, key=lambda g: g[0])


def _in_order(k: int, n: int) -> list[int]:
    """The other indices of 0..n-1 in the order index k combines them keeping rank order:
    k-1 down to 0 (each precedes what k holds), then k+1 up to n-1 (each follows)."""
    return list(range(k - 1, -1, -1)) + list(range(k + 1, n))


def _owners(sites: list[list[int]], k: int) -> list[list[int]]:
    """owner[x][j]: the member of site x that owns slice j of K."""
    return [[m[j * len(m) // k] for j in range(k)] for m in sites]


def _rates(topo, sites, owner) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(latency, rate, one flow) per ordered site pair (s, B/s), between the sites' lowest
    ranks; rate = min(link bandwidth, flows x one flow), flows the distinct owner pairs."""
    s, k = len(sites), len(owner[0])
    lat, rate, one = np.zeros((s, s)), np.full((s, s), np.inf), np.full((s, s), np.inf)
    bw, flow = topo.bandwidth, topo.flow_bandwidth()
    for x in range(s):
        for y in range(s):
            if x != y:
                a, b = sites[x][0], sites[y][0]
                flows = len({(owner[x][j], owner[y][j]) for j in range(k)})
                lat[x, y], one[x, y] = float(topo.latency[a, b]), float(flow[a, b])
                rate[x, y] = min(float(bw[a, b]), flows * float(flow[a, b]))
    return lat, rate, one


def max_packing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmax of sum(x) subject to a x <= b, x >= 0, for b >= 0 and a >= 0 with a nonzero
    entry in every column (bounded): a dense tableau simplex with Bland's rule."""
    m, n = a.shape
    t = np.zeros((m + 1, n + m + 1))
    t[:m, :n], t[:m, n:n + m], t[:m, -1], t[m, :n] = a, np.eye(m), b, -1.0
    basis = list(range(n, n + m))
    for _ in range(50 * (m + n)):
        col = next((j for j in range(n + m) if t[m, j] < -1e-12), None)
        if col is None:
            break
        _, _, r = min((t[i, -1] / t[i, col], basis[i], i) for i in range(m) if t[i, col] > 1e-12)
        t[r] /= t[r, col]
        for i in range(m + 1):
            if i != r:
                t[i] -= t[i, col] * t[r]
        basis[r] = col
    x = np.zeros(n + m)
    for i, v in enumerate(basis):
        x[v] = t[i, -1]
    return np.maximum(x[:n], 0.0)


def part_weights(rate: np.ndarray) -> np.ndarray:
    """The parts' shares w (sum 1) that minimise max over site pairs (w_x + w_y) / c_xy,
    c_xy = min(rate[x, y], rate[y, x]) (module docstring)."""
    s = len(rate)
    if s < 2:
        return np.ones(s)
    c = np.minimum(rate, rate.T)
    c = c / c[np.isfinite(c)].max()
    rows, caps = [], []
    for x in range(s):
        for y in range(x + 1, s):
            row = np.zeros(s)
            row[[x, y]] = 1.0
            rows.append(row)
            caps.append(c[x, y])
    w = max_packing(np.array(rows), np.array(caps))
    return w / w.sum() if w.sum() > 0 else np.full(s, 1.0 / s)


def part_units(weights: np.ndarray, units: int) -> list[int]:
    """Integer units per part (sum `units`), largest remainders first."""
    raw = np.asarray(weights, np.float64) * units
    u = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - u), kind="stable")[:units - int(u.sum())]:
        u[i] += 1
    return [int(v) for v in u]


def predict_wan(topo, sites, owner, nbytes: int, weights=None) -> dict[str, float]:
    """Site-level prediction (s) of each wide-area mode (module docstring)."""
    s, k = len(sites), len(owner[0])
    if s < 2:
        return {m: 0.0 for m in WAN_MODES}
    lat, rate, one = _rates(topo, sites, owner)
    w = part_weights(rate) if weights is None else np.asarray(weights)
    with np.errstate(invalid="ignore"):
        flows = rate / one
    out = {m: 0.0 for m in WAN_MODES}
    for x in range(s):
        share = max(owner[x].count(a) for a in set(owner[x])) / k
        others = [y for y in range(s) if y != x]
        latency = max(lat[x, y] for y in others)
        # The busiest owner sends to the S - 1 sites one after the other (single port).
        port = sum(share * nbytes / min(one[x, y], rate[x, y] / flows[x, y]) for y in others)
        link = max(nbytes / rate[x, y] for y in others)
        out["exchange"] = max(out["exchange"], latency + max(port, link))
        load = max(nbytes * (w[x] + w[y]) / min(rate[x, y], rate[y, x]) for y in others)
        out["rsag"] = max(out["rsag"], 2 * latency + load)
    return {m: float(v) for m, v in out.items()}


def _units_total(nsites: int, k: int, ns: int) -> int:
    return max(nsites, min(8 * nsites, MAX_SEGMENTS // max(1, k * ns)))


def _plan(req: CollRequest, k: int):
    """(sites, owner, mode, notes, pieces) of a request, k slices (module docstring)."""
    sites = pool_sites(req.topology)
    owner = _owners(sites, k)
    mode = req.options.get("wan", "auto")
    nsites = len(sites)
    weights, pipelined = np.ones(nsites) / nsites, False
    if nsites > 1:
        lat, rate, _ = _rates(req.topology, sites, owner)
        off = ~np.eye(nsites, dtype=bool)
        pipelined = req.nseg > 1 and req.nbytes / req.nseg / rate[off].min() >= 2 * lat[off].max()
        if pipelined:
            weights = part_weights(rate)
    predicted = predict_wan(req.topology, sites, owner, req.nbytes, weights)
    if mode == "auto":
        mode = "rsag" if predicted["rsag"] < predicted["exchange"] else "exchange"
    units = [1]
    if mode == "rsag" and nsites > 1:
        units = part_units(weights, _units_total(nsites, k, req.nseg) if pipelined else nsites)
    notes = dict(sites=[len(m) for m in sites], slices=k, wan=mode, part_units=units,
                 wan_fifo=pipelined, wan_predicted_s=predicted)
    return sites, owner, mode, notes, _Pieces(k, units, req.nseg, pipelined)


def _check(req: CollRequest, spread: bool) -> str | None:
    topo = req.topology
    if topo is not None and topo.nranks != req.nranks:
        return f"expected a topology with {req.nranks} ranks, got one with {topo.nranks}"
    mode = req.options.get("wan", "auto")
    if mode not in WAN_MODES + ("auto",):
        return f"expected option wan = exchange, rsag or auto, got {mode!r}"
    if req.options.get("intra", "auto") not in ("auto", "binomial", "chain"):
        return f"expected option intra = binomial, chain or auto, got {req.options['intra']!r}"
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
    """Unit t of part h of slice j, index s -> segment ((j U + offset_h + t) ns + s)."""

    def __init__(self, k: int, units: list[int], ns: int, fifo: bool = False):
        self.k, self.units, self.ns, self.fifo = k, units, ns, fifo
        self.total = sum(units)
        self.offset = [sum(units[:h]) for h in range(len(units))]

    @property
    def nparts(self) -> int:
        return len(self.units)

    @property
    def nseg(self) -> int:
        return self.k * self.total * self.ns

    def of(self, slices, parts, s) -> tuple[Piece, ...]:
        return tuple(Piece(0, 0, ((j * self.total + self.offset[h] + t) * self.ns + s))
                     for j in slices for h in parts for t in range(self.units[h]))


def _pairs(owner, x: int, y: int, k: int) -> dict[tuple[int, int], list[int]]:
    """Slices by (owner in x, owner in y)."""
    groups: dict[tuple[int, int], list[int]] = {}
    for j in range(k):
        groups.setdefault((owner[x][j], owner[y][j]), []).append(j)
    return groups


def _wan(b: XBuilder, owner, pc: _Pieces, mode: str, step: int) -> int:
    """The wide-area phase among the slices' owners (module docstring). Exchange: segment
    s in step `step + s`; rsag: pipelined, its reduce-scatter in step + 2 s and its
    allgather in step + 2 s + 1, so an owner posts the allgather's receives of segment s
    before its FIFO sends of segment s + 1 hold up its walk (the phases overlap across
    segments); not pipelined, every reduce-scatter (step + s) before every allgather
    (step + nseg + s). Returns the next free step."""
    nsites, ns, fifo = len(owner), pc.ns, pc.fifo
    rs_step = (lambda s: step + 2 * s) if fifo else (lambda s: step + s)
    ag_step = (lambda s: step + 2 * s + 1) if fifo else (lambda s: step + ns + s)
    for s in range(ns):
        for y in range(nsites):
            for x in _in_order(y, nsites):
                for (a, r), js in _pairs(owner, x, y, pc.k).items():
                    if mode == "exchange":
                        b.add(step + s, a, r, pc.of(js, range(pc.nparts), s), send_first=True,
                              reduce=True, local_first=x > y, fifo=fifo)
                    elif pc.units[y]:  # reduce-scatter: x's partial of the part homed at y
                        b.add(rs_step(s), a, r, pc.of(js, [y], s), reduce=True,
                              local_first=x > y, fifo=fifo)
        if mode == "exchange":
            continue
        for h in range(nsites):
            for x in range(nsites):
                if x != h and pc.units[h]:  # allgather: the reduced part homed at h
                    for (a, r), js in _pairs(owner, h, x, pc.k).items():
                        b.add(ag_step(s), a, r, pc.of(js, [h], s), fifo=fifo)
    return step + (ns if mode == "exchange" else 2 * ns)


def _finish(b: XBuilder, sites, notes):
    prog = b.build()
    prog.commutative_only = any(m != list(range(m[0], m[0] + len(m))) for m in sites)
    prog.notes.update(notes)
    return prog


@register("allreduce", "hier", "grid: binomial reduce to each site's leader, the leaders "
          "combine over the wide area (one exchange per slow link, or a weighted "
          "reduce-scatter + allgather when bandwidth-bound), binomial broadcast inside sites",
          lambda r: _check(r, False), needs_topology=True)
def hier(req: CollRequest):
    sites, owner, mode, notes, pc = _plan(req, 1)
    b = XBuilder("allreduce", req.nranks, pc.nseg, algorithm="hier")
    intra = req.options.get("intra", "auto")
    if intra == "auto":  # a chain once the segments fill it
        intra = "chain" if pc.ns >= max(len(m) for m in sites) > 2 else "binomial"
    notes["intra"] = intra
    depth = 0
    for s in range(pc.ns):
        pieces = pc.of([0], range(pc.nparts), s)
        for m in sites:
            if intra == "chain":  # m[-1] -> .. -> m[0], each hop appending own-first
                for d in range(len(m) - 1):
                    b.add(s + d, m[-1 - d], m[-2 - d], pieces, reduce=True, local_first=True)
                depth = max(depth, len(m) - 1)
            else:
                depth = max(depth, binomial_up(b, m, s, pieces))
    step = _wan(b, owner, pc, mode, depth + pc.ns)
    for s in range(pc.ns):
        pieces = pc.of([0], range(pc.nparts), s)
        for m in sites:
            if intra == "chain":  # m[0] -> m[1] -> ..
                for d in range(len(m) - 1):
                    b.add(step + s + d, m[d], m[d + 1], pieces)
            else:
                binomial_down(b, m, step + s, pieces)
    return _finish(b, sites, notes)


@register("allreduce", "hier-spread", "grid: reduce-scatter inside sites, each member "
          "combines its slices with its counterparts in the other sites (exchange or "
          "weighted reduce-scatter + allgather), allgather inside sites",
          lambda r: _check(r, True), needs_topology=True)
def hier_spread(req: CollRequest):
    k = max(len(m) for m in pool_sites(req.topology))
    sites, owner, mode, notes, pc = _plan(req, k)
    b = XBuilder("allreduce", req.nranks, pc.nseg, algorithm="hier-spread")
    parts = range(pc.nparts)
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
    return _finish(b, sites, notes)
