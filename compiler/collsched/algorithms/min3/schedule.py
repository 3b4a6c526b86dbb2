"""The recursion down the pool tree (Fig. 7): pools of pools first, top-down, then the
pools of single ranks, each by its engine (pool_schedule); and the schedule built from the
plan (build, registered as "min3")."""
from __future__ import annotations

import numpy as np

from ...inputs import pools as pooltree
from ...model.policy import serial_list_schedule
from ...ir import BACKGROUND, FOREGROUND, Transfers, from_transfers
from ..registry import Request, register
from .input_pool import _nest_rows, _schedule_input_pool
from .leaf_pool import _schedule_leaf_pool
from .model import _Model, _Plan
from .ring import _ring_fits, _schedule_ring
from .rounds import _schedule_rounds

# A pool of single ranks is scheduled exactly (one transfer at a time) when it moves at most
# this many (rank, piece) pairs; larger ones in vectorized rounds.
EXACT_LEAF_LIMIT = 6_000
# Large pools of single ranks go to the ring engine where it fits (_ring_fits); False sends
# them all to the round engine (tests compare the two).
RING_ENGINE = True
# Gateways (beyond the paper; docs/grid.md, "Gateways"): pieces entering a site that the
# ring engine will serve are received by this many of its ranks (its lowest), 0: by any.
RING_GATEWAYS = 1
# Request.aggregate None or True: the gateway plan is made besides the plain one, and the
# shorter planned kept, where ranks^2 x segments is at most this (a second generation is
# cheap there: grid-8x128 at 256 ranks, not at 1024).
GATEWAY_TRY_LIMIT = 300_000


