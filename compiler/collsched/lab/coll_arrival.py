"""The arrival-aware alltoall measured for the pattern it was compiled for (issue 18's
Faraj target: "under imbalance the best robust algorithm faster than native and within
15% of the lower bound on the average elapsed time for that pattern").

The lab's Faraj grid (faraj.py) runs 4 seeded iterations per case and compiles an
arrival-aware algorithm once, for the mean of the iterations' patterns, which no
iteration has: that measures a prediction error, not the algorithm. Here every case is
one iteration of one seeded pattern, compiled for exactly that pattern (the recurring
pattern loop's situation: docs/cache.md), beside `simple` and the natives, for several
seeds. `python -m collsched.lab.coll_arrival --doc docs/benchmarks.md` writes the section
lab-collectives-arrival (make bench-collectives runs it).
"""
from __future__ import annotations

import argparse
import datetime
import sys

from .coll_bench import CollConfig, run_coll

TOPOLOGY = "topologies/tryton-48.yaml"
RANKS, NBYTES = 28, 128 << 10
DELAYS_MS = (5.0, 50.0)
SEEDS = (1, 2, 3)
ALGORITHMS = ("arrival", "simple", "native", "native:ompi", "native:mpich")


def run(network_model: str = "CM02", seeds=SEEDS, delays=DELAYS_MS, progress=None) -> list[dict]:
    """One report (coll_bench.run_coll) per (maxDelay, seed)."""
    out = []
    for d in delays:
        for s in seeds:
            cfg = CollConfig("alltoall", topology=TOPOLOGY, ranks=RANKS, nbytes=NBYTES, max_delay_ms=d,
                             iterations=1, seed=s, network_model=network_model)
            if progress:
                progress(f"alltoall P={RANKS} 128 KiB maxDelay {d:g} ms seed {s}")
            out.append(run_coll(cfg, list(ALGORITHMS)))
    return out


def markdown(reports: list[dict], started: str, network_model: str) -> str:
    lines = [f"Written by `python -m collsched.lab.coll_arrival` (make bench-collectives), started {started}; "
             f"SimGrid SMPI, network model {network_model}, tryton-48, P = {RANKS}, 128 KiB per pair, "
             "one iteration per seeded pattern, the arrival-aware algorithm compiled for that pattern "
             "(lab/coll_arrival.py says why). LB: collectives/bounds.py's average-elapsed bound for the "
             "measured arrivals. Every byte checked.", "",
             "| maxDelay ms | seed | LB avg ms | " + " | ".join(f"{a} ms (x LB)" for a in ALGORITHMS)
             + " | arrival vs best native | data |",
             "|---|---|---|" + "---|" * len(ALGORITHMS) + "---|---|"]
    for rep in reports:
        i, rows = rep["inputs"], {r["algorithm"]: r for r in rep["results"]}
        lb = (rep.get("bound") or {}).get("avg_elapsed_s")
        cells = []
        for a in ALGORITHMS:
            r = rows.get(a)
            t = r["avg_elapsed_s"] if r else None
            cells.append("-" if t is None else f"{t * 1e3:.2f}" + (f" ({t / lb:.3f})" if lb else ""))
        natives = [r["avg_elapsed_s"] for r in rep["results"] if r["kind"] == "native" and r["data_ok"]]
        arr = rows.get("arrival")
        vs = f"{min(natives) / arr['avg_elapsed_s']:.3f}x" if natives and arr else "-"
        ok = "ok" if all(r["data_ok"] for r in rep["results"]) else "WRONG"
        lines.append(f"| {i['max_delay_ms']:g} | {i['seed']} | {lb * 1e3:.2f} | " if lb else
                     f"| {i['max_delay_ms']:g} | {i['seed']} | - | ")
        lines[-1] += " | ".join(cells) + f" | {vs} | {ok} |"
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m collsched.lab.coll_arrival",
                                description="the arrival-aware alltoall for the pattern it was compiled for")
    p.add_argument("--network-model", default="CM02")
    p.add_argument("--doc", default=None, help="write the section lab-collectives-arrival into this file")
    a = p.parse_args(argv)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    reports = run(a.network_model, progress=lambda t: print(t, file=sys.stderr, flush=True))
    md = markdown(reports, started, a.network_model)
    print(md)
    if a.doc:
        from .benchdoc import replace_section
        replace_section(a.doc, "lab-collectives-arrival", md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
