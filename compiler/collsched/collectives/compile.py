"""The compile job of the collectives beyond allgather: request -> algorithm(s) -> Program
-> verify -> time -> (bound) -> file. `collsched compile --collective alltoall|bcast|reduce|
allreduce` (cli_coll.py) is a thin layer over `compile_collective`; the lab calls it too.

- topology: a Topology, a YAML path, or None: the homogeneous default cluster of
  inputs.topology.homogeneous (1 Gbit/s, 50 us, full duplex; the summary says so).
- arrivals: None (everyone at once), P arrival times (s), an (iterations, P) pattern or a
  --pap path: several iterations are planned and timed for each rank's mean arrival.
- nseg: segments per block / vector as the algorithm counts them (CollRequest.nseg), or
  None / "auto": the counts 1, 2, 4, ... the algorithm accepts, doubled while the model's
  prediction improves by more than SEG_GAIN (programs of at most MAX_AUTO_PIECES pieces,
  no more segments than units to cut, at most MAX_AUTO_SEGMENTS), the best kept.
- algorithm "auto": every registered algorithm of the collective that accepts the request
  (those needing a topology only with one; the arrival-aware ones only with imbalanced
  arrivals), each with its segment counts; the best by the model is written.
- model: "dag" (model.simulate, the event model), "fluid" (fluid.simulate_fluid), or
  "auto": the DAG model searches and the fluid model re-times the finalists - always, not
  only where pipeline.fluid_matters says so as for allgather: this event model is off
  wherever a rank has several messages out at once (0.53-1.96 of SMPI; the fluid model
  0.99-1.01) - (auto: each algorithm's best; at most
  FLUID_FINALISTS within FLUID_CHECK of the DAG model's best), picks and predicts.
- "best": the smallest predicted average elapsed time when arrivals differ (the BDR
  paper's metric, as allgather's auto), else the smallest run time; ties go to the
  earlier candidate (algorithms by name, fewer segments first).
- Candidates are timed as generated; the program picked (and every finalist the fluid
  model re-times) is verified (verify.verify) before anything is written, as is any
  candidate a model cannot time. A program that fails is a compiler bug: an explicit
  algorithm raises VerificationFailed, auto records it among the candidates ("invalid")
  and takes the next best. The lower bound is bounds.lower_bound; gap = predicted run
  time / bound - 1.

The models (model.py, fluid.py, bounds.py) are imported when first needed; a missing one
is an InputError naming it (bounds: no bound, gap None).
"""
from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__
from ..errors import InputError
from .algorithms import REGISTRY, CollRequest, generate, names
from .program import COLLECTIVES, MAX_SEGMENTS, REDUCING, ROOTED, Program
from .verify import VerificationFailed, order_preserving, verify

MODELS = ("auto", "dag", "fluid")
MAX_AUTO_PIECES = 200_000
MAX_AUTO_SEGMENTS = 1024
SEG_GAIN = 0.01  # a doubling counts as better only when it gains more than 1%
FLUID_CHECK, FLUID_FINALISTS = 1.0, 4
DEFAULT_TOPOLOGY = "homogeneous default cluster (inputs.topology.homogeneous: 1 Gbit/s, 50 us, full duplex)"


