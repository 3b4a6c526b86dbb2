"""Parallel ring: in step k, rank i sends block (i - k) to rank i + 1.

P - 1 steps of one block each; the classic large-message allgather of MPICH and Open MPI.
Built with array operations so that thousands of ranks compile in milliseconds.
"""
import numpy as np

from .registry import Request, block_transfers, register


@register("ring", "parallel ring, P-1 steps, forwards the block received last step")
def build(req: Request):
    p = req.nranks
    k, i = np.divmod(np.arange(p * (p - 1), dtype=np.int64), p)  # step-major order
    return block_transfers(req, "ring", k, i, (i + 1) % p, (i - k) % p)
