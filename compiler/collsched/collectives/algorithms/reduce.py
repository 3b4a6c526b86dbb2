"""Reduce: binomial, pipelined chain, and Rabenseifner's reduce-scatter + gather (rsag).

Every builder here keeps MPI's canonical order (ranks 0..P-1): each receive-and-reduce
combines two contiguous rank intervals, incoming first when it precedes the rank's own
interval, own first (local_first) when it follows (docs/semantics.md, "Collectives beyond
allgather"). So none is commutative-only, whatever the root.

- binomial: MPICH's binomial tree, on rank intervals. With root r the ranks [r, P) reduce
  to r by a binomial tree (rank r + v sends to r + v - 2^j in step j, 2^j the lowest set
  bit of v; the receiver's incoming interval follows its own: local_first), the ranks
  [0, r) reduce the same way to rank 0, and rank 0 sends [0, r) to r (incoming first).
  Depth ceil(log2 P) for root 0, at most one more step otherwise (the price of keeping the
  order without rotating the ranks). One message per tree edge carrying every segment.
- chain: two pipelined chains toward the root, P-1 -> P-2 -> ... -> r+1 -> r (each hop
  combines own-first) and 0 -> 1 -> ... -> r-1 -> r (incoming-first); segment s leaves
  the chain's far end in step s, so the hops pipeline: (max(r, P-1-r) + nseg - 1) message
  times of n/nseg bytes. For large vectors.
- chain-rotated: one pipelined chain root+1 -> root+2 -> ... (wrapping) -> root: the root
  takes n bytes in (chain takes 2n when the root is in the middle: one stream from each
  side), at the price of P-1 hops and of MPI's order (the chain wraps from rank P-1 to 0:
  commutative-only unless the root is rank 0 or P-1). For large vectors with a
  commutative operation.
- rsag (Rabenseifner's reduce): MPICH's reduce_scatter_gather. P not a power of two: with
  pof2 the largest power of two <= P and rem = P - pof2, the even ranks below 2 rem first
  send their vector to the next odd rank (incoming first) and sit out; the pof2 remaining
  ranks (new rank r/2 below 2 rem, r - rem above, still in rank order) reduce-scatter by
  recursive halving (distance 1, 2, 4, ...: the lower partner keeps the lower half), then
  a binomial gather reverses the halving toward the root's new rank; an even root that sat
  out gets the result from its odd neighbour. The program cuts the vector into pof2 chunks
  of `nseg` segments each (Program.nseg = pof2 * nseg).

Options: none (req.options is ignored).

Also the shared pieces of the reduction families: `segs`, `XBuilder` (a Builder that can
also express a swap where both ends send before they receive), `binomial_up` and
`binomial_down` over an ordered list of members, and the MPICH fold (`Fold`).
"""
from __future__ import annotations

from ..program import MAX_SEGMENTS, Builder, Piece
from .registry import CollRequest, register


def segs(lo: int, hi: int) -> tuple[Piece, ...]:
    """Segments lo .. hi-1 of the vector as pieces."""
    return tuple(Piece(0, 0, s) for s in range(lo, hi))


class XBuilder(Builder):
    """A Builder with `swap`: two ranks that send each other the same pieces and both
    combine (recursive doubling, the exchange between site leaders), each send listed
    before the step's receives (Builder.add's send_first)."""

    def swap(self, step: int, a: int, b: int, pieces, *, reduce: bool = True) -> None:
        """a and b send each other the same pieces (send first) and combine, in rank order
        (the higher rank's value comes second)."""
        self.add(step, a, b, pieces, reduce=reduce, local_first=b < a, send_first=True)
        self.add(step, b, a, pieces, reduce=reduce, local_first=a < b, send_first=True)


def binomial_up(b: Builder, members, step0: int, pieces) -> int:
    """Reduce the members' values to members[0] by a binomial tree over their positions:
    position v sends in step step0 + j (2^j the lowest set bit of v) to position v - 2^j,
    which then holds positions [v - 2^j, v) and combines own-first (local_first). With the
    members in ascending rank order and contiguous, the order is MPI's. Returns the steps
    used."""
    n, mask, j = len(members), 1, 0
    while mask < n:
        for v in range(mask, n, 2 * mask):
            b.add(step0 + j, members[v], members[v - mask], pieces, reduce=True, local_first=True)
        mask <<= 1
        j += 1
    return j


def binomial_down(b: Builder, members, step0: int, pieces) -> int:
    """Broadcast members[0]'s value to the others by a binomial tree (MPICH's: largest
    distance first, so subtrees that forward get the data first). Returns the steps used."""
    n = len(members)
    top = 1
    while top < n:
        top <<= 1
    mask, j = top >> 1, 0
    while mask >= 1:
        for v in range(0, n, 2 * mask):
            if v + mask < n:
                b.add(step0 + j, members[v], members[v + mask], pieces)
        mask >>= 1
        j += 1
    return j


class Fold:
    """MPICH's handling of a rank count that is not a power of two: pof2 the largest power
    of two <= P, rem = P - pof2. Even ranks below 2 rem hand their vector to the next odd
    rank and sit out; the others get new ranks 0..pof2-1 in rank order (each new rank
    stands for the contiguous ranks it absorbed)."""

    def __init__(self, p: int):
        self.p = p
        self.pof2 = 1 << (p.bit_length() - 1)
        self.rem = p - self.pof2

    def new(self, r: int) -> int | None:
        if r < 2 * self.rem:
            return r // 2 if r % 2 else None
        return r - self.rem

    def real(self, nr: int) -> int:
        return 2 * nr + 1 if nr < self.rem else nr + self.rem

    @property
    def steps(self) -> int:
        return self.pof2.bit_length() - 1

    def fold_in(self, b: Builder, step: int, pieces) -> None:
        for r in range(0, 2 * self.rem, 2):
            b.add(step, r, r + 1, pieces, reduce=True)  # [r] precedes [r + 1]: incoming first

    def fold_out(self, b: Builder, step: int, pieces) -> None:
        for r in range(0, 2 * self.rem, 2):
            b.add(step, r + 1, r, pieces)


