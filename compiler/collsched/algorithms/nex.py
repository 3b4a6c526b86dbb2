"""Neighbor exchange (Chen et al.; Open MPI's choice for even P): P/2 steps.

Step 0: ranks 2j and 2j+1 swap their blocks. Step s >= 1: each rank swaps the two blocks
it received in the previous step with its other neighbour (alternating right and left).
Only defined for even P.
"""
from .registry import Request, block_transfers, register


def _refuse(req: Request):
    if req.nranks % 2:
        return f"neighbor exchange needs an even rank count, got {req.nranks} (use ring)"
    return None


def _partner(r: int, step: int, p: int) -> int:
    # Even ranks pair right first, odd ranks left first; the pairing alternates per step.
    right_first = (r % 2 == 0)
    go_right = right_first if step % 2 == 0 else not right_first
    return (r + 1) % p if go_right else (r - 1) % p


@register("nex", "neighbor exchange, P/2 steps (even P only)", _refuse)
def build(req: Request):
    p = req.nranks
    steps, src, dst, origin = [], [], [], []
    received = [[] for _ in range(p)]  # blocks each rank received in the previous step
    for s in range(p // 2):
        new = [None] * p
        for r in range(p):
            q = _partner(r, s, p)
            if s == 0:
                send = [r]
            elif s == 1:
                send = [r, _partner(r, 0, p)]  # the pair formed in step 0
            else:
                send = received[r]
            for o in send:
                steps.append(s), src.append(r), dst.append(q), origin.append(o)
            new[q] = send
        received = new
    return block_transfers(req, "nex", steps, src, dst, origin)
