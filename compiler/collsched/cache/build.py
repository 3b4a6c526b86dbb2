"""`collsched cache build`: a schedule cache from arrival traces or arrival-pattern files
(docs/cache.md, "Building").

For every (call site, communicator size, collective) group of the inputs, over the bytes
per rank the group's calls had (min..max): the normalised patterns are clustered
(patterns.classes.cluster, with the time of one message at the group's largest size);
a class seen at least min_calls times whose representative is imbalanced (spread over
one message time) gets the best schedule the cost model finds for its representative,
kept when the model predicts it at least WORTH_IT faster on that pattern than the
group's regular entry; every group gets one regular entry (the best for the flat
pattern). Everything is compiled before the cache is touched; then store.commit writes
it under the lock.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import schedfile
from ..errors import InputError
from ..inputs.arrivals import load_pap, write_pap
from ..model.simulate import piece_time, simulate_pattern
from ..patterns import classes, tracefile
from ..pipeline import AUTO, compile_schedule, resolve_topology
from .index import ANY_SITE, Entry, check_site, pattern_tuple
from .store import DEFAULT_MAX_SIZE, Update, commit, file_name

WORTH_IT = 0.02  # a class entry must be predicted this much faster than the regular one
DEFAULT_MIN_CALLS = 3


@dataclass
class Group:
    """The calls of one (site, ranks, collective) group: arrivals (n, P) in seconds."""
    site: str
    ranks: int
    collective: str
    bytes_min: int
    bytes_max: int
    patterns: np.ndarray
    sources: list[str] = field(default_factory=list)

    def label(self) -> str:
        size = f"{self.bytes_min}" if self.bytes_min == self.bytes_max else f"{self.bytes_min}..{self.bytes_max}"
        return f"site {self.site}, {self.ranks} ranks, {self.collective}, {size} B"


@dataclass
class Options:
    topology: str | None = None
    algorithms: str | list[str] = AUTO  # auto, or the names to compile (the fastest kept)
    engine: str = "none"
    min_calls: int = DEFAULT_MIN_CALLS
    max_size: int | None = DEFAULT_MAX_SIZE


def _add(found: dict, key: tuple, patterns: np.ndarray, nbytes: np.ndarray, source: str) -> None:
    g = found.get(key)
    lo, hi = int(nbytes.min()), int(nbytes.max())
    if g is None:
        found[key] = Group(key[0], key[1], key[2], lo, hi, patterns, [source])
        return
    g.patterns = np.concatenate([g.patterns, patterns])
    g.bytes_min, g.bytes_max = min(g.bytes_min, lo), max(g.bytes_max, hi)
    if source not in g.sources:
        g.sources.append(source)


def groups_from_traces(paths, site: str | None = None) -> tuple[list[Group], list[str]]:
    """The groups of the traces' calls (one per site name, communicator size and
    collective, across traces and communicators), and why some calls are left out."""
    found: dict = {}
    notes = []
    for path in paths:
        trace = tracefile.read_trace(path)
        for g in tracefile.groups(trace):
            if site is not None and g.site_name != site:
                continue
            if check_site(g.site_name) is not None:
                notes.append(f"{path}: {g.label()}: {g.ncalls} calls left out (a site name an index "
                             f"cannot hold: {check_site(g.site_name)})")
                continue
            block, m = tracefile.group_mask(trace, g)
            for code, name in tracefile.COLLECTIVES.items():
                sel = m & (block.collective == code)
                if not sel.any():
                    continue
                if name != "allgather" or g.size < 2:
                    why = "no compiler for it yet" if name != "allgather" else "one rank"
                    notes.append(f"{path}: {g.label()}: {int(sel.sum())} {name} calls left out ({why})")
                    continue
                _add(found, (g.site_name, g.size, name), block.arrivals[sel].astype(np.float64),
                     block.bytes[sel], str(path))
    if site is not None and not found:
        raise InputError("--site", site, "expected a call site of the traces with allgather calls")
    return list(found.values()), notes


def groups_from_paps(paths, ranks: int, nbytes: tuple[int, int], collective: str = "allgather",
                     site: str | None = None) -> list[Group]:
    """One group of every arrival-pattern file's iterations (the files' rank count must be
    `ranks`), serving the bytes range `nbytes`, for call site `site` (default *)."""
    if collective != "allgather":
        raise InputError("--collective", collective, "expected allgather (the only collective compiled so far)")
    site = ANY_SITE if site is None else site
    if (why := check_site(site)) is not None:
        raise InputError("--site", site, why)
    found: dict = {}
    for path in paths:
        pattern = load_pap(path, ranks)
        _add(found, (site, ranks, collective), pattern, np.array(nbytes), str(path))
    return list(found.values())


@dataclass
class Choice:
    """One schedule compiled for a cache entry: the schedule, its algorithm and predicted
    time (average elapsed, for the pattern it was compiled for)."""
    schedule: object
    algorithm: str
    predicted_s: float
    tried: dict


def best_schedule(opts: Options, ranks: int, nbytes: tuple[int, int], pap: str | None) -> Choice:
    """The schedule the cost model predicts fastest among the candidates (auto: every
    algorithm auto compiles; a list: those of it that apply)."""
    common = dict(topology=opts.topology, pap=pap, engine=opts.engine)
    if opts.algorithms == AUTO:
        r = compile_schedule(AUTO, ranks, nbytes, **common)
        return Choice(r.schedule, r.schedule.algorithm, r.metrics.avg_elapsed_s, dict(r.algorithms_tried))
    tried, best = {}, None
    for name in opts.algorithms:
        try:
            r = compile_schedule(name, ranks, nbytes, **common)
        except InputError as e:
            if e.source != "--algorithm":  # the algorithm refused this request (registry.generate)
                raise
            tried[name] = f"not applicable: {e.expected}"
            continue
        tried[name] = r.metrics.avg_elapsed_s
        if best is None or r.metrics.avg_elapsed_s < best.metrics.avg_elapsed_s:
            best = r
    if best is None:
        raise InputError("--algorithms", ",".join(opts.algorithms),
                         "no candidate algorithm serves this request: "
                         + "; ".join(f"{n}: {w}" for n, w in tried.items()))
    return Choice(best.schedule, best.schedule.algorithm, best.metrics.avg_elapsed_s, tried)


@dataclass
class ClassReport:
    klass: int
    calls: int
    spread_s: float
    radius_s: float
    kept: bool
    why: str
    algorithm: str | None = None
    predicted_s: float | None = None
    regular_s: float | None = None
    tried: dict | None = None  # every candidate's predicted time for the class pattern


@dataclass
class GroupReport:
    group: Group
    t_message_s: float
    regular_algorithm: str
    classes: list[ClassReport]
    regular_tried: dict | None = None  # every candidate's predicted time, flat pattern


def plan_group(g: Group, opts: Options, workdir: Path, progress=None) -> tuple[list[tuple[Entry, bytes]], GroupReport]:
    """The entries of one group (its regular one first) and what was decided per class."""
    topo = resolve_topology(g.ranks, opts.topology, None)
    digest = topo.digest()[:16] if opts.topology else "-"
    nbytes = (g.bytes_min, g.bytes_max)
    t_msg = piece_time(topo, g.bytes_max)
    clus = classes.cluster(g.patterns, t_msg)
    regular = best_schedule(opts, g.ranks, nbytes, None)
    _step(progress, f"{g.label()}: regular {regular.algorithm}")
    out = [_entry(g, regular.schedule, digest, None, None, len(g.patterns), None)]
    reports = []
    for k in range(clus.k):
        c, n = clus.centroids[k], int(clus.counts[k])
        rep = ClassReport(k, n, float(c.max()), float(clus.radius[k]), False, "")
        reports.append(rep)
        if n < opts.min_calls:
            rep.why = f"{n} calls, fewer than {opts.min_calls}"
            continue
        if not c.max() > t_msg:
            rep.why = f"balanced (imbalance factor {c.max() / t_msg:.2f} <= 1)"
            continue
        pap = workdir / f"class-{len(out)}.yaml"
        write_pap(pap, c[None, :], comment=f"class {k} of {g.label()}")
        choice = best_schedule(opts, g.ranks, nbytes, str(pap))
        _, _, reg = simulate_pattern(regular.schedule, topo, g.bytes_max, c[None, :])
        rep.algorithm, rep.predicted_s, rep.regular_s = choice.algorithm, choice.predicted_s, reg.avg_elapsed_s
        rep.tried = choice.tried
        _step(progress, f"{g.label()}: class {k} {choice.algorithm}")
        if not choice.predicted_s <= (1 - WORTH_IT) * reg.avg_elapsed_s:
            rep.why = (f"not worth it: {choice.algorithm} {choice.predicted_s * 1e3:.3f} ms, the regular "
                       f"{regular.algorithm} {reg.avg_elapsed_s * 1e3:.3f} ms")
            continue
        rep.kept, rep.why = True, f"{choice.algorithm}, {(1 - choice.predicted_s / reg.avg_elapsed_s) * 100:.1f}% faster"
        out.append(_entry(g, choice.schedule, digest, len(out) - 1, float(clus.radius[k]), n, c))
    return out, GroupReport(g, t_msg, regular.algorithm, reports, regular.tried)


def _entry(g: Group, sched, digest: str, klass, radius, uses: int, pattern) -> tuple[Entry, bytes]:
    data = schedfile.encode(sched)
    pattern = None if pattern is None else pattern_tuple(pattern)
    return (Entry(file_name(data, g.site, pattern), g.collective, g.ranks, g.bytes_min, g.bytes_max,
                  g.site, digest, klass, radius, int(uses), pattern), data)


def _step(progress, text: str) -> None:
    if progress is not None:
        progress(text)


def plan_size(groups: list[Group], opts: Options) -> int:
    """Compile jobs a build runs (for a progress bar): one regular per group and at most
    one per class (the classes are not known before clustering: the calls bound them)."""
    return sum(1 + min(len(g.patterns) // max(opts.min_calls, 1), len(g.patterns)) for g in groups)


def build(groups: list[Group], directory, opts: Options, progress=None,
          comment: str = "") -> tuple[Update, list[GroupReport]]:
    """Compile every group's entries, then commit them to the cache at `directory`
    (store.commit: merged into what is there, evicted down to opts.max_size)."""
    if opts.min_calls < 1:
        raise InputError("--min-calls", str(opts.min_calls), "expected at least 1")
    new, reports = [], []
    with tempfile.TemporaryDirectory(prefix="collsched-cache-") as tmp:
        for g in groups:
            entries, rep = plan_group(g, opts, Path(tmp), progress)
            new += entries
            reports.append(rep)
    return commit(directory, new, max_size=opts.max_size, comment=comment), reports


def build_from_traces(traces, directory, *, topology: str | None = None, engine: str = "none",
                      site: str | None = None, algorithms: str | list[str] = AUTO,
                      min_calls: int = DEFAULT_MIN_CALLS, max_size: int | None = DEFAULT_MAX_SIZE,
                      progress=None) -> tuple[Update, list[GroupReport], list[str]]:
    """`collsched cache build TRACE... -o DIR` as one call (the public API's build_cache):
    the traces' groups (or `site`'s), compiled and committed; returns (the update, a report
    per group, the notes about calls left out)."""
    groups, notes = groups_from_traces([str(t) for t in traces], site)
    opts = Options(topology=topology, algorithms=algorithms, engine=engine, min_calls=min_calls,
                   max_size=max_size)
    update, reports = build(groups, directory, opts, progress=progress,
                            comment="from " + " ".join(str(t) for t in traces))
    return update, reports, notes
