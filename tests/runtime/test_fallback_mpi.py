"""Fallback paths: a schedule that does not fit the call, or a corrupt, truncated or hostile
file, makes every rank run the MPI library's collective (data still byte-checked) with one
line on stderr; COLLSCHED_STRICT=1 turns that into an MPI error. Hostile files with valid
checksums include one whose lists deadlock only together (refused by the whole-schedule
check of rank 0, runtime/src/whole_check.c); that check is also unit-tested against the
Python verifier, without MPI."""
from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

from collsched import schedfile
from collsched.algorithms import Request, generate
from collsched.ir import from_op_lists
from collsched.verify import match, verify
from rt_helpers import ROOT, TIMEOUT, make_schedule, mpirun_cmd, run_driver, build_c_tool, build_mpi_app
from test_preload_mpi import preload_env

P = 4


def hostile(path: Path, edit) -> Path:
    """A file with valid checksums whose operation lists are wrong in the way `edit` makes."""
    s = generate("ring", Request(P, nseg=2))
    s.bytes_min, s.bytes_max = 0, 1 << 30
    edit(s)
    path.write_bytes(schedfile.encode(s))
    return path


def first_ops(s, rank):
    lo, hi = int(s.offsets[rank]), int(s.offsets[rank + 1])
    return np.arange(lo, hi)


def swap(s, i, j):
    for col in ("kind", "peer", "origin", "segment", "phase"):
        a = getattr(s, col)
        a[i], a[j] = a[j], a[i]


def forward_before_recv(s):
    """Rank 1 forwards a piece before the recv that delivers it."""
    ops = first_ops(s, 1)
    recv = next(i for i in ops if s.kind[i] == 1)
    send = next(i for i in ops if i > recv and s.kind[i] == 0 and s.origin[i] == s.origin[recv]
                and s.segment[i] == s.segment[recv])
    swap(s, recv, send)


def crossed_pieces(s):
    """Rank 2 receives two pieces from its left neighbour in swapped order: each rank's list
    is fine on its own, only the pair does not match."""
    ops = first_ops(s, 2)
    recvs = [i for i in ops if s.kind[i] == 1]
    swap(s, recvs[0], recvs[1])


def wrong_piece(s):
    """Rank 0's first send of its own piece names the other segment: every pair has as many
    sends as receives, every list is fine on its own, but rank 1 gets (0,1) where it
    expects (0,0)."""
    i = next(i for i in first_ops(s, 0) if s.kind[i] == 0 and s.origin[i] == 0 and s.segment[i] == 0)
    s.segment[i] = 1


S, R = "send", "recv"
# Rank 1 waits to forward (3,0) until rank 2 sends it, which rank 2 does only after
# forwarding (0,0), which it waits for from rank 1: each list is fine alone and the pairs
# match, but together they deadlock. The direct sends after the cycle complete the
# allgather (every rank gets every piece once).
DEADLOCK_LISTS = [
    [(S, 1, 0, 0), (R, 1, 3, 0), (R, 1, 1, 0), (R, 2, 2, 0)],
    [(R, 0, 0, 0), (R, 2, 3, 0), (S, 0, 3, 0), (S, 2, 0, 0),
     (S, 0, 1, 0), (S, 2, 1, 0), (S, 3, 1, 0), (R, 2, 2, 0)],
    [(R, 3, 3, 0), (R, 1, 0, 0), (S, 3, 0, 0), (S, 1, 3, 0),
     (S, 0, 2, 0), (S, 1, 2, 0), (S, 3, 2, 0), (R, 1, 1, 0)],
    [(S, 2, 3, 0), (R, 2, 0, 0), (R, 1, 1, 0), (R, 2, 2, 0)],
]
DEADLOCK_REASON = ("rank 1, op 2: deadlock: waits to forward piece (3,0) until rank 2 issues its "
                   "op 3, which never happens")


def deadlocking(path: Path) -> Path:
    s = from_op_lists(P, 1, DEADLOCK_LISTS)
    s.bytes_min, s.bytes_max = 0, 1 << 30
    found = verify(s)
    assert found and {v.check for v in found} == {"progress"}, found
    assert str(found[0]) == DEADLOCK_REASON + " [progress]"
    path.write_bytes(schedfile.encode(s))
    return path


def self_peer(s):
    s.peer[int(s.offsets[3])] = 3


def own_recv(s):
    ops = first_ops(s, 0)
    s.origin[next(i for i in ops if s.kind[i] == 1)] = 0


