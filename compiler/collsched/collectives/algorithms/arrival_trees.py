"""Arrival-aware reduce and allreduce: trees built from the predicted arrival pattern
(req.arrivals, seconds per rank, from --pap), so that early ranks combine among
themselves while the late ones are still computing, and a late rank's data needs as few
hops as possible after it arrives.

Both grow the tree greedily from a small cost model (as Huffman's code or an optimal
merge): every rank starts as a partial result ready at its arrival; repeatedly two
partials merge - the sender's holder sends its value to the receiver's holder, which
combines - and the merged partial is ready at
    max(max(ready_sender, arrival_receiver) + L + n / b, ready_receiver + n / b) + gamma n
(L, b: latency and one flow's bandwidth between the two holders from the topology, 50 us
and 125 MB/s without one; gamma: the topology's reduction cost; a large message moves
only once the receiver has arrived and posted its receive; a receiver takes its messages
one after the other through its port). The receiver is the holder of
the partial that holds the root (reduce's root; allreduce's reduction root), else the
partial ready later, so a late rank receives rather than sends and the latest rank's data
is combined last, one combine away from the root. Each holder's list is its receives in
merge order, then its one send: no step waits for a rank that is not needed yet.

- reduce "arrival": the merge tree toward req.root.
- allreduce "arrival": the reduction root is the latest rank (ties: the highest rank), so
  its own contribution is combined last at no message cost, then a broadcast from it
  (`best_bcast`): the greedy LogP tree (every rank that holds the result keeps sending it
  to the next rank that lacks it, the earliest free sender first, each send holding the
  sender's port for n / b and arriving L + n / b later - flat when latency dominates) or
  MPICH's binomial tree, whichever the same cost model predicts to end first. What it buys over rd under
  imbalance: nobody waits for the late rank until the very end (the early ranks' combining
  is off the critical path), and after the last arrival only one combine plus the
  broadcast remain - about the same number of hops as rd's log2 P swaps, so it gains when
  several ranks are late at different times rather than under one late rank; under a
  balanced pattern it is a plain (cost-shaped) tree, not bandwidth optimal - for small and
  medium vectors. On a flat cluster with tiny vectors, the direct reduce-scatter +
  allgather (hier-spread on one site) often beats it: two latencies after the last arrival.

Order (option `order` in req.options): "preserve" merges only partials that are
neighbouring rank intervals (the pair whose merge is ready first): MPI's order, so valid
for non-commutative operations; "any" merges the pair of partials, whatever their ranks,
whose merge is ready first (every pair up to ANY_PAIRS_MAX partials, beyond that the two
ready first: the Huffman-like tree), commutative-only unless it happens to keep the order;
"auto" (default) builds both and keeps "preserve" unless "any" is predicted faster (then
prog.commutative_only says so). prog.notes gets the predicted finish of both (s, from the
first arrival).

Every message carries the whole vector (all nseg segments): trees pay for arrival slack
with latency, not bandwidth.
"""
from __future__ import annotations

import heapq

import numpy as np

from ..program import MAX_SEGMENTS, Builder
from .reduce import binomial_down, segs
from .registry import CollRequest, register

ORDERS = ("auto", "preserve", "any")
ANY_PAIRS_MAX = 64  # "any" compares every pair of partials up to this many (O(P^3) in all)
DEFAULT_LATENCY_S, DEFAULT_BANDWIDTH_BPS = 50e-6, 125e6


class _Costs:
    """Message time and receive-port time per (sender, receiver), and the reduction time
    of n bytes."""

    def __init__(self, req: CollRequest):
        n = float(req.nbytes)
        topo = req.topology
        if topo is None:
            self.msg = lambda s, r: DEFAULT_LATENCY_S + n / DEFAULT_BANDWIDTH_BPS
            self.port = lambda s, r: n / DEFAULT_BANDWIDTH_BPS
            self.red = 0.0
        else:
            lat, flow = topo.latency, topo.flow_bandwidth()
            self.msg = lambda s, r: float(lat[s, r]) + n / float(flow[s, r])
            self.port = lambda s, r: n / float(flow[s, r])
            self.red = float(getattr(topo, "reduction_gamma", 0.0) or 0.0) * n


