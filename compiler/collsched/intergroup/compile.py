"""Compiling an intergroup schedule: plan -> InterSchedule -> verify -> predict -> file.

`compile_intergroup` is what `collsched compile --collective inter-allgather(v)` calls
(cli_inter.py) and what tests and the lab call directly. A schedule that fails the
verifier is never written: that is a compiler bug (pipeline.VerificationFailed).

Prediction: timing.predict (the DAG or fluid model on the topology), as for allgather
schedules. Beside it the summary gives the bounds on the topology (bounds.py: the lower
bounds M and cut, and the paper's bounds with t_s, t_w read off the topology's slowest
pair) and the paper's single-port model (cost.simulate) at that t_s, t_w.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .. import __version__, schedfile
from ..errors import InputError
from ..model import budget
from . import PLANS, cost
from .bounds import bounds as topology_bounds
from .grid import plan_kang_grid_on
from .groups import A, B, Groups
from .plan import Plan
from .schedule import COLLECTIVES, InterSchedule, collective_for, from_plan, mark_fifo_links
from .timing import MODELS, InterTiming, predict
from .verify import verify

AUTO = "auto"
GRID = "kang-grid"  # grid.py's plan: it needs the topology's sites, so it is not in PLANS


def algorithms() -> list[str]:
    """Every algorithm name compile_intergroup takes (besides auto)."""
    return sorted(set(PLANS) | {GRID})


def _planner(name: str, topo) -> Callable[[Groups], Plan]:
    return plan_kang_grid_on(topo) if name == GRID else PLANS[name]


def _auto_names(topo) -> list[str]:
    """auto's candidates: every plan, and the grid-aware one where ranks sit on several
    sites (on one site it is Kang's exchange again)."""
    several = len(set(topo.rank_site())) > 1
    return [n for n in algorithms() if n != GRID or several]


@dataclass
class InterCompileResult:
    schedule: InterSchedule
    plan: Plan
    timing: InterTiming  # the model's prediction on the topology
    bounds: dict  # bounds.bounds on the topology, seconds (t_s, t_w: the paper's link cost)
    topology: str
    model: str
    single_port_s: float  # cost.simulate's completion time for (t_s, t_w)
    file_bytes: int | None = None
    timings_s: dict = field(default_factory=dict)
    # auto: every algorithm -> its predicted run time, or why it was not compiled
    algorithms_tried: dict | None = None

    @property
    def compile_time_s(self) -> float:
        return sum(self.timings_s.values())

    def summary(self) -> dict:
        s, g = self.schedule, self.schedule.groups
        b = self.bounds
        run = self.timing.run_time_s

        def gap(bound):  # the prediction over a lower bound, less 1 (None for a zero bound)
            return run / bound - 1.0 if bound > 0 else None

        return {
            "algorithm": s.algorithm,
            "collective": s.collective,
            "p": g.p,
            "q": g.q,
            "ranks": s.nranks,
            "blocks_a": _blocks(g.sizes(A)),
            "blocks_b": _blocks(g.sizes(B)),
            "total_ops": s.total_ops,
            "file_bytes": self.file_bytes,
            "topology": self.topology,
            "model": self.model,
            "predicted_run_time_s": run,
            "predicted_avg_elapsed_s": self.timing.avg_elapsed_s,
            "single_port": {"t_s": b["t_s"], "t_w_s_per_byte": b["t_w"],
                            "predicted_s": self.single_port_s},
            "bounds": {k: v for k, v in b.items() if k not in ("t_s", "t_w")},
            "gap_to_M": gap(b["M"]),
            "gap_to_lower_bound": gap(b["lower_bound"]),
            "auto": ({"picked": s.algorithm, "predicted_run_time_s": self.algorithms_tried}
                     if self.algorithms_tried is not None else None),
            "compile_time_s": self.compile_time_s,
            "timings_s": self.timings_s,
            "input_hash": s.input_hash.hex(),
            "compiler_version": s.compiler_version,
        }


def _blocks(sizes: tuple[int, ...]) -> dict:
    return {"ranks": len(sizes), "min": min(sizes), "max": max(sizes), "total": sum(sizes),
            "equal": len(set(sizes)) == 1}


def input_hash(algorithm: str, collective: str, groups: Groups, model: str, topo) -> bytes:
    """SHA-256 of the canonical inputs (pipeline.input_hash over the topology and these)."""
    from ..pipeline import input_hash as canonical

    options = {"collective": collective, "model": model,
               "sizes_a": list(groups.sizes_a), "sizes_b": list(groups.sizes_b)}
    return canonical(algorithm, options, topo, np.zeros((1, groups.nranks)))


# The paper's algorithms forward several messages to one neighbour (their rings): FIFO per
# link keeps them pipelined (schedule.mark_fifo_links). The root-gathering baselines are
# left as the MPI libraries run them.
FIFO_PLANS = frozenset({"kang", "kang-v", GRID})


def _verified(plan: Plan, collective: str) -> InterSchedule:
    """The plan's schedule, verified; VerificationFailed (a compiler bug) if it is not."""
    from ..pipeline import VerificationFailed

    s = from_plan(plan, collective)
    if plan.name in FIFO_PLANS:
        mark_fifo_links(s)
    found = verify(s)
    if found:
        raise VerificationFailed(found)
    return s


def compile_intergroup(algorithm: str, groups: Groups, collective: str | None = None,
                       topology: str | None = None, output: str | Path | None = None, *,
                       model: str = "fluid", duplex: str | None = None) -> InterCompileResult:
    """Plan, verify, predict and (with `output`) write one intergroup schedule.

    algorithm: a name of intergroup.PLANS, kang-grid (grid.py, on the topology's sites), or
    "auto": every one that can plan these groups (kang-grid where the ranks sit on several
    sites), keeping the fastest predicted run time (the first in name order on a tie).
    collective: inter-allgather (one block size per group) or inter-allgatherv; default:
    whichever the sizes are. topology: a topology file with p + q ranks, or None for
    the default cluster (pipeline.resolve_topology). model: fluid (the default: within 0.1% of
    SMPI CM02 for the four plans, docs/intergroup.md) or dag (timing.py)."""
    from ..pipeline import resolve_topology

    coll = collective or collective_for(groups)
    if coll not in COLLECTIVES:
        raise InputError("--collective", str(coll), "expected " + " or ".join(COLLECTIVES))
    if coll == "inter-allgather" and collective_for(groups) != coll:
        raise InputError("--collective", coll, "expected one block size per group for "
                                               "inter-allgather; use inter-allgatherv")
    if algorithm != AUTO and algorithm not in algorithms():
        raise InputError("--algorithm", str(algorithm),
                         "expected one of " + ", ".join(algorithms()) + " or auto")
    if model not in MODELS:
        raise InputError("--model", str(model), "expected " + " or ".join(MODELS))
    n = groups.nranks
    # Before a transfer is planned: the rings move about (p + q)^2 pieces.
    budget.check(n, transfers=n * n, source="--groups", what=f"{groups.p} + {groups.q} ranks",
                 hint="expected smaller groups")
    timings = dict.fromkeys(("inputs", "plan", "verify", "simulate"), 0.0)
    t = time.perf_counter()
    topo = resolve_topology(n, topology, duplex)
    bounds = topology_bounds(groups, topo)
    timings["inputs"] = time.perf_counter() - t
    names = _auto_names(topo) if algorithm == AUTO else [algorithm]
    found: dict[str, tuple[Plan, InterSchedule, InterTiming]] = {}
    why: dict[str, str] = {}
    for name in names:
        t = time.perf_counter()
        try:
            plan = _planner(name, topo)(groups)
        except ValueError as e:  # a plan that cannot serve these groups
            if algorithm != AUTO:
                raise InputError("--algorithm", name, f"cannot plan these groups: {e}") from None
            why[name] = f"not applicable: {e}"
            continue
        finally:
            timings["plan"] += time.perf_counter() - t
        t = time.perf_counter()
        s = _verified(plan, coll)
        timings["verify"] += time.perf_counter() - t
        t = time.perf_counter()
        found[name] = (plan, s, predict(s, topo, model))
        timings["simulate"] += time.perf_counter() - t
    if not found:
        raise InputError("--algorithm", algorithm, "no algorithm serves these groups: "
                         + "; ".join(f"{k}: {v}" for k, v in why.items()))
    pick = min(found, key=lambda k: (found[k][2].run_time_s, k))
    plan, s, timing = found[pick]
    s.compiler_version = __version__
    s.full_duplex = bool(topo.full_duplex)  # what it was timed for; simulate's default
    s.input_hash = input_hash(algorithm, coll, groups, model, topo)
    single = cost.simulate(groups, plan.transfers, t_s=bounds["t_s"], t_w=bounds["t_w"]).finish
    result = InterCompileResult(s, plan, timing, bounds, topo.name, model, single,
                                timings_s=timings)
    if algorithm == AUTO:
        result.algorithms_tried = {k: (found[k][2].run_time_s if k in found else why[k])
                                   for k in names}
    if output is not None:
        t = time.perf_counter()
        result.file_bytes = schedfile.write(s, output)
        timings["write"] = time.perf_counter() - t
    return result
