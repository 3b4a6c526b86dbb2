"""Verifier of the collectives beyond allgather: proves a `Program` correct under
docs/semantics.md, "Collectives beyond allgather", or says where it is not.

Each check is a named pass returning `Violation`s (collsched.verify.Violation: the pass,
the rank, the op's index in the rank's list or None for "at the end", the reason); never
a print. `verify` runs the passes in order and stops after the first that fails, because
later passes assume what earlier ones establish:

- shape: the program's fields, and every op's kind, peer, flags and pieces in range;
- matching: the k-th send a -> b meets the k-th receive at b from a, same pieces in the
  same order;
- holding: (alltoall, bcast) a rank sends only pieces it holds: its own (alltoall: src ==
  rank; bcast: the root) or received earlier in its list (reductions: always held);
- progress: no deadlock under the rules 1-6 with conservative completion (a send completes
  only once its peer has posted the matching receive). Found by an abstract execution:
  every rank walks its list, receives settle as soon as the rules allow (the conditions
  only ever become true, so the order of the walks does not change where they end);
- delivery: alltoall: rank d ends holding every (s, d, seg), s != d, received exactly once,
  and never receives a piece it already holds; bcast: every non-root receives every
  segment exactly once, the root none; reduce / allreduce: the execution's *contribution
  sets* (a bitset of ranks per segment and rank) - a receive-and-reduce whose incoming set
  meets the rank's own is a doubled contribution, and the root's (reduce) / every rank's
  (allreduce) final value of every segment holds all P contributions;
- order: a program whose reductions do not all combine contiguous rank intervals in the
  order MPI allows (in (op) acc needs in.hi + 1 == acc.lo; local_first, acc (op) in, needs
  acc.hi + 1 == in.lo; an overwriting receive must bring an interval) must carry
  commutative_only = True.

`order_preserving(prog)` says whether the reductions keep MPI's order; `check(prog)`
raises VerificationFailed (message: the first violation) unless the program is valid.
"""
from __future__ import annotations

from collections import defaultdict
from numbers import Integral  # Python and numpy integers alike

from ..verify import Violation
from .program import (COLLECTIVES, MAX_PIECES_PER_OP, MAX_RANKS, MAX_SEGMENTS, RECV,
                      RECV_REDUCE, REDUCING, ROOTED, SEND, Program)

MAX_REPORTED = 10  # per pass, as collsched.verify


class VerificationFailed(Exception):
    """A program that fails verification (check); .violations lists what is wrong."""

    def __init__(self, violations: list[Violation]):
        self.violations = violations
        super().__init__(str(violations[0]))


def _piece_text(p) -> str:
    return f"({p[0]},{p[1]},{p[2]})"


class _Ctx:
    """What the passes share: flat op tables (global id g = base[rank] + index), the
    matching once found, the execution once run."""

    def __init__(self, prog: Program):
        self.prog = prog
        self.P = prog.nranks
        self.reducing = prog.collective in REDUCING
        self.base: list[int] = []
        self.rank: list[int] = []
        self.ops = []
        for r, lst in enumerate(prog.ops):
            self.base.append(len(self.ops))
            self.ops.extend(lst)
            self.rank.extend([r] * len(lst))
        self.base.append(len(self.ops))
        self.match: list[int] | None = None
        self.execution: _Execution | None = None

    def v(self, check: str, g: int, reason: str) -> Violation:
        r = self.rank[g]
        return Violation(check, r, g - self.base[r], reason)

    def gids(self, r: int) -> range:
        return range(self.base[r], self.base[r + 1])


# --- shape ---------------------------------------------------------------------------------

def _program_shape(prog: Program) -> list[str]:
    """What is wrong with the program's own fields (no op read)."""
    bad = []
    if prog.collective not in COLLECTIVES:
        bad.append(f"collective {prog.collective!r} is not one of {', '.join(COLLECTIVES)}")
    if not isinstance(prog.nranks, Integral) or not 1 <= prog.nranks <= MAX_RANKS:
        bad.append(f"nranks {prog.nranks!r} is not in 1..{MAX_RANKS}")
    if not isinstance(prog.nseg, Integral) or not 1 <= prog.nseg <= MAX_SEGMENTS:
        bad.append(f"nseg {prog.nseg!r} is not in 1..{MAX_SEGMENTS}")
    if not isinstance(prog.ops, list) or len(prog.ops) != prog.nranks:
        n = len(prog.ops) if isinstance(prog.ops, list) else "no"
        bad.append(f"{n} lists of operations for {prog.nranks} ranks")
    if prog.collective in ROOTED:
        if not isinstance(prog.root, Integral) or not 0 <= prog.root < max(prog.nranks, 1):
            bad.append(f"root {prog.root!r} is not a rank (0..{prog.nranks - 1})")
    elif prog.root != 0:
        bad.append(f"root {prog.root!r}: expected 0 for {prog.collective} (no root)")
    return bad


