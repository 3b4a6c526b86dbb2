"""The timing of a dag.Plan's transfer DAG, transfer by transfer: _PyGraph (the C
kernel's reference, on Python lists), _GreedyPorts (half-duplex ports served greedily in
simulated time) and _KernelGraph (_PyGraph in C, kernels/dag.c). dag.py builds the plan and
times it in numpy waves; it re-exports these names.

A plan's dependencies are its columns (pred, kind, offset: one predecessor per rule) and,
for multi-piece messages, its extra edges (Plan.extra: a CSR of further predecessors, each
of kind _END and offset 0: the other deliveries a send message waits for, dag.py). Every
timing here reads both: an extra edge counts as a column entry would.
"""
from __future__ import annotations

import numpy as np

from .. import kernels

# Which release time of a predecessor counts: start + os(m), start + g(m), end, start +
# the bytes' time on its shared link, and end as the ports see it (_PORT_END, dag.py).
_OS, _G, _END, _LINK, _PORT_END = 0, 1, 2, 3, 4
_NK = 5
LINK_PASSES = 4


class ModelCycle(ValueError):
    """The port orders of the schedule wait on each other: the model cannot order them."""

def _edge_lists(plan):
    """The transfer DAG of a plan as flat Python lists (no object per edge): the in-edges
    of transfer v are first[v]..first[v + 1] of pred, rel (the index of the pred's release
    time, _NK * pred + kind) and offset - its columns' in column order, then its extra
    edges (plan.extra, kind _END, offset 0.0); its out-edges
    succ[succ_start[v]..succ_start[v + 1]]; indeg[v] its number of in-edges."""
    valid = plan.pred >= 0
    q = plan.pred[valid]
    rel = _NK * q + plan.kind[valid]
    off = plan.offset[valid]
    rows = np.nonzero(valid)[0]
    extra = getattr(plan, "extra", None)
    if extra is not None:
        xoff, xpred = extra
        xrows = np.repeat(np.arange(plan.n), np.diff(xoff))
        by_row = np.argsort(np.r_[rows, xrows], kind="stable")  # a row's columns, then extras
        rows = np.r_[rows, xrows][by_row]
        q = np.r_[q, xpred][by_row]
        rel = np.r_[rel, _NK * xpred + _END][by_row]
        off = np.r_[off, np.zeros(len(xpred))][by_row]
    counts = np.bincount(rows, minlength=plan.n)
    first = np.r_[0, np.cumsum(counts)].tolist()
    by_pred = np.argsort(q, kind="stable")
    succ = rows[by_pred].tolist()
    succ_start = np.searchsorted(q[by_pred], np.arange(plan.n + 1)).tolist()
    return first, q.tolist(), off.tolist(), rel.tolist(), succ, succ_start, counts.tolist()


class _PyGraph:
    """The transfer DAG of a Plan as Python lists, timed transfer by transfer with the
    arithmetic of Plan._longest_paths (the same float operations: the same results). The
    reference of the C kernel (kernels/dag.c); only the tests run it."""

    def __init__(self, plan):
        n = self.n = plan.n
        self.first, self.pred, self.offset, self.rel, succ, start, indeg = _edge_lists(plan)
        self.duration, self.os_all = plan.duration.tolist(), plan.os_all.tolist()
        self.g_all, self.wan_time = plan.g_all.tolist(), plan.wan_time.tolist()
        self.wan, self.on_wan = plan.wan.tolist(), plan.on_wan.tolist()
        # Levels (the wave of each transfer in Plan._topological_waves) and a topological
        # order, by Kahn's algorithm; levels None if the graph has a cycle.
        level = [0] * n
        order = [v for v in range(n) if not indeg[v]]
        for v in order:  # grows while it is walked
            lv = level[v] + 1
            for w in succ[start[v]:start[v + 1]]:
                if level[w] < lv:
                    level[w] = lv
                indeg[w] -= 1
                if not indeg[w]:
                    order.append(w)
        self.levels = level if len(order) == n else None
        self.order = order

    def time(self, base: np.ndarray):
        """(start, end) arrays, with the shared-link iteration of Plan._time_waves."""
        base = base.tolist()
        start, end, key, level = self._longest_paths(base, None, self.order)
        wan, levels, chain = self.wan, self.levels, None
        for _ in range(LINK_PASSES if self.on_wan else 0):
            # As in Plan._time_waves: each link in (start made monotone, DAG order).
            rank = [0] * self.n
            for i, v in enumerate(sorted(range(self.n), key=levels.__getitem__)):
                rank[v] = i  # position in the waves: by level, then index
            t = sorted(self.on_wan, key=lambda v: (wan[v], key[v], rank[v]))
            prev = {v: u for u, v in zip(t, t[1:]) if wan[u] == wan[v]}
            if chain is not None and prev == chain:
                break
            chain = prev
            # (key, DAG rank) is a topological order of the new graph: keys never decrease
            # along an edge, ranks increase, and the new chain follows that order.
            order = sorted(range(self.n), key=lambda v: (key[v], rank[v]))
            start, end, key, levels = self._longest_paths(base, chain, order)
        return np.array(start, np.float64), np.array(end, np.float64)

    def _longest_paths(self, base, chain, order):
        """Times in `order` (topological), with the edges chain[v] -> v (kind _LINK) too."""
        n, ninf = self.n, -np.inf
        start, end, key, level = [0.0] * n, [0.0] * n, [ninf] * n, [0] * n
        rel = [ninf] * (_NK * n)  # release times [_NK * transfer + kind]
        first, preds, rels, offsets = self.first, self.pred, self.rel, self.offset
        dur, os_all, g_all, wan_time = self.duration, self.os_all, self.g_all, self.wan_time
        no_chain = {}
        for v in order:
            st = base[v]
            km = ninf
            lv = 0
            for e in range(first[v], first[v + 1]):
                x = rel[rels[e]] + offsets[e]
                if x > st:
                    st = x
                q = preds[e]
                k = key[q]
                if k > km:
                    km = k
                k = level[q]
                if k >= lv:
                    lv = k + 1
            ready = st  # the start but for the shared link's queue
            q = (chain or no_chain).get(v, -1)
            if q >= 0:
                x = rel[_NK * q + _LINK] + 0.0
                if x > st:
                    st = x
                k = key[q]
                if k > km:
                    km = k
                k = level[q]
                if k >= lv:
                    lv = k + 1
            en = st + dur[v]
            start[v] = st
            end[v] = en
            key[v] = km if km > st else st
            level[v] = lv
            j = _NK * v
            rel[j] = ready + os_all[v]
            rel[j + 1] = st + g_all[v]
            rel[j + 2] = en
            rel[j + 3] = st + wan_time[v]
            rel[j + 4] = ready + dur[v]
        return start, end, key, level


