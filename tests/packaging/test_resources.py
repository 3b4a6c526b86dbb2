"""collsched.resources in a source checkout: the bundled topologies are the checkout's
topologies/, found by name from any directory; an existing file always wins; other paths
pass through unchanged (the loader's error names them as given)."""
from __future__ import annotations

from pathlib import Path

import pytest

from collsched import resources, runtime_build
from collsched.errors import InputError
from collsched.inputs.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]


def test_a_checkout_is_recognised():
    assert resources.source_root() == ROOT
    assert resources.topologies_dir() == ROOT / "topologies"
    assert resources.runtime_sources() == ROOT / "runtime"
    assert not runtime_build.installed()


def test_bundled_names():
    names = resources.bundled_topologies()
    assert names == sorted(p.stem for p in (ROOT / "topologies").glob("*.yaml"))
    assert "tryton-48" in names


@pytest.mark.parametrize("given", ["tryton-48", "tryton-48.yaml", "topologies/tryton-48.yaml",
                                   "./topologies/tryton-48.yaml"])
def test_a_bundled_name_resolves_from_anywhere(given, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Path(resources.topology_path(given)) == ROOT / "topologies" / "tryton-48.yaml"
    assert load_topology(given).nranks == 48


def test_an_existing_file_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "topologies").mkdir()
    mine = tmp_path / "topologies" / "tryton-48.yaml"
    mine.write_text((ROOT / "topologies" / "three-site-grid.yaml").read_text())
    assert resources.topology_path("topologies/tryton-48.yaml") == "topologies/tryton-48.yaml"
    assert load_topology("topologies/tryton-48.yaml").nranks == load_topology("three-site-grid").nranks


@pytest.mark.parametrize("given", ["no-such", "topologies/no-such.yaml", "elsewhere/tryton-48.yaml",
                                   "/nonexistent/topologies/tryton-48.yaml", "../tryton-48", ""])
def test_other_paths_pass_through(given, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resources.topology_path(given) == given
    if given:
        with pytest.raises(InputError) as e:
            load_topology(given)
        assert e.value.source == given


def test_cache_dir_follows_xdg(monkeypatch, tmp_path):
    import collsched

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert resources.cache_dir() == tmp_path / "collsched" / collsched.__version__
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert resources.cache_dir() == Path.home() / ".cache" / "collsched" / collsched.__version__


def test_checkout_build_dir_and_override(monkeypatch, tmp_path):
    monkeypatch.delenv("COLLSCHED_BUILD", raising=False)
    assert runtime_build.build_dir() == ROOT / "build"
    assert runtime_build.program("smpi", "collsched-minibench") == ROOT / "build/smpi/bin/collsched-minibench"
    monkeypatch.setenv("COLLSCHED_BUILD", str(tmp_path))
    assert runtime_build.library("libcollsched-preload.so") == tmp_path / "lib/libcollsched-preload.so"
    # In a checkout a missing program is an error naming the make target, never a build.
    with pytest.raises(InputError) as e:
        runtime_build.require(runtime_build.program("mpi", "collsched-minibench"), "make lab")
    assert "make lab" in e.value.expected
    assert not any(tmp_path.iterdir())
