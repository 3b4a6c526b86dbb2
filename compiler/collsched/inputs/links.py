"""Shared network links: which rank pairs send through the same WAN link.

A topology given by classes has a wide-area network (network.py, Topology.network): the
`wan:` form (one class per pair of sites) is one link per ordered site pair, which every
flow from site A to site B crosses: ten ranks at A sending to B at once share its
bandwidth; the `links:` form names links shared by several site pairs, by both directions,
and routes through several of them. The lab builds exactly that SimGrid platform
(lab/platform.py, the *sites* shape), and the cost models (simulate.py, fluid.py), the
Min3 planner (algorithms/min3/) and the lower bound (lowerbound.py) take it into account
through `shared_links`.

A topology given as a measured matrix has no network: every host pair is its own path
(the *pairs* shape), limited only by the hosts' ports. The file says which; nothing
switches from one to the other on a value (docs/inputs.md).

`site_classes` says whether host matrices are uniform per site and site pair.
A Topology keeps what these functions derive from it as cached properties
(`Topology.site_classes`, `.shared_links`, `.port_bandwidth`): the `compute_*` functions
compute, the others return the topology's cached answer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_REL = 1e-9


def host_matrices(topo):
    """Host-level latency and bandwidth (H x H); the diagonal is the intra-host class."""
    hl, hb = topo.host_latency, topo.host_bandwidth
    if hl is not None and hb is not None:
        return np.asarray(hl, float), np.asarray(hb, float)
    # Rebuild from rank-level matrices (every host that has a rank).
    h = len(topo.hosts)
    lat, bw = np.zeros((h, h)), np.full((h, h), np.inf)
    rh = np.asarray(topo.rank_host)
    lat[np.ix_(rh, rh)] = topo.latency
    bw[np.ix_(rh, rh)] = topo.bandwidth
    return lat, bw


def _uniform(block: np.ndarray) -> float | None:
    if block.size == 1:  # a pair of single-host sites: many of them in a wide network
        v = float(block.flat[0])
        return v if np.isfinite(v) else None
    vals = block[np.isfinite(block)] if block.size else block
    if vals.size == 0:
        return None
    v = float(vals.flat[0])
    # np.allclose(vals, v, rtol=_REL, atol=0) for finite values, without its overhead.
    return v if bool(np.all(np.abs(vals - v) <= _REL * abs(v))) else None


def site_classes(topo, lat=None, bw=None):
    """(sites, members, lan, wan) when the topology is class-shaped, else None.

    members[s]: host indices of site s; lan[s] = (latency, bandwidth) of its LAN; wan[a, b]
    = (latency, bandwidth) of every host pair from a to b. Class-shaped means: uniform
    within each site and each site pair, and each WAN class no faster than the LANs at its
    ends (then a shared WAN link between two NICs reproduces every pair exactly).
    Without lat and bw (the topology's own host matrices): the topology's cached answer.
    """
    if lat is None or bw is None:
        return topo.site_classes
    return compute_site_classes(topo, lat, bw)


def compute_site_classes(topo, lat, bw):
    sites = list(dict.fromkeys(topo.host_site))
    members = {s: [i for i, x in enumerate(topo.host_site) if x == s] for s in sites}
    # A site's hosts as a slice where they are consecutive (the usual case: cheaper blocks).
    index = {s: slice(hs[0], hs[-1] + 1) if hs[-1] - hs[0] + 1 == len(hs) else hs
             for s, hs in members.items()}

    def block(m, a, b):
        ia, ib = index[a], index[b]
        return m[ia, ib] if isinstance(ia, slice) and isinstance(ib, slice) else m[np.ix_(members[a], members[b])]

    lan = {}
    for s, hs in members.items():
        off = ~np.eye(len(hs), dtype=bool)
        L = _uniform(block(lat, s, s)[off])
        B = _uniform(block(bw, s, s)[off])
        if len(hs) > 1 and (L is None or B is None):
            return None
        lan[s] = (L, B)
    wan = {}
    for a in sites:
        for b in sites:
            if a == b:
                continue
            L = _uniform(block(lat, a, b))
            B = _uniform(block(bw, a, b))
            if L is None or B is None:
                return None
            wan[a, b] = (L, B)
    # Single-host sites have no LAN pair: their NIC is the one the network gives (a `links:`
    # file's lan), else the fastest WAN rate out, with 0 latency (what the `wan:` form's
    # network records too).
    fastest = {}
    for (a, b), (_, B) in wan.items():
        for s in (a, b):
            fastest[s] = max(fastest.get(s, B), B)
    known = getattr(getattr(topo, "network", None), "lan", None) or {}
    for s in sites:
        if lan[s][0] is None:
            lan[s] = tuple(known[s]) if s in known else (0.0, fastest.get(s, np.inf))
    # Exact only if the WAN link is the bottleneck and carries the rest of the latency.
    for (a, b), (L, B) in wan.items():
        if B > min(lan[a][1], lan[b][1]) * (1 + _REL) or L < (lan[a][0] + lan[b][0]) / 2 * (1 - _REL):
            return None
    return sites, members, lan, wan


@dataclass
class SharedLinks:
    """The shared resources (wide-area links, or one direction of a split one) flows cross.

    route_of[s, r]: index into `routes` of the flow s -> r's route, or -1 (none);
    routes[k]: the resource indices that route crosses, in path order. link_of[s, r]: the
    route's bottleneck resource (smallest capacity, the first on a tie), or -1: what a
    model that charges one link per flow uses (exact for the `wan:` form, where every route
    is one link). bandwidth[k] is resource k's capacity in bytes/s; names[k] names it."""

    link_of: np.ndarray  # (P, P) int64
    bandwidth: np.ndarray  # (L,) float64
    names: list[str]
    route_of: np.ndarray | None = None  # (P, P) int64; None: the same as link_of
    routes: list = None  # list[tuple[int, ...]]; None: one resource each, routes[k] = (k,)

    def __post_init__(self):
        if self.route_of is None:
            self.route_of = self.link_of
        if self.routes is None:
            self.routes = [(k,) for k in range(len(self.bandwidth))]

    @property
    def any(self) -> bool:
        return len(self.bandwidth) > 0

    @property
    def multi(self) -> bool:
        """Whether some route crosses more than one shared resource (then link_of alone
        is an approximation: the bottleneck only)."""
        return any(len(r) > 1 for r in self.routes)


def shared_links(topo) -> SharedLinks:
    """The wide-area resources that flows share: Topology.network's (none without one,
    e.g. a measured matrix: every host pair its own path). A resource counts only if more
    than one host pair crosses it: a link used by a single host pair is no more shared
    than that pair's own path. The topology's cached answer (Topology.shared_links)."""
    return topo.shared_links


def compute_shared_links(topo) -> SharedLinks:
    p = topo.nranks
    link_of = np.full((p, p), -1, np.int64)
    net = getattr(topo, "network", None)
    if net is None or p < 2:
        return SharedLinks(link_of, np.zeros(0), [])
    sites = list(dict.fromkeys(topo.host_site))
    size = {s: topo.host_site.count(s) for s in sites}
    # host pairs crossing each resource, to keep only the shared ones
    crossing = np.zeros(len(net.resources), np.int64)
    for (a, b), route in net.routes.items():
        if a in size and b in size:
            for k in set(route.resources):
                crossing[k] += size[a] * size[b]
    keep = np.nonzero(crossing >= 2)[0]
    new_id = np.full(len(net.resources), -1, np.int64)
    new_id[keep] = np.arange(len(keep))
    bws = np.array([net.resources[k].capacity for k in keep], np.float64)
    names = [net.resources[k].name for k in keep]
    number = {s: i for i, s in enumerate(sites)}
    site_of_host = np.array([number[s] for s in topo.host_site], np.int64)
    rank_site = site_of_host[np.asarray(topo.rank_host)]
    ranked = set(rank_site.tolist())  # sites with ranks: the only routes flows take
    route_of = np.full((p, p), -1, np.int64)
    routes: list = []
    route_id: dict = {}
    for (a, b), route in net.routes.items():
        if a not in size or b not in size or number[a] not in ranked or number[b] not in ranked:
            continue
        res = tuple(int(new_id[k]) for k in route.resources if new_id[k] >= 0)
        if not res:
            continue
        ka, kb = number[a], number[b]
        sel = np.ix_(rank_site == ka, rank_site == kb)
        rid = route_id.setdefault(res, len(routes))
        if rid == len(routes):
            routes.append(res)
        route_of[sel] = rid
        link_of[sel] = min(res, key=lambda k: (bws[k], res.index(k)))
    return SharedLinks(link_of, bws, names, route_of, routes)


def port_bandwidth(topo) -> tuple[np.ndarray, np.ndarray]:
    """(send, recv): (P, P) rates at which a flow s -> r occupies s's and r's ports.

    A flow's bytes pass a host's network port at the port's own rate. Within a site, and
    on any path of its own, the pair's bandwidth is that rate (the port is the bottleneck).
    Across a shared WAN link the link is the bottleneck: the flow trickles through the
    hosts' ports, which stay free for other flows, as SimGrid's split-duplex NICs do. The
    rate there is the LAN bandwidth of the host's site (the NIC of lab/platform.py).
    The topology's cached answer (Topology.port_bandwidth; treat the arrays as read-only)."""
    return topo.port_bandwidth


def compute_port_bandwidth(topo) -> tuple[np.ndarray, np.ndarray]:
    bw = np.asarray(topo.bandwidth, np.float64)
    links = shared_links(topo)
    if not links.any:
        return bw, bw
    sites, members, lan, _ = site_classes(topo)
    site_of_host = np.empty(len(topo.hosts), np.int64)
    for k, s in enumerate(sites):
        site_of_host[members[s]] = k
    nic = np.array([lan[s][1] for s in sites], np.float64)[site_of_host[np.asarray(topo.rank_host)]]
    on = links.link_of >= 0
    send = np.where(on, nic[:, None], bw)
    recv = np.where(on, nic[None, :], bw)
    return send, recv
