"""Reading and writing `.sched` files (format: docs/schedule-format.md).

The writer goes through a temporary file and an atomic rename, so an interrupted or failed
write never leaves a half-written schedule behind. The reader checks everything the C
runtime checks, and every section (the runtime reads only its own).
"""
from __future__ import annotations

import io
import os
import struct
import zlib

import numpy as np

from . import __version__
from .errors import InputError, ScheduleFileError
from .files import read_input, replacing, write_atomic
from .collectives import schedfile as coll_file
from .collectives.program import COLLECTIVES as COLL_COLLECTIVES, Program
from .intergroup import schedfile as inter_file
from .intergroup.schedule import COLLECTIVES as INTER_COLLECTIVES, InterSchedule
from .ir import COLLECTIVES, MAX_RANKS, MAX_SEGMENTS, Schedule

MAGIC = b"COLLSCHD"
VERSION_MAJOR, VERSION_MINOR = 1, 0
HEADER_BYTES = 128
INDEX_ENTRY = 16
OP_BYTES = 12
FLAG_FULL_DUPLEX, FLAG_BACKGROUND, FLAG_SERIAL = 1, 2, 4

# magic, major, minor, header_bytes, collective, nranks, nseg, flags, bytes_min, bytes_max,
# algorithm, compiler_version, input_hash, total_ops, index_crc
_HEADER = struct.Struct("<8sHHIIIII QQ 16s16s32s Q I")
_INDEX = np.dtype([("offset", "<u8"), ("nops", "<u4"), ("crc", "<u4")])
_OP = np.dtype([("peer", "<u4"), ("origin", "<u4"), ("segment", "<u2"), ("kind", "u1"),
                ("phase", "u1")])  # "phase" is the flags byte: bit 0 phase, bit 1 FIFO wait, bit 2 join
# A file whose schedule has multi-piece messages (a joined op) says minor version 3, so that
# a reader from before it fails at the flag, not later (docs/schedule-format.md).
MINOR_MESSAGES = 3
assert _HEADER.size == HEADER_BYTES - 4 and _INDEX.itemsize == INDEX_ENTRY
assert _OP.itemsize == OP_BYTES
_COLLECTIVE_NAMES = {v: k for k, v in COLLECTIVES.items()}
_INTER_NAMES = {v: k for k, v in INTER_COLLECTIVES.items()}
_COLL_IDS = set(COLL_COLLECTIVES.values())  # version 1.2: collectives/schedfile.py


def encode(sched) -> bytes:
    """The whole file as bytes (a Schedule; an intergroup InterSchedule: version 1.1; a
    collectives Program: version 1.2)."""
    if isinstance(sched, Program):
        return coll_file.encode(sched)
    if isinstance(sched, InterSchedule):
        return inter_file.encode(sched, header=_HEADER, index=_index, magic=MAGIC,
                                 major=VERSION_MAJOR, flag_full_duplex=FLAG_FULL_DUPLEX,
                                 ascii16=_ascii16)
    out = io.BytesIO()
    _stream(sched, out)
    return out.getvalue()


# Sections are encoded and written a group of ranks at a time, of at most this many ops
# (48 MiB of records): a P = 4096 ring (33.5 million ops, 403 MB) never holds its whole
# file, nor a P^2 record array, in memory.
STREAM_OPS = 1 << 22


