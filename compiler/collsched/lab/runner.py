"""Runs the mini-benchmark for a list of algorithms on SMPI or real MPI and reports metrics.

Compiled algorithms (ring, bruck, ...) are compiled for the topology, run through the C
runtime (build/*/bin/collsched-minibench links libcollsched) and predicted by the cost
model for the very arrival pattern the benchmark produces (it is seeded). `native` is the
MPI library's MPI_Allgather as its selector picks it; `native:NAME` picks one of its
algorithms, one vocabulary on both backends (native.py: SMPI smpi/allgather or
smpi/coll-selector; Open MPI coll_tuned). Real-MPI launches are launch.py's (the launcher
preset or template, host file, binding: LabConfig.launcher, hostfile, bind_to).

Arrival-aware algorithms run through the runtime's PAT engine (PAT_Edge at 50% of the
emulated computation, docs/pat.md): `bdr` builds its schedule online from the ranks'
predictions; the compiled ones (`bslb`, `min3`) are compiled ahead for every iteration,
because the mini-benchmark's arrival pattern of each iteration is known from the seed and
equals what PAT_Edge predicts there. Their predictions are made per iteration too.

Recurring load patterns (docs/lab.md, "Replayed arrivals and schedule caches"):
LabConfig.delays replays recorded delays (iterations x ranks) instead of the seeded ones,
everywhere (the minibench's --delays, the pattern of every prediction and per-iteration
compile). `cache:DIR` runs the runtime's whole selection path from a schedule cache (the
minibench's --schedule DIR); `oracle` compiles, for every iteration, --algorithm auto with
engine none for that iteration's true pattern (the candidates a cache build considers) and
runs each on a fresh communicator (--schedules). Every row lists, per iteration, the
schedule file rank 0 ran ("used", file names; "" where the MPI library's collective ran).

A user's own SimGrid platform (LabConfig.platform and hostfile under SMPI; docs/lab.md,
"Your own SimGrid platform"): SimGrid runs that platform with the ranks placed by the host
file (simgrid_platform.py) instead of the one generated from the topology; the compiler and
the cost models still use `topology` (required then), SimGrid keeps the lab's settings
(network model, TCP-gamma from the topology's window, no cross traffic). The report's
"platform" says which platform ran.
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
from ..algorithms import REGISTRY
from ..errors import InputError
from ..files import write_atomic
from ..pipeline import FLUID_CHECK_OPS, compile_schedule, resolve_topology
from ..model.simulate import piece_time, simulate_pattern, tau
from . import launch, native
from .arrivals import BASE_COMPUTE_S, arrival_pattern
from .netmodel import SIMGRID_EAGER_LIMIT, check_model, network_setup, write_prediction_topology
from .platform import DEFAULT_TCP_GAMMA, build_platform
from .launch import require_map_count
from .simgrid_platform import placement_note, platform_record, user_platform


RUN_TIMEOUT_S = 1800
# Arrival-aware algorithms: run through the PAT engine; bdr is built online by the runtime,
# the others are compiled per iteration from the seeded pattern (agg: issue 20's planner of
# multi-piece messages, once registered; check_algorithm refuses names not in REGISTRY).
PAP_AWARE = ("bdr", "bslb", "min3", "agg")
ONLINE = ("bdr",)
CACHE_PREFIX = "cache:"  # cache:DIR: the runtime selects from the schedule cache DIR
ORACLE = "oracle"  # per iteration, auto (engine none) compiled for its true pattern
# The same through the PAT engine: cache-pat:DIR picks by the PAT_Edge predictions
# (PAT_UseAlg("cache")) and runs the entry's background part in the engine; oracle-pat
# compiles auto (engine pat) per iteration for its true pattern, run as PAT_UseSchedule's.
CACHE_PAT_PREFIX = "cache-pat:"
ORACLE_PAT = "oracle-pat"


LabRunError = launch.LabRunError  # one error type for every lab launch


@dataclass
class _RunEnv:
    """What every launch of one run_lab call shares."""

    tmp: Path
    platform_files: tuple | None  # SMPI: (platform.xml, hosts)
    network: tuple[str, ...]  # SMPI: the network model's --cfg options (netmodel.py)
    topology_file: str | None  # what the compiler compiles with (the run's network's costs)
    delays_file: Path | None = None  # the minibench's --delays (LabConfig.delays)
    launcher: launch.Launcher | None = None  # real MPI: how every launch starts (launch.py)


@dataclass
class LabConfig:
    backend: str  # smpi | mpi
    topology: str | None
    ranks: int
    nbytes: int
    iterations: int = 4
    max_delay_ms: float = 0.0
    seed: int = 1
    flat_iterations: int = 2
    late_ms: float = 0.0  # the rank predicted first arrives this much later than predicted
    network_model: str = "CM02"
    tcp_gamma: int | None = None  # None: the topology's tcp_window, else DEFAULT_TCP_GAMMA
    shared_data: str = "auto"  # auto | yes | no (SMPI partial shared malloc for big buffers)
    workdir: str | None = None
    extra: dict = field(default_factory=dict)
    fluid: bool = False  # also predict with the fluid model (fluid.py; the model check does)
    bounds: bool = True  # lower bounds for an imbalanced pattern (pattern_bounds; the sweep skips them)
    segments: int | str = "auto"  # regular compiled algorithms: pieces per block (the model check: 1)
    # The cost model that picks among a compiled algorithm's candidates (pipeline.compile_schedule's
    # model): dag (the library's default), or auto (`collsched compile`'s: the fluid model where
    # the DAG model is known to be off); the rows' predictions are both models' either way.
    compile_model: str = "dag"
    # The topology the compiler and the cost models use instead of `topology` (e.g. one that
    # `collsched measure` wrote); SimGrid still runs `topology`'s platform (_predict_with).
    predict_topology: str | None = None
    # Replayed computation delays, seconds, shape (>= iterations, ranks), instead of the
    # seeded u * maxDelay (None: seeded); delays_source says where they came from.
    delays: np.ndarray | None = None
    delays_source: str | None = None
    # Environment variables of every launch (COLLSCHED_ARRIVALS, COLLSCHED_STATS, ...).
    environ: dict = field(default_factory=dict)
    # `native` through collsched_allgather without a schedule (SMPI cannot preload): the
    # MPI library's collective, seen by the runtime (the arrival trace records it).
    library_native: bool = False
    # Real MPI only (launch.py): a preset (mpirun, mpiexec, srun) or a template (None: mpirun),
    # a host file, a binding (None: the launcher's own). Under SMPI, hostfile goes with
    # platform: a SimGrid platform XML of the user's, run instead of the generated one.
    launcher: str | None = None
    hostfile: str | None = None
    bind_to: str | None = None
    platform: str | None = None

    def inputs(self) -> dict:
        d = {k: v for k, v in self.__dict__.items()
             if k not in ("workdir", "extra", "fluid", "bounds", "segments", "predict_topology",
                          "delays", "delays_source", "environ", "library_native", "launcher",
                          "hostfile", "bind_to", "platform", "compile_model")}
        if self.compile_model != "dag":  # (reports of before the option keep their inputs)
            d["compile_model"] = self.compile_model
        if self.segments != "auto":
            d["segments"] = self.segments
        if self.predict_topology is not None:
            d["predict_topology"] = self.predict_topology
        if self.delays is not None:
            d["delays"] = self.delays_source or "replayed"
            d["max_delay_ms"] = float(np.max(self.delays[:self.iterations]) * 1e3)
        d["collective"] = "allgather"
        return d

    def pattern(self) -> np.ndarray:
        """Every imbalanced iteration's arrival pattern (iterations x ranks, seconds after
        the double barrier), as the minibench produces it."""
        if self.delays is None:
            return arrival_pattern(self.seed, self.iterations, self.ranks, self.max_delay_ms / 1e3)
        d = np.asarray(self.delays, dtype=float)
        if d.ndim != 2 or d.shape[1] != self.ranks or d.shape[0] < self.iterations:
            raise InputError("--pap", f"{d.shape[0] if d.ndim == 2 else '?'} iterations x "
                             f"{d.shape[-1] if d.ndim else '?'} ranks",
                             f"expected at least {self.iterations} iterations of {self.ranks} ranks")
        if not np.all(np.isfinite(d)) or d.min() < 0 or d.max() > 3600:
            raise InputError("--pap", "delays", "expected finite delays of 0 to 3600 s")
        return BASE_COMPUTE_S + d[:self.iterations]


def _wants_fluid(cfg: LabConfig, sched) -> bool:
    """Predict with the fluid model too: always in the model check, and for every schedule
    small enough for `--algorithm auto`'s fluid check (pipeline.FLUID_CHECK_OPS), so that the
    report's "compiler's pick" ranks the run's algorithms as `auto` would."""
    return cfg.fluid or sched.total_ops <= FLUID_CHECK_OPS


