"""The .sched format: exact round trips, atomic writes, and every corruption caught."""
import os
import struct
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from collsched import schedfile
from collsched.algorithms import Request, generate
from collsched.errors import ScheduleFileError

BAD = Path(__file__).resolve().parent.parent / "data" / "bad" / "sched"


def test_header_layout_is_as_documented():
    s = generate("ring", Request(3))
    s.bytes_min, s.bytes_max, s.algorithm = 10, 20, "ring"
    b = schedfile.encode(s)
    assert b[:8] == b"COLLSCHD"
    assert struct.unpack_from("<HHIIIII", b, 8) == (1, 0, 128, 1, 3, 1, 1)
    assert struct.unpack_from("<QQ", b, 32) == (10, 20)
    assert b[48:52] == b"ring"
    assert struct.unpack_from("<Q", b, 112)[0] == s.total_ops
    assert len(b) == 128 + 16 * 3 + 12 * s.total_ops


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 40), nseg=st.integers(1, 4), lo=st.integers(0, 1 << 20),
       span=st.integers(0, 1 << 20), alg=st.sampled_from(["ring", "bruck", "lnbc", "spreading"]))
def test_round_trip_is_exact(p, nseg, lo, span, alg):
    s = generate(alg, Request(p, nseg=nseg))
    s.bytes_min, s.bytes_max = lo, lo + span
    s.input_hash = bytes(range(32))
    back = schedfile.decode(schedfile.encode(s))
    assert back.same_ops(s)
    assert (back.bytes_min, back.bytes_max, back.algorithm, back.input_hash) == (
        s.bytes_min, s.bytes_max, alg, s.input_hash)
    assert schedfile.encode(back) == schedfile.encode(s)


def test_write_is_atomic_and_leaves_no_temp(tmp_path):
    s = generate("ring", Request(4))
    out = tmp_path / "x.sched"
    out.write_bytes(b"old content")
    schedfile.write(s, out)
    assert schedfile.read(out).same_ops(s)
    assert [p.name for p in tmp_path.iterdir()] == ["x.sched"]


def test_write_takes_the_next_temporary_name_and_a_normal_mode(tmp_path):
    """A temporary file of the same name left by a crashed run is not touched; the schedule
    gets 0666 less the umask, as any new file (readable by other users' jobs)."""
    s = generate("ring", Request(4))
    out = tmp_path / "x.sched"
    stale = tmp_path / f".x.sched.{os.getpid()}.0.tmp"
    stale.write_bytes(b"left over")
    mask = os.umask(0o022)
    try:
        schedfile.write(s, out)
    finally:
        os.umask(mask)
    assert schedfile.read(out).same_ops(s)
    assert stale.read_bytes() == b"left over"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([stale.name, "x.sched"])
    assert out.stat().st_mode & 0o777 == 0o644


def test_failed_write_keeps_old_file(tmp_path, monkeypatch):
    out = tmp_path / "x.sched"
    out.write_bytes(b"old content")

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        schedfile.write(generate("ring", Request(4)), out)
    assert out.read_bytes() == b"old content"
    assert [p.name for p in tmp_path.iterdir()] == ["x.sched"]


def test_every_single_byte_corruption_is_caught():
    good = schedfile.encode(generate("bruck", Request(5)))
    for i in range(len(good)):
        b = bytearray(good)
        b[i] ^= 0x01
        with pytest.raises(ScheduleFileError):
            schedfile.decode(bytes(b))


def test_compact_enough_for_1024_ranks():
    s = generate("ring", Request(1024))
    size = 128 + 16 * 1024 + 12 * s.total_ops
    assert size < 30e6  # "a few tens of MB at most"


MANIFEST = yaml.safe_load((BAD / "expected.yaml").read_text())


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_malformed_file_gives_named_error(name):
    entry = MANIFEST[name]
    if entry.get("exit", 2) == 1:
        schedfile.read(BAD / name)  # well-formed: the reader accepts it
        return
    with pytest.raises(ScheduleFileError) as e:
        schedfile.read(BAD / name)
    line = e.value.line()
    assert "\n" not in line and name in line and entry["expect"] in line


def test_corpus_is_large_enough():
    assert len(MANIFEST) >= 20
