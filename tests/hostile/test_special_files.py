"""Special files as inputs and outputs, through the command line.

Inputs: a FIFO, /dev/zero, a directory, a socket given to verify, --topology or --pap are
refused at once (nothing blocks, nothing is read) with one line naming the file.
Outputs: -o a device, a FIFO, a socket, a directory, '', '.', '/', a path in a missing
directory, /proc/x, bench --keep FILE: one line naming the option, exit 2, nothing written
and the special file left as it was. A full disk during the write: one line, exit 2, no
temporary left, the old file unchanged.

Devices are made with mknod in a temporary directory (root only), never /dev/full itself:
a regression must not replace a real device.
"""
from __future__ import annotations

import errno
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from collsched.cli import main

ROOT = Path(__file__).resolve().parents[2]
COMPILE = ["compile", "--algorithm", "ring", "--ranks", "4", "--bytes", "1KiB"]
IS_ROOT = os.geteuid() == 0


@pytest.fixture(autouse=True)
def alarm():
    """A case that blocks (a FIFO opened for reading) fails instead of hanging the suite."""
    def timeout(*_):
        raise TimeoutError("blocked on a special file")
    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def run(capsys, argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("collsched: error: ")
    return lines[0]


def listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


@pytest.fixture
def specials(tmp_path):
    """A directory with a FIFO, a socket, a subdirectory and (as root) a character device
    with /dev/full's numbers."""
    d = tmp_path / "special"
    d.mkdir()
    os.mkfifo(d / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(d / "sock"))
    (d / "dir").mkdir()
    if IS_ROOT:
        os.mknod(d / "full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    yield d
    sock.close()


def kinds(d: Path) -> dict:
    return {p.name: stat.S_IFMT(os.lstat(p).st_mode) for p in d.iterdir()}


INPUT_SPECIALS = ["fifo", "sock", "dir", "/dev/zero", "/dev/null"]


def _input(specials, name):
    return name if name.startswith("/") else specials / name


@pytest.mark.parametrize("name", INPUT_SPECIALS)
@pytest.mark.parametrize("how", ["verify", "show", "simulate", "--topology", "--pap", "pools"])
def test_special_input_is_refused(capsys, tmp_path, specials, name, how):
    path = _input(specials, name)
    out = tmp_path / "out"
    out.mkdir()
    if how in ("verify", "show", "simulate", "pools"):
        argv = [how, path]
    else:
        argv = COMPILE + [how, path, "-o", out / "x.sched"]
    code, shown, err = run(capsys, argv)
    if how == "show" and name == "dir":  # show DIR lists a schedules directory (as ls DIR)
        assert code == 0 and err == "" and shown.startswith(f"{path}: 0 schedule(s)")
        return
    line = one_line(err)
    assert code == 2
    option = how if how.startswith("--") else "TOPOLOGY" if how == "pools" else "FILE"
    assert f"{option}: {path}: expected a regular" in line, line
    assert listing(out) == []


def test_loaders_refuse_special_files_on_their_own(tmp_path, specials):
    """The CLI checks input options up front; the loaders still refuse by themselves (a file
    swapped for a FIFO after the check, or a library caller)."""
    from collsched import schedfile
    from collsched.inputs.arrivals import load_pap
    from collsched.errors import InputError
    from collsched.inputs.topology import load_topology

    for load in (load_topology, load_pap, schedfile.read):
        with pytest.raises(InputError, match="found a FIFO"):
            load(specials / "fifo")


def test_dev_zero_pattern_fails_fast(capsys, tmp_path):
    """--pap /dev/zero ended in a MemoryError after reading gigabytes."""
    code, _, err = run(capsys, COMPILE + ["--pap", "/dev/zero", "-o", tmp_path / "x.sched"])
    assert code == 2 and "character device" in one_line(err)


@pytest.mark.parametrize("name", ["fifo", "sock", "dir", "full"])
@pytest.mark.parametrize("option", ["-o", "plot"])
def test_special_output_is_refused_and_left_alone(capsys, tmp_path, specials, name, option):
    if name == "full" and not IS_ROOT:
        pytest.skip("mknod needs root")
    sched = tmp_path / "r.sched"
    assert main(COMPILE + ["-o", str(sched)]) == 0
    capsys.readouterr()
    before = kinds(specials)
    target = specials / name
    argv = COMPILE + ["-o", target] if option == "-o" else ["plot", sched, "-o", target]
    code, _, err = run(capsys, argv)
    line = one_line(err)
    assert code == 2 and f"-o: {target}" in line, line
    assert kinds(specials) == before, "the special file is still what it was"
    assert sorted(kinds(specials)) == sorted(before), "no temporary left"


@pytest.mark.parametrize("target,needle", [
    ("", "empty string"), (".", "directory"), ("/", "directory"), ("DIR", "is a directory"),
    ("DIR/", "directory"), ("DIR/missing/x.sched", "does not exist"), ("/proc/x", "cannot create"),
    ("FILE/x.sched", "cannot write there"), ("/proc/self/status", "cannot create")])
def test_bad_output_paths(capsys, tmp_path, target, needle):
    d = tmp_path / "d"
    d.mkdir()
    (tmp_path / "f").write_text("keep")
    target = target.replace("DIR", str(d)).replace("FILE", str(tmp_path / "f"))
    before = listing(tmp_path), listing(d)
    code, _, err = run(capsys, COMPILE + ["-o", target])
    line = one_line(err)
    assert code == 2 and line.startswith("collsched: error: -o") and needle in line, line
    assert (listing(tmp_path), listing(d)) == before
    assert (tmp_path / "f").read_text() == "keep"


def test_output_checked_before_the_work(capsys, tmp_path, monkeypatch):
    """A bad -o fails before the compile starts (not after a long one)."""
    import collsched.pipeline as pipeline

    def never(*a, **k):
        raise AssertionError("compiled before checking -o")
    monkeypatch.setattr(pipeline, "compile_schedule", never)
    code, _, err = run(capsys, COMPILE + ["-o", tmp_path / "missing" / "x.sched"])
    assert code == 2 and "does not exist" in one_line(err)


def test_bench_keep_a_file_is_refused(capsys, tmp_path):
    f = tmp_path / "file"
    f.write_text("keep")
    code, _, err = run(capsys, ["bench", "--ranks", "2", "--keep", f])
    line = one_line(err)
    assert code == 2 and f"--keep: {f}" in line and "expected a directory" in line
    assert f.read_text() == "keep"


@pytest.mark.parametrize("option", ["--plot", "--doc"])
def test_bench_plot_and_doc_special_targets(capsys, specials, option):
    code, _, err = run(capsys, ["bench", "--ranks", "2", option, specials / "fifo"])
    assert code == 2 and f"{option}: {specials / 'fifo'}" in one_line(err)


def test_full_disk_during_write(capsys, tmp_path, monkeypatch):
    """ENOSPC while writing the schedule: one line, exit 2, the old file unchanged and no
    temporary left behind."""
    out = tmp_path / "x.sched"
    out.write_bytes(b"old")
    real_write = os.write

    def full(fd, data):
        if fd > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)
    monkeypatch.setattr(os, "write", full)
    code, _, err = run(capsys, COMPILE + ["-o", out])
    monkeypatch.undo()
    line = one_line(err)
    assert code == 2 and "no space left" in line and str(out) in line, line
    assert out.read_bytes() == b"old"
    assert listing(tmp_path) == ["x.sched"]


def test_mode_owner_and_symlink_kept_through_the_cli(capsys, tmp_path):
    real = tmp_path / "real.sched"
    real.write_bytes(b"old")
    os.chmod(real, 0o600)
    if IS_ROOT:
        os.chown(real, 4321, 4322)
    link = tmp_path / "link.sched"
    link.symlink_to(real)
    code, _, err = run(capsys, COMPILE + ["-o", link])
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(real)
    st = os.stat(real)
    assert real.read_bytes()[:8] == b"COLLSCHD"
    assert stat.S_IMODE(st.st_mode) == 0o600
    if IS_ROOT:
        assert (st.st_uid, st.st_gid) == (4321, 4322)
    assert listing(tmp_path) == ["link.sched", "real.sched"]


def collsched_command() -> list[str]:
    exe = ROOT / ".venv" / "bin" / "collsched"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "collsched"]