def _stream(sched: Schedule, out) -> int:
    """Write the file to the seekable binary `out`: the sections first, rank by rank, past
    room left for the header and index, then those two (the index holds each section's
    CRC, the header the index's). Returns the file's size."""
    if sched.collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {sched.collective!r}")
    offsets, nranks = sched.offsets, sched.nranks
    start = HEADER_BYTES + INDEX_ENTRY * nranks
    index = np.empty(nranks, _INDEX)
    index["offset"] = start + OP_BYTES * offsets[:-1]
    index["nops"] = np.diff(offsets)
    crcs = index["crc"]
    out.seek(start)
    r = 0
    while r < nranks:
        lo = int(offsets[r])
        # ranks r..end-1: at least one, as many more as fit in STREAM_OPS ops
        end = max(r + 1, int(np.searchsorted(offsets, lo + STREAM_OPS, side="right")) - 1)
        end = min(end, nranks)
        hi = int(offsets[end])
        ops = np.empty(hi - lo, _OP)
        ops["peer"], ops["origin"] = sched.peer[lo:hi], sched.origin[lo:hi]
        ops["segment"], ops["kind"] = sched.segment[lo:hi], sched.kind[lo:hi]
        # byte 11: bit 0 phase, bit 1 FIFO wait, bit 2 join (multi-piece messages)
        ops["phase"] = sched.phase[lo:hi] | (sched.fifo[lo:hi] << 1) | (sched.join[lo:hi] << 2)
        mv = memoryview(ops).cast("B")
        for q in range(r, end):
            crcs[q] = zlib.crc32(mv[OP_BYTES * (int(offsets[q]) - lo):OP_BYTES * (int(offsets[q + 1]) - lo)])
        out.write(mv)
        r = end
    index_bytes = index.tobytes()
    flags = (FLAG_FULL_DUPLEX if sched.full_duplex else 0) | (
        FLAG_BACKGROUND if sched.has_background else 0) | (FLAG_SERIAL if sched.serial else 0)
    head = _HEADER.pack(
        MAGIC, VERSION_MAJOR, MINOR_MESSAGES if sched.has_messages else VERSION_MINOR,
        HEADER_BYTES, COLLECTIVES[sched.collective],
        sched.nranks, sched.nseg, flags, sched.bytes_min, sched.bytes_max,
        _ascii16(sched.algorithm), _ascii16(sched.compiler_version or __version__),
        sched.input_hash, sched.total_ops, zlib.crc32(index_bytes))
    out.seek(0)
    out.write(head + struct.pack("<I", zlib.crc32(head)) + index_bytes)
    return start + OP_BYTES * sched.total_ops


def _index(offsets: np.ndarray, body: bytes, start: int, op_bytes: int) -> bytes:
    """The index of sections laid out after it from `start` (one entry per rank: offset,
    nops, CRC of its section); the intergroup form uses it (its whole body in memory)."""
    index = np.empty(len(offsets) - 1, _INDEX)
    index["offset"] = start + INDEX_ENTRY * len(index) + op_bytes * offsets[:-1]
    index["nops"] = np.diff(offsets)
    mv = memoryview(body)
    index["crc"] = [zlib.crc32(mv[op_bytes * int(lo):op_bytes * int(hi)])
                    for lo, hi in zip(offsets[:-1], offsets[1:])]
    return index.tobytes()


def write(sched, path: str | os.PathLike) -> int:
    """Write atomically (files.py: whole or not at all, mode 0666 & ~umask); returns the
    number of bytes written. A Schedule is streamed (_stream), never encoded whole."""
    if isinstance(sched, (InterSchedule, Program)):
        return write_atomic(path, encode(sched))
    if sched.collective not in COLLECTIVES:  # before a temporary file is made
        raise ValueError(f"unknown collective {sched.collective!r}")
    with replacing(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY)
        try:
            return _stream(sched, _FdOut(fd))
        finally:
            os.close(fd)


class _FdOut:
    """The seekable output _stream needs, written with os.write as files.write_atomic
    writes (no buffer whose flush could fail after the fact; a full disk raises at the
    write that hit it, and `replacing` turns it into one OutputError line)."""

    def __init__(self, fd: int):
        self.fd = fd

    def write(self, data) -> None:
        view, done = memoryview(data).cast("B"), 0
        while done < len(view):
            done += os.write(self.fd, view[done:done + (1 << 24)])

    def seek(self, pos: int) -> None:
        os.lseek(self.fd, pos, os.SEEK_SET)


# Largest schedule file read whole (about 89 million operations; decoding takes about
# three times as much memory). The runtime reads only its own rank's section.
MAX_FILE_BYTES = 1 << 30


def read(path: str | os.PathLike):
    """Read and check a whole schedule file; ScheduleFileError names what is wrong.

    Only a regular file of at most MAX_FILE_BYTES is read (files.read_input: a FIFO or a
    device is refused before a byte is read)."""
    try:
        data = read_input(path, "schedule", MAX_FILE_BYTES)
    except InputError as e:
        raise ScheduleFileError(e.source, e.field, e.expected) from None
    return decode(data, str(path))


