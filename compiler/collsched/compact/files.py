"""The compact form on disk (docs/compact.md, "Files"): a schedule file that is the record
itself (56 bytes, or a version-2 record with its tail), accepted by the runtime wherever a .sched path is (it tells the two apart by
the magic), and the compile's choice between the two forms."""
from __future__ import annotations

import os

from ..errors import InputError
from ..files import write_atomic
from .cluster import homogeneous_defaults
from .desc import MAGIC, MAX_DESC_BYTES, NO_FIFO, REGULAR, TAIL_FORMS, CompactDesc, decode, fifo_min_piece, refusal
from .native import count

FORMS = ("compact", "explicit", "auto")
# --form auto writes the compact record from this rank count up: below it the explicit file
# is at most 2 (P - 1) x P x 12 bytes = 25 MB for a ring and compiles in about a second,
# and it gets the runtime's whole-schedule proof at setup; above it size grows as P^2.
AUTO_MIN_RANKS = 1024


def choose_form(form: str, algorithm: str, nranks: int, *, topology: str | None = None,
                duplex: str | None = None, args=None) -> str:
    """"compact" or "explicit" for `collsched compile --form FORM`. compact where the
    options have no version-1 description is an InputError (one line, the reason: a
    topology that is not one homogeneous site, an algorithm without a compact form);
    auto falls back to explicit there, and below AUTO_MIN_RANKS."""
    if form not in FORMS:
        raise InputError("--form", "", f"expected one of {', '.join(FORMS)}, found {form!r}")
    why = refusal(algorithm, topology=topology, duplex=duplex, args=args, nranks=nranks)
    if form == "compact" and why is not None:
        raise InputError("--form compact", "", f"no compact description for this compile: {why}")
    if form == "explicit" or why is not None:
        return "explicit"
    return "compact" if form == "compact" or nranks >= AUTO_MIN_RANKS else "explicit"


def write_compact(desc: CompactDesc, path: str | os.PathLike) -> int:
    """Writes the record to `path` atomically (collsched.files.write_atomic); returns its size."""
    return write_atomic(path, desc.encode())


def is_compact_file(path: str | os.PathLike) -> bool:
    """True when `path` starts with the compact magic (whatever else is wrong with it)."""
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def read_compact(path: str | os.PathLike) -> CompactDesc:
    """The description in a compact file; InputError naming the file for anything else
    (a size no version has, a corrupt tail)."""
    with open(path, "rb") as f:
        data = f.read(MAX_DESC_BYTES + 1)
    return decode(data, source=str(path))


def summary(desc: CompactDesc) -> str:
    """What `collsched show` prints for a compact file: the fields, the cluster it stands
    for, and the list lengths (counted by the C generator, O(blocks) per rank) of the first
    and last ranks."""
    p = desc.nranks
    fifo = "none" if desc.fifo_min_piece == NO_FIFO else f">= {desc.fifo_min_piece} bytes per piece"
    ranks = sorted({0, p - 1})
    counts = ", ".join(f"rank {r}: {count(desc, r)}" for r in ranks)
    extra = TAIL_FORMS[desc.algorithm].summary_lines(desc) if desc.algorithm in TAIL_FORMS else []
    # a tail with its own FIFO thresholds (hier: per site pair) says them in its lines
    fifo_line = [] if any(line.startswith("fifo") for line in extra) else [f"fifo sends {fifo}"]
    return "\n".join([
        f"compact description v{desc.version} ({desc.size} bytes)",
        f"algorithm  {desc.algorithm}",
        f"nranks     {p}",
        f"nseg       {desc.nseg}",
        f"bytes      {desc.bytes_min}..{desc.bytes_max}",
        f"duplex     {'full' if desc.full_duplex else 'half'}",
        f"topology   {_topology_line(desc)}",
        *fifo_line,
        f"ops        {counts} (generated per rank at communicator setup)",
        *extra,
    ])


def _topology_line(desc: CompactDesc) -> str:
    """Which cluster the record stands for. It holds the FIFO threshold, not the topology
    file: a regular algorithm's lists are the same on every homogeneous one-site cluster
    with that threshold (cluster.py)."""
    if desc.algorithm not in REGULAR:
        return "as the algorithm's tail says"
    latency, bandwidth = homogeneous_defaults()
    if fifo_min_piece(desc.bytes_max, latency, bandwidth) == desc.fifo_min_piece:
        return (f"the default cluster ({latency * 1e6:g} us, {bandwidth / 1e6:g} MB/s) or a "
                f"homogeneous one-site file with the same FIFO marks")
    return ("a homogeneous one-site topology file (not recorded: only its FIFO threshold "
            "matters, which differs from the default cluster's)")


def check(desc: CompactDesc, *, explicit_max_ranks: int = 256) -> str | None:
    """What `collsched verify` says of a compact file: None when it holds, else one line.
    Up to explicit_max_ranks the generated lists are compared with the explicit
    compiler's (identity.first_difference: every rank, every column); above, the
    generators' proof (tools/prove_compact.py, exhaustive up to P = 1024) is what stands,
    and every rank's count is checked for the format's u32 limit."""
    from .identity import first_difference, stand_in
    if desc.nranks <= explicit_max_ranks:
        if desc.algorithm in TAIL_FORMS:  # the algorithm's own proof of a record alone
            return TAIL_FORMS[desc.algorithm].verify(desc)
        # Compiled on a topology file (not recorded): compare on a homogeneous cluster with
        # the same FIFO marks, which gives the file's lists (cluster.py).
        latency, bandwidth = homogeneous_defaults()
        if fifo_min_piece(desc.bytes_max, latency, bandwidth) == desc.fifo_min_piece:
            return first_difference(desc)
        topo = stand_in(desc)
        if topo is None:
            return (f"{desc}: fifo_min_piece: no homogeneous cluster marks FIFO exactly the "
                    f"pieces this record marks")
        return first_difference(desc, topo)
    for r in sorted({0, desc.nranks // 2, desc.nranks - 1}):
        count(desc, r)  # InputError / the generator's refusal for a list past the format
    return None


__all__ = ["AUTO_MIN_RANKS", "FORMS", "check", "choose_form", "is_compact_file", "read_compact",
           "summary", "write_compact"]