@dataclass
class CollResult:
    program: Program
    timing: object  # model.CollTiming of the written program (the model that picked it)
    bound: object | None  # bounds.CollBound, or None when the bound module is missing
    gap: float | None  # timing.run_time_s / bound.seconds - 1
    candidates: list[dict]  # every (algorithm, nseg) tried or refused, with its prediction
    model: str  # the model of timing: dag or fluid
    model_choice: dict = field(default_factory=dict)  # requested, by, why
    topology: str = ""
    default_topology: bool = False
    nbytes: tuple[int, int] = (0, 0)
    elem_bytes: int = 4
    file_bytes: int | None = None
    output: str | None = None
    compile_time_s: float = 0.0
    auto: bool = False

    def summary(self) -> dict:
        p, t, b = self.program, self.timing, self.bound
        return {
            "file": self.output, "collective": p.collective, "algorithm": p.algorithm,
            "auto": self.auto, "nranks": p.nranks, "nseg": p.nseg, "root": p.root,
            "bytes_min": self.nbytes[0], "bytes_max": self.nbytes[1], "elem_bytes": self.elem_bytes,
            "total_ops": p.total_ops, "total_pieces": p.total_pieces,
            "commutative_only": p.commutative_only, "file_bytes": self.file_bytes,
            "topology": self.topology, "default_topology": self.default_topology,
            "model": self.model, "model_choice": self.model_choice,
            "run_time_s": t.run_time_s, "avg_elapsed_s": t.avg_elapsed_s,
            "lower_bound_s": None if b is None else b.seconds,
            "lower_bound_terms": None if b is None else dict(b.terms),
            "gap": self.gap, "candidates": self.candidates, "compile_time_s": self.compile_time_s,
            "notes": _plain(p.notes),
        }


