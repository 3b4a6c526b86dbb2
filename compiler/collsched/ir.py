"""Schedule IR: per rank, an ordered list of send/recv operations on pieces.

The IR is columnar (numpy arrays in rank-major order, CSR offsets per rank) so that
millions of operations are built, verified and written with array operations, not per
operation in Python (docs/benchmarks.md, "Compiler"). Semantics of the lists:
docs/semantics.md.

Algorithms do not write per-rank lists by hand. They describe *transfers* (one piece from
one rank to another) tagged with a step number; `from_transfers` turns them into per-rank
lists. Because every rank's list is derived from one global order of transfers, the k-th
send a->b always meets the k-th recv at b from a, and the cost model's port orders can
never form a cycle.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEND, RECV = 0, 1
FOREGROUND, BACKGROUND = 0, 1
# Schedule.join: 1 = this op carries one more piece of the message the op before it in the
# rank's list started (multi-piece messages, docs/semantics.md "Multi-piece messages").
JOIN = 1
KIND_NAMES = {SEND: "send", RECV: "recv"}
PHASE_NAMES = {FOREGROUND: "fg", BACKGROUND: "bg"}

COLLECTIVES = {"allgather": 1}
MAX_RANKS = 1 << 24
MAX_SEGMENTS = 65535


@dataclass
class Transfers:
    """An algorithm's transfers in its global order, as it gave them to from_transfers:
    kept on the Schedule (Schedule.transfers) for the pipeline's passes that re-sort the
    lists from that order (passes.gate_link_receives), which drop it."""

    step: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    origin: np.ndarray
    segment: np.ndarray
    send_phase: np.ndarray
    recv_phase: np.ndarray


@dataclass
class Schedule:
    """Per-rank operation lists of one collective, stored column-wise.

    Operations of rank r are the index range offsets[r]:offsets[r+1] of every column.
    """

    nranks: int
    nseg: int
    offsets: np.ndarray  # int64, nranks + 1
    kind: np.ndarray  # uint8: SEND / RECV
    peer: np.ndarray  # int32
    origin: np.ndarray  # int32
    segment: np.ndarray  # int32 (stored as u16 in files)
    phase: np.ndarray  # uint8: FOREGROUND / BACKGROUND
    algorithm: str = "custom"
    collective: str = "allgather"
    bytes_min: int = 0
    bytes_max: int = 0
    full_duplex: bool = True
    input_hash: bytes = b"\0" * 32
    compiler_version: str = ""
    # Serial execution (docs/semantics.md): one send and one receive at a time, as the BDR
    # paper runs its schedules; stored in the file header, proven and modelled as such.
    serial: bool = False
    # uint8 per op, sends only: wait for the previous send to the same peer (FIFO per link;
    # set by policy.mark_fifo_links). None = all zero.
    fifo: np.ndarray | None = None
    # uint8 per op: 1 = the op continues the message of the op before it (same rank, kind,
    # peer and phase; never a rank's first op, never FIFO-marked): one MPI message carries
    # the pieces of a head op and of the joined ops after it. None = all zero (every op is
    # a message of one piece, as before).
    join: np.ndarray | None = None
    # Not stored in files. Set by an algorithm that plans with the pool tree (min3): the
    # tree's partitions, against which the verifier checks that every piece enters every
    # pool once, and the run time its own plan predicts.
    pool_partitions: list | None = None
    planned_run_time_s: float | None = None
    # Not stored in files: the transfers' global order, for the pipeline's passes (Transfers).
    transfers: Transfers | None = None
    # Set by schedfile.read: the file's format version ("major.minor") and size in bytes.
    format_version: str | None = None
    file_bytes: int | None = None

    def __post_init__(self):
        if self.fifo is None:
            self.fifo = np.zeros(len(self.kind), np.uint8)
        if self.join is None:
            self.join = np.zeros(len(self.kind), np.uint8)

    @property
    def has_messages(self) -> bool:
        """True if some message carries more than one piece (a joined op exists)."""
        return bool(np.any(self.join))

    def message_head(self) -> np.ndarray:
        """Per op, the index of the first op of its message (itself unless joined)."""
        idx = np.arange(self.total_ops, dtype=np.int64)
        if not self.has_messages:
            return idx
        head = np.where(self.join == 0, idx, -1)
        return np.maximum.accumulate(head) if len(head) else head

    def message_sizes(self, nbytes: int) -> np.ndarray:
        """Per op: bytes of the whole message on its head op, 0 on joined ops."""
        per_op = self.piece_bytes(nbytes)[self.segment]
        if not self.has_messages:
            return per_op
        out = np.zeros(self.total_ops, np.int64)
        np.add.at(out, self.message_head(), per_op)
        return out

    @property
    def total_ops(self) -> int:
        return int(self.offsets[-1])

    @property
    def rank_of_op(self) -> np.ndarray:
        """Owning rank of every operation (int32 column)."""
        counts = np.diff(self.offsets)
        return np.repeat(np.arange(self.nranks, dtype=np.int32), counts)

    @property
    def has_background(self) -> bool:
        return bool(np.any(self.phase == BACKGROUND))

    def ops_of(self, rank: int) -> list[tuple[str, int, int, int, str]]:
        """Readable (kind, peer, origin, segment, phase) tuples of one rank."""
        lo, hi = int(self.offsets[rank]), int(self.offsets[rank + 1])
        return [
            (KIND_NAMES[int(k)], int(p), int(o), int(s), PHASE_NAMES[int(f)])
            for k, p, o, s, f in zip(
                self.kind[lo:hi], self.peer[lo:hi], self.origin[lo:hi],
                self.segment[lo:hi], self.phase[lo:hi])
        ]

    def same_ops(self, other: "Schedule") -> bool:
        return (self.nranks == other.nranks and self.nseg == other.nseg
                and all(np.array_equal(getattr(self, c), getattr(other, c))
                        for c in ("offsets", "kind", "peer", "origin", "segment", "phase", "fifo",
                                  "join")))

    def piece_bytes(self, nbytes: int) -> np.ndarray:
        """Bytes of each segment index for `nbytes` per rank (docs/semantics.md)."""
        return segment_bytes(nbytes, self.nseg)


def segment_bytes(nbytes: int, nseg: int) -> np.ndarray:
    """Bytes of each segment index of a block of `nbytes` cut into `nseg` (docs/semantics.md)."""
    s = np.arange(nseg + 1, dtype=np.int64)
    q, r = divmod(int(nbytes), nseg)  # as the runtime's cs_seg_lo: no 64-bit overflow
    return np.diff(s * q + (s * r) // nseg)


def from_transfers(nranks: int, nseg: int, step, src, dst, origin, segment=None,
                   phase=None, *, algorithm: str, half_duplex_order: bool = False,
                   recv_phase=None, recv_step=None, join=None) -> Schedule:
    """Build per-rank lists from transfers given in global order.

    Each transfer i moves piece (origin[i], segment[i]) from src[i] to dst[i] in step[i].
    A rank's list is sorted by (step, sub-step, recv before send, transfer index): recvs of
    a step are posted before its sends, and a forwarded piece must come from an earlier
    step. With `half_duplex_order`, transfers of one step are split into sub-steps so that
    no rank sends and receives in the same sub-step (greedy colouring), which is what a
    half-duplex port needs to make progress in parallel. `phase` applies to both ends of a
    transfer unless `recv_phase` gives the receiving end its own (a late rank receives in
    the background from an early one sending in its foreground: BDR pre-steps).

    `join` (multi-piece messages): join[i] = 1 puts transfer i into the message of
    transfer i - 1, which must have the same src, dst, step, recv step and phases (checked
    here). The pieces of a message then sit next to each other in both lists, in transfer
    order: nothing else sorts between consecutive transfers with equal keys.
    """
    step = _integers(step)
    src = np.asarray(src, dtype=np.int32)
    dst = np.asarray(dst, dtype=np.int32)
    origin = np.asarray(origin, dtype=np.int32)
    n = len(step)
    segment_given, phase_given = segment is not None, phase is not None
    segment = np.zeros(n, np.int32) if segment is None else np.asarray(segment, np.int32)
    phase = np.zeros(n, np.uint8) if phase is None else np.asarray(phase, np.uint8)
    rphase = phase if recv_phase is None else np.asarray(recv_phase, np.uint8)
    substep = _half_duplex_substeps(step, src, dst) if half_duplex_order else None
    rstep = step if recv_step is None else _integers(recv_step)
    counts = np.bincount(src, minlength=nranks) + np.bincount(dst, minlength=nranks)
    offsets = np.zeros(nranks + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    # Each rank's list: (background first, step, sub-step, recv before send, transfer
    # index). The ops are numbered sends 0..n-1, then recvs n..2n-1, in transfer order.
    is_send, tid = _op_order(src, dst, phase, rphase, step, rstep, substep)
    kind = (~is_send).view(np.uint8)  # SEND 0, RECV 1
    # Gathers by transfer index are the costly part at scale (cache misses at every op):
    # columns that are all zero (no segments, no phases given) are not gathered.
    peer = src.take(tid)
    np.copyto(peer, dst.take(tid), where=is_send)
    if segment_given:
        segment = segment.take(tid)
    else:
        segment = np.zeros(2 * n, np.int32)
    if phase_given or rphase is not phase:
        op_phase = phase.take(tid)
        if rphase is not phase:
            np.copyto(op_phase, rphase.take(tid), where=~is_send)
    else:
        op_phase = np.zeros(2 * n, np.uint8)
    op_join = None
    if join is not None:
        op_join = _op_join(np.asarray(join, np.uint8), tid, src, dst, step, rstep, phase, rphase,
                           substep)
    return Schedule(
        nranks=nranks, nseg=nseg, offsets=offsets,
        kind=kind, peer=peer, origin=origin.take(tid), segment=segment,
        phase=op_phase, algorithm=algorithm, join=op_join,
    )


def _op_join(join, tid, src, dst, step, rstep, phase, rphase, substep) -> np.ndarray:
    """The join column of the ops (both ends of a joined transfer are joined), after
    checking that every joined transfer can share its predecessor's message."""
    n = len(join)
    if n != len(src):
        raise ValueError(f"join has {len(join)} entries for {len(src)} transfers")
    j = np.nonzero(join)[0]
    if len(j):
        if j[0] == 0:
            raise ValueError("join[0] = 1: the first transfer has no message to join")
        p = j - 1
        same = ((src[j] == src[p]) & (dst[j] == dst[p]) & (step[j] == step[p])
                & (rstep[j] == rstep[p]) & (phase[j] == phase[p]) & (rphase[j] == rphase[p]))
        if substep is not None:
            same &= substep[j] == substep[p]
        if not same.all():
            i = int(j[np.argmin(same)])
            raise ValueError(f"transfer {i} joins transfer {i - 1}, which differs in src, dst, "
                             "step or phase")
    return join.take(tid)


