"""The compiler's main job as library calls: inputs -> algorithm -> IR -> passes -> verify -> simulate -> file.

The CLI is a thin layer over these functions; tests and benchmarks call them directly.
A schedule that fails verification is never written: that would be a compiler bug, and
it is reported as one (VerificationFailed, exit status 1).
"""
from __future__ import annotations

import dataclasses

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import __version__, kernels, passes, schedfile
from .passes import ENGINES  # noqa: F401  (callers' name)
from .model import budget
from .algorithms import REGISTRY, Request, generate
# Imported here, not where used: the input libraries' import time (jsonschema's above all)
# is process start-up, not part of a compile job's timings.
from .inputs.arrivals import resolve_pattern
from .inputs.topology import homogeneous, load_topology
from .errors import InputError
from .ir import SEND, Schedule
from .model.policy import DIRECT_MAX_PAIRS, execution_candidates, segment_candidates
from .model.simulate import Metrics, simulate_pattern
from .inputs.units import MAX_BYTES
from .inputs.units import parse_bytes_range as parse_bytes_arg  # noqa: F401  (the CLI's name)
from .intergroup.schedule import InterSchedule
from .intergroup.verify import verify as verify_intergroup
from .verify import Violation, verify_and_match


class VerificationFailed(Exception):
    def __init__(self, violations: list[Violation]):
        self.violations = violations
        super().__init__(str(violations[0]))


@dataclass
class CompileResult:
    schedule: Schedule
    metrics: Metrics
    predicted_for_bytes: int
    timings_s: dict = field(default_factory=dict)
    model: str = "dag"  # the cost model of the prediction (dag or fluid)
    # model="auto": which model timed the pick and why (_retime), else None
    model_choice: dict | None = None
    engine: str = "pat"  # who runs the background operations (ENGINES)
    file_bytes: int | None = None
    # lowerbound.LowerBound at predicted_for_bytes for the same pattern, or None;
    # lower_bound_note says why it is missing (not asked for, too many ranks).
    lower_bound: object = None
    lower_bound_note: str | None = "not computed (compile --lower-bound or --json; compile_schedule(lower_bound=True))"
    # lowerbound.SerialBound for a serial schedule (no serial one beats it), else None
    serial_bound: object = None
    # segments="auto" with more than one candidate: segment count -> predicted avg elapsed
    segments_tried: dict | None = None
    # min3 --pap where serial and dataflow plans were both timed: "serial"/"dataflow" ->
    # predicted avg elapsed (each at its best segment count)
    execution_tried: dict | None = None
    # ... re-timed with the fluid model where the topology has message_costs (which picks)
    execution_fluid: dict | None = None
    # --algorithm auto: every candidate algorithm -> its predicted avg elapsed (at its best
    # segment count and execution), or why it was not compiled (a string)
    algorithms_tried: dict | None = None
    # --algorithm auto: the finalists re-timed with the fluid model (_fluid_check), or None
    fluid_checked: dict | None = None

    @property
    def compile_time_s(self) -> float:
        return sum(self.timings_s.values())

    def summary(self) -> dict:
        s = self.schedule
        return {
            "algorithm": s.algorithm,
            "collective": s.collective,
            "ranks": s.nranks,
            "segments": s.nseg,
            # --segments auto: every count tried and its predicted average elapsed time
            "segments_tried": ({str(k): v for k, v in self.segments_tried.items()}
                               if self.segments_tried else None),
            "execution": ("serial" if s.serial else "dataflow")
                         + (", direct" if self.execution_tried and not _forwarded(s) else ""),
            "execution_tried": self.execution_tried,
            "execution_fluid": self.execution_fluid,
            # --algorithm auto: the one picked (also "algorithm") and every candidate's prediction
            "auto": ({"picked": s.algorithm, "predicted_avg_elapsed_s": self.algorithms_tried,
                      "fluid_avg_elapsed_s": self.fluid_checked, "gap_avg_elapsed": self._auto_gaps()}
                     if self.algorithms_tried is not None else None),
            "bytes_min": s.bytes_min,
            "bytes_max": s.bytes_max,
            "duplex": "full" if s.full_duplex else "half",
            "total_ops": s.total_ops,
            "compile_time_s": self.compile_time_s,
            "timings_s": self.timings_s,
            # "c" (the C kernels ran), or why the compiler ran Python instead (kernels/)
            "kernels": kernels.status(),
            "model": self.model,  # the cost model of the predicted_* figures
            "model_choice": self.model_choice,  # --model auto: which model picked, and why
            "engine": self.engine,  # pat: background ops before arrival; none: all in the call
            "predicted_for_bytes": self.predicted_for_bytes,
            "predicted_avg_elapsed_s": self.metrics.avg_elapsed_s,
            "predicted_run_time_s": self.metrics.run_time_s,
            "predicted_absorption_s": self.metrics.absorption_s,
            "imbalance_factor": self.metrics.imbalance_factor,
            "file_bytes": self.file_bytes,
            "input_hash": s.input_hash.hex(),
            **self._bound_summary(),
        }

    def bound_line(self) -> str:
        """The lower bound and the prediction's gap to it, in one line (compile --lower-bound)."""
        d = self._bound_summary()
        if d["lower_bound_s"] is None:
            return f"lower bound: {d['lower_bound_note']}"
        gap = "" if d["gap"] is None else f"; predicted run time {d['gap'] * 100:.1f}% above it"
        return (f"lower bound on the run time {d['lower_bound_s'] * 1e3:.3f} ms "
                f"({d['lower_bound_method']}){gap}")

    def _bound_summary(self) -> dict:
        """lower_bound_s bounds the run time; gap = predicted_run_time_s / lower_bound_s - 1.
        The *_avg_elapsed_s pair does the same for the average elapsed time (docs/grid-baselines.md)."""
        lb, sb = self.lower_bound, self.serial_bound
        # Serial schedules (docs/semantics.md) also get the bound no serial schedule beats
        # (lowerbound.serial_lower_bound): it tells which part of the gap to the LP bound
        # serial execution itself costs, and which part the plan.
        serial = {"serial_lower_bound_s": sb.run_time_s if sb else None,
                  "serial_lower_bound_avg_elapsed_s": sb.avg_elapsed_s if sb else None}
        if lb is None:
            return {"lower_bound_s": None, "gap": None, "lower_bound_avg_elapsed_s": None,
                    "gap_avg_elapsed": None, "lower_bound_method": None, "lower_bound_time_s": None,
                    "lower_bound_note": self.lower_bound_note, **serial}
        run, avg = gap_to(self.metrics.run_time_s, lb.run_time_s), gap_to(self.metrics.avg_elapsed_s, lb.avg_elapsed_s)
        return {**serial, "lower_bound_s": lb.run_time_s, "gap": run,
                "lower_bound_avg_elapsed_s": lb.avg_elapsed_s, "gap_avg_elapsed": avg,
                "lower_bound_method": lb.method, "lower_bound_time_s": lb.solve_time_s,
                # a gap is undefined only where the bound is 0 (0 bytes, or nothing to wait for)
                "lower_bound_note": None if run is not None and avg is not None else "gap undefined: a bound of 0"}

    def _auto_gaps(self) -> dict | None:
        """--algorithm auto: every compiled candidate's predicted avg elapsed over the bound, - 1."""
        if self.lower_bound is None:
            return None
        return {n: gap_to(t, self.lower_bound.avg_elapsed_s) for n, t in self.algorithms_tried.items()
                if not isinstance(t, str)}


