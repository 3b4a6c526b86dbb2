#!/usr/bin/env python3
"""Randomised proof that the compact generator of hier (runtime/src/compact_hier.c) gives
the explicit compiler's lists (docs/hier.md), and the measurement at scale.

Each case draws (from --seed and its index, so any case can be re-run alone with --only):
a class-form topology of 1..--max-sites sites of unequal sizes (written with
compact.hier.write_sites_topology), LAN and WAN latencies from 0 to 80 ms and bandwidths
from 10 Mbit/s to 80 Gbit/s, asymmetric links, a TCP window or none; P from 1 to
--max-ranks ranks placed on the first P hosts (the last sites may be cut or left out);
1..4 segments; a block size just at, below or above one site pair's FIFO threshold, or
any; the plan: the one the model picks (through the algorithm registry, as `collsched
compile` runs it: identity.first_difference) or forced direct or relay (against
hier.explicit). Every rank, every column. With --verify P the explicit lists of the
cases of at most P ranks are also proven by the verifier (holding, delivery, matching,
progress; at P = 1024 it costs about as much as the explicit generation).

Prints a line per difference (exit 1), one progress line per 50 cases on stderr, and a
JSON summary.

With --bench P it proves nothing and measures instead: P ranks over --sites sites
(8192 hosts each at P = 65,536) from a site-level topology it writes: the description's
size, per-rank generation time over sampled ranks (compact.bench.measure), list lengths.

Usage: python tools/prove_compact_hier.py [--cases 1000] [--max-ranks 1024] [--jobs 2] [--seed 1]
                                          [--verify 384]
       python tools/prove_compact_hier.py --only 17 --seed 1
       python tools/prove_compact_hier.py --bench 65536 [--sites 8] [--bytes 65536] [--segments 1]
                                          [--plan direct|relay]
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "compiler"))

from collsched.compact import hier, identity, schedule  # noqa: E402
from collsched.compact.bench import measure  # noqa: E402
from collsched.compact.desc import NO_FIFO, fifo_min_piece  # noqa: E402
from collsched.verify import verify  # noqa: E402

LATENCIES = (0.0, 1e-6, 5e-6, 5e-5, 1e-3, 2e-2, 8e-2)
BANDWIDTHS = (1.25e6, 1.25e8, 1.25e9, 1e10)
KINDS = (None, "direct", "relay")


def draw_case(seed: int, index: int, max_ranks: int, max_sites: int) -> dict:
    """One case's parameters (module docstring), from (seed, index) alone."""
    rng = np.random.default_rng([seed, index])
    total = int(rng.integers(1, max_ranks + 1))
    s = min(int(rng.integers(1, max_sites + 1)), total)
    cut = np.sort(rng.choice(np.arange(1, total), size=s - 1, replace=False))
    sizes = np.diff(np.r_[0, cut, total]).tolist() if rng.random() < 0.5 else \
        rng.integers(1, total // s + 1, size=s).tolist()
    s = len(sizes)
    lan = [(float(rng.choice(LATENCIES)), float(rng.choice(BANDWIDTHS))) for _ in range(s)]
    wan = {}
    for i in range(s):
        for j in range(i + 1, s):
            a, b = float(rng.choice(LATENCIES)), float(rng.choice(BANDWIDTHS))
            back = (float(rng.choice(LATENCIES)), float(rng.choice(BANDWIDTHS))) if rng.random() < 0.3 else (a, b)
            wan[i, j] = (a, b) + back
    window = [None, None, 65536, 4 << 20][int(rng.integers(4))]
    p = int(rng.integers(1, sum(sizes) + 1)) if rng.random() < 0.3 else sum(sizes)
    return {"index": index, "sizes": sizes, "lan": lan, "wan": wan, "window": window, "ranks": p,
            "nseg": int(rng.integers(1, 5)), "kind": KINDS[int(rng.integers(3))],
            "bytes_pick": float(rng.random()), "offset": int(rng.integers(-5, 6)),
            "pair": (int(rng.integers(s)), int(rng.integers(s))), "any_bytes": int(rng.integers(0, 1 << 22))}


def block_size(c: dict, sites: hier.Sites) -> int:
    """At, below or above one site pair's threshold (times nseg), or any size."""
    x, y = (min(v, len(sites.sizes) - 1) for v in c["pair"])
    t = fifo_min_piece(1 << 30, float(sites.latency[x, y]), float(sites.bandwidth[x, y]), float(sites.flow[x, y]))
    if t == NO_FIFO or c["bytes_pick"] < 0.3:
        return c["any_bytes"]
    return max(0, t * c["nseg"] + c["offset"])


def prove(args: tuple) -> dict:
    seed, index, max_ranks, max_sites, verify_max = args
    c = draw_case(seed, index, max_ranks, max_sites)
    check = c["ranks"] <= verify_max
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "t.yaml")
        hier.write_sites_topology(path, c["sizes"], c["lan"], c["wan"], tcp_window=c["window"])
        sites = hier.read_sites(path, c["ranks"])
        nbytes = block_size(c, sites)
        desc = hier.for_topology(path, c["ranks"], (nbytes // 2, nbytes), c["nseg"], kind=c["kind"])
        if c["kind"] is None:
            why = identity.first_difference(desc, path)
            want = identity.explicit(desc, path) if check else None
        else:
            want = hier.explicit(desc, path)
            got = schedule(desc)
            why = None if want.same_ops(got) else f"case {index}: the lists differ ({desc})"
        if why is None and check:
            bad = verify(want)
            why = f"case {index}: the explicit lists fail the verifier: {bad[0]}" if bad else None
    tail = hier.decode_tail(desc.tail)
    return {"index": index, "ranks": c["ranks"], "sites": len(tail.sizes), "nseg": c["nseg"],
            "plan": ["direct", "relay"][tail.plan], "forced": c["kind"] is not None, "bytes": nbytes,
            "verified": check, "difference": why, "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def bench(p: int, nsites: int, nbytes: int, nseg: int, ranks: int, kind: str | None = None) -> dict:
    """The measurement at scale (module docstring); a site-level topology of nsites equal
    sites, LANs of 10 Gbit/s and 5 us, WAN links of 10 Gbit/s and 10-40 ms, a 4 MiB TCP
    window (wan-3x16's classes, spread over more sites)."""
    sizes = [p // nsites + (i < p % nsites) for i in range(nsites)]
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "sites.yaml")
        hier.write_sites_topology(path, sizes, [(5e-6, 1.25e9)] * nsites,
                                  {(i, j): (0.01 * (1 + (i + j) % 4), 1.25e9) * 2
                                   for i in range(nsites) for j in range(i + 1, nsites)},
                                  tcp_window=4 << 20, name=f"bench-{nsites}x{sizes[0]}")
        t = time.perf_counter()
        desc = hier.for_topology(path, p, nbytes, nseg, kind=kind)
        describe_s = time.perf_counter() - t
    out = measure(desc, ranks=ranks)
    tail = hier.decode_tail(desc.tail)
    out.update({"sites": nsites, "plan": ["direct", "relay"][tail.plan], "describe_s": describe_s,
                "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--max-ranks", type=int, default=1024)
    ap.add_argument("--max-sites", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", type=int, help="re-run this case index alone")
    ap.add_argument("--verify", type=int, default=0, metavar="P",
                    help="also run the verifier on the explicit lists of cases of at most P ranks")
    ap.add_argument("--bench", type=int, metavar="P")
    ap.add_argument("--sites", type=int, default=8)
    ap.add_argument("--bytes", type=int, default=65536)
    ap.add_argument("--segments", type=int, default=1)
    ap.add_argument("--sample", type=int, default=16, help="--bench: ranks timed")
    ap.add_argument("--plan", choices=("direct", "relay"), help="--bench: force the plan (default: the model's)")
    args = ap.parse_args(argv)
    if args.bench:
        print(json.dumps(bench(args.bench, args.sites, args.bytes, args.segments, args.sample, args.plan)))
        return 0
    todo = [args.only] if args.only is not None else range(args.cases)
    work = [(args.seed, i, args.max_ranks, args.max_sites, args.verify) for i in todo]
    t = time.perf_counter()
    failed, rows = 0, []
    with Pool(args.jobs) as pool:
        for row in pool.imap_unordered(prove, work):
            rows.append(row)
            if len(rows) % 50 == 0:
                print(f"{len(rows)} cases, {failed} different, {time.perf_counter() - t:.0f} s",
                      file=sys.stderr, flush=True)
            if row["difference"]:
                failed += 1
                print(row["difference"], flush=True)
    print(json.dumps({"cases": len(rows), "identical": len(rows) - failed, "seed": args.seed,
                      "max_ranks": args.max_ranks, "rank_lists": sum(r["ranks"] for r in rows),
                      "largest_p": max(r["ranks"] for r in rows),
                      "relay_plans": sum(r["plan"] == "relay" for r in rows),
                      "forced_plans": sum(r["forced"] for r in rows),
                      "verified": sum(r["verified"] for r in rows),
                      "sites": sorted({r["sites"] for r in rows}),
                      "wall_s": round(time.perf_counter() - t, 1),
                      "worker_peak_rss_mib": round(max(r["maxrss_mib"] for r in rows))}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
