"""The schedule cache's index, `DIR/index` (docs/cache.md, version 1): entries, reading
with every field checked, writing.

`parse_index` refuses any line that breaks the format with one InputError naming the
file, the line and field, and what was expected (the runtime refuses such a cache whole);
`format_index` writes only what `parse_index` accepts (it checks its own output).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..errors import InputError

INDEX_NAME = "index"
HEADER = "collsched-cache 1"
COLLECTIVES = ("allgather", "allgatherv")
MAX_RANKS = 65536
MAX_BYTES = (1 << 63) - 1
MAX_USES = (1 << 63) - 1
MAX_SITE_BYTES = 255
MAX_FILE_NAME = 255
REGULAR = "regular"
ANY_SITE = "*"
FIELDS = ("FILE", "COLLECTIVE", "RANKS", "BYTES_MIN", "BYTES_MAX", "SITE", "TOPOLOGY", "CLASS",
          "RADIUS", "USES", "PATTERN")

_WHOLE = re.compile(r"0|[1-9][0-9]{0,18}", re.ASCII)
_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?", re.ASCII)
_HEX16 = re.compile(r"[0-9a-f]{16}", re.ASCII)
_PRINTABLE = re.compile(r"[\x21-\x7e]+", re.ASCII)


@dataclass(frozen=True)
class Entry:
    """One `entry` line. klass: None for `regular`, else the class number; radius and
    pattern (RANKS offsets, seconds, the smallest 0) None for regular."""
    file: str
    collective: str
    ranks: int
    bytes_min: int
    bytes_max: int
    site: str
    topology: str  # 16 hex digits or "-"
    klass: int | None
    radius: float | None
    uses: int
    pattern: tuple[float, ...] | None

    @property
    def regular(self) -> bool:
        return self.klass is None

    @property
    def group(self) -> tuple:
        """What one `regular` entry at most and each class number once serve: COLLECTIVE,
        SITE, RANKS and the byte range (docs/cache.md)."""
        return (self.collective, self.site, self.ranks, self.bytes_min, self.bytes_max)

    def line(self) -> str:
        return " ".join(("entry", self.file, self.collective, str(self.ranks), str(self.bytes_min),
                         str(self.bytes_max), self.site, self.topology,
                         REGULAR if self.klass is None else str(self.klass),
                         "-" if self.radius is None else _num(self.radius), str(self.uses),
                         "-" if self.pattern is None else ",".join(map(_num, self.pattern))))

    def to_dict(self) -> dict:
        return {"file": self.file, "collective": self.collective, "ranks": self.ranks,
                "bytes_min": self.bytes_min, "bytes_max": self.bytes_max, "site": self.site,
                "topology": self.topology, "class": REGULAR if self.klass is None else self.klass,
                "radius_s": self.radius, "uses": self.uses,
                "pattern_s": None if self.pattern is None else list(self.pattern)}


def _num(x: float) -> str:
    """A float as the index writes it: the shortest text that reads back the same value."""
    return repr(float(x))


def check_site(site: str) -> str | None:
    """Why `site` is not a call site the index can hold, or None: 1 to 255 printable
    ASCII characters, no space (as runtime/src/cache.c reads it; a trace's site names may
    also be other UTF-8, which no index entry can name), or *."""
    if site == ANY_SITE:
        return None
    if not _PRINTABLE.fullmatch(site) or len(site) > MAX_SITE_BYTES:
        return f"expected a call site of 1 to {MAX_SITE_BYTES} printable ASCII characters, no spaces, or *"
    return None


def check_file_name(name: str) -> str | None:
    if (not _PRINTABLE.fullmatch(name) or "/" in name or name.startswith(".")
            or len(name) > MAX_FILE_NAME or name == INDEX_NAME):
        return (f"expected a file name inside the cache directory (1 to {MAX_FILE_NAME} printable "
                f"ASCII characters, no '/' or space, not starting with '.', not 'index')")
    return None


class _Line:
    def __init__(self, source: str, number: int, fields: list[str]):
        self.source, self.number, self.fields = source, number, fields

    def fail(self, name: str, expected: str) -> InputError:
        return InputError(self.source, f"line {self.number}: {name}", expected)

    def get(self, name: str) -> str:
        return self.fields[FIELDS.index(name) + 1]

    def whole(self, name: str, lo: int, hi: int) -> int:
        text = self.get(name)
        if not _WHOLE.fullmatch(text) or not lo <= int(text) <= hi:
            raise self.fail(name, f"expected a whole number {lo}..{hi}, got {text!r}")
        return int(text)

    def seconds(self, name: str, text: str) -> float:
        v = float(text) if _NUMBER.fullmatch(text) else math.nan
        if not math.isfinite(v):
            raise self.fail(name, f"expected a finite non-negative number of seconds, got {text!r}")
        return v


def parse_entry(fields: list[str], source: str, number: int) -> Entry:
    """One `entry` line split at spaces; InputError naming the line and field."""
    ln = _Line(source, number, fields)
    if len(fields) != len(FIELDS) + 1:
        raise ln.fail("entry", f"expected {len(FIELDS)} fields ({' '.join(FIELDS)}), got {len(fields) - 1}")
    name = ln.get("FILE")
    if (why := check_file_name(name)) is not None:
        raise ln.fail("FILE", why)
    collective = ln.get("COLLECTIVE")
    if collective not in COLLECTIVES:
        raise ln.fail("COLLECTIVE", f"expected {' or '.join(COLLECTIVES)}, got {collective!r}")
    ranks = ln.whole("RANKS", 1, MAX_RANKS)
    lo = ln.whole("BYTES_MIN", 0, MAX_BYTES)
    hi = ln.whole("BYTES_MAX", 0, MAX_BYTES)
    if hi < lo:
        raise ln.fail("BYTES_MAX", f"expected at least BYTES_MIN ({lo}), got {hi}")
    site = ln.get("SITE")
    if (why := check_site(site)) is not None:
        raise ln.fail("SITE", why)
    topo = ln.get("TOPOLOGY")
    if topo != "-" and not _HEX16.fullmatch(topo):
        raise ln.fail("TOPOLOGY", f"expected 16 lower-case hex digits or -, got {topo!r}")
    ktext = ln.get("CLASS")
    if ktext == REGULAR:
        klass = None
    elif _WHOLE.fullmatch(ktext) and int(ktext) <= MAX_RANKS * 16:
        klass = int(ktext)
    else:
        raise ln.fail("CLASS", f"expected regular or a class number 0..{MAX_RANKS * 16}, got {ktext!r}")
    rtext, ptext = ln.get("RADIUS"), ln.get("PATTERN")
    uses = ln.whole("USES", 0, MAX_USES)
    if klass is None:
        for f, text in (("RADIUS", rtext), ("PATTERN", ptext)):
            if text != "-":
                raise ln.fail(f, f"expected - for a regular entry, got {text!r}")
        return Entry(name, collective, ranks, lo, hi, site, topo, None, None, uses, None)
    radius = ln.seconds("RADIUS", rtext)
    parts = ptext.split(",")
    if len(parts) != ranks:
        raise ln.fail("PATTERN", f"expected {ranks} comma-separated offsets (RANKS), got {len(parts)}")
    pattern = tuple(ln.seconds("PATTERN", p) for p in parts)
    if min(pattern) != 0.0:
        raise ln.fail("PATTERN", f"expected the smallest offset 0, got {min(pattern)!r}")
    return Entry(name, collective, ranks, lo, hi, site, topo, klass, radius, uses, pattern)


def parse_index(text: str, source: str) -> list[Entry]:
    """The entries of an index file's text; InputError (source, line and field, what was
    expected) for the first line that breaks the format or a rule across lines."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or lines[0] != HEADER:
        raise InputError(source, "line 1", f"expected the first line {HEADER!r}")
    entries: list[Entry] = []
    files, regular, classes = {}, {}, {}
    for number, line in enumerate(lines[1:], start=2):
        if line.startswith("#"):
            continue
        fields = line.split(" ")
        if fields[0] != "entry":
            raise InputError(source, f"line {number}", "expected a line 'entry FILE ...' or a '#' comment, "
                                                       f"got {line[:40]!r}")
        e = parse_entry(fields, source, number)
        where = InputError(source, f"line {number}: FILE", "")
        if e.file in files:
            raise InputError(where.source, where.field, f"expected each FILE once, {e.file} is on "
                                                        f"line {files[e.file]} too")
        files[e.file] = number
        seen = regular if e.regular else classes
        key = e.group if e.regular else (*e.group, e.klass)
        if key in seen:
            what = "one regular entry" if e.regular else f"class {e.klass} once"
            raise InputError(source, f"line {number}: CLASS", f"expected {what} at most per COLLECTIVE, "
                                                              f"SITE, RANKS and byte range (line {seen[key]} too)")
        seen[key] = number
        entries.append(e)
    return entries


def format_index(entries: list[Entry], comment: str | None = None) -> str:
    """The index file's text (checked: parse_index reads it back the same)."""
    head = [HEADER] + [f"# {c}" for c in (comment or "").splitlines() if c.strip()]
    text = "\n".join(head + [e.line() for e in entries]) + "\n"
    back = parse_index(text, "<index being written>")
    if back != list(entries):  # a float that does not read back, a field with a space
        raise ValueError("format_index: the index does not read back as written")
    return text


def pattern_tuple(pattern) -> tuple[float, ...]:
    """A class pattern as the index holds it: finite offsets, the smallest exactly 0."""
    a = np.asarray(pattern, dtype=np.float64)
    a = a - a.min()
    return tuple(float(v) for v in a)
