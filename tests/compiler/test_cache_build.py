"""collsched cache build: from arrival-pattern files and traces, class entries where worth it,
one regular per group, merge, hostile input (docs/cache.md)."""
import json
from pathlib import Path

import numpy as np
import pytest

from collsched.cache import build
from collsched.cache.index import INDEX_NAME, parse_index
from collsched.cache.store import load_cache, verify_cache
from collsched.cli import main
from collsched.inputs.arrivals import write_pap
from collsched.inputs.topology import load_topology
from collsched.model.simulate import piece_time
from collsched.patterns import classes
from collsched.patterns.tracefile import Comm, call_from_times, write_trace

ROOT = Path(__file__).resolve().parents[2]
TRYTON = str(ROOT / "topologies" / "tryton-48.yaml")
P, B = 8, 65536
LATE = [np.array(v) * 1e-3 for v in ([0, 0, 3, 0, 0, 0, 0, 3], [2, 2, 0, 0, 0, 0, 0, 0],
                                      [0, 0, 0, 0, 0, 4, 4, 4])]


def recurring(n=12, seed=1, ranks=P):
    """n iterations cycling through the three classes, with noise of 50 us."""
    rng = np.random.default_rng(seed)
    return np.array([np.resize(LATE[i % 3], ranks) + rng.uniform(0, 5e-5, ranks) for i in range(n)])


@pytest.fixture(scope="module")
def pap(tmp_path_factory):
    path = tmp_path_factory.mktemp("build") / "three.yaml"
    write_pap(path, recurring())
    return path


@pytest.fixture(scope="module")
def built(pap, tmp_path_factory):
    d = tmp_path_factory.mktemp("cache") / "c"
    groups = build.groups_from_paps([pap], P, (B, B))
    update, reports = build.build(groups, d, build.Options(topology=TRYTON, engine="pat"))
    return d, update, reports


def test_three_classes_and_a_regular(built, pap):
    d, update, reports = built
    entries = parse_index((d / INDEX_NAME).read_text(), "index")
    assert [e.klass for e in entries] == [None, 0, 1, 2]
    assert all(e.ranks == P and (e.bytes_min, e.bytes_max) == (B, B) and e.site == "*" for e in entries)
    assert entries[0].uses == 12 and [e.uses for e in entries[1:]] == [4, 4, 4]
    topo = load_topology(TRYTON, P)
    assert {e.topology for e in entries} == {topo.digest()[:16]}
    # Their patterns are the class centroids, their radii the clustering's.
    clus = classes.cluster(recurring(), piece_time(topo, B))
    for e in entries[1:]:
        np.testing.assert_allclose(e.pattern, clus.centroids[e.klass], rtol=0, atol=1e-15)
        assert e.radius == pytest.approx(float(clus.radius[e.klass]))
    # Every entry verifies; every class entry beat the regular one by 2% or more.
    assert all(why is None for _, why in verify_cache(d))
    assert [c.kept for c in reports[0].classes] == [True] * 3
    for c in reports[0].classes:
        assert c.predicted_s <= 0.98 * c.regular_s
    loaded = load_cache(d)
    assert not loaded.warnings and len(loaded.entries) == 4


def test_engine_none_entries_run_in_the_call(pap, tmp_path):
    update, reports = build.build(build.groups_from_paps([pap], P, (B, B)), tmp_path / "c",
                                  build.Options(topology=TRYTON))  # engine none: the default
    assert all(not s.has_background for _, s in load_cache(tmp_path / "c").entries)
    for c in reports[0].classes:  # each class kept where worth it, else said why not
        assert c.kept == (c.predicted_s <= 0.98 * c.regular_s)
        assert c.kept or c.why.startswith("not worth it")


def test_rebuild_replaces_and_other_sites_are_kept(built, pap, tmp_path, capsys):
    d = tmp_path / "c"
    argv = ["cache", "build", str(pap), "--ranks", P, "--bytes", "64KiB", "--topology", TRYTON,
            "--engine", "pat", "-o", d]
    assert main([str(a) for a in argv]) == 0
    first = parse_index((d / INDEX_NAME).read_text(), "i")
    assert main([str(a) for a in argv]) == 0  # the same again: replaced, not doubled
    assert parse_index((d / INDEX_NAME).read_text(), "i") == first
    assert main([str(a) for a in argv + ["--site", "other_site", "--json"]]) == 0
    out = capsys.readouterr().out.splitlines()[-1]
    entries = parse_index((d / INDEX_NAME).read_text(), "i")
    assert len(entries) == 8 and sorted({e.site for e in entries}) == ["*", "other_site"]
    assert len(json.loads(out)["added"]) == 4


