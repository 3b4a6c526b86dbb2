"""Alltoall algorithms: the baselines of the field and Faraj's robust variants.

Pieces are (src, dst, seg): segment seg of the block rank src sends to rank dst
(docs/semantics.md, "Collectives beyond allgather"). Except for `bruck`, every block goes
straight from its source to its destination as nseg messages, one per segment, issued
back to back (nseg = 1: the whole block in one message). Segments buy more concurrent
flows per block (over long links whose single flow is capped by the TCP window) and
smaller messages (eager instead of rendezvous), at one message latency and overhead each;
the compiler's segment search decides. `bruck` sends every segment of a block in the same
message (its point is few messages). A rank's own block (r, r, *) never appears: the
runtime copies it.

Algorithms (Faraj, Patarasuk and Yuan, "A study of process arrival patterns for MPI
collective operations", ICS 2007 / IJPP 2008):

- `pair`: in step i = 1 .. Q-1 (Q the next power of two >= P) rank r exchanges with
  r xor i. Where r xor i >= P (P not a power of two) the rank idles in that step.
- `ring`: in step i = 1 .. P-1 rank r sends to r + i and receives from r - i (mod P).
  Both are *phased* as MPI's pairwise algorithms built on MPI_Sendrecv: a rank's step-i
  send is fenced (issued only once every receive of its earlier steps has settled), and
  its step-i receive is listed right after that send (posted as soon as the send is
  issued). Decision: the receive comes after the fenced send in the list, since a fence
  waits for every earlier receive: the other order would chain each rank's send to its own
  receive, a cycle around the ring (deadlock). Without the phases the in-order walk would
  issue every send at once and the algorithm would be `simple` in another order.
- `pair-barrier`, `ring-barrier`: one dissemination barrier first (ceil(log2 P) rounds;
  in round k rank r sends a zero-byte message to r + 2^k and then receives one from
  r - 2^k; every barrier send after the first is fenced: it waits for all earlier
  receives, which is what makes it a barrier; the round's send is listed before its
  receive for the same reason as above), then the phased exchange, its first operation at
  every rank fenced behind the barrier: nothing of the exchange is issued before every
  rank has entered the barrier.
- `pair-light`, `ring-light`: Faraj's light barrier: a zero-byte pairwise
  synchronisation only where two phases could contend at a receiver. The step-i message
  to d (i >= 2) is issued only once d signalled that it finished receiving its earlier
  steps: d sends a fenced zero-byte message to its step-i sender at the end of its step
  i-1, and the sender's (fenced) step-i data send comes after receiving it. Per step a
  rank's list is: receive the signal of its step-i receiver, send the step-i block
  (fenced), receive its step-i block, signal its step-(i+1) sender (fenced). In the ring
  every step of every rank has a different sender than the step before, so every step
  i >= 2 is synchronised; in pair too (r xor i differs per step), and a rank that idled in
  step i-1 signals after its last earlier receive.
- `simple`: all receives posted (from r-1, r-2, ...), then all sends issued (to r+1, r+2,
  ...), then wait: no coordination at all (Faraj's best under strong imbalance).
- `bruck`: the small-message algorithm of Bruck et al. without its local rotations (pieces
  are named, so nothing needs to move inside a rank): block (s, d) with offset
  j = (d - s) mod P hops, for every bit k of j in increasing order, by 2^k ranks forward.
  In step k = 0 .. ceil(log2 P) - 1 rank r sends to r + 2^k, in one message, every block
  it holds whose offset has bit k set (those it relays ordered by offset): one message per
  rank per step, each carrying about P/2 blocks. ceil(log2 P) messages per rank instead of
  P - 1, at the price of log2(P)/2 times the bytes.

- `arrival` (arrival-aware, req.arrivals): a rank r first serves the ranks predicted to
  have waited for it (arrived more than `lead` block times before it, strictly: the
  relation has no cycle, so neither have the fences; a block time = the block's bytes over
  the slowest port), earliest first (ties by distance r+1, r+2, ...),
  in batches of `batch`: per batch it posts the receives from the batch's ranks, then sends
  them their blocks; a batch after the first starts with a FENCE'd receive (its receives
  are posted once every earlier receive settled) and a CHAIN'ed send (docs/semantics.md:
  issued once the previous send completed). Then, as `simple`, it posts every other
  receive (from r-1, r-2, ...) and sends every other block (to r+1, r+2, ...), unflagged. A late rank thus
  exchanges with the longest-waiting ranks a few at a time, in both directions, so they
  finish one batch after the other instead of all when its last block lands (sharing its
  NIC both ways among P-1 blocks); ranks arriving together run `simple`.
  Options: lead (block times, default 5), batch (default 6).
  Decision, by the fluid model (simgrid_eager, SMPI's sharing) on tryton-48, P = 28,
  128 KiB, the lab's seeded patterns (seed 1, 4 iterations), average elapsed / the lower
  bound's avg_elapsed_s, maxDelay 5 ms | 50 ms: simple 1.076 | 1.351; kept (lead 5,
  batch 6) 1.076 | 1.098 (SMPI CM02, seeds 1-3, one iteration: 1.07-1.10 | 1.06-1.10,
  simple 1.07-1.10 | 1.31-1.37). Rejected: batch 1 (one partner at a time) 1.076 | 1.546,
  the middle ranks stall on partners busy elsewhere (it is at the bound for one late rank:
  64.1 ms against 63.4, simple 76.6); batch 3, 4, 5, 8: 1.154, 1.116, 1.096, 1.111 at
  50 ms; lead 2, batch 6: 1.564 | 1.093 (ranks arriving together fence and convoy); lead
  15, batch 4: 1.189 at 50 ms; sends only (receives all posted at once, every `batch`-th
  send to a waited rank chained): lead 5, batch 6 1.076 | 1.291: the early ranks then wait
  for their own sends into the late rank's shared inbound; every send chained in arrival
  order 5.39 | 2.55 (every rank walks the same order: convoys at one receiver after the
  other); chaining only the ranks arriving after the median, batch 6 1.82 | 1.21; the
  unflagged sends in arrival order instead of by distance: the same in the fluid model,
  the DAG model (single port) 2.14 against simple's 1.87 at 5 ms.

Options (req.options): `arrival` above; otherwise none. nseg is accepted by every
algorithm (see above).
"""
from __future__ import annotations

