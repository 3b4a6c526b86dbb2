"""`collsched measure`: a topology from measurements, a thin layer over collsched.lab.measure.

Registered by cli.py (add_parsers, COMMANDS)."""
from __future__ import annotations

from .cli_args import (BIND_HELP, BIND_TO, HOSTFILE_HELP, LAUNCHER_HELP, MAX_RANKS, _float_opt, _int_opt,
                       _json, h)

EXIT_OK = 0


def add_parsers(sub) -> None:
    from .lab.measure import (DEFAULT_GAP_BURST, DEFAULT_PER_OCTAVE, DEFAULT_REPEATS, DEFAULT_SITE_FACTOR,
                              DEFAULT_REFINE, DEFAULT_SIZES, DEFAULT_SWEEP, DEFAULT_SWEEP_BUDGET_S,
                              DEFAULT_SMPI_SWEEP_BUDGET_S, MAX_REFINE)

    m = sub.add_parser("measure", help="measure latency/bandwidth between ranks, write a topology",
                       description="Run collsched-measure under real MPI or SimGrid SMPI: latency, "
                                   "bandwidth, os(m) and g(m) between rank pairs, in rounds of disjoint "
                                   "pairs; fit, group hosts into sites, write a topology YAML "
                                   "(docs/measure.md). A dense size sweep on one pair per link class "
                                   "gives size-dependent costs: a piecewise fit by size, written as the "
                                   "topology's message_costs tables. Then concurrent flows between sites "
                                   "(collsched-flows) find each wide-area path's capacity, which site pairs "
                                   "share a bottleneck and the TCP window: the file is written in the links "
                                   "form. Examples: collsched measure --backend mpi --ranks 8 -o measured.yaml; "
                                   "collsched measure --backend smpi --ranks 48 --platform four-site.xml "
                                   "--hostfile four-site.hosts -o measured.yaml")
    m.add_argument("--backend", choices=("mpi", "smpi"), required=True,
                   help=h("real MPI (mpirun) or SimGrid SMPI", "none, required", "--backend smpi"))
    m.add_argument("--ranks", type=_int_opt("--ranks", 2, MAX_RANKS), required=True,
                   help=h("number of ranks P (at least 2)", "none, required", "--ranks 8"))
    m.add_argument("--platform-from", help=h("smpi: topology YAML whose generated SimGrid platform is measured",
                                             "none; with smpi this or --platform is required",
                                             "--platform-from topologies/wan-3x16.yaml"))
    m.add_argument("--platform", help=h("smpi: a SimGrid platform XML to measure (any zones, clusters, routes, "
                                        "sharing policies); ranks placed by --hostfile",
                                        "none: the platform generated from --platform-from",
                                        "--platform four-site.xml --hostfile four-site.hosts"))
    m.add_argument("--form", choices=("links", "matrix"), default=None,
                   help=h("the written topology: links = sites with their LAN, wide-area links (capacities and "
                          "shared bottlenecks from the capacity probes), routes, tcp_window; matrix = per host "
                          "pair latency and one-flow bandwidth", "links (matrix with --capacity off)",
                          "--form matrix"))
    m.add_argument("--capacity", choices=("on", "off"), default="on",
                   help=h("concurrent-flow probes between sites: capacity of each ordered site pair, shared "
                          "bottlenecks, TCP window (docs/measure.md, Capacity)", "on", "--capacity off"))
    m.add_argument("--sizes", default=DEFAULT_SIZES,
                   help=h("message sizes of the latency/bandwidth fit (every swept pair)", DEFAULT_SIZES,
                          "--sizes 1,64KiB"))
    m.add_argument("--sweep", default=DEFAULT_SWEEP,
                   help=h("size range MIN:MAX of the dense sweep (0 B and log-spaced sizes, one pair per "
                          "link class) whose piecewise fit becomes the topology's message_costs; off = "
                          "constant costs", DEFAULT_SWEEP, "--sweep 1:1MiB, --sweep off"))
    m.add_argument("--per-octave", type=_int_opt("--per-octave", 1, 64), default=DEFAULT_PER_OCTAVE,
                   help=h("sweep sizes per doubling (a breakpoint is found within one step)",
                          str(DEFAULT_PER_OCTAVE), "--per-octave 16"))
    m.add_argument("--sweep-budget", type=_float_opt("--sweep-budget", 1e-9, 1800), default=None,
                   help=h("seconds: a swept direction stops after the first size whose round trip takes "
                          "longer (bounds the run on slow links; SMPI's seconds are simulated, almost free)",
                          f"{DEFAULT_SWEEP_BUDGET_S:g} (mpi), {DEFAULT_SMPI_SWEEP_BUDGET_S:g} (smpi)",
                          "--sweep-budget 2"))
    m.add_argument("--refine", type=_int_opt("--refine", 0, MAX_REFINE), default=DEFAULT_REFINE,
                   help=h("bisection runs after the sweep, each measuring the middle of every gap "
                          "around a fitted breakpoint (each halves the gaps; 0 = none)", str(DEFAULT_REFINE),
                          "--refine 0"))
    m.add_argument("--gamma", choices=("on", "off"), default="on",
                   help=h("also time MPI_Reduce_local (collsched-gamma) and write the reduction cost to the "
                          "topology's reduction: section (docs/measure.md, Reduction cost)", "on",
                          "--gamma off"))
    m.add_argument("--repeats", type=_int_opt("--repeats", 1, 1_000_000), default=DEFAULT_REPEATS,
                   help=h("runs per size; the median counts", str(DEFAULT_REPEATS), "--repeats 9"))
    m.add_argument("--gap-burst", type=_int_opt("--gap-burst", 0, 1_000_000), default=DEFAULT_GAP_BURST,
                   help=h("messages per stream for g(m); 0 = do not measure g", str(DEFAULT_GAP_BURST),
                          "--gap-burst 0"))
    m.add_argument("--site-factor", type=_float_opt("--site-factor", 1, 1e12), default=DEFAULT_SITE_FACTOR,
                   help=h("hosts within this factor of their nearest host's latency share a site",
                          f"{DEFAULT_SITE_FACTOR:g}", "--site-factor 10"))
    m.add_argument("--all-pairs", action="store_true",
                   help=h("sweep sizes for every rank pair, not one rank pair per host pair", "off",
                          "--all-pairs"))
    m.add_argument("--network-model", default="CM02",
                   help=h("smpi: CM02, SMPI, LV08", "CM02", "--network-model LV08"))
    m.add_argument("--tcp-gamma", type=_int_opt("--tcp-gamma", 1, 2**62),
                   help=h("smpi: TCP window in bytes", "the topology's, else 4 MiB", "--tcp-gamma 131072"))
    m.add_argument("--launcher", default=None,
                   help=h(LAUNCHER_HELP, "mpirun", "--launcher 'mpiexec -n {ranks} {program}'"))
    m.add_argument("--hostfile", help=h(HOSTFILE_HELP + "; with --backend smpi --platform: the SimGrid host of "
                                        "each rank, one per line (host:count allowed)",
                                        "none: the launcher's own placement", "--hostfile hosts.txt"))
    m.add_argument("--bind-to", choices=BIND_TO, default=None,
                   help=h(BIND_HELP, "none added: the launcher's own", "--bind-to core"))
    m.add_argument("--overheads", action="store_true",
                   help=h("also write the measured os(m) and g(m) (medians over host pairs) to the "
                          "topology", "off", "--overheads"))
    m.add_argument("--raw", help=h("also write the program's raw JSON here", "none", "--raw raw.json"))
    m.add_argument("-o", "--output", required=True, help=h("topology YAML to write", "none, required",
                                                          "-o measured.yaml"))
    m.add_argument("--json", action="store_true", help=h("print a JSON summary", "off: text", "--json"))


