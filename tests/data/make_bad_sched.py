"""Regenerates the malformed schedule files in tests/data/bad/sched/ (run from the repo root).

Each file breaks one thing a reader must catch; checksums are recomputed where the point is
a bad field rather than corruption. The expected error of each is in expected.yaml there.
"""
import struct
import sys
import zlib
from pathlib import Path

sys.path.insert(0, "compiler")
from collsched import schedfile  # noqa: E402
from collsched.algorithms import Request, generate  # noqa: E402

OUT = Path("tests/data/bad/sched")


def good(p=4):
    s = generate("ring", Request(p))
    s.bytes_min = s.bytes_max = 1024
    return s


def fix_header_crc(b: bytearray) -> bytearray:
    struct.pack_into("<I", b, 124, zlib.crc32(bytes(b[:124])))
    return b


def header_patch(fmt, off, value):
    b = bytearray(schedfile.encode(good()))
    struct.pack_into(fmt, b, off, value)
    return fix_header_crc(b)


def op_patch(field, value, rank=1, op=0):
    s = good()
    i = int(s.offsets[rank]) + op
    getattr(s, field)[i] = value
    return schedfile.encode(s)


def flip(offset):
    b = bytearray(schedfile.encode(good()))
    b[offset] ^= 0x40
    return b


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    g = schedfile.encode(good())
    idx_end = 128 + 16 * 4
    files = {
        "empty.sched": b"",
        "text.sched": b"ranks: 4\nalgorithm: ring\n" + b"#" * 200,
        "short-header.sched": g[:100],
        "version-2.sched": header_patch("<H", 8, 2),
        "header-bytes.sched": header_patch("<I", 12, 64),
        "header-crc.sched": flip(50),
        "collective-9.sched": header_patch("<I", 16, 9),
        "zero-ranks.sched": header_patch("<I", 20, 0),
        "zero-segments.sched": header_patch("<I", 24, 0),
        "unknown-flags.sched": header_patch("<I", 28, 0x80),
        "bytes-range.sched": header_patch("<Q", 32, 4096),
        "truncated-index.sched": g[:140],
        "index-crc.sched": flip(128 + 3),
        "truncated-section.sched": g[:-5],
        "trailing-bytes.sched": g + b"\0\0\0\0",
        "section-crc.sched": flip(idx_end + 13),
        "peer-out-of-range.sched": op_patch("peer", 7),
        "peer-is-self.sched": op_patch("peer", 1),
        "origin-out-of-range.sched": op_patch("origin", 99),
        "bad-kind.sched": op_patch("kind", 5),
        "bad-flags.sched": op_patch("phase", 5),
        "fifo-on-recv.sched": op_patch("fifo", 1),
        "segment-out-of-range.sched": op_patch("segment", 2),
    }
    for name, data in files.items():
        (OUT / name).write_bytes(bytes(data))
    # Well-formed but wrong: the verifier (not the reader) must reject it, exit status 1.
    s = good()
    keep = [i for i in range(s.total_ops) if i != int(s.offsets[2])]  # drop rank 2's first op
    for col in ("kind", "peer", "origin", "segment", "phase", "fifo"):
        setattr(s, col, getattr(s, col)[keep])
    s.offsets = s.offsets.copy()
    s.offsets[3:] -= 1
    (OUT / "invalid-dropped-recv.sched").write_bytes(schedfile.encode(s))
    print(f"wrote {len(files) + 1} files to {OUT}")


if __name__ == "__main__":
    main()
