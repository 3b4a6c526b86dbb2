"""Multi-piece messages in .sched files (docs/schedule-format.md, "Multi-piece messages"):
exact round trips at minor version 3, and every broken join rule one ScheduleFileError line
naming the rank, the op and the field."""
from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from collsched import schedfile
from collsched.algorithms import Request, generate
from collsched.cli import main
from collsched.errors import ScheduleFileError
from collsched.verify import verify

from test_messages_verify import grouped

HEADER, INDEX, OP = 128, 16, 12


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["ring", "bruck", "spreading"]), p=st.integers(2, 12),
       nseg=st.integers(1, 4), pick=st.lists(st.booleans(), max_size=30),
       lo=st.integers(0, 1 << 20), serial=st.booleans())
def test_round_trip_is_exact(name, p, nseg, pick, lo, serial):
    _, s = grouped(name, p, nseg, pick or None)
    s.bytes_min, s.bytes_max, s.serial = lo, 2 * lo, serial
    s.fifo[(s.kind == 0) & (s.join == 0)] = 1  # FIFO marks on every send message's head
    data = schedfile.encode(s)
    back = schedfile.decode(data)
    assert back.same_ops(s) and back.serial == serial
    minor = struct.unpack_from("<H", data, 10)[0]
    assert minor == (3 if s.has_messages else 0)
    assert back.format_version == f"1.{minor}"
    assert schedfile.encode(back) == data
    assert np.array_equal(back.message_head(), s.message_head())


def test_file_without_messages_stays_1_0():
    s = generate("bruck", Request(6, nseg=2))
    assert struct.unpack_from("<H", schedfile.encode(s), 10)[0] == 0


def test_write_read_and_show(tmp_path, capsys):
    _, s = grouped("bruck", 5, 2)
    path = tmp_path / "m.sched"
    schedfile.write(s, path)
    back = schedfile.read(path)
    assert back.same_ops(s) and back.format_version == "1.3" and verify(back) == []
    assert main(["show", str(path), "--rank", "1"]) == 0
    out = capsys.readouterr().out
    joined = int(s.join.sum())
    assert f"messages    {s.total_ops - joined} for {s.total_ops} ops ({joined} ops joined" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("  ")]
    lo, hi = int(s.offsets[1]), int(s.offsets[2])
    assert len(lines) == hi - lo
    head = s.message_head()
    for i, ln in enumerate(lines):  # a joined op names its message's first op
        want = f"+msg@{int(head[lo + i]) - lo}" if s.join[lo + i] else None
        assert (want is not None and ln.endswith(want)) or (want is None and "+msg" not in ln), ln


def patched(data: bytes, rank: int, op: int, field: str, value: int) -> bytes:
    """The file with one op field changed and every checksum made right again (so that the
    op check, not a CRC, is what refuses it)."""
    b = bytearray(data)
    nranks = struct.unpack_from("<I", b, 20)[0]
    entry = HEADER + INDEX * rank
    sec_off, nops = struct.unpack_from("<QI", b, entry)
    at = sec_off + OP * op
    fmt, off = {"peer": ("<I", 0), "segment": ("<H", 8), "kind": ("<B", 10), "flags": ("<B", 11)}[field]
    struct.pack_into(fmt, b, at + off, value)
    struct.pack_into("<I", b, entry + 12, zlib.crc32(bytes(b[sec_off:sec_off + OP * nops])))
    struct.pack_into("<I", b, 120, zlib.crc32(bytes(b[HEADER:HEADER + INDEX * nranks])))
    struct.pack_into("<I", b, 124, zlib.crc32(bytes(b[:124])))
    return bytes(b)