def cmd_measure(a) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from .model import budget
    from .lab.measure import (MeasureConfig, check_config, default_sweep_budget, measure, parse_sizes,
                              parse_sweep, text_report)

    budget.check(a.ranks, 0, what=f"{a.ranks} ranks' measured matrices")

    cfg = MeasureConfig(backend=a.backend, ranks=a.ranks, sizes=parse_sizes(a.sizes), repeats=a.repeats,
                        gap_burst=a.gap_burst, site_factor=a.site_factor, all_pairs=a.all_pairs,
                        platform_from=a.platform_from, platform=a.platform, network_model=a.network_model,
                        tcp_gamma=a.tcp_gamma, hostfile=a.hostfile, launcher=a.launcher, bind_to=a.bind_to,
                        fit_sizes=parse_sweep(a.sweep, a.per_octave), fit_budget_s=(a.sweep_budget if a.sweep_budget is not None
                                      else default_sweep_budget(a.backend)),
                        refine=a.refine, capacity=a.capacity == "on",
                        form=a.form or ("links" if a.capacity == "on" else "matrix"),
                        gamma=a.gamma == "on")
    check_config(cfg)  # every option (launcher, host file, ...) before anything runs
    with Progress(transient=True, disable=a.json, console=Console(stderr=True)) as prog:
        task = prog.add_task(f"measure ({a.backend})", total=None)

        def progress(phase, done, total):
            prog.update(task, description=f"{a.backend}: {phase} " + ("test" if phase.startswith("capacity") else "round"),
                        completed=done, total=total)

        report = measure(cfg, a.output, progress=progress, raw_output=a.raw, overheads=a.overheads)
    print(_json(report) if a.json else text_report(report))
    return EXIT_OK


COMMANDS = {"measure": cmd_measure}
