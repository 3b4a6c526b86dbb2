"""`collsched` command line: each command is a thin layer over library functions.

Exit status: 0 ok, 1 verification failure (or wrong data in a benchmark), 2 bad input
(an option, a file or an output that cannot be written), 3 a benchmark run failed (MPI
or SimGrid crashed or timed out) or an internal error. A reader closing stdout early
(`collsched show x | head`) is not an error: the command stops quietly with status 0.
No error shows a Python traceback: bad input is one line naming the option or file, the
field and what was expected; anything unexpected is one line too, with a hint to report it.
Every numeric option is parsed strictly (ASCII digits, finite, in range) by the types
of cli_args.py, before any work starts.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import warnings
from pathlib import Path

from . import __version__, cli_build, cli_cache, cli_coll, cli_measure, cli_sweep, cli_trace, resources
from .errors import InputError
from .cli_args import (MAX_RANKS, _INT, UsageError, _algorithm_list, _float_opt, _int_list, _int_opt, _json,
                       _show, h, new_parser)
from .files import check_path_options

EXIT_OK, EXIT_INVALID, EXIT_BAD_INPUT, EXIT_RUN_FAILED = 0, 1, 2, 3
EXIT_INTERNAL = 3  # an unexpected exception: one line, a hint to report it
EXIT_BROKEN_PIPE = 0  # stdout closed by its reader (`| head`): not an error, as `git log | head`
REPORT_HINT = "please report this with the command line at the project's issue tracker"


def _build_parser() -> argparse.ArgumentParser:
    p, sub = new_parser(__version__)
    cli_measure.add_parsers(sub)
    cli_sweep.add_parsers(sub)
    cli_trace.add_parsers(sub)
    cli_cache.add_parsers(sub)
    cli_build.add_parsers(sub)
    cli_coll.add_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command; every outcome is an exit status and at most one line on stderr."""
    from .model.dag import ModelCycle

    args = None
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = _build_parser()
        if not argv:  # bare `collsched`: the usage and the commands (as `git`), status 2
            sys.stdout.write(parser.format_help())
            sys.stdout.flush()
            return EXIT_BAD_INPUT
        args = parser.parse_args(argv)
        if args.command is None:  # only options such as `collsched --json`
            raise UsageError("", "", "expected a command (collsched --help lists them)")
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

    if a.collective in cli_coll.NAMES:  # alltoall, bcast, reduce, allreduce: cli_coll.py
        return cli_coll.cmd_compile(a)
    cli_coll.refuse_options_of_others(a)  # --root, --elem-bytes
    if a.collective.startswith("inter-"):  # two groups: cli_inter.py
        from . import cli_inter
        return cli_inter.cmd_compile(a)
    if a.ranks is None:
        raise InputError("--ranks", "", "expected the number of ranks (required for allgather)")
    if a.form != "explicit":  # the compact form where it applies (cli_compact.py)
        from . import cli_compact
        if cli_compact.compile_form(a) == "compact":
            return cli_compact.cmd_compile(a)
    out = Path(a.output)
    if not out.parent.is_dir():
        raise InputError(a.output, "-o", "expected a file in an existing directory")
    try:
        res = compile_schedule(a.algorithm, a.ranks, parse_bytes_arg(a.bytes), topology=a.topology,
                               pap=a.pap, duplex=a.duplex, segments=_segments_arg(a.segments),
                               tau=_time_arg(a.tau, "--tau"), collective=a.collective, output=out,
                               lower_bound=a.lower_bound, model=a.model or "auto", engine=a.engine)
    except VerificationFailed as e:
        print(f"collsched: compiler bug: {a.algorithm} produced an invalid schedule: {e}", file=sys.stderr)
        return EXIT_INVALID
    _warn_overlaps(out)
    if a.json:
        print(_json(res.summary()))
    else:
        m = res.metrics
        segs = res.schedule.nseg
        tried = f" (of {', '.join(map(str, res.segments_tried))} tried)" if res.segments_tried else ""
        picked = f" (auto: the fastest predicted of {len(res.algorithms_tried)})" if res.algorithms_tried else ""
        print(f"{out}: {res.schedule.algorithm}{picked}, {a.ranks} ranks, {segs} segment{'s' * (segs > 1)}{tried}, "
              f"{res.schedule.total_ops} ops, "
              f"{res.file_bytes} bytes; verified; predicted avg elapsed "
              f"{m.avg_elapsed_s * 1e3:.3f} ms; compiled in {res.compile_time_s * 1e3:.1f} ms")
        if a.lower_bound:
            print(res.bound_line())
    return EXIT_OK


def _warn_overlaps(out: Path) -> None:
    """One line on stderr when files beside the new one serve some of its calls (or it
    theirs): the runtime takes the first in name order (catalog.py). The status is unchanged."""
    from .catalog import new_file_warning

    line = new_file_warning(out)
    if line:
        _say(line, EXIT_OK)


