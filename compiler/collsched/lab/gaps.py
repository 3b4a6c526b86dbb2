"""The optimality-gap table of docs/grid-baselines.md and docs/benchmarks.md: predicted
time / LP lower bound - 1 of every algorithm on every bundled topology.

A tool, not part of the compiler: it compiles through the pipeline and bounds with
model.lowerbound. Command line (the Makefile's bench-bound target):
python -m collsched.lab.gaps [TOPOLOGY_DIR]
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from .. import resources
from ..algorithms import REGISTRY
from ..errors import InputError
from ..inputs.arrivals import write_pap
from ..inputs.topology import load_topology
from ..model.lowerbound import lower_bound
from ..pipeline import compile_schedule


def gap_table(topology_dir, sizes=(256 << 10, 1 << 20), algorithms=None, pattern_seed=0) -> str:
    """Markdown: gap = predicted / bound - 1 of every algorithm on every topology file.

    Two tables: run time with flat arrivals (every *.yaml in topology_dir, all its hosts
    as ranks, each size), and average elapsed time on tryton-48 at P = 28 with arrivals
    uniform in [0, 5 ms] (seeded). Regenerate with `python -m collsched.lab.gaps`
    (the Makefile's bench-bound target).
    """
    algorithms = sorted(REGISTRY) if algorithms is None else list(algorithms)
    paths, skipped = _bounded_topologies(topology_dir)
    cols = [(path, size) for path in paths for size in sizes]

    def size_label(n):
        return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10} KiB"

    def cell(alg, p, size, path, pap=None, avg=False):
        try:
            res = compile_schedule(alg, p, size, topology=str(path), pap=pap)
        except InputError:
            return None  # the algorithm refuses this rank count
        return res.metrics.avg_elapsed_s if avg else res.metrics.run_time_s

    head = ["algorithm"] + [f"{p.stem} P={load_topology(p).nranks} {size_label(s)}" for p, s in cols]
    bounds, times = [], {alg: [] for alg in algorithms}
    for path, size in cols:
        topo = load_topology(path)
        bounds.append(lower_bound(topo, size))
        for alg in algorithms:
            times[alg].append(cell(alg, topo.nranks, size, path))
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
             "| **lower bound (run time)** | " + " | ".join(f"**{_seconds(b.run_time_s)}**" for b in bounds) + " |"]
    for alg in algorithms:
        lines.append(f"| {alg} | " + " | ".join(_gap(t, b.run_time_s) for t, b in zip(times[alg], bounds)) + " |")
    if skipped:
        lines += ["", "Not in the table: " + "; ".join(f"{name} ({why})" for name, why in skipped) + "."]
    out = "\n".join(lines)

    # Imbalanced arrivals: the BDR/Min3 arrival-aware setting, average elapsed time.
    tryton = Path(topology_dir) / "tryton-48.yaml"
    if tryton.exists():
        p, size = 28, 1 << 20
        arrivals = np.random.default_rng(pattern_seed).uniform(0, 5e-3, p)
        topo = load_topology(tryton, p)
        b = lower_bound(topo, size, arrivals)
        with tempfile.TemporaryDirectory() as tmp:
            pap = str(Path(tmp) / "pap.yaml")
            write_pap(pap, [arrivals.tolist()], unit="s")
            rows = [f"| {alg} | {_seconds(t) if t is not None else '—'} | {_gap(t, b.avg_elapsed_s)} |"
                    for alg in algorithms
                    for t in [cell(alg, p, size, tryton, pap=pap, avg=True)]]
        out += ("\n\n" + f"tryton-48, P = {p}, 1 MiB per rank, arrivals uniform in [0, 5 ms] "
                f"(seed {pattern_seed}); lower bound on the average elapsed time "
                f"{_seconds(b.avg_elapsed_s)} ({b.method}):\n\n"
                "| algorithm | predicted avg elapsed | gap |\n|---|---|---|\n" + "\n".join(rows))
    return out


def _bounded_topologies(topology_dir) -> tuple[list[Path], list[tuple[str, str]]]:
    """The topology files of the table (all their hosts as ranks), and the others with why:
    a file the cost model cannot load whole (grid-8x512's 4096 hosts exceed the host x host
    matrices' limit) or with more ranks than the bound is computed for (pipeline.MAX_BOUND_RANKS)."""
    from ..pipeline import MAX_BOUND_RANKS

    paths, skipped = [], []
    for path in sorted(Path(topology_dir).glob("*.yaml")):
        try:
            p = load_topology(path).nranks
        except InputError as e:
            skipped.append((path.stem, e.expected))
            continue
        if p > MAX_BOUND_RANKS:
            skipped.append((path.stem, f"{p} ranks, the bound is computed up to {MAX_BOUND_RANKS}"))
        else:
            paths.append(path)
    return paths, skipped


def _seconds(t: float) -> str:
    return f"{t * 1e3:.3g} ms" if t < 1 else f"{t:.3g} s"


def _gap(predicted, bound) -> str:
    from ..pipeline import gap_to  # the gap compile --json and the lab report

    if predicted is None:
        return "—"
    g = gap_to(predicted, bound)
    return "n/a" if g is None else f"{g * 100:.0f}%"


if __name__ == "__main__":
    here = resources.topologies_dir()
    print(gap_table(sys.argv[1] if len(sys.argv) > 1 else here))