def _arrivals(req: CollRequest) -> np.ndarray:
    if req.arrivals is None:
        return np.zeros(req.nranks)
    a = np.asarray(req.arrivals, np.float64)
    return a - a.min()


def merge_tree(req: CollRequest, root: int, ordered: bool):
    """Greedy merges (module docstring): ([(sender, receiver, incoming ranks, own ranks)]
    in merge order, predicted ready time of the last partial)."""
    arr = _arrivals(req)
    cost = _Costs(req)
    # A partial: [holder, ranks (sorted list), ready time]; kept in rank order (ordered).
    parts = [[r, [r], float(arr[r])] for r in range(req.nranks)]
    merges = []

    def outcome(u, v):
        if root in v[1] or (root not in u[1] and (v[2], v[0]) >= (u[2], u[0])):
            snd, rcv = u, v
        else:
            snd, rcv = v, u
        t = max(max(snd[2], arr[rcv[0]]) + cost.msg(snd[0], rcv[0]),
                rcv[2] + cost.port(snd[0], rcv[0])) + cost.red
        return t, snd, rcv

    while len(parts) > 1:
        if ordered:
            cands = [(outcome(parts[i], parts[i + 1])[0], i, i + 1) for i in range(len(parts) - 1)]
        elif len(parts) <= ANY_PAIRS_MAX:  # every pair: the merge that is ready first
            cands = [(outcome(parts[i], parts[k])[0], i, k) for i in range(len(parts))
                     for k in range(i + 1, len(parts))]
        else:  # the two partials ready first
            by_ready = sorted(range(len(parts)), key=lambda i: (parts[i][2], parts[i][0]))
            cands = [(0.0, *sorted(by_ready[:2]))]
        _, i, k = min(cands)
        t, snd, rcv = outcome(parts[i], parts[k])
        merges.append((snd[0], rcv[0], list(snd[1]), list(rcv[1])))
        merged = [rcv[0], sorted(snd[1] + rcv[1]), t]
        parts[i] = merged
        del parts[k]
    return merges, (parts[0][2] if parts else 0.0)


class _Recorder:
    """Stands in for a Builder: keeps (step, src, dst) of every add."""

    def __init__(self):
        self.rows: list[tuple[int, int, int]] = []

    def add(self, step, src, dst, pieces, **_):
        self.rows.append((step, src, dst))


def _tree_finish(rows, root: int, cost: "_Costs") -> float:
    """Predicted end of a broadcast given as (step, src, dst) rows: each rank sends in
    step order once it holds the data, one send after the other through its port."""
    have, port, end = {root: 0.0}, {}, 0.0
    for _, src, dst in sorted(rows, key=lambda r: r[0]):
        start = max(have[src], port.get(src, 0.0))
        port[src] = start + cost.port(src, dst)
        have[dst] = start + cost.msg(src, dst)
        end = max(end, have[dst])
    return end


def greedy_rows(req: CollRequest, root: int, cost: "_Costs") -> list[tuple[int, int, int]]:
    """The greedy LogP broadcast tree (module docstring) as (step, src, dst) rows: the
    ranks that lack the data are served in rank order from root + 1 (wrapping), each by
    the holder whose port frees first (ties: the lower rank)."""
    p = req.nranks
    free = [(0.0, root)]  # (when the holder's port is free, holder)
    rows = []
    for i in range(1, p):
        r = (root + i) % p
        t, holder = heapq.heappop(free)
        rows.append((i - 1, holder, r))
        heapq.heappush(free, (t + cost.port(holder, r), holder))
        heapq.heappush(free, (t + cost.msg(holder, r), r))
    return rows