def check_algorithm(name: str, backend: str) -> None:
    if name in ("native", ORACLE, ORACLE_PAT):
        return
    for prefix in (CACHE_PREFIX, CACHE_PAT_PREFIX):
        if name.startswith(prefix):
            d = Path(name[len(prefix):])
            if not (d / "index").is_file():
                raise InputError("--algorithms", name,
                                 f"expected {prefix}DIR with DIR a schedule cache (DIR/index)")
            return
    if name.startswith("native:"):
        native.resolve(name, backend)  # one line listing what each backend offers
        return
    if name not in REGISTRY:
        raise InputError("--algorithms", name,
                         f"expected a compiled algorithm ({', '.join(sorted(REGISTRY))}), native or native:NAME")


def _binary(backend: str) -> Path:
    return runtime_build.require(runtime_build.program(backend, "collsched-minibench"))


def _use_shared(cfg: LabConfig) -> bool:
    if cfg.backend != "smpi" or cfg.shared_data == "no":
        return False
    if cfg.shared_data == "yes":
        return True
    return cfg.ranks * cfg.ranks * cfg.nbytes > (2 << 30)  # > 2 GiB of receive buffers in all


def _check_map_count(cfg: LabConfig) -> None:
    """Shared data maps two regions per piece in every rank (its private first page and the
    shared rest): about 2 P^2 memory maps in all. Measured peaks: 649 maps at P = 16, 8936
    at P = 64; the 64 P + 4096 margin covers SimGrid's stacks and the libraries."""
    need = 2 * cfg.ranks * cfg.ranks + 64 * cfg.ranks + 4096
    require_map_count(need, f"{cfg.ranks} ranks with shared data", "bench")