def decode(data: bytes, source: str = "<bytes>"):
    """The schedule a file holds: a Schedule, an InterSchedule for collectives 3 and 4, a
    collectives Program for 5..8 (version 1.2)."""
    def bad(field: str, expected: str) -> ScheduleFileError:
        return ScheduleFileError(source, field, expected)

    if len(data) < HEADER_BYTES:
        raise bad("header", f"expected at least {HEADER_BYTES} bytes, file has {len(data)}")
    (magic, major, minor, header_bytes, coll, nranks, nseg, flags, bmin, bmax, alg, ver,
     ihash, total_ops, index_crc) = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise bad("magic", f"expected {MAGIC.decode()!r}, found {magic!r}: not a collsched schedule")
    if major != VERSION_MAJOR:
        raise bad("version_major", f"expected {VERSION_MAJOR}, found {major}")
    if coll in _COLL_IDS:  # alltoall, bcast, reduce, allreduce: version 1.2
        return coll_file.decode(data, source)
    inter = coll in _INTER_NAMES
    if header_bytes != HEADER_BYTES and not inter:
        raise bad("header_bytes", f"expected {HEADER_BYTES}, found {header_bytes}")
    (header_crc,) = struct.unpack_from("<I", data, HEADER_BYTES - 4)
    if zlib.crc32(data[:HEADER_BYTES - 4]) != header_crc:
        raise bad("header_crc32", "header checksum mismatch (corrupt file)")
    if coll not in _COLLECTIVE_NAMES and not inter:
        raise bad("collective", f"expected one of {sorted(_COLLECTIVE_NAMES) + sorted(_INTER_NAMES) + sorted(_COLL_IDS)}, "
                  f"found {coll}")
    if inter:
        fields = dict(major=major, minor=minor, header_bytes=header_bytes, collective=coll,
                      nranks=nranks, nseg=nseg, flags=flags, bytes_min=bmin, bytes_max=bmax,
                      algorithm=alg, compiler_version=ver, input_hash=ihash,
                      total_ops=total_ops, index_crc=index_crc)
        return inter_file.decode(data, source, fields, _sections, _text)
    if not 1 <= nranks <= MAX_RANKS:
        raise bad("nranks", f"expected 1..{MAX_RANKS}, found {nranks}")
    if not 1 <= nseg <= MAX_SEGMENTS:
        raise bad("nseg", f"expected 1..{MAX_SEGMENTS}, found {nseg}")
    if flags & ~(FLAG_FULL_DUPLEX | FLAG_BACKGROUND | FLAG_SERIAL):
        raise bad("flags", f"unknown flag bits in {flags:#x}")
    if bmin > bmax:
        raise bad("bytes_min", f"expected bytes_min <= bytes_max, found {bmin} > {bmax}")
    offsets, index_end = _sections(data, HEADER_BYTES, nranks, OP_BYTES, index_crc, total_ops, bad)
    ops = np.frombuffer(data, _OP, count=total_ops, offset=index_end)
    sched = Schedule(
        nranks=nranks, nseg=nseg, offsets=offsets,
        kind=ops["kind"].copy(), peer=ops["peer"].astype(np.int32),
        origin=ops["origin"].astype(np.int32), segment=ops["segment"].astype(np.int32),
        phase=ops["phase"] & 1, fifo=(ops["phase"] >> 1) & 1, join=ops["phase"] >> 2,
        algorithm=_text(alg),
        collective=_COLLECTIVE_NAMES[coll],
        bytes_min=bmin, bytes_max=bmax, full_duplex=bool(flags & FLAG_FULL_DUPLEX),
        serial=bool(flags & FLAG_SERIAL),
        input_hash=ihash, compiler_version=_text(ver),
        format_version=f"{major}.{minor}", file_bytes=len(data))
    _check_op_fields(sched, source)
    if sched.has_messages and minor < MINOR_MESSAGES:
        raise bad("version_minor", f"expected at least {MINOR_MESSAGES} for a schedule with joined "
                  f"ops (flags bit 2), found {minor}")
    return sched


