"""Writes the seed corpus of the parser fuzz target (runtime/fuzz/corpus/).

Run from the repository root: .venv/bin/python runtime/fuzz/make_corpus.py
Seeds: small valid schedules of every baseline algorithm, some segmented or with a size
range, and a few broken ones (truncated, flipped bytes) so the fuzzer starts on both sides
of every check; and compact records (the compact loader's input).
"""
from pathlib import Path

from collsched import schedfile
from collsched.algorithms import Request, generate
from collsched.cli import main as main_cli
from collsched.compact import for_default

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
