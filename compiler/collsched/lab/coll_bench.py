"""The lab of alltoall, bcast, reduce and allreduce (issue 18; docs/collectives.md, "The lab").

`run_coll` runs one case (a collective, P ranks, a size, a seeded arrival pattern) for a
list of algorithms with runtime/lab/coll_bench.c (collsched-coll-bench) under SimGrid SMPI
or real MPI and returns a report:

- compiled algorithms (the registry's names of that collective, `auto`, or NAME@SEGMENTS
  for a segment count of one's own) are compiled with collectives/compile.py's
  compile_collective for the topology with the run's own network costs (netmodel.py),
  written as a 1.2 schedule file and run through collsched_<coll> with
  COLLSCHED_STRICT=1 (a call the schedule does not serve fails the run instead of
  measuring the MPI library). Arrival-aware ones are compiled for the mean of the
  iterations' seeded arrivals (the report says so);
- `native`, `native:NAME` (coll_natives.py: SMPI's --cfg=smpi/<coll>:NAME and selectors,
  Open MPI's coll_tuned ids) run MPI_Alltoall/MPI_Bcast/MPI_Reduce/MPI_Allreduce.

Every row: measured average elapsed time (mean over ranks and iterations of exit - arrival)
and run time (last exit - first arrival, averaged over the iterations), the data verdict
(every byte checked against the driver's closed-form reference), and for compiled
algorithms the DAG and fluid predictions (collectives/model.py, fluid.py) for the arrivals
that were measured; the report has the lower bound (collectives/bounds.py) for the same
arrivals, and every row its gap to it.

The command line (`collsched bench --collective C ...`) is `cmd_bench`; tables, plots and
the benchmarks section are coll_report.py's; the Faraj-style table faraj.py's.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import runtime_build
from ..errors import InputError
from . import coll_natives, launch
from .arrivals import arrival_pattern
from .netmodel import check_model, network_setup, write_prediction_topology
from .platform import DEFAULT_TCP_GAMMA, build_platform

PROGRAM = "collsched-coll-bench"
RUN_TIMEOUT_S = 1800
COLLECTIVES = coll_natives.COLLECTIVES
DTYPES = {"int": 4, "double": 8}
DEFAULT_ALGORITHMS = {"alltoall": "pair,ring,pair-light,ring-light,simple,native,native:ompi,native:mpich",
                      "bcast": "binomial,chain,scatter-ring,native,native:ompi,native:mpich",
                      "reduce": "binomial,chain,rsag,native,native:ompi,native:mpich",
                      "allreduce": "ring,rd,rabenseifner,native,native:ompi,native:mpich"}


LabRunError = launch.LabRunError  # one error type for every lab launch


@dataclass
class CollConfig:
    """One case and how to run it."""

    collective: str
    backend: str = "smpi"  # smpi | mpi
    topology: str | None = None  # None: the homogeneous cluster
    ranks: int = 8
    nbytes: int = 64 << 10  # alltoall: one block (per pair); others: the whole vector
    root: int = 0
    dtype: str = "int"  # reduce/allreduce: int or double (elements of 4 or 8 bytes)
    op: str = "sum"
    iterations: int = 4
    max_delay_ms: float = 0.0
    seed: int = 1
    network_model: str = "CM02"
    compile_model: str = "auto"  # compile_collective's model (picks segments, auto's algorithm)
    models: tuple[str, ...] = ("dag", "fluid")  # predictions of compiled rows
    bound: bool = True
    launcher: str | None = None
    hostfile: str | None = None
    bind_to: str | None = None
    workdir: str | None = None
    inject_error: bool = False  # the driver flips one checked byte (tests)
    in_place: bool = False
    # compile_collective's options per compiled algorithm (e.g. {"grid": {"mode": "dest"}}):
    # the grid alltoall's "auto" options are searched by the fluid model, minutes at P = 48
    options: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @property
    def coll_root(self) -> int:
        """The root the schedule and the bound take (0 for alltoall and allreduce)."""
        return self.root if self.collective in ("bcast", "reduce") else 0

    @property
    def elem_bytes(self) -> int:
        return DTYPES[self.dtype] if self.collective in ("reduce", "allreduce") else 1

    def inputs(self) -> dict:
        d = {k: self.__dict__[k] for k in ("collective", "topology", "ranks", "nbytes", "iterations",
                                           "max_delay_ms", "seed", "compile_model")}
        if self.collective in ("bcast", "reduce"):
            d["root"] = self.root
        if self.collective in ("reduce", "allreduce"):
            d.update(dtype=self.dtype, op=self.op)
        if self.backend == "smpi":
            d["network_model"] = self.network_model
        if self.in_place:
            d["in_place"] = True
        return d

    def pattern(self) -> np.ndarray:
        """The seeded arrivals (iterations x ranks, seconds after the double barrier)."""
        return arrival_pattern(self.seed, self.iterations, self.ranks, self.max_delay_ms / 1e3)


def compiled_names(collective: str) -> list[str]:
    from ..collectives.algorithms import names

    return names(collective)


def split_name(name: str) -> tuple[str, int | None]:
    """NAME or NAME@SEGMENTS -> (NAME, segments or None)."""
    base, at, seg = name.partition("@")
    if not at:
        return name, None
    if not (seg.isascii() and seg.isdigit()) or not 1 <= int(seg) <= 65535:
        raise InputError("--algorithms", name, "expected NAME@SEGMENTS with 1 to 65535 segments")
    return base, int(seg)


def check_algorithms(cfg: CollConfig, algorithms: list[str]) -> None:
    """Known names for the collective and backend, each once; one InputError else."""
    if cfg.collective not in COLLECTIVES:
        raise InputError("--collective", cfg.collective, f"expected one of {', '.join(COLLECTIVES)}")
    if not algorithms:
        raise InputError("--algorithms", "", "expected comma-separated algorithm names")
    if len(set(algorithms)) != len(algorithms):
        raise InputError("--algorithms", ",".join(algorithms), "expected each algorithm once")
    known = compiled_names(cfg.collective)
    for name in algorithms:
        if coll_natives.is_native(name):
            coll_natives.check_ranks(cfg.collective, name, cfg.backend, cfg.ranks)
            continue
        base, _ = split_name(name)
        if base != "auto" and base not in known:
            raise InputError("--algorithms", name, f"expected for {cfg.collective}: "
                             f"{', '.join(known) or '(no compiled algorithm registered yet)'}, auto, "
                             f"NAME@SEGMENTS, native or native:NAME")


def check_case(cfg: CollConfig) -> None:
    if cfg.backend not in ("smpi", "mpi"):
        raise InputError("--backend", cfg.backend, "expected smpi or mpi")
    check_model(cfg.network_model)
    if cfg.ranks < 2:
        raise InputError("--ranks", str(cfg.ranks), "expected at least 2 ranks")
    if cfg.dtype not in DTYPES:
        raise InputError("--dtype", cfg.dtype, "expected int or double")
    if cfg.op not in ("sum", "max"):
        raise InputError("--op", cfg.op, "expected sum or max")
    if cfg.nbytes < 1 or cfg.nbytes % cfg.elem_bytes:
        raise InputError("--bytes", str(cfg.nbytes), f"expected a positive multiple of {cfg.elem_bytes} "
                         f"(whole {cfg.dtype} elements)")
    if cfg.nbytes > 2**31 - 1:
        raise InputError("--bytes", str(cfg.nbytes), "expected at most 2^31 - 1 (an MPI count)")
    if not 0 <= cfg.root < cfg.ranks:
        raise InputError("--root", str(cfg.root), f"expected a rank in 0..{cfg.ranks - 1}")


@dataclass
class _Env:
    tmp: Path
    platform: tuple | None  # SMPI: (platform.xml, hosts)
    network: tuple[str, ...]
    tcp_gamma: int
    launcher: launch.Launcher | None
    topology_file: str | None  # what the compiler reads (the run's network costs)
    topo: object  # the Topology the models and the bound use
    net: object = None  # SMPI: netmodel.NetworkSetup


def _environment(cfg: CollConfig, tmp: Path) -> _Env:
    from ..pipeline import resolve_topology

    loaded = resolve_topology(cfg.ranks, cfg.topology, None)
    gamma = int(loaded.tcp_window or DEFAULT_TCP_GAMMA)
    if cfg.backend == "mpi":
        if cfg.launcher in (None, launch.DEFAULT) and shutil.which("mpirun") is None:
            raise InputError("mpirun", "", "not found: install openmpi-bin (make deps)")
        return _Env(tmp, None, (), gamma, launch.make_launcher(cfg.launcher, cfg.hostfile, cfg.bind_to),
                    cfg.topology, loaded)
    if shutil.which("smpirun") is None:
        raise InputError("smpirun", "", "not found: install libsimgrid-dev (make deps)")
    for flag, value in (("--launcher", cfg.launcher), ("--bind-to", cfg.bind_to), ("--hostfile", cfg.hostfile)):
        if value is not None:
            raise InputError(flag, str(value), "only with --backend mpi (SMPI places ranks from the platform)")
    topo = dataclasses.replace(loaded, tcp_window=float(gamma))
    net = network_setup(cfg.network_model, topo)
    files = build_platform(net.topology).write(tmp)
    window = None if loaded.tcp_window == gamma else gamma
    tfile = write_prediction_topology(net, cfg.topology, tmp / "network-topology.yaml", window)
    return _Env(tmp, files, net.simgrid_cfg, gamma, None, tfile, net.topology, net)


def _binary(backend: str) -> Path:
    return runtime_build.require(runtime_build.program(backend, PROGRAM))


def driver_command(cfg: CollConfig, schedule: Path | None) -> list[str]:
    """The driver's own arguments (runtime/lab/coll_bench.c)."""
    cmd = [str(_binary(cfg.backend)), "--collective", cfg.collective, "--bytes", str(cfg.nbytes),
           "--root", str(cfg.root), "--dtype", cfg.dtype, "--op", cfg.op,
           "--iterations", str(cfg.iterations), "--max-delay-ms", repr(float(cfg.max_delay_ms)),
           "--seed", str(cfg.seed)]
    cmd += ["--schedule", str(schedule)] if schedule is not None else ["--native"]
    if cfg.in_place:
        cmd.append("--in-place")
    if cfg.inject_error:
        cmd.append("--inject-error")
    return cmd