def gap_to(value: float | None, bound: float | None) -> float | None:
    """value / bound - 1 (how far a time lies above its lower bound), None where either is
    missing or the bound is not positive. The lab's measured gaps use it too (lab/report.py)."""
    if value is None or bound is None or not bound > 0:
        return None
    return value / bound - 1.0


def resolve_topology(nranks: int, topology_path: str | None, duplex: str | None):
    """The topology for `nranks` ranks: a file, or a homogeneous default cluster."""

    topo = load_topology(topology_path, nranks) if topology_path else homogeneous(nranks)
    if topo.nranks != nranks:
        raise InputError(topology_path or "<homogeneous>", "placement",
                         f"expected {nranks} ranks, topology places {topo.nranks}")
    if duplex is not None:
        if duplex not in ("half", "full"):
            raise InputError("--duplex", duplex, "expected half or full")
        topo = topo.with_duplex(duplex == "full")
    return topo


def input_hash(algorithm: str, options: dict, topo, pattern: np.ndarray) -> bytes:
    """SHA-256 of everything the schedule was compiled from (stored in the file header).

    Matrices are hashed as little-endian float64 bytes: canonical, and fast enough for
    1024 x 1024 rank pairs (a JSON rendering of them takes seconds).
    """
    h = hashlib.sha256()
    head = {"algorithm": algorithm, "options": options, "name": topo.name,
            "hosts": list(topo.hosts), "host_site": list(topo.host_site),
            "rank_host": np.asarray(topo.rank_host).tolist(), "full_duplex": bool(topo.full_duplex),
            "tcp_window": topo.tcp_window, "eager_limit": topo.eager_limit}
    h.update(json.dumps(head, sort_keys=True, default=str).encode())
    for name in ("latency", "bandwidth", "os_a", "os_per_byte", "g_a", "g_per_byte"):
        a = getattr(topo, name)
        h.update(name.encode())
        if a is not None:
            h.update(np.ascontiguousarray(a, dtype="<f8").tobytes())
    h.update(np.ascontiguousarray(pattern, dtype="<f8").tobytes())
    return h.digest()