def test_min_calls_and_balanced_classes(pap, tmp_path):
    groups = build.groups_from_paps([pap], P, (B, B))
    _, reports = build.build(groups, tmp_path / "a", build.Options(topology=TRYTON, engine="pat",
                                                                   min_calls=5))
    assert [c.kept for c in reports[0].classes] == [False] * 3
    assert all("fewer than 5" in c.why for c in reports[0].classes)
    flat = tmp_path / "flat.yaml"
    write_pap(flat, np.random.default_rng(2).uniform(0, 1e-6, (6, P)))
    _, reports = build.build(build.groups_from_paps([flat], P, (B, B)), tmp_path / "b",
                             build.Options(topology=TRYTON, engine="pat"))
    assert all("balanced" in c.why for c in reports[0].classes)
    assert [e.regular for e in parse_index((tmp_path / "b" / INDEX_NAME).read_text(), "i")] == [True]


def test_build_from_a_trace(tmp_path, capsys):
    pats = recurring(12)
    calls = []
    for i, a in enumerate(pats):  # site 0 imbalanced, 12 calls; site 1 balanced, 4 calls
        calls.append(call_from_times(0, 0, 2 * i, B + 1024 * (i % 2), 10.0 * i + a))
        if i < 4:
            calls.append(call_from_times(1, 0, 2 * i + 1, 512, 10.0 * i + 5 + np.zeros(P)))
    calls.append(call_from_times(1, 0, 99, 512, np.zeros(P), collective=2))  # allgatherv: left out
    trace = tmp_path / "run.trace"
    write_trace(trace, P, ["solver+0x1c", "halo"], [Comm(7, tuple(range(P)))], calls)
    d = tmp_path / "c"
    assert main(["cache", "build", str(trace), "--topology", TRYTON, "--engine", "pat", "-o", str(d)]) == 0
    captured = capsys.readouterr()
    assert "allgatherv calls left out" in captured.err
    entries = parse_index((d / INDEX_NAME).read_text(), "i")
    by_site = {s: [e for e in entries if e.site == s] for s in ("solver+0x1c", "halo")}
    assert [e.klass for e in by_site["halo"]] == [None]
    assert (by_site["halo"][0].bytes_min, by_site["halo"][0].bytes_max) == (512, 512)
    solver = by_site["solver+0x1c"]
    assert solver[0].regular and (solver[0].bytes_min, solver[0].bytes_max) == (B, B + 1024)
    assert [e.klass for e in solver] == [None, 0, 1, 2] and [e.uses for e in solver] == [12, 4, 4, 4]
    assert all(e.ranks == P for e in entries)
    assert all(why is None for _, why in verify_cache(d))
    # --site: only that call site.
    d2 = tmp_path / "c2"
    assert main(["cache", "build", str(trace), "--site", "halo", "-o", str(d2)]) == 0
    assert {e.site for e in parse_index((d2 / INDEX_NAME).read_text(), "i")} == {"halo"}
    capsys.readouterr()
    assert main(["cache", "ls", str(d2), "--json"]) == 0
    ls = json.loads(capsys.readouterr().out)
    assert ls["entries"][0]["site"] == "halo" and ls["skipped"] == []


@pytest.mark.parametrize("case", ["garbage-trace", "not-yaml", "ranks-mismatch", "no-ranks", "dir-is-file",
                                  "bad-max-size", "trace-with-ranks", "bad-algorithm"])
def test_hostile_input_one_line_nothing_written(case, pap, tmp_path, capsys):
    d = tmp_path / "c"
    inp = str(pap)
    extra = ["--ranks", str(P), "--bytes", "4KiB"]
    if case == "garbage-trace":
        bad = tmp_path / "bad.trace"
        bad.write_bytes(b"CSATRACE" + b"\x01\x00\x00\x00" + b"\xff" * 40)
        inp, extra = str(bad), []
    elif case == "not-yaml":
        bad = tmp_path / "bad.yaml"
        bad.write_text("arrivals: [0, 1\n")
        inp = str(bad)
    elif case == "ranks-mismatch":
        extra = ["--ranks", "16", "--bytes", "4KiB"]
    elif case == "no-ranks":
        extra = ["--bytes", "4KiB"]
    elif case == "dir-is-file":
        d.write_text("a file")
    elif case == "bad-max-size":
        extra += ["--max-size", "lots"]
    elif case == "trace-with-ranks":
        trace = tmp_path / "t.trace"
        write_trace(trace, 2, ["s"], [Comm(1, (0, 1))], [call_from_times(0, 0, 0, 64, [0.0, 1e-3])])
        inp = str(trace)
    elif case == "bad-algorithm":
        extra += ["--algorithms", "ring,nosuch"]
    code = main(["cache", "build", inp, "-o", str(d), *extra])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    if case == "dir-is-file":
        assert d.read_text() == "a file"
    else:
        assert not d.exists()


def test_a_site_name_the_index_cannot_hold_is_left_out(tmp_path):
    calls = [call_from_times(s, 0, 2 * i + s, 256, np.zeros(2)) for i in range(3) for s in (0, 1)]
    trace = tmp_path / "u.trace"
    write_trace(trace, 2, ["caf\u00e9", "plain"], [Comm(3, (0, 1))], calls)
    groups, notes = build.groups_from_traces([trace])
    assert [g.site for g in groups] == ["plain"]
    assert len(notes) == 1 and "caf\u00e9" in notes[0] and "ASCII" in notes[0]
