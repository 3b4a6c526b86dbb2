"""Do the compiler's second Python paths still pay for themselves?

Where the C kernels are not built, three kernels have two Python paths each: the cost
model's DAG timing (model/dag.py: _PyGraph, the kernel's reference, transfer by transfer
on lists; or the numpy waves, a dozen numpy calls per wave), the deadlock-freedom walk
(verify.py: _progress_completes, the kernel's reference, on lists; or check_progress's
numpy waves) and min3's search in pools of pools (min3/input_pool.py: _ListSearch, the
kernel's reference, or _ArraySearch on numpy arrays, above LIST_SEARCH_LIMIT ranks). This
times both paths of each, with the kernels off, on bundled topologies, and writes the
section `python-paths` of docs/benchmarks.md:

    .venv/bin/python tools/bench_python_paths.py [docs/benchmarks.md]
"""
from __future__ import annotations

import platform
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

from collsched import kernels, verify as verify_module
from collsched.algorithms import Request, generate
from collsched.algorithms import min3 as min3_module
from collsched.algorithms.min3 import input_pool
from collsched.inputs.topology import homogeneous, load_topology
from collsched.lab.benchdoc import replace_section
from collsched.model import dag as dag_module
from collsched import passes
from collsched.verify import verify

ROOT = Path(__file__).resolve().parents[1]
NBYTES = 1 << 20
# (algorithm, topology file or None for the homogeneous default, ranks)
DAG_CASES = [("min3", "three-site-grid", 20), ("ring", "three-site-grid", 20),
             ("min3", "wan-3x16", 48), ("spreading", "wan-3x16", 48),
             ("ring", "grid-8x128", 128), ("ring", "grid-8x128", 512),
             ("ring", None, 64), ("ring", None, 256), ("ring", None, 1024)]
PROGRESS_CASES = [("ring", 64), ("bruck", 64), ("ring", 256), ("bruck", 256), ("ring", 1024),
                  ("bruck", 1024)]


def best_of(fn, runs=3):
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def _with_path(path):
    """Plan._prepare_timing for `path`: "waves" (production without the kernels) or "lists"
    (the timing done by the reference, _PyGraph, built when the plan is timed)."""
    def prepare(self):
        self._order = self._csr = self._kernel = None
        if path == "lists":
            self._time_waves = lambda base, plan=self: dag_module._PyGraph(plan).time(base)
        else:
            self._order = self._topological_waves(self.pred)
    return prepare


def dag_rows():
    rows = []
    saved = dag_module.Plan._prepare_timing
    try:
        for alg, topo_name, p in DAG_CASES:
            topo = (load_topology(ROOT / "topologies" / f"{topo_name}.yaml", p) if topo_name
                    else homogeneous(p))
            s = generate(alg, Request(p, nbytes=NBYTES, full_duplex=topo.full_duplex, topology=topo))
            s = passes.apply(s, topo, NBYTES)  # as compile does: gating, FIFO marks
            a = np.random.default_rng(p).uniform(0, 0.005, p)
            times, results = {}, {}
            for path in ("lists", "waves"):
                dag_module.Plan._prepare_timing = _with_path(path)

                def run():
                    results[path] = dag_module.Plan(s, topo, NBYTES, None, s.serial).time(a).end
                times[path] = best_of(run)
            dag_module.Plan._prepare_timing = saved
            plan = dag_module.Plan(s, topo, NBYTES, None, s.serial)
            assert results["lists"].tobytes() == results["waves"].tobytes()
            rows.append((f"{alg} on {topo_name or 'homogeneous'}", p, plan.n,
                         "yes" if len(plan.on_wan) else "no", times["lists"], times["waves"]))
    finally:
        dag_module.Plan._prepare_timing = saved
    return rows


POOL_CASES = [("three-site-grid", 20), ("wan-3x16", 48), ("grid-8x128", 128), ("grid-8x128", 256)]


