"""`collsched` command line: each command is a thin layer over library functions.

Exit status: 0 ok, 1 verification failure (or wrong data in a benchmark), 2 bad input
(an option, a file or an output that cannot be written), 3 a benchmark run failed (MPI
or SimGrid crashed or timed out) or an internal error, 141 stdout closed early (`| head`).
No error shows a Python traceback: bad input is one line naming the option or file, the
field and what was expected; anything unexpected is one line too, with a hint to report it.
Every numeric option is parsed strictly (ASCII digits, finite, in range) by the types
below, before any work starts.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import re
import sys
import warnings
from pathlib import Path

from . import __version__
from .errors import InputError
from .files import check_path_options, write_atomic

EXIT_OK, EXIT_INVALID, EXIT_BAD_INPUT, EXIT_RUN_FAILED = 0, 1, 2, 3
EXIT_INTERNAL = 3  # an unexpected exception: one line, a hint to report it
EXIT_BROKEN_PIPE = 141  # stdout closed by its reader: as a shell reports SIGPIPE (128 + 13)
MAX_RANKS = 1 << 24  # the schedule format's nranks (docs/schedule-format.md)
REPORT_HINT = "please report this with the command line at the project's issue tracker"

_INT = re.compile(r"[+-]?[0-9]{1,30}", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?", re.ASCII)
# Formats a plot may be written in (by its suffix; none: PNG), all matplotlib's Agg and
# vector backends write.
PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".svgz", ".eps", ".ps", ".jpg", ".jpeg", ".tif", ".tiff", ".webp")


def _show(text: str) -> str:
    """A user's value for a message: as typed when short and plain, else quoted and cut."""
    from .inputs.units import _show as show

    plain = isinstance(text, str) and 0 < len(text) <= 40 and text.isascii() and text.isprintable()
    return text if plain and " " not in text else show(text)


def _int_opt(flag: str, lo: int, hi: int):
    """argparse type: an integer lo..hi in ASCII digits, else one line naming `flag`."""
    def parse(text: str) -> int:
        t = text.strip()
        if not _INT.fullmatch(t) or not lo <= int(t) <= hi:
            raise InputError(flag, _show(text), f"expected an integer {lo}..{hi}")
        return int(t)
    return parse


def _float_opt(flag: str, lo: float, hi: float):
    """argparse type: a finite number lo..hi (no nan, inf or other scripts' digits)."""
    def parse(text: str) -> float:
        t = text.strip()
        v = float(t) if _FLOAT.fullmatch(t) else None
        if v is None or not lo <= v <= hi:
            raise InputError(flag, _show(text), f"expected a finite number {lo:g}..{hi:g}")
        return v
    return parse


def _plot_path(flag: str):
    """argparse type: a figure file name whose suffix is a format we write (none: PNG)."""
    def parse(text: str) -> str:
        suffix = Path(text).suffix.lower()
        if suffix and suffix not in PLOT_SUFFIXES:
            raise InputError(flag, _show(text), f"expected a figure file ending in "
                                                f"{', '.join(PLOT_SUFFIXES)} (or no suffix: PNG)")
        return text
    return parse


def _json(obj, **kw) -> str:
    """JSON for stdout or a file: NaN and Infinity are not JSON, and never written.

    compile and simulate refuse non-finite predictions before (pipeline.check_finite); a
    long run's report (bench, sweep, measure) writes null for a value that is not a
    number rather than losing the run."""
    try:
        return json.dumps(obj, allow_nan=False, **kw)
    except ValueError:
        return json.dumps(_finite_or_null(obj), allow_nan=False, **kw)


