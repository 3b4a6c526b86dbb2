"""Multi-piece messages in the C runtime (docs/semantics.md "Multi-piece messages",
docs/runtime.md "Multi-piece messages"): the reader takes the join flag, the whole check
proves messages, the executor runs one MPI call per message (pieces' places in one run of
bytes or a derived datatype: zero copy), dataflow and serial.

Schedules with messages are built here from the library's algorithms: transfers joined per
(src, dst, step) through ir.from_transfers(join=...) (bruck, ring), any schedule's matched
transfers joined where both ends sit next to each other (aggregate), pieces of every
message permuted alike at both ends (out of memory order: a derived datatype over own and
forwarded pieces), and the serial flag on and off. They run under Open MPI (mpirun) and
SimGrid SMPI at odd and even P with collsched-run (every byte of every rank checked,
allgather and allgatherv, in place and not), with an unmodified program comparing every
byte with PMPI_Allgather(v) (uneven and zero counts, reversed blocks, a vector type and 18
other derived types), with imbalanced arrivals (collsched-minibench), and from a schedule
cache whose receive-ahead posts a leading background message as one receive. Hostile
message files are refused with a reason and the MPI library's collective runs instead."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from collsched import ir, schedfile
from collsched.algorithms import Request, generate
from collsched.verify import match
from rt_helpers import BUILD, DATA, TIMEOUT, build_mpi_app, mpirun_cmd, run_driver
from test_preload_mpi import preload_env

SIZES = "0,1,777,65537,1048576"
SMPI_BUILD = BUILD / "smpi"


# ---- schedules with messages ----

def joined_by_step(nranks: int, nseg: int, algorithm: str) -> ir.Schedule:
    """bruck or ring with one message per (src, dst, step): every block (all its segments)
    a rank sends a peer in one step travels in one MPI message."""
    steps, src, dst, origin = [], [], [], []
    if algorithm == "bruck":
        k = 0
        while (1 << k) < nranks:
            dist = 1 << k
            for r in range(nranks):
                for j in range(min(dist, nranks - dist)):
                    steps.append(k), src.append(r), dst.append((r - dist) % nranks)
                    origin.append((r + j) % nranks)
            k += 1
    else:  # ring
        for k in range(nranks - 1):
            for r in range(nranks):
                steps.append(k), src.append(r), dst.append((r + 1) % nranks)
                origin.append((r - k) % nranks)
    steps, src, dst, origin = (np.repeat(np.array(a, np.int64), nseg) for a in (steps, src, dst, origin))
    seg = np.tile(np.arange(nseg), len(steps) // nseg)
    key = np.stack([steps, src, dst], 1)
    join = np.r_[0, np.all(key[1:] == key[:-1], axis=1)].astype(np.uint8)
    return ir.from_transfers(nranks, nseg, steps, src, dst, origin, seg, algorithm=algorithm,
                             join=join)


def aggregate(s: ir.Schedule, rng: random.Random | None = None, p_join: float = 1.0) -> ir.Schedule:
    """Joins matched transfer k to transfer k - 1 of the same ordered pair wherever both
    its ends sit right after the previous transfer's ends in their lists (same phase, no
    FIFO mark on the send): messages whose boundaries agree at both ends. With rng, each
    such join is taken with probability p_join."""
    m = match(s)
    rank = s.rank_of_op
    pair = rank[m.send_op].astype(np.int64) * s.nranks + s.peer[m.send_op]
    order = np.lexsort((m.send_op, pair))
    so, ro, pr = m.send_op[order], m.recv_op[order], pair[order]
    join = np.zeros(s.total_ops, np.uint8)
    for k in range(1, len(so)):
        a, b, c, d = int(so[k]), int(so[k - 1]), int(ro[k]), int(ro[k - 1])
        ok = (pr[k] == pr[k - 1] and a == b + 1 and c == d + 1 and rank[a] == rank[b]
              and rank[c] == rank[d] and s.phase[a] == s.phase[b] and s.phase[c] == s.phase[d]
              and not s.fifo[a])
        if ok and (rng is None or rng.random() < p_join):
            join[a] = join[c] = 1
    s.join = join
    return s


def shuffle_messages(s: ir.Schedule, rng: random.Random) -> ir.Schedule:
    """The pieces of every message permuted, the same way at both ends (matching holds;
    holding too: a message is forwarded only after its receive completes)."""
    m = match(s)
    recv_of = np.full(s.total_ops, -1, np.int64)
    recv_of[m.send_op] = m.recv_op
    heads = np.nonzero((s.kind == 0) & (s.join == 0))[0]
    for h in heads:
        e = int(h) + 1
        while e < s.total_ops and s.join[e]:
            e += 1
        if e - h < 2:
            continue
        perm = list(range(e - h))
        rng.shuffle(perm)
        r = int(recv_of[h])
        for col in (s.origin, s.segment):
            col[h:e] = col[h:e][perm]
            col[r:r + e - h] = col[r:r + e - h][perm]
    return s


def write(s: ir.Schedule, path: Path, serial: bool = False) -> Path:
    s.bytes_min, s.bytes_max = 0, 1 << 30
    s.serial = serial
    schedfile.write(s, path)
    return path


def message_files(d: Path, nranks: int) -> list[Path]:
    """The schedules every MPI test runs: messages of whole steps (bruck, ring of three
    segments), a random part of lnbc's and spreading's transfers joined, bruck's pieces
    permuted (own pieces amid forwarded ones, out of memory order), and serial versions."""
    rng = random.Random(nranks)
    out = [write(joined_by_step(nranks, 1, "bruck"), d / "bruck-msg.sched"),
           write(joined_by_step(nranks, 3, "ring"), d / "ring3-msg.sched"),
           write(shuffle_messages(joined_by_step(nranks, 2, "bruck"), rng), d / "bruck2-shuffled.sched"),
           write(aggregate(generate("lnbc", Request(nranks, nseg=2)), rng, 0.6), d / "lnbc-some.sched"),
           write(aggregate(generate("spreading", Request(nranks, nseg=2))), d / "spreading-msg.sched"),
           write(joined_by_step(nranks, 2, "bruck"), d / "bruck2-serial.sched", serial=True),
           write(shuffle_messages(joined_by_step(nranks, 2, "ring"), rng), d / "ring2-serial.sched",
                 serial=True)]
    for f in out:
        assert schedfile.read(f).has_messages, f
    return out


def expect_all_used(run, files, sizes: int, modes: int = 4):
    assert run.returncode == 0, run
    assert len(run.rows) == len(files) * sizes * modes, run
    for row in run.rows:
        assert row["data_ok"] and row["mpi_error"] == 0, row
        assert row["used_schedule"] and row["schedule"] == row["file"], row


# ---- Open MPI ----

@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [5, 8])
def test_messages_every_byte_open_mpi(tmp_path, nranks):
    files = message_files(tmp_path, nranks)
    run = run_driver(nranks, files, "--bytes", SIZES, "--all-modes", "--iterations", "1")
    expect_all_used(run, files, len(SIZES.split(",")))


@pytest.mark.mpi
def test_messages_int_type_and_repeated_calls(tmp_path):
    files = message_files(tmp_path, 6)[:3]
    run = run_driver(6, files, "--bytes", "4,1028,65536", "--all-modes", "--iterations", "3",
                     "--dtype", "int")
    expect_all_used(run, files, 3)


@pytest.fixture(scope="module")
def datatypes_app(tmp_path_factory) -> Path:
    return build_mpi_app(tmp_path_factory.mktemp("apps") / "datatypes_app", "datatypes_app.c", "-Werror")


@pytest.mark.mpi
@pytest.mark.parametrize("which", [0, 2, 6])  # bruck, bruck shuffled, ring serial shuffled
def test_messages_match_the_mpi_library_byte_for_byte(datatypes_app, tmp_path, which):
    """An unmodified program (apps/datatypes_app.c) under the preload library, strict: every
    MPI_Allgather(v) (19 derived types as send, receive, both, mixed and in place; counts
    0, 1, 3, 700 units, uneven and zero across ranks, blocks reversed with negative
    displacements) runs the message schedule and equals PMPI_Allgather(v) byte for byte,
    holes and guard zones included. A vector receive type is staged: the messages land
    in staging and MPI unpacks them."""
    d = tmp_path / "schedules"
    d.mkdir()
    src = message_files(tmp_path, 5)[which]
    shutil.copy(src, d / src.name)
    env = preload_env(d, verbose=False)
    env["COLLSCHED_STRICT"] = "1"
    proc = subprocess.run(mpirun_cmd(5) + [str(datatypes_app)], capture_output=True, text=True,
                          timeout=TIMEOUT, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "types, 1140 calls per rank: OK" in proc.stdout, out[-4000:]
    assert "collsched:" not in proc.stderr, out[-4000:]


MINIBENCH = BUILD / "bin" / "collsched-minibench"


def minibench(launcher: list[str], exe: Path, sched: Path, nbytes: int, delay_ms: float) -> dict:
    if not exe.exists():
        pytest.skip(f"{exe} not built (make lab)")
    proc = subprocess.run(launcher + [str(exe), "--bytes", str(nbytes), "--iterations", "3",
                                      "--max-delay-ms", str(delay_ms), "--seed", "7",
                                      "--schedule", str(sched)],
                          capture_output=True, text=True, timeout=TIMEOUT)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(rows) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    return rows[0]


@pytest.mark.mpi
@pytest.mark.parametrize("serial", [False, True])
def test_messages_with_imbalanced_arrivals_open_mpi(tmp_path, serial):
    """Ranks arrive up to 30 ms apart (collsched-minibench's seeded delays): data checked
    every iteration, every iteration on the schedule."""
    f = write(joined_by_step(5, 2, "bruck"), tmp_path / "bruck.sched", serial=serial)
    row = minibench(mpirun_cmd(5), MINIBENCH, f, 40000, 30)
    assert row["data_ok"], row
    assert row["used"] == [str(f)] * len(row["used"]) and len(row["used"]) >= 3, row


# ---- SimGrid SMPI ----

def smpirun_cmd(nranks: int) -> list[str]:
    if not shutil.which("smpirun"):
        pytest.skip("smpirun not installed")
    return ["smpirun", "-np", str(nranks), "-platform", str(DATA / "platform-4.xml"),
            "-hostfile", str(DATA / "hostfile-4.txt"), "--cfg=smpi/display-timing:no",
            "--log=root.thr:warning"]


@pytest.mark.mpi
@pytest.mark.smpi
@pytest.mark.parametrize("nranks", [5, 8])
def test_messages_every_byte_smpi(tmp_path, nranks):
    exe = SMPI_BUILD / "bin" / "collsched-run"
    if not exe.exists():
        pytest.skip(f"{exe} not built (make runtime)")
    files = message_files(tmp_path, nranks)
    run = run_driver(nranks, files, "--bytes", "0,777,65537", "--all-modes", "--iterations", "1",
                     launcher=smpirun_cmd(nranks), exe=exe)
    expect_all_used(run, files, 3)


@pytest.mark.mpi
@pytest.mark.smpi
@pytest.mark.parametrize("serial", [False, True])
def test_messages_with_imbalanced_arrivals_smpi(tmp_path, serial):
    f = write(joined_by_step(8, 2, "bruck"), tmp_path / "bruck.sched", serial=serial)
    row = minibench(smpirun_cmd(8), SMPI_BUILD / "bin" / "collsched-minibench", f, 65536, 5)
    assert row["data_ok"], row
    assert row["used"] == [str(f)] * len(row["used"]) and len(row["used"]) >= 3, row


# ---- hostile message files: refused with a reason, the MPI library's collective runs ----

def deadlocking_messages() -> ir.Schedule:
    """Three ranks, each sending the next one message of its own block and a forwarded
    one: with one piece per message it runs (each own piece leaves at once), as messages
    each waits for the message the one before it sends: a cycle."""
    lists = [[("recv", 2, 2, 0), ("recv", 2, 1, 0, "fg", 0, 1), ("send", 1, 0, 0), ("send", 1, 2, 0, "fg", 0, 1)],
             [("recv", 0, 0, 0), ("recv", 0, 2, 0, "fg", 0, 1), ("send", 2, 0, 0), ("send", 2, 1, 0, "fg", 0, 1)],
             [("recv", 1, 0, 0), ("recv", 1, 1, 0, "fg", 0, 1), ("send", 0, 2, 0), ("send", 0, 1, 0, "fg", 0, 1)]]
    return ir.from_op_lists(3, 1, lists)


def hostile(nranks: int) -> dict[str, tuple[ir.Schedule, str]]:
    """name -> (schedule, the words its refusal carries). The reader's refusals are in rank
    0's section (the rank whose reason the call records; another rank's refusal is
    recorded as "refused on rank R")."""
    def base():
        return joined_by_step(nranks, 2, "bruck")

    def first(s, mask):  # the first op of rank 0 where mask holds
        return int(np.nonzero(mask[:int(s.offsets[1])])[0][0])

    out = {}
    s = base()
    s.join[first(s, (s.join == 1) & (s.kind == 1))] = 0  # the receiver splits a message sent whole
    out["split_recv"] = (s, "(message #2 on that pair) has no matching send message there")
    s = base()
    s.join[0] = 1
    out["join_first"] = (s, "rank 0 op 0 flags: expected no join bit on a rank's first op (it has no message to join)")
    s = base()
    i = first(s, s.join == 1)
    s.peer[i] = next(q for q in range(1, nranks) if q != s.peer[i])
    out["join_other_peer"] = (s, f"rank 0 op {i} flags: expected the join bit only on an op with the kind, peer "
                                 "and phase of the op before it")
    s = base()
    i = first(s, (s.join == 1) & (s.kind == 0))
    s.fifo[i] = 1
    out["fifo_joined"] = (s, f"rank 0 op {i} flags: expected the FIFO bit on a message's first op only")
    s = base()
    i = first(s, s.join == 1)
    s.join[i] = 2  # flags bit 3: unknown
    out["unknown_bit"] = (s, f"rank 0 op {i} flags: expected bits 0 (background), 1 (FIFO wait) and 2 (join) only")
    s = base()
    i = first(s, (s.join == 1) & (s.kind == 0))
    s.origin[i], s.segment[i] = s.origin[i - 1], s.segment[i - 1]
    out["piece_twice"] = (s, f"rank 0 op {i} segment: expected a piece not already in its message (op {i - 1} "
                             f"carries ({s.origin[i]},{s.segment[i]}) too)")
    out["minor_version_0"] = (base(), "version_minor: expected at least 3 for a schedule with joined ops "
                                      "(flags bit 2), found 0")
    return out


def with_minor_version(path: Path, minor: int) -> None:
    """The file's header claims another minor version (header CRC made right again)."""
    data = bytearray(path.read_bytes())
    data[10:12] = minor.to_bytes(2, "little")
    data[124:128] = zlib.crc32(bytes(data[:124])).to_bytes(4, "little")
    path.write_bytes(bytes(data))


