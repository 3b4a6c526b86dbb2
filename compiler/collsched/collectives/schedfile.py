"""`.sched` files of the collectives beyond allgather (collectives 5..8, format version 1.2).

Layout: docs/schedule-format.md, "Version 1.2". The first 128 bytes are the header of
every schedule file (collsched.schedfile dispatches here by its collective field); an
extension of 24 bytes follows it (root, total_pieces, its own CRC), then the index
(16 bytes per rank) and the sections: per op a 12-byte record (peer, kind, flags,
npieces) followed by its npieces 12-byte pieces (src, dst, seg).

`decode` trusts nothing: every field of a hostile file is checked, in file order, and the
first failure is one ScheduleFileError line naming the file, the field and what was
expected (as the C reader, runtime/src/coll_file.c, says it).
"""
from __future__ import annotations

import struct
import zlib

from .. import __version__
from ..errors import ScheduleFileError
from .program import (COLLECTIVES, MAX_PIECES_PER_OP, MAX_RANKS, MAX_SEGMENTS, RECV_REDUCE,
                      REDUCING, ROOTED, SEND, Op, Piece, Program)

MAGIC = b"COLLSCHD"
VERSION_MAJOR, VERSION_MINOR = 1, 2
BASE_HEADER = 128
HEADER_BYTES = 152
INDEX_ENTRY = 16
OP_BYTES = 12
PIECE_BYTES = 12
FLAG_FULL_DUPLEX, FLAG_COMMUTATIVE_ONLY = 1, 8
OP_FIFO, OP_FENCE, OP_LOCAL_FIRST, OP_CHAIN = 1, 2, 4, 8

# The 128-byte header of every schedule file (collsched.schedfile._HEADER), then its CRC:
# magic, major, minor, header_bytes, collective, nranks, nseg, flags, bytes_min, bytes_max,
# algorithm, compiler_version, input_hash, total_ops, index_crc32
_HEADER = struct.Struct("<8sHHIIIII QQ 16s16s32s Q I")
_EXT = struct.Struct("<IIQ")  # root, reserved, total_pieces (then ext_crc32, reserved)
_INDEX = struct.Struct("<QII")
_OP = struct.Struct("<IBBHI")  # peer, kind, flags, reserved, npieces
assert _HEADER.size == BASE_HEADER - 4 and _EXT.size == 16 and _OP.size == OP_BYTES
_NAMES = {v: k for k, v in COLLECTIVES.items()}


def _ascii16(text: str, what: str) -> bytes:
    raw = (text or "").encode("ascii", "replace")
    if len(raw) > 16:
        raise ValueError(f"{what} {text!r} exceeds the header's 16 ASCII bytes")
    return raw.ljust(16, b"\0")


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("ascii", "replace")


def _section(ops) -> bytes:
    out = bytearray()
    for op in ops:
        flags = (OP_FIFO if op.fifo else 0) | (OP_FENCE if op.fence else 0) | (
            OP_LOCAL_FIRST if op.local_first else 0) | (OP_CHAIN if op.chain else 0)
        out += _OP.pack(op.peer, op.kind, flags, 0, len(op.pieces))
        if op.pieces:
            out += struct.pack(f"<{3 * len(op.pieces)}I", *(x for p in op.pieces for x in p))
    return bytes(out)


