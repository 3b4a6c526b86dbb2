"""Message-size-dependent costs: piecewise latency and bandwidth factors per link class.

A real MPI over TCP or InfiniBand does not move every message at L + m / b: small messages
go eagerly, large ones after a rendezvous handshake, and the per-message cost changes at
each protocol switch. The Min3 paper measured this as parametrised LogP (os(m), g(m));
SimGrid's default SMPI network model encodes it as two piecewise-constant tables,
smpi/lat-factor and smpi/bw-factor, calibrated on real clusters. We use SimGrid's form
because it composes with any topology: a message of m bytes between two ranks costs

    latency(m)   = L(pair) * latency_factor(m)
    bandwidth(m) = b(pair) * bandwidth_factor(m)   (every rate the flow gets: its NICs, a
                                                     shared WAN link, its TCP-window cap)

so every bandwidth term of both cost models uses the message's *effective size*
m / bandwidth_factor(m), and every latency term L * latency_factor(m). This is exactly
what SimGrid's CM02 solver does with the factors (network_cm02.cpp: the latency is scaled,
the flow's rate is its max-min share times the bandwidth factor; the TCP-gamma cap uses the
unscaled latency and applies to the share).

A table is a list of segments, each applying from a message size up to the next one's;
the first starts at 0 bytes, so every size has a segment. Tables attach to *link classes*:
``all``, ``intra_host`` (two ranks on one host), ``lan`` (two hosts of one site), ``wan``
(two sites), ``lan:SITE`` and ``wan:A:B`` (one site's LAN, the link from A to B). The most
specific class wins; a pair no table covers keeps constant costs (factors 1).
Format: docs/inputs.md, "Message-size-dependent costs".
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# SimGrid 3.32's defaults for the SMPI network model (src/simgrid/sg_config.cpp:
# smpi/lat-factor and smpi/bw-factor; src/surf/network_smpi.cpp sets network/weight-S).
# SimGrid's threshold t applies to sizes above t, so it starts our segment at t + 1 (t = 0:
# at 0, a zero-byte message costs nothing either way).
_SIMGRID_SMPI_THRESHOLDS = (0, 257, 732, 1426, 3484, 5776, 9376, 15424, 65472)
_SIMGRID_SMPI_LAT = (2.01467, 1.95341, 1.9503, 1.61075, 1.88101, 2.18796, 2.59299, 3.48845, 11.6436)
_SIMGRID_SMPI_BW = (0.812084, 0.338112, 0.341987, 0.608902, 0.77493, 1.08739, 0.58729, 0.697866,
                    0.940694)
SIMGRID_SMPI_WEIGHT_S = 8775.0
# SMPI puts payload + 16 bytes on the wire (the MPI envelope: tag, source, communicator;
# src/smpi/mpi/smpi_request.cpp), under every network model: its factors are looked up by,
# and its bandwidth charged for, that size. Under CM02 the 16 bytes are noise; with the
# factor tables they decide the segment of a payload within 16 bytes below a threshold.
SMPI_ENVELOPE_BYTES = 16

# The preset names a topology file may give instead of tables.
PRESETS = ("simgrid-smpi",)
# Class selectors, least specific first (precedence: later wins).
KINDS = ("all", "lan", "wan", "lan:", "wan:", "intra_host")
MAX_SEGMENTS = 256
MIN_FACTOR, MAX_FACTOR = 1e-6, 1e6


@dataclass(frozen=True)
class CostTable:
    """One piecewise table: segment i covers sizes [starts[i], starts[i + 1])."""

    starts: tuple[int, ...]
    latency_factor: tuple[float, ...]
    bandwidth_factor: tuple[float, ...]

    def __post_init__(self):
        s = self.starts
        if not s or s[0] != 0 or any(b <= a for a, b in zip(s, s[1:])):
            raise ValueError("segments must start at 0 bytes and grow")
        if not len(s) == len(self.latency_factor) == len(self.bandwidth_factor):
            raise ValueError("one latency and one bandwidth factor per segment")

    def at(self, nbytes):
        """(latency_factor, bandwidth_factor) for a size or an array of sizes."""
        i = np.searchsorted(np.asarray(self.starts, np.float64), np.asarray(nbytes, np.float64),
                            side="right") - 1
        i = np.maximum(i, 0)
        return (np.asarray(self.latency_factor)[i], np.asarray(self.bandwidth_factor)[i])

    def extremes(self, max_bytes):
        """(smallest latency factor, largest bandwidth factor) over the sizes 1..max_bytes:
        what a lower bound may assume for a message of any size up to max_bytes."""
        top = int(np.searchsorted(np.asarray(self.starts, np.float64), float(max_bytes), side="right"))
        lo = max(0, int(np.searchsorted(np.asarray(self.starts, np.float64), 1.0, side="right")) - 1)
        top = max(top, lo + 1)
        return min(self.latency_factor[lo:top]), max(self.bandwidth_factor[lo:top])

    def to_list(self) -> list[dict]:
        return [{"from": int(a), "latency_factor": float(lf), "bandwidth_factor": float(bf)}
                for a, lf, bf in zip(self.starts, self.latency_factor, self.bandwidth_factor)]

    def simgrid_cfg(self, envelope_bytes: float = SMPI_ENVELOPE_BYTES) -> tuple[str, str]:
        """(smpi/lat-factor, smpi/bw-factor) strings that make SimGrid's SMPI model follow
        this table, looked up by payload + envelope_bytes (the inverse of the preset's
        conversion). SimGrid looks up by payload + 16 and applies a threshold t to sizes
        above t, so a segment from `start` becomes t = start + 15 - envelope_bytes."""
        shift = SMPI_ENVELOPE_BYTES - 1 - int(envelope_bytes)
        th = [0 if a == 0 else max(0, a + shift) for a in self.starts]  # every wire size >= 16
        lat = ";".join(f"{t}:{v!r}" for t, v in zip(th, self.latency_factor))
        bw = ";".join(f"{t}:{v!r}" for t, v in zip(th, self.bandwidth_factor))
        return lat, bw


SIMGRID_SMPI = CostTable(tuple(0 if t == 0 else t + 1 for t in _SIMGRID_SMPI_THRESHOLDS),
                         _SIMGRID_SMPI_LAT, _SIMGRID_SMPI_BW)


@dataclass(frozen=True, eq=False)
class MessageCosts:
    """Which table applies to each host pair, and SimGrid's sharing weight if known.

    host_table[h1, h2]: index into tables, -1 = constant costs. classes: the selector each
    table was given under (for writing the topology back). weight_s: SimGrid's
    network/weight-S (bytes): a flow's max-min weight is 1 / (L + weight_s * sum 1/b over
    its links); only the fluid model uses it."""

    tables: tuple[CostTable, ...]
    classes: tuple[str, ...]
    host_table: np.ndarray
    weight_s: float = 0.0
    preset: str | None = None
    # Bytes every message carries besides its payload (a header, SMPI's 16-byte envelope):
    # the tables are looked up by, and bandwidth charged for, payload + envelope_bytes.
    envelope_bytes: float = 0.0

    def factors(self, rank_host, src, dst, nbytes):
        """(latency_factor, bandwidth_factor) arrays for transfers src -> dst of nbytes."""
        src, dst = np.asarray(src), np.asarray(dst)
        nbytes = np.broadcast_to(np.asarray(nbytes, np.float64) + self.envelope_bytes, src.shape)
        which = self.host_table[rank_host[src], rank_host[dst]]
        lf, bf = np.ones(src.shape), np.ones(src.shape)
        for k, t in enumerate(self.tables):
            on = which == k
            if on.any():
                lf[on], bf[on] = t.at(nbytes[on])
        return lf, bf

    def bounds(self, rank_host, max_bytes):
        """(P, P) smallest latency factor and largest bandwidth factor of every rank pair
        over the sizes 1..max_bytes (CostTable.extremes); 1 where no table applies."""
        which = self.host_table[np.ix_(rank_host, rank_host)]
        lf, bf = np.ones(which.shape), np.ones(which.shape)
        for k, t in enumerate(self.tables):
            on = which == k
            lf[on], bf[on] = t.extremes(max_bytes + self.envelope_bytes)
        return lf, bf

    def to_dict(self) -> dict:
        """The topology file's message_costs section."""
        out: dict = {}
        if self.preset:
            out["preset"] = self.preset
        else:
            for cls, t in zip(self.classes, self.tables):
                out[cls] = t.to_list()
        if self.weight_s and not self.preset:
            out["weight_s"] = float(self.weight_s)
        if self.envelope_bytes and not self.preset:
            out["envelope_bytes"] = int(self.envelope_bytes)
        return out

    def single_table(self) -> CostTable | None:
        """The one table every non-intra-host pair uses, or None (SimGrid's factors are global:
        only such a topology can be handed to SMPI as smpi/lat-factor and smpi/bw-factor)."""
        off = ~np.eye(len(self.host_table), dtype=bool)
        used = np.unique(self.host_table[off]) if off.any() else np.array([], np.int64)
        if len(used) == 1 and used[0] >= 0:
            return self.tables[int(used[0])]
        return None


