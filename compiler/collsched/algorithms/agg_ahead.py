"""The look-ahead list scheduler of `agg` (docs/agg.md, candidate "look-ahead"): serial
ports, multi-piece messages, pieces as bitmasks; full duplex.

Each receive port, when it frees (or when something new may be had), picks the holder
that delivers useful bytes at the best rate from now: a holder s can start at
f = max(now, when its send port frees) with what it holds by f (its own pieces once it
has arrived, and what its planned receives have delivered by then), and a message of c
of the pieces the receiver still needs lasts d(c); the rate is bytes(c) / (f - now + d(c)).
So a receiver may wait for a busy holder that has much to give rather than take one
piece from an idle one. The message is committed at once: the holder's send port is
reserved from f on (no gap), the receiver's from now. Messages carry at most
max(1, f / grow) pieces, rarest first (Settings.grow, as agg_plan).
"""
from __future__ import annotations

import heapq

import numpy as np

from .agg_plan import Message, Settings, _bits, _choose, _Durations


def plan_ahead(topo, p: int, nseg: int, item_bytes: np.ndarray, arrivals: np.ndarray,
               settings: Settings, max_wait: float = float("inf")) -> list[Message]:
    """Messages of one allgather (full duplex), in the order they were committed."""
    k = nseg
    n = p * k
    durs = _Durations(topo, item_bytes)
    ib = durs.item_bytes
    a = [float(x) for x in arrivals]
    own = [((1 << k) - 1) << (r * k) for r in range(p)]
    want = [((1 << n) - 1) & ~own[r] for r in range(p)]
    holders = [1] * n
    delivered = [0] * p  # per rank: what its planned receives delivered by now
    pending = [[] for _ in range(p)]  # per rank: (end, mask) of later ends, in end order
    send_until = [0.0] * p
    cap = settings.cap if settings.cap > 0 else n
    grow = settings.grow
    # Times at which something new may be had: arrivals and message ends.
    changes = sorted(set(a))
    ready = [(0.0, -want[r].bit_count(), r) for r in range(p)]  # (time, -need, r)
    heapq.heapify(ready)
    out: list[Message] = []
    dur_of = durs.of
    others = [[s for s in range(p) if s != r] for r in range(p)]
    while ready:
        t, _, r = heapq.heappop(ready)
        w = want[r]
        if not w:
            continue
        best = None
        for s in others[r]:
            f = send_until[s] if send_until[s] > t else t
            if f - t > max_wait:
                continue
            pl = pending[s]
            while pl and pl[0][0] <= t:  # times only grow: delivered for good
                delivered[s] |= pl.pop(0)[1]
            h = delivered[s] | own[s] if a[s] <= f else delivered[s]
            for end, mask in pl:
                if end <= f:
                    h |= mask
            u = h & w
            if not u:
                continue
            c = u.bit_count()
            cf = c if c <= cap else cap
            if grow > 0:
                lim = int(f / grow)
                cf = min(cf, lim if lim > 1 else 1)
            nb = cf * ib[0] if k == 1 else sum(ib[:cf])  # close enough for the choice
            rate = nb / (f - t + dur_of(nb)[s][r])
            if best is None or rate > best[0]:
                best = (rate, s, f, u, cf)
        if best is None:
            nxt = _next_change(changes, t)
            if nxt is None:
                raise RuntimeError("agg planner: stalled with pieces left")
            heapq.heappush(ready, (nxt, -w.bit_count(), r))
            continue
        _, s, f, u, cf = best
        mask = _choose(u, cf, holders, a, k, settings.rarest)
        items = _bits(mask)
        nb = sum(ib[i % k] for i in items)
        end = f + durs.of(nb)[s][r]
        out.append(Message(f, end, s, r, items))
        want[r] &= ~mask
        for i in items:
            holders[i] += 1
        pending[r].append((end, mask))  # r's receives are serial: ends increase
        send_until[s] = end
        heapq.heappush(ready, (end, -want[r].bit_count(), r))
        _insert(changes, end)
    return out


def _next_change(changes: list, t: float):
    import bisect

    i = bisect.bisect_right(changes, t)
    return changes[i] if i < len(changes) else None


def _insert(changes: list, x: float) -> None:
    import bisect

    i = bisect.bisect_left(changes, x)
    if i == len(changes) or changes[i] != x:
        changes.insert(i, x)
