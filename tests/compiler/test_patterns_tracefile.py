"""patterns.tracefile: the arrival trace format of docs/trace-format.md - round trip,
every corruption refused with the field named, grouping of calls."""
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from collsched.errors import InputError
from collsched.patterns import tracefile as T


def small_trace(nsites=2, ncalls=6):
    comms = [T.Comm(0xABCDEF, (0, 1, 2, 3)), T.Comm(7, (3, 1))]
    sites = ["main+0x1f", "solver.c:step"][:nsites]
    rng = np.random.default_rng(1)
    calls = []
    for i in range(ncalls):
        a = rng.uniform(0, 1e-3, 4)
        calls.append(T.call_from_times(i % nsites, 0, i, 1024 * (i + 1), 0.01 * i + a,
                                       0.01 * i + a.max() + 1e-4 + np.zeros(4)))
    calls.append(T.call_from_times(0, 1, 0, 64, [0.5, 0.5001], collective=2, flags=3))
    return dict(world_size=4, sites=sites, comms=comms, calls=calls, t0=12.5,
                offsets=np.arange(8.0).reshape(4, 2) * 1e-6, flags=1)


def test_round_trip_small(tmp_path):
    kw = small_trace()
    written = T.write_trace(tmp_path / "t.trace", **kw)
    tr = T.read_trace(tmp_path / "t.trace")
    assert tr.world_size == 4 and tr.t0 == 12.5 and tr.flags == 1
    assert tr.sites == ("main+0x1f", "solver.c:step")
    assert tr.comms[0] == T.Comm(0xABCDEF, (0, 1, 2, 3)) and tr.comms[1].size == 2
    assert tr.ncalls == 7 and len(tr.blocks) == 2
    assert np.array_equal(tr.offsets, kw["offsets"])
    calls = tr.calls
    assert [c.seq for c in calls] == [0, 1, 2, 3, 4, 5, 0]
    assert calls[-1].collective == 2 and calls[-1].flags == 3 and calls[-1].bytes == 64
    for c, k in zip(calls, kw["calls"]):
        assert c.base == k.base
        assert np.allclose(c.arrivals, k.arrivals, atol=1e-9) and c.arrivals.min() == 0
        assert c.arrivals.dtype == np.float64
    assert np.array_equal(written.blocks[0].arrivals, tr.blocks[0].arrivals)
    assert T.is_trace(tmp_path / "t.trace")


def test_groups_and_calls_of(tmp_path):
    T.write_trace(tmp_path / "t.trace", **small_trace())
    tr = T.read_trace(tmp_path / "t.trace")
    gs = T.groups(tr)
    assert [(g.site_name, g.comm, g.ncalls, g.bytes_min, g.bytes_max, g.collective, g.size)
            for g in gs] == [("main+0x1f", 0, 3, 1024, 5120, "allgather", 4),
                             ("solver.c:step", 0, 3, 2048, 6144, "allgather", 4),
                             ("main+0x1f", 1, 1, 64, 64, "allgatherv", 2)]
    a = T.calls_of(tr, "solver.c:step")
    assert a.shape == (3, 4)
    assert np.array_equal(a, tr.blocks[0].arrivals[1::2])
    assert T.calls_of(tr, "main+0x1f", comm=1).shape == (1, 2)
    assert T.calls_of(tr, 1).shape == (3, 4)  # a site index
    with pytest.raises(InputError) as e:
        T.calls_of(tr, "main+0x1f")
    assert "several call sites" in str(e.value) and "solver.c:step" in str(e.value)
    with pytest.raises(InputError, match="no call site matches 'nope'"):
        T.calls_of(tr, "nope")


name = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)


@st.composite
def traces(draw):
    world = draw(st.integers(1, 9))
    nsites = draw(st.integers(1, 3))
    sites = draw(st.lists(name, min_size=nsites, max_size=nsites))
    ncomms = draw(st.integers(0, 3))
    comms = []
    ids = sorted(draw(st.sets(st.integers(0, 2**64 - 1), min_size=ncomms, max_size=ncomms)))
    for i in range(ncomms):
        size = draw(st.integers(1, world))
        ranks = draw(st.permutations(range(world)))[:size]
        comms.append(T.Comm(ids[i], tuple(ranks)))
    calls = []
    t = st.floats(0, 100, allow_nan=False, width=32)
    for c, comm in enumerate(comms):
        for seq in sorted(draw(st.sets(st.integers(0, 2**32 - 1), max_size=4))):
            a = np.array(draw(st.lists(t, min_size=comm.size, max_size=comm.size)))
            d = np.array(draw(st.lists(t, min_size=comm.size, max_size=comm.size)))
            calls.append(T.call_from_times(draw(st.integers(0, nsites - 1)), c, seq,
                                           draw(st.integers(0, 2**62 - 1)), a, a + d,
                                           draw(st.sampled_from([1, 2])),
                                           draw(st.integers(0, 3))))
    return dict(world_size=world, sites=sites, comms=comms, calls=calls,
                t0=draw(st.floats(-1e9, 1e9)), flags=draw(st.integers(0, 1)),
                offsets=np.array(draw(st.lists(st.floats(-1, 1), min_size=2 * world,
                                               max_size=2 * world))).reshape(world, 2))