def compile_schedule(algorithm: str, nranks: int, nbytes: int | str | tuple[int, int], *,
                     topology: str | None = None, pap: str | None = None,
                     duplex: str | None = None, segments: int | str = "auto",
                     tau: float | None = None, collective: str = "allgather",
                     output: str | Path | None = None, lower_bound: bool = False,
                     model: str = "dag", engine: str = "pat") -> CompileResult:
    """Generate, verify, simulate and (optionally) write one schedule.

    nbytes: bytes per rank, an int, a (MIN, MAX) pair, or a string as the CLI's --bytes
    takes it ("64KiB", "1MiB", "1KiB:1MiB" for one file serving the range).

    algorithm: a registered name, or "auto": every applicable candidate (auto_candidates)
    is compiled and the one the cost model predicts fastest is written (summary()["auto"]).
    segments: pieces per block, or "auto": the count policy.segment_candidates offers
    whose plan the cost model predicts fastest (average elapsed time; fewer segments on a
    tie). Arrival-aware min3 is also planned both serial and dataflow where
    policy.execution_candidates says so, and the faster kept (serial on a tie).
    Every candidate is generated, verified and timed; compile_time_s counts them all.
    model: the cost model of the prediction, "dag" (simulate.py), "fluid" (fluid.py) or
    "auto" (`collsched compile`'s default): the DAG model searches, and where it is known to
    be off (fluid_matters: shared wide-area links, size-dependent costs) the fluid model
    re-times the finalists, picks and gives the prediction (_retime; summary()["model_choice"]
    says which and why). The library's default stays "dag": every prediction of the DAG
    model alone, as callers (the lab, caches, tests) have always had them, at its speed.
    engine: "pat" (the PAT engine runs the background operations, before the rank
    arrives: docs/semantics.md, "Phases") or "none" (every operation runs inside the call,
    as the preload library and collsched_allgather run a schedule): every candidate's
    operations become foreground after generation, before the passes, the verifier and
    the model, so the predictions time what the runtime does; or "ahead" (a cache's
    receive-ahead, docs/cache.md): per rank only the leading background receives stay
    background (the runtime posts them at the end of the call before), every other
    operation is foreground; serial schedules and byte ranges run wholly in the call.
    lower_bound: also compute the LP lower bound (lowerbound.py) for the predicted size and
    pattern; its time is reported apart (lower_bound_time_s), not in compile_time_s.
    Skipped above MAX_BOUND_RANKS ranks (lower_bound_note says so).
    """
    if collective != "allgather":
        raise InputError("--collective", collective, "expected allgather (the only collective so far)")
    if model not in MODELS:
        raise InputError("--model", model, "expected " + ", ".join(MODELS))
    if engine not in ENGINES:
        raise InputError("--engine", str(engine), "expected " + " or ".join(ENGINES))
    if not isinstance(nranks, int) or not 2 <= nranks <= schedfile.MAX_RANKS:
        raise InputError("--ranks", str(nranks), f"expected an integer 2..{schedfile.MAX_RANKS} "
                                                 "(the schedule format's limit)")
    if segments != "auto" and not (isinstance(segments, int) and 1 <= segments <= schedfile.MAX_SEGMENTS):
        raise InputError("--segments", str(segments), f"expected 1..{schedfile.MAX_SEGMENTS} or auto")
    if isinstance(nbytes, str):  # as the CLI's --bytes: "64KiB", "1KiB:1MiB"
        nbytes = parse_bytes_arg(nbytes)
    lo, hi = (nbytes, nbytes) if isinstance(nbytes, int) else nbytes
    if not 0 <= lo <= hi <= MAX_BYTES:
        raise InputError("--bytes", f"{lo}:{hi}", f"expected 0 <= MIN <= MAX <= {MAX_BYTES}")
    # Before anything P x P or per transfer is allocated (budget.py).
    budget.check(nranks, segments if segments != "auto" else 1)
    timings = dict.fromkeys(("inputs", "generate", "verify", "simulate"), 0.0)
    t = time.perf_counter()
    topo = resolve_topology(nranks, topology, duplex)
    pattern = resolve_pattern(nranks, pap)
    timings["inputs"] = time.perf_counter() - t
    if tau is not None and not tau > 0:
        raise InputError("--tau", str(tau), "expected a positive time")

    names = auto_candidates(topo, pattern) if algorithm == AUTO else [algorithm]
    found, why = {}, {}
    for name in names:
        try:
            found[name] = _search(name, algorithm, topo, pattern, segments, tau, lo, hi, model, timings,
                                  engine, default_cluster=topology is None)
        except InputError as e:  # auto: an algorithm that cannot serve this request
            if algorithm != AUTO:
                raise
            why[name] = f"not applicable: {e.expected}"
    if not found:
        raise InputError("--algorithm", algorithm, "no candidate algorithm serves this request: "
                         + "; ".join(f"{n}: {w}" for n, w in why.items()))
    checked = _fluid_check(found, topo, pattern, hi, timings) if algorithm == AUTO and model == "dag" else None
    if model == AUTO:
        checked = _auto_compare(found)
    pick = _pick(found, checked)
    (best, seg_tried, exe_tried, exe_fluid, choice) = found[pick]
    used = model if model != AUTO else choice["by"]
    result = CompileResult(best[0], best[1], hi, timings, model=used, engine=engine,
                           segments_tried=seg_tried if len(seg_tried) > 1 else None,
                           execution_tried=exe_tried if len(exe_tried) > 1 else None,
                           execution_fluid=exe_fluid, model_choice=choice)
    if algorithm == AUTO:
        result.algorithms_tried = {n: (found[n][0][1].avg_elapsed_s if n in found else why[n])
                                   for n in names}
        result.fluid_checked = checked
    if lower_bound:
        _attach_lower_bound(result, topo, hi, pattern)
    if output is not None:
        t = time.perf_counter()
        result.file_bytes = schedfile.write(best[0], output)
        timings["write"] = time.perf_counter() - t
    return result