def _launch(cfg: LabConfig, algorithm: str, schedule: Path | None, env: _RunEnv,
            pat: list[str] | None = None) -> dict:
    """One minibench launch. pat: the arguments that say what runs (PAT engine, cache,
    oracle); else the schedule file, else the MPI library's collective."""
    bench = [str(_binary(cfg.backend)), "--bytes", str(cfg.nbytes), "--iterations", str(cfg.iterations),
             "--flat-iterations", str(cfg.flat_iterations), "--max-delay-ms", repr(cfg.max_delay_ms),
             "--seed", str(cfg.seed)]
    if cfg.late_ms:
        bench += ["--late-ms", repr(cfg.late_ms)]
    if env.delays_file is not None:
        bench += ["--delays", str(env.delays_file)]
    if pat:
        bench += pat
    elif schedule:
        bench += ["--schedule", str(schedule)]
    else:
        bench.append("--library" if cfg.library_native and algorithm == "native" else "--native")
    if _use_shared(cfg):
        _check_map_count(cfg)
        bench.append("--shared-data")
    network = env.network
    environ = dict(os.environ)
    environ.update({k: str(v) for k, v in cfg.environ.items()})
    chosen = native.resolve(algorithm, cfg.backend) if algorithm.startswith("native:") else None
    if cfg.backend == "smpi":
        xml, hosts = env.platform_files
        cmd = ["smpirun", "-np", str(cfg.ranks), "-platform", str(xml), "-hostfile", str(hosts),
               *network, f"--cfg=network/TCP-gamma:{cfg.tcp_gamma}",
               "--cfg=network/crosstraffic:0", "--cfg=smpi/simulate-computation:no",
               # SMPI charges smpi/test (100 us by default) times a growing counter of
               # failed tests, shared by all ranks, per failed MPI_Test so that busy loops
               # advance the clock. Ours nap between tests; even 1 us grew, with the shared
               # counter, far beyond a nap and made ranks arrive late (docs/pat.md).
               "--cfg=smpi/test:0",
               "--log=root.thres:error"]
        if chosen is not None:
            cmd.append(chosen.smpi_cfg)
        cmd += bench
    else:
        # launch.py: the launcher's own syntax for slots, host file, binding and the MCA
        # parameters of native:NAME; the run's own variables reach every host.
        cmd, extra_env = env.launcher.command(cfg.ranks, bench, chosen.mca if chosen else None,
                                              forward=tuple(cfg.environ))
        environ.update(extra_env)
    return launch.run_driver(cmd, environ, env.tmp, RUN_TIMEOUT_S, algorithm, "the minibench")