def cmd_verify(a) -> int:
    from .pipeline import verify_file

    from . import cli_compact

    several, status = len(a.file) > 1, EXIT_OK
    for path in a.file:
        if cli_coll.is_coll_file(path):  # format 1.2: collectives/verify.py's passes
            st = cli_coll.verify(path, several)
            status = EXIT_INVALID if st == EXIT_INVALID else (status or st)
            continue
        if cli_compact.is_compact(path):  # a compact description: the generators' check
            status = cli_compact.verify(path, several) or status
            continue
        try:
            sched, violations = verify_file(path)
        except InputError as e:  # unreadable or corrupt: this file's line; the others go on
            if not several:
                raise
            _say(f"collsched: error: {e.line()}", EXIT_BAD_INPUT)
            status = status or EXIT_BAD_INPUT
            continue
        if violations:
            more = f" (and {len(violations) - 1} more)" if several and len(violations) > 1 else ""
            for v in violations[:1] if several else violations:
                print(f"{path}: invalid: {v}{more}", file=sys.stderr)
            status = EXIT_INVALID
            continue
        print(f"{path}: valid ({sched.algorithm}, {sched.nranks} ranks, {sched.total_ops} ops)")
    return status


def cmd_ls(a) -> int:
    from .catalog import describe, list_directory

    if not os.path.isdir(a.directory):
        raise InputError(a.directory, "DIRECTORY", "expected a directory of schedule files")
    for line in describe(list_directory(a.directory)):
        print(line)
    return EXIT_OK


