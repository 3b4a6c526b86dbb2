"""Spreading simple: in step d = 1 .. P-1, rank j sends its own block to rank j + d.

No forwarding at all; SimGrid SMPI ships this pattern under the name `ring`.
"""
import numpy as np

from .registry import Request, block_transfers, register


@register("spreading", "spreading simple: own block straight to every rank, P-1 steps")
def build(req: Request):
    p = req.nranks
    d, j = np.divmod(np.arange(p * (p - 1), dtype=np.int64), p)
    d += 1
    return block_transfers(req, "spreading", d - 1, j, (j + d) % p, j)