import numpy as np

from ...errors import InputError
from ..program import SEND, RECV, Builder, Op, Piece, Program
from .registry import CollRequest, register


def block(src: int, dst: int, nseg: int) -> tuple[Piece, ...]:
    """The nseg pieces of the block src sends to dst."""
    return tuple(Piece(src, dst, g) for g in range(nseg))


class KeyedLists:
    """Transfers whose two ends sit at chosen places of their ranks' lists.

    Builder (program.py) gives both ends of a transfer one step and lists a step's receives
    before its sends; the barriers here need a send listed before a receive of the same
    round. `add(src, dst, pieces, skey, dkey)` puts the send at key skey in src's list and
    the receive at dkey in dst's; each list is sorted by key (ties: order of add). Callers
    keep, per ordered pair, the sends' key order equal to the receives' key order, so the
    k-th send a -> b still meets the k-th receive at b from a (the verifier checks it).
    """

    def __init__(self, nranks: int):
        self.rows: list[list[tuple]] = [[] for _ in range(nranks)]
        self.n = 0

    def add(self, src: int, dst: int, pieces, skey, dkey, *, fence_send: bool = False,
            fence_recv: bool = False) -> None:
        pieces = tuple(Piece(*p) for p in pieces)
        self.rows[src].append((skey, self.n, Op(SEND, dst, pieces, fence=fence_send)))
        self.rows[dst].append((dkey, self.n, Op(RECV, src, pieces, fence=fence_recv)))
        self.n += 1

    def lists(self) -> list[list[Op]]:
        return [[op for *_k, op in sorted(row, key=lambda t: t[:2])] for row in self.rows]


def program(req: CollRequest, name: str, ops: list[list[Op]]) -> Program:
    return Program(collective="alltoall", nranks=req.nranks, nseg=req.nseg, ops=ops,
                   algorithm=name)