def three_ranks():
    """Every rank sends its block (two segments, one message) to the others: ops 1, 3, 5
    and 7 of each rank are joined."""
    from collsched.ir import from_op_lists
    j = ("fg", 0, 1)
    lists = [[("send", 1, 0, 0), ("send", 1, 0, 1, *j), ("recv", 1, 1, 0), ("recv", 1, 1, 1, *j),
              ("send", 2, 0, 0), ("send", 2, 0, 1, *j), ("recv", 2, 2, 0), ("recv", 2, 2, 1, *j)],
             [("recv", 0, 0, 0), ("recv", 0, 0, 1, *j), ("send", 0, 1, 0), ("send", 0, 1, 1, *j),
              ("send", 2, 1, 0), ("send", 2, 1, 1, *j), ("recv", 2, 2, 0), ("recv", 2, 2, 1, *j)],
             [("recv", 0, 0, 0), ("recv", 0, 0, 1, *j), ("send", 0, 2, 0), ("send", 0, 2, 1, *j),
              ("recv", 1, 1, 0), ("recv", 1, 1, 1, *j), ("send", 1, 2, 0), ("send", 1, 2, 1, *j)]]
    s = from_op_lists(3, 2, lists)
    assert verify(s) == []
    return s


JOIN, FIFO, BG = 4, 2, 1


@pytest.mark.parametrize("rank, op, field, value, expected", [
    (1, 0, "flags", JOIN, "no join bit on a rank's first op"),
    (0, 2, "flags", JOIN, "the join bit only on an op with the kind, peer and phase of the op before it"),
    (0, 1, "peer", 2, "the join bit only on an op with the kind, peer and phase of the op before it"),
    (0, 5, "flags", JOIN | BG, "the join bit only on an op with the kind, peer and phase of the op before it"),
    (2, 3, "flags", JOIN | FIFO, "the FIFO bit on a message's first op only"),
    (2, 7, "flags", JOIN | 8, "bits 0 (background), 1 (FIFO wait) and 2 (join) only"),
    (1, 5, "flags", 0x80, "bits 0 (background), 1 (FIFO wait) and 2 (join) only"),
])
def test_broken_join_is_one_named_line(tmp_path, rank, op, field, value, expected):
    data = schedfile.encode(three_ranks())
    assert struct.unpack_from("<H", data, 10)[0] == 3
    path = tmp_path / "broken.sched"
    path.write_bytes(patched(data, rank, op, field, value))
    with pytest.raises(ScheduleFileError) as e:
        schedfile.read(path)
    line = e.value.line()
    assert "\n" not in line and str(path) in line
    assert f"rank {rank} op {op} flags" in line  # a changed peer breaks the join rule too
    assert expected in line
    assert main(["show", str(path)]) == 2  # the CLI: one line, input error


def test_piece_twice_in_a_message_is_one_named_line(tmp_path):
    """Rank 2's send message to 0 carries (2,0) twice (the matching receive too, so only
    the reader's rule, not a CRC or the join rules, is what refuses it)."""
    data = patched(patched(schedfile.encode(three_ranks()), 2, 3, "segment", 0), 0, 7, "segment", 0)
    path = tmp_path / "twice.sched"
    path.write_bytes(data)
    with pytest.raises(ScheduleFileError) as e:
        schedfile.read(path)
    line = e.value.line()
    assert "\n" not in line and str(path) in line
    assert "rank 0 op 7 segment" in line and "op 6 carries (2,0) too" in line


def test_joined_ops_need_minor_version_3():
    data = bytearray(schedfile.encode(three_ranks()))
    struct.pack_into("<H", data, 10, 2)
    struct.pack_into("<I", data, 124, zlib.crc32(bytes(data[:124])))
    with pytest.raises(ScheduleFileError) as e:
        schedfile.decode(bytes(data), "old.sched")
    assert "old.sched: version_minor: expected at least 3" in e.value.line()


def test_patch_helper_keeps_a_valid_file_valid():
    """patched() recomputes every checksum: re-writing an op's own flags changes nothing."""
    data = schedfile.encode(three_ranks())
    assert patched(data, 0, 1, "flags", JOIN) == data
    assert schedfile.decode(patched(data, 0, 3, "flags", JOIN)).same_ops(three_ranks())