def _launch(cfg: CollConfig, env: _Env, label: str, schedule: Path | None, chosen=None) -> dict:
    """One launch of the driver; its JSON line with the command and the wall time."""
    bench = driver_command(cfg, schedule)
    environ = dict(os.environ)
    own = {}
    if schedule is not None:
        own = {"COLLSCHED_SCHEDULES": str(schedule), "COLLSCHED_STRICT": "1"}
    else:
        environ.pop("COLLSCHED_SCHEDULES", None)
    environ.update(own)
    if cfg.backend == "smpi":
        xml, hosts = env.platform
        cmd = ["smpirun", "-np", str(cfg.ranks), "-platform", str(xml), "-hostfile", str(hosts),
               *env.network, f"--cfg=network/TCP-gamma:{env.tcp_gamma}", "--cfg=network/crosstraffic:0",
               "--cfg=smpi/simulate-computation:no", "--cfg=smpi/test:0", "--log=root.thres:error"]
        if chosen is not None and chosen.smpi_cfg:
            cmd.append(chosen.smpi_cfg)
        cmd += bench
    else:
        cmd, extra_env = env.launcher.command(cfg.ranks, bench, chosen.mca if chosen else None,
                                              forward=tuple(own))
        environ.update(extra_env)
    return launch.run_driver(cmd, environ, env.tmp, RUN_TIMEOUT_S, label)


