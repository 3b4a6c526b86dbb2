"""Compact hier records in the runtime (docs/hier.md): the loader generates each rank's list
from the record's tail (sites, plan, FIFO thresholds per site pair) and the call runs it
under Open MPI, byte for byte against the MPI library's own allgather (compact_app.c),
over 2 and 3 sites of unequal sizes, odd and even P, both plans, with segments and
imbalance; collsched-run takes the records with its data checks; a record whose plan is
corrupted falls back with the C check's line."""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from collsched import compact
from collsched.compact import hier
from rt_helpers import build_mpi_app, run_compact_app, run_driver

BYTES = 1000


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Path:
    return build_mpi_app(tmp_path_factory.mktemp("compact_hier") / "compact_app", "compact_app.c", linked=True)


def hier_record(tmp_path: Path, sizes, nbytes=(0, 1 << 20), nseg=1, kind=None) -> Path:
    """A record over len(sizes) sites: 5 us LANs, WAN links of 1-3 ms and one slow link
    (site 1 to 2: 50 ms), so that the relay plan is the model's choice on three sites."""
    topo = tmp_path / "sites.yaml"
    s = len(sizes)
    wan = {(i, j): ((0.05 if (i, j) == (1, 2) else 1e-3 * (1 + i + j)), 1.25e8) * 2
           for i in range(s) for j in range(i + 1, s)}
    hier.write_sites_topology(topo, sizes, [(5e-6, 1.25e9)] * s, wan)
    desc = hier.for_topology(str(topo), sum(sizes), nbytes, nseg, kind=kind)
    path = tmp_path / "hier.sched"
    compact.write_compact(desc, path)
    return path


def run_app(app: Path, nranks: int, source: Path, *args: str, strict: bool = False):
    return run_compact_app(app, nranks, source, *args, strict=strict, nbytes=BYTES)


@pytest.mark.mpi
@pytest.mark.parametrize("sizes,nseg,kind,imbalance", [
    ((3, 4), 1, None, False), ((4, 2), 2, None, True),
    ((2, 3, 2), 1, None, False), ((3, 2, 3), 3, "direct", True), ((2, 2, 2), 1, "relay", True),
])
def test_hier_record_matches_mpi_allgather(app, tmp_path, sizes, nseg, kind, imbalance):
    path = hier_record(tmp_path, sizes, nseg=nseg, kind=kind)
    plan = hier.decode_tail(compact.read_compact(path).tail).plan
    if kind is None and len(sizes) == 3:
        assert plan == hier.PLAN_CODES["relay"]  # the slow link is relayed around
    rc, row, lines = run_app(app, sum(sizes), path, *(["imbalance"] if imbalance else []))
    assert rc == 0 and row["ok"] and row["errors"] == 0, (row, lines)
    assert row["used"] == 1 and row["schedule"] == str(path), row
    assert lines == [], lines


@pytest.mark.mpi
def test_collsched_run_takes_hier_records(tmp_path):
    path = hier_record(tmp_path, (3, 2, 2), (0, 65536), nseg=2)
    run = run_driver(7, [path], "--bytes", "64,65536", "--iterations", "2")
    assert run.returncode == 0, run
    assert len(run.rows) == 2 and all(r["used_schedule"] and r["data_ok"] for r in run.rows), run


@pytest.mark.mpi
def test_corrupt_plan_falls_back_with_the_checks_line(app, tmp_path):
    """The first entry's origin made a site that does not hold it yet: the record decodes
    (its CRC-32 recomputed) but the generator's check refuses it, one line, and the call
    falls back to the MPI library."""
    path = hier_record(tmp_path, (2, 2, 2), kind="direct")
    data = bytearray(path.read_bytes())
    entries = 56 + 16 + 4 * 3 + 8 * 9
    data[entries + 12:entries + 16] = struct.pack("<I", 2)  # entry 0: site 0 sends site 2's blocks
    data[-4:] = struct.pack("<I", zlib.crc32(bytes(data[:-4])))
    path.write_bytes(bytes(data))
    rc, row, lines = run_app(app, 6, path)
    expect = "tail.entries[0]: expected site 0 to hold origin site 2's blocks before step 0"
    assert rc == 0 and row["ok"] and row["used"] == 0, (row, lines)
    assert expect in row["reason"] and len(lines) == 1 and expect in lines[0], (row, lines)
