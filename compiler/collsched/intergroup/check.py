"""The planning core's checker: what is wrong with a transfer list, as a list.

`audit` walks the transfers in the order every rank runs them (by step, then list
position; a rank's receives of a step come before its sends, so a range is forwardable
only from the step after it arrived) and reports, as `Violation`s rather than exceptions:

- shape: a rank out of range, a transfer to oneself, an unknown group, a negative or
  non-integer step, an empty or reversed range, or one outside the group's data;
- holding: a transfer sends bytes its source does not hold by its step;
- pair: one ordered pair carries overlapping bytes twice in one step (a duplicate in
  flight; messages of one pair match in the order both ends list them, which is the
  same (step, position) order at both ends, so matching itself cannot go wrong);
- delivery: at the end a rank of A misses some of B's bytes, or a rank of B some of A's;
- waste: a rank receives bytes it already holds (its own block included). Counted in
  `Audit.waste_bytes`; a violation only when the plan promises none (no_waste=True).

Holding is tracked per rank and group with interval maps (intervals.py): its cost grows
with the transfers, not the bytes.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Optional, Sequence

from .groups import A, B, GROUP_NAMES, Groups, Transfer
from .intervals import EarliestMap


@dataclass(frozen=True)
class Violation:
    kind: str               # shape | holding | pair | delivery | waste
    message: str
    transfer: Optional[int] = None  # index in the transfer list
    rank: Optional[int] = None

    def __str__(self):
        where = f"transfer {self.transfer}: " if self.transfer is not None else \
            (f"rank {self.rank}: " if self.rank is not None else "")
        return f"{self.kind}: {where}{self.message}"


@dataclass
class Audit:
    violations: list[Violation] = field(default_factory=list)
    waste_bytes: int = 0
    waste_by_rank: dict[int, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations


def _shape(groups: Groups, t: Transfer) -> Optional[str]:
    n = groups.nranks
    if not isinstance(t.step, numbers.Integral) or isinstance(t.step, bool) or t.step < 0:
        return f"step {t.step!r} is not an integer >= 0"
    if not (0 <= t.src < n and 0 <= t.dst < n):
        return f"rank out of range 0..{n - 1}: {t.src} -> {t.dst}"
    if t.src == t.dst:
        return f"rank {t.src} sends to itself"
    if t.group not in (A, B):
        return f"unknown group {t.group!r}"
    if not t.lo < t.hi:
        return f"empty or reversed range [{t.lo}, {t.hi})"
    if t.lo < 0 or t.hi > groups.total(t.group):
        return (f"range [{t.lo}, {t.hi}) outside group {GROUP_NAMES[t.group]}'s data "
                f"[0, {groups.total(t.group)})")
    return None


def _holdings(groups: Groups):
    """Per (rank, group) earliest-step maps, each rank holding its own block from step -1."""
    held: dict[tuple[int, int], EarliestMap] = {}
    for r in range(groups.nranks):
        g, lo, hi = groups.own_range(r)
        m = EarliestMap()
        m.add(lo, hi, -1)
        held[(r, g)] = m
        held[(r, groups.other(g))] = EarliestMap()
    return held


def audit(groups: Groups, transfers: Sequence[Transfer], *, no_waste: bool = False) -> Audit:
    """Everything the checker finds (module docstring)."""
    res = Audit()
    held = _holdings(groups)
    in_flight: dict[tuple[int, int, int, int], EarliestMap] = {}
    valid = []
    for i, t in enumerate(transfers):
        msg = _shape(groups, t)
        if msg:
            res.violations.append(Violation("shape", msg, transfer=i))
        else:
            valid.append(i)
    valid.sort(key=lambda i: (transfers[i].step, i))
    for i in valid:
        t = transfers[i]
        have = held[(t.src, t.group)]
        when = have.latest(t.lo, t.hi)
        if when is None or when >= t.step:
            gaps = have.missing(t.lo, t.hi)
            why = (f"missing {gaps[:3]}{'...' if len(gaps) > 3 else ''}" if gaps
                   else f"some of it arrives only in step {int(when)}")
            res.violations.append(Violation(
                "holding", f"rank {t.src} sends {GROUP_NAMES[t.group]}[{t.lo}, {t.hi}) in "
                f"step {t.step} but does not hold it yet: {why}", transfer=i, rank=t.src))
        key = (t.src, t.dst, t.step, t.group)
        flight = in_flight.setdefault(key, EarliestMap())
        if flight.add(t.lo, t.hi, t.step):
            res.violations.append(Violation(
                "pair", f"{t.src} -> {t.dst} carries overlapping bytes of "
                f"{GROUP_NAMES[t.group]} twice in step {t.step}", transfer=i, rank=t.src))
        dup = held[(t.dst, t.group)].add(t.lo, t.hi, t.step)
        if dup:
            res.waste_bytes += dup
            res.waste_by_rank[t.dst] = res.waste_by_rank.get(t.dst, 0) + dup
            if no_waste:
                res.violations.append(Violation(
                    "waste", f"rank {t.dst} receives {dup} bytes of "
                    f"{GROUP_NAMES[t.group]}[{t.lo}, {t.hi}) it already holds",
                    transfer=i, rank=t.dst))
    for r in range(groups.nranks):
        remote = groups.other(groups.group_of(r))
        gaps = held[(r, remote)].missing(0, groups.total(remote))
        if gaps:
            lost = sum(hi - lo for lo, hi in gaps)
            res.violations.append(Violation(
                "delivery", f"misses {lost} bytes of {GROUP_NAMES[remote]}'s data: "
                f"{gaps[:3]}{'...' if len(gaps) > 3 else ''}", rank=r))
    return res


def check(groups: Groups, transfers: Sequence[Transfer], *, no_waste: bool = False) -> list[Violation]:
    """The violations of `audit` (an empty list: the transfers are a correct plan)."""
    return audit(groups, transfers, no_waste=no_waste).violations


def check_plan(plan) -> list[Violation]:
    """check() with the plan's own promise about waste."""
    return check(plan.groups, plan.transfers, no_waste=plan.info.no_waste)
