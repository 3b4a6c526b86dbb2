"""The topology format's wide-area links (`links:` / `routes:`, docs/inputs.md "Wide-area links").

Random link graphs (2-5 sites, routers, random sharing, via and from/to routes): every
ordered pair of sites gets a route, the host matrices follow the formulas, the digest is
stable and survives write_topology, and shared_links agrees with the network. The `wan:`
form is unchanged (the bundled topologies' digests, the one-link-per-pair network), and
every mistake is one InputError line naming the field.

Run: PYTHONPATH=compiler python3 -m pytest -q tests/compiler/test_network_topology.py
"""
from __future__ import annotations

import dataclasses
import heapq
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsched.errors import InputError
from collsched.inputs import network as network_mod
from collsched.inputs import units
from collsched.inputs.topology import load_topology, write_topology

ROOT = Path(__file__).resolve().parents[2]
TOPOS = ROOT / "topologies"
BAD = ROOT / "tests" / "data" / "bad"

HYP = settings(max_examples=40, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])

# The bundled `wan:` topologies' digests before the `links:` form existed (commit 3a408e0):
# reading the `wan:` form must not change them.
BUNDLED_DIGESTS = {
    "grid-8x128": "182f4c7eaa1eb9669c87b3dc5010e063899df0563a22d74cbb362441059da2f5",
    "three-site-grid": "87933fde177f71d998f0367100af5617d53247e490049fcd44d33230cdf9a074",
    "tryton-48": "3f4469bea7830a72718faf52f9617d6a2e822703e4ae93d9195ceac5417b30c2",
    "wan-3x16": "7fbf19bfa0bbad88553913f93dd22bd9b02d555e71fa4f417743832e9028df6f",
}

TIME = st.builds(lambda v, u: f"{v}{u}", st.integers(0, 900), st.sampled_from(["us", "ms"]))
BW = st.builds(lambda v, u: f"{v}{u}", st.integers(1, 400), st.sampled_from(["Mbit/s", "Gbit/s"]))


