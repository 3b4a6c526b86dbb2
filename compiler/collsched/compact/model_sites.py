"""Site-level inputs of the per-level cost model (model.py): what the model needs of a
topology without its P x P matrices.

A `Sites` holds the site sizes (ranks per site, in rank order) and a small *sample*
Topology with at least two ranks per site (one where a site has one host), from whose
representative rank pairs every per-message cost is computed by the Topology's own
methods (latency and size factors, TCP window, port rates, os and g, shared WAN links):
the same arithmetic as dag.Plan, so a class of identical transfers costs exactly what
the full DAG model charges each of them. The sample is at most the file's own host
count (2048), whatever P is: at P = 65,536 nothing P x P is built.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import resources
from ..errors import InputError
from ..inputs import topology as topology_file
from ..inputs.schemas import TOPOLOGY_SCHEMA, Doc, read_yaml
from ..inputs.topology import Topology, homogeneous, load_topology
from ..model.policy import fifo_link

SOURCE = "compact model"


@dataclass(frozen=True)
class PairCosts:
    """What dag.Plan charges one transfer of `nbytes` from a rank of one class to another."""

    duration: float  # L * lf + m_eff / b_flow
    os: float  # sender port release after start (os(m))
    g: float  # gap on the pair
    early: float  # duration - m_eff / recv port rate (the receiving port frees this early)
    wan_time: float  # m_eff / shared-link bandwidth (0: no shared link)
    latency: float  # L * lf
    link: int  # shared link index of the pair, -1: none


@dataclass(frozen=True, eq=False)
class Sites:
    """Sites, their rank counts and a sample topology to price messages between them."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]  # ranks per site, sites in rank order (block placement)
    sample: Topology  # a small topology with the same link classes
    reps: tuple[tuple[int, ...], ...]  # per site: 1 or 2 sample ranks of that site
    source: str
    _memo: dict = field(default_factory=dict, repr=False)  # (a, b, nbytes) -> PairCosts

    @property
    def nranks(self) -> int:
        return int(sum(self.sizes))

    @property
    def nsites(self) -> int:
        return len(self.sizes)

    @property
    def full_duplex(self) -> bool:
        return bool(self.sample.full_duplex)

    @property
    def eager_limit(self) -> int:
        return int(self.sample.eager_limit)

    def pair(self, a: int, b: int) -> tuple[int, int]:
        """A sample rank pair from site a to site b (two different ranks)."""
        ra = self.reps[a]
        if a != b:
            return ra[0], self.reps[b][0]
        if len(ra) < 2:
            raise InputError(self.source, f"sites[{a}]", "expected a site with two hosts for a "
                             "transfer inside it")
        return ra[0], ra[1]

    def costs(self, a: int, b: int, nbytes: int) -> PairCosts:
        key = (a, b, int(nbytes))
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = _costs(self, a, b, int(nbytes))
        return got

    def lan_homogeneous(self, a: int) -> bool:
        """Every pair of ranks of site a costs the same (one rank per host, class LAN)."""
        return self.sizes[a] <= 1 or len(self.reps[a]) >= 2


def _costs(sites: Sites, a: int, b: int, nbytes: int) -> PairCosts:
    topo = sites.sample
    s, r = sites.pair(a, b)
    src, dst = np.array([s]), np.array([r])
    lf, meff = topo.effective_sizes(src, dst, np.array([float(nbytes)]))
    lat = topo.latency[s, r] * lf
    duration = lat + meff / topo.flow_bandwidth()[s, r]
    early = duration - meff / topo.port_bandwidth[1][s, r]
    os_ = topo.send_overhead(nbytes)[s, r]
    g = topo.gap(nbytes)[s, r]
    links = topo.shared_links
    k = int(links.link_of[s, r]) if links.any else -1
    wan = float(meff[0] / links.bandwidth[k]) if k >= 0 else 0.0
    return PairCosts(float(duration[0]), float(os_), float(g), float(early[0]), wan,
                     float(lat[0]), k)


def _check_sizes(sizes, source) -> tuple[int, ...]:
    out = []
    for i, n in enumerate(sizes):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise InputError(source, f"site_sizes[{i}]", f"expected a positive integer, found {n!r}")
        out.append(int(n))
    if not out:
        raise InputError(source, "site_sizes", "expected at least one site")
    return tuple(out)


def from_topology(topo: Topology, site_sizes=None, source: str | None = None) -> Sites:
    """The Sites of a built Topology: its sites in rank order (block placement), each a
    class-shaped LAN with one rank per host (else InputError: the per-level model prices
    every pair of a site alike). site_sizes: other rank counts for the same sites (the
    model then extrapolates the LANs to them)."""
    src = source or topo.source
    rank_site = topo.rank_site()
    names = list(dict.fromkeys(rank_site))
    idx = {n: i for i, n in enumerate(names)}
    seq = [idx[x] for x in rank_site]
    if any(b < a for a, b in zip(seq, seq[1:])):
        raise InputError(src, "placement", "expected the ranks of each site consecutive (block "
                         "placement), as the per-level model composes sites")
    counts = tuple(int(np.sum(np.asarray(seq) == i)) for i in range(len(names)))
    hosts = np.asarray(topo.rank_host)
    if len(set(hosts.tolist())) != len(hosts):
        raise InputError(src, "placement", "expected one rank per host (ranks sharing a host "
                         "talk over the intra-host class: a site is then not one LAN)")
    if topo.nranks > 1 and topo.site_classes is None and len(names) > 1:
        raise InputError(src, "links", "expected link classes per site and site pair (a "
                         "measured matrix without that structure has no per-level form)")
    first = np.cumsum((0,) + counts)
    reps = []
    for i in range(len(names)):
        members = list(range(first[i], first[i + 1]))
        reps.append(tuple(members[:2]))
        if len(members) > 2:
            _check_uniform(topo, members, src, names[i])
    sizes = counts if site_sizes is None else _check_sizes(site_sizes, src)
    if len(sizes) != len(names):
        raise InputError(src, "site_sizes", f"expected {len(names)} sites, found {len(sizes)}")
    return Sites(tuple(names), sizes, topo, tuple(reps), src)


