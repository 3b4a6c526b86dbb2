"""The DAG model of a rank-symmetric schedule, exactly, in O(one rank's list).

ring, bruck, spreading and nex (rotation: rank x's list is rank x mod q's with every peer
and origin shifted by x - x mod q; q = 1, nex q = 2) and rd (x's list is rank 0's with
every peer and origin XOR x) have the same lists up to a symmetry of the ranks. On a
homogeneous LAN with every rank arriving at 0, the DAG of dag.Plan is then invariant
under that symmetry too, and its longest-path times are: every transfer of one *class*
(the images of one send of a representative rank) starts and ends at the same time. So
the DAG over classes - one node per send of the representatives, the five dependency
rules of dag.Plan mapped through the symmetry - has the same times as the full one, with
2 (P - 1) nseg nodes instead of P times that. It is timed by dag.py's own code
(_KernelGraph, or the _PyGraph reference without the C kernels), on the same operands:
the result is the full model's to the bit (tests compare).

The quotient is acyclic: a chain from class c back to c would be, in the full DAG, a
chain from one transfer of c to another, and repeating it around the finite group would
close a cycle there.
"""
from __future__ import annotations

import numpy as np

from ..ir import RECV, SEND
from ..model import dag
from . import native
from .desc import CompactDesc

# Symmetry per algorithm: ("add", q) rotation by multiples of q, or ("xor", 1).
SYMMETRY = {"ring": ("add", 1), "bruck": ("add", 1), "spreading": ("add", 1),
            "nex": ("add", 2), "rd": ("xor", 1)}


class _ClassPlan:
    """What dag._KernelGraph and dag._PyGraph read of a dag.Plan, for the class DAG (no
    shared WAN links inside one site)."""

    def __init__(self, n, columns, duration, os_all, g_all, zero_offset):
        self.n = n
        self._columns = columns
        self._zero_offset = zero_offset
        self.duration, self.os_all, self.g_all = duration, os_all, g_all
        self.wan_time = np.zeros(n)
        self.on_wan = np.zeros(0, np.int64)
        self.wan = np.full(n, -1, np.int64)
        preds, kinds, offsets = columns
        self.pred = np.stack(preds, 1)
        self.kind = np.stack([np.broadcast_to(np.asarray(k, np.int8), n) for k in kinds], 1)
        self.offset = np.stack(offsets, 1)


def lists(desc: CompactDesc) -> tuple[str, int, list[np.ndarray]]:
    """(group, q, representatives' lists) of a symmetric description."""
    group, q = SYMMETRY[desc.algorithm]
    return group, q, [native.generate(desc, r) for r in rep_ranks(desc)]


def rep_ranks(desc: CompactDesc) -> list[int]:
    """The representatives: ranks 0 .. q-1; for rd rank P - 1, every bit set (it forwards
    what it has just received first: rd's lists are XOR images of one another only up to
    the order of a step's blocks; docs/compact-model.md)."""
    group, q = SYMMETRY[desc.algorithm]
    return [desc.nranks - 1] if group == "xor" else list(range(min(q, desc.nranks)))


def time_classes(desc: CompactDesc, costs_of, eager_limit: int, nbytes: int):
    """(makespan, info) of a symmetric description's class DAG. costs_of(piece_bytes) ->
    model_sites.PairCosts of one transfer inside the (homogeneous) site. info: classes,
    transfers, hop depth (the longest chain of forwards)."""
    if desc.nranks < 2:
        return 0.0, {"classes": 0, "transfers": 0, "depth": 0}
    group, q, reps = lists(desc)
    r = time_lists(reps, rep_ranks(desc), group, desc.nranks, _piece_bytes(nbytes, desc.nseg),
                   costs_of, eager_limit)
    return float(r.end.max()), {"classes": r.n, "transfers": r.n * desc.nranks // len(reps),
                                "depth": r.depth}


class Timed:
    """The class DAG's times: per class (a send of a representative) start and end, its
    op index in the flattened lists, and the depth of forwards."""

    def __init__(self, n, start, end, sends, feed, depth, recv_of_op):
        self.n, self.start, self.end, self.sends, self.feed, self.depth = n, start, end, sends, feed, depth
        self.recv_of_op = recv_of_op  # class of each representative receive op (-1: none)


