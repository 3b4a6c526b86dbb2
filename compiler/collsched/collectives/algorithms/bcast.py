"""Broadcast algorithms: binomial tree, pipelined chain, scatter + allgather (van de
Geijn) and an arrival-aware tree.

Pieces are (0, 0, seg): segment seg of the root's buffer (docs/semantics.md,
"Collectives beyond allgather"). The root holds every segment from the start; every
other rank receives every segment exactly once. Ranks are taken relative to the root
(v = (r - root) mod P) wherever a shape is described.

- `binomial`: the binomial tree of MPICH: in round t = 0 .. L-1 (L = ceil(log2 P)) every
  v that is a multiple of 2m, m = 2^(L-1-t), sends to v + m (children in the order
  largest subtree first; the subtree of v is [v, v + lowbit(v))). With
  nseg = 1 each edge carries the whole buffer in one message; with nseg > 1 every segment
  follows the tree on its own (segment g on an edge of round t is listed at step g + t), so
  a rank forwards segment g while segment g + 1 is on its way: pipelined binomial.
- `chain`: the pipelined chain root -> v=1 -> v=2 -> ... -> v=P-1: segment g crosses edge
  k -> k+1 at step g + k, so with nseg segments the broadcast takes P - 2 + nseg message
  times of nbytes / nseg. Use it with large buffers and many segments.
- `scatter-ring`: scatter + allgather (van de Geijn; MPICH's large-message bcast, its
  scatter_ring_allgather; named so because a file's header holds 16 bytes of algorithm
  name and "scatter-allgather" has 17): the buffer is cut in
  P chunks, chunk v being segments v*n .. v*n + n - 1 with n = req.nseg, so the program's
  nseg is P * req.nseg (refused above 65535); a binomial scatter gives rank v the chunks
  of its subtree [v, v + lowbit(v)) (one message per tree edge, carrying them all), then
  a ring allgather (in step k rank v sends chunk v - k to v + 1) fills in the rest.
  Decision: a ring message is left out where its receiver already holds the chunk (from
  the scatter, or the root), since a piece is received exactly once; the rank still
  forwards that chunk in the next ring step, so the ring stays intact.
- `arrival-tree` (arrival_aware): a tree built greedily from predicted arrival times
  (req.arrivals, seconds per rank; none = everyone at 0): starting from the root, the
  other ranks in order of arrival are attached, each to the holder that would deliver the
  whole buffer to it first, a holder being able to send from max(its arrival, when it got
  the buffer), its port busy for the transfer time (nbytes / bandwidth) per child, the
  child holding the buffer latency + transfer time after the send starts. Latencies and
  bandwidths (one flow's) come from the topology or, without one, the same numbers on a
  homogeneous 1 Gbit/s, 50 us cluster (inputs.topology.homogeneous). So early ranks
  relay first, late ranks end up leaves (nobody waits for a late rank to forward) and
  each holder sends to its children in order of their arrival (a rendezvous message to a
  late child does not hold its port before the early children are served). Segments
  follow the tree as in `binomial`. What it buys and what not: the root's own arrival
  gates everything (no rank can get anything earlier), so the tree only saves the time a
  late *relay* would cost: with the binomial tree a late rank at the top of a subtree
  delays its whole subtree by its lateness; here it delays only itself. Without arrivals
  it is a cost-aware greedy tree (on a homogeneous cluster binomial-like).

Options (req.options): none.
"""
from __future__ import annotations

import numpy as np

from ..program import MAX_SEGMENTS, Builder, Piece, Program
from .registry import CollRequest, register


def binomial_edges(p: int) -> list[tuple[int, int, int]]:
    """(round, parent, child) of the binomial tree over relative ranks 0 .. P-1 (MPICH's):
    in round t, with m = 2^(L-1-t) and L = ceil(log2 P), every v that is a multiple of 2m
    sends to v + m (< P). The subtree of child c is [c, c + lowbit(c)) and a parent serves
    its largest subtree first."""
    out = []
    levels = (p - 1).bit_length()
    for t in range(levels):
        m = 1 << (levels - 1 - t)
        out.extend((t, v, v + m) for v in range(0, p - m, 2 * m))
    return out


def tree_transfers(b: Builder, edges, root: int, p: int, nseg: int) -> None:
    """Every segment along every (step, parent, child) edge of a tree over relative
    ranks, segment g of an edge at step g + step."""
    for g in range(nseg):
        for t, u, v in edges:
            b.add(g + t, (u + root) % p, (v + root) % p, [Piece(0, 0, g)])


def _builder(req: CollRequest, nseg: int | None = None) -> Builder:
    return Builder("bcast", req.nranks, nseg or req.nseg, root=req.root)


