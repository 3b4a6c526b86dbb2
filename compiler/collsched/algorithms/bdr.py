"""Background Disseminated Ring (BDR), Proficz 2021, Listing 2.

From the predicted arrival pattern a and the time tau to move one segment:

* pre-steps (lines 22-33): process q has psNo_q = floor((max a - a_q) / tau) pre-steps. In
  pre-step s, every process r that has arrived (psNo_r >= maxPs - s), taken from the
  slowest to the fastest, sends its own segment to rc = r - 1 - prevSent_r (the next one
  down that it has not served yet), unless rc already receives something in that step;
* then the ring (lines 34-45): in ring step j, process i sends segment i - j to i + 1,
  except where that segment already reached i + 1 in the pre-steps.

Empty steps are dropped (a step is only an ordering key here). A process's receives in
pre-steps before its first send are background operations (lines 47-51: the background
thread runs them before the process arrives); everything from its first send on is
foreground. Where the paper leaves it open: processes with equal arrival times are taken
in rank order, and tau defaults to the cost model's median time to move one piece.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..ir import BACKGROUND, FOREGROUND, from_transfers
from .registry import Request, register

MAX_PRE_STEPS = 1_000_000  # runtime/src/internal.h: CS_BDR_MAX_PRESTEPS


def default_tau(req: Request) -> float:
    """The cost model's time to move one block (bdr has one segment per rank)."""
    from ..model.simulate import piece_time  # the simulator imports the algorithms' IR, not them

    return piece_time(req.topology, -(-req.nbytes // max(req.nseg, 1)))


def _refuse(req: Request):
    if req.nseg != 1:
        return "bdr moves whole blocks (one segment per rank); use --segments 1"
    return None


@register("bdr", "Background Disseminated Ring: pre-steps from the arrival pattern, then the ring",
          _refuse, serial=True)  # run as the paper runs it: blocking sends, one receive at a time
def build(req: Request):
    p = req.nranks
    a = np.zeros(p) if req.arrivals is None else np.asarray(req.arrivals, float)
    tau = req.tau if req.tau is not None else default_tau(req)
    if tau > 0:
        ps_no = np.floor((a.max() - a) / tau + 1e-9).astype(np.int64)
    else:
        ps_no = np.zeros(p, np.int64)
    max_ps = int(ps_no.max()) if p else 0
    if max_ps > MAX_PRE_STEPS:  # the runtime's online generator refuses the same patterns
        raise InputError("--tau", f"{tau:g}", f"expected a tau giving at most {MAX_PRE_STEPS} "
                         f"pre-steps for this arrival pattern, got {max_ps}")
    order = sorted(range(p), key=lambda r: (-a[r], r))  # slowest first; ties by rank
    prev_sent = [0] * p
    step, src, dst, origin = [], [], [], []
    # Pre-steps: early processes disseminate their own segment downwards.
    for s in range(max_ps):
        receiving = set()
        for r in order:
            rc = (r - 1 - prev_sent[r]) % p
            if ps_no[r] >= max_ps - s and prev_sent[r] < p - 1 and rc not in receiving:
                step.append(s), src.append(r), dst.append(rc), origin.append(r)
                receiving.add(rc)
                prev_sent[r] += 1
    # The ring, minus what the pre-steps delivered: for i, for j (the order of the
    # paper's loops), in int32 arrays (P^2 entries: no Python loop, no int64 copies).
    i = np.repeat(np.arange(p, dtype=np.int32), p)
    j = np.tile(np.arange(p, dtype=np.int32), p)
    seg = (i - j) % p
    keep = np.asarray(prev_sent, np.int64)[seg] + j < p - 1
    i, j, seg = i[keep], j[keep], seg[keep]
    del keep
    step = np.concatenate([np.array(step, np.int64), max_ps + j.astype(np.int64)])
    src = np.concatenate([np.array(src, np.int32), i])
    dst = np.concatenate([np.array(dst, np.int32), (i + 1) % p])
    origin = np.concatenate([np.array(origin, np.int32), seg])
    del i, j, seg
    # Background: a process's receives in pre-steps before its first send (Listing 2, l. 48).
    first_send = np.full(p, np.iinfo(np.int64).max)
    np.minimum.at(first_send, src, step)
    recv_phase = np.where((step < max_ps) & (step < first_send[dst]), BACKGROUND, FOREGROUND)
    return from_transfers(p, 1, step, src, dst, origin, None,
                          np.full(len(step), FOREGROUND, np.uint8), algorithm="bdr",
                          half_duplex_order=not req.full_duplex, recv_phase=recv_phase)
