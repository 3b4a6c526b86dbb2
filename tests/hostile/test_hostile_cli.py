"""A generated corpus of hostile command lines.

Every subcommand x every option it takes a value for x hostile values (huge, negative,
zero, NaN, inf, garbage, empty, other scripts' digits, out of the format's range), plus
unknown algorithms, conflicting options, missing, empty, truncated and P=1 schedule files.
Each case runs in-process through collsched.cli.main with stderr captured, and must give:
no traceback, the documented exit status (2 for bad input; the few valid ones 0), exactly
one stderr line naming the option or file for an error, nothing written to the output
directory, under 5 s, and the process's peak RSS under 1 GiB. A handful also run through
the real entry point (.venv/bin/collsched) in a subprocess.

Nothing here starts SMPI, MPI or a sweep: the lab's, the measurement's and the sweep's
entry points are replaced by a function that fails the case, so a value that wrongly
passes validation shows as a failure instead of a long run.
"""
from __future__ import annotations

import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collsched import schedfile
from collsched.cli import main
from collsched.ir import from_op_lists

ROOT = Path(__file__).resolve().parents[2]
EXE = ROOT / ".venv" / "bin" / "collsched"
TOPO = ROOT / "topologies" / "tryton-48.yaml"
GIB = 1 << 30

# Values no numeric option accepts (every option below has a range that excludes them).
BAD_NUMBERS = ["", " ", "nan", "NaN", "inf", "-inf", "1e999999999", "-1e999999999",
               "99999999999999999999", "18446744073709551615", "1e30", "-5", "abc", "٣",
               "１２", "1_000", "0x10", "1e", "½", "5 5", "🙂", "9" * 5000, "--5", "+-3"]
# And what a size (--bytes) refuses besides.
BAD_SIZES = BAD_NUMBERS + ["0.5", "1.5B", "3 parsecs", "64KiBs", "1e-999999999", "9223372036854775808",
                           "5:3", "1:2:3", ":", "64KiB:", "2^10"]


