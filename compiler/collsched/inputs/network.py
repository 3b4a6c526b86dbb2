"""The wide-area network of a topology: links that flows share, and the route between sites.

A topology's hosts sit in sites; each host reaches its site's network through its NIC
(the site's `lan` class: half the LAN latency on each side, the LAN bandwidth). Between
sites, flows cross **wide-area links**: resources with their own capacity and latency,
independent of the NICs, each either

* ``shared``: one capacity for both directions (SimGrid's SHARED sharing policy), or
* ``split``: one capacity per direction (SPLITDUPLEX; `bandwidth_back` may differ).

A link joins two *points*: sites, or routers (any other name). The route between two
sites is a path of links, by default the one of least latency (networkx), or the one a
`routes:` entry names through its points (the way back the same path reversed), or its
links in order (that direction only; it may add a latency of its own). So
several sites may sit behind one link (their routes share it) and a route may cross more
than one link. A flow from site a to site b then has

    latency   L = lan_a / 2 + the route's latency (its links' + its own) + lan_b / 2
    bandwidth b = min(NIC_a, NIC_b, every link's capacity in its direction)

and shares each of the route's *resources* (a shared link: one; a split link: the
direction it crosses) with every other flow crossing it.

The older `wan:` form (one entry per pair of sites, end-to-end latency and bandwidth) is
the special case of one link per ordered site pair, carrying the latency beyond the two
LAN halves: `from_wan_classes` builds it, so every model reads one description.

This module resolves a description into resources and routes; reading it from YAML (with
one-line errors) and writing it back is wan_links.py's, writing a SimGrid platform from it
lab/platform.py's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

SHARED, SPLIT = "shared", "split"
SHARING = (SHARED, SPLIT)
# Where the description came from: the `links:` section, or built from `wan:` classes
# (then it adds nothing the host matrices do not say, and stays out of the digest).
FROM_LINKS, FROM_WAN = "links", "wan"


@dataclass(frozen=True)
class WanLink:
    """One wide-area link between two points (sites or routers)."""

    name: str
    ends: tuple[str, str] | None  # None: a link only explicit routes name (no `between`)
    latency: float  # seconds
    bandwidth: float  # bytes/s, from ends[0] to ends[1] (and both ways when shared)
    sharing: str = SHARED
    bandwidth_back: float | None = None  # split: ends[1] -> ends[0] when it differs

    def capacity(self, forward: bool) -> float:
        if not forward and self.sharing == SPLIT and self.bandwidth_back is not None:
            return self.bandwidth_back
        return self.bandwidth


@dataclass(frozen=True)
class Resource:
    """A capacity that flows share: a shared link, or one direction of a split link."""

    name: str
    capacity: float  # bytes/s
    link: int  # index into Network.links


@dataclass(frozen=True)
class Route:
    """The way from one site to another: links in order, with the direction of each."""

    hops: tuple[tuple[int, bool], ...]  # (link index, forward = from ends[0] to ends[1])
    resources: tuple[int, ...]  # indices into Network.resources, in path order
    latency: float  # the whole route's: its links' latencies plus own_latency
    bandwidth: float  # smallest capacity on the path (inf for an empty path)
    own_latency: float = 0.0  # what the route adds beyond its links (a `routes:` entry's latency)


@dataclass(frozen=True)
class Network:
    """Links, the resources they make, and a route for every ordered pair of sites."""

    links: tuple[WanLink, ...]
    resources: tuple[Resource, ...]
    routes: dict  # (site_a, site_b) -> Route, a != b
    origin: str = FROM_LINKS
    # routes given by the file, kept to write the description back: `via` (a `routes:`
    # entry {between: [a, b], via: [...]}: (a, b) -> the points in between, both ways),
    # `explicit` ({from: a, to: b, links: [...]}: (a, b) -> ((link, forward), ...), this
    # way only), `route_latency` ((a, b) -> a given route's own latency, as the file keys it)
    via: dict = field(default_factory=dict)
    explicit: dict = field(default_factory=dict)
    route_latency: dict = field(default_factory=dict)
    # the sites' LAN classes (site -> (latency, bandwidth): the hosts' NICs), when known
    lan: dict = field(default_factory=dict)

    def route(self, a: str, b: str) -> Route:
        return self.routes[a, b]

    def resource_index(self, link: int, forward: bool) -> int:
        """The resource a flow uses crossing link `link` in that direction."""
        split = self.links[link].sharing == SPLIT
        for k, r in enumerate(self.resources):
            if r.link == link and (not split or r.name.endswith(">") == bool(forward)):
                return k
        raise KeyError(link)


class NetworkError(ValueError):
    """A description that cannot be resolved: `where` names the field (a list of keys, as
    schemas.Doc.fail takes), the message says what was expected."""

    def __init__(self, where: list, message: str):
        super().__init__(message)
        self.where = where


def _resources(links) -> list[Resource]:
    """A shared link is one resource; a split link two, named `name>` (forward) and `name<`."""
    out = []
    for k, lk in enumerate(links):
        if lk.sharing == SPLIT:
            out.append(Resource(f"{lk.name}>", lk.capacity(True), k))
            out.append(Resource(f"{lk.name}<", lk.capacity(False), k))
        else:
            out.append(Resource(lk.name, lk.bandwidth, k))
    return out


# Bounds on a `links:` description (docs/inputs.md, "Limits"): resolving finds a path for
# every ordered pair of sites, so a hostile file could ask for millions of long paths.
MAX_LINKS = 4096
MAX_SITES = 256  # sites with hosts: at most 65280 ordered pairs, each a route
MAX_ROUTE_HOPS = 1 << 20  # links crossed, summed over every route


def resolve(links, sites, via=None, origin=FROM_LINKS, explicit=None, route_latency=None,
            lan=None) -> Network:
    """Resources and a route for every ordered pair of `sites` (those that have hosts).

    links: WanLink list (ends None: a link that only explicit routes name); via: {(a, b):
    [point, ...]} for routes given through points (both ways, the way back reversed);
    explicit: {(a, b): [(link index, forward), ...]} for routes given link by link (this
    way only); route_latency: {(a, b): seconds} a given route's own latency (a via entry's
    applies both ways). Any other pair takes the path of least latency over the links'
    ends (fewer links, then the first links listed, on a tie). Raises NetworkError when two
    sites have no path, a `via` names a point that no link joins, or a link's ends are the
    same point.
    """
    import networkx as nx

    links = tuple(links)
    via = dict(via or {})
    explicit = {k: tuple((int(i), bool(f)) for i, f in v) for k, v in (explicit or {}).items()}
    route_latency = {k: float(v) for k, v in (route_latency or {}).items()}
    resources = tuple(_resources(links))
    index = {}
    for k, r in enumerate(resources):
        index[r.link, r.name.endswith(">") or links[r.link].sharing != SPLIT] = k
    g = nx.Graph()  # one edge per pair of points: the least-latency link between them
    g.add_nodes_from(sites)
    best = {}  # (x, y) -> the link a path from x to y takes
    for k, lk in enumerate(links):
        if lk.ends is None:
            continue
        a, b = lk.ends
        if a == b:
            raise NetworkError(["links", k, "between"], f"expected two different points, got {a!r} twice")
        if (a, b) not in best or lk.latency < links[best[a, b]].latency:
            best[a, b] = best[b, a] = k
            # latency first, then one more link (deterministic on ties)
            g.add_edge(a, b, weight=lk.latency + 1e-12)

    def along(seq):
        out = []
        for x, y in zip(seq, seq[1:]):
            k = best[x, y]
            out.append((k, links[k].ends[0] == x))
        return out

    paths = {}

    def path_between(a, b):
        if (a, b) in explicit:
            return list(explicit[a, b])
        if (a, b) in via or (b, a) in via:
            points = via[a, b] if (a, b) in via else list(reversed(via[b, a]))
            seq = [a, *points, b]
            for p in seq:
                if p not in g:
                    raise NetworkError(["routes"], f"route {a} -> {b}: unknown point {p!r}")
            for x, y in zip(seq, seq[1:]):
                if not g.has_edge(x, y):
                    raise NetworkError(["routes"], f"route {a} -> {b}: no link between {x!r} and {y!r}")
            return along(seq)
        if a not in paths:  # one search per source site
            paths[a] = nx.single_source_dijkstra_path(g, a, weight="weight")
        if b not in paths[a]:
            raise NetworkError(["links"], f"no path of links between sites {a!r} and {b!r}; "
                                          f"add a link (or a route) joining them")
        return along(paths[a][b])

    def own(a, b):
        if (a, b) in route_latency:
            return route_latency[a, b]
        return route_latency.get((b, a), 0.0) if (b, a) in via and (a, b) not in explicit else 0.0

    routes, crossed = {}, 0
    for a in sites:
        for b in sites:
            if a == b:
                continue
            hops = tuple(path_between(a, b))
            crossed += len(hops)
            if crossed > MAX_ROUTE_HOPS:
                raise NetworkError(["links"], f"the routes between {len(sites)} sites cross more "
                                              f"than {MAX_ROUTE_HOPS} links in all; expected fewer "
                                              f"sites or shorter paths")
            res = tuple(index[k, fwd or links[k].sharing != SPLIT] for k, fwd in hops)
            extra = own(a, b)
            lat = sum(links[k].latency for k, _ in hops) + extra
            bw = min((resources[r].capacity for r in res), default=float("inf"))
            routes[a, b] = Route(hops, res, float(lat), float(bw), float(extra))
    return Network(links, resources, routes, origin, via, explicit, route_latency, dict(lan or {}))


def canonical(net: Network) -> dict:
    """The network as canonical JSON-serialisable data (links by name, routes by site pair:
    what the models use, independent of how the file spelled the routes): Topology.to_dict
    includes it for a `links:` network."""
    def link(lk):
        return {"name": lk.name, "between": list(lk.ends) if lk.ends is not None else None,
                "latency": float(lk.latency), "bandwidth": float(lk.bandwidth),
                "sharing": lk.sharing,
                "bandwidth_back": None if lk.bandwidth_back is None else float(lk.bandwidth_back)}
    routes = []
    for (a, b) in sorted(net.routes):
        r = net.routes[a, b]
        routes.append({"from": a, "to": b, "latency": float(r.own_latency),
                       # the direction matters for a split link only
                       "hops": [[net.links[k].name, bool(fwd) or net.links[k].sharing != SPLIT]
                                for k, fwd in r.hops]})
    return {"links": [link(lk) for lk in sorted(net.links, key=lambda lk: lk.name)],
            "routes": routes,
            "lan": {s: [float(v[0]), float(v[1])] for s, v in sorted(net.lan.items())}}


def from_wan_classes(wan: dict, lan: dict) -> Network:
    """The `wan:` form as links: one per ordered site pair (a, b), `a->b`, with the pair's
    bandwidth and the latency beyond the two LAN halves. wan: {(a, b): (latency, bandwidth)}
    end to end; lan: {site: (latency, bandwidth)}."""
    links, routes, resources = [], {}, []
    for (a, b), (L, B) in wan.items():
        k = len(links)
        extra = max(L - (lan[a][0] + lan[b][0]) / 2, 0.0)
        links.append(WanLink(f"{a}->{b}", (a, b), extra, float(B), SHARED))
        resources.append(Resource(f"{a}->{b}", float(B), k))
        routes[a, b] = Route(((k, True),), (k,), extra, float(B))
    return Network(tuple(links), tuple(resources), routes, FROM_WAN, lan=dict(lan))