def _plain(x):
    """An algorithm's notes as JSON-able values (numpy scalars and arrays as lists)."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "tolist"):
        return x.tolist()
    return x if isinstance(x, (str, int, float, bool)) or x is None else str(x)


def _module(name: str, what: str):
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__package__}.{name}":
            raise
        raise InputError("--model", what, f"expected the collectives' {what} model "
                                          f"(collectives/{name}.py), which this build lacks") from None


def _simulate(model: str, prog: Program, topo, nbytes: int, elem_bytes: int, arrivals):
    """One timing by the named model (ValueError from a model: one InputError line)."""
    if model == "fluid":
        fn = _module("fluid", "fluid").simulate_fluid
    else:
        fn = _module("model", "dag").simulate
    try:
        return fn(prog, topo, nbytes=nbytes, elem_bytes=elem_bytes, arrivals=arrivals)
    except ValueError as e:
        raise InputError(prog.algorithm, "model", str(e)) from None


def _resolve_topology(topology, nranks: int, duplex: str | None):
    from ..inputs.topology import Topology, homogeneous, load_topology

    default = topology is None
    if default:
        topo = homogeneous(nranks)
    elif isinstance(topology, Topology):
        topo = topology
    else:
        topo = load_topology(str(topology), nranks)
    if topo.nranks < nranks:
        raise InputError(str(topology), "placement", f"expected {nranks} ranks, topology places {topo.nranks}")
    if duplex is not None:
        if duplex not in ("half", "full"):
            raise InputError("--duplex", str(duplex), "expected half or full")
        topo = topo.with_duplex(duplex == "full")
    return topo, default


def _resolve_arrivals(arrivals, nranks: int) -> np.ndarray | None:
    if arrivals is None:
        return None
    if isinstance(arrivals, (str, Path)):
        from ..inputs.arrivals import resolve_pattern

        a = np.asarray(resolve_pattern(nranks, str(arrivals)), np.float64)
    else:
        a = np.asarray(arrivals, np.float64)
    if a.ndim == 2:
        a = a.mean(axis=0)
    if a.shape != (nranks,) or not np.all(np.isfinite(a)):
        raise InputError("--pap", str(arrivals if isinstance(arrivals, (str, Path)) else "arrivals"),
                         f"expected {nranks} finite arrival times")
    return a - a.min()


def _nbytes(nbytes) -> tuple[int, int]:
    lo, hi = (nbytes, nbytes) if isinstance(nbytes, (int, np.integer)) else tuple(nbytes)
    if isinstance(lo, bool) or int(lo) != lo or int(hi) != hi or not 0 <= lo <= hi:
        raise InputError("--bytes", str(nbytes), "expected a size in bytes (or MIN <= MAX)")
    return int(lo), int(hi)


def _units(collective: str, nbytes: int, elem_bytes: int) -> int:
    if collective in REDUCING:
        return max(nbytes // max(elem_bytes, 1), 1)
    return max(nbytes, 1)


@dataclass
class _Job:
    collective: str
    nranks: int
    nbytes: int  # the size timed (bytes_max)
    lo: int
    root: int
    elem_bytes: int
    topo: object
    arrivals: np.ndarray | None
    options: dict
    imbalanced: bool
    default_topology: bool = False

    def request(self, nseg: int) -> CollRequest:
        return CollRequest(self.collective, self.nranks, self.nbytes, nseg, self.root,
                           self.elem_bytes, bool(self.topo.full_duplex), self.topo, self.arrivals,
                           dict(self.options))

    def score(self, timing) -> float:
        return timing.avg_elapsed_s if self.imbalanced else timing.run_time_s


def _candidate_row(name: str, nseg: int, **kw) -> dict:
    return {"algorithm": name, "nseg": nseg, **kw}


def _try(job: _Job, name: str, nseg: int, model: str, rows: list, strict: bool):
    """(program, timing) of one candidate, or None (refused, or invalid: recorded in rows).
    Verified here only when the model cannot time it (to say why); compile verifies the
    program it picks before anything is written (_verified)."""
    try:
        prog = generate(name, job.request(nseg))
    except InputError as e:
        if strict:
            raise
        rows.append(_candidate_row(name, nseg, refused=e.expected))
        return None
    prog.bytes_min, prog.bytes_max = job.lo, job.nbytes
    try:
        t = _simulate(model, prog, job.topo, job.nbytes, job.elem_bytes, job.arrivals)
    except Exception:  # noqa: BLE001 - an invalid program the model cannot time: say why
        found = verify(prog)
        if not found:
            raise
        if strict:
            raise VerificationFailed(found) from None
        rows.append(_candidate_row(name, nseg, invalid=str(found[0])))
        return None
    rows.append(_candidate_row(name, nseg, program_nseg=prog.nseg, total_ops=prog.total_ops,
                               run_time_s=t.run_time_s, avg_elapsed_s=t.avg_elapsed_s, model=t.model))
    return prog, t


def _verified(found: list, rows: list, strict: bool) -> list:
    """The candidates that pass verify(), best first as given; the others recorded (auto)
    or raised (an explicit algorithm: a compiler bug)."""
    out = []
    for prog, t in found:
        bad = verify(prog)
        if not bad:
            out.append((prog, t))
            continue
        if strict:
            raise VerificationFailed(bad)
        rows.append(_candidate_row(prog.algorithm, None, program_nseg=prog.nseg, invalid=str(bad[0])))
    return out


def _segment_search(job: _Job, name: str, nseg, model: str, rows: list, strict: bool) -> list:
    """[(program, timing)] of the algorithm's segment counts (one when nseg is given)."""
    if nseg not in (None, "auto"):
        got = _try(job, name, int(nseg), model, rows, strict)
        return [got] if got else []
    units = _units(job.collective, job.nbytes, job.elem_bytes)
    out, best, s = [], None, 1
    while s <= MAX_AUTO_SEGMENTS:
        got = _try(job, name, s, model, rows, strict and s == 1)
        if got is None:
            if s == 1:
                return out
            break
        out.append(got)
        prog, t = got
        if best is not None and job.score(t) >= best * (1 - SEG_GAIN):
            break
        best = job.score(t) if best is None else min(best, job.score(t))
        if prog.total_pieces * 2 > MAX_AUTO_PIECES or prog.nseg * 2 > units or prog.nseg * 2 > MAX_SEGMENTS:
            break
        s *= 2
    return out


def _auto_names(job: _Job, rows: list) -> list[str]:
    picked = []
    for name in names(job.collective):
        alg = REGISTRY[(job.collective, name)]
        if alg.arrival_aware and not job.imbalanced:
            rows.append(_candidate_row(name, None, refused="arrival-aware: only with imbalanced arrivals (--pap)"))
            continue
        if alg.needs_topology and job.default_topology:
            rows.append(_candidate_row(name, None, refused="plans with a topology: give --topology"))
            continue
        picked.append(name)
    return picked