def _measured_metrics(run: dict, cfg: LabConfig, t: float) -> dict:
    a = np.array(run["arrivals"])
    f = np.array(run["exits"])
    k = cfg.iterations
    a_imb, f_imb = a[:k], f[:k]
    runs = f_imb.max(1) - a_imb.min(1)
    omega = np.ptp(a_imb, 1)
    if cfg.flat_iterations:
        flat_run = float(np.mean(f[k:].max(1) - a[k:].min(1)))
    else:
        flat_run = float(np.mean(runs))
    return {
        "avg_elapsed_s": float(np.mean(f_imb - a_imb)),
        "run_time_s": float(np.mean(runs)),
        "absorption_s": float(np.mean(flat_run - runs + omega)),
        "imbalance_s": float(np.mean(omega)),
        "imbalance_factor": float(np.mean(omega) / t) if t > 0 else 0.0,
        "flat_run_time_s": flat_run,
    }


def _pap_aware_run(cfg: LabConfig, name: str, topo, pattern: np.ndarray, env: _RunEnv):
    """Runs an arrival-aware algorithm through the PAT engine; returns (run, prediction)."""
    from ..algorithms import Request, generate
    from ..inputs.arrivals import write_pap

    tmp = env.tmp
    t_block = piece_time(topo, cfg.nbytes)
    iterations = cfg.iterations + cfg.flat_iterations
    seeded = np.vstack([pattern, np.full((cfg.flat_iterations, cfg.ranks), pattern.min())])
    compiled = {}
    algorithm = "auto" if name == ORACLE_PAT else name  # oracle-pat: the model's pick per iteration
    if name in ONLINE:
        pat = ["--pat", name, "--pat-tau", repr(t_block)]
    else:
        for k in range(iterations):
            pap = tmp / f"{name}-it{k}.yaml"
            write_pap(pap, seeded[k:k + 1] - seeded[k].min(), unit="s",
                      comment=f"iteration {k} of the mini-benchmark (seed {cfg.seed})")
            res = compile_schedule(algorithm, cfg.ranks, cfg.nbytes, topology=env.topology_file,
                                   pap=str(pap), output=tmp / f"{name}-it{k}.sched", model=cfg.compile_model)
            compiled[k] = res.schedule
        # tau too: the explicit driver naps tau/32 between steps of a serial schedule's
        # background receives (200 us without it: each receive then waited up to that long).
        pat = ["--pat", algorithm, "--pat-schedules", str(tmp / f"{name}-it%d.sched"), "--pat-tau", repr(t_block)]
    run = _launch(cfg, name, None, env, pat=pat)
    # Prediction per iteration, for the arrivals that really happened. The engine learns
    # the pattern at the last rank's edge (half its computation), so no rank starts before
    # that; the schedule itself is the one the runtime ran (bdr: from the measured arrivals,
    # which PAT_Edge's extrapolation reproduces exactly under SMPI).
    measured = np.array(run["arrivals"])[:cfg.iterations]
    elapsed, runs, fluid = [], [], []
    for k, a in enumerate(measured):
        if name in ONLINE:
            # What PAT_Edge predicted: the measured arrival, except for the rank that --late-ms
            # delayed after its edge (the predicted-first one).
            predicted = a.copy()
            if cfg.late_ms:
                predicted[int(np.argmin(pattern[k]))] -= cfg.late_ms / 1e3
            # The engine counts no rank as arriving before the pattern is known (the last
            # prediction sent: the last edge, at half the longest computation).
            predicted = np.maximum(predicted, seeded[k].max() / 2.0)
            sched = generate(name, Request(nranks=cfg.ranks, nbytes=cfg.nbytes, topology=topo,
                                           full_duplex=topo.full_duplex,
                                           arrivals=predicted - predicted.min(), tau=t_block))
        else:
            sched = compiled[k]
        known = float(seeded[k].max() / 2.0)  # the last edge (half the computation), from the origin
        start = np.maximum(a, known)
        tl, _, _ = simulate_pattern(sched, topo, cfg.nbytes, start[None, :])
        exits = tl[0].exits + start.min()
        elapsed.append(float(np.mean(exits - a)))
        runs.append(float(exits.max() - a.min()))
        if _wants_fluid(cfg, sched):
            from ..model.fluid import fluid_pattern

            tl, _, _ = fluid_pattern(sched, topo, cfg.nbytes, start[None, :],
                                     simgrid_eager=cfg.backend == "smpi")
            fluid.append(float(np.mean(tl[0].exits + start.min() - a)))
    pred = {"predicted_avg_elapsed_s": float(np.mean(elapsed)),
            "predicted_run_time_s": float(np.mean(runs)), "pat": True}
    if name == ORACLE_PAT:
        picked = [compiled[k].algorithm for k in range(cfg.iterations)]
        pred["oracle_picked"] = {a: picked.count(a) for a in sorted(set(picked))}
    if fluid:
        pred["fluid_avg_elapsed_s"] = float(np.mean(fluid))
    return run, pred


