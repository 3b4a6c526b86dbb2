"""The grid-aware alltoall (`grid`): aggregate per site pair over the wide area.

Sites are the topology's (ranks grouped by site label, sites ordered by their lowest rank)
or, with option groups="pools", the lowest pools of the pool tree (inputs/pools.py: the
pools whose sub-pools are single ranks; a rank in no such pool is a group of its own), for
measured topologies whose site labels say nothing. Inside a site the blocks go directly
(every member posts its receives, then sends to member +1, +2, ...). Every block (s, d)
between two sites X -> Y crosses the wide area exactly once, inside one message of a
*relay pair* (a, b), a in X and b in Y, that carries every block of the pair X -> Y that
(a, b) relays: s -> a over X's LAN when s != a (gather), a -> b over the WAN, b -> d over
Y's LAN when b != d (scatter). Which blocks a relay pair carries is the *mode*, per
ordered site pair (n_X, n_Y members):

- `source`: a = s, b = Y[(i_s + rot) mod n_Y] (i_s: s's index in X): every member of X
  sends its n_Y blocks for Y in one WAN message, no gather;
- `dest`: a = X[(j_d + rot) mod n_X], b = d: every member of Y receives its n_X blocks
  from X in one WAN message, no scatter;
- `leader`: a = X[rot mod n_X], b = Y[rot mod n_Y]: one WAN message carries all n_X n_Y
  blocks (one leader pair per site pair; rot differs per site pair, so a site's leaders
  differ per remote site);
- `spread` (the heuristic): `source` where n_X >= n_Y, else `dest`. The side with more
  members gives one relay per member, so every member's NIC on both sides carries WAN
  traffic (the lesson of issue 21: one leader per site is slow: a site's WAN traffic then
  leaves through one NIC in few window-capped flows), and each block takes at most one
  LAN hop besides its WAN hop.

rot = the index of the other site, so that different site pairs use different members
first. Option mode (req.options["mode"]): "spread", "source", "dest", "leader" or "auto"
(the default): with the collectives' cost model (collectives/model.py, simulate) the
fastest of the four for this request's topology and sizes, else "spread". The choice and
the predictions are kept in prog.notes["grid"].

Segments: the WAN message of a relay pair is cut in nseg messages, message g carrying
segment g of its blocks (gather messages likewise), so a relay forwards segment g while
segment g + 1 crosses the WAN (nseg = 1: one message per relay pair). Order in every
rank's list: gathers, then WAN messages (to the site with the longest latency first: the
message that arrives last leaves first), then the intra-site exchange, then scatters (of
the sites whose data arrives first, i.e. least latency, first), so the in-order walk never
blocks on a far site's data while a near site's could be forwarded.
"""
from __future__ import annotations

import numpy as np

from ..program import Builder, Piece, Program
from .registry import CollRequest, register

MODES = ("spread", "source", "dest", "leader")


def site_groups(req: CollRequest) -> list[list[int]]:
    """Ranks of each site (or lowest pool), sorted; groups ordered by lowest rank."""
    topo = req.topology
    if req.options.get("groups", "sites") == "pools":
        from ...inputs.pools import children, pool_tree

        tree = pool_tree(topo)
        groups, todo = [], [0]
        while todo:
            node = todo.pop()
            kids = children(tree, node)
            ranks = [int(r) for r in tree.nodes[node]["ranks"]]
            if not kids or all(len(tree.nodes[k]["ranks"]) == 1 for k in kids):
                groups.append(ranks)
            else:
                todo.extend(kids)
        return sorted(groups, key=lambda g: g[0])
    by_label: dict[str, list[int]] = {}
    for rank, label in enumerate(topo.rank_site()):
        by_label.setdefault(label, []).append(rank)
    return sorted(by_label.values(), key=lambda g: g[0])


def relay_of(mode: str, x_members, y_members, rot: int, i: int, j: int) -> tuple[int, int]:
    """(a, b) relay pair of the block from member i of X to member j of Y."""
    nx_, ny_ = len(x_members), len(y_members)
    if mode == "spread":
        mode = "source" if nx_ >= ny_ else "dest"
    if mode == "source":
        return x_members[i], y_members[(i + rot) % ny_]
    if mode == "dest":
        return x_members[(j + rot) % nx_], y_members[j]
    return x_members[rot % nx_], y_members[rot % ny_]  # leader