@settings(max_examples=60, deadline=None)
@given(kw=traces())
def test_round_trip_property(tmp_path_factory, kw):
    p = tmp_path_factory.mktemp("rt") / "t.trace"
    first = T.write_trace(p, **kw)
    data = p.read_bytes()
    again = T.parse_trace(T.encode_trace(first.world_size, first.sites, first.comms,
                                         first.calls, first.t0, first.offsets, first.flags))
    assert T.encode_trace(again.world_size, again.sites, again.comms, again.calls,
                          again.t0, again.offsets, again.flags) == data
    assert first.sites == tuple(kw["sites"]) and first.ncalls == len(kw["calls"])
    for c, k in zip(first.calls, sorted(kw["calls"], key=lambda c: (c.comm, c.seq))):
        assert (c.site, c.comm, c.seq, c.bytes, c.collective, c.flags) == (
            k.site, k.comm, k.seq, k.bytes, k.collective, k.flags)
        assert np.allclose(c.arrivals, k.arrivals, rtol=1e-6, atol=1e-5)


# --- corruption: every bad file refused, naming the field ----------------------------------

def good_bytes():
    kw = small_trace()
    return bytearray(T.encode_trace(**kw))


def fix_crc(b: bytearray) -> bytearray:
    b[-4:] = struct.pack("<I", zlib.crc32(bytes(b[:-4])))
    return b


HEAD = 48
SITES_AT = HEAD                                  # u16 len + name
COMMS_AT = HEAD + (2 + 9) + (2 + 13)             # after the two site names
OFFSETS_AT = COMMS_AT + (12 + 16) + (12 + 8)
CALLS_AT = OFFSETS_AT + 4 * 16
REC4 = 32 + 8 * 4


def patch(at: int, fmt: str, value):
    b = good_bytes()
    struct.pack_into(fmt, b, at, value)
    return fix_crc(b)


def test_layout_offsets_are_right():
    b = good_bytes()
    assert bytes(b[SITES_AT + 2:SITES_AT + 11]) == b"main+0x1f"
    assert struct.unpack_from("<Q", b, COMMS_AT)[0] == 0xABCDEF
    assert struct.unpack_from("<d", b, OFFSETS_AT + 8)[0] == 1e-6
    assert struct.unpack_from("<IIBBHIQ", b, CALLS_AT + REC4) == (1, 0, 1, 0, 0, 1, 2048)
    assert len(b) == CALLS_AT + 6 * REC4 + (32 + 16) + 4


CASES = [
    ("magic", lambda: fix_crc(bytearray(b"CSATRACX") + good_bytes()[8:])),
    ("version", lambda: patch(8, "<I", 2)),
    ("crc32", lambda: (lambda b: b.__setitem__(-1, b[-1] ^ 1) or b)(good_bytes())),
    ("crc32", lambda: good_bytes()[:-9] + good_bytes()[-4:]),
    ("flags", lambda: patch(12, "<I", 2)),
    ("world_size", lambda: patch(16, "<I", 0)),
    ("nsites", lambda: patch(20, "<I", 10**6)),
    ("ncomms", lambda: patch(24, "<I", 10**6)),
    ("reserved", lambda: patch(28, "<I", 1)),
    ("ncalls", lambda: patch(32, "<Q", 2**63)),
    ("t0", lambda: patch(40, "<d", float("inf"))),
    ("sites[0]", lambda: patch(SITES_AT, "<H", 0)),
    ("sites[0]", lambda: patch(SITES_AT + 6, "<B", ord(" "))),
    ("sites[0]", lambda: patch(SITES_AT + 6, "<B", 0xFF)),
    ("comms[0].size", lambda: patch(COMMS_AT + 8, "<I", 5)),
    ("comms[0].ranks", lambda: patch(COMMS_AT + 12, "<I", 4)),
    ("comms[0].ranks", lambda: patch(COMMS_AT + 12, "<I", 1)),
    ("comms", lambda: patch(COMMS_AT + 28, "<Q", 0xABCDEF)),
    ("offsets", lambda: patch(OFFSETS_AT + 16, "<d", float("nan"))),
    ("calls[2].site", lambda: patch(CALLS_AT + 2 * REC4, "<I", 2)),
    ("calls[2].comm", lambda: patch(CALLS_AT + 2 * REC4 + 4, "<I", 9)),
    ("calls[3].collective", lambda: patch(CALLS_AT + 3 * REC4 + 8, "<B", 3)),
    ("calls[3].flags", lambda: patch(CALLS_AT + 3 * REC4 + 9, "<B", 4)),
    ("calls[3].reserved", lambda: patch(CALLS_AT + 3 * REC4 + 10, "<H", 1)),
    ("calls[3].seq", lambda: patch(CALLS_AT + 3 * REC4 + 12, "<I", 1)),
    ("calls[3].bytes", lambda: patch(CALLS_AT + 3 * REC4 + 16, "<Q", 2**63)),
    ("calls[3].base", lambda: patch(CALLS_AT + 3 * REC4 + 24, "<d", float("-inf"))),
    ("calls[3].arrivals", lambda: patch(CALLS_AT + 3 * REC4 + 36, "<f", float("nan"))),
    ("calls[3].arrivals", lambda: patch(CALLS_AT + 3 * REC4 + 36, "<f", -1.0)),
    ("calls[3].exits", lambda: patch(CALLS_AT + 3 * REC4 + 52, "<f", float("inf"))),
    ("calls[3].exits", lambda: patch(CALLS_AT + 3 * REC4 + 52, "<f", -1.0)),
    ("calls", lambda: fix_crc(good_bytes()[:-4] + b"\0" * 9)),
    ("calls[7]", lambda: patch(32, "<Q", 8)),
    ("calls[6]", lambda: fix_crc(good_bytes()[:-20] + b"\0" * 4)),
    ("header", lambda: bytearray(b"CSATRACE\1\0\0\0")),
]