def _op_shape(prog: Program, r: int, op) -> str | None:
    """Why the op at rank r is malformed, or None."""
    P, nseg = prog.nranks, prog.nseg
    if op.kind not in (SEND, RECV, RECV_REDUCE):
        return f"kind {op.kind!r} is not send, recv or recv-reduce"
    if op.kind == RECV_REDUCE and prog.collective not in REDUCING:
        return f"recv-reduce in {prog.collective} (reduce and allreduce only)"
    if not isinstance(op.peer, Integral) or not 0 <= op.peer < P:
        return f"peer {op.peer!r} out of range 0..{P - 1}"
    if op.peer == r:
        return "peer is the rank itself"
    if op.local_first and op.kind != RECV_REDUCE:
        return "local-first flag on an op that is not a recv-reduce"
    if op.fifo and op.kind != SEND:
        return "FIFO flag on a receive"
    if op.chain and op.kind != SEND:
        return "chain flag on a receive"
    if len(op.pieces) > MAX_PIECES_PER_OP:
        return f"{len(op.pieces)} pieces (at most {MAX_PIECES_PER_OP})"
    for p in op.pieces:
        if len(p) != 3 or not all(isinstance(x, Integral) for x in p):
            return f"piece {p!r} is not three integers (src, dst, seg)"
        src, dst, seg = p
        if not 0 <= seg < nseg:
            return f"piece {_piece_text(p)}: segment out of range 0..{nseg - 1}"
        if prog.collective == "alltoall":
            if not (0 <= src < P and 0 <= dst < P):
                return f"piece {_piece_text(p)}: src and dst must be ranks 0..{P - 1}"
        elif src != 0 or dst != 0:
            return f"piece {_piece_text(p)}: expected src = dst = 0 for {prog.collective}"
    return None


def check_shape(c: _Ctx) -> list[Violation]:
    bad = _program_shape(c.prog)
    if bad:
        return [Violation("shape", 0, None, f"program: {why}") for why in bad]
    out: list[Violation] = []
    for g, op in enumerate(c.ops):
        why = _op_shape(c.prog, c.rank[g], op)
        if why:
            out.append(c.v("shape", g, why))
            if len(out) >= MAX_REPORTED:
                break
    return out


# --- matching ------------------------------------------------------------------------------

def check_matching(c: _Ctx) -> list[Violation]:
    sends: dict[tuple[int, int], list[int]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[int]] = defaultdict(list)
    for g, op in enumerate(c.ops):
        r = c.rank[g]
        if op.kind == SEND:
            sends[(r, op.peer)].append(g)
        else:
            recvs[(op.peer, r)].append(g)
    out: list[Violation] = []
    match = [-1] * len(c.ops)
    for pair in sorted(set(sends) | set(recvs)):
        s_ops, r_ops = sends.get(pair, []), recvs.get(pair, [])
        for k, (s, q) in enumerate(zip(s_ops, r_ops)):
            if tuple(c.ops[s].pieces) != tuple(c.ops[q].pieces):
                out.append(c.v("matching", q, f"recv from {pair[0]} (#{k + 1} on that pair) expects "
                                              f"{_pieces_text(c.ops[q].pieces)} but the matching send "
                                              f"(rank {pair[0]} op {s - c.base[pair[0]]}) carries "
                                              f"{_pieces_text(c.ops[s].pieces)}"))
            match[s], match[q] = q, s
        for k in range(len(r_ops), len(s_ops)):
            out.append(c.v("matching", s_ops[k], f"send to {pair[1]} (#{k + 1} on that pair) has no "
                                                 f"matching recv there"))
        for k in range(len(s_ops), len(r_ops)):
            out.append(c.v("matching", r_ops[k], f"recv from {pair[0]} (#{k + 1} on that pair) has "
                                                 f"no matching send there"))
        if len(out) >= MAX_REPORTED:
            return out[:MAX_REPORTED]
    if not out:
        c.match = match
    return out


def _pieces_text(pieces) -> str:
    if not pieces:
        return "no pieces (sync)"
    more = f" ... ({len(pieces)} pieces)" if len(pieces) > 4 else ""
    return "[" + " ".join(_piece_text(p) for p in pieces[:4]) + more + "]"


# --- holding (alltoall, bcast) -------------------------------------------------------------

