"""MagPIe allgather (Kielmann et al. 1999/2001, as described in section 2 of the Min3 paper).

Three phases over the sites of the topology:

1. gather: every rank sends its block to its site's coordinator (linear gather, one
   block per step, in rank order);
2. spreading simple among the coordinators: in iteration d = 1 .. S-1, the coordinator of
   site j sends every block of its site to the coordinator of site (j + d) mod S;
3. binomial broadcast inside each site: the coordinator passes everything down a binomial
   tree; each member is sent every block except its own.

Where the paper is vague we decided:

- sites are Topology.rank_site(); sites are numbered by their lowest rank, and the
  coordinator of a site is its lowest rank (MagPIe takes the first process of a cluster);
- a coordinator sends its site's blocks as one message per block (same bytes as
  MagPIe's single concatenated message; the executor moves pieces, not buffers);
- the binomial broadcast is MPICH's (the largest distance first: the member at relative
  index i sends to i + mask when i is a multiple of 2*mask), so a subtree that still has
  to forward gets its data first;
- the phases do not overlap in the step order (a coordinator forwards only after its
  gather); the executor's dataflow lets independent sites run ahead of each other anyway.

Without a topology, or on a single site, this is a linear gather to rank 0 followed by a
binomial broadcast (the BDR paper's LNBC).

`site_groups` and `binomial_bcast` are shared with mpichg2.
"""
from __future__ import annotations

from .registry import Request, block_transfers, register


def site_groups(req: Request) -> list[list[int]]:
    """Ranks of each site, sorted; sites ordered by their lowest rank (member 0 = coordinator)."""
    topo = req.topology
    if topo is None:
        return [list(range(req.nranks))]
    labels = topo.rank_site()
    groups: dict[str, list[int]] = {}
    for rank, label in enumerate(labels):
        groups.setdefault(label, []).append(rank)
    return sorted(groups.values(), key=lambda g: g[0])


def refuse_mismatched_topology(req: Request) -> str | None:
    topo = req.topology
    if topo is not None and topo.nranks != req.nranks:
        return f"expected a topology with {req.nranks} ranks, got one with {topo.nranks}"
    return None


def binomial_bcast(members: list[int], already_held, nranks: int, first_step: int, out) -> int:
    """Binomial broadcast from members[0] to the site; returns the next free step.

    already_held(i) is the set of origins member index i holds before the broadcast;
    each member is sent every block it lacks. `out` collects (step, src, dst, origin).
    """
    n = len(members)
    mask = 1
    while mask * 2 < n:
        mask *= 2
    step = first_step
    while n > 1 and mask >= 1:
        for i in range(0, n, 2 * mask):
            child = i + mask
            if child < n:
                held = already_held(child)
                for o in range(nranks):
                    if o not in held:
                        out.append((step, members[i], members[child], o))
        step += 1
        mask //= 2
    return step


def _transfers(req: Request):
    p = req.nranks
    groups = site_groups(req)
    out: list[tuple[int, int, int, int]] = []
    # Phase 1: linear gather at each coordinator, one member per step.
    for members in groups:
        for i, r in enumerate(members[1:]):
            out.append((i, r, members[0], r))
    step = max(len(m) for m in groups) - 1
    # Phase 2: spreading simple among the coordinators.
    s = len(groups)
    for d in range(1, s):
        for j, members in enumerate(groups):
            peer = groups[(j + d) % s][0]
            for o in members:
                out.append((step, members[0], peer, o))
        step += 1
    # Phase 3: binomial broadcast inside each site; members hold only their own block.
    last = step
    for members in groups:
        last = max(last, binomial_bcast(members, lambda i, m=members: {m[i]}, p, step, out))
    return out


@register("magpie", "MagPIe grid allgather: gather at site coordinators, spreading simple "
          "among them, binomial broadcast inside sites", refuse_mismatched_topology)
def build(req: Request):
    out = _transfers(req)
    step, src, dst, origin = zip(*out) if out else ((), (), (), ())
    return block_transfers(req, "magpie", step, src, dst, origin)
