"""collsched tune: the tuning table as a cache (docs/cache.md, "Tuning tables")."""
import json
from pathlib import Path

import pytest

from collsched.cache import tune
from collsched.cache.index import INDEX_NAME, MAX_BYTES, parse_index
from collsched.cache.store import load_cache, verify_cache
from collsched.cli import main

ROOT = Path(__file__).resolve().parents[2]
TRYTON = str(ROOT / "topologies" / "tryton-48.yaml")


def test_byte_ranges():
    assert tune.byte_ranges([65536, 1024, 1024]) == [(1024, 1024, 65535), (65536, 65536, MAX_BYTES)]


def test_tune_2x2_model_and_plot(tmp_path, capsys):
    d, png = tmp_path / "tuned", tmp_path / "winners.png"
    code = main(["tune", "--ranks", "4,8", "--bytes", "1KiB,64KiB", "--topology", TRYTON, "-o", str(d),
                 "--plot", str(png), "--json"])
    assert code == 0
    table = json.loads(capsys.readouterr().out)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cells = table["cells"]
    assert [(c["ranks"], c["bytes"]) for c in cells] == [(4, 1024), (4, 65536), (8, 1024), (8, 65536)]
    for c in cells:
        times = c["avg_elapsed_s"]
        assert set(times) == set(table["candidates"][str(c["ranks"])])  # every candidate has a time
        timed = {k: v for k, v in times.items() if isinstance(v, float)}
        assert c["winner"] == min(timed, key=timed.get) and timed[c["winner"]] == min(timed.values())
    entries = parse_index((d / INDEX_NAME).read_text(), "i")
    assert [(e.ranks, e.bytes_min, e.bytes_max, e.site, e.regular) for e in entries] == [
        (4, 1024, 65535, "*", True), (4, 65536, MAX_BYTES, "*", True),
        (8, 1024, 65535, "*", True), (8, 65536, MAX_BYTES, "*", True)]
    assert all(why is None for _, why in verify_cache(d))
    algs = {(e.ranks, e.bytes_min): s.algorithm for e, s in load_cache(d).entries}
    assert algs == {(c["ranks"], c["bytes"]): c["winner"] for c in cells}


def test_tune_again_replaces_the_table_of_those_sizes(tmp_path):
    d = tmp_path / "t"
    tune.tune([4, 8], [1024, 4096], d, algorithms=["ring", "bruck"])
    res = tune.tune([4], [2048], d, algorithms=["ring", "bruck"])
    entries = res.update.entries
    assert sorted((e.ranks, e.bytes_min) for e in entries) == [(4, 2048), (8, 1024), (8, 4096)]
    assert len(res.update.replaced) == 2


def test_measured_times_and_native(tmp_path):
    """A measure function (the CLI's --backend smpi runs the lab) decides; a cell the MPI
    library's own collective wins gets no entry."""
    seen = []

    def measure(ranks, nbytes, names):
        seen.append((ranks, nbytes, tuple(names)))
        return {n: (1e-6 if (n == "native") == (nbytes == 1024) else 1e-3) for n in names}

    res = tune.tune([4], [1024, 4096], tmp_path / "t", algorithms=["ring", "rd"], measure=measure)
    assert seen == [(4, 1024, ("ring", "rd", "native")), (4, 4096, ("ring", "rd", "native"))]
    assert [c.winner for c in res.cells] == ["native", "ring"]
    assert [(e.bytes_min, e.bytes_max) for e in res.update.entries] == [(4096, MAX_BYTES)]


@pytest.mark.parametrize("argv,flag", [
    (["--ranks", "4,x"], "--ranks"), (["--ranks", "1"], "--ranks"), (["--ranks", "4,"], "--ranks"),
    (["--bytes", "lots"], "--bytes"), (["--algorithms", "nosuch"], "--algorithms"),
    (["--plot", "x.txt"], "--plot"), (["--backend", "mpi"], "--backend"),
])
def test_tune_bad_options(argv, flag, tmp_path, capsys):
    base = {"--ranks": "4", "--bytes": "1KiB"}
    args = ["tune", "-o", str(tmp_path / "t")]
    for k, v in base.items():
        if k not in argv:
            args += [k, v]
    assert main(args + argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and flag in err, err
    assert not (tmp_path / "t").exists()


def test_tune_keeps_a_build_regular_entry_that_backs_classes(tmp_path):
    """A build's * regular entry whose group has classes stays (their fallback); a plain
    tuning-table entry of the same size is replaced."""
    from collsched import schedfile
    from collsched.cache.index import Entry
    from collsched.cache.store import commit, file_name
    from collsched.pipeline import compile_schedule

    d = tmp_path / "t"
    tune.tune([4], [64], d, algorithms=["ring"])
    data = schedfile.encode(compile_schedule("ring", 4, 4096).schedule)
    pat = (0.0, 1e-3, 0.0, 0.0)
    reg = Entry(file_name(data), "allgather", 4, 4096, 4096, "*", "-", None, None, 9, None)
    cls = Entry(file_name(data, "*", pat), "allgather", 4, 4096, 4096, "*", "-", 0, 1e-4, 3, pat)
    commit(d, [(reg, data), (cls, data)])
    res = tune.tune([4], [128], d, algorithms=["ring"])
    kept = [(e.bytes_min, e.klass) for e in res.update.entries]
    assert kept == [(4096, None), (4096, 0), (128, None)]
    assert [e.bytes_min for e in res.update.replaced] == [64]
