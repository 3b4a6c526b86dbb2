"""The CLI: exit codes, JSON keys, one-line errors for every malformed input, no partial output."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from collsched import schedfile
from collsched.algorithms import Request, generate
from collsched.cli import main
from collsched.errors import InputError

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
    (["compile", "--algorithm", "ring", "--ranks", "4", "--bytes", "8", "--collective", "gather", "-o", "x"], "invalid choice"),
    (["compile", "--algorithm", "ring", "--ranks", "4", "--bytes", "8", "--collective", "bcast", "-o", "x"], "or auto for bcast"),
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


# --- every outcome of main is an exit status and one line ------------------------------

@pytest.mark.parametrize("exc,status,text", [
    (ZeroDivisionError("division by zero"), 3, "internal error: ZeroDivisionError: division by zero"),
    (RecursionError("maximum recursion depth exceeded"), 3, "internal error: RecursionError"),
    (MemoryError(), 3, "out of memory"),
    (KeyError("x\ny"), 3, "internal error: KeyError"),
    (FileNotFoundError(2, "No such file or directory", "/nowhere/x.yaml"), 2, "/nowhere/x.yaml: No such file"),
    (OSError(28, "No space left on device", "/full/x.sched"), 2, "/full/x.sched: no space left on the device"),
    (OSError(5, "Input/output error"), 3, "internal error: OSError"),
])
def test_unexpected_errors_are_one_line(tmp_path, capsys, monkeypatch, exc, status, text):
    """Whatever a command raises, main prints one line (no traceback) and returns the
    documented status: 3 with a hint to report it, 2 for a file named by the error."""
    import collsched.cli as cli

    def boom(_args):
        raise exc
    monkeypatch.setitem(cli._COMMANDS, "verify", boom)
    (tmp_path / "x.sched").write_bytes(b"")  # a regular file: the input checks pass
    code = main(["verify", str(tmp_path / "x.sched")])
    out, err = capsys.readouterr()
    assert code == status
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert text in err
    if status == 3 and not isinstance(exc, MemoryError):
        assert "please report" in err


def test_closed_stdout_is_quiet(tmp_path, capsys, monkeypatch):
    import collsched.cli as cli

    def closed(_args):
        raise BrokenPipeError(32, "Broken pipe")
    monkeypatch.setitem(cli._COMMANDS, "verify", closed)
    (tmp_path / "x.sched").write_bytes(b"")
    assert main(["verify", str(tmp_path / "x.sched")]) == 0  # `| head` is not an error
    assert capsys.readouterr().err == ""


def test_version_and_help_return_0(capsys):
    assert main(["--version"]) == 0
    assert main(["compile", "--help"]) == 0
    assert "collsched" in capsys.readouterr().out


def test_bytes_above_2_53_keep_every_digit(tmp_path, capsys):
    """--bytes is an exact integer up to 2^63 - 1 (no float round trip), and refused
    beyond with one line naming --bytes and the range."""
    out = tmp_path / "b.sched"
    for size in (2**53 + 1, 2**63 - 1):
        assert main(["compile", "--algorithm", "ring", "--ranks", "4", "--bytes", str(size),
                     "--segments", "3", "-o", str(out)]) == 0
        assert schedfile.read(out).bytes_max == size
    for text in ("9223372036854775808", "18446744073709551615", "1e30", "1e999999999"):
        assert main(["compile", "--algorithm", "ring", "--ranks", "4", "--bytes", text, "-o",
                     str(tmp_path / "n.sched")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--bytes" in err and "Traceback" not in err
    assert not (tmp_path / "n.sched").exists()


def test_piece_bounds_do_not_overflow():
    """Piece sizes at 2^63 - 1 bytes and 65535 segments: the runtime's formula, exact."""
    s = generate("ring", Request(2, nseg=65535))
    n = 2**63 - 1
    sizes = s.piece_bytes(n)
    assert int(sizes.sum()) == n and sizes.min() >= 0
    assert [int(x) for x in sizes[:3]] == [((k + 1) * n) // 65535 - (k * n) // 65535 for k in range(3)]


def test_memory_estimate_refuses_before_allocating(tmp_path, capsys):
    """--ranks 100000 (74.5 GiB in one matrix) and --segments 65535 at 64 ranks are
    refused by budget.py's estimate at once, naming the options."""
    import resource

    from collsched.model import budget

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for argv in (["--ranks", "100000"], ["--ranks", "64", "--segments", "65535"]):
        assert main(["compile", "--algorithm", "ring", "--bytes", "1", "-o", str(tmp_path / "x.sched"),
                     *argv]) == 2
        err = capsys.readouterr().err
        assert "--ranks" in err and "--segments" in err and "of memory" in err
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KiB
    assert budget.estimate(64, 65535) > 100 * 2**30
    assert budget.estimate(256, 8) < 2**30  # the compiler benchmark's sizes fit


def test_non_finite_predictions_are_refused():
    """A prediction that overflowed (a latency of 1e308 s) is refused in one line, never
    printed as Infinity in JSON."""
    from collsched.pipeline import check_finite
    from collsched.model.simulate import simulate
    from collsched.inputs.topology import homogeneous

    topo = homogeneous(4, latency_s=1e308)
    s = generate("ring", Request(4))
    with np.errstate(over="ignore"):
        _, m = simulate(s, topo, 1 << 20)
    assert not np.isfinite(m.run_time_s)
    with pytest.raises(InputError, match="not finite"):
        check_finite(m, topo, "--topology", 1 << 20)


def test_units_read_numbers_strictly():
    """ASCII digits only, exact sizes, P prefixes, and one ValueError for absurd exponents
    (Decimal's own Overflow escaped before: latency '1e999999999 s')."""
    from collsched.inputs.units import parse_bandwidth, parse_bytes, parse_time

    assert parse_bytes("9007199254740993") == 2**53 + 1
    assert parse_bytes("1PiB") == 2**50 and parse_bandwidth("8Pbit/s") == 1e15
    for fn, text in ((parse_bytes, "٣"), (parse_time, "1e999999999 s"), (parse_time, "1e-999999999"),
                     (parse_bandwidth, "1e999999999"), (parse_bytes, "0.5"), (parse_bytes, "2**70")):
        with pytest.raises(ValueError):
            fn(text)


def test_json_never_carries_nan_or_infinity():
    from collsched.cli import _json

    text = _json({"a": float("nan"), "b": [1.0, float("inf"), {"c": -float("inf")}], "d": 2.5})
    assert json.loads(text) == {"a": None, "b": [1.0, None, {"c": None}], "d": 2.5}
    assert "NaN" not in text and "Infinity" not in text


def test_bare_command_prints_usage_once(capsys):
    """Bare `collsched`: the usage and the commands on stdout, status 2, no doubled prefix."""
    code, out, err = run(capsys)
    assert code == 2 and out.startswith("usage: collsched") and err == ""
    assert "ls" in out and "collsched: error: collsched" not in out
    code, _, err = run(capsys, "frobnicate")
    assert code == 2 and one_line_error(err).startswith("collsched: error: argument COMMAND: invalid choice")
    code, _, err = run(capsys, "compile")
    assert one_line_error(err).startswith("collsched: error: compile: the following arguments")


def test_short_version_is_version(capsys):
    from collsched import __version__

    assert run(capsys, "-V") == run(capsys, "--version") == (0, f"collsched {__version__}\n", "")


def test_every_option_has_a_default_and_an_example():
    """`--help` of every command: every option says its default and gives an example."""
    import argparse

    from collsched.cli import _build_parser

    parser = _build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {"compile", "verify", "simulate", "show", "ls", "plot", "pools", "bench", "measure",
            "sweep"} <= set(subs.choices)
    missing = []
    for name, sp in subs.choices.items():
        sp.format_help()  # no formatting error (a stray % in a help text)
        for act in sp._actions:
            if isinstance(act, argparse._HelpAction):
                continue
            text = act.help or ""
            if "default: " not in text or "e.g. " not in text:
                missing.append(f"{name} {'/'.join(act.option_strings) or act.dest}")
    assert not missing, missing
    assert "about an hour" in subs.choices["sweep"].format_help()


def test_verify_several_files(tmp_path, capsys):
    good = tmp_path / "good.sched"
    assert run(capsys, "compile", "--algorithm", "ring", "--ranks", 4, "--bytes", 64, "-o", good)[0] == 0
    bad = BAD / "sched" / "invalid-dropped-recv.sched"
    code, out, err = run(capsys, "verify", good, good)
    assert code == 0 and out.count(": valid (ring, 4 ranks") == 2 and err == ""
    code, out, err = run(capsys, "verify", good, bad, good)
    assert code == 1 and out.count(": valid") == 2
    line = one_line_error(err)
    assert line.startswith(f"{bad}: invalid: ") and "no matching recv" in line
    junk = tmp_path / "junk.sched"
    junk.write_bytes(b"x" * 10)
    code, out, err = run(capsys, "verify", good, junk)
    assert code == 2 and out.count(": valid") == 1 and str(junk) in one_line_error(err)
    code, _, err = run(capsys, "verify", junk, bad)  # invalid wins over unreadable
    assert code == 1 and len(err.splitlines()) == 2


def test_ls_and_compile_overlap_warning(tmp_path, capsys):
    d = tmp_path / "scheds"
    d.mkdir()
    base = ["compile", "--algorithm", "ring", "--ranks", 4]
    code, _, err = run(capsys, *base, "--bytes", "1KiB:1MiB", "-o", d / "b.sched")
    assert code == 0 and err == ""
    code, _, err = run(capsys, *base, "--bytes", "8", "-o", d / "c.sched")  # no overlap
    assert code == 0 and err == ""
    code, out, err = run(capsys, "compile", "--algorithm", "bruck", "--ranks", 4, "--bytes", "64KiB",
                         "-o", d / "a.sched")
    line = one_line_error(err)
    assert code == 0 and out and line.startswith("collsched: warning: ")
    assert "b.sched (ring) at 65536 bytes/rank, where a.sched is used" in line
    code, out, err = run(capsys, *base, "--bytes", "8", "-o", d / "c.sched", "--json")  # replaces itself
    assert code == 0 and err == "" and json.loads(out)
    (d / "junk").write_bytes(b"not a schedule")
    code, out, err = run(capsys, "ls", d)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith(f"{d}: 3 schedule(s)")
    assert [ln.split()[0] for ln in lines if ln.startswith("  ") and not ln.startswith("    ")] == \
        ["a.sched", "b.sched", "c.sched", "skipped"]
    assert "    65536 bytes: a.sched wins (sorts first)" in lines
    assert any(ln.startswith("  skipped junk: header:") for ln in lines)
    code, _, err = run(capsys, "ls", d / "a.sched")
    assert code == 2 and "expected a directory" in one_line_error(err)
    # `show DIR` is the same listing as `ls DIR`; with --rank it is refused in one line.
    code, shown, err = run(capsys, "show", d)
    assert code == 0 and err == "" and shown == out
    code, _, err = run(capsys, "show", d, "--rank", 0)
    assert code == 2 and "expected a schedule file, not a directory" in one_line_error(err)