AUTO = "auto"
# Who runs a schedule's background operations: the PAT engine, before the rank arrives
# (pat), or nobody: the whole list inside the call (none; the preload library, a cache).
# (ahead: only each rank's leading background receives stay background: what the
# runtime's receive-ahead posts at the end of the call before, docs/cache.md).
# --algorithm auto's candidates, in this order (the first of equal predictions wins): the
# regular baselines, the grid baselines, then the planners (forest where the ranks span
# several sites); bslb, bdr and agg only with imbalanced arrivals (they wait for the
# pattern's order). Refused ones are skipped; unregistered ones (agg, forest: issue 20's
# planners, until their modules exist) are left out (auto_candidates).
AUTO_REGULAR = ("ring", "nex", "bruck", "rd", "spreading", "lnbc", "magpie", "mpichg2", "min3")
AUTO_ARRIVAL_AWARE = ("bslb", "bdr", "agg")


MODELS = ("auto", "dag", "fluid")
# --model auto: schedules of more than this many operations get the DAG model's figure
# calibrated (the fluid model is an event simulation: with its C kernel (kernels/fluid.c)
# 0.7 s for min3 in 16 segments on wan-3x16 at P = 48, 72,192 transfers, 1.7 s for 144,384;
# without it, in Python, 30 s for the first).
FLUID_AUTO_OPS = 150_000


def fluid_matters(topo) -> str | None:
    """Why the DAG model is not to be trusted on this topology (so --model auto re-times with
    the fluid model), or None. Under CM02 the fluid model matched SimGrid within 1% in every
    case of docs/benchmarks.md's model check, the DAG model was off by up to 44% (bruck on
    wan-3x16) where flows share wide-area links, and by 30% for min3 at 4 MiB on a four-site
    platform with shared links (issue 21): it queues a link's flows one after another where
    SimGrid and TCP share the link. With size-dependent costs the fluid model picks between
    serial and dataflow plans too (execution_fluid)."""
    if topo.nranks > 1 and topo.shared_links.any:
        return "the topology has shared wide-area links (the DAG model queues their flows; SimGrid shares them)"
    if topo.message_costs is not None:
        return "the topology has size-dependent message costs"
    return None


