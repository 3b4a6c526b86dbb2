"""`collsched bench --collective inter-allgather|inter-allgatherv` (one case) and `collsched
bench --suite intergroup` (issue 19; docs/lab.md, "Intergroup"): the command line over the
intergroup lab. The library: intergroup_run.py (run_intergroup, one case), intergroup_suite.py
(the settings under SMPI, the real-MPI comparison), intergroup_report.py (tables, plots).
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError
from ..intergroup import Groups
from .intergroup_run import COLLECTIVES, InterConfig, check_algorithms, run_intergroup

__all__ = ["InterConfig", "cmd_bench", "groups_from_args", "run_intergroup"]

DEFAULT_ALGORITHMS = {"inter-allgather": "kang,root-gather,root-gather-mpich,native",
                      "inter-allgatherv": "kang-v,root-gather,root-gather-mpich,native"}
def groups_from_args(a) -> Groups:
    """The two groups of bench --collective inter-*: the compile command's rules
    (intergroup/inputs.py), with --bytes 64 KiB when not given (the lab's default)."""
    from ..intergroup.inputs import SIZE_RULES, groups_from_options

    if a.ranks is not None:
        raise InputError("--ranks", str(a.ranks), "expected no --ranks with --groups (P + Q ranks)")
    if a.sizes is not None and a.collective != "inter-allgatherv":
        raise InputError("--sizes", a.sizes, "expected only with --collective inter-allgatherv")
    nbytes = a.bytes if a.bytes is not None or a.sizes not in (None, *SIZE_RULES) else "64KiB"
    groups = groups_from_options(a.groups, nbytes, a.bytes_b, a.sizes, a.collective)
    if max(groups.total(0), groups.total(1)) > 2**31 - 1:
        raise InputError("--bytes", str(nbytes), "expected each group's data to fit an MPI count "
                                                 "(2147483647 bytes: the driver's displacements)")
    return groups


def _refuse_with_suite(a) -> None:
    for flag, value in (("--collective", None if a.collective == "allgather" else a.collective),
                        ("--groups", a.groups), ("--bytes", a.bytes), ("--bytes-b", a.bytes_b),
                        ("--sizes", a.sizes), ("--ranks", a.ranks), ("--topology", a.topology)):
        if value is not None:
            raise InputError(flag, str(value), "expected no such option with --suite intergroup (the "
                                               "suite's settings give the groups, sizes and cluster)")


def cmd_bench(a) -> int:
    """`collsched bench --collective inter-allgather|inter-allgatherv ...` (one case) and
    `collsched bench --suite intergroup` (the settings under SMPI, or --backend mpi)."""
    from ..cli_args import _json
    from . import intergroup_report as rep

    command = "collsched " + " ".join(_argv_tail())
    if a.suite == "intergroup":
        _refuse_with_suite(a)
        return _suite(a, command)
    if a.suite != "lab":
        raise InputError("--suite", a.suite, "expected no --suite with --collective inter-* (or --suite "
                                             "intergroup without --collective)")
    if a.collective not in COLLECTIVES:
        raise InputError("--collective", a.collective, f"expected one of {', '.join(COLLECTIVES)}")
    groups = groups_from_args(a)
    text = DEFAULT_ALGORITHMS[a.collective] if a.algorithms is None else a.algorithms
    names = [x.strip() for x in text.split(",") if x.strip()]
    check_algorithms(names, a.collective)
    cfg = InterConfig(groups, a.collective, backend=a.backend, network_model=a.network_model or "CM02",
                      topology=a.topology, iterations=a.iterations or (2 if a.backend == "smpi" else 10),
                      max_delay_ms=a.max_delay_ms, seed=a.seed, shared_data=a.shared_data,
                      launcher=a.launcher, hostfile=a.hostfile, bind_to=a.bind_to, workdir=a.keep,
                      platform=getattr(a, "platform", None))
    report = run_intergroup(cfg, names)
    if a.json:
        print(_json(report, indent=1))
    else:
        rep.print_case(report)
    if a.doc:
        from .benchdoc import replace_section

        replace_section(a.doc, a.section or "lab-intergroup-run", rep.case_markdown(report, command))
    if a.plot:
        rep.plot_case(report, a.plot)
    return 0 if all(r["data_ok"] and r.get("native_data_ok", True) for r in report["results"]) else 1


def _argv_tail() -> list[str]:
    import shlex
    import sys

    args = sys.argv[1:]
    return [shlex.quote(x) for x in args]


def _suite(a, command: str) -> int:
    from rich.progress import Progress

    from ..cli_args import _json
    from . import intergroup_report as rep
    from . import intergroup_suite as suite

    from rich.console import Console

    with Progress(transient=True, console=Console(stderr=True)) as bar:  # stdout keeps --json clean
        task = bar.add_task("intergroup", total=None)

        def progress(done, total, label):
            bar.update(task, completed=done, total=total, description=label)

        if a.backend == "mpi":
            report = suite.run_mpi(iterations=a.iterations or suite.MPI_ITERATIONS, launcher=a.launcher,
                                   hostfile=a.hostfile, bind_to=a.bind_to, progress=progress)
        else:
            if getattr(a, "platform", None) is not None:
                raise InputError("--platform", a.platform, "expected no --platform with --suite intergroup "
                                 "(its settings run on the homogeneous cluster); one case "
                                 "(--collective inter-*) takes it")
            for flag, value in (("--launcher", a.launcher), ("--hostfile", a.hostfile), ("--bind-to", a.bind_to)):
                if value is not None:
                    raise InputError(flag, str(value), "only with --backend mpi")
            report = suite.run_settings(network_model=a.network_model or "CM02", iterations=a.iterations or 1,
                                        progress=progress)
    if a.json:
        print(_json(report, indent=1))
    elif a.backend == "smpi":
        rep.print_settings(report)
    plots = {}
    if a.backend == "smpi" and a.plot:
        stem = Path(a.plot).stem  # intergroup-speedup.png -> intergroup-bound.png beside it
        bound = Path(a.plot).with_name((stem.replace("speedup", "bound") if "speedup" in stem
                                        else stem + "-bound") + Path(a.plot).suffix)
        rep.plot_speedups(report, a.plot)
        rep.plot_bound_ratios(report, bound)
        plots = {"speedups": a.plot, "measured over bound": str(bound)}
    if a.doc:
        from .benchdoc import replace_section

        doc_dir = Path(a.doc).resolve().parent
        rel = {k: os.path.relpath(Path(v).resolve(), doc_dir) for k, v in plots.items()}
        if a.backend == "mpi":
            text = rep.mpi_markdown(report, command)
            section = a.section or "lab-intergroup-mpi"
        else:
            text = rep.settings_markdown(report, command, rel)
            section = a.section or "lab-intergroup"
        replace_section(a.doc, section, text)
    if a.backend == "mpi" and not a.json:
        print(rep.mpi_markdown(report, command))
    cases = report["cases"] if a.backend == "mpi" else [c for s in report["settings"] for c in s["cases"]]
    ok = all(r["data_ok"] and r.get("native_data_ok", True) for c in cases for r in c["results"])
    return 0 if ok else 1
