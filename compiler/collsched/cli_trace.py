"""`collsched trace`: the arrival-trace report, predictors and exports (docs/trace.md).

A thin layer over collsched.patterns.analysis; registered by cli.py (add_parsers, COMMANDS)."""
from __future__ import annotations

import json

from .cli_args import _int_opt, _plot_path, h
from .errors import InputError

EXIT_OK = 0


def add_parsers(sub) -> None:
    """Adds this module's commands to the `collsched` parser."""
    t = sub.add_parser(
        "trace", help="report the arrival pattern of a traced job, per call site",
        description="Read an arrival trace (COLLSCHED_ARRIVALS=FILE, docs/trace-format.md) or "
                    "an arrival-pattern file with iterations, and report per call site: calls, "
                    "bytes, the imbalance factor omega/T (T: one message of the call's bytes), "
                    "who is late how often, the time lost waiting, elapsed times "
                    "(docs/trace.md). Examples: collsched trace run.trace --plot run.png; "
                    "collsched trace run.trace --predict; collsched trace run.trace "
                    "--export-pap site.yaml --site 'main+0x1f'")
    t.add_argument("trace_file", metavar="FILE",
                   help=h("arrival trace, or arrival-pattern YAML with iterations",
                          "none, required", "run.trace"))
    t.add_argument("--topology", help=h("topology YAML the message time T is computed on",
                                        "a homogeneous cluster: 1 Gbit/s, 50 us, full duplex",
                                        "--topology topologies/tryton-48.yaml"))
    t.add_argument("--bytes", help=h("bytes per rank of the calls of an arrival-pattern FILE "
                                     "(a trace records its own); units such as KiB, MiB",
                                     "none, required for a pattern file", "--bytes 1MiB"))
    t.add_argument("--site", help=h("only this call site (as the report names it; NAME@COMM for "
                                    "a site on several communicators)", "every call site",
                                    "--site 'main+0x1f'"))
    t.add_argument("--json", action="store_true", help=h("print the report as JSON", "off: text",
                                                         "--json"))
    t.add_argument("--plot", type=_plot_path("--plot"),
                   help=h("figure to write: per call site, arrival offsets by rank over calls (heat "
                          "map) and the imbalance factor's distribution", "none", "--plot run.png"))
    t.add_argument("--predict", action="store_true",
                   help=h("score the predictors (last, moving averages, linear, recurrence) per "
                          "call site: mean absolute error in T, latest ranks right", "off",
                          "--predict"))
    t.add_argument("--train", type=_int_opt("--train", 1, 1 << 40),
                   help=h("--predict: calls of each site the recurrence's classes are learnt from "
                          "(the calls after them are scored)", "a quarter of the site's calls, "
                          "at least 2", "--train 30"))
    t.add_argument("--export-pap", metavar="OUT",
                   help=h("write the site's arrival patterns (one iteration per call) as an "
                          "arrival-pattern YAML that --pap accepts, instead of the report "
                          "(--site names the site when there are several)", "none",
                          "--export-pap site.yaml"))


def _bytes(text):
    if text is None:
        return None
    from .pipeline import parse_bytes_arg

    lo, hi = parse_bytes_arg(text)
    if lo != hi or lo < 1:
        raise InputError("--bytes", text, "expected one size of at least 1 byte, not a range")
    return lo


def cmd_trace(a) -> int:
    from .files import check_output_path
    from .patterns.analysis import analyse, export_pap

    if a.train is not None and not a.predict:
        raise InputError("--train", str(a.train), "expected only with --predict")
    nbytes = _bytes(a.bytes)
    if a.export_pap is not None:
        if a.predict or a.plot or a.json:
            raise InputError("--export-pap", a.export_pap, "expected without --predict, --plot "
                                                           "and --json (it writes the file only)")
        check_output_path(a.export_pap, "--export-pap")
        s = export_pap(a.trace_file, a.export_pap, a.site, nbytes)
        print(f"{a.export_pap}: {s.ncalls} iterations of {s.label()}")
        return EXIT_OK
    result = analyse(a.trace_file, a.topology, nbytes, a.site, a.predict, a.train)
    if a.plot:
        from .patterns.plots import plot_report

        plot_report(result.reports, a.plot, title=a.trace_file)
    if a.json:
        print(json.dumps(result.to_json(), allow_nan=False))
    else:
        print("\n".join(result.text_lines()))
        if a.plot:
            print(f"\n{a.plot}: heat maps and imbalance factors")
    return EXIT_OK


COMMANDS: dict = {"trace": cmd_trace}
