"""Verifier for intergroup schedules: proves an InterSchedule correct under
docs/semantics.md#intergroup-schedules, or says where it is not.

Passes, run in order; `verify` stops after the first that fails (later ones assume what
earlier ones establish), each returning `collsched.verify.Violation`s so that
`collsched verify` prints them as for allgather schedules:

- shape: offsets, kinds, peers, groups, ranges inside the group's data, FIFO on sends only;
- matching: per ordered pair, as many sends as receives, the k-th of each naming the same
  group and range;
- holding: a send's range is the rank's own block or delivered by earlier receives of its
  list;
- duplicates: a receive brings only new bytes or only bytes held or already incoming, never
  both;
- delivery: every rank ends with all of the remote group's data;
- progress: the dataflow walks of every rank complete (receives posted at once; a send
  waits for the earlier new receives that bring bytes of its range, each complete once
  its matching send is issued; a FIFO send waits for the peer to post the receive of the
  previous send to it). These are the waits the runtime derives (runtime/src/
  inter_check.c): a duplicate receive brings nothing a send needs (its bytes are the own
  block or came with an earlier new receive), so no send waits for one.

Ranges are tracked with interval maps (intervals.py): 8 MiB blocks cost what 8 bytes do.
"""
from __future__ import annotations

import bisect

import numpy as np

from ..ir import RECV, SEND
from ..verify import MAX_REPORTED, Violation
from .groups import GROUP_NAMES
from .intervals import EarliestMap
from .schedule import InterSchedule


def _fmt(g: int, lo: int, hi: int) -> str:
    return f"{GROUP_NAMES[g]}[{lo}, {hi})"


class _Ctx:
    """Per-schedule arrays the passes share (computed once), as Python lists."""

    def __init__(self, s: InterSchedule):
        self.s = s
        self.offsets = [int(x) for x in s.offsets]
        self.kind = s.kind.tolist()
        self.peer = s.peer.tolist()
        self.group = s.group.tolist()
        self.lo = s.lo.tolist()
        self.hi = s.hi.tolist()
        self.fifo = s.fifo.tolist()
        self.rank = s.rank_of_op.tolist() if len(self.kind) else []
        self.partner: list[int] | None = None  # matched op of each op (matching pass)
        self.deps: list[list[int]] | None = None  # per send: the receives it waits for

    def local(self, op: int) -> int:
        return op - self.offsets[self.rank[op]]

    def v(self, check: str, op: int, reason: str) -> Violation:
        return Violation(check, self.rank[op], self.local(op), reason)

    def what(self, op: int) -> str:
        return _fmt(self.group[op], self.lo[op], self.hi[op])


def check_offsets(s: InterSchedule) -> list[Violation]:
    """The CSR layout itself (before anything indexes by it)."""
    n, off = s.nranks, s.offsets
    cols = (s.kind, s.peer, s.group, s.lo, s.hi, s.fifo)
    if (len(off) != n + 1 or int(off[0]) != 0 or np.any(np.diff(off) < 0)
            or any(len(col) != int(off[-1]) for col in cols)):
        return [Violation("shape", 0, None, f"offsets must rise from 0 to the op count in "
                                            f"{n + 1} entries, one column entry per op")]
    return []


def check_shape(c: _Ctx) -> list[Violation]:
    """Each op's fields, as numpy masks; an op is named once, for its first fault."""
    s = c.s
    n = s.nranks
    rank = s.rank_of_op
    grp = s.group.astype(np.int64)
    total = np.array([s.groups.total(0), s.groups.total(1), -1], np.int64)[np.minimum(grp, 2)]
    tests = (
        ((s.kind != SEND) & (s.kind != RECV), lambda i: "kind is neither send nor recv"),
        ((s.peer < 0) | (s.peer >= n), lambda i: f"peer {c.peer[i]} out of range 0..{n - 1}"),
        (s.peer == rank, lambda i: "peer is the rank itself"),
        (grp > 1, lambda i: f"group {c.group[i]} is neither 0 (A) nor 1 (B)"),
        ((grp <= 1) & ((s.lo < 0) | (s.lo >= s.hi) | (s.hi > total)),
         lambda i: f"range [{c.lo[i]}, {c.hi[i]}) is empty or outside group "
                   f"{GROUP_NAMES[c.group[i]]}'s data [0, {s.groups.total(c.group[i])})"),
        (s.fifo > 1, lambda i: "FIFO flag is neither 0 nor 1"),
        ((s.fifo == 1) & (s.kind == RECV), lambda i: "FIFO flag on a recv"),
    )
    first: dict[int, str] = {}
    for mask, reason in tests:
        for i in np.nonzero(mask)[0][:MAX_REPORTED].tolist():
            if i not in first:
                first[i] = reason(i)
    return [c.v("shape", i, first[i]) for i in sorted(first)[:MAX_REPORTED]]