@pytest.fixture
def files(tmp_path):
    good = make_schedule(tmp_path / "good.sched", "ring", P)
    raw = good.read_bytes()
    out = {"good": good}
    out["wrong_ranks"] = make_schedule(tmp_path / "p8.sched", "ring", 8)
    out["wrong_bytes"] = make_schedule(tmp_path / "range.sched", "ring", P, bytes_min=100,
                                       bytes_max=200)
    corrupt = bytearray(raw)
    corrupt[-5] ^= 0x10  # last rank's section
    (tmp_path / "corrupt.sched").write_bytes(bytes(corrupt))
    out["corrupt"] = tmp_path / "corrupt.sched"
    head = bytearray(raw)
    head[20] ^= 0x01  # nranks, caught by the header checksum
    (tmp_path / "corrupt-header.sched").write_bytes(bytes(head))
    out["corrupt_header"] = tmp_path / "corrupt-header.sched"
    (tmp_path / "truncated.sched").write_bytes(raw[: len(raw) - 7])
    out["truncated"] = tmp_path / "truncated.sched"
    (tmp_path / "short.sched").write_bytes(raw[:60])
    out["short"] = tmp_path / "short.sched"
    (tmp_path / "not-a-schedule.sched").write_bytes(b"#!/bin/sh\necho hello\n" * 10)
    out["garbage"] = tmp_path / "not-a-schedule.sched"
    out["missing"] = tmp_path / "does-not-exist.sched"
    out["forward_before_recv"] = hostile(tmp_path / "fwd.sched", forward_before_recv)
    out["crossed_pieces"] = hostile(tmp_path / "crossed.sched", crossed_pieces)
    out["wrong_piece"] = hostile(tmp_path / "piece.sched", wrong_piece)
    # the runtime words it as the Python verifier does
    assert str(verify(schedfile.read(out["wrong_piece"]))[0]) == EXPECTED_REASON["wrong_piece"] + " [matching]"
    out["deadlock"] = deadlocking(tmp_path / "deadlock.sched")
    out["self_peer"] = hostile(tmp_path / "self.sched", self_peer)
    out["own_recv"] = hostile(tmp_path / "own.sched", own_recv)
    return out


EXPECTED_REASON = {
    "wrong_ranks": "nranks: expected 4",
    "wrong_bytes": "bytes: expected",
    "corrupt": "section_crc32",
    "corrupt_header": "header_crc32",
    "truncated": "truncated",
    "short": "header",
    "garbage": "magic",
    "missing": "cannot read",
    "forward_before_recv": "earlier recv of forwarded piece",
    "crossed_pieces": "expects piece",
    "wrong_piece": "rank 1, op 0: recv from 0 expects piece (0,0) but the matching send (rank 0 op 2) carries (0,1)",
    "deadlock": DEADLOCK_REASON,
    "self_peer": "peer",
    "own_recv": "never receives its own",
}


@pytest.mark.mpi
def test_fallbacks_keep_data_correct(files):
    names = ["good", *EXPECTED_REASON]
    run = run_driver(P, [files[n] for n in names], "--bytes", "0,1000", "--all-modes",
                     "--iterations", "2")
    assert run.returncode == 0, run
    assert len(run.rows) == len(names) * 2 * 4, run
    assert all(r["data_ok"] and r["mpi_error"] == 0 for r in run.rows), run
    by_file = {}
    for r in run.rows:
        by_file.setdefault(r["file"], []).append(r)
    for name in names:
        rows = by_file[str(files[name])]
        if name == "good":
            assert all(r["used_schedule"] for r in rows), rows
            continue
        # (wrong_bytes: 0 and 1000 are both outside its [100, 200])
        assert not any(r["used_schedule"] for r in rows), (name, rows)
        reason = EXPECTED_REASON[name]
        assert all(reason in r["reason"] or "refused on rank" in r["reason"] for r in rows), (name, rows)
        # one clear line on stderr per communicator, naming the file
        lines = [ln for ln in run.stderr.splitlines() if str(files[name]) in ln]
        assert len(lines) == 1, (name, run.stderr)
        assert reason in lines[0], (name, lines)


@pytest.mark.mpi
def test_bytes_inside_range_use_schedule(files):
    run = run_driver(P, [files["wrong_bytes"]], "--bytes", "100,150,200,201", "--iterations", "1")
    assert run.returncode == 0, run
    used = [r["used_schedule"] for r in run.rows]
    assert used == [True, True, True, False], run


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["wrong_ranks", "corrupt", "deadlock", "wrong_piece"])
def test_strict_mode_returns_error(files, name):
    run = run_driver(P, [files[name]], "--bytes", "64", "--iterations", "1",
                     env={"COLLSCHED_STRICT": "1"})
    assert run.returncode != 0, run
    assert run.rows and run.rows[0]["mpi_error"] != 0 and not run.rows[0]["data_ok"], run
    assert EXPECTED_REASON[name] in run.stderr, run


