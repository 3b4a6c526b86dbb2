"""Reading (and writing back) what lies between the sites of a class-form topology file.

Two forms, one or the other (docs/inputs.md, "Wide-area links"):

* `wan:` - one entry per pair of sites, the end-to-end latency and bandwidth of every host
  pair between them (`read_wan`). Such an entry must be reproducible by a shared link
  between the two sites' NICs: a bandwidth above either NIC (the site's lan bandwidth), or
  a latency below the two LAN halves, is an error that points to `links:` (it used to turn
  the whole topology into per-pair form, silently).
* `links:` (and optional `routes:`) - wide-area links as resources of their own, shared by
  every route that crosses them (`read_links`; network.py resolves the routes). Host pairs
  between sites a and b then have

      L = lan_a.latency / 2 + route latency (its links' + its own) + lan_b.latency / 2
      b = min(lan_a.bandwidth, lan_b.bandwidth, every resource capacity on the route)

Both fill site x site latency / bandwidth matrices through the reader's `put(i, j, cls)`;
`links_doc` gives the `sites`/`links`/`routes` part of a file for a topology with a
`links:` network, so that topology.write_topology writes it back in class form.
"""
from __future__ import annotations

import numpy as np
import yaml

from . import network as net
from . import units
from .schemas import describe
from ..files import write_atomic

_REL = 1e-9  # tolerance of the no-silent-shape check (values written in other units)
LINKS_HELP = 'describe such a link under links: (docs/inputs.md, "Wide-area links")'


def _names(names, limit=12) -> str:
    names = list(names)
    shown = ", ".join(str(n) for n in names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "") or "(none)"


def read_wan(reader, sites, index, used, lan, put) -> dict:
    """The `wan:` entries: puts both directions of every pair; returns {frozenset pair: entry}.

    sites: the file's site mappings; index: site name -> index; used: indices of the sites
    with hosts; lan: index -> (latency, bandwidth) that bounds the classes of the site's
    pairs (the site's lan; (0, inf) for a site of one host, whose NIC is the fastest class
    out of it, links.site_classes)."""
    d = reader.d
    pair_at = {}
    for k, w in enumerate(d.get("wan", [])):
        a, b = w["between"]
        for j, sname in enumerate((a, b)):
            if sname not in index:
                raise reader.fail(["wan", k, "between", j], f"unknown site {sname!r}; expected "
                                  f"one of: {_names(index) if index else '(no sites declared)'}")
        if a == b:
            raise reader.fail(["wan", k, "between"], f"expected two different sites, got "
                              f"{a!r} twice (a site's own links are its lan)")
        key = frozenset((a, b))
        if key in pair_at:
            raise reader.fail(["wan", k, "between"], f"duplicate WAN link between {a!r} and "
                              f"{b!r} (also wan[{pair_at[key]}])")
        pair_at[key] = k
        p = ["wan", k]
        fwd = reader.link_class(w, p)
        back_lat = reader.time(w["latency_back"], p + ["latency_back"]) if "latency_back" in w else fwd[0]
        back_bw = (reader.bandwidth(w["bandwidth_back"], p + ["bandwidth_back"])
                   if "bandwidth_back" in w else fwd[1])
        ia, ib = index[a], index[b]
        for lat_key, bw_key, L, B in (("latency", "bandwidth", fwd[0], fwd[1]),
                                      ("latency_back" if "latency_back" in w else "latency",
                                       "bandwidth_back" if "bandwidth_back" in w else "bandwidth",
                                       back_lat, back_bw)):
            _check_wan_shape(reader, p, a, b, ia, ib, lan, (lat_key, L), (bw_key, B), w)
        put(ia, ib, fwd)
        put(ib, ia, (back_lat, back_bw, fwd[2], fwd[3]))
    for x in used:
        for y in used:
            if x < y and frozenset((sites[x]["name"], sites[y]["name"])) not in pair_at:
                a, b = sites[x]["name"], sites[y]["name"]
                raise reader.fail(["wan"], f"no WAN link between sites {a!r} and {b!r}; add "
                                  f"{{between: [{a}, {b}], latency: ..., bandwidth: ...}}",
                                  line_at=[] if "wan" not in d else None)
    return pair_at


