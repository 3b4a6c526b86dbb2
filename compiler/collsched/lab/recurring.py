"""The recurring-load-patterns suite (issue 17): trace -> cache build -> selection at run time.

`collsched bench --suite recurring` runs the issue's scenario (docs/lab.md, "The recurring
suite") on the lab's mini-benchmark with replayed delays (LabConfig.delays):

- **the scenario** (`scenario`): P ranks; K + 1 pattern classes, each a late group of
  P // 4 ranks (disjoint groups, from a seeded permutation of the ranks), every rank of
  the group with a fixed delay drawn uniformly in (0.2, 1] x spread, the group's first
  rank exactly `spread`; every other rank on time. Iteration i of a run is class i mod K,
  its delays the class's plus Gaussian noise of standard deviation noise x spread on every
  rank (a seed per run), shifted so the earliest is 0. Class K (the unseen one) never
  appears in training or evaluation;
- **training**: `native` with COLLSCHED_ARRIVALS (under SMPI through collsched_allgather
  without a schedule: LabConfig.library_native; under real MPI the unmodified program
  under the preload library) -> the arrival trace;
- **cache build**: collsched.cache.build from that trace, engine none, compiled for the
  run's own network costs (the prediction topology the runner wrote for the training run);
- **evaluation**: new noise (another seed), the same classes: native, the two regular
  algorithms the cost model ranks best for a flat pattern, bdr (online, PAT engine),
  cache:DIR, oracle;
- **unseen**: iterations of class K only: cache:DIR against the best regular algorithm
  of the evaluation.

The report (JSON-able dict, `markdown` for docs/benchmarks.md, `plot` for the figures):
hit rate after a warm-up of 2 cycles (the cache entry rank 0 used in each iteration
against the true class: a class entry stands for the true class whose pattern is nearest
to its PATTERN, the regular entry for none), average elapsed time per algorithm (all
iterations and after the warm-up), ratios, the best predictor's error in units of T (one
message's time), and the issue's targets with met / not met.

`--backend mpi` is the real-MPI check: the same program, unmodified (the minibench with
--native --delays FILE, plain MPI_Allgather) under the preload library with
COLLSCHED_SCHEDULES=the cache and COLLSCHED_STATS: data checked, the statistics show the
cache's use.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError
from .runner import BUILD, CACHE_PREFIX, ORACLE, LabConfig, run_lab

SPREAD_S = 5e-3
NOISE = 0.05
NCLASSES = 3
WARMUP_CYCLES = 2
SEED = 17
REGULAR_CANDIDATES = ("ring", "nex", "bruck", "rd", "spreading", "lnbc")
TARGET_HIT, TARGET_ORACLE, TARGET_REGULAR, TARGET_UNSEEN, TARGET_ERROR_T = 0.90, 1.05, 1.2, 1.05, 0.5
DEFAULTS = {"smpi": {"ranks": 28, "bytes": 1 << 20, "iterations": 120},
            "mpi": {"ranks": 8, "bytes": 64 << 10, "iterations": 30}}
SITE_NOTE = "the minibench's timed call (one call site)"


@dataclass(frozen=True)
class Scenario:
    classes: np.ndarray  # (K + 1, P) class delays, seconds; row K is the unseen class
    spread: float
    noise: float
    seed: int

    @property
    def nclasses(self) -> int:
        return len(self.classes) - 1

    def draw(self, labels, seed: int) -> np.ndarray:
        """Delays (iterations x P) of the classes `labels`, with fresh noise from `seed`."""
        labels = np.asarray(labels, dtype=np.int64)
        rng = np.random.default_rng([self.seed, seed])
        x = self.classes[labels] + rng.normal(0.0, self.noise * self.spread, size=(len(labels), self.classes.shape[1]))
        return x - x.min(axis=1, keepdims=True)


def scenario(nranks: int, nclasses: int = NCLASSES, spread: float = SPREAD_S, noise: float = NOISE,
             seed: int = SEED) -> Scenario:
    """The classes of the module's docstring: K seen ones and one unseen, late groups of
    P // 4 ranks (at least 1; K + 1 groups must fit in P ranks)."""
    g = max(1, nranks // 4)
    if (nclasses + 1) * g > nranks:
        raise InputError("--ranks", str(nranks), f"expected at least {4 * (nclasses + 1) // 4} ranks "
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
            library_native=False) -> LabConfig:
    return LabConfig(backend=backend, topology=topology, ranks=ranks, nbytes=nbytes,
                     iterations=len(delays), flat_iterations=0, delays=delays, delays_source=source,
                     network_model=network_model, workdir=str(workdir), environ=environ or {},
                     library_native=library_native, bounds=False)


def _preload_env(backend: str) -> dict:
    """Real MPI: the unmodified program under the preload library."""
    if backend != "mpi":
        return {}
    lib = BUILD / "lib" / "libcollsched-preload.so"
    if not lib.exists():
        raise InputError(str(lib), "", "not built: run `make runtime` first")
    return {"LD_PRELOAD": str(lib)}


def _build_cache(trace: Path, cache: Path, topology: str, progress) -> dict:
    """collsched.cache's build from the training trace; returns what it decided."""
    from ..cache import build as cache_build

    from ..patterns import tracefile

    # The timed call's site: the one with the most calls (the minibench's warm-up call is
    # another site, one call per run).
    site = max(tracefile.groups(tracefile.read_trace(trace)), key=lambda g: g.ncalls).site_name
    groups, notes = cache_build.groups_from_traces([str(trace)], site=site)
    opts = cache_build.Options(topology=topology, engine="none")
    _, reports = cache_build.build(groups, cache, opts, progress=progress,
                                   comment=f"the recurring suite's training trace {trace.name}")
    out = {"notes": notes, "groups": []}
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


def _avg(row: dict, start: int = 0) -> float:
    return float(np.mean(row["elapsed_per_iteration_s"][start:]))


def _hits(used: list[str], labels: np.ndarray, entries: dict, start: int) -> dict:
    """Per iteration, the class the entry used stands for ("regular", "library" where the
    MPI library ran); from `start` on, the hits: the right entry is the class entry that
    stands for the true class, or the regular entry for a class the build kept none for
    (class_hits counts class entries only)."""
    mapped = [entries.get(u, "library" if not u else "unknown") for u in used]
    right = {c: f for f, c in entries.items() if c != "regular"}
    regular = next((f for f, c in entries.items() if c == "regular"), None)
    after = range(start, len(used))
    hits = sum(1 for k in after if used[k] and used[k] == right.get(int(labels[k]), regular))
    class_hits = sum(1 for k in after if mapped[k] == int(labels[k]))
    n = len(after)
    return {"mapped": mapped, "hits": hits, "class_hits": class_hits, "calls": n,
            "hit_rate": hits / n if n else None, "class_hit_rate": class_hits / n if n else None,
            "classes_with_entry": sorted(right.values())}


def _prediction_error(patterns: np.ndarray, t_message: float) -> dict:
    """collsched.patterns.predict.evaluate on the evaluation's patterns (its default
    training prefix for the recurrence's classes): every predictor's scores."""
    from ..patterns import predict

    scores, clustering = predict.evaluate(patterns - patterns.min(axis=1, keepdims=True), t_message)
    return {"predictors": {sc.name: {"mae_t": float(sc.mae_t), "max_t": float(sc.max_t),
                                     "late_set": float(sc.late_set), "late_order": float(sc.late_order),
                                     "calls": int(sc.calls)} for sc in scores},
            "classes_found": int(clustering.k)}


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "tolist"):
        return x.tolist()
    if hasattr(x, "__dataclass_fields__"):
        return _jsonable(dict(x.__dict__))
    return x


