"""The command line's options: strict argument types and the parsers of the core commands.

Every option's help says its default and gives an example (tests/compiler/test_cli.py
checks that for every option of every command). The lab's commands whose defaults live in
the lab (measure, sweep) add their parsers in cli.py: the core never imports the lab.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from .errors import InputError

MAX_RANKS = 1 << 24  # the schedule format's nranks (docs/schedule-format.md)
_INT = re.compile(r"[+-]?[0-9]{1,30}", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?", re.ASCII)
# Formats a plot may be written in (by its suffix; none: PNG), all matplotlib's Agg and
# vector backends write.
PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".svgz", ".eps", ".ps", ".jpg", ".jpeg", ".tif", ".tiff", ".webp")


def h(text: str, default: str, example: str) -> str:
    """An option's help: what it is, its default, an example."""
    return f"{text} (default: {default}; e.g. {example})"


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


class _JsonWithBound(argparse.Action):
    """compile --json: the JSON summary, and the lower bound it reports (as --lower-bound).
    The LP takes 0.1-1.5 s at 20-48 ranks, more than a fast compile, so a plain compile
    skips it; a JSON summary always carries the gaps (docs/lab.md, "Gaps to the lower bound")."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.json = True
        namespace.lower_bound = True


class UsageError(InputError):
    """A usage error: `collsched: error: COMMAND: message` (no doubled program name)."""

    def line(self) -> str:
        return f"{self.source}: {self.expected}" if self.source else self.expected


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit status 2."""

    def error(self, message):  # noqa: D401 - argparse API
        raise UsageError(self.prog.partition(" ")[2], "", message)


