"""The wide-area network of a topology: links that flows share, and the route between sites.

A topology's hosts sit in sites; each host reaches its site's network through its NIC
(the site's `lan` class: half the LAN latency on each side, the LAN bandwidth). Between
sites, flows cross **wide-area links**: resources with their own capacity and latency,
independent of the NICs, each either

* ``shared``: one capacity for both directions (SimGrid's SHARED sharing policy), or
* ``split``: one capacity per direction (SPLITDUPLEX; `bandwidth_back` may differ).

A link joins two *points*: sites, or routers (any other name). The route between two
sites is a path of links, by default the one of least latency (networkx), or the one a
`routes:` entry names through its routers; the way back is the same path reversed. So
several sites may sit behind one link (their routes share it) and a route may cross more
than one link. A flow from site a to site b then has

    latency   L = lan_a / 2 + sum of the route's link latencies + lan_b / 2
    bandwidth b = min(NIC_a, NIC_b, every link's capacity in its direction)

and shares each of the route's *resources* (a shared link: one; a split link: the
direction it crosses) with every other flow crossing it.

The older `wan:` form (one entry per pair of sites, end-to-end latency and bandwidth) is
the special case of one link per ordered site pair, carrying the latency beyond the two
LAN halves: `from_wan_classes` builds it, so every model reads one description.

This module resolves a description into resources and routes; reading it from YAML (with
one-line errors) is topology.py's, writing a SimGrid platform from it lab/platform.py's.
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
    ends: tuple[str, str]
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
    latency: float  # sum of the links' latencies
    bandwidth: float  # smallest capacity on the path (inf for an empty path)


@dataclass(frozen=True)
class Network:
    """Links, the resources they make, and a route for every ordered pair of sites."""

    links: tuple[WanLink, ...]
    resources: tuple[Resource, ...]
    routes: dict  # (site_a, site_b) -> Route, a != b
    origin: str = FROM_LINKS
    # routes given by the file (`routes:` entries: (a, b) -> points in between), kept to
    # write the description back
    via: dict = field(default_factory=dict)

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


def resolve(links, sites, via=None, origin=FROM_LINKS) -> Network:
    """Resources and a route for every ordered pair of `sites` (those that have ranks).

    links: WanLink list; via: {(a, b): [router, ...]} for routes the file gives, else the
    path of least latency (fewest links, then the first links listed, on a tie). Raises
    NetworkError when two sites have no path, a `via` names a point or link that does not
    exist, or a link's ends are the same point.
    """
    import networkx as nx

    links = tuple(links)
    via = dict(via or {})
    resources = tuple(_resources(links))
    index = {}
    for k, r in enumerate(resources):
        index[r.link, r.name.endswith(">") or links[r.link].sharing != SPLIT] = k
    g = nx.MultiGraph()
    g.add_nodes_from(sites)
    for k, lk in enumerate(links):
        a, b = lk.ends
        if a == b:
            raise NetworkError(["links", k, "between"], f"expected two different points, got {a!r} twice")
        # weight: latency first, then one more link, then the order listed (deterministic)
        g.add_edge(a, b, key=k, weight=(lk.latency, 1, k))

    def hop(k, x):
        return k, links[k].ends[0] == x

    def best_edge(x, y):
        ks = sorted(g[x][y], key=lambda k: (links[k].latency, k))
        return ks[0]

    def path_between(a, b):
        if (a, b) in via or (b, a) in via:
            points = via.get((a, b))
            if points is None:
                points = list(reversed(via[(b, a)]))
            seq = [a, *points, b]
            for p in seq:
                if p not in g:
                    raise NetworkError(["routes"], f"route {a} -> {b}: unknown point {p!r}")
            out = []
            for x, y in zip(seq, seq[1:]):
                if not g.has_edge(x, y):
                    raise NetworkError(["routes"], f"route {a} -> {b}: no link between {x!r} and {y!r}")
                out.append(hop(best_edge(x, y), x))
            return out
        try:
            nodes = nx.shortest_path(g, a, b, weight=lambda u, v, d: min(
                (e["weight"][0] + 1e-12 * e["weight"][1] for e in d.values())))
        except nx.NetworkXNoPath:
            raise NetworkError(["links"], f"no path of links between sites {a!r} and {b!r}; "
                                          f"add a link (or a route) joining them") from None
        return [hop(best_edge(x, y), x) for x, y in zip(nodes, nodes[1:])]

    routes = {}
    for a in sites:
        for b in sites:
            if a == b:
                continue
            hops = tuple(path_between(a, b))
            res = tuple(index[k, fwd or links[k].sharing != SPLIT] for k, fwd in hops)
            lat = sum(links[k].latency for k, _ in hops)
            bw = min((resources[r].capacity for r in res), default=float("inf"))
            routes[a, b] = Route(hops, res, float(lat), float(bw))
    return Network(links, resources, routes, origin, via)


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
    return Network(tuple(links), tuple(resources), routes, FROM_WAN)
