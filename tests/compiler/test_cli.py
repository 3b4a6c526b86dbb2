"""The CLI: exit codes, JSON keys, one-line errors for every malformed input, no partial output."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from collsched.cli import main

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / "tests" / "data" / "bad"
TRYTON = str(ROOT / "topologies" / "tryton-48.yaml")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_compile_json_keys_and_files(tmp_path, capsys):
    out = tmp_path / "r.sched"
    code, stdout, _ = run(capsys, "compile", "--collective", "allgather", "--algorithm", "ring",
                          "--ranks", 8, "--bytes", 4096, "--topology", TRYTON, "-o", out, "--json")
    assert code == 0
    d = json.loads(stdout)
    for key in ("algorithm", "compile_time_s", "predicted_avg_elapsed_s", "ranks", "file_bytes"):
        assert key in d
    assert d["algorithm"] == "ring" and d["ranks"] == 8 and out.stat().st_size == d["file_bytes"]

    code, stdout, _ = run(capsys, "verify", out)
    assert code == 0 and "valid" in stdout
    code, stdout, _ = run(capsys, "simulate", out, "--topology", TRYTON, "--json")
    sim = json.loads(stdout)
    assert code == 0
    assert {"avg_elapsed_s", "run_time_s", "absorption_s", "exit_times_s"} <= set(sim)
    assert sim["avg_elapsed_s"] == pytest.approx(d["predicted_avg_elapsed_s"])
    assert len(sim["exit_times_s"]) == 8
    code, stdout, _ = run(capsys, "show", out, "--rank", 3)
    assert code == 0 and "rank 3: 14 ops" in stdout and "rank 2:" not in stdout
    png = tmp_path / "g.png"
    code, _, _ = run(capsys, "plot", out, "-o", png)
    assert code == 0 and png.read_bytes()[:4] == b"\x89PNG"


def test_size_range_and_simulate_at_a_size(tmp_path, capsys):
    out = tmp_path / "r.sched"
    assert run(capsys, "compile", "--algorithm", "bruck", "--ranks", 5, "--bytes", "1KiB:1MiB",
               "-o", out)[0] == 0
    code, stdout, _ = run(capsys, "show", out)
    assert "bytes/rank  1024..1048576" in stdout
    code, _, err = run(capsys, "simulate", out, "--bytes", "2MiB")
    assert code == 2 and "1024..1048576" in one_line_error(err)


def test_verification_failure_exits_1(capsys):
    code, _, err = run(capsys, "verify", BAD / "sched" / "invalid-dropped-recv.sched")
    assert code == 1 and "no matching recv" in err and "rank " in err


def test_refused_algorithm_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "x.sched"
    code, _, err = run(capsys, "compile", "--algorithm", "nex", "--ranks", 7, "--bytes", 8, "-o", out)
    assert code == 2 and "even rank count" in one_line_error(err)
    assert not out.exists()


def test_failed_compile_keeps_existing_output(tmp_path, capsys):
    out = tmp_path / "x.sched"
    out.write_bytes(b"previous schedule")
    code, _, err = run(capsys, "compile", "--algorithm", "ring", "--ranks", 4, "--bytes", 8,
                       "--topology", BAD / "topology" / "malformed-yaml.yaml", "-o", out)
    assert code == 2
    one_line_error(err)
    assert out.read_bytes() == b"previous schedule"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.sched"]


@pytest.mark.parametrize("argv, expect", [
    (["compile", "--algorithm", "ring", "--ranks", "4", "--bytes", "lots", "-o", "x"], "--bytes"),
    (["compile", "--algorithm", "ring", "--ranks", "1", "--bytes", "8", "-o", "x"], "--ranks"),
    (["compile", "--algorithm", "ring", "--ranks", "4", "--bytes", "9:3", "-o", "x"], "MIN <= MAX"),
    (["compile", "--algorithm", "ring", "--ranks", "4", "--bytes", "8", "--collective", "bcast", "-o", "x"], "allgather"),
    (["compile", "--algorithm", "ring", "--ranks", "4", "--bytes", "8", "-o", "/no/such/dir/x"], "existing directory"),
    (["compile", "--algorithm", "ring", "--ranks", "four", "--bytes", "8", "-o", "x"], "expected an integer 2..16777216"),
    (["verify", "/no/such/file.sched"], "cannot read file"),
    (["show", str(BAD / "sched" / "header-crc.sched")], "header_crc32"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_arguments_one_line_exit_2(capsys, argv, expect):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert expect in one_line_error(err)


MANIFEST = yaml.safe_load((BAD / "expected.yaml").read_text())
SCHED = {f"sched/{k}": v | {"kind": "sched"} for k, v in
         yaml.safe_load((BAD / "sched" / "expected.yaml").read_text()).items()}


@pytest.mark.parametrize("rel", sorted(MANIFEST) + sorted(SCHED))
def test_malformed_input_through_the_cli(tmp_path, capsys, rel):
    entry = (MANIFEST | SCHED)[rel]
    path = BAD / rel
    out = tmp_path / "out.sched"
    p = str(entry.get("nranks") or _pap_length(path))
    if entry["kind"] == "topology":
        argv = ["compile", "--algorithm", "ring", "--ranks", entry.get("nranks", 2), "--bytes", 8,
                "--topology", path, "-o", out]
    elif entry["kind"] == "pap":
        argv = ["compile", "--algorithm", "ring", "--ranks", p, "--bytes", 8, "--pap", path, "-o", out]
    else:
        argv = ["verify", path]
    code, _, err = run(capsys, *argv)
    assert code == entry.get("exit", 2)
    line = one_line_error(err) if code == 2 else err
    assert entry["expect"] in line and path.name in line or code == 1
    assert not out.exists()


def _pap_length(path):
    """Ranks in a PAP file when it parses (so the test reaches the intended error), else 4."""
    try:
        doc = yaml.safe_load(path.read_text())
        rows = doc.get("arrivals") or doc.get("iterations")[0]
        return max(len(rows), 2)
    except Exception:
        return 4


def test_corpus_size():
    assert len(MANIFEST) + len(SCHED) >= 20


def test_console_script_and_module_entry_points(tmp_path):
    for cmd in ([sys.executable, "-m", "collsched", "--version"],):
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                           env={"PYTHONPATH": str(ROOT / "compiler"), "PATH": "/usr/bin:/bin"})
        assert r.returncode == 0 and r.stdout.startswith("collsched ")
    r = subprocess.run([sys.executable, "-m", "collsched", "compile", "--algorithm", "ring"],
                       capture_output=True, text=True, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT / "compiler"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