def new_parser(version: str):
    """The top-level parser and its subparsers, with the core commands added."""
    p = _Parser(prog="collsched",
                description="Compile, verify, simulate and inspect MPI collective schedules. "
                            "'collsched COMMAND --help' describes each command's options.")
    p.add_argument("-V", "--version", action="version", version=f"collsched {version}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_compile(sub)
    _add_inspect(sub)
    _add_plot_pools(sub)
    _add_bench(sub)
    return p, sub


# Real-MPI launches (lab/launch.py; docs/lab.md, "Launchers"): bench --backend mpi and measure.
BIND_TO = ("none", "hwthread", "core", "l1cache", "l2cache", "l3cache", "socket", "numa", "board")
LAUNCHER_HELP = ("--backend mpi: how ranks start: mpirun, mpiexec (Open MPI's) or srun, or a template with "
                 "{ranks}, {program} (a word of its own) and {hostfile}, e.g. 'mpirun -np {ranks} "
                 "--map-by node {program}'; Open MPI's get --oversubscribe only when P exceeds the "
                 "slots (the host file's, else this machine's cores) (docs/lab.md)")
HOSTFILE_HELP = ("--backend mpi: host file, lines `host [slots=N]`; a preset passes it in its own "
                 "syntax, a template names {hostfile} (refused for srun: SLURM places ranks); "
                 "--backend smpi with --platform: SMPI's host file, lines `host` or `host:count` "
                 "naming the platform's hosts, rank r on the r-th slot")
PLATFORM_HELP = ("--backend smpi: a SimGrid platform XML of your own to run instead of the one generated "
                 "from --topology (which the compiler and the models still use: required), ranks "
                 "placed by --hostfile (docs/lab.md, \"Your own SimGrid platform\")")
BIND_HELP = ("--backend mpi: bind ranks (Open MPI's --bind-to; srun's --cpu-bind: none, hwthread, core, "
             "socket, numa); refused for a launcher without such an option")
_TOPOLOGY = h("topology YAML", "a homogeneous cluster: 1 Gbit/s, 50 us, full duplex",
              "--topology topologies/tryton-48.yaml")
_PAP = h("arrival pattern YAML", "every rank arrives at once", "--pap arrivals.yaml")
_DUPLEX = h("override the topology's duplex mode: half or full", "the topology's (full without one)",
            "--duplex half")


def _add_compile(sub) -> None:
    from .algorithms import REGISTRY

    from .intergroup import PLANS

    algs = ", ".join(sorted(REGISTRY))
    inter = ", ".join(sorted(PLANS) + ["kang-grid"])
    c = sub.add_parser("compile", help="generate a verified schedule file",
                       description=f"Generate, verify and simulate a schedule, then write it. "
                                   f"Algorithms: {algs}; intercommunicator collectives (--collective "
                                   f"inter-allgather|inter-allgatherv --groups P:Q): {inter}; alltoall, "
                                   f"bcast, reduce and allreduce (--collective; their algorithms: "
                                   f"collsched algorithms; without --topology timed on the default "
                                   f"cluster). Example: "
                                   f"collsched compile --algorithm ring --ranks 16 --bytes 64KiB -o ring.sched")
    c.add_argument("--collective", default="allgather", choices=("allgather",) + COLL_COLLECTIVES + INTER_COLLECTIVES,
                   help=h("allgather; alltoall, bcast, reduce or allreduce (format 1.2: `collsched "
                          "algorithms` lists their algorithms; docs/collectives.md); or an "
                          "intercommunicator collective over two groups (--groups; docs/intergroup.md)",
                          "allgather", "--collective allreduce"))
    c.add_argument("--root", type=_int_opt("--root", 0, MAX_RANKS - 1),
                   help=h("bcast, reduce: the root rank", "0", "--root 3"))
    c.add_argument("--elem-bytes", type=_int_opt("--elem-bytes", 1, 1 << 20), default=None,
                   help=h("reduce, allreduce: bytes of one element of the datatype (segments never "
                          "split an element; the models time nbytes / elem-bytes elements)", "4",
                          "--elem-bytes 8"))
    _add_group_options(c)
    c.add_argument("--algorithm", required=True,
                   help=h(f"one of: {algs}; or auto: compile the applicable ones, write the fastest "
                          f"predicted (--json: auto); alltoall, bcast, reduce, allreduce: the names "
                          f"`collsched algorithms --collective C` lists, or auto", "none, required",
                          "--algorithm ring"))
    c.add_argument("--ranks", type=_int_opt("--ranks", 2, MAX_RANKS),
                   help=h(f"number of ranks P, 2..{MAX_RANKS}", "none, required (intergroup: --groups "
                          "instead)", "--ranks 16"))
    c.add_argument("--bytes", required=True,
                   help=h("bytes per rank: B, or MIN:MAX for one file serving the range; units such "
                          "as KiB, MiB; alltoall: bytes of one block per rank pair; bcast, reduce, "
                          "allreduce: bytes of the whole vector", "none, required",
                          "--bytes 64KiB or --bytes 1KiB:1MiB"))
    c.add_argument("--form", choices=("explicit", "compact", "auto"), default="explicit",
                   help=h("explicit: every rank's operations in the file; compact: a 56-byte description "
                          "each rank generates its list from at setup (regular algorithms on the default "
                          "cluster; docs/compact.md); auto: compact from 1024 ranks where it applies",
                          "explicit", "--form compact"))
    c.add_argument("--segments", default="auto",
                   help=h("segments per block (pipelining): a count 1..65535, or auto (min3 on a "
                          "topology whose TCP window caps a path tries 1-16 and keeps the fastest "
                          "predicted; else 1; alltoall, bcast, reduce, allreduce: 1, 2, 4, ... doubled "
                          "while the prediction gains more than 1%%, per chunk as the algorithm counts "
                          "them)", "auto", "--segments 4"))
    c.add_argument("--topology", help=_TOPOLOGY)
    c.add_argument("--pap", help=_PAP)
    c.add_argument("--duplex", choices=("half", "full"), help=_DUPLEX)
    c.add_argument("--tau", help=h("bdr: time to move one segment", "from the cost model", "--tau 300us"))
    c.add_argument("-o", "--output", required=True,
                   help=h("schedule file to write (replaced atomically; a warning names files of the "
                          "same directory whose ranks and byte range overlap it)", "none, required",
                          "-o schedules/ring-16.sched"))
    c.add_argument("--model", choices=("auto", "dag", "fluid"), default=None,
                   help=h("cost model that picks and predicts: dag (ports serve one transfer after "
                          "another; fast), fluid (flows sharing ports and links as SimGrid does), or "
                          "auto: the dag model searches and, where it is known to be off (shared "
                          "wide-area links, size-dependent costs), the fluid model re-times the "
                          "finalists, picks and predicts; --json's model_choice says which and why",
                          "auto; intergroup collectives fluid (the dag model is up to 43%% fast where a "
                          "rank sends several messages at once: docs/intergroup.md)", "--model dag"))
    c.add_argument("--engine", choices=("pat", "none", "ahead"), default="pat",
                   help=h("who runs the background operations (BDR pre-steps, arrival-aware min3's "
                          "early receives): pat, the PAT engine before the rank arrives; none, "
                          "every operation inside the call, as the preload library and a schedule "
                          "cache run it (the model times that); ahead, a cache's receive-ahead: "
                          "only each rank's leading background receives early (docs/cache.md)",
                          "pat", "--engine none"))
    c.add_argument("--lower-bound", action="store_true",
                   help=h("also compute the LP lower bound on the run time under the cost model, "
                          "and the gap of the prediction to it (docs/grid-baselines.md); alltoall, "
                          "bcast, reduce, allreduce: always computed (collectives/bounds.py)",
                          "off; on with --json", "--lower-bound"))
    c.add_argument("--json", action=_JsonWithBound,
                   help=h("print a JSON summary; allgather: with the LP lower bound and the prediction's "
                          "gaps to it (lower_bound_s, gap, lower_bound_avg_elapsed_s, gap_avg_elapsed; "
                          "null with lower_bound_note where skipped, e.g. above 1024 ranks; the LP's "
                          "time in lower_bound_time_s, not in compile_time_s)",
                          "off: one line of text", "--json"))


def _add_inspect(sub) -> None:
    v = sub.add_parser("verify", help="check schedule files (exit 0 all valid, 1 any invalid)",
                       description="Read and prove each file whole. One file: a line per violation. "
                                   "Several: one line per file (valid on stdout; the first violation "
                                   "and how many more on stderr). Exit 0 if all are valid, 1 if any "
                                   "is invalid, else 2 if any cannot be read. "
                                   "Example: collsched verify schedules/*.sched")
    v.add_argument("file", nargs="+", help=h("schedule files", "none, at least one", "ring.sched bruck.sched"))

    s = sub.add_parser("simulate", help="predict times of a schedule under the cost model",
                       description="Example: collsched simulate ring.sched --topology topologies/tryton-48.yaml")
    s.add_argument("file", help=h("schedule file", "none, required", "ring.sched"))
    s.add_argument("--topology", help=_TOPOLOGY)
    s.add_argument("--pap", help=_PAP)
    s.add_argument("--bytes", help=h("bytes per rank (alltoall: per block; bcast, reduce, allreduce: "
                                     "the vector)", "the largest the file serves", "--bytes 64KiB"))
    s.add_argument("--duplex", choices=("half", "full"), help=_DUPLEX)
    s.add_argument("--elem-bytes", type=_int_opt("--elem-bytes", 1, 1 << 20), default=None,
                   help=h("reduce, allreduce: bytes of one element of the datatype", "4", "--elem-bytes 8"))
    s.add_argument("--model", choices=("dag", "fluid"), default=None,
                   help=h("dag: ports serve one transfer after another, what compile reports; fluid: "
                          "the execution replayed with flows sharing ports and links max-min fairly, "
                          "as SimGrid does (slower; docs/lab.md)",
                          "dag; intergroup, alltoall, bcast, reduce and allreduce schedules fluid",
                          "--model fluid"))
    s.add_argument("--json", action="store_true", help=h("print JSON", "off: text", "--json"))

    sh = sub.add_parser("show", help="print a schedule file's header and operations (a directory: "
                                     "what its schedules cover, as ls)",
                        description="Example: collsched show ring.sched --rank 0; collsched show "
                                    "schedules/ (the same listing as collsched ls schedules/)")
    sh.add_argument("file", help=h("schedule file, or a directory of them", "none, required",
                                   "ring.sched"))
    sh.add_argument("--rank", type=_int_opt("--rank", 0, MAX_RANKS - 1),
                    help=h("only this rank's operations", "every rank", "--rank 3"))

    ls = sub.add_parser("ls", help="list what a schedules directory covers, as the runtime selects",
                        description="Every valid schedule of the directory in the order the runtime "
                                    "tries them (names in byte order, not starting with '.'): "
                                    "collective, ranks, byte range, algorithm, and where an earlier "
                                    "file wins over an overlapping range; files the runtime skips, "
                                    "with why. Reads headers only. Example: collsched ls schedules/")
    ls.add_argument("directory", help=h("schedules directory (as COLLSCHED_SCHEDULES names it)",
                                        "none, required", "schedules/"))


def _add_plot_pools(sub) -> None:
    pl = sub.add_parser("plot", help="draw a Gantt chart of the simulated schedule",
                        description="Example: collsched plot ring.sched -o ring.png")
    pl.add_argument("file", help=h("schedule file", "none, required", "ring.sched"))
    pl.add_argument("-o", "--output", required=True, type=_plot_path("-o"),
                    help=h("figure to write: PNG, or by the suffix: .pdf, .svg, ...", "none, required",
                           "-o ring.png"))
    pl.add_argument("--topology", help=_TOPOLOGY)
    pl.add_argument("--pap", help=_PAP)
    pl.add_argument("--bytes", help=h("bytes per rank", "the largest the file serves", "--bytes 64KiB"))
    pl.add_argument("--duplex", choices=("half", "full"), help=_DUPLEX)
    pl.add_argument("--max-ranks", type=_int_opt("--max-ranks", 1, 4096), default=64,
                    help=h("lanes to draw, 1..4096", "64", "--max-ranks 16"))

    po = sub.add_parser("pools", help="print (and plot) the pool tree of a topology (Min3 paper, 5.1)",
                        description="Group the ranks of a topology into pools by link bandwidth, "
                                    "recursively, as Min3 schedules them (docs/grid.md). Example: "
                                    "collsched pools topologies/three-site-grid.yaml")
    po.add_argument("topology", help=h("topology YAML", "none, required", "topologies/three-site-grid.yaml"))
    po.add_argument("--ranks", type=_int_opt("--ranks", 1, MAX_RANKS),
                    help=h("number of ranks P", "as the placement provides", "--ranks 32"))
    po.add_argument("--plot", type=_plot_path("--plot"), help=h("PNG of the tree to write", "none", "--plot pools.png"))
    po.add_argument("--json", action="store_true", help=h("print the tree as JSON", "off: text", "--json"))


def _add_bench(sub) -> None:
    b = sub.add_parser("bench", help="run the lab mini-benchmark (SMPI or MPI), or the compiler benchmark",
                       description="lab (default): the BDR paper's mini-benchmark for each algorithm in "
                                   "--algorithms, on SimGrid SMPI or real MPI, with measured and predicted "
                                   "times. compiler: compile+verify+simulate+write time and memory. Example: "
                                   "collsched bench --ranks 8 --bytes 64KiB --algorithms ring,bruck,native")
    _add_group_options(b)
    b.add_argument("--suite", choices=("lab", "compiler", "compile-grid", "model", "scale", "recurring",
                                       "intergroup", "scale-compact", "platforms"),
                   default="lab",
                   help=h("lab: the mini-benchmark; compiler: compile time and memory; compile-grid: Min3's "
                          "compile time on the bundled grids, fresh processes, C kernels and "
                          "Python (records --doc); model: every baseline on every bundled topology, "
                          "predicted vs SMPI (records --doc); scale: P=256 x 1 MiB under SMPI, wall "
                          "time and memory (records --doc); recurring: recurring load patterns, trace -> "
                          "cache build -> the runtime's selection, against native, regular, bdr and the "
                          "oracle (docs/lab.md; records --doc); intergroup: the Kang paper's settings "
                          "1-8 (docs/intergroup.md; records --doc); scale-compact: compact schedules at "
                          "--ranks (e.g. 1024,4096) x 64 KiB under SMPI against native selectors, sampled "
                          "data checks, wall time and memory (docs/compact.md; records --doc); platforms: "
                          "measure -> compile -> run on the bundled multi-site SimGrid platforms, or on "
                          "--platform/--hostfile with --topology its true description (docs/platforms.md; "
                          "records --doc)", "lab",
                          "--suite compiler"))
    b.add_argument("--backend", choices=("smpi", "mpi"), default="smpi",
                   help=h("SimGrid SMPI or real MPI (through --launcher)", "smpi", "--backend mpi"))
    b.add_argument("--launcher", default=None,
                   help=h(LAUNCHER_HELP, "mpirun", "--launcher srun or --launcher 'mpiexec -n {ranks} "
                                                   "--map-by node {program}'"))
    b.add_argument("--hostfile", default=None, help=h(HOSTFILE_HELP, "none: the launcher's own placement",
                                                      "--hostfile hosts.txt"))
    b.add_argument("--bind-to", choices=BIND_TO, default=None,
                   help=h(BIND_HELP, "none added: the launcher's own", "--bind-to core"))
    b.add_argument("--platform", default=None,
                   help=h(PLATFORM_HELP, "none: the platform generated from --topology",
                          "--platform four-site.xml --hostfile four-site.hosts"))
    b.add_argument("--topology", help=_TOPOLOGY)
    b.add_argument("--collective", default="allgather", help=h("collective", "allgather", "--collective allgather"))
    b.add_argument("--ranks", help=h("lab: P; compiler: comma-separated list", "lab 8; compiler 64,256,1024",
                                     "--ranks 16"))
    b.add_argument("--bytes", help=h("bytes per rank", "lab 64KiB; compiler 1MiB; recurring smpi "
                                                       "4 x floor(256Ki / ranks) (37448 at 28 ranks), mpi 64KiB",
                                     "--bytes 1MiB"))
    b.add_argument("--algorithms", default=None,
                   help=h("comma-separated: compiled algorithms, native, native:NAME, cache:DIR, "
                          "cache-pat:DIR, oracle, oracle-pat; intergroup: kang, kang-v, root-gather, "
                          "root-gather-mpich, kang-grid, native", "ring,bruck,native; intergroup: the "
                          "collective's Kang algorithm, root-gather, root-gather-mpich, native",
                          "--algorithms bdr,ring,native:ompi"))
    b.add_argument("--algorithm", default="ring", help=h("compiler suite: the algorithm to compile", "ring",
                                                         "--algorithm min3"))
    b.add_argument("--pap", help=h("lab: replay the iterations of this arrival-pattern file or arrival "
                                   "trace, in order, instead of seeded delays (its rank count must be "
                                   "--ranks; --iterations defaults to its iteration count)",
                                   "seeded delays (--max-delay-ms, --seed)", "--pap run.trace"))
    b.add_argument("--max-delay-ms", type=_float_opt("--max-delay-ms", 0, 3.6e6), default=0.0,
                   help=h("maxDelay of the arrival pattern, ms", "0", "--max-delay-ms 5"))
    b.add_argument("--iterations", type=_int_opt("--iterations", 1, 1_000_000), default=None,
                   help=h("lab: iterations; compile-grid: fresh-process runs per case (a third of it at "
                          "1024 ranks); recurring: evaluation iterations", "lab 4 (with --pap: the file's); "
                          "compile-grid 15; recurring 120 (mpi 30)", "--iterations 8"))
    b.add_argument("--flat-iterations", type=_int_opt("--flat-iterations", 0, 1_000_000), default=2,
                   help=h("extra iterations without delay, for the absorption time", "2", "--flat-iterations 0"))
    b.add_argument("--seed", type=_int_opt("--seed", 0, 2**63 - 1), default=1,
                   help=h("seed of the arrival pattern", "1", "--seed 7"))
    b.add_argument("--network-model", default=None,
                   help=h("SimGrid's network model: CM02, SMPI or LV08 (the lab's rule for each: "
                          "docs/lab.md); --suite model: a comma-separated list",
                          "CM02; --suite model: CM02,SMPI", "--network-model SMPI"))
    b.add_argument("--tcp-gamma", type=_int_opt("--tcp-gamma", 1, 2**62), default=None,
                   help=h("SMPI TCP window in bytes (network/TCP-gamma)", "the topology's tcp_window, else "
                          "4194304 (Linux's default maximum)", "--tcp-gamma 131072"))
    b.add_argument("--shared-data", choices=("auto", "yes", "no"), default="auto",
                   help=h("SMPI partial shared malloc for large buffers (checks every piece's private "
                          "pages)", "auto", "--shared-data no"))
    b.add_argument("--keep", help=h("keep the run directory (platform, schedules) here", "a temporary one, removed",
                                    "--keep out/run1"))
    b.add_argument("--doc", help=h("Markdown page to update (a marked section)", "none", "--doc docs/benchmarks.md"))
    b.add_argument("--section", default=None,
                   help=h("lab and model suites: the section of --doc to write", "lab: lab-run; model: "
                          "lab-model-check, with --measured lab-model-check-measured", "--section lab-run"))
    b.add_argument("--measured", metavar="DIR",
                   help=h("model suite: predict every case with the topology `collsched measure` wrote "
                          "for it, DIR/<topology>-<MODEL>.yaml (measured into DIR when missing); "
                          "SimGrid still runs the bundled topology", "off: the bundled topologies predict",
                          "--measured out/measured"))
    b.add_argument("--plot", type=_plot_path("--plot"), help=h("PNG of the results", "none", "--plot bench.png"))
    b.add_argument("--json", action="store_true", help=h("print JSON", "off: a table", "--json"))


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


INTER_COLLECTIVES = ("inter-allgather", "inter-allgatherv")
COLL_COLLECTIVES = ("alltoall", "bcast", "reduce", "allreduce")  # format 1.2: cli_coll.py


def _add_group_options(p) -> None:
    """The two groups of an intercommunicator collective (compile and bench)."""
    p.add_argument("--groups", metavar="P:Q",
                   help=h("intercommunicator collectives: ranks of group A and of group B",
                          "none, required for inter-*", "--groups 25:7"))
    p.add_argument("--bytes-b", metavar="B",
                   help=h("intercommunicator collectives: bytes per rank of group B", "--bytes",
                          "--bytes-b 4MiB"))
    p.add_argument("--sizes", metavar="RULE|FILE",
                   help=h("inter-allgatherv: block sizes: equal, arithmetic (rank i of a group "
                          "sends (i + 1) x --bytes (B: --bytes-b)) or a YAML file with lists a: and b:",
                          "equal", "--sizes arithmetic"))
