"""Format 1.2 (collectives/schedfile.py): the layout of docs/schedule-format.md "Version
1.2", exact round trips, every corruption caught with one line naming the field, and
collsched.schedfile's read/write dispatching Programs and 1.2 files."""
from __future__ import annotations

import dataclasses
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import schedfile
from collsched.collectives import schedfile as coll_file
from collsched.collectives.program import (COLLECTIVES, RECV, RECV_REDUCE, REDUCING, ROOTED,
                                           SEND, Op, Piece, Program, from_op_lists)
from collsched.errors import ScheduleFileError


def small(collective="allreduce"):
    x = [(0, 0, 0)]
    lists = [[("send", 1, x, "fifo"), ("recv-reduce", 1, [(0, 0, 1)], "local-first", "fence")],
             [("recv", 0, x), ("send", 0, [(0, 0, 1)]), ("send", 2, [])],
             [("recv", 1, [])]]
    p = from_op_lists(collective, 3, 2, lists, algorithm="handmade")
    p.bytes_min, p.bytes_max, p.commutative_only = 8, 4096, True
    p.input_hash = bytes(range(32))
    return p


def test_header_and_extension_layout_are_as_documented():
    p = small("reduce")
    p.root, p.full_duplex = 2, False
    b = coll_file.encode(p)
    assert b[:8] == b"COLLSCHD"
    assert struct.unpack_from("<HHIIIII", b, 8) == (1, 2, 152, 7, 3, 2, 8)  # flags: bit 3 only
    assert struct.unpack_from("<QQ", b, 32) == (8, 4096)
    assert b[48:64] == b"handmade".ljust(16, b"\0")
    assert b[80:112] == bytes(range(32))
    assert struct.unpack_from("<Q", b, 112)[0] == p.total_ops == 6
    assert struct.unpack_from("<I", b, 124)[0] == zlib.crc32(b[:124])
    assert struct.unpack_from("<IIQII", b, 128) == (2, 0, p.total_pieces, zlib.crc32(b[128:144]), 0)
    index_end = 152 + 16 * 3
    assert struct.unpack_from("<I", b, 120)[0] == zlib.crc32(b[152:index_end])
    offs = [struct.unpack_from("<QII", b, 152 + 16 * r) for r in range(3)]
    assert offs[0][0] == index_end
    # rank 0: a FIFO send of one piece, a fenced local-first recv-reduce of one
    assert struct.unpack_from("<IBBHI", b, index_end) == (1, SEND, 1, 0, 1)
    assert struct.unpack_from("<III", b, index_end + 12) == (0, 0, 0)
    assert struct.unpack_from("<IBBHI", b, index_end + 24) == (1, RECV_REDUCE, 2 | 4, 0, 1)
    assert offs[1][0] == index_end + 48 and offs[1][1] == 3
    assert offs[1][2] == zlib.crc32(b[offs[1][0]:offs[2][0]])
    assert offs[2][0] + 12 == len(b)  # rank 2: one zero-piece receive, then the end


