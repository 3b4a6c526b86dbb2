"""The compact form of bdr and bslb (version 2 of the description; docs/compact-bdr.md):
their tails, and their registration in desc.TAIL_FORMS.

What the explicit lists depend on (algorithms/bdr.py, bslb.py, pipeline._compile_one),
and so what the tails hold; everything else is in the 56-byte head (P, segments, byte
range, the FIFO threshold of the default cluster):

* bdr uses the arrivals a and tau only through two things: the pre-step counts
  ps[r] = floor((max a - a[r]) / tau + 1e-9) and the order `slowest first, ties by rank`.
  The tail holds exactly that class of the pattern, as integers, so C needs no floating
  point (no chance of a different rounding): each rank's *arrival class* (the index of
  its arrival time among the distinct ones, latest first; the order is (class, rank)),
  and ps per class as runs (ps is non-decreasing in the class: floor, IEEE subtraction
  and division are monotone).
* bslb uses only the order of the non-root ranks by (arrival, rank) and whether the root
  arrives after someone: the tail holds that order and the flag.
* Both are serial schedules, so the engine reduces to one question: are the background
  phases kept (pat) or is everything foreground (none, and ahead, which runs serial
  schedules wholly in the call)? The tail records the engine.

bdr tail (little-endian):

    offset  type            field
    0       u32             max_ps: the largest pre-step count M, at most MAX_PRE_STEPS
    4       u32             nclass: distinct arrival times, 1 .. P
    8       u32             nruns: runs of equal ps over the classes, 1 .. M + 1
    12      u8              engine: 0 pat, 1 none, 2 ahead
    13      u8              width: bytes per class id, 1 .. 4
    14      u16             reserved, 0
    16      nruns x 2 u32   (first class, ps): first classes 0, then increasing (< nclass);
                            ps increasing, the last one M
    16+8n   P x width       each rank's class id (< nclass)

bslb tail:

    0       u8              engine: 0 pat, 1 none, 2 ahead
    1       u8              root_late: 1 when rank 0 arrives after another rank
    2       u8              width: bytes per rank number, 1 .. 4
    3       u8              reserved, 0
    4       (P-1) x width   ranks 1 .. P-1 in the root's receive order (arrival, then rank)

At P = 65,536 the bdr tail is 16 + 8 (M + 1) + 2P bytes at most while there are at most
65,536 classes (132 KiB with every arrival distinct and M = 512), the bslb tail 4 + 2 (P - 1).
"""
from __future__ import annotations

import struct

import numpy as np

from ..errors import InputError
from ..inputs.arrivals import resolve_pattern
from ..inputs.units import parse_bytes_range as parse_bytes_arg
from ..passes import ENGINES
from .desc import CompactDesc, TailForm, _homogeneous_defaults, fifo_min_piece, register_tail

# The C generator replays the pre-steps on a window of 2 M + 3 ranks held on its stack
# (runtime/src/compact_bdr.c): M is bounded so that window (10 KiB) and the replay's time
# (O(M^2) per rank, twice: count and generate) stay small. More pre-steps than this:
# no compact form (--form auto writes the explicit file; bdr.py allows 10^6).
MAX_PRE_STEPS = 512
_BDR_HEAD = struct.Struct("<IIIBBH")
_BSLB_HEAD = struct.Struct("<BBBB")
SOURCE = "compact description: tail"


