"""files.py: every file the tools write is written whole or not at all, with the mode of a
new file (0666 less the umask), and no temporary is left behind - for each writer."""
import os

import numpy as np
import pytest

from collsched import files
from collsched.arrivals import load_pap, write_pap
from collsched.benchdoc import replace_section
from collsched.topology import homogeneous, load_topology, write_topology


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
