"""Grid-aware intergroup allgather(v): Kang et al.'s exchange made site-aware (issue 19).

When the ranks sit on several sites joined by slow wide-area links, Algorithm 1 still
sends each byte across the A/B boundary once, but its intragroup rings follow rank order
and cross a wide-area link at every hop between sites, and its exchange pairs ignore
where ranks are. `plan_kang_grid` plans per *receiving site* instead:

1. Exchange. For every site t and every group g with ranks on t (the receivers
   R), every source site s cuts the other group's data held on s (its blocks, in rank
   order) into parts, one per receiver (kang-v's chunks, restricted to one site pair);
   each owner sends the part of its block in a part straight to that part's receiver.
   So each byte enters each receiving site exactly once, from its home site, and a site's
   local data goes over its LAN (Kang's exchange when both groups share a site).
   `wan_flows` caps the number of parts of a wide-area site pair (fewer receivers there;
   a part still comes from every owner it overlaps: no gather on the sending side); the
   receivers of successive remote sites rotate so that the slow parts spread over the
   receiving site's ranks.
2. Rings (the steps after). Inside every site, each group's ranks on it circulate what they
   received, one message per contiguous piece, earliest-arriving first: all local.

The exchange's order is picked in the single-port model with per-pair costs (t_s, t_w
per pair of ranks; `plan_kang_grid_on` takes them from a topology) among: each site
pair's pieces stepped by Theorem 3's order (kang-v's), the pairs merged step by step; a
greedy list order (each time the piece that can start first); and, when each group sits
on one site, Algorithm 1 itself. With one site per group the first is kang-v's plan, so
the result is never slower there than Algorithm 1 or 2 in that model (docs/intergroup.md,
"Grid-aware variant", says why nothing better exists there).

Also here: the wide-area accounting the variant is judged by (bytes that cross sites, the
minimum, a byte entering a site twice), the single-port model with per-pair costs
(`simulate_pairs`: cost.simulate with per-pair costs), and the sites of a topology.
"""
from __future__ import annotations

import heapq
from typing import Callable, Hashable, Optional, Sequence

import numpy as np

from ..errors import InputError
from .check import Violation
from . import cost
from .cost import Timing
from .groups import A, B, GROUP_NAMES, Groups, Transfer, even_cuts
from .intervals import EarliestMap
from .kang import exchange_steps, plan_kang, theorem3_receive_order
from .plan import Plan, PlanInfo

# Per-byte cost of a wide-area byte over a local one, for ordering the exchange when no
# per-pair costs are given (the three-site grid's ratio is ~60, wan-3x16's ~12 per flow).
WAN_WEIGHT = 10.0
SOURCE = "plan_kang_grid"


# ---- sites ---------------------------------------------------------------------------

def site_indices(site_of_rank: Sequence[Hashable], nranks: int) -> tuple[int, ...]:
    """Site labels (any hashable, one per merged rank) as 0, 1, .. by first appearance."""
    labels = list(site_of_rank)
    if len(labels) != nranks:
        raise InputError(SOURCE, "site_of_rank", f"expected one site per merged rank "
                         f"({nranks}: A's ranks then B's), got {len(labels)}")
    index: dict[Hashable, int] = {}
    try:
        return tuple(index.setdefault(lab, len(index)) for lab in labels)
    except TypeError:
        raise InputError(SOURCE, "site_of_rank", "expected hashable site labels") from None


def sites_from_topology(topo, p: int, q: int, by: str = "site") -> tuple[int, ...]:
    """The site of each merged rank (A's p, then B's q: topology ranks 0 .. p + q - 1).

    by="site": the topology's site labels (each WAN link joins two of them); by="pool":
    the pool tree's top-level partition (pools.py: the slowest band that disconnects the
    ranks; it may join sites whose links are faster than the slowest, as the three-site
    grid's UK and NTH)."""
    n = p + q
    if topo.nranks < n:
        raise InputError(topo.source, "nranks", f"expected a topology with at least {n} "
                         f"ranks (p + q = {p} + {q}), got {topo.nranks}")
    if by == "site":
        return site_indices(topo.rank_site()[:n], n)
    if by == "pool":
        from ..inputs import pools
        tree = pools.pool_tree(topo)
        label = np.zeros(topo.nranks, np.int64)
        for i, child in enumerate(pools.children(tree, 0)):
            label[tree.nodes[child]["ranks"]] = i
        return site_indices([int(x) for x in label[:n]], n)
    raise InputError(SOURCE, "by", f"expected 'site' or 'pool', got {by!r}")