def host_classes(host_site, selector: str, hosts_n: int) -> np.ndarray:
    """Boolean (H, H) mask of the host pairs a class selector names (valid selectors only)."""
    site = np.asarray(host_site, dtype=object)
    same_site = site[:, None] == site[None, :]
    eye = np.eye(hosts_n, dtype=bool)
    if selector == "all":
        return ~eye
    if selector == "intra_host":
        return eye
    if selector == "lan":
        return same_site & ~eye
    if selector == "wan":
        return ~same_site
    parts = selector.split(":")
    if parts[0] == "lan":
        return (site[:, None] == parts[1]) & same_site & ~eye
    return (site[:, None] == parts[1]) & (site[None, :] == parts[2])


def selector_rank(selector: str) -> int:
    """Precedence of a selector (higher wins)."""
    head = selector.split(":")[0] + (":" if ":" in selector else "")
    return KINDS.index(head)


def build(tables: dict[str, CostTable], host_site, weight_s=0.0, preset=None,
          envelope_bytes=0) -> MessageCosts:
    """MessageCosts from {selector: table} over hosts labelled with their sites."""
    h = len(host_site)
    host_table = np.full((h, h), -1, np.int16)
    classes = sorted(tables, key=selector_rank)
    for k, cls in enumerate(classes):
        host_table[host_classes(host_site, cls, h)] = k
    host_table.setflags(write=False)
    return MessageCosts(tuple(tables[c] for c in classes), tuple(classes), host_table,
                        float(weight_s), preset, float(envelope_bytes))


