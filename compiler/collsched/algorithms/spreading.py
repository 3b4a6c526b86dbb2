"""Spreading simple: in step d = 1 .. P-1, rank j sends its own block to rank j + d.

No forwarding at all; every transfer is posted at once, as SimGrid SMPI's
`spreading_simple` allgather posts them. (SMPI's `ring` allgather moves the same blocks
as P-1 blocking sendrecv steps, each waiting for the one before: a different, slower
schedule of the same transfers.)
"""
import numpy as np

from .registry import Request, block_transfers, register


@register("spreading", "spreading simple: own block straight to every rank, P-1 steps")
def build(req: Request):
    p = req.nranks
    d, j = np.divmod(np.arange(p * (p - 1), dtype=np.int64), p)
    d += 1
    return block_transfers(req, "spreading", d - 1, j, (j + d) % p, j)