def _owned(prog: Program, r: int, p) -> bool:
    """Whether rank r holds piece p from the start."""
    if prog.collective == "alltoall":
        return p[0] == r
    if prog.collective == "bcast":
        return r == prog.root
    return True  # reductions: every rank holds its own contribution


def check_holding(c: _Ctx) -> list[Violation]:
    if c.reducing:
        return []
    out: list[Violation] = []
    for r in range(c.P):
        got: set = set()
        for g in c.gids(r):
            op = c.ops[g]
            if op.kind == SEND:
                for p in op.pieces:
                    if p not in got and not _owned(c.prog, r, p):
                        out.append(c.v("holding", g, f"sends piece {_piece_text(p)} to {op.peer} "
                                                     f"before holding it (never received before "
                                                     f"this op)"))
                        break
            else:
                got.update(op.pieces)
            if len(out) >= MAX_REPORTED:
                return out
    return out


# --- the abstract execution (progress; contribution sets) ----------------------------------

class _Execution:
    """Rules 1-6 of docs/semantics.md with conservative completion, to a fixed point.

    Facts (each only ever becomes true): done[g] (a send issued / a receive posted: the
    walk passed it) and settled[g] (a receive applied). A blocked walk or receive waits on
    the first fact it lacks and is looked at again when that fact becomes true.
    Reductions: acc[r][seg] = (bits, lo, hi, ordered), the contribution set of the value
    (bits: ranks as a Python int) and, when `ordered`, the interval lo..hi it is."""

    def __init__(self, c: _Ctx):
        self.c = c
        n = len(c.ops)
        self.done = [False] * n
        self.settled = [False] * n
        self.walk = [c.base[r] for r in range(c.P)]
        self.waiters: dict[int, list[int]] = defaultdict(list)  # fact key -> tasks
        self.todo: list[int] = []  # tasks: g >= 0 settle receive g; -1 - r walk rank r
        self.first_open = [0] * c.P  # per rank: index into recvs[r] of its first unsettled
        self._static()
        self.sent: dict[int, list] = {}
        self.acc = None
        if c.reducing:
            self.acc = [[(1 << r, r, r, True)] * c.prog.nseg for r in range(c.P)]
        self.doubled: list[Violation] = []
        self.order_breaks: list[Violation] = []

    def _static(self) -> None:
        """Per op, what it waits for in its own list: a send, the last earlier receive of
        each of its pieces (receives of a piece settle in list order) and, FIFO, the
        previous send to its peer and, chained, the previous send of the list; a receive, the last earlier receive of each of its
        pieces and the sends that read them since."""
        c = self.c
        n = len(c.ops)
        self.writers: list[tuple] = [()] * n
        self.readers: list[tuple] = [()] * n
        self.prev_send = [-1] * n
        self.chain_prev = [-1] * n
        self.recvs: list[list[int]] = []
        for r in range(c.P):
            last: dict = {}
            since: dict = defaultdict(list)
            last_to: dict[int, int] = {}
            last_send = -1
            mine = []
            for g in c.gids(r):
                op = c.ops[g]
                self.writers[g] = tuple(dict.fromkeys(last[p] for p in op.pieces if p in last))
                if op.kind == SEND:
                    self.prev_send[g] = last_to.get(op.peer, -1) if op.fifo else -1
                    last_to[op.peer] = g
                    self.chain_prev[g] = last_send if op.chain else -1
                    last_send = g
                    for p in op.pieces:
                        since[p].append(g)
                else:
                    self.readers[g] = tuple(dict.fromkeys(s for p in op.pieces for s in since[p]))
                    for p in op.pieces:
                        last[p] = g
                        since[p] = []
                    mine.append(g)
            self.recvs.append(mine)

    # Fact keys: g (done[g]) and n + g (settled[g]).
    def _unmet_fence(self, r: int, g: int) -> int | None:
        mine = self.recvs[r]
        k = self.first_open[r]
        while k < len(mine) and self.settled[mine[k]]:
            k += 1
        self.first_open[r] = k
        if k < len(mine) and mine[k] < g:
            return len(self.c.ops) + mine[k]
        return None

    def _unmet_walk(self, r: int, g: int) -> int | None:
        op, n, match = self.c.ops[g], len(self.c.ops), self.c.match
        if op.fence:
            key = self._unmet_fence(r, g)
            if key is not None:
                return key
        if op.kind == SEND:
            for w in self.writers[g]:
                if not self.settled[w]:
                    return n + w
            for p in (self.prev_send[g], self.chain_prev[g]):
                if p >= 0 and not self.done[match[p]]:
                    return match[p]
        return None

    def _unmet_settle(self, q: int) -> int | None:
        n, match = len(self.c.ops), self.c.match
        if not self.done[match[q]]:
            return match[q]
        for w in self.writers[q]:
            if not self.settled[w]:
                return n + w
        for s in self.readers[q]:
            if not self.done[match[s]]:
                return match[s]
        return None

    def _fire(self, key: int) -> None:
        woken = self.waiters.pop(key, None)
        if woken:
            self.todo.extend(woken)

    def run(self) -> None:
        self.todo = [-1 - r for r in range(self.c.P)]
        while self.todo:
            t = self.todo.pop()
            if t < 0:
                self._advance(-1 - t)
            elif not self.settled[t]:
                key = self._unmet_settle(t)
                if key is not None:
                    self.waiters[key].append(t)
                else:
                    self._apply(t)
                    self.settled[t] = True
                    self._fire(len(self.c.ops) + t)

    def _advance(self, r: int) -> None:
        c = self.c
        end = c.base[r + 1]
        while self.walk[r] < end:
            g = self.walk[r]
            key = self._unmet_walk(r, g)
            if key is not None:
                self.waiters[key].append(-1 - r)
                return
            if c.ops[g].kind == SEND and self.acc is not None:
                self.sent[g] = [self.acc[r][p[2]] for p in c.ops[g].pieces]
            self.done[g] = True
            self.walk[r] = g + 1
            self._fire(g)
            if c.ops[g].kind != SEND:
                self.todo.append(g)

    def _apply(self, q: int) -> None:
        """Settle receive q: its pieces' values replace (RECV) or combine with (RECV_REDUCE)
        the accumulator's (reductions; alltoall and bcast move data only)."""
        if self.acc is None:
            return
        c = self.c
        r, op = c.rank[q], c.ops[q]
        acc = self.acc[r]
        for p, (bits, lo, hi, ordered) in zip(op.pieces, self.sent[c.match[q]]):
            s = p[2]
            if op.kind == RECV:
                acc[s] = (bits, lo, hi, ordered)
                if not ordered:
                    self._order_break(q, f"overwrites segment {s} with a value that is not a rank "
                                         f"interval", root=False)
                continue
            abits, alo, ahi, aord = acc[s]
            both = bits & abits
            if both:
                x = (both & -both).bit_length() - 1
                if len(self.doubled) < MAX_REPORTED:
                    self.doubled.append(c.v("delivery", q, f"contribution {x} doubled in segment {s}: "
                                                           f"the incoming value from {op.peer} and the "
                                                           f"rank's own both hold it"))
            ok = ordered and aord and ((ahi + 1 == lo) if op.local_first else (hi + 1 == alo))
            if ok:
                acc[s] = (bits | abits, alo if op.local_first else lo, hi if op.local_first else ahi, True)
            else:
                acc[s] = (bits | abits, 0, 0, False)
                if ordered and aord:
                    first, second = ((alo, ahi), (lo, hi)) if op.local_first else ((lo, hi), (alo, ahi))
                    self._order_break(q, f"combines segment {s} as ranks {first[0]}..{first[1]} (op) "
                                         f"{second[0]}..{second[1]}: not MPI's rank order", root=True)

    def _order_break(self, q: int, reason: str, root: bool) -> None:
        """A break of MPI's order; reported only where it starts (both inputs ordered)."""
        self.ordered = False
        if root and len(self.order_breaks) < MAX_REPORTED:
            self.order_breaks.append(self.c.v("order", q, reason))

    ordered = True

    def stuck(self) -> list[Violation]:
        """Deadlock: every rank whose walk, receives or sends never end."""
        c, n, out = self.c, len(self.c.ops), []
        for r in range(c.P):
            g = self.walk[r]
            if g < c.base[r + 1]:
                why = self._describe(self._unmet_walk(r, g), n)
                out.append(c.v("progress", g, f"deadlock: {_KINDS[c.ops[g].kind]} to/from {c.ops[g].peer} "
                                              f"is never issued: {why}"))
                continue
            for q in self.recvs[r]:
                if not self.settled[q]:
                    why = self._describe(self._unmet_settle(q), n)
                    out.append(c.v("progress", q, f"deadlock: receive from {c.ops[q].peer} never "
                                                  f"settles: {why}"))
                    break
            else:
                for g in c.gids(r):
                    if c.ops[g].kind == SEND and not self.done[c.match[g]]:
                        out.append(c.v("progress", g, f"deadlock: send to {c.ops[g].peer} never "
                                                      f"completes: the peer never posts the receive"))
                        break
            if len(out) >= MAX_REPORTED:
                break
        return out

    def _describe(self, key: int | None, n: int) -> str:
        c = self.c
        if key is None:
            return "nothing left to wait for (internal)"
        g = key - n if key >= n else key
        r, i = c.rank[g], g - c.base[c.rank[g]]
        if key >= n:
            return f"waits for its receive op {i} (from {c.ops[g].peer}) to settle"
        what = "issue its send" if c.ops[g].kind == SEND else "post its receive"
        return f"waits for rank {r} to {what} (op {i})"


