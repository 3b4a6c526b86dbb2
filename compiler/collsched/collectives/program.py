"""The IR of collectives beyond allgather: alltoall, bcast, reduce and allreduce.

A `Program` is, per rank, an ordered list of `Op`s. Unlike the allgather IR (ir.py:
columnar, one (origin, segment) piece per operation, built for 64k ranks), an operation
here carries a *list* of pieces (one message, one latency: Bruck, recursive doubling and
the grid-aware plans aggregate), a piece names data of the collective's own kind, and a
receive may combine what it brings into what the rank holds (RECV_REDUCE). The contract
(what a piece is at each rank, when an operation may be issued, what the verifier proves)
is docs/semantics.md, "Collectives beyond allgather"; the file format is
docs/schedule-format.md, "Version 1.2".

Pieces (`Piece(src, dst, seg)`):
- alltoall: the personalised block from rank `src` to rank `dst`, segment `seg`;
- bcast: segment `seg` of the root's buffer (src = dst = 0);
- reduce / allreduce: segment `seg` of the reduction vector (src = dst = 0). What a rank
  sends is its *current* value of that segment: its own contribution combined with every
  partial result its list has received so far (the verifier tracks these as contribution
  sets).

Segments: segment s of n units covers [floor(s * n / nseg), floor((s + 1) * n / nseg)),
where the units are bytes (alltoall: of one block; bcast: of the buffer) or elements of
the call's datatype (reduce, allreduce: a reduction never splits an element).

Algorithms never write per-rank lists by hand: they add *transfers* to a `Builder` in one
global order, and `Builder.build` derives every rank's list from it (as ir.from_transfers
does), so the k-th send a -> b always meets the k-th receive at b from a.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

COLLECTIVES = {"alltoall": 5, "bcast": 6, "reduce": 7, "allreduce": 8}
ROOTED = ("bcast", "reduce")
REDUCING = ("reduce", "allreduce")

SEND, RECV, RECV_REDUCE = 0, 1, 2
KIND_NAMES = {SEND: "send", RECV: "recv", RECV_REDUCE: "recv-reduce"}

MAX_RANKS = 1 << 24
MAX_SEGMENTS = 65535
MAX_PIECES_PER_OP = 1 << 24


class Piece(NamedTuple):
    src: int
    dst: int
    seg: int


@dataclass(frozen=True)
class Op:
    """One operation of a rank's list.

    kind: SEND, RECV or RECV_REDUCE. pieces: what the one message carries, in order (the
    message is the pieces' data concatenated; an empty tuple is a zero-byte
    synchronisation message). fifo (sends): synchronous, and issued only once the previous
    send to the same peer completed (as allgather's FIFO sends). fence: issued only once
    every earlier receive of the list has completed and been applied (barriers, the light
    barrier of Faraj et al.). local_first (RECV_REDUCE): value = own (op) incoming instead
    of incoming (op) own - the order matters for non-commutative operations only. chain
    (sends): issued only once the previous send of the list (to any peer) has completed,
    so a rank's sends leave one after the other (an arrival-aware alltoall's order).
    """

    kind: int
    peer: int
    pieces: tuple[Piece, ...]
    fifo: bool = False
    fence: bool = False
    local_first: bool = False
    chain: bool = False

    def __str__(self) -> str:
        flags = "".join(f" {n}" for n, on in (("fifo", self.fifo), ("fence", self.fence),
                                              ("local-first", self.local_first),
                                              ("chain", self.chain)) if on)
        items = " ".join(f"{p.src}>{p.dst}:{p.seg}" for p in self.pieces) or "(sync)"
        return f"{KIND_NAMES[self.kind]} peer {self.peer} [{items}]{flags}"


@dataclass
class Program:
    """Every rank's ordered list of operations for one collective call."""

    collective: str
    nranks: int
    nseg: int
    ops: list[list[Op]]
    root: int = 0
    algorithm: str = "custom"
    bytes_min: int = 0  # bytes of one alltoall block / of the whole vector, smallest served
    bytes_max: int = 0
    full_duplex: bool = True
    # The reductions do not follow MPI's canonical order (ranks 0..P-1): valid only for
    # commutative operations; the runtime falls back for the others (header flag bit 3).
    commutative_only: bool = False
    input_hash: bytes = b"\0" * 32
    compiler_version: str = ""
    # Not stored in files: the planner's own prediction and notes for reports.
    planned_run_time_s: float | None = None
    notes: dict = field(default_factory=dict)
    # Set by reading a file.
    format_version: str | None = None
    file_bytes: int | None = None

    @property
    def total_ops(self) -> int:
        return sum(len(lst) for lst in self.ops)

    @property
    def total_pieces(self) -> int:
        return sum(len(op.pieces) for lst in self.ops for op in lst)

    def ops_of(self, rank: int) -> list[str]:
        return [str(op) for op in self.ops[rank]]

    def same_ops(self, other: "Program") -> bool:
        return (self.collective == other.collective and self.nranks == other.nranks
                and self.nseg == other.nseg and self.root == other.root
                and self.ops == other.ops)


