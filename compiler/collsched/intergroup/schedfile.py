"""Intergroup `.sched` files (collectives 3 and 4, format version 1.1).

Layout: docs/schedule-format.md#intergroup-schedules. The 128-byte header is the one of
every schedule file (`collsched.schedfile`, which dispatches here by its collective
field); a groups extension (p, q, every rank's block size, its own CRC) follows it, then
the index and the sections of 24-byte range operations. The decoder checks everything the
C runtime checks, and every section.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

from .. import __version__
from ..errors import ScheduleFileError
from ..ir import MAX_RANKS
from .groups import Groups
from .schedule import COLLECTIVES, InterSchedule

VERSION_MINOR = 1
OP_BYTES = 24
_OP = np.dtype([("peer", "<u4"), ("kind", "u1"), ("flags", "u1"), ("group", "u1"),
                ("reserved", "u1"), ("lo", "<u8"), ("hi", "<u8")])
assert _OP.itemsize == OP_BYTES
_NAMES = {v: k for k, v in COLLECTIVES.items()}
# The header's algorithm field holds 16 ASCII bytes; names longer than that are stored
# under a fixed short form and read back as the name (never silently truncated).
FILE_NAMES = {"root-gather-mpich": "rootgather-mpich"}
_FROM_FILE = {v: k for k, v in FILE_NAMES.items()}


def _file_name(algorithm: str) -> str:
    name = FILE_NAMES.get(algorithm, algorithm)
    if len(name.encode("ascii", "replace")) > 16:
        raise ValueError(f"algorithm name {algorithm!r} exceeds the header's 16 bytes: add it to FILE_NAMES")
    return name


def header_bytes(p: int, q: int) -> int:
    return 144 + 8 * (p + q)


def encode(s: InterSchedule, *, header, index, magic: bytes, major: int,
           flag_full_duplex: int, ascii16) -> bytes:
    """The whole file (called by collsched.schedfile.encode with its header layout and its
    index builder, shared by both forms)."""
    g = s.groups
    hb = header_bytes(g.p, g.q)
    ops = np.zeros(s.total_ops, _OP)
    ops["peer"], ops["kind"] = s.peer, s.kind
    ops["flags"] = s.fifo.astype(np.uint8) << 1
    ops["group"], ops["lo"], ops["hi"] = s.group, s.lo, s.hi
    body = ops.tobytes()
    index_bytes = index(s.offsets, body, hb, OP_BYTES)
    head = header.pack(
        magic, major, VERSION_MINOR, hb, COLLECTIVES[s.collective], g.nranks, 1,
        flag_full_duplex if s.full_duplex else 0, s.bytes_min, s.bytes_max,
        ascii16(_file_name(s.algorithm)), ascii16(s.compiler_version or __version__), s.input_hash,
        s.total_ops, zlib.crc32(index_bytes))
    ext = struct.pack(f"<II{g.p + g.q}Q", g.p, g.q, *g.sizes_a, *g.sizes_b)
    ext += struct.pack("<II", zlib.crc32(ext), 0)
    assert len(head) + 4 + len(ext) == hb
    return head + struct.pack("<I", zlib.crc32(head)) + ext + index_bytes + body


def decode(data: bytes, source: str, fields: dict, sections, text) -> InterSchedule:
    """The rest of a file whose 128-byte header (`fields`, already checked for magic,
    major version and header CRC) names collective 3 or 4; `sections` is
    collsched.schedfile's check of the index and sections, shared by both forms."""
    def bad(field: str, expected: str) -> ScheduleFileError:
        return ScheduleFileError(source, field, expected)

    nranks, hb = fields["nranks"], fields["header_bytes"]
    if not 2 <= nranks <= MAX_RANKS:
        raise bad("nranks", f"expected 2..{MAX_RANKS} (both groups), found {nranks}")
    if fields["nseg"] != 1:
        raise bad("nseg", f"expected 1 for an intergroup schedule, found {fields['nseg']}")
    if fields["flags"] & ~1:
        raise bad("flags", f"expected bit 0 only for an intergroup schedule, found {fields['flags']:#x}")
    if hb != header_bytes(0, nranks):
        raise bad("header_bytes", f"expected {header_bytes(0, nranks)} for {nranks} ranks, found {hb}")
    if len(data) < hb:
        raise bad("groups", f"truncated: expected {hb} header bytes, file has {len(data)}")
    p, q = struct.unpack_from("<II", data, 128)
    if p < 1 or q < 1 or p + q != nranks:
        raise bad("groups.p", f"expected p, q >= 1 with p + q = nranks = {nranks}, found {p}, {q}")
    sizes = struct.unpack_from(f"<{nranks}Q", data, 136)
    crc, reserved = struct.unpack_from("<II", data, 136 + 8 * nranks)
    if zlib.crc32(data[128:136 + 8 * nranks]) != crc:
        raise bad("groups_crc32", "groups extension checksum mismatch (corrupt file)")
    if reserved:
        raise bad("groups.reserved", f"expected 0, found {reserved}")
    groups = Groups(sizes[:p], sizes[p:])
    coll = _NAMES[fields["collective"]]
    if coll == "inter-allgather" and (len(set(groups.sizes_a)) > 1 or len(set(groups.sizes_b)) > 1):
        raise bad("groups.block_bytes", "expected one block size per group for inter-allgather")
    if (fields["bytes_min"], fields["bytes_max"]) != (min(sizes), max(sizes)):
        raise bad("bytes_min", f"expected the smallest and largest block, {min(sizes)} and {max(sizes)}")
    offsets, index_end = sections(data, hb, nranks, OP_BYTES, fields["index_crc"], fields["total_ops"], bad)
    total = int(offsets[-1])
    ops = np.frombuffer(data, _OP, count=total, offset=index_end)
    s = InterSchedule(
        groups=groups, offsets=offsets, kind=ops["kind"].copy(),
        peer=ops["peer"].astype(np.int32),  # out-of-range peers are refused below
        group=ops["group"].copy(), lo=ops["lo"].astype(np.int64), hi=ops["hi"].astype(np.int64),
        fifo=(ops["flags"] >> 1).astype(np.uint8),
        algorithm=_FROM_FILE.get(text(fields["algorithm"]), text(fields["algorithm"])),
        collective=coll, full_duplex=bool(fields["flags"] & 1), input_hash=fields["input_hash"],
        compiler_version=text(fields["compiler_version"]),
        format_version=f"{fields['major']}.{fields['minor']}", file_bytes=len(data))
    _check_ops(s, ops, source)
    return s