def _programs():
    """Random programs within the format's ranges (not necessarily valid schedules: the
    codec stores what it is given)."""
    @st.composite
    def build(draw):
        coll = draw(st.sampled_from(sorted(COLLECTIVES)))
        P = draw(st.integers(1, 6))
        nseg = draw(st.integers(1, 5))
        root = draw(st.integers(0, P - 1)) if coll in ROOTED else 0
        kinds = [SEND, RECV] + ([RECV_REDUCE] if coll in REDUCING else [])
        ops = []
        for r in range(P):
            lst = []
            for _ in range(draw(st.integers(0, 4)) if P > 1 else 0):
                kind = draw(st.sampled_from(kinds))
                peer = draw(st.sampled_from([q for q in range(P) if q != r]))
                n = draw(st.integers(0, 3))
                if coll == "alltoall":
                    pieces = [Piece(draw(st.integers(0, P - 1)), draw(st.integers(0, P - 1)),
                                    draw(st.integers(0, nseg - 1))) for _ in range(n)]
                else:
                    pieces = [Piece(0, 0, draw(st.integers(0, nseg - 1))) for _ in range(n)]
                lst.append(Op(kind, peer, tuple(pieces), fifo=kind == SEND and draw(st.booleans()),
                              fence=draw(st.booleans()),
                              local_first=kind == RECV_REDUCE and draw(st.booleans()),
                              chain=kind == SEND and draw(st.booleans())))
            ops.append(lst)
        lo = draw(st.integers(0, 1 << 40))
        return Program(coll, P, nseg, ops, root=root, algorithm=draw(st.text("abcxyz-0123", max_size=16)),
                       bytes_min=lo, bytes_max=lo + draw(st.integers(0, 1 << 20)),
                       full_duplex=draw(st.booleans()), commutative_only=draw(st.booleans()),
                       input_hash=draw(st.binary(min_size=32, max_size=32)), compiler_version="9.9.9")
    return build()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_programs())
def test_round_trip_is_exact(prog):
    data = coll_file.encode(prog)
    back = coll_file.decode(data, "x.sched")
    assert back.same_ops(prog)
    for f in ("algorithm", "bytes_min", "bytes_max", "full_duplex", "commutative_only",
              "input_hash", "compiler_version", "root"):
        assert getattr(back, f) == getattr(prog, f), f
    assert back.format_version == "1.2" and back.file_bytes == len(data)
    assert coll_file.encode(back) == data
    assert schedfile.decode(data, "x.sched").same_ops(prog)  # the dispatch


def test_every_single_byte_corruption_is_caught():
    good = coll_file.encode(small())
    for i in range(len(good)):
        for bit in (0x01, 0x80):
            b = bytearray(good)
            b[i] ^= bit
            with pytest.raises(ScheduleFileError):
                schedfile.decode(bytes(b), "c.sched")


def test_every_truncation_and_extension_is_caught():
    good = coll_file.encode(small())
    for n in range(len(good)):
        with pytest.raises(ScheduleFileError):
            coll_file.decode(good[:n], "t.sched")
    with pytest.raises(ScheduleFileError, match="section.2.: section checksum"):
        coll_file.decode(good + b"\0" * 12, "t.sched")
    longer = _patch(good + b"\0" * 12, 0, "<8s", b"COLLSCHD")  # the last section's CRC made right
    with pytest.raises(ScheduleFileError, match="section.2.: expected its 1 ops to end .* .trailing bytes."):
        coll_file.decode(longer, "t.sched")


def _patch(data: bytes, offset: int, fmt: str, *values, section_rank: int | None = None) -> bytes:
    """Write values at offset and make every checksum right again, so that the field
    itself is what the reader refuses."""
    b = bytearray(data)
    struct.pack_into(fmt, b, offset, *values)
    nranks = struct.unpack_from("<I", b, 20)[0]
    index_end = 152 + 16 * nranks
    offs = [struct.unpack_from("<Q", b, 152 + 16 * r)[0] for r in range(nranks)] + [len(b)]
    for r in range(nranks):
        if index_end <= offs[r] <= offs[r + 1] <= len(b):
            struct.pack_into("<I", b, 152 + 16 * r + 12, zlib.crc32(b[offs[r]:offs[r + 1]]))
    struct.pack_into("<I", b, 144, zlib.crc32(b[128:144]))
    struct.pack_into("<I", b, 120, zlib.crc32(b[152:index_end]))
    struct.pack_into("<I", b, 124, zlib.crc32(b[:124]))
    return bytes(b)


SEC0 = 152 + 16 * 3  # rank 0's section in small()
SEC1 = SEC0 + 48


