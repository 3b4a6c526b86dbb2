"""The intergroup lab (issue 19): intercommunicator allgather(v) schedules against root
gathering and the MPI library, under SimGrid SMPI or real MPI (docs/lab.md, "Intergroup").

`run_intergroup` runs one case (two groups, their block sizes, a list of algorithms) with
runtime/lab/inter_bench.c and returns a report: per algorithm the measured time (per
iteration the largest elapsed time over the ranks, averaged), whether every checked byte
arrived, the DAG and fluid predictions (intergroup/timing.py) and the paper's bounds
(intergroup/bounds.py) with the topology's latency and bandwidth.

- Compiled algorithms (`kang`, `kang-v`, `root-gather`, `root-gather-mpich`, any plan of
  intergroup.PLANS) are planned, written as .sched files and run by the runtime: under
  SMPI through collsched_inter_allgather(v)_merged on MPI_COMM_WORLD split at p (SimGrid
  3.32 has no MPI_Intercomm_create), under real MPI on a true intercommunicator through
  collsched_allgather(v).
- `native`: real MPI, the library's own intercommunicator MPI_Allgather(v); SMPI, root
  gathering from SMPI's own MPI_Gather(v), MPI_Sendrecv and MPI_Bcast (what an MPI library
  does for intercommunicators).

Under real MPI every compiled algorithm is launched interleaved with native (the driver
alternates them each iteration), so its ratio to native comes from one run.

The suites (settings 1-8 under SMPI, the P = 8 comparison under real MPI) are in
intergroup_suite.py; tables and plots in intergroup_report.py; the command line in
intergroup.py.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import runtime_build
from ..errors import InputError
from ..intergroup import PLANS, Groups
from ..intergroup.bounds import bounds
from . import launch
from .netmodel import check_model, network_setup
from .platform import DEFAULT_TCP_GAMMA, build_platform
from .launch import require_map_count
from .simgrid_platform import platform_record, user_platform

PROGRAM = "collsched-inter-bench"
RUN_TIMEOUT_S = 1800
NATIVE = "native"
COLLECTIVES = {"inter-allgather": "allgather", "inter-allgatherv": "allgatherv"}
# Receive buffers of more than this in all (every rank's remote data) use SMPI's shared
# malloc with sampled checks (the driver's --shared-data).
SHARED_ABOVE_BYTES = 2 << 30
SHARED_STRIDE = 1 << 20  # the driver's STRIDE: one private page per MiB


LabRunError = launch.LabRunError  # one error type for every lab launch


@dataclass
class InterConfig:
    """One intergroup case and how to run it."""

    groups: Groups
    collective: str = "inter-allgather"  # or inter-allgatherv
    backend: str = "smpi"  # smpi | mpi
    network_model: str = "CM02"
    topology: str | None = None  # None: the homogeneous cluster (1 Gbit/s, 50 us)
    iterations: int = 2
    max_delay_ms: float = 0.0
    seed: int = 1
    shared_data: str = "auto"  # auto | yes | no (SMPI)
    models: tuple[str, ...] = ("dag", "fluid")  # predictions (intergroup/timing.py)
    launcher: str | None = None  # real MPI: launch.py's preset or template
    hostfile: str | None = None  # real MPI: the launcher's; SMPI: with platform, the ranks' hosts
    platform: str | None = None  # SMPI: a user's SimGrid platform XML (simgrid_platform.py)
    bind_to: str | None = None
    workdir: str | None = None
    inject_error: bool = False  # the driver flips a checked byte (tests)

    def inputs(self) -> dict:
        g = self.groups
        return {"collective": self.collective, "p": g.p, "q": g.q, "ranks": g.nranks,
                "sizes_a": list(g.sizes_a) if len(set(g.sizes_a)) > 1 else g.sizes_a[0],
                "sizes_b": list(g.sizes_b) if len(set(g.sizes_b)) > 1 else g.sizes_b[0],
                "largest_block": max(g.sizes_a + g.sizes_b), "backend": self.backend,
                "network_model": self.network_model if self.backend == "smpi" else None,
                "topology": self.topology, "iterations": self.iterations,
                "max_delay_ms": self.max_delay_ms, "seed": self.seed}


def check_algorithms(names: list[str], collective: str) -> None:
    """Known names, no repeats; `kang` only for allgather (one block size per group)."""
    if not names:
        raise InputError("--algorithms", "", f"expected comma-separated names of {', '.join(PLANS)}, native")
    for name in names:
        if name != NATIVE and name not in PLANS:
            raise InputError("--algorithms", name, f"expected comma-separated names of "
                             f"{', '.join(PLANS)}, native")
    if len(set(names)) != len(names):
        raise InputError("--algorithms", ",".join(names), "expected each algorithm once")
    if collective not in COLLECTIVES:
        raise InputError("--collective", collective, f"expected one of {', '.join(COLLECTIVES)}")


def write_schedule(name: str, groups: Groups, collective: str, path: Path, topology: str | None = None):
    """Plan, verify and write `name` for `groups` as a .sched file of `collective`
    (intergroup/compile.py); the schedule."""
    from ..intergroup.compile import compile_intergroup

    return compile_intergroup(name, groups, collective, topology, path).schedule


# The bound each algorithm is held to (the Targets; intergroup/bounds.py's keys)
# and its name in the reports.
ALGORITHM_BOUND = {"kang": ("theorem1", "Theorem 1"), "kang-v": ("theorem3", "Theorem 3 (Eq. 4)"),
                   "root-gather": ("eq1", "Eq. 1"), "root-gather-mpich": ("eq2", "Eq. 2")}


@dataclass
class _Env:
    tmp: Path
    platform: tuple | None  # SMPI: (platform.xml, hosts)
    network: tuple[str, ...]  # SMPI: the network model's --cfg options
    tcp_gamma: int
    launcher: launch.Launcher | None
    user: object = None  # SMPI: the user's platform (simgrid_platform.UserPlatform), or None


def _binary(backend: str) -> Path:
    return runtime_build.require(runtime_build.program(backend, PROGRAM))


def use_shared(cfg: InterConfig) -> bool:
    """SMPI's shared malloc for the receive buffers: asked, or (auto) when they exceed
    SHARED_ABOVE_BYTES in all."""
    if cfg.backend != "smpi" or cfg.shared_data == "no":
        return False
    if cfg.shared_data == "yes":
        return True
    g = cfg.groups
    return g.p * g.total(1) + g.q * g.total(0) > SHARED_ABOVE_BYTES


def _check_map_count(cfg: InterConfig) -> None:
    """Shared receive buffers map about two regions per MiB in every rank."""
    g = cfg.groups
    need = 2 * (g.p * g.total(1) + g.q * g.total(0) + 2 * g.total(0) + 2 * g.total(1)) // SHARED_STRIDE \
        + 64 * g.nranks + 4096
    require_map_count(need, "these groups with shared data")


def driver_command(cfg: InterConfig, impls: list[str], schedule: Path | None) -> list[str]:
    """The driver's own arguments (runtime/lab/inter_bench.c)."""
    g = cfg.groups
    cmd = [str(_binary(cfg.backend)), "--collective", COLLECTIVES[cfg.collective], "--p", str(g.p),
           "--sizes-a", ",".join(map(str, g.sizes_a)), "--sizes-b", ",".join(map(str, g.sizes_b)),
           "--impls", ",".join(impls), "--iterations", str(cfg.iterations),
           "--max-delay-ms", repr(float(cfg.max_delay_ms)), "--seed", str(cfg.seed)]
    if schedule is not None:
        cmd += ["--schedule", str(schedule)]
    if use_shared(cfg):
        _check_map_count(cfg)
        cmd.append("--shared-data")
    if cfg.inject_error:
        cmd.append("--inject-error")
    return cmd