def _members(groups: Groups, site: Sequence[int], g: int) -> dict[int, list[int]]:
    """Merged ranks of group g on each site, in rank order."""
    out: dict[int, list[int]] = {}
    for i in range(groups.size(g)):
        r = groups.rank(g, i)
        out.setdefault(site[r], []).append(r)
    return out


# ---- costs ---------------------------------------------------------------------------

def site_costs(site: Sequence[int], lan: tuple[float, float] = (0.0, 1.0),
               wan: tuple[float, float] = (0.0, WAN_WEIGHT)) -> tuple[np.ndarray, np.ndarray]:
    """(t_s, t_w) per pair of ranks: `lan` = (t_s, t_w) inside a site, `wan` across."""
    s = np.asarray(site)
    same = s[:, None] == s[None, :]
    return np.where(same, lan[0], wan[0]), np.where(same, lan[1], wan[1])


def topology_costs(topo, nranks: int) -> tuple[np.ndarray, np.ndarray]:
    """(t_s, t_w) per pair of the first `nranks` ranks: the latency and 1 / one flow's
    bandwidth (the TCP window's cap included), the topology's constant-cost terms."""
    if topo.nranks < nranks:
        raise InputError(topo.source, "nranks", f"expected a topology with at least "
                         f"{nranks} ranks, got {topo.nranks}")
    t_s = np.array(topo.latency[:nranks, :nranks], np.float64)
    with np.errstate(divide="ignore"):
        t_w = 1.0 / np.asarray(topo.flow_bandwidth()[:nranks, :nranks], np.float64)
    np.fill_diagonal(t_w, 0.0)
    return t_s, t_w


def simulate_pairs(groups: Groups, transfers: Sequence[Transfer], t_s, t_w) -> Timing:
    """cost.simulate's dataflow single-port model with per-pair costs: a transfer src ->
    dst of m bytes takes t_s[src][dst] + m t_w[src][dst]."""
    return cost.simulate(groups, transfers, t_s=t_s, t_w=t_w)


def _fast_timing(groups: Groups, transfers: Sequence[Transfer], t_s, t_w):
    """simulate_pairs's (finish, ends), for plans in which no rank receives a byte twice
    (the candidates here: no waste, checked): a range a rank received whole is looked up
    in a dictionary, any other in an interval map of its receipts built only then (a
    ring's joined ranges). Several times faster than simulate_pairs on hundreds of ranks."""
    n = groups.nranks
    t_s = np.asarray(t_s, np.float64).tolist()
    t_w = np.asarray(t_w, np.float64).tolist()
    own = [groups.own_range(r) for r in range(n)]
    got: dict[tuple[int, int, int, int], float] = {}
    receipts: dict[tuple[int, int], list[tuple[int, int, float]]] = {}
    maps: dict[tuple[int, int], tuple[int, EarliestMap]] = {}
    send_free, recv_free = [0.0] * n, [0.0] * n
    finish, ends = 0.0, [0.0] * len(transfers)
    for i in sorted(range(len(transfers)), key=lambda i: (transfers[i].step, i)):
        src, dst, g, lo, hi = transfers[i][1:]
        og, olo, ohi = own[src]
        ready = 0.0 if og == g and olo <= lo and hi <= ohi else got.get((src, g, lo, hi))
        if ready is None:
            mine = receipts.get((src, g), [])
            used, m = maps.get((src, g), (0, EarliestMap()))
            for rlo, rhi, e in mine[used:]:
                m.add(rlo, rhi, e)
            maps[(src, g)] = (len(mine), m)
            ready = m.latest(lo, hi)
            if ready is None:
                raise ValueError(f"transfer {i}: rank {src} never holds the bytes it sends")
        s = max(ready, send_free[src], recv_free[dst])
        e = s + t_s[src][dst] + (hi - lo) * t_w[src][dst]
        got[(dst, g, lo, hi)] = ends[i] = send_free[src] = recv_free[dst] = e
        receipts.setdefault((dst, g), []).append((lo, hi, e))
        finish = max(finish, e)
    return finish, ends