_KINDS = {SEND: "send", RECV: "recv", RECV_REDUCE: "recv-reduce"}


def _run(c: _Ctx) -> _Execution:
    if c.execution is None:
        c.execution = _Execution(c)
        c.execution.run()
    return c.execution


def check_progress(c: _Ctx) -> list[Violation]:
    return _run(c).stuck()


# --- delivery ------------------------------------------------------------------------------

def check_delivery(c: _Ctx) -> list[Violation]:
    if c.reducing:
        return _reduction_delivery(c)
    out: list[Violation] = []
    prog = c.prog
    for r in range(c.P):
        got: dict = {}
        for g in c.gids(r):
            op = c.ops[g]
            if op.kind == SEND:
                continue
            for p in op.pieces:
                if _owned(prog, r, p):
                    out.append(c.v("delivery", g, f"receives piece {_piece_text(p)}, which it holds "
                                                  f"from the start"))
                elif p in got:
                    out.append(c.v("delivery", g, f"receives piece {_piece_text(p)} a second time "
                                                  f"(first at op {got[p] - c.base[r]})"))
                else:
                    got[p] = g
        missing = [p for p in _wanted(prog, r) if p not in got]
        if missing:
            more = f" ({len(missing)} pieces missing in all)" if len(missing) > 1 else ""
            out.append(Violation("delivery", r, None, f"never receives piece {_piece_text(missing[0])}{more}"))
        if len(out) >= MAX_REPORTED:
            return out[:MAX_REPORTED]
    return out


