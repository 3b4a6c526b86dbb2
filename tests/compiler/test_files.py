"""files.py: every file the tools write is written whole or not at all, with the mode of a
new file (0666 less the umask), and no temporary is left behind - for each writer; only a
regular file is replaced (its mode and owner kept) and only a regular file is read."""
import errno
import os
import socket
import stat

import numpy as np
import pytest

from collsched import files
from collsched.inputs.arrivals import load_pap, write_pap
from collsched.lab.benchdoc import replace_section
from collsched.errors import InputError, OutputError
from collsched.inputs.topology import homogeneous, load_topology, write_topology


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def names(d):
    return sorted(p.name for p in d.iterdir())


def fail_replace(monkeypatch):
    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", boom)


def test_write_atomic_text_and_bytes(tmp_path, umask_022):
    out = tmp_path / "a.txt"
    assert files.write_atomic(out, "h\u00e9") == 3  # UTF-8 bytes
    assert out.read_text(encoding="utf-8") == "h\u00e9"
    files.write_atomic(out, b"\x00\x01")
    assert out.read_bytes() == b"\x00\x01"
    assert out.stat().st_mode & 0o777 == 0o644
    assert names(tmp_path) == ["a.txt"]


def test_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    out = tmp_path / "a.txt"
    out.write_text("old")
    fail_replace(monkeypatch)
    with pytest.raises(OSError):
        files.write_atomic(out, "new")
    with pytest.raises(OSError):
        with files.replacing(out) as tmp:
            tmp.write_text("new")
    assert out.read_text() == "old"
    assert names(tmp_path) == ["a.txt"]


def test_replacing_drops_the_temporary_when_the_writer_fails(tmp_path):
    out = tmp_path / "a.png"
    with pytest.raises(ValueError):
        with files.replacing(out) as tmp:
            tmp.write_bytes(b"half")
            raise ValueError("the plot failed")
    assert names(tmp_path) == []


def test_save_figure_writes_a_png(tmp_path, umask_022):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    out = tmp_path / "f.png"
    files.save_figure(fig, out)
    plt.close(fig)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_mode & 0o777 == 0o644
    assert names(tmp_path) == ["f.png"]


def test_benchmark_page_keeps_a_readable_mode(tmp_path, umask_022):
    doc = tmp_path / "benchmarks.md"
    replace_section(doc, "x", "one")
    replace_section(doc, "x", "two")
    assert "two" in doc.read_text() and "one" not in doc.read_text()
    assert doc.stat().st_mode & 0o777 == 0o644
    assert names(tmp_path) == ["benchmarks.md"]


def test_topology_and_pattern_writers_are_atomic(tmp_path, monkeypatch):
    topo = homogeneous(4)
    path = tmp_path / "t.yaml"
    write_topology(topo, path)
    again = load_topology(path, 4)
    assert np.allclose(again.latency, topo.latency) and np.allclose(again.bandwidth, topo.bandwidth)
    pap = tmp_path / "p.yaml"
    write_pap(pap, [0.0, 1e-3, 2e-3, 0.0])
    assert np.allclose(load_pap(pap, 4), [[0.0, 1e-3, 2e-3, 0.0]])
    before = {p: p.read_bytes() for p in (path, pap)}
    fail_replace(monkeypatch)
    with pytest.raises(OSError):
        write_topology(homogeneous(4, latency_s=1e-3), path)
    with pytest.raises(OSError):
        write_pap(pap, [1.0, 1.0, 1.0, 1.0])
    assert {p: p.read_bytes() for p in (path, pap)} == before
    assert names(tmp_path) == ["p.yaml", "t.yaml"]


# --- special targets, kept modes and owners, links, a full disk --------------------------

IS_ROOT = os.geteuid() == 0


def special_targets(d):
    os.mkfifo(d / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(d / "sock"))
    (d / "dir").mkdir()
    names = ["fifo", "sock", "dir"]
    if IS_ROOT:
        os.mknod(d / "chr", 0o600 | stat.S_IFCHR, os.makedev(1, 7))  # /dev/full's numbers
        names.append("chr")
    return sock, names