def check_matching(c: _Ctx) -> list[Violation]:
    """The k-th send a -> b meets the k-th receive at b from a (MPI's non-overtaking)."""
    sends: dict[tuple[int, int], list[int]] = {}
    recvs: dict[tuple[int, int], list[int]] = {}
    for i, k in enumerate(c.kind):
        r, p = c.rank[i], c.peer[i]
        if k == SEND:
            sends.setdefault((r, p), []).append(i)
        else:
            recvs.setdefault((p, r), []).append(i)
    out: list[Violation] = []
    partner = [-1] * len(c.kind)
    for pair in sorted(set(sends) | set(recvs)):
        ss, rr = sends.get(pair, []), recvs.get(pair, [])
        for k, (so, ro) in enumerate(zip(ss, rr)):
            partner[so], partner[ro] = ro, so
            if (c.group[so], c.lo[so], c.hi[so]) != (c.group[ro], c.lo[ro], c.hi[ro]):
                out.append(c.v("matching", ro, f"recv #{k + 1} from {pair[0]} expects {c.what(ro)} "
                                               f"but the matching send (rank {pair[0]} op "
                                               f"{c.local(so)}) carries {c.what(so)}"))
        for k in range(len(rr), len(ss)):
            out.append(c.v("matching", ss[k], f"send #{k + 1} to {pair[1]} of {c.what(ss[k])} "
                                              "has no matching recv there"))
        for k in range(len(ss), len(rr)):
            out.append(c.v("matching", rr[k], f"recv #{k + 1} from {pair[0]} of {c.what(rr[k])} "
                                              "has no matching send there"))
        if len(out) >= MAX_REPORTED:
            break
    if not out:
        c.partner = partner
    return out[:MAX_REPORTED]


class _Receipts:
    """The new receives of one rank and group so far: which receive brings each byte.

    Disjoint sorted segments [lo, hi) -> the receive ops meeting them, in list order (one
    each, as new receives do not overlap; a list keeps the structure honest if they did)."""

    def __init__(self):
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.ops: list[list[int]] = []

    def _split(self, x: int) -> None:
        i = bisect.bisect_right(self.lo, x) - 1
        if i >= 0 and self.lo[i] < x < self.hi[i]:
            self.lo.insert(i + 1, x)
            self.hi.insert(i + 1, self.hi[i])
            self.ops.insert(i + 1, list(self.ops[i]))
            self.hi[i] = x

    def add(self, lo: int, hi: int, op: int) -> None:
        self._split(lo)
        self._split(hi)
        i = bisect.bisect_left(self.lo, lo)
        cur = lo
        while cur < hi:
            if i < len(self.lo) and self.lo[i] == cur:
                self.ops[i].append(op)
                cur = self.hi[i]
                i += 1
            else:  # a gap: a new segment up to the next one (or hi)
                end = min(hi, self.lo[i]) if i < len(self.lo) else hi
                self.lo.insert(i, cur)
                self.hi.insert(i, end)
                self.ops.insert(i, [op])
                cur = end
                i += 1

    def meeting(self, lo: int, hi: int) -> set[int]:
        i = bisect.bisect_right(self.hi, lo)
        found: set[int] = set()
        while i < len(self.lo) and self.lo[i] < hi:
            found.update(self.ops[i])
            i += 1
        return found