def _integers(a) -> np.ndarray:
    """An integer key column as given (int32 steps stay int32: no int64 copy of P^2 of
    them); anything else as int64, as before."""
    a = np.asarray(a)
    narrow = a.dtype.kind == "i" or (a.dtype.kind == "u" and a.dtype.itemsize < 8)
    return a if narrow else a.astype(np.int64)


def _op_order(src, dst, phase, rphase, step, rstep, substep):
    """(is_send, transfer index) of every op, rank-major and in list order.

    The keys of from_transfers are packed into one int64 per op that ends in the op's
    number ((1 - kind) * n + transfer index: unique), so sorting the values - an in-place
    SIMD sort, several times faster than argsort over tens of millions of ops, and no
    index array beside them - gives the order, read back from the low part. Keys that do
    not fit in 62 bits, or negative ones, take _sort_ops' way."""
    n = len(step)
    if n == 0:
        return np.zeros(0, bool), np.zeros(0, np.int64)
    lows = [int(a.min()) for a in (src, dst, step, rstep) + ((substep,) if substep is not None else ())]
    rspan = max(int(src.max()), int(dst.max())) + 1
    sspan = max(int(step.max()), int(rstep.max())) + 1
    subspan = int(substep.max()) + 1 if substep is not None else 1
    shift = (2 * n - 1).bit_length()  # the low part, (1 - kind) * n + transfer index, in bits
    if min(lows) < 0 or float(rspan) * 2 * sspan * subspan * 2.0 ** shift >= 2.0 ** 62:
        order = _sort_ops(np.concatenate([src, dst]),
                          np.concatenate([phase == FOREGROUND, rphase == FOREGROUND]),
                          np.concatenate([step, rstep]),
                          None if substep is None else np.concatenate([substep, substep]),
                          np.r_[np.ones(n, np.uint8), np.zeros(n, np.uint8)],  # 1 - kind
                          np.r_[np.arange(n), np.arange(n)])
        is_send = order < n
        return is_send, np.where(is_send, order, order - n)
    key = np.empty(2 * n, np.int64)
    key[:n], key[n:] = src, dst
    key *= 2  # background (0) before foreground (1)
    key[:n] += phase == FOREGROUND
    key[n:] += rphase == FOREGROUND
    key *= sspan
    key[:n] += step
    key[n:] += rstep
    if substep is not None:
        key *= subspan
        key[:n] += substep
        key[n:] += substep
    key <<= shift
    tid = np.arange(n, dtype=np.int64)
    key[:n] += tid
    key[:n] += n  # a step's sends after its recvs
    key[n:] += tid
    del tid
    key.sort()
    key &= (1 << shift) - 1
    is_send = key >= n
    np.subtract(key, n, out=key, where=is_send)
    return is_send, key


