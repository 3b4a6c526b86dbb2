"""The intergroup schedule IR: per rank, an ordered list of send/recv operations on ranges.

An `InterSchedule` is what an intergroup plan (plan.py) becomes once every rank's list is
fixed, and what a `.sched` file of collective 3 or 4 holds (schedfile.py here;
docs/schedule-format.md#intergroup-schedules). Execution rules: docs/semantics.md
#intergroup-schedules. It is columnar like `ir.Schedule` (numpy columns in rank-major
order, CSR offsets per rank) but its pieces are byte ranges [lo, hi) of one group's data
instead of (origin, segment) pairs: Algorithm 2 cuts a group's bytes across block
boundaries, and root gathering forwards a whole group's data in one message.

`from_plan` orders each rank's operations exactly as `ir.from_transfers` does (by step,
a step's receives before its sends, then by position in the plan's transfer list), so the
k-th send a -> b always meets the k-th receive at b from a.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import KIND_NAMES, RECV, SEND, _sort_ops
from .groups import GROUP_NAMES, Groups
from .plan import Plan

COLLECTIVES = {"inter-allgather": 3, "inter-allgatherv": 4}


@dataclass
class InterSchedule:
    """Per-rank operation lists of one intergroup collective, stored column-wise.

    Operations of rank r are offsets[r]:offsets[r+1] of every column. Rank i < p is a_i,
    p + j is b_j (groups.py).
    """

    groups: Groups
    offsets: np.ndarray  # int64, nranks + 1
    kind: np.ndarray  # uint8: SEND / RECV
    peer: np.ndarray  # int32
    group: np.ndarray  # uint8: whose data the range is (A = 0, B = 1)
    lo: np.ndarray  # int64: first byte of the range in that group's data
    hi: np.ndarray  # int64: one past the last
    fifo: np.ndarray | None = None  # uint8, sends only (docs/semantics.md rule 2)
    algorithm: str = "custom"
    collective: str = "inter-allgatherv"
    full_duplex: bool = True
    input_hash: bytes = b"\0" * 32
    compiler_version: str = ""
    # Not stored in files: the plan's step of every operation (for models and plots).
    step: np.ndarray | None = None
    # Set by reading a file: its format version and size.
    format_version: str | None = None
    file_bytes: int | None = None

    def __post_init__(self):
        if self.fifo is None:
            self.fifo = np.zeros(len(self.kind), np.uint8)

    @property
    def nranks(self) -> int:
        return self.groups.nranks

    @property
    def p(self) -> int:
        return self.groups.p

    @property
    def q(self) -> int:
        return self.groups.q

    @property
    def total_ops(self) -> int:
        return int(self.offsets[-1])

    @property
    def bytes_min(self) -> int:
        return min(self.groups.sizes_a + self.groups.sizes_b)

    @property
    def bytes_max(self) -> int:
        return max(self.groups.sizes_a + self.groups.sizes_b)

    @property
    def size(self) -> np.ndarray:
        """Bytes each operation moves."""
        return self.hi - self.lo

    @property
    def rank_of_op(self) -> np.ndarray:
        return np.repeat(np.arange(self.nranks, dtype=np.int32), np.diff(self.offsets))

    def ops_of(self, rank: int) -> list[tuple[str, int, str, int, int]]:
        """Readable (kind, peer, group, lo, hi) tuples of one rank."""
        a, b = int(self.offsets[rank]), int(self.offsets[rank + 1])
        return [(KIND_NAMES[int(k)], int(p), GROUP_NAMES[int(g)], int(lo), int(hi))
                for k, p, g, lo, hi in zip(self.kind[a:b], self.peer[a:b], self.group[a:b],
                                           self.lo[a:b], self.hi[a:b])]

    def same_ops(self, other: "InterSchedule") -> bool:
        return (self.groups == other.groups
                and all(np.array_equal(getattr(self, c), getattr(other, c))
                        for c in ("offsets", "kind", "peer", "group", "lo", "hi", "fifo")))


def collective_for(groups: Groups) -> str:
    """inter-allgather when each group has one block size, else inter-allgatherv."""
    uniform = len(set(groups.sizes_a)) == 1 and len(set(groups.sizes_b)) == 1
    return "inter-allgather" if uniform else "inter-allgatherv"


def from_plan(plan: Plan, collective: str | None = None) -> InterSchedule:
    """Per-rank lists from a plan's transfers (in the plan's global order)."""
    g = plan.groups
    ts = plan.transfers
    n = len(ts)
    cols = np.array([(t.step, t.src, t.dst, t.group, t.lo, t.hi) for t in ts],
                    np.int64).reshape(n, 6)
    step, src, dst, grp, lo, hi = (cols[:, i] for i in range(6))
    tid = np.arange(n, dtype=np.int64)
    rank = np.concatenate([src, dst])
    kind = np.concatenate([np.full(n, SEND, np.uint8), np.full(n, RECV, np.uint8)])
    order = _sort_ops(rank, np.concatenate([step, step]), 1 - kind, np.concatenate([tid, tid]))
    counts = np.bincount(rank, minlength=g.nranks)
    offsets = np.zeros(g.nranks + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    coll = collective or collective_for(g)
    if coll not in COLLECTIVES:
        raise ValueError(f"unknown intergroup collective {coll!r}")
    if coll == "inter-allgather" and collective_for(g) != coll:
        raise ValueError("inter-allgather needs one block size per group")
    return InterSchedule(
        groups=g, offsets=offsets, kind=kind[order],
        peer=np.concatenate([dst, src])[order].astype(np.int32),
        group=np.concatenate([grp, grp])[order].astype(np.uint8),
        lo=np.concatenate([lo, lo])[order], hi=np.concatenate([hi, hi])[order],
        algorithm=plan.name, collective=coll,
        step=np.concatenate([step, step])[order])


def mark_fifo_links(s: InterSchedule) -> InterSchedule:
    """FIFO per link (docs/semantics.md rule 2): every send of a rank to a peer it has
    already sent to waits for the previous one to be matched and goes synchronously.

    Why: a ring forwards several blocks to the same neighbour; issued together they share
    the link fairly and all arrive at the end, so the neighbour can forward none of them
    until then. One after another, the first arrives after its own transfer time and the
    pipeline runs. Measured in the fluid model (which follows SMPI CM02 within a few %)
    at 64 ranks, 1 MiB blocks: kang at p:q = 50:14 from 1.25 M to 1.03 M, the paper's
    setting 4 from 2.1 M to 1.26 M; p = q unchanged (docs/intergroup.md)."""
    send = np.nonzero(s.kind == SEND)[0]
    key = s.rank_of_op[send].astype(np.int64) * s.nranks + s.peer[send]
    _, first = np.unique(key, return_index=True)  # the first send of each (rank, peer)
    fifo = np.zeros(len(s.kind), np.uint8)
    fifo[send] = 1
    fifo[send[first]] = 0
    s.fifo = fifo
    return s


def remote_total(s: InterSchedule, rank: int) -> int:
    """Bytes of the remote group's data a rank must end with."""
    return s.groups.total(s.groups.other(s.groups.group_of(rank)))
