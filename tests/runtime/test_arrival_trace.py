"""COLLSCHED_ARRIVALS: the arrival trace (docs/trace-format.md), written at finalize by rank
0, checked against what the programs themselves saw: their own MPI_Wtime readings around
every call, the delays they injected, their call sites and communicators. Real MPI
(preload and API paths, odd and even P) and SimGrid SMPI (one clock: the offsets must come
out below a microsecond and the arrivals equal the program's readings)."""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from collsched.patterns.tracefile import read_trace as collsched_read_trace
from rt_helpers import APPS, BUILD, DATA, ROOT, TIMEOUT, build_mpi_app, mpirun_cmd

SMPI_BUILD = Path(os.environ.get("COLLSCHED_SMPI_BUILD", ROOT / "build" / "smpi"))
DELAY = 0.08      # seconds the delayed rank sleeps before world_step on odd iterations
ITERS = 4


# --- a reader of the file, independent of the compiler's ---------------------------------

def read_trace(path: Path) -> dict:
    data = path.read_bytes()
    assert data[:8] == b"CSATRACE"
    assert struct.unpack_from("<I", data, len(data) - 4)[0] == zlib.crc32(data[:-4])
    version, flags, world, nsites, ncomms, reserved, ncalls, t0 = struct.unpack_from("<IIIIIIQd", data, 8)
    assert version == 1 and reserved == 0 and flags & ~1 == 0
    pos = 8 + 40
    sites = []
    for _ in range(nsites):
        (n,) = struct.unpack_from("<H", data, pos)
        name = data[pos + 2:pos + 2 + n].decode()
        assert 1 <= n <= 255 and name.isprintable() and " " not in name
        sites.append(name)
        pos += 2 + n
    comms = []
    for _ in range(ncomms):
        cid, size = struct.unpack_from("<QI", data, pos)
        comms.append((cid, list(struct.unpack_from(f"<{size}I", data, pos + 12))))
        pos += 12 + 4 * size
    offsets = [struct.unpack_from("<dd", data, pos + 16 * r) for r in range(world)]
    pos += 16 * world
    calls = []
    for _ in range(ncalls):
        site, comm, coll, cflags, res, seq, nbytes, base = struct.unpack_from("<IIBBHIQd", data, pos)
        size = len(comms[comm][1])
        vals = struct.unpack_from(f"<{2 * size}f", data, pos + 32)
        calls.append(dict(site=sites[site], comm=comm, collective=coll, flags=cflags, seq=seq,
                          bytes=nbytes, base=base, arrivals=list(vals[:size]),
                          exits=list(vals[size:]), reserved=res))
        pos += 32 + 8 * size
    assert pos == len(data) - 4, "trailing bytes"
    return dict(flags=flags, world=world, t0=t0, sites=sites, comms=comms, offsets=offsets,
                calls=calls)


def true_offsets(stdout: str) -> dict:
    """world rank -> seconds to add to its MPI_Wtime to get rank 0's, from the program's
    reading of MPI_Wtime - CLOCK_MONOTONIC (one node: one monotonic clock)."""
    origin = {int(x.split()[1]): float(x.split()[2]) for x in stdout.splitlines()
              if x.startswith("origin ")}
    return {r: origin[0] - o for r, o in origin.items()}


