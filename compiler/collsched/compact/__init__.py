"""The compact schedule form (issue 24; docs/compact.md): a small versioned description
(desc.py) from which every rank computes its own operation list in C
(runtime/src/compact_gen.c, called from Python by native.py), byte for byte the list the
explicit compiler writes for that rank."""
from __future__ import annotations

from .desc import ALGORITHMS, NO_FIFO, REGULAR, TAILED, CompactDesc, decode, fifo_min_piece, for_default, for_topology, refusal  # noqa: F401
from .native import OP_DTYPE, count, generate, schedule  # noqa: F401
from .files import (AUTO_MIN_RANKS, FORMS, check, choose_form, is_compact_file, read_compact,  # noqa: F401
                    summary, write_compact)
from . import bdr, hier  # noqa: F401,E402  (register their version-2 tails in desc.TAIL_FORMS)
