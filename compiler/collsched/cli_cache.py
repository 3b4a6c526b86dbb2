"""`collsched cache` and `collsched tune`: schedule caches (docs/cache.md).

A thin layer over collsched.cache; registered by cli.py (add_parsers, COMMANDS)."""
from __future__ import annotations

import json
import sys

from .cli_args import MAX_RANKS, _INT, _int_opt, _plot_path, _show, h
from .errors import InputError

EXIT_OK, EXIT_INVALID = 0, 1
_DIR = h("the schedule cache directory (as COLLSCHED_SCHEDULES names it)", "none, required", "cache/")
_OUT_DIR = h("the schedule cache directory to write (created if missing; an existing cache is "
             "merged into)", "none, required", "-o cache/")
_TOPOLOGY = h("topology YAML the schedules are compiled and timed for (its digest is in the index)",
              "a homogeneous cluster: 1 Gbit/s, 50 us, full duplex; TOPOLOGY -", "--topology topologies/tryton-48.yaml")
_ALGORITHMS = h("auto (every algorithm --algorithm auto compiles), or a comma-separated list of them",
                "auto", "--algorithms ring,spreading,bdr,min3")
_ENGINE = h("who runs background operations: none (the whole list inside the call, as the preload "
            "library and collsched_allgather run a cached schedule) or pat (the PAT engine)",
            "none", "--engine pat")
_ENGINE_BUILD = h("who runs background operations: none (the whole list inside the call, as the preload "
                  "library and collsched_allgather run a cached schedule), ahead (the runtime's "
                  "receive-ahead: each rank's leading background receives posted at the end of the "
                  "call before, the rest in the call; docs/cache.md) or pat (the PAT engine)",
                  "none", "--engine ahead")
_MAX_SIZE = h("bytes of schedule files the cache keeps: beyond, the least-used entries (fewest USES, "
              "then oldest) are evicted; units such as MiB, GiB", "1GiB", "--max-size 256MiB")
_JSON = h("print JSON", "off: text", "--json")


def add_parsers(sub) -> None:
    """Adds this module's commands to the `collsched` parser."""
    c = sub.add_parser("cache", help="build, list and verify schedule caches (docs/cache.md)",
                       description="Schedule caches: schedules compiled ahead for recurring arrival "
                                   "patterns, and the index the runtime selects from "
                                   "(COLLSCHED_SCHEDULES=DIR). Example: collsched cache build run.trace "
                                   "-o cache/ --topology topologies/tryton-48.yaml")
    cs = c.add_subparsers(dest="cache_command", metavar="SUBCOMMAND", parser_class=sub._parser_class,
                          help=h("build, ls or verify", "none, required", "collsched cache ls cache/"))
    cs.required = True
    _add_build(cs)
    ls = cs.add_parser("ls", help="list a cache's entries: what serves what",
                       description="Every entry of the index: file, collective, ranks, byte range, site, "
                                   "class (or regular), uses, the schedule's algorithm, radius and "
                                   "pattern. Example: collsched cache ls cache/")
    ls.add_argument("directory", help=_DIR)
    ls.add_argument("--json", action="store_true", help=_JSON)
    v = cs.add_parser("verify", help="check every entry of a cache (exit 0 all valid, 1 any invalid)",
                      description="Every entry: its file exists, loads, agrees with the index (ranks, "
                                  "byte range) and passes the verifier. One line per entry; an invalid "
                                  "one does not stop the others. Exit 0 all valid, 1 any invalid, 2 an "
                                  "index that breaks the format. Example: collsched cache verify cache/")
    v.add_argument("directory", help=_DIR)
    _add_tune(sub)


