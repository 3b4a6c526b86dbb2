"""The grid-aware alltoall (`grid`): aggregate per site pair over the wide area.

Sites are the topology's (ranks grouped by site label, sites ordered by their lowest rank)
or, with option groups="pools", the lowest pools of the pool tree (inputs/pools.py: the
pools whose sub-pools are single ranks; a rank in no such pool is a group of its own), for
measured topologies whose site labels say nothing. A topology of one site is refused (grid
would be `simple` there, and compile's auto would pick it on a tie). Inside a site the blocks go directly
(every member posts its receives, then sends to member +1, +2, ...). Every block (s, d)
between two sites X -> Y crosses the wide area once (route direct; see Routes for a relay
through a third site), inside one message of a
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
first.

Routes (option route): "direct" (every block crosses one WAN link, X -> Y) or "relay":
for a site pair X -> Y with a third site Z of lat(X, Z) + lat(Z, Y) < lat(X, Y) (the Z
of least sum), a share f of its blocks (those to Y's members of index j < f n_Y) go
X -> Z -> Y: the X-side relay sends them to member Z[(i + j + rot) mod n_Z] (spread over
Z's members by source and destination index), which forwards them to the Y-side relay;
the rest go direct. f balances the two paths with a site-level estimate (relay_shares:
latency plus volume over the bandwidth between the sites' lowest ranks, the relay links
carrying their own pair's traffic too): small blocks all take the faster path, large ones
split. A block still enters every site at most once (Z, then Y) and its destination site
exactly once. On wan-3x16 (A-B 20 ms, A-C 40 ms, B-C 80 ms) B <-> C goes through A: with
1 KiB blocks all of them (60.5 ms instead of 80.6 under the fluid model; the lower bound
60.0), with 128 KiB 3/8 of them (99.9 ms instead of 108.4 with 8 segments).

Choice (options mode and route, each "auto" by default): every (mode, route) candidate
(modes spread, dest and source, source only where some site sends to a larger one;
leader only by option; relay only where some pair has a faster path through a third
site) is timed by the model the compiler trusts on this
topology (the fluid model where pipeline.fluid_matters, i.e. shared WAN links or
size-dependent costs, else the event model) and the fastest kept; without the models
(ImportError) the heuristic ("spread", "direct"). The choice, the model and every
candidate's prediction are in prog.notes["grid"].

Segments: the WAN message of a relay pair is cut in nseg messages, message g carrying
segment g of its blocks (gather messages likewise), so a relay forwards segment g while
segment g + 1 crosses the WAN (nseg = 1: one message per relay pair); more segments also
mean more concurrent flows, which window-capped long links need. Inside a site a block
goes in one message. Order in every rank's list: gathers, then first WAN hops (the route
of longest latency first: the message that arrives last leaves first), then the
intra-site exchange, then every forward and scatter in order of the estimated arrival
(route latency) of what it forwards, so the in-order walk never blocks on a far site's
data while a near site's could be forwarded.
"""
from __future__ import annotations

import numpy as np

from ..program import Builder, Piece, Program
from .registry import CollRequest, register

MODES = ("spread", "dest", "source", "leader")
ROUTES = ("direct", "relay")
HEURISTIC = ("spread", "direct")  # without a cost model
# What auto compares: leader is never the best where it matters (1.41 s against 0.19 s
# for spread at 128 KiB on wan-3x16, 5 ms behind at 1 KiB) and every candidate costs a
# model run inside compile's segment search; it stays available by option.
AUTO_MODES = ("spread", "dest", "source")
# Every block is planned one by one in Python and auto times up to six candidates: 10 s at
# 128 ranks, growing as P^2.
MAX_RANKS = 256


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


def via_sites(lat: np.ndarray, route: str) -> dict[tuple[int, int], int | None]:
    """Per ordered site pair (x, y) the site z its blocks are relayed through, or None
    (direct): with route "relay" the z of least lat[x, z] + lat[z, y] where that is below
    lat[x, y]."""
    s = len(lat)
    out = {}
    for x in range(s):
        for y in range(s):
            if x == y:
                continue
            best, z = lat[x, y], None
            if route == "relay":
                for c in range(s):
                    if c not in (x, y) and lat[x, c] + lat[c, y] < best:
                        best, z = lat[x, c] + lat[c, y], c
            out[(x, y)] = z
    return out


