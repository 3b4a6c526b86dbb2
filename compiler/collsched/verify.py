"""Verifier: proves a schedule correct under docs/semantics.md, or says where it is not.

Each check is a named pass that returns a list of `Violation`s (never prints, never
exits). `verify` runs them in order and stops after the first pass that fails, because
later passes assume what earlier ones establish (progress needs matching, for example).
All passes are array operations over the columnar IR; the progress proof is a wave
algorithm whose Python loop runs once per dependency level, not once per operation.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import kernels
from .ir import BACKGROUND, RECV, SEND, Schedule

MAX_REPORTED = 10  # per pass: enough to see a pattern, few enough to read


@dataclass(frozen=True)
class Violation:
    check: str
    rank: int
    op: int | None  # index in the rank's list; None = after its last op
    reason: str

    def __str__(self) -> str:
        where = f"op {self.op}" if self.op is not None else "end of list"
        return f"rank {self.rank}, {where}: {self.reason} [{self.check}]"


@dataclass
class Matching:
    """Matched transfers: send_op[i] (global op index) meets recv_op[i], one pair per
    piece, sorted by (sender, receiver, send op): a message's pieces are consecutive
    pairs, in its order. first_piece[i]: whether pair i starts a message (its send op and
    its recv op are their messages' heads); None when every message has one piece."""

    send_op: np.ndarray
    recv_op: np.ndarray
    first_piece: np.ndarray | None = None


class _Ctx:
    """Per-schedule arrays the passes share (computed once)."""

    def __init__(self, s: Schedule):
        self.s = s
        self.rank = s.rank_of_op
        self.is_send = s.kind == SEND
        self.is_recv = s.kind == RECV
        self.matching: Matching | None = None
        self.feeding_recv: np.ndarray | None = None  # per op: recv delivering a forwarded send's piece
        # Multi-piece messages (docs/semantics.md): per op, its message's first and last op
        # (None without joined ops: every op is its own message, and no column is made).
        self.head = self.last = None
        if s.has_messages:
            self.head = s.message_head()
            heads = np.nonzero(s.join == 0)[0]
            self.last = (np.r_[heads[1:], s.total_ops] - 1)[np.cumsum(s.join == 0) - 1]

    def local(self, op) -> int:
        """The index of global op `op` in its rank's list (asked only to name an op: no
        column of it for every op)."""
        op = int(op)
        return op - int(self.s.offsets[self.rank[op]])

    def v(self, check: str, op: int, reason: str) -> Violation:
        return Violation(check, int(self.rank[op]), self.local(op), reason)

    def pieces(self, op) -> int:
        """How many pieces the message of op carries."""
        return 1 if self.head is None else int(self.last[op] - self.head[op]) + 1

    def message(self, op) -> str:
        """How a reason names the message of global op `op`: 'op I', or 'message at op I
        (N pieces)' for a multi-piece one (I its head's index in the rank's list)."""
        n = self.pieces(op)
        head = int(op) if self.head is None else int(self.head[op])
        return f"op {self.local(head)}" if n == 1 else f"message at op {self.local(head)} ({n} pieces)"

    def piece_key(self, ops) -> np.ndarray:
        s = self.s
        key = self.rank[ops].astype(np.int64)  # (rank * P + origin) * nseg + segment, in place
        key *= s.nranks
        key += s.origin[ops]
        key *= s.nseg
        key += s.segment[ops]
        return key


def check_shape(c: _Ctx) -> list[Violation]:
    s = c.s
    out: list[Violation] = []
    tests = (
        ((s.kind != SEND) & (s.kind != RECV), "kind is neither send nor recv"),
        ((s.peer < 0) | (s.peer >= s.nranks), f"peer out of range 0..{s.nranks - 1}"),
        (s.peer == c.rank, "peer is the rank itself"),
        ((s.origin < 0) | (s.origin >= s.nranks), f"origin out of range 0..{s.nranks - 1}"),
        ((s.segment < 0) | (s.segment >= s.nseg), f"segment out of range 0..{s.nseg - 1}"),
        (s.phase > 1, "phase is neither foreground nor background"),
        (s.fifo > 1, "FIFO flag is neither 0 nor 1"),
        ((s.fifo == 1) & (s.kind == RECV), "FIFO flag on a recv"),
    )
    for mask, reason in tests:
        out += [c.v("shape", int(i), reason) for i in np.nonzero(mask)[0][:MAX_REPORTED]]
    # Background ops must form a prefix of every list (the engine runs that prefix early).
    bg = s.phase == 1
    late_bg = bg.copy()
    late_bg[s.offsets[:-1][s.offsets[:-1] < s.total_ops]] = False  # a list's first op
    late_bg[late_bg] &= ~bg[np.nonzero(late_bg)[0] - 1]
    out += [c.v("shape", int(i), "background op after a foreground op")
            for i in np.nonzero(late_bg)[0][:MAX_REPORTED]]
    if c.head is not None:
        out += _message_shape(c)
    return out


def _message_shape(c: _Ctx) -> list[Violation]:
    """The join column's rules (docs/semantics.md, "Multi-piece messages", rule 1): a
    joined op continues the message of the op before it (same kind, peer and phase; never
    a rank's first op), carries no FIFO mark, and adds a piece its message lacks."""
    s = c.s
    out: list[Violation] = []
    j = np.nonzero(s.join)[0]
    first = np.zeros(s.total_ops, bool)
    first[s.offsets[:-1][np.diff(s.offsets) > 0]] = True
    for i in j[(s.join[j] > 1)][:MAX_REPORTED]:
        out.append(c.v("shape", int(i), f"join flag is {int(s.join[i])}, neither 0 nor 1"))
    for i in j[first[j]][:MAX_REPORTED]:
        out.append(c.v("shape", int(i), "joined op is the rank's first op (no message to join)"))
    j = j[~first[j]]
    p = j - 1
    names = {SEND: "send", RECV: "recv"}
    for i in j[s.kind[j] != s.kind[p]][:MAX_REPORTED]:
        out.append(c.v("shape", int(i), f"joined {names.get(int(s.kind[i]), '?')} continues a message of "
                                        f"{names.get(int(s.kind[i - 1]), '?')}s (op {c.local(i - 1)})"))
    for i in j[s.peer[j] != s.peer[p]][:MAX_REPORTED]:
        out.append(c.v("shape", int(i), f"joined op's peer {int(s.peer[i])} differs from its message's "
                                        f"peer {int(s.peer[i - 1])} (op {c.local(i - 1)})"))
    for i in j[s.phase[j] != s.phase[p]][:MAX_REPORTED]:
        out.append(c.v("shape", int(i), "joined op's phase differs from its message's "
                                        f"(op {c.local(i - 1)})"))
    for i in j[s.fifo[j] != 0][:MAX_REPORTED]:
        out.append(c.v("shape", int(i), "FIFO flag on a joined op (a message's FIFO mark is its head's)"))
    if out:
        return out
    # No piece twice in one message: sort the multi-piece messages' ops by (head, piece).
    multi = np.nonzero(c.last != c.head)[0]
    span = s.nranks * s.nseg  # pieces, sorted within each message by (head, piece)
    if float(s.total_ops) * span < 2.0 ** 62:  # one int64 key: _sorted_by_key's fast sort
        key = c.head[multi] * span
        key += s.origin[multi].astype(np.int64) * s.nseg + s.segment[multi]
        multi, key = _sorted_by_key(key, multi)
        same = np.diff(key) == 0
    else:
        piece = s.origin[multi].astype(np.int64) * s.nseg + s.segment[multi]
        order = np.lexsort((multi, piece, c.head[multi]))
        multi, piece, head = multi[order], piece[order], c.head[multi][order]
        same = (np.diff(piece) == 0) & (np.diff(head) == 0)
    for i in (np.nonzero(same)[0] + 1)[:MAX_REPORTED]:
        op = int(multi[i])
        out.append(c.v("shape", op, f"piece ({int(s.origin[op])},{int(s.segment[op])}) twice in the "
                                    f"{c.message(op)} (first at op {c.local(multi[i - 1])})"))
    return out


def _pair_sequence(a: np.ndarray, b: np.ndarray, ops: np.ndarray, nranks: int):
    """Sort ops (ascending) by (a, b, list order); return the sorted ops and their pair keys."""
    return _sorted_by_key(a.astype(np.int64) * nranks + b, ops)


def _sorted_by_key(key: np.ndarray, ops: np.ndarray):
    """(ops, key) sorted by (key, op); ops ascending and distinct, key a fresh int64 array.

    Packed into one int64 value per op and sorted as values (in place, a SIMD sort),
    which is several times faster than a lexsort's two passes of argsort over millions
    of ops; keys that do not fit take the lexsort."""
    shift = int(ops[-1]).bit_length() if len(ops) else 0  # ops in the low bits
    if len(key) and int(key.min()) >= 0 and float(int(key.max()) + 1) * 2.0 ** shift < 2.0 ** 62:
        key <<= shift
        key += ops
        key.sort()
        ops = key & ((1 << shift) - 1)
        key >>= shift
        return ops, key
    order = np.lexsort((ops, key))
    return ops[order], key[order]


def _kth(key: np.ndarray) -> np.ndarray:
    """For sorted keys: each one's index among the equal keys before it (0, 1, ...)."""
    starts = np.r_[0, np.nonzero(np.diff(key))[0] + 1]
    first = np.repeat(starts, np.diff(np.r_[starts, len(key)]))
    return np.arange(len(key)) - first


def check_matching(c: _Ctx) -> list[Violation]:
    s = c.s
    if c.head is not None:  # messages first: per pair, the k-th send meets the k-th recv message
        out = _match_messages(c)
        if out:
            return out
    sends, recvs = np.nonzero(c.is_send)[0], np.nonzero(c.is_recv)[0]
    s_ops, s_key = _pair_sequence(c.rank[sends], s.peer[sends], sends, s.nranks)
    del sends
    r_ops, r_key = _pair_sequence(s.peer[recvs], c.rank[recvs], recvs, s.nranks)
    del recvs
    out: list[Violation] = []
    if not np.array_equal(s_key, r_key):
        # Some pair has more sends than recvs or the other way round: name the first extra op.
        s_k, r_k = _kth(s_key), _kth(r_key)
        sk = np.stack([s_key, s_k], 1)
        rk = np.stack([r_key, r_k], 1)
        s_set = set(map(tuple, sk.tolist()))
        r_set = set(map(tuple, rk.tolist()))
        for i, t in enumerate(map(tuple, sk.tolist())):
            if t not in r_set and len(out) < MAX_REPORTED:
                op = int(s_ops[i])
                out.append(c.v("matching", op,
                               f"send to {int(s.peer[op])} (#{t[1] + 1} on that pair) has no matching recv there"))
        for i, t in enumerate(map(tuple, rk.tolist())):
            if t not in s_set and len(out) < 2 * MAX_REPORTED:
                op = int(r_ops[i])
                out.append(c.v("matching", op,
                               f"recv from {int(s.peer[op])} (#{t[1] + 1} on that pair) has no matching send there"))
        return out
    diff = np.nonzero((s.origin[s_ops] != s.origin[r_ops]) | (s.segment[s_ops] != s.segment[r_ops]))[0]
    for i in diff[:MAX_REPORTED]:
        so, ro = int(s_ops[i]), int(r_ops[i])
        if c.head is None or c.pieces(ro) == 1:
            out.append(c.v("matching", ro,
                           f"recv from {int(s.peer[ro])} expects piece ({int(s.origin[ro])},{int(s.segment[ro])}) "
                           f"but the matching send (rank {int(c.rank[so])} op {c.local(so)}) carries "
                           f"({int(s.origin[so])},{int(s.segment[so])})"))
            continue
        out.append(c.v("matching", ro, _piece_mismatch(c, so, ro)))
    if not out:
        c.matching = Matching(s_ops, r_ops, None if c.head is None else c.head[s_ops] == s_ops)
    return out


def _piece_mismatch(c: _Ctx, so: int, ro: int) -> str:
    """Why recv op ro of a multi-piece message differs from its matching send op so."""
    s = c.s

    def pieces(op):
        lo, hi = int(c.head[op]), int(c.last[op]) + 1
        return list(zip(s.origin[lo:hi].tolist(), s.segment[lo:hi].tolist()))

    k = int(ro - c.head[ro])
    sent, got = pieces(so), pieces(ro)
    how = ("the same pieces in another order" if sorted(sent) == sorted(got)
           else f"pieces {_fmt(sent)} where it expects {_fmt(got)}")
    return (f"piece {k + 1} of its recv {c.message(ro)} from {int(s.peer[ro])} is "
            f"({int(s.origin[ro])},{int(s.segment[ro])}) but the matching send "
            f"{c.message(so)} at rank {int(c.rank[so])} carries ({int(s.origin[so])},{int(s.segment[so])}): "
            f"{how}")


def _fmt(pieces) -> str:
    return "[" + " ".join(f"({o},{g})" for o, g in pieces[:8]) + (" ...]" if len(pieces) > 8 else "]")


def _match_messages(c: _Ctx) -> list[Violation]:
    """Per ordered pair, as many send messages as recv messages, the k-th of each of the
    same number of pieces (their pieces are compared per piece after this)."""
    s = c.s
    heads = s.join == 0
    sends, recvs = np.nonzero(heads & c.is_send)[0], np.nonzero(heads & c.is_recv)[0]
    s_ops, s_key = _pair_sequence(c.rank[sends], s.peer[sends], sends, s.nranks)
    r_ops, r_key = _pair_sequence(s.peer[recvs], c.rank[recvs], recvs, s.nranks)
    out: list[Violation] = []
    s_k, r_k = _kth(s_key), _kth(r_key)
    if not np.array_equal(s_key, r_key):
        s_set = set(zip(s_key.tolist(), s_k.tolist()))
        r_set = set(zip(r_key.tolist(), r_k.tolist()))
        for ops, key, kth, other, what, there in ((s_ops, s_key, s_k, r_set, "send", "recv"),
                                                  (r_ops, r_key, r_k, s_set, "recv", "send")):
            for i in np.nonzero([t not in other for t in zip(key.tolist(), kth.tolist())])[0][:MAX_REPORTED]:
                op = int(ops[i])
                out.append(c.v("matching", op,
                               f"{what} {c.message(op)} {'to' if what == 'send' else 'from'} "
                               f"{int(s.peer[op])} (message #{int(kth[i]) + 1} on that pair) has no "
                               f"matching {there} message there"))
        return out
    ns, nr = c.last[s_ops] - s_ops + 1, c.last[r_ops] - r_ops + 1
    for i in np.nonzero(ns != nr)[0][:MAX_REPORTED]:
        so, ro = int(s_ops[i]), int(r_ops[i])
        out.append(c.v("matching", so,
                       f"send message of {int(ns[i])} pieces to {int(s.peer[so])} (message #{int(s_k[i]) + 1} "
                       f"on that pair) matched by a message of {int(nr[i])} at rank {int(c.rank[ro])} "
                       f"op {c.local(ro)}"))
    return out


def check_holding(c: _Ctx) -> list[Violation]:
    s = c.s
    out: list[Violation] = []
    own_recv = np.nonzero(c.is_recv & (s.origin == c.rank))[0]
    out += [c.v("holding", int(i), f"receives its own piece ({int(s.origin[i])},{int(s.segment[i])})")
            for i in own_recv[:MAX_REPORTED]]
    recvs = np.nonzero(c.is_recv)[0]
    rkey = c.piece_key(recvs)
    fwd = np.nonzero(c.is_send & (s.origin != c.rank))[0]
    fkey = c.piece_key(fwd)
    feed = _first_receipt(recvs, rkey, fkey, s.nranks * s.nranks * s.nseg)
    del recvs, rkey, fkey  # (at P = 4096 each is 134 MB)
    found = feed >= 0
    # A send message holds all its pieces when the walk reaches its head (rule 3 of
    # "Multi-piece messages"): each one received before the head, not just before the op.
    bad = np.nonzero(~found | (feed > (fwd if c.head is None else c.head[fwd])))[0]
    for i in bad[:MAX_REPORTED]:
        op = int(fwd[i])
        what = "never receives it" if feed[i] < 0 else f"receives it only later (op {c.local(feed[i])})"
        where = "" if c.pieces(op) == 1 else f" in its send {c.message(op)}"
        out.append(c.v("holding", op, f"forwards piece ({int(s.origin[op])},{int(s.segment[op])}) "
                                      f"to {int(s.peer[op])}{where} before holding it: the rank {what}"))
    if not out:
        c.feeding_recv = np.full(s.total_ops, -1, np.int32 if s.total_ops < 2 ** 31 else np.int64)
        c.feeding_recv[fwd] = feed
    return out


def _first_receipt(recvs, rkey, fkey, nkeys) -> np.ndarray:
    """For each key of fkey: the first of `recvs` (ascending) with that key, or -1.

    By a table over the keys when each is received at most once (every valid schedule; no
    sort), else by sorting."""
    if nkeys <= 4 * len(rkey) + 1024:
        table = np.full(nkeys, -1, np.int64)
        table[rkey] = recvs
        if np.array_equal(table[rkey], recvs):  # no key twice
            return table[fkey]
    order = np.lexsort((recvs, rkey))  # first recv of each piece first
    rkey, recvs = rkey[order], recvs[order]
    pos = np.searchsorted(rkey, fkey)
    found = pos < len(rkey)
    found[found] &= rkey[pos[found]] == fkey[found]
    feed = np.full(len(fkey), -1, np.int64)
    feed[found] = recvs[pos[found]]
    return feed


def check_delivery(c: _Ctx) -> list[Violation]:
    s = c.s
    out: list[Violation] = []
    recvs = np.nonzero(c.is_recv & (s.origin != c.rank))[0]
    key = c.piece_key(recvs)
    want = (s.nranks - 1) * s.nseg
    nkeys = s.nranks * s.nranks * s.nseg
    if nkeys <= 4 * len(key) + 1024:
        # Every piece at most once and every rank all it needs: counted, without a sort.
        # Anything else takes the sorted way below, which names the ops.
        per_key = np.bincount(key, minlength=nkeys)
        if per_key.max(initial=0) <= 1 and np.all(np.bincount(key // (s.nranks * s.nseg),
                                                              minlength=s.nranks) == want):
            return out
    order = np.lexsort((recvs, key))
    key, recvs = key[order], recvs[order]
    dup = np.nonzero(np.diff(key) == 0)[0] + 1
    for i in dup[:MAX_REPORTED]:
        op = int(recvs[i])
        out.append(c.v("delivery", op, f"receives piece ({int(s.origin[op])},{int(s.segment[op])}) a second "
                                       f"time (first at op {c.local(recvs[i - 1])})"))
    unique_per_rank = np.bincount(key[np.r_[True, np.diff(key) != 0]] // (s.nranks * s.nseg)
                                  if len(key) else np.zeros(0, np.int64), minlength=s.nranks)
    for r in np.nonzero(unique_per_rank < want)[0][:MAX_REPORTED]:
        r = int(r)
        lo, hi = int(s.offsets[r]), int(s.offsets[r + 1])
        got = {(int(o), int(g)) for k, o, g in zip(s.kind[lo:hi], s.origin[lo:hi], s.segment[lo:hi])
               if k == RECV}
        missing = next((o, g) for o in range(s.nranks) for g in range(s.nseg)
                       if o != r and (o, g) not in got)
        n_missing = want - int(unique_per_rank[r])
        out.append(Violation("delivery", r, None,
                             f"never receives piece {missing}"
                             + (f" ({n_missing} pieces missing in all)" if n_missing > 1 else "")))
    return out


def check_progress(c: _Ctx) -> list[Violation]:
    """No deadlock: every rank issues every op under the rules of docs/semantics.md.

    Only a send can hold up a rank's walk, waiting for one or two things: the recv that
    delivers a forwarded piece (complete once the matching send on the other rank has been
    issued), and, for a send marked FIFO, the previous send to the same peer (complete once
    that peer has posted the matching recv, i.e. its walk has reached it). Both are "op X has been issued"
    conditions. The walk of rank r stops at its first send with an unmet condition; each
    wave advances every rank past one such send whose conditions hold. If a wave advances
    nobody while some rank has not finished, the schedule deadlocks.

    Multi-piece messages are the walk's units (_progress_deps says how they fit the same
    columns): a send message waits for every receive message delivering one of its
    pieces, its head for the FIFO or serial wait; a deadlock is reported at the head of
    the message the walk waits at.
    """
    s = c.s
    fwd_dep, fifo_dep, bar_dep = _progress_deps(c)
    waits = (fwd_dep >= 0) | (fifo_dep >= 0)
    if bar_dep is not None:
        waits |= bar_dep >= 0
    blocking = np.nonzero(waits)[0]  # rank-major, list order
    del waits
    # Without a background chain the walks read the FIFO column in its place: a condition
    # asked twice changes no walk, and no third int64 column over every op is made.
    chain = fifo_dep if bar_dep is None else bar_dep
    first = np.searchsorted(blocking, s.offsets[:-1])
    last = np.searchsorted(blocking, s.offsets[1:])
    # The C walk says whether every rank finishes; the waves below (the only Python path:
    # docs/benchmarks.md, "the second Python paths") find it too, and name a deadlock.
    if kernels.available() and kernels.progress_completes(
            nranks=s.nranks, rank=c.rank.astype(np.int64), offsets=s.offsets.astype(np.int64),
            blocking=blocking.astype(np.int64), first=first.astype(np.int64),
            last=last.astype(np.int64), dep0=fwd_dep, dep1=fifo_dep, dep2=chain):
        return []
    cur = first.copy()

    def upto(ranks):
        more = cur[ranks] < last[ranks]
        return np.where(more, blocking[np.minimum(cur[ranks], max(len(blocking) - 1, 0))],
                        s.offsets[ranks + 1]) if len(blocking) else s.offsets[ranks + 1]

    issued_upto = upto(np.arange(s.nranks))

    def met(dep):
        ok = dep < 0
        d = np.maximum(dep, 0)
        return ok | (d < issued_upto[c.rank[d]])

    while True:
        active = np.nonzero(cur < last)[0]
        if len(active) == 0:
            return []
        b = blocking[cur[active]]
        ok = met(fwd_dep[b]) & met(fifo_dep[b]) & met(chain[b])
        if not ok.any():
            break
        go = active[ok]
        cur[go] += 1
        issued_upto[go] = upto(go)
    out = []
    for r in active[:MAX_REPORTED]:
        op = int(blocking[cur[r]])
        at = op if c.head is None else int(c.head[op])  # the message the walk waits at
        msg = "" if c.pieces(op) == 1 else f" in its send {c.message(op)}"
        if bar_dep is not None and bar_dep[op] >= 0 and not met(np.array([bar_dep[op]]))[0]:
            dep = int(bar_dep[op])
            out.append(c.v("progress", at,
                           f"deadlock: waits for its background receives (rank {int(c.rank[dep])} issuing "
                           f"its {c.message(dep)}), which never happens"))
        elif fwd_dep[op] >= 0 and not met(np.array([fwd_dep[op]]))[0]:
            dep = int(fwd_dep[op])
            out.append(c.v("progress", at,
                           f"deadlock: waits to forward piece ({int(s.origin[op])},{int(s.segment[op])}){msg} "
                           f"until rank {int(c.rank[dep])} issues its {c.message(dep)}, which never happens"))
        elif c.is_recv[op] and fifo_dep[op] >= 0:
            dep = int(fifo_dep[op])
            what = "" if c.pieces(op) == 1 else f" (its recv {c.message(op)})"
            out.append(c.v("progress", at,
                           f"deadlock: posts its receive of piece ({int(s.origin[op])},{int(s.segment[op])}){what} "
                           f"only after the previous receive completes (rank {int(c.rank[dep])} issuing its "
                           f"{c.message(dep)}), which never happens (serial execution)"))
        else:
            dep = int(fifo_dep[op])
            out.append(c.v("progress", at,
                           f"deadlock: waits to send piece ({int(s.origin[op])},{int(s.segment[op])}){msg} to "
                           f"{int(s.peer[op])} until rank {int(c.rank[dep])} posts its {c.message(dep)} "
                           "(the receive of the previous message), which never happens"))
    return out


def _progress_deps(c: _Ctx):
    """What each op waits for in check_progress, as the op that must have been issued
    (-1: nothing): fwd_dep, the send delivering a forwarded piece; fifo_dep, the matching
    recv of the previous send on a FIFO link (serial: of any previous send; for a recv, the
    send of the previous recv); bar_dep, in serial schedules, the leading background
    receives' chain (None where there is none)."""
    s = c.s
    m = c.matching
    assert m is not None and c.feeding_recv is not None
    n = s.total_ops
    # The maps between matched ops in int32 where the ops fit (half the memory: at
    # P = 4096 a ring has 33.5 million ops); the dependencies the C walk reads are int64.
    idx = np.int32 if n < 2 ** 31 else np.int64
    send_of_recv = np.full(n, -1, idx)
    send_of_recv[m.recv_op] = m.send_op
    # Multi-piece messages (docs/semantics.md): a send message counts as issued once the
    # walk has passed its last op (its pieces' waits sit on its ops, head to last, so the
    # walk passes them all only when it holds every piece), a recv message as posted once
    # the walk reached its head. So every "issued" condition on a send names the last op of
    # its message (done), and the message-level graph fits the same three columns.
    last = c.last

    def done(ops):
        return ops if last is None else last[ops]

    heads = None if last is None else c.s.join == 0
    fwd_dep = np.full(n, -1, np.int64)
    fwd = np.nonzero(c.feeding_recv >= 0)[0]
    fwd_dep[fwd] = done(send_of_recv[c.feeding_recv[fwd]])
    del fwd
    c.feeding_recv = None  # read only here
    # FIFO per link: the recv that matches the previous send to the same peer. Serial mode
    # (the PAT engine, docs/semantics.md): every send waits for the previous send to any
    # peer, and every recv for the previous recv to have completed.
    serial = getattr(c, "serial", False)
    fifo_dep = np.full(n, -1, np.int64)
    if not serial:
        # Each link's sends in list order are the matching's send sequence (sorted by
        # (rank, peer, op) in check_matching), each beside its recv.
        so, ro = m.send_op, m.recv_op
        if m.first_piece is not None:  # a message's FIFO wait is its head's: on the previous message
            so, ro = so[m.first_piece], ro[m.first_piece]
        link = c.rank[so].astype(np.int64)
        link *= s.nranks
        link += s.peer[so]
        same = np.nonzero(link[1:] == link[:-1])[0]
        del link
        fifo_dep[so[same + 1]] = ro[same]
        del same, so, ro
        fifo_dep[s.fifo == 0] = -1  # only sends marked FIFO wait for the previous one
    else:
        # every rank's send messages (heads), in list order
        sends = np.nonzero(c.is_send if heads is None else c.is_send & heads)[0]
        same = np.nonzero(c.rank[sends][1:] == c.rank[sends][:-1])[0]
        recv_of_send = np.full(n, -1, idx)
        recv_of_send[m.send_op] = m.recv_op
        fifo_dep[sends[same + 1]] = recv_of_send[sends[same]]
        del recv_of_send, sends, same
        # A recv waits for the previous recv of its rank to complete: its send issued.
        recvs = np.nonzero(c.is_recv if heads is None else c.is_recv & heads)[0]
        same_rank = np.r_[False, c.rank[recvs][1:] == c.rank[recvs][:-1]]
        fifo_dep[recvs[same_rank]] = done(send_of_recv[recvs[np.nonzero(same_rank)[0] - 1]])
    # Serial schedules: the background engine (docs/pat.md) runs a rank's leading background
    # receives before its call, and the call waits for all of them before its first other
    # op. Proven as a chain (each waits for the one before, the first other op for the
    # last): stricter than the engine, and progress under stricter rules implies progress
    # under looser ones. (Dataflow schedules: the call takes the receives over unfinished.)
    bar_dep = None  # (no chain: check_progress needs no column of -1s)
    lead = (s.phase == BACKGROUND) & c.is_recv
    if serial and lead.any():
        bar_dep = np.full(n, -1, np.int64)
        # Per rank (a loop over ranks, not ops): its leading run of background receives
        # lo..end-1, each after the one before, and its first other op (if any) after the run.
        for r in range(s.nranks):
            lo, hi = int(s.offsets[r]), int(s.offsets[r + 1])
            if hi == lo or not lead[lo]:
                continue
            run = lead[lo:hi]
            end = lo + (int(np.argmin(run)) if not run.all() else hi - lo)
            bar_dep[lo + 1:end] = done(send_of_recv[lo:end - 1])
            if heads is not None:  # each receive message waits, not its joined ops
                bar_dep[lo + 1:end][~heads[lo + 1:end]] = -1
            if end < hi:
                bar_dep[end] = done(send_of_recv[end - 1])
    return fwd_dep, fifo_dep, bar_dep


def _progress_completes(rank, offsets, blocking, first, last, *deps) -> bool:
    """Whether every rank's walk reaches its end, found rank by rank on Python lists: the
    reference of the C kernel (kernels/progress.c), which the tests compare it with.

    Each rank walks as far as its blocking ops' conditions allow, and waits on the rank
    whose progress it needs; a rank that moves wakes its waiters. Conditions only become
    true as walks advance, so the walks end where the waves end, in any order."""
    rank, offsets, blocking = rank.tolist(), offsets.tolist(), blocking.tolist()
    first, last = first.tolist(), last.tolist()
    deps = [d[blocking].tolist() for d in deps]  # per blocking op
    nranks = len(first)
    cur = first[:]
    # issued_upto[r]: r has issued its ops before this index (its blocking op or its end).
    issued = [blocking[cur[r]] if cur[r] < last[r] else offsets[r + 1] for r in range(nranks)]
    waiting = [[] for _ in range(nranks)]
    todo = list(range(nranks))
    while todo:
        r = todo.pop()
        moved = False
        while cur[r] < last[r]:
            i = cur[r]
            stop = -1
            for dep in deps:
                d = dep[i]
                if d >= 0 and d >= issued[rank[d]]:
                    stop = rank[d]
                    break
            if stop >= 0:
                waiting[stop].append(r)
                break
            cur[r] = i + 1
            moved = True
        if moved:
            issued[r] = blocking[cur[r]] if cur[r] < last[r] else offsets[r + 1]
            todo.extend(waiting[r])
            waiting[r] = []
    return all(cur[r] == last[r] for r in range(nranks))


def check_wide_area(c: _Ctx, partitions: list[np.ndarray]) -> list[Violation]:
    """Each piece enters each pool at most once, at every level of the pool tree.

    `partitions` lists, per slow boundary level, a pool id per rank (e.g. the site of
    each rank). A transfer crosses the level when source and destination pools differ.
    """
    s = c.s
    out: list[Violation] = []
    recvs = np.nonzero(c.is_recv)[0]
    levels = [np.asarray(pool, np.int64) for pool in partitions]
    if levels and _nested(levels):
        # A transfer that crosses a level crosses every finer one: look only at the few
        # that cross the finest (a grid's WAN transfers), not at every receive per level.
        finest = levels[-1]
        recvs = recvs[finest[c.rank[recvs]] != finest[s.peer[recvs]]]
    for level, pool in enumerate(levels):
        cross = recvs[pool[c.rank[recvs]] != pool[s.peer[recvs]]]
        key = ((pool[c.rank[cross]] * s.nranks + s.origin[cross]) * s.nseg + s.segment[cross])
        order = np.lexsort((cross, key))
        key, cross = key[order], cross[order]
        for i in (np.nonzero(np.diff(key) == 0)[0] + 1)[:MAX_REPORTED]:
            op = int(cross[i])
            out.append(c.v("wide-area", op,
                           f"piece ({int(s.origin[op])},{int(s.segment[op])}) enters pool "
                           f"{int(pool[c.rank[op]])} (level {level}) a second time from rank {int(s.peer[op])}"))
    return out


def _nested(levels: list[np.ndarray]) -> bool:
    """Whether each level's pools split those of the level before (pools.partitions' are)."""
    for coarse, fine in zip(levels, levels[1:]):
        if len(fine) and fine.min() < 0:
            return False
        parent = np.zeros(int(fine.max()) + 1 if len(fine) else 0, np.int64)
        parent[fine] = coarse  # some coarse pool of each fine one
        if not np.array_equal(parent[fine], coarse):  # a fine pool in two coarse ones
            return False
    return True


PASSES = (("shape", check_shape), ("matching", check_matching), ("holding", check_holding),
          ("delivery", check_delivery), ("progress", check_progress))


def verify(sched: Schedule, pools: list[np.ndarray] | None = None, serial: bool | None = None) -> list[Violation]:
    """All violations of the first failing pass; [] when the schedule is correct.

    `serial`: prove progress under serial execution (docs/semantics.md); default: as the
    schedule says (Schedule.serial)."""
    return verify_and_match(sched, pools, serial)[0]


def verify_and_match(sched: Schedule, pools: list[np.ndarray] | None = None, serial: bool | None = None):
    """(violations, matching): the matching is None unless the matching pass succeeded."""
    c = _Ctx(sched)
    c.serial = sched.serial if serial is None else serial
    for _name, fn in PASSES:
        found = fn(c)
        if found:
            return found, c.matching
    if pools is not None:
        return check_wide_area(c, pools), c.matching
    return [], c.matching


def match(sched: Schedule) -> Matching:
    """Matched transfers of a schedule that passes `check_matching` (ValueError otherwise)."""
    c = _Ctx(sched)
    found = check_shape(c) or check_matching(c)
    if found:
        raise ValueError(str(found[0]))
    return c.matching