def _add_build(cs) -> None:
    b = cs.add_parser("build", help="compile a cache from arrival traces or arrival-pattern files",
                      description="For every (call site, communicator size, collective) group of the "
                                  "inputs: cluster the arrival patterns, compile the fastest predicted "
                                  "schedule for each class seen at least --min-calls times whose "
                                  "representative is imbalanced and predicted at least 2% faster than the "
                                  "group's regular schedule, plus one regular entry; merge them into the "
                                  "cache. Inputs: traces (docs/trace-format.md), or arrival-pattern "
                                  "files with iterations and --ranks, --bytes. Examples: collsched cache "
                                  "build run.trace -o cache/; collsched cache build pap.yaml --ranks 8 "
                                  "--bytes 64KiB -o cache/")
    b.add_argument("inputs", nargs="+", metavar="INPUT",
                   help=h("arrival traces, or arrival-pattern YAML files (with --ranks, --bytes)",
                          "none, at least one", "run.trace"))
    b.add_argument("-o", "--output", dest="directory", required=True, help=_OUT_DIR)
    b.add_argument("--topology", help=_TOPOLOGY)
    b.add_argument("--algorithms", default="auto", help=_ALGORITHMS)
    b.add_argument("--engine", choices=("none", "pat", "ahead"), default="none", help=_ENGINE_BUILD)
    b.add_argument("--min-calls", type=_int_opt("--min-calls", 1, 1 << 40), default=3,
                   help=h("calls a class needs to get an entry", "3", "--min-calls 5"))
    b.add_argument("--max-size", default="1GiB", help=_MAX_SIZE)
    b.add_argument("--site", help=h("traces: only this call site; pattern files: the site their entries "
                                    "serve", "traces: every site; pattern files: * (any)",
                                    "--site solver_step"))
    b.add_argument("--collective", default="allgather",
                   help=h("pattern files: the collective (allgather)", "allgather", "--collective allgather"))
    b.add_argument("--ranks", type=_int_opt("--ranks", 2, MAX_RANKS),
                   help=h("pattern files: the communicator size", "none, required with pattern files",
                          "--ranks 8"))
    b.add_argument("--bytes", help=h("pattern files: bytes per rank, B or MIN:MAX", "none, required with "
                                     "pattern files", "--bytes 64KiB"))
    b.add_argument("--json", action="store_true", help=_JSON)


def _add_tune(sub) -> None:
    t = sub.add_parser("tune", help="a tuning table: the fastest schedule per (ranks, bytes), as a cache",
                       description="For every communicator size and bytes per rank, compile every "
                                   "candidate algorithm, time it (cost model, or SimGrid SMPI with "
                                   "--backend smpi, the MPI library's own collective included) and "
                                   "write a cache whose regular entries (site *) select the fastest per "
                                   "cell; each cell serves its bytes up to the next cell's, the largest "
                                   "everything above. Example: collsched tune --ranks 4,8,16 --bytes "
                                   "1KiB,64KiB,1MiB -o tuned/ --plot tuned.png")
    t.add_argument("--ranks", required=True,
                   help=h("comma-separated communicator sizes", "none, required", "--ranks 4,8,16"))
    t.add_argument("--bytes", required=True,
                   help=h("comma-separated bytes per rank (units such as KiB)", "none, required",
                          "--bytes 1KiB,64KiB,1MiB"))
    t.add_argument("-o", "--output", dest="directory", required=True, help=_OUT_DIR)
    t.add_argument("--topology", help=_TOPOLOGY)
    t.add_argument("--algorithms", default="auto",
                   help=h("auto (the regular algorithms --algorithm auto compiles), or a comma-separated "
                          "list", "auto", "--algorithms ring,bruck,spreading"))
    t.add_argument("--engine", choices=("none", "pat"), default="none", help=_ENGINE)
    t.add_argument("--backend", choices=("model", "smpi"), default="model",
                   help=h("how candidates are timed: the cost model, or SimGrid SMPI (the lab; the MPI "
                          "library's collective, native, is a candidate there)", "model", "--backend smpi"))
    t.add_argument("--max-size", default="1GiB", help=_MAX_SIZE)
    t.add_argument("--plot", type=_plot_path("--plot"),
                   help=h("figure of the winner per cell (ranks x bytes)", "none", "--plot tuned.png"))
    t.add_argument("--json", action="store_true", help=h("print every candidate's time per cell as JSON",
                                                         "off: a table", "--json"))


# --- helpers ----------------------------------------------------------------------------------

def _size(text: str, flag: str) -> int:
    from .inputs.units import parse_bytes

    try:
        return parse_bytes(text)
    except ValueError as e:
        raise InputError(flag, _show(text), f"expected a size such as 64KiB ({e})") from None


def _list(text: str, flag: str, parse) -> list:
    items = [x.strip() for x in text.split(",")]
    if not text.strip() or any(not x for x in items):
        raise InputError(flag, _show(text), "expected a comma-separated list, no empty item")
    return [parse(x) for x in items]


