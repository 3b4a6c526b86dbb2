"""The arrival trace file (docs/trace-format.md, version 1): reading, writing, grouping.

`read_trace` refuses every file that is not exactly the documented format (one
InputError line: file, field, what was expected); `write_trace` writes the same format
(the tests and the lab write synthetic traces with it) and checks what it wrote with the
reader's own checks. Calls are kept per communicator as arrays (`Block`): a long trace
has many calls and few communicators.
"""
from __future__ import annotations

import os
import stat
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..files import read_input, write_atomic

MAGIC = b"CSATRACE"
VERSION = 1
COLLECTIVES = {1: "allgather", 2: "allgatherv"}
# Largest trace read: a long job's trace is larger than any topology or PAP file
# (P = 1024 is 8 KiB per call); this bounds memory, not realistic traces.
MAX_TRACE_BYTES = 1 << 30
MAX_SITE_BYTES = 255

_HEAD = struct.Struct("<8sIIIIIIQd")   # magic .. t0
_CALL = [("site", "<u4"), ("comm", "<u4"), ("collective", "u1"), ("flags", "u1"),
         ("reserved", "<u2"), ("seq", "<u4"), ("bytes", "<u8"), ("base", "<f8")]
_CALL_HEAD = 32


@dataclass(frozen=True)
class Comm:
    """A communicator: its stable id and the world rank of each of its ranks."""
    id: int
    ranks: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.ranks)


@dataclass(frozen=True)
class Call:
    """One call: arrivals and exits (P,) in seconds relative to base (base: seconds
    relative to the trace's t0)."""
    site: int
    comm: int
    collective: int
    flags: int
    seq: int
    bytes: int
    base: float
    arrivals: np.ndarray
    exits: np.ndarray


@dataclass(frozen=True)
class Block:
    """The calls of one communicator, in call order, as arrays over calls (n,) and
    ranks (n, P)."""
    comm: int
    site: np.ndarray
    collective: np.ndarray
    flags: np.ndarray
    seq: np.ndarray
    bytes: np.ndarray
    base: np.ndarray
    arrivals: np.ndarray
    exits: np.ndarray

    def __len__(self) -> int:
        return int(self.site.shape[0])


@dataclass(frozen=True)
class Trace:
    source: str
    flags: int
    world_size: int
    t0: float
    sites: tuple[str, ...]
    comms: tuple[Comm, ...]
    offsets: np.ndarray          # (world_size, 2): clock offset at start and at finalize
    blocks: tuple[Block, ...]    # one per communicator with calls, in comm order

    @property
    def ncalls(self) -> int:
        return sum(len(b) for b in self.blocks)

    @property
    def calls(self) -> list[Call]:
        """Every call, in file order."""
        out = []
        for b in self.blocks:
            for i in range(len(b)):
                out.append(Call(int(b.site[i]), b.comm, int(b.collective[i]), int(b.flags[i]),
                                int(b.seq[i]), int(b.bytes[i]), float(b.base[i]),
                                b.arrivals[i], b.exits[i]))
        return out


@dataclass(frozen=True)
class Group:
    """The calls of one call site on one communicator (what one arrival-pattern
    sequence is made of)."""
    site: int
    site_name: str
    comm: int
    comm_id: int
    size: int
    collective: str          # 'allgather', 'allgatherv', or both joined by '+'
    bytes_min: int
    bytes_max: int
    ncalls: int

    def label(self) -> str:
        return f"{self.site_name} (comm {self.comm}, {self.size} ranks)"


# --- reading -------------------------------------------------------------------------------

class _Reader:
    def __init__(self, source: str, data):
        self.source, self.data, self.pos = source, memoryview(data), 0

    def fail(self, field: str, expected: str) -> InputError:
        return InputError(self.source, field, expected)

    def take(self, n: int, field: str) -> memoryview:
        if n > len(self.data) - self.pos:
            raise self.fail(field, f"file truncated: {n} bytes needed at offset {self.pos}, "
                                   f"{len(self.data) - self.pos} left")
        view = self.data[self.pos:self.pos + n]
        self.pos += n
        return view

    def unpack(self, fmt: str, field: str):
        s = struct.Struct(fmt)
        return s.unpack(self.take(s.size, field))


