"""Kang et al. 2019: Algorithm 1 (intergroup allgather) and Algorithm 2 (allgatherv).

Both exchange the two groups' data across the groups over as many links at once as the
smaller group allows, leaving every rank with a chunk of the remote group's data such that
the chunks lie in rank order; one ring allgatherv inside each group (concurrently) then
completes the operation with no reordering. docs/intergroup.md gives the decisions taken
where the paper's text is garbled.
"""
from __future__ import annotations

import bisect
from collections import defaultdict

from .groups import A, B, Groups, Transfer, even_cuts
from .plan import Plan, PlanInfo, ring


def plan_kang(groups: Groups) -> Plan:
    """Algorithm 1. The paper assumes q <= p; when p < q the roles swap (B is cut into
    subgroups and A's blocks into segments) and `info.swapped` says so.

    The larger group (n ranks) is split into subgroups s_0 .. s_{m-1}, one per rank of the
    smaller group (m ranks): with r = n mod m, the first r have ceil(n / m) ranks, the
    others floor(n / m); all ranks of s_i precede those of s_j for i < j. The block of
    small rank j is cut into |s_j| segments as even as possible (the first ones larger;
    empty segments when the block is smaller than |s_j|: they produce no transfer). In
    exchange round t the t-th member of s_j sends its block to small rank j and receives
    segment t from it. Then the rings: the larger group circulates the segments (one
    message each), the smaller one the larger group's blocks (one message per block).
    """
    p, q = groups.p, groups.q
    swapped = p < q
    big, small = (B, A) if swapped else (A, B)
    n_big, n_small = groups.size(big), groups.size(small)
    sub = even_cuts(n_big, n_small)
    subgroups = tuple(tuple(range(sub[j], sub[j + 1])) for j in range(n_small))
    off_big, off_small = groups.offsets(big), groups.offsets(small)
    sizes_small = groups.sizes(small)
    out: list[Transfer] = []
    held_big: list[list[tuple[int, int]]] = [[] for _ in range(n_big)]
    held_small: list[list[tuple[int, int]]] = [[] for _ in range(n_small)]
    for j, members in enumerate(subgroups):
        seg = even_cuts(sizes_small[j], len(members))
        bj = groups.rank(small, j)
        for t, i in enumerate(members):
            ai = groups.rank(big, i)
            lo, hi = off_big[i], off_big[i + 1]
            if hi > lo:
                out.append(Transfer(t, ai, bj, big, lo, hi))
            held_small[j].append((lo, hi))
            slo, shi = off_small[j] + seg[t], off_small[j] + seg[t + 1]
            if shi > slo:
                out.append(Transfer(t, bj, ai, small, slo, shi))
            held_big[i].append((slo, shi))
    rounds = max(len(s) for s in subgroups)
    out += ring(groups, big, small, held_big, rounds)
    out += ring(groups, small, big, held_small, rounds)
    chunks_big = tuple([held_big[0][0][0]] + [h[0][1] for h in held_big])
    chunks_small = tuple([0] + [off_big[s[-1] + 1] for s in subgroups])
    chunks_a, chunks_b = (chunks_small, chunks_big) if swapped else (chunks_big, chunks_small)
    n_ring = max(n_big, n_small) - 1
    return Plan(groups, tuple(out), PlanInfo(
        name="kang", chunks_a=chunks_a, chunks_b=chunks_b, subgroups=subgroups,
        swapped=swapped, exchange_steps=rounds, no_waste=True,
        phases=(("exchange", 0, rounds - 1), ("rings", rounds, rounds + n_ring - 1))))


def chunk_cuts(total: int, n: int) -> tuple[int, ...]:
    """Algorithm 2's s_{A,i} (Lines 3-10, corrected): `total` bytes cut into n chunks, the
    first total mod n of ceil(total / n) bytes, the rest floor(total / n)."""
    return even_cuts(total, n)


def exchange_pieces(groups: Groups, src_g: int, cuts: tuple[int, ...]):
    """The pieces of Algorithm 2's Lines 12-14 (or 22-24): every rank of group src_g sends
    the part of its block that falls in chunk k to rank k of the other group.

    Returns {sender: [(receiver, lo, hi), ...]} in receiver rank order (local numbers).
    """
    off = groups.offsets(src_g)
    n_dst = len(cuts) - 1
    pieces: dict[int, list[tuple[int, int, int]]] = {}
    for s in range(groups.size(src_g)):
        lo_s, hi_s = off[s], off[s + 1]
        if hi_s == lo_s:
            continue
        r = bisect.bisect_right(cuts, lo_s) - 1
        mine = []
        while r < n_dst and cuts[r] < hi_s:
            lo, hi = max(lo_s, cuts[r]), min(hi_s, cuts[r + 1])
            if hi > lo:
                mine.append((r, lo, hi))
            r += 1
        pieces[s] = mine
    return pieces