def _sort_ops(*keys) -> np.ndarray:
    """Order of ops sorted by `keys` (most significant first; None: a key that is 0 for all).

    Packing the keys into one int64 and running a single argsort is faster than lexsort,
    which sorts once per key; lexsort remains for keys that do not fit. The keys are added
    in place, without an int64 copy of each (at a million transfers such copies cost more
    than the sort).
    """
    keys = [np.asarray(k) for k in keys if k is not None]
    spans = [int(k.max()) + 1 if len(k) else 1 for k in keys]
    if all(int(k.min()) >= 0 for k in keys if len(k)) and np.prod([float(x) for x in spans]) < 2.0 ** 62:
        packed = keys[0].astype(np.int64)
        for k, span in zip(keys[1:], spans[1:]):
            packed *= span
            packed += k
        return np.argsort(packed)  # keys end in a unique index: stability is moot
    return np.lexsort(tuple(k.astype(np.int64) for k in reversed(keys)))


def _half_duplex_substeps(step, src, dst) -> np.ndarray:
    """Greedy colouring: smallest sub-step in which neither endpoint is busy yet."""
    sub = np.zeros(len(step), np.int64)
    busy: dict[tuple[int, int], set] = {}
    for i, (st, s, d) in enumerate(zip(step.tolist(), src.tolist(), dst.tolist())):
        used_s = busy.setdefault((st, s), set())
        used_d = busy.setdefault((st, d), set())
        c = 0
        while c in used_s or c in used_d:
            c += 1
        used_s.add(c)
        used_d.add(c)
        sub[i] = c
    return sub


