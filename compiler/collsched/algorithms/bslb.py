"""Background Sorted Linear synchronized tree with Broadcast (BSLB), Proficz 2021, Listing 3.

Two parts, rooted at rank 0:

* **BSLS gather.** The root takes the other ranks' blocks one after another in their
  predicted arrival order (`Request.arrivals`; ties by rank). If the root is predicted to
  arrive after someone else, it receives in the background, before it arrives itself.
* **Broadcast** of the gathered blocks from the root down a binomial tree, the one of
  MPICH's MPI_Bcast for short messages (for long ones MPICH scatters, then allgathers):
  the parent of rank r is r with its lowest set bit cleared, and a rank serves its
  children largest subtree first (rank + 2^k for decreasing k). A rank forwards to a
  child every block but the child's own. The root's port thus sends every block once per
  child, ceil(log2 P) times: with everybody on time bslb costs about what lnbc does.

How the paper's mechanisms map onto a data-only schedule (docs/semantics.md):

* **The root's signal and the short first segment.** In BSLS a sender waits for a signal
  from the root, answers with a short segment ("the rest is ready"), then sends the rest;
  the root signals in arrival order, so early ranks go first and the root's port takes one
  sender at a time. This is MPI's rendezvous protocol written out by hand: for a message
  at or above the eager limit (64 KiB on our topologies) the sender announces it (the
  short notice), and the data moves only once the receiver has posted the matching
  receive (the signal). The schedule therefore carries no signal messages: the root's
  receives are listed in predicted arrival order, and that order is what the cost model
  serves the root's port in. The runtime posts all of a rank's leading receives at once
  (nonblocking), so a late sender never holds up an early one; the price is that senders
  that are ready at the same moment share the root's port instead of taking turns.
  Gating each receive behind the previous one would need the root's walk to stop between
  them, which only a send can do, and a send there would stall the gather behind the
  broadcast's slowest child (a FIFO send waits for its peer).
* **Segments.** The IR cuts every block into `nseg` equal segments, so "one short segment
  and the rest" cannot be expressed; it is not needed either, since the short segment is
  only the notice above. nseg = 1 (the default) moves whole blocks; nseg > 1 cuts each
  block into equal pieces that are sent in order and travel down the broadcast tree
  independently (finer pipelining, more messages).
* **Gather, then broadcast.** Listing 3 calls MPI_Bcast once the gather is complete. Here
  a piece moves down the tree as soon as its holder has it (rule 2 of the semantics), in
  the order a binomial bcast sends one message (all of it to the largest subtree, then to
  the next child), blocks in the root's receive order: the same transfers over the same
  tree, pipelined piece by piece, and the broadcast to the first subtree overlaps the
  gather of late blocks. (Sending each block to all children before the next one was
  slower under the cost model on tryton-48: every block then waits for every late child.)

Phases: the root's gather receives lead its list; they are background operations when the
root is predicted to arrive later than another rank (the runtime's background engine runs
exactly such a leading run of receives), otherwise, like everything else, foreground.
Every other rank starts with the send of its own block, so it has nothing to do early.
Unlike BDR, BSLB needs no tau: only the order of the arrivals matters.
"""
from __future__ import annotations

import numpy as np

from ..ir import BACKGROUND, FOREGROUND, from_transfers
from .registry import Request, register

ROOT = 0


def _arrivals(req: Request) -> np.ndarray:
    return np.zeros(req.nranks) if req.arrivals is None else np.asarray(req.arrivals, float)


def arrival_order(req: Request) -> list[int]:
    """Non-root ranks in predicted arrival order (ties by rank): the root's receive order."""
    a = _arrivals(req)
    return sorted(range(1, req.nranks), key=lambda r: (a[r], r))


def binomial_children(rank: int, nranks: int) -> list[int]:
    """Children of `rank` in the binomial tree rooted at 0, largest subtree first."""
    if rank == ROOT:
        mask = 1
        while mask < nranks:
            mask <<= 1
        mask >>= 1
    else:
        mask = (rank & -rank) >> 1  # below the lowest set bit
    children = []
    while mask:
        if rank + mask < nranks:
            children.append(rank + mask)
        mask >>= 1
    return children


def root_is_late(req: Request) -> bool:
    a = _arrivals(req)
    return bool(req.nranks > 1 and a[ROOT] > a.min())


def _refuse(req: Request):
    if req.arrivals is not None:
        a = np.asarray(req.arrivals, float)
        if a.shape != (req.nranks,):
            return f"expected one predicted arrival per rank ({req.nranks}), got {a.size}"
        if not np.all(np.isfinite(a)):
            return "expected finite predicted arrival times"
    return None


# Serial execution (docs/semantics.md): the root takes one sender at a time, in arrival
# order - the BSLS signal's effect - and each rank sends one message at a time.
@register("bslb", "Background Sorted Linear synchronized gather (arrival order) + binomial broadcast",
          _refuse, serial=True)
def build(req: Request):
    p, k = req.nranks, req.nseg
    order = arrival_order(req)
    step, src, dst, origin, segment = [], [], [], [], []

    def move(at_step, s, d, o, seg):
        step.append(at_step), src.append(s), dst.append(d), origin.append(o), segment.append(seg)

    # Gather: step i is the i-th sender in arrival order, its segments in order.
    for i, r in enumerate(order):
        for seg in range(k):
            move(i, r, ROOT, r, seg)
    # Broadcast, in the order MPI's binomial bcast sends one message: everything to the
    # largest subtree, then to the next child; blocks in the root's receive order, each
    # forwarded as soon as it is there. A rank at depth d receives in steps
    # [base + d * span, base + (d + 1) * span) and forwards in the next range, so its list
    # holds all its receives (posted at once), then its forwards.
    blocks = [ROOT] + order
    base, span = len(order), len(binomial_children(ROOT, p)) * p * k
    for r in range(p):
        first = base + (bin(r).count("1") + 1) * span  # r's children sit one level below r
        for ci, c in enumerate(binomial_children(r, p)):
            for i, o in enumerate(blocks):
                for seg in range(k):
                    if c != o:
                        move(first + (ci * p + i) * k + seg, r, c, o, seg)
    step = np.array(step, np.int64)
    dst = np.array(dst, np.int64)
    late = root_is_late(req)
    gather_recv = (step < base) & (dst == ROOT)
    recv_phase = np.where(gather_recv & late, BACKGROUND, FOREGROUND).astype(np.uint8)
    return from_transfers(p, k, step, np.array(src, np.int64), dst, np.array(origin, np.int64),
                          np.array(segment, np.int32), np.full(len(step), FOREGROUND, np.uint8),
                          algorithm="bslb", half_duplex_order=not req.full_duplex,
                          recv_phase=recv_phase)