@pytest.mark.mpi
def test_strict_mode_passes_when_schedule_fits(files):
    run = run_driver(P, [files["good"]], "--bytes", "64", "--iterations", "1",
                     env={"COLLSCHED_STRICT": "1"})
    assert run.returncode == 0 and run.rows[0]["used_schedule"], run


@pytest.mark.mpi
@pytest.mark.parametrize("strict", [False, True])
def test_deadlocking_file_is_refused_not_run(tmp_path, strict):
    """Run with a short timeout: without the whole-schedule check this file hangs."""
    path = deadlocking(tmp_path / "deadlock.sched")
    env = dict(os.environ, COLLSCHED_STRICT="1" if strict else "0")
    cmd = mpirun_cmd(P) + [str(ROOT / "build" / "bin" / "collsched-run"), str(path), "--json",
                           "--bytes", "4096", "--iterations", "3"]
    if os.environ.get("COLLSCHED_BUILD"):
        cmd[len(mpirun_cmd(P))] = str(Path(os.environ["COLLSCHED_BUILD"]) / "bin" / "collsched-run")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    lines = [ln for ln in proc.stderr.splitlines() if "deadlock" in ln]
    assert len(lines) == 1 and DEADLOCK_REASON in lines[0] and str(path) in lines[0], proc.stderr
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert rows and all('"used_schedule": false' in r for r in rows), proc.stdout
    if strict:
        assert proc.returncode != 0 and '"mpi_error": 0' not in rows[0], proc.stdout
    else:
        assert proc.returncode == 0 and all('"data_ok": true' in r for r in rows), proc.stdout


# ---- cs_whole_check alone (no MPI): same first violation, same words, as verify.py ----

def _as_text(s) -> str:
    out = [f"{s.nranks} {s.nseg}"]
    for r in range(s.nranks):
        lo, hi = int(s.offsets[r]), int(s.offsets[r + 1])
        out.append(str(hi - lo))
        out += [f"{int(s.kind[i])} {int(s.peer[i])} {int(s.origin[i])} {int(s.segment[i])} "
                f"{int(s.phase[i]) | int(s.fifo[i]) << 1}" for i in range(lo, hi)]
    return "\n".join(out) + "\n"


def _python_reason(s, serial=False) -> str:
    found = verify(s, serial=serial)
    if not found:
        return "ok"
    text = str(found[0])
    return text[: text.rindex(" [")]  # without the " [check]" tag


def _random_lists(rng: random.Random, nranks: int, nseg: int):
    """A random allgather (a random tree per piece, lists shuffled, then repaired until
    every forward follows its recv and each pair's sends follow the receiver's order):
    matching, holding and delivery hold; progress often does not. None if no repair."""
    lists = [[] for _ in range(nranks)]
    for o in range(nranks):
        for g in range(nseg):
            nodes, others = [o], [r for r in range(nranks) if r != o]
            rng.shuffle(others)
            for c in others:
                p = rng.choice(nodes)
                nodes.append(c)
                lists[p].append([S, c, o, g])
                lists[c].append([R, p, o, g])
    for ops in lists:
        rng.shuffle(ops)
    for _ in range(30):
        changed = False
        for r, ops in enumerate(lists):
            i = 0
            while i < len(ops):
                op = ops[i]
                if op[0] == S and op[2] != r:
                    j = next(j for j, x in enumerate(ops) if x[0] == R and x[2:] == op[2:])
                    if j > i:
                        ops.insert(j, ops.pop(i))
                        changed = True
                        continue
                i += 1
        for a in range(nranks):
            for b in range(nranks):
                want = [x[2:] for x in lists[b] if x[0] == R and x[1] == a] if a != b else []
                slots = [i for i, x in enumerate(lists[a]) if x[0] == S and x[1] == b]
                for i, piece in zip(slots, want):
                    if lists[a][i][2:] != piece:
                        lists[a][i] = [S, b, *piece]
                        changed = True
        if not changed:
            return [[tuple(x) for x in ops] for ops in lists]
    return None