def _check_ops(s: InterSchedule, ops: np.ndarray, source: str) -> None:
    """Field ranges of every operation (the runtime checks the same for its own rank)."""
    rank = s.rank_of_op
    peer = ops["peer"].astype(np.int64)
    grp = ops["group"]
    total = np.array([s.groups.total(0), s.groups.total(1)], np.uint64)
    hi_ok = ops["hi"] <= total[np.minimum(grp, 1)]
    checks = (
        (ops["kind"] > 1, "kind", "0 (send) or 1 (recv)"),
        ((ops["flags"] & np.uint8(0xFD)) != 0, "flags", "bit 1 (FIFO wait) only"),
        (((ops["flags"] & 2) != 0) & (ops["kind"] == 1), "flags", "the FIFO bit on sends only"),
        (grp > 1, "group", "0 (A's data) or 1 (B's data)"),
        (ops["reserved"] != 0, "reserved", "0"),
        (peer >= s.nranks, "peer", f"a rank below {s.nranks}"),
        (peer == rank, "peer", "a rank other than the op's own"),
        (ops["lo"] >= ops["hi"], "lo", "lo < hi (a non-empty range)"),
        (~hi_ok, "hi", "hi <= the group's total bytes"),
    )
    for mask, fld, expected in checks:
        bad_ops = np.nonzero(mask)[0]
        if len(bad_ops):
            i = int(bad_ops[0])
            r = int(rank[i])
            raise ScheduleFileError(source, f"rank {r} op {i - int(s.offsets[r])} {fld}",
                                    f"expected {expected}")
