"""What a schedules directory covers, as the runtime selects from it (`collsched ls DIR`).

The runtime (runtime/src/comm_state.c, docs/runtime.md "Schedule files") reads a
directory like this: names not starting with '.', sorted by byte value (strcmp); only
regular files (symbolic links followed); files whose header is not valid are skipped.
A call is served by the *first* file in that order whose header says allgather, whose
nranks equals the communicator size and whose [bytes_min, bytes_max] holds the call's
bytes per rank. An intercommunicator call (runtime/src/inter_state.c) is served by the
first intergroup file (collectives 3 and 4) of its collective whose groups' block sizes
are the call's, either group being A. So where two files of the same rank count cover overlapping byte ranges,
the one whose name sorts first wins there, and the other is never used for those sizes.

Only the 128-byte header of each file is read (the runtime also reads only headers to
select); a file whose sections are broken is listed here and refused by the runtime at
its first use (`collsched verify` checks it whole).
"""
from __future__ import annotations

import os
import stat
import struct
import zlib
from dataclasses import dataclass, field

from .errors import ScheduleFileError

# Read from schedfile's layout without importing it (and numpy): `ls` stays cheap.
_HEADER = struct.Struct("<8sHHIIIII QQ 16s16s32s Q I")
HEADER_BYTES = 128
_MAGIC = b"COLLSCHD"
_KNOWN_FLAGS = 1 | 2 | 4
_FULL_DUPLEX, _BACKGROUND, _SERIAL = 1, 2, 4
_ALLGATHER = 1
_INTER = {3: "inter-allgather", 4: "inter-allgatherv"}  # docs/schedule-format.md, version 1.1
# Version 1.2 (collectives/schedfile.py): 152-byte header, root at byte 128, flag bit 3
_COLL = {5: "alltoall", 6: "bcast", 7: "reduce", 8: "allreduce"}
_COLL_HEADER_BYTES, _COMMUTATIVE_ONLY = 152, 8
_COMPACT_MAGIC = b"CSCOMPCT"  # compact/desc.py's MAGIC, read without importing it
_MAX_RANKS, _MAX_SEGMENTS = 1 << 24, 65535


@dataclass(frozen=True)
class Header:
    """The fields of a schedule file's header that selection and listing use."""
    path: str
    collective: str
    nranks: int
    nseg: int
    bytes_min: int
    bytes_max: int
    algorithm: str
    compiler_version: str
    full_duplex: bool
    background: bool
    serial: bool
    total_ops: int
    # Intergroup files: (p, q) and both groups' block sizes (A's, B's); None otherwise.
    groups: tuple[int, int] | None = None
    blocks: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    # Version 1.2 files: the root (bcast, reduce) and the commutative-only flag.
    root: int | None = None
    commutative_only: bool = False

    def competes_with(self, other: "Header") -> bool:
        """Allgather and 1.2 files: the runtime could take either for one call of the same
        size (same collective, ranks and root; a commutative-only file does not serve the
        calls of a non-commutative operation, which a later file then still serves)."""
        return (self.collective == other.collective and self.nranks == other.nranks
                and self.root == other.root and (other.commutative_only or not self.commutative_only))

    def serves_same_calls(self, other: "Header") -> bool:
        """Intergroup: the runtime would take either for exactly the same calls."""
        if self.blocks is None or other.blocks is None or self.collective != other.collective:
            return False
        return other.blocks in (self.blocks, self.blocks[::-1])


@dataclass
class Entry:
    """One valid file of a directory, in the runtime's order, and where others win."""
    name: str
    header: Header
    # (lo, hi, name): byte ranges of this file a file earlier in name order serves instead
    shadowed: list[tuple[int, int, str]] = field(default_factory=list)

    @property
    def never_used(self) -> bool:
        h = self.header
        return _uncovered(h.bytes_min, h.bytes_max, [(lo, hi) for lo, hi, _ in self.shadowed]) == []


@dataclass
class Listing:
    directory: str
    entries: list[Entry]
    skipped: list[tuple[str, str]]  # (name, why): not a regular file, or not a valid header


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("ascii", "replace")