def test_special_targets_are_refused_not_replaced(tmp_path):
    sock, targets = special_targets(tmp_path)
    before = {n: stat.S_IFMT(os.lstat(tmp_path / n).st_mode) for n in targets}
    for n in targets:
        with pytest.raises(OutputError, match="expected a regular file"):
            files.write_atomic(tmp_path / n, b"x")
        with pytest.raises(OutputError):
            with files.replacing(tmp_path / n):
                pass
        with pytest.raises(InputError, match=r"^-o: .*: is a"):
            files.check_output_path(str(tmp_path / n), "-o")
    assert {n: stat.S_IFMT(os.lstat(tmp_path / n).st_mode) for n in targets} == before
    assert names(tmp_path) == sorted(targets)
    sock.close()


def test_a_replaced_file_keeps_its_mode(tmp_path, umask_022):
    out = tmp_path / "secret.sched"
    out.write_bytes(b"old")
    os.chmod(out, 0o600)
    files.write_atomic(out, b"new")
    assert out.read_bytes() == b"new" and stat.S_IMODE(out.stat().st_mode) == 0o600
    os.chmod(out, 0o640)
    with files.replacing(out) as tmp:
        tmp.write_bytes(b"newer")
    assert out.read_bytes() == b"newer" and stat.S_IMODE(out.stat().st_mode) == 0o640


@pytest.mark.skipif(not IS_ROOT, reason="chown needs root")
def test_a_replaced_file_keeps_its_owner_as_root(tmp_path):
    out = tmp_path / "theirs.yaml"
    out.write_text("old")
    os.chown(out, 1234, 5678)
    files.write_atomic(out, "new")
    st = out.stat()
    assert (st.st_uid, st.st_gid) == (1234, 5678) and out.read_text() == "new"


def test_hard_link_keeps_the_old_content(tmp_path):
    """Documented (docs/inputs.md): the name written to gets a new file; other links keep
    the old content."""
    out, other = tmp_path / "a.sched", tmp_path / "b.sched"
    out.write_bytes(b"old")
    os.link(out, other)
    files.write_atomic(out, b"new")
    assert out.read_bytes() == b"new" and other.read_bytes() == b"old"
    assert out.stat().st_nlink == 1


def test_symlink_target_is_replaced_and_link_kept(tmp_path):
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    real = real_dir / "r.sched"
    real.write_bytes(b"old")
    link = tmp_path / "link.sched"
    link.symlink_to(real)
    files.write_atomic(link, b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"
    assert names(tmp_path) == ["link.sched", "real"] and names(real_dir) == ["r.sched"]
    assert files.check_output_path(str(link), "-o") == real
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere" / "x")
    with pytest.raises(OutputError, match="symbolic link to a missing file"):
        files.write_atomic(dangling, b"x")
    assert dangling.is_symlink() and not (tmp_path / "nowhere").exists()
    (tmp_path / "to-fifo").symlink_to(tmp_path / "fifo")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OutputError, match="FIFO"):
        files.write_atomic(tmp_path / "to-fifo", b"x")


@pytest.mark.parametrize("target,needle", [
    ("", "empty string"), (".", "directory"), ("/", "directory"), ("sub/", "directory"),
    ("sub", "is a directory"), ("missing/x", "does not exist"), ("/proc/x", "cannot create"),
    ("file/x", "cannot write there")])
def test_check_output_path_refuses_and_writes_nothing(tmp_path, monkeypatch, target, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "file").write_text("f")
    with pytest.raises(OutputError) as e:
        files.check_output_path(target, "--plot")
    assert e.value.line().startswith("--plot") and needle in e.value.line(), e.value.line()
    assert names(tmp_path) == ["file", "sub"] and names(tmp_path / "sub") == []


def test_check_output_path_probe_leaves_nothing(tmp_path):
    assert files.check_output_path(str(tmp_path / "new.sched"), "-o") == tmp_path / "new.sched"
    assert names(tmp_path) == []


def test_check_output_dir(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="--keep: .*: is a regular file; expected a directory"):
        files.check_output_dir(str(tmp_path / "f"), "--keep")
    with pytest.raises(InputError, match=r"is inside .*f', which is a regular file"):
        files.check_output_dir(str(tmp_path / "f" / "b"), "--keep")
    assert files.check_output_dir(str(tmp_path / "a" / "b"), "--keep") == tmp_path / "a" / "b"
    assert names(tmp_path) == ["f"]
    assert files.check_output_dir(str(tmp_path / "new"), "--keep") == tmp_path / "new"
    assert files.check_output_dir(str(tmp_path), "--keep") == tmp_path