def _finite(x):
    """NaN and infinities as null (JSON has none)."""
    if isinstance(x, float):
        return x if np.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _best_error_t(pred: dict) -> tuple[str | None, float | None]:
    """(predictor, mean absolute error in units of T) of the best predictor of
    predict.evaluate's report (a dict of predictors, each with mae_t)."""
    rows = pred.get("predictors", pred) if isinstance(pred, dict) else {}
    best = None
    for name, r in (rows.items() if isinstance(rows, dict) else []):
        v = r.get("mae_t") if isinstance(r, dict) else None
        if isinstance(v, (int, float)) and (best is None or v < best[1]):
            best = (name, float(v))
    return best if best else (None, None)


def _run(backend, topology, ranks, nbytes, delays, source, network_model, workdir, name,
         environ=None, library_native=False, algorithm=None, progress=None) -> dict:
    """One algorithm on one delay matrix: its row of run_lab's report."""
    _say(progress, f"{source}: {name} ({len(delays)} iterations)")
    t = time.perf_counter()
    run_dir = workdir / f"{source}-{'cache' if name.startswith(CACHE_PREFIX) else name}"
    cfg = _config(backend, topology, ranks, nbytes, delays, source, network_model, run_dir,
                  environ, library_native)
    rep = run_lab(cfg, [algorithm or name])
    row = rep["results"][0]
    row["algorithm"] = name
    _say(progress, f"{source}: {name}: avg elapsed {row['avg_elapsed_s'] * 1e3:.3f} ms, data "
                   f"{'ok' if row['data_ok'] else 'WRONG'} ({time.perf_counter() - t:.0f} s)")
    return {"row": row, "report": rep}


