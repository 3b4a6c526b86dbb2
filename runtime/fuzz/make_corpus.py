"""Writes the seed corpus of the parser fuzz target (runtime/fuzz/corpus/).

Run from the repository root: .venv/bin/python runtime/fuzz/make_corpus.py
Seeds: small valid schedules of every baseline algorithm, some segmented or with a size
range, and a few broken ones (truncated, flipped bytes) so the fuzzer starts on both sides
of every check; and compact records (the compact loader's input).
"""
from pathlib import Path

from collsched import schedfile
from collsched.algorithms import Request, generate
from collsched.compact import for_default

OUT = Path(__file__).parent / "corpus"


def main() -> None:
    OUT.mkdir(exist_ok=True)
    cases = [("ring", 2, 1), ("ring", 3, 2), ("nex", 4, 1), ("lnbc", 3, 1), ("rd", 4, 1),
             ("bruck", 5, 1), ("spreading", 3, 3), ("ring", 1, 1)]
    for alg, p, nseg in cases:
        s = generate(alg, Request(p, nseg=nseg))
        s.bytes_min, s.bytes_max = 0, 1 << 20
        data = schedfile.encode(s)
        (OUT / f"{alg}-p{p}-s{nseg}.sched").write_bytes(data)
    good = (OUT / "ring-p3-s2.sched").read_bytes()
    (OUT / "truncated.bin").write_bytes(good[:150])
    flipped = bytearray(good)
    flipped[-3] ^= 0x40
    (OUT / "flipped-section.bin").write_bytes(bytes(flipped))
    (OUT / "header-only.bin").write_bytes(good[:128])
    # Compact records (docs/compact.md): the fuzz target sends them to the compact loader.
    for alg, p, nseg in [("ring", 4, 1), ("bruck", 5, 2), ("mpichg2", 9, 1), ("nex", 6, 1)]:
        rec = for_default(alg, p, (0, 1 << 16), nseg).encode()
        (OUT / f"compact-{alg}-p{p}-s{nseg}.bin").write_bytes(rec)


if __name__ == "__main__":
    main()
