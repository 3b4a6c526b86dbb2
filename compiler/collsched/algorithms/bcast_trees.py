"""Allgather from P broadcast trees, one per root, ordered by the min-based method of the
Min3 paper, section 6.1.

Two stages:

1. **One broadcast tree per root o**, built on its own (as the paper's Mateescu and
   ClusteredSA trees are): earliest-completing-edge-first under the cost model for the
   whole block of B bytes. Starting from {o}, repeatedly add the edge u -> v (u in the
   tree, v not) whose transfer would complete first, where u can start once it holds the
   block and its earlier sends in this tree have left its port (os(m) each), and v's
   receive waits for v's arrival. A site is entered over a wide-area edge only once per
   tree (the first rank reached there; the rest of the site is reached from inside it), as
   in the clustered broadcasts of the paper's reference [9].
2. **Send order: min-based list scheduling** (section 6.1). Every tree edge of every root
   is a pending transfer; one is *ready* when its sender holds the piece. Repeatedly pick
   the ready transfer with the smallest TotalTime under Eq. 1-3 (half or full duplex as
   requested; the receiving port frees `early` before the end as in docs/semantics.md),
   schedule it, and update the host, port and link availability times. The order of the
   picks is the global transfer order; each rank's list follows it.

Where the paper is vague we decided:

- the paper does not say which trees to combine beyond naming Mateescu's and
  ClusteredSA; we use the clustered earliest-completion tree above, which is wide-area
  optimal like ClusteredSA, so the baseline differs from Min3 only in building each
  broadcast alone and ordering afterwards;
- trees are built for the whole block; with segments, every segment of a block follows
  the block's tree, and the ordering stage schedules segments as separate transfers;
- predicted arrival times delay a rank's sends and foreground receives, in both stages;
- each tree is built in a rank numbering where every site's member list is rotated by
  the root, so that equal costs go to different ranks for different roots (the trees then
  enter a site at different ranks, rather than all through its lowest one, which would
  funnel every wide-area transfer into one port); in the ordering stage ties break by
  (origin, segment, sender, receiver), so that schedules are reproducible;
- without a topology the default homogeneous cluster (1 Gbit/s, 50 us) gives the costs.

Stage 2 uses a heap with lazy re-evaluation: availability times only grow, so a stored
TotalTime is a lower bound of the current one, and a popped transfer whose recomputed
time did not grow is the true minimum.
"""
from __future__ import annotations

import heapq

import numpy as np

from ..ir import from_transfers
from .registry import Request, register
from .magpie import refuse_mismatched_topology, site_groups

INF = float("inf")
MAX_RANKS = 256  # P trees of P ranks, then P^2 transfers ordered one by one in Python


def _refuse(req: Request):
    if req.nranks > MAX_RANKS:
        return (f"expected at most {MAX_RANKS} ranks (bcast-trees builds one tree per root and "
                f"orders all P^2 transfers one at a time), got {req.nranks}; use min3")
    return refuse_mismatched_topology(req)


def _costs(req: Request):
    from ..inputs.topology import homogeneous  # cost-aware default, as for the other tools

    topo = req.topology if req.topology is not None else homogeneous(req.nranks, full_duplex=req.full_duplex)
    return topo


def broadcast_tree(root: int, transfer: np.ndarray, overhead: np.ndarray, site: np.ndarray,
                   arrivals: np.ndarray) -> list[tuple[int, int]]:
    """(parent, child) edges of the clustered earliest-completion tree of `root`, in order.

    transfer/overhead: (P, P) seconds for the whole block; site: site index per rank.
    """
    p = len(site)
    cand = np.full((p, p), INF)  # completion time of edge u -> v, inf = not allowed now
    send_free = np.full(p, INF)
    in_tree = np.zeros(p, bool)
    reached = np.zeros(int(site.max()) + 1, bool)
    row_min = np.full(p, INF)
    row_arg = np.zeros(p, np.int64)

    def refresh_row(u):
        cols = ~in_tree & ((site == site[u]) | ~reached[site])
        row = np.where(cols, np.maximum(send_free[u], arrivals) + transfer[u], INF)
        row[u] = INF
        cand[u] = row
        row_arg[u] = int(np.argmin(row))
        row_min[u] = row[row_arg[u]]

    def join(v, ready):
        in_tree[v] = True
        send_free[v] = ready
        cand[:, v] = INF
        if not reached[site[v]]:
            reached[site[v]] = True
            inside = site == site[v]
            cand[np.ix_(~inside, inside)] = INF  # the site is entered once
        refresh_row(v)
        rows = np.nonzero(in_tree)[0]
        stale = rows[cand[rows, row_arg[rows]] != row_min[rows]]
        if len(stale):
            row_arg[stale] = np.argmin(cand[stale], 1)
            row_min[stale] = cand[stale, row_arg[stale]]

    edges = []
    join(root, float(arrivals[root]))
    for _ in range(p - 1):
        u = int(np.argmin(np.where(in_tree, row_min, INF)))
        v = int(row_arg[u])
        done = float(row_min[u])
        edges.append((u, v))
        send_free[u] = max(send_free[u], arrivals[v]) + overhead[u, v]
        refresh_row(u)
        join(v, max(done, float(arrivals[v])))
    return edges