def pair_steps(p: int) -> list[list[tuple[int, int]]]:
    """Per step i = 1 .. Q-1 the (src, dst) transfers of the xor exchange (both directions
    of every active pair)."""
    q = 1
    while q < p:
        q *= 2
    return [[(r, r ^ i) for r in range(p) if r ^ i < p] for i in range(1, q)]


def ring_steps(p: int) -> list[list[tuple[int, int]]]:
    return [[(r, (r + i) % p) for r in range(p)] for i in range(1, p)]


STEPS = {"pair": pair_steps, "ring": ring_steps}


def exchange(req: CollRequest, steps, *, with_barrier: bool = False,
             light: bool = False) -> list[list[Op]]:
    """The phased exchange of `steps` (module docstring), optionally behind one barrier or
    with the light barrier. Keys per step i: (1, i, 0) receive the signal of the step-i
    receiver, (1, i, 1) the data send (fenced from the rank's second step on), (1, i, 2) the
    data receive, (1, i, 3) signal the step-(i+1) sender. A rank's first step (step 0, or
    later where pair idles) needs neither fence nor signal."""
    p, lists = req.nranks, KeyedLists(req.nranks)
    if with_barrier:
        barrier(lists, p)
    started = [False] * p  # the rank has sent in an earlier step
    for i, step in enumerate(steps):
        for s, d in step:
            if light and started[s]:  # d tells s it finished receiving the steps before i
                lists.add(d, s, (), (1, i - 1, 3), (1, i, 0), fence_send=True)
            for g in range(req.nseg):  # one message per segment; the first waits
                lists.add(s, d, [Piece(s, d, g)], (1, i, 1), (1, i, 2),
                          fence_send=started[s] and g == 0)
        for s, _d in step:
            started[s] = True
    ops = lists.lists()
    if with_barrier:
        nbar = 2 * barrier_rounds(p)  # barrier operations per rank
        for row in ops:
            if len(row) > nbar:  # the rank's first exchange operation waits for the barrier
                op = row[nbar]
                row[nbar] = Op(op.kind, op.peer, op.pieces, fifo=op.fifo, fence=True)
    return ops


def barrier_rounds(p: int) -> int:
    """ceil(log2 P): the dissemination barrier's rounds."""
    return (p - 1).bit_length()


def barrier(lists: KeyedLists, p: int) -> None:
    """A dissemination barrier of zero-byte messages at keys (0, round, 0|1)."""
    k = 0
    while (1 << k) < p:
        dist = 1 << k
        for r in range(p):
            lists.add(r, (r + dist) % p, (), (0, k, 0), (0, k, 1), fence_send=k > 0)
        k += 1


def bruck_builder(req: CollRequest) -> Builder:
    """Bruck without rotations (module docstring): step k moves every block whose offset
    has bit k set by 2^k ranks."""
    p, nseg = req.nranks, req.nseg
    b = Builder("alltoall", p, nseg)
    k = 0
    while (1 << k) < p:
        dist, low = 1 << k, (1 << k) - 1
        offsets = [j for j in range(1, p) if j & dist]
        for r in range(p):
            pieces = []
            for j in offsets:
                s = (r - (j & low)) % p  # the block's source: it has moved j & low so far
                pieces.extend(block(s, (s + j) % p, nseg))
            b.add(k, r, (r + dist) % p, pieces)
        k += 1
    return b


def simple_builder(req: CollRequest) -> Builder:
    p, b = req.nranks, Builder("alltoall", req.nranks, req.nseg)
    for i in range(1, p):  # one step: every rank's receives (from r-1, r-2, ...) then sends
        for r in range(p):
            for g in range(req.nseg):
                b.add(0, r, (r + i) % p, [Piece(r, (r + i) % p, g)])
    return b


@register("alltoall", "pair", "pairwise exchange: step i with rank xor i (idle steps past P)")
def build_pair(req: CollRequest) -> Program:
    return program(req, "pair", exchange(req, pair_steps(req.nranks)))


@register("alltoall", "ring", "ring exchange: step i sends to r+i, receives from r-i")
def build_ring(req: CollRequest) -> Program:
    return program(req, "ring", exchange(req, ring_steps(req.nranks)))


