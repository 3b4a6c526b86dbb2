"""Process arrival patterns (PAPs): when each rank enters the collective.

A PAP file (YAML, docs/inputs.md, schema in schemas.PAP_SCHEMA) holds one arrival time per
rank, or several iterations of them:

    unit: ms
    arrivals: [0, 1.5, 0.2, 3]          # one iteration
    # or
    iterations:
      - [0, 1.5, 0.2, 3]
      - [2, 0, 0.1, 0]

Values are bare numbers in `unit` (default s) or quantity strings such as '1.5ms'.
`load_pap` returns an array of shape (iterations, P) in seconds. It also reads an arrival
trace (docs/trace-format.md, detected by its magic) that holds one call site of the
right size: one iteration per call.
"""
from __future__ import annotations

import math

import numpy as np
import yaml

from . import units
from ..errors import InputError
from ..files import write_atomic
from ..patterns.tracefile import Trace, groups, is_trace, read_trace
from .schemas import PAP_SCHEMA, describe, read_yaml
from .topology import MAX_TIME_S


def _trace_pattern(path, trace: Trace, nranks: int | None) -> np.ndarray:
    """The arrivals of the trace's one (call site, communicator) group of `nranks` ranks
    (any size when None): one iteration per call, each call's earliest rank at 0."""
    every = groups(trace)
    found = [g for g in every if nranks is None or g.size == nranks]
    if len(found) == 1:
        g = found[0]
        block = next(b for b in trace.blocks if b.comm == g.comm)
        return block.arrivals[block.site == g.site].copy()
    listed = "; ".join(f"{g.site_name}@{g.comm} ({g.size} ranks, {g.ncalls} calls)"
                       for g in every) or "no calls"
    size = f" of {nranks} ranks" if nranks is not None else ""
    what = "no call site" if not found else "several call sites"
    raise InputError(str(path), "calls", f"expected one call site{size} in the trace, found "
                                         f"{what}{size} ({listed}); write one with collsched "
                                         f"trace {path} --export-pap OUT.yaml --site SITE")


def load_pap(path, nranks: int | None = None) -> np.ndarray:
    """Arrival times in seconds, shape (iterations, P); InputError for any bad input.
    An arrival trace is read as its one call site (of nranks ranks, when given)."""
    if is_trace(path):
        return _trace_pattern(path, read_trace(path), nranks)
    doc = read_yaml(path, PAP_SCHEMA)
    d = doc.data
    if ("arrivals" in d) == ("iterations" in d):
        both = "arrivals" in d
        raise doc.fail(["iterations" if both else "arrivals"],
                       "give either arrivals (one iteration) or iterations (a list of them), "
                       + ("not both" if both else "one is required"),
                       line_at=None if both else [])
    unit = d.get("unit", "s")
    try:
        units.time_unit_factor(unit)  # validates the unit
    except ValueError as e:
        raise doc.fail(["unit"], str(e)) from None
    if "arrivals" in d:
        rows, paths = [d["arrivals"]], [["arrivals"]]
    else:
        rows = d["iterations"]
        paths = [["iterations", i] for i in range(len(rows))]
    expected = nranks if nranks is not None else len(rows[0])
    out = np.empty((len(rows), expected), dtype=np.float64)
    for row, path in zip(rows, paths):
        if len(row) != expected:
            why = "one per rank" if nranks is not None else "as many as in the first iteration"
            raise doc.fail(path, f"expected {expected} arrival times ({why}), got {len(row)}")
    for k, (row, path) in enumerate(zip(rows, paths)):
        for r, v in enumerate(row):
            t = math.nan
            try:
                if isinstance(v, float) and math.isfinite(v) or (
                        isinstance(v, int) and not isinstance(v, bool) and abs(v) <= 1e300):
                    t = units.parse_time(f"{v!r}{unit}")  # a bare number is in the file's unit
                elif isinstance(v, str):
                    t = units.parse_time(v)
            except ValueError as e:
                raise doc.fail(path + [r], str(e)) from None
            except ArithmeticError:  # '1e999999999 s': too large for a float
                pass
            if isinstance(v, float) and not math.isfinite(v) or math.isnan(t) and not isinstance(v, str):
                raise doc.fail(path + [r], f"expected a finite time, got {describe(v)}")
            if not 0 <= t <= MAX_TIME_S:  # NaN too
                raise doc.fail(path + [r], f"expected a non-negative, finite arrival time of at "
                                           f"most {MAX_TIME_S:g} s, got {describe(v)}")
            out[k, r] = t
    return out


def write_pap(path, arrivals_2d, unit: str = "s", comment: str | None = None) -> None:
    """Write arrival times (seconds; shape (P,) or (iterations, P)) as a PAP file."""
    a = np.asarray(arrivals_2d, dtype=np.float64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] < 1 or a.shape[0] < 1:
        raise ValueError(f"write_pap: expected shape (P,) or (iterations, P), got {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError("write_pap: arrival times must be finite and non-negative")
    factor = units.time_unit_factor(unit)
    rows = [[float(v) for v in row / factor] for row in a]
    doc = {"unit": unit}
    if len(rows) == 1:
        doc["arrivals"] = rows[0]
    else:
        doc["iterations"] = rows
    head = "# collsched process arrival pattern (docs/inputs.md): one time per rank.\n"
    if comment:
        head += "".join(f"# {line}\n" for line in str(comment).splitlines())
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100000)
    write_atomic(path, head + body)


def flat(nranks: int) -> np.ndarray:
    """The flat pattern: every rank arrives at time 0."""
    if int(nranks) < 1:
        raise InputError("<flat>", "nranks", f"expected at least 1 rank, got {nranks}")
    return np.zeros(int(nranks), dtype=np.float64)


def resolve_pattern(nranks: int, pap_path: str | None) -> np.ndarray:
    """Arrival pattern as (iterations, P) seconds; one flat iteration by default."""

    if pap_path is None:
        return np.zeros((1, nranks))
    return load_pap(pap_path, nranks)
