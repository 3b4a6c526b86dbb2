"""Fortran programs under the preload library (docs/runtime.md, "Fortran"). Open MPI's
Fortran bindings call PMPI_* directly, so the C wrappers never saw a Fortran program's
collectives; preload_fortran.c takes over the Fortran names. The program
(runtime/fortran/allgather_check.F90, built by `make runtime` for include 'mpif.h', use mpi
and use mpi_f08) checks every element it receives against values it computes itself; the
arrival trace (COLLSCHED_ARRIVALS, read with the compiler's reader) says, call by call,
whether a schedule ran and from which call site, and whether the preload's MPI_Init hook
ran (the start estimate of the clocks)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from collsched.patterns.tracefile import read_trace
from rt_helpers import BUILD, ROOT, TIMEOUT, mpirun_cmd
from test_install import FORTRAN_ROUTINES, fortran_names
from test_preload_mpi import preload_env

BINDINGS = ("mpif", "mpi", "f08")
# calls each program makes on MPI_COMM_WORLD in check mode: allgather, allgather in place,
# allgatherv, allgatherv in place; with use mpi_f08 also an allgather and an allgatherv in
# place without ierror
CALLS = {"mpif": 4, "mpi": 4, "f08": 6}
COLLECTIVES = {"mpif": [1, 1, 2, 2], "mpi": [1, 1, 2, 2], "f08": [1, 1, 2, 2, 1, 2]}
COUNT = 37  # integers per rank (the program's default)
REFUSED = ("collsched: COLLSCHED_STRICT=1: MPI_Allgather refused on a communicator of 4 ranks "
           "(16 bytes per rank), no fallback to the MPI library: {}: nranks: expected 4 "
           "(communicator size), found 8")


def fortran_dir() -> Path:
    d = BUILD / "fortran"  # an ASan build (COLLSCHED_BUILD) has its library, not these programs
    return d if d.is_dir() else ROOT / "build" / "fortran"


def program(binding: str) -> Path:
    if not shutil.which("mpifort"):
        pytest.skip("mpifort not installed: the Fortran programs are not built")
    exe = fortran_dir() / f"collsched-fortran-{binding}"
    if not exe.exists():
        pytest.skip(f"{exe} not built (make runtime)")
    return exe


def compile_schedule(out: Path, algorithm: str, nranks: int, segments: int = 1) -> Path:
    cli = ROOT / ".venv" / "bin" / "collsched"
    cmd = [str(cli)] if cli.exists() else [sys.executable, "-m", "collsched"]
    subprocess.run(cmd + ["compile", "--algorithm", algorithm, "--ranks", str(nranks),
                          "--bytes", "1:1MiB", "--segments", str(segments), "-o", str(out)],
                   check=True, capture_output=True, timeout=TIMEOUT)
    return out


@pytest.fixture(scope="module")
def schedules(tmp_path_factory) -> dict:
    """A directory per algorithm with its files for 3 and 4 ranks; a single file for 8."""
    root = tmp_path_factory.mktemp("fortran-schedules")
    out = {}
    for alg in ("ring", "bruck"):
        (root / alg).mkdir()
        for p in (3, 4):
            compile_schedule(root / alg / f"{alg}-p{p}.sched", alg, p)
        out[alg] = root / alg
    out["p8"] = compile_schedule(root / "ring-p8.sched", "ring", 8)
    return out


def run(exe: Path, nranks: int, env: dict, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(mpirun_cmd(nranks) + [str(exe), *args], capture_output=True, text=True,
                              timeout=120, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{exe.name} hung")


def collsched_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("collsched:")]


def ok_line(binding: str, nranks: int) -> str:
    return f"collsched-fortran {binding}: ranks {nranks} calls {CALLS[binding]} OK"


def check_trace(trace: Path, exe: Path, binding: str, nranks: int, ran: bool, count: int = COUNT) -> None:
    """Every Fortran call recorded, in order, from its own call site in the program (not
    from inside Open MPI's Fortran library), a schedule run (or not) as expected, and the
    clocks estimated at MPI_Init as well as at MPI_Finalize."""
    tr = read_trace(trace)
    assert tr.world_size == nranks
    calls = tr.calls
    assert [c.collective for c in calls] == COLLECTIVES[binding], calls
    assert all(c.comm == calls[0].comm and tr.comms[c.comm].size == nranks for c in calls)
    assert [c.seq for c in calls] == list(range(len(calls)))
    assert all(bool(c.flags & 1) == ran for c in calls), [c.flags for c in calls]
    assert all(c.bytes == 4 * count for c in calls if c.collective == 1), calls
    sites = [tr.sites[c.site] for c in calls]
    assert all(s.startswith(exe.name + "+0x") for s in sites), sites
    assert len(set(sites)) == len(calls), sites  # every call statement its own site
    # the start estimate exists (preload's MPI_Init hook): without it both columns are the
    # finalize estimate, equal on every rank
    assert any(tr.offsets[r][0] != tr.offsets[r][1] for r in range(1, nranks)), tr.offsets


@pytest.mark.mpi
@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("nranks,algorithm", [(3, "ring"), (4, "bruck")])
def test_fortran_calls_run_the_schedule(schedules, tmp_path, binding, nranks, algorithm):
    exe = program(binding)
    trace = tmp_path / "run.trace"
    env = preload_env(schedules[algorithm])
    env["COLLSCHED_ARRIVALS"] = str(trace)
    proc = run(exe, nranks, env)
    assert proc.returncode == 0 and ok_line(binding, nranks) in proc.stdout, proc.stdout + proc.stderr
    chosen = schedules[algorithm] / f"{algorithm}-p{nranks}.sched"
    assert proc.stderr.count(f"communicator of {nranks} ranks: selected {chosen}") == 1, proc.stderr
    assert "falling back" not in proc.stderr, proc.stderr
    check_trace(trace, exe, binding, nranks, ran=True)


@pytest.mark.mpi
@pytest.mark.parametrize("binding", ["mpif", "f08"])
def test_large_blocks_segmented_schedule(tmp_path, binding):
    """100,000 integers per rank (400 KB; the allgatherv's blocks 800 KB) through a ring of
    4 segments per block: large messages between Fortran buffers, every element checked."""
    exe = program(binding)
    d = tmp_path / "schedules"
    d.mkdir()
    sched = compile_schedule(d / "ring4-p3.sched", "ring", 3, segments=4)
    trace = tmp_path / "run.trace"
    env = preload_env(d)
    env["COLLSCHED_ARRIVALS"] = str(trace)
    proc = run(exe, 3, env, "check", "100000")
    assert proc.returncode == 0 and ok_line(binding, 3) in proc.stdout, proc.stdout + proc.stderr
    assert f"selected {sched} (algorithm ring, nseg 4" in proc.stderr, proc.stderr
    check_trace(trace, exe, binding, 3, ran=True, count=100000)


@pytest.mark.mpi
@pytest.mark.parametrize("binding", ["mpif", "f08"])
def test_fortran_init_thread(schedules, tmp_path, binding):
    """MPI_Init_thread from Fortran: the same hook, the same service."""
    exe = program(binding)
    trace = tmp_path / "run.trace"
    env = preload_env(schedules["ring"])
    env["COLLSCHED_ARRIVALS"] = str(trace)
    proc = run(exe, 4, env, "check-thread")
    assert proc.returncode == 0 and ok_line(binding, 4) in proc.stdout, proc.stdout + proc.stderr
    assert "selected " + str(schedules["ring"] / "ring-p4.sched") in proc.stderr, proc.stderr
    check_trace(trace, exe, binding, 4, ran=True)


@pytest.mark.mpi
@pytest.mark.parametrize("binding", BINDINGS)
def test_native_and_preload_alone(binding):
    """Without the preload the program runs on Open MPI alone; preloaded with nothing
    configured, every call goes straight to the MPI library and nothing is said."""
    exe = program(binding)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("COLLSCHED_") and k != "LD_PRELOAD"}
    proc = run(exe, 3, env)
    assert proc.returncode == 0 and ok_line(binding, 3) in proc.stdout, proc.stdout + proc.stderr
    assert "collsched:" not in proc.stderr
    proc = run(exe, 4, preload_env(None, verbose=False))
    assert proc.returncode == 0 and ok_line(binding, 4) in proc.stdout, proc.stdout + proc.stderr
    assert "collsched:" not in proc.stderr, proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("binding", BINDINGS)
def test_mismatch_falls_back_with_data_right(schedules, tmp_path, binding):
    """A schedule for 8 ranks under 4: one line, every call served by the MPI library
    (recorded, no schedule ran), the data right."""
    exe = program(binding)
    trace = tmp_path / "run.trace"
    env = preload_env(schedules["p8"], verbose=False)
    env["COLLSCHED_ARRIVALS"] = str(trace)
    proc = run(exe, 4, env)
    assert proc.returncode == 0 and ok_line(binding, 4) in proc.stdout, proc.stdout + proc.stderr
    assert collsched_lines(proc.stderr) == [
        f"collsched: {schedules['p8']}: nranks: expected 4 (communicator size), found 8: "
        "falling back to the MPI library"], proc.stderr
    check_trace(trace, exe, binding, 4, ran=False)


@pytest.mark.mpi
@pytest.mark.parametrize("binding", ["mpif", "f08"])
def test_strict_mode_runs_a_matching_schedule(schedules, binding):
    exe = program(binding)
    env = preload_env(schedules["bruck"])
    env["COLLSCHED_STRICT"] = "1"
    proc = run(exe, 3, env)
    assert proc.returncode == 0 and ok_line(binding, 3) in proc.stdout, proc.stdout + proc.stderr
    assert "selected " + str(schedules["bruck"] / "bruck-p3.sched") in proc.stderr, proc.stderr
    assert "refused" not in proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("binding", BINDINGS)
def test_strict_refusal_returns_through_ierror(schedules, binding):
    """MPI_ERRORS_RETURN: both collectives give ierror of class MPI_ERR_OTHER (with use
    mpi_f08 also called without ierror: nothing written through a null pointer); one line
    says what was refused, as for C (test_fallback_mpi.py)."""
    exe = program(binding)
    env = preload_env(schedules["p8"], verbose=False)
    env["COLLSCHED_STRICT"] = "1"
    proc = run(exe, 4, env, "return")
    assert proc.returncode == 0 and f"collsched-fortran {binding}: refused OK" in proc.stdout, \
        proc.stdout + proc.stderr
    assert collsched_lines(proc.stderr) == [REFUSED.format(schedules["p8"])], proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("binding", BINDINGS)
def test_strict_refusal_aborts_with_the_default_handler(schedules, binding):
    exe = program(binding)
    env = preload_env(schedules["p8"], verbose=False)
    env["COLLSCHED_STRICT"] = "1"
    proc = run(exe, 4, env, "fatal")
    assert proc.returncode != 0 and "returned" not in proc.stdout, proc.stdout + proc.stderr
    assert REFUSED.format(schedules["p8"]) in collsched_lines(proc.stderr), proc.stderr


def defined_symbols(lib: Path) -> dict[str, int]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    return {f[2]: int(f[0], 16) for f in (ln.split() for ln in out.splitlines()) if len(f) == 3}


@pytest.mark.mpi
def test_every_open_mpi_fortran_name_is_taken_over():
    """The names the preload library exports for each routine are exactly those under which
    Open MPI's own Fortran libraries (found through the f08 program's ldd) export its
    binding: every alias of libmpi_mpifh's ompi_X_f but the pmpi_/PMPI_ ones, and
    libmpi_usempif08's mpi_X_f08_; all of them one function."""
    exe = program("f08")
    preload = BUILD / "lib" / "libcollsched-preload.so"
    if not preload.exists():
        pytest.skip(f"{preload} not built")
    if not shutil.which("nm") or not shutil.which("ldd"):
        pytest.skip("nm or ldd missing")
    libs = {}
    for line in subprocess.run(["ldd", str(exe)], capture_output=True, text=True, check=True).stdout.splitlines():
        parts = line.split()
        if "=>" in parts and parts[0].startswith(("libmpi_mpifh.so", "libmpi_usempif08.so")):
            libs[parts[0].split(".so")[0]] = Path(parts[2])
    assert set(libs) == {"libmpi_mpifh", "libmpi_usempif08"}, libs
    mpifh, f08 = defined_symbols(libs["libmpi_mpifh"]), defined_symbols(libs["libmpi_usempif08"])
    by_address = defaultdict(set)
    for name, addr in mpifh.items():
        by_address[addr].add(name)
    ours = defined_symbols(preload)
    for routine in FORTRAN_ROUTINES:
        theirs = {n for n in by_address[mpifh[f"ompi_{routine}_f"]]
                  if not n.lower().startswith("pmpi") and n != f"ompi_{routine}_f"}
        assert f"mpi_{routine}_f08_" in f08
        theirs.add(f"mpi_{routine}_f08_")
        assert theirs == fortran_names(routine), (routine, sorted(theirs ^ fortran_names(routine)))
        assert theirs <= set(ours), sorted(theirs - set(ours))
        # one function under every name: the names the programs above call (gfortran's
        # mpi_x_ and mpi_x_f08_) stand for all of them
        assert len({ours[n] for n in theirs}) == 1, routine


@pytest.mark.mpi
@pytest.mark.parametrize("binding", ["mpif", "f08"])
def test_schedule_cache_and_its_statistics(tmp_path, binding):
    """A schedule cache (`collsched tune`: regular allgather entries for 4 ranks) serves the
    Fortran program's allgathers per call site, and COLLSCHED_STATS is written by the
    preload's MPI_Finalize hook called from Fortran: one row per call statement, named by
    the program's own site (the cache has no allgatherv entry: those fall back)."""
    exe = program(binding)
    cli = ROOT / ".venv" / "bin" / "collsched"
    cmd = [str(cli)] if cli.exists() else [sys.executable, "-m", "collsched"]
    subprocess.run(cmd + ["tune", "--ranks", "4", "--bytes", "1,148", "--algorithms", "ring,bruck",
                          "-o", str(tmp_path / "tuned")], check=True, capture_output=True, timeout=TIMEOUT)
    stats = tmp_path / "stats.yaml"
    env = preload_env(tmp_path / "tuned", verbose=False)
    env["COLLSCHED_STATS"] = str(stats)
    proc = run(exe, 4, env)
    assert proc.returncode == 0 and ok_line(binding, 4) in proc.stdout, proc.stdout + proc.stderr
    rows = yaml.safe_load(stats.read_text())["sites"]
    gathers = [r for r in rows if r["collective"] == "allgather"]
    assert len(gathers) == COLLECTIVES[binding].count(1), rows
    assert len(rows) == CALLS[binding], rows
    for r in rows:
        assert r["ranks"] == 4 and r["calls"] == 1 and r["site"].startswith(exe.name + "+0x"), r
        if r["collective"] == "allgather":
            assert r["fallback"] == 0 and [u["class"] for u in r["used"]] == ["regular"], r
        else:
            assert r["fallback"] == 1 and r["missed"]["no-entry"] == 1, r