def from_op_lists(nranks: int, nseg: int, lists, algorithm: str = "custom") -> Schedule:
    """Schedule from per-rank lists of (kind, peer, origin, segment[, phase[, fifo[, join]]])
    tuples.

    For hand-written schedules (tests, small examples); kind is "send"/"recv" or SEND/RECV.
    """
    names = {"send": SEND, "recv": RECV, SEND: SEND, RECV: RECV}
    cols: tuple[list, ...] = ([], [], [], [], [], [], [])
    counts = []
    for ops in lists:
        counts.append(len(ops))
        for op in ops:
            kind, peer, origin, seg = op[:4]
            phase = op[4] if len(op) > 4 else FOREGROUND
            phase = {"fg": FOREGROUND, "bg": BACKGROUND}.get(phase, phase)
            fifo = int(op[5]) if len(op) > 5 else 0
            join = int(op[6]) if len(op) > 6 else 0
            for col, v in zip(cols, (names[kind], peer, origin, seg, phase, fifo, join)):
                col.append(v)
    offsets = np.zeros(nranks + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return Schedule(nranks=nranks, nseg=nseg, offsets=offsets,
                    kind=np.array(cols[0], np.uint8), peer=np.array(cols[1], np.int32),
                    origin=np.array(cols[2], np.int32), segment=np.array(cols[3], np.int32),
                    phase=np.array(cols[4], np.uint8), fifo=np.array(cols[5], np.uint8),
                    join=np.array(cols[6], np.uint8), algorithm=algorithm)


def to_op_lists(sched: Schedule) -> list[list[tuple]]:
    """Inverse of from_op_lists (kind and phase as names)."""
    return [sched.ops_of(r) for r in range(sched.nranks)]