@pytest.mark.parametrize("field,make", CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)])
def test_corruption_refused(tmp_path, field, make):
    p = tmp_path / "bad.trace"
    p.write_bytes(bytes(make()))
    with pytest.raises(InputError) as e:
        T.read_trace(p)
    assert e.value.source == str(p)
    assert e.value.field == field, e.value.line()
    assert "\n" not in e.value.line()


def test_calls_out_of_communicator_order_refused(tmp_path):
    comms = [T.Comm(1, (0, 1)), T.Comm(2, (1, 0))]
    calls = [T.call_from_times(0, c, s, 8, [0.0, 1e-3]) for c, s in ((0, 0), (1, 0), (0, 1))]
    b = bytearray(T.encode_trace(2, ["s"], comms, calls))
    rec, at = 32 + 16, len(b) - 4 - 3 * 48
    assert struct.unpack_from("<IIBBHI", b, at + rec)[1::4] == (0, 1)  # sorted: (0,0) (0,1) (1,0)
    struct.pack_into("<I", b, at + rec + 4, 1)        # record 1 becomes (1, 0)
    struct.pack_into("<I", b, at + rec + 12, 0)
    struct.pack_into("<I", b, at + 2 * rec + 4, 0)    # record 2 becomes (0, 1): comm 0 again
    struct.pack_into("<I", b, at + 2 * rec + 12, 1)
    p = tmp_path / "t.trace"
    p.write_bytes(bytes(fix_crc(b)))
    with pytest.raises(InputError) as e:
        T.read_trace(p)
    assert e.value.field == "calls[2].comm" and "order" in e.value.expected


def test_not_a_file_and_missing(tmp_path):
    with pytest.raises(InputError, match="not found"):
        T.read_trace(tmp_path / "none")
    with pytest.raises(InputError, match="regular"):
        T.read_trace(tmp_path)
    assert not T.is_trace(tmp_path / "none")


def test_write_refuses_bad_content_and_writes_nothing(tmp_path):
    kw = small_trace()
    kw["sites"] = ["has space", "x"]
    with pytest.raises(ValueError, match="sites"):
        T.write_trace(tmp_path / "t.trace", **kw)
    assert not (tmp_path / "t.trace").exists()
    kw = small_trace()
    kw["calls"].append(kw["calls"][0])  # a call number twice
    with pytest.raises(ValueError, match="seq"):
        T.write_trace(tmp_path / "t.trace", **kw)
    assert list(tmp_path.iterdir()) == []


def test_a_trace_the_runtime_wrote():
    """A trace of runtime/src/arrivals.c (tests/runtime/apps/trace_app.c under SMPI, 3
    ranks: rank 1 late by 50 ms on alternate world_step calls) reads and groups."""
    path = Path(__file__).parent / "data" / "arrivals-smpi-3ranks.trace"
    tr = T.read_trace(path)
    assert tr.world_size == 3 and tr.flags == 0 and tr.ncalls == 16
    assert tr.sites == ("first_world", "world_v+0x16f", "world_step+0xe6", "halo")
    assert [c.size for c in tr.comms] == [3, 2, 1]
    gs = T.groups(tr)
    assert [(g.site_name, g.comm, g.collective, g.ncalls) for g in gs] == [
        ("first_world", 0, "allgather", 1), ("world_v+0x16f", 0, "allgatherv", 4),
        ("world_step+0xe6", 0, "allgather", 3), ("halo", 1, "allgather", 4),
        ("halo", 2, "allgather", 4)]
    step = T.calls_of(tr, "world_step+0xe6")
    assert step[:, 1] == pytest.approx([0.05, 0.0, 0.05], abs=1e-6)
    for b in tr.blocks:
        assert (b.arrivals.min(axis=1) == 0).all() and (b.exits >= b.arrivals).all()
    # re-encoding what was read gives the same bytes
    assert T.encode_trace(tr.world_size, tr.sites, tr.comms, tr.calls, tr.t0, tr.offsets,
                          tr.flags) == path.read_bytes()
