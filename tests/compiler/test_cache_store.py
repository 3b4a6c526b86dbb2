"""The cache directory: lock, load and verify (corrupt entries skipped), merge, eviction,
concurrent writers and readers (docs/cache.md)."""
import fcntl
import multiprocessing as mp
import os
import time

import numpy as np
import pytest

from collsched import schedfile
from collsched.cache.index import INDEX_NAME, Entry, parse_index
from collsched.cache.lock import LOCK_NAME, locked
from collsched.cache.store import commit, file_name, load_cache, merge, read_index, same_class, verify_cache
from collsched.cli import main
from collsched.errors import InputError
from collsched.pipeline import compile_schedule


def sched_bytes(algorithm="ring", ranks=4, nbytes=64, lo=None):
    s = compile_schedule(algorithm, ranks, (nbytes if lo is None else lo, nbytes)).schedule
    return schedfile.encode(s)


def regular(data, ranks=4, lo=64, hi=64, site="*", uses=1):
    return Entry(file_name(data, site), "allgather", ranks, lo, hi, site, "-", None, None, uses, None), data


def klass(data, pattern, ranks=4, lo=64, hi=64, site="*", uses=5, radius=1e-4):
    pattern = tuple(float(x) for x in pattern)
    return Entry(file_name(data, site, pattern), "allgather", ranks, lo, hi, site, "-", 0, radius, uses,
                 pattern), data


