"""Writes the seed corpus of the format 1.2 fuzz target (runtime/fuzz/corpus-coll/, make fuzz-coll).

Run from the repository root: .venv/bin/python runtime/fuzz/make_coll_corpus.py
Seeds: small files (under the target's 4096-byte max_len) of every registered algorithm of
alltoall, bcast, reduce and allreduce that serves a request without a topology, at a few
rank and segment counts, one commutative-only program, and a few broken files (truncated,
a flipped byte, a piece out of range) so that the fuzzer starts on both sides of the
checks. The fuzz build skips the CRCs, so edited seeds reach the checks behind them.
"""
from pathlib import Path

import numpy as np

from collsched.collectives import schedfile
from collsched.collectives.algorithms import CollRequest, generate, names
from collsched.collectives.algorithms.registry import REGISTRY
from collsched.collectives.program import COLLECTIVES, ROOTED, Builder

OUT = Path(__file__).parent / "corpus-coll"
MAX_LEN = 4096


def seeds():
    for coll in ("alltoall", "bcast", "reduce", "allreduce"):
        for name in names(coll):
            if REGISTRY[(coll, name)].needs_topology:
                continue
            for p, nseg in ((3, 2), (5, 1)):
                root = p - 1 if coll in ROOTED else 0
                req = CollRequest(coll, p, nbytes=1 << 12, nseg=nseg, root=root,
                                  arrivals=np.linspace(0.0, 1e-3, p))
                try:
                    prog = generate(name, req)
                except Exception:  # noqa: BLE001 - a request this algorithm refuses: no seed
                    continue
                prog.bytes_min, prog.bytes_max = 0, 1 << 20
                prog.algorithm = prog.algorithm[:16]  # the header holds 16 bytes (scatter-allgather has 17)
                data = schedfile.encode(prog)
                if len(data) <= MAX_LEN:
                    yield f"{coll}-{name}-p{p}-s{nseg}.sched", data
    # One rank alone (no ops at all) and a hand-built relay through rank 0.
    b = Builder("alltoall", 3, 1, algorithm="relay")
    b.add(0, 1, 0, [(1, 2, 0), (1, 0, 0)])
    b.add(0, 2, 0, [(2, 1, 0), (2, 0, 0)])
    b.add(1, 0, 1, [(0, 1, 0), (2, 1, 0)], fifo=True)
    b.add(1, 0, 2, [(0, 2, 0), (1, 2, 0)], fence_send=True)
    yield "alltoall-relay-p3.sched", schedfile.encode(b.build())
    yield "bcast-p1.sched", schedfile.encode(Builder("bcast", 1, 1).build())


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for old in OUT.iterdir():
        old.unlink()
    good = dict(seeds())
    for name, data in good.items():
        (OUT / name).write_bytes(data)
    base = good["alltoall-relay-p3.sched"]
    (OUT / "truncated.bin").write_bytes(base[:200])
    flipped = bytearray(base)
    flipped[-5] ^= 0x40
    (OUT / "flipped-piece.bin").write_bytes(bytes(flipped))
    (OUT / "header-only.bin").write_bytes(base[:152])
    # Programs for the check alone ('P', then the bytes fuzz_coll.c's raw_program reads).
    for prog in (good_ring(), Builder("bcast", 1, 1).build()):
        (OUT / f"raw-{prog.collective}-p{prog.nranks}.bin").write_bytes(raw(prog))
    print(f"make_coll_corpus: {len(good) + 5} seeds in {OUT}")


def good_ring():
    """Reduce-scatter then allgather on a ring of 3 (segment s complete at rank s)."""
    b = Builder("allreduce", 3, 3, algorithm="ring")
    for t in range(2):
        for r in range(3):
            b.add(t, r, (r + 1) % 3, [(0, 0, (r - t - 1) % 3)], reduce=True)
    for t in range(2):
        for r in range(3):
            b.add(2 + t, r, (r + 1) % 3, [(0, 0, (r - t) % 3)])
    prog = b.build()
    prog.commutative_only = True
    return prog


def raw(prog) -> bytes:
    """fuzz_coll.c's raw form: 'P', collective - 5, nranks - 1, nseg, root, flags, then per
    rank nops and per op peer, kind, flags, npieces, (src, dst, seg) per piece."""
    flags = (1 if prog.full_duplex else 0) | (8 if prog.commutative_only else 0)
    out = bytearray(b"P") + bytes([COLLECTIVES[prog.collective] - 5, prog.nranks - 1, prog.nseg,
                                   prog.root, flags])
    for lst in prog.ops:
        out.append(len(lst))
        for op in lst:
            out += bytes([op.peer, op.kind, op.fifo | op.fence << 1 | op.local_first << 2, len(op.pieces)])
            for p in op.pieces:
                out += bytes(p)
    return bytes(out)


if __name__ == "__main__":
    main()