@pytest.mark.mpi
def test_hostile_message_files_fall_back_with_data_correct(tmp_path):
    cases = hostile(5)
    files = []
    for name, (s, _) in cases.items():
        files.append(write(s, tmp_path / f"{name}.sched"))
    with_minor_version(files[-1], 0)
    run = run_driver(5, files, "--bytes", "777", "--iterations", "1")
    assert run.returncode == 0, run
    assert len(run.rows) == len(files), run
    for row, (name, (_, words)) in zip(run.rows, cases.items()):
        assert row["data_ok"] and not row["used_schedule"], (name, row)
        assert words in row["reason"], (name, row["reason"])


@pytest.mark.mpi
@pytest.mark.parametrize("serial", [False, True])
def test_message_deadlock_is_refused_not_run(tmp_path, serial):
    """Valid op for op (one piece per message it runs), deadlocked as messages: the whole
    check refuses it on rank 0, every rank falls back (no hang: a time-out fails)."""
    plain = deadlocking_messages()
    plain.join[:] = 0
    ok = write(plain, tmp_path / "plain.sched")
    bad = write(deadlocking_messages(), tmp_path / "cycle.sched", serial=serial)
    run = run_driver(3, [ok, bad], "--bytes", "777", "--iterations", "1")
    assert run.returncode == 0, run
    assert [r["used_schedule"] for r in run.rows] == [True, False], run
    assert all(r["data_ok"] for r in run.rows), run
    assert "deadlock" in run.rows[1]["reason"], run.rows[1]