def pool_schedule(req: Request, gateways: int = 0):
    """(plan, tree, model): the greedy's transfers down the whole pool tree (Fig. 7);
    `gateways` > 0: pieces enter each ring site through that many of its ranks only."""
    from ...inputs.topology import homogeneous

    p, k = req.nranks, max(req.nseg, 1)
    topo = req.topology if req.topology is not None else homogeneous(p, full_duplex=req.full_duplex)
    arrivals = np.zeros(p) if req.arrivals is None else np.asarray(req.arrivals, np.float64)
    arrivals = arrivals - arrivals.min() if p else arrivals
    piece = -(-int(req.nbytes) // k)  # the largest piece: segment sizes differ by one byte
    model = _Model(topo, piece, req.full_duplex, arrivals)
    if serial_list_schedule(topo, req.arrivals) if req.serial is None else req.serial:
        model.plan_serial()
    model.direct = not req.relays
    tree = pooltree.pool_tree(topo)
    plan = _Plan()
    n_items = p * k
    # Holders of every piece: {rank: time it holds it}. Only pools above a rank write its
    # entries, and sibling pools share no rank, so pools of pools go first, top-down, and
    # the pools of single ranks after them, in any order.
    holders = [{d // k: float(arrivals[d // k])} for d in range(n_items)]
    leaves = []
    gate = _gateways(tree, model, n_items, gateways)
    stack = [0]
    while stack:
        node = stack.pop()
        kids = pooltree.children(tree, node)
        if not kids:
            continue
        inside = tree.nodes[node]["ranks"]
        groups = [tree.nodes[c]["ranks"] for c in kids]
        # Pools of single ranks go to the fast engines below, unless a shared WAN link runs
        # inside them (sites whose LAN and WAN fall in one band): only the general engine
        # plans for the link.
        across_wan = bool((model.wan_of[np.ix_(inside, inside)] >= 0).any())
        if all(len(g) == 1 for g in groups) and not across_wan:
            leaves.append(inside)
            continue
        local = _local_holders(holders, inside)
        nest = lambda: _nest_rows(tree, node, np.concatenate(groups))  # noqa: E731
        if gate is None:
            _schedule_input_pool(model, plan, local, groups, range(n_items), nest)
        else:
            _schedule_input_pool(model, plan, local, groups, range(n_items), nest,
                                 receivers=[np.asarray(g)[gate[g]] for g in groups])
        for d in range(n_items):  # Fig. 7, lines 4-12: the holder inside each sub-pool
            holders[d].update(local[d])
        stack.extend(reversed(kids))
    # Direct plans (no relays) exist only in the exact engine (policy.DIRECT_MAX_PAIRS).
    limit = np.inf if model.direct else EXACT_LEAF_LIMIT
    large = [r for r in leaves if len(r) * n_items > limit]
    for ranks in leaves:
        if len(ranks) * n_items <= limit:
            local = _local_holders(holders, ranks)
            _schedule_leaf_pool(model, plan, local, ranks, n_items, k)
    above = len(plan)  # the transfers the pools of pools planned
    fits = [RING_ENGINE and _ring_fits(model, plan, above, r) for r in large]
    for ranks in (r for r, f in zip(large, fits) if f):
        _schedule_ring(model, plan, _local_holders(holders, ranks), ranks, n_items, above)
    large = [r for r, f in zip(large, fits) if not f]
    if large:
        local = _local_holders(holders, np.concatenate(large))
        _schedule_rounds(model, plan, local, large, n_items, k)
    return plan, tree, model


def _gateways(tree, model: _Model, n_items: int, k: int) -> np.ndarray | None:
    """Per rank, may it receive a piece entering its site from the pools above (None:
    all may)? With k > 0, in each site the ring engine will serve (a pool of single ranks
    too large for the exact engine, no shared link inside, full duplex, one arrival
    time), only its k lowest ranks may: the gateways.

    Why: the cost model's receive port takes a rank's receives in list order, which is
    start order, so a WAN receive in flight (20-80 ms of latency) keeps every ring
    receive started after it from landing before it does. A site whose WAN pieces enter
    at two adjacent ring ranks stalls its whole ring until they have landed (wan-3x16, 8
    segments: rank 33's 32 WAN receives landed at 77 ms, so the ring 32 -> 33 -> ...
    idled from 0.1 to 77 ms; every other rank of the site waited behind it). With one
    gateway only that rank waits; the others forward as the pieces come."""
    if k <= 0 or model.direct or not (RING_ENGINE and model.full_duplex):
        return None
    allowed = np.ones(len(model.arrival), bool)
    for node in tree.nodes:
        kids = pooltree.children(tree, node)
        ranks = np.asarray(tree.nodes[node]["ranks"], np.int64)
        if not kids or not all(len(tree.nodes[c]["ranks"]) == 1 for c in kids):
            continue
        if (len(ranks) * n_items <= EXACT_LEAF_LIMIT or np.ptp(model.arrival[ranks]) > 0
                or bool((model.wan_of[np.ix_(ranks, ranks)] >= 0).any())):
            continue
        allowed[np.sort(ranks)[k:]] = False
    return None if allowed.all() else allowed


def _local_holders(holders, ranks):
    """Per piece, its holders among `ranks` (one per pool after the parent pool's step)."""
    inside = set(np.asarray(ranks).tolist())
    return [{r: t for r, t in h.items() if r in inside} for h in holders]


def _refuse(req: Request):
    if req.nranks > 1 and req.topology is not None and req.topology.nranks != req.nranks:
        return f"the topology places {req.topology.nranks} ranks, expected {req.nranks}"
    return None


def _plan(req: Request):
    """pool_schedule as Request.aggregate asks. Min3 plans no multi-piece messages (docs/grid.md,
    "Gateways into ring sites": aggregation cannot shorten its plans), so True and None
    (Min3's choice) alike also plan with gateways (_gateways) where that is cheap
    (GATEWAY_TRY_LIMIT) and keep the shorter planned run time (ties: without); False
    plans without, exactly as Min3 did before."""
    plain = pool_schedule(req)
    k = max(req.nseg, 1)
    if req.aggregate is False or not RING_GATEWAYS or req.nranks * req.nranks * k > GATEWAY_TRY_LIMIT:
        return plain
    if _gateways(plain[1], plain[2], req.nranks * k, RING_GATEWAYS) is None:
        return plain  # no ring site: the same plan
    gated = pool_schedule(req, gateways=RING_GATEWAYS)
    planned = [float(x[0].end.max()) if len(x[0]) else 0.0 for x in (plain, gated)]
    return gated if planned[1] < planned[0] else plain


@register("min3", "Min3-Allgather (Gupta & Vadhiyar 2007): greedy down the pool tree; "
                  "arrival-aware with --pap", _refuse)
def build(req: Request):
    p, k = req.nranks, max(req.nseg, 1)
    plan, tree, model = _plan(req)
    src, dst, item, start, end = plan.columns()
    taken = np.arange(len(src))
    order = np.lexsort((taken, start))
    step = np.empty(len(src), np.int64)
    step[order] = taken
    # An op planned before its rank arrives runs in the background: receives, and in serial
    # plans relays of pieces received so (their own piece waits for the arrival). Lists go
    # by planned start, so these ops lead them.
    recv_phase = np.where(start < model.arrival[dst], BACKGROUND, FOREGROUND).astype(np.uint8)
    send_phase = np.where(start < model.arrival[src], BACKGROUND, FOREGROUND).astype(np.uint8)
    origin, segment = item // k, item % k
    sched = from_transfers(p, k, step, src, dst, origin, segment, send_phase,
                           algorithm="min3", recv_phase=recv_phase)
    sched.serial = model.serial  # policy.serial_list_schedule
    # The global order, for the pipeline's receive gating (passes.gate_link_receives).
    sched.transfers = Transfers(step, src, dst, origin, segment, send_phase, recv_phase)
    sched.pool_partitions = pooltree.partitions(tree)
    sched.planned_run_time_s = float(end.max() - model.arrival.min()) if len(end) else 0.0
    return sched