def read_header(path: str | os.PathLike) -> Header:
    """Read and check only the header, as the runtime's cs_read_header_file does.

    A FIFO, a device, a socket or a directory is refused before it is read (opened
    non-blocking, checked again after open). Raises ScheduleFileError naming the field."""
    src = os.fspath(path)

    def bad(fld: str, expected: str) -> ScheduleFileError:
        return ScheduleFileError(src, fld, expected)

    try:
        st = os.stat(src)
        if not stat.S_ISREG(st.st_mode):
            raise bad("file", "expected a regular file")
        fd = os.open(src, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise bad("file", f"cannot read ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise bad("file", "expected a regular file")
        data = os.pread(fd, HEADER_BYTES, 0)
        if data[:len(_COMPACT_MAGIC)] == _COMPACT_MAGIC and st.st_size > len(data):
            # a version-2 compact record is read whole (its CRC covers all of it)
            from .compact.desc import MAX_DESC_BYTES
            data = os.pread(fd, min(st.st_size, MAX_DESC_BYTES + 1), 0)
    except OSError as e:
        raise bad("file", f"cannot read ({e.strerror})") from None
    finally:
        os.close(fd)
    if data[:len(_COMPACT_MAGIC)] == _COMPACT_MAGIC:  # a compact description (docs/compact.md)
        return _compact_header(src, data, bad)
    if len(data) < HEADER_BYTES or st.st_size < HEADER_BYTES:
        raise bad("header", f"expected at least {HEADER_BYTES} bytes, file has {st.st_size}")
    (magic, major, _minor, header_bytes, coll, nranks, nseg, flags, bmin, bmax, alg, ver,
     _ihash, total_ops, _index_crc) = _HEADER.unpack_from(data)
    (crc,) = struct.unpack_from("<I", data, HEADER_BYTES - 4)
    checks = (
        (magic == _MAGIC, "magic", "expected 'COLLSCHD': not a collsched schedule"),
        (major == 1, "version_major", f"expected 1, found {major}"),
        (header_bytes == (_COLL_HEADER_BYTES if coll in _COLL else HEADER_BYTES) or coll in _INTER,
         "header_bytes", f"expected {_COLL_HEADER_BYTES if coll in _COLL else HEADER_BYTES}, found {header_bytes}"),
        (zlib.crc32(data[:HEADER_BYTES - 4]) == crc, "header_crc32", "header checksum mismatch (corrupt file)"),
        (coll == _ALLGATHER or coll in _INTER or coll in _COLL, "collective",
         f"expected 1 (allgather), 3 or 4 (intergroup), 5..8 (alltoall, bcast, reduce, allreduce), found {coll}"),
        (1 <= nranks <= _MAX_RANKS, "nranks", f"expected 1..{_MAX_RANKS}, found {nranks}"),
        (1 <= nseg <= _MAX_SEGMENTS, "nseg", f"expected 1..{_MAX_SEGMENTS}, found {nseg}"),
        (not flags & ~(1 | _COMMUTATIVE_ONLY if coll in _COLL else _KNOWN_FLAGS), "flags",
         f"unknown flag bits in {flags:#x}"),
        (bmin <= bmax, "bytes_min", f"expected bytes_min <= bytes_max, found {bmin} > {bmax}"),
    )
    for ok, fld, expected in checks:
        if not ok:
            raise bad(fld, expected)
    groups = blocks = root = None
    if coll in _INTER:
        groups, blocks = _groups_extension(src, nranks, header_bytes, st.st_size, bad)
    if coll in _COLL:
        root = _coll_extension(src, nranks, coll, st.st_size, bad)
    name = _INTER.get(coll) or _COLL.get(coll, "allgather")
    return Header(src, name, nranks, nseg, bmin, bmax, _text(alg), _text(ver),
                  bool(flags & _FULL_DUPLEX), bool(flags & _BACKGROUND) and coll not in _COLL,
                  bool(flags & _SERIAL) and coll not in _COLL, total_ops, groups, blocks, root,
                  bool(flags & _COMMUTATIVE_ONLY) and coll in _COLL)


def _compact_header(src: str, data: bytes, bad) -> Header:
    """A compact description's fields as the header an explicit file would have (the
    runtime's compact_load.c fills the same ones); the compact package is loaded only here."""
    from .compact.desc import decode
    from .errors import InputError

    try:
        d = decode(data, source=src)
    except InputError as e:
        raise bad(e.field, e.expected) from None
    from .algorithms import REGISTRY  # serial as the algorithm's explicit files are (bdr, bslb)

    return Header(src, "allgather", d.nranks, d.nseg, d.bytes_min, d.bytes_max, d.algorithm,
                  f"compact v{d.version}", d.full_duplex, False, REGISTRY[d.algorithm].serial, 0)


def _groups_extension(src: str, nranks: int, header_bytes: int, size: int, bad):
    """An intergroup file's (p, q) and block sizes, checked as the runtime checks them."""
    want = 144 + 8 * nranks
    if header_bytes != want:
        raise bad("header_bytes", f"expected {want} for an intergroup file of {nranks} ranks, found {header_bytes}")
    if size < want:
        raise bad("groups", f"truncated: expected {want} header bytes, file has {size}")
    with open(src, "rb") as f:  # a regular file (checked by the caller)
        f.seek(HEADER_BYTES)
        ext = f.read(want - HEADER_BYTES)
    p, q = struct.unpack_from("<II", ext)
    crc, _ = struct.unpack_from("<II", ext, 8 + 8 * nranks)
    if p < 1 or q < 1 or p + q != nranks:
        raise bad("groups.p", f"expected p, q >= 1 with p + q = nranks = {nranks}, found {p}, {q}")
    if zlib.crc32(ext[:8 + 8 * nranks]) != crc:
        raise bad("groups_crc32", "groups extension checksum mismatch (corrupt file)")
    sizes = struct.unpack_from(f"<{nranks}Q", ext, 8)
    return (p, q), (tuple(sizes[:p]), tuple(sizes[p:]))


def _coll_extension(src: str, nranks: int, coll: int, size: int, bad) -> int:
    """A 1.2 file's root, its extension checked as the runtime checks it."""
    if size < _COLL_HEADER_BYTES:
        raise bad("extension", f"truncated: expected {_COLL_HEADER_BYTES} header bytes, file has {size}")
    with open(src, "rb") as f:  # a regular file (checked by the caller)
        f.seek(HEADER_BYTES)
        ext = f.read(_COLL_HEADER_BYTES - HEADER_BYTES)
    root, reserved, _pieces, crc, reserved2 = struct.unpack("<IIQII", ext)
    if zlib.crc32(ext[:16]) != crc:
        raise bad("ext_crc32", "extension checksum mismatch (corrupt file)")
    if root >= nranks or (root and _COLL[coll] not in ("bcast", "reduce")):
        raise bad("root", f"expected a rank below {nranks} (bcast, reduce) or 0, found {root}")
    if reserved or reserved2:
        raise bad("reserved", "expected 0")
    return root


def _uncovered(lo: int, hi: int, covers: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of [lo, hi] (inclusive) that no range in `covers` holds."""
    rest = [(lo, hi)]
    for clo, chi in covers:
        nxt = []
        for a, b in rest:
            if chi < a or clo > b:
                nxt.append((a, b))
                continue
            if a < clo:
                nxt.append((a, clo - 1))
            if chi < b:
                nxt.append((chi + 1, b))
        rest = nxt
    return rest


def _names(directory: str) -> list[str]:
    """The runtime's candidates: names not starting with '.', in byte (strcmp) order."""
    raw = [os.fsencode(n) for n in os.listdir(directory) if not n.startswith(".")]
    return [os.fsdecode(n) for n in sorted(raw)]


def list_directory(directory: str | os.PathLike) -> Listing:
    """Every valid schedule of `directory` in the runtime's order, with where earlier
    files win over it, and the entries the runtime skips (with why)."""
    d = os.fspath(directory)
    entries: list[Entry] = []
    skipped: list[tuple[str, str]] = []
    for name in _names(d):
        try:
            h = read_header(os.path.join(d, name))
        except ScheduleFileError as e:
            skipped.append((name, f"{e.field}: {e.expected}"))
            continue
        e = Entry(name, h)
        for prev in entries:
            p = prev.header
            if h.blocks is not None or p.blocks is not None:  # intergroup: same calls or none
                if p.serves_same_calls(h):
                    e.shadowed.append((h.bytes_min, h.bytes_max, prev.name))
                continue
            if p.competes_with(h) and p.bytes_min <= h.bytes_max and h.bytes_min <= p.bytes_max:
                e.shadowed.append((max(p.bytes_min, h.bytes_min), min(p.bytes_max, h.bytes_max), prev.name))
        entries.append(e)
    return Listing(d, entries, skipped)


@dataclass(frozen=True)
class Overlap:
    """A file beside a new one whose rank count and byte range overlap the new one's."""
    name: str
    algorithm: str
    lo: int
    hi: int
    winner: str  # the file the runtime uses for lo..hi: the one whose name sorts first


def overlaps(directory: str | os.PathLike, new: Header, new_name: str) -> list[Overlap]:
    """The valid files of `directory` (other than `new_name`) whose ranks and byte range
    overlap `new`'s, with which of the two the runtime uses there."""
    out = []
    for e in list_directory(directory).entries:
        h = e.header
        if e.name == new_name or h.nranks != new.nranks:
            continue
        if h.blocks is not None or new.blocks is not None:
            if h.serves_same_calls(new):
                first = e.name if os.fsencode(e.name) < os.fsencode(new_name) else new_name
                out.append(Overlap(e.name, h.algorithm, new.bytes_min, new.bytes_max, first))
            continue
        if (h.competes_with(new) or new.competes_with(h)) and h.bytes_min <= new.bytes_max \
                and new.bytes_min <= h.bytes_max:
            first = e.name if os.fsencode(e.name) < os.fsencode(new_name) else new_name
            out.append(Overlap(e.name, h.algorithm, max(h.bytes_min, new.bytes_min),
                               min(h.bytes_max, new.bytes_max), first))
    return out


def new_file_warning(path: str | os.PathLike) -> str | None:
    """compile's warning for a file it just wrote (None: nothing beside it overlaps, or the
    directory cannot be listed)."""
    out = os.fspath(path)
    directory, name = os.path.dirname(out) or ".", os.path.basename(out)
    try:
        found = overlaps(directory, read_header(out), name)
    except (ScheduleFileError, OSError):  # an unreadable directory: no listing, no warning
        return None
    return overlap_warning(out, directory, found) if found else None


def overlap_warning(path: str, directory: str, found: list[Overlap]) -> str:
    """compile's one-line warning about `found`."""
    parts = [f"{o.name} ({o.algorithm}) at {_range(o.lo, o.hi)} bytes/rank, where {o.winner} is used"
             for o in found]
    return (f"collsched: warning: {path} overlaps other schedules in {directory}: {'; '.join(parts)} "
            f"(the runtime takes the first file in name order; collsched ls {directory} lists them)")


def _range(lo: int, hi: int) -> str:
    return f"{lo}" if lo == hi else f"{lo}..{hi}"


def describe(listing: Listing) -> list[str]:
    """The lines `collsched ls DIR` prints."""
    lines = [f"{listing.directory}: {len(listing.entries)} schedule(s), in the order the runtime tries them"]
    for e in listing.entries:
        h = e.header
        ranks = f"{h.groups[0]}:{h.groups[1]}" if h.groups else f"{h.nranks}"
        unit = {"alltoall": "bytes/block", "bcast": "bytes", "reduce": "bytes", "allreduce": "bytes"}.get(
            h.collective, "bytes/rank")
        extra = (f"  root {h.root}" if h.collective in ("bcast", "reduce") else "") + (
            "  commutative ops only" if h.commutative_only else "")
        lines.append(f"  {e.name}  {h.collective} {ranks} ranks  {_range(h.bytes_min, h.bytes_max)} {unit}  "
                     f"{h.algorithm}  {h.nseg} seg  {'full' if h.full_duplex else 'half'} duplex{extra}")
        if e.never_used:
            lines.append(f"    never used: earlier files serve its whole range "
                         f"({', '.join(sorted({n for _, _, n in e.shadowed}))})")
        else:
            for lo, hi, name in e.shadowed:
                lines.append(f"    {_range(lo, hi)} bytes: {name} wins (sorts first)")
    for name, why in listing.skipped:
        lines.append(f"  skipped {name}: {why}")
    return lines
