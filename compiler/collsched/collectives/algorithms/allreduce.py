"""Allreduce: the segmented pipelined ring, recursive doubling and Rabenseifner.

- ring: the segmented pipelined ring of Iakymchuk et al. (docs/collectives.md): the vector
  is cut into P chunks of `nseg` segments (Program.nseg = P * nseg). Reduce-scatter: in
  step k (0..P-2) rank i sends chunk (i - k - 1) mod P to rank i + 1, which combines it
  (chunk c starts at rank c + 1 and ends fully reduced at rank c); allgather: in step
  P - 1 + k rank i sends chunk (i - k) mod P on to rank i + 1. Every segment is its own
  message, and nothing separates the two phases: a rank forwards a segment as soon as it
  has it (the walk's dataflow), so segments pipeline across hops and across the phases,
  and each rank sends exactly 2 (P-1) chunks, 2 (P-1)/P n bytes: the bandwidth bound.
  Commutative-only for P > 2: a chunk's path around the ring wraps from rank P-1 to rank
  0, and only the chunks that start at rank 0 or 1 can grow as one rank interval (a ring
  hop can only extend an interval at the end the ring reaches; after the wrap the chunk
  holds two intervals, which one accumulator cannot keep apart).
- rd: recursive doubling (MPICH): P not a power of two is folded first (the even ranks
  below 2 rem give their vector to the next odd rank, reduce.Fold) and unfolded last (the
  odd rank returns the result); in step j new rank r and r XOR 2^j swap their whole
  vectors and both combine (send first: each sends what it held before the swap) in rank
  order. log2 pof2 (+2) message times of n bytes: for small vectors. MPI's order.
- rabenseifner: fold, recursive-halving reduce-scatter (distance 1, 2, 4, ...; the lower
  partner keeps the lower half), recursive-doubling allgather of the reduced chunks (the
  halving reversed), unfold. Program.nseg = pof2 * nseg (nseg segments per chunk). About
  2 n bytes per rank in 2 log2 pof2 (+2) messages: medium and large vectors when the
  ring's P - 1 latencies are too many. MPI's order.

Options: none (req.options is ignored).
"""
from __future__ import annotations

from ..program import Builder
from .reduce import Fold, XBuilder, chunk_nseg, halving, segs
from .registry import CollRequest, register


def _ring_check(req: CollRequest) -> str | None:
    return chunk_nseg(req, req.nranks)


@register("allreduce", "ring", "segmented pipelined ring (Iakymchuk et al.): reduce-scatter "
          "then allgather, P chunks x nseg segments, no synchronisation between the phases; "
          "commutative-only (P > 2)", _ring_check)
def ring(req: CollRequest):
    p, ns = req.nranks, req.nseg
    b = Builder("allreduce", p, p * ns, algorithm="ring")
    for k in range(p - 1):
        for i in range(p):
            c = (i - k - 1) % p
            nxt = (i + 1) % p
            # Chunk 0 goes 1, 2, .., P-1 then 0: rank 0 appends it after its own (the one
            # wrap that stays an interval); every other hop appends the incoming first.
            lf = c == 0 and nxt == 0
            for s in range(ns):
                b.add(k, i, nxt, segs(c * ns + s, c * ns + s + 1), reduce=True, local_first=lf)
    for k in range(p - 1):
        for i in range(p):
            c = (i - k) % p
            for s in range(ns):
                b.add(p - 1 + k, i, (i + 1) % p, segs(c * ns + s, c * ns + s + 1))
    prog = b.build()
    prog.commutative_only = p > 2
    return prog


def _plain_check(req: CollRequest) -> str | None:
    return chunk_nseg(req, 1)


@register("allreduce", "rd", "recursive doubling: whole-vector swaps at distance 1, 2, 4, ..; "
          "non-powers of two folded in first and out last (MPICH)", _plain_check)
def rd(req: CollRequest):
    p, ns = req.nranks, req.nseg
    fold = Fold(p)
    b = XBuilder("allreduce", p, ns, algorithm="rd")
    everything = segs(0, ns)
    fold.fold_in(b, 0, everything)
    for j in range(fold.steps):
        mask = 1 << j
        for nr in range(fold.pof2):
            if nr < nr ^ mask:
                b.swap(1 + j, fold.real(nr), fold.real(nr ^ mask), everything)
    fold.fold_out(b, 1 + fold.steps, everything)
    return b.build()


def _rab_check(req: CollRequest) -> str | None:
    return chunk_nseg(req, Fold(req.nranks).pof2)


@register("allreduce", "rabenseifner", "Rabenseifner: recursive-halving reduce-scatter, "
          "recursive-doubling allgather (non-powers of two folded as MPICH); nseg segments "
          "per chunk", _rab_check)
def rabenseifner(req: CollRequest):
    p, ns = req.nranks, req.nseg
    fold = Fold(p)
    b = Builder("allreduce", p, fold.pof2 * ns, algorithm="rabenseifner")
    everything = segs(0, fold.pof2 * ns)
    fold.fold_in(b, 0, everything)
    windows = halving(b, fold, 1, ns)
    step = 1 + fold.steps
    for j in reversed(range(fold.steps)):
        mask = 1 << j
        for nr in range(fold.pof2):
            lo, hi = windows[j + 1][nr]
            b.add(step, fold.real(nr), fold.real(nr ^ mask), segs(lo * ns, hi * ns))
        step += 1
    fold.fold_out(b, step, everything)
    return b.build()
