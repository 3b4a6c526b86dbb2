"""What every plan returns, and the building blocks the plans share.

A plan is a transfer list over the merged ranks (groups.py) plus a `PlanInfo` that says
how it was cut: for the exchange plans (kang, kang-v) the chunk of the remote group's
data each rank holds after the exchange, which the intragroup ring then circulates.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from .groups import Groups, Transfer


@dataclass(frozen=True)
class PlanInfo:
    """How a plan cut the problem.

    chunks_a: boundaries (p + 1) of B's data such that a_i holds [chunks_a[i],
      chunks_a[i+1]) of it after the exchange (rank order: nondecreasing); None for plans
      without an exchange phase (root gathering).
    chunks_b: the same for B's ranks over A's data (q + 1 boundaries).
    subgroups: kang only: the ranks (local numbers) of the larger group assigned to each
      rank of the smaller one, s_0 .. s_{n-1}.
    swapped: kang only: True when p < q and the roles of A and B were exchanged.
    exchange_steps: steps 0 .. exchange_steps - 1 are the exchange; the rest the rings
      (or, for root gathering, the phases: see `phases`).
    no_waste: the plan promises that no rank receives a byte it already holds.
    phases: (name, first step, last step) of each phase, for the reader.
    """
    name: str
    chunks_a: Optional[tuple[int, ...]] = None
    chunks_b: Optional[tuple[int, ...]] = None
    subgroups: Optional[tuple[tuple[int, ...], ...]] = None
    swapped: bool = False
    exchange_steps: int = 0
    no_waste: bool = False
    phases: tuple[tuple[str, int, int], ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Plan:
    groups: Groups
    transfers: tuple[Transfer, ...]
    info: PlanInfo

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def steps(self) -> int:
        return 1 + max((t.step for t in self.transfers), default=-1)


def ring(groups: Groups, holder: int, data: int, held: Sequence[Sequence[tuple[int, int]]],
         base: int) -> list[Transfer]:
    """Ring allgatherv inside group `holder` over pieces of group `data`'s bytes.

    held[i] lists the pieces (lo, hi) the holder group's local rank i has before the ring.
    In ring step t (global step base + t), t = 0 .. n - 2, local rank i sends rank
    (i - t) mod n's pieces to rank i + 1, one transfer per piece, empty pieces skipped; it
    received them in step t - 1, so each forward comes from an earlier step. Every rank
    ends with every piece, in the order the pieces were given: when held[i] are
    consecutive ranges in rank order, the data lands in rank order with no reordering.
    """
    n = groups.size(holder)
    out = []
    for t in range(n - 1):
        for i in range(n):
            for lo, hi in held[(i - t) % n]:
                if hi > lo:
                    out.append(Transfer(base + t, groups.rank(holder, i),
                                        groups.rank(holder, (i + 1) % n), data, lo, hi))
    return out
