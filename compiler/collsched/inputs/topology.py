"""Topology: hosts, where ranks run, and what it costs to move bytes between two ranks.

A topology file (YAML, format in docs/inputs.md, schema in schemas.py) describes hosts
grouped in sites and the links between them, either by *classes* (one LAN per site, one WAN
link per pair of sites, optionally with a different bandwidth/latency back) or as a *measured
matrix* (hosts x hosts). `load_topology` turns it into per-rank-pair matrices for the cost
model of docs/semantics.md: latency L(s, r), bandwidth b(s, r), and optionally the LogGP
send overhead os(m) and gap g(m) as ``a + m * per_byte``.

Ranks are placed on hosts by the file's `placement` (default: one rank per host, on the
first P hosts). Two ranks on the same host talk over the *intra-host* class, by default
INTRA_HOST_LATENCY / INTRA_HOST_BANDWIDTH, overridable with `intra_host:` in the file.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import yaml

from . import compute, links, msgcosts, units, wan_links
from . import network as network_mod
from .. import resources
from ..errors import InputError
from ..files import write_atomic
from .schemas import TOPOLOGY_SCHEMA, Doc, describe, read_yaml

# Default intra-host class (two ranks on one host, shared memory): 1 us, 10 GB/s.
INTRA_HOST_LATENCY = 1e-6
INTRA_HOST_BANDWIDTH = 10e9

# Bounds of a topology, checked before anything is allocated (docs/inputs.md, "Limits"):
# the cost model keeps host x host and rank x rank float64 matrices (at 2048 hosts, six
# host matrices take 200 MB; at 8192 ranks, one rank matrix 512 MiB).
MAX_HOSTS = 2048
MAX_RANKS = 8192
# Times (latency, overheads, arrivals) of at most about 11.6 days, bandwidths between 1 bit/s
# and 8 Pbit/s: every time the model computes stays finite.
MAX_TIME_S = 1e6
MIN_BANDWIDTH, MAX_BANDWIDTH = 0.125, 1e15
# Sizes (eager limit, TCP window): whole bytes that a float64 holds exactly.
MAX_SIZE = 1 << 53
# Messages of at least this many bytes use MPI's rendezvous protocol unless the topology
# file says otherwise (SimGrid SMPI's and Open MPI TCP's default).
DEFAULT_EAGER_LIMIT = 65536


@dataclass(frozen=True, eq=False)
class Topology:
    """Per-rank-pair cost parameters of one job.

    Frozen: a changed topology is a new one (dataclasses.replace, with_duplex). What the
    models derive from it (one flow's bandwidth, the shared WAN links, the port rates) is
    computed once per instance, as cached properties; the arrays they return are read-only.
    """

    name: str
    source: str  # file path, or "<homogeneous>"
    hosts: list[str]
    host_site: list[str]  # site label of each host
    rank_host: np.ndarray  # int64, host index of each rank, len = nranks
    latency: np.ndarray  # (P, P) float64 seconds, row = sender, col = receiver; diag 0
    bandwidth: np.ndarray  # (P, P) float64 bytes/s; diag = inf
    full_duplex: bool
    os_a: np.ndarray | None = None  # (P, P) seconds, or None = default (m / b)
    os_per_byte: np.ndarray | None = None
    g_a: np.ndarray | None = None
    g_per_byte: np.ndarray | None = None
    # Host-level matrices (H, H), diagonal = intra-host class; None when not known.
    host_latency: np.ndarray | None = None
    host_bandwidth: np.ndarray | None = None
    # Largest TCP window in bytes, or None: one flow then moves at most window / (2 L)
    # bytes per second (one window per round trip), as in Linux and SimGrid's TCP-gamma.
    tcp_window: float | None = None
    # Messages of at least this many bytes use MPI's rendezvous protocol: they move only
    # once the receiver has posted the receive. The simulator uses it to model when the
    # executor posts receives.
    eager_limit: int = DEFAULT_EAGER_LIMIT
    # Message-size-dependent latency and bandwidth factors per link class (msgcosts.py),
    # or None: every message costs L + m / b.
    message_costs: "msgcosts.MessageCosts | None" = None
    # The wide-area network (network.py): links that flows between sites share and the
    # route of every site pair; None for a measured matrix (every host pair its own path)
    # and a single site.
    network: "network_mod.Network | None" = None
    reduction_gamma: float = 0.0  # s per reduced byte on the receiving host (compute.py)

    @property
    def nranks(self) -> int:
        return int(len(self.rank_host))

    def rank_site(self) -> list[str]:
        """Site label of every rank."""
        return [self.host_site[h] for h in self.rank_host]

    def site_of_rank(self, rank: int) -> str:
        return self.host_site[int(self.rank_host[rank])]

    def host_of_rank(self, rank: int) -> str:
        return self.hosts[int(self.rank_host[rank])]

    def sites(self) -> list[str]:
        """Site labels in order of first appearance among the hosts."""
        return list(dict.fromkeys(self.host_site))

    def flow_bandwidth(self) -> np.ndarray:
        """(P, P) bytes/s one flow gets: b, capped by the TCP window at window / (2 L)."""
        return self._flow_bandwidth

    @cached_property
    def _flow_bandwidth(self) -> np.ndarray:
        if self.tcp_window is None:
            return self.bandwidth
        with np.errstate(divide="ignore"):
            cap = np.where(self.latency > 0, self.tcp_window / (2.0 * self.latency), np.inf)
        out = np.minimum(self.bandwidth, cap)
        out.setflags(write=False)
        return out

    @cached_property
    def site_classes(self):
        """(sites, members, lan, wan) when the topology is class-shaped, else None
        (links.site_classes)."""
        return links.compute_site_classes(self, *links.host_matrices(self))

    @cached_property
    def shared_links(self) -> "links.SharedLinks":
        """The WAN links that flows between two sites share (links.shared_links)."""
        return links.compute_shared_links(self)

    @cached_property
    def port_bandwidth(self) -> tuple[np.ndarray, np.ndarray]:
        """(send, recv): (P, P) rates at which a flow occupies its ports (links.port_bandwidth)."""
        return links.compute_port_bandwidth(self)

    def size_factors(self, src, dst, nbytes):
        """(latency_factor, bandwidth_factor) arrays of transfers src -> dst of nbytes
        (msgcosts.py): a message costs L * latency_factor + m / (b * bandwidth_factor).
        Ones where the topology has constant costs."""
        src = np.asarray(src)
        if self.message_costs is None:
            return np.ones(src.shape), np.ones(src.shape)
        return self.message_costs.factors(self.rank_host, src, dst, nbytes)

    def effective_sizes(self, src, dst, nbytes):
        """(latency_factor, m / bandwidth_factor): what every latency term is multiplied
        by and the size every bandwidth term is charged for (msgcosts.py)."""
        nbytes = np.asarray(nbytes, np.float64)
        if self.message_costs is None:
            return np.ones(np.shape(src)), np.broadcast_to(nbytes, np.shape(src)).astype(np.float64)
        lf, bf = self.size_factors(src, dst, nbytes)
        return lf, (nbytes + self.message_costs.envelope_bytes) / bf

    def pair_costs(self, nbytes):
        """(latency, size): the (P, P) latency of an nbytes message between every pair
        (L * latency_factor) and the size its bandwidth terms are charged for
        (m / bandwidth_factor; a plain float when the topology has constant costs, so that
        those models compute exactly what they always did)."""
        if self.message_costs is None:
            return self.latency, float(nbytes)
        p = self.nranks
        src, dst = np.indices((p, p))
        lf, meff = self.effective_sizes(src, dst, float(nbytes))
        return self.latency * lf, meff

    def factor_bounds(self, max_bytes):
        """(P, P) smallest latency factor and largest bandwidth factor over message sizes
        1..max_bytes: what a lower bound may assume for pieces of any size up to that."""
        if self.message_costs is None:
            p = self.nranks
            return np.ones((p, p)), np.ones((p, p))
        return self.message_costs.bounds(self.rank_host, max_bytes)

    def transfer_time(self, nbytes) -> np.ndarray:
        """(P, P) seconds to move nbytes from row rank to column rank:
        L * latency_factor(m) + m / (b(flow) * bandwidth_factor(m))."""
        lat, meff = self.pair_costs(nbytes)
        return lat + meff / self.flow_bandwidth()

    def send_overhead(self, nbytes) -> np.ndarray:
        """(P, P) os(m): a + m * per_byte when the topology gives it, else m / (the rate
        the flow occupies the sender's port at: b, or the NIC's rate across a shared WAN
        link, links.port_bandwidth), m the effective size (pair_costs)."""
        if self.os_a is None:
            return self.pair_costs(nbytes)[1] / self.port_bandwidth[0]
        return self.os_a + float(nbytes) * self.os_per_byte

    def gap(self, nbytes) -> np.ndarray:
        """(P, P) g(m): a + m * per_byte when the topology gives it, else m / b (m the
        effective size, pair_costs)."""
        if self.g_a is None:
            return self.pair_costs(nbytes)[1] / self.bandwidth
        return self.g_a + float(nbytes) * self.g_per_byte

    def with_message_costs(self, costs) -> "Topology":
        """The same topology with other size-dependent costs (None: constant)."""
        return dataclasses.replace(self, message_costs=costs)

    def with_duplex(self, full: bool) -> "Topology":
        return dataclasses.replace(self, full_duplex=bool(full))

    def to_dict(self) -> dict:
        """Canonical JSON-serialisable form (infinities as null; `source` left out)."""
        def mat(a):
            if a is None:
                return None
            a = np.asarray(a, dtype=np.float64)
            rows = a.tolist()  # Python floats, as float(v) gives
            if not np.isfinite(a).all():
                rows = [[v if math.isfinite(v) else None for v in row] for row in rows]
            return rows
        return {
            "format": "collsched-topology/1",
            "name": self.name,
            "hosts": list(self.hosts),
            "host_site": list(self.host_site),
            "rank_host": [int(h) for h in self.rank_host],
            "full_duplex": bool(self.full_duplex),
            "latency": mat(self.latency),
            "bandwidth": mat(self.bandwidth),
            "os_a": mat(self.os_a), "os_per_byte": mat(self.os_per_byte),
            "g_a": mat(self.g_a), "g_per_byte": mat(self.g_per_byte),
            "tcp_window": self.tcp_window,
            "eager_limit": self.eager_limit,
            # Only when set: topologies without it keep the digests they always had.
            **({"message_costs": self.message_costs.to_dict()} if self.message_costs else {}),
            # Only for a `links:` network (the `wan:` form's adds nothing the matrices miss).
            **({"network": network_mod.canonical(self.network)}
               if self.network is not None and self.network.origin == network_mod.FROM_LINKS else {}),
            **compute.section(self),
        }

    def digest(self) -> str:
        """sha256 hex of the canonical JSON of to_dict() (stable across runs)."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


# --- building from host-level data ----------------------------------------------------

def _expand(host_mat: np.ndarray, rank_host: np.ndarray, diag: float) -> np.ndarray:
    m = np.ascontiguousarray(host_mat[np.ix_(rank_host, rank_host)], dtype=np.float64)
    np.fill_diagonal(m, diag)
    return m


def _from_hosts(name, source, hosts, host_site, rank_host, hlat, hbw, full_duplex,
                os_h=None, g_h=None) -> Topology:
    """Topology from (H, H) host matrices (diagonal = intra-host class) and a placement.

    os_h / g_h: None or a pair (a, per_byte) of (H, H) arrays.
    """
    rank_host = np.asarray(rank_host, dtype=np.int64)
    lat = _expand(hlat, rank_host, 0.0)
    bw = _expand(hbw, rank_host, np.inf)
    extra = {}
    for key, pair in (("os", os_h), ("g", g_h)):
        if pair is None:
            extra[f"{key}_a"] = extra[f"{key}_per_byte"] = None
        else:
            extra[f"{key}_a"] = _expand(pair[0], rank_host, 0.0)
            extra[f"{key}_per_byte"] = _expand(pair[1], rank_host, 0.0)
    return Topology(name=name, source=source, hosts=list(hosts), host_site=list(host_site),
                    rank_host=rank_host, latency=lat, bandwidth=bw, full_duplex=bool(full_duplex),
                    host_latency=np.asarray(hlat, np.float64),
                    host_bandwidth=np.asarray(hbw, np.float64), **extra)


def homogeneous(nranks, latency_s=50e-6, bandwidth_Bps=125e6, full_duplex=True) -> Topology:
    """nranks hosts, one rank each, every pair with the same latency and bandwidth."""
    p = int(nranks)
    if not 1 <= p <= MAX_RANKS:
        raise InputError("<homogeneous>", "nranks", f"expected 1 to {MAX_RANKS} ranks (the cost "
                                                    f"model's rank x rank matrices), got {nranks}")
    if not (np.isfinite(latency_s) and latency_s >= 0):
        raise InputError("<homogeneous>", "latency", f"expected a non-negative time, got {latency_s}")
    if not (np.isfinite(bandwidth_Bps) and bandwidth_Bps > 0):
        raise InputError("<homogeneous>", "bandwidth",
                         f"expected a positive bandwidth, got {bandwidth_Bps}")
    hlat = np.full((p, p), float(latency_s))
    hbw = np.full((p, p), float(bandwidth_Bps))
    np.fill_diagonal(hlat, INTRA_HOST_LATENCY)
    np.fill_diagonal(hbw, INTRA_HOST_BANDWIDTH)
    hosts = [f"h{i}" for i in range(p)]
    return _from_hosts(f"homogeneous-{p}", "<homogeneous>", hosts, ["site0"] * p,
                       np.arange(p), hlat, hbw, full_duplex)


def with_wan_network(topo: Topology) -> Topology:
    """The topology with the wide-area network its site classes imply (the `wan:` form: one
    link per ordered site pair, network.from_wan_classes), as the reader gives a class-form
    file; unchanged when it is not class-shaped or has a single site."""
    classes = topo.site_classes
    if classes is None or len(classes[0]) < 2:
        return topo
    _, _, lan, wan = classes
    return dataclasses.replace(topo, network=network_mod.from_wan_classes(wan, lan))


# --- loading a YAML file --------------------------------------------------------------

def load_topology(path, nranks: int | None = None) -> Topology:
    """Read a topology file; nranks None = as many ranks as the placement provides.

    A path that names no file but a bundled topology (`tryton-48`, `topologies/tryton-48.yaml`)
    reads the bundled copy (resources.topology_path). Raises InputError (one line: file,
    field, what was expected) for any bad input.
    """
    doc = read_yaml(resources.topology_path(path), TOPOLOGY_SCHEMA)
    return _Reader(doc).build(nranks)


class _Reader:
    def __init__(self, doc: Doc):
        self.doc, self.d = doc, doc.data
        self.network = None  # the `links:` form's (wan_links.read_links)

    def fail(self, parts, expected, line_at=None):
        return self.doc.fail(parts, expected, line_at=line_at)

    # quantities
    def parse(self, fn, value, parts, kind):
        """fn(value) (a units parser); one InputError line for anything it cannot read,
        including numbers too large for a float (10**400, '1e999999999 s')."""
        try:
            return fn(value)
        except ValueError as e:
            raise self.fail(parts, str(e)) from None
        except ArithmeticError:
            raise self.fail(parts, f"expected a finite {kind}, got {describe(value)}") from None

    def time(self, value, parts, what="time"):
        t = self.parse(units.parse_time, value, parts, what)
        if not 0 <= t <= MAX_TIME_S:
            raise self.fail(parts, f"expected a non-negative {what} of at most {MAX_TIME_S:g} s, "
                                   f"got {describe(value)}")
        return t

    def bandwidth(self, value, parts):
        b = self.parse(units.parse_bandwidth, value, parts, "bandwidth")
        if not MIN_BANDWIDTH <= b <= MAX_BANDWIDTH:
            raise self.fail(parts, f"expected a positive bandwidth, 1bit/s to 8Pbit/s, such as "
                                   f"1Gbit/s, got {describe(value)}")
        return b

    def size(self, key, positive=False):
        value = self.d[key]
        n = self.parse(units.parse_bytes, value, [key], "size")
        if n > MAX_SIZE or (positive and n <= 0):
            raise self.fail([key], f"expected a {'positive ' if positive else ''}size of at most "
                                   f"2^53 bytes, got {describe(value)}")
        return n

    def size_value(self, value, parts):
        """A size anywhere in the file (bytes, or with units), 0 to 2^53."""
        n = self.parse(units.parse_bytes, value, parts, "size")
        if not 0 <= n <= MAX_SIZE:
            raise self.fail(parts, f"expected a size of 0 to 2^53 bytes, got {describe(value)}")
        return n

    def linear(self, spec, parts):
        """(a, per_byte) of an os/g entry, or None when absent."""
        if spec is None:
            return None
        return (self.time(spec["a"], parts + ["a"]),
                self.time(spec["per_byte"], parts + ["per_byte"], "time per byte"))

    def link_class(self, spec, parts):
        return (self.time(spec["latency"], parts + ["latency"]),
                self.bandwidth(spec["bandwidth"], parts + ["bandwidth"]),
                self.linear(spec.get("send_overhead"), parts + ["send_overhead"]),
                self.linear(spec.get("gap"), parts + ["gap"]))

    # the steps
    def build(self, nranks):
        d = self.d
        name = d.get("name") or Path(self.doc.source).stem
        full = d.get("duplex", "full") == "full"
        hosts, host_site = self.read_hosts()
        if "matrix" in d:
            hlat, hbw, os_h, g_h = self.read_matrix(hosts)
        else:
            hlat, hbw, os_h, g_h = self.read_classes(hosts, host_site)
        rank_host = self.read_placement(hosts, nranks)
        topo = _from_hosts(name, self.doc.source, hosts, host_site, rank_host, hlat, hbw, full,
                           os_h, g_h)
        if self.network is not None:
            topo = dataclasses.replace(topo, network=self.network)
        elif "matrix" not in d:
            topo = with_wan_network(topo)
        if "eager_limit" in d:
            topo = dataclasses.replace(topo, eager_limit=int(self.size("eager_limit")))
        if "tcp_window" in d:
            topo = dataclasses.replace(topo, tcp_window=float(self.size("tcp_window", positive=True)))
        if "message_costs" in d:
            topo = topo.with_message_costs(msgcosts.parse(self, d["message_costs"], host_site))
        return compute.read(self, topo)

    def read_hosts(self):
        d = self.d
        sites = d.get("sites", [])
        seen_site = {}
        for i, s in enumerate(sites):
            if s["name"] in seen_site:
                raise self.fail(["sites", i, "name"], f"duplicate site name {s['name']!r} "
                                f"(also sites[{seen_site[s['name']]}])")
            seen_site[s["name"]] = i
        names, labels, where = [], [], []
        if "hosts" in d:
            for i, s in enumerate(sites):
                if "hosts" in s:
                    raise self.fail(["sites", i, "hosts"], "not allowed when hosts are listed at "
                                    "the top level (hosts:); list each host in one place")
            for i, h in enumerate(d["hosts"]):
                names.append(h["name"]), labels.append(h["site"]), where.append(["hosts", i, "name"])
        else:
            if not sites:
                raise self.fail(["sites"], "missing required field; expected a list of sites "
                                "with their hosts (or a top-level hosts list)", line_at=[])
            for i, s in enumerate(sites):
                if "hosts" not in s:
                    raise self.fail(["sites", i, "hosts"], "missing required field; expected a "
                                    "number of hosts or a list of host names", line_at=["sites", i])
                hs = s["hosts"]
                if isinstance(hs, (int, float)):  # the schema takes 4.0 as an integer
                    if hs + len(names) > MAX_HOSTS:
                        raise self.fail(["sites", i, "hosts"], self.too_many_hosts(hs + len(names)))
                    hs = [f"{s['name']}-{j}" for j in range(int(hs))]
                    paths = [["sites", i, "hosts"]] * len(hs)
                else:
                    paths = [["sites", i, "hosts", j] for j in range(len(hs))]
                names += hs
                labels += [s["name"]] * len(hs)
                where += paths
        if len(names) > MAX_HOSTS:
            raise self.fail(["hosts"] if "hosts" in d else where[MAX_HOSTS][:3],
                            self.too_many_hosts(len(names)))
        first = {}
        for n, p in zip(names, where):
            if n in first:
                raise self.fail(p, f"duplicate host name {n!r} (host names must be unique)")
            first[n] = p
        return names, labels

    @staticmethod
    def too_many_hosts(n) -> str:
        return (f"at most {MAX_HOSTS} hosts in a topology (the cost model keeps host x host "
                f"matrices), got {describe(n) if n > 10**9 else n} in all")

    def read_classes(self, hosts, host_site):
        d = self.d
        sites = d.get("sites", [])
        index = {s["name"]: i for i, s in enumerate(sites)}
        if "hosts" in d:  # top-level host list: every label must be a declared site
            for i, lab in enumerate(host_site):
                if lab not in index:
                    raise self.fail(["hosts", i, "site"], f"unknown site {lab!r}; declare it "
                                    f"under sites: with its lan (or give a measured matrix)")
        S = len(sites)
        lat = np.full((S, S), np.nan)
        bw = np.full((S, S), np.nan)
        ov = {k: (np.full((S, S), np.nan), np.full((S, S), np.nan)) for k in ("os", "g")}
        any_overhead = {"os": False, "g": False}

        def put(i, j, cls):
            lat[i, j], bw[i, j] = cls[0], cls[1]
            for k, spec in (("os", cls[2]), ("g", cls[3])):
                if spec is not None:
                    ov[k][0][i, j], ov[k][1][i, j] = spec
                    any_overhead[k] = True

        used = sorted(set(index[lab] for lab in host_site))
        lan = {}
        for i, s in enumerate(sites):
            if "lan" not in s:
                if i in used:
                    raise self.fail(["sites", i, "lan"], "missing required field; expected "
                                    "{latency: <time>, bandwidth: <bandwidth>} for the site's LAN",
                                    line_at=["sites", i])
                continue
            cls = self.link_class(s["lan"], ["sites", i, "lan"])
            put(i, i, cls)
            lan[i] = cls[:2]
        wan_links.check_exclusive(self)
        if "links" in d:
            self.network = wan_links.read_links(self, sites, index, used, lan, put)
        else:
            # A site of one host has no LAN pair: its NIC is the fastest wan class out of
            # it, as links.site_classes says (so only the other end bounds a class).
            count = np.bincount([index[lab] for lab in host_site], minlength=len(sites))
            nic = {i: v if count[i] > 1 else (0.0, np.inf) for i, v in lan.items()}
            wan_links.read_wan(self, sites, index, used, nic, put)
        site_idx = np.array([index[lab] for lab in host_site], dtype=np.int64)
        ix = np.ix_(site_idx, site_idx)
        hlat, hbw = lat[ix], bw[ix]
        hov = {k: (a[ix], b[ix]) if any_overhead[k] else None for k, (a, b) in ov.items()}
        return self.finish(hlat, hbw, hov, any_overhead)

    def read_matrix(self, hosts):
        d = self.d
        wan_links.check_exclusive(self)
        for i, s in enumerate(d.get("sites", [])):
            if "lan" in s:
                raise self.fail(["sites", i, "lan"], "not allowed together with matrix: give "
                                "either link classes (lan, wan) or a measured matrix")
        if "wan" in d:
            raise self.fail(["wan"], "not allowed together with matrix: give either link "
                            "classes (lan, wan) or a measured matrix")
        m = d["matrix"]
        H = len(hosts)
        out = []
        for key, unit_key, parse, factor_of in (
                ("latency", "latency_unit", self.time, units.time_unit_factor),
                ("bandwidth", "bandwidth_unit", self.bandwidth, units.bandwidth_unit_factor)):
            unit = None
            if unit_key in m:
                try:
                    factor_of(m[unit_key])  # validates the unit
                except ValueError as e:
                    raise self.fail(["matrix", unit_key], str(e)) from None
                unit = m[unit_key]
            rows = m[key]
            n = len(rows)
            for i, row in enumerate(rows):
                if len(row) != n:
                    raise self.fail(["matrix", key, i], f"matrix is not square: expected {n} "
                                    f"values in each row (one per row of the matrix), got {len(row)}")
            if n != H:
                raise self.fail(["matrix", key], f"expected a {H} x {H} matrix (one row and "
                                f"column per host, in host order), got {n} x {n}")
            a = np.empty((H, H))
            for i, row in enumerate(rows):
                for j, v in enumerate(row):
                    if i == j:  # the diagonal is not used (intra_host gives same-host costs)
                        a[i, j] = np.nan
                        continue
                    if unit is not None and isinstance(v, (int, float)) and not isinstance(v, bool):
                        v = f"{v!r} {unit}"  # a bare number is in the matrix's unit
                    a[i, j] = parse(v, ["matrix", key, i, j])
            out.append(a)
        hlat, hbw = out
        return self.finish(hlat, hbw, {"os": None, "g": None}, {"os": False, "g": False})

    def finish(self, hlat, hbw, hov, any_overhead):
        """Fill the diagonal (intra-host) and the os/g defaults; returns host matrices.

        hov[k]: (os or g) host matrices of per-link values, NaN where unset; None: none set."""
        d = self.d
        if "intra_host" in d:
            il, ib, ios, ig = self.link_class(d["intra_host"], ["intra_host"])
        else:
            il, ib, ios, ig = INTRA_HOST_LATENCY, INTRA_HOST_BANDWIDTH, None, None
        hlat, hbw = hlat.copy(), hbw.copy()
        np.fill_diagonal(hlat, il)
        np.fill_diagonal(hbw, ib)
        glob = {"os": self.linear(d.get("send_overhead"), ["send_overhead"]),
                "g": self.linear(d.get("gap"), ["gap"])}
        intra = {"os": ios, "g": ig}
        result = []
        for k in ("os", "g"):
            if glob[k] is None and intra[k] is None and not any_overhead[k]:
                result.append(None)
                continue
            if hov[k] is None:
                a, pb = np.full_like(hlat, np.nan), np.full_like(hlat, np.nan)
            else:
                a, pb = hov[k][0].copy(), hov[k][1].copy()
            if intra[k] is not None:
                np.fill_diagonal(a, intra[k][0])
                np.fill_diagonal(pb, intra[k][1])
            if glob[k] is not None:
                a[np.isnan(a)], pb[np.isnan(pb)] = glob[k]
            unset = np.isnan(a)
            a[unset], pb[unset] = 0.0, 1.0 / hbw[unset]  # default: serialization time m / b
            result.append((a, pb))
        return hlat, hbw, result[0], result[1]

    def read_placement(self, hosts, nranks):
        d, src = self.d, self.doc.source
        if nranks is not None:
            if isinstance(nranks, bool) or int(nranks) != nranks or not 1 <= nranks <= MAX_RANKS:
                raise InputError(src, "nranks", f"expected 1 to {MAX_RANKS} ranks (the cost "
                                                f"model's rank x rank matrices), got {nranks}")
            nranks = int(nranks)
        p = d.get("placement", {})
        index = {h: i for i, h in enumerate(hosts)}
        if "hosts" in p:
            if "ranks_per_host" in p or "order" in p:
                raise self.fail(["placement", "hosts"], "give either hosts (one per rank) or "
                                "ranks_per_host/order, not both")
            rh = []
            for i, h in enumerate(p["hosts"]):
                if h not in index:
                    raise self.fail(["placement", "hosts", i], f"unknown host {h!r}")
                rh.append(index[h])
            if nranks is None:
                nranks = len(rh)
                if nranks > MAX_RANKS:
                    raise self.fail(["placement", "hosts"], f"at most {MAX_RANKS} ranks (the cost "
                                    f"model's rank x rank matrices), got {nranks}")
            if nranks > len(rh):
                raise self.fail(["placement", "hosts"], f"{nranks} ranks requested but the "
                                f"placement lists hosts for only {len(rh)} ranks; expected at "
                                f"least {nranks} host names, one per rank")
            return np.array(rh[:nranks], dtype=np.int64)
        k = int(p.get("ranks_per_host", 1))
        H = len(hosts)
        cap = k * H
        if nranks is None:
            nranks = cap
            if nranks > MAX_RANKS:
                field = ["placement", "ranks_per_host"] if "ranks_per_host" in p else ["placement"]
                raise self.fail(field, f"places {describe(cap) if cap > 10**9 else cap} ranks "
                                f"({H} hosts x {describe(k) if k > 10**9 else k} per host); at most "
                                f"{MAX_RANKS} (the cost model's rank x rank matrices)",
                                line_at=[] if "placement" not in d else None)
        if nranks > cap:
            field = ["placement", "ranks_per_host"] if "ranks_per_host" in p else ["placement"]
            raise self.fail(field, f"{nranks} ranks requested but the placement provides only "
                            f"{cap} ({H} hosts x {k} rank{'s' if k > 1 else ''} per host); set "
                            f"placement.ranks_per_host or list a host per rank in placement.hosts",
                            line_at=[] if "placement" not in d else None)
        r = np.arange(nranks, dtype=np.int64)
        if p.get("order", "block") == "cyclic":
            return r % H
        return r // min(k, nranks)  # the same ranks on host 0 when k >= nranks; no int64 overflow


# --- writing --------------------------------------------------------------------------

def write_matrix_topology(path, hosts, sites, latency_s, bandwidth_Bps, name=None,
                          duplex="full", intra_host=None, comment=None, extra=None) -> None:
    """Write (atomically) a measured-matrix topology file that load_topology reads back.

    extra: further top-level fields (placement, eager_limit, ...), written after the matrix.
    hosts: host names; sites: site label of each host; latency_s / bandwidth_Bps: (H, H)
    arrays (row = sender host), diagonal ignored; intra_host: optional (latency_s, Bps).
    """
    hosts = [str(h) for h in hosts]
    lat = np.asarray(latency_s, dtype=np.float64)
    bw = np.asarray(bandwidth_Bps, dtype=np.float64)
    H = len(hosts)
    if lat.shape != (H, H) or bw.shape != (H, H) or len(sites) != H:
        raise ValueError(f"write_matrix_topology: expected {H} sites and {H} x {H} matrices, "
                         f"got {len(sites)}, {lat.shape}, {bw.shape}")

    def rows(a, diag):
        return [[diag if i == j else float(a[i, j]) for j in range(H)] for i in range(H)]

    doc = {"name": name or Path(path).stem, "duplex": "full" if duplex in ("full", True) else "half",
           "hosts": [{"name": h, "site": str(s)} for h, s in zip(hosts, sites)]}
    if intra_host is not None:
        doc["intra_host"] = {"latency": float(intra_host[0]), "bandwidth": float(intra_host[1])}
    doc["matrix"] = {"latency_unit": "s", "bandwidth_unit": "B/s",
                     "latency": rows(lat, None), "bandwidth": rows(bw, None)}
    head = "# collsched topology, measured-matrix form (docs/inputs.md).\n"
    if comment:
        head += "".join(f"# {line}\n" for line in str(comment).splitlines())
    head += ("# matrix rows = sending host, columns = receiving host, in the order of hosts;\n"
             "# latencies in seconds, bandwidths in bytes/s; the diagonal is unused.\n")
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100000)
    if extra:
        body += yaml.safe_dump(extra, sort_keys=False, default_flow_style=None, width=100000)
    write_atomic(path, head + body)


