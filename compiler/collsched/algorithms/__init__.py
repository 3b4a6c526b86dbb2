"""Allgather algorithms as schedule generators, one module each, found by name.

Every algorithm has one signature: `build(req: Request) -> Schedule`. The rules that
choose an algorithm live elsewhere (the CLI asks for one by name); this package only
knows how to generate each.
"""
from __future__ import annotations

from .registry import REGISTRY, Algorithm, Request, block_transfers, generate, register  # noqa: F401 - the package's API

# Import the modules so that they register themselves.
from . import bcast_trees, bdr, bruck, bslb, lnbc, magpie, min3, mpichg2, nex, rd, ring, spreading  # noqa: F401
from . import hier  # noqa: F401,E402 - the hierarchical composition (docs/hier.md)
from . import agg  # noqa: F401,E402 - arrival-aware multi-piece planner (docs/agg.md)
from . import forest  # noqa: F401,E402 - spanning-tree packing (docs/forest.md)
