"""The compact description: what every rank needs to compute its own operation list.

Version 1 covers the regular allgather algorithms (no arrival pattern, no topology of
their own) on a homogeneous one-site cluster, the default one or a topology file whose
pairs all cost the same (cluster.py), in full or half duplex: the algorithm, the rank
count, the segments per block, the byte range, the duplex, and the one cost-model fact the
lists depend on, the FIFO threshold (`fifo_min_piece`). Its encoding is a fixed 56-byte
little-endian record (docs/compact.md says why binary): the runtime reads it without a
parser, and every rank can receive it in one small broadcast.

    offset  type      field
    0       char[8]   magic "CSCOMPCT"
    8       u16       version (1)
    10      u16       algorithm code (ALGORITHMS)
    12      u32       nranks
    16      u32       nseg
    20      u32       flags (bit 0: full duplex; clear: half duplex, regular algorithms only)
    24      u64       bytes_min
    32      u64       bytes_max
    40      u64       fifo_min_piece (2^64 - 1: no send waits)
    48      u32       desc_bytes (56)
    52      u32       reserved (0)

Version 2 (the algorithms whose lists need more than the head: `hier`, `bdr`, `bslb`) is
the same head with version 2 and desc_bytes the whole record's length, then the
algorithm's tail (its layout is the algorithm's module's: TAIL_FORMS), then a CRC-32
(zlib) of everything before it, u32.

runtime/src/compact_gen.c reads the same record (cs_compact_decode).
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import InputError
from ..ir import MAX_RANKS, MAX_SEGMENTS
from ..model.policy import fifo_link
from .cluster import Cluster, NotHomogeneous, default as default_cluster, homogeneous_defaults
from .cluster import read as read_cluster, resolve as resolve_cluster

VERSION = 1
VERSION_TAIL = 2
MAGIC = b"CSCOMPCT"
DESC_BYTES = 56
MAX_DESC_BYTES = 64 << 20  # compact_gen.h CS_COMPACT_MAX_DESC_BYTES
FLAG_FULL_DUPLEX = 1
NO_FIFO = (1 << 64) - 1
# Algorithm name -> code, as compact_gen.h numbers them.
ALGORITHMS = {"ring": 1, "bruck": 2, "rd": 3, "spreading": 4, "nex": 5, "lnbc": 6,
              "magpie": 7, "mpichg2": 8, "hier": 9, "bdr": 10, "bslb": 11}
# The algorithms whose description has a tail (version 2); the others are REGULAR (version 1).
TAILED = ("hier", "bdr", "bslb")
REGULAR = tuple(a for a in ALGORITHMS if a not in TAILED)


@dataclass(frozen=True)
class TailForm:
    """What a version-2 algorithm's module registers (register_tail):

    - check(desc): (field, expected) for a tail its generator does not serve, else None;
    - refusal(args): why `collsched compile` with these options (the argparse namespace:
      ranks, bytes, segments, topology, duplex, pap, ...) has no description, else None;
    - describe(args): the CompactDesc of what the explicit compile writes for them;
    - verify(desc): what `collsched verify` says of a record alone (no topology or pattern
      file): None when its lists are proven, else one line;
    - summary_lines(desc): what `collsched show` adds about the tail, one line each.
    """

    check: Callable[["CompactDesc"], "tuple[str, str] | None"]
    refusal: Callable[[object], "str | None"]
    describe: Callable[[object], "CompactDesc"]
    verify: Callable[["CompactDesc"], "str | None"]
    summary_lines: Callable[["CompactDesc"], "list[str]"] = lambda desc: []


TAIL_FORMS: dict[str, TailForm] = {}


def register_tail(algorithm: str, form: TailForm) -> None:
    TAIL_FORMS[algorithm] = form
_NAMES = {code: name for name, code in ALGORITHMS.items()}
_RECORD = struct.Struct("<8sHHIII QQQ II")
assert _RECORD.size == DESC_BYTES
SOURCE = "compact description"


@dataclass(frozen=True)
class CompactDesc:
    """One compact schedule: every rank's list follows from these fields."""

    algorithm: str
    nranks: int
    nseg: int = 1
    bytes_min: int = 0
    bytes_max: int = 0
    fifo_min_piece: int = NO_FIFO
    full_duplex: bool = True
    version: int | None = None  # None: the algorithm's (1, or 2 for the TAILED ones)
    tail: bytes = b""  # version 2: the algorithm's tail (TAIL_FORMS)

    def __post_init__(self):
        if self.version is None:
            object.__setattr__(self, "version", VERSION_TAIL if self.algorithm in TAILED else VERSION)
        why = self.refusal()
        if why is not None:
            raise InputError(SOURCE, *why)

    def refusal(self) -> tuple[str, str] | None:
        """(field, expected) for a description no generator serves, else None."""
        if self.algorithm not in ALGORITHMS:
            return "algorithm", f"expected one of {', '.join(ALGORITHMS)}, found {self.algorithm!r}"
        want = VERSION_TAIL if self.algorithm in TAILED else VERSION
        if self.version != want:
            return "version", f"expected {want} for algorithm code {ALGORITHMS[self.algorithm]}, found {self.version}"
        if self.algorithm not in TAILED and self.tail:
            return "tail", f"expected none for algorithm code {ALGORITHMS[self.algorithm]}, found {len(self.tail)} bytes"
        if not (isinstance(self.nranks, int) and 1 <= self.nranks <= MAX_RANKS):
            return "nranks", f"expected 1..{MAX_RANKS}, found {self.nranks}"
        if not (isinstance(self.nseg, int) and 1 <= self.nseg <= MAX_SEGMENTS):
            return "nseg", f"expected 1..{MAX_SEGMENTS}, found {self.nseg}"
        if not self.full_duplex and self.algorithm in TAILED:
            return "flags", f"expected full duplex (half duplex has no compact form for {self.algorithm} yet)"
        if not 0 <= self.bytes_min <= self.bytes_max < 1 << 64:
            return "bytes_min", f"expected 0 <= bytes_min <= bytes_max < 2^64, found {self.bytes_min}:{self.bytes_max}"
        if not 0 <= self.fifo_min_piece <= NO_FIFO:
            return "fifo_min_piece", f"expected 0..2^64-1, found {self.fifo_min_piece}"
        p = self.nranks
        if self.algorithm == "rd" and p & (p - 1):
            return "algorithm", f"recursive doubling needs a power-of-two rank count, got {p}"
        if self.algorithm == "nex" and p % 2:
            return "algorithm", f"neighbor exchange needs an even rank count, got {p} (use ring)"
        if self.algorithm in TAILED:
            if DESC_BYTES + len(self.tail) + 4 > MAX_DESC_BYTES:
                return "desc_bytes", f"expected at most {MAX_DESC_BYTES}, found {DESC_BYTES + len(self.tail) + 4}"
            form = TAIL_FORMS.get(self.algorithm)
            if form is None:
                return "algorithm", f"code {ALGORITHMS[self.algorithm]} has no generator in this build"
            return form.check(self)
        return None

    @property
    def size(self) -> int:
        """The record's length in bytes."""
        return DESC_BYTES + (len(self.tail) + 4 if self.version == VERSION_TAIL else 0)

    def encode(self) -> bytes:
        """The record (module docstring): the 56-byte head, and for version 2 the tail and
        its CRC-32."""
        head = _RECORD.pack(MAGIC, self.version, ALGORITHMS[self.algorithm], self.nranks,
                            self.nseg, FLAG_FULL_DUPLEX if self.full_duplex else 0,
                            self.bytes_min, self.bytes_max, self.fifo_min_piece, self.size, 0)
        if self.version != VERSION_TAIL:
            return head
        body = head + self.tail
        return body + struct.pack("<I", zlib.crc32(body))