class WouldRun(Exception):
    """A case got past validation into SMPI/MPI/the sweep: the corpus says it must not."""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    assert main(["compile", "--algorithm", "ring", "--ranks", "4", "--bytes", "1KiB:64KiB",
                 "-o", str(d / "ring.sched")]) == 0
    assert main(["compile", "--algorithm", "ring", "--ranks", "64", "--bytes", "64",
                 "-o", str(d / "big.sched")]) == 0
    one = from_op_lists(1, 1, [[]], algorithm="ring")
    one.bytes_min = one.bytes_max = 64
    schedfile.write(one, d / "p1.sched")
    raw = (d / "ring.sched").read_bytes()
    (d / "truncated.sched").write_bytes(raw[: len(raw) // 2])
    (d / "header-only.sched").write_bytes(raw[:128])
    (d / "empty.sched").write_bytes(b"")
    (d / "garbage.sched").write_bytes(b"\x00\xff" * 500)
    (d / "text.sched").write_text("name: not a schedule\n")
    shutil.copy(TOPO, d / "topo.yaml")
    (d / "empty.yaml").write_text("")
    (d / "adir.sched").mkdir()
    (d / "ok.hosts").write_text("localhost slots=2\n")
    (d / "bad.hosts").write_text("localhost slots=-1\n")
    return d


def corpus(d: Path, out: Path) -> list[tuple[list[str], int, str]]:
    """(argv, expected exit status, text the error line must contain) for every case."""
    ring, p1 = str(d / "ring.sched"), str(d / "p1.sched")
    o = str(out / "x.sched")
    png = str(out / "x.png")
    cases: list[tuple[list[str], int, str]] = []

    def bad(argv, named):
        cases.append(([str(a) for a in argv], 2, named))

    compile_ = ["compile", "--algorithm", "ring", "--ranks", "4", "--bytes", "1KiB", "-o", o]

    def with_opt(base, opt, value):
        argv = list(base)
        if opt in argv:
            argv[argv.index(opt) + 1] = value
        else:
            argv += [opt, value]
        return argv

    # Numeric options of every subcommand x hostile numbers.
    numeric = [
        (compile_, "--ranks"), (compile_, "--segments"),
        (["show", ring], "--rank"),
        (["plot", ring, "-o", png], "--max-ranks"),
        (["bench"], "--max-delay-ms"), (["bench"], "--iterations"), (["bench"], "--flat-iterations"),
        (["bench"], "--seed"), (["bench"], "--tcp-gamma"), (["bench"], "--ranks"),
        (["bench", "--suite", "compiler"], "--ranks"),
        (["measure", "--backend", "smpi", "--ranks", "4", "-o", str(out / "m.yaml")], "--ranks"),
        (["measure", "--backend", "smpi", "--ranks", "4", "-o", str(out / "m.yaml")], "--repeats"),
        (["measure", "--backend", "smpi", "--ranks", "4", "-o", str(out / "m.yaml")], "--gap-burst"),
        (["measure", "--backend", "smpi", "--ranks", "4", "-o", str(out / "m.yaml")], "--site-factor"),
        (["measure", "--backend", "smpi", "--ranks", "4", "-o", str(out / "m.yaml")], "--tcp-gamma"),
        (["measure", "--backend", "smpi", "--ranks", "4", "-o", str(out / "m.yaml")], "--per-octave"),
        (["measure", "--backend", "smpi", "--ranks", "4", "-o", str(out / "m.yaml")], "--sweep-budget"),
        (["measure", "--backend", "smpi", "--ranks", "4", "-o", str(out / "m.yaml")], "--refine"),
        (["sweep"], "--ranks"), (["sweep"], "--max-delays-ms"), (["sweep"], "--iterations"),
        (["sweep"], "--seed"), (["sweep"], "--floats"),
        (["pools", str(TOPO)], "--ranks"),
    ]
    for base, opt in numeric:
        for value in BAD_NUMBERS:
            bad(with_opt(base, opt, value), opt)
    # Sizes: compile, simulate, plot, bench, measure --sizes and --sweep.
    for base in (compile_, ["simulate", ring], ["plot", ring, "-o", png], ["bench"]):
        for value in BAD_SIZES:
            bad(with_opt(base, "--bytes", value), "--bytes")
    for value in BAD_SIZES:
        bad(["measure", "--backend", "smpi", "--ranks", "4", "--sizes", value, "-o", str(out / "m.yaml")],
            "--sizes")
        for sweep in (f"1:{value}", f"{value}:4MiB"):
            bad(["measure", "--backend", "smpi", "--ranks", "4", "--sweep", sweep, "-o", str(out / "m.yaml")],
                "--sweep")
    # Times: --tau.
    for value in ["", "nan", "inf", "-1us", "0", "1e999999999 s", "5 parsecs", "٣us", "1e-999999999"]:
        bad(with_opt(compile_, "--tau", value) + ["--algorithm", "bdr"], "--tau")
    # Names: algorithms, collectives, choices.
    for value in ["", "foo", "RING", "ring ", "ring,bruck", "native", "🙂", "../ring", "x" * 3000]:
        bad(with_opt(compile_, "--algorithm", value), "--algorithm")
    for value in ["", "foo", "ring,,foo", "native:", "🙂"]:
        bad(["bench", "--algorithms", value], "--algorithms")
        bad(["sweep", "--algorithms", value], "--algorithms")
    for value in ["gather", "", "allgatherv", "ALLGATHER", "Bcast"]:
        bad(with_opt(compile_, "--collective", value), "--collective")
        bad(["bench", "--collective", value], "--collective")
    for cmd, opt, value in [(compile_, "--duplex", "halfish"), (compile_, "--model", "exact"),
                            (["simulate", ring], "--duplex", ""), (["simulate", ring], "--model", "x"),
                            (["plot", ring, "-o", png], "--duplex", "full-ish"),
                            (["bench"], "--backend", "mpich"), (["bench"], "--suite", "all"),
                            (["bench"], "--shared-data", "maybe"),
                            (["measure", "--ranks", "4", "-o", str(out / "m.yaml")], "--backend", "tcp")]:
        bad(with_opt(cmd, opt, value), opt)
    # Launchers, host files, binding (real MPI only; lab/launch.py): hostile templates and files.
    measure_mpi = ["measure", "--backend", "mpi", "--ranks", "4", "-o", str(out / "m.yaml")]
    for base in (["bench", "--backend", "mpi"], ["bench", "--backend", "mpi", "--suite", "recurring"], measure_mpi):
        for value in ["", " ", "{program}", "mpirun -np {ranks}", "mpirun -np {ranks} {program} {program}",
                      "mpirun -np {nranks} {program}", "mpirun -np {ranks!s} {program}", "mpirun {", "mpirun }",
                      "mpirun 'x {ranks} {program}", "no-such-launcher -n {ranks} {program}",
                      "mpirun -np {ranks} --hostfile {hostfile} {program}", "🙂 {ranks} {program}",
                      "\x00 {ranks} {program}", "x" * 5000 + " {ranks} {program}"]:
            bad(with_opt(base, "--launcher", value), "--launcher")
        for value in ["", "sideways", "CORE", "core,socket", "🙂"]:
            bad(with_opt(base, "--bind-to", value), "--bind-to")
        for name in ["missing.hosts", "adir.sched", "garbage.sched", "bad.hosts", "empty.yaml"]:
            bad(with_opt(base, "--hostfile", str(d / name)), name)
        bad(with_opt(base, "--launcher", "env -n {ranks} {program}") + ["--bind-to", "core"], "--bind-to")
        bad(with_opt(base, "--launcher", "env -n {ranks} {program}") + ["--hostfile", str(d / "ok.hosts")],
            "--hostfile")
    bad(["bench", "--backend", "mpi", "--algorithms", "ring,native:2dmesh"], "--algorithms")
    bad(["bench", "--algorithms", "native:two_proc"], "--algorithms")
    for opt, value in (("--launcher", "mpirun"), ("--hostfile", str(d / "ok.hosts")), ("--bind-to", "core")):
        bad(["bench", opt, value], opt)  # --backend smpi
        bad(["bench", "--suite", "compiler", "--backend", "mpi", opt, value], opt)
        bad(["measure", "--backend", "smpi", "--ranks", "4", "--platform-from", str(TOPO), opt, value,
             "-o", str(out / "m.yaml")], opt)
    # Conflicting or out-of-place values.
    bad(with_opt(compile_, "--algorithm", "nex") + ["--ranks", "5"], "--algorithm")
    bad(with_opt(compile_, "--algorithm", "rd") + ["--ranks", "6"], "--algorithm")
    bad(with_opt(compile_, "--ranks", "1"), "--ranks")
    bad(with_opt(compile_, "--ranks", "100000"), "--ranks")  # 74.5 GiB in one matrix
    bad(with_opt(compile_, "--ranks", "64") + ["--segments", "65535"], "--ranks")
    bad(with_opt(compile_, "--segments", "0"), "--segments")
    bad(with_opt(compile_, "--segments", "65536"), "--segments")
    bad(["simulate", ring, "--bytes", "1:2"], "--bytes")
    bad(["simulate", ring, "--bytes", "1MiB"], "--bytes")  # the file serves 1KiB..64KiB
    bad(["simulate", ring, "--bytes", "0"], "--bytes")
    bad(["show", ring, "--rank", "4"], "--rank")
    bad(["bench", "--ranks", "4,8"], "--ranks")
    bad(["bench", "--ranks", "1"], "--ranks")
    bad(["bench", "--ranks", "100000"], "--ranks")
    bad(["bench", "--suite", "compiler", "--ranks", "1,2"], "--ranks")
    bad(["bench", "--suite", "compile-grid", "--iterations", "0"], "--iterations")
    bad(["pools", str(TOPO), "--ranks", "100000"], "--ranks")
    bad(["sweep", "--ranks", "1"], "--ranks")
    # Plots: a suffix that is not a figure format, lanes out of range.
    for value in ["x.txt", "x.sched", "x.png.bak", "x.PNGX", "x.json"]:
        bad(["plot", ring, "-o", str(out / value)], "-o")
        bad(["pools", str(TOPO), "--plot", str(out / value)], "--plot")
        bad(["bench", "--plot", str(out / value)], "--plot")
        bad(["sweep", "--plot", str(out / value)], "--plot")
    # Files: missing, empty, truncated, garbage, a directory, a text file, wrong inputs.
    for name in ["missing.sched", "empty.sched", "truncated.sched", "header-only.sched",
                 "garbage.sched", "text.sched", "adir.sched"]:
        path = str(d / name)
        show = ["show", path, "--rank", "0"] if name == "adir.sched" else ["show", path]  # show DIR lists it
        for cmd in (["verify", path], ["simulate", path], show, ["plot", path, "-o", png],
                    ["simulate", path, "--json"], ["verify", ring, path]):
            bad(cmd, name)
    for opt, name in [("--topology", "missing.yaml"), ("--topology", "empty.yaml"), ("--pap", "missing.yaml"),
                      ("--pap", "empty.yaml"), ("--topology", "ring.sched"), ("--pap", "ring.sched")]:
        bad(compile_ + [opt, str(d / name)], name)
        bad(["simulate", ring, opt, str(d / name)], name)
    bad(["pools", str(d / "missing.yaml")], "missing.yaml")
    bad(["pools", str(d / "ring.sched")], "ring.sched")
    bad(["ls"], "directory")
    bad(["ls", ring], "ring.sched")
    bad(["ls", str(d / "missing")], "missing")
    # Usage errors.
    bad(["frobnicate"], "frobnicate")
    bad(["compile"], "required")
    bad(["compile", "--algorithm", "ring", "--ranks", "4", "--bytes", "1KiB"], "-o")
    bad(["verify"], "file")
    bad(["show", ring, "--no-such-option"], "--no-such-option")
    bad(["plot", ring], "-o")
    # Valid cases, at the edges: exit 0, nothing on stderr.
    ok = str(out.parent / "ok")
    for argv in (["verify", p1], ["show", p1], ["simulate", p1, "--json"], ["verify", ring],
                 ["simulate", ring, "--bytes", "1KiB", "--duplex", "half", "--json"],
                 ["simulate", ring, "--model", "fluid", "--duplex", "half"],
                 ["compile", "--algorithm", "ring", "--ranks", "2", "--bytes", "0", "-o", ok + "/a.sched"],
                 ["compile", "--algorithm", "ring", "--ranks", "4", "--bytes", "9007199254740993",
                  "-o", ok + "/b.sched", "--json"],
                 ["compile", "--algorithm", "bruck", "--ranks", "4", "--bytes", "9223372036854775807",
                  "--segments", "7", "-o", ok + "/c.sched", "--json"],
                 ["compile", "--algorithm", "ring", "--ranks", "2", "--segments", "65535", "--bytes", "1KiB",
                  "-o", ok + "/d.sched"],
                 ["compile", "--algorithm", "nex", "--ranks", " 4 ", "--bytes", " 64KiB ", "--duplex", "half",
                  "-o", ok + "/e.sched"],
                 ["plot", p1, "-o", ok + "/p1.svg"], ["plot", ring, "-o", ok + "/r.pdf", "--max-ranks", "1"],
                 ["show", ring, "--rank", "+3"], ["ls", str(d)], ["verify", ring, p1]):
        cases.append((argv, 0, ""))
    return cases


@pytest.fixture
def no_long_runs(monkeypatch):
    """The lab, the measurement and the sweep fail the case instead of starting."""
    import collsched.lab.bench_compiler as bc
    import collsched.lab.runner as runner
    import collsched.lab.sweep as sweep
    import collsched.lab.measure as measure

    def refuse(*_a, **_k):
        raise WouldRun("a hostile case got past validation")
    for mod, name in ((runner, "run_lab"), (sweep, "run_sweep"), (measure, "measure"),
                      (bc, "run_compiler_bench"), (bc, "run_grid_compile_bench")):
        monkeypatch.setattr(mod, name, refuse)


def listing(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def test_hostile_command_lines(files, tmp_path, capsys, no_long_runs):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "ok").mkdir()
    cases = corpus(files, out)
    assert len(cases) >= 300, len(cases)  # the corpus cannot pass vacuously
    assert sum(code == 0 for _, code, _ in cases) >= 10
    inputs_before = listing(files)
    failures = []
    for argv, want, named in cases:
        before = listing(out)
        t0 = time.process_time()  # CPU seconds: a loaded machine does not make a case fail
        code = main(list(argv))
        took = time.process_time() - t0
        stdout, err = capsys.readouterr()
        lines = err.splitlines()
        why = []
        if "Traceback" in err or "Traceback" in stdout:
            why.append("traceback")
        if code != want:
            why.append(f"exit {code}, expected {want}")
        if want:
            if len(lines) != 1:
                why.append(f"{len(lines)} stderr lines")
            elif not lines[0].startswith("collsched"):
                why.append("line does not start with collsched")
            elif named not in lines[0]:
                why.append(f"line does not name {named!r}")
            if listing(out) != before:
                why.append("wrote to the output directory")
        elif err:
            why.append("stderr for a valid case")
        if took > 5:
            why.append(f"took {took:.1f} s")
        if why:
            failures.append(f"{[a[:60] for a in argv]}: {', '.join(why)}: {err.strip()[:300]}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    assert not failures, f"{len(failures)} of {len(cases)} cases:\n" + "\n".join(failures)
    assert listing(out) == [] and listing(files) == inputs_before
    assert rss < GIB, f"peak RSS {rss / GIB:.2f} GiB"


def _children_cpu_s() -> float:
    """CPU seconds of the finished child processes (a wall clock would fail on a loaded machine)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _run_exe(*argv, timeout=30):
    return subprocess.run([str(EXE), *map(str, argv)], capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(not EXE.exists(), reason="no .venv/bin/collsched")
@pytest.mark.parametrize("argv,named", [
    (["compile", "--algorithm", "ring", "--ranks", "4", "--bytes", "1e30", "-o", "OUT"], "--bytes"),
    (["compile", "--algorithm", "ring", "--ranks", "99999999999999999999", "--bytes", "1", "-o", "OUT"], "--ranks"),
    (["compile", "--algorithm", "ring", "--ranks", "64", "--segments", "65535", "--bytes", "1", "-o", "OUT"],
     "--ranks"),
    (["plot", "RING", "-o", "OUT.txt"], "-o"),
    (["bench", "--max-delay-ms", "nan"], "--max-delay-ms"),
])
def test_real_entry_point(files, tmp_path, argv, named):
    """The installed script: one line, exit 2, nothing written, and fast (the memory
    estimate refuses before allocating: no 130 GB attempt)."""
    argv = [str(tmp_path / "x.sched") if a == "OUT" else str(tmp_path / "x.txt") if a == "OUT.txt"
            else str(files / "ring.sched") if a == "RING" else a for a in argv]
    t0 = _children_cpu_s()
    run = _run_exe(*argv)
    assert _children_cpu_s() - t0 < 5
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert len(run.stderr.splitlines()) == 1 and named in run.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not EXE.exists(), reason="no .venv/bin/collsched")
def test_real_entry_point_closed_pipe(files):
    """`collsched show big.sched | head -1`: the reader leaves early; no traceback, status
    0 (the reader's choice is not an error of collsched, as with `git log | head`)."""
    run = subprocess.run(["bash", "-c", f"'{EXE}' show '{files / 'big.sched'}' | head -1; "
                                        "echo \"status ${PIPESTATUS[0]}\" >&2"],
                         capture_output=True, text=True, timeout=30)
    assert run.stdout.startswith("file ")
    assert run.stderr.strip() == "status 0", run.stderr


@pytest.mark.skipif(not EXE.exists(), reason="no .venv/bin/collsched")
def test_real_entry_point_valid_p1(files):
    run = _run_exe("verify", files / "p1.sched")
    assert run.returncode == 0 and run.stderr == "" and "valid" in run.stdout