@pytest.mark.parametrize("offset,fmt,values,field,needle", [
    (0, "<8s", (b"COLLSCHX",), "magic", "not a collsched schedule"),
    (8, "<H", (2,), "version_major", "expected 1"),
    (10, "<H", (1,), "version_minor", "expected 2 or more"),
    (12, "<I", (128,), "header_bytes", "expected 152"),
    (20, "<I", (0,), "nranks", "expected 1.."),
    (24, "<I", (0,), "nseg", "expected 1..65535"),
    (24, "<I", (65536,), "nseg", "expected 1..65535"),
    (28, "<I", (0x10,), "flags", "bits 0 (full duplex) and 3"),
    (32, "<Q", (1 << 20,), "bytes_min", "bytes_min <= bytes_max"),
    (112, "<Q", (7,), "total_ops", "index sums to 6"),
    (128, "<I", (1,), "root", "expected 0 for allreduce"),
    (132, "<I", (1,), "reserved", "expected 0"),
    (148, "<I", (1,), "reserved", "expected 0"),
    (136, "<Q", (99,), "total_pieces", "the sections hold"),
    (152, "<Q", (SEC0 + 12,), "index[0].section_offset", "right after the index"),
    (152 + 16, "<Q", (SEC0 - 12,), "index[1].section_offset", "in rank order"),
    (SEC0, "<I", (3,), "rank 0 op 0 peer", "a rank below 3 other than 0"),
    (SEC0, "<I", (0,), "rank 0 op 0 peer", "other than 0"),
    (SEC0 + 4, "<B", (3,), "rank 0 op 0 kind", "0 (send), 1 (recv) or 2"),
    (SEC0 + 5, "<B", (16,), "rank 0 op 0 flags", "bits 0 (FIFO), 1 (FENCE), 2 (LOCAL_FIRST), 3 (CHAIN)"),
    (SEC0 + 24 + 5, "<B", (8,), "rank 0 op 1 flags", "CHAIN bit on sends only"),
    (SEC1 + 5, "<B", (8,), "rank 1 op 0 flags", "CHAIN bit on sends only"),
    (SEC0 + 24 + 5, "<B", (1,), "rank 0 op 1 flags", "FIFO bit on sends only"),
    (SEC0 + 5, "<B", (4,), "rank 0 op 0 flags", "LOCAL_FIRST bit on recv-reduce only"),
    (SEC0 + 6, "<H", (1,), "rank 0 op 0 reserved", "expected 0"),
    (SEC0 + 8, "<I", (1 << 25,), "rank 0 op 0 npieces", "at most"),
    (SEC0 + 8, "<I", (4,), "rank 0 op 0 npieces", "within the section"),
    (SEC0 + 12 + 8, "<I", (2,), "rank 0 op 0 piece 0 seg", "below nseg = 2"),
    (SEC0 + 12, "<I", (1,), "rank 0 op 0 piece 0", "src = dst = 0"),
    (SEC1 + 8, "<I", (0,), "section[1]", "end at byte"),
])
def test_hostile_fields_are_named(offset, fmt, values, field, needle):
    good = coll_file.encode(small())
    bad = _patch(good, offset, fmt, *values)
    with pytest.raises(ScheduleFileError) as e:
        schedfile.decode(bad, "hostile.sched")
    line = e.value.line()
    assert "\n" not in line and line.startswith("hostile.sched: ")
    assert field in line and needle in line, line


def test_chain_is_bit_3_on_sends():
    p = small()
    p.ops[0][0] = Op(SEND, 1, (Piece(0, 0, 0),), fifo=True, chain=True)
    p.ops[1][2] = Op(SEND, 2, (), chain=True)
    b = coll_file.encode(p)
    assert struct.unpack_from("<IBBHI", b, SEC0) == (1, SEND, 1 | 8, 0, 1)
    assert struct.unpack_from("<IBBHI", b, SEC1 + 12 + 12 + 12 + 12) == (2, SEND, 8, 0, 0)
    back = coll_file.decode(b, "chain.sched")
    assert back.same_ops(p) and back.ops[0][0].chain and not back.ops[0][1].chain


