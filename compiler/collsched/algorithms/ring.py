"""Parallel ring: in step k, rank i sends block (i - k) to rank i + 1.

P - 1 steps of one block each; the classic large-message allgather of MPICH and Open MPI.
Built with array operations so that thousands of ranks compile in milliseconds.
"""
import numpy as np

from .registry import Request, block_transfers, register


@register("ring", "parallel ring, P-1 steps, forwards the block received last step")
def build(req: Request):
    p = req.nranks
    # Step-major order, in int32 (P^2 entries each: half the memory of int64).
    i = np.tile(np.arange(p, dtype=np.int32), p - 1)
    k = np.repeat(np.arange(p - 1, dtype=np.int32), p)
    return block_transfers(req, "ring", k, i, (i + 1) % p, (i - k) % p)
