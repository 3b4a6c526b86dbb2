"""Per-rank generation cost of the compact form at scale (docs/compact.md, "Measured").

Times the C generator alone (the kernel call, its output array made beforehand) for
sampled ranks of one description, and reports what a rank holds: the generator allocates
nothing, so a rank's memory is its list, 12 bytes per operation in the file's form.
"""
from __future__ import annotations

import time

import numpy as np

from .desc import CompactDesc
from .native import OP_DTYPE, _compact_ops, count


def sample_ranks(nranks: int, n: int, seed: int = 1) -> list[int]:
    """Rank 0, the last, the middle, and n - 3 random others (distinct, sorted)."""
    fixed = {0, nranks - 1, nranks // 2}
    others = [r for r in np.random.default_rng(seed).permutation(nranks).tolist() if r not in fixed]
    return sorted(fixed | set(others[:max(n - len(fixed), 0)]))


def time_rank(desc: CompactDesc, rank: int, repeats: int = 5) -> tuple[int, float]:
    """(operations, fastest of `repeats` generation times in seconds) for one rank."""
    n = count(desc, rank)
    record = np.frombuffer(desc.encode(), np.uint8).copy()
    fields = {"desc": record, "desc_len": len(record), "rank": rank, "capacity": n,
              "ops": np.zeros(n * OP_DTYPE.itemsize, np.uint8), "nops": np.zeros(1, np.int64),
              "err": np.zeros(256, np.uint8), "errlen": 256}
    kernel = _compact_ops()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        rc = kernel(fields)
        best = min(best, time.perf_counter() - t)
        if rc != 0 or int(fields["nops"][0]) != n:
            raise RuntimeError(f"{desc}: rank {rank}: generation returned {rc}")
    return n, best


def measure(desc: CompactDesc, ranks: int = 16, repeats: int = 5) -> dict:
    """Generation time and list size over sampled ranks: the slowest and the median."""
    rows = [(r, *time_rank(desc, r, repeats)) for r in sample_ranks(desc.nranks, ranks)]
    times = [t for _, _, t in rows]
    worst = max(rows, key=lambda row: row[2])
    return {"algorithm": desc.algorithm, "nranks": desc.nranks, "nseg": desc.nseg,
            "bytes_max": desc.bytes_max, "description_bytes": desc.size,
            "ranks_timed": len(rows), "max_ops": max(n for _, n, _ in rows),
            "max_list_bytes": max(n for _, n, _ in rows) * OP_DTYPE.itemsize,
            "median_s": float(np.median(times)), "max_s": worst[2], "slowest_rank": worst[0]}
