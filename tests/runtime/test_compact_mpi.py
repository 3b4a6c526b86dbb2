"""Compact schedule files in the runtime (docs/compact.md, "The loader"): a 56-byte record
where a .sched file is accepted. Under Open MPI, allgather with compact ring, bruck and rd
records at odd and even P, byte for byte against the MPI library's own allgather, with
and without arrival imbalance; records that do not fit the call (wrong P, size out of
range) or are corrupt fall back with one line, and are refused under COLLSCHED_STRICT=1;
a directory of compact files, the preload library and collsched-run take them too, and
SMPI's collsched-run. Without MPI: the link check that replaces the whole-schedule gather
sees a reordered list; the Python side (write, read, the --form choice, show/verify's
functions)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from collsched import compact
from collsched.errors import InputError
from rt_helpers import BUILD, DATA, TIMEOUT, build_c_tool, build_mpi_app, mpirun_cmd, run_compact_app, run_driver
from test_preload_mpi import preload_env

# Bytes per rank of the calls. The records serve up to 1 MiB by default, where every piece
# is above the FIFO threshold (6251 bytes): their sends carry the FIFO bit.
BYTES = 1000


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Path:
    return build_mpi_app(tmp_path_factory.mktemp("compact") / "compact_app", "compact_app.c", linked=True)


def record(path: Path, algorithm: str, nranks: int, nbytes=(0, 1 << 20), nseg: int = 1) -> Path:
    compact.write_compact(compact.for_default(algorithm, nranks, nbytes, nseg), path)
    return path


def run_app(app: Path, nranks: int, source: Path, *args: str, strict: bool = False):
    return run_compact_app(app, nranks, source, *args, strict=strict, nbytes=BYTES)


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm,nranks,nseg,imbalance", [
    ("ring", 3, 1, False), ("ring", 4, 3, True), ("ring", 5, 2, True),
    ("bruck", 3, 1, True), ("bruck", 4, 1, False), ("bruck", 5, 3, False),
    ("rd", 4, 2, True),
])
def test_compact_matches_mpi_allgather(app, tmp_path, algorithm, nranks, nseg, imbalance):
    path = record(tmp_path / f"{algorithm}.sched", algorithm, nranks, nseg=nseg)
    rc, row, lines = run_app(app, nranks, path, *(["imbalance"] if imbalance else []))
    assert rc == 0 and row["ok"] and row["errors"] == 0, (row, lines)
    assert row["used"] == 1 and row["schedule"] == str(path), row
    assert lines == [], lines


def corrupt(path: Path, offset: int, value: bytes) -> Path:
    data = bytearray(path.read_bytes())
    data[offset:offset + len(value)] = value
    path.write_bytes(bytes(data))
    return path


@pytest.mark.mpi
@pytest.mark.parametrize("case,expect", [
    ("wrong_p", "nranks: expected 3 (communicator size), found 4"),
    ("wrong_size", "bytes: expected bytes per rank 1000 within [0, 999]"),
    ("bad_algorithm", "compact description: algorithm: expected a code 1..11, found 99"),
    ("truncated", "compact description: size: expected 56 .. 67108864 bytes read whole, found 40"),
    ("rd_odd", "recursive doubling"),
])
def test_mismatched_or_corrupt_record_falls_back(app, tmp_path, case, expect):
    path = tmp_path / f"{case}.sched"
    if case == "wrong_p":
        record(path, "ring", 4)
    elif case == "wrong_size":
        record(path, "ring", 3, (0, BYTES - 1))
    elif case == "bad_algorithm":
        corrupt(record(path, "ring", 3), 10, b"\x63\x00")
    elif case == "truncated":
        path.write_bytes(compact.for_default("ring", 3, 100).encode()[:40])
    else:  # a valid record but for no generator: rd at P = 3, its code written by hand
        corrupt(record(path, "ring", 3), 10, bytes([compact.ALGORITHMS["rd"], 0]))
    rc, row, lines = run_app(app, 3, path)
    assert rc == 0 and row["ok"] and row["used"] == 0, (row, lines)
    assert expect in row["reason"] and str(path) in row["reason"], row
    assert len(lines) == 1 and expect in lines[0], lines
    rc, row, lines = run_app(app, 3, path, strict=True)
    assert rc != 0 and row["errors"] >= 1 and row["used"] == 0, (row, lines)
    assert any("COLLSCHED_STRICT=1" in line and expect in line for line in lines), lines


@pytest.mark.mpi
def test_directory_of_compact_files(app, tmp_path):
    """The candidates of a directory: the one for the call's P and size is selected."""
    src = tmp_path / "scheds"
    src.mkdir()
    record(src / "a_ring_p4.sched", "ring", 4)
    record(src / "b_bruck_p3_small.sched", "bruck", 3, (0, BYTES - 1))
    record(src / "c_bruck_p3.sched", "bruck", 3, (BYTES, BYTES))
    rc, row, lines = run_app(app, 3, src, "imbalance")
    assert rc == 0 and row["ok"] and row["used"] == 1, (row, lines)
    assert row["schedule"].endswith("c_bruck_p3.sched"), row


@pytest.mark.mpi
def test_preload_library_takes_compact_files(tmp_path):
    """An unmodified MPI program (allgather_app.c, its own data checks) under LD_PRELOAD."""
    app = build_mpi_app(tmp_path / "allgather_app", "allgather_app.c")
    src = tmp_path / "scheds"
    src.mkdir()
    record(src / "bruck-p4.sched", "bruck", 4, nseg=2)
    proc = subprocess.run(mpirun_cmd(4) + [str(app)], capture_output=True, text=True, timeout=TIMEOUT,
                          env=preload_env(src))
    assert proc.returncode == 0 and "allgather_app: OK" in proc.stdout, proc.stdout + proc.stderr
    assert f"selected {src / 'bruck-p4.sched'} (algorithm bruck, nseg 2" in proc.stderr, proc.stderr
    assert "link check passed" in proc.stderr, proc.stderr