def _simulate(a):
    from .pipeline import VerificationFailed, simulate_file

    try:
        return simulate_file(a.file, topology=a.topology, pap=a.pap, nbytes=_size_arg(a.bytes),
                             duplex=a.duplex, model=getattr(a, "model", None) or "dag")
    except VerificationFailed as e:
        print(f"{a.file}: invalid: {e}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID)


def cmd_simulate(a) -> int:
    from . import cli_inter
    if cli_inter.is_inter_file(a.file):  # an intergroup schedule: cli_inter.py
        return cli_inter.cmd_simulate(a)
    if cli_coll.is_coll_file(a.file):  # alltoall, bcast, reduce, allreduce: cli_coll.py
        return cli_coll.cmd_simulate(a)
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

    if os.path.isdir(a.file):  # a schedules directory: what it covers, as `ls` lists it
        if a.rank is not None:
            raise InputError("--rank", a.file, "expected a schedule file, not a directory, with --rank")
        a.directory = a.file
        return cmd_ls(a)
    from . import cli_compact
    if cli_compact.is_compact(a.file):
        return cli_compact.cmd_show(a)
    s = schedfile.read(a.file)
    if a.rank is not None and not 0 <= a.rank < s.nranks:
        raise InputError("--rank", str(a.rank), f"expected 0..{s.nranks - 1}")
    if cli_coll.is_coll_file(a.file):  # alltoall, bcast, reduce, allreduce: cli_coll.py
        return cli_coll.cmd_show(a, s)
    if not hasattr(s, "nseg"):  # an intergroup schedule: cli_inter.py
        from . import cli_inter
        return cli_inter.cmd_show(a, s)
    print(f"file        {a.file} ({s.file_bytes} bytes, format {s.format_version})")
    print(f"collective  {s.collective}   algorithm {s.algorithm}   compiler {s.compiler_version}")
    print(f"ranks       {s.nranks}   segments/block {s.nseg}   ops {s.total_ops}   "
          f"duplex {'full' if s.full_duplex else 'half'}   background ops {'yes' if s.has_background else 'no'}")
    print(f"bytes/rank  {s.bytes_min}" + (f"..{s.bytes_max}" if s.bytes_max != s.bytes_min else ""))
    print(f"input hash  {s.input_hash.hex()}")
    head = s.message_head()
    if s.has_messages:  # multi-piece messages: a joined op shows "+msg@H", H its message's first op
        print(f"messages    {int(s.total_ops - s.join.sum())} for {s.total_ops} ops "
              f"({int(s.join.sum())} ops joined to the op before them)")
    ranks = [a.rank] if a.rank is not None else range(s.nranks)
    for r in ranks:
        ops = s.ops_of(r)
        lo, hi = int(s.offsets[r]), int(s.offsets[r + 1])
        print(f"rank {r}: {len(ops)} ops")
        for i, ((k, peer, o, seg, ph), f, h) in enumerate(zip(ops, s.fifo[lo:hi], head[lo:hi])):
            arrow = "->" if k == KIND_NAMES[0] else "<-"
            marks = " ".join(m for m in (ph if ph != PHASE_NAMES[0] else "", "fifo" if f else "",
                                         f"+msg@{int(h) - lo}" if h != lo + i else "") if m)
            print(f"  {i:6d} {k} {arrow} {peer:<6d} piece ({o},{seg}) {marks}".rstrip())
    return EXIT_OK


def cmd_plot(a) -> int:
    from . import cli_inter
    from .plot import gantt

    if cli_inter.is_inter_file(a.file):  # an intergroup schedule: cli_inter.py
        return cli_inter.cmd_plot(a)
    if cli_coll.is_coll_file(a.file):
        raise InputError(a.file, "FILE", "expected an allgather or intergroup schedule: plot draws no "
                                         "alltoall/bcast/reduce/allreduce timeline (collsched simulate times it)")
    out = Path(a.output)
    if not out.parent.is_dir():
        raise InputError(a.output, "-o", "expected a file in an existing directory")
    sched, _, mean, timelines = _simulate(a)
    title = (f"{sched.algorithm} on {Path(a.topology).stem if a.topology else 'the default cluster'}: "
             f"{sched.nranks} ranks, {sched.bytes_max} B/rank, avg elapsed {mean.avg_elapsed_s * 1e3:.3f} ms")
    gantt(timelines[0], title, out, max_ranks=a.max_ranks)
    print(f"{out}: Gantt chart of {sched.algorithm}")
    return EXIT_OK


def cmd_bench(a) -> int:
    from .lab.launch import check_options
    if a.collective in ("alltoall", "bcast", "reduce", "allreduce"):  # issue 18: lab/coll_bench.py
        return _collectives(a)
    if a.suite == "intergroup" or a.collective.startswith("inter-"):  # two groups: lab/intergroup.py
        return _intergroup(a)
    check_options(a.suite, a.backend, a.launcher, a.hostfile, a.bind_to, a.platform)  # before anything
    if a.suite == "compile-grid":
        from .lab.bench_compiler import run_grid_compile_bench

        if a.iterations is not None and a.iterations < 1:
            raise InputError("--iterations", str(a.iterations), "expected at least 1 run")
        return run_grid_compile_bench(resources.topologies_dir(),
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

        from .lab.modelcheck import NETWORK_MODELS, run_and_record
        from .lab.netmodel import check_model

        models = tuple(dict.fromkeys(check_model(m.strip()) for m in a.network_model.split(",")
                                     if m.strip())) if a.network_model else NETWORK_MODELS
        if not models:
            raise InputError("--network-model", _show(a.network_model), "expected CM02, SMPI or LV08")
        with Progress(transient=True) as prog:
            task = prog.add_task("model check", total=None)
            user = None if a.platform is None else {"topology": a.topology, "platform": a.platform,
                                                    "hostfile": a.hostfile}
            rows = run_and_record(a.doc, a.plot, progress=lambda t: prog.update(task, description=t),
                                  network_models=models, measured=a.measured, section=a.section, user=user)
        return EXIT_OK if all(r["data_ok"] for r in rows) else EXIT_INVALID
    if a.measured is not None:
        raise InputError("--measured", _show(a.measured), "expected only with --suite model")
    if a.pap is not None and a.suite != "lab":
        raise InputError("--pap", _show(a.pap), "expected only with --suite lab")
    from .lab.netmodel import check_model

    a.network_model = check_model(a.network_model or "CM02")
    if a.suite == "recurring":
        return _bench_recurring(a)
    if a.suite == "scale":
        from .lab.scale import markdown, run_scale

        scale = run_scale(network_model=a.network_model)
        md = markdown(scale)
        if a.doc:
            from .lab.benchdoc import replace_section

            replace_section(a.doc, "lab-scale", md)
        print(md)
        return EXIT_OK if all(r["data_ok"] for r in scale["results"]) else EXIT_INVALID
    if a.suite == "scale-compact":  # compact schedules at 1024-4096 ranks (lab/scale_compact.py)
        from .lab.scale_compact import bench_cli
        return bench_cli(a)
    if a.suite == "platforms":  # measure -> compile -> run on multi-site platforms (lab/platforms.py)
        return _bench_platforms(a)
    # Every option is checked here, before the lab compiles anything or starts SMPI/MPI.
    if a.collective != "allgather":
        raise InputError("--collective", _show(a.collective), "expected allgather")
    ranks = _int_list("8" if a.ranks is None else a.ranks, "--ranks", lo=2)
    if len(ranks) != 1:
        raise InputError("--ranks", _show(a.ranks), "expected one rank count of at least 2")
    delays = None
    if a.pap is not None:  # replayed arrivals: every iteration's offsets from its earliest rank
        from .inputs.arrivals import load_pap

        pap = load_pap(a.pap, ranks[0])
        if a.iterations is not None and a.iterations > len(pap):
            raise InputError("--iterations", str(a.iterations), f"expected at most {len(pap)} (the iterations of {a.pap})")
        delays = pap - pap.min(axis=1, keepdims=True)
    a.iterations = (4 if delays is None else len(delays)) if a.iterations is None else a.iterations
    nbytes = _size_arg("64KiB" if a.bytes is None else a.bytes)
    algorithms = _algorithm_list("ring,bruck,native" if a.algorithms is None else a.algorithms)
    from .lab.native import check_names

    check_names(algorithms, a.backend)  # native:NAME on this backend, before anything runs
    from .model import budget

    budget.check(ranks[0])
    from .lab.report import print_report, plot_report
    from .lab.runner import LabConfig, run_lab

    cfg = LabConfig(backend=a.backend, topology=a.topology, ranks=ranks[0],
                    nbytes=nbytes, iterations=a.iterations,
                    max_delay_ms=a.max_delay_ms, seed=a.seed, flat_iterations=a.flat_iterations,
                    network_model=a.network_model, tcp_gamma=a.tcp_gamma,
                    shared_data=a.shared_data, workdir=a.keep, delays=delays,
                    delays_source=None if a.pap is None else f"replayed from {a.pap}",
                    launcher=a.launcher, hostfile=a.hostfile, bind_to=a.bind_to, platform=a.platform)
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
        replace_section(a.doc, a.section or "lab-run", markdown(report, rel))
    return EXIT_OK if all(r["data_ok"] for r in report["results"]) else EXIT_INVALID


def _collectives(a) -> int:
    """alltoall, bcast, reduce, allreduce (issue 18): lab/coll_bench.py."""
    from .lab.coll_report import cmd_bench as coll_bench

    return coll_bench(a)


def _intergroup(a) -> int:
    """The intergroup lab (lab/intergroup.py): one case (--collective inter-*) runs on
    --platform when given; the settings suite refuses it (the paper's homogeneous cluster)."""
    from .lab import intergroup

    return intergroup.cmd_bench(a)


def _bench_platforms(a) -> int:
    """`collsched bench --suite platforms`: lab/platforms.py's suite on its bundled platforms,
    or on the user's (--platform, --hostfile, --topology: the platform's true description)."""
    import sys
    from pathlib import Path

    from .lab import platforms as suite

    if a.backend != "smpi":
        raise InputError("--backend", a.backend, "expected smpi with --suite platforms")
    bundles = list(suite.PLATFORMS)
    if a.platform is not None:
        if a.topology is None:
            raise InputError("--platform", _show(a.platform), "expected --topology with it: the "
                                                              "platform's true description (YAML)")
        bundles = [suite.Bundle(Path(a.platform).stem, Path(a.topology), Path(a.platform), Path(a.hostfile))]
    sizes = suite.SIZES if a.bytes is None else [_size_arg(x) for x in a.bytes.split(",") if x.strip()]
    names = None if a.algorithms is None else [x.strip() for x in a.algorithms.split(",") if x.strip()]
    report, text = suite.run_platforms_suite(bundles, sizes, names, a.keep,
                                             progress=lambda t: print(t, file=sys.stderr, flush=True))
    print(_json(report) if a.json else text)
    if a.doc:
        suite.write_doc(report, a.doc, a.plot)
    return EXIT_OK if report["summary"]["data_ok"] else EXIT_INVALID


def _bench_recurring(a) -> int:
    """`collsched bench --suite recurring` (lab/recurring.py)."""
    if a.collective != "allgather":
        raise InputError("--collective", _show(a.collective), "expected allgather")
    ranks = None if a.ranks is None else _int_list(a.ranks, "--ranks", lo=2)
    if ranks is not None and len(ranks) != 1:
        raise InputError("--ranks", _show(a.ranks), "expected one rank count of at least 2")
    from .lab.recurring import bench_command

    report, text = bench_command(a, ranks and ranks[0], None if a.bytes is None else _size_arg(a.bytes))
    print(_json(report) if a.json else text)
    return EXIT_OK if report["summary"]["data_ok"] else EXIT_INVALID


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
             "show": cmd_show, "ls": cmd_ls, "plot": cmd_plot, "bench": cmd_bench}
_COMMANDS.update(cli_measure.COMMANDS)  # measure
_COMMANDS.update(cli_sweep.COMMANDS)  # sweep
_COMMANDS["pools"] = cmd_pools
_COMMANDS.update(cli_trace.COMMANDS)  # trace
_COMMANDS.update(cli_cache.COMMANDS)  # cache, tune
_COMMANDS.update(cli_build.COMMANDS)  # build-runtime
_COMMANDS.update(cli_coll.COMMANDS)  # algorithms

if __name__ == "__main__":
    raise SystemExit(main())