def _launch(cfg: InterConfig, env: _Env, label: str, impls: list[str], schedule: Path | None) -> dict:
    """One launch of the driver; its JSON line, with the command and the wall time."""
    bench = driver_command(cfg, impls, schedule)
    environ = dict(os.environ)
    own = {}
    if schedule is not None:
        # The schedule in the environment too, as an unmodified program gets it; strict: a
        # call the schedule does not serve fails the run instead of measuring the library.
        own = {"COLLSCHED_SCHEDULES": str(schedule), "COLLSCHED_STRICT": "1"}
    environ.update(own)
    if cfg.backend == "smpi":
        xml, hosts = env.platform
        cmd = ["smpirun", "-np", str(cfg.groups.nranks), "-platform", str(xml), "-hostfile", str(hosts),
               *env.network, f"--cfg=network/TCP-gamma:{env.tcp_gamma}", "--cfg=network/crosstraffic:0",
               "--cfg=smpi/simulate-computation:no", "--cfg=smpi/test:0", "--log=root.thres:error", *bench]
    else:
        cmd, extra_env = env.launcher.command(cfg.groups.nranks, bench, None, forward=tuple(own))
        environ.update(extra_env)
    return launch.run_driver(cmd, environ, env.tmp, RUN_TIMEOUT_S, label)