def _width(max_value: int) -> int:
    """Bytes that hold every value up to max_value (1 .. 4)."""
    return max(1, (int(max_value).bit_length() + 7) // 8)


def _pack(values: np.ndarray, width: int) -> bytes:
    return np.asarray(values, "<u4").view(np.uint8).reshape(-1, 4)[:, :width].tobytes()


def _unpack(data: bytes, n: int, width: int) -> np.ndarray:
    raw = np.frombuffer(data, np.uint8, n * width).reshape(n, width)
    out = np.zeros((n, 4), np.uint8)
    out[:, :width] = raw
    return out.reshape(-1).view("<u4").astype(np.int64)


# --- the pattern's class -----------------------------------------------------------

def pre_steps(arrivals, tau: float) -> np.ndarray:
    """ps per rank, as algorithms/bdr.py computes it (the same float64 expression)."""
    a = np.asarray(arrivals, float)
    if tau > 0:
        return np.floor((a.max() - a) / tau + 1e-9).astype(np.int64)
    return np.zeros(len(a), np.int64)


def arrival_classes(arrivals) -> np.ndarray:
    """Each rank's index among the distinct arrival times, latest first: bdr.py's order
    `sorted(range(p), key=lambda r: (-a[r], r))` is the order of (class, rank)."""
    a = np.asarray(arrivals, float)
    distinct = np.unique(a)  # ascending; -0.0 and 0.0 are one value, as Python compares them
    return len(distinct) - 1 - np.searchsorted(distinct, a)


def bdr_tail(arrivals, tau: float, engine: str = "pat") -> bytes:
    """The bdr tail of an arrival pattern (seconds, one per rank) and tau."""
    ps = pre_steps(arrivals, tau)
    cls = arrival_classes(arrivals)
    nclass = int(cls.max()) + 1 if len(cls) else 1
    ps_of = np.zeros(nclass, np.int64)
    ps_of[cls] = ps
    # ps is a function of the class and non-decreasing in it (module docstring)
    assert np.array_equal(ps_of[cls], ps) and np.all(np.diff(ps_of) >= 0)
    max_ps = int(ps.max()) if len(ps) else 0
    if max_ps > MAX_PRE_STEPS:
        raise InputError("--tau", f"{tau:g}", f"expected a tau giving at most {MAX_PRE_STEPS} "
                         f"pre-steps for the compact form of bdr, got {max_ps} (use --form explicit)")
    starts = np.r_[0, np.nonzero(np.diff(ps_of))[0] + 1]
    runs = np.stack([starts, ps_of[starts]], axis=1).astype("<u4").tobytes()
    width = _width(nclass - 1)
    return (_BDR_HEAD.pack(max_ps, nclass, len(starts), ENGINES.index(engine), width, 0)
            + runs + _pack(cls, width))


def bslb_order(arrivals) -> np.ndarray:
    """Ranks 1 .. P-1 by (arrival, rank): bslb.py's arrival_order."""
    a = np.asarray(arrivals, float)
    rest = np.arange(1, len(a))
    return rest[np.lexsort((rest, a[1:]))]


def bslb_tail(arrivals, engine: str = "pat") -> bytes:
    a = np.asarray(arrivals, float)
    p = len(a)
    late = bool(p > 1 and a[0] > a.min())
    width = _width(max(p - 1, 1))
    return _BSLB_HEAD.pack(ENGINES.index(engine), int(late), width, 0) + _pack(bslb_order(a), width)


# --- reading a tail back (desc.decode's check, and tests) --------------------------

def read_bdr_tail(desc: CompactDesc) -> dict:
    """The bdr tail's fields; InputError (one line, as C words it) for one C refuses."""
    why = _check_bdr(desc, keep=True)
    if isinstance(why, tuple):
        raise InputError(SOURCE, *why)
    return why


def _check_bdr(desc: CompactDesc, keep: bool = False):
    t, p = desc.tail, desc.nranks
    if desc.nseg != 1:
        return "nseg", f"expected 1 for bdr (it moves whole blocks), found {desc.nseg}"
    if len(t) < _BDR_HEAD.size:
        return "length", f"expected at least {_BDR_HEAD.size} bytes for bdr, found {len(t)}"
    m, nclass, nruns, engine, width, reserved = _BDR_HEAD.unpack_from(t)
    if m > MAX_PRE_STEPS:
        return "max_ps", f"expected at most {MAX_PRE_STEPS} pre-steps, found {m}"
    if not 1 <= nclass <= p:
        return "nclass", f"expected 1..{p}, found {nclass}"
    if not 1 <= nruns <= m + 1:
        return "nruns", f"expected 1..{m + 1}, found {nruns}"
    if engine >= len(ENGINES):
        return "engine", f"expected 0..{len(ENGINES) - 1}, found {engine}"
    if not 1 <= width <= 4 or reserved:
        return "width", f"expected 1..4 and a zero reserved word, found {width}, {reserved}"
    want = _BDR_HEAD.size + 8 * nruns + p * width
    if len(t) != want:
        return "length", f"expected {want} bytes, found {len(t)}"
    runs = np.frombuffer(t, "<u4", 2 * nruns, _BDR_HEAD.size).reshape(nruns, 2).astype(np.int64)
    first, ps = runs[:, 0], runs[:, 1]
    if first[0] != 0 or np.any(np.diff(first) <= 0) or first[-1] >= nclass:
        return "runs", "expected first classes 0, then increasing, below nclass"
    if np.any(np.diff(ps) <= 0) or ps[-1] != m:
        return "runs", f"expected increasing pre-step counts ending at max_ps {m}"
    cls = _unpack(t[_BDR_HEAD.size + 8 * nruns:], p, width)
    if len(cls) and cls.max() >= nclass:
        return "class", f"expected class ids below {nclass}, found {int(cls.max())}"
    if not keep:
        return None
    return {"max_ps": m, "engine": ENGINES[engine], "classes": cls,
            "ps": ps[np.searchsorted(first, cls, side="right") - 1]}


def read_bslb_tail(desc: CompactDesc) -> dict:
    why = _check_bslb(desc, keep=True)
    if isinstance(why, tuple):
        raise InputError(SOURCE, *why)
    return why


def _check_bslb(desc: CompactDesc, keep: bool = False):
    t, p = desc.tail, desc.nranks
    if len(t) < _BSLB_HEAD.size:
        return "length", f"expected at least {_BSLB_HEAD.size} bytes for bslb, found {len(t)}"
    engine, late, width, reserved = _BSLB_HEAD.unpack_from(t)
    if engine >= len(ENGINES):
        return "engine", f"expected 0..{len(ENGINES) - 1}, found {engine}"
    if late > 1 or not 1 <= width <= 4 or reserved:
        return "root_late", f"expected 0 or 1, a width 1..4 and a zero reserved byte, found {late}, {width}, {reserved}"
    want = _BSLB_HEAD.size + (p - 1) * width
    if len(t) != want:
        return "length", f"expected {want} bytes, found {len(t)}"
    order = _unpack(t[_BSLB_HEAD.size:], p - 1, width)
    # C checks the range only (it has no memory for a P-bit set); a repeated rank there is
    # caught by the runtime's dataflow check (a piece received twice). Python checks all.
    if len(order) and (order.min() < 1 or order.max() > p - 1):
        return "order", f"expected ranks 1..{p - 1}"
    if len(np.unique(order)) != len(order):
        return "order", "expected every rank 1..P-1 once"
    if not keep:
        return None
    return {"engine": ENGINES[engine], "root_late": bool(late), "order": order}


# --- what `collsched compile --form compact` asks ------------------------------------

def _common_refusal(args) -> str | None:
    if getattr(args, "topology", None) is not None:
        return "a topology file (the bdr and bslb tails describe the default cluster only)"
    if getattr(args, "duplex", None) not in (None, "full"):
        return "half duplex (the compact form describes full duplex only)"
    return None


def _inputs(args):
    """(P, (lo, hi), nseg, arrivals, engine) as compile_schedule takes them."""
    p = args.ranks
    lo, hi = parse_bytes_arg(args.bytes)
    seg = str(getattr(args, "segments", "auto") or "auto")
    if seg != "auto" and not (seg.isascii() and seg.isdigit() and 1 <= int(seg) <= 65535):
        raise InputError("--segments", seg, "expected 1..65535 or auto")
    nseg = 1 if seg == "auto" else int(seg)  # auto: 1 on the default cluster (policy.segment_candidates)
    pattern = resolve_pattern(p, getattr(args, "pap", None))
    arrivals = pattern[0] - pattern[0].min()  # as pipeline._compile_one gives the algorithm
    engine = getattr(args, "engine", None) or "pat"
    if engine not in ENGINES:
        raise InputError("--engine", str(engine), "expected " + " or ".join(ENGINES))
    return p, (lo, hi), nseg, arrivals, engine


def default_tau(nbytes: int) -> float:
    """algorithms/bdr.py default_tau on the default cluster: the median over rank pairs of
    one block's time. Every pair is alike there, so it is taken on two ranks (the cost
    model's homogeneous topology stops at 8192 ranks); the median of equal values is the
    value, so this is the explicit compile's tau at every P (a test compares them)."""
    from ..algorithms.bdr import default_tau as explicit_tau
    from ..algorithms.registry import Request
    from ..inputs.topology import homogeneous

    return explicit_tau(Request(nranks=2, nbytes=nbytes, nseg=1, topology=homogeneous(2)))


def _tau(args, nbytes: int) -> float:
    text = getattr(args, "tau", None)
    if text is None:
        return default_tau(nbytes)
    if isinstance(text, (int, float)):
        tau = float(text)
    else:
        from ..inputs.units import parse_time
        try:
            tau = parse_time(text)
        except ValueError as e:
            raise InputError("--tau", text, str(e)) from None
    if not tau > 0:
        raise InputError("--tau", str(text), "expected a positive time")
    return tau


def describe_bdr(args) -> CompactDesc:
    why = _common_refusal(args)
    if why:
        raise InputError("--form compact", "", f"no compact description for this compile: {why}")
    p, (lo, hi), nseg, arrivals, engine = _inputs(args)
    if nseg != 1:
        raise InputError("--algorithm", "bdr", "bdr moves whole blocks (one segment per rank); use --segments 1")
    return bdr_desc(arrivals, _tau(args, hi), (lo, hi), engine)


def describe_bslb(args) -> CompactDesc:
    why = _common_refusal(args)
    if why:
        raise InputError("--form compact", "", f"no compact description for this compile: {why}")
    p, (lo, hi), nseg, arrivals, engine = _inputs(args)
    return bslb_desc(arrivals, (lo, hi), nseg, engine)


def bdr_desc(arrivals, tau: float, nbytes, engine: str = "pat") -> CompactDesc:
    """The description of bdr compiled on the default cluster for these arrivals (seconds,
    the pipeline's: minus their minimum), tau, bytes (B or (MIN, MAX)) and engine."""
    lo, hi = (nbytes, nbytes) if isinstance(nbytes, int) else nbytes
    latency, bandwidth = _homogeneous_defaults()
    return CompactDesc("bdr", len(arrivals), 1, lo, hi, fifo_min_piece(hi, latency, bandwidth),
                       tail=bdr_tail(arrivals, tau, engine))


def bslb_desc(arrivals, nbytes, nseg: int = 1, engine: str = "pat") -> CompactDesc:
    lo, hi = (nbytes, nbytes) if isinstance(nbytes, int) else nbytes
    latency, bandwidth = _homogeneous_defaults()
    return CompactDesc("bslb", len(arrivals), nseg, lo, hi, fifo_min_piece(hi, latency, bandwidth),
                       tail=bslb_tail(arrivals, engine))


def _bdr_refusal(args) -> str | None:
    if args is None:
        return None
    why = _common_refusal(args)
    if why:
        return why
    seg = str(getattr(args, "segments", "auto") or "auto")
    if seg not in ("auto", "1"):
        return "bdr moves whole blocks (one segment per rank)"
    p, (lo, hi), _, arrivals, _ = _inputs(args)
    m = int(pre_steps(arrivals, _tau(args, hi)).max()) if p else 0
    if m > MAX_PRE_STEPS:
        return f"{m} pre-steps (the compact generator replays at most {MAX_PRE_STEPS})"
    return None


def _bslb_refusal(args) -> str | None:
    return None if args is None else _common_refusal(args)


def _verify(desc: CompactDesc) -> str | None:
    """verify of a record alone: the lists compared with the explicit compiler's for a
    pattern that reproduces the tail's class (pattern_of), whose files the verifier proves."""
    return first_difference(desc)


register_tail("bdr", TailForm(_check_bdr, _bdr_refusal, describe_bdr, lambda d: _verify(d)))
register_tail("bslb", TailForm(_check_bslb, _bslb_refusal, describe_bslb, lambda d: _verify(d)))


# --- the explicit side, for the proof (tests, tools/prove_compact_bdr.py, verify) -----

def pattern_of(desc: CompactDesc) -> tuple[np.ndarray, float | None]:
    """(arrivals, tau) that the explicit compiler turns into the lists `desc` describes:
    for bdr, with tau = 1 s, class c (ps_c pre-steps) arrives at -(ps_c + c / (2 nclass))
    (the floor gives ps_c back; later classes arrive earlier); for bslb, the i-th rank of
    the order at i + 1, and the root at 0 or, when late, after everybody."""
    p = desc.nranks
    if desc.algorithm == "bdr":
        t = read_bdr_tail(desc)
        cls = t["classes"]
        nclass = int(cls.max()) + 1 if len(cls) else 1
        return -(t["ps"] + cls / (2.0 * nclass)), 1.0
    t = read_bslb_tail(desc)
    a = np.zeros(p)
    a[t["order"]] = np.arange(1, p, dtype=float)
    a[0] = float(p) if t["root_late"] else 0.0
    return a, None


def engine_of(desc: CompactDesc) -> str:
    return (read_bdr_tail(desc) if desc.algorithm == "bdr" else read_bslb_tail(desc))["engine"]


def explicit(desc: CompactDesc, arrivals=None, tau: float | None = None):
    """The explicit compiler's lists for `desc` as pipeline._compile_one makes them on the
    default cluster (generate, the engine's phases, passes.apply), from `arrivals` and
    `tau` (the pipeline's: minus their minimum), or from pattern_of(desc)."""
    from .. import passes
    from ..algorithms import Request, generate
    from ..inputs.topology import homogeneous

    if arrivals is None:
        arrivals, tau = pattern_of(desc)
    latency, bandwidth = _homogeneous_defaults()
    topo = homogeneous(desc.nranks, latency, bandwidth)
    req = Request(nranks=desc.nranks, nbytes=desc.bytes_max, nseg=desc.nseg, full_duplex=True,
                  topology=topo, arrivals=np.asarray(arrivals, float), tau=tau)
    sched = generate(desc.algorithm, req)
    engine = engine_of(desc)
    if engine == "none" or (engine == "ahead" and (sched.serial or desc.bytes_min != desc.bytes_max)):
        passes.all_foreground(sched)
    elif engine == "ahead":
        passes.leading_receives_only(sched)
    sched = passes.apply(sched, topo, desc.bytes_max)
    if engine == "ahead" and not sched.serial and desc.bytes_min == desc.bytes_max:
        passes.leading_receives_only(sched)
    return sched


def first_difference(desc: CompactDesc, arrivals=None, tau: float | None = None,
                     ranks=None) -> str | None:
    """None when the generated list of every rank (or of `ranks`) equals the explicit one
    column by column, else one line naming the first rank and operation that differ."""
    from .identity import COLUMNS
    from .native import generate as generated

    want = explicit(desc, arrivals, tau)
    for r in range(desc.nranks) if ranks is None else ranks:
        got = generated(desc, r)
        lo, hi = int(want.offsets[r]), int(want.offsets[r + 1])
        if len(got) != hi - lo:
            return f"{desc.algorithm} P={desc.nranks}: rank {r}: {len(got)} ops generated, explicit has {hi - lo}"
        cols = {"kind": got["kind"], "peer": got["peer"], "origin": got["origin"],
                "segment": got["segment"], "phase": got["flags"] & 1, "fifo": got["flags"] >> 1}
        for col in COLUMNS:
            bad = np.nonzero(getattr(want, col)[lo:hi] != cols[col])[0]
            if len(bad):
                i = int(bad[0])
                return (f"{desc.algorithm} P={desc.nranks}: rank {r} op {i}: {col} generated "
                        f"{int(cols[col][i])}, explicit {int(getattr(want, col)[lo + i])}")
    return None
