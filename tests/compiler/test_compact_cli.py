"""The command line of the compact form (cli_compact.py): compile --form, show, verify, ls."""
from __future__ import annotations

import json

from collsched.cli import main
from collsched.compact import AUTO_MIN_RANKS, read_compact


def run(capsys, *argv):
    status = main([str(x) for x in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_compile_show_verify_ls(tmp_path, capsys):
    f = tmp_path / "ring.sched"
    status, out, err = run(capsys, "compile", "--algorithm", "ring", "--ranks", 8, "--bytes", "64KiB",
                           "--form", "compact", "-o", f, "--json")
    d = json.loads(out)
    assert (status, err, d["form"], d["file_bytes"]) == (0, "", "compact", 56) and f.stat().st_size == 56
    desc = read_compact(f)
    assert (desc.algorithm, desc.nranks, desc.bytes_min, desc.bytes_max) == ("ring", 8, 65536, 65536)
    status, out, _ = run(capsys, "show", f)
    assert status == 0 and "algorithm  ring" in out and "rank 0: 14" in out
    status, out, _ = run(capsys, "verify", f)
    assert status == 0 and "valid (ring, 8 ranks, compact description)" in out
    status, out, _ = run(capsys, "ls", tmp_path)
    assert status == 0 and "ring.sched  allgather 8 ranks  65536 bytes/rank  ring" in out


def test_auto_is_explicit_below_the_threshold_and_compact_above(tmp_path, capsys):
    small, big = tmp_path / "small.sched", tmp_path / "big.sched"
    assert run(capsys, "compile", "--algorithm", "bruck", "--ranks", 8, "--bytes", "1KiB", "--form", "auto",
               "-o", small)[0] == 0
    assert small.stat().st_size > 56 and small.read_bytes()[:8] == b"COLLSCHD"
    assert run(capsys, "compile", "--algorithm", "bruck", "--ranks", AUTO_MIN_RANKS, "--bytes", "1KiB",
               "--form", "auto", "-o", big)[0] == 0
    assert big.stat().st_size == 56


def test_refusals_are_one_line(tmp_path, capsys):
    f = tmp_path / "x.sched"
    status, out, err = run(capsys, "compile", "--algorithm", "min3", "--ranks", 8, "--bytes", "1KiB",
                           "--form", "compact", "-o", f)
    assert status == 2 and len(err.strip().splitlines()) == 1 and "has no compact form" in err
    assert not f.exists()
    assert run(capsys, "compile", "--algorithm", "ring", "--ranks", 8, "--bytes", "1KiB", "--form", "compact",
               "-o", f)[0] == 0
    status, _, err = run(capsys, "show", f, "--rank", 0)
    assert status == 2 and "--rank" in err
    f.write_bytes(f.read_bytes()[:40])  # truncated record
    status, _, err = run(capsys, "verify", f)
    assert status == 2 and "expected 56 bytes" in err and len(err.strip().splitlines()) == 1
