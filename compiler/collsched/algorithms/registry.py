"""The algorithm registry: Request (what an algorithm is asked), Algorithm, REGISTRY by
name, the register decorator, generate, and block_transfers (segmentation for all)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import InputError
from ..inputs.topology import Topology
from ..ir import Schedule, from_transfers


@dataclass
class Request:
    """What an algorithm needs to know to generate a schedule."""

    nranks: int
    nbytes: int = 0  # bytes per rank (used by cost-aware algorithms)
    nseg: int = 1  # segments per block
    full_duplex: bool = True
    topology: Topology | None = None  # for cost-aware algorithms
    arrivals: np.ndarray | None = None  # predicted arrival time per rank (s)
    tau: float | None = None  # time to move one segment (BDR); None: from the cost model
    # min3 --pap: plan for serial execution (True), dataflow (False), or None: where
    # policy.serial_list_schedule says a serial plan can pay (the pipeline times both)
    serial: bool | None = None
    # min3: False = every piece straight from its origin (no relays; policy.execution_candidates)
    relays: bool = True
    # Multi-piece messages (docs/semantics.md): True = plan them (min3: one message per link
    # crossing), False = one piece per message, None = the algorithm's choice.
    aggregate: bool | None = None


@dataclass
class Algorithm:
    name: str
    summary: str
    build: Callable[[Request], Schedule]
    check: Callable[[Request], str | None]  # returns why a request is refused, or None
    serial: bool = False  # its schedules run serially (docs/semantics.md)


REGISTRY: dict[str, Algorithm] = {}


def register(name: str, summary: str, check: Callable[[Request], str | None] = lambda r: None,
             serial: bool = False):
    def wrap(fn: Callable[[Request], Schedule]):
        REGISTRY[name] = Algorithm(name, summary, fn, check, serial)
        return fn
    return wrap


def generate(name: str, req: Request) -> Schedule:
    """Generate a schedule; InputError when the algorithm cannot serve the request."""
    if name not in REGISTRY:
        raise InputError("--algorithm", name, f"expected one of {', '.join(sorted(REGISTRY))}")
    alg = REGISTRY[name]
    if req.nranks < 1:
        raise InputError("--ranks", str(req.nranks), "expected at least 1 rank")
    why = alg.check(req)
    if why:
        raise InputError("--algorithm", name, why)
    sched = alg.build(req)
    sched.algorithm = name
    sched.full_duplex = req.full_duplex
    sched.serial = sched.serial or alg.serial
    return sched


def block_transfers(req: Request, name: str, step, src, dst, origin, phase=None) -> Schedule:
    """Schedule from whole-block transfers, each split into req.nseg segment transfers.

    Segments of one block travel in the same step, in segment order, so every algorithm
    gets segmentation (pipelined pieces) without knowing about it.
    """
    k = req.nseg
    # Integer columns keep their width (ring's are int32: no int64 copies of P^2 of them);
    # one segment needs no copy at all.
    step, src, dst, origin = (_int_column(a) for a in (step, src, dst, origin))
    seg = None
    if k != 1:
        step, src, dst, origin = (np.repeat(a, k) for a in (step, src, dst, origin))
        seg = np.tile(np.arange(k, dtype=np.int32), len(step) // k if k else 0)
    if phase is not None:
        phase = np.repeat(np.asarray(phase, np.uint8), k)
    return from_transfers(req.nranks, k, step, src, dst, origin, seg, phase, algorithm=name,
                          half_duplex_order=not req.full_duplex)


def _int_column(a) -> np.ndarray:
    a = np.asarray(a)
    return a if a.dtype.kind == "i" else a.astype(np.int64)