# ---- receive-ahead (cache_ahead.c): leading background receive messages posted ahead ----

def message_cache(d: Path, nranks: int, nbytes: int, spread: float) -> dict:
    """A schedule cache (docs/cache.md) as tests/runtime/test_cache_ahead.py builds it, with
    message entries: the regular entry the ring, and per class k (ranks r % 3 == k late by
    `spread`) the ring of three segments joined per step, whose late ranks receive their
    first message (three pieces) in the background: the receive-ahead posts it at the exit
    of the call before, one receive for the three pieces."""
    d.mkdir(parents=True, exist_ok=True)
    write(generate("ring", Request(nranks)), d / "ring.sched")
    files = {"regular": "ring.sched"}
    lines = [f"entry ring.sched allgather {nranks} {nbytes} {nbytes} * - regular - 5 -"]
    for k in range(3):
        s = joined_by_step(nranks, 3, "ring")
        for r in range(nranks):
            if r % 3 == k:
                lo = int(s.offsets[r])
                assert list(s.kind[lo:lo + 3]) == [1, 1, 1] and list(s.join[lo:lo + 4]) == [0, 1, 1, 0]
                s.phase[lo:lo + 3] = 1
        s.bytes_min = s.bytes_max = nbytes
        name = f"ring3-c{k}.sched"
        schedfile.write(s, d / name)
        assert schedfile.read(d / name).has_background
        files[k] = name
        pat = ",".join(repr(spread if r % 3 == k else 0.0) for r in range(nranks))
        lines.append(f"entry {name} allgather {nranks} {nbytes} {nbytes} * 0123456789abcdef {k} "
                     f"{spread * 0.2!r} 5 {pat}")
    (d / "index").write_text("collsched-cache 1\n" + "".join(line + "\n" for line in lines))
    return files


