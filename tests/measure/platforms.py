"""SimGrid platforms with shared wide-area links, written in code for the capacity tests
(tests/measure/test_capacity.py), and what a measurement should find on them.

`shared_four_sites()`: four sites of unequal size and NICs, wide-area links of 2.5 to 100
Gbit/s, one shared by both directions (the Atlantic, crossed by Paris and London to
Chicago and Tokyo), one split (the Pacific: one capacity per direction), a direct
Paris-London channel (split), non-limiting access links. Truth: for every ordered pair of
sites, its route (resources in order), latency and bottleneck.
"""
from __future__ import annotations

from dataclasses import dataclass, field

GBIT = 1e9 / 8


@dataclass
class SharedPlatform:
    xml: str
    hostfile: str
    sites: dict  # site -> (hosts, NIC B/s, host-link latency s)
    links: dict  # link -> (B/s, latency s, "SHARED" | "SPLITDUPLEX")
    routes: dict  # (a, b) -> [(link, direction or None)]
    ranks: int = 0
    site_of_rank: list = field(default_factory=list)

    def resources(self, a, b):
        return [f"{n}{'' if d is None else '_' + d}" for n, d in self.routes[a, b]]

    def bottleneck(self, a, b):
        return min(self.links[n][0] for n, _ in self.routes[a, b])

    def latency(self, a, b):
        """Host to host: both host links and the route's links."""
        return self.sites[a][2] + self.sites[b][2] + sum(self.links[n][1] for n, _ in self.routes[a, b])

    def lan(self, s):
        return 2 * self.sites[s][2], self.sites[s][1]

    def shares(self, p, q):
        """Truth: p and q cross a common resource that is some ordered pair's bottleneck
        (not an access link that limits nobody)."""
        limiting = set()
        for a, b in self.routes:
            bw = self.bottleneck(a, b)
            limiting |= {r for r, (n, _) in zip(self.resources(a, b), self.routes[a, b]) if self.links[n][0] == bw}
        return bool(set(self.resources(*p)) & set(self.resources(*q)) & limiting)


def _route(a, b, hops, symmetrical=False):
    ctn = "".join(f'<link_ctn id="{n}"' + (f' direction="{d}"' if d else "") + "/>" for n, d in hops)
    return (f'    <zoneRoute src="{a}" dst="{b}" gw_src="{a}-gw" gw_dst="{b}-gw" '
            f'symmetrical="{"YES" if symmetrical else "NO"}">{ctn}</zoneRoute>')


def shared_four_sites(hosts=(4, 3, 4, 2)) -> SharedPlatform:
    sites = {"paris": (hosts[0], 25 * GBIT, 5e-6), "london": (hosts[1], 10 * GBIT, 5e-6),
             "chicago": (hosts[2], 10 * GBIT, 5e-6), "tokyo": (hosts[3], 10 * GBIT, 10e-6)}
    links = {"paris-eu": (100 * GBIT, 2e-3, "SHARED"), "london-eu": (100 * GBIT, 3e-3, "SHARED"),
             "atlantic": (5 * GBIT, 40e-3, "SHARED"), "chicago-us": (100 * GBIT, 1e-3, "SHARED"),
             "pacific": (2.5 * GBIT, 60e-3, "SPLITDUPLEX"), "tokyo-asia": (100 * GBIT, 1e-3, "SHARED"),
             "channel": (8 * GBIT, 4e-3, "SPLITDUPLEX")}
    eu = {"paris": "paris-eu", "london": "london-eu"}
    routes = {}
    for s in ("paris", "london"):
        routes[s, "chicago"] = [(eu[s], None), ("atlantic", None), ("chicago-us", None)]
        routes["chicago", s] = list(reversed(routes[s, "chicago"]))
        routes[s, "tokyo"] = routes[s, "chicago"] + [("pacific", "UP"), ("tokyo-asia", None)]
        routes["tokyo", s] = [("tokyo-asia", None), ("pacific", "DOWN")] + routes["chicago", s]
    routes["chicago", "tokyo"] = [("chicago-us", None), ("pacific", "UP"), ("tokyo-asia", None)]
    routes["tokyo", "chicago"] = [("tokyo-asia", None), ("pacific", "DOWN"), ("chicago-us", None)]
    routes["paris", "london"] = [("channel", "UP")]
    routes["london", "paris"] = [("channel", "DOWN")]
    xml = ["<?xml version='1.0'?>", '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
           "<!-- four sites behind shared wide-area links: tests/measure/platforms.py -->",
           '<platform version="4.1">', '  <zone id="world" routing="Full">']
    for s, (n, nic, lat) in sites.items():
        xml.append(f'    <cluster id="{s}" prefix="{s}-" suffix="" radical="0-{n - 1}" speed="1Gf" '
                   f'bw="{nic:.17g}Bps" lat="{lat:.17g}s" sharing_policy="SPLITDUPLEX" router_id="{s}-gw"/>')
    for name, (bw, lat, policy) in links.items():
        xml.append(f'    <link id="{name}" bandwidth="{bw:.17g}Bps" latency="{lat:.17g}s" sharing_policy="{policy}"/>')
    for (a, b), hops in routes.items():
        xml.append(_route(a, b, hops))
    xml += ["  </zone>", "</platform>", ""]
    order = [f"{s}-{i}" for s, (n, _, _) in sites.items() for i in range(n)]
    site_of_rank = [s for s, (n, _, _) in sites.items() for _ in range(n)]
    return SharedPlatform("\n".join(xml), "".join(h + "\n" for h in order), sites, links, routes,
                          len(order), site_of_rank)
