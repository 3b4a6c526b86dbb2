"""The collectives beyond allgather in the runtime (docs/runtime.md "Alltoall, bcast, reduce
and allreduce"): schedules of file format 1.2 run by the preload library for an unmodified MPI
program (apps/coll_app.c) and by collsched-run, every result checked byte for byte against
the MPI library's own collective; fallback with a reason for files that do not fit the
call, strict mode's refusal, no hang (every launch has a timeout)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched.collectives.program import Builder, Program
from rt_helpers import BUILD, build_mpi_app, mpirun_cmd

LAUNCH_TIMEOUT = 60  # a hang fails the test


# ---- programs (hand-built with the IR's Builder; the algorithm families' own
# generators are tested the same way in test_generated_*) ----

def alltoall_pairwise(P: int, nseg: int = 1, fence: bool = False) -> Program:
    b = Builder("alltoall", P, nseg, algorithm="pairwise")
    for k in range(1, P):
        for r in range(P):
            d = (r + k) % P
            b.add(k, r, d, [(r, d, g) for g in range(nseg)], fence_recv=fence)
    return b.build()


def alltoall_relay(P: int, nseg: int = 2) -> Program:
    """Everything via the next rank: one message of every block but the own to r + 1
    (places over several blocks), which keeps the relayed ones in scratch and forwards
    them (FIFO sends)."""
    b = Builder("alltoall", P, nseg, algorithm="relay")
    for r in range(P):
        m = (r + 1) % P
        b.add(0, r, m, [(r, d, g) for d in range(P) if d != r for g in range(nseg)])
    for r in range(P):
        m = (r + 1) % P
        for d in range(P):
            if d not in (r, m):
                b.add(1, m, d, [(r, d, g) for g in range(nseg)], fifo=True)
    return b.build()


def bcast_chain(P: int, nseg: int, root: int) -> Program:
    b = Builder("bcast", P, nseg, root=root, algorithm="chain")
    chain = [(root + i) % P for i in range(P)]
    for i in range(P - 1):
        for g in range(nseg):
            b.add(i + g, chain[i], chain[i + 1], [(0, 0, g)], fifo=True)
    return b.build()


def bcast_binomial(P: int, nseg: int, root: int) -> Program:
    b = Builder("bcast", P, nseg, root=root, algorithm="binomial")
    k = 1
    step = 0
    while k < P:
        for rel in range(k):
            if rel + k < P:
                b.add(step, (rel + root) % P, (rel + k + root) % P, [(0, 0, g) for g in range(nseg)])
        k *= 2
        step += 1
    return b.build()


def reduce_chain_ordered(P: int, nseg: int, root: int) -> Program:
    """P-1 -> P-2 -> ... -> 0 combining acc (op) in (MPI's order), then 0 -> root."""
    b = Builder("reduce", P, nseg, root=root, algorithm="chain-ordered")
    for i in range(P - 1, 0, -1):
        for g in range(nseg):
            b.add((P - 1 - i) + g, i, i - 1, [(0, 0, g)], reduce=True, local_first=True)
    if root != 0:
        b.add(P + nseg, 0, root, [(0, 0, g) for g in range(nseg)])
    return b.build()


def reduce_ring(P: int, nseg: int, root: int) -> Program:
    """root+1 -> root+2 -> ... -> root, in (op) acc: not MPI's order (commutative only)."""
    b = Builder("reduce", P, nseg, root=root, algorithm="ring")
    chain = [(root + 1 + i) % P for i in range(P)]
    for i in range(P - 1):
        for g in range(nseg):
            b.add(i + g, chain[i], chain[i + 1], [(0, 0, g)], reduce=True)
    return b.build(commutative_only=True)


def allreduce_ring(P: int) -> Program:
    """Reduce-scatter then allgather on a ring, P segments (commutative only)."""
    b = Builder("allreduce", P, P, algorithm="ring")
    for k in range(P - 1):
        for r in range(P):
            b.add(k, r, (r + 1) % P, [(0, 0, (r - k) % P)], reduce=True)
    for k in range(P - 1):
        for r in range(P):
            b.add(P + k, r, (r + 1) % P, [(0, 0, (r + 1 - k) % P)])
    return b.build(commutative_only=True)


def allreduce_rd(P: int, nseg: int = 2) -> Program:
    """Recursive doubling (P a power of two), the lower rank of a pair combining acc (op)
    in: MPI's order. Each step sends the pieces, then receive-reduces the same pieces (the
    apply waits for that send to complete: rule 2)."""
    from collsched.collectives.program import RECV_REDUCE, SEND, Op, Piece
    pieces = tuple(Piece(0, 0, g) for g in range(nseg))
    ops: list[list[Op]] = [[] for _ in range(P)]
    k = 1
    while k < P:
        for r in range(P):
            q = r ^ k
            ops[r] += [Op(SEND, q, pieces), Op(RECV_REDUCE, q, pieces, local_first=q > r)]
        k *= 2
    return Program("allreduce", P, nseg, ops, algorithm="rd")


def allreduce_chain_ordered(P: int, nseg: int) -> Program:
    b = Builder("allreduce", P, nseg, algorithm="chain-ordered")
    for i in range(P - 1, 0, -1):
        for g in range(nseg):
            b.add((P - 1 - i) + g, i, i - 1, [(0, 0, g)], reduce=True, local_first=True)
    for i in range(P - 1):
        for g in range(nseg):
            b.add(P + nseg + i + g, i, i + 1, [(0, 0, g)], fifo=True)
    return b.build()


# ---- the file ----

def write(prog: Program, path: Path, bytes_min: int = 0, bytes_max: int = 1 << 30, *, proven: bool = True) -> Path:
    """The program as a 1.2 file serving [bytes_min, bytes_max]; proven: it must pass the
    Python verifier first (the hand-built programs are meant to be correct)."""
    from collsched.collectives import schedfile, verify
    if proven:
        assert verify.verify(prog) == [], prog.algorithm
    prog.bytes_min, prog.bytes_max = bytes_min, bytes_max
    path.write_bytes(schedfile.encode(prog))
    return path


# ---- launching ----

def preload_env(schedules: Path | None, **extra: str) -> dict:
    lib = BUILD / "lib" / "libcollsched-preload.so"
    if not lib.exists():
        pytest.skip(f"{lib} not built")
    env = dict(os.environ, LD_PRELOAD=str(lib))
    for k in ("COLLSCHED_SCHEDULES", "COLLSCHED_STRICT", "COLLSCHED_VERBOSE"):
        env.pop(k, None)
    if schedules is not None:
        env["COLLSCHED_SCHEDULES"] = str(schedules)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Path:
    return build_mpi_app(tmp_path_factory.mktemp("apps") / "coll_app", "coll_app.c", "-ldl")


def run_app(app: Path, P: int, env: dict, what: str, count: int, iters: int = 1, sleep_us: int = 0,
            root: int = 0):
    import json
    cmd = mpirun_cmd(P) + [str(app), what, str(count), str(iters), str(sleep_us), str(root)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT, env=env)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc, rows


def lines(proc) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("collsched:")]


