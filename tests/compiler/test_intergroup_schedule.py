"""The intergroup schedule IR (intergroup/schedule.py) and its file form (schedfile.py,
version 1.1; docs/schedule-format.md#intergroup-schedules): from_plan orders each rank's
operations as the plan's steps say, files round-trip exactly, and every field the decoder
checks gives one line naming it."""
import struct
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import schedfile
from collsched.errors import ScheduleFileError
from collsched.intergroup import PLANS, Groups
from collsched.intergroup.schedule import InterSchedule, collective_for, from_plan, remote_total
from collsched.ir import RECV, SEND

HYP = settings(max_examples=40, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def groups(draw):
    p, q = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    size = st.one_of(st.just(0), st.integers(0, 100), st.integers(0, 1 << 23))
    if draw(st.booleans()):
        return Groups.equal(p, q, draw(size), draw(size))
    return Groups(tuple(draw(st.lists(size, min_size=p, max_size=p))),
                  tuple(draw(st.lists(size, min_size=q, max_size=q))))


@HYP
@given(groups(), st.sampled_from(sorted(PLANS)))
def test_from_plan_orders_ops_by_step_receives_first(g, name):
    plan = PLANS[name](g)
    s = from_plan(plan)
    assert s.nranks == g.p + g.q and s.total_ops == 2 * len(plan.transfers)
    assert s.collective == collective_for(g) and s.algorithm == name
    for r in range(s.nranks):
        lo, hi = int(s.offsets[r]), int(s.offsets[r + 1])
        keys = [(int(s.step[i]), int(s.kind[i] == SEND)) for i in range(lo, hi)]
        assert keys == sorted(keys)
    # every transfer appears once as a send at its source and once as a recv at its dest
    sends = sorted((int(r), int(p), int(gr), int(a), int(b)) for r, p, gr, a, b, k in zip(
        s.rank_of_op, s.peer, s.group, s.lo, s.hi, s.kind) if k == SEND)
    recvs = sorted((int(p), int(r), int(gr), int(a), int(b)) for r, p, gr, a, b, k in zip(
        s.rank_of_op, s.peer, s.group, s.lo, s.hi, s.kind) if k == RECV)
    expected = sorted((t.src, t.dst, t.group, t.lo, t.hi) for t in plan.transfers)
    assert sends == recvs == expected


def test_ir_accessors():
    g = Groups((3, 5), (4,))
    s = from_plan(PLANS["kang"](g))
    assert (s.p, s.q, s.bytes_min, s.bytes_max) == (2, 1, 3, 5)
    assert s.collective == "inter-allgatherv"
    assert remote_total(s, 0) == 4 and remote_total(s, 2) == 8
    assert all(k in ("send", "recv") and gr in ("A", "B") for k, _, gr, _, _ in s.ops_of(2))
    assert np.array_equal(s.size, s.hi - s.lo)
    with pytest.raises(ValueError, match="one block size per group"):
        from_plan(PLANS["kang"](g), "inter-allgather")
    with pytest.raises(ValueError, match="unknown"):
        from_plan(PLANS["kang"](g), "allgather")


@HYP
@given(groups(), st.sampled_from(sorted(PLANS)), st.binary(min_size=32, max_size=32),
       st.text("abcdefgh-", max_size=16))
def test_file_round_trip_is_exact(g, name, digest, alg):
    s = from_plan(PLANS[name](g))
    s.input_hash, s.algorithm = digest, alg or "x"
    s.fifo[s.kind == SEND] = np.arange(int((s.kind == SEND).sum())) % 2
    data = schedfile.encode(s)
    back = schedfile.decode(data)
    assert isinstance(back, InterSchedule) and back.same_ops(s)
    assert (back.algorithm, back.collective, back.input_hash) == (s.algorithm, s.collective, digest)
    assert back.format_version == "1.1" and back.file_bytes == len(data)
    assert schedfile.encode(back) == data


def test_write_and_read(tmp_path):
    s = from_plan(PLANS["kang-v"](Groups.equal(3, 2, 1000, 700)))
    path = tmp_path / "k.sched"
    n = schedfile.write(s, path)
    assert path.stat().st_size == n
    assert schedfile.read(path).same_ops(s)


# ---- corrupt files: every check names its field -----------------------------------

H = 128  # header bytes before the groups extension


def sample(collective="inter-allgather") -> bytearray:
    g = Groups.equal(3, 2, 64, 32) if collective == "inter-allgather" else Groups((64, 8, 16), (32, 40))
    return bytearray(schedfile.encode(from_plan(PLANS["kang"](g), collective)))


def reseal(b: bytearray) -> bytearray:
    """Recompute every checksum (sections, index, groups, header) after an edit."""
    n = struct.unpack_from("<I", b, 20)[0]
    hb = struct.unpack_from("<I", b, 12)[0]
    if len(b) >= 136 + 8 * n + 8 and hb == 144 + 8 * n:
        struct.pack_into("<I", b, 136 + 8 * n, zlib.crc32(b[128:136 + 8 * n]))
        for r in range(n if len(b) >= hb + 16 * n else 0):
            off, nops = struct.unpack_from("<QI", b, hb + 16 * r)
            struct.pack_into("<I", b, hb + 16 * r + 12, zlib.crc32(b[off:off + 24 * nops]))
        struct.pack_into("<I", b, 120, zlib.crc32(b[hb:hb + 16 * n]))
    struct.pack_into("<I", b, 124, zlib.crc32(b[:124]))
    return b


def first_op(b: bytearray) -> int:
    n = struct.unpack_from("<I", b, 20)[0]
    return 144 + 8 * n + 16 * n


def put(fmt, offset, value, seal=True, collective="inter-allgather"):
    def edit():
        b = sample(collective)
        struct.pack_into(fmt, b, offset(b) if callable(offset) else offset, value)
        return reseal(b) if seal else b
    return edit


def op_field(delta, fmt, value):
    return put(fmt, lambda b: first_op(b) + delta, value)


CORRUPTIONS = [
    ("nranks", put("<I", 20, 1)),
    ("nseg", put("<I", 24, 2)),
    ("flags", put("<I", 28, 2)),
    ("header_bytes", put("<I", 12, 200)),
    ("header_crc32", put("<I", 20, 6, seal=False)),
    ("groups", lambda: reseal(sample()[:150])),
    ("groups.p", put("<I", 128, 0)),
    ("groups_crc32", put("<Q", 136, 65, seal=False)),
    ("groups.reserved", put("<I", 140 + 8 * 5, 1)),
    ("groups.block_bytes", put("<Q", 136, 65)),
    ("bytes_min", put("<Q", 32, 1)),
    ("index", lambda: reseal(sample()[:144 + 8 * 5 + 20])),
    ("index_crc32", put("<I", 144 + 8 * 5 + 8, 7, seal=False)),
    ("index[0].section_offset", put("<Q", 144 + 8 * 5, 9)),
    ("total_ops", put("<Q", 112, 3)),
    ("sections", lambda: reseal(sample() + b"\0" * 24)),
    ("section[0]", put("<I", first_op, 4, seal=False)),
    ("rank 0 op 0 kind", op_field(4, "<B", 7)),
    ("rank 0 op 0 flags", op_field(5, "<B", 1)),
    ("rank 0 op 0 group", op_field(6, "<B", 2)),
    ("rank 0 op 0 reserved", op_field(7, "<B", 1)),
    ("rank 0 op 0 peer", op_field(0, "<I", 9)),
    ("rank 0 op 0 lo", op_field(8, "<Q", 1 << 20)),
    ("rank 0 op 0 hi", op_field(16, "<Q", 1 << 20)),
]


@pytest.mark.parametrize("field, corrupt", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_corrupt_file_names_the_field(field, corrupt):
    data = corrupt()
    with pytest.raises(ScheduleFileError) as e:
        schedfile.decode(bytes(data), "f.sched")
    assert e.value.field.startswith(field), e.value.line()
    line = e.value.line()
    assert line.startswith("f.sched: ") and "\n" not in line


def test_fifo_on_a_recv_and_peer_self_are_refused():
    b = sample()
    # rank 0's ops: find a recv and set its FIFO bit; then a peer equal to the rank
    n_ops = struct.unpack_from("<I", b, 144 + 8 * 5 + 8)[0]
    start = first_op(b)
    recv = next(i for i in range(n_ops) if b[start + 24 * i + 4] == RECV)
    bad = bytearray(b)
    bad[start + 24 * recv + 5] = 2
    with pytest.raises(ScheduleFileError, match="FIFO bit on sends only"):
        schedfile.decode(bytes(reseal(bad)))
    bad = bytearray(b)
    struct.pack_into("<I", bad, start, 0)
    with pytest.raises(ScheduleFileError, match="other than the op's own"):
        schedfile.decode(bytes(reseal(bad)))


def test_every_single_byte_corruption_is_caught():
    """Flip each byte of a small file: the decoder refuses it, or (bytes the checks cannot
    see: the algorithm name, compiler version, input hash) reads the same operations."""
    data = bytes(sample("inter-allgatherv"))
    good = schedfile.decode(data)
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x5A
        try:
            back = schedfile.decode(bytes(bad))
        except ScheduleFileError:
            continue
        assert 48 <= i < 112 and back.same_ops(good), i
