"""The intergroup benchmark suites (issue 19; docs/lab.md, "Intergroup"):

- `run_settings`: the paper's settings 1-8 (intergroup/sizes.py) under SimGrid SMPI, CM02,
  on the homogeneous cluster (1 Gbit/s, 50 us, full duplex, one rank per host), at
  SUITE_RANKS ranks and the SUITE_SIZES largest blocks: allgather settings (1-4) with
  `kang`, allgatherv settings (5-8) with `kang-v`, both against `root-gather`,
  `root-gather-mpich` and `native`; then the issue's targets (`targets`).
- `run_mpi`: real MPI, P = 8 in two groups (4:4 and 5:3), true intercommunicators: `kang`
  (allgather) and `kang-v` (allgatherv) interleaved with Open MPI's own intercommunicator
  collective in one run per case, from 256 KiB per rank.
"""
from __future__ import annotations

import datetime
import os
from concurrent.futures import ThreadPoolExecutor

from ..intergroup import sizes
from ..intergroup.groups import Groups
from .intergroup_run import InterConfig, run_intergroup

# 64 ranks is the paper's smallest count (25/7 is then 50 + 14); SMPI runs it in seconds
# per launch on this 2-core machine, 256 would take hours for the suite.
SUITE_RANKS = 64
SUITE_SIZES = (64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20)  # largest block
BOUND_FROM = 1 << 20  # the bound target holds from 1 MiB per rank
BOUND_TOLERANCE = 1.10
SPEEDUP_FRACTION = 0.80  # of Eq. 5's asymptote, at the largest size
FIDELITY = 0.15  # predicted vs SMPI
BASELINES = ("root-gather", "root-gather-mpich", "native")
MPI_SHAPES = ((4, 4), (5, 3))
MPI_SIZES = (256 << 10, 1 << 20, 4 << 20)
MPI_ITERATIONS = 30  # oversubscribed and shared: medians of many interleaved pairs


def setting_algorithm(number: int) -> str:
    return "kang-v" if number in sizes.ALLGATHERV_SETTINGS else "kang"


def setting_collective(number: int) -> str:
    return "inter-allgatherv" if number in sizes.ALLGATHERV_SETTINGS else "inter-allgather"


def setting_groups(number: int, largest: int, nprocs: int = SUITE_RANKS) -> Groups:
    """The setting's groups whose largest block is `largest` bytes (rounded down to the
    setting's unit: sizes.setting's k)."""
    unit = sizes.setting(number, 1, nprocs)
    k = max(1, largest // max(unit.sizes_a + unit.sizes_b))
    return sizes.setting(number, k, nprocs)


def run_settings(settings=tuple(range(1, 9)), block_sizes=SUITE_SIZES, nprocs: int = SUITE_RANKS,
                 network_model: str = "CM02", iterations: int = 1, jobs: int = 2, progress=None) -> dict:
    """Every setting x size under SMPI (module doc); `progress(done, total, label)` after each
    case. Cases run `jobs` at a time (SimGrid is single-threaded)."""
    cases = [(s, b) for s in settings for b in block_sizes]

    def one(case):
        s, b = case
        cfg = InterConfig(setting_groups(s, b, nprocs), setting_collective(s), network_model=network_model,
                          iterations=iterations)
        return run_intergroup(cfg, [setting_algorithm(s), *BASELINES])

    started = datetime.datetime.now(datetime.timezone.utc)
    out = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(one, c): c for c in cases}
        for n, fut in enumerate(futures, 1):  # in submission order: the reports stay ordered
            s, b = futures[fut]
            out.setdefault(s, []).append(fut.result())
            if progress:
                progress(n, len(cases), f"setting {s}, {b >> 10} KiB")
    report = {"suite": "intergroup", "backend": "smpi", "network_model": network_model, "ranks": nprocs,
              "topology": "homogeneous cluster (1 Gbit/s, 50 us, full duplex)", "iterations": iterations,
              "block_sizes": list(block_sizes), "started": started.isoformat(timespec="seconds"),
              "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "load": os.getloadavg()[0],
              "settings": [{"setting": s, "p": setting_groups(s, 1 << 20, nprocs).p,
                            "q": setting_groups(s, 1 << 20, nprocs).q, "collective": setting_collective(s),
                            "algorithm": setting_algorithm(s), "eq5": sizes.EQ5[s], "cases": out[s]}
                           for s in settings]}
    report["targets"] = targets(report)
    return report


