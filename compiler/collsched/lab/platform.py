"""SimGrid platform XML and host file from a collsched topology.

Two shapes, chosen automatically:

* **sites** (the usual case: topologies given by classes). Each site becomes a SimGrid
  cluster whose hosts hang off a crossbar through their own split-duplex NIC link
  (bandwidth = the site's LAN bandwidth, latency = half the LAN latency, so host to host
  costs exactly the LAN class). Each ordered pair of sites gets one WAN link, shared by
  every flow between the two sites, with the WAN class's bandwidth and the latency that
  makes the end-to-end latency equal the class's. This is what lets the lab show the
  effect the Min3 paper relies on: with a TCP window (network/TCP-gamma) a single flow
  cannot fill a long fat WAN link, several flows can.
* **pairs** (measured matrices without that structure). Every ordered host pair gets a
  private link with its measured latency and bandwidth; each host keeps a split-duplex
  NIC as fast as its fastest pair, so a host's own flows still share its port.

Both shapes reproduce every host pair's latency and bottleneck bandwidth exactly: the
sites shape is chosen only when the classes allow it (the WAN link is the bottleneck and
carries the latency beyond the two LAN halves); tests/lab checks it through SimGrid.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

import numpy as np

from ..errors import InputError

# Linux's default maximum TCP send buffer (net.ipv4.tcp_wmem) is 4 MiB, and so is
# SimGrid's default window: one flow then gets at most 4 MiB / RTT, e.g. 105 MB/s over a
# 20 ms link, far below 10 Gbit/s. Expose it; do not hide it.
DEFAULT_TCP_GAMMA = 4 * 1024 * 1024
HOST_SPEED = "1Gf"  # irrelevant: the lab runs with smpi/simulate-computation:no
_REL = 1e-9


@dataclass
class Platform:
    xml: str
    hostfile: str  # one SimGrid host name per rank
    shape: str  # "sites" or "pairs"
    host_names: list[str]  # SimGrid name of each topology host

    def write(self, directory: str | os.PathLike, stem: str = "platform") -> tuple[Path, Path]:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        xml, hosts = d / f"{stem}.xml", d / f"{stem}.hosts"
        for path, text in ((xml, self.xml), (hosts, self.hostfile)):
            fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{path.name}.")
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        return xml, hosts


def _host_matrices(topo):
    """Host-level latency and bandwidth (H x H); the diagonal is the intra-host class."""
    hl = getattr(topo, "host_latency", None)
    hb = getattr(topo, "host_bandwidth", None)
    if hl is not None and hb is not None:
        return np.asarray(hl, float), np.asarray(hb, float)
    # Rebuild from rank-level matrices (every host that has a rank).
    h = len(topo.hosts)
    lat, bw = np.zeros((h, h)), np.full((h, h), np.inf)
    rh = np.asarray(topo.rank_host)
    lat[np.ix_(rh, rh)] = topo.latency
    bw[np.ix_(rh, rh)] = topo.bandwidth
    return lat, bw


def _bps(x: float) -> str:
    return f"{x:.17g}Bps"


def _sec(x: float) -> str:
    return f"{x:.17g}s"


def _uniform(block: np.ndarray) -> float | None:
    vals = block[np.isfinite(block)] if block.size else block
    if vals.size == 0:
        return None
    v = float(vals.flat[0])
    return v if np.allclose(vals, v, rtol=_REL, atol=0) else None


def _site_classes(topo, lat, bw):
    """Per-site LAN class and per-site-pair WAN class, or None when not class-shaped."""
    sites = list(dict.fromkeys(topo.host_site))
    members = {s: [i for i, x in enumerate(topo.host_site) if x == s] for s in sites}
    lan = {}
    for s, hs in members.items():
        off = ~np.eye(len(hs), dtype=bool)
        L = _uniform(lat[np.ix_(hs, hs)][off])
        B = _uniform(bw[np.ix_(hs, hs)][off])
        if len(hs) > 1 and (L is None or B is None):
            return None
        lan[s] = (L, B)
    wan = {}
    for a in sites:
        for b in sites:
            if a == b:
                continue
            L = _uniform(lat[np.ix_(members[a], members[b])])
            B = _uniform(bw[np.ix_(members[a], members[b])])
            if L is None or B is None:
                return None
            wan[a, b] = (L, B)
    # Single-host sites have no LAN pair: give their NIC the fastest WAN rate out, 0 latency.
    for s in sites:
        if lan[s][0] is None:
            rates = [B for (a, b), (_, B) in wan.items() if s in (a, b)] or [np.inf]
            lan[s] = (0.0, max(rates))
    # Exact only if the WAN link is the bottleneck and carries the rest of the latency.
    for (a, b), (L, B) in wan.items():
        if B > min(lan[a][1], lan[b][1]) * (1 + _REL) or L < (lan[a][0] + lan[b][0]) / 2 * (1 - _REL):
            return None
    return sites, members, lan, wan


def build_platform(topo, name: str | None = None) -> Platform:
    name = name or topo.name
    lat, bw = _host_matrices(topo)
    intra_lat = float(np.diag(lat).max()) if len(lat) else 1e-6
    intra_bw = float(np.diag(bw).min()) if len(bw) else 1e10
    if not np.isfinite(intra_bw):
        intra_bw = 1e10
    classes = _site_classes(topo, lat, bw)
    if classes is not None:
        plat = _sites_platform(topo, classes, intra_lat, intra_bw, name)
    else:
        plat = _pairs_platform(topo, lat, bw, intra_lat, intra_bw, name)
    return plat


def _header(name: str) -> list[str]:
    return ["<?xml version='1.0'?>",
            '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
            f"<!-- generated by collsched from topology {name}; do not edit -->",
            '<platform version="4.1">',
            '<zone id="world" routing="Full">']


def _sites_platform(topo, classes, intra_lat, intra_bw, name) -> Platform:
    sites, members, lan, wan = classes
    xml = _header(name)
    host_names = [""] * len(topo.hosts)
    for k, s in enumerate(sites):
        hs = members[s]
        for j, h in enumerate(hs):
            host_names[h] = f"s{k}-{j}"
        L, B = lan[s]
        xml.append(
            f'  <!-- site {s}: {len(hs)} hosts, LAN {B:.6g} B/s, {L:.6g} s -->\n'
            f'  <cluster id="site{k}" prefix="s{k}-" suffix="" radical="0-{len(hs) - 1}" '
            f'speed="{HOST_SPEED}" bw="{_bps(B)}" lat="{_sec(L / 2)}" sharing_policy="SPLITDUPLEX" '
            f'loopback_bw="{_bps(intra_bw)}" loopback_lat="{_sec(intra_lat)}" router_id="s{k}-router"/>')
    for (a, b), (L, B) in wan.items():
        ka, kb = sites.index(a), sites.index(b)
        extra = L - (lan[a][0] + lan[b][0]) / 2
        xml.append(f'  <link id="wan-{ka}-{kb}" bandwidth="{_bps(B)}" latency="{_sec(max(extra, 0.0))}"/>'
                   f'  <!-- {a} -> {b} -->')
    for (a, b) in wan:
        ka, kb = sites.index(a), sites.index(b)
        xml.append(f'  <zoneRoute src="site{ka}" dst="site{kb}" gw_src="s{ka}-router" '
                   f'gw_dst="s{kb}-router" symmetrical="NO"><link_ctn id="wan-{ka}-{kb}"/></zoneRoute>')
    xml += ["</zone>", "</platform>", ""]
    hostfile = "".join(host_names[int(h)] + "\n" for h in topo.rank_host)
    return Platform("\n".join(xml), hostfile, "sites", host_names)


def _pairs_platform(topo, lat, bw, intra_lat, intra_bw, name) -> Platform:
    h = len(topo.hosts)
    if h > 128:
        raise InputError(topo.source, "matrix",
                         f"expected at most 128 hosts for a per-pair SimGrid platform, got {h} "
                         "(give the topology by site classes instead)")
    xml = _header(name)
    host_names = [f"h{i}" for i in range(h)]
    for i in range(h):
        off = [bw[i, j] for j in range(h) if j != i] + [bw[j, i] for j in range(h) if j != i]
        nic = max([x for x in off if np.isfinite(x)] or [intra_bw])
        xml.append(f'  <host id="h{i}" speed="{HOST_SPEED}"/>'
                   f'  <!-- {quoteattr(str(topo.hosts[i]))[1:-1]} -->')
        xml.append(f'  <link id="nic{i}" bandwidth="{_bps(nic)}" latency="0s" sharing_policy="SPLITDUPLEX"/>')
        xml.append(f'  <link id="loop{i}" bandwidth="{_bps(intra_bw)}" latency="{_sec(intra_lat)}" '
                   'sharing_policy="FATPIPE"/>')
    # SimGrid's DTD wants every link declared before the first route.
    for i in range(h):
        for j in range(h):
            if i != j:
                xml.append(f'  <link id="p{i}-{j}" bandwidth="{_bps(bw[i, j])}" latency="{_sec(lat[i, j])}"/>')
    for i in range(h):
        xml.append(f'  <route src="h{i}" dst="h{i}"><link_ctn id="loop{i}"/></route>')
        for j in range(h):
            if i != j:
                xml.append(f'  <route src="h{i}" dst="h{j}" symmetrical="NO"><link_ctn id="nic{i}" direction="UP"/>'
                           f'<link_ctn id="p{i}-{j}"/><link_ctn id="nic{j}" direction="DOWN"/></route>')
    xml += ["</zone>", "</platform>", ""]
    hostfile = "".join(host_names[int(x)] + "\n" for x in topo.rank_host)
    return Platform("\n".join(xml), hostfile, "pairs", host_names)
