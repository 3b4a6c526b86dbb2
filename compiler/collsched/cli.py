"""`collsched` command line: each command is a thin layer over library functions.

Exit status: 0 ok, 1 verification failure (or wrong data in a benchmark), 2 bad input,
3 a benchmark run failed (MPI or SimGrid crashed or timed out). Bad input never shows a Python
traceback: one line naming the file, the field and what was expected.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import __version__
from .errors import InputError
from .files import check_path_options, write_atomic

EXIT_OK, EXIT_INVALID, EXIT_BAD_INPUT, EXIT_RUN_FAILED = 0, 1, 2, 3


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
    c.add_argument("--ranks", type=int, required=True, help="number of ranks P")
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
    sh.add_argument("--rank", type=int, help="only this rank's operations")

    pl = sub.add_parser("plot", help="draw a Gantt chart of the simulated schedule")
    pl.add_argument("file")
    pl.add_argument("-o", "--output", required=True, help="PNG to write")
    pl.add_argument("--topology")
    pl.add_argument("--pap")
    pl.add_argument("--bytes")
    pl.add_argument("--duplex", choices=("half", "full"))
    pl.add_argument("--max-ranks", type=int, default=64, help="lanes to draw (default 64)")

    b = sub.add_parser("bench", help="run the lab mini-benchmark (SMPI or MPI), or the compiler benchmark",
                       description="lab (default): the BDR paper's mini-benchmark for each algorithm in "
                                   "--algorithms, on SimGrid SMPI or real MPI, with measured and predicted "
                                   "times. compiler: compile+verify+simulate+write time and memory.")
    b.add_argument("--suite", choices=("lab", "compiler", "compile-grid", "model", "scale"), default="lab",
                   help="lab: the mini-benchmark; compiler: compile time and memory; compile-grid: Min3's "
                        "compile time on the bundled grids, fresh processes, native kernels and "
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
    b.add_argument("--max-delay-ms", type=float, default=0.0, help="maxDelay of the arrival pattern")
    b.add_argument("--iterations", type=int, default=None,
                   help="lab: iterations (default 4); compile-grid: fresh-process runs per case (default 15; a third of it at 1024 ranks)")
    b.add_argument("--flat-iterations", type=int, default=2,
                   help="extra iterations without delay, for the absorption time")
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--network-model", default="CM02", help="SMPI network model: CM02 (default), SMPI, LV08")
    b.add_argument("--tcp-gamma", type=int, default=None,
                   help="SMPI TCP window in bytes (network/TCP-gamma); default: the topology's "
                        "tcp_window, else 4194304 (Linux's default maximum)")
    b.add_argument("--shared-data", choices=("auto", "yes", "no"), default="auto",
                   help="SMPI partial shared malloc for large buffers (checks every piece's private pages)")
    b.add_argument("--keep", help="keep the run directory (platform, schedules) here")
    b.add_argument("--doc", help="Markdown page to update (a marked section)")
    b.add_argument("--section", default="lab-run", help="lab suite: the section of --doc to write")
    b.add_argument("--plot", help="PNG of the results")
    b.add_argument("--json", action="store_true")
    _add_measure_parser(sub)
    _add_sweep_parser(sub)
    _add_pools_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = _build_parser().parse_args(argv)
        check_path_options(args)  # files.py: a FIFO --topology or a bad -o fails before any work
        return _COMMANDS[args.command](args)
    except InputError as e:
        print(f"collsched: error: {e.line()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RuntimeError as e:  # lab.runner.LabRunError: the run itself failed
        print(f"collsched: error: {e}", file=sys.stderr)
        return EXIT_RUN_FAILED
    except KeyboardInterrupt:
        print("collsched: interrupted", file=sys.stderr)
        return 130


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
    try:
        return int(text)
    except ValueError:
        raise InputError("--segments", text, "expected 1..65535 or auto") from None


def _time_arg(text: str | None, flag: str) -> float | None:
    if text is None:
        return None
    from .units import parse_time

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
                               lower_bound=a.json, model=a.model)
    except VerificationFailed as e:
        print(f"collsched: compiler bug: {a.algorithm} produced an invalid schedule: {e}", file=sys.stderr)
        return EXIT_INVALID
    if a.json:
        print(json.dumps(res.summary()))
    else:
        m = res.metrics
        segs = res.schedule.nseg
        tried = f" (of {', '.join(map(str, res.segments_tried))} tried)" if res.segments_tried else ""
        print(f"{out}: {a.algorithm}, {a.ranks} ranks, {segs} segment{'s' * (segs > 1)}{tried}, "
              f"{res.schedule.total_ops} ops, "
              f"{res.file_bytes} bytes; verified; predicted avg elapsed "
              f"{m.avg_elapsed_s * 1e3:.3f} ms; compiled in {res.compile_time_s * 1e3:.1f} ms")
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
        print(json.dumps({k: v for k, v in d.items() if v is not None}))
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
    print(f"file        {a.file} ({s.meta['file_bytes']} bytes, format {s.meta['version']})")
    print(f"collective  {s.collective}   algorithm {s.algorithm}   compiler {s.compiler_version}")
    print(f"ranks       {s.nranks}   segments/block {s.nseg}   ops {s.total_ops}   "
          f"duplex {'full' if s.full_duplex else 'half'}   background ops {'yes' if s.has_background else 'no'}")
    print(f"bytes/rank  {s.bytes_min}" + (f"..{s.bytes_max}" if s.bytes_max != s.bytes_min else ""))
    print(f"input hash  {s.input_hash.hex()}")
    if a.rank is not None and not 0 <= a.rank < s.nranks:
        raise InputError("--rank", str(a.rank), f"expected 0..{s.nranks - 1}")
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
        from .bench_compiler import run_grid_compile_bench

        if a.iterations is not None and a.iterations < 1:
            raise InputError("--iterations", str(a.iterations), "expected at least 1 run")
        return run_grid_compile_bench(Path(__file__).resolve().parents[2] / "topologies",
                                      a.iterations or 15, doc=a.doc, as_json=a.json)
    if a.suite == "compiler":
        from .bench_compiler import run_compiler_bench

        ranks = _int_list(a.ranks or "64,256,1024", "--ranks")
        return run_compiler_bench(ranks, a.algorithm, _size_arg(a.bytes or "1MiB"), doc=a.doc,
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
            from .benchdoc import replace_section

            replace_section(a.doc, "lab-scale", md)
        print(md)
        return EXIT_OK if all(r["data_ok"] for r in scale["results"]) else EXIT_INVALID
    from .lab.report import print_report, plot_report
    from .lab.runner import LabConfig, run_lab

    if a.collective != "allgather":
        raise InputError("--collective", a.collective, "expected allgather")
    ranks = _int_list(a.ranks or "8", "--ranks")
    if len(ranks) != 1 or ranks[0] < 2:
        raise InputError("--ranks", a.ranks, "expected one rank count of at least 2")
    a.iterations = 4 if a.iterations is None else a.iterations
    if a.iterations < 1 or a.flat_iterations < 0 or a.max_delay_ms < 0:
        raise InputError("--iterations", str(a.iterations), "expected iterations >= 1 and delays >= 0")
    cfg = LabConfig(backend=a.backend, topology=a.topology, ranks=ranks[0],
                    nbytes=_size_arg(a.bytes or "64KiB"), iterations=a.iterations,
                    max_delay_ms=a.max_delay_ms, seed=a.seed, flat_iterations=a.flat_iterations,
                    network_model=a.network_model, tcp_gamma=a.tcp_gamma,
                    shared_data=a.shared_data, workdir=a.keep)
    algorithms = [x for x in a.algorithms.split(",") if x]
    from rich.progress import Progress

    with Progress(transient=True, disable=a.json) as prog:
        task = prog.add_task("mini-benchmark", total=len(algorithms))
        report = run_lab(cfg, algorithms, progress=lambda name: prog.update(
            task, description=f"{cfg.backend}: {name}", advance=1))
    if a.json:
        print(json.dumps(report))
    else:
        print_report(report)
    if a.plot:
        plot_report(report, a.plot)
    if a.doc:
        import os

        from .benchdoc import replace_section
        from .lab.report import markdown

        rel = os.path.relpath(a.plot, os.path.dirname(os.path.abspath(a.doc))) if a.plot else None
        replace_section(a.doc, a.section, markdown(report, rel))
    return EXIT_OK if all(r["data_ok"] for r in report["results"]) else EXIT_INVALID


def _add_measure_parser(sub) -> None:
    from .measure import DEFAULT_GAP_BURST, DEFAULT_REPEATS, DEFAULT_SITE_FACTOR, DEFAULT_SIZES

    m = sub.add_parser("measure", help="measure latency/bandwidth between ranks, write a topology",
                       description="Run collsched-measure under real MPI or SimGrid SMPI: latency, "
                                   "bandwidth, os(m) and g(m) between rank pairs, in rounds of disjoint "
                                   "pairs; fit, group hosts into sites, write a topology YAML "
                                   "(docs/measure.md).")
    m.add_argument("--backend", choices=("mpi", "smpi"), required=True)
    m.add_argument("--ranks", type=int, required=True, help="number of ranks P (at least 2)")
    m.add_argument("--platform-from", help="smpi: topology YAML whose SimGrid platform is measured")
    m.add_argument("--sizes", default=DEFAULT_SIZES, help=f"message sizes (default {DEFAULT_SIZES})")
    m.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="runs per size; the median counts")
    m.add_argument("--gap-burst", type=int, default=DEFAULT_GAP_BURST,
                   help="messages per stream for g(m); 0 = do not measure g")
    m.add_argument("--site-factor", type=float, default=DEFAULT_SITE_FACTOR,
                   help="hosts within this factor of their nearest host's latency share a site")
    m.add_argument("--all-pairs", action="store_true",
                   help="sweep sizes for every rank pair, not one rank pair per host pair")
    m.add_argument("--network-model", default="CM02", help="smpi: CM02 (default), SMPI, LV08")
    m.add_argument("--tcp-gamma", type=int, help="smpi: TCP window in bytes (default: the topology's, else 4 MiB)")
    m.add_argument("--hostfile", help="mpi: host file for mpirun")
    m.add_argument("--overheads", action="store_true",
                   help="also write the measured os(m) and g(m) (medians over host pairs) to the topology")
    m.add_argument("--raw", help="also write the program's raw JSON here")
    m.add_argument("-o", "--output", required=True, help="topology YAML to write")
    m.add_argument("--json", action="store_true", help="print a JSON summary")


def cmd_measure(a) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from .measure import MeasureConfig, measure, parse_sizes, text_report

    cfg = MeasureConfig(backend=a.backend, ranks=a.ranks, sizes=parse_sizes(a.sizes), repeats=a.repeats,
                        gap_burst=a.gap_burst, site_factor=a.site_factor, all_pairs=a.all_pairs,
                        platform_from=a.platform_from, network_model=a.network_model,
                        tcp_gamma=a.tcp_gamma, hostfile=a.hostfile)
    with Progress(transient=True, disable=a.json, console=Console(stderr=True)) as prog:
        task = prog.add_task(f"measure ({a.backend})", total=None)

        def progress(phase, done, total):
            prog.update(task, description=f"{a.backend}: {phase} round", completed=done, total=total)

        report = measure(cfg, a.output, progress=progress, raw_output=a.raw, overheads=a.overheads)
    print(json.dumps(report) if a.json else text_report(report))
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
    s.add_argument("--iterations", type=int, default=sw.DEFAULT_ITERATIONS,
                   help=f"iterations per run (default {sw.DEFAULT_ITERATIONS}; the paper: {sw.PAPER_ITERATIONS})")
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--network-model", default="CM02", help="SMPI network model: CM02 (default), SMPI, LV08")
    s.add_argument("--cache", help="JSON cache of finished runs (default out/sweep/<topology>-cache.json)")
    s.add_argument("--fresh", action="store_true", help="drop the cache and run everything again")
    s.add_argument("--redo", default="", help="comma-separated algorithms to run again despite the cache")
    s.add_argument("--json", help="write the whole sweep (every run, every verdict) to this JSON file")
    s.add_argument("--plot", help="PNG heat map of the tables")
    s.add_argument("--doc", help="Markdown page to update (a marked section)")
    s.add_argument("--section", default="lab-sweep", help="the section of --doc to write")


def cmd_sweep(a) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from .lab import sweep as sw

    def delays(text):
        try:
            return tuple(float(x) for x in text.split(",") if x)
        except ValueError:
            raise InputError("--max-delays-ms", text, "expected comma-separated numbers") from None

    for out in (a.json, a.plot):
        if out and not Path(out).resolve().parent.is_dir():
            raise InputError(out, "", "expected a file in an existing directory")
    cfg = sw.SweepConfig(ranks=tuple(_int_list(a.ranks, "--ranks")), floats=sw.parse_floats(a.floats),
                         delays_ms=delays(a.max_delays_ms),
                         algorithms=tuple(x for x in a.algorithms.split(",") if x),
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
        write_atomic(a.json, json.dumps(sweep, indent=1))
    if a.plot:
        sw.plot_heatmap(sweep, a.plot)
    if a.doc:
        import os

        from .benchdoc import replace_section

        rel = os.path.relpath(a.plot, os.path.dirname(os.path.abspath(a.doc))) if a.plot else None
        replace_section(a.doc, a.section, sw.markdown(sweep, rel))
    runs = [r for c in sweep["cells"] for r in c["results"].values()]
    if any("error" in r for r in runs):
        return EXIT_RUN_FAILED
    return EXIT_OK if all(r.get("data_ok") for r in runs) else EXIT_INVALID


def _int_list(text: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise InputError(flag, text, "expected comma-separated integers") from None


def _add_pools_parser(sub) -> None:
    po = sub.add_parser("pools", help="print (and plot) the pool tree of a topology (Min3 paper, 5.1)",
                        description="Group the ranks of a topology into pools by link bandwidth, "
                                    "recursively, as Min3 schedules them (docs/grid.md).")
    po.add_argument("topology", help="topology YAML")
    po.add_argument("--ranks", type=int, help="number of ranks P (default: as the placement provides)")
    po.add_argument("--plot", help="PNG of the tree to write")
    po.add_argument("--json", action="store_true", help="print the tree as JSON")


def cmd_pools(a) -> int:
    from . import pools
    from .topology import load_topology

    if a.plot and not Path(a.plot).resolve().parent.is_dir():
        raise InputError(a.plot, "--plot", "expected a file in an existing directory")
    topo = load_topology(a.topology, a.ranks)
    tree = pools.pool_tree(topo)
    if a.json:
        print(json.dumps(pools.to_json(tree) | {"topology": topo.name}))
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