@pytest.mark.mpi
@pytest.mark.smpi
def test_receive_ahead_posts_whole_messages_smpi(tmp_path):
    """The cache cycle of tests/runtime/test_cache_ahead.py (apps/cache_ahead_app.c, every
    byte of every call checked) with message entries under SMPI: the late ranks' first
    message (three pieces) is posted ahead as one receive and taken over by the executor;
    the entries are the rule's, no receive is withdrawn, the data are right."""
    from test_cache_ahead import APPS, BYTES, POSTED, AppRun, expected_sequence, smpi_platform
    lib = SMPI_BUILD / "lib" / "libcollsched.a"
    if not shutil.which("smpirun") or not shutil.which("smpicc") or not lib.exists():
        pytest.skip("smpirun, smpicc or the SMPI build of libcollsched missing")
    nranks, spread, iters = 6, 0.005, 12
    files = message_cache(tmp_path / "cache", nranks, BYTES, spread)
    exe = tmp_path / "cache_ahead_smpi"
    subprocess.run(["smpicc", "-DCACHE_APP_API", f"-I{Path(__file__).parents[2] / 'runtime' / 'include'}",
                    str(APPS / "cache_ahead_app.c"), str(lib), "-lm", "-o", str(exe)],
                   check=True, capture_output=True, timeout=TIMEOUT)
    plat, hosts = smpi_platform(tmp_path, nranks)
    cmd = ["smpirun", "-np", str(nranks), "-platform", str(plat), "-hostfile", str(hosts),
           "--cfg=smpi/display-timing:no", "--log=root.thr:warning", str(exe), str(iters), str(BYTES),
           str(int(spread * 1e6))]
    env = dict(os.environ, COLLSCHED_SCHEDULES=str(tmp_path / "cache"), COLLSCHED_VERBOSE="1")
    run = AppRun(subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env))
    assert run.proc.returncode == 0 and run.data_ok, run
    assert run.used() == expected_sequence(files, iters), run
    assert not run.failures(), run
    posted = [line for line in run.proc.stderr.splitlines() if line.startswith(POSTED)]
    # one message of three receives on each late rank (the verbose line counts ops)
    assert posted and all("3 receives of ring" in line for line in posted), posted