def _header(r: _Reader) -> tuple:
    if len(r.data) < len(MAGIC) or bytes(r.data[:len(MAGIC)]) != MAGIC:
        raise r.fail("magic", f"expected an arrival trace (magic {MAGIC.decode()}, "
                              f"docs/trace-format.md)")
    if len(r.data) < _HEAD.size + 4:
        raise r.fail("header", f"file truncated: {len(r.data)} bytes, a trace has at least "
                               f"{_HEAD.size + 4}")
    crc = struct.unpack_from("<I", r.data, len(r.data) - 4)[0]
    magic, version, flags, world, nsites, ncomms, reserved, ncalls, t0 = r.unpack(
        _HEAD.format, "header")
    if version != VERSION:
        raise r.fail("version", f"expected version {VERSION}, got {version}")
    if zlib.crc32(r.data[:len(r.data) - 4]) != crc:
        raise r.fail("crc32", "checksum mismatch: the file is corrupt or truncated")
    r.data = r.data[:len(r.data) - 4]
    if flags & ~1:
        raise r.fail("flags", f"expected only bit 0, got {flags:#x}")
    if world < 1:
        raise r.fail("world_size", "expected at least 1 rank")
    if reserved != 0:
        raise r.fail("reserved", f"expected 0, got {reserved}")
    if not np.isfinite(t0):
        raise r.fail("t0", f"expected a finite time, got {t0}")
    # Every site is at least 3 bytes, every comm 16, every call 40: counts the file cannot
    # hold are refused before anything is allocated for them.
    room = len(r.data) - r.pos
    for name, count, least in (("nsites", nsites, 3), ("ncomms", ncomms, 16),
                               ("ncalls", ncalls, _CALL_HEAD + 8)):
        if count * least > room:
            raise r.fail(name, f"{count} do not fit in the file's {room} remaining bytes")
    return flags, world, nsites, ncomms, ncalls, t0


def _site_name(r: _Reader, i: int) -> str:
    field = f"sites[{i}]"
    (n,) = r.unpack("<H", field)
    if not 1 <= n <= MAX_SITE_BYTES:
        raise r.fail(field, f"expected a name of 1 to {MAX_SITE_BYTES} bytes, got {n}")
    raw = bytes(r.take(n, field))
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise r.fail(field, "expected UTF-8") from None
    if not name.isprintable() or any(ch.isspace() for ch in name):
        raise r.fail(field, f"expected printable characters and no spaces, got {name!r}")
    return name


def _comm(r: _Reader, i: int, world: int) -> Comm:
    field = f"comms[{i}]"
    cid, size = r.unpack("<QI", field)
    if not 1 <= size <= world:
        raise r.fail(f"{field}.size", f"expected 1 to world_size = {world} ranks, got {size}")
    ranks = np.frombuffer(r.take(4 * size, f"{field}.ranks"), dtype="<u4")
    if ranks.max() >= world:
        raise r.fail(f"{field}.ranks", f"expected world ranks below {world}, got {int(ranks.max())}")
    if len(np.unique(ranks)) != size:
        raise r.fail(f"{field}.ranks", "expected distinct world ranks")
    return Comm(int(cid), tuple(int(v) for v in ranks))


def _call_dtype(size: int) -> np.dtype:
    return np.dtype(_CALL + [("arrivals", "<f4", (size,)), ("exits", "<f4", (size,))])


