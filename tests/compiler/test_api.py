"""The public Python API (collsched.__all__, docs/python-api.md)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

import collsched

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_resolves():
    for name in collsched.__all__:
        assert getattr(collsched, name) is not None, name
    assert set(collsched.__all__) <= set(dir(collsched))
    with pytest.raises(AttributeError):
        collsched.no_such_name  # noqa: B018


def test_import_stays_cheap():
    """`import collsched` loads none of the pipeline (numpy, the algorithms)."""
    code = "import sys, collsched; print(sorted(m for m in sys.modules if m.startswith(('collsched.', 'numpy'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_compile_accepts_units_like_the_cli(tmp_path):
    r = collsched.compile_schedule("ring", 4, "64KiB")
    assert (r.schedule.bytes_min, r.schedule.bytes_max) == (65536, 65536)
    r = collsched.compile_schedule("ring", 4, "1KiB:1MiB", output=tmp_path / "r.sched")
    assert (r.schedule.bytes_min, r.schedule.bytes_max) == (1024, 1 << 20)
    assert collsched.compile_schedule("ring", 4, 4096).schedule.bytes_max == 4096  # ints still work
    assert collsched.compile_schedule("ring", 4, (8, 16)).schedule.bytes_min == 8
    for bad in ("64 parsecs", "2:1", "-1"):
        with pytest.raises(collsched.InputError) as e:
            collsched.compile_schedule("ring", 4, bad)
        assert e.value.source == "--bytes"


def test_quick_start_runs(tmp_path, monkeypatch):
    """The quick start of docs/python-api.md, as written, from the repository's root."""
    text = (ROOT / "docs" / "python-api.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    (tmp_path / "topologies").symlink_to(ROOT / "topologies")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "python-api.md", "exec"), {})
    assert collsched.verify_file(tmp_path / "ring.sched")[1] == []
    listing = collsched.list_directory(tmp_path)
    assert [e.name for e in listing.entries] == ["ring.sched"]
    assert collsched.read_header(tmp_path / "ring.sched").nranks == 16


def test_simulate_accepts_units(tmp_path):
    path = tmp_path / "r.sched"
    collsched.compile_schedule("ring", 4, "1KiB:1MiB", output=path)
    a = collsched.simulate_file(path, nbytes="64KiB")[2]
    b = collsched.simulate_file(path, nbytes=65536)[2]
    assert a.avg_elapsed_s == b.avg_elapsed_s
    with pytest.raises(collsched.InputError):
        collsched.simulate_file(path, nbytes="1KiB:2KiB")


def test_trace_to_cache_through_the_api(tmp_path):
    """The recurring-pattern loop's library calls: read a trace written by the runtime,
    report it, build a cache from it, load the cache (every entry verified)."""
    trace = ROOT / "tests" / "compiler" / "data" / "arrivals-smpi-3ranks.trace"
    tr = collsched.read_trace(trace)
    assert tr.world_size == 3 and tr.calls
    analysis = collsched.analyse_trace(trace)
    assert analysis.reports
    update, reports, notes = collsched.build_cache([trace], tmp_path / "cache", min_calls=1)
    assert reports and all(r.regular_algorithm for r in reports)
    loaded = collsched.load_cache(tmp_path / "cache")
    assert loaded.entries and not loaded.warnings