def _retime(pool: dict, topo, pattern, nbytes: int, timings: dict):
    """--model auto within one algorithm: pool = {candidate: (schedule, DAG metrics)}.
    Returns ((schedule, metrics) picked, model_choice).

    Where fluid_matters, the finalists (within FLUID_CHECK of the DAG model's best, at most
    FLUID_FINALISTS) are re-timed with the fluid model, which picks and predicts. A finalist
    of more than FLUID_AUTO_OPS operations gets the DAG model's figure calibrated against
    the fluid model: times the ratio fluid / DAG of the largest candidate of its execution
    the fluid model can time (the error of the DAG model grows with the flows in flight,
    which grow with the segments; the nearest candidate is the best estimate of it).
    Elsewhere, the DAG model's best."""
    order = sorted(pool, key=lambda k: pool[k][1].avg_elapsed_s)
    first = order[0]
    choice = {"requested": AUTO, "by": "dag", "why": None, "dag_avg_elapsed_s": pool[first][1].avg_elapsed_s,
              "fluid_avg_elapsed_s": None, "calibration": None}
    why = fluid_matters(topo)
    if why is None:
        choice["why"] = "the DAG model: no shared wide-area links and constant message costs"
        return pool[first], choice
    best = pool[first][1].avg_elapsed_s
    near = [k for k in order if pool[k][1].avg_elapsed_s <= best * (1 + FLUID_CHECK)][:FLUID_FINALISTS]
    small = [k for k in pool if pool[k][0].total_ops <= FLUID_AUTO_OPS]
    refs = {}  # execution -> the largest candidate the fluid model times
    for k in small:
        ex = k.rsplit(",", 1)[0]
        if ex not in refs or pool[k][0].total_ops > pool[refs[ex]][0].total_ops:
            refs[ex] = k
    timed = [k for k in near if k in small]
    timed += [refs[k.rsplit(",", 1)[0]] for k in near if k not in small and k.rsplit(",", 1)[0] in refs]
    timed = list(dict.fromkeys(timed))
    if not timed:
        choice["why"] = (f"the DAG model: {why}, but every candidate has more than the fluid model's "
                         f"{FLUID_AUTO_OPS} operations")
        return pool[first], choice
    fluid = _fluid_metrics({k: pool[k][0] for k in timed}, topo, nbytes, pattern, timings)
    est, calibration = {}, {}
    for k in near:
        if k in fluid:
            est[k] = fluid[k]
        elif k.rsplit(",", 1)[0] in refs:
            ref = refs[k.rsplit(",", 1)[0]]
            ratio = fluid[ref].avg_elapsed_s / pool[ref][1].avg_elapsed_s
            est[k] = _scaled(pool[k][1], ratio)
            calibration[k] = {"ratio": ratio, "from": ref}
    if not est:
        choice["why"] = f"the DAG model: {why}, but no finalist could be timed or calibrated"
        return pool[first], choice
    pick = min(est, key=lambda k: (est[k].avg_elapsed_s, near.index(k)))
    by = "fluid" if pick in fluid else "dag calibrated by fluid"
    choice.update(by=by, why=f"{'the fluid model' if pick in fluid else 'the DAG model calibrated against the fluid model (FLUID_AUTO_OPS)'}: {why}",
                  dag_avg_elapsed_s=pool[pick][1].avg_elapsed_s,
                  fluid_avg_elapsed_s={k: m.avg_elapsed_s for k, m in fluid.items()},
                  calibration=calibration.get(pick))
    return (pool[pick][0], est[pick]), choice


def _fluid_metrics(scheds: dict, topo, nbytes, pattern, timings) -> dict:
    from .model.fluid import fluid_pattern

    start = time.perf_counter()
    out = {k: fluid_pattern(s, topo, nbytes, pattern)[2] for k, s in scheds.items()}
    timings["simulate"] += time.perf_counter() - start
    return out


def _scaled(m, ratio: float):
    """Metrics with every time from the call's start scaled by ratio (a calibration)."""
    return dataclasses.replace(m, avg_elapsed_s=m.avg_elapsed_s * ratio, run_time_s=m.run_time_s * ratio,
                               absorption_s=m.absorption_s * ratio,
                               exit_times_s=[t * ratio for t in m.exit_times_s])


def _auto_compare(found: dict) -> dict:
    """--model auto across algorithms: each one's pick by the model that timed it when one
    model timed them all (the fluid model where it could), else by the DAG model's figures."""
    if all(found[n][4]["by"] != "dag" for n in found):
        return {n: found[n][0][1].avg_elapsed_s for n in found}
    return {n: found[n][4]["dag_avg_elapsed_s"] for n in found}


FOREST_AUTO_MAX_RANKS = 256


def auto_candidates(topo, pattern: np.ndarray) -> list[str]:
    """The algorithms `--algorithm auto` compiles for this topology and pattern: the regular
    ones, forest where the ranks span several sites, the arrival-aware ones (agg too) where
    the arrivals differ; agg and forest only once their modules have registered."""
    imbalanced = bool(np.ptp(pattern[0])) if pattern.size else False
    grid = len(set(topo.rank_site())) > 1
    # forest plans 44-56 s at P = 1024 on grid-8x128 and never beat min3 on the bundled
    # grids (docs/forest.md): auto tries it only where it compiles in seconds.
    forest = grid and topo.nranks <= FOREST_AUTO_MAX_RANKS
    names = list(AUTO_REGULAR) + (["forest"] if forest else []) + (list(AUTO_ARRIVAL_AWARE) if imbalanced else [])
    return [n for n in names if n in REGISTRY]


