"""The registry of algorithms for collectives beyond allgather: one entry per
(collective, name), one signature `build(CollRequest) -> Program` (the layout of
algorithms/registry.py for allgather, and of SimGrid's colls/ directories)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...errors import InputError
from ...inputs.topology import Topology
from ..program import COLLECTIVES, ROOTED, Program


@dataclass
class CollRequest:
    """What an algorithm is asked."""

    collective: str
    nranks: int
    nbytes: int = 0  # bytes of one alltoall block (per pair) / of the whole vector
    nseg: int = 1  # segments per block (alltoall) / per vector
    root: int = 0  # bcast, reduce
    elem_bytes: int = 4  # reduce/allreduce: bytes of one element (segments split elements)
    full_duplex: bool = True
    topology: Topology | None = None  # cost-aware and grid-aware algorithms
    arrivals: np.ndarray | None = None  # predicted arrival time per rank (s): arrival-aware ones
    options: dict = field(default_factory=dict)  # algorithm-specific, documented per algorithm


@dataclass
class CollAlgorithm:
    collective: str
    name: str
    summary: str
    build: Callable[[CollRequest], Program]
    check: Callable[[CollRequest], str | None]  # why a request is refused, or None
    needs_topology: bool = False
    arrival_aware: bool = False


REGISTRY: dict[tuple[str, str], CollAlgorithm] = {}


def register(collective: str, name: str, summary: str,
             check: Callable[[CollRequest], str | None] = lambda r: None, *,
             needs_topology: bool = False, arrival_aware: bool = False):
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}")

    def wrap(fn: Callable[[CollRequest], Program]):
        REGISTRY[(collective, name)] = CollAlgorithm(collective, name, summary, fn, check,
                                                     needs_topology, arrival_aware)
        return fn
    return wrap


def names(collective: str) -> list[str]:
    return sorted(n for c, n in REGISTRY if c == collective)


def generate(name: str, req: CollRequest) -> Program:
    """The algorithm's program, stamped with the request's sizes; InputError (one line,
    the option and what was expected) when it cannot serve the request."""
    if req.collective not in COLLECTIVES:
        raise InputError("--collective", req.collective,
                         f"expected one of {', '.join(COLLECTIVES)} (or allgather)")
    alg = REGISTRY.get((req.collective, name))
    if alg is None:
        raise InputError("--algorithm", name,
                         f"expected one of {', '.join(names(req.collective))} for {req.collective}")
    if req.nranks < 1:
        raise InputError("--ranks", str(req.nranks), "expected at least 1 rank")
    if req.collective in ROOTED and not 0 <= req.root < req.nranks:
        raise InputError("--root", str(req.root), f"expected a rank in 0..{req.nranks - 1}")
    if alg.needs_topology and req.topology is None:
        raise InputError("--topology", "(none)", f"{name} plans with a topology: give --topology")
    why = alg.check(req)
    if why:
        raise InputError("--algorithm", name, why)
    prog = alg.build(req)
    prog.algorithm = name
    prog.bytes_min = prog.bytes_max = int(req.nbytes)
    prog.full_duplex = req.full_duplex
    return prog