def decode(data: bytes, source: str = SOURCE) -> CompactDesc:
    """The description a record holds; InputError (one line) for anything else."""
    if not DESC_BYTES <= len(data) <= MAX_DESC_BYTES:
        raise InputError(source, "size", f"expected {DESC_BYTES} bytes (version 1) or "
                         f"{DESC_BYTES + 4} .. {MAX_DESC_BYTES} (version 2), found {len(data)}")
    (magic, version, code, nranks, nseg, flags, bmin, bmax, fifo_min, size,
     reserved) = _RECORD.unpack(data[:DESC_BYTES])
    if magic != MAGIC:
        raise InputError(source, "magic", f"expected {MAGIC.decode()!r}: not a compact description")
    tail = b""
    tailed = _NAMES.get(code) in TAILED
    if version == VERSION_TAIL and tailed:
        if size != len(data) or len(data) < DESC_BYTES + 4 or reserved:
            raise InputError(source, "desc_bytes", f"expected the record's length {len(data)} and a "
                             f"zero reserved word, found {size}")
        (crc,) = struct.unpack("<I", data[-4:])
        if zlib.crc32(data[:-4]) != crc:
            raise InputError(source, "crc32", "the record is corrupt (its CRC-32 does not match)")
        tail = bytes(data[DESC_BYTES:-4])
    elif version == VERSION and not tailed and (len(data) != DESC_BYTES or size != DESC_BYTES or reserved):
        raise InputError(source, "desc_bytes", f"expected {DESC_BYTES} and a zero reserved word")
    if code not in _NAMES:
        raise InputError(source, "algorithm", f"expected a code 1..{len(_NAMES)}, found {code}")
    if flags & ~FLAG_FULL_DUPLEX:
        raise InputError(source, "flags", f"unknown flag bits in {flags:#x}")
    return CompactDesc(_NAMES[code], nranks, nseg, bmin, bmax, fifo_min,
                       full_duplex=bool(flags & FLAG_FULL_DUPLEX), version=version, tail=tail)


