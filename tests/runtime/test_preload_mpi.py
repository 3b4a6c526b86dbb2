"""LD_PRELOAD=libcollsched-preload.so: an unmodified MPI program (tests/runtime/apps/) gets
schedules for its MPI_Allgather/MPI_Allgatherv from COLLSCHED_SCHEDULES, and the MPI
library's collective otherwise. The program checks its own results."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rt_helpers import BUILD, TIMEOUT, make_schedule, mpirun_cmd, build_mpi_app



@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Path:
    return build_mpi_app(tmp_path_factory.mktemp("apps") / "allgather_app", "allgather_app.c")


def preload_env(schedules: Path | None, verbose: bool = True) -> dict:
    lib = BUILD / "lib" / "libcollsched-preload.so"
    if not lib.exists():
        pytest.skip(f"{lib} not built")
    preload = [str(lib)]
    if os.environ.get("COLLSCHED_ASAN"):  # an ASan-built library needs the runtime first
        asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                              text=True).stdout.strip()
        preload.insert(0, asan)
    env = dict(os.environ, LD_PRELOAD=" ".join(preload))
    env.pop("COLLSCHED_SCHEDULES", None)
    if schedules is not None:
        env["COLLSCHED_SCHEDULES"] = str(schedules)
    if verbose:
        env["COLLSCHED_VERBOSE"] = "1"
    return env


def run_app(app: Path, nranks: int, env: dict) -> subprocess.CompletedProcess:
    cmd = mpirun_cmd(nranks) + [str(app)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)


@pytest.fixture
def library(tmp_path) -> Path:
    """A schedule directory: files are tried in name order, the first match wins."""
    d = tmp_path / "schedules"
    d.mkdir()
    make_schedule(d / "a-ring-p8.sched", "ring", 8)
    make_schedule(d / "b-bruck-p4.sched", "bruck", 4, nseg=2)
    make_schedule(d / "c-ring-p2.sched", "ring", 2)
    make_schedule(d / "d-ring-p4.sched", "ring", 4)  # shadowed by b-
    (d / "README.txt").write_text("not a schedule\n")
    return d


@pytest.mark.mpi
def test_preload_selects_first_matching_schedule(app, library):
    proc = run_app(app, 4, preload_env(library))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "allgather_app: OK" in proc.stdout
    err = proc.stderr
    assert "selected " + str(library / "b-bruck-p4.sched") in err, err
    assert "d-ring-p4" not in err
    # the split communicators (2 ranks each) pick the 2-rank file, once per communicator
    assert err.count("selected " + str(library / "c-ring-p2.sched")) == 2, err
    # the strided receive type runs the schedule too (staged), so nothing falls back
    assert "no schedule for this call" not in err and "falling back" not in err, err


@pytest.mark.mpi
def test_preload_without_match_passes_through(app, library):
    proc = run_app(app, 3, preload_env(library))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "allgather_app: OK" in proc.stdout
    assert "no schedule matches 3 ranks" in proc.stderr, proc.stderr


@pytest.mark.mpi
def test_preload_single_file_and_unset(app, tmp_path):
    f = make_schedule(tmp_path / "ring4.sched", "ring", 4, nseg=3)
    proc = run_app(app, 4, preload_env(f, verbose=False))
    assert proc.returncode == 0 and "allgather_app: OK" in proc.stdout, proc.stdout + proc.stderr
    # the 2-rank halves do not fit the 4-rank file: one line per communicator, no more
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("collsched:")]
    assert len(lines) == 2 and all("nranks: expected 2" in ln for ln in lines), proc.stderr
    proc = run_app(app, 4, preload_env(None))
    assert proc.returncode == 0 and "allgather_app: OK" in proc.stdout, proc.stderr
    assert "collsched:" not in proc.stderr, proc.stderr


@pytest.mark.mpi
def test_preload_corrupt_file_falls_back(app, tmp_path):
    f = make_schedule(tmp_path / "ring4.sched", "ring", 4)
    raw = bytearray(f.read_bytes())
    raw[-1] ^= 0xFF
    f.write_bytes(bytes(raw))
    proc = run_app(app, 4, preload_env(f, verbose=False))
    assert proc.returncode == 0 and "allgather_app: OK" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.count("section_crc32") == 1, proc.stderr


def run_app_within(app: Path, nranks: int, env: dict, seconds: int) -> subprocess.CompletedProcess:
    """run_app with a short timeout: a hang is a failure, not a stalled suite."""
    try:
        return subprocess.run(mpirun_cmd(nranks) + [str(app)], capture_output=True, text=True,
                              timeout=seconds, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{app.name} hung for {seconds} s")


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["fifo", "chardev"])
def test_special_file_is_refused_without_blocking(app, tmp_path, kind):
    """COLLSCHED_SCHEDULES naming a FIFO blocked every rank in open();
    /dev/zero would never end. Both are refused before they are opened: one line per
    communicator, and the program's calls run the MPI library's collective."""
    if kind == "fifo":
        src, what = tmp_path / "fifo.sched", "a FIFO"
        os.mkfifo(src)
    else:
        src, what = Path("/dev/zero"), "a character device"
    proc = run_app_within(app, 4, preload_env(src, verbose=False), 60)
    assert proc.returncode == 0 and "allgather_app: OK" in proc.stdout, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("collsched:")]
    # world and the two halves: rank 0 of each says it once
    assert lines == [f"collsched: {src}: file: expected a regular file, found {what}"] * 3, proc.stderr


@pytest.mark.mpi
def test_directory_with_special_files_and_symlinks(app, tmp_path):
    """A directory's FIFOs, devices and subdirectories are skipped without being opened; a
    symbolic link to a regular file is followed (docs/runtime.md)."""
    d = tmp_path / "schedules"
    d.mkdir()
    os.mkfifo(d / "a-fifo.sched")
    (d / "b-zero.sched").symlink_to("/dev/zero")
    (d / "c-subdir.sched").mkdir()
    target = make_schedule(tmp_path / "elsewhere-ring4.sched", "ring", 4)
    (d / "d-link.sched").symlink_to(target)
    proc = run_app_within(app, 4, preload_env(d), 60)
    assert proc.returncode == 0 and "allgather_app: OK" in proc.stdout, proc.stdout + proc.stderr
    assert "selected " + str(d / "d-link.sched") in proc.stderr, proc.stderr


@pytest.mark.mpi
def test_directory_is_read_whole(app, tmp_path):
    """5000 files that are not schedules and one that is, sorting last: all are read (the
    runtime stopped at 4096, in readdir order) and the schedule is
    found."""
    d = tmp_path / "many"
    d.mkdir()
    make_schedule(d / "zz-ring-p4.sched", "ring", 4)
    for i in range(5000):
        (d / f"junk-{i:05d}.txt").write_bytes(b"not a schedule\n")
    proc = run_app_within(app, 4, preload_env(d), 120)
    assert proc.returncode == 0 and "allgather_app: OK" in proc.stdout, proc.stdout + proc.stderr
    assert "selected " + str(d / "zz-ring-p4.sched") in proc.stderr, proc.stderr
    assert f"skipped 5000 file(s) of {d} that are not valid schedules" in proc.stderr, proc.stderr


RUNTIME_SOURCES = ("comm_state.c", "collectives.c", "datatype.c", "executor.c", "schedfile.c",
                   "whole_check.c", "preload.c", "libcollsched")


def definitely_lost(log: str) -> list[str]:
    """The records (size line and stack) of valgrind's "definitely lost" blocks."""
    out, cur = [], None
    for line in log.splitlines():
        body = line.split("== ", 1)[1] if "== " in line else ""
        if "are definitely lost" in body:
            cur = [body]
        elif cur is not None:
            if body.strip():
                cur.append(body)
            else:
                out.append("\n".join(cur))
                cur = None
    return out