def measured(run: dict) -> dict:
    """Per-run times of one implementation's part of a driver run: per iteration the
    largest elapsed time over the ranks (time_s, the figure the suites compare), the mean
    elapsed time (avg_elapsed_s, as the allgather lab) and the run time (last exit - first
    arrival)."""
    a, f = np.array(run["arrivals"], float), np.array(run["exits"], float)
    per = (f - a).max(axis=1)
    return {"time_s": float(per.mean()), "time_per_iteration_s": [float(x) for x in per],
            "avg_elapsed_s": float((f - a).mean()), "run_time_s": float((f.max(1) - a.min(1)).mean()),
            "data_ok": bool(run["data_ok"]), "errors": int(run["errors"]),
            "fallbacks": int(run["fallbacks"]), "fallback_reason": run.get("fallback_reason", ""),
            "call_errors": int(run.get("call_errors", 0))}


def predictions(sched, topo, arrivals: np.ndarray, models, smpi: bool) -> dict:
    """Per model, the predicted time (largest elapsed over the ranks, averaged over the
    iterations' measured arrivals) and run time; {} when timing.py is missing."""
    try:
        from ..intergroup.timing import predict
    except ImportError:
        return {}
    out = {}
    distinct = np.unique(np.round(arrivals - arrivals.min(axis=1, keepdims=True), 12), axis=0)
    for model in models:
        times = []
        for a in distinct:
            t = predict(sched, topo, model, a, simgrid_eager=smpi and model == "fluid")
            times.append(float(np.max(t.exits - t.arrivals)))
        out[f"predicted_{model}_s"] = float(np.mean(times))
    return out


def _environment(cfg: InterConfig, tmp: Path):
    """(env, prediction topology, network setup or None) of a run."""
    from ..pipeline import resolve_topology

    check_model(cfg.network_model)
    user = user_platform(cfg.backend, cfg.platform, cfg.hostfile, cfg.groups.nranks, cfg.topology)
    loaded = resolve_topology(cfg.groups.nranks, cfg.topology, None)
    gamma = int(loaded.tcp_window or DEFAULT_TCP_GAMMA)
    if cfg.backend == "mpi":
        if cfg.launcher in (None, launch.DEFAULT) and shutil.which("mpirun") is None:
            raise InputError("mpirun", "", "not found: install openmpi-bin (make deps)")
        return _Env(tmp, None, (), gamma, launch.make_launcher(cfg.launcher, cfg.hostfile, cfg.bind_to)), loaded, None
    if shutil.which("smpirun") is None:
        raise InputError("smpirun", "", "not found: install libsimgrid-dev (make deps)")
    for flag, value in (("--launcher", cfg.launcher), ("--bind-to", cfg.bind_to)):
        if value is not None:
            raise InputError(flag, str(value), "only with --backend mpi (SMPI places ranks from the platform)")
    topo = dataclasses.replace(loaded, tcp_window=float(gamma))
    net = network_setup(cfg.network_model, topo)
    if user is None:
        files = build_platform(net.topology).write(tmp)
    else:  # the user's platform: SimGrid runs it, the topology predicts (simgrid_platform.py)
        files = (user.xml, user.write_hostfile(tmp / "platform.hosts", cfg.groups.nranks))
    env = _Env(tmp, files, net.simgrid_cfg, gamma, None, user)
    return env, net.topology, net


