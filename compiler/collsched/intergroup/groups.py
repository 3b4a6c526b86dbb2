"""The data model of an intergroup allgather(v): two groups, their blocks, transfers.

Group A has p ranks with block sizes k_A[0..p-1], group B has q ranks with k_B[0..q-1].
Ranks are numbered as MPI_Intercomm_merge numbers them with A as the low group: a_i is
merged rank i, b_j is merged rank p + j. Each group's blocks, concatenated in rank order,
form that group's data: byte y of a_i's block has the global index off_A[i] + y (the
paper's m_{A,i,y}.index). A piece is a byte range [lo, hi) of one group's data.

A transfer moves one piece from one rank to another in a step. Steps order every rank's
operations the way `ir.from_transfers` does: by step, receives before sends within a
step, then by position in the list; a rank may forward a range only if it arrived in an
earlier step. At the end every rank of A must hold all of B's data and every rank of B
all of A's; nothing of a rank's own group is required.

Nothing here depends on the schedule IR: these are the planning core's own types.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple, Sequence

A = 0  # group ids, as in Transfer.group
B = 1
GROUP_NAMES = ("A", "B")


class Transfer(NamedTuple):
    """Piece [lo, hi) of group `group`'s data moves from merged rank src to dst in `step`."""
    step: int
    src: int
    dst: int
    group: int
    lo: int
    hi: int

    @property
    def size(self) -> int:
        return self.hi - self.lo


@dataclass(frozen=True)
class Groups:
    """Two disjoint groups given by their block sizes (bytes, one per rank)."""
    sizes_a: tuple[int, ...]
    sizes_b: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "sizes_a", tuple(int(k) for k in self.sizes_a))
        object.__setattr__(self, "sizes_b", tuple(int(k) for k in self.sizes_b))
        if not self.sizes_a or not self.sizes_b:
            raise ValueError("both groups need at least one rank")
        if min(self.sizes_a + self.sizes_b) < 0:
            raise ValueError("block sizes must be >= 0")

    @classmethod
    def equal(cls, p: int, q: int, k_a: int, k_b: int) -> "Groups":
        """Allgather: every rank of A contributes k_a bytes, every rank of B k_b."""
        return cls((k_a,) * p, (k_b,) * q)

    @property
    def p(self) -> int:
        return len(self.sizes_a)

    @property
    def q(self) -> int:
        return len(self.sizes_b)

    @property
    def nranks(self) -> int:
        return self.p + self.q

    def size(self, g: int) -> int:
        """Number of ranks of group g."""
        return self.p if g == A else self.q

    def sizes(self, g: int) -> tuple[int, ...]:
        return self.sizes_a if g == A else self.sizes_b

    @cached_property
    def _offsets(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        out = []
        for sizes in (self.sizes_a, self.sizes_b):
            off = [0]
            for k in sizes:
                off.append(off[-1] + k)
            out.append(tuple(off))
        return out[0], out[1]

    def offsets(self, g: int) -> tuple[int, ...]:
        """Prefix sums of group g's block sizes (n + 1 entries): block i is [off[i], off[i+1])."""
        return self._offsets[g]

    def total(self, g: int) -> int:
        """K_A or K_B: the bytes of group g's data."""
        return self._offsets[g][-1]

    def rank(self, g: int, i: int) -> int:
        """Merged rank of the i-th rank of group g."""
        return i if g == A else self.p + i

    def group_of(self, rank: int) -> int:
        return A if rank < self.p else B

    def local(self, rank: int) -> int:
        return rank if rank < self.p else rank - self.p

    def own_range(self, rank: int) -> tuple[int, int, int]:
        """(group, lo, hi) of the block `rank` contributes."""
        g, i = self.group_of(rank), self.local(rank)
        off = self.offsets(g)
        return g, off[i], off[i + 1]

    def other(self, g: int) -> int:
        return B if g == A else A


def even_cuts(total: int, n: int) -> tuple[int, ...]:
    """Boundaries (n + 1 of them) cutting `total` bytes into n parts as evenly as possible.

    The first total mod n parts get ceil(total / n) bytes, the others floor(total / n):
    the rule of the paper's subgroups, applied to bytes. Parts are empty when total < n.
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    base, extra = divmod(total, n)
    cuts = [0]
    for i in range(n):
        cuts.append(cuts[-1] + base + (1 if i < extra else 0))
    return tuple(cuts)


def ceil_log2(n: int) -> int:
    """Rounds of a binomial tree over n ranks."""
    return (n - 1).bit_length() if n > 1 else 0


def shift(transfers: Sequence[Transfer], base: int) -> list[Transfer]:
    """The same transfers `base` steps later."""
    return [t._replace(step=t.step + base) for t in transfers]