# --algorithm auto re-times with the fluid model the candidates the DAG model predicts
# within FLUID_CHECK of the best (at most FLUID_FINALISTS, each of at most FLUID_CHECK_OPS
# operations: the fluid model is an event simulation) and picks by it.
FLUID_CHECK, FLUID_FINALISTS, FLUID_CHECK_OPS = 1.0, 8, 30_000


def _fluid_check(found: dict, topo, pattern, nbytes: int, timings: dict) -> dict | None:
    """{finalist: fluid avg elapsed}, or None when fewer than two finalists. Why: the DAG
    model sends a rank's messages one after another, where the runtime issues them at once
    and they share its NIC; a schedule that forwards pieces while many are in flight then
    runs up to 1.9x later than the DAG model says (the segmented ring under SimGrid's SMPI
    model; docs/semantics.md), while the fluid model shares NICs as SimGrid does."""
    t = {n: found[n][0][1].avg_elapsed_s for n in found}
    best = min(t.values())
    near = [n for n in sorted(found, key=t.get)
            if t[n] <= best * (1 + FLUID_CHECK) and found[n][0][0].total_ops <= FLUID_CHECK_OPS]
    if len(near) < 2:
        return None
    fluid = _fluid_metrics({n: found[n][0][0] for n in near[:FLUID_FINALISTS]}, topo, nbytes, pattern, timings)
    return {n: m.avg_elapsed_s for n, m in fluid.items()}


def _pick(found: dict, checked: dict | None = None) -> str:
    """The algorithm whose best candidate the model predicts fastest (among the fluid-checked
    finalists, the fluid model's fastest). Predictions equal to 1e-9 (several algorithms at
    the port bound) go to the one that forwards the fewest pieces, then to the first:
    forwarding chains are where the DAG model is optimistic (a relay waits for a piece that
    shared its sender's NIC; docs/semantics.md)."""
    t = checked or {n: found[n][0][1].avg_elapsed_s for n in found}
    best = min(t.values())
    ties = [n for n in found if n in t and t[n] <= best * (1 + 1e-9)]
    return min(ties, key=lambda n: (_forwarded(found[n][0][0]), ties.index(n)))


def _forwarded(sched: Schedule) -> int:
    """How many sends forward a piece of another origin."""
    return int(np.count_nonzero((sched.kind == SEND) & (sched.origin != sched.rank_of_op)))


def _search(name, requested, topo, pattern, segments, tau, lo, hi, model, timings, engine="pat",
            default_cluster=False):
    """One algorithm's candidates (segment counts x serial/dataflow, policy.py), each
    generated, verified and timed; returns ((schedule, metrics) of the fastest,
    {segments: best avg elapsed}, {execution: best avg elapsed}, {execution: fluid avg
    elapsed} or None, model_choice or None). model "auto": the DAG model times every
    candidate, then _retime picks (the figures of the two dicts are the DAG model's)."""
    search_model = "dag" if model == AUTO else model
    pool = {}
    nranks = topo.nranks
    counts = segment_candidates(name, topo, nranks, hi) if segments == "auto" else [segments]
    executions = execution_candidates(name, topo, pattern[0] - pattern[0].min())
    if engine == "ahead" and name == "min3" and executions == [{}] and np.ptp(pattern[0]) > 0:
        # a serial plan runs wholly in the call there: the dataflow plans (relayed and
        # direct) get their leading receives early, so all three are timed
        executions = [{"serial": True}, {"serial": False}, {"serial": False, "relays": False}]
    budget.check(nranks, max(counts))
    options = {"bytes": [lo, hi], "segments": counts[0] if len(counts) == 1 else segments,
               "tau": tau, "duplex": topo.full_duplex}
    if requested == AUTO:
        options["picked_by"] = AUTO
    if engine != "pat":  # (pat: the input hashes of before the option)
        options["engine"] = engine
    digest = input_hash(name, options, topo, pattern)
    best, seg_tried, exe_tried, variants = None, {}, {}, {}
    for fields in executions:
        for nseg in counts:
            if fields.get("relays") is False and nranks * nranks * nseg > DIRECT_MAX_PAIRS:
                continue
            sched, metrics = _compile_one(name, topo, pattern, nseg, tau, lo, hi, digest, search_model,
                                          timings, engine=engine, default_cluster=default_cluster,
                                          **fields)
            t = metrics.avg_elapsed_s
            seg_tried[nseg] = min(seg_tried.get(nseg, t), t)
            key = ("serial" if sched.serial else "dataflow") + ("" if fields.get("relays", True) else ", direct")
            exe_tried[key] = min(exe_tried.get(key, t), t)
            if key not in variants or t < variants[key][1].avg_elapsed_s:
                variants[key] = sched, metrics
            if best is None or t < best[1].avg_elapsed_s:
                best = sched, metrics
            if model == AUTO:
                pool[f"{key}, {nseg} segment{'s' if nseg > 1 else ''}"] = sched, metrics
    if model == AUTO:
        best, choice = _retime(pool, topo, pattern, hi, timings)
        return best, seg_tried, exe_tried, None, choice
    exe_fluid = None
    if len(variants) > 1 and model == "dag" and topo.message_costs is not None:
        exe_fluid = _fluid_check({k: (v,) for k, v in variants.items()}, topo, pattern, hi, timings)
        if exe_fluid:
            best = variants[min(exe_fluid, key=exe_fluid.get)]
    return best, seg_tried, exe_tried, exe_fluid, None