_homogeneous_defaults = homogeneous_defaults  # (the name the tests and tools use)


def fifo_min_piece(bytes_max: int, latency_s: float, bandwidth_Bps: float,
                   flow_Bps: float | None = None) -> int:
    """The smallest piece of at most bytes_max bytes that policy.fifo_link marks FIFO on a
    homogeneous link (latency_s, bandwidth_Bps, one flow's bandwidth flow_Bps: the TCP
    window's cap, None: uncapped; constant costs), or NO_FIFO. fifo_link is `latency < m /
    flow` on a path the window does not cap (never marked otherwise), and IEEE division is
    monotone in m, so the marked sizes are exactly those at or above this threshold; the
    search asks fifo_link itself, with the float64 operands mark_fifo_links gives it."""
    lat, bw = np.float64(latency_s) * np.float64(1.0), np.float64(bandwidth_Bps)
    flow = bw if flow_Bps is None else np.float64(flow_Bps)

    def marked(m: int) -> bool:
        return bool(fifo_link(lat, np.float64(m), flow, bw))

    if not marked(bytes_max):
        return NO_FIFO
    lo, hi = 0, bytes_max  # marked(hi); find the smallest
    while lo < hi:
        mid = (lo + hi) // 2
        if marked(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def refusal(algorithm: str, *, topology: str | None = None, duplex: str | None = None,
            args=None, nranks: int | None = None) -> str | None:
    """Why version 1 cannot describe what compile_schedule writes for these options, or None
    (for_topology describes it). An arrival pattern (--pap) and the engine (--engine) do
    not matter: a regular algorithm ignores the pattern, and all its operations are
    foreground, which every engine leaves as they are. The topology does (the FIFO marks,
    magpie's and mpichg2's sites): a file is served where its pairs all cost the same on
    one site (cluster.read; nranks, or args.ranks, places the ranks). Half duplex is served
    (the generators' sub-step order, compact_gen.c). A topology file the reader refuses is
    a reason too (--form auto then compiles explicitly, which reports it)."""
    if algorithm in TAILED:
        form = TAIL_FORMS.get(algorithm)
        if form is None:
            return f"{algorithm} has no compact generator in this build"
        return form.refusal(args)
    if algorithm not in ALGORITHMS:
        return f"{algorithm} has no compact form (the compact form has {', '.join(ALGORITHMS)})"
    if duplex not in (None, "half", "full"):
        return f"duplex {duplex!r} (expected half or full)"
    if topology is not None:
        p = nranks if nranks is not None else getattr(args, "ranks", None)
        try:
            read_cluster(topology, p, duplex)
        except NotHomogeneous as e:
            return f"the topology {topology}: {e}"
        except (InputError, OSError) as e:  # (beyond 8192 ranks: the reader's placement limit)
            return f"the topology file cannot be used: {e.line() if isinstance(e, InputError) else e}"
    return None


def for_cluster(algorithm: str, nranks: int, nbytes: int | tuple[int, int], nseg: int,
                cluster: Cluster) -> CompactDesc:
    """The description of a regular algorithm compiled on `cluster` (cluster.py)."""
    lo, hi = (nbytes, nbytes) if isinstance(nbytes, int) else nbytes
    if not 0 <= lo <= hi:
        raise InputError(SOURCE, "bytes", f"expected 0 <= MIN <= MAX, found {lo}:{hi}")
    fifo = (NO_FIFO if cluster.latency is None
            else fifo_min_piece(hi, cluster.latency, cluster.bandwidth, cluster.flow))
    return CompactDesc(algorithm, nranks, nseg, lo, hi, fifo, full_duplex=cluster.full_duplex)


def for_default(algorithm: str, nranks: int, nbytes: int | tuple[int, int], nseg: int = 1, *,
                duplex: str | None = None) -> CompactDesc:
    """The description of what `compile_schedule(algorithm, nranks, nbytes, segments=nseg,
    duplex=duplex)` writes with no topology (the default cluster)."""
    return for_cluster(algorithm, nranks, nbytes, nseg, default_cluster(duplex))


def for_topology(algorithm: str, nranks: int, nbytes: int | tuple[int, int], nseg: int = 1, *,
                 topology: str | None = None, duplex: str | None = None) -> CompactDesc:
    """The description of what `compile_schedule(algorithm, nranks, nbytes, segments=nseg,
    topology=topology, duplex=duplex)` writes for a regular algorithm; InputError (one
    line) where the topology is not a homogeneous one-site cluster (refusal's reason)."""
    try:
        cluster = resolve_cluster(topology, nranks, duplex)
    except NotHomogeneous as e:
        raise InputError(str(topology), "", f"a homogeneous one-site cluster for the compact form, found {e}") from None
    return for_cluster(algorithm, nranks, nbytes, nseg, cluster)
