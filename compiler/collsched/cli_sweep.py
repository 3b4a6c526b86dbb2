"""`collsched sweep`: the BDR paper's grid under SMPI, a thin layer over collsched.lab.sweep.

Registered by cli.py (add_parsers, COMMANDS)."""
from __future__ import annotations

from pathlib import Path

from . import resources
from .cli_args import _algorithm_list, _float_opt, _int_list, _int_opt, _json, _plot_path, h
from .errors import InputError
from .files import write_atomic

EXIT_OK, EXIT_INVALID, EXIT_RUN_FAILED = 0, 1, 3


def add_parsers(sub) -> None:
    from .lab import sweep as sw

    s = sub.add_parser("sweep", help="the BDR paper's grid under SMPI (the defaults: all of it, about an "
                                     "hour), printed as its Tables 3 and 4",
                       description="Run the mini-benchmark for every P x N x maxDelay x algorithm of the "
                                   "BDR paper (section 4) under SimGrid SMPI and print, per cell, the fastest "
                                   "algorithm and a PAP-aware winner's speedup over the best regular one "
                                   "(docs/sweep.md). The defaults run the paper's full grid: about an hour "
                                   "on a 2-core machine. Results are cached per run: an interrupted sweep "
                                   "resumes. A quick example: collsched sweep --ranks 4,8 --floats 128K "
                                   "--max-delays-ms 0,5 --algorithms ring,bdr")
    ranks = ",".join(map(str, sw.PAPER_RANKS))
    floats = ",".join(sw.floats_label(n) for n in sw.PAPER_FLOATS)
    delays = ",".join(f"{d:g}" for d in sw.PAPER_DELAYS_MS)
    algs = ",".join(sw.PAPER_ALGORITHMS)
    s.add_argument("--topology", default=None,
                   help=h("topology YAML (with --platform: the one the compiler and the models use; required)",
                          "topologies/tryton-48.yaml", "--topology topologies/wan-3x16.yaml"))
    s.add_argument("--platform", default=None,
                   help=h("a SimGrid platform XML of your own to run every cell on instead of the one "
                          "generated from --topology, ranks placed by --hostfile (docs/sweep.md)",
                          "none: the platform generated from --topology",
                          "--platform four-site.xml --hostfile four-site.hosts"))
    s.add_argument("--hostfile", default=None,
                   help=h("with --platform: SMPI's host file, lines `host` or `host:count` naming the "
                          "platform's hosts; rank r on the r-th slot", "none",
                          "--hostfile four-site.hosts"))
    s.add_argument("--ranks", default=ranks, help=h("comma-separated P values", f"the paper's, {ranks}", "--ranks 4,8"))
    s.add_argument("--floats", default=floats,
                   help=h("floats gathered in total, comma-separated (128K = 131072); each rank "
                          "contributes floor(4 N / P) bytes", f"the paper's, {floats}", "--floats 128K"))
    s.add_argument("--max-delays-ms", default=delays,
                   help=h("comma-separated maxDelay values (ms)", f"the paper's, {delays}", "--max-delays-ms 0,5"))
    s.add_argument("--algorithms", default=algs,
                   help=h("comma-separated: compiled algorithms, native, native:NAME", f"the paper's, {algs}",
                          "--algorithms ring,bdr"))
    s.add_argument("--iterations", type=_int_opt("--iterations", 1, 1_000_000), default=sw.DEFAULT_ITERATIONS,
                   help=h(f"iterations per run (the paper: {sw.PAPER_ITERATIONS})", str(sw.DEFAULT_ITERATIONS),
                          "--iterations 8"))
    s.add_argument("--seed", type=_int_opt("--seed", 0, 2**63 - 1), default=1,
                   help=h("seed of the arrival patterns", "1", "--seed 2"))
    s.add_argument("--network-model", default="CM02",
                   help=h("SimGrid's network model: CM02, SMPI or LV08 (the lab's rule for each: "
                          "docs/lab.md)", "CM02", "--network-model SMPI"))
    s.add_argument("--cache", help=h("JSON cache of finished runs", "out/sweep/<topology>-cache.json "
                                     "(other models than CM02: <topology>-<model>-cache.json)",
                                     "--cache out/my-cache.json"))
    s.add_argument("--fresh", action="store_true", help=h("drop the cache and run everything again", "off",
                                                          "--fresh"))
    s.add_argument("--redo", default="", help=h("comma-separated algorithms to run again despite the cache",
                                                "none", "--redo bdr,bslb"))
    s.add_argument("--json", help=h("write the whole sweep (every run, every verdict) to this JSON file",
                                    "none", "--json out/sweep.json"))
    s.add_argument("--plot", type=_plot_path("--plot"), help=h("PNG heat map of the tables", "none",
                                                               "--plot sweep.png"))
    s.add_argument("--doc", help=h("Markdown page to update (a marked section)", "none", "--doc docs/benchmarks.md"))
    s.add_argument("--section", default="lab-sweep",
                   help=h("the section of --doc to write", "lab-sweep", "--section lab-sweep"))


def cmd_sweep(a) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from .lab import sweep as sw

    def delays(text):
        parse = _float_opt("--max-delays-ms", 0, 3.6e6)
        return tuple(parse(x) for x in text.split(","))  # an empty item is refused too

    if a.platform is not None and a.topology is None:
        raise InputError("--platform", a.platform, "expected --topology with it: the compiler and the "
                                                   "cost models predict from a topology (e.g. one "
                                                   "`collsched measure` wrote for the platform)")
    for out in (a.json, a.plot):
        if out and not Path(out).resolve().parent.is_dir():
            raise InputError(out, "", "expected a file in an existing directory")
    cfg = sw.SweepConfig(ranks=tuple(_int_list(a.ranks, "--ranks", lo=2)), floats=sw.parse_floats(a.floats),
                         delays_ms=delays(a.max_delays_ms),
                         algorithms=tuple(_algorithm_list(a.algorithms)),
                         iterations=a.iterations, seed=a.seed,
                         topology=a.topology or "topologies/tryton-48.yaml",
                         network_model=a.network_model, cache=a.cache, platform=a.platform,
                         hostfile=a.hostfile)
    root = resources.source_root() or Path.cwd()  # out/sweep/ (the cache) lives under it
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


COMMANDS = {"sweep": cmd_sweep}