def segment_bounds(nunits: int, nseg: int) -> list[int]:
    """Unit boundaries of the nseg segments of nunits units (semantics above); 64-bit
    exact as the runtime computes them (q * s + r * s // nseg)."""
    q, r = divmod(int(nunits), nseg)
    return [s * q + (s * r) // nseg for s in range(nseg + 1)]


def piece_units(nunits: int, nseg: int) -> list[int]:
    b = segment_bounds(nunits, nseg)
    return [b[s + 1] - b[s] for s in range(nseg)]


class Builder:
    """Transfers in one global order -> per-rank lists (the pattern of ir.from_transfers).

    `add(step, src, dst, pieces)` moves the pieces from src to dst in `step`. A rank's
    list is sorted by (step, receives before sends, order of add): a step's receives are
    posted before its sends (unless a transfer asks for send_first), and anything a rank
    forwards must have come in an earlier step (the verifier checks it). Per ordered pair the sends and the receives keep the
    order of add, so they match one to one.
    """

    def __init__(self, collective: str, nranks: int, nseg: int, *, root: int = 0,
                 algorithm: str = "custom"):
        if collective not in COLLECTIVES:
            raise ValueError(f"unknown collective {collective!r}")
        self.collective, self.nranks, self.nseg = collective, nranks, nseg
        self.root, self.algorithm = root, algorithm
        self._rows: list[tuple] = []  # (rank, step, is_send, index, Op)

    def add(self, step: int, src: int, dst: int, pieces, *, reduce: bool = False,
            local_first: bool = False, fifo: bool = False, fence_send: bool = False,
            fence_recv: bool = False, send_first: bool = False,
            chain_send: bool = False) -> None:
        """One transfer. reduce: the receiver combines (RECV_REDUCE); fence_send /
        fence_recv: that end waits for all its earlier receives first (Op.fence).
        send_first: the send comes before every receive of its step in src's list, so it
        carries the value held before the step - two ranks that swap a piece and both
        combine (recursive doubling) need it, since with receives first each send would
        wait for the other's. Within one step do not mix send_first and plain transfers on
        the same ordered pair (their sends would no longer keep the order of add).
        chain_send: the send waits for the completion of the rank's previous send (Op.chain)."""
        if src == dst:
            raise ValueError(f"transfer from rank {src} to itself")
        pieces = tuple(Piece(*p) for p in pieces)
        i = len(self._rows)
        self._rows.append((src, step, -1 if send_first else 1, i,
                           Op(SEND, dst, pieces, fifo=fifo, fence=fence_send,
                                              chain=chain_send)))
        kind = RECV_REDUCE if reduce else RECV
        self._rows.append((dst, step, 0, i, Op(kind, src, pieces, fence=fence_recv,
                                               local_first=local_first and reduce)))

    def build(self, **fields) -> Program:
        lists: list[list[Op]] = [[] for _ in range(self.nranks)]
        for rank, _step, _is_send, _i, op in sorted(self._rows, key=lambda r: r[:4]):
            lists[rank].append(op)
        return Program(collective=self.collective, nranks=self.nranks, nseg=self.nseg,
                       ops=lists, root=self.root, algorithm=self.algorithm, **fields)


def from_op_lists(collective: str, nranks: int, nseg: int, lists, *, root: int = 0,
                  algorithm: str = "custom") -> Program:
    """A Program from hand-written lists of (kind, peer, pieces[, flags...]) tuples: kind
    "send" / "recv" / "recv-reduce", pieces a list of (src, dst, seg); extra items are
    flag names ("fifo", "fence", "local-first", "chain"). For tests and small examples."""
    names = {v: k for k, v in KIND_NAMES.items()}
    out = []
    for ops in lists:
        row = []
        for kind, peer, pieces, *flags in ops:
            row.append(Op(names.get(kind, kind), int(peer), tuple(Piece(*p) for p in pieces),
                          fifo="fifo" in flags, fence="fence" in flags,
                          local_first="local-first" in flags, chain="chain" in flags))
        out.append(row)
    return Program(collective=collective, nranks=nranks, nseg=nseg, ops=out, root=root,
                   algorithm=algorithm)