def measured(run: dict) -> dict:
    """Average elapsed time (mean over ranks and iterations of exit - arrival), run time
    (last exit - first arrival, averaged), per-iteration figures and the data verdict."""
    a, f = np.array(run["arrivals"], float), np.array(run["exits"], float)
    return {"avg_elapsed_s": float((f - a).mean()), "run_time_s": float((f.max(1) - a.min(1)).mean()),
            "elapsed_per_iteration_s": [float(x) for x in (f - a).mean(1)],
            "run_time_per_iteration_s": [float(x) for x in f.max(1) - a.min(1)],
            "imbalance_s": float(np.ptp(a, axis=1).mean()),
            "data_ok": bool(run["data_ok"]), "errors": int(run["errors"]),
            "checked_bytes": int(run["checked_bytes"]), "fallbacks": int(run["fallbacks"]),
            "fallback_reason": run.get("fallback_reason", ""), "call_errors": int(run.get("call_errors", 0)),
            "used": [Path(u).name if u else "" for u in run.get("used", [])]}


def _distinct(arrivals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct per-iteration patterns (relative to each iteration's first arrival) and
    how often each occurs: deterministic SMPI repeats flat iterations exactly."""
    rel = np.round(arrivals - arrivals.min(axis=1, keepdims=True), 12)
    uniq, counts = np.unique(rel, axis=0, return_counts=True)
    return uniq, counts


def predictions(cfg: CollConfig, prog, topo, arrivals: np.ndarray) -> dict:
    """Per model, the predicted average elapsed time and run time for the measured arrivals
    (iterations weighted as they occurred); {} for a model whose module is missing."""
    out = {}
    uniq, counts = _distinct(arrivals)
    for model in cfg.models:
        try:
            if model == "dag":
                from ..collectives.model import simulate as sim
            else:
                from ..collectives.fluid import simulate_fluid as sim
        except ImportError:
            continue
        avg, run = [], []
        # SimGrid's small messages wait for their receive (fluid.py's simgrid_eager)
        kw = {"simgrid_eager": True} if model == "fluid" and cfg.backend == "smpi" else {}
        for a in uniq:
            t = sim(prog, topo, nbytes=cfg.nbytes, elem_bytes=cfg.elem_bytes, arrivals=a, **kw)
            avg.append(float(t.avg_elapsed_s))
            run.append(float(t.run_time_s))
        out[f"predicted_{model}_avg_elapsed_s"] = float(np.average(avg, weights=counts))
        out[f"predicted_{model}_run_time_s"] = float(np.average(run, weights=counts))
    return out


def lower_bound(cfg: CollConfig, topo, arrivals: np.ndarray) -> dict | None:
    """The lower bound for the measured arrivals (collectives/bounds.py), averaged over the
    iterations: run_time_s, avg_elapsed_s (when the bound gives one) and the flat bound's
    terms; None when bounds.py is missing."""
    try:
        from ..collectives.bounds import lower_bound as lb
    except ImportError:
        return None
    uniq, counts = _distinct(arrivals)
    runs, avgs, terms = [], [], {}
    for a in uniq:
        b = lb(cfg.collective, topo, nranks=cfg.ranks, nbytes=cfg.nbytes, root=cfg.coll_root,
               elem_bytes=cfg.elem_bytes, arrivals=a)
        runs.append(float(b.seconds))
        avgs.append(float(b.terms.get("avg_elapsed_s", np.nan)))
    flat = lb(cfg.collective, topo, nranks=cfg.ranks, nbytes=cfg.nbytes, root=cfg.coll_root,
              elem_bytes=cfg.elem_bytes)
    terms = {k: float(v) for k, v in flat.terms.items()}
    out = {"run_time_s": float(np.average(runs, weights=counts)), "flat_run_time_s": float(flat.seconds),
           "terms": terms}
    if np.all(np.isfinite(avgs)):
        out["avg_elapsed_s"] = float(np.average(avgs, weights=counts))
    return out


def compile_one(cfg: CollConfig, name: str, env: _Env, path: Path):
    """compile_collective for this case (arrival-aware algorithms: the iterations' mean
    seeded pattern); (program, compile record)."""
    from ..collectives.compile import compile_collective

    base, nseg = split_name(name)
    pattern = cfg.pattern()
    arrivals = None
    if cfg.max_delay_ms > 0:
        mean = pattern.mean(axis=0)
        arrivals = mean - mean.min()
    kw = {} if nseg is None else {"nseg": nseg}
    if cfg.options.get(base):
        kw["options"] = dict(cfg.options[base])
    res = compile_collective(cfg.collective, base, nranks=cfg.ranks, nbytes=cfg.nbytes, root=cfg.coll_root,
                             elem_bytes=cfg.elem_bytes, topology=env.topology_file or env.topo,
                             arrivals=arrivals, model=cfg.compile_model, out=str(path), **kw)
    prog = res.program
    rec = {"compiled": prog.algorithm, "nseg": int(prog.nseg), "total_ops": int(prog.total_ops),
           **({"options": kw["options"]} if "options" in kw else {}),
           "commutative_only": bool(prog.commutative_only), "compile_model": getattr(res, "model", None)}
    if getattr(res, "timing", None) is not None:
        rec["compile_predicted_run_time_s"] = float(res.timing.run_time_s)
    return prog, rec


def run_coll(cfg: CollConfig, algorithms: list[str], progress=None) -> dict:
    """Run every algorithm on the same case; the report (JSON-able)."""
    check_case(cfg)
    check_algorithms(cfg, algorithms)
    keep = cfg.workdir is not None
    tmp = Path(cfg.workdir or tempfile.mkdtemp(prefix="collsched-coll-")).resolve()
    tmp.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        env = _environment(cfg, tmp)
        for name in algorithms:
            if progress:
                progress(name)
            rows.append(_run_one(cfg, name, env))
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    report = {"backend": cfg.backend, "inputs": {**cfg.inputs(), "algorithms": algorithms}, "results": rows}
    modelled = cfg.backend == "smpi" or cfg.topology is not None
    if cfg.bound and modelled:
        arr = next((np.array(r["_arrivals"]) for r in rows), None)
        if arr is not None:
            report["bound"] = lower_bound(cfg, env.topo, arr)
    for r in rows:
        r.pop("_arrivals", None)
    _gaps(report)
    if env.net is not None:
        report["network"] = env.net.record()
        report["network_notes"] = list(env.net.notes)
    if env.launcher is not None:
        report["inputs"]["launch"] = env.launcher.describe()
    if any(r.get("arrival_aware") for r in rows):
        report.setdefault("network_notes", []).append(
            "Arrival-aware algorithms were compiled once for the mean of the iterations' seeded "
            "arrival patterns (each iteration's own pattern differs).")
    return report


def _run_one(cfg: CollConfig, name: str, env: _Env) -> dict:
    if coll_natives.is_native(name):
        chosen = coll_natives.resolve(cfg.collective, name, cfg.backend)
        run = _launch(cfg, env, name, None, chosen)
        row = {"algorithm": name, "kind": "native", **measured(run)}
        row["native"] = chosen.describe() if (chosen.smpi_cfg or chosen.mca) else "the library's own choice"
    else:
        path = env.tmp / f"{name.replace('@', '-')}.sched"
        prog, rec = compile_one(cfg, name, env, path)
        run = _launch(cfg, env, name, path)
        row = {"algorithm": name, "kind": "compiled", **rec, **measured(run)}
        from ..collectives.algorithms import REGISTRY

        alg = REGISTRY.get((cfg.collective, prog.algorithm))
        if alg is not None and alg.arrival_aware:
            row["arrival_aware"] = True
        if cfg.backend == "smpi" or cfg.topology is not None:
            row.update(predictions(cfg, prog, env.topo, np.array(run["arrivals"], float)))
        for model in cfg.models:
            p = row.get(f"predicted_{model}_avg_elapsed_s")
            if p is not None and row["avg_elapsed_s"] > 0:
                row[f"{model}_ratio"] = p / row["avg_elapsed_s"]
    row["wall_s"] = run["wall_s"]
    row["command"] = run["command"]
    row["_arrivals"] = run["arrivals"]
    return row


def _gaps(report: dict) -> None:
    """Every row's gap to the bound (measured / bound - 1) and the speedups over natives."""
    b = report.get("bound") or {}
    for r in report["results"]:
        if b.get("run_time_s"):
            r["gap_run_time"] = r["run_time_s"] / b["run_time_s"] - 1
        if b.get("avg_elapsed_s"):
            r["gap_avg_elapsed"] = r["avg_elapsed_s"] / b["avg_elapsed_s"] - 1
    natives = [r for r in report["results"] if r["kind"] == "native"]
    if natives:
        best = min(natives, key=lambda r: r["avg_elapsed_s"])
        for r in report["results"]:
            if r["kind"] == "compiled" and r["avg_elapsed_s"] > 0:
                r["speedup_over_best_native"] = best["avg_elapsed_s"] / r["avg_elapsed_s"]
        report["best_native"] = best["algorithm"]


def best(report: dict, kind: str, key: str = "avg_elapsed_s") -> dict | None:
    rows = [r for r in report["results"] if r["kind"] == kind and r["data_ok"]]
    return min(rows, key=lambda r: r[key]) if rows else None



def size_text(n: int) -> str:
    """1048576 -> "1 MiB", 131072 -> "128 KiB", else bytes."""
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"