def run_lab(cfg: LabConfig, algorithms: list[str], progress=None) -> dict:
    """Run every algorithm once under the same inputs; returns the report dict (JSON-able)."""
    if cfg.backend not in ("smpi", "mpi"):
        raise InputError("--backend", cfg.backend, "expected smpi or mpi")
    check_model(cfg.network_model)
    for name in algorithms:
        check_algorithm(name, cfg.backend)
    if cfg.backend == "smpi" and shutil.which("smpirun") is None:
        raise InputError("smpirun", "", "not found: install libsimgrid-dev (make deps)")
    launcher, user = None, user_platform(cfg.backend, cfg.platform, cfg.hostfile, cfg.ranks, cfg.topology)
    if cfg.backend == "mpi":
        if cfg.launcher in (None, launch.DEFAULT) and shutil.which("mpirun") is None:
            raise InputError("mpirun", "", "not found: install openmpi-bin (make deps)")
        launcher = launch.make_launcher(cfg.launcher, cfg.hostfile, cfg.bind_to)
    else:
        for flag, value in (("--launcher", cfg.launcher), ("--bind-to", cfg.bind_to)):
            if value is not None:
                raise InputError(flag, str(value), "only with --backend mpi (SMPI places ranks "
                                                   "from the platform)")
    loaded = resolve_topology(cfg.ranks, cfg.topology, None)
    # SimGrid and the cost model must see the same TCP window.
    if cfg.tcp_gamma is None:
        cfg.tcp_gamma = int(loaded.tcp_window or DEFAULT_TCP_GAMMA)
    topo, net = loaded, None
    if cfg.backend == "smpi":
        topo = dataclasses.replace(loaded, tcp_window=float(cfg.tcp_gamma))
        # The network model decides SimGrid's factors and the costs of the predictions
        # (netmodel.py); real MPI runs on the network the topology describes.
        net = network_setup(cfg.network_model, topo)
        topo = net.topology
    pattern = cfg.pattern()
    results = []
    keep = cfg.workdir is not None
    tmp = Path(cfg.workdir or tempfile.mkdtemp(prefix="collsched-lab-")).resolve()  # smpirun runs in it
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        env = _RunEnv(tmp, None, (), cfg.topology, launcher=launcher)
        if net is not None:
            window = None if loaded.tcp_window == cfg.tcp_gamma else cfg.tcp_gamma
            files = (build_platform(topo).write(tmp) if user is None else
                     (user.xml, user.write_hostfile(tmp / "platform.hosts", cfg.ranks)))
            env = _RunEnv(tmp, files, net.simgrid_cfg,
                          write_prediction_topology(net, cfg.topology, tmp / "network-topology.yaml",
                                                    window))
        if cfg.predict_topology is not None:
            topo, env = _predict_with(cfg, env)
        if cfg.delays is not None:
            env = dataclasses.replace(env, delays_file=write_delays(tmp / "delays.txt", pattern - BASE_COMPUTE_S))
        pap = tmp / "pattern.yaml"
        from ..inputs.arrivals import write_pap
        write_pap(pap, pattern - pattern.min(1, keepdims=True), unit="s",
                  comment=f"mini-benchmark arrivals: {cfg.delays_source or 'replayed'}" if cfg.delays is not None
                  else f"mini-benchmark arrivals: seed {cfg.seed}, maxDelay {cfg.max_delay_ms} ms")
        t_piece, bounds = [None], {}
        for name in algorithms:
            if progress:
                progress(name)
            results.append(_run_one(cfg, name, topo, pattern, pap, env, t_piece, bounds))
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    inputs = cfg.inputs()
    inputs["algorithms"] = algorithms
    if launcher is not None:
        inputs["launch"] = launcher.describe()
    report = {"backend": cfg.backend, "inputs": inputs, "results": results}
    if net is not None:
        report["network"] = net.record()
        report["network_notes"] = list(net.notes)
        report["platform"] = platform_record(user, cfg.ranks, cfg.topology)
        if user is not None:
            report["network_notes"].append(
                f"SimGrid ran the platform {user.xml} (host file {user.hostfile}); the compiler and "
                f"the cost models used {cfg.topology}.")
            note = placement_note(user, topo.rank_host, cfg.ranks)
            if note:
                report["network_notes"].append(note)
    if cfg.predict_topology is not None:
        report.setdefault("network_notes", []).append(
            f"The compiler and the cost models used {cfg.predict_topology} (its own message costs, "
            f"eager_limit {topo.eager_limit}); the run used {cfg.topology or 'the default topology'}.")
    if cfg.bounds and np.ptp(pattern, axis=1).max() > 0:
        report["bounds"] = pattern_bounds(topo, cfg.nbytes, pattern)
    return report


