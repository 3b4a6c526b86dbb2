"""`collsched compile --form compact|auto`, `show` and `verify` for compact descriptions
(issue 24; docs/compact.md): thin layers over collsched.compact. cli.py dispatches here."""
from __future__ import annotations

import sys

from .cli_args import _json
from .errors import InputError

EXIT_OK, EXIT_INVALID, EXIT_BAD_INPUT = 0, 1, 2


def is_compact(path) -> bool:
    """True for a file that starts with the compact record's magic (anything unreadable:
    False, and the caller's own reader reports it)."""
    from .compact import is_compact_file

    try:
        return is_compact_file(path)
    except OSError:
        return False


def compile_form(a) -> str:
    """The form `compile --form` writes for these options (compact.choose_form)."""
    from .compact import choose_form

    return choose_form(a.form, a.algorithm, a.ranks, topology=a.topology, duplex=a.duplex, args=a)


def cmd_compile(a) -> int:
    from pathlib import Path

    from .compact import write_compact
    from .compact.desc import for_topology
    from .compact.desc import TAIL_FORMS
    from .inputs.units import parse_bytes_range as parse_bytes_arg

    out = Path(a.output)
    if not out.parent.is_dir():
        raise InputError(a.output, "-o", "expected a file in an existing directory")
    seg = a.segments
    if seg != "auto" and not (seg.isascii() and seg.isdigit()):
        raise InputError("--segments", seg, "expected 1..65535 or auto")
    # --segments auto is 1 here: the compact form describes homogeneous one-site clusters
    # with constant costs, where the explicit compile's search keeps one segment
    # (policy.segment_candidates; docs/compact-regular.md).
    if a.algorithm in TAIL_FORMS:  # version 2: the algorithm's module describes it
        desc = TAIL_FORMS[a.algorithm].describe(a)
    else:
        desc = for_topology(a.algorithm, a.ranks, parse_bytes_arg(a.bytes), 1 if seg == "auto" else int(seg),
                            topology=a.topology, duplex=a.duplex)
    size = write_compact(desc, out)
    model = _model(desc, a.topology)
    if a.json:
        print(_json({"form": "compact", "output": str(out), "algorithm": desc.algorithm,
                     "nranks": desc.nranks, "nseg": desc.nseg, "bytes_min": desc.bytes_min,
                     "bytes_max": desc.bytes_max, "duplex": "full" if desc.full_duplex else "half",
                     "topology": a.topology, "fifo_min_piece": desc.fifo_min_piece, "file_bytes": size,
                     **model, **_gap_keys(model)}))
    else:
        print(f"{out}: {desc.algorithm}, {desc.nranks} ranks, {desc.nseg} segment"
              f"{'s' * (desc.nseg > 1)}, {'full' if desc.full_duplex else 'half'} duplex, compact description ({size} bytes; every rank generates "
              f"its list at setup, docs/compact.md)")
        if model["predicted_s"] is not None:
            print(f"predicted {model['predicted_s'] * 1e3:.3f} ms at {desc.bytes_max} B per rank, lower bound "
                  f"{model['lower_bound_s'] * 1e3:.3f} ms (per-level model, docs/compact-model.md)")
        else:
            print(f"not predicted: {model['model_note']}")
    return EXIT_OK


def _model(desc, topology) -> dict:
    """The per-level model's prediction and bound at bytes_max (compact.model.summary:
    seconds at any P), or why there is none (bdr and bslb are not modelled per level)."""
    from .compact.model import summary

    try:
        m = summary(desc, topology)
    except InputError as e:
        return {"predicted_s": None, "lower_bound_s": None, "model": None, "model_note": f"the per-level model: {e.expected or e.line()}"}
    return {"predicted_s": m["predicted_s"], "lower_bound_s": m["lower_bound_s"], "model": m["model"],
            "model_method": m["method"], "levels": m["levels"], "model_time_s": m["compute_s"]}


def cmd_show(a) -> int:
    from .compact import read_compact, summary

    if a.rank is not None:
        raise InputError("--rank", str(a.rank), "expected no --rank for a compact description "
                         "(its lists are generated at setup)")
    print(f"file        {a.file}")
    print(summary(read_compact(a.file)))
    return EXIT_OK


def verify(path, several: bool) -> int:
    """`collsched verify` of one compact file: 0 valid, 1 invalid, 2 unreadable (the
    line printed); raises InputError for a single unreadable file, as verify does."""
    from .compact import check, read_compact

    try:
        desc = read_compact(path)
        why = check(desc)
    except InputError as e:
        if not several:
            raise
        print(f"collsched: error: {e.line()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if why is not None:
        print(f"{path}: invalid: {why}", file=sys.stderr)
        return EXIT_INVALID
    print(f"{path}: valid ({desc.algorithm}, {desc.nranks} ranks, compact description)")
    return EXIT_OK


def _gap_keys(model: dict) -> dict:
    """The gap keys every `compile --json` carries (issue 20), from the per-level model's
    bound; flat arrivals only here, so the average elapsed time's are left null, not guessed."""
    from .pipeline import gap_to

    bound = model.get("lower_bound_s")
    return {"gap": gap_to(model.get("predicted_s"), bound),
            "lower_bound_avg_elapsed_s": None, "gap_avg_elapsed": None,
            "lower_bound_method": "per-level model (docs/compact-model.md)" if bound is not None else None,
            "lower_bound_time_s": None,
            "lower_bound_note": None if bound is not None else model.get("model_note")}