def _sections(data: bytes, start: int, nranks: int, op_bytes: int, index_crc: int, total_ops: int, bad):
    """The index at `start` and the sections after it, checked as the runtime checks them
    (index CRC, sections contiguous, total_ops, file size, every section's CRC); returns
    the ops' CSR offsets and where the sections begin. Both file forms share it."""
    index_end = start + INDEX_ENTRY * nranks
    if len(data) < index_end:
        raise bad("index", f"truncated: expected {index_end} bytes for {nranks} ranks, file has {len(data)}")
    index_bytes = data[start:index_end]
    if zlib.crc32(index_bytes) != index_crc:
        raise bad("index_crc32", "index checksum mismatch (corrupt file)")
    index = np.frombuffer(index_bytes, _INDEX)
    offsets = np.zeros(nranks + 1, np.int64)
    np.cumsum(index["nops"].astype(np.int64), out=offsets[1:])
    expected_off = index_end + op_bytes * offsets[:-1]
    wrong = np.nonzero(index["offset"].astype(np.int64) != expected_off)[0]
    if len(wrong):
        r = int(wrong[0])
        raise bad(f"index[{r}].section_offset",
                  f"expected {int(expected_off[r])} (sections contiguous), found {int(index['offset'][r])}")
    if int(offsets[-1]) != total_ops:
        raise bad("total_ops", f"header says {total_ops}, index sums to {int(offsets[-1])}")
    end = index_end + op_bytes * total_ops
    if len(data) != end:
        raise bad("sections", f"expected file size {end} bytes, found {len(data)}"
                  + (" (truncated)" if len(data) < end else " (trailing bytes)"))
    mv = memoryview(data)
    for r in range(nranks):
        lo, hi = index_end + op_bytes * int(offsets[r]), index_end + op_bytes * int(offsets[r + 1])
        if zlib.crc32(mv[lo:hi]) != int(index["crc"][r]):
            raise bad(f"section[{r}]", "section checksum mismatch (corrupt file)")
    return offsets, index_end


def _check_op_fields(s: Schedule, source: str) -> None:
    """Field ranges of every operation (the runtime checks the same for its own rank)."""
    rank = s.rank_of_op
    # A joined op continues the message of the op before it: same rank, kind, peer, phase.
    prev = np.arange(s.total_ops) - 1
    first = np.zeros(s.total_ops, bool)
    first[s.offsets[:-1][np.diff(s.offsets) > 0]] = True
    prev[first] = np.maximum(prev[first], 0)  # compared below only where not first
    joined = s.join == 1
    checks = (
        (s.kind > 1, "kind", "0 (send) or 1 (recv)"),
        (s.join > 1, "flags", "bits 0 (background), 1 (FIFO wait) and 2 (join) only"),
        (joined & first, "flags", "no join bit on a rank's first op (it has no message to join)"),
        (joined & ~first & ((s.kind != s.kind[prev]) | (s.peer != s.peer[prev])
                            | (s.phase != s.phase[prev])),
         "flags", "the join bit only on an op with the kind, peer and phase of the op before it"),
        ((s.fifo == 1) & joined, "flags", "the FIFO bit on a message's first op only"),
        ((s.fifo == 1) & (s.kind == 1), "flags", "the FIFO bit on sends only"),
        ((s.peer < 0) | (s.peer >= s.nranks), "peer", f"a rank below {s.nranks}"),
        (s.peer == rank, "peer", "a rank other than the op's own"),
        ((s.origin < 0) | (s.origin >= s.nranks), "origin", f"a rank below {s.nranks}"),
        (s.segment >= s.nseg, "segment", f"a segment below nseg={s.nseg}"),
    )
    for mask, fld, expected in checks:
        bad_ops = np.nonzero(mask)[0]
        if len(bad_ops):
            i = int(bad_ops[0])
            r = int(rank[i])
            raise ScheduleFileError(source, f"rank {r} op {i - int(s.offsets[r])} {fld}",
                                    f"expected {expected}")
    # No piece twice in one message (docs/semantics.md, "Multi-piece messages", rule 1);
    # message_head is valid here: the join rules above passed.
    if s.has_messages:
        head = s.message_head()
        multi = np.nonzero(head != np.arange(s.total_ops))[0]  # joined ops
        multi = np.union1d(multi, head[multi])  # and their heads
        piece = s.origin[multi].astype(np.int64) * s.nseg + s.segment[multi]
        order = np.lexsort((multi, piece, head[multi]))
        m, pc, hd = multi[order], piece[order], head[multi][order]
        dup = np.nonzero((np.diff(pc) == 0) & (np.diff(hd) == 0))[0]
        if len(dup):
            i = int(m[dup[0] + 1])
            r = int(rank[i])
            raise ScheduleFileError(source, f"rank {r} op {i - int(s.offsets[r])} segment",
                                    f"expected a piece not already in its message (op "
                                    f"{int(m[dup[0]]) - int(s.offsets[r])} carries "
                                    f"({int(s.origin[i])},{int(s.segment[i])}) too)")


def _ascii16(text: str) -> bytes:
    raw = text.encode("ascii", "replace")[:16]
    return raw.ljust(16, b"\0")


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("ascii", "replace")