def _finalists(job: _Job, found: list, auto: bool) -> list:
    """The candidates the fluid model re-times (model auto): the best of each algorithm
    (auto) or each segment count, best first, within FLUID_CHECK of the best, at most
    FLUID_FINALISTS."""
    order = sorted(found, key=lambda c: job.score(c[1]))
    if auto:
        seen: set = set()
        order = [c for c in order if not (c[0].algorithm in seen or seen.add(c[0].algorithm))]
    limit = job.score(order[0][1]) * (1 + FLUID_CHECK)
    return [c for c in order if job.score(c[1]) <= limit][:FLUID_FINALISTS]


def _pick(job: _Job, found: list, model: str, rows: list, auto: bool, strict: bool) -> tuple:
    """((program, timing), model_choice): the best verified candidate by the model."""
    order = sorted(found, key=lambda c: job.score(c[1]))
    choice = {"requested": model, "by": model, "why": f"--model {model}"}
    why = None
    if model == "auto":
        from ..pipeline import fluid_matters

        # Unlike allgather's, this event model is off even on one cluster wherever a rank
        # has several messages out at once (a binomial root, a pipelined ring under
        # imbalance: 0.53-1.96 of SMPI CM02, the fluid model 0.99-1.01; docs/collectives.md),
        # so the fluid model always has the last word.
        why = fluid_matters(job.topo) or ("the DAG model serves a rank's concurrent messages one "
                                          "after the other where the network shares them")
    if why is None:
        for cand in order:  # the best that verifies
            if _verified([cand], rows, strict):
                return cand, choice
        raise InputError("--algorithm", "auto", "expected a valid program among the candidates; "
                                                "none verified (a compiler bug: --json lists them)")
    timed = []
    for prog, _t in _verified(_finalists(job, order, auto), rows, strict):
        t = _simulate("fluid", prog, job.topo, job.nbytes, job.elem_bytes, job.arrivals)
        rows.append(_candidate_row(prog.algorithm, None, program_nseg=prog.nseg, finalist=True,
                                   run_time_s=t.run_time_s, avg_elapsed_s=t.avg_elapsed_s, model="fluid"))
        timed.append((prog, t))
    if not timed:
        raise InputError("--algorithm", "auto", "expected a valid program among the finalists; none "
                                                "verified (a compiler bug: --json lists them)")
    pick = min(range(len(timed)), key=lambda i: (job.score(timed[i][1]), i))
    choice.update(by="fluid", why=f"the fluid model re-timed {len(timed)} finalist(s): {why}")
    return timed[pick], choice


def _bound(job: _Job):
    try:
        bounds = importlib.import_module(f"{__package__}.bounds")
    except ModuleNotFoundError as e:
        if e.name != f"{__package__}.bounds":
            raise
        return None
    try:
        return bounds.lower_bound(job.collective, job.topo, nranks=job.nranks, nbytes=job.nbytes,
                                  root=job.root, elem_bytes=job.elem_bytes, arrivals=job.arrivals)
    except ValueError as e:
        raise InputError("lower bound", job.collective, str(e)) from None


def _input_hash(job: _Job, algorithm: str, nseg) -> bytes:
    from ..pipeline import input_hash

    opts = {"collective": job.collective, "nbytes": [job.lo, job.nbytes], "nseg": nseg,
            "root": job.root, "elem_bytes": job.elem_bytes, "options": job.options}
    pattern = np.zeros((1, job.nranks)) if job.arrivals is None else job.arrivals.reshape(1, -1)
    return input_hash(algorithm, opts, job.topo, pattern)