@pytest.mark.mpi
def test_collsched_run_takes_compact_files(tmp_path):
    path = record(tmp_path / "ring5.sched", "ring", 5, (0, 4096), nseg=2)
    run = run_driver(5, [path], "--bytes", "64,4096", "--iterations", "2")
    assert run.returncode == 0, run
    assert len(run.rows) == 2 and all(r["used_schedule"] and r["data_ok"] for r in run.rows), run


@pytest.mark.mpi
@pytest.mark.smpi
def test_smpi_runs_compact_files(tmp_path):
    exe = BUILD / "smpi" / "bin" / "collsched-run"
    if not shutil.which("smpirun") or not exe.exists():
        pytest.skip(f"smpirun or {exe} missing (make runtime-smpi)")
    files = [record(tmp_path / "ring.sched", "ring", 4, (0, 65536), nseg=2),
             record(tmp_path / "bruck.sched", "bruck", 4, (0, 65536))]
    launcher = ["smpirun", "-np", "4", "-platform", str(DATA / "platform-4.xml"), "-hostfile",
                str(DATA / "hostfile-4.txt"), "--cfg=smpi/display-timing:no", "--log=root.thr:warning"]
    run = run_driver(4, files, "--bytes", "777,65536", "--iterations", "2", launcher=launcher, exe=exe)
    assert run.returncode == 0 and len(run.rows) == 4, run
    assert all(r["used_schedule"] and r["data_ok"] for r in run.rows), run


@pytest.fixture(scope="module")
def link_tool(tmp_path_factory) -> Path:
    return build_c_tool(tmp_path_factory.mktemp("link") / "compact_link",
                        ["schedfile.c", "crc32.c", "compact_load.c", "compact_gen.c", "compact_hier.c", "compact_bdr.c"], "compact_link_main.c")


@pytest.mark.parametrize("algorithm,nranks,nseg", [("ring", 7, 2), ("bruck", 6, 3), ("lnbc", 5, 1),
                                                  ("nex", 6, 1), ("mpichg2", 9, 2)])
def test_link_check_sees_a_reordered_list(link_tool, tmp_path, algorithm, nranks, nseg):
    path = record(tmp_path / "r.sched", algorithm, nranks, nseg=nseg)
    out = subprocess.run([str(link_tool), str(path), str(nranks)], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    want_ops = sum(compact.count(compact.read_compact(path), r) for r in range(nranks))
    assert f"links 0 ops {want_ops} swapped 0" in out and f"algorithm {algorithm}" in out, out
    out = subprocess.run([str(link_tool), str(path), str(nranks), "swap", "0"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert "swapped 1" in out and "links 0 " not in out, out


def test_form_choice_and_files(tmp_path):
    assert compact.choose_form("auto", "ring", compact.AUTO_MIN_RANKS) == "compact"
    assert compact.choose_form("auto", "ring", compact.AUTO_MIN_RANKS - 1) == "explicit"
    assert compact.choose_form("auto", "min3", 4096) == "explicit"  # no compact form
    assert compact.choose_form("auto", "ring", 4096, topology="missing.yaml") == "explicit"
    assert compact.choose_form("compact", "bruck", 3) == "compact"
    assert compact.choose_form("explicit", "ring", 4096) == "explicit"
    assert compact.choose_form("compact", "ring", 8, duplex="half") == "compact"
    with pytest.raises(InputError, match="no compact description"):
        compact.choose_form("compact", "min3", 8)
    with pytest.raises(InputError, match="--form"):
        compact.choose_form("small", "ring", 8)
    desc = compact.for_default("bruck", 6, (0, 1 << 16), 2)
    path = tmp_path / "b.sched"
    assert compact.write_compact(desc, path) == 56 and compact.is_compact_file(path)
    assert compact.read_compact(path) == desc
    assert "algorithm  bruck" in compact.summary(desc) and "rank 0: 20" in compact.summary(desc)
    assert compact.check(desc) is None
    path.write_bytes(desc.encode() + b"\0")
    with pytest.raises(InputError, match=f"{path}: desc_bytes: expected 56 and a zero reserved word"):
        compact.read_compact(path)


@pytest.mark.parametrize("algorithm,nranks,nseg", [
    ("ring", 3, 1), ("ring", 4, 2), ("bruck", 5, 2), ("bruck", 6, 1), ("rd", 4, 2),
    ("spreading", 5, 1), ("nex", 4, 2), ("nex", 6, 1), ("lnbc", 5, 1), ("mpichg2", 6, 2), ("magpie", 5, 1),
])
def test_half_duplex_records(app, tmp_path, algorithm, nranks, nseg):
    """Half-duplex records (docs/compact-regular.md: sends before receives where the
    compiler's sub-steps put them) run with every byte checked against MPI's allgather,
    strict (no fallback), with imbalance."""
    path = tmp_path / f"{algorithm}.sched"
    compact.write_compact(compact.for_default(algorithm, nranks, (0, 1 << 20), nseg, duplex="half"), path)
    rc, row, lines = run_app(app, nranks, path, "imbalance", strict=True)
    assert rc == 0 and row["ok"] and row["errors"] == 0, (row, lines)
    assert row["used"] == 1 and row["schedule"] == str(path), row