def app_readings(stdout: str) -> dict:
    """(comm, seq, rank) -> (before, after): the program's MPI_Wtime around its calls."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("call "):
            _, c, s, r, b, a = line.split()
            out[int(c), int(s), int(r)] = (float(b), float(a))
    return out


# --- the programs -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def apps(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("trace-apps")
    # -rdynamic: the functions are in the dynamic symbol table, so dladdr names them
    return {"plain": build_mpi_app(d / "trace_app", "trace_app.c", "-rdynamic"),
            "api": build_mpi_app(d / "trace_api", "trace_app.c", "-rdynamic", "-DUSE_API", linked=True),
            "api_nofin": build_mpi_app(d / "trace_api_nofin", "trace_app.c", "-rdynamic", "-DUSE_API",
                                       "-DNO_FINALIZE", linked=True),
            "allgather_app": build_mpi_app(d / "allgather_app", "allgather_app.c")}


def preload(env: dict) -> dict:
    lib = BUILD / "lib" / "libcollsched-preload.so"
    if not lib.exists():
        pytest.skip(f"{lib} not built")
    libs = [str(lib)]
    if os.environ.get("COLLSCHED_ASAN"):  # an ASan-built library needs the runtime first
        libs.insert(0, subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                                      text=True).stdout.strip())
    return dict(env, LD_PRELOAD=" ".join(libs))


def base_env(trace: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("COLLSCHED_SCHEDULES", "COLLSCHED_ARRIVALS", "LD_PRELOAD")}
    if trace is not None:
        env["COLLSCHED_ARRIVALS"] = str(trace)
    return env


def run(cmd: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)


def app_args(nranks: int, nbytes: int = 1000) -> list[str]:
    return [str(ITERS), str(nbytes), str(nranks - 1), str(DELAY)]


# --- what every trace of trace_app must show -----------------------------------------------

def check_trace_app(tr: dict, nranks: int, readings: dict, labels: bool, clock_tol: float,
                    nbytes: int = 1000):
    assert tr["world"] == nranks
    world = list(range(nranks))
    even, odd = world[0::2], world[1::2]
    members = sorted(c[1] for c in tr["comms"])
    assert members == sorted([world, even, odd] if odd else [world, even])
    ids = [c[0] for c in tr["comms"]]
    assert len(set(ids)) == len(ids)
    index = {tuple(c[1]): i for i, c in enumerate(tr["comms"])}
    app_comm = {index[tuple(world)]: 0, index[tuple(even)]: 1}
    if odd:
        app_comm[index[tuple(odd)]] = 1
    calls = tr["calls"]
    assert len(calls) == 2 * ITERS + ITERS * (2 if odd else 1)
    assert [(c["comm"], c["seq"]) for c in calls] == sorted((c["comm"], c["seq"]) for c in calls)
    for c in calls:
        assert c["reserved"] == 0 and c["flags"] & 2 == 0, c  # every rank named the site alike
        size = len(tr["comms"][c["comm"]][1])
        assert min(c["arrivals"]) == 0.0
        assert all(e >= a for a, e in zip(c["arrivals"], c["exits"])), c
        # nobody leaves an allgather before the last rank has come: the clocks agree
        assert min(c["exits"]) >= max(c["arrivals"]) - clock_tol, c
        if app_comm[c["comm"]] == 0:  # world: world_step (even seq), world_v (odd seq)
            i, step = divmod(c["seq"], 2)
            assert c["collective"] == (2 if step else 1)
            assert c["bytes"] == nbytes
            name = ("first_world" if labels and c["seq"] == 0 else
                    "world_v+0x" if step else "world_step+0x")
            assert c["site"].startswith(name), c
            if not step and i > 0:
                # each rank's time from its previous call's exit to this arrival: the delayed
                # rank slept DELAY in it on odd iterations, nobody else ever does
                prev = next(p for p in calls if p["comm"] == c["comm"] and p["seq"] == c["seq"] - 1)
                gaps = [c["base"] + a - (prev["base"] + e) for a, e in zip(c["arrivals"], prev["exits"])]
                slept = [r for r, g in enumerate(gaps) if g >= DELAY - 1e-4]
                assert slept == ([nranks - 1] if i % 2 else []), (gaps, c)
                if i % 2:  # so it comes about DELAY later than the others (less their exits' skew)
                    late = c["arrivals"][nranks - 1] - max(c["arrivals"][:nranks - 1])
                    assert DELAY - 0.02 <= late <= DELAY + 0.06, c
            app_seq = i
            kind = 2 if step else 0
        else:
            assert c["collective"] == 1 and c["bytes"] == nbytes
            assert c["site"] == "halo" if labels else c["site"].startswith("split_step+0x"), c
            app_seq, kind = c["seq"], 1
        # the trace's times, back on each rank's clock, lie within the program's readings
        ranks = tr["comms"][c["comm"]][1]
        for r, w in enumerate(ranks):
            before, after = readings[kind, app_seq, w]
            off = tr["offsets"][w][1]
            t_arr = tr["t0"] + c["base"] + c["arrivals"][r] - off
            t_exit = tr["t0"] + c["base"] + c["exits"][r] - off
            assert before - clock_tol <= t_arr <= after + clock_tol, (c, w, before, t_arr)
            assert before - clock_tol <= t_exit <= after + clock_tol, (c, w, after, t_exit)
        assert size == len(ranks)


# --- real MPI ---------------------------------------------------------------------------------

@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [3, 4])
def test_preload_trace_of_an_unmodified_program(apps, tmp_path, nranks):
    trace = tmp_path / "run.trace"
    proc = run(mpirun_cmd(nranks) + [str(apps["plain"])] + app_args(nranks), preload(base_env(trace)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"trace_app: ranks {nranks} data_ok 1" in proc.stdout
    assert "collsched" not in proc.stderr, proc.stderr
    tr = read_trace(trace)
    assert tr["flags"] & 1  # Open MPI's clocks are per process: offsets estimated and applied
    # the estimates (start and end) against the true offsets (a wrong sign would double them)
    truth = true_offsets(proc.stdout)
    assert all(abs(tr["offsets"][r][k] - truth[r]) < 5e-5 for r in range(nranks) for k in (0, 1)), \
        (tr["offsets"], truth)
    check_trace_app(tr, nranks, app_readings(proc.stdout), labels=False, clock_tol=2e-3)
    assert list(tmp_path.iterdir()) == [trace]  # no temporary file left
    # the compiler's reader (every check of docs/trace-format.md) reads the same
    theirs = collsched_read_trace(trace)
    assert list(theirs.sites) == tr["sites"] and theirs.ncalls == len(tr["calls"])


@pytest.mark.mpi
def test_api_trace_labels_without_collsched_finalize(apps, tmp_path):
    """Linked against libcollsched, collsched_label/PAT_Label name the sites, and the trace
    is written at MPI_Finalize although the program never calls collsched_finalize."""
    trace = tmp_path / "api.trace"
    proc = run(mpirun_cmd(4) + [str(apps["api_nofin"])] + app_args(4), base_env(trace))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "trace_app: ranks 4 data_ok 1" in proc.stdout
    tr = read_trace(trace)
    check_trace_app(tr, 4, app_readings(proc.stdout), labels=True, clock_tol=2e-3)
    # no start estimate on this path: the finalize one serves for both, and is right
    truth = true_offsets(proc.stdout)
    assert all(s == e and abs(e - truth[r]) < 5e-5 for r, (s, e) in enumerate(tr["offsets"])), \
        (tr["offsets"], truth)
    # and `collsched trace` reports it per call site
    cli = ROOT / ".venv" / "bin" / "collsched"
    if cli.exists():
        rep = subprocess.run([str(cli), "trace", str(trace), "--json"], capture_output=True, text=True,
                             timeout=TIMEOUT)
        assert rep.returncode == 0, rep.stderr
        sites = {s["site"] for s in json.loads(rep.stdout)["sites"]}
        assert {"first_world", "halo"} <= sites and any(x.startswith("world_step+0x") for x in sites)


@pytest.mark.mpi
def test_api_trace_with_collsched_finalize_at_64k(apps, tmp_path):
    trace = tmp_path / "api64k.trace"
    proc = run(mpirun_cmd(5) + [str(apps["api"])] + app_args(5, 65536), base_env(trace))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_trace_app(read_trace(trace), 5, app_readings(proc.stdout), labels=True, clock_tol=2e-3,
                    nbytes=65536)


@pytest.mark.mpi
def test_module_offsets_name_sites_of_a_program_without_symbols(apps, tmp_path):
    """allgather_app's functions are static and not exported: its sites are
    allgather_app+0xOFFSET, the same on every rank (no 'sites differ' flag)."""
    trace = tmp_path / "ag.trace"
    proc = run(mpirun_cmd(4) + [str(apps["allgather_app"])], preload(base_env(trace)))
    assert proc.returncode == 0 and "allgather_app: OK" in proc.stdout, proc.stdout + proc.stderr
    tr = read_trace(trace)
    assert all(re.fullmatch(r"allgather_app\+0x[0-9a-f]+", s) for s in tr["sites"]), tr["sites"]
    assert len(tr["sites"]) >= 5
    assert sorted(c[1] for c in tr["comms"]) == [[0, 1, 2, 3], [0, 2], [1, 3]]
    by_comm = {}
    for c in tr["calls"]:
        assert c["flags"] & 2 == 0
        by_comm.setdefault(c["comm"], []).append(c["seq"])
    assert all(seqs == list(range(len(seqs))) for seqs in by_comm.values())
    assert sorted(len(s) for s in by_comm.values()) == [30, 30, 3 * (5 * 3 + 3)]


@pytest.mark.mpi
def test_tracing_off_writes_nothing(apps, tmp_path):
    env = preload(base_env(None))
    for value in (None, ""):  # unset, and empty: off
        if value is not None:
            env["COLLSCHED_ARRIVALS"] = value
        proc = subprocess.run(mpirun_cmd(2) + [str(apps["plain"])] + app_args(2), capture_output=True,
                              text=True, timeout=TIMEOUT, env=env, cwd=tmp_path)
        assert proc.returncode == 0 and "data_ok 1" in proc.stdout, proc.stderr
        assert list(tmp_path.iterdir()) == [] and "collsched" not in proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("where", ["missing-dir", "directory"])
def test_unwritable_trace_path_is_one_line(apps, tmp_path, where):
    target = tmp_path / "no" / "such" / "t.trace" if where == "missing-dir" else tmp_path
    before = sorted(tmp_path.iterdir())
    proc = run(mpirun_cmd(3) + [str(apps["api"])] + app_args(3), base_env(target))
    assert proc.returncode == 0 and "data_ok 1" in proc.stdout, proc.stdout + proc.stderr
    lines = [x for x in proc.stderr.splitlines() if "collsched" in x]
    assert len(lines) == 1 and lines[0].startswith(f"collsched: COLLSCHED_ARRIVALS={target}: "), proc.stderr
    assert sorted(tmp_path.iterdir()) == before  # nothing half-written


# --- SimGrid SMPI: one clock ----------------------------------------------------------------------

def smpi_app(tmp_path: Path) -> Path:
    lib = SMPI_BUILD / "lib" / "libcollsched.a"
    if not shutil.which("smpicc") or not shutil.which("smpirun") or not lib.exists():
        pytest.skip("smpicc/smpirun or the SMPI build of libcollsched missing")
    exe = tmp_path / "trace_smpi"
    subprocess.run(["smpicc", "-O1", "-rdynamic", "-DUSE_API", f"-I{ROOT / 'runtime' / 'include'}",
                    str(APPS / "trace_app.c"), str(lib), "-o", str(exe)],
                   check=True, capture_output=True, timeout=TIMEOUT)
    return exe


@pytest.mark.mpi
@pytest.mark.smpi
@pytest.mark.parametrize("nranks", [3, 4])
def test_smpi_trace_is_exact(tmp_path, nranks):
    exe = smpi_app(tmp_path)
    trace = tmp_path / "smpi.trace"
    cmd = ["smpirun", "-np", str(nranks), "-platform", str(DATA / "platform-4.xml"),
           "-hostfile", str(DATA / "hostfile-4.txt"), "--cfg=smpi/display-timing:no",
           "--log=root.thr:warning", str(exe)] + app_args(nranks)
    proc = run(cmd, base_env(trace))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"trace_app: ranks {nranks} data_ok 1" in proc.stdout
    tr = read_trace(trace)
    # SMPI's clock is global: estimated all the same, below a microsecond, not applied
    assert tr["flags"] & 1 == 0
    assert all(abs(s) < 1e-6 and abs(e) < 1e-6 for s, e in tr["offsets"]), tr["offsets"]
    readings = app_readings(proc.stdout)
    # arrivals equal the program's own readings (to the f32 offsets' precision)
    check_trace_app(tr, nranks, readings, labels=True, clock_tol=1e-7)
    for c in tr["calls"]:
        if tr["comms"][c["comm"]][1] == list(range(nranks)) and c["seq"] % 4 == 2:
            late = c["arrivals"][nranks - 1] - max(c["arrivals"][:nranks - 1])
            # the injected delay, plus how much later it left the previous call
            assert DELAY - 1e-7 <= late < DELAY + 1e-3, c  # (f32 offsets)


NOSYM_APP = r"""
#include <mpi.h>
#include <stdio.h>
#include "collsched.h"
/* hidden: not in the dynamic symbol table, so dladdr names it by module+offset */
__attribute__((visibility("hidden"), noinline)) static int gather(int *in, int *out)
{
    return collsched_allgather(in, 1, MPI_INT, out, 1, MPI_INT, MPI_COMM_WORLD);
}
int main(int argc, char **argv)
{
    int rank, size, in, out[64], ok = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int k = 0; k < 3; k++) {
        in = 100 * k + rank;
        gather(&in, out);
        for (int p = 0; p < size; p++) ok &= out[p] == 100 * k + p;
    }
    collsched_finalize();
    if (rank == 0) printf("nosym: data_ok %d\n", ok);
    MPI_Finalize();
    return 0;
}
"""


@pytest.mark.mpi
@pytest.mark.smpi
def test_smpi_sites_agree_without_symbols(tmp_path):
    """SMPI runs each rank from its own copy of the program (NAME_PID_RANK.so): a site
    named by module+offset (a function not in the dynamic symbol table) must not take the
    copy's suffix, or the ranks name one call site differently (the cache switches off)."""
    lib = SMPI_BUILD / "lib" / "libcollsched.a"
    if not shutil.which("smpicc") or not shutil.which("smpirun") or not lib.exists():
        pytest.skip("smpicc/smpirun or the SMPI build of libcollsched missing")
    src = tmp_path / "nosym.c"
    src.write_text(NOSYM_APP)
    exe = tmp_path / "nosym"
    subprocess.run(["smpicc", "-O1", f"-I{ROOT / 'runtime' / 'include'}", str(src), str(lib), "-o", str(exe)],
                   check=True, capture_output=True, timeout=TIMEOUT)
    trace = tmp_path / "nosym.trace"
    cmd = ["smpirun", "-np", "3", "-platform", str(DATA / "platform-4.xml"),
           "-hostfile", str(DATA / "hostfile-4.txt"), "--cfg=smpi/display-timing:no",
           "--log=root.thr:warning", str(exe)]
    proc = run(cmd, base_env(trace))
    assert proc.returncode == 0 and "nosym: data_ok 1" in proc.stdout, proc.stdout + proc.stderr
    tr = read_trace(trace)
    assert len(tr["calls"]) == 3
    assert all(c["site"].startswith("nosym+0x") for c in tr["calls"]), [c["site"] for c in tr["calls"]]
    assert all(c["flags"] & 2 == 0 for c in tr["calls"]), [c["site"] for c in tr["calls"]]


