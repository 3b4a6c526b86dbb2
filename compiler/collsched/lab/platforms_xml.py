"""What a hand-written SimGrid platform of sites says about its network, to check it
against the topology YAML that describes the same network (lab/platforms.py, the bundled
multi-site platforms; docs/platforms.md).

Reads the shape the bundled platforms use: one zone with Full routing, one `<cluster>` per
site (hosts `prefix + i + suffix` on private NICs of `bw`, `lat`), `<link>`s with a
sharing policy, and `zoneRoute`s between the clusters listing their links
(`direction="UP"`/`"DOWN"` for a SPLITDUPLEX link; symmetrical unless
`symmetrical="NO"`, the way back then being the links reversed, a split link crossed the
other way). Anything else is an InputError: this is a checker for sites-and-links
platforms, not a SimGrid parser (lab/simgrid_platform.py reads any platform's hosts).

`routes` gives, per ordered pair of sites, the resources a flow crosses: a SHARED link is
one resource for both directions, a SPLITDUPLEX link one per direction (`name>` UP,
`name<` DOWN), as inputs/network.py names a topology's resources.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from .simgrid_platform import parse_radical

_BW = re.compile(r"^\s*([0-9.eE+-]+)\s*([kKMGT]?i?)(bps|Bps)?\s*$")
_TIME = re.compile(r"^\s*([0-9.eE+-]+)\s*(s|ms|us|ns|ps|m|h)?\s*$")
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "ki": 2.0**10, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_SECONDS = {None: 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12, "m": 60.0, "h": 3600.0}


def bandwidth(text: str, where: str) -> float:
    """SimGrid's bandwidth value in bytes/s: `25Gbps` bits, `3GBps` bytes, a bare number bytes."""
    m = _BW.match(text or "")
    if not m or m.group(2) not in _PREFIX:
        raise InputError(where, text, "expected a SimGrid bandwidth such as 10Gbps or 1.25GBps")
    bits = m.group(3) == "bps"
    return float(m.group(1)) * _PREFIX[m.group(2)] / (8.0 if bits else 1.0)


def seconds(text: str, where: str) -> float:
    m = _TIME.match(text or "")
    if not m:
        raise InputError(where, text, "expected a SimGrid time such as 5ms or 10us")
    return float(m.group(1)) * _SECONDS[m.group(2)]


@dataclass
class Site:
    name: str
    hosts: list[str]
    nic_bandwidth: float  # bytes/s, each way (SPLITDUPLEX)
    nic_latency: float  # seconds, one NIC crossing (half the host-to-host latency)
    sharing: str
    router: str


@dataclass
class XmlLink:
    name: str
    bandwidth: float
    latency: float
    sharing: str  # SHARED | SPLITDUPLEX | FATPIPE


@dataclass
class XmlPlatform:
    path: str
    tcp_gamma: float | None
    sites: dict[str, Site]
    links: dict[str, XmlLink]
    # (site_a, site_b) -> [(resource name, link name)] in order; resource `name` (shared) or
    # `name>` / `name<` (split, UP / DOWN)
    routes: dict = field(default_factory=dict)

    def route_latency(self, a: str, b: str) -> float:
        return sum(self.links[lk].latency for _, lk in self.routes[a, b])

    def route_capacity(self, a: str, b: str) -> float:
        return min((self.links[lk].bandwidth for _, lk in self.routes[a, b]), default=float("inf"))

    def host_site(self) -> dict[str, str]:
        return {h: s.name for s in self.sites.values() for h in s.hosts}

    def users(self) -> dict[str, set]:
        """resource -> the ordered site pairs whose route crosses it."""
        out: dict[str, set] = {}
        for pair, hops in self.routes.items():
            for res, _ in hops:
                out.setdefault(res, set()).add(pair)
        return out


def _hop(ctn, links: dict, forward: bool, where: str) -> tuple[str, str]:
    name = ctn.get("id", "")
    if name not in links:
        raise InputError(where, name, "expected a link declared in the zone")
    lk = links[name]
    if lk.sharing != "SPLITDUPLEX":
        return name, name
    direction = ctn.get("direction")
    if direction not in ("UP", "DOWN"):
        raise InputError(where, name, "expected direction UP or DOWN on a SPLITDUPLEX link")
    up = (direction == "UP") == forward
    return f"{name}{'>' if up else '<'}", name


def read_platform(path: str | Path) -> XmlPlatform:
    """The sites, links and routes of a sites-and-links SimGrid platform (module doc)."""
    p = Path(path)
    try:
        root = ET.parse(p).getroot()
    except (OSError, ET.ParseError) as exc:
        raise InputError(str(p), "", f"expected a readable SimGrid platform XML ({exc})") from None
    if root.tag != "platform":
        raise InputError(str(p), root.tag, "expected a <platform> root element")
    gamma = None
    for prop in root.iter("prop"):
        if prop.get("id") == "network/TCP-gamma":
            gamma = float(prop.get("value"))
    zones = root.findall("zone")
    if len(zones) != 1:
        raise InputError(str(p), "zone", "expected one top-level <zone> holding the sites")
    zone = zones[0]
    sites, links, routes = {}, {}, {}
    for c in zone.findall("cluster"):
        where = f"{p}: cluster {c.get('id')}"
        hosts = [f"{c.get('prefix', '')}{i}{c.get('suffix', '')}"
                 for i in parse_radical(c.get("radical") or "", (str(p), where))]
        sites[c.get("id")] = Site(c.get("id"), hosts, bandwidth(c.get("bw"), where), seconds(c.get("lat"), where),
                                  c.get("sharing_policy", "SHARED"), c.get("router_id") or "")
    for lk in zone.findall("link"):
        where = f"{p}: link {lk.get('id')}"
        links[lk.get("id")] = XmlLink(lk.get("id"), bandwidth(lk.get("bandwidth"), where),
                                      seconds(lk.get("latency", "0"), where), lk.get("sharing_policy", "SHARED"))
    for zr in zone.findall("zoneRoute"):
        a, b = zr.get("src"), zr.get("dst")
        where = f"{p}: zoneRoute {a} -> {b}"
        if a not in sites or b not in sites:
            raise InputError(where, f"{a} -> {b}", "expected a route between two clusters")
        ctns = zr.findall("link_ctn")
        routes[a, b] = [_hop(c, links, True, where) for c in ctns]
        if zr.get("symmetrical", "YES").upper() != "NO":
            routes.setdefault((b, a), [_hop(c, links, False, where) for c in reversed(ctns)])
    return XmlPlatform(str(p), gamma, sites, links, routes)