class _GreedyPorts:
    """Half-duplex ports served greedily in simulated time (Plan._use_greedy_ports).

    The plan's full-duplex DAG gives each transfer its earliest start but for the port;
    each host's one port then takes, of the transfers whose predecessors are timed, the
    one that can start first (ties: the lower transfer index), and holds it as the
    list-order model does: a send for os(m) from when it is ready, a receive until its
    bytes have arrived (the next receive may start `early` before that), a serial
    schedule's transfers until they end. A shared WAN link serves its transfers in the
    order they are taken. Every release only grows as transfers are taken, so a popped
    transfer whose start has not moved is the earliest: the order is exact, not a guess,
    and no cycle can arise (the DAG without ports is acyclic; ports only delay)."""

    def __init__(self, plan):
        self.n = plan.n
        (self.first, self.pred, self.offset, self.rel, self.succ, self.succ_start,
         self.indeg) = _edge_lists(plan)
        self.src, self.dst = plan.src.tolist(), plan.dst.tolist()
        self.duration, self.os_all = plan.duration.tolist(), plan.os_all.tolist()
        self.g_all, self.wan_time = plan.g_all.tolist(), plan.wan_time.tolist()
        self.wan = plan.wan.tolist()
        self.early = plan._early.tolist()
        self.serial = bool(plan._serial)
        self.nranks = plan.nranks

    def time(self, base: np.ndarray):
        import heapq

        n, ninf = self.n, -np.inf
        base = base.tolist()
        start, end = [0.0] * n, [0.0] * n
        rel = [ninf] * (_NK * n)
        first, preds, rels, offsets = self.first, self.pred, self.rel, self.offset
        src, dst, early, wan, serial = self.src, self.dst, self.early, self.wan, self.serial
        last = [-1] * self.nranks  # the transfer that last held each host's port
        last_sent = [False] * self.nranks  # ... and whether the host sent it
        link_free: dict[int, float] = {}
        indeg = list(self.indeg)

        def ready_at(v):
            r = base[v]
            for e in range(first[v], first[v + 1]):
                x = rel[rels[e]] + offsets[e]
                if x > r:
                    r = x
            for h, receiving in ((src[v], False), (dst[v], True)):
                u = last[h]
                if u < 0:
                    continue
                if serial:
                    x = end[u]
                elif last_sent[h]:
                    x = rel[_NK * u + _OS]
                else:
                    x = rel[_NK * u + _PORT_END] - (early[v] if receiving else 0.0)
                if x > r:
                    r = x
            return r

        def start_at(v, ready):
            w = wan[v]
            return max(ready, link_free.get(w, ninf)) if w >= 0 else ready

        heap = []
        for v in range(n):
            if not indeg[v]:
                heap.append((start_at(v, ready_at(v)), v))
        heapq.heapify(heap)
        done = 0
        while heap:
            t, v = heapq.heappop(heap)
            ready = ready_at(v)
            st = start_at(v, ready)
            if st > t:  # a port or link was taken since: wait in line again
                heapq.heappush(heap, (st, v))
                continue
            en = st + self.duration[v]
            start[v], end[v] = st, en
            j = _NK * v
            rel[j] = ready + self.os_all[v]
            rel[j + 1] = st + self.g_all[v]
            rel[j + 2] = en
            rel[j + 3] = st + self.wan_time[v]
            rel[j + 4] = ready + self.duration[v]
            last[src[v]], last_sent[src[v]] = v, True
            last[dst[v]], last_sent[dst[v]] = v, False
            if wan[v] >= 0:
                link_free[wan[v]] = rel[j + 3]
            done += 1
            for w in self.succ[self.succ_start[v]:self.succ_start[v + 1]]:
                indeg[w] -= 1
                if not indeg[w]:
                    heapq.heappush(heap, (start_at(w, ready_at(w)), w))
        if done != n:  # cannot happen: _use_greedy_ports proved the DAG acyclic
            raise ModelCycle("half-duplex port order: a transfer was never ready")
        return np.array(start, np.float64), np.array(end, np.float64)