def _wanted(prog: Program, r: int):
    """The pieces rank r must end holding, beyond its own (alltoall, bcast)."""
    if prog.collective == "alltoall":
        return [(s, r, g) for s in range(prog.nranks) if s != r for g in range(prog.nseg)]
    if r == prog.root:
        return []
    return [(0, 0, g) for g in range(prog.nseg)]


def _reduction_delivery(c: _Ctx) -> list[Violation]:
    ex = _run(c)
    out = list(ex.doubled)
    full = (1 << c.P) - 1
    ranks = [c.prog.root] if c.prog.collective == "reduce" else range(c.P)
    for r in ranks:
        for s, (bits, *_rest) in enumerate(ex.acc[r]):
            if bits != full:
                lack = [x for x in range(c.P) if not bits >> x & 1]
                shown = ", ".join(map(str, lack[:8])) + (" ..." if len(lack) > 8 else "")
                out.append(Violation("delivery", r, None, f"segment {s} ends without the "
                                                          f"contribution{'s' * (len(lack) > 1)} of "
                                                          f"rank{'s' * (len(lack) > 1)} {shown}"))
                break
        if len(out) >= MAX_REPORTED:
            break
    return out[:MAX_REPORTED]


# --- order ---------------------------------------------------------------------------------

def check_order(c: _Ctx) -> list[Violation]:
    if not c.reducing or c.prog.commutative_only:
        return []
    ex = _run(c)
    if ex.ordered:
        return []
    breaks = ex.order_breaks or [Violation("order", c.prog.root, None, "the result is not "
                                                                       "combined in MPI's rank order")]
    return [Violation(v.check, v.rank, v.op, v.reason + " (mark the program commutative_only)")
            for v in breaks]


PASSES = (("shape", check_shape), ("matching", check_matching), ("holding", check_holding),
          ("progress", check_progress), ("delivery", check_delivery), ("order", check_order))


def verify(prog: Program) -> list[Violation]:
    """Every violation of the first failing pass; [] when the program is correct."""
    c = _Ctx(prog)
    for _name, fn in PASSES:
        found = fn(c)
        if found:
            return found
    return []


def order_preserving(prog: Program) -> bool:
    """Whether every reduction of the program combines in an order MPI allows for a
    non-commutative operation (always True for alltoall and bcast). A program that fails
    shape, matching or progress is not: nothing can be said of its order."""
    c = _Ctx(prog)
    if prog.collective not in REDUCING:
        return True
    if check_shape(c) or check_matching(c):
        return False
    ex = _run(c)
    return ex.ordered and not ex.stuck()


def check(prog: Program) -> None:
    """Raise VerificationFailed (message: the first violation) unless prog is valid."""
    found = verify(prog)
    if found:
        raise VerificationFailed(found)