def test_nops_beyond_the_section():
    good = coll_file.encode(small())
    bad = _patch(_patch(good, 112, "<Q", 7), 152 + 16 + 8, "<I", 4)  # rank 1: 4 ops, not 3
    with pytest.raises(ScheduleFileError, match="section.1.: truncated: op 3 of 4 does not fit"):
        coll_file.decode(bad, "n.sched")
    bad = _patch(_patch(good, 112, "<Q", 5), 152 + 16 + 8, "<I", 2)  # rank 1: 2 ops, bytes left
    with pytest.raises(ScheduleFileError, match="section.1.: expected its 2 ops to end at byte"):
        coll_file.decode(bad, "n.sched")


def test_collective_specific_fields():
    p = small("bcast")
    p.ops[0][1] = Op(RECV_REDUCE, 1, (Piece(0, 0, 1),))
    with pytest.raises(ScheduleFileError, match="rank 0 op 1 kind: expected 0 .send., 1 .recv., found 2"):
        coll_file.decode(coll_file.encode(p), "b.sched")
    a = from_op_lists("alltoall", 2, 1, [[("send", 1, [(0, 1, 0)])], [("recv", 0, [(0, 1, 0)])]])
    good = coll_file.encode(a)
    bad = _patch(good, 152 + 32 + 16, "<I", 2)  # rank 0's piece dst = 2
    with pytest.raises(ScheduleFileError, match="rank 0 op 0 piece 0: expected src and dst below nranks = 2"):
        coll_file.decode(bad, "a.sched")
    r = small("reduce")
    r.root = 2
    bad = _patch(coll_file.encode(r), 128, "<I", 3)
    with pytest.raises(ScheduleFileError, match="root: expected a rank below nranks = 3, found 3"):
        coll_file.decode(bad, "r.sched")


def test_encode_refuses_what_the_format_cannot_hold():
    p = small()
    with pytest.raises(ValueError, match="16 ASCII bytes"):
        coll_file.encode(dataclasses.replace(p, algorithm="a-very-long-algorithm-name"))
    with pytest.raises(ValueError, match="collective"):
        coll_file.encode(dataclasses.replace(p, collective="gather"))


def test_read_and_write_dispatch(tmp_path):
    p = small()
    out = tmp_path / "x.sched"
    out.write_bytes(b"old")
    n = schedfile.write(p, out)
    assert n == out.stat().st_size and [q.name for q in tmp_path.iterdir()] == ["x.sched"]
    back = schedfile.read(out)
    assert isinstance(back, Program) and back.same_ops(p) and back.format_version == "1.2"
    assert schedfile.encode(p) == out.read_bytes()


def test_a_1_2_collective_in_a_1_0_header_is_refused():
    """A 1.0 file whose collective byte says 5..8 goes to the 1.2 reader, which refuses
    its header (and the other way round a 1.2 file never reads as 1.0)."""
    from collsched.algorithms import Request, generate

    old = schedfile.encode(generate("ring", Request(3)))
    bad = bytearray(old)
    struct.pack_into("<I", bad, 16, 6)
    struct.pack_into("<I", bad, 124, zlib.crc32(bad[:124]))
    with pytest.raises(ScheduleFileError, match="version_minor|header_bytes"):
        schedfile.decode(bytes(bad), "o.sched")


def test_a_program_too_large_for_memory_is_refused_before_decoding(monkeypatch):
    from collsched.model import budget

    data = coll_file.encode(small())
    monkeypatch.setattr(budget, "available", lambda: 1000)
    with pytest.raises(ScheduleFileError, match="total_pieces: expected a program that fits in memory"):
        coll_file.decode(data, "big.sched")


def test_golden_bytes():
    """The format is frozen: this program's file, byte for byte (a change here is a format
    change: the C reader, docs/schedule-format.md and every written file go with it)."""
    import hashlib

    p = small()
    p.compiler_version = "golden"
    data = coll_file.encode(p)
    assert len(data) == 320
    assert hashlib.sha256(data).hexdigest() == "f517204e7629ff8511f8ddb7a819c295a40f6a81eed1a0c01f5b3ca992c19b12"