def _predict_with(cfg: LabConfig, env: _RunEnv):
    """The prediction topology of cfg.predict_topology and the run environment whose
    compiler reads it: loaded for cfg.ranks, its message_costs and bandwidths as they are
    (measured ones: what a ping-pong saw), under SMPI with SimGrid's protocol rule
    (eager_limit SIMGRID_EAGER_LIMIT: no measurement sees it). SimGrid keeps env's platform
    and settings, built from cfg.topology."""
    from ..inputs.topology import write_topology

    pred = resolve_topology(cfg.ranks, cfg.predict_topology, None)
    if cfg.backend == "smpi":
        pred = dataclasses.replace(pred, eager_limit=SIMGRID_EAGER_LIMIT)
    path = env.tmp / "predict-topology.yaml"
    try:
        write_topology(pred, path, comment=f"{cfg.predict_topology} for {cfg.ranks} ranks, "
                                           f"eager_limit {pred.eager_limit} (collsched lab)")
    except ValueError as exc:
        raise InputError(cfg.predict_topology, "predict topology", str(exc)) from None
    return pred, dataclasses.replace(env, topology_file=str(path))


def _run_one(cfg: LabConfig, name: str, topo, pattern, pap: Path, env: _RunEnv, t_piece: list,
             bounds: dict | None = None) -> dict:
    """One algorithm's row: launch, measured metrics, predictions, the gaps to the LP bound
    (cfg.bounds). t_piece: [tau], shared by the rows (the first compiled schedule's, else one
    piece's transfer time); bounds: measured_gaps' cache, shared by the rows."""
    row = {"algorithm": name}
    schedule = None
    if name in PAP_AWARE or name == ORACLE_PAT:
        run, pred = _pap_aware_run(cfg, name, topo, pattern, env)
        row.update(pred)
    elif name.startswith(CACHE_PAT_PREFIX):
        cache = Path(name[len(CACHE_PAT_PREFIX):]).resolve()
        run_cfg = dataclasses.replace(cfg, environ={**cfg.environ, "COLLSCHED_SCHEDULES": str(cache)})
        run = _launch(run_cfg, name, None, env, pat=["--pat", "cache", "--pat-tau",
                                                     repr(piece_time(topo, cfg.nbytes))])
    elif name == ORACLE:
        run, pred = _oracle_run(cfg, topo, pattern, env)
        row.update(pred)
    elif name.startswith(CACHE_PREFIX):
        cache = Path(name[len(CACHE_PREFIX):]).resolve()
        run = _launch(cfg, name, None, env, pat=["--schedule", str(cache), "--allow-fallback"])
    elif not name.startswith("native"):
        schedule = env.tmp / f"{name}.sched"
        res = compile_schedule(name, cfg.ranks, cfg.nbytes, topology=env.topology_file, pap=str(pap),
                               output=schedule, segments=cfg.segments, model=cfg.compile_model)
        if t_piece[0] is None:
            t_piece[0] = tau(topo, res.schedule, cfg.nbytes)
    if schedule is not None or name.startswith("native"):
        run = _launch(cfg, name, schedule, env)
    if schedule is not None:
        # Predict for the arrivals that really happened: ranks leave the double
        # barrier up to one latency apart (80 ms on a WAN), which the seeded pattern
        # does not know; the model gets each rank's measured arrival, not its exit.
        measured = np.array(run["arrivals"])[:cfg.iterations]
        _, _, pred = simulate_pattern(res.schedule, topo, cfg.nbytes, measured)
        row["predicted_avg_elapsed_s"] = pred.avg_elapsed_s
        row["predicted_run_time_s"] = pred.run_time_s
        if _wants_fluid(cfg, res.schedule):
            from ..model.fluid import fluid_pattern

            # SimGrid's small messages wait for their receive (simgrid_eager, fluid.py).
            row["fluid_avg_elapsed_s"] = fluid_pattern(res.schedule, topo, cfg.nbytes, measured,
                                                       simgrid_eager=cfg.backend == "smpi")[2].avg_elapsed_s
    if t_piece[0] is None:
        t_piece[0] = piece_time(topo, cfg.nbytes)
    row.update(_measured_metrics(run, cfg, t_piece[0]))
    row["data_ok"] = bool(run["data_ok"])
    row["checked_bytes_per_piece"] = run["checked_bytes_per_piece"]
    if run.get("fallbacks"):
        row["fallbacks"] = run["fallbacks"]
        row["fallback_reason"] = run.get("fallback_reason", "")
    row["wall_s"] = run["wall_s"]
    row["command"] = run["command"]  # the launch as it ran (launcher, options, program)
    if name.startswith("native:"):
        row["native"] = native.resolve(name, cfg.backend).describe()  # what the backend was told
    a, f = np.array(run["arrivals"])[:cfg.iterations], np.array(run["exits"])[:cfg.iterations]
    row["elapsed_per_iteration_s"] = [float(x) for x in np.mean(f - a, axis=1)]
    if cfg.bounds:  # the LP bound for the measured arrivals, the measured gaps to it
        row.update(measured_gaps(row, a, topo, cfg, {} if bounds is None else bounds))
    row["used"] = [Path(u).name if u else "" for u in run.get("used", [])[:cfg.iterations]]
    if "predicted_avg_elapsed_s" in row and row["avg_elapsed_s"] > 0:
        row["model_ratio"] = row["predicted_avg_elapsed_s"] / row["avg_elapsed_s"]
    if "fluid_avg_elapsed_s" in row and row["avg_elapsed_s"] > 0:
        row["fluid_ratio"] = row["fluid_avg_elapsed_s"] / row["avg_elapsed_s"]
    return row