def _latency(req: CollRequest, groups) -> np.ndarray:
    """(S, S) latency between sites' lowest ranks (0 without a topology)."""
    lead = [g[0] for g in groups]
    return np.asarray(req.topology.latency, np.float64)[np.ix_(lead, lead)]


def grid_builder(req: CollRequest, mode: str) -> Builder:
    p, nseg = req.nranks, req.nseg
    groups = site_groups(req)
    s = len(groups)
    lat = _latency(req, groups)
    b = Builder("alltoall", p, nseg)
    # Order keys: gather 0, WAN 1 .. s-1 (longest latency first, per sending site), intra-site
    # s, scatter s + 1 .. (least latency first, per receiving site).
    wan_rank = np.zeros((s, s), np.int64)
    scat_rank = np.zeros((s, s), np.int64)
    for x in range(s):
        others = [y for y in range(s) if y != x]
        for k, y in enumerate(sorted(others, key=lambda y: (-lat[x, y], y))):
            wan_rank[x, y] = k
        for k, y in enumerate(sorted(others, key=lambda y: (lat[y, x], y))):
            scat_rank[y, x] = k
    gathers, wans, scatters = {}, {}, {}
    for x, xm in enumerate(groups):
        for y, ym in enumerate(groups):
            if x == y:
                continue
            for i, src in enumerate(xm):
                for j, dst in enumerate(ym):
                    a, r = relay_of(mode, xm, ym, y, i, j)
                    for g in range(nseg):
                        piece = Piece(src, dst, g)
                        if src != a:
                            gathers.setdefault((src, a, g), []).append(piece)
                        wans.setdefault((x, y, a, r, g), []).append(piece)
                        if dst != r:
                            scatters.setdefault((x, y, a, r, g, dst), []).append(piece)
    for (src, a, g), pieces in gathers.items():
        b.add(0, src, a, pieces)
    for (x, y, a, r, g), pieces in sorted(wans.items(), key=lambda kv: (wan_rank[kv[0][0], kv[0][1]], kv[0][4])):
        b.add(1 + int(wan_rank[x, y]), a, r, pieces)
    for m in groups:
        n = len(m)
        for i in range(1, n):
            for k in range(n):
                b.add(s, m[k], m[(k + i) % n], [Piece(m[k], m[(k + i) % n], g) for g in range(nseg)])
    for (x, y, a, r, g, dst), pieces in sorted(scatters.items(), key=lambda kv: (scat_rank[kv[0][0], kv[0][1]], kv[0][4])):
        b.add(s + 1 + int(scat_rank[x, y]), r, dst, pieces)
    return b


def _predict(req: CollRequest, prog: Program) -> float | None:
    """The collectives' cost model's run time, or None when it is not available."""
    try:
        from ..model import simulate
    except ImportError:
        return None
    timing = simulate(prog, req.topology, nbytes=req.nbytes, elem_bytes=req.elem_bytes,
                      arrivals=req.arrivals)
    return float(timing.run_time_s)


def _check(req: CollRequest) -> str | None:
    if req.topology is not None and req.topology.nranks != req.nranks:
        return f"expected a topology with {req.nranks} ranks, got one with {req.topology.nranks}"
    mode = req.options.get("mode", "auto")
    if mode not in MODES + ("auto",):
        return f"expected option mode one of auto, {', '.join(MODES)}, got {mode!r}"
    groups = req.options.get("groups", "sites")
    if groups not in ("sites", "pools"):
        return f"expected option groups sites or pools, got {groups!r}"
    return None


@register("alltoall", "grid", "grid-aware: every block crosses the WAN once, aggregated per "
          "site pair into one message per relay pair, relays spread over the members",
          _check, needs_topology=True)
def build_grid(req: CollRequest) -> Program:
    mode = req.options.get("mode", "auto")
    if mode != "auto":
        prog = grid_builder(req, mode).build()
        prog.notes["grid"] = {"mode": mode}
        return prog
    best, predicted = None, {}
    for m in MODES:
        prog = grid_builder(req, m).build()
        t = _predict(req, prog)
        if t is None:  # no model: the heuristic
            prog = grid_builder(req, "spread").build()
            prog.notes["grid"] = {"mode": "spread", "chosen_by": "heuristic"}
            return prog
        predicted[m] = t
        if best is None or t < predicted[best[0]]:
            best = (m, prog)
    best[1].notes["grid"] = {"mode": best[0], "chosen_by": "model", "predicted_s": predicted}
    return best[1]