def _check_wan_shape(reader, p, a, b, ia, ib, lan, lat, bw, w) -> None:
    """A `wan:` class a shared link between the two NICs cannot reproduce is an error."""
    if ia not in lan or ib not in lan:
        return  # a site without hosts (and lan): nothing crosses the link
    (lat_key, L), (bw_key, B) = lat, bw
    nic = min(lan[ia][1], lan[ib][1])
    if B > nic * (1 + _REL):
        slow = a if lan[ia][1] <= lan[ib][1] else b
        nic = units.format_bandwidth(nic)
        shown = describe(w[bw_key]) if isinstance(w[bw_key], str) else units.format_bandwidth(B)
        raise reader.fail(p + [bw_key], f"{shown} is above the lan (NIC) bandwidth "
                          f"of site {slow!r} ({nic}): a wan: entry "
                          f"is the end-to-end rate of one host pair, at most both NICs'; to "
                          f"model a wide-area link faster than the NICs, {LINKS_HELP}")
    halves = (lan[ia][0] + lan[ib][0]) / 2
    if L < halves * (1 - _REL):
        shown = describe(w[lat_key]) if isinstance(w[lat_key], str) else units.format_time(L)
        raise reader.fail(p + [lat_key], f"{shown} is below the two LAN halves "
                          f"(lan latency of {a!r} / 2 + of {b!r} / 2 = {units.format_time(halves)}): a wan: "
                          f"entry is the end-to-end latency of one host pair, NIC to NIC; "
                          f"{LINKS_HELP}")


def _read_link(reader, k, spec):
    p = ["links", k]
    ends = tuple(spec["between"]) if "between" in spec else None
    if ends is not None and ends[0] == ends[1]:
        raise reader.fail(p + ["between"], f"expected two different points, got {ends[0]!r} "
                          f"twice (a link joins a point to another)")
    sharing = spec.get("sharing", net.SHARED)
    lat = reader.time(spec["latency"], p + ["latency"])
    bw = reader.bandwidth(spec["bandwidth"], p + ["bandwidth"])
    back = None
    if "bandwidth_back" in spec:
        if sharing != net.SPLIT:
            raise reader.fail(p + ["bandwidth_back"], "expected only with sharing: split (a "
                              "shared link has one capacity for both directions)")
        back = reader.bandwidth(spec["bandwidth_back"], p + ["bandwidth_back"])
    return net.WanLink(spec["name"], ends, lat, bw, sharing, back)


def _site_at(reader, index, parts, name):
    if name not in index:
        raise reader.fail(parts, f"unknown site {name!r}; expected one of: {_names(index)}")
    return name