def run_intergroup(cfg: InterConfig, algorithms: list[str], progress=None) -> dict:
    """Run every algorithm once on the same case; the report (JSON-able): inputs, results
    (one row per algorithm), bounds, and under SMPI the network record."""
    check_algorithms(algorithms, cfg.collective)
    if cfg.backend not in ("smpi", "mpi"):
        raise InputError("--backend", cfg.backend, "expected smpi or mpi")
    keep = cfg.workdir is not None
    tmp = Path(cfg.workdir or tempfile.mkdtemp(prefix="collsched-inter-")).resolve()
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        env, topo, net = _environment(cfg, tmp)
        rows, native_runs = [], []
        compiled = [n for n in algorithms if n != NATIVE]
        for name in algorithms:
            if progress:
                progress(name)
            if name == NATIVE:
                if cfg.backend == "mpi" and native_runs:  # measured beside the first compiled one
                    rows.append(_native_row(native_runs[0], paired_with=compiled[0]))
                    continue
                run = _launch(cfg, env, name, [NATIVE], None)
                rows.append(_native_row(run))
                continue
            path = tmp / f"{name}.sched"
            sched = write_schedule(name, cfg.groups, cfg.collective, path, cfg.topology)
            impls = ["sched", NATIVE] if cfg.backend == "mpi" else ["sched"]
            run = _launch(cfg, env, name, impls, path)
            native_runs.append(run)
            rows.append(_sched_row(cfg, name, run, sched, topo))
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    report = {"backend": cfg.backend, "inputs": {**cfg.inputs(), "algorithms": algorithms},
              "results": rows}
    if _modelled(cfg):
        report["bounds"] = bounds(cfg.groups, topo)
    if net is not None:
        report["network"] = net.record()
        report["network_notes"] = list(net.notes)
        report["platform"] = platform_record(env.user, cfg.groups.nranks, cfg.topology)
    if env.launcher is not None:
        report["inputs"]["launch"] = env.launcher.describe()
    _speedups(report)
    return report


def _part(run: dict, impl: str) -> dict:
    return next(r for r in run["runs"] if r["impl"] == impl)


def _native_row(run: dict, paired_with: str | None = None) -> dict:
    row = {"algorithm": NATIVE, **measured(_part(run, NATIVE)), "wall_s": run["wall_s"],
           "command": run["command"], "checked_bytes_per_iteration": run["checked_bytes_per_iteration"],
           "native": ("the MPI library's intercommunicator MPI_Allgather(v)" if not run["smpi"] else
                      "root gathering: SMPI's MPI_Gather(v), MPI_Sendrecv of the roots, MPI_Bcast")}
    if paired_with:
        row["measured_with"] = paired_with
    return row


def _modelled(cfg: InterConfig) -> bool:
    """Predictions and bounds describe the run: SMPI (its platform is the topology), or real
    MPI on a topology the user gave (the default cluster is not this machine)."""
    return cfg.backend == "smpi" or cfg.topology is not None


def _sched_row(cfg: InterConfig, name: str, run: dict, sched, topo) -> dict:
    part = _part(run, "sched")
    row = {"algorithm": name, **measured(part), "wall_s": run["wall_s"], "command": run["command"],
           "checked_bytes_per_iteration": run["checked_bytes_per_iteration"]}
    if _modelled(cfg):
        row.update(predictions(sched, topo, np.array(part["arrivals"], float), cfg.models, cfg.backend == "smpi"))
    for model in cfg.models:
        if f"predicted_{model}_s" in row and row["time_s"] > 0:
            row[f"{model}_ratio"] = row[f"predicted_{model}_s"] / row["time_s"]
    key, label = ALGORITHM_BOUND.get(name, (None, None))
    b = bounds(cfg.groups, topo) if _modelled(cfg) else {}
    if b.get(key) is not None:
        row["bound"] = label
        row["bound_s"] = b[key]
        row["bound_ratio"] = row["time_s"] / b[key]
    if cfg.backend == "mpi":  # measured side by side, interleaved (one run)
        nat = measured(_part(run, NATIVE))
        row["native_time_s"] = nat["time_s"]
        row["native_data_ok"] = nat["data_ok"]
        row["speedup_over_native"] = nat["time_s"] / row["time_s"] if row["time_s"] > 0 else None
        row["speedup_per_iteration"] = [n / t for n, t in zip(nat["time_per_iteration_s"],
                                                               row["time_per_iteration_s"]) if t > 0]
    return row


def _speedups(report: dict) -> None:
    """Each compiled row's speedup over the root-gathering rows of the same report."""
    times = {r["algorithm"]: r["time_s"] for r in report["results"]}
    for r in report["results"]:
        for base in ("root-gather-mpich", "root-gather", NATIVE):
            if base == NATIVE and report["backend"] == "mpi":
                continue  # measured side by side in the compiled row's own run (_sched_row)
            if base in times and base != r["algorithm"] and r["time_s"] > 0:
                r[f"speedup_over_{base.replace('-', '_')}"] = times[base] / r["time_s"]