def _compile_one(algorithm, topo, pattern, nseg, tau, lo, hi, digest, model, timings,
                 serial=None, relays=True, engine="pat", default_cluster=False):
    """One candidate of compile_schedule: (verified schedule, predicted metrics); adds
    its stage times to `timings`."""
    t = time.perf_counter()
    req = Request(nranks=topo.nranks, nbytes=hi, nseg=nseg, full_duplex=topo.full_duplex,
                  topology=topo, arrivals=pattern[0] - pattern[0].min(), tau=tau, serial=serial,
                  relays=relays)
    sched = generate(algorithm, req)
    if engine == "none" or (engine == "ahead" and (sched.serial or lo != hi)):
        passes.all_foreground(sched)  # (ahead: the runtime pre-posts only dataflow single-size entries)
    elif engine == "ahead":
        passes.leading_receives_only(sched)
    sched = passes.apply(sched, topo, hi)  # receive gating, FIFO marks
    if engine == "ahead":
        passes.leading_receives_only(sched)  # the gated lists may have moved some
    sched.bytes_min, sched.bytes_max = lo, hi
    sched.compiler_version = __version__
    sched.input_hash = digest
    timings["generate"] += time.perf_counter() - t

    t = time.perf_counter()
    # Grid schedules (min3) record their pool tree's partitions: check wide-area optimality.
    # (Serial schedules - Schedule.serial - are proven for serial execution.)
    violations, matching = verify_and_match(sched, sched.pool_partitions)
    timings["verify"] += time.perf_counter() - t
    if violations:
        raise VerificationFailed(violations)

    t = time.perf_counter()
    if model == "fluid":  # the fluid model (fluid.py): slower, closer to SimGrid (docs/lab.md)
        from .model.fluid import fluid_pattern

        _, _, metrics = fluid_pattern(sched, topo, hi, pattern, matching=matching)
    else:
        metrics = _by_classes(sched, topo, hi, pattern, engine, default_cluster)
        if metrics is None:
            _, _, metrics = simulate_pattern(sched, topo, hi, pattern, matching=matching)
    timings["simulate"] += time.perf_counter() - t
    check_finite(metrics, topo, "--bytes", hi)
    return sched, metrics


# From this many operations on, a symmetric schedule on the default cluster with flat
# arrivals is timed by the DAG model over its classes of symmetric transfers
# (compact/model_sym.py: O(P nseg) instead of the whole P^2 graph; at P = 4096 the whole
# graph of a ring takes tens of seconds and several GiB). Below it, the whole graph, as
# always: small compiles report what they reported before to the last bit.
CLASS_MODEL_OPS = 1 << 22
# Schedules whose every rank's list is a rotation of rank 0's (model_sym: exact by symmetry).
CLASS_MODEL_ALGORITHMS = ("ring", "bruck", "spreading", "nex")


def _by_classes(sched: Schedule, topo, nbytes: int, pattern: np.ndarray, engine: str,
                default_cluster: bool) -> Metrics | None:
    """The DAG model's metrics of `sched` from its symmetry classes, or None where that
    route does not apply (CLASS_MODEL_OPS, CLASS_MODEL_ALGORITHMS; full duplex, the PAT
    engine, every iteration flat). With every rank arriving at 0 every rank exits when
    the call ends, as the whole graph's timing gives for these schedules; the other
    metrics follow as simulate._metrics derives them (no imbalance, no absorption)."""
    flat = pattern.size and not np.ptp(pattern, axis=1).any()
    if not (default_cluster and flat and engine == "pat" and topo.full_duplex and not sched.serial
            and sched.algorithm in CLASS_MODEL_ALGORITHMS and sched.total_ops >= CLASS_MODEL_OPS):
        return None
    from .compact.desc import for_default
    from .compact.model import predict
    from .model.simulate import tau

    try:
        desc = for_default(sched.algorithm, sched.nranks, (sched.bytes_min, sched.bytes_max), sched.nseg)
        run = predict(desc, None, nbytes)
    except InputError:  # a case the compact form does not describe: the whole graph
        return None
    exits = np.full(sched.nranks, run)
    t = tau(topo, sched, nbytes)
    return Metrics(avg_elapsed_s=float(np.mean(exits)), run_time_s=float(exits.max()), absorption_s=0.0,
                   imbalance_s=0.0, tau_s=t, imbalance_factor=0.0, exit_times_s=exits.tolist())