def time_lists(reps, me, group, p, pieces, costs_of, eager_limit, fifo_of=None, base=None) -> Timed:
    """Time the class DAG of representative lists (module docstring).

    reps: OP_DTYPE lists of the representatives, me: their ranks; group "add" (rotation
    by multiples of len(reps)) or "xor"; p ranks; pieces[s]: bytes of segment s;
    fifo_of(piece_bytes) -> bool overrides the lists' FIFO bits; base(classes info) ->
    per-class earliest start (default 0: every rank arrives at 0)."""
    q = len(reps)
    nseg = len(pieces)
    sizes = [len(x) for x in reps]
    first = np.r_[0, np.cumsum(sizes)]
    ops = np.concatenate(reps)
    rep = np.repeat(np.arange(q), sizes)
    kind, peer = ops["kind"].astype(np.int64), ops["peer"].astype(np.int64)
    origin, seg = ops["origin"].astype(np.int64), ops["segment"].astype(np.int64)
    fifo = (ops["flags"] >> 1) & 1
    me = np.asarray(me, np.int64)

    def canon(x):
        """(rep, shift) with x the image of rep under shift."""
        if group == "xor":
            return np.zeros_like(x), x ^ me[0]
        r = x % q
        return r, x - r

    def unact(v, shift):
        return v ^ shift if group == "xor" else (v - shift) % p

    # Receives of the representatives by (rep, origin, segment): unique (delivery).
    is_recv = kind == RECV
    table = np.full(q * p * nseg, -1, np.int64)
    table[((rep * p + origin) * nseg + seg)[is_recv]] = np.nonzero(is_recv)[0]
    sends = np.nonzero(kind == SEND)[0]
    n = len(sends)
    cls_of_op = np.full(len(ops), -1, np.int64)
    cls_of_op[sends] = np.arange(n)
    # The receive each send class matches, in its receiver's representative frame.
    y_rep, y_shift = canon(peer[sends])
    recv_op = table[(y_rep * p + unact(origin[sends], y_shift)) * nseg + seg[sends]]
    if np.any(recv_op < 0):
        raise AssertionError("model_sym: a send whose receive the symmetry does not find")
    cls_of_recv = np.full(len(ops), -1, np.int64)
    cls_of_recv[recv_op] = np.arange(n)

    def previous(mask):
        """For each op: the previous op of its representative's list with mask, or -1."""
        idx = np.where(mask, np.arange(len(ops)), -1)
        out = np.full(len(ops), -1, np.int64)
        for r in range(q):
            a, b = first[r], first[r + 1]
            if b > a:
                out[a + 1:b] = np.maximum.accumulate(idx[a:b])[:-1]
        return out

    prev_send = previous(kind == SEND)
    prev_recv = previous(is_recv)
    prev_link = np.full(len(ops), -1, np.int64)  # previous send to the same peer
    key = rep * p + peer
    order = np.lexsort((np.arange(len(ops)), key))
    order = order[kind[order] == SEND]
    same = np.r_[False, key[order][1:] == key[order][:-1]]
    prev_link[order[same]] = order[np.nonzero(same)[0] - 1]

    c = [costs_of(int(m)) for m in pieces]
    sg = seg[sends]
    dur = np.array([x.duration for x in c])[sg]
    os_ = np.array([x.os for x in c])[sg]
    g = np.array([x.g for x in c])[sg]
    early = np.array([x.early for x in c])[sg]
    nb = np.asarray(pieces)[sg]
    if fifo_of is not None:
        fifo_s = np.array([bool(fifo_of(int(m))) for m in pieces], np.int64)[sg]
    else:
        fifo_s = fifo[sends]

    def cls(op_idx, of):
        return np.where(op_idx >= 0, of[np.maximum(op_idx, 0)], -1)

    def receipt(rk, o, s_):
        return table[(rk * p + o) * nseg + s_]

    pred_send = cls(prev_send[sends], cls_of_op)
    pred_recv = cls(prev_recv[recv_op], cls_of_recv)
    pred_link = cls(prev_link[sends], cls_of_op)
    fwd = origin[sends] != me[rep[sends]]  # not the representative's own block
    feed_op = np.where(fwd, receipt(rep[sends], origin[sends], sg), -1)
    pred_feed = cls(feed_op, cls_of_recv)
    # Rendezvous: the last forwarded send before the receive in the receiver's list.
    last_fwd = previous((kind == SEND) & (origin != me[rep]))[recv_op]
    lf = np.maximum(last_fwd, 0)
    lf_feed = np.where(last_fwd >= 0, receipt(rep[lf], origin[lf], seg[lf]), -1)
    pred_post = np.where((last_fwd >= 0) & (nb >= eager_limit), cls(lf_feed, cls_of_recv), -1)
    zero = np.zeros(n)
    columns = ([pred_send, pred_recv, pred_link, pred_feed, pred_post],
               [dag._OS, dag._PORT_END, np.where(fifo_s == 1, dag._END, dag._G).astype(np.int8),
                dag._END, dag._END],
               [zero, -early, zero, zero, zero])
    plan = _ClassPlan(n, columns, dur, os_, g, np.array([1, 0, 1, 1, 1], np.uint8))
    b0 = np.zeros(n) if base is None else np.asarray(base(dict(
        rep=rep[sends], origin=origin[sends], seg=sg, own=~fwd, me=me)), np.float64)
    start, end = _time(plan, b0)
    return Timed(n, start, end, sends, pred_feed, _depth(pred_feed, plan), cls_of_recv)


def _time(plan, b):
    from .. import kernels
    if kernels.available():
        kg = dag._KernelGraph(plan)
        if kg.acyclic:
            out = kg.time(b)
            if out is not None:
                return out
    return dag._PyGraph(plan).time(b)


def _depth(pred_feed, plan) -> int:
    """Longest chain of forwards (the hops a piece makes one after another), by pointer
    jumping over the feed forest: O(n log depth)."""
    n = plan.n
    if not n:
        return 0
    anc = pred_feed.copy()
    dist = (anc >= 0).astype(np.int64)
    while np.any(anc >= 0):
        has = anc >= 0
        a = np.maximum(anc, 0)
        dist = np.where(has, dist + dist[a], dist)
        anc = np.where(has, anc[a], -1)
    return int(dist.max()) + 1


def _piece_bytes(nbytes: int, nseg: int) -> np.ndarray:
    s = np.arange(nseg + 1, dtype=np.int64)
    qq, r = divmod(int(nbytes), nseg)
    return np.diff(s * qq + (s * r) // nseg)