def encode(prog: Program) -> bytes:
    """The whole 1.2 file of a program (ValueError for a program that cannot be stored:
    an unknown collective, a field out of the format's range)."""
    if prog.collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {prog.collective!r}")
    if not 1 <= prog.nranks <= MAX_RANKS or not 1 <= prog.nseg <= MAX_SEGMENTS:
        raise ValueError(f"nranks {prog.nranks} / nseg {prog.nseg} out of the format's range")
    if len(prog.ops) != prog.nranks:
        raise ValueError(f"{len(prog.ops)} lists of operations for {prog.nranks} ranks")
    if len(prog.input_hash) != 32:
        raise ValueError("input_hash must be 32 bytes")
    sections = [_section(lst) for lst in prog.ops]
    start = HEADER_BYTES + INDEX_ENTRY * prog.nranks
    index, off = bytearray(), start
    for lst, sec in zip(prog.ops, sections):
        index += _INDEX.pack(off, len(lst), zlib.crc32(sec))
        off += len(sec)
    flags = (FLAG_FULL_DUPLEX if prog.full_duplex else 0) | (
        FLAG_COMMUTATIVE_ONLY if prog.commutative_only else 0)
    head = _HEADER.pack(
        MAGIC, VERSION_MAJOR, VERSION_MINOR, HEADER_BYTES, COLLECTIVES[prog.collective],
        prog.nranks, prog.nseg, flags, prog.bytes_min, prog.bytes_max,
        _ascii16(prog.algorithm, "algorithm name"),
        _ascii16(prog.compiler_version or __version__, "compiler version"), bytes(prog.input_hash),
        prog.total_ops, zlib.crc32(index))
    head += struct.pack("<I", zlib.crc32(head))
    ext = _EXT.pack(prog.root, 0, prog.total_pieces)
    ext += struct.pack("<II", zlib.crc32(ext), 0)
    return b"".join([head, ext, bytes(index)] + sections)


def decode(data: bytes, source: str = "<bytes>") -> Program:
    """The Program a 1.2 file holds; ScheduleFileError (one line) for anything else."""
    def bad(field: str, expected: str) -> ScheduleFileError:
        return ScheduleFileError(source, field, expected)

    data = bytes(data)
    h = _header(data, bad)
    nranks, nseg, coll = h["nranks"], h["nseg"], h["collective"]
    index_end = HEADER_BYTES + INDEX_ENTRY * nranks
    if len(data) < index_end:
        raise bad("index", f"truncated: expected {index_end} bytes for {nranks} ranks, "
                           f"file has {len(data)}")
    if zlib.crc32(data[HEADER_BYTES:index_end]) != h["index_crc"]:
        raise bad("index_crc32", "index checksum mismatch (corrupt file)")
    entries = [_INDEX.unpack_from(data, HEADER_BYTES + INDEX_ENTRY * r) for r in range(nranks)]
    total = sum(e[1] for e in entries)
    if total != h["total_ops"]:
        raise bad("total_ops", f"header says {h['total_ops']}, index sums to {total}")
    expect = index_end
    for r, (off, _nops, _crc) in enumerate(entries):
        if r == 0 and off != index_end:
            raise bad("index[0].section_offset", f"expected {index_end} (right after the index), "
                                                 f"found {off}")
        if not expect <= off <= len(data):
            raise bad(f"index[{r}].section_offset", f"expected {expect}..{len(data)} (sections in "
                                                    f"rank order, inside the file), found {off}")
        expect = off
    _check_memory(h, source)
    ops, pieces = [], 0
    for r, (off, nops, crc) in enumerate(entries):
        end = entries[r + 1][0] if r + 1 < nranks else len(data)
        if zlib.crc32(data[off:end]) != crc:
            raise bad(f"section[{r}]", "section checksum mismatch (corrupt file)")
        lst = _read_section(data, off, end, nops, r, h, bad)
        pieces += sum(len(op.pieces) for op in lst)
        ops.append(lst)
    if pieces != h["total_pieces"]:
        raise bad("total_pieces", f"header says {h['total_pieces']}, the sections hold {pieces}")
    return Program(
        collective=coll, nranks=nranks, nseg=nseg, ops=ops, root=h["root"],
        algorithm=_text(h["algorithm"]), bytes_min=h["bytes_min"], bytes_max=h["bytes_max"],
        full_duplex=bool(h["flags"] & FLAG_FULL_DUPLEX),
        commutative_only=bool(h["flags"] & FLAG_COMMUTATIVE_ONLY), input_hash=h["input_hash"],
        compiler_version=_text(h["compiler_version"]),
        format_version=f"{VERSION_MAJOR}.{h['minor']}", file_bytes=len(data))