def _stats_use(text: str | None, entries: dict) -> tuple[int, int]:
    """From COLLSCHED_STATS (runtime/src/cache.c's YAML): (calls that ran one of the
    cache's entries, calls), over every site of the stats."""
    import yaml

    try:
        doc = yaml.safe_load(text or "") or {}
    except yaml.YAMLError:
        return 0, 0
    served = calls = 0
    for site in doc.get("sites") or []:
        calls += int(site.get("calls", 0))
        served += sum(int(u.get("calls", 0)) for u in site.get("used") or []
                      if Path(str(u.get("file", ""))).name in entries)
    return served, calls


def _stats(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")[:20000]
    except OSError:
        return None


def run_recurring(backend: str = "smpi", ranks: int | None = None, nbytes: int | None = None,
                  iterations: int | None = None, network_model: str = "CM02", topology: str | None = None,
                  workdir: str | None = None, seed: int = SEED, progress=None) -> dict:
    """The whole suite (module docstring); returns the report."""
    import tempfile

    from ..model.simulate import piece_time
    from ..pipeline import resolve_topology
    from .runner import ROOT, LabRunError

    d = DEFAULTS[backend]
    ranks, nbytes, iterations = ranks or d["ranks"], nbytes or d["bytes"], iterations or d["iterations"]
    if topology is None and backend == "smpi":
        topology = str(ROOT / "topologies" / "tryton-48.yaml")
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
                  workdir=work, progress=progress)
    trace, cache = work / "train.trace", work / "cache"
    import shutil

    shutil.rmtree(cache, ignore_errors=True)  # this run's own cache: not merged into an old one
    trace.unlink(missing_ok=True)
    train_run = _run(delays=train, source="training", name="native", library_native=backend == "smpi",
                     environ={"COLLSCHED_ARRIVALS": str(trace), **preload}, **common)
    if not trace.is_file():
        raise LabRunError(f"training: no arrival trace at {trace} (COLLSCHED_ARRIVALS)")
    # What the compiler compiles with in the runs: the network model's costs under SMPI.
    topo_file = str(work / "training-native" / "network-topology.yaml") if backend == "smpi" else topology
    if backend == "smpi" and not Path(topo_file).is_file():
        topo_file = topology
    _say(progress, "cache build from the training trace")
    built = _build_cache(trace, cache, topo_file, progress)
    entries = _entry_classes(cache, sc)
    regular, regular_pred = _regular_picks(topo_file, ranks, nbytes)
    rows = {}
    stats_eval, stats_unseen = work / "stats-eval.txt", work / "stats-unseen.txt"
    cache_name = f"{CACHE_PREFIX}{cache}"
    if backend == "smpi":
        names = ["native", *regular, "bdr", cache_name, ORACLE]
        for name in names:
            env = {"COLLSCHED_STATS": str(stats_eval)} if name == cache_name else {}
            rows[name] = _run(delays=evald, source="evaluation", name=name, environ=env, **common)["row"]
    else:
        for name in ["native", *regular]:
            rows[name] = _run(delays=evald, source="evaluation", name=name, **common)["row"]
        rows[cache_name] = _run(delays=evald, source="evaluation", name=cache_name, algorithm="native",
                                environ={**preload, "COLLSCHED_SCHEDULES": str(cache),
                                         "COLLSCHED_STATS": str(stats_eval)}, **common)["row"]
    warm = WARMUP_CYCLES * k
    best_regular = min(["native", *regular], key=lambda n: _avg(rows[n], warm))
    unseen_rows = {}
    for name in (best_regular, cache_name):
        env = {"COLLSCHED_STATS": str(stats_unseen)} if name == cache_name else {}
        algorithm = None
        if backend == "mpi" and name == cache_name:
            env.update({**preload, "COLLSCHED_SCHEDULES": str(cache)})
            algorithm = "native"
        unseen_rows[name] = _run(delays=unseen, source="unseen", name=name, environ=env, algorithm=algorithm,
                                 **common)["row"]
    topo = resolve_topology(ranks, topo_file, None)
    t_msg = float(piece_time(topo, nbytes))
    report = {
        "suite": "recurring", "workdir": str(work), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "backend": backend, "network_model": network_model if backend == "smpi" else None,
        "inputs": {"ranks": ranks, "bytes": nbytes, "iterations": iterations, "topology": topology,
                   "classes": k, "spread_s": sc.spread, "noise": sc.noise, "seed": seed,
                   "late_group": max(1, ranks // 4), "unseen_iterations": n_unseen,
                   "warmup_iterations": warm, "t_message_s": t_msg},
        "scenario": {"classes_s": sc.classes.tolist(), "labels": labels.tolist()},
        "training": train_run["row"], "cache": {"dir": str(cache), "build": built, "entries": entries},
        "regular_predicted_s": regular_pred, "regular": regular, "best_regular": best_regular,
        "evaluation": rows, "unseen": unseen_rows,
        "stats": {"evaluation": _stats(stats_eval), "unseen": _stats(stats_unseen)},
    }
    report["hits"] = _hits(rows[cache_name]["used"], labels, entries, warm) if backend == "smpi" else None
    try:
        report["prediction"] = _prediction_error(evald, t_msg)
    except ImportError as e:  # collsched.patterns.predict not there (yet)
        report["prediction"] = {"error": f"not evaluated: {e}"}
    from .runner import pattern_bounds

    # What any schedule can reach on these classes (the cost model's LP lower bound on the
    # average elapsed time, lowerbound.py): bounds every speedup the targets ask for.
    report["bound"] = pattern_bounds(topo, nbytes, sc.classes[:k])
    report["summary"] = summarise(report)
    return report


def summarise(report: dict) -> dict:
    """The figures of the issue's targets, each with met / not met (None: not measured)."""
    ev, warm = report["evaluation"], report["inputs"]["warmup_iterations"]
    cache = next(n for n in ev if n.startswith(CACHE_PREFIX))
    avg = {n: _avg(r) for n, r in ev.items()}
    after = {n: _avg(r, warm) for n, r in ev.items()}
    best = report["best_regular"]
    out = {"avg_elapsed_s": avg, "avg_elapsed_after_warmup_s": after, "cache": cache,
           "data_ok": all(r["data_ok"] for r in [*ev.values(), *report["unseen"].values(), report["training"]])}
    c = after[cache]
    targets = {}
    hits = report.get("hits")
    if hits and hits["hit_rate"] is not None:
        targets["hit_rate"] = {"value": hits["hit_rate"], "target": f">= {TARGET_HIT:.0%}",
                               "met": hits["hit_rate"] >= TARGET_HIT}
    if ORACLE in after:
        r = c / after[ORACLE]
        targets["cache_vs_oracle"] = {"value": r, "target": f"<= {TARGET_ORACLE}", "met": r <= TARGET_ORACLE}
    r = after[best] / c
    targets["best_regular_vs_cache"] = {"value": r, "target": f">= {TARGET_REGULAR}", "met": r >= TARGET_REGULAR,
                                        "best_regular": best}
    if "bdr" in after:
        r = after["bdr"] / c  # a comparison only where both moved the right bytes
        ok = bool(ev["bdr"]["data_ok"] and ev[cache]["data_ok"])
        targets["bdr_vs_cache"] = {"value": r, "target": "> 1, data checked", "met": r > 1.0 and ok,
                                   "data_ok": ok}
    un = report["unseen"]
    ucache = next((n for n in un if n.startswith(CACHE_PREFIX)), None)
    ureg = next((n for n in un if not n.startswith(CACHE_PREFIX)), None)
    if ucache and ureg:
        r = _avg(un[ucache]) / _avg(un[ureg])
        targets["unseen_cache_vs_best_regular"] = {
            "value": r, "target": f"<= {TARGET_UNSEEN}", "data_ok": bool(un[ucache]["data_ok"]),
            "met": r <= TARGET_UNSEEN and bool(un[ucache]["data_ok"])}
    name, err = _best_error_t(report.get("prediction") or {})
    if err is not None:
        targets["prediction_error_t"] = {"value": err, "predictor": name, "target": f"< {TARGET_ERROR_T} T",
                                         "met": err < TARGET_ERROR_T}
    if report["backend"] == "mpi":
        served, calls = _stats_use(report["stats"]["evaluation"], report["cache"]["entries"])
        targets["real_mpi_cache_use"] = {"value": f"{served} of {calls} calls ran a cache entry",
                                         "target": "stats show cache use, data checked",
                                         "met": served > 0 and out["data_ok"]}
    out["targets"] = targets
    out["stats_served"] = dict(zip(("served", "calls"), _stats_use(report["stats"]["evaluation"],
                                                                  report["cache"]["entries"])))
    lp = (report.get("bound") or {}).get("lp_avg_elapsed_s")
    if lp:
        out["lp_bound_s"] = lp
        out["notes"] = [
            f"Lower bound (cost model, LP, any schedule) on the average elapsed time over the "
            f"{report['inputs']['classes']} class patterns: {lp * 1e3:.3f} ms; the best regular "
            f"algorithm ({best}) measured {after[best] * 1e3:.3f} ms after warm-up: no schedule can be "
            f"more than {after[best] / lp:.3f}x faster than it here (imbalance factor of the classes: "
            f"spread / T = {report['inputs']['spread_s'] / report['inputs']['t_message_s']:.2f})."]
    return out


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:.3f}"


