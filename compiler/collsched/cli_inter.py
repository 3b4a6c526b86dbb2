"""`collsched compile|show|simulate|plot` for intergroup schedules (two groups of an
intercommunicator; docs/intergroup.md): thin layers over collsched.intergroup.

cli.py dispatches here: compile with --collective inter-*, the others for a file of
collective 3 or 4 (docs/schedule-format.md#intergroup-schedules). Options of the
allgather commands that have no meaning for two groups of exact block sizes (--ranks,
--pap, --tau, --segments, --engine, a --bytes range) are refused with one line.
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

from .cli_args import _json, _show
from .errors import InputError

EXIT_OK, EXIT_INVALID = 0, 1


def is_inter_file(path) -> bool:
    """True if `path` is a schedule file of an intergroup collective (header field
    `collective` 3 or 4); False for anything else (the caller's own reader reports it)."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    return len(head) == 20 and head[:8] == b"COLLSCHD" and struct.unpack_from("<I", head, 16)[0] in (3, 4)


def _refuse(a, allowed: dict) -> None:
    """One line for an allgather option given to an intergroup command."""
    for attr, (default, why) in allowed.items():
        value = getattr(a, attr, default)
        if value != default:
            flag = "--" + attr.replace("_", "-")
            raise InputError(flag, _show(str(value)), why)


_COMPILE_REFUSED = {
    "ranks": (None, "expected --groups P:Q instead for an intercommunicator collective"),
    "pap": (None, "expected no arrival pattern: intergroup schedules are timed with every rank "
                  "arriving at once"),
    "tau": (None, "expected nothing: --tau is bdr's"),
    "segments": ("auto", "expected auto: intergroup plans cut their own pieces"),
    "engine": ("pat", "expected pat: intergroup schedules have no background operations"),
}


def cmd_compile(a) -> int:
    from .intergroup.compile import compile_intergroup
    from .intergroup.inputs import groups_from_options
    from .pipeline import VerificationFailed

    _refuse(a, _COMPILE_REFUSED)
    groups = groups_from_options(a.groups, a.bytes, a.bytes_b, a.sizes, a.collective)
    out = Path(a.output)
    if not out.parent.is_dir():
        raise InputError(a.output, "-o", "expected a file in an existing directory")
    try:
        res = compile_intergroup(a.algorithm, groups, a.collective, a.topology, out,
                                 model="fluid" if a.model in (None, "auto") else a.model, duplex=a.duplex)
    except VerificationFailed as e:
        print(f"collsched: compiler bug: {a.algorithm} produced an invalid schedule: {e}", file=sys.stderr)
        return EXIT_INVALID
    from .catalog import new_file_warning  # the allgather compile's warning, same rule

    line = new_file_warning(out)
    if line:
        print(line, file=sys.stderr)
    d = res.summary()
    if a.json:
        print(_json(d))
        return EXIT_OK
    s = res.schedule
    picked = f" (auto: the fastest predicted of {len(res.algorithms_tried)})" if res.algorithms_tried else ""
    print(f"{out}: {s.algorithm}{picked}, {s.collective} {s.p}:{s.q} ranks, {_sizes_text(s.groups)}, "
          f"{s.total_ops} ops, {res.file_bytes} bytes; verified; predicted run time "
          f"{res.timing.run_time_s * 1e3:.3f} ms ({res.model}); compiled in {res.compile_time_s * 1e3:.1f} ms")
    if a.lower_bound:
        print(_bounds_line(d))
    return EXIT_OK


def _sizes_text(g) -> str:
    def one(name, sizes):
        lo, hi = min(sizes), max(sizes)
        return f"{name} {lo} B" if lo == hi else f"{name} {lo}..{hi} B (total {sum(sizes)})"
    return one("A", g.sizes_a) + ", " + one("B", g.sizes_b)


def _bounds_line(d: dict) -> str:
    b = d["bounds"]
    parts = [f"{name} {b[key] * 1e3:.3f} ms" for name, key in (
        ("M", "M"), ("cut", "cut"), ("Theorem 1", "theorem1"), ("Eq. 4", "theorem3"), ("Eq. 1", "eq1"),
        ("Eq. 2", "eq2")) if b[key] is not None]
    gap = "" if d["gap_to_M"] is None else f"; predicted run time {d['gap_to_M'] * 100:.1f}% above M"
    return "bounds (the paper's at t_s = {:.3g} s, t_w = {:.3g} s/B): {}{}".format(
        d["single_port"]["t_s"], d["single_port"]["t_w_s_per_byte"], ", ".join(parts), gap)


def cmd_show(a, s) -> int:
    from .ir import KIND_NAMES

    g = s.groups
    print(f"file        {a.file} ({s.file_bytes} bytes, format {s.format_version})")
    print(f"collective  {s.collective}   algorithm {s.algorithm}   compiler {s.compiler_version}")
    print(f"groups      A {g.p} ranks (0..{g.p - 1}), B {g.q} ranks ({g.p}..{g.nranks - 1})   "
          f"ops {s.total_ops}   duplex {'full' if s.full_duplex else 'half'}")
    print(f"blocks      {_sizes_text(g)}")
    print(f"input hash  {s.input_hash.hex()}")
    ranks = [a.rank] if a.rank is not None else range(s.nranks)
    names = ("A", "B")
    for r in ranks:
        lo, hi = int(s.offsets[r]), int(s.offsets[r + 1])
        grp, local = g.group_of(r), g.local(r)
        print(f"rank {r} ({names[grp].lower()}_{local}): {hi - lo} ops")
        for i in range(lo, hi):
            kind = KIND_NAMES[int(s.kind[i])]
            arrow = "->" if int(s.kind[i]) == 0 else "<-"
            fifo = " fifo" if s.fifo[i] else ""
            print(f"  {i - lo:6d} {kind} {arrow} {int(s.peer[i]):<6d} "
                  f"{names[int(s.group[i])]}[{int(s.lo[i])}, {int(s.hi[i])}){fifo}")
    return EXIT_OK


_TIMING_REFUSED = {
    "pap": (None, "expected no arrival pattern: intergroup schedules are timed with every rank "
                  "arriving at once"),
    "bytes": (None, "expected nothing: an intergroup schedule serves the block sizes it was "
                    "compiled for (collsched show prints them)"),
}


def _timed(a):
    """Read, verify and time the file of `a` (simulate, plot): (schedule, timing)."""
    from . import schedfile
    from .intergroup.timing import predict
    from .intergroup.verify import verify
    from .pipeline import resolve_topology

    _refuse(a, _TIMING_REFUSED)
    s = schedfile.read(a.file)
    violations = verify(s)
    if violations:
        print(f"{a.file}: invalid: {violations[0]}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID)
    duplex = a.duplex
    if duplex is None and a.topology is None:
        duplex = "full" if s.full_duplex else "half"
    topo = resolve_topology(s.nranks, a.topology, duplex)
    return s, topo, predict(s, topo, getattr(a, "model", None) or "fluid")


def cmd_simulate(a) -> int:
    s, topo, t = _timed(a)
    if a.json:
        print(_json({"algorithm": s.algorithm, "collective": s.collective, "p": s.p, "q": s.q,
                     "topology": topo.name, "model": t.model, "run_time_s": t.run_time_s,
                     "avg_elapsed_s": t.avg_elapsed_s, "exit_times_s": t.exits.tolist()}))
        return EXIT_OK
    print(f"{a.file}: {s.algorithm}, {s.collective} {s.p}:{s.q} ranks, {_sizes_text(s.groups)}")
    print(f"  run time              {t.run_time_s * 1e3:12.4f} ms  ({t.model} model on {topo.name})")
    print(f"  average elapsed time  {t.avg_elapsed_s * 1e3:12.4f} ms")
    return EXIT_OK


def cmd_plot(a) -> int:
    from .plot import gantt

    out = Path(a.output)
    if not out.parent.is_dir():
        raise InputError(a.output, "-o", "expected a file in an existing directory")
    s, topo, t = _timed(a)
    where = Path(a.topology).stem if a.topology else "the default cluster"
    title = (f"{s.algorithm} ({s.collective} {s.p}:{s.q}) on {where}: "
             f"run time {t.run_time_s * 1e3:.3f} ms")
    gantt(t.timeline, title, out, max_ranks=a.max_ranks)
    print(f"{out}: Gantt chart of {s.algorithm}")
    return EXIT_OK
