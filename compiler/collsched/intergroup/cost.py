"""The paper's single-port time model, and the paper's bounds.

Model (Kang et al. 2019, Section 2): moving m bytes takes t_s + m t_w; a rank sends one
message at a time and receives one at a time, both at once (full duplex). `simulate`
times a transfer list: each transfer starts when its source holds its bytes, the
source's send port is free and the destination's receive port is free, the ports taking
their transfers in each rank's operation order (step, then list position). In "blocking"
mode a rank also starts nothing of a step before all its operations of earlier steps have
completed (an implementation whose every step ends in a wait: MPICH's blocking phases);
"dataflow" (the default) has no such wait, as with nonblocking operations.

Bounds, all as times (multiply out t_w, t_s): see each function. Where the paper writes
log it means log2, and the formulas take ceil(log2) for rounds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .groups import A, B, Groups, Transfer, ceil_log2
from .intervals import EarliestMap


@dataclass(frozen=True)
class Timing:
    finish: float                    # the last rank's completion time
    rank_finish: tuple[float, ...]   # per merged rank: its last operation's end (0 if none)
    start: tuple[float, ...]         # per transfer (list order)
    end: tuple[float, ...]


def _per_pair(c):
    """A cost that is one number, or a matrix indexed [src][dst] (per-pair costs)."""
    if hasattr(c, "__len__"):
        return lambda src, dst: float(c[src][dst])
    return lambda src, dst: c


def simulate(groups: Groups, transfers: Sequence[Transfer], *, t_s=0.0, t_w=1.0,
             mode: str = "dataflow") -> Timing:
    """Completion time of `transfers` in the single-port model (module docstring).

    t_s and t_w are numbers, or (n x n) matrices indexed [src][dst] for per-pair costs
    (the grid-aware plan times its candidates so). Raises ValueError when a transfer's
    source never holds its bytes by then (run the checker first: a plan that passes it
    always times)."""
    startup, per_byte = _per_pair(t_s), _per_pair(t_w)
    if mode not in ("dataflow", "blocking"):
        raise ValueError(f"mode must be dataflow or blocking, not {mode!r}")
    n = groups.nranks
    held: dict[tuple[int, int], EarliestMap] = {}
    for r in range(n):
        g, lo, hi = groups.own_range(r)
        held[(r, g)] = EarliestMap()
        held[(r, g)].add(lo, hi, 0.0)
        held[(r, groups.other(g))] = EarliestMap()
    send_free = [0.0] * n
    recv_free = [0.0] * n
    done_before = [0.0] * n     # blocking: end of the rank's earlier steps
    cur_step = [-1] * n
    cur_end = [0.0] * n
    rank_finish = [0.0] * n
    start = [0.0] * len(transfers)
    end = [0.0] * len(transfers)
    blocking = mode == "blocking"

    def barrier(r, step):
        if cur_step[r] < step:
            done_before[r] = max(done_before[r], cur_end[r])
            cur_step[r] = step
        return done_before[r]

    for i in sorted(range(len(transfers)), key=lambda i: (transfers[i].step, i)):
        t = transfers[i]
        ready = held[(t.src, t.group)].latest(t.lo, t.hi)
        if ready is None:
            raise ValueError(f"transfer {i} {t}: rank {t.src} never holds the bytes it sends")
        s = max(ready, send_free[t.src], recv_free[t.dst], 0.0)
        if blocking:
            s = max(s, barrier(t.src, t.step), barrier(t.dst, t.step))
        e = s + startup(t.src, t.dst) + (t.hi - t.lo) * per_byte(t.src, t.dst)
        start[i], end[i] = s, e
        send_free[t.src] = e
        recv_free[t.dst] = e
        for r in (t.src, t.dst):
            cur_end[r] = max(cur_end[r], e)
            rank_finish[r] = max(rank_finish[r], e)
        held[(t.dst, t.group)].add(t.lo, t.hi, e)
    return Timing(max(rank_finish, default=0.0), tuple(rank_finish), tuple(start), tuple(end))


def time_of(plan, **kw) -> float:
    return simulate(plan.groups, plan.transfers, **kw).finish


# ---- the paper's bounds -------------------------------------------------------------

def lower_bound_m(groups: Groups, t_w: float = 1.0) -> float:
    """M = max(sum k_A, sum k_B) t_w (Section 2.2 and 4.1): a rank of B must receive all of
    A's data through one port, a rank of A all of B's."""
    return max(groups.total(A), groups.total(B)) * t_w


def _equal(groups: Groups) -> tuple[int, int, int, int]:
    """(p, q, k_A, k_B) with p >= q (roles swapped otherwise, as the paper's "without loss of
    generality"); requires equal block sizes within each group."""
    if len(set(groups.sizes_a)) != 1 or len(set(groups.sizes_b)) != 1:
        raise ValueError("this bound is for allgather (equal block sizes in each group)")
    p, q, ka, kb = groups.p, groups.q, groups.sizes_a[0], groups.sizes_b[0]
    return (p, q, ka, kb) if q <= p else (q, p, kb, ka)


def theorem1_bound(groups: Groups, t_s: float = 0.0, t_w: float = 1.0) -> float:
    """Theorem 1: Algorithm 1's transfer time is at most (M + k_B) t_w (k_B: the smaller
    group's block), plus its startup terms ceil(p/q) t_s + ceil(log2 p) t_s. Its proof
    takes p/q as an integer: with q | p and |s_j| | k_B it holds of `plan_kang` exactly;
    otherwise see kang_bound. The startup terms are the paper's (a Bruck allgather, log2 p
    rounds); `plan_kang`'s rings take n - 1 steps, so with t_s > 0 compare transfer
    terms only."""
    p, q, ka, kb = _equal(groups)
    return (max(p * ka, q * kb) + kb) * t_w + (-(-p // q) + ceil_log2(p)) * t_s


def kang_bound(groups: Groups, t_w: float = 1.0) -> float:
    """The first line of the proof of Theorem 1 (Eq. 3) with the rounding of any p, q, k:
    exchange max(c k_A, k_B) then rings max((q - 1) c k_A, (p - 1) ceil(k_B / f)), where
    c = ceil(p/q), f = floor(p/q) (p >= q after swapping). An upper bound on
    `plan_kang`'s transfer time (t_s = 0) for every shape; equal to M + k_B t_w's
    argument when q | p and f | k_B; up to about 2M when f = 1 and p nears 2q."""
    p, q, ka, kb = _equal(groups)
    c, f = -(-p // q), p // q
    return (max(c * ka, kb) + max((q - 1) * c * ka, (p - 1) * -(-kb // f))) * t_w


def theorem3_bound(groups: Groups, t_w: float = 1.0) -> float:
    """Theorem 3 (Eq. 4): max(K_A + max k_A, K_B + max k_B) t_w + log2(pq) t_w (the last
    term is the Allreduce of the sizes, which the transfer list does not contain)."""
    ka, kb = groups.total(A), groups.total(B)
    return (max(ka + max(groups.sizes_a), kb + max(groups.sizes_b))
            + math.log2(groups.p * groups.q)) * t_w


def kang_v_bound(groups: Groups, t_w: float = 1.0) -> float:
    """What `plan_kang_v` provably meets (t_s = 0; docs/intergroup.md): the exchange ends
    by X = max(ceil(K_A/q), max k_A, ceil(K_B/p), max k_B) (a receiver under Theorem 3's
    order takes its chunk compactly except for waiting on its lower multi-target sender,
    whose earlier sends are back to back), then each group's ring moves n - 1 chunks:
    X + max((q - 1) ceil(K_A/q), (p - 1) ceil(K_B/p)). Eq. 4 drops the wait of a ring for
    its ranks' own exchange sends, which is why it can fail (a test shows where)."""
    p, q, ka, kb = groups.p, groups.q, groups.total(A), groups.total(B)
    ca, cb = -(-ka // q), -(-kb // p)
    x = max(ca, max(groups.sizes_a), cb, max(groups.sizes_b))
    return (x + max((q - 1) * ca, (p - 1) * cb)) * t_w


def eq1_bound(groups: Groups, t_s: float = 0.0, t_w: float = 1.0) -> float:
    """Eq. 1 (root gathering with an optimal broadcast): alpha t_s + (max((p-1) k_A,
    (q-1) k_B) + 2M) t_w, alpha = 1 + 2 log2 p, generalised to block vectors as
    max(K_A - k_A[0], K_B - k_B[0]) + 2 max(K_A, K_B). (The paper's second line,
    max((3p-1) k_A, (3q-1) k_B), equals it when one group dominates both terms.)"""
    ka, kb = groups.total(A), groups.total(B)
    gather = max(ka - groups.sizes_a[0], kb - groups.sizes_b[0])
    alpha = 1 + 2 * math.log2(max(groups.p, groups.q))
    return alpha * t_s + (gather + 2 * max(ka, kb)) * t_w


def eq2_bound(groups: Groups, t_s: float = 0.0, t_w: float = 1.0) -> float:
    """Eq. 2 (MPICH's root gathering): beta t_s + (max((p-1) k_A, (q-1) k_B) + 3 p k_A
    + 3 q k_B) t_w, beta = 2 + 2 log2 p + log2 q; for vectors K_A - k_A[0] etc."""
    ka, kb = groups.total(A), groups.total(B)
    gather = max(ka - groups.sizes_a[0], kb - groups.sizes_b[0])
    beta = 2 + 2 * math.log2(max(groups.p, groups.q)) + math.log2(min(groups.p, groups.q))
    return beta * t_s + (gather + 3 * ka + 3 * kb) * t_w


def eq5_ratio(groups: Groups) -> float:
    """Eq. 5: (M + 3 K_A + 3 K_B) / M, the improvement the paper expects of Algorithms 1
    and 2 over MPICH's root gathering for large messages (Eq. 2's transfer term with the
    gather taken as M, over M)."""
    m = max(groups.total(A), groups.total(B))
    return (m + 3 * groups.total(A) + 3 * groups.total(B)) / m


def root_gather_binomial_time(n: int, k: int, t_w: float = 1.0) -> float:
    """`plan_root_gather`'s time when p = q = n = 2^L and every block has k bytes (t_s = 0):
    the gather (n - 1) k, the swap n k, a binomial broadcast of L whole messages L n k.
    For n = 2 this is Eq. 1's transfer term (3p - 1) k exactly."""
    return ((n - 1) + n + ceil_log2(n) * n) * k * t_w


def mpich_time(n: int, k: int, t_w: float = 1.0) -> float:
    """`plan_root_gather_mpich`'s time in blocking mode when p = q = n = 2^L and every
    block has k bytes (t_s = 0): gather (n - 1) k, two root exchanges of n k, two
    broadcasts of 2 (n - 1) k (scatter, ring): (7n - 5) k, Eq. 2's (7n - 1) k less the
    two broadcasts' (n - 1)/n factor."""
    return (7 * n - 5) * k * t_w
