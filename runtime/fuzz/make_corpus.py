"""Writes the seed corpus of the parser fuzz target (runtime/fuzz/corpus/).

Run from the repository root: .venv/bin/python runtime/fuzz/make_corpus.py
Seeds: small valid schedules of every baseline algorithm, some segmented or with a size
range, two with multi-piece messages (one serial, FIFO marks on message heads), and a few broken ones (truncated, flipped bytes) so the fuzzer starts on both sides
of every check; and compact records (the compact loader's input).
"""
from pathlib import Path

import numpy as np

from collsched import schedfile
from collsched.algorithms import Request, generate
from collsched.cli import main as main_cli
from collsched.compact import for_default
from collsched.ir import from_transfers

# Two sites of 4 and 2 hosts for the hier seed (docs/inputs.md).
SITES_YAML = """name: fuzz-sites
duplex: full
sites:
  - {name: A, hosts: 4, lan: {latency: 5us, bandwidth: 10Gbit/s}}
  - {name: B, hosts: 2, lan: {latency: 5us, bandwidth: 10Gbit/s}}
wan:
  - {between: [A, B], latency: 2ms, bandwidth: 1Gbit/s}
"""

OUT = Path(__file__).parent / "corpus"


def _messages(alg: str, p: int, nseg: int):
    """bruck or ring with one message per (step, src, dst)."""
    steps, src, dst, origin = [], [], [], []
    k = 0
    while alg == "bruck" and (1 << k) < p:
        for r in range(p):
            for j in range(min(1 << k, p - (1 << k))):
                steps.append(k), src.append(r), dst.append((r - (1 << k)) % p), origin.append((r + j) % p)
        k += 1
    for k in range(p - 1 if alg == "ring" else 0):
        for r in range(p):
            steps.append(k), src.append(r), dst.append((r + 1) % p), origin.append((r - k) % p)
    steps, src, dst, origin = (np.repeat(np.array(a), nseg) for a in (steps, src, dst, origin))
    key = np.stack([steps, src, dst], 1)
    join = np.r_[0, np.all(key[1:] == key[:-1], axis=1)].astype(np.uint8)
    return from_transfers(p, nseg, steps, src, dst, origin, np.tile(np.arange(nseg), len(steps) // nseg),
                          algorithm=alg, join=join)


def main() -> None:
    OUT.mkdir(exist_ok=True)
    cases = [("ring", 2, 1), ("ring", 3, 2), ("nex", 4, 1), ("lnbc", 3, 1), ("rd", 4, 1),
             ("bruck", 5, 1), ("spreading", 3, 3), ("ring", 1, 1)]
    for alg, p, nseg in cases:
        s = generate(alg, Request(p, nseg=nseg))
        s.bytes_min, s.bytes_max = 0, 1 << 20
        data = schedfile.encode(s)
        (OUT / f"{alg}-p{p}-s{nseg}.sched").write_bytes(data)
    # Multi-piece messages (op flag bit 2, minor version 3): every block a rank sends a
    # peer in one step in one message; a serial one with FIFO marks on message heads.
    for alg, p, nseg, serial in [("bruck", 5, 2, False), ("ring", 4, 3, True)]:
        s = _messages(alg, p, nseg)
        s.bytes_min, s.bytes_max, s.serial = 0, 1 << 20, serial
        if serial:
            s.fifo = ((s.kind == 0) & (s.join == 0)).astype(np.uint8)
        (OUT / f"{alg}-msg-p{p}-s{nseg}.sched").write_bytes(schedfile.encode(s))
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
    # Version-2 records: hier over sites, bdr and bslb from an arrival pattern.
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        topo = Path(tmp) / "sites.yaml"
        topo.write_text(SITES_YAML)
        pap = Path(tmp) / "late.yaml"
        pap.write_text("arrivals: [0.0, 0.002, 0.0, 0.0, 0.001, 0.0]\n")
        for alg, extra in [("hier", ["--topology", str(topo)]), ("bdr", ["--pap", str(pap)]),
                           ("bslb", ["--pap", str(pap)])]:
            out = OUT / f"compact-{alg}-p6.bin"
            if main_cli(["compile", "--algorithm", alg, "--ranks", "6", "--bytes", "0:65536",
                         "--form", "compact", "-o", str(out), *extra]) != 0:
                raise SystemExit(f"make_corpus: compiling the {alg} seed failed")


if __name__ == "__main__":
    main()
