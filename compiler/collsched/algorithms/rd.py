"""Recursive doubling: in step k, rank r swaps everything it holds with rank r XOR 2^k.

log2(P) steps; P must be a power of two.
"""
from .registry import Request, block_transfers, register


def _refuse(req: Request):
    p = req.nranks
    if p & (p - 1):
        return f"recursive doubling needs a power-of-two rank count, got {p}"
    return None


@register("rd", "recursive doubling, log2(P) steps (P a power of two)", _refuse)
def build(req: Request):
    p = req.nranks
    steps, src, dst, origin = [], [], [], []
    k = 0
    while (1 << k) < p:
        dist = 1 << k
        for r in range(p):
            partner = r ^ dist
            base = r & ~(dist - 1)  # r holds the aligned group of 2^k blocks
            for o in range(base, base + dist):
                steps.append(k), src.append(r), dst.append(partner), origin.append(o)
        k += 1
    return block_transfers(req, "rd", steps, src, dst, origin)
