"""The event-driven list scheduler behind `agg` (docs/agg.md): serial ports, multi-piece
messages, pieces as bitmasks.

Time runs from event to event (a message ends, a rank arrives). At each event every free
receive port is matched with a free send port that holds pieces the receiver still needs
(neither delivered nor in flight to it), and the pair's message carries up to `cap` of
them, rarest first. A port is held for the whole message (serial execution: one send
message and one receive message at a time per rank, each until it has arrived). A rank
receives and relays before it arrives (the PAT engine's background part); its own pieces
leave only once it has arrived.

The plan's times are the cost model's (serial timing, docs/semantics.md): a message of
`bytes` from s to r lasts L(s, r) * factor + bytes / b(s, r) (Topology.transfer_time).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Settings:
    """Knobs of the list scheduler (docs/agg.md compares them)."""

    cap: int = 0  # most pieces per message (0: no cap)
    # Rarest pieces first in a message (else the pieces of the latest origins first).
    rarest: bool = True
    # Pick the pair with the most useful pieces first (else the neediest receiver first).
    biggest_first: bool = True
    # Paced release (idealised experiment, not a runtime mode): a receive port may take
    # the next message one latency before the previous one ends (latency hidden).
    # "both": a send port and a receive port both free one latency before the message
    # ends; "recv" / "send": only that one; "": neither (serial execution).
    paced: str = ""
    # Messages grow with time: at time t at most max(1, t / grow) items (0: off). Early,
    # few pieces exist and small messages spread them faster; later, large ones amortise
    # the latency.
    grow: float = 0.0


@dataclass
class Message:
    start: float
    end: float
    src: int
    dst: int
    items: list = field(default_factory=list)


class _Durations:
    """Message durations by byte count, cached (few distinct sizes)."""

    def __init__(self, topo, item_bytes: np.ndarray):
        self.topo, self.item_bytes = topo, [int(b) for b in item_bytes]
        self.cache: dict[int, list] = {}
        self.lat = np.asarray(topo.latency, np.float64).tolist()

    def of(self, nbytes: int) -> list:
        m = self.cache.get(nbytes)
        if m is None:
            m = self.topo.transfer_time(int(nbytes)).tolist()
            self.cache[nbytes] = m
        return m


def plan(topo, p: int, nseg: int, item_bytes: np.ndarray, arrivals: np.ndarray,
         settings: Settings, full_duplex: bool = True) -> list[Message]:
    """Messages of one allgather in planned start order (see the module docstring)."""
    k = nseg
    n = p * k
    durs = _Durations(topo, item_bytes)
    a = [float(x) for x in arrivals]
    full = (1 << n) - 1
    own = [((1 << k) - 1) << (r * k) for r in range(p)]
    held = [0] * p  # delivered (other origins) at the current time
    avail = [0] * p  # what r can send now: held, plus its own once it arrived
    want = [full & ~own[r] for r in range(p)]  # lacking, not in flight to r
    holders = [0] * n  # holders + in-flight copies, per item (rarity)
    for r in range(p):
        for i in range(r * k, r * k + k):
            holders[i] = 1
    # Full duplex: a rank relays before it arrives; half duplex: it sends once arrived.
    send_from = [0.0 if full_duplex else a[s] for s in range(p)]
    busy_send = [False] * p
    busy_recv = [False] * p
    events: list = [(a[r], 0, r, -1, 0) for r in range(p)]  # (time, kind, r, s, mask)
    heapq.heapify(events)
    out: list[Message] = []
    cap = settings.cap if settings.cap > 0 else n
    remaining = sum(bin(w).count("1") for w in want)
    while remaining:
        if not events:
            raise RuntimeError("agg planner: stalled with pieces left")
        t = events[0][0]
        while events and events[0][0] <= t:
            _, kind, r, s, mask = heapq.heappop(events)
            if kind == 0:  # arrival
                avail[r] |= own[r]
                continue
            if kind == 1:  # message ends: r holds mask
                held[r] |= mask
                avail[r] |= mask
            if not full_duplex:  # one port per rank: both ends free (never paced)
                busy_send[s] = busy_recv[r] = busy_recv[s] = busy_send[r] = False
                continue
            pace = settings.paced
            if (kind == 2) == (pace in ("both", "send")):  # paced: one latency earlier
                busy_send[s] = False
            if (kind == 2) == (pace in ("both", "recv")):
                busy_recv[r] = False
        recv = [r for r in range(p) if not busy_recv[r] and want[r]]
        send = [s for s in range(p) if not busy_send[s] and avail[s] and send_from[s] <= t]
        if not recv or not send:
            continue
        cap_t = cap if settings.grow <= 0 else min(cap, max(1, int(t / settings.grow)))
        for s, r, mask in _match(recv, send, avail, want, holders, a, settings, cap_t, n, k, full_duplex):
            items = _bits(mask)
            nbytes = sum(durs.item_bytes[i % k] for i in items)
            d = durs.of(nbytes)[s][r]
            end = t + d
            out.append(Message(t, end, s, r, items))
            want[r] &= ~mask
            remaining -= len(items)
            for i in items:
                holders[i] += 1
            busy_send[s] = busy_recv[r] = True
            if not full_duplex:
                busy_recv[s] = busy_send[r] = True
            heapq.heappush(events, (end, 1, r, s, mask))
            if settings.paced and full_duplex:
                heapq.heappush(events, (end - durs.lat[s][r], 2, r, s, 0))
    return out


def _match(recv, send, avail, want, holders, a, settings, cap, n, k, full_duplex):
    """Greedy matching of free receivers and free senders: [(s, r, mask)]."""
    cand = []
    for r in recv:
        w = want[r]
        for s in send:
            if s == r:
                continue
            u = avail[s] & w
            if u:
                c = u.bit_count()
                need = w.bit_count()
                key = (min(c, cap), need) if settings.biggest_first else (need, min(c, cap))
                cand.append((key, -a[r], -s, s, r, u))
    if not cand:
        return []
    cand.sort(reverse=True)
    used_s, used_r, out = set(), set(), []
    for _, _, _, s, r, u in cand:
        if s in used_s or r in used_r:
            continue
        if not full_duplex and (s in used_r or r in used_s):
            continue
        used_s.add(s)
        used_r.add(r)
        out.append((s, r, _choose(u, cap, holders, a, k, settings.rarest)))
    return out


def _choose(u: int, cap: int, holders, a, k: int, rarest: bool) -> int:
    """Up to `cap` items of mask u: the rarest (then the latest origin's), as a mask."""
    if u.bit_count() <= cap:
        return u
    items = _bits(u)
    if rarest:
        items.sort(key=lambda i: (holders[i], -a[i // k], i))
    else:
        items.sort(key=lambda i: (-a[i // k], i))
    mask = 0
    for i in items[:cap]:
        mask |= 1 << i
    return mask


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out