# Memory the decoded program takes per operation and per piece (Python objects), a little
# more than measured, so that a file too large to hold is refused before it is decoded.
BYTES_PER_OP, BYTES_PER_PIECE = 250, 100


def _check_memory(h: dict, source: str) -> None:
    from ..model import budget

    need = BYTES_PER_OP * h["total_ops"] + BYTES_PER_PIECE * h["total_pieces"]
    have = budget.available()
    if need > have:
        raise ScheduleFileError(source, "total_pieces", f"expected a program that fits in memory: "
                                                        f"{h['total_ops']} ops and {h['total_pieces']} "
                                                        f"pieces need about {need >> 20} MiB, "
                                                        f"{have >> 20} MiB available")


def _header(data: bytes, bad) -> dict:
    """The 152 header bytes, checked in file order."""
    if len(data) < BASE_HEADER:
        raise bad("header", f"expected at least {BASE_HEADER} bytes, file has {len(data)}")
    keys = ("magic", "major", "minor", "header_bytes", "coll", "nranks", "nseg", "flags",
            "bytes_min", "bytes_max", "algorithm", "compiler_version", "input_hash", "total_ops",
            "index_crc")
    h = dict(zip(keys, _HEADER.unpack_from(data)))
    if h["magic"] != MAGIC:
        raise bad("magic", f"expected {MAGIC.decode()!r}, found {h['magic']!r}: not a collsched schedule")
    if h["major"] != VERSION_MAJOR:
        raise bad("version_major", f"expected {VERSION_MAJOR}, found {h['major']}")
    if h["minor"] < VERSION_MINOR:
        raise bad("version_minor", f"expected {VERSION_MINOR} or more for collectives "
                                   f"{min(_NAMES)}..{max(_NAMES)}, found {h['minor']}")
    if h["header_bytes"] != HEADER_BYTES:
        raise bad("header_bytes", f"expected {HEADER_BYTES}, found {h['header_bytes']}")
    (crc,) = struct.unpack_from("<I", data, BASE_HEADER - 4)
    if zlib.crc32(data[:BASE_HEADER - 4]) != crc:
        raise bad("header_crc32", "header checksum mismatch (corrupt file)")
    if h["coll"] not in _NAMES:
        raise bad("collective", f"expected one of {sorted(_NAMES)} in a version 1.2 file, found {h['coll']}")
    h["collective"] = _NAMES[h["coll"]]
    if not 1 <= h["nranks"] <= MAX_RANKS:
        raise bad("nranks", f"expected 1..{MAX_RANKS}, found {h['nranks']}")
    if not 1 <= h["nseg"] <= MAX_SEGMENTS:
        raise bad("nseg", f"expected 1..{MAX_SEGMENTS}, found {h['nseg']}")
    if h["flags"] & ~(FLAG_FULL_DUPLEX | FLAG_COMMUTATIVE_ONLY):
        raise bad("flags", f"expected bits 0 (full duplex) and 3 (commutative-only) only, "
                           f"found {h['flags']:#x}")
    if h["bytes_min"] > h["bytes_max"]:
        raise bad("bytes_min", f"expected bytes_min <= bytes_max, found {h['bytes_min']} > {h['bytes_max']}")
    if len(data) < HEADER_BYTES:
        raise bad("extension", f"truncated: expected {HEADER_BYTES} header bytes, file has {len(data)}")
    root, reserved, h["total_pieces"] = _EXT.unpack_from(data, BASE_HEADER)
    ext_crc, reserved2 = struct.unpack_from("<II", data, BASE_HEADER + 16)
    if zlib.crc32(data[BASE_HEADER:BASE_HEADER + 16]) != ext_crc:
        raise bad("ext_crc32", "extension checksum mismatch (corrupt file)")
    if h["collective"] in ROOTED:
        if root >= h["nranks"]:
            raise bad("root", f"expected a rank below nranks = {h['nranks']}, found {root}")
    elif root:
        raise bad("root", f"expected 0 for {h['collective']}, found {root}")
    if reserved or reserved2:
        raise bad("reserved", f"expected 0 (bytes {BASE_HEADER + 4} and {BASE_HEADER + 20}), "
                              f"found {reserved} and {reserved2}")
    h["root"] = root
    return h


