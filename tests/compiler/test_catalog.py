"""catalog.py: a schedules directory listed as the runtime selects from it (comm_state.c)."""
import os

import pytest

from collsched import catalog, schedfile
from collsched.errors import ScheduleFileError
from collsched.pipeline import compile_schedule


def _write(path, algorithm="ring", ranks=4, nbytes=64):
    compile_schedule(algorithm, ranks, nbytes, output=path)
    return path


def test_order_overlaps_and_skips(tmp_path):
    _write(tmp_path / "b.sched", nbytes=(1024, 1 << 20))
    _write(tmp_path / "a.sched", "bruck", nbytes=65536)
    _write(tmp_path / "B.sched", ranks=8, nbytes=65536)  # 'B' < 'a' in byte order
    _write(tmp_path / "c.sched", nbytes=(2048, 4096))  # inside b's range: never used
    _write(tmp_path / ".hidden.sched")  # the runtime ignores names starting with '.'
    (tmp_path / "sub").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "junk").write_bytes(b"x" * 200)
    os.symlink(tmp_path / "a.sched", tmp_path / "link.sched")  # followed, like the file
    listing = catalog.list_directory(tmp_path)
    assert [e.name for e in listing.entries] == ["B.sched", "a.sched", "b.sched", "c.sched", "link.sched"]
    by = {e.name: e for e in listing.entries}
    assert by["B.sched"].shadowed == [] and by["a.sched"].shadowed == []
    assert by["b.sched"].shadowed == [(65536, 65536, "a.sched")] and not by["b.sched"].never_used
    assert by["c.sched"].shadowed == [(2048, 4096, "b.sched")] and by["c.sched"].never_used
    assert by["link.sched"].never_used
    assert by["b.sched"].header.bytes_min == 1024 and by["a.sched"].header.algorithm == "bruck"
    skipped = dict(listing.skipped)
    assert set(skipped) == {"fifo", "junk", "sub"}
    assert "regular file" in skipped["fifo"] and skipped["junk"].startswith("magic:")
    text = "\n".join(catalog.describe(listing))
    assert "65536 bytes: a.sched wins (sorts first)" in text and "never used" in text


def test_reads_only_the_header(tmp_path):
    """A file whose sections are cut off is still a candidate (the runtime selects by
    header and refuses it at first use); verify reads it whole and refuses it."""
    p = _write(tmp_path / "r.sched", ranks=16, nbytes=4096)
    data = p.read_bytes()
    p.write_bytes(data[:schedfile.HEADER_BYTES])
    h = catalog.read_header(p)
    assert (h.nranks, h.bytes_min, h.bytes_max, h.algorithm) == (16, 4096, 4096, "ring")
    with pytest.raises(ScheduleFileError):
        schedfile.read(p)


@pytest.mark.parametrize("offset,field", [(0, "magic"), (8, "version_major"), (40, "header_crc32")])
def test_bad_headers_are_refused(tmp_path, offset, field):
    p = _write(tmp_path / "r.sched")
    data = bytearray(p.read_bytes())
    data[offset] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(ScheduleFileError) as e:
        catalog.read_header(p)
    assert e.value.field == field


def test_overlaps_name_the_winner(tmp_path):
    _write(tmp_path / "m.sched", nbytes=(100, 200))
    _write(tmp_path / "other-ranks.sched", ranks=6, nbytes=(100, 200))
    new = _write(tmp_path / "z.sched", nbytes=(150, 300))
    found = catalog.overlaps(tmp_path, catalog.read_header(new), "z.sched")
    assert found == [catalog.Overlap("m.sched", "ring", 150, 200, "m.sched")]
    line = catalog.overlap_warning("z.sched", str(tmp_path), found)
    assert "\n" not in line and "where m.sched is used" in line