@pytest.mark.mpi
def test_threads_record_their_own_communicators(tmp_path):
    """MPI_THREAD_MULTIPLE: 3 threads per rank, each on its own MPI_Comm_dup, append to the
    one buffer at once; every call of every thread is in the trace, complete (written at
    MPI_Finalize: threads_app never calls collsched_finalize)."""
    exe = build_mpi_app(tmp_path / "threads_app", "threads_app.c", "-std=c11", "-pthread", linked=True)
    trace = tmp_path / "threads.trace"
    proc = run(mpirun_cmd(3) + [str(exe), "3", "40", "16"], base_env(trace))
    if "threads_app: SKIP:" in proc.stdout:
        pytest.skip(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0 and "threads_app: OK calls=360" in proc.stdout, proc.stdout + proc.stderr
    tr = read_trace(trace)
    # three communicators with the same members: three ids (0, 1, 2 came before)
    assert [c[1] for c in tr["comms"]] == [[0, 1, 2]] * 3 and len({c[0] for c in tr["comms"]}) == 3
    assert len(tr["calls"]) == 3 * 40
    for k in range(3):
        assert [c["seq"] for c in tr["calls"] if c["comm"] == k] == list(range(40))
    assert all(c["bytes"] == 4 * (16 + c["seq"] % 3) for c in tr["calls"])


@pytest.mark.mpi
def test_pat_engine_calls_are_traced(tmp_path):
    """The PAT path: collsched-minibench's allgathers, served by the engine's online BDR
    schedules (flags bit 0: a schedule ran) after the first, learning call."""
    exe = BUILD / "bin" / "collsched-minibench"
    if not exe.exists():
        pytest.skip(f"{exe} not built (make lab)")
    trace = tmp_path / "pat.trace"
    proc = run(mpirun_cmd(4) + [str(exe), "--bytes", "65536", "--iterations", "3", "--flat-iterations",
                                "1", "--max-delay-ms", "5", "--seed", "1", "--pat", "bdr",
                                "--pat-tau", "5e-4"], base_env(trace))
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("{")))
    assert out["data_ok"] and out["errors"] == 0
    tr = read_trace(trace)
    assert [c[1] for c in tr["comms"]] == [[0, 1, 2, 3]]
    calls = tr["calls"]
    assert len(calls) >= 4 and all(c["bytes"] == 65536 for c in calls)
    assert sum(c["flags"] & 1 for c in calls) >= 3, calls


@pytest.mark.mpi
def test_a_freed_communicator_whose_handle_returns_is_a_new_one(tmp_path):
    exe = build_mpi_app(tmp_path / "reuse_app", "reuse_app.c")
    trace = tmp_path / "reuse.trace"
    proc = run(mpirun_cmd(3) + [str(exe)], preload(base_env(trace)))
    assert proc.returncode == 0 and "reuse_app: OK" in proc.stdout, proc.stdout + proc.stderr
    tr = read_trace(trace)
    assert [c[1] for c in tr["comms"]] == [[0, 1, 2]] * 4
    assert len({c[0] for c in tr["comms"]}) == 4
    assert [(c["comm"], c["seq"]) for c in tr["calls"]] == [(0, 0), (1, 0), (2, 0), (3, 0)]
    assert len(set(c["site"] for c in tr["calls"])) == 1  # one call site (no -rdynamic: main's module)