def relay_shares(req: CollRequest, groups, lat: np.ndarray, via) -> dict[tuple[int, int], float]:
    """Per relayed site pair (x, y) the share f of its blocks sent through z (the rest goes
    direct): the f in 0, 1/64, ..., 1 that minimises max(direct, relayed) with direct =
    lat(x, y) + (1 - f) V / b(x, y) and relayed = lat(x, z) + lat(z, y) + the slower of
    the two links' (own traffic + f V) / b, V = n_X n_Y nbytes, b the bandwidth between
    the sites' lowest ranks (a site-level estimate: each link's own traffic and one
    relayed pair per direction)."""
    lead = [g[0] for g in groups]
    bw = np.asarray(req.topology.bandwidth, np.float64)[np.ix_(lead, lead)]
    n = np.array([len(g) for g in groups], np.float64)
    f = np.linspace(0.0, 1.0, 65)
    out = {}
    for (x, y), z in via.items():
        if z is None:
            continue
        vol = n[x] * n[y] * float(req.nbytes)
        direct = lat[x, y] + (1 - f) * vol / bw[x, y]
        relayed = lat[x, z] + lat[z, y] + np.maximum((n[x] * n[z] * req.nbytes + f * vol) / bw[x, z],
                                                     (n[z] * n[y] * req.nbytes + f * vol) / bw[z, y])
        cost = np.maximum(direct, np.where(f > 0, relayed, 0.0))
        out[(x, y)] = float(f[int(np.argmin(cost))])
    return out


def _paths(mode: str, groups, via, lat, shares):
    """Every remote block's path: (x, y, src, dst, path of ranks from the X-side relay to
    the Y-side relay, estimated arrival at the Y-side relay). Of a relayed pair, the blocks
    to Y's members of index j < share * n_Y take the relay."""
    for x, xm in enumerate(groups):
        for y, ym in enumerate(groups):
            if x == y:
                continue
            z = via[(x, y)]
            cut = round(shares.get((x, y), 0.0) * len(ym))
            for i, src in enumerate(xm):
                for j, dst in enumerate(ym):
                    a, r = relay_of(mode, xm, ym, y, i, j)
                    if z is None or j >= cut:
                        yield x, y, src, dst, (a, r), float(lat[x, y])
                    else:
                        zm = groups[z]
                        yield x, y, src, dst, (a, zm[(i + j + y) % len(zm)], r), float(lat[x, z] + lat[z, y])


def grid_builder(req: CollRequest, mode: str, route: str = "direct") -> Builder:
    p, nseg = req.nranks, req.nseg
    groups = site_groups(req)
    s = len(groups)
    lat = _latency(req, groups)
    via = via_sites(lat, route)
    shares = relay_shares(req, groups, lat, via)
    b = Builder("alltoall", p, nseg)
    # Order keys: gather 0; first WAN hop 1 .. s-1 (per sending site, the route of longest
    # latency first); intra-site exchange s; then every relay's forwards and scatters at
    # s + 1 + the estimated arrival of what they forward (earliest first).
    route_lat = {k: float(lat[k] if z is None else lat[k[0], z] + lat[z, k[1]]) for k, z in via.items()}
    wan_rank = {}
    for x in range(s):
        mine = sorted((k for k in via if k[0] == x), key=lambda k: (-route_lat[k], k[1]))
        wan_rank.update((k, n) for n, k in enumerate(mine))
    gathers, first, later = {}, {}, {}
    for x, y, src, dst, path, arrive in _paths(mode, groups, via, lat, shares):
        for g in range(nseg):
            piece = Piece(src, dst, g)
            if src != path[0]:
                gathers.setdefault((src, path[0], g), []).append(piece)
            first.setdefault((wan_rank[(x, y)], g, x, y, path[0], path[1]), []).append(piece)
            if len(path) == 3:  # the intermediate site forwards
                est = float(lat[x, via[(x, y)]])
                later.setdefault((est, g, x, y, path[1], path[2]), []).append(piece)
            if dst != path[-1]:
                later.setdefault((arrive, g, x, y, path[-2], path[-1], dst), []).append(piece)
    for (src, a, g), pieces in gathers.items():
        b.add(0, src, a, pieces)
    for key, pieces in sorted(first.items()):
        b.add(1 + key[0], key[-2], key[-1], pieces)
    for m in groups:
        n = len(m)
        for i in range(1, n):
            for k in range(n):
                b.add(s, m[k], m[(k + i) % n], [Piece(m[k], m[(k + i) % n], g) for g in range(nseg)])
    for key, pieces in sorted(later.items()):
        snd, rcv = (key[4], key[5]) if len(key) == 6 else (key[5], key[6])
        b.add(s + 1 + key[0], snd, rcv, pieces)
    return b