def simgrid_smpi(host_site) -> MessageCosts:
    """SimGrid's SMPI model defaults on every pair of hosts (the preset)."""
    return build({"all": SIMGRID_SMPI}, host_site, SIMGRID_SMPI_WEIGHT_S, preset="simgrid-smpi",
                 envelope_bytes=SMPI_ENVELOPE_BYTES)


def parse(reader, spec, host_site) -> MessageCosts:
    """The message_costs section of a topology file (already schema-checked as a mapping).

    reader: the topology _Reader (fail, size parsing). Every error names the field."""
    base = ["message_costs"]
    sites = set(host_site)
    if "preset" in spec:
        if len(spec) > 1:
            other = next(k for k in spec if k != "preset")
            raise reader.fail(base + [other], "not allowed together with preset: give either a "
                              "preset or your own tables")
        if spec["preset"] not in PRESETS:
            raise reader.fail(base + ["preset"], f"expected one of: {', '.join(PRESETS)}, got "
                              f"{spec['preset']!r}")
        return simgrid_smpi(host_site)
    weight_s = envelope = 0.0
    tables = {}
    for key, value in spec.items():
        where = base + [key]
        if key == "envelope_bytes":
            envelope = reader.size_value(value, where)
            if envelope > 1 << 20:
                raise reader.fail(where, f"expected a header size of at most 1 MiB, got {value!r}")
            continue
        if key == "weight_s":
            w = value
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w <= 1e12:
                raise reader.fail(where, f"expected a non-negative number of bytes (SimGrid's "
                                  f"network/weight-S), got {w!r}")
            weight_s = float(w)
            continue
        _check_selector(reader, where, key, sites)
        tables[key] = _table(reader, where, value)
    if not tables:
        raise reader.fail(base, "expected at least one table (all:, lan:, wan:, intra_host:, "
                          "lan:SITE:, wan:A:B:) or preset: simgrid-smpi")
    return build(tables, host_site, weight_s, envelope_bytes=envelope)


def _check_selector(reader, where, key, sites):
    parts = key.split(":")
    ok = (key in ("all", "lan", "wan", "intra_host")
          or (parts[0] == "lan" and len(parts) == 2)
          or (parts[0] == "wan" and len(parts) == 3))
    if not ok:
        raise reader.fail(where, "expected a link class: all, intra_host, lan, wan, lan:SITE or "
                          f"wan:SITE_A:SITE_B (or preset, weight_s, envelope_bytes), got {key!r}")
    for s in parts[1:]:
        if s not in sites:
            raise reader.fail(where, f"unknown site {s!r}; expected one of: {', '.join(sorted(sites))}")


def _table(reader, where, segs) -> CostTable:
    if not isinstance(segs, list) or not segs:
        raise reader.fail(where, "expected a list of segments, each {from: SIZE, "
                          "latency_factor: X, bandwidth_factor: Y}")
    if len(segs) > MAX_SEGMENTS:
        raise reader.fail(where, f"expected at most {MAX_SEGMENTS} segments, got {len(segs)}")
    starts, lat, bw = [], [], []
    for i, seg in enumerate(segs):
        at = where + [i]
        if not isinstance(seg, dict):
            raise reader.fail(at, "expected {from: SIZE, latency_factor: X, bandwidth_factor: Y}")
        extra = set(seg) - {"from", "latency_factor", "bandwidth_factor"}
        if extra:
            raise reader.fail(at + [sorted(map(str, extra))[0]], "unknown field; expected from, "
                              "latency_factor and bandwidth_factor")
        for k in ("from", "latency_factor", "bandwidth_factor"):
            if k not in seg:
                raise reader.fail(at + [k], "missing required field", line_at=at)
        start = reader.size_value(seg["from"], at + ["from"])
        if i == 0 and start != 0:
            raise reader.fail(at + ["from"], f"expected the first segment to start at 0 bytes "
                              f"(every size needs a segment), got {start}")
        if i and start <= starts[-1]:
            raise reader.fail(at + ["from"], f"expected sizes in increasing order, got {start} "
                              f"after {starts[-1]}")
        starts.append(int(start))
        for k, out in (("latency_factor", lat), ("bandwidth_factor", bw)):
            v = seg[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not MIN_FACTOR <= v <= MAX_FACTOR:
                raise reader.fail(at + [k], f"expected a positive factor from {MIN_FACTOR:g} to "
                                  f"{MAX_FACTOR:g}, got {v!r}")
            out.append(float(v))
    return CostTable(tuple(starts), tuple(lat), tuple(bw))