def _oracle_run(cfg: LabConfig, topo, pattern: np.ndarray, env: _RunEnv):
    """The oracle: per iteration, --algorithm auto with engine none compiled for that
    iteration's true pattern (flat iterations: for a flat one), each run on a fresh
    communicator; returns (run, prediction for the measured arrivals)."""
    from ..inputs.arrivals import write_pap

    tmp = env.tmp
    scheds, picked, flat_file = [], {}, None
    for k in range(cfg.iterations + cfg.flat_iterations):
        out = tmp / f"oracle-it{k}.sched"
        if k >= cfg.iterations and flat_file is not None:
            shutil.copyfile(flat_file, out)
            scheds.append(scheds[-1])
            continue
        a = pattern[k] - pattern[k].min() if k < cfg.iterations else np.zeros(cfg.ranks)
        pap = tmp / f"oracle-it{k}.yaml"
        write_pap(pap, a[None, :], unit="s", comment=f"iteration {k}'s true arrival pattern (the oracle)")
        res = compile_schedule("auto", cfg.ranks, cfg.nbytes, topology=env.topology_file, pap=str(pap),
                               output=out, engine="none")
        scheds.append(res.schedule)
        if k < cfg.iterations:
            picked[res.schedule.algorithm] = picked.get(res.schedule.algorithm, 0) + 1
        else:
            flat_file = out
    files = str(tmp).replace("%", "%%") + "/oracle-it%d.sched"
    run = _launch(cfg, ORACLE, None, env, pat=["--schedules", files])
    measured = np.array(run["arrivals"])[:cfg.iterations]
    elapsed = [simulate_pattern(scheds[k], topo, cfg.nbytes, a[None, :])[2].avg_elapsed_s
               for k, a in enumerate(measured)]
    return run, {"predicted_avg_elapsed_s": float(np.mean(elapsed)), "oracle_picked": picked}