@pytest.mark.mpi
def test_no_leak_of_the_runtime_under_valgrind(app, library, tmp_path):
    """valgrind: no block the runtime allocated is definitely lost (the keyval of its
    MPI_Finalize hook was never freed: 64 bytes). Open MPI's own leaks are not
    ours."""
    if not shutil.which("valgrind") or os.environ.get("COLLSCHED_ASAN") or os.environ.get("COLLSCHED_TSAN"):
        pytest.skip("needs valgrind and an uninstrumented build")
    logs = tmp_path / "vg"
    logs.mkdir()
    cmd = mpirun_cmd(4) + ["valgrind", "--leak-check=full", "--num-callers=40",
                           f"--log-file={logs}/log.%p", str(app)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                          env=preload_env(library, verbose=False))
    assert proc.returncode == 0 and "allgather_app: OK" in proc.stdout, proc.stdout + proc.stderr
    logs = [f.read_text() for f in sorted(logs.iterdir())]
    assert len(logs) == 4 and all("definitely lost" in t or "no leaks" in t for t in logs), logs[:1]
    # (what Open MPI allocates inside PMPI_Init, under the preload library's MPI_Init, is its own)
    ours = [r for t in logs for r in definitely_lost(t)
            if any(s in r for s in RUNTIME_SOURCES) and "PMPI_Init" not in r]
    assert not ours, ours[0]
