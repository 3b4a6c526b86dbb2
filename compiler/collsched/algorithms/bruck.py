"""Bruck dissemination: in step k, rank r sends the blocks r .. r+c-1 to rank r - 2^k.

ceil(log2(P)) steps for any P; c = min(2^k, P - 2^k). Works on any rank count.
"""
from .registry import Request, block_transfers, register


@register("bruck", "Bruck dissemination, ceil(log2 P) steps, any P")
def build(req: Request):
    p = req.nranks
    steps, src, dst, origin = [], [], [], []
    k = 0
    while (1 << k) < p:
        dist = 1 << k
        count = min(dist, p - dist)
        for r in range(p):
            for j in range(count):
                steps.append(k), src.append(r), dst.append((r - dist) % p)
                origin.append((r + j) % p)
        k += 1
    return block_transfers(req, "bruck", steps, src, dst, origin)