def _read_routes(reader, index, links, link_at):
    """(via, explicit, route_latency) of the `routes:` entries (network.resolve's)."""
    points = set(index) | {e for lk in links if lk.ends for e in lk.ends}
    joined = {frozenset(lk.ends) for lk in links if lk.ends}
    via, explicit, own, given = {}, {}, {}, {}
    for r, spec in enumerate(reader.d.get("routes", [])):
        p = ["routes", r]
        if "between" in spec:
            for key in ("from", "to", "links"):
                if key in spec:
                    raise reader.fail(p + [key], "not allowed together with between: give "
                                      "either {between: [A, B], via: [...]} (both ways) or "
                                      "{from: A, to: B, links: [...]} (one way)")
            a, b = (_site_at(reader, index, p + ["between", j], x) for j, x in enumerate(spec["between"]))
            field, pairs = p + ["between"], [(a, b), (b, a)]
        else:
            if "via" in spec:
                raise reader.fail(p + ["via"], "expected only with between: [SITE_A, SITE_B] "
                                  "(a from/to route lists its links)")
            for key in ("from", "to", "links"):
                if key not in spec:
                    raise reader.fail(p + [key], "missing required field; expected {between: "
                                      "[A, B], via: [...]} or {from: A, to: B, links: [...]}",
                                      line_at=p)
            a = _site_at(reader, index, p + ["from"], spec["from"])
            b = _site_at(reader, index, p + ["to"], spec["to"])
            field, pairs = p + ["from"], [(a, b)]
        if a == b:
            raise reader.fail(field, f"expected two different sites, got {a!r} twice")
        for pair in pairs:
            if pair in given:
                raise reader.fail(field, f"duplicate route from {pair[0]!r} to {pair[1]!r} "
                                  f"(also routes[{given[pair]}])")
        for pair in pairs:
            given[pair] = r
        if "between" in spec:
            pts = list(spec.get("via", []))
            for j, x in enumerate(pts):
                if x not in points:
                    raise reader.fail(p + ["via", j], f"unknown point {x!r}; expected a site or "
                                      f"a point that links[].between names: {_names(sorted(points))}")
            seq = [a, *pts, b]
            for x, y in zip(seq, seq[1:]):
                if frozenset((x, y)) not in joined or x == y:
                    raise reader.fail(p + ["via"], f"no link between {x!r} and {y!r} (expected "
                                      f"consecutive points that a link's between joins)")
            via[a, b] = pts
        else:
            hops = []
            for j, item in enumerate(spec["links"]):
                name = item if isinstance(item, str) else item["link"]
                if name not in link_at:
                    raise reader.fail(p + ["links", j], f"unknown link {name!r}; expected one "
                                      f"of: {_names(link_at)}")
                hops.append((link_at[name], not (isinstance(item, dict) and item.get("back", False))))
            explicit[a, b] = hops
        if "latency" in spec:
            own[a, b] = reader.time(spec["latency"], p + ["latency"])
    return via, explicit, own


def read_links(reader, sites, index, used, lan, put) -> net.Network:
    """The `links:` / `routes:` form: puts every pair of sites with hosts; returns the
    resolved network. lan: index -> (latency, bandwidth) of the sites with hosts."""
    d = reader.d
    specs = d.get("links", [])
    if len(specs) > net.MAX_LINKS:
        raise reader.fail(["links"], f"at most {net.MAX_LINKS} links, got {len(specs)}")
    if len(used) > net.MAX_SITES:
        raise reader.fail(["links"], f"at most {net.MAX_SITES} sites with hosts when links: "
                          f"are given (a route for every ordered pair), got {len(used)}")
    links, link_at = [], {}
    for k, spec in enumerate(specs):
        if spec["name"] in link_at:
            raise reader.fail(["links", k, "name"], f"duplicate link name {spec['name']!r} (also "
                              f"links[{link_at[spec['name']]}]); link names must be unique")
        link_at[spec["name"]] = k
        links.append(_read_link(reader, k, spec))
    via, explicit, own = _read_routes(reader, index, links, link_at)
    names = [sites[i]["name"] for i in used]
    try:
        network = net.resolve(links, names, via, net.FROM_LINKS, explicit, own,
                              lan={sites[i]["name"]: lan[i] for i in used})
    except net.NetworkError as e:
        raise reader.fail(e.where, str(e), line_at=[] if e.where[0] not in d else None) from None
    for i in used:
        for j in used:
            if i != j:
                route = network.routes[sites[i]["name"], sites[j]["name"]]
                L = lan[i][0] / 2 + route.latency + lan[j][0] / 2
                B = min(lan[i][1], lan[j][1], route.bandwidth)
                put(i, j, (L, B, None, None))
    return network


def check_exclusive(reader) -> None:
    """`links:`/`routes:` go with sites' lan classes only, not with `wan:` or `matrix:`."""
    d = reader.d
    if "routes" in d and "links" not in d:
        raise reader.fail(["routes"], "expected only together with links: (routes go through "
                          "wide-area links)")
    if "links" in d and "wan" in d:
        raise reader.fail(["links"], "not allowed together with wan: give either wan: (one "
                          "end-to-end class per pair of sites) or links: (wide-area links and "
                          "routes), not both")
    if "links" in d and "matrix" in d:
        raise reader.fail(["links"], "not allowed together with matrix: a measured matrix has "
                          "no wide-area links (give sites with lan and links:, or a matrix)")