@register("bcast", "binomial", "binomial tree; whole buffer per message, or pipelined per segment")
def build_binomial(req: CollRequest) -> Program:
    b = _builder(req)
    tree_transfers(b, binomial_edges(req.nranks), req.root, req.nranks, req.nseg)
    return b.build()


@register("bcast", "chain", "pipelined chain root -> root+1 -> ...; segment g on edge k at step g+k")
def build_chain(req: CollRequest) -> Program:
    b = _builder(req)
    p = req.nranks
    tree_transfers(b, [(k, k, k + 1) for k in range(p - 1)], req.root, p, req.nseg)
    return b.build()


def _check_scatter(req: CollRequest) -> str | None:
    if req.nranks * req.nseg > MAX_SEGMENTS:
        return (f"expected P * nseg <= {MAX_SEGMENTS} (the buffer is cut in P chunks of nseg "
                f"segments), got {req.nranks} * {req.nseg}")
    return None


def scatter_allgather_builder(req: CollRequest) -> Builder:
    p, n, root = req.nranks, req.nseg, req.root
    b = _builder(req, p * n)

    def chunks(lo, hi):
        return [Piece(0, 0, c * n + g) for c in range(lo, hi) for g in range(n)]

    held = [set() for _ in range(p)]  # chunks each relative rank holds after the scatter
    held[0] = set(range(p))
    edges = binomial_edges(p)
    for t, u, v in edges:
        hi = min(v + (v & -v), p)  # v's subtree: [v, v + lowbit(v))
        b.add(t, (u + root) % p, (v + root) % p, chunks(v, hi))
        held[v] = set(range(v, hi))
    t0 = edges[-1][0] + 1 if edges else 0
    for k in range(p - 1):
        for v in range(p):
            c, w = (v - k) % p, (v + 1) % p
            if c not in held[w]:
                b.add(t0 + k, (v + root) % p, (w + root) % p, chunks(c, c + 1))
                held[w].add(c)
    return b


@register("bcast", "scatter-ring", "van de Geijn: binomial scatter of P chunks, then ring "
          "allgather (large buffers)", _check_scatter)
def build_scatter_allgather(req: CollRequest) -> Program:
    return scatter_allgather_builder(req).build()


def message_times(req: CollRequest) -> tuple[np.ndarray, np.ndarray]:
    """(latency, transfer) (P, P) seconds of moving the whole buffer from rank u to rank v:
    the message arrives latency + transfer after it starts and holds the sender's port for
    the transfer (module docstring)."""
    from ...inputs.topology import homogeneous

    topo = req.topology
    if topo is None or topo.nranks != req.nranks:
        topo = homogeneous(req.nranks, full_duplex=req.full_duplex)
    with np.errstate(divide="ignore"):
        xfer = float(req.nbytes) / np.asarray(topo.flow_bandwidth(), np.float64)
    return np.asarray(topo.latency, np.float64), xfer


def arrival_tree(req: CollRequest) -> list[tuple[int, int, int]]:
    """(order, parent, child) edges over absolute ranks of the greedy arrival-aware tree,
    in attach order (module docstring)."""
    p, root = req.nranks, req.root
    arr = np.zeros(p) if req.arrivals is None else np.asarray(req.arrivals, np.float64)
    lat, xfer = message_times(req)
    ready = np.full(p, np.inf)  # when a holder's port is next free to send
    ready[root] = arr[root]
    order = sorted((r for r in range(p) if r != root), key=lambda r: (arr[r], (r - root) % p))
    edges = []
    holders = [root]
    for i, v in enumerate(order):
        h = np.asarray(holders)
        done = ready[h] + lat[h, v] + xfer[h, v]
        k = int(np.argmin(done))
        u = holders[k]
        ready[u] += xfer[u, v]
        ready[v] = max(float(done[k]), arr[v])
        holders.append(v)
        edges.append((i, u, v))
    return edges


def _check_arrivals(req: CollRequest) -> str | None:
    if req.arrivals is not None:
        a = np.asarray(req.arrivals, np.float64)
        if a.shape != (req.nranks,) or not np.all(np.isfinite(a)):
            return f"expected {req.nranks} finite arrival times, got shape {a.shape}"
    if req.topology is not None and req.topology.nranks != req.nranks:
        return f"expected a topology with {req.nranks} ranks, got one with {req.topology.nranks}"
    return None


@register("bcast", "arrival-tree", "greedy tree from predicted arrivals: early ranks relay, "
          "late ranks are leaves", _check_arrivals, arrival_aware=True)
def build_arrival_tree(req: CollRequest) -> Program:
    b = _builder(req)
    for g in range(req.nseg):
        for i, u, v in arrival_tree(req):
            b.add(g + i, u, v, [Piece(0, 0, g)])
    return b.build()
