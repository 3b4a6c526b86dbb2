"""Linear gather to rank 0, then binomial broadcast of everything from rank 0 (LNBC).

The reference algorithm of the BDR paper. Gather: rank i sends its block to rank 0 in
step i-1 (rank 0 receives one at a time). Broadcast: in round k, every rank below 2^k that
holds all blocks sends to rank + 2^k each block that rank lacks (all but its own).
"""
from .registry import Request, block_transfers, register


@register("lnbc", "linear gather to rank 0 + binomial broadcast")
def build(req: Request):
    p = req.nranks
    steps, src, dst, origin = [], [], [], []
    for i in range(1, p):
        steps.append(i - 1), src.append(i), dst.append(0), origin.append(i)
    base = p - 1
    k = 0
    while (1 << k) < p:
        mask = 1 << k
        for r in range(mask):
            child = r + mask
            if child < p:
                for o in range(p):
                    if o != child:
                        steps.append(base + k), src.append(r), dst.append(child), origin.append(o)
        k += 1
    return block_transfers(req, "lnbc", steps, src, dst, origin)