def links_doc(network: net.Network) -> tuple[list, list]:
    """(links, routes): the `links:` and `routes:` entries that describe `network` (the
    routes the file gave; the others follow from the links' order), for write_topology."""
    out = []
    for lk in network.links:
        e = {"name": lk.name}
        if lk.ends is not None:
            e["between"] = list(lk.ends)
        e["latency"] = float(lk.latency)
        e["bandwidth"] = float(lk.bandwidth)
        if lk.sharing != net.SHARED:
            e["sharing"] = lk.sharing
        if lk.bandwidth_back is not None:
            e["bandwidth_back"] = float(lk.bandwidth_back)
        out.append(e)
    routes = []
    have = network.routes
    for (a, b), pts in network.via.items():
        if (a, b) in have:
            e = {"between": [a, b], "via": list(pts)}
            if (a, b) in network.route_latency:
                e["latency"] = float(network.route_latency[a, b])
            routes.append(e)
    for (a, b), hops in network.explicit.items():
        if (a, b) in have:
            e = {"from": a, "to": b,
                 "links": [network.links[k].name if fwd else {"link": network.links[k].name, "back": True}
                           for k, fwd in hops]}
            if (a, b) in network.route_latency:
                e["latency"] = float(network.route_latency[a, b])
            routes.append(e)
    return out, routes


def write_links_topology(topo, path, comment, duplex, intra, extra) -> None:
    """topology.write_topology's class form, for a topology with a `links:` network:
    sites with their LANs, hosts, the links and the routes the file gave, then `extra`."""
    network = topo.network
    lan = dict(network.lan)
    if any(s not in lan for s in topo.sites()):
        _, _, classes, _ = topo.site_classes  # a network built in code without its LANs
        lan = {s: lan.get(s, classes[s]) for s in topo.sites()}
    _check_matrices(topo, lan)
    link_list, routes = links_doc(network)
    doc = {"name": topo.name, "duplex": duplex,
           "sites": [{"name": s, "lan": {"latency": float(lan[s][0]), "bandwidth": float(lan[s][1])}}
                     for s in topo.sites()],
           "hosts": [{"name": h, "site": s} for h, s in zip(topo.hosts, topo.host_site)],
           "intra_host": {"latency": intra[0], "bandwidth": intra[1]},
           "links": link_list}
    if routes:
        doc["routes"] = routes
    head = ("# collsched topology, class form with wide-area links (docs/inputs.md);\n"
            "# latencies in seconds, bandwidths in bytes/s.\n")
    if comment:
        head = "".join(f"# {line}\n" for line in str(comment).splitlines()) + head
    body = yaml.safe_dump({**doc, **extra}, sort_keys=False, default_flow_style=None, width=100000)
    write_atomic(path, head + body)


def _check_matrices(topo, lan) -> None:
    """The class form says what the network gives: refuse host matrices that differ (a
    topology changed in code after loading) rather than write a file that reads back as
    another topology."""
    sites = topo.sites()
    n = len(sites)
    lat, bw = np.zeros((n, n)), np.zeros((n, n))
    for x, a in enumerate(sites):
        for y, b in enumerate(sites):
            if a == b:
                lat[x, y], bw[x, y] = lan[a]
            else:
                r = topo.network.routes[a, b]
                lat[x, y] = lan[a][0] / 2 + r.latency + lan[b][0] / 2
                bw[x, y] = min(lan[a][1], lan[b][1], r.bandwidth)
    number = {s: k for k, s in enumerate(sites)}
    ix = np.array([number[s] for s in topo.host_site])
    off = ~np.eye(len(ix), dtype=bool)
    bad = off & ((topo.host_latency != lat[np.ix_(ix, ix)]) | (topo.host_bandwidth != bw[np.ix_(ix, ix)]))
    if bad.any():
        i, j = (int(v[0]) for v in np.nonzero(bad))
        raise ValueError(f"write_topology: host pair {topo.hosts[i]} -> {topo.hosts[j]} does not "
                         f"have the latency and bandwidth its links network gives; drop the network "
                         f"(dataclasses.replace(t, network=None)) to write the matrices")