@register("alltoall", "pair-barrier", "pairwise exchange behind one dissemination barrier")
def build_pair_barrier(req: CollRequest) -> Program:
    return program(req, "pair-barrier", exchange(req, pair_steps(req.nranks), with_barrier=True))


@register("alltoall", "ring-barrier", "ring exchange behind one dissemination barrier")
def build_ring_barrier(req: CollRequest) -> Program:
    return program(req, "ring-barrier", exchange(req, ring_steps(req.nranks), with_barrier=True))


@register("alltoall", "pair-light", "pairwise exchange with Faraj's light barrier "
          "(the step-i message waits for its receiver's end of step i-1)")
def build_pair_light(req: CollRequest) -> Program:
    return program(req, "pair-light", exchange(req, pair_steps(req.nranks), light=True))


@register("alltoall", "ring-light", "ring exchange with Faraj's light barrier "
          "(the step-i message waits for its receiver's end of step i-1)")
def build_ring_light(req: CollRequest) -> Program:
    return program(req, "ring-light", exchange(req, ring_steps(req.nranks), light=True))


@register("alltoall", "simple", "post every receive, then every send, then wait")
def build_simple(req: CollRequest) -> Program:
    return simple_builder(req).build()


@register("alltoall", "bruck", "Bruck: ceil(log2 P) steps of multi-piece messages, "
          "blocks relayed (small blocks)")
def build_bruck(req: CollRequest) -> Program:
    return bruck_builder(req).build()


def arrival_order(req: CollRequest, r: int) -> list[int]:
    """The receivers of rank r, earliest predicted arrival first (ties, and without
    arrivals: by distance r+1, r+2, ...)."""
    p, a = req.nranks, req.arrivals
    dests = [(r + i) % p for i in range(1, p)]
    if a is None:
        return dests
    return sorted(dests, key=lambda d: (float(a[d]), (d - r) % p))


def block_time(req: CollRequest) -> float:
    """Seconds one block takes through the slowest port (1 Gbit/s without a topology)."""
    rate = 1.25e8
    if req.topology is not None:
        rate = float(min(np.min(x) for x in req.topology.port_bandwidth))
    return req.nbytes / rate if rate > 0 else 0.0


def arrival_lists(req: CollRequest) -> list[list[Op]]:
    """Each rank's list for `arrival` (module docstring): first the ranks that waited for
    it in batches (the batch's receives, then its sends; a later batch's first receive
    fenced and first send chained), then every other receive and send, unflagged."""
    p, nseg, a = req.nranks, req.nseg, req.arrivals
    lead, batch = req.options.get("lead", 5.0), req.options.get("batch", 6)
    if isinstance(lead, bool) or not isinstance(lead, (int, float)) or lead < 0:
        raise InputError("alltoall arrival", "option lead", f"expected a number >= 0, found {lead!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InputError("alltoall arrival", "option batch", f"expected an integer >= 1, found {batch!r}")
    wait = lead * block_time(req)
    lists = []
    for r in range(p):
        order = arrival_order(req, r)
        waited = [] if a is None else [d for d in order if float(a[d]) < float(a[r]) - wait]
        ops: list[Op] = []
        for k in range(0, len(waited), batch):
            group = waited[k:k + batch]
            for j, d in enumerate(group):
                ops += [Op(RECV, d, (Piece(d, r, g),), fence=k > 0 and j == 0 and g == 0) for g in range(nseg)]
            for j, d in enumerate(group):
                ops += [Op(SEND, d, (Piece(r, d, g),), chain=k > 0 and j == 0 and g == 0) for g in range(nseg)]
        done = set(waited)
        ops += [Op(RECV, (r - i) % p, (Piece((r - i) % p, r, g),)) for i in range(1, p)
                if (r - i) % p not in done for g in range(nseg)]
        ops += [Op(SEND, (r + i) % p, (Piece(r, (r + i) % p, g),)) for i in range(1, p)
                if (r + i) % p not in done for g in range(nseg)]
        lists.append(ops)
    return lists


@register("alltoall", "arrival", "exchange with the ranks that waited for it first, in arrival "
          "order and batches (fenced receives, chained sends), then post everything else",
          arrival_aware=True)
def build_arrival(req: CollRequest) -> Program:
    return program(req, "arrival", arrival_lists(req))
