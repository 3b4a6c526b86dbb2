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


def test_half_duplex_and_topology(tmp_path, capsys):
    """--duplex half and a homogeneous --topology write a record (their duplex and FIFO
    threshold), show prints both, verify proves it; a multi-site topology is refused in one
    line and --form auto then writes the explicit file."""
    f = tmp_path / "nex.sched"
    status, out, _ = run(capsys, "compile", "--algorithm", "nex", "--ranks", 48, "--bytes", "64KiB", "--form",
                         "compact", "--topology", "topologies/tryton-48.yaml", "--duplex", "half", "-o", f, "--json")
    d = json.loads(out)
    assert status == 0 and (d["duplex"], d["fifo_min_piece"], d["topology"]) == ("half", 6251, "topologies/tryton-48.yaml")
    desc = read_compact(f)
    assert not desc.full_duplex and desc.fifo_min_piece == 6251
    status, out, _ = run(capsys, "show", f)
    assert status == 0 and "duplex     half" in out and "topology   the default cluster" in out
    assert run(capsys, "verify", f)[0] == 0
    # a slower LAN whose TCP window caps every flow: no FIFO marks, "a topology file"
    lan = tmp_path / "lan.yaml"
    lan.write_text("name: lan\ntcp_window: 64KiB\nsites:\n  - {name: s, hosts: 16, lan: {latency: 200us, "
                   "bandwidth: 10Gbit/s}}\n")
    g = tmp_path / "ring.sched"
    assert run(capsys, "compile", "--algorithm", "ring", "--ranks", 16, "--bytes", "8MiB", "--form", "compact",
               "--topology", lan, "-o", g)[0] == 0
    status, out, _ = run(capsys, "show", g)
    assert "fifo sends none" in out and "a homogeneous one-site topology file" in out
    assert run(capsys, "verify", g)[0] == 0
    h = tmp_path / "wan.sched"
    status, _, err = run(capsys, "compile", "--algorithm", "ring", "--ranks", 48, "--bytes", "1KiB", "--form",
                         "compact", "--topology", "topologies/wan-3x16.yaml", "-o", h)
    assert status == 2 and len(err.strip().splitlines()) == 1 and "3 sites" in err and not h.exists()
    assert run(capsys, "compile", "--algorithm", "ring", "--ranks", 48, "--bytes", "1KiB", "--form", "auto",
               "--topology", "topologies/wan-3x16.yaml", "-o", h)[0] == 0
    assert h.read_bytes()[:8] == b"COLLSCHD"


def test_auto_with_a_homogeneous_topology(tmp_path):
    """--form auto: compact from AUTO_MIN_RANKS ranks on a homogeneous file too."""
    from collsched.compact import choose_form

    big = tmp_path / "big.yaml"
    big.write_text(f"name: big\nsites:\n  - {{name: s, hosts: {AUTO_MIN_RANKS}, lan: {{latency: 10us, "
                   f"bandwidth: 100Gbit/s}}}}\n")
    assert choose_form("auto", "ring", AUTO_MIN_RANKS, topology=str(big)) == "compact"
    assert choose_form("auto", "ring", AUTO_MIN_RANKS - 1, topology=str(big)) == "explicit"
    assert choose_form("auto", "ring", AUTO_MIN_RANKS, topology="topologies/grid-8x128.yaml") == "explicit"


def test_version_two_records_verify_show_and_predict(tmp_path, capsys):
    """hier and bdr records: compile --json carries the per-level model's figures (hier) or
    says why there are none (bdr); verify proves a record alone with its algorithm's own
    check (no false difference against the default cluster); show prints the tail."""
    hier, bdr, pap = tmp_path / "h.sched", tmp_path / "b.sched", tmp_path / "late.yaml"
    pap.write_text("arrivals: [0.0, 0.002, 0.0, 0.0, 0.001]\n")
    assert main(["compile", "--algorithm", "hier", "--ranks", "48", "--topology", "topologies/wan-3x16.yaml",
                 "--bytes", "64KiB", "--form", "compact", "-o", str(hier), "--json"]) == 0
    h = json.loads(capsys.readouterr().out)
    assert h["model"] == "per-level" and 0 < h["lower_bound_s"] <= h["predicted_s"], h
    assert main(["compile", "--algorithm", "bdr", "--ranks", "5", "--pap", str(pap), "--bytes", "64KiB",
                 "--form", "compact", "-o", str(bdr), "--json"]) == 0
    b = json.loads(capsys.readouterr().out)
    assert b["predicted_s"] is None and "per-level model" in b["model_note"], b
    assert main(["verify", str(hier), str(bdr)]) == 0
    out = capsys.readouterr().out
    assert out.count(": valid (") == 2, out
    assert main(["show", str(hier)]) == 0
    out = capsys.readouterr().out
    assert "sites      3: 16, 16, 16 ranks" in out and "fifo lan" in out and "fifo sends" not in out, out