def check_finite(metrics: Metrics, topo, source: str, nbytes: int) -> None:
    """InputError when a predicted time overflowed (latency 1e308 s, bandwidth 1e-320 B/s):
    no result with inf or NaN is printed, written or handed to the lower bound's LP."""
    values = (metrics.avg_elapsed_s, metrics.run_time_s, metrics.absorption_s, metrics.tau_s,
              metrics.imbalance_factor, *metrics.exit_times_s)
    if not all(np.isfinite(values)):
        raise InputError(topo.name if source == "--bytes" else source, "",
                         f"predicted times are not finite (run time {metrics.run_time_s} s at "
                         f"{nbytes} bytes per rank): expected latencies, bandwidths, arrival times "
                         f"and --bytes whose times fit a float")


MAX_BOUND_RANKS = 1024  # beyond: the closed-form part alone takes seconds (P^2 log P)


def _attach_lower_bound(result: CompileResult, topo, nbytes: int, pattern: np.ndarray) -> None:
    from .model.lowerbound import pattern_lower_bound, serial_lower_bound

    if topo.nranks > MAX_BOUND_RANKS:
        result.lower_bound_note = f"skipped: more than {MAX_BOUND_RANKS} ranks"
        return
    try:
        result.lower_bound = pattern_lower_bound(topo, nbytes, pattern)
    except RuntimeError as e:  # the LP solver gave up: the schedule stands, its gap is unknown
        result.lower_bound_note = f"skipped: {e}"
        return
    result.lower_bound_note = None
    if result.schedule.serial and not result.schedule.has_messages:  # its premise: one piece per message
        result.serial_bound = serial_lower_bound(topo, nbytes, pattern)


def verify_file(path: str | Path) -> tuple[Schedule, list[Violation]]:
    sched = schedfile.read(path)
    # The file itself is at most schedfile.MAX_FILE_BYTES; matching and timing it take more.
    budget.check(sched.nranks, transfers=sched.total_ops // 2, source=str(path),
                 what=f"{sched.total_ops} ops on {sched.nranks} ranks",
                 hint="expected a smaller schedule, or a machine with more memory")
    if isinstance(sched, InterSchedule):  # two groups: the intergroup verifier's passes
        return sched, verify_intergroup(sched)
    if not isinstance(sched, Schedule):  # format 1.2 (alltoall ... allreduce): collectives/verify.py
        from .collectives.verify import verify as verify_program
        return sched, verify_program(sched)
    violations, _ = verify_and_match(sched)
    return sched, violations


def simulate_file(path: str | Path, *, topology: str | None = None, pap: str | None = None,
                  nbytes: int | str | None = None, duplex: str | None = None, model: str = "dag"):
    """Read, verify and simulate a schedule file; returns (schedule, per-iteration, mean, timelines).

    model: "dag" (simulate.py, what compile reports) or "fluid" (fluid.py: flows sharing
    ports and links, as SimGrid has them; docs/lab.md compares both with SMPI)."""
    if model not in ("dag", "fluid"):
        raise InputError("--model", model, "expected dag or fluid")
    if isinstance(nbytes, str):  # "64KiB", as the CLI's --bytes (one size)
        lo, hi = parse_bytes_arg(nbytes)
        if lo != hi:
            raise InputError("--bytes", nbytes, "expected one size here, not a range")
        nbytes = lo
    sched, violations = verify_file(path)
    if violations:
        raise VerificationFailed(violations)
    if not isinstance(sched, Schedule):
        raise InputError(str(path), "collective", f"expected an allgather schedule, found {sched.collective}: "
                                                  f"time it with collsched simulate (collectives.model.simulate)")
    size = sched.bytes_max if nbytes is None else nbytes
    if not sched.bytes_min <= size <= sched.bytes_max:
        raise InputError("--bytes", str(size),
                         f"expected a size the schedule serves ({sched.bytes_min}..{sched.bytes_max})")
    if duplex is None and topology is None:
        duplex = "full" if sched.full_duplex else "half"
    topo = resolve_topology(sched.nranks, topology, duplex)
    pattern = resolve_pattern(sched.nranks, pap)
    timing = simulate_pattern
    if model == "fluid":
        from .model.fluid import fluid_pattern as timing  # the same arguments and results
    timelines, per_iter, mean = timing(sched, topo, size, pattern)
    for m in per_iter:
        check_finite(m, topo, topology or "<homogeneous>", size)
    return sched, per_iter, mean, timelines