def _read_section(data: bytes, off: int, end: int, nops: int, r: int, h: dict, bad) -> list[Op]:
    """Rank r's nops operations from data[off:end], which they must fill exactly."""
    nranks, nseg, coll = h["nranks"], h["nseg"], h["collective"]
    alltoall, reducing = coll == "alltoall", coll in REDUCING
    out, pos = [], off
    for i in range(nops):
        def field(name: str, expected: str, found) -> ScheduleFileError:
            return bad(f"rank {r} op {i} {name}", f"expected {expected}, found {found}")

        if pos + OP_BYTES > end:
            raise bad(f"section[{r}]", f"truncated: op {i} of {nops} does not fit "
                                       f"(section ends at byte {end})")
        peer, kind, flags, reserved, npieces = _OP.unpack_from(data, pos)
        pos += OP_BYTES
        if peer >= nranks or peer == r:
            raise field("peer", f"a rank below {nranks} other than {r}", peer)
        if kind > RECV_REDUCE or (kind == RECV_REDUCE and not reducing):
            raise field("kind", "0 (send), 1 (recv)" + (" or 2 (recv-reduce)" if reducing else ""), kind)
        if flags & ~(OP_FIFO | OP_FENCE | OP_LOCAL_FIRST | OP_CHAIN):
            raise field("flags", "bits 0 (FIFO), 1 (FENCE), 2 (LOCAL_FIRST), 3 (CHAIN) only",
                        f"{flags:#x}")
        if flags & OP_FIFO and kind != SEND:
            raise field("flags", "the FIFO bit on sends only", f"{flags:#x} on kind {kind}")
        if flags & OP_CHAIN and kind != SEND:
            raise field("flags", "the CHAIN bit on sends only", f"{flags:#x} on kind {kind}")
        if flags & OP_LOCAL_FIRST and kind != RECV_REDUCE:
            raise field("flags", "the LOCAL_FIRST bit on recv-reduce only", f"{flags:#x} on kind {kind}")
        if reserved:
            raise field("reserved", "0", reserved)
        if npieces > MAX_PIECES_PER_OP or pos + PIECE_BYTES * npieces > end:
            raise field("npieces", f"at most {MAX_PIECES_PER_OP}, within the section "
                                   f"({(end - pos) // PIECE_BYTES} pieces fit)", npieces)
        raw = struct.unpack_from(f"<{3 * npieces}I", data, pos)
        pos += PIECE_BYTES * npieces
        pieces = tuple(Piece(*raw[k:k + 3]) for k in range(0, len(raw), 3))
        for k, (src, dst, seg) in enumerate(pieces):
            if seg >= nseg:
                raise field(f"piece {k} seg", f"a segment below nseg = {nseg}", seg)
            if alltoall and (src >= nranks or dst >= nranks):
                raise field(f"piece {k}", f"src and dst below nranks = {nranks}", (src, dst))
            if not alltoall and (src or dst):
                raise field(f"piece {k}", f"src = dst = 0 for {coll}", (src, dst))
        out.append(Op(kind, peer, pieces, fifo=bool(flags & OP_FIFO), fence=bool(flags & OP_FENCE),
                      local_first=bool(flags & OP_LOCAL_FIRST), chain=bool(flags & OP_CHAIN)))
    if pos != end:
        raise bad(f"section[{r}]", f"expected its {nops} ops to end at byte {end}, they end at {pos}"
                                   + (" (trailing bytes)" if r + 1 == nranks else ""))
    return out