def _algorithms(text: str):
    from .algorithms import REGISTRY

    if text == "auto":
        return "auto"

    def one(name):
        if name not in REGISTRY:
            raise InputError("--algorithms", _show(name), f"expected auto or names of "
                                                          f"{', '.join(sorted(REGISTRY))}")
        return name
    return list(dict.fromkeys(_list(text, "--algorithms", one)))


def _directory(text: str):
    from .cache.store import check_directory

    return check_directory(text, must_exist=False)


def _progress(quiet: bool):
    from rich.console import Console
    from rich.progress import Progress

    return Progress(transient=True, disable=quiet, console=Console(stderr=True))


def _out(obj) -> None:
    print(json.dumps(obj, allow_nan=False, indent=None))


# --- cache build / ls / verify --------------------------------------------------------------------

def cmd_cache(a) -> int:
    return {"build": cmd_build, "ls": cmd_ls, "verify": cmd_verify}[a.cache_command](a)


def _groups(a):
    from .cache import build
    from .files import check_input_path
    from .patterns.tracefile import is_trace

    for path in a.inputs:
        check_input_path(path, "INPUT", "arrival trace or pattern")
    traces = [p for p in a.inputs if is_trace(p)]
    if traces and len(traces) < len(a.inputs):
        raise InputError(a.inputs[0], "INPUT", "expected either arrival traces or arrival-pattern "
                                               "files, not both")
    if traces:
        for flag, value in (("--ranks", a.ranks), ("--bytes", a.bytes)):
            if value is not None:
                raise InputError(flag, str(value), "expected only with arrival-pattern files "
                                                   "(a trace names its sizes)")
        return build.groups_from_traces(traces, a.site)
    if a.ranks is None or a.bytes is None:
        raise InputError("--ranks" if a.ranks is None else "--bytes", "",
                         "expected with arrival-pattern files (INPUT is not an arrival trace)")
    from .pipeline import parse_bytes_arg

    return build.groups_from_paps(a.inputs, a.ranks, parse_bytes_arg(a.bytes), a.collective, a.site), []


def cmd_build(a) -> int:
    from .cache import build

    d = _directory(a.directory)
    opts = build.Options(topology=a.topology, algorithms=_algorithms(a.algorithms), engine=a.engine,
                         min_calls=a.min_calls, max_size=_size(a.max_size, "--max-size"))
    groups, notes = _groups(a)
    for n in notes:
        print(f"collsched: note: {n}", file=sys.stderr)
    with _progress(a.json) as prog:
        task = prog.add_task("cache build", total=build.plan_size(groups, opts))
        update, reports = build.build(groups, d, opts, comment="from " + " ".join(a.inputs),
                                      progress=lambda t: prog.update(task, description=t, advance=1))
    if a.json:
        _out({"directory": str(d), "entries": [e.to_dict() for e in update.entries],
              "added": [e.file for e in update.added], "evicted": [e.file for e in update.evicted],
              "deleted": update.deleted, "size_bytes": update.size_bytes,
              "groups": [_group_dict(r) for r in reports]})
        return EXIT_OK
    for r in reports:
        print(f"{r.group.label()}: {len(r.group.patterns)} calls, {len(r.classes)} classes, "
              f"regular {r.regular_algorithm}")
        for c in r.classes:
            print(f"  class {c.klass}: {c.calls} calls, spread {c.spread_s * 1e3:.3f} ms: "
                  f"{'entry' if c.kept else 'no entry'} ({c.why})")
    print(f"{d}: {len(update.added)} entries added, {len(update.replaced)} replaced, "
          f"{len(update.evicted)} evicted; {len(update.entries)} entries, {update.size_bytes} bytes")
    return EXIT_OK


def _group_dict(r) -> dict:
    g = r.group
    return {"site": g.site, "ranks": g.ranks, "collective": g.collective, "bytes_min": g.bytes_min,
            "bytes_max": g.bytes_max, "calls": len(g.patterns), "t_message_s": r.t_message_s,
            "regular": r.regular_algorithm, "regular_tried": r.regular_tried,
            "classes": [{"class": c.klass, "calls": c.calls, "spread_s": c.spread_s,
                         "radius_s": c.radius_s, "entry": c.kept, "why": c.why,
                         "algorithm": c.algorithm, "predicted_avg_elapsed_s": c.predicted_s,
                         "regular_avg_elapsed_s": c.regular_s, "tried": c.tried} for c in r.classes]}