class _PortModel:
    """Host, port and link availability of Eq. 1-3 (docs/semantics.md)."""

    def __init__(self, topo, arrivals, full_duplex: bool):
        self.topo, self.arrivals, self.full = topo, arrivals, full_duplex
        p = topo.nranks
        self.lat = topo.latency
        self.bw = topo.bandwidth
        self.flow = topo.flow_bandwidth()
        self.send_free = np.zeros(p)
        self.recv_free = np.zeros(p)
        self.host_free = np.zeros(p)
        self.last_was_recv = np.zeros(p, bool)
        self.link_free: dict[tuple[int, int], float] = {}
        self._os: dict[int, np.ndarray] = {}
        self._g: dict[int, np.ndarray] = {}

    def overheads(self, m):
        if m not in self._os:
            self._os[m] = self.topo.send_overhead(m)
            self._g[m] = self.topo.gap(m)
        return self._os[m], self._g[m]

    def start(self, u, v, m, ready) -> tuple[float, float]:
        """(StartTime, TotalTime) of moving m bytes u -> v now."""
        duration = self.lat[u, v] + m / self.flow[u, v]
        early = duration - m / self.bw[u, v]
        t = max(ready, self.arrivals[u], self.arrivals[v], self.link_free.get((u, v), 0.0))
        if self.full:
            t = max(t, self.send_free[u], self.recv_free[v] - early)
        else:
            t = max(t, self.host_free[u],
                    self.host_free[v] - (early if self.last_was_recv[v] else 0.0))
        return t, t + duration

    def commit(self, u, v, m, start, end):
        os_, g = self.overheads(m)
        self.link_free[(u, v)] = start + g[u, v]
        if self.full:
            self.send_free[u] = start + os_[u, v]
            self.recv_free[v] = end
        else:
            self.host_free[u] = start + os_[u, v]
            self.last_was_recv[u] = False
            self.host_free[v] = end
            self.last_was_recv[v] = True


def min_based_order(topo, trees, piece_bytes, arrivals, full_duplex: bool):
    """Global transfer order (origin, segment, src, dst) of the trees, section 6.1."""
    p = topo.nranks
    children = [[[] for _ in range(p)] for _ in range(p)]  # [root][u] -> children in tree order
    for root, edges in enumerate(trees):
        for u, v in edges:
            children[root][u].append(v)
    model = _PortModel(topo, arrivals, full_duplex)
    heap: list = []

    def offer(root, seg, u, ready):
        m = int(piece_bytes[seg])
        for v in children[root][u]:
            _, end = model.start(u, v, m, ready)
            heapq.heappush(heap, (end, root, seg, u, v, ready))

    for root in range(p):
        for seg in range(len(piece_bytes)):
            offer(root, seg, root, float(arrivals[root]))
    order = []
    while heap:
        est, root, seg, u, v, ready = heapq.heappop(heap)
        m = int(piece_bytes[seg])
        start, end = model.start(u, v, m, ready)
        if end > est:  # someone took the port or link meanwhile: re-queue at the new time
            heapq.heappush(heap, (end, root, seg, u, v, ready))
            continue
        model.commit(u, v, m, start, end)
        order.append((root, seg, u, v))
        offer(root, seg, v, end)
    return order


@register("bcast-trees", "one clustered earliest-completion broadcast tree per root, send "
          "order by the min-based method of the Min3 paper (section 6.1)", _refuse)
def build(req: Request):
    p, k = req.nranks, req.nseg
    topo = _costs(req)
    arrivals = np.zeros(p) if req.arrivals is None else np.asarray(req.arrivals, float)
    site = np.zeros(p, np.int64)
    groups = site_groups(req)
    for idx, members in enumerate(groups):
        site[members] = idx
    block = int(req.nbytes)
    transfer = topo.transfer_time(block)
    overhead = topo.send_overhead(block)
    trees = []
    for o in range(p):
        # Build in a numbering where each site's members are rotated by the root, so that
        # ties (equal costs) go to different ranks for different roots: the trees then
        # enter a site at different ranks instead of all through its lowest one.
        rel = np.array([m[(i + o) % len(m)] for m in groups for i in range(len(m))], np.int64)
        root = int(np.nonzero(rel == o)[0][0])
        edges = broadcast_tree(root, transfer[np.ix_(rel, rel)], overhead[np.ix_(rel, rel)],
                               site[rel], arrivals[rel])
        trees.append([(int(rel[u]), int(rel[v])) for u, v in edges])
    bounds = (np.arange(k + 1, dtype=np.int64) * block) // k
    pieces = np.diff(bounds)
    order = min_based_order(topo, trees, pieces, arrivals, req.full_duplex)
    if not order:
        return from_transfers(p, k, [], [], [], [], algorithm="bcast-trees")
    origin, seg, src, dst = (np.array(c, np.int64) for c in zip(*order))
    return from_transfers(p, k, np.arange(len(order)), src, dst, origin, seg,
                          algorithm="bcast-trees", half_duplex_order=not req.full_duplex)