# ---- wide-area accounting ------------------------------------------------------------

def wide_area_bytes(plan: Plan, site_of_rank: Sequence[Hashable]) -> int:
    """Bytes of the transfers whose two ends are on different sites (every pair of sites
    has its own link in collsched's topologies, so this is also bytes x links crossed)."""
    site = site_indices(site_of_rank, plan.groups.nranks)
    return sum(t.size for t in plan.transfers if site[t.src] != site[t.dst])


def wide_area_minimum(groups: Groups, site_of_rank: Sequence[Hashable]) -> int:
    """The least wide-area bytes of any correct plan: every byte of a rank's block must
    enter every *other* site holding ranks of the other group, each entry a crossing."""
    site = site_indices(site_of_rank, groups.nranks)
    sites_of = [{site[r] for r in range(groups.nranks) if groups.group_of(r) == g}
                for g in (A, B)]
    total = 0
    for r in range(groups.nranks):
        g, lo, hi = groups.own_range(r)
        total += (hi - lo) * len(sites_of[groups.other(g)] - {site[r]})
    return total


def wide_area_violations(plan: Plan, site_of_rank: Sequence[Hashable]) -> list[Violation]:
    """Each byte enters each site at most once (a site already holds its ranks' blocks):
    one `wide-area` violation per transfer bringing bytes its destination site had."""
    groups = plan.groups
    site = site_indices(site_of_rank, groups.nranks)
    entered: dict[tuple[int, int], EarliestMap] = {}
    for r in range(groups.nranks):
        g, lo, hi = groups.own_range(r)
        entered.setdefault((site[r], g), EarliestMap()).add(lo, hi, -1)
    out = []
    order = sorted(range(len(plan.transfers)), key=lambda i: (plan.transfers[i].step, i))
    for i in order:
        t = plan.transfers[i]
        if site[t.src] == site[t.dst]:
            continue
        again = entered.setdefault((site[t.dst], t.group), EarliestMap()).add(t.lo, t.hi, t.step)
        if again:
            out.append(Violation("wide-area", f"{again} bytes of {GROUP_NAMES[t.group]}"
                                 f"[{t.lo}, {t.hi}) enter site {site[t.dst]} again "
                                 f"(from rank {t.src})", transfer=i, rank=t.dst))
    return out


# ---- the plan ------------------------------------------------------------------------

def _cut(blocks: list[tuple[int, int, int]], n: int) -> list[list[tuple[int, int, int]]]:
    """blocks (owner, lo, hi), taken as one sequence, cut into n parts as even as possible
    (even_cuts): per part the (owner, lo, hi) pieces of it, empty pieces left out."""
    total = sum(hi - lo for _, lo, hi in blocks)
    cuts = even_cuts(total, n)
    parts: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    k, pos = 0, 0       # part, position of the current block's start in the sequence
    for owner, lo, hi in blocks:
        end = pos + hi - lo
        while k < n and cuts[k] < end:
            a, b = max(pos, cuts[k]), min(end, cuts[k + 1])
            if b > a:
                parts[k].append((owner, lo + a - pos, lo + b - pos))
            if cuts[k + 1] > end:
                break
            k += 1
        pos = end
    return parts