def test_full_disk_is_one_error_and_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "a.sched"
    out.write_bytes(b"old")

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OutputError) as e:
        files.write_atomic(out, b"new" * 1000)
    monkeypatch.undo()
    assert "no space left" in e.value.line() and e.value.errno == errno.ENOSPC
    assert isinstance(e.value, OSError) and "\n" not in e.value.line()
    assert out.read_bytes() == b"old" and names(tmp_path) == ["a.sched"]
    with pytest.raises(OutputError, match="no space left"):  # a writer given a file name
        with files.replacing(out) as tmp:
            tmp.write_bytes(b"half")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert out.read_bytes() == b"old" and names(tmp_path) == ["a.sched"]


def test_write_atomic_writes_large_data_whole(tmp_path):
    data = os.urandom(40 << 20)  # more than one os.write chunk
    files.write_atomic(tmp_path / "big", data)
    assert (tmp_path / "big").read_bytes() == data


# --- reading: regular files only, bounded --------------------------------------------------

def test_read_input_refuses_special_files_without_blocking(tmp_path):
    sock, targets = special_targets(tmp_path)
    for n in targets:
        with pytest.raises(InputError, match=r"expected a regular topology file, found a"):
            files.read_input(tmp_path / n, "topology")
    for dev in ("/dev/zero", "/dev/null"):
        with pytest.raises(InputError, match="character device"):
            files.read_input(dev, "schedule")
    sock.close()


def test_read_input_size_limit_and_errors(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_bytes(b"x" * 101)
    assert files.read_input(p, "topology", limit=101) == b"x" * 101
    with pytest.raises(InputError, match=r"too large: 101 bytes, at most 100 bytes"):
        files.read_input(p, "topology", limit=100)
    with pytest.raises(InputError, match="not found"):
        files.read_input(tmp_path / "none", "topology")
    with pytest.raises(InputError, match="expected the name"):
        files.read_input("", "topology")
    if not IS_ROOT:
        os.chmod(p, 0)
        with pytest.raises(InputError, match="Permission denied"):
            files.read_input(p, "topology")


def test_check_path_options_names_the_option(tmp_path):
    from argparse import Namespace

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "t.yaml").write_text("x")
    ok = Namespace(command="compile", topology=str(tmp_path / "t.yaml"), pap=None, json=True,
                   output=str(tmp_path / "x.sched"), cache=str(tmp_path / "new-cache.json"))
    files.check_path_options(ok)  # a flag --json, a missing --cache: fine
    # a missing input is left to its reader (sweep looks for bundled topologies elsewhere)
    files.check_path_options(Namespace(command="sweep", topology="topologies/none.yaml"))
    for ns, needle in (
            (Namespace(command="compile", topology=str(tmp_path / "fifo")), "--topology: "),
            (Namespace(command="pools", topology=str(tmp_path / "fifo")), "TOPOLOGY: "),
            (Namespace(command="verify", file=str(tmp_path / "fifo")), "FILE: "),
            (Namespace(command="compile", pap=str(tmp_path)), "--pap: "),
            (Namespace(command="sweep", json=str(tmp_path / "fifo")), "--json: "),
            (Namespace(command="bench", keep=str(tmp_path / "t.yaml")), "--keep: ")):
        with pytest.raises(InputError) as e:
            files.check_path_options(ns)
        assert e.value.line().startswith(needle), e.value.line()
    assert names(tmp_path) == ["fifo", "t.yaml"]


def test_read_input_of_a_file_larger_than_its_stat_says():
    """A file that grows after fstat (here a /proc file, whose size reads as 0) is read whole,
    and still no further than the limit."""
    data = files.read_input("/proc/self/status", "status")
    assert bytes(data).startswith(b"Name:") and len(data) > 100
    with pytest.raises(InputError, match="too large: more than 10 bytes"):
        files.read_input("/proc/self/status", "status", limit=10)
