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

Options (req.options): none; nseg is accepted by every algorithm (see above).
"""
from __future__ import annotations

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
