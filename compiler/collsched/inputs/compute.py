"""Reduction cost: what combining bytes costs the CPU of the host that receives them.

A topology file may carry a top-level section (docs/inputs.md, "Reduction cost")

    reduction:
      gamma_s_per_byte: 2.5e-10      # or a time such as 0.25ns (per byte)

Combining m bytes of an incoming partial result into a rank's accumulator (a receive-and-
reduce of collectives/program.py) costs gamma * m seconds of that rank's host CPU, one
reduction after the other on a host (collectives/model.py, fluid.py, bounds.py).
Absent: gamma = 0 (reductions are free). `collsched measure` measures it
(lab/gamma.py, runtime/measure/collsched_gamma.c) and writes the section back.

topology.py keeps the value as Topology.reduction_gamma and calls `read` when loading,
`section` when writing and digesting; everything else about it lives here.
"""
from __future__ import annotations

import dataclasses
import math

KEY = "reduction"
FIELD = "gamma_s_per_byte"
# One second per byte is far beyond any CPU (a 1 MiB reduction would take 12 days): the
# limit keeps every time the models compute finite.
MAX_GAMMA_S_PER_BYTE = 1.0

SCHEMA = {
    "type": "object",
    "x-expect": "expected a mapping {gamma_s_per_byte: <seconds per byte>}",
    "properties": {
        FIELD: {"type": ["number", "string"],
                "x-expect": "expected seconds per byte: a number such as 2.5e-10 or a time "
                            "such as 0.25ns"},
    },
    "required": [FIELD],
    "additionalProperties": False,
}


def parse_gamma(reader, spec) -> float:
    """gamma_s_per_byte of a schema-checked `reduction:` mapping; reader is topology's
    _Reader (its one-line errors name the field)."""
    parts = [KEY, FIELD]
    value = spec[FIELD]
    if isinstance(value, bool):
        raise reader.fail(parts, f"expected seconds per byte (a non-negative number), got {value!r}")
    g = reader.time(value, parts, "time per byte")  # numbers are seconds; units allowed
    if not (math.isfinite(g) and 0.0 <= g <= MAX_GAMMA_S_PER_BYTE):
        raise reader.fail(parts, f"expected 0 to {MAX_GAMMA_S_PER_BYTE:g} seconds per byte, "
                                 f"got {value!r}")
    return float(g)


def read(reader, topo):
    """The topology with the file's reduction cost (unchanged when the file has none)."""
    spec = reader.d.get(KEY)
    if spec is None:
        return topo
    return dataclasses.replace(topo, reduction_gamma=parse_gamma(reader, spec))


def section(topo) -> dict:
    """{"reduction": {...}} to write or digest, {} when gamma is 0 (files and digests of
    topologies without it stay as they were)."""
    g = reduction_gamma(topo)
    return {KEY: {FIELD: g}} if g > 0 else {}


def reduction_gamma(topology) -> float:
    """Seconds per reduced byte on the receiving host (0 when the topology has none)."""
    if topology is None:
        return 0.0
    return float(getattr(topology, "reduction_gamma", 0.0) or 0.0)


def with_gamma(topology, gamma: float):
    """The same topology with another reduction cost (tests, the lab)."""
    g = float(gamma)
    if not (math.isfinite(g) and 0.0 <= g <= MAX_GAMMA_S_PER_BYTE):
        raise ValueError(f"reduction gamma: expected 0 to {MAX_GAMMA_S_PER_BYTE:g} s/byte, got {gamma!r}")
    return dataclasses.replace(topology, reduction_gamma=g)