def pool_rows():
    """min3's whole plan (pool_schedule) with the pools-of-pools search on lists
    (LIST_SEARCH_LIMIT huge) or on arrays (-1): every other engine the same."""
    rows = []
    saved = input_pool.LIST_SEARCH_LIMIT
    try:
        for name, p in POOL_CASES:
            topo = load_topology(ROOT / "topologies" / f"{name}.yaml", p)
            req = Request(p, nbytes=NBYTES, full_duplex=topo.full_duplex, topology=topo)
            times, plans = {}, {}
            for path, limit in (("lists", 10 ** 9), ("arrays", -1)):
                input_pool.LIST_SEARCH_LIMIT = limit

                def run():
                    plans[path] = [c.tobytes() for c in min3_module.pool_schedule(req)[0].columns()]
                times[path] = best_of(run)
            assert plans["lists"] == plans["arrays"]
            rows.append((f"min3 on {name}", p, times["lists"], times["arrays"]))
    finally:
        input_pool.LIST_SEARCH_LIMIT = saved
    return rows


def progress_rows():
    """verify() as production runs it without the kernels (waves), and with the walk on lists
    (the reference, _progress_completes) answering first, as the C walk does."""
    rows = []
    for alg, p in PROGRESS_CASES:
        s = generate(alg, Request(p, nbytes=NBYTES))
        times = {}
        for path in ("lists", "waves"):
            kernels.ENABLED = path == "lists"  # the lists stand in for the C walk
            saved = kernels.available, kernels.progress_completes
            if path == "lists":
                kernels.available = lambda: True
                kernels.progress_completes = _reference_walk
            try:
                assert not verify(s)
                times[path] = best_of(lambda: verify(s))
            finally:
                kernels.available, kernels.progress_completes = saved
                kernels.ENABLED = False
        rows.append((f"{alg} on homogeneous", p, s.total_ops, times["lists"], times["waves"]))
    return rows


def _reference_walk(*, nranks, rank, offsets, blocking, first, last, dep0, dep1, dep2):
    return int(verify_module._progress_completes(rank, offsets, blocking, first, last,
                                                 dep0, dep1, dep2))


def markdown(dag, progress, pools) -> str:
    def ms(x):
        return f"{1000 * x:.1f}"
    lines = [
        "## Compiler without its C kernels: the second Python paths",
        "",
        f"Measured {date.today().isoformat()} by `.venv/bin/python tools/bench_python_paths.py` "
        f"(Python {platform.python_version()}, {platform.machine()}, kernels off, best of 3). "
        "Where the C kernels are not built, three kernels have two Python paths each, with "
        "the same results: the kernel's reference on lists (`_PyGraph`, `_progress_completes`, "
        "`_ListSearch`) and a numpy path. "
        f"{NBYTES} bytes per rank; random arrivals up to 5 ms for the DAG timing.",
        "",
        "For the DAG timing and the deadlock walk, production without the kernels runs the "
        "waves only: the lists save a few milliseconds on small schedules and cost seconds on "
        "large ones; they stay the kernels' references, which the tests compare the C kernels "
        "and the waves with. Min3's pool search keeps both paths in production (lists up to "
        "LIST_SEARCH_LIMIT ranks, arrays beyond); the last table measures that choice.",
        "",
        "DAG timing (model/dag.py: `Plan` built and timed once):",
        "",
        "| schedule | P | transfers | shared links | lists ms | waves ms |",
        "|:--|--:|--:|:--|--:|--:|",
    ]
    lines += [f"| {a} | {p} | {n} | {w} | {ms(x)} | {ms(y)} |" for a, p, n, w, x, y in dag]
    lines += [
        "",
        "Deadlock-freedom walk (verify.py: the whole `verify`, the walk on lists answering "
        "first as the C walk does, or the waves alone):",
        "",
        "| schedule | P | ops | lists ms | waves ms |",
        "|:--|--:|--:|--:|--:|",
    ]
    lines += [f"| {a} | {p} | {n} | {ms(x)} | {ms(y)} |" for a, p, n, x, y in progress]
    lines += [
        "",
        "Min3's search in pools of pools (min3/input_pool.py: the whole `pool_schedule`; "
        f"production searches on lists up to LIST_SEARCH_LIMIT = {input_pool.LIST_SEARCH_LIMIT} "
        "ranks, on arrays beyond):",
        "",
        "| schedule | P | lists ms | arrays ms |",
        "|:--|--:|--:|--:|",
    ]
    lines += [f"| {a} | {p} | {ms(x)} | {ms(y)} |" for a, p, x, y in pools]
    return "\n".join(lines) + "\n"


def main(argv):
    kernels.ENABLED = False
    doc = Path(argv[0]) if argv else ROOT / "docs" / "benchmarks.md"
    text = markdown(dag_rows(), progress_rows(), pool_rows())
    print(text)
    replace_section(doc, "python-paths", text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