def write(tmp_path, doc, name="t.yaml"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return p


# --- random link graphs ------------------------------------------------------------------

@st.composite
def link_topologies(draw):
    nsites = draw(st.integers(2, 5))
    sites = [f"s{i}" for i in range(nsites)]
    routers = [f"r{i}" for i in range(draw(st.integers(0, 3)))]
    points = sites + routers
    order = draw(st.permutations(points))
    pairs = [(order[i], order[draw(st.integers(0, i - 1))]) for i in range(1, len(order))]  # a tree
    for _ in range(draw(st.integers(0, 4))):  # and some more links
        a, b = draw(st.sampled_from(points)), draw(st.sampled_from(points))
        if a != b:
            pairs.append((a, b))
    links = []
    for k, (a, b) in enumerate(pairs):
        lk = {"name": f"l{k}", "between": [a, b], "latency": draw(TIME), "bandwidth": draw(BW)}
        if draw(st.booleans()):
            lk["sharing"] = draw(st.sampled_from(["shared", "split"]))
            if lk["sharing"] == "split" and draw(st.booleans()):
                lk["bandwidth_back"] = draw(BW)
        links.append(lk)
    if draw(st.booleans()):  # a link only explicit routes name
        links.append({"name": "floating", "latency": draw(TIME), "bandwidth": draw(BW),
                      "sharing": "split", "bandwidth_back": draw(BW)})
    adj = {p: set() for p in points}
    for a, b in pairs:
        adj[a].add(b), adj[b].add(a)
    routes, taken = [], set()
    for _ in range(draw(st.integers(0, 3))):
        a, b = draw(st.sampled_from(sites)), draw(st.sampled_from(sites))
        if a == b or (a, b) in taken:
            continue
        if draw(st.booleans()) and (b, a) not in taken:
            path = _some_path(adj, a, b)
            r = {"between": [a, b], "via": path[1:-1]}
            taken |= {(a, b), (b, a)}
        else:
            hops = draw(st.lists(st.sampled_from([lk["name"] for lk in links]), min_size=1, max_size=3))
            r = {"from": a, "to": b, "links": [h if not draw(st.booleans()) else {"link": h, "back": True}
                                             for h in hops]}
            taken.add((a, b))
        if draw(st.booleans()):
            r["latency"] = draw(TIME)
        routes.append(r)
    doc = {"name": "rand-links", "tcp_window": "4MiB",
           "sites": [{"name": s, "hosts": draw(st.integers(1, 3)),
                      "lan": {"latency": draw(TIME), "bandwidth": draw(BW)}} for s in sites],
           "links": links}
    if routes:
        doc["routes"] = routes
    if draw(st.booleans()):
        doc["placement"] = {"ranks_per_host": 2, "order": draw(st.sampled_from(["block", "cyclic"]))}
    return doc


def _some_path(adj, a, b):
    """A path of points from a to b (breadth first, neighbours in sorted order)."""
    prev, queue = {a: None}, [a]
    for x in queue:
        for y in sorted(adj[x]):
            if y not in prev:
                prev[y] = x
                queue.append(y)
    out = [b]
    while out[-1] != a:
        out.append(prev[out[-1]])
    return out[::-1]


def _least_latency(doc, a, b):
    """The least link latency from site a to site b (an independent Dijkstra)."""
    adj = {}
    for lk in doc["links"]:
        if "between" in lk:
            x, y = lk["between"]
            t = units.parse_time(lk["latency"])
            adj.setdefault(x, []).append((y, t))
            adj.setdefault(y, []).append((x, t))
    best, heap = {a: 0.0}, [(0.0, a)]
    while heap:
        d, x = heapq.heappop(heap)
        if d > best.get(x, np.inf):
            continue
        for y, t in adj.get(x, []):
            if d + t < best.get(y, np.inf):
                best[y] = d + t
                heapq.heappush(heap, (d + t, y))
    return best[b]


def _expected_route(doc, a, b):
    """(hops as (link name, forward) or None when the file leaves the path to the reader,
    own latency) of the route a -> b the file gives."""
    ends = {lk["name"]: lk.get("between") for lk in doc["links"]}
    for r in doc.get("routes", []):
        if "from" in r and (r["from"], r["to"]) == (a, b):
            hops = [(h, True) if isinstance(h, str) else (h["link"], False) for h in r["links"]]
            return hops, units.parse_time(r.get("latency", 0))
        if "between" in r and set(r["between"]) == {a, b}:
            seq = [r["between"][0], *r["via"], r["between"][1]]
            if r["between"][0] != a:
                seq = seq[::-1]
            hops = []
            for x, y in zip(seq, seq[1:]):
                cands = [lk for lk in doc["links"] if lk.get("between") and set(lk["between"]) == {x, y}]
                lk = min(cands, key=lambda lk: (units.parse_time(lk["latency"]), doc["links"].index(lk)))
                hops.append((lk["name"], ends[lk["name"]][0] == x))
            return hops, units.parse_time(r.get("latency", 0))
    return None, 0.0


@HYP
@given(link_topologies())
def test_random_link_graphs(tmp_path, doc):
    path = write(tmp_path, doc)
    t = load_topology(path)
    net = t.network
    assert net is not None and net.origin == network_mod.FROM_LINKS
    sites = [s["name"] for s in doc["sites"]]
    lan = {s["name"]: (units.parse_time(s["lan"]["latency"]), units.parse_bandwidth(s["lan"]["bandwidth"]))
           for s in doc["sites"]}
    assert set(net.routes) == {(a, b) for a in sites for b in sites if a != b}
    names = [lk.name for lk in net.links]
    for (a, b), route in net.routes.items():
        hops, own = _expected_route(doc, a, b)
        assert route.own_latency == own
        if hops is not None:
            assert [(names[k], fwd) for k, fwd in route.hops] == hops
        else:
            assert route.latency == pytest.approx(_least_latency(doc, a, b), abs=1e-9)
        assert route.latency == pytest.approx(sum(net.links[k].latency for k, _ in route.hops) + own)
        caps = [net.links[k].capacity(fwd) for k, fwd in route.hops]
        assert route.bandwidth == min(caps)
        assert [net.resources[r].capacity for r in route.resources] == caps
    # host matrices: L = lan_a / 2 + route latency + lan_b / 2, b = min(NICs, capacities)
    for i, hi in enumerate(t.host_site):
        for j, hj in enumerate(t.host_site):
            if i == j:
                continue
            if hi == hj:
                assert (t.host_latency[i, j], t.host_bandwidth[i, j]) == lan[hi]
                continue
            route = net.routes[hi, hj]
            assert t.host_latency[i, j] == lan[hi][0] / 2 + route.latency + lan[hj][0] / 2
            assert t.host_bandwidth[i, j] == min(lan[hi][1], lan[hj][1], route.bandwidth)
    # digest: stable, and the same after write_topology and loading again
    assert load_topology(path).digest() == t.digest()
    out = tmp_path / "back.yaml"
    write_topology(t, out)
    back = load_topology(out)
    assert back.digest() == t.digest()
    assert np.array_equal(back.latency, t.latency) and np.array_equal(back.bandwidth, t.bandwidth)
    _check_shared_links(t)


def _check_shared_links(t):
    net, sl = t.network, t.shared_links
    p = t.nranks
    site = t.rank_site()
    size = {s: t.host_site.count(s) for s in t.sites()}
    crossing = np.zeros(len(net.resources), int)
    for (a, b), route in net.routes.items():
        for k in set(route.resources):
            crossing[k] += size[a] * size[b]
    shared = [k for k in range(len(net.resources)) if crossing[k] >= 2]
    assert sl.names == [net.resources[k].name for k in shared]
    assert list(sl.bandwidth) == [net.resources[k].capacity for k in shared]
    new = {k: i for i, k in enumerate(shared)}
    for s in range(p):
        for r in range(p):
            if site[s] == site[r]:
                assert sl.route_of[s, r] == -1 and sl.link_of[s, r] == -1
                continue
            want = tuple(new[k] for k in net.routes[site[s], site[r]].resources if k in new)
            if not want:
                assert sl.route_of[s, r] == -1 and sl.link_of[s, r] == -1
                continue
            assert sl.routes[sl.route_of[s, r]] == want
            k = sl.link_of[s, r]
            assert k in want and sl.bandwidth[k] == min(sl.bandwidth[x] for x in want)
    assert sl.multi == any(len(r) > 1 for r in sl.routes)


# --- examples ----------------------------------------------------------------------------

SPEC = """
tcp_window: 4MiB
sites:
  - {name: paris, hosts: 4, lan: {latency: 10us, bandwidth: 25Gbit/s}}
  - {name: lyon, hosts: 2, lan: {latency: 10us, bandwidth: 25Gbit/s}}
  - {name: chicago, hosts: 3, lan: {latency: 10us, bandwidth: 10Gbit/s}}
links:
  - {name: fr-eu, between: [paris, eu-gw], latency: 1ms, bandwidth: 100Gbit/s}
  - {name: ly-eu, between: [lyon, eu-gw], latency: 2ms, bandwidth: 40Gbit/s}
  - name: atlantic
    between: [eu-gw, us-gw]
    latency: 40ms
    bandwidth: 10Gbit/s
    sharing: split
    bandwidth_back: 5Gbit/s
  - {name: us-chi, between: [us-gw, chicago], latency: 1ms, bandwidth: 40Gbit/s}
routes:
  - {between: [paris, chicago], via: [eu-gw, us-gw]}
  - {from: chicago, to: lyon, links: [us-chi, {link: atlantic, back: true}, ly-eu], latency: 3ms}
"""


def test_several_sites_behind_one_link(tmp_path):
    t = load_topology(write(tmp_path, SPEC))
    net = t.network
    g = units.parse_bandwidth
    hop = {(a, b): [(net.links[k].name, f) for k, f in r.hops] for (a, b), r in net.routes.items()}
    assert hop["paris", "chicago"] == [("fr-eu", True), ("atlantic", True), ("us-chi", True)]
    assert hop["chicago", "paris"] == [("us-chi", False), ("atlantic", False), ("fr-eu", False)]
    assert hop["lyon", "chicago"] == [("ly-eu", True), ("atlantic", True), ("us-chi", True)]
    assert hop["chicago", "lyon"] == [("us-chi", True), ("atlantic", False), ("ly-eu", True)]
    assert net.routes["chicago", "lyon"].own_latency == 3e-3
    assert net.routes["chicago", "lyon"].latency == pytest.approx(46e-3)
    # paris -> chicago: 5us + 42ms + 5us, at the atlantic's 10 Gbit/s (= chicago's NIC)
    assert t.host_latency[0, 6] == pytest.approx(42.01e-3)
    assert t.host_bandwidth[0, 6] == g("10Gbit/s")
    assert t.host_bandwidth[6, 0] == g("5Gbit/s") and t.host_bandwidth[6, 4] == g("5Gbit/s")
    # paris <-> lyon: through eu-gw, faster than the wan: form could say (40 Gbit/s link,
    # 25 Gbit/s NICs: the NICs bound one pair; the link is what the pairs share)
    assert t.host_bandwidth[0, 4] == g("25Gbit/s")
    # both European sites reach chicago through atlantic>: one resource for 4*3 + 2*3 pairs
    sl = t.shared_links
    k = sl.names.index("atlantic>")
    assert sl.link_of[0, 6] == k and sl.link_of[4, 6] == k and sl.bandwidth[k] == g("10Gbit/s")
    assert sl.multi


def test_wan_form_unchanged():
    from collsched import resources
    for name, digest in BUNDLED_DIGESTS.items():
        t = load_topology(name)
        assert t.digest() == digest, name
        if len(t.sites()) < 2:
            assert t.network is None
            continue
        assert t.network.origin == network_mod.FROM_WAN
        _, _, lan, wan = t.site_classes
        ref = dataclasses.replace(t, network=network_mod.from_wan_classes(wan, lan))
        assert np.array_equal(ref.shared_links.link_of, t.shared_links.link_of)
        assert "network" not in t.to_dict()
    assert set(BUNDLED_DIGESTS) <= set(resources.bundled_topologies())


def test_wan_as_links_same_matrices(tmp_path):
    """wan-3x16 written with one split link per site pair gives the same host matrices."""
    doc = yaml.safe_load((TOPOS / "wan-3x16.yaml").read_text())
    wan = doc.pop("wan")
    doc["links"] = [{"name": f"{w['between'][0]}-{w['between'][1]}", "between": list(w["between"]),
                     "latency": units.parse_time(w["latency"]) - 5e-6, "bandwidth": w["bandwidth"]}
                    for w in wan]
    # B -> C is shorter through A (20 + 40 ms < 80 ms): the wan: form's path is given
    doc["routes"] = [{"between": w["between"], "via": []} for w in wan]
    t = load_topology(write(tmp_path, doc))
    ref = load_topology(TOPOS / "wan-3x16.yaml")
    assert np.allclose(t.host_latency, ref.host_latency, rtol=1e-12)
    assert np.array_equal(t.host_bandwidth, ref.host_bandwidth)
    assert t.digest() != ref.digest()  # the network is part of a links: topology's digest
    # each shared link carries both directions of its pair: one resource, not two
    assert len(t.shared_links.names) == 3
    assert np.array_equal(t.shared_links.link_of >= 0, ref.shared_links.link_of >= 0)


def test_single_site_with_links(tmp_path):
    t = load_topology(write(tmp_path, """
sites: [{name: A, hosts: 3, lan: {latency: 10us, bandwidth: 1Gbit/s}}]
links: [{name: up, between: [A, isp], latency: 1ms, bandwidth: 1Gbit/s}]
"""))
    assert t.network.routes == {} and not t.shared_links.any


def test_links_faster_than_nics(tmp_path):
    """What the wan: form refuses: a 100 Gbit/s link between 10 Gbit/s NICs."""
    t = load_topology(write(tmp_path, """
sites:
  - {name: A, hosts: 8, lan: {latency: 10us, bandwidth: 10Gbit/s}}
  - {name: B, hosts: 8, lan: {latency: 10us, bandwidth: 10Gbit/s}}
links: [{name: fat, between: [A, B], latency: 5ms, bandwidth: 100Gbit/s}]
"""))
    assert t.host_bandwidth[0, 8] == units.parse_bandwidth("10Gbit/s")
    assert t.host_latency[0, 8] == pytest.approx(5.01e-3)
    assert t.shared_links.bandwidth[0] == units.parse_bandwidth("100Gbit/s")
    assert t.site_classes is not None


# --- errors --------------------------------------------------------------------------------

HEAD = """sites:
  - {name: A, hosts: 2, lan: {latency: 10us, bandwidth: 10Gbit/s}}
  - {name: B, hosts: 2, lan: {latency: 10us, bandwidth: 10Gbit/s}}
"""
OK_LINKS = """links:
  - {name: a-gw, between: [A, gw], latency: 1ms, bandwidth: 40Gbit/s}
  - {name: b-gw, between: [B, gw], latency: 1ms, bandwidth: 40Gbit/s, sharing: split}
"""

ERRORS = [
    (OK_LINKS + "routes: [{from: A, to: B, links: [a-gw, nope]}]", "routes[0].links[1]: unknown link 'nope'"),
    (OK_LINKS + "routes: [{between: [A, B], via: [gx]}]", "routes[0].via[0]: unknown point 'gx'"),
    (OK_LINKS + "routes: [{between: [A, B], via: []}]", "routes[0].via: no link between 'A' and 'B'"),
    (OK_LINKS + "  - {name: a-gw, between: [A, B], latency: 1ms, bandwidth: 1Gbit/s}",
     "links[2].name: duplicate link name 'a-gw'"),
    (OK_LINKS + "  - {name: l, between: [B, B], latency: 1ms, bandwidth: 1Gbit/s}",
     "links[2].between: expected two different points"),
    (OK_LINKS + "routes: [{from: A, to: B, links: [a-gw]}, {from: A, to: B, links: [b-gw]}]",
     "routes[1].from: duplicate route from 'A' to 'B' (also routes[0])"),
    (OK_LINKS + "routes: [{from: A, to: B, links: [a-gw]}, {between: [B, A], via: [gw]}]",
     "routes[1].between: duplicate route from 'A' to 'B' (also routes[0])"),
    ("links: [{name: a-gw, between: [A, gw], latency: 1ms, bandwidth: 1Gbit/s}]",
     "links: no path of links between sites 'A' and 'B'"),
    (OK_LINKS + "  - {name: x, between: [A, B], latency: 1ms, bandwidth: 1Gbit/s, bandwidth_back: 1Gbit/s}",
     "links[2].bandwidth_back: expected only with sharing: split"),
    (OK_LINKS + "  - {name: x, between: [A, B], latency: 1ms, bandwidth: 1Gbit/s, sharing: half}",
     "links[2].sharing: expected shared"),
    (OK_LINKS + "wan: [{between: [A, B], latency: 1ms, bandwidth: 1Gbit/s}]", "links: not allowed together with wan"),
    ("wan: [{between: [A, B], latency: 1ms, bandwidth: 1Gbit/s}]\nroutes: [{between: [A, B], via: []}]",
     "routes: expected only together with links:"),
    (OK_LINKS + "routes: [{from: A, to: A, links: [a-gw]}]", "routes[0].from: expected two different sites"),
    (OK_LINKS + "routes: [{from: A, links: [a-gw]}]", "routes[0].to: missing required field"),
    (OK_LINKS + "routes: [{from: A, to: B, via: [gw]}]", "routes[0].via: expected only with between"),
    (OK_LINKS + "routes: [{from: A, to: B, links: [{link: a-gw, back: maybe}]}]", "routes[0].links[0]: expected a link name"),
    (OK_LINKS + "routes: [{from: A, to: B, links: [a-gw], latency: -1ms}]", "routes[0].latency: expected a non-negative time"),
    (OK_LINKS + "  - {name: x, between: [A, B], latency: 1ms, bandwidth: 0}", "links[2].bandwidth: expected a positive bandwidth"),
    ("wan: [{between: [A, B], latency: 1ms, bandwidth: 11Gbit/s}]",
     "wan[0].bandwidth: '11Gbit/s' is above the lan (NIC) bandwidth of site 'A'"),
    ("wan: [{between: [A, B], latency: 1ms, bandwidth: 1Gbit/s, bandwidth_back: 20Gbit/s}]",
     "wan[0].bandwidth_back: '20Gbit/s' is above the lan (NIC) bandwidth"),
    ("wan: [{between: [A, B], latency: 9us, bandwidth: 1Gbit/s}]",
     "wan[0].latency: '9us' is below the two LAN halves"),
]


@pytest.mark.parametrize("body,expect", ERRORS)
def test_errors_one_line(tmp_path, body, expect):
    p = write(tmp_path, HEAD + body + "\n")
    with pytest.raises(InputError) as e:
        load_topology(p)
    line = e.value.line()
    assert "\n" not in line and line.startswith(str(p)) and expect in line, line
    if "wan" in expect.split(":")[0]:
        assert "links:" in line and "docs/inputs.md" in line


def test_wan_equal_to_nic_and_halves_is_fine(tmp_path):
    t = load_topology(write(tmp_path, HEAD + "wan: [{between: [A, B], latency: 10us, bandwidth: 10Gbit/s}]\n"))
    assert t.network.origin == network_mod.FROM_WAN


def test_links_with_matrix(tmp_path):
    p = write(tmp_path, """hosts: [{name: n0, site: A}, {name: n1, site: B}]
matrix: {latency: [[0, 1ms], [1ms, 0]], bandwidth: [[null, 1Gbit/s], [1Gbit/s, null]]}
links: [{name: x, between: [A, B], latency: 1ms, bandwidth: 1Gbit/s}]
""")
    with pytest.raises(InputError, match=r"links: not allowed together with matrix"):
        load_topology(p)


@pytest.mark.parametrize("text", [
    "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n<platform version=\"4.1\"/>\n",
    "<platform version=\"4.1\">\n  <zone id=\"z\" routing=\"Full\"/>\n</platform>\n",
])
def test_xml_given_as_topology(tmp_path, text):
    p = write(tmp_path, text, "four-site.xml")
    with pytest.raises(InputError) as e:
        load_topology(p)
    line = e.value.line()
    assert "\n" not in line and "four-site.xml" in line
    assert "SimGrid platform XML, not a collsched topology YAML" in line
    assert "--platform FILE.xml --hostfile FILE" in line and "smpi" in line


def test_route_limits(tmp_path, monkeypatch):
    monkeypatch.setattr(network_mod, "MAX_ROUTE_HOPS", 3)
    p = write(tmp_path, HEAD + OK_LINKS)
    with pytest.raises(InputError, match=r"links: the routes between 2 sites cross more than 3"):
        load_topology(p)


def test_wan_single_host_site_nic_is_fastest_class(tmp_path):
    """A site of one host has no LAN pair: in the wan: form its NIC is the fastest class out
    of it (links.site_classes, as before), so a faster wan class is no change of shape."""
    t = load_topology(write(tmp_path, """sites:
  - {name: A, hosts: 1, lan: {latency: 10us, bandwidth: 100Mbit/s}}
  - {name: B, hosts: 2, lan: {latency: 1us, bandwidth: 208Mbit/s}}
wan: [{between: [A, B], latency: 2ms, bandwidth: 189Mbit/s}]
"""))
    assert t.site_classes is not None and t.shared_links.any
    assert t.host_bandwidth[0, 1] == units.parse_bandwidth("189Mbit/s")


def test_docs_examples(tmp_path):
    """The `links:` examples of docs/inputs.md load, with the costs the text gives."""
    import re
    text = (ROOT / "docs" / "inputs.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "\nlinks:" in "\n" + b]
    assert len(blocks) >= 2
    topos = [load_topology(write(tmp_path, b, f"doc{i}.yaml")) for i, b in enumerate(blocks)]
    g = units.parse_bandwidth
    hub = next(t for t in topos if "east" in t.sites())
    n, e = hub.host_site.index("north"), hub.host_site.index("east")
    assert hub.host_latency[n, e] == pytest.approx(10.055e-3)
    assert hub.host_bandwidth[n, e] == g("10Gbit/s")
    names = [hub.network.resources[k].name for k in hub.network.routes["north", "east"].resources]
    assert names == ["north-campus", "campus-up", "hub-east>"]
    paris = next(t for t in topos if "paris" in t.sites())
    p, ly = paris.host_site.index("paris"), paris.host_site.index("lyon")
    assert paris.host_bandwidth[p, ly] == g("25Gbit/s")


JUNK = st.sampled_from([None, True, -1, 0, 2.5, "", "x", "s0", "s1", "r0", "l0", "gw", "shared", "split",
                        "1e999999999 s", "-3 Gbit/s", [], ["s0"], ["s0", "s0"], ["s0", "s1", "s2"], {},
                        {"link": "l0"}, {"link": "nope", "back": True}, ["l0", {"link": "l1", "back": 1}]])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(link_topologies(), st.data())
def test_mutated_links_load_or_one_line(tmp_path, doc, data):
    """A valid `links:` file with one value anywhere in links/routes replaced by junk gives
    a Topology or one InputError line naming the file."""
    section = data.draw(st.sampled_from([k for k in ("links", "routes") if k in doc]))
    node = doc[section]
    i = data.draw(st.integers(0, len(node) - 1))
    entry = node[i]
    key = data.draw(st.sampled_from(sorted(entry) + ["sharing", "back", "via", "from"]))
    entry[key] = data.draw(JUNK)
    p = write(tmp_path, doc)
    try:
        load_topology(p)
    except InputError as e:
        line = e.line()
        assert "\n" not in line and str(p) in line and line.count(":") >= 2, line


def test_write_refuses_matrices_the_network_does_not_give(tmp_path):
    t = load_topology(write(tmp_path, SPEC))
    changed = dataclasses.replace(t, host_latency=t.host_latency * 2)
    with pytest.raises(ValueError, match="does not have the latency and bandwidth its links network gives"):
        write_topology(changed, tmp_path / "x.yaml")
    assert not (tmp_path / "x.yaml").exists()
    write_topology(dataclasses.replace(changed, network=None), tmp_path / "m.yaml")
    assert load_topology(tmp_path / "m.yaml").network is None


def test_digest_is_the_network_not_its_spelling(tmp_path):
    """Two files that give the same links and routes differently have one digest: a route
    given through its points or found by the reader, a shared link crossed either way."""
    base = "name: t\n" + HEAD + OK_LINKS
    a = load_topology(write(tmp_path, base, "a.yaml"))
    b = load_topology(write(tmp_path, base + "routes: [{between: [B, A], via: [gw]}]\n", "b.yaml"))
    c = load_topology(write(tmp_path, base + "routes: [{from: A, to: B, links: [{link: a-gw, back: true}, "
                                             "{link: b-gw, back: true}]}]\n", "c.yaml"))
    assert a.digest() == b.digest() == c.digest()
    d = load_topology(write(tmp_path, base + "routes: [{from: A, to: B, links: [a-gw, b-gw]}]\n",
                            "d.yaml"))  # b-gw is split: crossed the other way, another network
    assert d.digest() != a.digest()


def test_single_host_site_nic_from_links(tmp_path):
    """A `links:` site of one host keeps its declared NIC (site_classes, port rates): the
    flow crossing the 1 Gbit/s link occupies the 25 Gbit/s NIC at 25 Gbit/s."""
    t = load_topology(write(tmp_path, """sites:
  - {name: A, hosts: 1, lan: {latency: 10us, bandwidth: 25Gbit/s}}
  - {name: B, hosts: 2, lan: {latency: 10us, bandwidth: 25Gbit/s}}
links: [{name: slow, between: [A, B], latency: 1ms, bandwidth: 1Gbit/s}]
"""))
    g = units.parse_bandwidth
    assert t.site_classes[2]["A"] == (1e-5, g("25Gbit/s"))
    send, recv = t.port_bandwidth
    assert send[0, 1] == g("25Gbit/s") and t.bandwidth[0, 1] == g("1Gbit/s")
