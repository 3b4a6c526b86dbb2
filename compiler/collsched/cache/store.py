"""The schedule cache directory (docs/cache.md): loading and verifying its entries, and
the one update every writer makes (new schedule files, merge, eviction, the index
replaced whole), under the directory's lock.

Schedule files are named by their content's hash and never changed; the index is replaced
by rename; files no entry names are deleted only after the index that dropped them is in
place. A reader holding the shared lock sees the old index and its files, or the new.
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__, schedfile
from ..errors import InputError, excerpt
from ..files import read_input, write_atomic
from ..ir import Schedule
from ..verify import verify
from .index import INDEX_NAME, Entry, format_index, parse_index
from .lock import locked

MAX_INDEX_BYTES = 64 << 20
SCHEDULE_SUFFIX = ".sched"
DEFAULT_MAX_SIZE = 1 << 30  # bytes of schedule files a cache keeps (eviction beyond)


def file_name(data: bytes, site: str = "*", pattern=None) -> str:
    """A schedule file's name in a cache: 16 hex digits of the SHA-256 of its content and
    of the call site and class pattern it serves. (The index names each file once: the
    same schedule serving two sites is two files. One name always holds one content.)"""
    key = f"\0{site}\0{'regular' if pattern is None else ','.join(map(repr, pattern))}"
    return hashlib.sha256(bytes(data) + key.encode("utf-8", "surrogatepass")).hexdigest()[:16] + SCHEDULE_SUFFIX


def check_directory(directory, must_exist: bool = True) -> Path:
    """DIR as a Path; InputError when it is a file (or missing, with must_exist)."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise InputError(str(d), "", "expected a schedule cache directory, found a file")
    if must_exist and not d.is_dir():
        raise InputError(str(d), "", "expected a schedule cache directory (not found)")
    return d


def read_index(directory, required: bool = True) -> list[Entry]:
    """The entries of DIR/index (the caller holds the lock). Without an index: [] unless
    `required` (InputError). A bad index: InputError naming the line and field."""
    path = Path(directory) / INDEX_NAME
    if not required and not path.exists():
        return []
    data = read_input(path, "schedule cache index", MAX_INDEX_BYTES)
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(str(path), f"byte {e.start}", "expected UTF-8 text") from None
    return parse_index(text, str(path))


def _check_compact_entry(path: Path, e: Entry):
    """A compact description as a cache entry (docs/compact.md): its fields agree with the
    entry and the generators' check holds (compact.check: the lists compared with the
    explicit compiler's up to 256 ranks, counts above); (the description, None) or (None,
    why). The runtime loads it as it loads any entry (cs_load_file)."""
    from ..compact import check, read_compact

    try:
        d = read_compact(path)
        why = check(d)
    except InputError as err:
        return None, err.expected
    why = _disagreement(e, "allgather", d.nranks, d.bytes_min, d.bytes_max) or why
    return (None, why) if why else (d, None)


def _disagreement(e: Entry, collective: str, nranks: int, bytes_min: int, bytes_max: int) -> str | None:
    """Why a file's header (either form) does not serve what the index entry says, or None."""
    if collective != e.collective:
        return f"the file is for {collective}, the index says {e.collective}"
    if nranks != e.ranks:
        return f"the file is for {nranks} ranks, the index says {e.ranks}"
    if not bytes_min <= e.bytes_min <= e.bytes_max <= bytes_max:
        return f"the file serves {bytes_min}..{bytes_max} bytes, the index {e.bytes_min}..{e.bytes_max}"
    return None


def check_entry(directory, e: Entry) -> tuple[Schedule | None, str | None]:
    """(the entry's schedule, None) when its file loads, its header agrees with the entry
    and it passes the verifier; else (None, why). A compact entry gives its CompactDesc
    in place of the schedule (it has .algorithm and .nranks as a Schedule does)."""
    from ..compact import is_compact_file

    path = Path(directory) / e.file
    try:
        if path.is_file() and is_compact_file(path):
            return _check_compact_entry(path, e)
    except OSError:
        pass  # schedfile.read says what is wrong with it
    try:
        s = schedfile.read(path)
    except InputError as err:
        return None, err.expected
    why = _disagreement(e, s.collective, s.nranks, s.bytes_min, s.bytes_max)
    if why:
        return None, why
    violations = verify(s)
    if violations:
        return None, f"fails the verifier: {violations[0]}"
    return s, None


@dataclass
class Loaded:
    """What load_cache found: the valid entries with their schedules, and one warning
    line per entry skipped."""
    entries: list[tuple[Entry, Schedule]]
    warnings: list[str]


def load_cache(directory) -> Loaded:
    """The valid entries of a cache (docs/cache.md): every entry's file read and proven
    under the shared lock; an entry that fails is skipped with a warning, never used.
    InputError when DIR is not a cache or its index breaks the format."""
    d = check_directory(directory)
    with locked(d, exclusive=False):
        entries = read_index(d)
        ok, warnings = [], []
        for e in entries:
            s, why = check_entry(d, e)
            if why is None:
                ok.append((e, s))
            else:
                warnings.append(f"{d / e.file}: entry skipped ({describe(e)}): {why}")
    return Loaded(ok, warnings)


def verify_cache(directory) -> list[tuple[Entry, str | None]]:
    """Every entry and why it is invalid (None: valid), under the shared lock."""
    d = check_directory(directory)
    with locked(d, exclusive=False):
        return [(e, check_entry(d, e)[1]) for e in read_index(d)]


