"""The compact form of `hier` (algorithms/hier.py; docs/hier.md): version 2 of the
description, whose tail holds what every rank's list depends on beyond the head - the
sites, the inter-site plan and the FIFO thresholds per site pair - so its size grows with
the sites (S^2 entries), not the ranks.

Tail (little-endian; runtime/src/compact_hier.c reads it):

    offset             type                 field
    0                  u32                  nsites S, 1..MAX_SITES: contiguous rank ranges in rank order
    4                  u32                  nentries E = S (S - 1)
    8                  u32                  plan: 0 direct, 1 relay (what site_plan.choose picked; informational)
    12                 u32                  reserved, 0
    16                 u32[S]               sizes: members per site, summing to nranks
    16 + 4S            u64[S][S]            fifo: row = sending site; a send of a piece of at
                                            least this many bytes (at bytes_max) is FIFO-marked
    16 + 4S + 8S^2     (u32 x 4)[E]         entries (step, src site, dst site, origin site),
                                            steps nondecreasing (site_plan.refusal)

The head's fifo_min_piece is 2^64 - 1 (the thresholds are the tail's). At 8 sites the
record is 1,516 bytes, whatever the rank count.

**Why per-pair thresholds reproduce the FIFO pass.** mark_fifo_links marks a send where
fifo_link(L, m, f, b) holds for its rank pair's latency L, bandwidth b and one flow's
bandwidth f (the TCP window's cap), m its piece's size. On a topology given by link
classes with one rank per host and constant costs, every rank pair of sites (X, Y) has the
class's (L, b, f) (X = Y: the site's LAN), so the marks of a pair's sends depend on the
piece size alone, monotonically: one threshold per site pair, found by desc.fifo_min_piece
(a bisection asking fifo_link itself with the operands the pass gives it).

**The site-level reader** (`read_sites`) takes sizes and the per-pair classes from the
topology YAML with the topology reader's own parsers (inputs.topology._Reader: the same
floats the P x P Topology would hold) without building the P x P matrices, so P = 65,536
over 8 sites is read in milliseconds. It serves files with link classes (sites' lan, wan),
one rank per host on the first P hosts (the default placement), constant costs, full
duplex, and sites whose ranks are contiguous; anything else is refused in one line
(NotServed), and the explicit compile (which reads the same file) stays available.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import yaml

from .. import passes, resources
from ..algorithms import Request, block_transfers, hier as hier_alg, site_plan
from ..errors import InputError
from ..files import write_atomic
from ..inputs import topology as topology_file, wan_links
from ..inputs.schemas import TOPOLOGY_SCHEMA, read_yaml
from ..ir import SEND, Schedule
from ..verify import verify
from .desc import NO_FIFO, SOURCE, CompactDesc, TailForm, fifo_min_piece, register_tail
from .native import schedule as compact_schedule

MAX_SITES = 256  # compact_hier.c CS_HIER_MAX_SITES: its plan check keeps an S x S bitmap on the stack
_HEAD = struct.Struct("<IIII")
_ENTRY = struct.Struct("<IIII")
PLAN_CODES = {site_plan.DIRECT: 0, site_plan.RELAY: 1}


class NotServed(Exception):
    """A valid topology (or compile option) the compact form of hier does not describe."""


@dataclass(frozen=True)
class Sites:
    """What hier's lists depend on in a topology file, at site level: member counts of the
    used sites (in rank order) and per site pair (row = sender; diagonal: the site's LAN)
    latency, bandwidth and one flow's bandwidth."""

    source: str
    names: tuple[str, ...]
    sizes: tuple[int, ...]
    latency: np.ndarray
    bandwidth: np.ndarray
    flow: np.ndarray
    full_duplex: bool

    def costs(self) -> site_plan.SiteCosts:
        return site_plan.SiteCosts(self.sizes, self.latency, self.bandwidth, self.flow)


def read_sites(path, nranks: int, duplex: str | None = None) -> Sites:
    """The sites of a topology file at nranks ranks (module docstring). InputError (one
    line) for a file the topology reader refuses on the fields read; NotServed for a valid
    one the compact form does not describe."""
    doc = read_yaml(resources.topology_path(path), TOPOLOGY_SCHEMA)
    reader = topology_file._Reader(doc)
    d = doc.data
    if "matrix" in d:
        raise NotServed("a measured matrix (the compact form of hier reads link classes: lan and wan)")
    if "links" in d:
        raise NotServed("wide-area links (links:): the compact form of hier reads the wan: form; "
                        "use --form explicit")
    if "message_costs" in d:
        raise NotServed("size-dependent message costs (the FIFO marks then follow the cost tables)")
    place = d.get("placement", {})
    if "hosts" in place or int(place.get("ranks_per_host", 1)) != 1:
        raise NotServed("a placement other than one rank per host (ranks sharing a host talk over "
                        "the intra-host class)")
    sites = d.get("sites", [])
    index = {}
    for i, s in enumerate(sites):
        if s["name"] in index:
            raise reader.fail(["sites", i, "name"], f"duplicate site name {s['name']!r} "
                              f"(also sites[{index[s['name']]}])")
        index[s["name"]] = i
    runs = _host_runs(reader, d, sites, index)
    total = sum(n for _, n in runs)
    if total <= topology_file.MAX_HOSTS:
        reader.read_hosts()  # every check of the host names the topology reader makes
    if not (isinstance(nranks, int) and 1 <= nranks <= total):
        raise InputError(doc.source, "placement", f"{nranks} ranks requested but the placement "
                         f"provides only {total} ({total} hosts x 1 rank per host)")
    used: list[list] = []  # [site index, members] in rank order, the first nranks hosts
    left = nranks
    for site, n in runs:
        take = min(n, left)
        if take == 0:
            break
        left -= take
        if used and used[-1][0] == site:
            used[-1][1] += take
        elif any(u[0] == site for u in used):
            raise NotServed(f"site {sites[site]['name']!r} holds ranks that are not one contiguous "
                            f"range (the compact form of hier needs sites as rank ranges)")
        else:
            used.append([site, take])
    if len(used) > MAX_SITES:
        raise NotServed(f"{len(used)} sites (the compact form of hier serves at most {MAX_SITES})")
    hosts = {}
    for site, n in runs:
        hosts[site] = hosts.get(site, 0) + n
    lat, bw = _classes(reader, sites, index, [u[0] for u in used], hosts)
    window = float(reader.size("tcp_window", positive=True)) if "tcp_window" in d else None
    flow = bw.copy()
    if window is not None:  # Topology.flow_bandwidth's formula, per site pair
        with np.errstate(divide="ignore"):
            cap = np.where(lat > 0, window / (2.0 * lat), np.inf)
        flow = np.minimum(bw, cap)
    full = (d.get("duplex", "full") == "full") if duplex is None else duplex == "full"
    return Sites(str(path), tuple(sites[u[0]]["name"] for u in used), tuple(u[1] for u in used),
                 lat, bw, flow, full)


def _host_runs(reader, d, sites, index) -> list[tuple[int, int]]:
    """(site index, host count) runs in host order, without listing generated host names."""
    runs: list[tuple[int, int]] = []
    if "hosts" in d:  # a top-level host list names each host's site
        for i, s in enumerate(sites):
            if "hosts" in s:
                raise reader.fail(["sites", i, "hosts"], "not allowed when hosts are listed at "
                                  "the top level (hosts:); list each host in one place")
        for i, h in enumerate(d["hosts"]):
            if h["site"] not in index:
                raise reader.fail(["hosts", i, "site"], f"unknown site {h['site']!r}; declare it "
                                  f"under sites: with its lan (or give a measured matrix)")
            site = index[h["site"]]
            if runs and runs[-1][0] == site:
                runs[-1] = (site, runs[-1][1] + 1)
            else:
                runs.append((site, 1))
        return runs
    if not sites:
        raise reader.fail(["sites"], "missing required field; expected a list of sites with "
                          "their hosts (or a top-level hosts list)", line_at=[])
    for i, s in enumerate(sites):
        if "hosts" not in s:
            raise reader.fail(["sites", i, "hosts"], "missing required field; expected a number "
                              "of hosts or a list of host names", line_at=["sites", i])
        hs = s["hosts"]
        runs.append((i, int(hs) if isinstance(hs, (int, float)) else len(hs)))
    return runs


def _classes(reader, sites, index, used, hosts) -> tuple[np.ndarray, np.ndarray]:
    """(latency, bandwidth), S x S over the used sites: the LANs on the diagonal, the WAN
    classes (and their *_back values) off it, read by the topology reader's own `wan:`
    reader (inputs/wan_links.read_wan: the same checks, the same error lines). hosts: site
    index -> its host count."""
    s = len(used)
    at = {site: k for k, site in enumerate(used)}
    lat, bw = np.full((s, s), np.nan), np.full((s, s), np.nan)
    nic = {}
    for site, k in at.items():
        if "lan" not in sites[site]:
            raise reader.fail(["sites", site, "lan"], "missing required field; expected "
                              "{latency: <time>, bandwidth: <bandwidth>} for the site's LAN",
                              line_at=["sites", site])
        lat[k, k], bw[k, k] = reader.link_class(sites[site]["lan"], ["sites", site, "lan"])[:2]
        # a site of one host: its NIC is the fastest class out of it (as the reader says)
        nic[site] = (0.0, np.inf) if hosts.get(site, 0) == 1 else (lat[k, k], bw[k, k])

    def put(i, j, cls):
        if i in at and j in at:
            lat[at[i], at[j]], bw[at[i], at[j]] = cls[0], cls[1]

    wan_links.read_wan(reader, sites, index, used, nic, put)
    return lat, bw


@dataclass(frozen=True)
class HierTail:
    """The tail's fields (module docstring)."""

    sizes: tuple[int, ...]
    plan: int  # PLAN_CODES
    fifo: tuple[tuple[int, ...], ...]  # [src site][dst site]
    entries: tuple[site_plan.PlanEntry, ...]

    def encode(self) -> bytes:
        s = len(self.sizes)
        out = [_HEAD.pack(s, len(self.entries), self.plan, 0), struct.pack(f"<{s}I", *self.sizes),
               struct.pack(f"<{s * s}Q", *(v for row in self.fifo for v in row))]
        out += [_ENTRY.pack(e.step, e.src, e.dst, e.origin) for e in self.entries]
        return b"".join(out)


def tail_refusal(desc: CompactDesc) -> tuple[str, str] | None:
    """(field, expected) for a hier tail compact_hier.c does not serve, else None: the
    same checks in the same order, with the same words (cs_compact_hier_check)."""
    t = desc.tail
    if len(t) < _HEAD.size:
        return "tail", f"expected at least {_HEAD.size} bytes (the hier tail's header), found {len(t)}"
    s, ne, kind, reserved = _HEAD.unpack_from(t)
    if not 1 <= s <= MAX_SITES:
        return "tail.nsites", f"expected 1..{MAX_SITES}, found {s}"
    want = _HEAD.size + 4 * s + 8 * s * s + 16 * ne
    if len(t) != want:
        return "tail", f"expected {want} bytes for {s} sites and {ne} entries, found {len(t)}"
    if reserved:
        return "tail.reserved", f"expected 0, found {reserved}"
    if kind > 1:
        return "tail.plan", f"expected 0 (direct) or 1 (relay), found {kind}"
    if desc.fifo_min_piece != NO_FIFO:
        return ("fifo_min_piece", f"expected 2^64-1 for hier (its thresholds are per site pair, in "
                f"the tail), found {desc.fifo_min_piece}")
    tail = decode_tail(t)
    for x, n in enumerate(tail.sizes):
        if n == 0:
            return f"tail.sizes[{x}]", "expected at least 1 member, found 0"
    if sum(tail.sizes) != desc.nranks:
        return "tail.sizes", f"expected members summing to nranks {desc.nranks}, found {sum(tail.sizes)}"
    why = site_plan.refusal(tail.entries, s)
    return None if why is None else (f"tail.{why[0]}", why[1])


def decode_tail(t: bytes) -> HierTail:
    """The tail's fields, as laid out (lengths unchecked beyond what struct needs)."""
    s, ne, kind, _ = _HEAD.unpack_from(t)
    sizes = struct.unpack_from(f"<{s}I", t, _HEAD.size)
    flat = struct.unpack_from(f"<{s * s}Q", t, _HEAD.size + 4 * s)
    at = _HEAD.size + 4 * s + 8 * s * s
    entries = tuple(site_plan.PlanEntry(*_ENTRY.unpack_from(t, at + 16 * i)) for i in range(ne))
    return HierTail(tuple(sizes), kind, tuple(tuple(flat[x * s:(x + 1) * s]) for x in range(s)), entries)


def for_sites(sites: Sites, nranks: int, nbytes: int | tuple[int, int], nseg: int = 1,
              kind: str | None = None) -> CompactDesc:
    """The description of hier compiled on these sites (the plan site_plan.choose picks at
    bytes_max, or `kind`), with the FIFO threshold of every site pair."""
    lo, hi = (nbytes, nbytes) if isinstance(nbytes, int) else nbytes
    if not 0 <= lo <= hi:
        raise InputError(SOURCE, "bytes", f"expected 0 <= MIN <= MAX, found {lo}:{hi}")
    if not sites.full_duplex:
        raise NotServed("half duplex (the compact form of hier is full duplex only)")
    plan = site_plan.choose(sites.costs(), hi, kind=kind)
    s = len(sites.sizes)
    fifo = tuple(tuple(fifo_min_piece(hi, float(sites.latency[x, y]), float(sites.bandwidth[x, y]),
                                      float(sites.flow[x, y])) for y in range(s)) for x in range(s))
    tail = HierTail(sites.sizes, PLAN_CODES[plan.kind], fifo, plan.entries)
    return CompactDesc("hier", nranks, nseg, lo, hi, NO_FIFO, tail=tail.encode())


def for_topology(topology, nranks: int, nbytes: int | tuple[int, int], nseg: int = 1, *,
                 duplex: str | None = None, kind: str | None = None) -> CompactDesc:
    """What `compile_schedule("hier", nranks, nbytes, segments=nseg, topology=topology,
    duplex=duplex)` writes, as a description (kind: force the plan, for tests)."""
    return for_sites(read_sites(topology, nranks, duplex), nranks, nbytes, nseg, kind)


def _args_nseg(args) -> int:
    seg = str(getattr(args, "segments", "auto"))
    # --segments auto keeps one segment for hier (policy.segment_candidates: not min3, and
    # the served topologies have constant costs)
    return 1 if seg == "auto" else int(seg)


def refusal(args) -> str | None:
    """Why `collsched compile --algorithm hier` with these options has no description."""
    topology = getattr(args, "topology", None)
    if topology is None:
        return "no topology (hier composes over a topology's sites; on one site it is the ring)"
    duplex = getattr(args, "duplex", None)
    try:
        sites = read_sites(topology, getattr(args, "ranks", None), duplex)
    except NotServed as e:
        return f"the topology {topology}: {e}"
    except (InputError, OSError) as e:
        return f"the topology {topology} is unreadable ({e.line() if isinstance(e, InputError) else e})"
    if not sites.full_duplex:
        return "half duplex (the compact form of hier is full duplex only)"
    return None


def describe(args) -> CompactDesc:
    """The description `collsched compile --form compact --algorithm hier` writes."""
    from ..inputs.units import parse_bytes_range as parse_bytes_arg

    why = refusal(args)
    if why is not None:
        raise InputError("--form compact", "", f"no compact description for this compile: {why}")
    return for_topology(args.topology, args.ranks, parse_bytes_arg(args.bytes), _args_nseg(args),
                        duplex=getattr(args, "duplex", None))


def explicit(desc: CompactDesc, topology) -> Schedule:
    """The explicit compiler's lists for the plan in `desc`'s tail on the topology file
    (the same sites): hier.transfers, block_transfers and the pipeline's passes, as
    compile_schedule runs them. With the plan site_plan.choose picks, this is what
    `collsched compile --algorithm hier` writes (identity.explicit checks that too)."""
    topo = topology_file.load_topology(topology, desc.nranks)
    req = Request(nranks=desc.nranks, nbytes=desc.bytes_max, nseg=desc.nseg, topology=topo,
                  arrivals=np.zeros(desc.nranks))
    groups = hier_alg.site_groups(req)
    tail = decode_tail(desc.tail)
    plan = site_plan.SitePlan("", tail.sizes, tuple(g[0] for g in groups), tail.entries, desc.bytes_max)
    sched = block_transfers(req, "hier", *hier_alg.transfers(groups, plan))
    return passes.apply(sched, topo, desc.bytes_max)


def tail_lists(desc: CompactDesc) -> Schedule:
    """The lists the tail stands for, built by the explicit side alone (no topology file):
    hier.transfers on the tail's sites and plan, block_transfers, and the FIFO marks read
    from the tail's thresholds (a send is marked where its piece is at least the threshold
    of its (sender's site, receiver's site))."""
    tail = decode_tail(desc.tail)
    first = np.concatenate([[0], np.cumsum(tail.sizes)[:-1]]).astype(np.int64)
    groups = [list(range(int(f), int(f) + n)) for f, n in zip(first, tail.sizes)]
    plan = site_plan.SitePlan("", tail.sizes, tuple(int(f) for f in first), tail.entries, desc.bytes_max)
    req = Request(nranks=desc.nranks, nbytes=desc.bytes_max, nseg=desc.nseg)
    sched = block_transfers(req, "hier", *hier_alg.transfers(groups, plan))
    site = np.repeat(np.arange(len(tail.sizes)), tail.sizes)
    threshold = np.array(tail.fifo, np.uint64)[site[sched.rank_of_op], site[sched.peer]]
    piece = sched.piece_bytes(desc.bytes_max).astype(np.uint64)[sched.segment]
    sched.fifo = ((sched.kind == SEND) & (piece >= threshold)).astype(np.uint8)
    return sched


def check_record(desc: CompactDesc) -> str | None:
    """What `collsched verify` can say of a hier record without its topology file: None
    when the tail's lists (tail_lists) pass the verifier (holding, delivery, matching,
    progress) and the C generator's lists equal them column by column; else one line.
    O(total ops): for the sizes the explicit path serves."""
    want = tail_lists(desc)
    name = f"hier record ({desc.nranks} ranks, {len(decode_tail(desc.tail).sizes)} sites)"
    bad = verify(want)
    if bad:
        return f"{name}: {bad[0]}"
    got = compact_schedule(desc)
    counts_want, counts_got = np.diff(want.offsets), np.diff(got.offsets)
    if not np.array_equal(counts_want, counts_got):
        r = int(np.nonzero(counts_want != counts_got)[0][0])
        return f"{name}: rank {r}: {int(counts_got[r])} ops generated, the tail's lists have {int(counts_want[r])}"
    for col in ("kind", "peer", "origin", "segment", "phase", "fifo"):
        diff = np.nonzero(getattr(want, col) != getattr(got, col))[0]
        if len(diff):
            i = int(diff[0])
            r = int(np.searchsorted(want.offsets, i, side="right") - 1)
            return f"{name}: rank {r} op {i - int(want.offsets[r])}: {col} differs from the tail's lists"
    return None


def write_sites_topology(path, sizes, lan, wan, *, tcp_window: int | None = None,
                         name: str = "sites", comment: str | None = None) -> None:
    """Write (atomically) a class-form topology file of len(sizes) sites (S0, S1, ...) with
    sizes[i] hosts each: lan[i] = (latency s, bandwidth B/s) of site i's LAN, wan[(i, j)]
    (i < j) = (latency, bandwidth, latency back, bandwidth back) of the link between them.
    Site counts only (no host lists): what read_sites reads at any size, and what
    load_topology reads up to its host limit. Numbers are written as repr'd floats (YAML
    round-trips them exactly)."""
    doc = {"name": name, "duplex": "full"}
    if tcp_window is not None:
        doc["tcp_window"] = int(tcp_window)
    doc["sites"] = [{"name": f"S{i}", "hosts": int(n), "lan": {"latency": float(lan[i][0]),
                     "bandwidth": float(lan[i][1])}} for i, n in enumerate(sizes)]
    doc["wan"] = [{"between": [f"S{i}", f"S{j}"], "latency": float(v[0]), "bandwidth": float(v[1]),
                   "latency_back": float(v[2]), "bandwidth_back": float(v[3])}
                  for (i, j), v in sorted(wan.items())]
    head = "".join(f"# {line}\n" for line in (comment or "").splitlines())
    write_atomic(path, head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=1000))