# ---- tests ----

@pytest.mark.mpi
@pytest.mark.parametrize("P", [5, 8])
def test_alltoall_bcast_families_byte_for_byte(app, tmp_path, P):
    """Alltoall (pairwise with segments and fences, relayed through scratch with places over
    several blocks) and bcast (pipelined chain, binomial), odd and even P, with imbalance."""
    root = P - 2
    for name, prog, what in [("a2a-pair", alltoall_pairwise(P, 3, fence=True), "alltoall"),
                             ("a2a-relay", alltoall_relay(P, 2), "alltoall"),
                             ("bc-chain", bcast_chain(P, 4, root), "bcast"),
                             ("bc-binomial", bcast_binomial(P, 2, root), "bcast")]:
        f = write(prog, tmp_path / f"{name}.sched")
        proc, rows = run_app(app, P, preload_env(f), what, 37, iters=2, sleep_us=3000, root=root)
        assert proc.returncode == 0 and rows, (name, proc.stdout[-2000:], proc.stderr[-2000:])
        assert all(r["ok"] for r in rows), (name, [r for r in rows if not r["ok"]])
        assert all(r["used"] in (True, None) for r in rows), (name, rows)


@pytest.mark.mpi
@pytest.mark.parametrize("P", [3, 8])
def test_reductions_byte_for_byte(app, tmp_path, P):
    """Reduce and allreduce: every type x op x in place; commutative-only files never serve
    the non-commutative op (the ordered ones do); with imbalance."""
    d = tmp_path / "lib"
    d.mkdir()
    root = 1
    write(reduce_ring(P, 2, root), d / "a-reduce-ring.sched")
    write(reduce_chain_ordered(P, 3, root), d / "b-reduce-chain.sched")
    write(allreduce_ring(P), d / "c-allreduce-ring.sched")
    ordered = allreduce_rd(P) if P & (P - 1) == 0 else allreduce_chain_ordered(P, 2)
    write(ordered, d / "d-allreduce-ordered.sched")
    proc, rows = run_app(app, P, preload_env(d), "matrix", 11, sleep_us=2000, root=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad
    red = [r for r in rows if r["coll"] in ("reduce", "allreduce")]
    assert len(red) == 2 * 4 * 4 * 2
    # Open MPI refuses predefined operations on derived datatypes: the same error as its own
    assert {(r["type"], r["op"]) for r in red if r["error"]} == {("vector", "sum"), ("vector", "max")}
    served = [r for r in red if not r["error"]]
    if served[0]["used"] is not None:
        assert all(r["used"] for r in served), [r for r in served if not r["used"]]
        ordered = {"b-reduce-chain.sched", "d-allreduce-ordered.sched"}
        for r in served:
            assert (Path(r["schedule"]).name in ordered) == (r["op"] == "noncommutative"), r


# ---- every registered algorithm family, generated (collsched.collectives.algorithms) ----

RANGE = 4096  # algorithm k serves [k * RANGE, (k + 1) * RANGE) bytes: one launch runs them all


def two_sites(d: Path, P: int):
    """A topology of two sites, ranks interleaved over them (the grid algorithms group by site)."""
    from collsched.inputs.topology import load_topology
    lines = ["hosts:"] + [f"  - {{name: h{i}, site: {'ab'[i % 2]}}}" for i in range(P)]
    lines += ["sites:"] + [f"  - {{name: {s}, lan: {{latency: 5.0e-6, bandwidth: 1.25e9}}}}" for s in "ab"]
    lines += ["wan: [{between: [a, b], latency: 0.01, bandwidth: 1.25e8}]"]
    path = d / "two-sites.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_topology(str(path))


def generated_library(d: Path, collective: str, P: int, root: int) -> dict[str, Program]:
    """Every registered algorithm of the collective (arrival-aware ones with a random
    pattern, grid ones on two sites), each in its own byte range, in a directory."""
    import numpy as np
    from collsched.collectives.algorithms import registry
    from collsched.errors import InputError
    progs: dict[str, Program] = {}
    arrivals = np.random.default_rng(7).uniform(0, 1e-3, P)
    topo = two_sites(d.parent, P)
    for name in registry.names(collective):
        alg = registry.REGISTRY[(collective, name)]
        k = len(progs)
        for nseg in (3, 1):
            req = registry.CollRequest(collective, P, nbytes=k * RANGE, nseg=nseg, root=root,
                                       topology=topo if alg.needs_topology else None,
                                       arrivals=arrivals if alg.arrival_aware else None)
            try:
                prog = registry.generate(name, req)
            except InputError:
                continue
            write(prog, d / f"{k:02d}-{name}.sched", k * RANGE, (k + 1) * RANGE - 1)
            progs[str(d / f"{k:02d}-{name}.sched")] = prog
            break
    return progs


def counts_for(progs) -> str:
    """Element counts whose 4-byte types land in each file's range (8-byte ones elsewhere)."""
    return ",".join(str((k * RANGE + 100 + 8 * k) // 4) for k in range(len(progs)))


@pytest.mark.mpi
@pytest.mark.parametrize("collective", ["alltoall", "bcast", "reduce", "allreduce"])
@pytest.mark.parametrize("P", [5, 8])
def test_generated_algorithms_byte_for_byte(app, tmp_path, collective, P):
    d = tmp_path / "lib"
    d.mkdir()
    root = 2 if collective in ("bcast", "reduce") else 0
    progs = generated_library(d, collective, P, root)
    assert progs
    proc, rows = run_app(app, P, preload_env(d), collective, counts_for(progs), sleep_us=1500, root=root)
    assert proc.returncode == 0 and rows, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not [r for r in rows if not r["ok"]]
    if rows[0]["used"] is None:
        return
    files = list(progs)
    ints = [r for r in rows if r["type"] == "int"]
    per = len(ints) // len(files)
    for k, f in enumerate(files):
        for r in ints[k * per:(k + 1) * per]:
            if r["op"] == "noncommutative" and progs[f].commutative_only:
                assert not r["used"] and "commutative-only" in r["reason"], r
            elif r["op"] in ("sum", "max", "user", "noncommutative", ""):
                assert r["used"] and r["schedule"] == f, (f, r)


@pytest.mark.mpi
@pytest.mark.parametrize("P", [5, 8])
def test_arrival_alltoall_with_chained_sends_byte_for_byte(app, tmp_path, P):
    """The arrival-aware alltoall, its sends chained (CHAIN: each waits for the previous send
    to complete, PMPI_Wait), in batches of 1 and 2, one and three segments per block, under
    imbalance: every block lands where MPI_Alltoall puts it, each file serves its range."""
    import numpy as np
    from collsched.collectives.algorithms import registry
    d = tmp_path / "lib"
    d.mkdir()
    arrivals = np.random.default_rng(P).uniform(0, 3e-3, P)
    progs = {}
    for k, (nseg, batch) in enumerate([(1, 1), (3, 1), (1, 2), (3, 2)]):
        req = registry.CollRequest("alltoall", P, nbytes=k * RANGE, nseg=nseg, arrivals=arrivals,
                                   options={"lead": 0, "batch": batch})
        prog = registry.generate("arrival", req)
        assert sum(op.chain for lst in prog.ops for op in lst) >= (P if batch == 1 else 1), (nseg, batch)
        path = write(prog, d / f"{k:02d}-arrival.sched", k * RANGE, (k + 1) * RANGE - 1)
        progs[str(path)] = prog
    proc, rows = run_app(app, P, preload_env(d), "alltoall", counts_for(progs), iters=2, sleep_us=3000)
    assert proc.returncode == 0 and rows, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not [r for r in rows if not r["ok"]]
    if rows[0]["used"] is None:
        return
    ints = [r for r in rows if r["type"] == "int"]
    per = len(ints) // len(progs)
    for k, f in enumerate(progs):
        assert all(r["used"] and r["schedule"] == f for r in ints[k * per:(k + 1) * per]), f


# ---- fallback, strict mode, refusal ----

def _corrupt_section(path: Path) -> Path:
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x40  # the last rank's last piece: its section_crc32 no longer matches
    path.write_bytes(bytes(data))
    return path


def _deadlocking_rd(P: int) -> Program:
    """Recursive doubling with each step's receive listed before its send: every send waits
    for the receive of its own pieces (rule 3), so nobody ever sends: refused by the proof."""
    b = Builder("allreduce", P, 1, algorithm="rd-deadlock")
    k = 1
    while k < P:
        for r in range(P):
            b.add(k, r, r ^ k, [(0, 0, 0)], reduce=True, local_first=(r ^ k) > r)
        k *= 2
    return b.build()


MISMATCHES = [
    # (what the app calls, the file, P, root, the reason's words)
    ("alltoall", lambda: alltoall_pairwise(4), 5, 0, "nranks: expected 5 (communicator size), found 4"),
    ("bcast", lambda: bcast_chain(4, 2, 1), 4, 0, "root: expected 0 (the call's), found 1"),
    ("allreduce", lambda: allreduce_ring(4), 4, 0, "collective: expected allreduce, found allreduce"),
    ("allreduce", lambda: bcast_binomial(4, 1, 0), 4, 0, "collective: expected allreduce, found bcast"),
    ("allreduce", lambda: _deadlocking_rd(4), 4, 0, "deadlock"),
    ("reduce", lambda: reduce_chain_ordered(4, 2, 0), 4, 0, "section_crc32"),
]


@pytest.mark.mpi
@pytest.mark.parametrize("case", range(len(MISMATCHES)))
def test_mismatched_file_falls_back_with_reason(app, tmp_path, case):
    what, make, P, root, words = MISMATCHES[case]
    f = tmp_path / "x.sched"
    if "collective: expected allreduce, found allreduce" in words:  # wrong size: 44 bytes of ints
        write(make(), f, bytes_min=0, bytes_max=10)
        words = "bytes within [0, 10]"
    else:
        write(make(), f, proven=words != "deadlock")
    if words == "section_crc32":
        _corrupt_section(f)
    proc, rows = run_app(app, P, preload_env(f), what, 11, root=root)
    assert proc.returncode == 0 and rows, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert all(r["ok"] for r in rows)  # the MPI library's own result
    if rows[0]["used"] is not None:
        served = [r for r in rows if not r["error"]]
        assert all(not r["used"] and words in r["reason"] for r in served), served[:2]
    said = lines(proc)
    assert said and any(words in ln for ln in said), proc.stderr[-2000:]


@pytest.mark.mpi
def test_strict_mode_refuses_with_an_mpi_error(app, tmp_path):
    f = write(alltoall_pairwise(4), tmp_path / "p4.sched")
    proc, rows = run_app(app, 5, preload_env(f, COLLSCHED_STRICT="1"), "alltoall", 11)
    assert proc.returncode != 0 and rows and all(r["error"] and not r["ok"] for r in rows), proc.stdout
    said = lines(proc)
    assert said == [f"collsched: COLLSCHED_STRICT=1: MPI_Alltoall refused on a communicator of 5 ranks (44 bytes), "
                    f"no fallback to the MPI library: {f}: nranks: expected 5 (communicator size), found 4"], said


@pytest.mark.mpi
def test_source_without_these_collectives_changes_nothing(app, tmp_path):
    """An allgather-only source (and strict mode): the four collectives are the MPI
    library's, silently - strict mode refuses only collectives the source has schedules for."""
    from rt_helpers import make_schedule
    d = tmp_path / "lib"
    d.mkdir()
    make_schedule(d / "ring.sched", "ring", 4)
    proc, rows = run_app(app, 4, preload_env(d, COLLSCHED_STRICT="1", COLLSCHED_VERBOSE="1"), "matrix", 5)
    assert proc.returncode == 0 and rows and all(r["ok"] for r in rows), proc.stdout[-2000:]
    assert not lines(proc), proc.stderr


# ---- collsched-run ----

@pytest.mark.mpi
def test_collsched_run_checks_every_collective(tmp_path):
    """collsched-run on 1.2 files: one row per size, mode and operation, all data checked
    against the MPI library's own collective; --inject-error is caught."""
    from rt_helpers import run_driver
    P = 5
    files = [write(alltoall_relay(P, 2), tmp_path / "a.sched"), write(bcast_chain(P, 3, 1), tmp_path / "b.sched"),
             write(reduce_chain_ordered(P, 3, 2), tmp_path / "r.sched"), write(allreduce_ring(P), tmp_path / "ar.sched")]
    run = run_driver(P, files, "--all-modes", "--bytes", "64,4000", "--iterations", "2")
    assert run.returncode == 0, run
    got = {(r["collective"], r["op"], r["in_place"], r["bytes"]) for r in run.rows}
    assert len(run.rows) == len(got) == 4 + 2 + 8 + 4, sorted(got)
    assert all(r["data_ok"] and r["used_schedule"] for r in run.rows), run
    bad = run_driver(P, files[2:3], "--inject-error", "--iterations", "1")
    assert bad.returncode == 1 and bad.rows and not any(r["data_ok"] for r in bad.rows), bad


@pytest.mark.mpi
@pytest.mark.smpi
def test_smpi_runs_the_same_collectives(tmp_path):
    """The SMPI build (smpicc) of the same code: every collective's data checked under
    smpirun on the 4-host test platform."""
    import shutil
    from rt_helpers import DATA, run_driver
    exe = Path(os.environ.get("COLLSCHED_SMPI_BUILD", BUILD / "smpi")) / "bin" / "collsched-run"
    if not shutil.which("smpirun") or not exe.exists():
        pytest.skip("smpirun or the SMPI build missing")
    P = 4
    files = [write(alltoall_relay(P, 2), tmp_path / "a.sched"), write(bcast_chain(P, 2, 1), tmp_path / "b.sched"),
             write(reduce_chain_ordered(P, 2, 1), tmp_path / "c.sched"), write(allreduce_rd(P), tmp_path / "d.sched")]
    launcher = ["smpirun", "-np", str(P), "-platform", str(DATA / "platform-4.xml"), "-hostfile",
                str(DATA / "hostfile-4.txt"), "--cfg=smpi/display-timing:no", "--log=root.thr:warning"]
    run = run_driver(P, files, "--all-modes", "--bytes", "64,5000", "--iterations", "2", launcher=launcher, exe=exe)
    assert run.returncode == 0 and len(run.rows) == 4 + 2 + 8 + 8, run
    assert all(r["data_ok"] for r in run.rows), run


@pytest.mark.mpi
def test_ranks_with_different_sources_agree_to_fall_back(app, tmp_path):
    """Two ranks see one file, two another (MPMD launch): the first call's agreement finds
    out, every rank falls back with the reason, nobody hangs."""
    import json
    a = write(allreduce_ring(4), tmp_path / "a.sched")
    b = write(allreduce_chain_ordered(4, 2), tmp_path / "b.sched")
    env = preload_env(None)
    head = mpirun_cmd(2)[:-2]  # without "-np 2"
    args = [str(app), "allreduce", "9", "1", "0"]
    cmd = head + ["-np", "2", "-x", f"COLLSCHED_SCHEDULES={a}", *args, ":",
                  "-np", "2", "-x", f"COLLSCHED_SCHEDULES={b}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT, env=env)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and rows and all(r["ok"] for r in rows), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert all(not r["used"] and "ranks see different schedule files" in r["reason"] for r in rows), rows[:2]


@pytest.mark.mpi
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_any_algorithm_any_shape_matches_mpi(tmp_path_factory, data):
    """Property: any registered algorithm, any P (2..6), segment count, root and size (down
    to empty segments), in place or not: collsched-run's data equal the MPI library's, and
    the schedule ran."""
    from collsched.collectives.algorithms import registry
    from collsched.errors import InputError
    from rt_helpers import run_driver
    collective = data.draw(st.sampled_from(["alltoall", "bcast", "reduce", "allreduce"]))
    name = data.draw(st.sampled_from(registry.names(collective)))
    P = data.draw(st.integers(2, 6))
    nseg = data.draw(st.integers(1, 4))
    root = data.draw(st.integers(0, P - 1)) if collective in ("bcast", "reduce") else 0
    nbytes = data.draw(st.integers(0, 3000))
    d = tmp_path_factory.mktemp("prop")
    alg = registry.REGISTRY[(collective, name)]
    req = registry.CollRequest(collective, P, nbytes=nbytes, nseg=nseg, root=root,
                               topology=two_sites(d, P) if alg.needs_topology else None,
                               arrivals=__import__("numpy").linspace(0, 1e-3, P) if alg.arrival_aware else None)
    try:
        prog = registry.generate(name, req)
    except InputError:
        return  # the algorithm does not serve this shape
    f = write(prog, d / "p.sched")
    run = run_driver(P, [f], "--all-modes", "--bytes", str(nbytes), "--iterations", "2")
    assert run.returncode == 0 and run.rows, run
    assert all(r["data_ok"] and r["used_schedule"] for r in run.rows), (name, P, nseg, root, nbytes, run)