def best_bcast(b: Builder, req: CollRequest, root: int, step0: int) -> str:
    """Broadcast the whole vector from root by the greedy LogP tree or MPICH's binomial
    tree, whichever the cost model predicts to end first (binomial on a tie, within 1%).
    Returns the name of the one used."""
    cost = _Costs(req)
    binomial = _Recorder()
    binomial_down(binomial, [(root + i) % req.nranks for i in range(req.nranks)], 0, ())
    greedy = greedy_rows(req, root, cost)
    use = "binomial"
    if _tree_finish(greedy, root, cost) < 0.99 * _tree_finish(binomial.rows, root, cost):
        use = "greedy"
    for step, src, dst in (greedy if use == "greedy" else binomial.rows):
        b.add(step0 + step, src, dst, segs(0, req.nseg))
    return use


def _in_order(incoming, own) -> tuple[bool, bool]:
    """(keeps MPI's order, local_first) of combining `incoming` into `own`."""
    if incoming[-1] + 1 == own[0] and incoming == list(range(incoming[0], own[0])):
        return own == list(range(own[0], own[-1] + 1)), False
    if own[-1] + 1 == incoming[0] and own == list(range(own[0], incoming[0])):
        return incoming == list(range(incoming[0], incoming[-1] + 1)), True
    return False, incoming[0] > own[-1]


def _tree(req: CollRequest, coll: str, root: int) -> tuple[Builder, int, bool, dict]:
    """The merge tree toward root in a Builder: (builder, steps used, ordered, notes)."""
    order = req.options.get("order", "auto")
    plans = {}
    if order in ("auto", "preserve"):
        plans["preserve"] = merge_tree(req, root, True)
    if order in ("auto", "any"):
        plans["any"] = merge_tree(req, root, False)
    pick = order
    if order == "auto":
        pick = "any" if plans["any"][1] < plans["preserve"][1] * (1 - 1e-9) else "preserve"
    merges = plans[pick][0]
    b = Builder(coll, req.nranks, req.nseg, root=root if coll == "reduce" else 0, algorithm="arrival")
    pieces = segs(0, req.nseg)
    ordered = True
    for step, (snd, rcv, incoming, own) in enumerate(merges):
        keeps, lf = _in_order(incoming, own)
        ordered &= keeps
        b.add(step, snd, rcv, pieces, reduce=True, local_first=lf)
    notes = {"order": pick, "predicted_s": {k: v[1] for k, v in plans.items()}}
    return b, len(merges), ordered, notes


def _check(req: CollRequest) -> str | None:
    order = req.options.get("order", "auto")
    if order not in ORDERS:
        return f"expected option order = auto, preserve or any, got {order!r}"
    if not 1 <= req.nseg <= MAX_SEGMENTS:
        return f"expected 1 to {MAX_SEGMENTS} segments, got {req.nseg}"
    if req.arrivals is not None:
        if len(req.arrivals) != req.nranks:
            return f"expected {req.nranks} arrival times, got {len(req.arrivals)}"
        if not np.all(np.isfinite(np.asarray(req.arrivals, np.float64))):
            return "expected finite arrival times (seconds)"
    if req.topology is not None and req.topology.nranks != req.nranks:
        return f"expected a topology with {req.nranks} ranks, got one with {req.topology.nranks}"
    return None


@register("reduce", "arrival", "arrival-aware tree: early ranks combine first, late ranks "
          "receive and are combined last, next to the root (order kept unless breaking it "
          "is predicted faster)", _check, arrival_aware=True)
def reduce_arrival(req: CollRequest):
    b, _, ordered, notes = _tree(req, "reduce", req.root)
    prog = b.build()
    prog.commutative_only = not ordered
    prog.notes.update(notes)
    return prog


@register("allreduce", "arrival", "arrival-aware: merge tree into the latest rank (early "
          "ranks combine first), then a greedy LogP or binomial broadcast from it", _check, arrival_aware=True)
def allreduce_arrival(req: CollRequest):
    arr = _arrivals(req)
    p = req.nranks
    root = int(max(range(p), key=lambda r: (arr[r], r)))
    b, steps, ordered, notes = _tree(req, "allreduce", root)
    notes["bcast"] = best_bcast(b, req, root, steps)
    prog = b.build()
    prog.commutative_only = not ordered
    notes["reduction_root"] = root
    prog.notes.update(notes)
    return prog