def theorem3_receive_order(pieces) -> dict[int, list[int]]:
    """Every receiver's senders in the order of Theorem 3: the higher-ranked multi-target
    sender first, then the single-target senders in rank order, then the lower-ranked
    multi-target sender. (A receiver has at most two multi-target senders: its first and
    its last; any sender between them has its whole block inside the receiver's chunk.)"""
    senders: dict[int, list[int]] = defaultdict(list)
    for s in sorted(pieces):
        for r, _, _ in pieces[s]:
            senders[r].append(s)
    order = {}
    for r, ss in senders.items():
        if len(ss) == 1:
            order[r] = ss
            continue
        first, last = ss[0], ss[-1]
        head = [last] if len(pieces[last]) > 1 else []
        tail = [first] if len(pieces[first]) > 1 else []
        middle = [s for s in ss if s not in head and s not in tail]
        order[r] = head + middle + tail
    return order


def exchange_steps(pieces, order) -> dict[tuple[int, int], int]:
    """Steps that realise both orders: a sender's pieces in receiver rank order, a
    receiver's in `order`. Each piece gets the length of the longest chain of pieces that
    must precede it (the two orders together are acyclic; checked)."""
    preds: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    succs: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    nodes = [(s, r) for s in pieces for r, _, _ in pieces[s]]
    for s, ps in pieces.items():
        for (r0, _, _), (r1, _, _) in zip(ps, ps[1:]):
            preds[(s, r1)].append((s, r0))
            succs[(s, r0)].append((s, r1))
    for r, ss in order.items():
        for s0, s1 in zip(ss, ss[1:]):
            preds[(s1, r)].append((s0, r))
            succs[(s0, r)].append((s1, r))
    indeg = {v: len(preds[v]) for v in nodes}
    ready = [v for v in nodes if indeg[v] == 0]
    step = {v: 0 for v in nodes}
    done = 0
    while ready:
        v = ready.pop()
        done += 1
        for w in succs[v]:
            step[w] = max(step[w], step[v] + 1)
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    if done != len(nodes):
        raise AssertionError("Theorem 3's orders form a cycle")  # cannot happen: a bug
    return step


def _exchange(groups: Groups, src_g: int, cuts) -> list[Transfer]:
    dst_g = groups.other(src_g)
    pieces = exchange_pieces(groups, src_g, cuts)
    steps = exchange_steps(pieces, theorem3_receive_order(pieces))
    out = []
    for s in sorted(pieces):
        for r, lo, hi in pieces[s]:
            out.append(Transfer(steps[(s, r)], groups.rank(src_g, s), groups.rank(dst_g, r),
                                src_g, lo, hi))
    return out


def plan_kang_v(groups: Groups) -> Plan:
    """Algorithm 2. A's data (K_A bytes) is cut into q chunks (chunk_cuts), chunk k going
    to b_k from the ranks whose blocks it overlaps; B's data into p chunks to the ranks of
    A (Line 23's "b_k" is a_k). Sends and receives follow Theorem 3's order, expressed by
    the steps (exchange_steps). Then a ring allgather over the chunks in each group, one
    message per chunk. Symmetric: no assumption on p versus q."""
    cuts_a = chunk_cuts(groups.total(A), groups.q)   # A's data over B's ranks
    cuts_b = chunk_cuts(groups.total(B), groups.p)   # B's data over A's ranks
    out = _exchange(groups, A, cuts_a) + _exchange(groups, B, cuts_b)
    base = 1 + max((t.step for t in out), default=-1)
    held_b = [[(cuts_a[k], cuts_a[k + 1])] for k in range(groups.q)]
    held_a = [[(cuts_b[k], cuts_b[k + 1])] for k in range(groups.p)]
    out += ring(groups, B, A, held_b, base)
    out += ring(groups, A, B, held_a, base)
    n_ring = max(groups.p, groups.q) - 1
    return Plan(groups, tuple(out), PlanInfo(
        name="kang-v", chunks_a=cuts_b, chunks_b=cuts_a, exchange_steps=base, no_waste=True,
        phases=(("exchange", 0, base - 1), ("rings", base, base + n_ring - 1))))
