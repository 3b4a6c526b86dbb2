"""Fallback paths: a schedule that does not fit the call, or a corrupt, truncated or hostile
file, makes every rank run the MPI library's collective (data still byte-checked) with one
line on stderr; COLLSCHED_STRICT=1 turns that into an MPI error."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from collsched import schedfile
from collsched.algorithms import Request, generate
from rt_helpers import make_schedule, run_driver

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
    "crossed_pieces": "do not match",
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
@pytest.mark.parametrize("name", ["wrong_ranks", "corrupt"])
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