def write_topology(topo: Topology, path, comment=None) -> None:
    """Write any Topology with an explicit placement so that loading the file gives the
    same digest: in class form with its links and routes when it has a `links:` network,
    else in matrix form."""
    if topo.host_latency is None or topo.host_bandwidth is None:
        raise ValueError("write_topology: this Topology has no host-level matrices")
    if topo.os_a is not None or topo.g_a is not None:
        raise ValueError("write_topology: os/g matrices cannot be written in matrix form yet")
    diag_l = np.diag(topo.host_latency)
    diag_b = np.diag(topo.host_bandwidth)
    intra = (float(diag_l.max()), float(diag_b.min()))
    extra = {"placement": {"hosts": [topo.hosts[h] for h in topo.rank_host]},
             "eager_limit": int(topo.eager_limit)}
    if topo.tcp_window is not None:
        extra["tcp_window"] = int(topo.tcp_window)
    if topo.message_costs is not None:
        extra["message_costs"] = topo.message_costs.to_dict()
    extra.update(compute.section(topo))
    duplex = "full" if topo.full_duplex else "half"
    if topo.network is not None and topo.network.origin == network_mod.FROM_LINKS:
        return wan_links.write_links_topology(topo, path, comment, duplex, intra, extra)
    write_matrix_topology(path, topo.hosts, topo.host_site, topo.host_latency,
                          topo.host_bandwidth, name=topo.name, duplex=duplex,
                          intra_host=intra, comment=comment, extra=extra)