def _row(case: dict, name: str) -> dict | None:
    return next((r for r in case["results"] if r["algorithm"] == name), None)


def targets(report: dict) -> list[dict]:
    """Per setting, the issue's targets as measured: bound (from BOUND_FROM), speedup at the
    largest size against 80% of Eq. 5, model fidelity of the compiled algorithms."""
    out = []
    for st in report["settings"]:
        alg = st["algorithm"]
        cases = st["cases"]
        big = [c for c in cases if c["inputs"]["largest_block"] >= BOUND_FROM * 0.99]
        ratios = [_row(c, alg).get("bound_ratio") for c in big if _row(c, alg)]
        ratios = [r for r in ratios if r is not None]
        last = cases[-1]
        k = _row(last, alg)
        sp = {b: k.get(f"speedup_over_{b.replace('-', '_')}") for b in BASELINES} if k else {}
        fid = {}
        for model in ("dag", "fluid"):
            vals = [r[f"{model}_ratio"] for c in cases for r in c["results"] if f"{model}_ratio" in r]
            if vals:
                fid[model] = (min(vals), max(vals))
        data_ok = all(r["data_ok"] for c in cases for r in c["results"])
        goal = SPEEDUP_FRACTION * st["eq5"]
        out.append({
            "setting": st["setting"], "algorithm": alg,
            "bound_ratio_max": max(ratios) if ratios else None,
            "bound_met": bool(ratios) and max(ratios) <= BOUND_TOLERANCE,
            "speedup_goal": goal, "largest_block": last["inputs"]["largest_block"],
            "speedup_mpich": sp.get("root-gather-mpich"), "speedup_root_gather": sp.get("root-gather"),
            "speedup_native": sp.get("native"),
            "speedup_met": sp.get("root-gather-mpich") is not None and sp["root-gather-mpich"] >= goal,
            "fidelity": fid,
            "fidelity_met": {m: lo >= 1 - FIDELITY and hi <= 1 + FIDELITY for m, (lo, hi) in fid.items()},
            "data_ok": data_ok})
    return out


def run_mpi(shapes=MPI_SHAPES, block_sizes=MPI_SIZES, iterations: int = MPI_ITERATIONS, launcher=None,
            hostfile=None, bind_to=None, progress=None) -> dict:
    """Real MPI: per shape x collective x size one launch, kang or kang-v interleaved with
    Open MPI's intercommunicator collective (allgather: equal blocks; allgatherv: arithmetic
    blocks, rank i of a group (i + 1) k with the largest block `size`)."""
    cases = [(pq, coll, b) for pq in shapes for coll in ("inter-allgather", "inter-allgatherv")
             for b in block_sizes]
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = os.getloadavg()
    results = []
    for n, ((p, q), coll, b) in enumerate(cases, 1):
        if coll == "inter-allgather":
            groups, alg = Groups.equal(p, q, b, b), "kang"
        else:
            groups = Groups(sizes.arithmetic_sizes(p, b // p), sizes.arithmetic_sizes(q, b // q))
            alg = "kang-v"
        cfg = InterConfig(groups, coll, backend="mpi", iterations=iterations, models=(), launcher=launcher,
                          hostfile=hostfile, bind_to=bind_to)
        results.append(run_intergroup(cfg, [alg, "native"]))
        if progress:
            progress(n, len(cases), f"{p}:{q} {coll} {b >> 10} KiB")
    return {"suite": "intergroup-mpi", "backend": "mpi", "iterations": iterations,
            "started": started.isoformat(timespec="seconds"),
            "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "load_before": list(load_before), "load_after": list(os.getloadavg()),
            "cpus": os.cpu_count(), "cases": results}
