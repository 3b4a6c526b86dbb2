"""Topologies with a wide-area network of `links:` (network.py), built in code for the
model tests (test_network_models.py, test_lowerbound.py) and the fidelity runs
(tools/netfidelity.py): host matrices from the sites' LAN classes and the resolved routes,
as docs/SPEC's formula says,

    L(h, h') = lan_a.latency / 2 + route latency + lan_b.latency / 2
    b(h, h') = min(lan_a.bandwidth, lan_b.bandwidth, every resource capacity on the route)
"""
from __future__ import annotations

import dataclasses

import numpy as np

from collsched.inputs import network
from collsched.inputs.network import SHARED, SPLIT, WanLink
from collsched.inputs.topology import INTRA_HOST_BANDWIDTH, INTRA_HOST_LATENCY, _from_hosts

GBIT = 1e9 / 8


def links_topology(sites, links, via=None, tcp_window=None, full_duplex=True, name="links",
                   placement=None):
    """sites: [(name, hosts, lan latency s, lan bandwidth B/s)]; links: [WanLink];
    via: {(a, b): [points]}; placement: host index of every rank (default one per host)."""
    names = [s[0] for s in sites]
    net = network.resolve(links, names, via)
    hosts, host_site = [], []
    for s, n, _, _ in sites:
        hosts += [f"{s}-{j}" for j in range(n)]
        host_site += [s] * n
    lan = {s: (lat, bw) for s, _, lat, bw in sites}
    h = len(hosts)
    hlat, hbw = np.empty((h, h)), np.empty((h, h))
    for i, a in enumerate(host_site):
        for j, b in enumerate(host_site):
            if i == j:
                hlat[i, j], hbw[i, j] = INTRA_HOST_LATENCY, INTRA_HOST_BANDWIDTH
            elif a == b:
                hlat[i, j], hbw[i, j] = lan[a]
            else:
                r = net.route(a, b)
                hlat[i, j] = (lan[a][0] + lan[b][0]) / 2 + r.latency
                hbw[i, j] = min(lan[a][1], lan[b][1], r.bandwidth)
    rank_host = np.arange(h) if placement is None else np.asarray(placement)
    topo = _from_hosts(name, "<code>", hosts, host_site, rank_host, hlat, hbw, full_duplex)
    return dataclasses.replace(topo, network=net, tcp_window=tcp_window)


def lan(n, name, bw=10 * GBIT, lat=10e-6):
    return (name, n, lat, bw)


def behind_one_link(n=(6, 5, 5), atlantic=10 * GBIT, sharing=SHARED, tcp_window=None):
    """paris and lyon reach chicago through one link (eu-gw -- us-gw), each over its own
    fast access link: two site pairs (and both directions when shared) on `atlantic`."""
    sites = [lan(n[0], "paris", 25 * GBIT), lan(n[1], "lyon"), lan(n[2], "chicago")]
    links = [WanLink("fr-paris", ("paris", "eu-gw"), 1e-3, 100 * GBIT),
             WanLink("fr-lyon", ("lyon", "eu-gw"), 2e-3, 100 * GBIT),
             WanLink("atlantic", ("eu-gw", "us-gw"), 40e-3, atlantic, sharing,
                     atlantic / 2 if sharing == SPLIT else None),
             WanLink("us-chicago", ("us-gw", "chicago"), 1e-3, 100 * GBIT)]
    return links_topology(sites, links, tcp_window=tcp_window, name="behind-one-link")


def two_hop_route(n=(6, 5, 5), tcp_window=None):
    """a -- b -- c in a chain: a -> c crosses both links (a 2.5 and a 5 Gbit/s one)."""
    sites = [lan(n[0], "a"), lan(n[1], "b"), lan(n[2], "c")]
    links = [WanLink("ab", ("a", "b"), 5e-3, 2.5 * GBIT, SPLIT),
             WanLink("bc", ("b", "c"), 10e-3, 5 * GBIT, SHARED)]
    return links_topology(sites, links, tcp_window=tcp_window, name="two-hop")


def shared_both_ways(n=(8, 8), capacity=1 * GBIT, tcp_window=None):
    """Two sites and one SHARED link: both directions share its capacity."""
    sites = [lan(n[0], "east"), lan(n[1], "west")]
    links = [WanLink("wire", ("east", "west"), 5e-3, capacity, SHARED)]
    return links_topology(sites, links, tcp_window=tcp_window, name="shared-both-ways")


def window_capped(n=(6, 5, 5), tcp_window=4 * 1024 * 1024):
    """A 100 Gbit/s triangle of 20 to 55 ms links: one flow gets window / RTT, far below."""
    sites = [lan(n[0], "x", 25 * GBIT), lan(n[1], "y"), lan(n[2], "z")]
    links = [WanLink("xy", ("x", "y"), 20e-3, 100 * GBIT),
             WanLink("yz", ("y", "z"), 35e-3, 40 * GBIT, SPLIT, 20 * GBIT),
             WanLink("xz", ("x", "z"), 55e-3, 100 * GBIT)]
    return links_topology(sites, links, tcp_window=tcp_window, name="window-capped")


CASES = {"behind-one-link": behind_one_link, "two-hop": two_hop_route,
         "shared-both-ways": shared_both_ways, "window-capped": window_capped}


def random_links_topology(rng, nsites, hosts_per_site, nrouters, extra_links, full_duplex=True,
                          tcp_window=None, ranks_per_host=1):
    """Random sites (LAN classes), routers and links (a random tree over all points plus
    `extra_links` more), each link shared or split, often faster than the NICs."""
    names = [f"s{i}" for i in range(nsites)]
    points = names + [f"r{i}" for i in range(nrouters)]
    sites = [(s, int(hosts_per_site[i]), float(rng.uniform(1e-6, 1e-4)),
              float(10 ** rng.uniform(7, 9.5))) for i, s in enumerate(names)]
    order = list(rng.permutation(len(points)))
    pairs = [(points[order[i]], points[order[int(rng.integers(0, i))]]) for i in range(1, len(points))]
    for _ in range(extra_links):
        a, b = rng.choice(len(points), 2, replace=False)
        pairs.append((points[a], points[b]))
    links = []
    for k, (a, b) in enumerate(pairs):
        split = bool(rng.integers(0, 2))
        bw = float(10 ** rng.uniform(6, 9.5))
        links.append(WanLink(f"l{k}", (a, b), float(rng.uniform(1e-4, 5e-2)), bw,
                             SPLIT if split else SHARED,
                             float(10 ** rng.uniform(6, 9.5)) if split else None))
    nh = sum(s[1] for s in sites)
    placement = np.repeat(np.arange(nh), ranks_per_host)
    return links_topology(sites, links, tcp_window=tcp_window, full_duplex=full_duplex,
                          name="random-links", placement=placement)