@pytest.mark.mpi
def test_trace_gives_joined_ops_their_message_times(tmp_path):
    """COLLSCHED_TRACE with messages: a joined op's line carries its head's issue and
    completion times (one request per message), every op traced."""
    f = write(joined_by_step(4, 3, "ring"), tmp_path / "ring3.sched")
    prefix = tmp_path / "trace"
    run = run_driver(4, [f], "--bytes", "3000", "--iterations", "1",
                     env={"COLLSCHED_TRACE": str(prefix)})
    assert run.returncode == 0 and run.rows[0]["data_ok"] and run.rows[0]["used_schedule"], run
    s = schedfile.read(f)
    for r in range(4):
        lines = [l.split(",") for l in (tmp_path / f"trace.{r}.csv").read_text().splitlines()]
        lo = int(s.offsets[r])
        assert len(lines) == int(s.offsets[r + 1]) - lo
        for call, op, kind, peer, origin, seg, issued, done in lines:
            i = lo + int(op)
            assert (int(kind), int(peer), int(origin), int(seg)) == (s.kind[i], s.peer[i], s.origin[i], s.segment[i])
            assert 0 < float(issued) <= float(done), lines
            h = int(s.message_head()[i]) - lo
            assert (issued, done) == tuple(lines[h][6:8]), (op, h)