def halving(b: Builder, fold: Fold, step0: int, ns: int) -> list[list[tuple[int, int]]]:
    """Recursive-halving reduce-scatter among the fold's new ranks over pof2 chunks of ns
    segments (distance 1, 2, 4, ...; the lower partner keeps the lower half, the incoming
    half combined in rank order). Returns windows[k][nr] = (lo, hi) chunk window new rank
    nr holds after step k (windows[0] = the whole vector, before any step)."""
    q = fold.pof2
    win = [(0, q)] * q
    windows = [list(win)]
    for j in range(fold.steps):
        mask = 1 << j
        nxt = list(win)
        for nr in range(q):
            lo, hi = win[nr]
            mid = (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if nr < nr ^ mask else ((mid, hi), (lo, mid))
            nxt[nr] = keep
            # nr sends the half its partner keeps; the partner combines (rank order).
            partner = nr ^ mask
            b.add(step0 + j, fold.real(nr), fold.real(partner), segs(give[0] * ns, give[1] * ns),
                  reduce=True, local_first=partner < nr)
        win = nxt
        windows.append(list(win))
    return windows


def chunk_nseg(req: CollRequest, chunks: int) -> str | None:
    """Refusal when chunks x nseg segments exceed the format's limit."""
    if req.nseg < 1:
        return f"expected at least 1 segment, got {req.nseg}"
    if chunks * req.nseg > MAX_SEGMENTS:
        return (f"expected {chunks} chunks x nseg <= {MAX_SEGMENTS} segments, "
                f"got {chunks} x {req.nseg}")
    return None


def _plain_nseg(req: CollRequest) -> str | None:
    return chunk_nseg(req, 1)


@register("reduce", "binomial", "binomial tree on rank intervals (MPI's order kept for any "
          "root), one message per edge", _plain_nseg)
def binomial(req: CollRequest):
    p, r = req.nranks, req.root
    b = Builder("reduce", p, req.nseg, root=r, algorithm="binomial")
    pieces = segs(0, req.nseg)
    binomial_up(b, list(range(r, p)), 0, pieces)
    if r > 0:
        depth = binomial_up(b, list(range(0, r)), 0, pieces)
        b.add(depth, 0, r, pieces, reduce=True)  # [0, r) precedes r's interval
    return b.build()


@register("reduce", "chain", "two pipelined chains toward the root (from rank P-1 down and "
          "from rank 0 up), one message per segment", _plain_nseg)
def chain(req: CollRequest):
    p, r, ns = req.nranks, req.root, req.nseg
    b = Builder("reduce", p, ns, root=r, algorithm="chain")
    upper = list(range(p - 1, r, -1))  # far end first; each hop combines own-first
    lower = list(range(0, r))  # far end first; each hop combines incoming-first
    for s in range(ns):
        for d, x in enumerate(upper):
            b.add(d + s, x, upper[d + 1] if d + 1 < len(upper) else r, segs(s, s + 1),
                  reduce=True, local_first=True)
        for d, x in enumerate(lower):
            b.add(d + s, x, lower[d + 1] if d + 1 < len(lower) else r, segs(s, s + 1), reduce=True)
    return b.build()


@register("reduce", "chain-rotated", "one pipelined chain root+1 -> root+2 -> ... -> root "
          "(ranks rotated to the root): n bytes into the root, not 2n; commutative-only "
          "unless the root is rank 0 or P-1", _plain_nseg)
def chain_rotated(req: CollRequest):
    p, r, ns = req.nranks, req.root, req.nseg
    b = Builder("reduce", p, ns, root=r, algorithm="chain-rotated")
    path = [(r + 1 + i) % p for i in range(p)]  # ends at the root
    for s in range(ns):
        for d in range(p - 1):
            x, y = path[d], path[d + 1]
            # The partial [path[0] .. x] meets y: in rank order only while no wrap.
            b.add(d + s, x, y, segs(s, s + 1), reduce=True, local_first=y < x)
    prog = b.build()
    prog.commutative_only = p > 2 and r not in (0, p - 1)
    return prog


def _rsag_check(req: CollRequest) -> str | None:
    return chunk_nseg(req, Fold(req.nranks).pof2)


@register("reduce", "rsag", "Rabenseifner: recursive-halving reduce-scatter, binomial gather "
          "to the root (non-powers of two folded as MPICH); nseg segments per chunk", _rsag_check)
def rsag(req: CollRequest):
    p, r, ns = req.nranks, req.root, req.nseg
    fold = Fold(p)
    b = Builder("reduce", p, fold.pof2 * ns, root=r, algorithm="rsag")
    everything = segs(0, fold.pof2 * ns)
    fold.fold_in(b, 0, everything)
    windows = halving(b, fold, 1, ns)
    t = fold.new(r)
    if t is None:
        t = fold.new(r + 1)
    step = 1 + fold.steps
    for j in reversed(range(fold.steps)):
        mask = 1 << j
        high = ~((mask << 1) - 1)
        for nr in range(fold.pof2):
            if (nr & high) != (t & high) or (nr & mask) == (t & mask):
                continue  # not in this step, or the receiver of its pair
            lo, hi = windows[j + 1][nr]
            b.add(step, fold.real(nr), fold.real(nr ^ mask), segs(lo * ns, hi * ns))
        step += 1
    if fold.new(r) is None:
        b.add(step, fold.real(t), r, everything)
    return b.build()