def markdown(report: dict, plot_rel: str | None = None, strip_rel: str | None = None) -> str:
    """docs/benchmarks.md's section: date, backend, network model, inputs, tables, targets."""
    i, s = report["inputs"], report["summary"]
    warm, ev = i["warmup_iterations"], report["evaluation"]
    model = f", network model {report['network_model']}" if report["network_model"] else ""
    lines = [f"### Recurring load patterns: trace -> cache -> selection ({report['backend'].upper()}{model})", "",
             f"`collsched bench --suite recurring --backend {report['backend']}"
             f"{' --network-model ' + report['network_model'] if report['network_model'] else ''}`, "
             f"{report['date']}. "
             f"Topology {Path(i['topology']).name if i['topology'] else 'the default'}, P = {i['ranks']}, "
             f"{i['bytes']} B per rank (T = {_ms(i['t_message_s'])} ms per message), {i['iterations']} "
             f"iterations cycling through {i['classes']} classes (late groups of {i['late_group']} ranks, "
             f"spread {i['spread_s'] * 1e3:g} ms, noise {i['noise']:.0%} of the spread, seed {i['seed']}); "
             f"training and evaluation with different noise; warm-up {warm} iterations "
             f"({WARMUP_CYCLES} cycles); the unseen class: {i['unseen_iterations']} iterations.", ""]
    lines += ["| algorithm | avg elapsed (ms) | after warm-up (ms) | predicted (ms) | data |",
              "|---|---|---|---|---|"]
    for n, r in ev.items():
        label = "cache:DIR" if n.startswith(CACHE_PREFIX) else n
        lines.append(f"| {label} | {_ms(s['avg_elapsed_s'][n])} | {_ms(s['avg_elapsed_after_warmup_s'][n])} | "
                     f"{_ms(r.get('predicted_avg_elapsed_s'))} | {'ok' if r['data_ok'] else 'WRONG'} |")
    lines += ["", "Unseen class (never in the trace):", "", "| algorithm | avg elapsed (ms) | data |", "|---|---|---|"]
    for n, r in report["unseen"].items():
        label = "cache:DIR" if n.startswith(CACHE_PREFIX) else n
        lines.append(f"| {label} | {_ms(_avg(r))} | {'ok' if r['data_ok'] else 'WRONG'} |")
    lines += ["", "Cache build (from the training trace):", ""]
    for g in report["cache"]["build"]["groups"]:
        lines.append(f"- {g['group']}: {g['calls']} calls, T = {_ms(g['t_message_s'])} ms, regular entry "
                     f"{g['regular']}; " + "; ".join(f"class {c['class']} ({c['calls']} calls, spread "
                                                     f"{_ms(c['spread_s'])} ms): "
                                                     f"{'kept' if c['kept'] else 'not kept'}, {c['why']}"
                                                     for c in g["classes"]))
    hits = report.get("hits")
    if hits:
        lines += ["", f"Cache hits after warm-up (the entry of the true class, or the regular entry "
                      f"for a class without one): {hits['hits']} of {hits['calls']} ({hits['hit_rate']:.1%}); "
                      f"class entries of the true class: {hits['class_hits']} (classes with an entry: "
                      f"{hits['classes_with_entry'] or 'none'}); entries used: " + ", ".join(
                          f"{m}: {hits['mapped'].count(m)}" for m in sorted(set(map(str, hits['mapped']))))]
    if "oracle" in ev and ev["oracle"].get("oracle_picked"):
        lines += ["", "Oracle's picks (auto, engine none, per iteration): " + ", ".join(
            f"{a} {n}" for a, n in sorted(ev["oracle"]["oracle_picked"].items()))]
    st = s.get("stats_served") or {}
    if st.get("calls"):
        lines += ["", f"COLLSCHED_STATS of the evaluation's cache run: {st['served']} of {st['calls']} calls "
                      f"ran a cache entry."]
    pred = report.get("prediction") or {}
    if "error" in pred:
        lines += ["", f"Prediction error: {pred['error']}."]
    lines += ["", "| target | measured | wanted | met |", "|---|---|---|---|"]
    for name, t in s["targets"].items():
        v = t["value"]
        shown = f"{v:.1%}" if name == "hit_rate" else (f"{v:.3f}" if isinstance(v, float) else str(v))
        if name == "prediction_error_t":
            shown += f" T ({t['predictor']})"
        lines.append(f"| {name.replace('_', ' ')} | {shown} | {t['target']} | {'met' if t['met'] else 'not met'} |")
    for note in s.get("notes", []):
        lines += ["", note]
    if plot_rel:
        lines += ["", f"![per-iteration elapsed time by algorithm]({plot_rel})"]
    if strip_rel:
        lines += ["", f"![cache hits and misses per iteration]({strip_rel})"]
    return "\n".join(lines) + "\n"