def _check_uniform(topo, members, src, name):
    sub = np.ix_(members, members)
    off = ~np.eye(len(members), dtype=bool)
    for what, m in (("latency", topo.latency[sub][off]), ("bandwidth", topo.bandwidth[sub][off])):
        if m.size and not np.all(np.abs(m - m[0]) <= 1e-9 * abs(m[0])):
            raise InputError(src, f"site {name}: {what}", "expected every pair of the site alike "
                             "(a LAN class), as the per-level model prices them")


def default_cluster(nranks: int) -> Sites:
    """The default cluster compile_schedule uses without a topology, at any P: one site,
    priced from a 2-rank sample of inputs.topology.homogeneous."""
    p = int(nranks)
    sample = homogeneous(min(max(p, 2), 2))
    return Sites(("site0",), (p,), sample, ((0, 1) if p > 1 else (0,),), "<homogeneous>")


def from_file(path, nranks: int, site_sizes=None) -> Sites:
    """Sites of a topology file at any P, without its P x P matrices: the file is read
    with the topology reader's own parsers, then rebuilt with at most two hosts per site
    (the sample: the same link classes, TCP window, eager limit, size-dependent costs and
    shared WAN links), and the ranks are placed on the first P hosts, one per host, site
    by site. Files the sample cannot stand for (a measured matrix, wide-area links, a top-level host list,
    another placement) are loaded whole (up to the reader's limits) and go through
    from_topology. P beyond the file's hosts: a one-site file keeps its LAN for P hosts; a
    multi-site one needs site_sizes (a hier description's)."""
    doc = read_yaml(resources.topology_path(path), TOPOLOGY_SCHEMA)
    d = doc.data
    place = d.get("placement", {})
    if ("matrix" in d or "links" in d or "hosts" in d or place.get("hosts")
            or int(place.get("ranks_per_host", 1)) != 1):
        return from_topology(load_topology(path, nranks), site_sizes)
    names, counts = [], []
    for s in d.get("sites", []):
        hs = s.get("hosts")
        n = len(hs) if isinstance(hs, list) else int(hs)
        names.append(s["name"])
        counts.append(n)
    if site_sizes is None:
        sizes, left = [], int(nranks)
        for n in counts:
            take = min(n, left)
            sizes.append(take)
            left -= take
        if left:
            if sum(1 for n in counts if n) == 1:
                sizes = [nranks if n else 0 for n in counts]
            else:
                raise InputError(doc.source, "nranks", f"expected at most {sum(counts)} ranks on this "
                                 "multi-site file (one per host), or the site sizes (site_sizes)")
    else:
        sizes = list(_check_sizes(site_sizes, doc.source))
        used = [i for i, n in enumerate(counts) if n]
        if len(sizes) > len(used):
            raise InputError(doc.source, "site_sizes", f"expected at most {len(used)} sites, found {len(sizes)}")
        full = [0] * len(counts)
        for i, n in zip(used, sizes):
            full[i] = n
        sizes = full
    # The sample: every site of the file with min(its hosts, 2) hosts (a site's host count,
    # not its ranks, decides its NIC and whether a site pair's link is shared: links.py).
    small = dict(d)
    small["sites"] = []
    for s in d.get("sites", []):
        s = dict(s)
        hs = s.get("hosts")
        s["hosts"] = hs[:2] if isinstance(hs, list) else min(int(hs), 2)
        small["sites"].append(s)
    small.pop("placement", None)
    sample = topology_file._Reader(Doc(doc.source, doc.text, small)).build(None)
    if not sample.full_duplex:
        raise InputError(doc.source, "duplex", "expected full duplex (the compact form's)")
    reps, at = [], 0
    for n, cap in zip(sizes, counts):
        k = min(cap, 2)
        if n:
            reps.append(tuple(range(at, at + min(n, k))))
        at += k
    used_names = tuple(nm for nm, n in zip(names, sizes) if n)
    return Sites(used_names, tuple(n for n in sizes if n), sample, tuple(reps), doc.source)


def load(topology, nranks: int, site_sizes=None) -> Sites:
    """Sites for a request: topology None (the default cluster), a Topology (its own
    ranks, or site_sizes for the same sites), or a topology file's path (from_file)."""
    if topology is None:
        if site_sizes is not None and tuple(site_sizes) != (nranks,):
            raise InputError(SOURCE, "site_sizes", "expected one site on the default cluster")
        return default_cluster(nranks)
    if isinstance(topology, Topology):
        sites = from_topology(topology, site_sizes)
    else:
        sites = from_file(topology, nranks, site_sizes)
    if sites.nranks != nranks:
        raise InputError(sites.source, "site_sizes", f"expected sizes summing to {nranks}, found "
                         f"{sites.nranks}")
    return sites


def fifo_of(sites: Sites, a: int, b: int):
    """policy.fifo_link for pieces from site a to site b: the compiler's FIFO mark."""
    topo = sites.sample
    s, r = sites.pair(a, b)

    def marked(m: int) -> bool:
        lf, meff = topo.effective_sizes(np.array([s]), np.array([r]), np.array([float(m)]))
        return bool(fifo_link(topo.latency[s, r] * lf, meff, topo.flow_bandwidth()[s, r],
                              topo.bandwidth[s, r])[0])
    return marked