def _site_pairs(groups: Groups, site: Sequence[int], wan_flows: Optional[int]):
    """The exchange, per (group g, source site, receiving site): (g, wide-area?, receiver
    of each part, {owner: [(part, lo, hi), ...]}) with every owner's pieces in part order,
    the structure of kang-v's exchange (kang.exchange_pieces) over one site pair."""
    out = []
    for g in (A, B):
        senders, receivers = _members(groups, site, g), _members(groups, site, groups.other(g))
        off = groups.offsets(g)
        for t_site, recv in sorted(receivers.items()):
            n, rot = len(recv), 0
            for s_site, owners in sorted(senders.items(), key=lambda kv: (kv[0] != t_site, kv[0])):
                blocks = [(r, off[groups.local(r)], off[groups.local(r) + 1]) for r in owners]
                wide = s_site != t_site
                m = max(1, min(n, wan_flows)) if wide and wan_flows is not None else n
                dst = [recv[(rot + k) % n] if wide else recv[k] for k in range(m)]
                pieces: dict[int, list[tuple[int, int, int]]] = {}
                for k, part in enumerate(_cut(blocks, m)):
                    for owner, lo, hi in part:
                        pieces.setdefault(owner, []).append((k, lo, hi))
                out.append((g, wide, dst, pieces))
                rot += m if wide else 0
    return out


def _theorem3_exchange(groups: Groups, pairs) -> list[Transfer]:
    """Each site pair's pieces stepped as kang-v steps its exchange (Theorem 3's receive
    order), the pairs merged step by step, wide-area pieces first within a step."""
    rows = []
    for index, (g, wide, dst, pieces) in enumerate(pairs):
        steps = exchange_steps(pieces, theorem3_receive_order(pieces))
        for owner in sorted(pieces):
            for k, lo, hi in pieces[owner]:
                rows.append(((steps[(owner, k)], not wide, index),
                             Transfer(steps[(owner, k)], owner, dst[k], g, lo, hi)))
    return [t for _, t in sorted(rows, key=lambda row: row[0])]


def _greedy_exchange(groups: Groups, pairs, t_s, t_w) -> list[Transfer]:
    """All pieces in step 0, listed in the order of a greedy list schedule: each time the
    piece that can start first in the single-port model (every source holds its block
    from the start; ties: the longer first), as a lazy heap since a piece's earliest start
    only grows."""
    flat = [(owner, dst[k], g, lo, hi) for g, _, dst, pieces in pairs
            for owner in sorted(pieces) for k, lo, hi in pieces[owner]]
    n = len(t_s)
    send_free, recv_free = [0.0] * n, [0.0] * n
    cost = [float(t_s[s][d]) + (hi - lo) * float(t_w[s][d]) for s, d, _, lo, hi in flat]
    heap = [(0.0, -cost[i], i) for i in range(len(flat))]
    heapq.heapify(heap)
    out = []
    while heap:
        key, neg, i = heapq.heappop(heap)
        s, d = flat[i][0], flat[i][1]
        start = max(send_free[s], recv_free[d])
        if start > key:
            heapq.heappush(heap, (start, neg, i))
            continue
        send_free[s] = recv_free[d] = start + cost[i]
        out.append(Transfer(0, *flat[i]))
    return out


def _site_ring(members: list[int], data: int, held, base: int) -> list[Transfer]:
    """Ring allgatherv over `members` (merged ranks of one site): in ring step t (global
    step base + t) member i forwards member (i - t)'s pieces to member i + 1."""
    n, out = len(members), []
    for t in range(n - 1):
        for i in range(n):
            for lo, hi in held.get(members[(i - t) % n], []):
                out.append(Transfer(base + t, members[i], members[(i + 1) % n], data, lo, hi))
    return out