def _mutated(rng: random.Random):
    """A baseline schedule with one to three random edits (any pass may fail)."""
    nranks = rng.choice([2, 3, 4, 5, 8])
    name = rng.choice(["ring", "lnbc", "bruck", "spreading"] + (["nex"] if nranks % 2 == 0 else []))
    s = generate(name, Request(nranks, nseg=rng.choice([1, 2, 3])))
    if rng.random() < 0.5:  # every send FIFO, as the compiler marks a LAN
        s.fifo = (s.kind == 0).astype(np.uint8)
    cols = ("kind", "peer", "origin", "segment", "phase", "fifo")
    for _ in range(rng.choice([1, 1, 2, 3])):
        i, j = rng.randrange(s.total_ops), rng.randrange(s.total_ops)
        r = int(s.rank_of_op[i])
        lo, hi = int(s.offsets[r]), int(s.offsets[r + 1])
        edit = rng.randrange(9)
        if edit == 0:  # swap two ops anywhere
            for c in cols:
                a = getattr(s, c)
                a[i], a[j] = a[j], a[i]
        elif edit == 1:
            s.segment[i] = rng.randrange(s.nseg)
        elif edit == 2:
            s.origin[i] = rng.randrange(nranks)
        elif edit == 3:
            s.peer[i] = rng.randrange(nranks)
        elif edit == 4:
            s.kind[i] = 1 - s.kind[i]
        elif edit == 5:  # move an op within its list, keeping its pair order
            key, d = (s.kind[i], s.peer[i]), rng.choice([-1, 1])
            while lo <= i + d < hi and (s.kind[i + d], s.peer[i + d]) != key and rng.random() < 0.9:
                for c in cols:
                    a = getattr(s, c)
                    a[i], a[i + d] = a[i + d], a[i]
                i += d
        elif edit == 6:  # background phase somewhere
            s.phase[i] = 1
        elif edit == 7 and rng.random() < 0.5:  # FIFO wait on some ops (a recv: shape error)
            s.fifo[i] = 1
        elif edit == 8:  # one transfer moves another piece (both ends agree): a piece twice, one never
            try:
                m = match(s)
            except ValueError:
                continue
            t = rng.randrange(len(m.send_op))
            piece = (rng.randrange(nranks), rng.randrange(s.nseg))
            s.origin[m.send_op[t]], s.segment[m.send_op[t]] = piece
            s.origin[m.recv_op[t]], s.segment[m.recv_op[t]] = piece
    return s