def write_delays(path: Path, delays: np.ndarray) -> Path:
    """The minibench's --delays file (runtime/lab/minibench.c): `ranks N iterations K`,
    then K lines of N delays in seconds."""
    d = np.asarray(delays, dtype=float) + 0.0  # no -0.0
    lines = [f"ranks {d.shape[1]} iterations {d.shape[0]}"]
    lines += [" ".join(f"{float(x):.17g}" for x in row) for row in d]
    write_atomic(path, "\n".join(lines) + "\n")
    return path


def measured_gaps(row: dict, arrivals: np.ndarray, topo, cfg: LabConfig, cache: dict) -> dict:
    """A row's LP lower bound (lowerbound.pattern_lower_bound, under the cost model) for the
    arrivals its run measured (iterations x ranks: the ones every prediction of the row uses;
    rows of equal arrivals share one LP through `cache`), and the measured times' gaps to it:
    gap = measured / bound - 1 (pipeline.gap_to), average elapsed time and run time. Where
    the bound is skipped (more than pipeline.MAX_BOUND_RANKS ranks, the LP failed) the
    bounds and gaps are None and lower_bound_note says why."""
    from ..model.lowerbound import pattern_lower_bound
    from ..pipeline import MAX_BOUND_RANKS, gap_to

    arrivals = np.asarray(arrivals, dtype=float)
    key = np.round(arrivals, 9).tobytes()
    if key not in cache:
        b = {"lower_bound_avg_elapsed_s": None, "lower_bound_run_time_s": None, "lower_bound_method": None,
             "lower_bound_note": None}
        if cfg.ranks > MAX_BOUND_RANKS:
            b["lower_bound_note"] = f"skipped: more than {MAX_BOUND_RANKS} ranks"
        else:
            try:
                lb = pattern_lower_bound(topo, cfg.nbytes, arrivals)
                b.update(lower_bound_avg_elapsed_s=lb.avg_elapsed_s, lower_bound_run_time_s=lb.run_time_s,
                         lower_bound_method=lb.method)
            except RuntimeError as e:  # the LP solver gave up: the row stands without its gap
                b["lower_bound_note"] = f"skipped: {e}"
        cache[key] = b
    b = dict(cache[key])
    b["gap_avg_elapsed"] = gap_to(row["avg_elapsed_s"], b["lower_bound_avg_elapsed_s"])
    b["gap_run_time"] = gap_to(row["run_time_s"], b["lower_bound_run_time_s"])
    return b


def pattern_bounds(topo, nbytes: int, pattern: np.ndarray) -> dict:
    """Lower bounds on the average elapsed time for the seeded pattern, under the cost
    model (lowerbound.py): the LP bound holds for every verified schedule, the serial one
    for every serial schedule (bdr, bslb, arrival-aware min3 on a cluster)."""
    from ..model.lowerbound import pattern_lower_bound, serial_lower_bound

    lp = pattern_lower_bound(topo, nbytes, pattern)
    serial = serial_lower_bound(topo, nbytes, pattern).avg_elapsed_s
    # Both bound a serial schedule; the LP is the larger one on grids (WAN links), the
    # serial one on clusters (a latency per receive).
    return {"lp_avg_elapsed_s": lp.avg_elapsed_s, "lp_method": lp.method,
            "serial_avg_elapsed_s": max(serial, lp.avg_elapsed_s)}