def check_request(collective: str, algorithm: str, nranks: int, root: int, elem_bytes: int,
                  model: str) -> None:
    """One InputError line for a request no algorithm could serve (before any work)."""
    if collective not in COLLECTIVES:
        raise InputError("--collective", collective, f"expected one of {', '.join(COLLECTIVES)} (or allgather)")
    if algorithm != "auto" and (collective, algorithm) not in REGISTRY:
        raise InputError("--algorithm", algorithm, f"expected one of {', '.join(names(collective))} "
                                                   f"or auto for {collective}")
    if isinstance(nranks, bool) or not isinstance(nranks, (int, np.integer)) or not 1 <= nranks <= 1 << 24:
        raise InputError("--ranks", str(nranks), "expected 1..16777216 ranks")
    if collective in ROOTED and not 0 <= root < nranks:
        raise InputError("--root", str(root), f"expected a rank in 0..{nranks - 1}")
    if collective not in ROOTED and root != 0:
        raise InputError("--root", str(root), f"expected none (0): {collective} has no root")
    if isinstance(elem_bytes, bool) or not isinstance(elem_bytes, (int, np.integer)) or elem_bytes < 1:
        raise InputError("--elem-bytes", str(elem_bytes), "expected a positive number of bytes")
    if model not in MODELS:
        raise InputError("--model", str(model), f"expected one of {', '.join(MODELS)}")


def compile_collective(collective: str, algorithm: str, *, nranks: int, nbytes, nseg=None,
                       root: int = 0, elem_bytes: int = 4, topology=None, arrivals=None,
                       model: str = "auto", out=None, duplex: str | None = None,
                       options: dict | None = None) -> CollResult:
    """Generate (or search), verify, time and (with `out`) write one program; the module
    docstring says how. nbytes: bytes of one alltoall block / of the vector, or a
    (MIN, MAX) pair for a file serving that range (timed at MAX)."""
    start = time.perf_counter()
    check_request(collective, algorithm, nranks, root, elem_bytes, model)
    lo, hi = _nbytes(nbytes)
    from ..model import budget

    per = int(nseg) if nseg not in (None, "auto") else 1  # a floor: alltoall moves P (P - 1) blocks
    budget.check(nranks, per, transfers=(nranks - 1) * per * (nranks if collective == "alltoall" else 2))
    topo, default = _resolve_topology(topology, nranks, duplex)
    arr = _resolve_arrivals(arrivals, nranks)
    imbalanced = arr is not None and bool(np.ptp(arr) > 0)
    job = _Job(collective, nranks, hi, lo, root, int(elem_bytes), topo, arr, dict(options or {}),
               imbalanced, default)
    search = "dag" if model == "auto" else model
    rows: list[dict] = []
    found = []
    if algorithm == "auto":
        for name in _auto_names(job, rows):
            found += _segment_search(job, name, nseg, search, rows, strict=False)
        if not found:
            raise InputError("--algorithm", "auto", f"expected some {collective} algorithm to accept "
                                                    f"{nranks} ranks and these options; none did")
    else:
        found = _segment_search(job, algorithm, nseg, search, rows, strict=True)
    (prog, timing), choice = _pick(job, found, model, rows, algorithm == "auto", algorithm != "auto")
    if prog.commutative_only and order_preserving(prog):  # proven in MPI's order after all:
        prog.commutative_only = False  # the runtime may serve non-commutative operations too
    prog.input_hash = _input_hash(job, prog.algorithm, nseg)
    prog.compiler_version = __version__
    prog.planned_run_time_s = timing.run_time_s
    bound = _bound(job)
    gap = timing.run_time_s / bound.seconds - 1 if bound is not None and bound.seconds > 0 else None
    if gap is not None and -1e-9 < gap < 0:  # a program at the bound, up to float rounding
        gap = 0.0
    res = CollResult(prog, timing, bound, gap, rows, timing.model, choice,
                     topology=DEFAULT_TOPOLOGY if default else getattr(topo, "name", str(topology)),
                     default_topology=default, nbytes=(lo, hi), elem_bytes=int(elem_bytes),
                     auto=algorithm == "auto")
    if out is not None:
        from .. import schedfile

        res.file_bytes = schedfile.write(prog, out)
        res.output = str(out)
    res.compile_time_s = time.perf_counter() - start
    return res
