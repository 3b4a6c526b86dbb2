"""Execution policies the compiler decides per schedule, apart from the algorithms.

FIFO per link (docs/semantics.md): a send marked FIFO waits until the previous send to
the same peer has completed, so two messages to one peer never share the link and the
first one, which the peer may have to forward, is not slowed by the second. The price is
that the next message cannot start while the previous one is still in flight: one latency
per message. So a send is marked where its link's latency is below the message's transfer
time (a LAN, large pieces) and left unmarked on long links (a WAN), where keeping many
messages in flight is what fills the link.
"""
from __future__ import annotations

import numpy as np

from .ir import SEND, Schedule


def mark_fifo_links(sched: Schedule, topo, nbytes: int) -> int:
    """Set sched.fifo for sends on links where latency < transfer time; returns how many."""
    rank = sched.rank_of_op
    send = sched.kind == SEND
    piece = sched.piece_bytes(nbytes)[sched.segment]
    src, dst = rank[send], sched.peer[send]
    lat = topo.latency[src, dst]
    flow = topo.flow_bandwidth() if hasattr(topo, "flow_bandwidth") else topo.bandwidth
    transfer = piece[send] / flow[src, dst]
    fifo = np.zeros(sched.total_ops, np.uint8)
    fifo[np.nonzero(send)[0]] = (lat < transfer).astype(np.uint8)
    sched.fifo = fifo
    return int(fifo.sum())