def test_whole_check_agrees_with_python_verifier(tmp_path):
    exe = build_c_tool(tmp_path / "whole_check_main", ["whole_check.c"], "whole_check_main.c", "-O1", "-g",
                       "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined")
    rng = random.Random(20261122)
    sends_first = [  # deadlocks only because both sends are FIFO and come before the recvs
        [("send", 1, 0, 0, "fg", 1), ("send", 1, 0, 1, "fg", 1), ("recv", 1, 1, 0), ("recv", 1, 1, 1)],
        [("send", 0, 1, 0, "fg", 1), ("send", 0, 1, 1, "fg", 1), ("recv", 0, 0, 0), ("recv", 0, 0, 1)],
    ]
    cases = [from_op_lists(P, 1, DEADLOCK_LISTS), from_op_lists(2, 2, sends_first)]
    for name in ("ring", "bruck", "spreading", "lnbc", "nex", "rd"):
        cases.append(generate(name, Request(8, nseg=2)))
        fifo = generate(name, Request(8, nseg=2))
        fifo.fifo = (fifo.kind == 0).astype(np.uint8)  # every send FIFO, as on a LAN
        cases.append(fifo)
    while len(cases) < 300:
        lists = _random_lists(rng, rng.choice([2, 3, 4, 5, 6]), rng.choice([1, 2]))
        if lists:
            case = from_op_lists(len(lists), 1 + max(op[3] for ops in lists for op in ops), lists)
            if rng.random() < 0.5:  # FIFO per link on every send: new ways to deadlock
                case.fifo = (case.kind == 0).astype(np.uint8)
            cases.append(case)
    cases += [_mutated(rng) for _ in range(500)]
    proc = subprocess.run([str(exe)], input="".join(_as_text(s) for s in cases), capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    got = proc.stdout.splitlines()
    assert len(got) == len(cases), proc.stderr
    expected = [_python_reason(s) for s in cases]
    wrong = [(e, g) for e, g in zip(expected, got) if e != g]
    assert not wrong, wrong[:5]
    passes = {verify(s)[0].check for s in cases if verify(s)}
    assert passes >= {"shape", "matching", "holding", "delivery", "progress"}, passes
    fifo_deadlocks = sum("previous message" in verify(s)[0].reason for s in cases if verify(s))
    assert fifo_deadlocks >= 5, fifo_deadlocks  # the seed gives 9 and the hand-made one
    assert expected.count("ok") >= 100

    # The PAT engine's serial execution (each send after the previous send, each recv
    # after the previous recv): the same cases, the same words as verify(serial=True).
    proc = subprocess.run([str(exe), "--serial"], input="".join(_as_text(s) for s in cases),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    got = proc.stdout.splitlines()
    expected = [_python_reason(s, serial=True) for s in cases]
    wrong = [(e, g) for e, g in zip(expected, got) if e != g]
    assert not wrong, wrong[:5]
    serial_recv_deadlocks = sum("serial execution" in e for e in expected)
    assert serial_recv_deadlocks >= 5, serial_recv_deadlocks
    assert expected.count("ok") >= 50


# ---- strict mode through the error handler ----

@pytest.fixture(scope="module")
def strict_app(tmp_path_factory) -> Path:
    return build_mpi_app(tmp_path_factory.mktemp("apps") / "strict_app", "strict_app.c", "-Werror")


def run_strict(app: Path, schedules: Path, *args: str) -> subprocess.CompletedProcess:
    env = preload_env(schedules, verbose=False)
    env["COLLSCHED_STRICT"] = "1"
    return subprocess.run(mpirun_cmd(P) + [str(app), *args], capture_output=True, text=True,
                          timeout=60, env=env)


def collsched_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("collsched:")]


REFUSED = ("collsched: COLLSCHED_STRICT=1: MPI_Allgather refused on a communicator of 4 ranks "
           "(16 bytes per rank), no fallback to the MPI library: {}: nranks: expected 4 "
           "(communicator size), found 8")
REFUSED_INTER = ("collsched: COLLSCHED_STRICT=1: MPI_Allgather refused between groups of 2 and 2 ranks, "
                 "no fallback to the MPI library: {}: collective: expected 3 (inter-allgather) or 4 "
                 "(inter-allgatherv), found 1")


@pytest.mark.mpi
@pytest.mark.parametrize("inter", [False, True])
def test_strict_refusal_returns_through_the_error_handler(strict_app, tmp_path, inter):
    """MPI_ERRORS_RETURN: both collectives return MPI_ERR_OTHER; a handler of the
    program's own is called once per refused call; one line says what was refused."""
    f = make_schedule(tmp_path / "p8.sched", "ring", 8)
    proc = run_strict(strict_app, f, "return", *(["inter"] if inter else []))
    assert proc.returncode == 0 and "strict_app: OK" in proc.stdout, proc.stdout + proc.stderr
    lines = collsched_lines(proc.stderr)
    assert lines == [(REFUSED_INTER if inter else REFUSED).format(f)], proc.stderr
    assert "falling back" not in proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("inter", [False, True])
def test_strict_refusal_aborts_with_the_default_handler(strict_app, tmp_path, inter):
    """MPI_ERRORS_ARE_FATAL (the default): the job aborts in MPI_Allgather instead of going
    on with an unfilled buffer, after the line that says why."""
    f = make_schedule(tmp_path / "p8.sched", "ring", 8)
    proc = run_strict(strict_app, f, "fatal", *(["inter"] if inter else []))
    assert proc.returncode != 0 and "strict_app: returned" not in proc.stdout, proc.stdout + proc.stderr
    assert (REFUSED_INTER if inter else REFUSED).format(f) in collsched_lines(proc.stderr), proc.stderr


# ---- PAT_UseSchedule with a bad file: one line ----

@pytest.mark.mpi
@pytest.mark.parametrize("name", ["wrong_ranks", "deadlock"])
def test_pat_use_schedule_bad_file_says_it_once(files, tmp_path, name):
    """The loader's line and PAT_UseSchedule's repeated it on rank 0: now the loader's only."""
    minibench = Path(os.environ.get("COLLSCHED_BUILD", ROOT / "build")) / "bin" / "collsched-minibench"
    if not minibench.exists():
        pytest.skip(f"{minibench} not built (make lab)")
    d = tmp_path / "pat"
    d.mkdir()
    (d / "it-0.sched").write_bytes(files[name].read_bytes())
    proc = subprocess.run(mpirun_cmd(P) + [str(minibench), "--bytes", "1000", "--iterations", "1",
                                           "--flat-iterations", "0", "--max-delay-ms", "2", "--seed", "1",
                                           "--pat", "bdr-files", "--pat-tau", "2e-4",
                                           "--pat-schedules", str(d / "it-%d.sched")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if "it-0.sched" in ln]
    assert len(lines) == 1 and EXPECTED_REASON[name] in lines[0], proc.stderr[-3000:]