def describe(e: Entry) -> str:
    what = "regular" if e.regular else f"class {e.klass}"
    size = f"{e.bytes_min}" if e.bytes_min == e.bytes_max else f"{e.bytes_min}..{e.bytes_max}"
    return f"{e.collective}, {e.ranks} ranks, {size} B, site {e.site}, {what}"


# --- the update -------------------------------------------------------------------------------

@dataclass
class Update:
    """What one commit did: the index's entries after it, what it added, replaced, evicted,
    and the files it deleted; the cache's size in bytes (schedule files its index names)."""
    entries: list[Entry]
    added: list[Entry] = field(default_factory=list)
    replaced: list[Entry] = field(default_factory=list)
    evicted: list[Entry] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    size_bytes: int = 0


def same_class(a: Entry, b: Entry) -> bool:
    """Does b serve what a serves (a build's entry replaces such an old one)? Regular:
    the same COLLECTIVE, SITE, RANKS and byte range (one regular entry per those: the
    index's rule). Class: also the same topology, and patterns within either's radius."""
    if a.regular or b.regular:
        return a.regular and b.regular and a.group == b.group
    if (a.group, a.topology) != (b.group, b.topology):
        return False
    d = float(np.sqrt(np.mean((np.asarray(a.pattern) - np.asarray(b.pattern)) ** 2)))
    return d <= max(a.radius, b.radius)


def merge(old: list[Entry], new: list[Entry], replaces=None) -> tuple[list[Entry], list[Entry]]:
    """(merged entries, old entries replaced): the new entries replace the old ones that
    serve the same (same_class, or `replaces(old_entry, old)` when given); class numbers are
    then made 0, 1, ... per COLLECTIVE, SITE, RANKS and byte range, old entries first."""
    gone = [o for o in old if (replaces(o, old) if replaces else any(same_class(o, n) for n in new))]
    kept = [o for o in old if o not in gone] + list(new)
    count: dict = {}
    out = []
    for e in kept:
        if not e.regular:
            k = count.get(e.group, 0)
            count[e.group] = k + 1
            e = Entry(**{**_fields(e), "klass": k})
        out.append(e)
    return out, gone


def _fields(e: Entry) -> dict:
    return {f: getattr(e, f) for f in Entry.__dataclass_fields__}


def evict(entries: list[Entry], directory, max_size: int | None) -> tuple[list[Entry], list[Entry], int]:
    """(kept, evicted, size): the least-used entries (lowest USES, then oldest file, then
    name) dropped until the files the kept ones name take at most max_size bytes."""
    d = Path(directory)
    sizes, mtimes = {}, {}
    for e in entries:
        if e.file not in sizes:
            st = os.stat(d / e.file)
            sizes[e.file], mtimes[e.file] = st.st_size, st.st_mtime
    kept = list(entries)
    evicted = []

    def total():
        return sum(sizes[f] for f in {e.file for e in kept})

    order = sorted(kept, key=lambda e: (e.uses, mtimes[e.file], e.file))
    while max_size is not None and kept and total() > max_size:
        victim = order.pop(0)
        kept.remove(victim)
        evicted.append(victim)
    return kept, evicted, total()


def commit(directory, new: list[tuple[Entry, bytes]], *, max_size: int | None = DEFAULT_MAX_SIZE,
           replaces=None, comment: str = "") -> Update:
    """The one update of a cache: under the exclusive lock, write the new schedule files
    (an identical file already there is kept, its time refreshed), merge the new entries
    into the index (merge), evict down to max_size bytes (evict), replace the index, then
    delete the schedule files no entry names. DIR is created if missing."""
    d = check_directory(directory, must_exist=False)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(str(d), "", f"cannot create the cache directory ({e.strerror})") from None
    with locked(d, exclusive=True):
        old = read_index(d, required=False)  # a bad index: refused before anything is written
        for e, data in new:
            _put_file(d / e.file, data)
        merged, replaced = merge(old, [e for e, _ in new], replaces)
        kept, evicted, size = evict(merged, d, max_size)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        head = excerpt(f"built by collsched {__version__} on {stamp}" + (f" {comment}" if comment else ""), 400)
        head = head.encode("ascii", "replace").decode("ascii")  # one plain comment line
        write_atomic(d / INDEX_NAME, format_index(kept, head))
        deleted = _delete_unnamed(d, {e.file for e in kept})
    named = {e.file for e in kept}
    return Update(kept, [e for e, _ in new if e.file in named], replaced, evicted, deleted, size)


def _put_file(path: Path, data: bytes) -> None:
    try:
        st = path.stat()
    except FileNotFoundError:
        st = None
    if st is not None and st.st_size == len(data) and path.read_bytes() == data:
        os.utime(path)  # the same schedule again: kept, and as young as the new ones
        return
    write_atomic(path, data)


def _delete_unnamed(d: Path, named: set[str]) -> list[str]:
    """Delete the schedule files (*.sched, not hidden) of DIR that no entry names."""
    out = []
    for p in sorted(d.iterdir()):
        if (p.name.endswith(SCHEDULE_SUFFIX) and not p.name.startswith(".")
                and p.name not in named and p.is_file()):
            p.unlink(missing_ok=True)
            out.append(p.name)
    return out