def cmd_ls(a) -> int:
    from .cache.store import check_directory, describe, load_cache

    d = check_directory(a.directory)
    loaded = load_cache(d)
    rows = [(e, s.algorithm) for e, s in loaded.entries]
    if a.json:
        _out({"directory": str(d), "entries": [e.to_dict() | {"algorithm": alg} for e, alg in rows],
              "skipped": loaded.warnings})
    else:
        for e, alg in rows:
            extra = "" if e.regular else (f", radius {e.radius * 1e3:.3f} ms, pattern (ms) "
                                          + ",".join(f"{x * 1e3:.3g}" for x in e.pattern))
            print(f"{e.file}: {describe(e)}: {alg}, {e.uses} uses, topology {e.topology}{extra}")
        if not rows:
            print(f"{d}: no valid entries")
    for w in loaded.warnings:
        print(f"collsched: warning: {w}", file=sys.stderr)
    return EXIT_OK


def cmd_verify(a) -> int:
    from .cache.store import check_directory, describe, verify_cache

    d = check_directory(a.directory)
    status = EXIT_OK
    for e, why in verify_cache(d):
        if why is None:
            print(f"{d / e.file}: valid ({describe(e)})")
        else:
            print(f"{d / e.file}: invalid ({describe(e)}): {why}", file=sys.stderr)
            status = EXIT_INVALID
    return status


# --- tune -----------------------------------------------------------------------------------------

def _smpi_measure(a):
    """A measure function for tune: every candidate run by the lab under SMPI (flat
    arrivals), its measured average elapsed time."""
    from .lab.runner import LabConfig, run_lab

    def measure(ranks: int, nbytes: int, names: list[str]) -> dict:
        cfg = LabConfig(backend="smpi", topology=a.topology, ranks=ranks, nbytes=nbytes)
        report = run_lab(cfg, names)
        out = {}
        for r in report["results"]:
            t = r.get("avg_elapsed_s")  # measured (the lab's row; predicted_* are the model's)
            out[r["algorithm"]] = float(t) if t is not None and r.get("data_ok", True) else \
                f"run failed: {r.get('error', 'wrong data')}"
        return out
    return measure


def cmd_tune(a) -> int:
    from .cache import tune

    def ranks_item(x):
        if not _INT.fullmatch(x) or not 2 <= int(x) <= MAX_RANKS:
            raise InputError("--ranks", _show(a.ranks), f"expected comma-separated integers 2..{MAX_RANKS}")
        return int(x)

    ranks = _list(a.ranks, "--ranks", ranks_item)
    sizes = _list(a.bytes, "--bytes", lambda x: _size(x, "--bytes"))
    d = _directory(a.directory)
    measure = _smpi_measure(a) if a.backend == "smpi" else None
    with _progress(a.json) as prog:
        task = prog.add_task("tune", total=len(set(ranks)) * len(set(sizes)))
        res = tune.tune(ranks, sizes, d, topology=a.topology, algorithms=_algorithms(a.algorithms),
                        engine=a.engine, measure=measure, max_size=_size(a.max_size, "--max-size"),
                        progress=lambda t: prog.update(task, description=t, advance=1))
    if a.plot:
        tune.plot_winners(res.cells, a.plot)
    if a.json:
        _out({"directory": str(d), "backend": a.backend, "candidates": {str(k): v for k, v in res.candidates.items()},
              "cells": [c.to_dict() for c in res.cells]})
        return EXIT_OK
    for p, names in res.candidates.items():
        print(f"{p} ranks: candidates {', '.join(names)}")
    for c in res.cells:
        t = c.times.get(c.winner)
        served = f"{c.bytes_min} B and up" if c.bytes_max == tune.MAX_BYTES else f"{c.bytes_min}..{c.bytes_max} B"
        print(f"{c.ranks:6d} ranks {c.nbytes:>12d} B (serves {served}): {c.winner} "
              f"{t * 1e3:.3f} ms" + ("" if c.file else " (no entry: the MPI library's collective)"))
    print(f"{d}: {len(res.update.entries)} entries, {res.update.size_bytes} bytes")
    return EXIT_OK


COMMANDS: dict = {"cache": cmd_cache, "tune": cmd_tune}
