"""The root gathering baselines of Kang et al. 2019, Section 3.1.

Each group gathers its data at its rank 0 (a binomial tree), the two roots exchange what
they gathered, each root broadcasts the remote data in its group.

- `plan_root_gather` (Eq. 1): the three stages overlapped wherever the data allows: every
  transfer gets the earliest step at which its source holds its data, so a root forwards
  the remote data as soon as it has it. Broadcasts are binomial trees of whole messages
  (Eq. 1 assumes an optimal, pipelined broadcast: the two agree for groups of up to two
  ranks; docs/intergroup.md).
- `plan_root_gather_mpich` (Eq. 2): one phase after another, in MPICH's order
  (MPIR_Allgather_inter_local_gather_remote_bcast, A being the low group): both local
  gathers; a_0 sends A's data to b_0, which broadcasts it in B; then b_0 sends B's data to
  a_0, which broadcasts it in A. A local broadcast is MPICH's long-message one: a binomial
  scatter of ceil(m / n)-byte pieces, then a ring allgather of the pieces.
"""
from __future__ import annotations

from .groups import A, B, Groups, Transfer, ceil_log2
from .plan import Plan, PlanInfo, ring


def binomial_gather(groups: Groups, g: int, start: int = 0) -> tuple[list[Transfer], int]:
    """Binomial gather of group g's data at its rank 0. In round j, rank r with
    r mod 2^(j+1) = 2^j sends the blocks of ranks [r, min(r + 2^j, n)) (contiguous bytes)
    to r - 2^j, at the first step after its last receive. Returns the transfers and the
    step from which the root holds everything."""
    n, off = groups.size(g), groups.offsets(g)
    ready = [start] * n
    out = []
    for j in range(ceil_log2(n)):
        m = 1 << j
        for r in range(m, n, 2 * m):
            top = min(r + m, n)
            if off[top] > off[r]:
                st = ready[r]
                out.append(Transfer(st, groups.rank(g, r), groups.rank(g, r - m), g,
                                    off[r], off[top]))
                ready[r - m] = max(ready[r - m], st + 1)
    return out, ready[0]


def tree_edges(n: int):
    """Binomial tree from rank 0, farthest child first: (parent, child, subtree end) in an
    order where a parent's edges follow its send order and come after its own receive."""
    levels = ceil_log2(n)
    for j in range(levels):
        mask = 1 << (levels - 1 - j)
        for r in range(0, n, 2 * mask):
            if r + mask < n:
                yield r, r + mask, min(r + 2 * mask, n)


def _tree_sends(groups: Groups, g: int, data: int, start: int, ranges) -> tuple[list[Transfer], int]:
    """Sends along tree_edges of group g, each at the earliest step: when its parent holds
    the data (it received it the step before; the root from `start`) and has sent its
    previous message. `ranges(child, end)` gives the bytes sent to `child`."""
    n = groups.size(g)
    ready = {0: start}
    free = {}
    out, last = [], start - 1
    for par, child, end in tree_edges(n):
        st = max(ready[par], free.get(par, start))
        lo, hi = ranges(child, end)
        if hi > lo:
            out.append(Transfer(st, groups.rank(g, par), groups.rank(g, child), data, lo, hi))
            last = max(last, st)
        free[par] = st + 1
        ready[child] = st + 1
    return out, last


def binomial_bcast(groups: Groups, g: int, data: int, lo: int, hi: int,
                   start: int) -> tuple[list[Transfer], int]:
    """Group g's rank 0, holding [lo, hi) of group `data` from step `start`, broadcasts it
    along a binomial tree, whole. Returns the transfers and the last step used."""
    return _tree_sends(groups, g, data, start, lambda child, end: (lo, hi))


def scatter_allgather_bcast(groups: Groups, g: int, data: int, lo: int, hi: int,
                            start: int) -> tuple[list[Transfer], int]:
    """MPICH's long-message broadcast: rank r's piece is bytes [r c, (r + 1) c) of the
    message (c = ceil(m / n), clipped: trailing pieces may be empty); a binomial scatter
    gives every rank its piece, then a ring allgather of the pieces (n - 1 steps)."""
    n, m = groups.size(g), hi - lo
    c = -(-m // n) if n else 0

    def piece_lo(r):
        return lo + min(r * c, m)

    scat, last = _tree_sends(groups, g, data, start,
                             lambda child, end: (piece_lo(child), piece_lo(end)))
    base = max(last + 1, start)
    held = [[(piece_lo(r), piece_lo(r + 1))] for r in range(n)]
    rng = ring(groups, g, data, held, base)
    return scat + rng, max([last] + [t.step for t in rng])


def plan_root_gather(groups: Groups) -> Plan:
    """Eq. 1's algorithm with its stages overlapped as far as the data allows."""
    gat_a, ra = binomial_gather(groups, A)
    gat_b, rb = binomial_gather(groups, B)
    a0, b0 = groups.rank(A, 0), groups.rank(B, 0)
    ka, kb = groups.total(A), groups.total(B)
    swap = []
    if ka:
        swap.append(Transfer(ra, a0, b0, A, 0, ka))
    if kb:
        swap.append(Transfer(rb, b0, a0, B, 0, kb))
    # A root holds B's data from the step after it received it (and B's root likewise).
    bc_a, la = binomial_bcast(groups, A, B, 0, kb, rb + 1)
    bc_b, lb = binomial_bcast(groups, B, A, 0, ka, ra + 1)
    out = gat_a + gat_b + swap + bc_a + bc_b
    return Plan(groups, tuple(out), PlanInfo(
        name="root-gather", no_waste=True,
        phases=(("gather", 0, max(ra, rb) - 1), ("swap", min(ra, rb), max(ra, rb)),
                ("bcast", min(ra, rb) + 1, max(la, lb)))))


def plan_root_gather_mpich(groups: Groups) -> Plan:
    """Eq. 2's algorithm, phase after phase in MPICH's order (module docstring)."""
    gat_a, ra = binomial_gather(groups, A)
    gat_b, rb = binomial_gather(groups, B)
    a0, b0 = groups.rank(A, 0), groups.rank(B, 0)
    ka, kb = groups.total(A), groups.total(B)
    s1 = max(ra, rb)
    out = gat_a + gat_b
    if ka:
        out.append(Transfer(s1, a0, b0, A, 0, ka))
    bc_b, e1 = scatter_allgather_bcast(groups, B, A, 0, ka, s1 + 1)
    e1 = max(e1, s1 + 1)
    out += bc_b
    if kb:
        out.append(Transfer(e1 + 1, b0, a0, B, 0, kb))
    bc_a, e2 = scatter_allgather_bcast(groups, A, B, 0, kb, e1 + 2)
    out += bc_a
    return Plan(groups, tuple(out), PlanInfo(
        name="root-gather-mpich", no_waste=False,
        phases=(("gather", 0, s1 - 1), ("A root to B root", s1, s1),
                ("bcast in B", s1 + 1, e1), ("B root to A root", e1 + 1, e1 + 1),
                ("bcast in A", e1 + 2, max(e2, e1 + 2)))))