def _walk(c: _Ctx) -> tuple[list[Violation], list[Violation], list[Violation]]:
    """One walk over every rank's list: (holding, duplicates, delivery) violations, and the
    receives each send waits for (c.deps)."""
    s, groups = c.s, c.s.groups
    holding: list[Violation] = []
    dups: list[Violation] = []
    delivery: list[Violation] = []
    deps: list[list[int]] = [[] for _ in c.kind]
    for r in range(s.nranks):
        own_g, own_lo, own_hi = groups.own_range(r)  # held from entry, waited for by nothing
        held = [EarliestMap(), EarliestMap()]  # own block and everything received or incoming
        held[own_g].add(own_lo, own_hi, 0)
        receipts = [_Receipts(), _Receipts()]
        for i in range(c.offsets[r], c.offsets[r + 1]):
            g, lo, hi = c.group[i], c.lo[i], c.hi[i]
            if c.kind[i] == RECV:
                dup = held[g].add(lo, hi, 0)
                if 0 < dup < hi - lo and len(dups) < MAX_REPORTED:
                    dups.append(c.v("duplicates", i, f"recv from {c.peer[i]} of {c.what(i)} is "
                                                     f"partly new and partly held or already "
                                                     f"incoming ({dup} of {hi - lo} bytes)"))
                if not dup:  # a new receive: the only kind a send waits for
                    receipts[g].add(lo, hi, i)
                continue
            gaps = held[g].missing(lo, hi)
            if gaps and len(holding) < MAX_REPORTED:
                holding.append(c.v("holding", i, f"sends {c.what(i)} to {c.peer[i]} before holding "
                                                 f"it: no earlier receive brings "
                                                 + ", ".join(f"[{a}, {b})" for a, b in gaps[:3])
                                                 + (" ..." if len(gaps) > 3 else "")))
            deps[i] = sorted(receipts[g].meeting(lo, hi))
        remote = groups.other(own_g)
        gaps = held[remote].missing(0, groups.total(remote))
        if gaps and len(delivery) < MAX_REPORTED:
            lost = sum(b - a for a, b in gaps)
            delivery.append(Violation("delivery", r, None, f"never receives {lost} bytes of "
                                      f"{GROUP_NAMES[remote]}'s data: "
                                      + ", ".join(f"[{a}, {b})" for a, b in gaps[:3])
                                      + (" ..." if len(gaps) > 3 else "")))
    c.deps = deps
    return holding, dups, delivery


def check_progress(c: _Ctx) -> list[Violation]:
    """Every rank's walk reaches its end (module docstring); a deadlock is named at the
    send each stuck rank waits at, with the operation it waits for."""
    assert c.partner is not None and c.deps is not None
    n = c.s.nranks
    # What each send waits for, as ops that must have been issued: the matching sends of
    # the receives it needs, and (FIFO) the matching recv of the previous send to its peer.
    waits: dict[int, list[int]] = {}
    last_send: dict[tuple[int, int], int] = {}
    for i, k in enumerate(c.kind):
        if k != SEND:
            continue
        w = [c.partner[d] for d in c.deps[i]]
        key = (c.rank[i], c.peer[i])
        if c.fifo[i] and key in last_send:
            w.append(c.partner[last_send[key]])
        last_send[key] = i
        if w:
            waits[i] = w
    cur = c.offsets[:-1]  # per rank: the first op not yet issued
    cur = list(cur)
    waiting: list[list[int]] = [[] for _ in range(n)]
    todo = list(range(n))
    while todo:
        r = todo.pop()
        moved = False
        end = c.offsets[r + 1]
        while cur[r] < end:
            blocked = next((d for d in waits.get(cur[r], ()) if cur[c.rank[d]] <= d), None)
            if blocked is not None:
                waiting[c.rank[blocked]].append(r)
                break
            cur[r] += 1
            moved = True
        if moved:
            todo.extend(waiting[r])
            waiting[r] = []
    out = []
    for r in range(n):
        i = cur[r]
        if i < c.offsets[r + 1]:
            d = next(d for d in waits[i] if cur[c.rank[d]] <= d)
            why = ("the receive of its previous message there" if c.kind[d] == RECV
                   else f"the send of {c.what(d)} it forwards")
            out.append(c.v("progress", i, f"deadlock: waits to send {c.what(i)} to {c.peer[i]} "
                                          f"until rank {c.rank[d]} issues its op {c.local(d)} "
                                          f"({why}), which never happens"))
            if len(out) >= MAX_REPORTED:
                break
    return out


def verify(s: InterSchedule) -> list[Violation]:
    """All violations of the first failing pass; [] when the schedule is correct."""
    found = check_offsets(s)
    if found:
        return found
    c = _Ctx(s)
    for check in (check_shape, check_matching):
        found = check(c)
        if found:
            return found
    for found in _walk(c):  # holding, duplicates, delivery
        if found:
            return found
    return check_progress(c)


PASSES = ("shape", "matching", "holding", "duplicates", "delivery", "progress")
