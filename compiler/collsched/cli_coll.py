"""`collsched compile|show|verify|simulate|algorithms` for the collectives beyond allgather
(alltoall, bcast, reduce, allreduce; format 1.2): thin layers over collsched.collectives
(compile.py, verify.py, schedfile.py, the models).

cli.py dispatches here: compile with --collective alltoall|bcast|reduce|allreduce, the
others for a file whose header names collective 5..8; `algorithms` is this module's own
command (registered by cli.py: add_parsers, COMMANDS). Allgather options that mean
nothing here (--tau, --engine, --form, the intergroup --groups/--bytes-b/--sizes) are
refused with one line.
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

from .cli_args import COLL_COLLECTIVES as NAMES, _json, _show, h
from .errors import InputError

EXIT_OK, EXIT_INVALID, EXIT_BAD_INPUT = 0, 1, 2
_IDS = (5, 6, 7, 8)
SIZE_MEANING = "bytes of one block per rank pair (alltoall) / of the whole vector (bcast, reduce, allreduce)"


def is_coll_file(path) -> bool:
    """True if `path` is a schedule file of collective 5..8 (format 1.2); False for
    anything else (the caller's own reader reports it)."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    return len(head) == 20 and head[:8] == b"COLLSCHD" and struct.unpack_from("<I", head, 16)[0] in _IDS


def _refuse(a, refused: dict) -> None:
    for attr, (default, why) in refused.items():
        value = getattr(a, attr, default)
        if value != default:
            raise InputError("--" + attr.replace("_", "-"), _show(str(value)), why)


_COMPILE_REFUSED = {
    "tau": (None, "expected nothing: --tau is bdr's (allgather)"),
    "engine": ("pat", "expected pat: these collectives have no background operations"),
    "form": ("explicit", "expected explicit: compact schedules are allgather's"),
    "groups": (None, "expected nothing: --groups is for the inter-* collectives"),
    "bytes_b": (None, "expected nothing: --bytes-b is for the inter-* collectives"),
    "sizes": (None, "expected nothing: --sizes is for inter-allgatherv"),
}


def _segments(text):
    from .cli_args import _INT

    if text in (None, "auto"):
        return "auto"
    t = str(text).strip()
    if not _INT.fullmatch(t) or not 1 <= int(t) <= 65535:
        raise InputError("--segments", _show(str(text)), "expected 1..65535 or auto")
    return int(t)


def refuse_options_of_others(a) -> None:
    """compile of allgather or an inter-* collective: --root and --elem-bytes are refused
    (one line) rather than ignored."""
    for attr, flag in (("root", "--root"), ("elem_bytes", "--elem-bytes")):
        value = getattr(a, attr, None)
        if value is not None:
            raise InputError(flag, str(value), f"expected nothing for {a.collective} ({flag} is for "
                                               f"{'bcast and reduce' if attr == 'root' else 'reduce and allreduce'})")


def cmd_compile(a) -> int:
    from .collectives.compile import compile_collective
    from .collectives.verify import VerificationFailed
    from .inputs.units import parse_bytes_range

    _refuse(a, _COMPILE_REFUSED)
    if a.ranks is None:
        raise InputError("--ranks", "", f"expected the number of ranks (required for {a.collective})")
    root = getattr(a, "root", None)
    if root is not None and a.collective not in ("bcast", "reduce"):
        raise InputError("--root", str(root), f"expected none: {a.collective} has no root")
    if getattr(a, "elem_bytes", None) is not None and a.collective not in ("reduce", "allreduce"):
        raise InputError("--elem-bytes", str(a.elem_bytes), f"expected nothing: {a.collective} moves "
                                                            f"bytes, not elements")
    out = Path(a.output)
    if not out.parent.is_dir():
        raise InputError(a.output, "-o", "expected a file in an existing directory")
    try:
        res = compile_collective(a.collective, a.algorithm, nranks=a.ranks, nbytes=parse_bytes_range(a.bytes),
                                 nseg=_segments(a.segments), root=root or 0,
                                 elem_bytes=getattr(a, "elem_bytes", None) or 4, topology=a.topology,
                                 arrivals=a.pap, model=a.model or "auto", out=out, duplex=a.duplex)
    except VerificationFailed as e:
        print(f"collsched: compiler bug: {a.algorithm} produced an invalid {a.collective} program: {e}",
              file=sys.stderr)
        return EXIT_INVALID
    from .catalog import new_file_warning  # the allgather compile's warning, same rule

    line = new_file_warning(out)
    if line:
        print(line, file=sys.stderr)
    d = res.summary()
    if a.json:
        print(_json(d))
        return EXIT_OK
    p = res.program
    tried = sum(1 for c in res.candidates if "run_time_s" in c and not c.get("finalist"))
    picked = f" (auto: the fastest predicted of {tried})" if res.auto else ""
    root_text = f", root {p.root}" if p.collective in ("bcast", "reduce") else ""
    print(f"{out}: {p.algorithm}{picked}, {p.collective} {p.nranks} ranks{root_text}, {_bytes_text(res.nbytes)}, "
          f"{p.nseg} segment{'s' * (p.nseg > 1)}, {p.total_ops} ops, {res.file_bytes} bytes"
          f"{', commutative ops only' if p.commutative_only else ''}; verified; predicted run time "
          f"{res.timing.run_time_s * 1e3:.3f} ms, avg elapsed {res.timing.avg_elapsed_s * 1e3:.3f} ms "
          f"({res.model}){_bound_text(d)}; compiled in {res.compile_time_s * 1e3:.1f} ms")
    if res.default_topology:
        print(f"  (no --topology: timed on the {res.topology})")
    return EXIT_OK


def _bytes_text(nbytes) -> str:
    lo, hi = nbytes
    return f"{hi} B" if lo == hi else f"{lo}..{hi} B"


def _bound_text(d: dict) -> str:
    if d["lower_bound_s"] is None:
        return ""
    gap = "" if d["gap"] is None else f", {d['gap'] * 100:.1f}% above it"
    return f"; lower bound {d['lower_bound_s'] * 1e3:.3f} ms{gap}"


def cmd_show(a, prog) -> int:
    print(f"file        {a.file} ({prog.file_bytes} bytes, format {prog.format_version})")
    print(f"collective  {prog.collective}   algorithm {prog.algorithm}   compiler {prog.compiler_version}")
    root = f"   root {prog.root}" if prog.collective in ("bcast", "reduce") else ""
    print(f"ranks       {prog.nranks}   segments {prog.nseg}   ops {prog.total_ops}   pieces "
          f"{prog.total_pieces}   duplex {'full' if prog.full_duplex else 'half'}{root}")
    unit = "bytes/block" if prog.collective == "alltoall" else "bytes/vector"
    print(f"{unit:<11} {prog.bytes_min}" + (f"..{prog.bytes_max}" if prog.bytes_max != prog.bytes_min else "")
          + ("   commutative operations only" if prog.commutative_only else ""))
    print(f"input hash  {prog.input_hash.hex()}")
    ranks = [a.rank] if a.rank is not None else range(prog.nranks)
    for r in ranks:
        ops = prog.ops[r]
        print(f"rank {r}: {len(ops)} ops")
        for i, op in enumerate(ops):
            print(f"  {i:6d} {op}")
    return EXIT_OK


def verify(path, several: bool) -> int:
    """`collsched verify` of one 1.2 file: its status (0 valid, 1 invalid, 2 unreadable)."""
    from . import schedfile
    from .collectives.verify import verify as verify_program

    try:
        prog = schedfile.read(path)
    except InputError as e:
        if not several:
            raise
        print(f"collsched: error: {e.line()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    violations = verify_program(prog)
    if violations:
        more = f" (and {len(violations) - 1} more)" if several and len(violations) > 1 else ""
        for v in violations[:1] if several else violations:
            print(f"{path}: invalid: {v}{more}", file=sys.stderr)
        return EXIT_INVALID
    print(f"{path}: valid ({prog.algorithm}, {prog.collective}, {prog.nranks} ranks, {prog.total_ops} ops)")
    return EXIT_OK


def cmd_simulate(a) -> int:
    from . import schedfile
    from .collectives.compile import _resolve_arrivals, _resolve_topology, _simulate
    from .collectives.verify import verify as verify_program
    from .inputs.units import parse_bytes_range

    prog = schedfile.read(a.file)
    violations = verify_program(prog)
    if violations:
        print(f"{a.file}: invalid: {violations[0]}", file=sys.stderr)
        return EXIT_INVALID
    size = prog.bytes_max
    if a.bytes is not None:
        lo, hi = parse_bytes_range(a.bytes)
        if lo != hi:
            raise InputError("--bytes", a.bytes, "expected one size here, not a range")
        if not prog.bytes_min <= lo <= prog.bytes_max:
            raise InputError("--bytes", a.bytes, f"expected a size the schedule serves "
                                                 f"({prog.bytes_min}..{prog.bytes_max})")
        size = lo
    duplex = a.duplex
    if duplex is None and a.topology is None:
        duplex = "full" if prog.full_duplex else "half"
    topo, default = _resolve_topology(a.topology, prog.nranks, duplex)
    arrivals = _resolve_arrivals(a.pap, prog.nranks)
    elem = getattr(a, "elem_bytes", None) or 4
    if getattr(a, "elem_bytes", None) is not None and prog.collective not in ("reduce", "allreduce"):
        raise InputError("--elem-bytes", str(a.elem_bytes), f"expected nothing: {prog.collective} moves "
                                                            f"bytes, not elements")
    # The fluid model by default: what compile predicts with (compile.py, model auto).
    t = _simulate(a.model if a.model in ("dag", "fluid") else "fluid", prog, topo, size, elem, arrivals)
    where = "the default cluster" if default else topo.name
    if a.json:
        print(_json({"algorithm": prog.algorithm, "collective": prog.collective, "nranks": prog.nranks,
                     "nbytes": size, "elem_bytes": elem, "topology": where, **t.to_dict()}))
        return EXIT_OK
    print(f"{a.file}: {prog.algorithm}, {prog.collective} {prog.nranks} ranks, {size} B")
    print(f"  run time              {t.run_time_s * 1e3:12.4f} ms  ({t.model} model on {where})")
    print(f"  average elapsed time  {t.avg_elapsed_s * 1e3:12.4f} ms")
    return EXIT_OK


def add_parsers(sub) -> None:
    """`collsched algorithms`."""
    p = sub.add_parser("algorithms", help="list the algorithms compile knows, per collective",
                       description="Every registered algorithm of each collective with what it is; "
                                   "needs-topology and arrival-aware ones marked. Example: "
                                   "collsched algorithms --collective allreduce")
    p.add_argument("--collective", choices=("allgather",) + NAMES, default=None,
                   help=h("only this collective", "every collective", "--collective alltoall"))
    p.add_argument("--json", action="store_true", help=h("print JSON", "off: text", "--json"))


def cmd_algorithms(a) -> int:
    rows = []
    wanted = [a.collective] if a.collective else ["allgather", *NAMES]
    if "allgather" in wanted:
        from .algorithms import REGISTRY as GATHER

        rows += [{"collective": "allgather", "algorithm": n, "summary": GATHER[n].summary,
                  "needs_topology": False, "arrival_aware": False} for n in sorted(GATHER)]
    from .collectives.algorithms import REGISTRY

    for coll in [c for c in wanted if c != "allgather"]:
        rows += [{"collective": c, "algorithm": n, "summary": alg.summary,
                  "needs_topology": alg.needs_topology, "arrival_aware": alg.arrival_aware}
                 for (c, n), alg in sorted(REGISTRY.items()) if c == coll]
    if a.json:
        print(_json(rows))
        return EXIT_OK
    for coll in wanted:
        mine = [r for r in rows if r["collective"] == coll]
        print(f"{coll}: " + (f"{len(mine)} algorithms (and auto)" if mine else "none registered"))
        for r in mine:
            marks = [m for m, on in (("needs --topology", r["needs_topology"]),
                                     ("arrival-aware: --pap", r["arrival_aware"])) if on]
            print(f"  {r['algorithm']:<18} {r['summary']}" + (f" [{'; '.join(marks)}]" if marks else ""))
    return EXIT_OK


COMMANDS = {"algorithms": cmd_algorithms}
