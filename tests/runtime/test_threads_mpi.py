"""The runtime from several threads at once (MPI_THREAD_MULTIPLE, one communicator per
thread: legal MPI) with COLLSCHED_TRACE on, and the trace files' safety.
tests/runtime/apps/threads_app.c checks every byte against PMPI_Allgather.

`make check-asan` runs these against the ASan+UBSan build, `make check-tsan` against a
ThreadSanitizer build (COLLSCHED_SANFLAGS: how the test program is compiled to match)."""
from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from rt_helpers import BUILD, TIMEOUT, make_schedule, mpirun_cmd, build_mpi_app



@pytest.fixture(scope="module")
def threads_app(tmp_path_factory) -> Path:
    return build_mpi_app(tmp_path_factory.mktemp("apps") / "threads_app", "threads_app.c", "-std=c11",
                         "-g", "-Wextra", "-Werror", "-pthread", linked=True)


def run_app(exe: Path, nranks: int, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(mpirun_cmd(nranks) + [str(exe), *map(str, args)], capture_output=True,
                          text=True, timeout=TIMEOUT, env={**os.environ, **(env or {})})
    if "threads_app: SKIP:" in proc.stdout:
        pytest.skip(proc.stdout.strip().splitlines()[-1])
    return proc


def trace_calls(path: Path) -> set[int]:
    return {int(line.split(",")[0]) for line in path.read_text().splitlines()}


@pytest.mark.mpi
@pytest.mark.parametrize("nranks,nthreads", [(2, 2), (3, 3)])
def test_threads_on_their_own_communicators_with_tracing(tmp_path, threads_app, nranks, nthreads):
    """Before the fix: SIGSEGV, or heap-use-after-free in trace_write under ASan (the trace
    record was one global shared by the threads)."""
    iterations = 60
    sched = make_schedule(tmp_path / "ring.sched", "ring", nranks, bytes_max=1 << 20)
    prefix = tmp_path / "trace"
    proc = run_app(threads_app, nranks, nthreads, iterations, 16,
                   env={"COLLSCHED_SCHEDULES": str(sched), "COLLSCHED_TRACE": str(prefix)})
    calls = nranks * nthreads * iterations
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert f"threads_app: OK calls={calls} scheduled={calls} wrong=0 errors=0" in proc.stdout, proc.stdout
    for r in range(nranks):  # every call of every thread traced once, numbered 0..n-1
        assert trace_calls(Path(f"{prefix}.{r}.csv")) == set(range(nthreads * iterations))


@pytest.mark.mpi
def test_trace_never_follows_a_symlink_nor_writes_a_fifo(tmp_path, threads_app):
    """A symlink at PREFIX.0.csv stays a symlink and its target untouched; a FIFO at
    PREFIX.1.csv neither hangs the call nor is replaced; the collectives still complete,
    with one line per refused path. A stale regular file is overwritten by the new run."""
    sched = make_schedule(tmp_path / "ring.sched", "ring", 3, bytes_max=1 << 20)
    prefix = tmp_path / "trace"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    os.symlink(victim, f"{prefix}.0.csv")
    os.mkfifo(f"{prefix}.1.csv")
    stale = Path(f"{prefix}.2.csv")
    stale.write_text("stale line from an earlier run\n")
    proc = run_app(threads_app, 3, 1, 5, 8,
                   env={"COLLSCHED_SCHEDULES": str(sched), "COLLSCHED_TRACE": str(prefix)})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "threads_app: OK calls=15 scheduled=15" in proc.stdout, proc.stdout
    assert victim.read_text() == "keep me\n"
    assert os.path.islink(f"{prefix}.0.csv")
    assert stat.S_ISFIFO(os.lstat(f"{prefix}.1.csv").st_mode)
    assert trace_calls(stale) == set(range(5))  # truncated at the first call, then appended
    refusals = [ln for ln in proc.stderr.splitlines() if "COLLSCHED_TRACE" in ln]
    assert sorted(refusals) == sorted([
        f"collsched: COLLSCHED_TRACE: not writing {prefix}.0.csv: it is a symbolic link",
        f"collsched: COLLSCHED_TRACE: not writing {prefix}.1.csv: it is not a regular file"]), proc.stderr


@pytest.mark.mpi
def test_pat_progress_thread_with_tracing(tmp_path):
    """The PAT engine's progress thread and the calling thread share the engine (and the
    call is traced): every byte right, under ASan and TSan too."""
    minibench = BUILD / "bin" / "collsched-minibench"
    if not minibench.exists():
        pytest.skip(f"{minibench} not built (make lab)")
    cmd = mpirun_cmd(4) + [str(minibench), "--bytes", "4096", "--iterations", "4", "--flat-iterations", "1",
                           "--max-delay-ms", "3", "--seed", "7", "--pat", "bdr", "--pat-tau", "2e-4"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "COLLSCHED_VERBOSE": "1", "COLLSCHED_TRACE": str(tmp_path / "pat")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"data_ok": true' in proc.stdout, proc.stdout
    assert "(thread driver)" in proc.stderr
    assert all(Path(f"{tmp_path / 'pat'}.{r}.csv").stat().st_size > 0 for r in range(4))
