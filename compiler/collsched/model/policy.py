"""Execution policies the compiler decides per schedule, apart from the algorithms.

Segments (`--segments auto`, segment_candidates): where the TCP window caps a path below
its bandwidth, one flow cannot fill it and more pieces in flight can; Min3 then tries
cutting each block into 1, 2, 4, 8 and 16 segments and keeps the count whose plan the
cost model predicts fastest (under SMPI on wan-3x16 the count it picks runs faster than
unsegmented blocks, and the cost model ranks the counts as SMPI does; docs/grid.md).
Where no path is window-capped (a cluster, the three-site grid's narrow links) segments
only add latency and messages, so there is no search.

FIFO per link (docs/semantics.md): a send marked FIFO waits until the previous send to
the same peer has completed, so two messages to one peer never share the link and the
first one, which the peer may have to forward, is not slowed by the second. The price is
that the next message cannot start while the previous one is still in flight: one latency
per message. So a send is marked where its link's latency is below the message's transfer
time (a LAN, large pieces) and left unmarked on long links (a WAN), where keeping many
messages in flight is what fills the link - and never where the TCP window caps the
path: there one flow cannot fill the link at any size, and a large piece's transfer time
grows with the window's cap (2 L m / W), so the latency rule alone would mark it (on
wan-3x16 with 4 MiB pieces magpie's coordinators would then send their blocks one after
another, and take several times as long).
"""
from __future__ import annotations

import numpy as np

from ..ir import SEND, Schedule


def window_capped(flow_bw, bandwidth):
    """Elementwise: does the TCP window hold the path below its bandwidth (one flow
    cannot fill it)? flow_bw is Topology.flow_bandwidth()."""
    return flow_bw < bandwidth * (1 - 1e-9)


def fifo_link(latency, piece_bytes, flow_bw, bandwidth):
    """Whether a message of piece_bytes goes FIFO on a link (module docstring): its
    latency is below the transfer time, and the TCP window does not cap the path. Works
    elementwise; the one rule of mark_fifo_links and of the Min3 planner's model."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (latency < piece_bytes / flow_bw) & ~window_capped(flow_bw, bandwidth)


def mark_fifo_links(sched: Schedule, topo, nbytes: int) -> int:
    """Set sched.fifo for sends on the links fifo_link picks; returns how many."""
    rank = sched.rank_of_op
    send = sched.kind == SEND
    piece = sched.piece_bytes(nbytes)[sched.segment]
    src, dst = rank[send], sched.peer[send]
    flow = topo.flow_bandwidth()
    lat_factor, meff = topo.effective_sizes(src, dst, piece[send])  # inputs/msgcosts.py
    fifo = np.zeros(sched.total_ops, np.uint8)
    fifo[np.nonzero(send)[0]] = fifo_link(topo.latency[src, dst] * lat_factor, meff, flow[src, dst],
                                          topo.bandwidth[src, dst]).astype(np.uint8)
    sched.fifo = fifo
    return int(fifo.sum())


def serial_list_schedule(topo, arrivals) -> bool:
    """Whether an arrival-aware list schedule (min3 --pap) is planned and run serially.

    With imbalanced arrivals the greedy gives an early rank's free port one transfer after
    another. In dataflow order they all leave at once and share the rank's NIC, so every
    piece lands late and the pieces forwarded from them later still: arrival-aware min3
    on tryton-48 ran well behind its plan under SMPI. Planned for serial execution (a send
    holds the port until its message has arrived) and run so, it runs as planned, and
    faster still once late ranks relay pieces in the background (min3's plan_serial;
    docs/grid.md has the figures). That holds where one flow fills
    the sender's port, so that parallel flows gain nothing. Where flows are slower than
    the port (window-capped WAN paths), several in flight are what fills a link: dataflow
    stays.
    """
    if arrivals is None or topo.nranks < 2 or not np.ptp(np.asarray(arrivals, np.float64)) > 0:
        return False
    flow = topo.flow_bandwidth()
    send_rate = topo.port_bandwidth[0]
    off = ~np.eye(topo.nranks, dtype=bool)
    return bool(np.all(flow[off] >= send_rate[off] * (1 - 1e-9)))


# segment_candidates stops where a candidate's schedule would exceed this many operations:
# each one is generated, verified and timed (48 ranks x 16 segments: 72,192 ops).
MAX_AUTO_OPS = 600_000
AUTO_SEGMENTS = (1, 2, 4, 8, 16)


def window_limited(topo) -> bool:
    """Does the TCP window hold some path below its bandwidth (one flow cannot fill it)?"""
    capped = window_capped(topo.flow_bandwidth(), topo.bandwidth)  # a fresh array: cheap to edit
    np.fill_diagonal(capped, False)
    return bool(capped.any())


def segment_candidates(algorithm: str, topo, nranks: int) -> list[int]:
    """Segment counts `--segments auto` tries (module docstring): Min3 on a topology with
    window-capped paths, up to MAX_AUTO_OPS operations; otherwise unsegmented."""
    ops = 2 * nranks * (nranks - 1)  # one send and one receive per piece and rank pair
    fit = [k for k in AUTO_SEGMENTS if ops * k <= MAX_AUTO_OPS]
    if algorithm != "min3" or len(fit) < 2 or not window_limited(topo):
        return [1]
    return fit