def summary_lines(desc: CompactDesc) -> list[str]:
    """What `collsched show` can print of a hier tail: the sites, the plan, the FIFO
    thresholds (one line each, aligned as files.summary's)."""
    tail = decode_tail(desc.tail)
    s = len(tail.sizes)
    sizes = ", ".join(map(str, tail.sizes[:8])) + (", ..." if s > 8 else "")
    relayed = sum(e.src != e.origin for e in tail.entries)
    steps = tail.entries[-1].step + 1 if tail.entries else 0
    lan = {tail.fifo[x][x] for x in range(s) if tail.sizes[x] > 1}
    wan = {tail.fifo[x][y] for x in range(s) for y in range(s) if x != y}

    def marks(values):
        shown = sorted("none" if v == NO_FIFO else f">= {v} bytes per piece" for v in values)
        return ", ".join(shown[:4]) + (", ..." if len(shown) > 4 else "") if shown else "-"
    return [f"sites      {s}: {sizes} ranks",
            f"plan       {['direct', 'relay'][tail.plan]}: {len(tail.entries)} entries in {steps} steps, "
            f"{relayed} relayed by a site other than the origin",
            f"fifo lan   {marks(lan)}",
            f"fifo wan   {marks(wan)}"]


def record_bytes(nsites: int) -> int:
    """The record's size for S sites: head, tail, CRC-32."""
    return 56 + _HEAD.size + 4 * nsites + 8 * nsites * nsites + 16 * nsites * (nsites - 1) + 4


register_tail("hier", TailForm(tail_refusal, refusal, describe, check_record, summary_lines))
