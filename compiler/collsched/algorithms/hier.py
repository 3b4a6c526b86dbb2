"""Hierarchical allgather over sites (issue 24; docs/hier.md): an inter-site plan computed
over sites (site_plan.py) composed with rings inside the sites.

Sites are the topology's (magpie.site_groups: ordered by lowest rank; any grouping here,
the compact form needs contiguous rank ranges). Site X has n_X members; block o of origin
site O has member index i_o in O (its position in O's sorted ranks), and its *owner* in
site X is X's member i_o mod n_X (in O itself: o). Three phases, one global step
numbering (ir.from_transfers sorts each rank's list by step, receives before sends,
transfer index):

1. steps 0 .. n_X - 2: a ring allgather of the site's own blocks inside every site (in
   step k member i sends the block of member i - k to member i + 1);
2. steps T1 + t, T1 = max(n_X) - 1: for every plan entry (t, X, Y, O), in plan order, each
   block o of O (by i_o) goes from its owner in X to its owner in Y, so the wide-area
   traffic of one entry is spread over min(n_O, n_X) senders and n_Y receivers;
3. steps T1 + T2 + t, T2 the plan's steps, t = 0 .. n_X - 2: a ring allgather of the
   remote blocks: member k circulates R_k, the blocks of other sites it owns (in
   ascending origin rank), so in ring step t it sends R_{k-t} to member k + 1 and
   receives R_{k-1-t} from member k - 1.

Every member ends with every block: its site's from phase 1, the remote blocks it owns
from phase 2 (every site receives every origin site exactly once, at the owners), the
others' from phase 3. The plan holds entries over sites (S (S - 1) of them); the lists of
a rank follow from (site sizes, plan, its rank), which is what the compact form's tail
holds (compact/hier.py, runtime/src/compact_hier.c).
"""
from __future__ import annotations

import numpy as np

from .site_plan import SiteCosts, SitePlan, choose
from .magpie import refuse_mismatched_topology, site_groups
from .registry import Request, block_transfers, register

# The explicit plan is a Python list of S (S - 1) entries: a million at this many sites.
MAX_SITES = 1024


def site_costs(req: Request, groups: list[list[int]]) -> SiteCosts:
    """The plan's inputs from the request's topology: site sizes and, per site pair, the
    latency, bandwidth and one flow's bandwidth between the sites' lowest ranks (the site
    classes' values on a class-shaped topology). Without a topology: one site."""
    s = len(groups)
    sizes = tuple(len(g) for g in groups)
    topo = req.topology
    if topo is None:
        z = np.zeros((s, s))
        return SiteCosts(sizes, z, z + np.inf, z + np.inf)
    lead = np.array([g[0] for g in groups], np.int64)
    ix = np.ix_(lead, lead)
    # Each site's diagonal: its LAN (a pair of members), or the intra-host class (one member).
    lat, bw, flow = (np.array(m[ix], np.float64) for m in (topo.latency, topo.bandwidth, topo.flow_bandwidth()))
    for k, g in enumerate(groups):
        if len(g) > 1:
            lat[k, k], bw[k, k], flow[k, k] = (float(m[g[0], g[1]]) for m in (topo.latency, topo.bandwidth, topo.flow_bandwidth()))
    return SiteCosts(sizes, lat, bw, flow)


def plan_for(req: Request, kind: str | None = None) -> SitePlan:
    """The inter-site plan hier compiles for this request (site_plan.choose on its sites)."""
    groups = site_groups(req)
    return choose(site_costs(req, groups), req.nbytes, tuple(g[0] for g in groups), kind)


def transfers(groups: list[list[int]], plan: SitePlan):
    """(step, src, dst, origin) arrays of whole-block transfers in global order (module
    docstring)."""
    cols: list[list[np.ndarray]] = [[], [], [], []]

    def add(step, src, dst, origin):
        for c, v in zip(cols, (step, src, dst, origin)):
            c.append(np.asarray(v, np.int64))

    sizes = [len(g) for g in groups]
    members = [np.asarray(g, np.int64) for g in groups]
    t1 = max(sizes) - 1
    # Phase 1: a ring inside every site.
    for m in members:
        n = len(m)
        k, i = np.divmod(np.arange(n * (n - 1), dtype=np.int64), n)  # step-major
        add(k, m[i], m[(i + 1) % n], m[(i - k) % n])
    # Phase 2: every entry's blocks from their owners in src to their owners in dst.
    for e in plan.entries:
        i = np.arange(sizes[e.origin], dtype=np.int64)
        add(np.full(len(i), t1 + e.step), members[e.src][i % sizes[e.src]],
            members[e.dst][i % sizes[e.dst]], members[e.origin][i])
    # Phase 3: a ring of the remote blocks each member owns.
    t3 = t1 + plan.nsteps
    index = np.zeros(sum(sizes), np.int64)  # member index of every rank in its site
    for m in members:
        index[m] = np.arange(len(m))
    for x, m in enumerate(members):
        n = len(m)
        remote = np.sort(np.concatenate([g for y, g in enumerate(members) if y != x] or [np.zeros(0, np.int64)]))
        if n < 2 or not len(remote):
            continue
        owner = index[remote] % n
        t, b = np.divmod(np.arange((n - 1) * len(remote), dtype=np.int64), len(remote))
        sender = (owner[b] + t) % n
        add(t3 + t, m[sender], m[(sender + 1) % n], remote[b])
    return tuple(np.concatenate(c) if c else np.zeros(0, np.int64) for c in cols)


def refuse(req: Request) -> str | None:
    why = refuse_mismatched_topology(req)
    if why is None and len(site_groups(req)) > MAX_SITES:
        return f"expected at most {MAX_SITES} sites (the plan has S (S - 1) entries)"
    return why


@register("hier", "hierarchical: ring inside sites, an inter-site plan over sites (direct or "
          "relay trees, by a site-level cost model) between owners spread over the members, "
          "ring of the remote blocks inside sites", refuse)
def build(req: Request):
    groups = site_groups(req)
    step, src, dst, origin = transfers(groups, plan_for(req))
    return block_transfers(req, "hier", step, src, dst, origin)