def _predict(req: CollRequest, prog: Program) -> tuple[float, str] | None:
    """(run time, model) by the collectives' cost model the compiler would trust here: the
    fluid model where pipeline.fluid_matters says the event model is off (shared wide-area
    links, size-dependent costs), else the event model; None when they are not available."""
    try:
        from ...pipeline import fluid_matters
        from ..fluid import simulate_fluid
        from ..model import simulate
    except ImportError:
        return None
    fluid = fluid_matters(req.topology) is not None
    timing = (simulate_fluid if fluid else simulate)(prog, req.topology, nbytes=req.nbytes,
                                                     elem_bytes=req.elem_bytes, arrivals=req.arrivals)
    return float(timing.run_time_s), "fluid" if fluid else "dag"


def _check(req: CollRequest) -> str | None:
    if req.nranks > MAX_RANKS:
        return (f"expected at most {MAX_RANKS} ranks (grid plans every one of the P^2 blocks), "
                f"got {req.nranks}")
    if req.topology is not None and req.topology.nranks != req.nranks:
        return f"expected a topology with {req.nranks} ranks, got one with {req.topology.nranks}"
    for key, allowed in (("mode", MODES + ("auto",)), ("route", ROUTES + ("auto",)),
                         ("groups", ("sites", "pools"))):
        value = req.options.get(key, allowed[-1] if key != "groups" else "sites")
        if value not in allowed:
            return f"expected option {key} one of {', '.join(allowed)}, got {value!r}"
    if req.topology is not None and len(site_groups(req)) < 2:
        return ("expected a topology of at least two sites (with one site grid is simple: "
                "use simple)")
    return None


def candidates(req: CollRequest) -> list[tuple[str, str]]:
    """The (mode, route) pairs option "auto" compares (module docstring)."""
    mode, route = req.options.get("mode", "auto"), req.options.get("route", "auto")
    groups = site_groups(req)
    modes = MODES if mode == "auto" else (mode,)
    if mode == "auto":  # source is spread unless a site sends to a larger one
        sizes = sorted({len(g) for g in groups})
        modes = tuple(m for m in MODES if m in AUTO_MODES and (m != "source" or sizes[0] != sizes[-1]))
    routes = ROUTES if route == "auto" else (route,)
    if route == "auto" and all(z is None for z in via_sites(_latency(req, groups), "relay").values()):
        routes = ("direct",)  # no site pair has a faster path through a third site
    return [(m, r) for r in routes for m in modes]


@register("alltoall", "grid", "grid-aware: every block crosses the WAN once per site it "
          "enters, aggregated per site pair into one message per relay pair, relays spread "
          "over the members, optionally through a third site of lower latency",
          _check, needs_topology=True)
def build_grid(req: CollRequest) -> Program:
    cands = candidates(req)
    if len(cands) == 1:
        prog = grid_builder(req, *cands[0]).build()
        prog.notes["grid"] = {"mode": cands[0][0], "route": cands[0][1], "chosen_by": "options"}
        return prog
    best, predicted = None, {}
    for m, r in cands:
        prog = grid_builder(req, m, r).build()
        got = _predict(req, prog)
        if got is None:  # no model: the heuristic
            m, r = HEURISTIC
            prog = grid_builder(req, m, r).build()
            prog.notes["grid"] = {"mode": m, "route": r, "chosen_by": "heuristic"}
            return prog
        t, model = got
        predicted[f"{m}/{r}"] = t
        if best is None or t < best[0]:
            best = (t, m, r, prog)
    _, m, r, prog = best
    prog.notes["grid"] = {"mode": m, "route": r, "chosen_by": model, "predicted_s": predicted}
    return prog
