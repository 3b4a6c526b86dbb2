"""Quantities with units, as users write them in YAML inputs.

    time       50us, 50 ms, 0.05s, 1e-6          (bare number = seconds)
    bandwidth  1Gbit/s, 85.19 Mbit/s, 10Gb/s, 125MB/s, 1.5GiB/s   (bare number = bytes/s)
    size       64KiB, 4MiB, 1000                  (bare number = bytes)

Bits and bytes follow the usual convention: a lower-case ``b`` (``Mbit/s``, ``Mb/s``,
``Mbps``) counts bits, an upper-case ``B`` (``MB/s``, ``MBps``) bytes; 1 Mbit/s = 1e6 bits/s
= 125,000 bytes/s. k/K, M, G, T are decimal (1e3 ...); Ki, Mi, Gi, Ti are binary (1024 ...).

The parsers raise ValueError with a message that can be shown to the user as is; callers
that know the file and field turn it into an InputError.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

from ..errors import InputError

_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
# ASCII digits only: int() and \d would read other scripts' digits ('٣' as 3).
_QUANTITY = re.compile(rf"^\s*(?P<num>{_NUMBER})\s*(?P<unit>[^\s\d.+-][^\s]*)?\s*$", re.ASCII)

# Scaling is done in decimal (value * 10**exp exactly, then rounded once), so that
# '50us' gives the same float as 50e-6 and '85.19 Mbit/s' the same as 85.19e6 / 8.
_TIME_EXP = {"s": 0, "sec": 0, "ms": -3, "us": -6, "µs": -6, "μs": -6, "ns": -9}
TIME_UNITS = {u: 10.0**e for u, e in _TIME_EXP.items()}

_DECIMAL_EXP = {"": 0, "k": 3, "K": 3, "M": 6, "G": 9, "T": 12, "P": 15}
_BINARY_EXP = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50}  # powers of two
_PREFIXES = {**{p: 10.0**e for p, e in _DECIMAL_EXP.items()},
             **{p: 2.0**e for p, e in _BINARY_EXP.items()}}


# The largest power of ten a quantity may carry: beyond it a float is inf (or 0) anyway,
# and Decimal would raise its own Overflow instead of a message (1e999999999).
_MAX_EXP10 = 400


def _decimal(num: str) -> Decimal:
    """The number's text as an exact Decimal, or ValueError when it is beyond any float."""
    d = Decimal(num)
    if d and not -_MAX_EXP10 <= d.adjusted() <= _MAX_EXP10:
        raise ValueError(f"{_show(num)} is out of range (a power of ten within +-{_MAX_EXP10} expected)")
    return d


def _scale(num: str, prefix: str, extra_exp10: int = 0) -> float:
    """float(num * prefix * 10**extra_exp10), rounded once."""
    exp10 = _DECIMAL_EXP.get(prefix, 0) + extra_exp10
    value = float(_decimal(num).scaleb(exp10))
    return value * 2.0**_BINARY_EXP.get(prefix, 0)


# Bytes per rank: the schedule file's field is u64; the compiler computes piece bounds in
# signed 64 bits, so sizes go up to 2^63 - 1 (about 9.2 EB), parsed as exact integers.
MAX_BYTES = (1 << 63) - 1

# bandwidth: <prefix><base>, base in bits or bytes per second
_BW_BASES = {"bit/s": 1 / 8, "b/s": 1 / 8, "bps": 1 / 8, "B/s": 1.0, "Bps": 1.0}
_BW_UNIT = re.compile(r"^(?P<prefix>[kKMGTP]i?|)(?P<base>bit/s|b/s|bps|B/s|Bps)$")
_SIZE_UNIT = re.compile(r"^(?P<prefix>[kKMGTP]i?|)B$")

TIME_HELP = "s, ms, us, ns"
BANDWIDTH_HELP = "bit/s, kbit/s, Mbit/s, Gbit/s, Mb/s, Mbps, B/s, KB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s"
SIZE_HELP = "B, KB, MB, GB, KiB, MiB, GiB"


def _split(text, kind: str) -> tuple[str, str]:
    """Number (as text) and unit of a quantity (a number passes through with unit '')."""
    if isinstance(text, bool) or not isinstance(text, (int, float, str)):
        raise ValueError(f"expected a {kind} (a number or a string such as the examples), "
                         f"got {type(text).__name__}")
    if isinstance(text, (int, float)):
        if not math.isfinite(text):
            raise ValueError(f"expected a finite {kind}, got {_show(text)}")
        return repr(text), ""
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(f"cannot read {_show(text)} as a {kind}: expected a number followed "
                         f"by an optional unit")
    return m.group("num"), m.group("unit") or ""


def parse_time(text) -> float:
    """Seconds from '50us', '50 ms', '0.05s', '1e-6' or a bare number (seconds)."""
    num, unit = _split(text, "time")
    if unit not in _TIME_EXP and unit != "":
        raise ValueError(f"unknown time unit {_show(unit)} in {_show(text)} (use {TIME_HELP})")
    return _finite(_scale(num, "", _TIME_EXP.get(unit, 0)), text, "time")


