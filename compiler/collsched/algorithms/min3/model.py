"""The Min3 planner's cost model (per rank-pair costs of one piece, and the port state
the engines update as they take transfers) and the plan they append to.

Transfer times follow the simulator's cost model (docs/semantics.md), so that what the
scheduler plans is what `simulate` predicts: Eq. 1-3 of the paper with send overhead
os(m), gap g(m), a receive port that frees when the bytes have landed, FIFO links where
policy.py marks them, and the moment the sender holds the piece.
"""
from __future__ import annotations

import numpy as np

from ...inputs.links import port_bandwidth, shared_links
from ...model.policy import fifo_link


class _Model:
    """Per rank-pair costs of one piece, and the port state the greedy updates (numpy)."""

    def __init__(self, topo, piece_bytes: int, full_duplex: bool, arrivals: np.ndarray):
        m = float(piece_bytes)
        p = topo.nranks
        eye = np.eye(p, dtype=bool)
        flow = topo.flow_bandwidth()
        _, recv_rate = port_bandwidth(topo)
        # Size-dependent costs (inputs/msgcosts.py): the piece's latency and effective size.
        lat, meff = topo.pair_costs(m)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.dur = np.where(eye, 0.0, lat + meff / flow)
            # A receiving port frees when the bytes have landed, `early` before the end.
            self.early = np.where(eye, 0.0, self.dur - meff / recv_rate)
            # policy.mark_fifo_links: a FIFO send waits for the previous message on its link.
            self.fifo = ~eye & fifo_link(lat, meff, flow, topo.bandwidth)
        self.os = np.where(eye, 0.0, topo.send_overhead(m))
        self.g = np.where(eye, 0.0, topo.gap(m))
        self.full_duplex = bool(full_duplex)
        self.serial = False  # plan_serial
        self.direct = False  # every piece from its origin only (Request.relays False)
        self.arrival = np.asarray(arrivals, np.float64)
        # Port state (Eq. 2/3). Full duplex: send and receive ports apart; half duplex:
        # both describe the one port, and a receive may overlap the previous receive only.
        self.send_free = self.arrival.copy()  # nothing leaves a rank before it arrives
        self.recv_free = np.zeros(p)
        self.recv_overlap = np.ones(p, bool)  # may the next receive start `early`?
        # Receives of a rank start in the order they are taken (see the module docstring:
        # a long-latency receive could otherwise start before a short one taken earlier).
        self.recv_after = np.zeros(p)
        self.link_free = np.zeros((p, p))
        # Shared WAN links (links.py): the simulator serves each in start order, a transfer
        # holding it for its bytes at the link's rate; the plan does the same.
        shared = shared_links(topo)
        self.wan_of = shared.link_of
        self.wan_hold = np.where(shared.link_of >= 0,
                                 meff / np.r_[shared.bandwidth, 1.0][shared.link_of], 0.0)
        self.wan_free = np.zeros(len(shared.bandwidth) + 1)  # last entry: "no link", 0 forever

    def plan_serial(self):
        """Plan for serial execution (docs/semantics.md): a send holds its port until the
        message has arrived, and a receive may not overlap the previous one. Full duplex:
        a rank may also relay pieces it received in the background before it arrives (the
        PAT engine runs a serial schedule's background sends; its own piece still waits
        for its arrival, through `holders`)."""
        self.serial = True
        self.os = self.dur.copy()
        self.early = np.zeros_like(self.early)
        if self.full_duplex:
            self.send_free = np.zeros_like(self.send_free)

    def wan_ready(self, s, r):
        """When the shared link s -> r (if any) takes the next transfer (numpy broadcast)."""
        return self.wan_free[self.wan_of[s, r]] if len(self.wan_free) > 1 else 0.0

    def commit(self, s: int, r: int, ready: float) -> tuple[float, float]:
        """Take transfer s -> r of a piece s holds from `ready` on; returns (start, end)."""
        start = max(self.send_free[s], ready, self.link_free[s, r], self.recv_after[r],
                    float(self.wan_ready(s, r)),
                    self.recv_free[r] - (self.early[s, r] if self.recv_overlap[r] else 0.0))
        end = start + self.dur[s, r]
        if self.wan_of[s, r] >= 0:
            self.wan_free[self.wan_of[s, r]] = start + self.wan_hold[s, r]
        self.link_free[s, r] = end if self.fifo[s, r] else start + self.g[s, r]
        self.recv_after[r] = start
        sent = start + self.os[s, r]
        if self.full_duplex:
            self.send_free[s] = sent
            self.recv_free[r] = end
        else:
            self.recv_free[s], self.send_free[s], self.recv_overlap[s] = sent, max(self.arrival[s], sent), False
            self.recv_free[r], self.send_free[r], self.recv_overlap[r] = end, max(self.arrival[r], end), True
        return float(start), float(end)


class _Plan:
    """Transfers in the order the greedy takes them (global ranks, piece index, times).

    The Python engines add them one at a time, the C kernels as arrays; the columns
    src, dst, item, start and end are numpy arrays, joined from the parts when read."""

    _TYPES = (np.int64, np.int64, np.int64, np.float64, np.float64)

    def __init__(self):
        self._parts = []  # (src, dst, item, start, end) arrays
        self._open = ([], [], [], [], [])  # added one at a time since the last part
        self._joined = None
        self._heads = {}

    def add(self, s, r, d, start, end):
        o = self._open
        o[0].append(s), o[1].append(r), o[2].append(d), o[3].append(start), o[4].append(end)
        self._joined = None

    def extend(self, s, r, d, start, end):
        self._close()
        self._parts.append(tuple(np.asarray(x, t) for x, t in zip((s, r, d, start, end), self._TYPES)))
        self._joined = None

    def _close(self):
        if self._open[0]:
            self._parts.append(tuple(np.array(x, t) for x, t in zip(self._open, self._TYPES)))
            self._open = ([], [], [], [], [])

    def columns(self) -> tuple:
        if self._joined is None:
            self._close()
            self._joined = tuple(np.concatenate([p[k] for p in self._parts]) if self._parts
                                 else np.empty(0, t) for k, t in enumerate(self._TYPES))
        return self._joined

    def head(self, n: int) -> tuple:
        """The columns of the first n transfers (they never change: kept once joined)."""
        if self._heads.get(n) is None:
            self._close()
            parts, rows = [], 0
            for p in self._parts:
                if rows >= n:
                    break
                parts.append(p)
                rows += len(p[0])
            self._heads[n] = tuple(np.concatenate([p[k] for p in parts])[:n] if parts else np.empty(0, t)
                                   for k, t in enumerate(self._TYPES))
        return self._heads[n]

    def __len__(self):
        return sum(len(p[0]) for p in self._parts) + len(self._open[0])

    src = property(lambda self: self.columns()[0])
    dst = property(lambda self: self.columns()[1])
    item = property(lambda self: self.columns()[2])
    start = property(lambda self: self.columns()[3])
    end = property(lambda self: self.columns()[4])


def _preference(nranks: int, nseg: int, rank: int, d: int) -> tuple[int, int]:
    """Tie-break among pieces that complete at the same time: ring predecessors first."""
    return ((rank - d // nseg) % nranks, d)
