#!/usr/bin/env python3
"""Exhaustive proof that the compact generators (runtime/src/compact_gen.c) give the
explicit compiler's lists: every algorithm of the compact form, every P from 1 to
--max-ranks (1024), every rank, every operation, column by column
(collsched.compact.identity.first_difference).

Segments and sizes vary with P so that the FIFO marks are tested with none, some and all
segments marked: P <= 256 takes 1 + P % 3 segments, larger P one; bytes_max cycles with
P % 3 through a size that puts the threshold between segments, one where every piece is
marked, and one where none is (bytes_min is half of bytes_max: a range).

Prints one line per algorithm and a JSON summary; exits 1 at the first difference (its
line says which rank and operation). docs/compact.md records a run.

With --random N --min-ranks A --max-ranks B it proves N random (algorithm, P) cases with
P drawn from A..B instead (seeded: --seed), for P beyond the exhaustive range.

--duplex half proves the half-duplex lists (the generators' sub-step order) and
--topology FILE the lists on a homogeneous one-site topology file (compact.for_topology:
its FIFO threshold and duplex), against the explicit compiler on the same options.

With --bench P it proves nothing and measures instead: per-rank generation time and list
size of every algorithm at P ranks (compact.bench.measure; one JSON line each).

Usage: python tools/prove_compact.py [--max-ranks N] [--algorithms ring,bruck] [--jobs J]
                                     [--duplex half] [--topology FILE]
       python tools/prove_compact.py --random 8 --min-ranks 1025 --max-ranks 2048
       python tools/prove_compact.py --bench 65536 [--segments K] [--bytes B]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "compiler"))

from collsched.compact import REGULAR  # noqa: E402
from collsched.compact.bench import measure  # noqa: E402
from collsched.compact.desc import _homogeneous_defaults, fifo_min_piece, for_topology  # noqa: E402
from collsched.compact.identity import first_difference  # noqa: E402

THRESHOLD = fifo_min_piece(1 << 40, *_homogeneous_defaults())


def serves(algorithm: str, p: int) -> bool:
    """Whether the algorithm takes P ranks (rd: a power of two; nex: even)."""
    return not ((algorithm == "rd" and p & (p - 1)) or (algorithm == "nex" and p % 2))


def case(algorithm: str, p: int, duplex: str | None = None, topology: str | None = None):
    """The description proven for (algorithm, P), or None where the algorithm refuses P.
    (With a topology, THRESHOLD is the default cluster's: the sizes still straddle
    whatever threshold the file has, or fall below or above it.)"""
    if not serves(algorithm, p):
        return None
    nseg = 1 + p % 3 if p <= 256 else 1
    nbytes = ((THRESHOLD - 1) * nseg + p % (nseg + 1), 65536 * nseg, 1000)[p % 3]
    return for_topology(algorithm, p, (nbytes // 2, nbytes), nseg, topology=topology, duplex=duplex)


def prove(task: tuple[str, int, str, str | None]) -> tuple[str, int, int, str | None]:
    """(algorithm, P, rank lists compared, first difference or None) for (algorithm, P,
    duplex, topology)."""
    algorithm, p, duplex, topology = task
    desc = case(algorithm, p, duplex, topology)
    if desc is None:
        return algorithm, p, 0, None
    return algorithm, p, p, first_difference(desc, topology)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-ranks", type=int, default=1024)
    ap.add_argument("--min-ranks", type=int, default=1, help="first P (a run split in parts)")
    ap.add_argument("--algorithms", default=",".join(REGULAR))
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--random", type=int, metavar="N", help="N random cases instead of every P")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bench", type=int, metavar="P", help="measure at P ranks instead of proving")
    ap.add_argument("--segments", type=int, default=1, help="--bench: segments per block")
    ap.add_argument("--bytes", type=int, default=65536, help="--bench: bytes per rank")
    ap.add_argument("--duplex", choices=("full", "half"),
                    help="default: the topology file's, or full on the default cluster")
    ap.add_argument("--topology", help="a homogeneous one-site topology file (default: the default cluster)")
    args = ap.parse_args(argv)
    algorithms = [a for a in args.algorithms.split(",") if a]
    unknown = [a for a in algorithms if a not in REGULAR]
    if unknown or not 1 <= args.min_ranks <= args.max_ranks:
        got = unknown or (args.min_ranks, args.max_ranks)
        print(f"prove_compact: --algorithms: expected names from {', '.join(REGULAR)} and "
              f"1 <= --min-ranks <= --max-ranks, got {got}", file=sys.stderr)
        return 2
    if args.bench:
        for a in algorithms:
            if serves(a, args.bench):
                desc = for_topology(a, args.bench, args.bytes, args.segments, topology=args.topology,
                                    duplex=args.duplex)
                print(json.dumps(measure(desc)), flush=True)
        return 0
    # Largest first: the workers' last tasks are short ones.
    opts = (args.duplex, args.topology)
    tasks = [(a, p, *opts) for p in range(args.max_ranks, args.min_ranks - 1, -1) for a in algorithms]
    if args.random:
        rng = random.Random(args.seed)
        pairs = [(a, p) for a in algorithms for p in range(args.min_ranks, args.max_ranks + 1)
                 if serves(a, p)]
        if not pairs:
            print(f"prove_compact: --random: no P in {args.min_ranks}..{args.max_ranks} that "
                  f"{', '.join(algorithms)} serve", file=sys.stderr)
            return 2
        tasks = [(*rng.choice(pairs), *opts) for _ in range(args.random)]
    start = time.perf_counter()
    summary = {a: {"cases": 0, "ranks": 0} for a in algorithms}
    with Pool(args.jobs) as pool:
        for algorithm, p, ranks, diff in pool.imap_unordered(prove, tasks, chunksize=4):
            if diff is not None:
                print(f"prove_compact: DIFFERENT: {diff}", file=sys.stderr)
                pool.terminate()
                return 1
            if ranks:
                summary[algorithm]["cases"] += 1
                summary[algorithm]["ranks"] += ranks
    elapsed = time.perf_counter() - start
    for a in (a for a in algorithms if summary[a]["cases"] or not args.random):
        which = "the drawn P" if args.random else "every P"
        print(f"{a}: identical for {which} in {args.min_ranks}..{args.max_ranks} it serves "
              f"({summary[a]['cases']} schedules, {summary[a]['ranks']} rank lists)")
    print(json.dumps({"min_ranks": args.min_ranks, "max_ranks": args.max_ranks, "jobs": args.jobs,
                      "duplex": args.duplex, "topology": args.topology,
                      "random": args.random, "seed": args.seed, "seconds": round(elapsed, 1),
                      "identical": True, "algorithms": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
