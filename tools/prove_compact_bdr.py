#!/usr/bin/env python3
"""Random proof that the compact generators of bdr and bslb (runtime/src/compact_bdr.c) give
the explicit compiler's lists: N random cases (algorithm, P, arrival pattern, tau's
pre-steps, engine, segments, byte range around the FIFO threshold), every rank, every
operation, column by column (collsched.compact.bdr.first_difference: generate, the
engine's phases and passes.apply on the default cluster, as pipeline._compile_one).

P is drawn log-uniformly from --min-ranks (2) .. --max-ranks (small P: the replay's window is the whole
ring; large: a window of 2M + 3 ranks), the pattern from balanced, one late rank, ties on
tau's grid, a few late ranks (10%) and random arrivals, with M up to --max-pre-steps
pre-steps (uniform; one case in ten up to the generator's limit, 512). Prints a JSON line per case with
--verbose, and a JSON summary; exits 1 at the first difference (its line names the rank
and operation). docs/compact-bdr.md records a run.

With --bench P it proves nothing and measures per-rank generation at P ranks for a pattern
of --late (5%) late ranks with up to --pre-steps pre-steps (compact.bench.measure).

Usage: python tools/prove_compact_bdr.py [--cases 1000] [--max-ranks 1024] [--jobs 2] [--seed 1]
       python tools/prove_compact_bdr.py --bench 65536 [--pre-steps 100] [--late 0.05]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "compiler"))

import numpy as np  # noqa: E402

from collsched.compact import bdr  # noqa: E402
from collsched.pipeline import ENGINES  # noqa: E402

TAU = 1e-4
THRESHOLD = 6251  # the default cluster's FIFO threshold (docs/compact.md)
KINDS = ("balanced", "one_late", "ties", "late_few", "random")


def arrivals(kind: str, p: int, m: int, rng) -> np.ndarray:
    if kind == "balanced":
        return np.zeros(p)
    if kind == "one_late":
        a = np.zeros(p)
        a[rng.integers(p)] = m * TAU
        return a
    if kind == "ties":
        return rng.integers(0, m + 1, p) * TAU
    if kind == "late_few":
        return np.where(rng.random(p) < 0.1, rng.random(p) * m * TAU, 0.0)
    return rng.random(p) * m * TAU


def draw(seed: int, max_ranks: int, max_pre_steps: int, min_ranks: int = 2) -> dict:
    rng = np.random.default_rng(seed)
    p = int(round(np.exp(rng.uniform(np.log(min_ranks), np.log(max_ranks)))))
    return {"seed": seed, "algorithm": str(rng.choice(["bdr", "bslb"])), "nranks": p,
            "kind": str(rng.choice(KINDS)),
            # one case in ten up to the generator's limit (M ~ P: the whole ring replayed)
            "pre_steps": int(rng.integers(0, (max_pre_steps if rng.random() < 0.9
                                                else bdr.MAX_PRE_STEPS) + 1)),
            "engine": str(rng.choice(ENGINES)), "nseg": int(rng.integers(1, 5)),
            "near": int(rng.integers(-2, 3)), "root_late": bool(rng.random() < 0.5)}


def prove(case: dict) -> dict:
    rng = np.random.default_rng(case["seed"] + 1)
    p, alg = case["nranks"], case["algorithm"]
    a = arrivals(case["kind"], p, case["pre_steps"], rng)
    start = time.perf_counter()
    if alg == "bdr":
        hi = THRESHOLD + case["near"]
        desc = bdr.bdr_desc(a, TAU, (hi // 2, hi), case["engine"])
        why = bdr.first_difference(desc, a, TAU)
    else:
        if case["root_late"] and p > 1:
            a[0] = a.max() + TAU
        hi = THRESHOLD * case["nseg"] + case["near"]
        desc = bdr.bslb_desc(a, (0, hi), case["nseg"], case["engine"])
        why = bdr.first_difference(desc, a)
    return {**case, "bytes_max": hi, "record_bytes": desc.size, "difference": why,
            "seconds": round(time.perf_counter() - start, 3)}


def setup_time(desc, rank: int, repeats: int = 5) -> tuple[float, float]:
    """A rank's setup as the loader does it, count (capacity 0) then generate: the fastest
    of `repeats` in wall time and in this thread's CPU time (the machine is shared: the CPU
    time is what the rank would take on a core of its own)."""
    from collsched.compact.native import OP_DTYPE, _compact_ops

    record = np.frombuffer(desc.encode(), np.uint8).copy()
    kernel = _compact_ops()

    def call(capacity, ops):
        fields = {"desc": record, "desc_len": len(record), "rank": rank, "capacity": capacity,
                  "ops": ops, "nops": np.zeros(1, np.int64), "err": np.zeros(256, np.uint8),
                  "errlen": 256}
        rc = kernel(fields)
        return rc, int(fields["nops"][0])

    n = call(0, np.zeros(0, np.uint8))[1]
    out = np.zeros(n * OP_DTYPE.itemsize, np.uint8)
    wall = cpu = float("inf")
    for _ in range(repeats):
        t, c = time.perf_counter(), time.thread_time()
        call(0, out[:0])
        rc, got = call(n, out)
        wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.thread_time() - c)
        if rc != 0 or got != n:
            raise RuntimeError(f"rank {rank}: generation returned {rc}")
    return wall, cpu


def bench(p: int, pre_steps: int, late: float, seed: int) -> list[dict]:
    """Per-rank generation at P ranks: `late` of the ranks arrive up to pre_steps x tau
    late (one exactly that late), the rest on time. Generation as compact.bench.measure
    (16 sampled ranks, fastest of 5), plus the count that precedes it at setup."""
    from collsched.compact.bench import measure, sample_ranks

    rng = np.random.default_rng(seed)
    a = np.where(rng.random(p) < late, rng.random(p) * pre_steps * TAU, 0.0)
    a[rng.integers(p)] = pre_steps * TAU  # the latest rank: M = pre_steps
    rows = []
    for desc in (bdr.bdr_desc(a, TAU, 65536), bdr.bslb_desc(a, 65536)):
        t = time.perf_counter()
        desc.encode()
        encode_s = time.perf_counter() - t
        row = measure(desc, ranks=16, repeats=5)
        setup = [setup_time(desc, r) for r in sample_ranks(p, 16)]
        wall, cpu = [w for w, _ in setup], [c for _, c in setup]
        row.update(pre_steps=int(bdr.pre_steps(a, TAU).max()), late=late, seed=seed,
                   late_ranks=int(np.count_nonzero(a > 0)), encode_s=round(encode_s, 4),
                   setup_median_s=float(np.median(wall)), setup_max_s=max(wall),
                   setup_cpu_median_s=float(np.median(cpu)), setup_cpu_max_s=max(cpu),
                   load=os.getloadavg()[0], date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--min-ranks", type=int, default=2)
    ap.add_argument("--max-ranks", type=int, default=1024)
    ap.add_argument("--max-pre-steps", type=int, default=60)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--bench", type=int, metavar="P")
    ap.add_argument("--pre-steps", type=int, default=100)
    ap.add_argument("--late", type=float, default=0.05)
    a = ap.parse_args(argv)
    if a.bench:
        for row in bench(a.bench, a.pre_steps, a.late, a.seed):
            print(json.dumps(row), flush=True)
        return 0
    cases = [draw(a.seed * 1_000_003 + i, a.max_ranks, min(a.max_pre_steps, bdr.MAX_PRE_STEPS), a.min_ranks)
             for i in range(a.cases)]
    start = time.perf_counter()
    done, lists, bad = 0, 0, None
    with Pool(a.jobs) as pool:
        for row in pool.imap_unordered(prove, cases):
            done += 1
            lists += row["nranks"]
            if a.verbose:
                print(json.dumps(row), flush=True)
            if row["difference"]:
                bad = row
                break
    summary = {"cases": done, "rank_lists": lists, "identical": bad is None,
               "first_difference": bad, "max_ranks": a.max_ranks,
               "min_ranks": a.min_ranks, "ranks_over_512": sum(c["nranks"] > 512 for c in cases[:done]),
               "wall_s": round(time.perf_counter() - start, 1), "jobs": a.jobs, "seed": a.seed,
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(json.dumps(summary), flush=True)
    return 0 if bad is None else 1


if __name__ == "__main__":
    sys.exit(main())