class _KernelGraph:
    """_PyGraph in C (kernels/dag.c): the same timing, bit for bit, on the plan's arrays
    renumbered depth first; fast enough for any size, so it replaces the waves too."""

    def __init__(self, plan):
        n = self.n = plan.n
        preds, kinds, offsets = plan._columns
        if len(preds) != 5:
            raise AssertionError("kernels/dag.c reads five dependency columns (enum K)")
        self.zero_col = plan._zero_offset  # added as the constant +0.0 (same bits), not read
        self.perm, self.edge = np.empty(n, np.int64), np.empty(n * 5, np.int64)
        self.eoff = np.empty(n * int(5 - self.zero_col.sum()))
        self.node = np.empty(4 * n)
        self.on_wan = np.empty(len(plan.on_wan), np.int64)
        self.link_of = np.ascontiguousarray(plan.wan[plan.on_wan], np.int64)
        kind = np.empty((5, n), np.uint8)
        for row, k in zip(kind, kinds):
            row[:] = k  # a scalar or one per transfer
        pred = [np.ascontiguousarray(p, np.int64) for p in preds]
        off = [np.ascontiguousarray(o, np.float64) for o in offsets]

        # A message's extra edges (Plan.extra), renumbered as xoff_out / xedge; none: the
        # kernel reads no extra array (one-entry stand-ins).
        extra = getattr(plan, "extra", None)
        if extra is None:
            self.n_extra, xoff, xpred = 0, np.zeros(1, np.int64), np.zeros(1, np.int64)
        else:
            xoff, xpred = (np.ascontiguousarray(a, np.int64) for a in extra)
            self.n_extra = len(xpred)
        self.xoff = np.zeros(n + 1 if self.n_extra else 1, np.int64)
        self.xedge = np.zeros(max(self.n_extra, 1), np.int64)

        def f64(a):
            return np.ascontiguousarray(a, np.float64)
        done = kernels.dag_order(
            n=n, pred0=pred[0], pred1=pred[1], pred2=pred[2], pred3=pred[3], pred4=pred[4],
            kind=kind, off0=off[0], off1=off[1], off2=off[2], off3=off[3], off4=off[4],
            zero_col=self.zero_col, n_extra=self.n_extra, xoff=xoff, xpred=xpred,
            dur=f64(plan.duration), os=f64(plan.os_all),
            g=f64(plan.g_all), wan_time=f64(plan.wan_time), n_on_wan=len(plan.on_wan),
            on_wan=np.ascontiguousarray(plan.on_wan, np.int64), perm=self.perm,
            edge=self.edge, eoff=self.eoff, node=self.node, on_wan_out=self.on_wan,
            xoff_out=self.xoff, xedge=self.xedge)
        self.acyclic = done == n
        self.work = None  # the C timing's scratch, kept: its pages are mapped once

    def time(self, base: np.ndarray):
        """(start, end) arrays, as _PyGraph.time computes them; None if a shared-link order
        made a cycle (it cannot)."""
        n = self.n
        if self.work is None:
            self.work = (np.empty(4 * n), np.empty(3 * n, np.int64))
        start, end = np.empty(n), np.empty(n)
        done = kernels.dag_time(
            n=n, edge=self.edge, eoff=self.eoff, zero_col=self.zero_col, n_extra=self.n_extra,
            xoff=self.xoff, xedge=self.xedge, node=self.node, perm=self.perm, n_on_wan=len(self.on_wan), on_wan=self.on_wan,
            link_of=self.link_of, passes=LINK_PASSES, base=np.ascontiguousarray(base, np.float64),
            work_f=self.work[0], work_i=self.work[1], start=start, end=end)
        return (start, end) if done == n else None
