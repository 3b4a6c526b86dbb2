"""The recurring-load-patterns suite (issue 17): trace -> cache build -> selection at run time.

`collsched bench --suite recurring` runs the issue's scenario (docs/lab.md, "The recurring
suite") on the lab's mini-benchmark with replayed delays (LabConfig.delays):

- **the scenario** (`scenario`): P ranks, 256K floats gathered in total (the BDR paper's
  "256K floats"; bytes per rank 4 x floor(262144 / P), whole floats, as docs/sweep.md);
  K + 1 pattern classes, each a late group of P // 4 ranks (disjoint groups, from a
  seeded permutation of the ranks), every rank of the group with a fixed delay drawn
  uniformly in (0.2, 1] x spread, the group's first rank exactly `spread`; every other
  rank on time. Iteration i of a run is class i mod K, its delays the class's plus
  bounded noise: every rank off its class pattern by at most 5% of the spread, uniform
  in [-0.05, +0.05] x spread (a seed per run), shifted so the earliest is 0. Class K (the
  unseen one) never appears in training or evaluation.

  Why bounded and not Gaussian noise: with Gaussian noise of standard deviation 5% of
  the spread, no predictor can get below about 0.8 sigma mean absolute error (the
  expected |x| of a normal deviate: a rank's own noise is unpredictable) = 0.2 ms, which
  at 37448 B on tryton-48 (T = 0.35 ms) is 0.57 T: the target "below 0.5 T" would
  measure the noise, not the predictor. The report also gives the best predictor's error
  under Gaussian noise of that sigma (`scenario.draw(..., gaussian=True)`, evaluated the
  same way), as a figure, not a target;
- **training**: `native` with COLLSCHED_ARRIVALS (under SMPI through collsched_allgather
  without a schedule: LabConfig.library_native; under real MPI the unmodified program
  under the preload library) -> the arrival trace;
- **two ways a cache serves calls** (VARIANTS), each with its own cache built
  (collsched.cache.build) from that one trace, compiled for the run's own network costs
  (the prediction topology the runner wrote for the training run):
  "in-call": cache:DIR, the preload library / collsched_allgather path (prediction from
  the arrivals seen so far, docs/cache.md steps 3-6), cache built with engine none, its
  oracle `oracle` (auto, engine none, per iteration's true pattern); "pat" (SMPI only):
  cache-pat:DIR, the PAT engine picks each iteration's entry from the PAT_Edge
  predictions and runs its background part before the late ranks arrive, cache built
  with engine pat, its oracle `oracle-pat` (auto, engine pat, per iteration's true
  pattern, through the engine);
- **evaluation**: new noise (another seed), the same classes: native, the two regular
  algorithms the cost model ranks best for a flat pattern, bdr (online, PAT engine), and
  per variant its cache and its oracle;
- **unseen**: iterations of class K only: each variant's cache against the best regular
  algorithm of the evaluation.

The report (recurring_report.py: `summarise`, `markdown`, `plot`): per variant the hit
rate after a warm-up of 2 cycles (the cache entry rank 0 used in each iteration against
the true class: a class entry stands for the true class whose pattern is nearest to its
PATTERN, the regular entry for none), average elapsed time per algorithm (all iterations
and after the warm-up), ratios, the best predictor's error in units of T (one message's
time), and the issue's targets per variant with met / not met.

`--backend mpi` is the real-MPI check, in-call only: the same program, unmodified (the
minibench with --native --delays FILE, plain MPI_Allgather) under the preload library
with COLLSCHED_SCHEDULES=the cache and COLLSCHED_STATS: data checked, the statistics show
the cache's use.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError
from .recurring_report import WARMUP_CYCLES, avg_elapsed, finite, jsonable, markdown, record, summarise
from .. import resources, runtime_build
from .runner import CACHE_PAT_PREFIX, CACHE_PREFIX, ORACLE, ORACLE_PAT, LabConfig, run_lab

SPREAD_S = 5e-3
NOISE = 0.05
NCLASSES = 3
SEED = 17
FLOATS = 256 * 1024  # the BDR paper's "256K floats", gathered in total
REGULAR_CANDIDATES = ("ring", "nex", "bruck", "rd", "spreading", "lnbc")
DEFAULTS = {"smpi": {"ranks": 28, "bytes": None, "iterations": 120},  # bytes: default_bytes
            "mpi": {"ranks": 8, "bytes": 64 << 10, "iterations": 30}}
SITE_NOTE = "the minibench's timed call (one call site)"
# (label, cache algorithm prefix, its oracle, the cache build's engine); mpi: in-call only.
VARIANTS = (("in-call", CACHE_PREFIX, ORACLE, "none"), ("pat", CACHE_PAT_PREFIX, ORACLE_PAT, "pat"))


def default_bytes(backend: str, ranks: int) -> int:
    """Bytes per rank without --bytes: SMPI 4 x floor(256K / P) (256K floats in total,
    whole floats); real MPI 64 KiB."""
    d = DEFAULTS[backend]["bytes"]
    return d if d is not None else 4 * (FLOATS // ranks)


def variants(backend: str) -> tuple:
    """The cache variants a backend measures (real MPI: the preload library's in-call)."""
    return VARIANTS if backend == "smpi" else VARIANTS[:1]


@dataclass(frozen=True)
class Scenario:
    classes: np.ndarray  # (K + 1, P) class delays, seconds; row K is the unseen class
    spread: float
    noise: float
    seed: int

    @property
    def nclasses(self) -> int:
        return len(self.classes) - 1

    def draw(self, labels, seed: int, gaussian: bool = False) -> np.ndarray:
        """Delays (iterations x P) of the classes `labels`, with fresh noise from `seed`:
        uniform in [-noise, +noise] x spread (the scenario's), or with gaussian=True normal
        with standard deviation noise x spread (the report's comparison figure)."""
        labels = np.asarray(labels, dtype=np.int64)
        rng = np.random.default_rng([self.seed, seed])
        size, scale = (len(labels), self.classes.shape[1]), self.noise * self.spread
        noise = rng.normal(0.0, scale, size=size) if gaussian else rng.uniform(-scale, scale, size=size)
        x = self.classes[labels] + noise
        return x - x.min(axis=1, keepdims=True)


def scenario(nranks: int, nclasses: int = NCLASSES, spread: float = SPREAD_S, noise: float = NOISE,
             seed: int = SEED) -> Scenario:
    """The classes of the module's docstring: K seen ones and one unseen, late groups of
    P // 4 ranks (at least 1; K + 1 groups must fit in P ranks)."""
    g = max(1, nranks // 4)
    if (nclasses + 1) * g > nranks:
        raise InputError("--ranks", str(nranks), f"expected at least {nclasses + 1} ranks "
                                                  f"for {nclasses} + 1 disjoint late groups")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(nranks)
    classes = np.zeros((nclasses + 1, nranks))
    for c in range(nclasses + 1):
        delay = spread * rng.uniform(0.2, 1.0, size=g)
        delay[0] = spread
        classes[c, perm[c * g:(c + 1) * g]] = delay
    return Scenario(classes, spread, noise, seed)


def _say(progress, text: str) -> None:
    if progress is not None:
        progress(text)


def _config(backend, topology, ranks, nbytes, delays, source, network_model, workdir, environ=None,
            library_native=False, launch=None) -> LabConfig:
    """launch: real MPI's launcher, hostfile and bind_to (LabConfig's; lab/launch.py)."""
    return LabConfig(backend=backend, topology=topology, ranks=ranks, nbytes=nbytes,
                     iterations=len(delays), flat_iterations=0, delays=delays, delays_source=source,
                     network_model=network_model, workdir=str(workdir), environ=environ or {},
                     library_native=library_native, bounds=False, **(launch or {}))


def _preload_env(backend: str) -> dict:
    """Real MPI: the unmodified program under the preload library."""
    if backend != "mpi":
        return {}
    lib = runtime_build.require(runtime_build.library("libcollsched-preload.so"), "make runtime")
    return {"LD_PRELOAD": str(lib)}


def _build_cache(trace: Path, cache: Path, topology: str, progress, engine: str = "none") -> dict:
    """collsched.cache's build from the training trace's timed call site, with `engine`
    (pat: the entries under site `*`, the group the PAT engine picks from); returns what it
    decided."""
    from ..cache import build as cache_build

    from ..patterns import tracefile

    # The timed call's site: the one with the most calls (the minibench's warm-up call is
    # another site, one call per run).
    site = max(tracefile.groups(tracefile.read_trace(trace)), key=lambda g: g.ncalls).site_name
    groups, notes = cache_build.groups_from_traces([str(trace)], site=site)
    if engine == "pat":
        # The PAT engine's cache mode picks from the allgather `*` group (docs/runtime.md):
        # its calls have no call site of their own (COLLSCHED_STATS counts them under PAT).
        from dataclasses import replace

        from ..cache.index import ANY_SITE

        groups = [replace(g, site=ANY_SITE) for g in groups]
    opts = cache_build.Options(topology=topology, engine=engine)
    _, reports = cache_build.build(groups, cache, opts, progress=progress,
                                   comment=f"the recurring suite's training trace {trace.name}, engine {engine}")
    out = {"notes": notes, "engine": engine, "groups": []}
    for rep in reports:
        out["groups"].append({"group": rep.group.label(), "calls": int(len(rep.group.patterns)),
                              "t_message_s": rep.t_message_s, "regular": rep.regular_algorithm,
                              "classes": [{"class": c.klass, "calls": c.calls, "spread_s": c.spread_s,
                                           "kept": c.kept, "why": c.why, "algorithm": c.algorithm,
                                           "predicted_s": c.predicted_s, "regular_s": c.regular_s}
                                          for c in rep.classes]})
    return out


def _entry_classes(cache: Path, sc: Scenario) -> dict:
    """{entry file: the true class it stands for (int), or "regular"}: a class entry is
    the true class whose pattern is nearest (docs/cache.md's distance) to its PATTERN."""
    from ..cache.store import read_index

    out = {}
    seen = sc.classes[:sc.nclasses + 1]
    for e in read_index(cache):
        if e.klass is None:
            out[e.file] = "regular"
            continue
        p = np.asarray(e.pattern, dtype=float)
        d = [float(np.sqrt(np.mean(((p - p.min()) - (c - c.min())) ** 2))) for c in seen]
        out[e.file] = int(np.argmin(d))
    return out


def _regular_picks(cfg_topology: str, ranks: int, nbytes: int, n: int = 2) -> tuple[list[str], dict]:
    """The n regular algorithms the cost model predicts fastest for a flat pattern."""
    from ..pipeline import compile_schedule

    pred = {}
    for name in REGULAR_CANDIDATES:
        try:
            res = compile_schedule(name, ranks, nbytes, topology=cfg_topology)
        except InputError as e:
            if e.source != "--algorithm":
                raise
            continue
        pred[name] = res.metrics.avg_elapsed_s
    return sorted(pred, key=pred.get)[:n], pred


def _hits(used: list[str], labels: np.ndarray, entries: dict, start: int) -> dict:
    """Per iteration, the class the entry used stands for ("regular"; "library" where the
    MPI library ran; "other" for a schedule not in the cache, e.g. the PAT engine's online
    BDR when it found no entry); from `start` on, the hits: the right entry is the class
    entry that stands for the true class, or the regular entry for a class the build kept
    none for (class_hits counts class entries only). `used` holds file names (the runner's
    row: the base name of the schedule rank 0 ran, for cache:DIR and cache-pat:DIR alike)."""
    mapped = [entries.get(u, "other" if u else "library") for u in used]
    right = {c: f for f, c in entries.items() if c != "regular"}
    regular = next((f for f, c in entries.items() if c == "regular"), None)
    after = range(start, len(used))
    hits = sum(1 for k in after if used[k] and used[k] == right.get(int(labels[k]), regular))
    class_hits = sum(1 for k in after if mapped[k] == int(labels[k]))
    n = len(after)
    return {"mapped": mapped, "hits": hits, "class_hits": class_hits, "calls": n,
            "hit_rate": hits / n if n else None, "class_hit_rate": class_hits / n if n else None,
            "classes_with_entry": sorted(right)}


def _prediction_error(patterns: np.ndarray, t_message: float) -> dict:
    """collsched.patterns.predict.evaluate on the evaluation's patterns (its default
    training prefix for the recurrence's classes): every predictor's scores."""
    from ..patterns import predict

    scores, clustering = predict.evaluate(patterns - patterns.min(axis=1, keepdims=True), t_message)
    return {"predictors": {sc.name: {"mae_t": float(sc.mae_t), "max_t": float(sc.max_t),
                                     "late_set": float(sc.late_set), "late_order": float(sc.late_order),
                                     "calls": int(sc.calls)} for sc in scores},
            "classes_found": int(clustering.k)}


def _run(backend, topology, ranks, nbytes, delays, source, network_model, workdir, name,
         environ=None, library_native=False, algorithm=None, progress=None, tag=None, launch=None) -> dict:
    """One algorithm on one delay matrix: its row of run_lab's report (run directory
    WORKDIR/SOURCE-TAG, TAG the name unless given: cache names hold a path)."""
    _say(progress, f"{source}: {name} ({len(delays)} iterations)")
    t = time.perf_counter()
    run_dir = workdir / f"{source}-{tag or name}"
    cfg = _config(backend, topology, ranks, nbytes, delays, source, network_model, run_dir,
                  environ, library_native, launch)
    rep = run_lab(cfg, [algorithm or name])
    row = rep["results"][0]
    row["algorithm"] = name
    _say(progress, f"{source}: {name}: avg elapsed {row['avg_elapsed_s'] * 1e3:.3f} ms, data "
                   f"{'ok' if row['data_ok'] else 'WRONG'} ({time.perf_counter() - t:.0f} s)")
    return {"row": row, "report": rep}


def _stats(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")[:20000]
    except OSError:
        return None


def _cache_run(common, delays, source, label, cache_name, stats: Path, preload: dict) -> dict:
    """A variant's cache on `delays` with COLLSCHED_STATS=stats (real MPI: the unmodified
    program, `native`, under the preload library with COLLSCHED_SCHEDULES)."""
    env, algorithm = {"COLLSCHED_STATS": str(stats)}, None
    if common["backend"] == "mpi":
        env.update({**preload, "COLLSCHED_SCHEDULES": cache_name[len(CACHE_PREFIX):]})
        algorithm = "native"
    return _run(delays=delays, source=source, name=cache_name, environ=env, algorithm=algorithm,
                tag=f"cache-{label}", **common)["row"]


def _evaluate(common, evald, regular, variant_rows, preload, work: Path) -> dict:
    """The evaluation's rows: native, the regular picks, bdr (SMPI), and per variant its
    cache and (SMPI) its oracle."""
    rows = {}
    names = ["native", *regular] + (["bdr"] if common["backend"] == "smpi" else [])
    for name in names:
        rows[name] = _run(delays=evald, source="evaluation", name=name, **common)["row"]
    for v in variant_rows:
        rows[v["cache"]] = _cache_run(common, evald, "evaluation", v["label"], v["cache"],
                                      work / f"stats-eval-{v['label']}.txt", preload)
        if v["oracle"]:
            rows[v["oracle"]] = _run(delays=evald, source="evaluation", name=v["oracle"], **common)["row"]
    return rows


def _train(common, train, trace: Path, preload: dict, work: Path, topology) -> tuple[dict, str]:
    """The training run (native with COLLSCHED_ARRIVALS); returns its row and the topology
    file the compiler compiles with (the network model's costs under SMPI)."""
    from .runner import LabRunError

    trace.unlink(missing_ok=True)
    row = _run(delays=train, source="training", name="native", library_native=common["backend"] == "smpi",
               environ={"COLLSCHED_ARRIVALS": str(trace), **preload}, **common)["row"]
    if not trace.is_file():
        raise LabRunError(f"training: no arrival trace at {trace} (COLLSCHED_ARRIVALS)")
    topo_file = topology
    if common["backend"] == "smpi" and (work / "training-native" / "network-topology.yaml").is_file():
        topo_file = str(work / "training-native" / "network-topology.yaml")
    return row, topo_file


def _inputs(backend, ranks, nbytes, iterations, topology, sc, seed, n_unseen, warm, t_msg) -> dict:
    return {"ranks": ranks, "bytes": nbytes, "iterations": iterations, "topology": topology,
            "classes": sc.nclasses, "spread_s": sc.spread, "noise": sc.noise, "noise_kind": "uniform",
            "seed": seed, "late_group": max(1, ranks // 4), "unseen_iterations": n_unseen,
            "warmup_iterations": warm, "t_message_s": t_msg,
            "bytes_rule": "4 x floor(262144 / P) (256K floats in total)" if nbytes == 4 * (FLOATS // ranks)
            else None}


def _check_launch(backend: str, launch: dict, ranks: int, topology: str | None):
    """Real MPI's launcher options, or SMPI's user platform (--platform with --hostfile: the
    simgrid_platform.UserPlatform, else None); one InputError naming the option at fault."""
    from . import launch as launching
    from .simgrid_platform import user_platform

    if backend == "smpi" or "platform" in launch:
        user = user_platform(backend, launch.get("platform"), launch.get("hostfile"), ranks, topology)
        launch = {k: v for k, v in launch.items() if k not in ("platform", "hostfile")}
        if launch:
            flag, value = next(iter(launch.items()))
            raise InputError(f"--{flag.replace('_', '-')}", str(value), "only with --backend mpi (SMPI "
                                                                        "places ranks from the platform)")
        return user
    if launch:
        launching.make_launcher(launch.get("launcher"), launch.get("hostfile"), launch.get("bind_to"))
    return None


def run_recurring(backend: str = "smpi", ranks: int | None = None, nbytes: int | None = None,
                  iterations: int | None = None, network_model: str = "CM02", topology: str | None = None,
                  workdir: str | None = None, seed: int = SEED, progress=None, launch: dict | None = None) -> dict:
    """The whole suite (module docstring); returns the report. launch: real MPI's launcher,
    hostfile and bind_to (LabConfig's, lab/launch.py), or under SMPI platform and hostfile
    (a user's SimGrid platform, simgrid_platform.py; `topology` required then), checked
    before anything runs."""
    import tempfile

    from ..model.simulate import piece_time
    from ..pipeline import resolve_topology
    from .runner import pattern_bounds

    launch = {k: v for k, v in (launch or {}).items() if v is not None}
    d = DEFAULTS[backend]
    ranks, iterations = ranks or d["ranks"], iterations or d["iterations"]
    user = _check_launch(backend, launch, ranks, topology)
    nbytes = nbytes or default_bytes(backend, ranks)
    if topology is None and backend == "smpi":
        topology = str(resources.topologies_dir() / "tryton-48.yaml")
    sc = scenario(ranks, seed=seed)
    k = sc.nclasses
    if iterations < (WARMUP_CYCLES + 1) * k:
        raise InputError("--iterations", str(iterations), f"expected at least {(WARMUP_CYCLES + 1) * k} "
                                                          f"({WARMUP_CYCLES} warm-up cycles and one more)")
    work = Path(workdir or tempfile.mkdtemp(prefix="collsched-recurring-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    labels = np.arange(iterations) % k
    train, evald = sc.draw(labels, 1), sc.draw(labels, 2)
    n_unseen = max(2 * k, iterations // 10)
    unseen = sc.draw(np.full(n_unseen, k), 3)
    preload = _preload_env(backend)
    common = dict(backend=backend, topology=topology, ranks=ranks, nbytes=nbytes, network_model=network_model,
                  workdir=work, progress=progress, launch=launch or None)
    trace = work / "train.trace"
    train_row, topo_file = _train(common, train, trace, preload, work, topology)
    vrows = []
    for label, prefix, oracle, engine in variants(backend):
        cache = work / f"cache-{label}"
        shutil.rmtree(cache, ignore_errors=True)  # this run's own cache: not merged into an old one
        _say(progress, f"cache build ({label}, engine {engine}) from the training trace")
        built = _build_cache(trace, cache, topo_file, progress, engine)
        cache_name = f"{CACHE_PREFIX if backend == 'mpi' else prefix}{cache}"
        vrows.append({"label": label, "cache": cache_name, "oracle": oracle if backend == "smpi" else None,
                      "engine": engine, "dir": str(cache), "build": built, "entries": _entry_classes(cache, sc)})
    regular, regular_pred = _regular_picks(topo_file, ranks, nbytes)
    # Every cache's regular entry runs on its own too: "best regular" must include what the
    # cache falls back to, or a cache that runs it would seem to beat every regular one.
    for v in vrows:
        for g in v["build"]["groups"]:
            if g["regular"] and g["regular"] not in regular and g["regular"] != "native":
                regular.append(g["regular"])
    rows = _evaluate(common, evald, regular, vrows, preload, work)
    warm = WARMUP_CYCLES * k
    best_regular = min(["native", *regular], key=lambda n: avg_elapsed(rows[n], warm))
    unseen_rows = {best_regular: _run(delays=unseen, source="unseen", name=best_regular, **common)["row"]}
    for v in vrows:
        unseen_rows[v["cache"]] = _cache_run(common, unseen, "unseen", v["label"], v["cache"],
                                             work / f"stats-unseen-{v['label']}.txt", preload)
        v["stats"] = {"evaluation": _stats(work / f"stats-eval-{v['label']}.txt"),
                      "unseen": _stats(work / f"stats-unseen-{v['label']}.txt")}
        v["hits"] = _hits(rows[v["cache"]]["used"], labels, v["entries"], warm) if backend == "smpi" else None
    topo = resolve_topology(ranks, topo_file, None)
    t_msg = float(piece_time(topo, nbytes))
    report = {
        "suite": "recurring", "workdir": str(work), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "backend": backend, "network_model": network_model if backend == "smpi" else None,
        "inputs": _inputs(backend, ranks, nbytes, iterations, topology, sc, seed, n_unseen, warm, t_msg),
        "scenario": {"classes_s": sc.classes.tolist(), "labels": labels.tolist()},
        "training": train_row, "variants": {v.pop("label"): v for v in vrows},
        "regular_predicted_s": regular_pred, "regular": regular, "best_regular": best_regular,
        "evaluation": rows, "unseen": unseen_rows,
    }
    if launch:
        # real MPI's launcher options as given, or the user's SimGrid platform and host file
        report["inputs"]["launch"] = launch
    if backend == "smpi":
        from .simgrid_platform import platform_record

        report["platform"] = platform_record(user, ranks, topology)  # which platform SimGrid ran
    report["prediction"] = _prediction_error(evald, t_msg)
    # The same classes under Gaussian noise of the same sigma: a figure, not a target.
    report["prediction_gaussian"] = _prediction_error(sc.draw(labels, 2, gaussian=True), t_msg)
    # What any schedule can reach on these classes (the cost model's LP lower bound on the
    # average elapsed time, lowerbound.py): bounds every speedup the targets ask for.
    report["bound"] = pattern_bounds(topo, nbytes, sc.classes[:k])
    report["summary"] = summarise(report)
    return report


def run_and_record(backend: str, ranks, nbytes, iterations, network_model: str, topology, doc: str | None,
                   plot_path: str | None, section: str | None, workdir: str | None, json_out: str | None = None,
                   progress=None, launch: dict | None = None) -> dict:
    """run_recurring, then the JSON report (json_out, else WORKDIR/report.json), the plots
    and the --doc section."""
    from ..files import write_atomic

    report = run_recurring(backend, ranks, nbytes, iterations, network_model, topology, workdir, progress=progress,
                           launch=launch)
    write_atomic(json_out or Path(report["workdir"]) / "report.json",
                 json.dumps(finite(report), indent=1, default=jsonable) + "\n")
    record(report, doc, plot_path, section)
    return report


def bench_command(a, ranks: int | None, nbytes: int | None) -> tuple[dict, str]:
    """The command line's suite (cli.py, bench --suite recurring): progress lines on stderr
    (not with --json), the report and its Markdown."""
    import sys

    def progress(text: str) -> None:
        if not a.json:
            print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    report = run_and_record(a.backend, ranks, nbytes, a.iterations, a.network_model, a.topology, a.doc,
                            a.plot, a.section, a.keep, progress=progress,
                            launch={"launcher": a.launcher, "hostfile": a.hostfile, "bind_to": a.bind_to,
                                    "platform": a.platform})
    return report, markdown(report)


if __name__ == "__main__":  # the report of a run again: recurring_report.main
    from .recurring_report import main

    raise SystemExit(main())
