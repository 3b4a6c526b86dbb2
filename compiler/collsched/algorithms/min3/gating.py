"""Receive gating: sort keys that make the runtime take a shared WAN link's transfers
into one rank one after another, as the plan has them (_gate_link_receives)."""
from __future__ import annotations

import numpy as np

from ...inputs.links import shared_links
from .model import _Model

# _gate_link_receives: links whose latency is at most this share of a piece's time on them
# (three-site grid at 256 KiB: 2.8-3.4% on its UT links; 17% on UK-NTH, not gated).
GATE_LATENCY_SHARE = 0.05

def _gate_link_receives(model: _Model, src, dst, item, step, topo, piece_bytes: int, foreground):
    """Sort keys (send steps, receive steps) that make the runtime take a shared WAN link's
    transfers into one rank one after another, as the plan has them.

    The plan serves a link in turn; the runtime posts every receive as its walk reaches
    it, and a rendezvous message (at least eager_limit bytes) moves once its receive is
    posted - so transfers the plan put one after another on a link all moved at once,
    sharing it, and every piece landed late: on the three-site grid UT pieces planned to
    reach UK one after another all arrived together, at the end, and what UK forwarded
    from them started that much later. So a rendezvous receive over a shared link is listed just
    after the receiver's first forward of the piece it took before over the same link:
    the walk, waiting for that piece (rule 2), posts the receive when the link is free,
    where the plan starts the transfer. On the three-site grid under SMPI that makes Min3
    faster at 256 KiB and 1 MiB (docs/grid.md, "receive gating", has the figures).

    Only where one flow fills the link (window-capped links want several flows in flight,
    policy.py) and its latency is at most GATE_LATENCY_SHARE of the piece's time on it (a
    gated receive is posted when the previous piece has landed, so the next transfer's
    latency is no longer hidden behind it: one latency more per transfer than planned);
    in full duplex, foreground ops, and when the forward comes before the
    receiver's own forward of the gated piece; and a receive moves only past sends, never
    past another receive. So each rank's receives keep the plan's order - the cost model's
    receive-port order (a cycle otherwise: random grids found one), and the order in which
    the k-th send from a peer meets the k-th receive - and its sends keep theirs."""
    if (piece_bytes < topo.eager_limit or not model.full_duplex
            or not (model.wan_of >= 0).any()):
        return step, None
    shared = shared_links(topo)
    link_bw = np.r_[shared.bandwidth, np.inf][model.wan_of]
    filled = ((model.wan_of >= 0) & (topo.flow_bandwidth() >= link_bw * (1 - 1e-9))
              & (topo.latency <= GATE_LATENCY_SHARE * piece_bytes / link_bw))
    if not filled.any():
        return step, None
    on_link = filled[src, dst] & foreground
    order = np.argsort(step, kind="stable")
    receivers = np.zeros(len(filled), bool)
    receivers[dst[on_link]] = True
    first_send = {}  # (rank, item) -> its first send of the item, by step (link receivers only)
    for j in order[receivers[src[order]]].tolist():
        first_send.setdefault((int(src[j]), int(item[j])), j)
    # The steps of each link receiver's receives, sorted: a receive moves only past sends,
    # so each rank's receive order - the cost model's receive-port order - stays the plan's.
    recv_steps = {int(r): np.sort(step[dst == r]) for r in np.nonzero(receivers)[0]}
    recv_key = step.astype(np.float64)
    previous = {}  # (receiver, link) -> the last transfer into it over the link
    for j in order[on_link[order]].tolist():
        r, lk = int(dst[j]), int(model.wan_of[src[j], dst[j]])
        i = previous.get((r, lk))
        previous[(r, lk)] = j
        gate = None if i is None else first_send.get((r, int(item[i])))
        own = first_send.get((r, int(item[j])))
        rs = recv_steps[r]
        next_recv = np.searchsorted(rs, step[j], side="right")
        if (gate is not None and foreground[gate] and step[gate] > step[j]
                and (own is None or step[gate] < step[own])
                and (next_recv == len(rs) or rs[next_recv] > step[gate])):
            recv_key[j] = step[gate] + 0.5  # right after the gate, before the next step
    # Dense integer keys for both ends (ir.from_transfers sorts each rank's list by them).
    _, dense = np.unique(np.r_[step.astype(np.float64), recv_key], return_inverse=True)
    n = len(step)
    return dense[:n].astype(np.int64), dense[n:].astype(np.int64)
