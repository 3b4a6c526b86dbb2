"""MPICH-G2 allgather (Karonis et al. 2000, as described in section 2 of the Min3 paper).

Two phases over the two-level hierarchy sites / ranks:

1. up the hierarchy by recursive doubling: inside each site a binomial gather to the
   site's coordinator (in round k, the member at relative index i = 2^k mod 2^(k+1) sends
   everything it holds to i - 2^k: the gather half of recursive doubling), then recursive
   doubling among the coordinators (in round k, coordinator j swaps everything it holds
   with coordinator j XOR 2^k), after which every coordinator holds every block;
2. down by binomial broadcast inside each site (MPICH's binomial tree, largest distance
   first), which is the gather tree run backwards: each member is sent every block
   except those it already holds from the gather (its own and its gather subtree's).

Where the paper is vague we decided:

- "recursive doubling up the hierarchy" is read as the gather/exchange halves above
  (recursive doubling restricted to the ranks still active at each level), not as a
  full recursive-doubling allgather among all ranks of a site, which would make the
  broadcast down pointless;
- a number of sites S that is not a power of two is folded (as MPICH does for
  non-power-of-two recursive algorithms): with S' the largest power of two <= S,
  coordinator j >= S' first sends its site's blocks to coordinator j - S', the S' others
  run recursive doubling, and coordinator j - S' finally sends j everything j lacks.
  Every block enters every site exactly once (wide-area optimal);
- coordinators are the lowest rank of each site, sites are numbered by their lowest rank,
  a block is one message per block (see magpie.py).

Without a topology, or on a single site, this is a binomial gather to rank 0 followed by
a binomial broadcast.
"""
from __future__ import annotations

from .registry import Request, block_transfers, register
from .magpie import binomial_bcast, refuse_mismatched_topology, site_groups


def _gather_subtree(n: int, i: int) -> range:
    """Member indices whose blocks member i holds after the binomial gather."""
    if i == 0:
        return range(n)
    low = i & -i
    return range(i, min(i + low, n))


def _transfers(req: Request):
    p = req.nranks
    groups = site_groups(req)
    out: list[tuple[int, int, int, int]] = []
    # Phase 1a: binomial gather inside each site.
    rounds = 0
    for members in groups:
        n = len(members)
        k = 0
        while (1 << k) < n:
            half = 1 << k
            for i in range(half, n, 2 * half):
                for j in range(i, min(i + half, n)):
                    out.append((k, members[i], members[i - half], members[j]))
            k += 1
        rounds = max(rounds, k)
    step = rounds
    # Phase 1b: recursive doubling among coordinators, non-power-of-two counts folded.
    s = len(groups)
    s2 = 1
    while s2 * 2 <= s:
        s2 *= 2
    coord = [g[0] for g in groups]
    holds = [set(g) for g in groups]  # blocks each coordinator holds
    if s > s2:
        for j in range(s2, s):
            for o in groups[j]:
                out.append((step, coord[j], coord[j - s2], o))
            holds[j - s2] |= holds[j]
        step += 1
    k = 0
    while (1 << k) < s2:
        before = [set(h) for h in holds]
        for j in range(s2):
            partner = j ^ (1 << k)
            for o in sorted(before[j]):
                out.append((step, coord[j], coord[partner], o))
            holds[partner] |= before[j]
        step += 1
        k += 1
    if s > s2:
        for j in range(s2, s):
            for o in range(p):
                if o not in holds[j]:
                    out.append((step, coord[j - s2], coord[j], o))
        step += 1
    # Phase 2: binomial broadcast inside each site (the gather tree backwards).
    for members in groups:
        n = len(members)

        def held(i, m=members, n=n):
            return {m[j] for j in _gather_subtree(n, i)}

        binomial_bcast(members, held, p, step, out)
    return out


@register("mpichg2", "MPICH-G2 grid allgather: recursive doubling up the site hierarchy, "
          "binomial broadcast down", refuse_mismatched_topology)
def build(req: Request):
    out = _transfers(req)
    step, src, dst, origin = zip(*out) if out else ((), (), (), ())
    return block_transfers(req, "mpichg2", step, src, dst, origin)