@pytest.mark.parametrize("argv", [
    ["verify", "SPECIAL/fifo"],
    COMPILE + ["--topology", "SPECIAL/fifo", "-o", "OUT/x.sched"],
    COMPILE + ["--pap", "/dev/zero", "-o", "OUT/x.sched"],
    COMPILE + ["-o", "SPECIAL/fifo"],
])
def test_special_files_subprocess(tmp_path, specials, argv):
    """As a user runs it: a FIFO must not block the process (it hung before)."""
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.replace("SPECIAL", str(specials)).replace("OUT", str(out)) for a in argv]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "compiler"))
    proc = subprocess.run(collsched_command() + argv, capture_output=True, text=True, timeout=30, env=env)
    assert proc.returncode == 2, proc.stderr
    one_line(proc.stderr)
    assert listing(out) == []
    assert stat.S_ISFIFO(os.lstat(specials / "fifo").st_mode)


@pytest.fixture
def tiny_fs(tmp_path):
    """A 16 KiB tmpfs (root, where mount is allowed): a real full disk."""
    d = tmp_path / "tiny"
    d.mkdir()
    if not IS_ROOT or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(d)],
                                     capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield d
    subprocess.run(["umount", str(d)], check=True)


def test_real_full_disk(capsys, tiny_fs):
    """A 32-rank ring schedule (about 24 KB) on a 16 KiB file system: ENOSPC from the kernel."""
    out = tiny_fs / "x.sched"
    out.write_text("old")
    code, _, err = run(capsys, ["compile", "--algorithm", "ring", "--ranks", "32", "--bytes", "1KiB",
                                "-o", out])
    line = one_line(err)
    assert code == 2 and "no space left" in line, line
    assert out.read_text() == "old" and listing(tiny_fs) == ["x.sched"]