def parse_bandwidth(text) -> float:
    """Bytes per second from '1Gbit/s', '85.19 Mbit/s', '125MB/s', '1.5GiB/s' or a number."""
    num, unit = _split(text, "bandwidth")
    if unit == "":
        return _finite(_scale(num, ""), text, "bandwidth")
    m = _BW_UNIT.match(unit)
    if not m:
        raise ValueError(f"unknown bandwidth unit {_show(unit)} in {_show(text)} (use {BANDWIDTH_HELP})")
    value = _scale(num, m.group("prefix")) * _BW_BASES[m.group("base")]  # /8 is exact
    return _finite(value, text, "bandwidth")


def parse_bytes(text) -> int:
    """A whole number of bytes from '64KiB', '4MiB', '1.5KB', '1000' (bare number = bytes)."""
    num, unit = _split(text, "size")
    prefix = ""
    if unit:
        m = _SIZE_UNIT.match(unit)
        if not m:
            raise ValueError(f"unknown size unit {_show(unit)} in {_show(text)} (use {SIZE_HELP})")
        prefix = m.group("prefix")
    # Exactly, as a fraction: no float round trip (2^53 + 1 stays itself).
    d = _decimal(num)
    if d and d.adjusted() + _DECIMAL_EXP.get(prefix, 0) > 30:
        raise ValueError(f"expected a size of at most {MAX_BYTES} bytes (2^63 - 1), got {_show(text)}")
    value = Fraction(d) * 10**_DECIMAL_EXP.get(prefix, 0) * 2**_BINARY_EXP.get(prefix, 0)
    if value < 0:
        raise ValueError(f"expected a non-negative size, got {_show(text)}")
    if value.denominator != 1:
        raise ValueError(f"expected a whole number of bytes, got {_show(text)}")
    if value > MAX_BYTES:
        raise ValueError(f"expected a size of at most {MAX_BYTES} bytes (2^63 - 1), got {_show(text)}")
    return int(value)


def _show(text, limit: int = 40) -> str:
    """repr of a user's value for a message, cut to `limit` characters."""
    r = repr(text) if not isinstance(text, int) or abs(text) < 10**limit else f"<{text.bit_length()}-bit integer>"
    return r if len(r) <= limit else r[:limit - 4] + "...'"


def _finite(value: float, text, kind: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"expected a finite {kind}, got {_show(text)}")
    return value


def time_unit_factor(unit: str) -> float:
    """Seconds per unit, for a column of bare numbers in that unit ('ms' -> 1e-3)."""
    if unit not in TIME_UNITS:
        raise ValueError(f"unknown time unit {_show(unit)} (use {TIME_HELP})")
    return TIME_UNITS[unit]


def bandwidth_unit_factor(unit: str) -> float:
    """Bytes/s per unit ('Mbit/s' -> 125000.0)."""
    m = _BW_UNIT.match(unit) if isinstance(unit, str) else None
    if not m:
        raise ValueError(f"unknown bandwidth unit {_show(unit)} (use {BANDWIDTH_HELP})")
    return _PREFIXES[m.group("prefix")] * _BW_BASES[m.group("base")]


# --- formatting (for files the tools write and for messages) --------------------------

def format_time(seconds: float) -> str:
    """A short readable time: 5e-05 -> '50us'. Exact: parse_time(format_time(x)) == x."""
    x = float(seconds)
    if x == 0:
        return "0s"
    for unit, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if abs(x) >= f or unit == "ns":
            text = f"{_num(x / f)}{unit}"
            if parse_time(text) == x:
                return text
            break
    return f"{x!r}s"


def format_bandwidth(bps: float) -> str:
    """A short readable bandwidth: 125e6 -> '1Gbit/s'. Exact round trip as format_time."""
    x = float(bps)
    bits = x * 8
    for unit, f in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if abs(bits) >= f:
            text = f"{_num(bits / f)}{unit}"
            if parse_bandwidth(text) == x:
                return text
    return f"{x!r}B/s"


def format_bytes(n: int) -> str:
    n = int(n)
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n and n % f == 0:
            return f"{n // f}{unit}"
    return str(n)


def _num(v: float) -> str:
    r = repr(float(v))
    return r[:-2] if r.endswith(".0") else r


def parse_bytes_range(text: str) -> tuple[int, int]:
    """`B` or `MIN:MAX` bytes per rank (unit suffixes allowed: 64KiB, 4MiB), as the CLI's
    --bytes takes it; InputError naming --bytes otherwise."""
    parts = str(text).split(":")
    try:
        if len(parts) == 1:
            b = parse_bytes(parts[0])
            lo, hi = b, b
        elif len(parts) == 2:
            lo, hi = parse_bytes(parts[0]), parse_bytes(parts[1])
        else:
            raise ValueError("expected B or MIN:MAX")
    except ValueError as e:
        raise InputError("--bytes", str(text), f"expected bytes per rank as B or MIN:MAX ({e})") from None
    if lo < 0 or hi < lo:
        raise InputError("--bytes", str(text), "expected 0 <= MIN <= MAX")
    return lo, hi