def plot(report: dict, path: str) -> tuple[str, str | None]:
    """Per-iteration elapsed time by algorithm (PNG `path`) and, with cache hits, the
    hit/miss strip (`path` with -hits before .png). Returns the two paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ev = report["evaluation"]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for j, (n, r) in enumerate(ev.items()):  # equal curves stay visible: a line style each
        label = "cache:DIR" if n.startswith(CACHE_PREFIX) else n
        ax.plot(np.array(r["elapsed_per_iteration_s"]) * 1e3, label=label, lw=1.2,
                ls=("-", "--", ":", "-.")[j % 4])
    ax.axvline(report["inputs"]["warmup_iterations"] - 0.5, color="grey", ls=":", lw=1)
    ax.set_xlabel("iteration")
    ax.set_ylabel("average elapsed time (ms)")
    ax.set_title(f"recurring patterns, {report['backend']}, P = {report['inputs']['ranks']}, "
                 f"{report['inputs']['bytes']} B")
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    hits = report.get("hits")
    if not hits:
        return path, None
    strip = str(Path(path).with_name(Path(path).stem + "-hits.png"))
    labels = report["scenario"]["labels"]
    mapped = hits["mapped"]
    fig, ax = plt.subplots(figsize=(10, 1.8))
    for k, (m, want) in enumerate(zip(mapped, labels)):
        color = "tab:green" if m == want else ("tab:orange" if m == "regular" else "tab:red")
        ax.bar(k, 1, width=1, color=color)
    ax.set_yticks([])
    ax.set_xlabel("iteration (green: the true class's entry, orange: regular entry, red: other / library)")
    ax.axvline(report["inputs"]["warmup_iterations"] - 0.5, color="black", ls=":", lw=1)
    fig.tight_layout()
    fig.savefig(strip, dpi=110)
    plt.close(fig)
    return path, strip


def run_and_record(backend: str, ranks, nbytes, iterations, network_model: str, topology, doc: str | None,
                   plot_path: str | None, section: str | None, workdir: str | None, json_out: str | None = None,
                   progress=None) -> dict:
    """run_recurring, then the JSON report (json_out, else WORKDIR/report.json), the plots
    and the --doc section."""
    from ..files import write_atomic

    report = run_recurring(backend, ranks, nbytes, iterations, network_model, topology, workdir, progress=progress)
    write_atomic(json_out or Path(report["workdir"]) / "report.json",
                 json.dumps(_finite(report), indent=1, default=_jsonable) + "\n")
    record(report, doc, plot_path, section)
    return report


def record(report: dict, doc: str | None, plot_path: str | None, section: str | None) -> None:
    """The plots and the --doc section of a report (run_and_record; `python -m
    collsched.lab.recurring REPORT.json ...` renders a run's report.json again)."""
    import os

    from .benchdoc import replace_section

    figs = plot(report, plot_path) if plot_path else (None, None)
    if doc:
        base = os.path.dirname(os.path.abspath(doc))
        rel = [os.path.relpath(f, base) if f else None for f in figs]
        replace_section(doc, section or f"lab-recurring-{report['backend']}", markdown(report, *rel))


def bench_command(a, ranks: int | None, nbytes: int | None) -> tuple[dict, str]:
    """The command line's suite (cli.py, bench --suite recurring): progress lines on stderr
    (not with --json), the report and its Markdown."""
    import sys

    def progress(text: str) -> None:
        if not a.json:
            print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    report = run_and_record(a.backend, ranks, nbytes, a.iterations, a.network_model, a.topology, a.doc,
                            a.plot, a.section, a.keep, progress=progress)
    return report, markdown(report)


def main(argv=None) -> int:
    """python -m collsched.lab.recurring REPORT.json [--doc D] [--section S] [--plot P]:
    the summary, plots and section of a run's report.json, with this module's code."""
    import argparse

    from ..files import read_input

    ap = argparse.ArgumentParser(prog="python -m collsched.lab.recurring")
    ap.add_argument("report")
    ap.add_argument("--doc")
    ap.add_argument("--section")
    ap.add_argument("--plot")
    a = ap.parse_args(argv)
    try:
        report = json.loads(read_input(a.report, "report"))
    except (ValueError, UnicodeDecodeError):
        raise InputError(a.report, "", "expected the JSON report of collsched bench --suite recurring") from None
    report["summary"] = summarise(report)
    record(report, a.doc, a.plot, a.section)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
