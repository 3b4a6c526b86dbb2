"""Interval arithmetic for the checker and the time model.

An `EarliestMap` records, for byte ranges of one group's data held by one rank, the
earliest moment (a step or a time) each byte became held. It stores disjoint sorted
segments, one per run of bytes with the same moment, so its size grows with the number of
receives, not of bytes: 8 MiB blocks cost what 8 bytes do.
"""
from __future__ import annotations

import bisect
from typing import Optional


class EarliestMap:
    """Disjoint segments [lo, hi) -> earliest moment; adding keeps the minimum."""

    __slots__ = ("_lo", "_hi", "_t")

    def __init__(self):
        self._lo: list[int] = []
        self._hi: list[int] = []
        self._t: list[float] = []

    def segments(self) -> list[tuple[int, int, float]]:
        return list(zip(self._lo, self._hi, self._t))

    def add(self, lo: int, hi: int, t: float) -> int:
        """Mark [lo, hi) held from moment t; returns how many of its bytes were held already."""
        if lo >= hi:
            return 0
        los, his, ts = self._lo, self._hi, self._t
        i = bisect.bisect_right(his, lo)  # first segment ending after lo
        j = i
        new: list[tuple[int, int, float]] = []
        cur, dup = lo, 0
        while j < len(los) and los[j] < hi:
            slo, shi, st = los[j], his[j], ts[j]
            if slo < lo:
                new.append((slo, lo, st))
            if cur < slo:
                new.append((cur, slo, t))
            olo, ohi = max(slo, lo), min(shi, hi)
            dup += ohi - olo
            new.append((olo, ohi, min(st, t)))
            if shi > hi:
                new.append((hi, shi, st))
            cur = ohi
            j += 1
        if cur < hi:
            new.append((cur, hi, t))
        start = i - 1 if i > 0 and his[i - 1] == new[0][0] else i
        end = j + 1 if j < len(los) and los[j] == new[-1][1] else j
        pieces = [(los[k], his[k], ts[k]) for k in range(start, i)] + new + \
            [(los[k], his[k], ts[k]) for k in range(j, end)]
        merged: list[list] = []
        for plo, phi, pt in pieces:
            if merged and merged[-1][1] == plo and merged[-1][2] == pt:
                merged[-1][1] = phi
            else:
                merged.append([plo, phi, pt])
        los[start:end] = [m[0] for m in merged]
        his[start:end] = [m[1] for m in merged]
        ts[start:end] = [m[2] for m in merged]
        return dup

    def latest(self, lo: int, hi: int) -> Optional[float]:
        """The moment all of [lo, hi) is held (max over its bytes of the earliest), or None
        if some byte is not held. An empty range is held from the start (-inf)."""
        if lo >= hi:
            return float("-inf")
        los, his, ts = self._lo, self._hi, self._t
        i = bisect.bisect_right(his, lo)
        cur, moment = lo, float("-inf")
        while cur < hi:
            if i >= len(los) or los[i] > cur:
                return None
            moment = max(moment, ts[i])
            cur = his[i]
            i += 1
        return moment

    def missing(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The sub-ranges of [lo, hi) not held."""
        gaps = []
        los, his = self._lo, self._hi
        i = bisect.bisect_right(his, lo)
        cur = lo
        while cur < hi:
            if i >= len(los) or los[i] >= hi:
                gaps.append((cur, hi))
                break
            if los[i] > cur:
                gaps.append((cur, los[i]))
            cur = max(cur, his[i])
            i += 1
        return gaps