def _block(r: _Reader, first: int, comm_index: int, comms, nsites: int, left: int) -> Block:
    """The run of calls of communicator comm_index starting at record `first`."""
    size = comms[comm_index].size
    dt = _call_dtype(size)
    count = min(left, (len(r.data) - r.pos) // dt.itemsize)
    if count < 1:
        raise r.fail(f"calls[{first}]", "file truncated: a call record is missing")
    recs = np.frombuffer(r.data, dtype=dt, count=count, offset=r.pos)
    other = np.nonzero(recs["comm"] != comm_index)[0]
    n = int(other[0]) if other.size else count
    recs = recs[:n]
    r.pos += n * dt.itemsize

    def bad(mask, field: str, expected: str):
        j = int(np.nonzero(mask)[0][0]) if np.ndim(mask) == 1 else int(np.nonzero(mask.any(axis=1))[0][0])
        return r.fail(f"calls[{first + j}].{field}", expected)

    if (recs["site"] >= nsites).any():
        raise bad(recs["site"] >= nsites, "site", f"expected a site index below {nsites}")
    if (~np.isin(recs["collective"], list(COLLECTIVES))).any():
        raise bad(~np.isin(recs["collective"], list(COLLECTIVES)), "collective",
                  "expected 1 (allgather) or 2 (allgatherv)")
    if (recs["flags"] & 0xFC).any():
        raise bad((recs["flags"] & 0xFC) != 0, "flags", "expected only bits 0 and 1")
    if (recs["reserved"] != 0).any():
        raise bad(recs["reserved"] != 0, "reserved", "expected 0")
    seq = recs["seq"].astype(np.int64)
    if n > 1 and (np.diff(seq) <= 0).any():
        raise bad(np.r_[False, np.diff(seq) <= 0], "seq",
                  "expected increasing call numbers on a communicator (calls in order of "
                  "communicator, call number)")
    if (recs["bytes"] >= 1 << 62).any():
        raise bad(recs["bytes"] >= 1 << 62, "bytes", "expected bytes per rank below 2^62")
    base = recs["base"].astype(np.float64)
    if not np.isfinite(base).all():
        raise bad(~np.isfinite(base), "base", "expected a finite time")
    arr = recs["arrivals"].astype(np.float64).reshape(n, size)
    ext = recs["exits"].astype(np.float64).reshape(n, size)
    if not np.isfinite(arr).all():
        raise bad(~np.isfinite(arr), "arrivals", "expected finite times")
    if not np.isfinite(ext).all():
        raise bad(~np.isfinite(ext), "exits", "expected finite times")
    if (arr < 0).any():
        raise bad(arr < 0, "arrivals", "expected offsets >= 0 (base is the earliest arrival)")
    if (ext < arr).any():
        raise bad(ext < arr, "exits", "expected every rank's exit at or after its arrival")
    return Block(comm_index, recs["site"].astype(np.int64), recs["collective"].astype(np.int64),
                 recs["flags"].astype(np.int64), seq, recs["bytes"].astype(np.int64), base,
                 arr, ext)


def parse_trace(data, source: str = "<trace>") -> Trace:
    """A Trace from the bytes of a trace file; InputError naming `source` and the field."""
    r = _Reader(source, data)
    flags, world, nsites, ncomms, ncalls, t0 = _header(r)
    sites = tuple(_site_name(r, i) for i in range(nsites))
    comms = tuple(_comm(r, i, world) for i in range(ncomms))
    ids = [c.id for c in comms]
    if len(set(ids)) != len(ids):
        raise r.fail("comms", "expected distinct communicator ids")
    offsets = np.frombuffer(r.take(16 * world, "offsets"), dtype="<f8").astype(np.float64)
    offsets = offsets.reshape(world, 2)
    if not np.isfinite(offsets).all():
        raise r.fail("offsets", "expected finite clock offsets")
    blocks, done, last_comm = [], 0, -1
    while done < ncalls:
        if len(r.data) - r.pos < _CALL_HEAD:
            raise r.fail(f"calls[{done}]", "file truncated: a call record is missing")
        comm = struct.unpack_from("<I", r.data, r.pos + 4)[0]
        if comm >= ncomms:
            raise r.fail(f"calls[{done}].comm", f"expected a communicator index below {ncomms}")
        if comm <= last_comm:
            raise r.fail(f"calls[{done}].comm", "expected calls in order of (communicator, "
                                                "call number): a communicator's calls together")
        b = _block(r, done, comm, comms, nsites, ncalls - done)
        blocks.append(b)
        done += len(b)
        last_comm = comm
    if r.pos != len(r.data):
        raise r.fail("calls", f"{len(r.data) - r.pos} trailing bytes after {ncalls} calls")
    return Trace(source, flags, world, float(t0), sites, comms, offsets, tuple(blocks))


def is_trace(path) -> bool:
    """Whether `path` is a regular file starting with the trace magic (reads 8 bytes;
    never blocks on a FIFO: False for anything but a readable regular file, which the
    caller's reader then refuses with its own message)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError, TypeError):
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return os.read(fd, len(MAGIC)) == MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)


def read_trace(path) -> Trace:
    """The trace file at `path`; InputError (file, field, expected) for any bad file."""
    return parse_trace(read_input(path, "arrival trace", MAX_TRACE_BYTES), str(path))


# --- writing -------------------------------------------------------------------------------

def call_from_times(site: int, comm: int, seq: int, nbytes: int, arrivals, exits=None,
                    collective: int = 1, flags: int = 0) -> Call:
    """A Call from absolute arrival (and exit) times relative to t0: base = the earliest
    arrival. Exits default to the arrivals' maximum (every rank leaves when the last
    arrives)."""
    a = np.asarray(arrivals, dtype=np.float64)
    base = float(a.min())
    e = np.full_like(a, a.max()) if exits is None else np.asarray(exits, dtype=np.float64)
    return Call(site, comm, collective, flags, seq, nbytes, base, a - base, e - base)


def encode_trace(world_size: int, sites, comms, calls, t0: float = 0.0, offsets=None,
                 flags: int = 0) -> bytes:
    """The bytes of a trace file. comms: Comm objects (or (id, ranks) pairs); calls: Call
    objects, written in order of (communicator, seq) (sorted here)."""
    comms = [c if isinstance(c, Comm) else Comm(int(c[0]), tuple(int(v) for v in c[1]))
             for c in comms]
    calls = sorted(calls, key=lambda c: (c.comm, c.seq))
    offsets = np.zeros((world_size, 2)) if offsets is None else np.asarray(offsets, np.float64)
    out = [_HEAD.pack(MAGIC, VERSION, flags, world_size, len(sites), len(comms), 0,
                      len(calls), float(t0))]
    for s in sites:
        raw = s.encode("utf-8")
        out.append(struct.pack("<H", len(raw)) + raw)
    for c in comms:
        out.append(struct.pack("<QI", c.id, len(c.ranks)) + np.asarray(c.ranks, "<u4").tobytes())
    out.append(np.ascontiguousarray(offsets.reshape(world_size, 2), "<f8").tobytes())
    for c in calls:
        out.append(struct.pack("<IIBBHIQd", c.site, c.comm, c.collective, c.flags, 0, c.seq,
                               c.bytes, c.base))
        out.append(np.asarray(c.arrivals, "<f4").tobytes() + np.asarray(c.exits, "<f4").tobytes())
    body = b"".join(out)
    return body + struct.pack("<I", zlib.crc32(body))


def write_trace(path, world_size: int, sites, comms, calls, t0: float = 0.0, offsets=None,
                flags: int = 0) -> Trace:
    """Write a trace file atomically (encode_trace's arguments); returns it as read back.
    ValueError, and nothing written, when the content breaks the format's rules."""
    try:
        data = encode_trace(world_size, sites, comms, calls, t0, offsets, flags)
        trace = parse_trace(data, str(path))
    except (struct.error, OverflowError, InputError) as e:
        raise ValueError(f"write_trace: {e}") from None
    write_atomic(path, data)
    return trace


# --- grouping ------------------------------------------------------------------------------

def groups(trace: Trace) -> list[Group]:
    """The (call site, communicator) groups of a trace, in order of communicator, then
    of each site's first call."""
    out = []
    for b in trace.blocks:
        order = list(dict.fromkeys(b.site.tolist()))
        for s in order:
            m = b.site == s
            colls = sorted(set(b.collective[m].tolist()))
            comm = trace.comms[b.comm]
            out.append(Group(s, trace.sites[s], b.comm, comm.id, comm.size,
                             "+".join(COLLECTIVES[c] for c in colls),
                             int(b.bytes[m].min()), int(b.bytes[m].max()), int(m.sum())))
    return out


def groups_text(trace: Trace) -> str:
    return "; ".join(f"{g.site_name} (comm {g.comm}, {g.size} ranks, {g.ncalls} calls)"
                     for g in groups(trace))


def find_group(trace: Trace, site=None, comm: int | None = None) -> Group:
    """The one group matching `site` (a name or an index; None: any) and `comm` (an index;
    None: any). InputError listing the groups when none or several match."""
    found = [g for g in groups(trace)
             if (site is None or site == g.site_name or (isinstance(site, int) and site == g.site))
             and (comm is None or comm == g.comm)]
    if len(found) == 1:
        return found[0]
    what = "no call site matches" if not found else "several call sites match"
    want = f" {site!r}" if site is not None else ""
    raise InputError(trace.source, "site", f"{what}{want}; name one of: {groups_text(trace) or 'none'}")


def group_mask(trace: Trace, g: Group) -> tuple[Block, np.ndarray]:
    block = next(b for b in trace.blocks if b.comm == g.comm)
    return block, block.site == g.site


def calls_of(trace: Trace, site=None, comm: int | None = None) -> np.ndarray:
    """Arrival offsets (iterations, P) in seconds of one (site, communicator) group's
    calls, in call order (find_group picks the group)."""
    block, m = group_mask(trace, find_group(trace, site, comm))
    return block.arrivals[m]