def _with_rings(groups: Groups, site: Sequence[int], exchange: list[Transfer], t_s, t_w
                ) -> tuple[list[Transfer], int]:
    """The exchange followed by each site's rings, and the rings' first step. A ring
    forwards each contiguous range a rank received as one message, in the order the model
    says they arrive (so a late wide-area piece does not hold up local ones)."""
    arrive = _fast_timing(groups, exchange, t_s, t_w)[1]
    got: dict[int, list[list]] = {}
    for t, when in sorted(zip(exchange, arrive), key=lambda x: (x[0].dst, x[0].lo)):
        mine = got.setdefault(t.dst, [])
        if mine and mine[-1][1] == t.lo:
            mine[-1][1], mine[-1][2] = t.hi, max(mine[-1][2], when)
        else:
            mine.append([t.lo, t.hi, when])
    held = {r: [(lo, hi) for lo, hi, _ in sorted(v, key=lambda x: (x[2], x[0]))]
            for r, v in got.items()}
    base = 1 + max((t.step for t in exchange), default=-1)
    out = list(exchange)
    for g in (A, B):
        for members in _members(groups, site, g).values():
            out += _site_ring(members, groups.other(g), held, base)
    return out, base


def plan_kang_grid(groups: Groups, site_of_rank: Sequence[Hashable], *,
                   costs: Optional[tuple] = None, wan_flows: Optional[int] = None) -> Plan:
    """The grid-aware exchange plan (module docstring).

    site_of_rank: a site label per merged rank (A's p, then B's q). costs: (t_s, t_w) per
    pair of merged ranks (arrays or nested lists), the model that picks among the
    candidate orders; default site_costs(site) (a wide-area byte WAN_WEIGHT times a local
    one, no startup). wan_flows: at most this many parts per wide-area site pair and
    direction (None: one per rank of the receiving site).

    Candidates, the fastest in that model kept (ties: the first): the exchange stepped by
    Theorem 3's order per site pair; the greedy list order; and when each group sits on
    one site, Algorithm 1 itself (`plan_kang`: its pairing is as good as any there, and
    with startup costs its fewer messages can win)."""
    site = site_indices(site_of_rank, groups.nranks)
    if wan_flows is not None and (isinstance(wan_flows, bool) or not isinstance(wan_flows, int)
                                  or wan_flows < 1):
        raise InputError(SOURCE, "wan_flows", f"expected an integer >= 1 or None, got {wan_flows!r}")
    t_s, t_w = site_costs(site) if costs is None else costs
    if np.shape(t_s) != (groups.nranks,) * 2 or np.shape(t_w) != (groups.nranks,) * 2:
        raise InputError(SOURCE, "costs", f"expected two {groups.nranks} x {groups.nranks} "
                         f"matrices (t_s, t_w per pair of merged ranks)")
    pairs = _site_pairs(groups, site, wan_flows)
    candidates = [("site pairs, Theorem 3's order",
                   *_with_rings(groups, site, _theorem3_exchange(groups, pairs), t_s, t_w)),
                  ("site pairs, greedy order",
                   *_with_rings(groups, site, _greedy_exchange(groups, pairs, t_s, t_w), t_s, t_w))]
    if all(len(_members(groups, site, g)) == 1 for g in (A, B)):
        kang = plan_kang(groups)
        candidates.append(("Algorithm 1", list(kang.transfers), kang.info.exchange_steps))
    times = [_fast_timing(groups, transfers, t_s, t_w)[0] for _, transfers, _ in candidates]
    how, transfers, exchange = candidates[times.index(min(times))]
    last = max((t.step for t in transfers), default=0)
    return Plan(groups, tuple(transfers), PlanInfo(
        name="kang-grid", exchange_steps=exchange, no_waste=True,
        phases=((f"exchange ({how})", 0, exchange - 1), ("rings", exchange, last))))


def plan_kang_grid_on(topo, by: str = "site", wan_flows: Optional[int] = None
                      ) -> Callable[[Groups], Plan]:
    """plan_kang_grid with the sites and per-pair costs of a topology (merged rank r on
    topology rank r): a function of the groups alone, as the other plans are."""
    def plan(groups: Groups) -> Plan:
        site = sites_from_topology(topo, groups.p, groups.q, by)
        return plan_kang_grid(groups, site, costs=topology_costs(topo, groups.nranks),
                              wan_flows=wan_flows)
    return plan