def _finite_or_null(x):
    import math

    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite_or_null(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite_or_null(v) for v in x]
    if hasattr(x, "dtype") and hasattr(x, "tolist"):  # numpy scalars and arrays
        return _finite_or_null(x.tolist())
    return x


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit status 2."""

    def error(self, message):  # noqa: D401 - argparse API
        raise InputError(self.prog, "", message)


def _build_parser() -> argparse.ArgumentParser:
    from .algorithms import REGISTRY

    algs = ", ".join(f"{n}" for n in sorted(REGISTRY))
    p = _Parser(prog="collsched",
                description="Compile, verify, simulate and inspect MPI collective schedules.")
    p.add_argument("--version", action="version", version=f"collsched {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    c = sub.add_parser("compile", help="generate a verified schedule file",
                       description=f"Generate, verify and simulate a schedule, then write it. Algorithms: {algs}.")
    c.add_argument("--collective", default="allgather", help="collective (allgather)")
    c.add_argument("--algorithm", required=True, help=f"one of: {algs}")
    c.add_argument("--ranks", type=_int_opt("--ranks", 2, MAX_RANKS), required=True,
                   help="number of ranks P")
    c.add_argument("--bytes", required=True,
                   help="bytes per rank: B or MIN:MAX (one file serves the range); units like 64KiB allowed")
    c.add_argument("--segments", default="auto",
                   help="segments per block (pipelining): a count, or auto (default: min3 on a topology "
                        "whose TCP window caps a path tries 1-16 and keeps the fastest predicted; else 1)")
    c.add_argument("--topology", help="topology YAML (default: homogeneous 1 Gbit/s, 50 us)")
    c.add_argument("--pap", help="arrival pattern YAML (default: all ranks arrive together)")
    c.add_argument("--duplex", choices=("half", "full"), help="override the topology's duplex mode")
    c.add_argument("--tau", help="bdr: time to move one segment, e.g. 300us (default: from the cost model)")
    c.add_argument("-o", "--output", required=True, help="schedule file to write")
    c.add_argument("--model", choices=("dag", "fluid"), default="dag",
                   help="cost model of the prediction: dag (default) or fluid (flows sharing "
                        "ports and links as SimGrid does; slower; see simulate --help)")
    c.add_argument("--lower-bound", action="store_true",
                   help="also compute the LP lower bound on the run time under the cost model, "
                        "and the gap of the prediction to it (docs/grid-baselines.md)")
    c.add_argument("--json", action="store_true", help="print a JSON summary")

    v = sub.add_parser("verify", help="check a schedule file (exit 0 valid, 1 invalid)")
    v.add_argument("file")

    s = sub.add_parser("simulate", help="predict times of a schedule under the cost model")
    s.add_argument("file")
    s.add_argument("--topology")
    s.add_argument("--pap")
    s.add_argument("--bytes", help="bytes per rank (default: the largest the file serves)")
    s.add_argument("--duplex", choices=("half", "full"))
    s.add_argument("--model", choices=("dag", "fluid"), default="dag",
                   help="dag (default): ports serve one transfer after another, what compile "
                        "reports; fluid: the execution replayed with flows sharing ports and links "
                        "max-min fairly, as SimGrid does (slower; docs/lab.md)")
    s.add_argument("--json", action="store_true")

    sh = sub.add_parser("show", help="print a schedule file's header and operations")
    sh.add_argument("file")
    sh.add_argument("--rank", type=_int_opt("--rank", 0, MAX_RANKS - 1), help="only this rank's operations")

    pl = sub.add_parser("plot", help="draw a Gantt chart of the simulated schedule")
    pl.add_argument("file")
    pl.add_argument("-o", "--output", required=True, type=_plot_path("-o"),
                    help="figure to write: PNG (or by the suffix: .pdf, .svg, ...)")
    pl.add_argument("--topology")
    pl.add_argument("--pap")
    pl.add_argument("--bytes")
    pl.add_argument("--duplex", choices=("half", "full"))
    pl.add_argument("--max-ranks", type=_int_opt("--max-ranks", 1, 4096), default=64,
                    help="lanes to draw (default 64)")

    b = sub.add_parser("bench", help="run the lab mini-benchmark (SMPI or MPI), or the compiler benchmark",
                       description="lab (default): the BDR paper's mini-benchmark for each algorithm in "
                                   "--algorithms, on SimGrid SMPI or real MPI, with measured and predicted "
                                   "times. compiler: compile+verify+simulate+write time and memory.")
    b.add_argument("--suite", choices=("lab", "compiler", "compile-grid", "model", "scale"), default="lab",
                   help="lab: the mini-benchmark; compiler: compile time and memory; compile-grid: Min3's "
                        "compile time on the bundled grids, fresh processes, C kernels and "
                        "Python (records --doc; --iterations runs, default 15); model: every "
                        "baseline on every bundled topology, predicted vs SMPI (records --doc); scale: "
                        "P=256 x 1 MiB under SMPI, wall time and memory (records --doc)")
    b.add_argument("--backend", choices=("smpi", "mpi"), default="smpi")
    b.add_argument("--topology", help="topology YAML (default: homogeneous 1 Gbit/s, 50 us)")
    b.add_argument("--collective", default="allgather")
    b.add_argument("--ranks", help="lab: P (default 8); compiler: comma-separated list (default 64,256,1024)")
    b.add_argument("--bytes", help="bytes per rank (default 64KiB; compiler: 1MiB)")
    b.add_argument("--algorithms", default="ring,bruck,native",
                   help="comma-separated: compiled algorithms, native, native:NAME")
    b.add_argument("--algorithm", default="ring", help="compiler suite: the algorithm to compile")
    b.add_argument("--max-delay-ms", type=_float_opt("--max-delay-ms", 0, 3.6e6), default=0.0,
                   help="maxDelay of the arrival pattern")
    b.add_argument("--iterations", type=_int_opt("--iterations", 1, 1_000_000), default=None,
                   help="lab: iterations (default 4); compile-grid: fresh-process runs per case (default 15; a third of it at 1024 ranks)")
    b.add_argument("--flat-iterations", type=_int_opt("--flat-iterations", 0, 1_000_000), default=2,
                   help="extra iterations without delay, for the absorption time")
    b.add_argument("--seed", type=_int_opt("--seed", 0, 2**63 - 1), default=1)
    b.add_argument("--network-model", default="CM02", help="SMPI network model: CM02 (default), SMPI, LV08")
    b.add_argument("--tcp-gamma", type=_int_opt("--tcp-gamma", 1, 2**62), default=None,
                   help="SMPI TCP window in bytes (network/TCP-gamma); default: the topology's "
                        "tcp_window, else 4194304 (Linux's default maximum)")
    b.add_argument("--shared-data", choices=("auto", "yes", "no"), default="auto",
                   help="SMPI partial shared malloc for large buffers (checks every piece's private pages)")
    b.add_argument("--keep", help="keep the run directory (platform, schedules) here")
    b.add_argument("--doc", help="Markdown page to update (a marked section)")
    b.add_argument("--section", default="lab-run", help="lab suite: the section of --doc to write")
    b.add_argument("--plot", type=_plot_path("--plot"), help="PNG of the results")
    b.add_argument("--json", action="store_true")
    _add_measure_parser(sub)
    _add_sweep_parser(sub)
    _add_pools_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command; every outcome is an exit status and at most one line on stderr."""
    from .model.dag import ModelCycle

    args = None
    try:
        args = _build_parser().parse_args(argv)
        check_path_options(args)  # files.py: a FIFO --topology or a bad -o fails before any work
        with warnings.catch_warnings():
            # numpy's "overflow encountered" would be a second stderr line: results are
            # checked for finite values instead (pipeline.check_finite), one line each.
            warnings.simplefilter("ignore", RuntimeWarning)
            status = _COMMANDS[args.command](args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return status
    except InputError as e:  # also files.OutputError: an output that cannot be written
        return _say(f"collsched: error: {e.line()}", EXIT_BAD_INPUT)
    except ModelCycle as e:  # a hand-made schedule whose lists the cost model cannot order
        return _say(f"collsched: error: {getattr(args, 'file', '')}: cannot time this schedule: {e}",
                    EXIT_BAD_INPUT)
    except BrokenPipeError:
        _drop_stdout()
        return EXIT_BROKEN_PIPE
    except SystemExit as e:  # --help, --version; a command's own exit status
        return e.code if isinstance(e.code, int) else (0 if e.code is None else _say(e.code, EXIT_BAD_INPUT))
    except KeyboardInterrupt:
        return _say("collsched: interrupted", 130)
    except MemoryError:
        return _say("collsched: error: out of memory (expected a smaller job: fewer --ranks or "
                    "--segments, a smaller schedule)", EXIT_INTERNAL)
    except RecursionError as e:  # before RuntimeError, whose subclass it is
        return _internal(e)
    except RuntimeError as e:  # lab.runner.LabRunError: the run itself failed
        return _say(f"collsched: error: {e}", EXIT_RUN_FAILED)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            where = f"{e.filename}: " if e.filename else ""
            return _say(f"collsched: error: {where}no space left on the device", EXIT_BAD_INPUT)
        if e.filename is not None:  # a file named on the command line (or one beside it)
            return _say(f"collsched: error: {e.filename}: {e.strerror}", EXIT_BAD_INPUT)
        return _internal(e)
    except Exception as e:  # noqa: BLE001 - the one place every other error is reported
        return _internal(e)


def _say(line: str, status: int) -> int:
    """One line on stderr (newlines in a message folded, a long one cut), then `status`."""
    line = " ".join(str(line).split())
    if len(line) > 1000:
        line = line[:997] + "..."
    try:
        print(line, file=sys.stderr)
    except (OSError, ValueError):  # stderr closed too: the status says it
        pass
    return status


def _internal(e: BaseException) -> int:
    return _say(f"collsched: internal error: {type(e).__name__}: {e} ({REPORT_HINT})", EXIT_INTERNAL)


def _drop_stdout() -> None:
    """After EPIPE: point stdout at /dev/null, so that the interpreter's final flush of
    what is still buffered does not print a second error."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):  # not a real file (tests capture it)
        pass


def _size_arg(text: str | None) -> int | None:
    if text is None:
        return None
    from .pipeline import parse_bytes_arg

    lo, hi = parse_bytes_arg(text)
    if lo != hi:
        raise InputError("--bytes", text, "expected one size here, not a range")
    return lo


def _segments_arg(text: str) -> int | str:
    if text == "auto":
        return text
    t = text.strip()
    if not _INT.fullmatch(t) or not 1 <= int(t) <= 65535:
        raise InputError("--segments", _show(text), "expected 1..65535 or auto")
    return int(t)


def _time_arg(text: str | None, flag: str) -> float | None:
    if text is None:
        return None
    from .inputs.units import parse_time

    try:
        return parse_time(text)
    except ValueError as e:
        raise InputError(flag, text, str(e)) from None


def cmd_compile(a) -> int:
    from .pipeline import VerificationFailed, compile_schedule, parse_bytes_arg

    out = Path(a.output)
    if not out.parent.is_dir():
        raise InputError(a.output, "-o", "expected a file in an existing directory")
    try:
        res = compile_schedule(a.algorithm, a.ranks, parse_bytes_arg(a.bytes), topology=a.topology,
                               pap=a.pap, duplex=a.duplex, segments=_segments_arg(a.segments),
                               tau=_time_arg(a.tau, "--tau"), collective=a.collective, output=out,
                               lower_bound=a.lower_bound, model=a.model)
    except VerificationFailed as e:
        print(f"collsched: compiler bug: {a.algorithm} produced an invalid schedule: {e}", file=sys.stderr)
        return EXIT_INVALID
    if a.json:
        print(_json(res.summary()))
    else:
        m = res.metrics
        segs = res.schedule.nseg
        tried = f" (of {', '.join(map(str, res.segments_tried))} tried)" if res.segments_tried else ""
        print(f"{out}: {a.algorithm}, {a.ranks} ranks, {segs} segment{'s' * (segs > 1)}{tried}, "
              f"{res.schedule.total_ops} ops, "
              f"{res.file_bytes} bytes; verified; predicted avg elapsed "
              f"{m.avg_elapsed_s * 1e3:.3f} ms; compiled in {res.compile_time_s * 1e3:.1f} ms")
        if a.lower_bound:
            print(res.bound_line())
    return EXIT_OK


def cmd_verify(a) -> int:
    from .pipeline import verify_file

    sched, violations = verify_file(a.file)
    if violations:
        for v in violations:
            print(f"{a.file}: invalid: {v}", file=sys.stderr)
        return EXIT_INVALID
    print(f"{a.file}: valid ({sched.algorithm}, {sched.nranks} ranks, {sched.total_ops} ops)")
    return EXIT_OK


def _simulate(a):
    from .pipeline import VerificationFailed, simulate_file

    try:
        return simulate_file(a.file, topology=a.topology, pap=a.pap, nbytes=_size_arg(a.bytes),
                             duplex=a.duplex, model=getattr(a, "model", "dag"))
    except VerificationFailed as e:
        print(f"{a.file}: invalid: {e}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID)


def cmd_simulate(a) -> int:
    sched, per_iter, mean, _ = _simulate(a)
    if a.json:
        d = {k: v for k, v in mean.to_dict().items()}
        d["iterations"] = [m.to_dict() | {"exit_times_s": None} for m in per_iter] if len(per_iter) > 1 else None
        print(_json({k: v for k, v in d.items() if v is not None}))
    else:
        print(f"{a.file}: {sched.algorithm}, {sched.nranks} ranks, {len(per_iter)} arrival pattern(s)")
        print(f"  average elapsed time  {mean.avg_elapsed_s * 1e3:12.4f} ms")
        print(f"  run time              {mean.run_time_s * 1e3:12.4f} ms")
        print(f"  absorption time       {mean.absorption_s * 1e3:12.4f} ms")
        print(f"  imbalance omega       {mean.imbalance_s * 1e3:12.4f} ms  (omega/tau = {mean.imbalance_factor:.2f})")
    return EXIT_OK


def cmd_show(a) -> int:
    from . import schedfile
    from .ir import KIND_NAMES, PHASE_NAMES

    s = schedfile.read(a.file)
    if a.rank is not None and not 0 <= a.rank < s.nranks:
        raise InputError("--rank", str(a.rank), f"expected 0..{s.nranks - 1}")
    print(f"file        {a.file} ({s.file_bytes} bytes, format {s.format_version})")
    print(f"collective  {s.collective}   algorithm {s.algorithm}   compiler {s.compiler_version}")
    print(f"ranks       {s.nranks}   segments/block {s.nseg}   ops {s.total_ops}   "
          f"duplex {'full' if s.full_duplex else 'half'}   background ops {'yes' if s.has_background else 'no'}")
    print(f"bytes/rank  {s.bytes_min}" + (f"..{s.bytes_max}" if s.bytes_max != s.bytes_min else ""))
    print(f"input hash  {s.input_hash.hex()}")
    ranks = [a.rank] if a.rank is not None else range(s.nranks)
    for r in ranks:
        ops = s.ops_of(r)
        fifo = s.fifo[int(s.offsets[r]):int(s.offsets[r + 1])]
        print(f"rank {r}: {len(ops)} ops")
        for i, ((k, peer, o, seg, ph), f) in enumerate(zip(ops, fifo)):
            arrow = "->" if k == KIND_NAMES[0] else "<-"
            marks = " ".join(m for m in (ph if ph != PHASE_NAMES[0] else "", "fifo" if f else "") if m)
            print(f"  {i:6d} {k} {arrow} {peer:<6d} piece ({o},{seg}) {marks}".rstrip())
    return EXIT_OK


def cmd_plot(a) -> int:
    from .plot import gantt

    out = Path(a.output)
    if not out.parent.is_dir():
        raise InputError(a.output, "-o", "expected a file in an existing directory")
    sched, _, mean, timelines = _simulate(a)
    title = (f"{sched.algorithm}: {sched.nranks} ranks, {sched.bytes_max} B/rank, "
             f"avg elapsed {mean.avg_elapsed_s * 1e3:.3f} ms")
    gantt(timelines[0], title, out, max_ranks=a.max_ranks)
    print(f"{out}: Gantt chart of {sched.algorithm}")
    return EXIT_OK


def cmd_bench(a) -> int:
    if a.suite == "compile-grid":
        from .lab.bench_compiler import run_grid_compile_bench

        if a.iterations is not None and a.iterations < 1:
            raise InputError("--iterations", str(a.iterations), "expected at least 1 run")
        return run_grid_compile_bench(Path(__file__).resolve().parents[2] / "topologies",
                                      a.iterations or 15, doc=a.doc, as_json=a.json)
    if a.suite == "compiler":
        from .lab.bench_compiler import run_compiler_bench

        ranks = _int_list("64,256,1024" if a.ranks is None else a.ranks, "--ranks", lo=2)
        nbytes = _size_arg("1MiB" if a.bytes is None else a.bytes)
        from .model import budget

        budget.check(max(ranks))
        return run_compiler_bench(ranks, a.algorithm, nbytes, doc=a.doc,
                                  plot=a.plot, as_json=a.json)
    if a.suite == "model":
        from rich.progress import Progress

        from .lab.modelcheck import run_and_record

        with Progress(transient=True) as prog:
            task = prog.add_task("model check", total=None)
            rows = run_and_record(a.doc, a.plot, progress=lambda t: prog.update(task, description=t))
        return EXIT_OK if all(r["data_ok"] for r in rows) else EXIT_INVALID
    if a.suite == "scale":
        from .lab.scale import markdown, run_scale

        scale = run_scale()
        md = markdown(scale)
        if a.doc:
            from .lab.benchdoc import replace_section

            replace_section(a.doc, "lab-scale", md)
        print(md)
        return EXIT_OK if all(r["data_ok"] for r in scale["results"]) else EXIT_INVALID
    # Every option is checked here, before the lab compiles anything or starts SMPI/MPI.
    if a.collective != "allgather":
        raise InputError("--collective", _show(a.collective), "expected allgather")
    ranks = _int_list("8" if a.ranks is None else a.ranks, "--ranks", lo=2)
    if len(ranks) != 1:
        raise InputError("--ranks", _show(a.ranks), "expected one rank count of at least 2")
    a.iterations = 4 if a.iterations is None else a.iterations
    nbytes = _size_arg("64KiB" if a.bytes is None else a.bytes)
    algorithms = _algorithm_list(a.algorithms)
    from .model import budget

    budget.check(ranks[0])
    from .lab.report import print_report, plot_report
    from .lab.runner import LabConfig, run_lab

    cfg = LabConfig(backend=a.backend, topology=a.topology, ranks=ranks[0],
                    nbytes=nbytes, iterations=a.iterations,
                    max_delay_ms=a.max_delay_ms, seed=a.seed, flat_iterations=a.flat_iterations,
                    network_model=a.network_model, tcp_gamma=a.tcp_gamma,
                    shared_data=a.shared_data, workdir=a.keep)
    from rich.progress import Progress

    with Progress(transient=True, disable=a.json) as prog:
        task = prog.add_task("mini-benchmark", total=len(algorithms))
        report = run_lab(cfg, algorithms, progress=lambda name: prog.update(
            task, description=f"{cfg.backend}: {name}", advance=1))
    if a.json:
        print(_json(report))
    else:
        print_report(report)
    if a.plot:
        plot_report(report, a.plot)
    if a.doc:
        import os

        from .lab.benchdoc import replace_section
        from .lab.report import markdown

        rel = os.path.relpath(a.plot, os.path.dirname(os.path.abspath(a.doc))) if a.plot else None
        replace_section(a.doc, a.section, markdown(report, rel))
    return EXIT_OK if all(r["data_ok"] for r in report["results"]) else EXIT_INVALID


def _add_measure_parser(sub) -> None:
    from .lab.measure import DEFAULT_GAP_BURST, DEFAULT_REPEATS, DEFAULT_SITE_FACTOR, DEFAULT_SIZES

    m = sub.add_parser("measure", help="measure latency/bandwidth between ranks, write a topology",
                       description="Run collsched-measure under real MPI or SimGrid SMPI: latency, "
                                   "bandwidth, os(m) and g(m) between rank pairs, in rounds of disjoint "
                                   "pairs; fit, group hosts into sites, write a topology YAML "
                                   "(docs/measure.md).")
    m.add_argument("--backend", choices=("mpi", "smpi"), required=True)
    m.add_argument("--ranks", type=_int_opt("--ranks", 2, MAX_RANKS), required=True,
                   help="number of ranks P (at least 2)")
    m.add_argument("--platform-from", help="smpi: topology YAML whose SimGrid platform is measured")
    m.add_argument("--sizes", default=DEFAULT_SIZES, help=f"message sizes (default {DEFAULT_SIZES})")
    m.add_argument("--repeats", type=_int_opt("--repeats", 1, 1_000_000), default=DEFAULT_REPEATS, help="runs per size; the median counts")
    m.add_argument("--gap-burst", type=_int_opt("--gap-burst", 0, 1_000_000), default=DEFAULT_GAP_BURST,
                   help="messages per stream for g(m); 0 = do not measure g")
    m.add_argument("--site-factor", type=_float_opt("--site-factor", 1, 1e12), default=DEFAULT_SITE_FACTOR,
                   help="hosts within this factor of their nearest host's latency share a site")
    m.add_argument("--all-pairs", action="store_true",
                   help="sweep sizes for every rank pair, not one rank pair per host pair")
    m.add_argument("--network-model", default="CM02", help="smpi: CM02 (default), SMPI, LV08")
    m.add_argument("--tcp-gamma", type=_int_opt("--tcp-gamma", 1, 2**62), help="smpi: TCP window in bytes (default: the topology's, else 4 MiB)")
    m.add_argument("--hostfile", help="mpi: host file for mpirun")
    m.add_argument("--overheads", action="store_true",
                   help="also write the measured os(m) and g(m) (medians over host pairs) to the topology")
    m.add_argument("--raw", help="also write the program's raw JSON here")
    m.add_argument("-o", "--output", required=True, help="topology YAML to write")
    m.add_argument("--json", action="store_true", help="print a JSON summary")


def cmd_measure(a) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from .model import budget
    from .lab.measure import MeasureConfig, measure, parse_sizes, text_report

    budget.check(a.ranks, 0, what=f"{a.ranks} ranks' measured matrices")

    cfg = MeasureConfig(backend=a.backend, ranks=a.ranks, sizes=parse_sizes(a.sizes), repeats=a.repeats,
                        gap_burst=a.gap_burst, site_factor=a.site_factor, all_pairs=a.all_pairs,
                        platform_from=a.platform_from, network_model=a.network_model,
                        tcp_gamma=a.tcp_gamma, hostfile=a.hostfile)
    with Progress(transient=True, disable=a.json, console=Console(stderr=True)) as prog:
        task = prog.add_task(f"measure ({a.backend})", total=None)

        def progress(phase, done, total):
            prog.update(task, description=f"{a.backend}: {phase} round", completed=done, total=total)

        report = measure(cfg, a.output, progress=progress, raw_output=a.raw, overheads=a.overheads)
    print(_json(report) if a.json else text_report(report))
    return EXIT_OK


def _add_sweep_parser(sub) -> None:
    from .lab import sweep as sw

    s = sub.add_parser("sweep", help="the BDR paper's grid under SMPI, printed as its Tables 3 and 4",
                       description="Run the mini-benchmark for every P x N x maxDelay x algorithm of the "
                                   "BDR paper (section 4) under SimGrid SMPI and print, per cell, the fastest "
                                   "algorithm and a PAP-aware winner's speedup over the best regular one "
                                   "(docs/sweep.md). Results are cached per run: an interrupted sweep resumes.")
    s.add_argument("--topology", default="topologies/tryton-48.yaml")
    s.add_argument("--ranks", default=",".join(map(str, sw.PAPER_RANKS)), help="comma-separated P values")
    s.add_argument("--floats", default=",".join(sw.floats_label(n) for n in sw.PAPER_FLOATS),
                   help="floats gathered in total, comma-separated (128K = 131072); each rank "
                        "contributes floor(4 N / P) bytes")
    s.add_argument("--max-delays-ms", default=",".join(f"{d:g}" for d in sw.PAPER_DELAYS_MS),
                   help="comma-separated maxDelay values (ms)")
    s.add_argument("--algorithms", default=",".join(sw.PAPER_ALGORITHMS),
                   help="comma-separated: compiled algorithms, native, native:NAME")
    s.add_argument("--iterations", type=_int_opt("--iterations", 1, 1_000_000), default=sw.DEFAULT_ITERATIONS,
                   help=f"iterations per run (default {sw.DEFAULT_ITERATIONS}; the paper: {sw.PAPER_ITERATIONS})")
    s.add_argument("--seed", type=_int_opt("--seed", 0, 2**63 - 1), default=1)
    s.add_argument("--network-model", default="CM02", help="SMPI network model: CM02 (default), SMPI, LV08")
    s.add_argument("--cache", help="JSON cache of finished runs (default out/sweep/<topology>-cache.json)")
    s.add_argument("--fresh", action="store_true", help="drop the cache and run everything again")
    s.add_argument("--redo", default="", help="comma-separated algorithms to run again despite the cache")
    s.add_argument("--json", help="write the whole sweep (every run, every verdict) to this JSON file")
    s.add_argument("--plot", type=_plot_path("--plot"), help="PNG heat map of the tables")
    s.add_argument("--doc", help="Markdown page to update (a marked section)")
    s.add_argument("--section", default="lab-sweep", help="the section of --doc to write")


def cmd_sweep(a) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from .lab import sweep as sw

    def delays(text):
        parse = _float_opt("--max-delays-ms", 0, 3.6e6)
        return tuple(parse(x) for x in text.split(","))  # an empty item is refused too

    for out in (a.json, a.plot):
        if out and not Path(out).resolve().parent.is_dir():
            raise InputError(out, "", "expected a file in an existing directory")
    cfg = sw.SweepConfig(ranks=tuple(_int_list(a.ranks, "--ranks", lo=2)), floats=sw.parse_floats(a.floats),
                         delays_ms=delays(a.max_delays_ms),
                         algorithms=tuple(_algorithm_list(a.algorithms)),
                         iterations=a.iterations, seed=a.seed, topology=a.topology,
                         network_model=a.network_model, cache=a.cache)
    root = Path(__file__).resolve().parents[2]
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} runs"),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True) as prog:
        task = prog.add_task("sweep", total=None)
        sweep = sw.run_sweep(cfg, root=root, fresh=a.fresh, redo=tuple(x for x in a.redo.split(",") if x),
                             progress=lambda done, total, text: prog.update(
                                 task, completed=done, total=total, description=text))
    sw.summarize(sweep)
    sw.print_tables(sweep)
    if a.json:
        write_atomic(a.json, _json(sweep, indent=1))
    if a.plot:
        sw.plot_heatmap(sweep, a.plot)
    if a.doc:
        import os

        from .lab.benchdoc import replace_section

        rel = os.path.relpath(a.plot, os.path.dirname(os.path.abspath(a.doc))) if a.plot else None
        replace_section(a.doc, a.section, sw.markdown(sweep, rel))
    runs = [r for c in sweep["cells"] for r in c["results"].values()]
    if any("error" in r for r in runs):
        return EXIT_RUN_FAILED
    return EXIT_OK if all(r.get("data_ok") for r in runs) else EXIT_INVALID


def _algorithm_list(text: str, flag: str = "--algorithms") -> list[str]:
    """Comma-separated compiled algorithms, native or native:NAME (the lab's names)."""
    from .algorithms import REGISTRY

    names = [x.strip() for x in text.split(",") if x.strip()]
    for name in names or [""]:
        if name not in REGISTRY and name != "native" and not (name.startswith("native:") and name[7:]):
            raise InputError(flag, _show(name), f"expected comma-separated names of "
                             f"{', '.join(sorted(REGISTRY))}, native or native:NAME")
    return names


def _int_list(text: str, flag: str, lo: int = 1, hi: int = MAX_RANKS) -> list[int]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items or not all(_INT.fullmatch(x) and lo <= int(x) <= hi for x in items):
        raise InputError(flag, _show(text), f"expected comma-separated integers {lo}..{hi}")
    return [int(x) for x in items]


def _add_pools_parser(sub) -> None:
    po = sub.add_parser("pools", help="print (and plot) the pool tree of a topology (Min3 paper, 5.1)",
                        description="Group the ranks of a topology into pools by link bandwidth, "
                                    "recursively, as Min3 schedules them (docs/grid.md).")
    po.add_argument("topology", help="topology YAML")
    po.add_argument("--ranks", type=_int_opt("--ranks", 1, MAX_RANKS),
                    help="number of ranks P (default: as the placement provides)")
    po.add_argument("--plot", type=_plot_path("--plot"), help="PNG of the tree to write")
    po.add_argument("--json", action="store_true", help="print the tree as JSON")


def cmd_pools(a) -> int:
    from .inputs import pools
    from .inputs.topology import load_topology

    if a.plot and not Path(a.plot).resolve().parent.is_dir():
        raise InputError(a.plot, "--plot", "expected a file in an existing directory")
    from .model import budget

    if a.ranks is not None:
        budget.check(a.ranks, 0, what=f"{a.ranks} ranks' topology matrices")
    topo = load_topology(a.topology, a.ranks)
    tree = pools.pool_tree(topo)
    if a.json:
        print(_json(pools.to_json(tree) | {"topology": topo.name}))
    else:
        print(f"{a.topology}: {topo.nranks} ranks on {len(set(topo.rank_host.tolist()))} hosts")
        print(pools.describe(tree))
    if a.plot:
        pools.plot(tree, a.plot, title=f"pool tree of {topo.name}, {topo.nranks} ranks")
        if not a.json:
            print(f"{a.plot}: pool tree")
    return EXIT_OK


_COMMANDS = {"compile": cmd_compile, "verify": cmd_verify, "simulate": cmd_simulate,
             "show": cmd_show, "plot": cmd_plot, "bench": cmd_bench}
_COMMANDS["measure"] = cmd_measure
_COMMANDS["sweep"] = cmd_sweep
_COMMANDS["pools"] = cmd_pools

if __name__ == "__main__":
    raise SystemExit(main())