def test_lock_exclusive_blocks_shared(tmp_path):
    with locked(tmp_path, exclusive=True):
        fd = os.open(tmp_path / LOCK_NAME, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    with locked(tmp_path, exclusive=False):  # released: two readers at once, no writer
        fds = [os.open(tmp_path / LOCK_NAME, os.O_RDONLY) for _ in range(2)]
        try:
            fcntl.flock(fds[0], fcntl.LOCK_SH | fcntl.LOCK_NB)
            with pytest.raises(BlockingIOError):
                fcntl.flock(fds[1], fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            for fd in fds:
                os.close(fd)


def test_lock_refuses_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(InputError, match="expected a schedule cache directory"):
        with locked(f, exclusive=True):
            pass


def test_commit_load_and_corrupt_entries(tmp_path, capsys):
    ring, bruck, rd = sched_bytes("ring"), sched_bytes("bruck"), sched_bytes("rd", 8, 64)
    new = [regular(ring), klass(bruck, [0, 1e-3, 0, 0]), regular(rd, ranks=8)]
    up = commit(tmp_path, new)
    assert len(up.entries) == 3 and up.size_bytes == len(ring) + len(bruck) + len(rd)
    assert [e.file for e, _ in load_cache(tmp_path).entries] == [e.file for e in up.entries]
    # Corrupt one file, remove another: both skipped with a warning, the third still served.
    (tmp_path / new[1][0].file).write_bytes(bruck[:-3] + b"xyz")
    (tmp_path / new[2][0].file).unlink()
    loaded = load_cache(tmp_path)
    assert [e.file for e, _ in loaded.entries] == [new[0][0].file]
    assert len(loaded.warnings) == 2 and all("entry skipped" in w for w in loaded.warnings)
    code = main(["cache", "verify", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 1 and out.count(": valid") == 1 and len(err.splitlines()) == 2, (out, err)
    assert main(["cache", "ls", str(tmp_path)]) == 0


def test_header_must_agree_with_the_index(tmp_path):
    ring = sched_bytes("ring", 4, 64)
    e, _ = regular(ring)
    for bad in (Entry(**{**e.__dict__, "ranks": 8}), Entry(**{**e.__dict__, "bytes_max": 65})):
        (tmp_path / e.file).write_bytes(ring)
        (tmp_path / INDEX_NAME).write_text(f"collsched-cache 1\n{bad.line()}\n")
        [(_, why)] = verify_cache(tmp_path)
        assert why is not None and ("ranks" in why or "serves" in why)


def test_an_invalid_schedule_is_never_used(tmp_path):
    from collsched.ir import from_op_lists

    # Well-formed, but rank 1 never receives piece 0: the verifier refuses it.
    data = schedfile.encode(from_op_lists(2, 1, [[("recv", 1, 1, 0)], [("send", 0, 1, 0)]]))
    e = Entry(file_name(data), "allgather", 2, 0, 0, "*", "-", None, None, 1, None)
    (tmp_path / e.file).write_bytes(data)
    (tmp_path / INDEX_NAME).write_text(f"collsched-cache 1\n{e.line()}\n")
    loaded = load_cache(tmp_path)
    assert loaded.entries == [] and "verifier" in loaded.warnings[0]


def test_bad_index_line_names_line_and_field(tmp_path, capsys):
    (tmp_path / INDEX_NAME).write_text("collsched-cache 1\nentry a.sched allgather 4 1 0 * - regular - 1 -\n")
    with pytest.raises(InputError) as e:
        load_cache(tmp_path)
    assert e.value.field == "line 2: BYTES_MAX"
    for cmd in ("ls", "verify"):
        assert main(["cache", cmd, str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "line 2: BYTES_MAX" in err
    # A writer refuses it too, and writes nothing.
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(InputError):
        commit(tmp_path, [regular(sched_bytes())])
    assert sorted(os.listdir(tmp_path)) == before


def test_merge_replaces_same_key_keeps_others():
    a, b = sched_bytes("ring"), sched_bytes("bruck")
    old = [regular(a)[0], klass(a, [0, 1e-3, 0, 0])[0], klass(a, [0, 0, 2e-3, 0])[0],
           regular(a, site="s1")[0]]
    old[2] = Entry(**{**old[2].__dict__, "klass": 1})
    new = [regular(b)[0], klass(b, [0, 1.05e-3, 0, 0])[0]]  # within the radius of class 0
    merged, gone = merge(old, new)
    assert gone == [old[0], old[1]]
    assert [(e.file, e.site, e.klass) for e in merged] == [
        (old[2].file, "*", 0), (old[3].file, "s1", None), (new[0].file, "*", None), (new[1].file, "*", 1)]
    far = klass(b, [0, 5e-3, 0, 0])[0]  # another pattern: a new class beside the old
    assert len(merge(old, [far])[0]) == 5


def test_eviction_least_used_then_oldest(tmp_path):
    datas = [sched_bytes("ring", 4, 64 + i) for i in range(4)]
    sizes = [len(d) for d in datas]
    entries = [regular(d, lo=64 + i, hi=64 + i, uses=u) for i, (d, u) in enumerate(zip(datas, [5, 1, 1, 9]))]
    commit(tmp_path, entries[:2])
    time.sleep(0.02)
    commit(tmp_path, entries[2:])  # entry 2 (1 use) is younger than entry 1 (1 use)
    up = commit(tmp_path, [], max_size=sum(sizes) - 1)
    assert [e.file for e in up.evicted] == [entries[1][0].file]
    assert not (tmp_path / entries[1][0].file).exists()  # a file no entry names is deleted
    up = commit(tmp_path, [], max_size=sizes[3])
    assert [e.uses for e in up.entries] == [9] and up.size_bytes == sizes[3]
    assert sorted(p for p in os.listdir(tmp_path) if p.endswith(".sched")) == [entries[3][0].file]
    # The index never names a missing file.
    for e in read_index(tmp_path):
        assert (tmp_path / e.file).exists()
    assert commit(tmp_path, [], max_size=0).entries == []


def _writer(directory, ranks, queue):
    try:
        datas = [sched_bytes("ring", ranks, 64 + i) for i in range(3)]
        for i, d in enumerate(datas):
            commit(directory, [regular(d, ranks=ranks, lo=64 + i, hi=64 + i)])
        queue.put(None)
    except Exception as e:  # noqa: BLE001 - reported to the parent
        queue.put(repr(e))


def _reader(directory, stop, queue):
    seen = 0
    try:
        while True:
            last = stop.is_set()  # one more load after the writers are done
            if (directory / INDEX_NAME).exists():
                loaded = load_cache(directory)
                assert not loaded.warnings, loaded.warnings
                seen += 1
            if last:
                break
        queue.put(seen)
    except Exception as e:  # noqa: BLE001
        queue.put(repr(e))


def test_two_writers_and_a_reader(tmp_path):
    ctx = mp.get_context("fork")
    q, rq, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
    reader = ctx.Process(target=_reader, args=(tmp_path, stop, rq))
    reader.start()
    writers = [ctx.Process(target=_writer, args=(tmp_path, p, q)) for p in (4, 8)]
    for w in writers:
        w.start()
    results = [q.get(timeout=120) for _ in writers]
    for w in writers:
        w.join(60)
    stop.set()
    seen = rq.get(timeout=60)
    reader.join(60)
    assert results == [None, None]
    assert isinstance(seen, int) and seen >= 1, seen  # every load saw a whole index, its files
    entries = parse_index((tmp_path / INDEX_NAME).read_text(), "index")
    assert sorted((e.ranks, e.bytes_min) for e in entries) == [(p, 64 + i) for p in (4, 8) for i in range(3)]
    assert not load_cache(tmp_path).warnings


def test_directory_that_is_a_file(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("x")
    for argv in (["cache", "ls", str(f)], ["cache", "verify", str(f)],
                 ["tune", "--ranks", "4", "--bytes", "64", "-o", str(f)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "directory" in err, err
    assert f.read_text() == "x"


# --- properties -------------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from collsched.cache.index import format_index  # noqa: E402
from collsched.cache.store import evict  # noqa: E402


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 50)), min_size=1, max_size=8),
       st.integers(0, 400))
def test_eviction_property(tmp_path, items, limit):
    """Eviction drops a prefix of the (uses, age, name) order, and only as much as needed."""
    d = tmp_path / f"e{len(items)}-{limit}-{abs(hash(tuple(items)))}"
    d.mkdir()
    entries = []
    for i, (uses, size) in enumerate(items):
        name = f"{i:016x}.sched"
        (d / name).write_bytes(b"x" * size)
        os.utime(d / name, (1000 + i, 1000 + i))
        entries.append(Entry(name, "allgather", 2, i, i, "*", "-", None, None, uses, None))
    kept, evicted, size = evict(entries, d, limit)
    order = sorted(entries, key=lambda e: (e.uses, e.file))  # files are older in index order
    assert evicted == order[:len(evicted)]
    assert size == sum(items[int(e.file[:16], 16)][1] for e in kept) and (size <= limit or not kept)
    if evicted:  # the last one evicted was needed
        assert size + items[int(evicted[-1].file[:16], 16)][1] > limit
    assert kept == [e for e in entries if e not in evicted]  # the index order is kept


_pat = st.lists(st.sampled_from([0.0, 1e-3, 2e-3]), min_size=2, max_size=2)


@st.composite
def _entries(draw, n):
    out = []
    for _ in range(n):
        site, lo = draw(st.sampled_from(["*", "a"])), draw(st.sampled_from([64, 128]))
        pattern = None if draw(st.booleans()) else draw(_pat)
        if pattern is not None:
            pattern = tuple(float(x) for x in np.asarray(pattern) - min(pattern))
        data = f"{lo}".encode()  # a schedule's bytes depend on its header's range
        out.append(Entry(file_name(data, site, pattern), "allgather", 2, lo, lo, site, "-",
                         None if pattern is None else 0, None if pattern is None else 5e-4, 1, pattern))
    return out


@settings(max_examples=100, deadline=None)
@given(_entries(6), _entries(4))
def test_merge_always_gives_a_valid_index(old, new):
    """Whatever was there and whatever is added: the merged index passes every check, holds
    every new entry, and each old entry is kept or replaced by one that serves the same."""
    def dedup(es):  # each list as one build makes it: one entry per (group, class pattern)
        out = []
        for e in es:
            if not any(o.file == e.file or (o.regular and e.regular and o.group == e.group) for o in out):
                out.append(e)
        return out

    old, _ = merge([], dedup(old))
    new = dedup(new)
    merged, gone = merge(old, new)
    parse_index(format_index(merged), "merged")  # raises on any broken rule
    assert {e.file for e in new} <= {e.file for e in merged}
    for o in gone:
        assert any(same_class(o, n) for n in new)


def test_compact_entries_are_checked_like_explicit_ones(tmp_path):
    """A compact description as a cache entry: accepted when its fields agree with the
    entry's, skipped with one reason when they do not (ranks, byte range, collective)."""
    from collsched.compact import for_default, write_compact

    for name in ("a", "b", "c", "d"):
        write_compact(for_default("ring", 4, (0, 4096)), tmp_path / f"{name}.csc")
    (tmp_path / "index").write_text(
        "collsched-cache 1\n"
        "entry a.csc allgather 4 0 4096 * - regular - 1 -\n"
        "entry b.csc allgather 5 0 4096 site5 - regular - 1 -\n"
        "entry c.csc allgather 4 0 9999 site9 - regular - 1 -\n"
        "entry d.csc allgatherv 4 0 4096 sitev - regular - 1 -\n")
    loaded = load_cache(tmp_path)
    assert [(e.site, s.algorithm) for e, s in loaded.entries] == [("*", "ring")]
    reasons = sorted(w.split(": ", 2)[-1] for w in loaded.warnings)
    assert len(reasons) == 3, loaded.warnings
    assert any("the file is for 4 ranks, the index says 5" in r for r in reasons)
    assert any("serves 0..4096 bytes" in r for r in reasons)
    assert any("allgatherv" in r for r in reasons)
