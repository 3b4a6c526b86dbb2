"""The schedule cache at run time (docs/cache.md, runtime/src/cache.c): COLLSCHED_SCHEDULES
naming a directory with an index. A program cycling through 3 recurring imbalance classes
(tests/runtime/apps/cache_app.c: the late ranks sleep before the allgather) must, after a
warm-up of 2 cycles, run the entry of the right class in at least 90% of its calls, with
every byte checked; under the preload library (an unmodified program) and through the API;
COLLSCHED_STATS written at finalize; hostile indexes refused in one line with the data
still right; strict mode; a writer's lock; and under SMPI (exact clocks) the exact choice
sequence the rule predicts."""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from collsched.pipeline import compile_schedule
from rt_helpers import APPS, BUILD, DATA, ROOT, TIMEOUT, build_mpi_app, mpirun_cmd

pytestmark = pytest.mark.mpi

PRELOAD = BUILD / "lib" / "libcollsched-preload.so"
SMPI_LIB = Path(os.environ.get("COLLSCHED_SMPI_BUILD", ROOT / "build" / "smpi")) / "lib" / "libcollsched.a"
BYTES = 1000
SPREAD_S = 0.08
WARMUP = 6  # two cycles of three classes
ALGS = ["bslb", "min3", "bruck"]  # class 0, 1, 2 (regular: ring)


def late(nranks: int, k: int, spread: float = SPREAD_S) -> list[float]:
    """Class k's pattern as the app makes it: ranks r with r % 3 == k late by spread."""
    return [spread if r % 3 == k else 0.0 for r in range(nranks)]


def write_index(d: Path, lines: list[str]) -> Path:
    (d / "index").write_text("collsched-cache 1\n# written by test_cache_mpi.py\n" + "".join(l + "\n" for l in lines))
    return d / "index"


def entry(file: str, nranks: int, klass, pattern=None, site: str = "*", radius: float | None = None,
          bmin: int = 1, bmax: int = 100000, coll: str = "allgather") -> str:
    if klass == "regular":
        return f"entry {file} {coll} {nranks} {bmin} {bmax} {site} - regular - 5 -"
    rad = SPREAD_S * 0.2 if radius is None else radius
    pat = ",".join(repr(float(x)) for x in pattern)
    return f"entry {file} {coll} {nranks} {bmin} {bmax} {site} 0123456789abcdef {klass} {rad!r} 5 {pat}"


def build_cache(d: Path, nranks: int, site: str = "*", regular: bool = True, engine: str = "none") -> dict:
    """Compiles the regular entry (ring) and one entry per class (its pattern as --pap) with
    the Python compiler; returns {class: file name} (class 'regular' too)."""
    d.mkdir(parents=True, exist_ok=True)
    files, lines = {}, []
    if regular:
        compile_schedule("ring", nranks, (1, 100000), engine="none", output=d / "ring.sched")
        files["regular"] = "ring.sched"
        lines.append(entry("ring.sched", nranks, "regular", site=site))
    for k, alg in enumerate(ALGS):
        pap = d.parent / f"pap-{nranks}-{k}.yaml"
        pap.write_text(yaml.safe_dump({"unit": "s", "arrivals": late(nranks, k)}))
        name = f"{alg}-c{k}.sched"
        compile_schedule(alg, nranks, (1, 100000), pap=str(pap), engine=engine, output=d / name)
        files[k] = name
        lines.append(entry(name, nranks, k, late(nranks, k), site=site))
    write_index(d, lines)
    return files


@pytest.fixture(scope="module")
def apps(tmp_path_factory):
    out = tmp_path_factory.mktemp("cache_apps")
    return {"plain": build_mpi_app(out / "cache_app", "cache_app.c"),
            "api": build_mpi_app(out / "cache_app_api", "cache_app.c", "-DCACHE_APP_API", linked=True)}


ITER_RE = re.compile(r"^iter (\d+) class (\d+) used (-?\d+) schedule (\S+) reason (.*)$")
DUP_RE = re.compile(r"^dup (\d+) used (-?\d+) schedule (\S+) reason (.*)$")


class AppRun:
    def __init__(self, proc):
        self.proc = proc
        self.iters = [m.groups() for m in map(ITER_RE.match, proc.stdout.splitlines()) if m]
        self.dups = [m.groups() for m in map(DUP_RE.match, proc.stdout.splitlines()) if m]
        self.data_ok = "data_ok 1" in proc.stdout

    def __repr__(self):
        seq = " ".join(f"{i}:{k}:{Path(s).name if u == '1' else '-'}" for i, k, u, s, _ in self.iters)
        return (f"rc={self.proc.returncode}\nchoices (iteration:class:entry): {seq}\n"
                f"stdout:\n{self.proc.stdout[-3000:]}\nstderr:\n{self.proc.stderr[-3000:]}")

    def choices(self) -> str:
        return " ".join(f"{i}:{k}:{Path(s).name if u == '1' else '-'}" for i, k, u, s, _ in self.iters)

    def used_files(self) -> list[str]:
        return [Path(s).name if u == "1" else "-" for _, _, u, s, _ in self.iters]

    def hit_rate(self, files: dict) -> float:
        after = [(int(k), Path(s).name) for i, k, u, s, _ in self.iters if int(i) >= WARMUP and u == "1"]
        n = sum(1 for i, *_ in self.iters if int(i) >= WARMUP)
        return sum(1 for k, f in after if files[k] == f) / max(n, 1)

    def collsched_lines(self) -> list[str]:
        return [l for l in self.proc.stderr.splitlines() if l.startswith("collsched:")]


def run_app(exe: Path, nranks: int, cache, iters: int, *, spread: float = SPREAD_S, preload: bool = False,
            env: dict | None = None, interleave: bool = False, mixed: bool = False,
            timeout: int = TIMEOUT) -> AppRun:
    full = dict(os.environ)
    full.update({"COLLSCHED_SCHEDULES": str(cache)})
    if preload:
        if not PRELOAD.exists():
            pytest.skip(f"{PRELOAD} not built")
        libs = [str(PRELOAD)]
        if os.environ.get("COLLSCHED_ASAN"):  # an ASan-built library needs the runtime first
            libs.insert(0, subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                                          text=True, check=True).stdout.strip())
        full["LD_PRELOAD"] = ":".join(libs)
    full.update(env or {})
    # Ranks that wait yield the CPU: on an oversubscribed machine the late ranks then wake
    # on time instead of queueing behind busy-polling ones (arrival noise of tens of ms).
    cmd = mpirun_cmd(nranks) + ["--mca", "mpi_yield_when_idle", "1"]
    for k in full:
        if k.startswith("COLLSCHED_") or k == "LD_PRELOAD":
            cmd += ["-x", k]
    cmd += [str(exe), str(iters), str(BYTES), str(int(spread * 1e6))] + (["--interleave"] if interleave else []) \
        + (["--mixed-sites"] if mixed else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full)
    return AppRun(proc)


def read_stats(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    assert doc["collsched-stats"] == 1
    return doc


@pytest.mark.parametrize("nranks", [5, 8])
def test_preload_picks_the_class_entry(tmp_path, apps, nranks):
    """An unmodified program under the preload library: after 2 cycles, the class's entry
    in >= 90% of the calls; interleaved calls from another site on another communicator
    (on time: no class) run the regular entry; the stats file says so."""
    files = build_cache(tmp_path / "cache", nranks)
    stats = tmp_path / "stats.yaml"
    run = run_app(apps["plain"], nranks, tmp_path / "cache", 30, preload=True, interleave=True,
                  env={"COLLSCHED_STATS": str(stats)})
    assert run.proc.returncode == 0 and run.data_ok, run
    assert len(run.iters) == 30 and len(run.dups) == 30, run
    assert all(u == "1" for _, _, u, _, _ in run.iters), run  # regular during warm-up
    assert run.iters[0][3].endswith(files["regular"]), run  # nothing predicted yet
    rate = run.hit_rate(files)
    print(f"P={nranks}: hit rate after warm-up {rate:.3f}")
    assert rate >= 0.9, run
    regular = sum(1 for _, u, s, _ in run.dups if u == "1" and Path(s).name == files["regular"])
    assert regular >= 27, run  # on time: no class (the odd call may land in one by noise)
    assert run.collsched_lines() == [], run
    doc = read_stats(stats)
    assert doc["source"] == str(tmp_path / "cache")
    rows = doc["sites"]
    assert len(rows) == 2 and all(r["ranks"] == nranks and r["collective"] == "allgather" for r in rows), doc
    main = next(r for r in rows if r["hits"] > 0)
    other = next(r for r in rows if r is not main)
    assert main["calls"] == 30 and main["fallback"] == 0, doc
    assert main["missed"]["warm-up"] == 1, doc
    used = {u["file"]: (u["class"], u["calls"]) for u in main["used"]}
    assert sum(c for _, c in used.values()) == 30, doc
    assert main["hits"] == sum(c for k, c in used.values() if k != "regular"), doc
    for k in range(3):
        assert used[files[k]][0] == k, doc
    # (the last call is labelled at its exit too, docs/cache.md step 3; the bound allows one less)
    assert main["right"] >= 0.9 * (30 - WARMUP) - 1, doc
    assert other["calls"] == 30 and other["missed"]["warm-up"] == 1, doc
    assert other["missed"]["unknown-pattern"] >= 25 and other["fallback"] == 0, doc
    assert main["site"] != other["site"] and "*" not in (main["site"], other["site"]), doc


@pytest.mark.parametrize("nranks,spread", [(6, SPREAD_S), (5, 0.0)])
def test_api_with_labels(tmp_path, apps, nranks, spread):
    """Through the API, collsched_label("step") names the site and the index keys every
    entry by it (SITE step). With imbalance, >= 90% hits after the warm-up; balanced
    (spread 0), every call's pattern is in no class and the regular entry runs."""
    d = tmp_path / "cache"
    files = build_cache(d, nranks, site="step", regular=False)
    compile_schedule("ring", nranks, (1, 100000), engine="none", output=d / "ring.sched")
    idx = (d / "index").read_text() + entry("ring.sched", nranks, "regular", site="step") + "\n"
    (d / "index").write_text(idx)
    files["regular"] = "ring.sched"
    stats = tmp_path / "stats.yaml"
    run = run_app(apps["api"], nranks, d, 24, spread=spread, env={"COLLSCHED_STATS": str(stats)})
    assert run.proc.returncode == 0 and run.data_ok, run
    doc = read_stats(stats)
    (row,) = doc["sites"]
    assert row["site"] == "step" and row["calls"] == 24, doc
    if spread:
        rate = run.hit_rate(files)
        print(f"P={nranks} API: hit rate after warm-up {rate:.3f}")
        assert rate >= 0.9, run
    else:
        assert [Path(s).name for _, _, u, s, _ in run.iters] == ["ring.sched"] * 24, run
        assert row["hits"] == 0 and row["missed"]["unknown-pattern"] == 23, doc


def test_exact_site_from_the_stats(tmp_path, apps):
    """The site names the stats file reports are the ones the index keys by: a cache built
    for the main call site serves it; the interleaved call (another site) has no entry
    and runs the MPI library's collective; both stay byte-exact."""
    nranks = 5
    build_cache(tmp_path / "any", nranks)
    stats = tmp_path / "stats.yaml"
    first = run_app(apps["plain"], nranks, tmp_path / "any", 6, preload=True, interleave=True,
                    env={"COLLSCHED_STATS": str(stats)})
    assert first.proc.returncode == 0 and first.data_ok, first
    rows = read_stats(stats)["sites"]
    main = next(r["site"] for r in rows if r["hits"] > 0)
    files = build_cache(tmp_path / "exact", nranks, site=main)
    run = run_app(apps["plain"], nranks, tmp_path / "exact", 24, preload=True, interleave=True)
    assert run.proc.returncode == 0 and run.data_ok, run
    assert run.hit_rate(files) >= 0.9, run
    assert len(run.dups) == 24 and all(u == "0" and "no entry" in why for _, u, _, why in run.dups), run


@pytest.mark.parametrize("nranks", [4, 5])
def test_ranks_naming_different_sites(tmp_path, apps, nranks):
    """Legal MPI the cache cannot key alike: the odd ranks make the main call from another
    source line. With '*' entries every rank still chooses the same, the exchange carries
    the site hashes, and at the next call every rank sees the difference: the cache is
    off for the communicator (one line), the MPI library's collective runs, data right."""
    build_cache(tmp_path / "cache", nranks)
    run = run_app(apps["plain"], nranks, tmp_path / "cache", 9, preload=True, mixed=True)
    assert run.proc.returncode == 0 and run.data_ok, run
    said = run.collsched_lines()
    assert len(said) == 1 and "ranks named different call sites" in said[0], run
    assert len(run.iters) == 9 and run.iters[0][2] == "1", run
    assert all(u == "0" for _, _, u, _, _ in run.iters[1:]), run
    assert all("ranks named different call sites" in why for *_, why in run.iters[1:]), run


def test_strict_mode(tmp_path, apps):
    """COLLSCHED_STRICT=1: a call the cache serves (a class entry or the regular one) runs;
    a miss with nothing to run is refused as for a directory without a match: the refusal
    line, and the default error handler aborts the job."""
    nranks = 5
    files = build_cache(tmp_path / "cache", nranks)
    run = run_app(apps["plain"], nranks, tmp_path / "cache", 12, preload=True, env={"COLLSCHED_STRICT": "1"})
    assert run.proc.returncode == 0 and run.data_ok, run
    assert len(run.iters) == 12 and all(u == "1" for _, _, u, _, _ in run.iters), run
    build_cache(tmp_path / "noreg", nranks, regular=False)
    run = run_app(apps["plain"], nranks, tmp_path / "noreg", 12, preload=True, env={"COLLSCHED_STRICT": "1"},
                  timeout=120)
    assert run.proc.returncode != 0, run
    assert "COLLSCHED_STRICT=1: MPI_Allgather refused on a communicator of 5 ranks" in run.proc.stderr, run
    assert "nothing predicted yet" in run.proc.stderr, run
    # without strict mode the same cache falls back during the warm-up, then hits
    run = run_app(apps["plain"], nranks, tmp_path / "noreg", 12, preload=True)
    assert run.proc.returncode == 0 and run.data_ok, run
    assert run.iters[0][2] == "0" and "nothing predicted yet" in run.iters[0][4], run
    assert run.hit_rate(files) >= 0.9, run


def _regular_and_classes(nranks: int) -> list[str]:
    return [entry("ring.sched", nranks, "regular")] + [
        entry(f"{a}-c{k}.sched", nranks, k, late(nranks, k)) for k, a in enumerate(ALGS)]


HOSTILE = {
    "bad header": (lambda n: ["collsched-cache 2"], "line 1: header: expected 'collsched-cache 1'"),
    "field count": (lambda n: ["entry ring.sched allgather 5 1 100000 * - regular - 5"],
                    "line 3: fields: expected 12"),
    "pattern length": (lambda n: [entry("bslb-c0.sched", n, 0, late(n, 0)[:-1])],
                       "line 3: PATTERN: expected 5 values (RANKS), found 4"),
    "pattern inf": (lambda n: [entry("bslb-c0.sched", n, 0, late(n, 0)).replace(f"{SPREAD_S!r},", "inf,", 1)],
                    "line 3: PATTERN: expected finite non-negative seconds"),
    "pattern min": (lambda n: [entry("bslb-c0.sched", n, 0, [x + 0.001 for x in late(n, 0)])],
                    "line 3: PATTERN: expected the smallest offset 0"),
    "file with slash": (lambda n: [entry("../ring.sched", n, "regular")], "line 3: FILE: expected a file name"),
    "dot file": (lambda n: [entry(".ring.sched", n, "regular")], "line 3: FILE: expected a file name"),
    "ranks range": (lambda n: [entry("ring.sched", 0, "regular")], "line 3: RANKS: expected a whole number 1 to 65536"),
    "bytes order": (lambda n: [entry("ring.sched", n, "regular", bmin=9, bmax=3)], "line 3: BYTES_MAX"),
    "negative radius": (lambda n: [entry("bslb-c0.sched", n, 0, late(n, 0), radius=-1.0)], "line 3: RADIUS"),
    "two regular": (lambda n: [entry("ring.sched", n, "regular"), entry("bruck-c2.sched", n, "regular", site="*")],
                    "line 4: CLASS: expected one regular entry"),
    "duplicate file": (lambda n: [entry("ring.sched", n, "regular"), entry("ring.sched", n, 0, late(n, 0))],
                       "line 4: FILE: expected a file no other entry names (line 3 does)"),
    "unknown record": (lambda n: ["entries ring.sched"], "line 3: record: expected 'entry'"),
    "collective": (lambda n: [entry("ring.sched", n, "regular", coll="bcast")], "line 3: COLLECTIVE"),
    "topology": (lambda n: [entry("bslb-c0.sched", n, 0, late(n, 0)).replace("0123456789abcdef", "xyz")],
                 "line 3: TOPOLOGY: expected 16 hex digits or -"),
    "class range": (lambda n: [entry("bslb-c0.sched", n, 70000, late(n, 0))], "line 3: CLASS: expected regular or a class"),
    "duplicate class": (lambda n: [entry("bslb-c0.sched", n, 1, late(n, 0)), entry("min3-c1.sched", n, 1, late(n, 1))],
                        "line 4: CLASS: expected one entry per class"),
    "uses": (lambda n: [entry("ring.sched", n, "regular").replace(" 5 -", " -5 -")], "line 3: USES"),
    "regular with a pattern": (lambda n: [entry("ring.sched", n, "regular")[:-1] + "0,0,0,0,0"],
                               "line 3: PATTERN: expected - (a regular entry has no pattern)"),
    "crlf": (lambda n: [entry("ring.sched", n, "regular") + "\r"], "line 3: PATTERN"),
    "double space": (lambda n: [entry("ring.sched", n, "regular").replace(" ", "  ", 1)], "line 3: fields: expected 12"),
}


HOSTILE.update({
    "no final newline": (None, "line 5: expected a newline at the end of the file"),
    "nul byte": (None, "file: expected text, found a NUL byte"),
    "empty": (None, "line 1: header: expected 'collsched-cache 1', found an empty file"),
})


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_index_is_refused_in_one_line(tmp_path, apps, case):
    nranks = 5
    d = tmp_path / "cache"
    build_cache(d, nranks)
    lines, expected = HOSTILE[case]
    if case == "bad header":
        (d / "index").write_text("collsched-cache 2\n" + "\n".join(_regular_and_classes(nranks)) + "\n")
    elif case == "no final newline":
        (d / "index").write_text("collsched-cache 1\n" + "\n".join(_regular_and_classes(nranks)))
    elif case == "nul byte":
        (d / "index").write_bytes(b"collsched-cache 1\n\0" + "\n".join(_regular_and_classes(nranks)).encode() + b"\n")
    elif case == "empty":
        (d / "index").write_bytes(b"")
    else:
        write_index(d, lines(nranks))
    run = run_app(apps["plain"], nranks, d, 4, preload=True)
    assert run.proc.returncode == 0 and run.data_ok, run
    said = run.collsched_lines()
    assert len(said) == 1 and f"{d}/index: " in said[0] and expected in said[0], run
    assert len(run.iters) == 4 and all(u == "0" for _, _, u, _, _ in run.iters), run  # the MPI library's


def test_index_fifo_and_missing_or_corrupt_entries(tmp_path, apps):
    """An index that is a FIFO: refused at once (no reader blocks in open); a missing
    schedule file and a corrupt one: those entries are skipped with one line each, the
    others serve."""
    nranks = 5
    d = tmp_path / "fifo"
    build_cache(d, nranks)
    (d / "index").unlink()
    os.mkfifo(d / "index")
    run = run_app(apps["plain"], nranks, d, 4, preload=True, timeout=120)
    assert run.proc.returncode == 0 and run.data_ok, run
    said = run.collsched_lines()
    assert said == [f"collsched: {d}/index: file: expected a regular file, found a FIFO"], run

    d = tmp_path / "broken"
    files = build_cache(d, nranks)
    (d / files[1]).unlink()  # missing
    raw = bytearray((d / files[2]).read_bytes())
    raw[-20] ^= 0xFF  # a section's checksum fails
    (d / files[2]).write_bytes(bytes(raw))
    stats = tmp_path / "stats.yaml"
    run = run_app(apps["plain"], nranks, d, 24, preload=True, env={"COLLSCHED_STATS": str(stats)})
    assert run.proc.returncode == 0 and run.data_ok, run
    said = run.collsched_lines()
    assert len(said) == 2, run
    assert f"{files[1]} (index line 5): entry skipped: {d}/{files[1]}: file: cannot read" in said[0], run
    assert files[2] in said[1], run
    used = run.used_files()
    assert files[1] not in used and files[2] not in used, run
    # class 0 still hits; classes 1 and 2 run the regular entry
    after = [(int(k), f) for (i, k, *_), f in zip(run.iters, used) if int(i) >= WARMUP]
    assert sum(1 for k, f in after if k == 0 and f == files[0]) >= 0.9 * sum(1 for k, _ in after if k == 0), run
    assert len(after) == 24 - WARMUP and all(f == files["regular"] for k, f in after if k != 0), run
    row = read_stats(stats)["sites"][0]
    assert row["missed"]["entry-refused"] >= 12, row


def test_writer_lock_is_waited_for(tmp_path, apps):
    """A writer holding DIR/.lock exclusively: the job's first call waits for it (shared
    lock), then reads the new index; the lock file is never created by a reader."""
    nranks = 5
    d = tmp_path / "cache"
    files = build_cache(d, nranks)
    run = run_app(apps["plain"], nranks, d, 9, preload=True)
    assert run.proc.returncode == 0 and run.data_ok and not (d / ".lock").exists(), run
    fd = os.open(d / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    timer = threading.Timer(2.0, lambda: (fcntl.flock(fd, fcntl.LOCK_UN), os.close(fd)))
    timer.start()
    t0 = time.monotonic()
    try:
        run = run_app(apps["plain"], nranks, d, 21, preload=True)
    finally:
        timer.join()
    assert time.monotonic() - t0 >= 2.0
    assert run.proc.returncode == 0 and run.data_ok, run
    assert run.hit_rate(files) >= 0.9, run.choices()


@pytest.mark.smpi
def test_smpi_choice_sequence(tmp_path):
    """Under SMPI (exact clocks, simulated sleeps) the choice sequence is the rule's, call
    for call: the regular entry first (no history), then the last label for calls 1-5
    (no period yet: the class of the call before), then the period 3 for every call."""
    if not shutil.which("smpirun") or not shutil.which("smpicc") or not SMPI_LIB.exists():
        pytest.skip("smpirun, smpicc or the SMPI build of libcollsched missing")
    nranks = 4
    files = build_cache(tmp_path / "cache", nranks, site="step")
    exe = tmp_path / "cache_app_smpi"
    subprocess.run(["smpicc", "-DCACHE_APP_API", f"-I{ROOT / 'runtime' / 'include'}", str(APPS / "cache_app.c"),
                    str(SMPI_LIB), "-lm", "-o", str(exe)], check=True, capture_output=True, timeout=TIMEOUT)
    stats = tmp_path / "stats.yaml"
    cmd = ["smpirun", "-np", str(nranks), "-platform", str(DATA / "platform-4.xml"), "-hostfile",
           str(DATA / "hostfile-4.txt"), "--cfg=smpi/display-timing:no", "--log=root.thr:warning",
           str(exe), "18", str(BYTES), str(int(SPREAD_S * 1e6))]
    env = dict(os.environ, COLLSCHED_SCHEDULES=str(tmp_path / "cache"), COLLSCHED_STATS=str(stats))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    run = AppRun(proc)
    assert proc.returncode == 0 and run.data_ok, run
    expected = [files["regular"]] + [files[(i - 1) % 3] for i in range(1, WARMUP)] + \
               [files[i % 3] for i in range(WARMUP, 18)]
    assert run.used_files() == expected, run
    row = read_stats(stats)["sites"][0]
    # calls 1-17 ran a class entry; 6-17 are known right (a call a schedule ran completes
    # its exchange at its exit, docs/cache.md step 3: the last one too)
    assert row["hits"] == 17 and row["right"] == 12, row


def test_cache_built_by_collsched_cache_build(tmp_path, apps):
    """A cache written by `collsched cache build` (compiler/collsched/cache) from an
    arrival-pattern file with iterations (the app's 3 classes, 12 ms of noise), compiled
    for a slow network (1 Mbit/s, 2 ms) where the class entries are worth it (min3,
    --engine pat): the runtime reads its index, proves every entry and picks the class
    entries; every byte right."""
    nranks = 5
    rng = __import__("random").Random(1)
    its = [[max(0.0, s + rng.uniform(-0.012, 0.012)) for s in late(nranks, i % 3)] for i in range(30)]
    pap = tmp_path / "pap.yaml"
    pap.write_text(yaml.safe_dump({"unit": "s", "iterations": its}))
    topo = tmp_path / "slow.yaml"
    topo.write_text("name: slow\nsites:\n  - name: A\n    hosts: 8\n    lan: {latency: 2ms, bandwidth: 1Mbit/s}\n")
    d = tmp_path / "cache"
    cli = ROOT / ".venv" / "bin" / "collsched"
    if not cli.exists():
        pytest.skip(f"{cli} missing")
    subprocess.run([str(cli), "cache", "build", str(pap), "--ranks", str(nranks), "--bytes", str(BYTES), "-o",
                    str(d), "--topology", str(topo), "--engine", "pat"], check=True, capture_output=True,
                   timeout=TIMEOUT)
    rows = [l.split(" ") for l in (d / "index").read_text().splitlines() if l.startswith("entry ")]
    files = {("regular" if r[8] == "regular" else int(r[8])): r[1] for r in rows}
    # the builder numbers classes by first appearance: map them to the app's by pattern
    for r in rows:
        if r[8] != "regular":
            pat = [float(x) for x in r[11].split(",")]
            k = next(k for k in range(3) if max(abs(a - b) for a, b in zip(pat, late(nranks, k))) < 0.01)
            files[k] = r[1]
    assert len(files) == 4, rows
    stats = tmp_path / "stats.yaml"
    run = run_app(apps["plain"], nranks, d, 30, preload=True, env={"COLLSCHED_STATS": str(stats)})
    assert run.proc.returncode == 0 and run.data_ok, run
    assert run.collsched_lines() == [], run
    rate = run.hit_rate(files)
    print(f"cache build, P={nranks}: hit rate after warm-up {rate:.3f}")
    assert rate >= 0.9, run
    row = read_stats(stats)["sites"][0]
    assert row["calls"] == 30 and row["missed"]["warm-up"] == 1 and row["fallback"] == 0, row


@pytest.fixture(scope="module")
def pat_app(tmp_path_factory):
    out = tmp_path_factory.mktemp("pat_cache_app")
    return build_mpi_app(out / "pat_cache_app", "pat_cache_app.c", "-pthread", linked=True)


def run_pat(exe: Path, nranks: int, cache: Path, iters: int, spread: float, env: dict | None = None,
            driver: str = "explicit") -> AppRun:
    full = dict(os.environ, COLLSCHED_SCHEDULES=str(cache), **(env or {}))
    cmd = mpirun_cmd(nranks) + ["--mca", "mpi_yield_when_idle", "1"]
    for k in full:
        if k.startswith("COLLSCHED_"):
            cmd += ["-x", k]
    cmd += [str(exe), str(iters), str(BYTES), "100000", str(int(spread * 1e6))] + (["thread"] if driver == "thread" else [])
    return AppRun(subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=full))


@pytest.mark.parametrize("nranks,driver", [(4, "explicit"), (5, "explicit"), (5, "thread")])
def test_pat_cache_mode(tmp_path, pat_app, nranks, driver):
    """PAT_UseAlg("cache"): the engine predicts every rank's arrival from PAT_Edge (all
    ranks hold every estimate once the exchange completes) and picks the entry of the
    nearest class in the same iteration: no warm-up; the schedule's background part runs
    in the engine as with PAT_UseSchedule; every byte right. With MPI_THREAD_MULTIPLE the
    engine's progress thread picks it."""
    # compiled for the PAT engine: their background operations run in the engine
    files = build_cache(tmp_path / "cache", nranks, engine="pat")
    stats = tmp_path / "stats.yaml"
    run = run_pat(pat_app, nranks, tmp_path / "cache", 9, SPREAD_S, env={"COLLSCHED_STATS": str(stats)},
                  driver=driver)
    assert run.proc.returncode == 0 and run.data_ok, run
    assert len(run.iters) == 9 and all(u == "1" for _, _, u, _, _ in run.iters), run
    hits = sum(1 for (_, k, *_), f in zip(run.iters, run.used_files()) if f == files[int(k)])
    print(f"PAT cache mode P={nranks} ({driver}): {hits} of 9 iterations ran their class's entry")
    assert hits >= 8, run
    row = next(r for r in read_stats(stats)["sites"] if r["site"] == "PAT")
    assert row["calls"] == 9 and row["hits"] == hits and row["fallback"] == 0, row


def test_pat_cache_mode_falls_back_to_regular_then_online_bdr(tmp_path, pat_app):
    """A predicted pattern in no class (everybody on time): the regular entry; a cache
    without one: BDR built online, as PAT_UseAlg("bdr") does; data right either way."""
    nranks = 5
    files = build_cache(tmp_path / "cache", nranks)
    run = run_pat(pat_app, nranks, tmp_path / "cache", 4, 0.0)
    assert run.proc.returncode == 0 and run.data_ok, run
    assert len(run.iters) == 4 and run.used_files() == [files["regular"]] * 4, run
    build_cache(tmp_path / "noreg", nranks, regular=False)
    run = run_pat(pat_app, nranks, tmp_path / "noreg", 4, 0.0)
    assert run.proc.returncode == 0 and run.data_ok, run
    assert len(run.iters) == 4 and all(u == "1" and s.startswith("PAT_bdr_(online") for _, _, u, s, _ in run.iters), run


@pytest.mark.smpi
def test_smpi_pat_cache_mode(tmp_path):
    """The PAT cache mode under SMPI (exact estimates): every iteration its class's entry."""
    if not shutil.which("smpirun") or not shutil.which("smpicc") or not SMPI_LIB.exists():
        pytest.skip("smpirun, smpicc or the SMPI build of libcollsched missing")
    nranks = 4
    files = build_cache(tmp_path / "cache", nranks)
    exe = tmp_path / "pat_cache_app_smpi"
    subprocess.run(["smpicc", f"-I{ROOT / 'runtime' / 'include'}", str(APPS / "pat_cache_app.c"),
                    str(SMPI_LIB), "-lm", "-o", str(exe)], check=True, capture_output=True, timeout=TIMEOUT)
    cmd = ["smpirun", "-np", str(nranks), "-platform", str(DATA / "platform-4.xml"), "-hostfile",
           str(DATA / "hostfile-4.txt"), "--cfg=smpi/display-timing:no", "--log=root.thr:warning",
           str(exe), "9", str(BYTES), "100000", str(int(SPREAD_S * 1e6))]
    env = dict(os.environ, COLLSCHED_SCHEDULES=str(tmp_path / "cache"))
    run = AppRun(subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env))
    assert run.proc.returncode == 0 and run.data_ok, run
    assert run.used_files() == [files[i % 3] for i in range(9)], run


@pytest.mark.parametrize("nranks,nthreads", [(3, 3), (4, 2)])
def test_threads_on_their_own_communicators(tmp_path, nranks, nthreads):
    """MPI_THREAD_MULTIPLE: threads call collsched_allgather at the same time, each on its
    own duplicate of MPI_COMM_WORLD, with a cache that has classes for the calls' bytes
    (every call carries the arrival exchange, on every thread's communicator at once) and
    COLLSCHED_STATS (rows shared by the threads); every result compared byte for byte with
    PMPI_Allgather (tests/runtime/apps/threads_app.c)."""
    exe = build_mpi_app(tmp_path / "threads_app", "threads_app.c", "-std=c11", "-D_POSIX_C_SOURCE=200809L",
                        "-pthread", linked=True)
    build_cache(tmp_path / "cache", nranks)
    stats = tmp_path / "stats.yaml"
    iterations = 40
    env = dict(os.environ, COLLSCHED_SCHEDULES=str(tmp_path / "cache"), COLLSCHED_STATS=str(stats))
    cmd = mpirun_cmd(nranks) + ["-x", "COLLSCHED_SCHEDULES", "-x", "COLLSCHED_STATS",
                                str(exe), str(nthreads), str(iterations), "16"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    if "threads_app: SKIP:" in proc.stdout:
        pytest.skip(proc.stdout.strip())
    calls = nranks * nthreads * iterations  # the app counts every rank's
    assert proc.returncode == 0, proc
    assert f"threads_app: OK calls={calls} scheduled={calls} wrong=0 errors=0" in proc.stdout, proc
    # threads_app never calls collsched_finalize: MPI_Finalize's MPI_COMM_SELF hook does
    (row,) = read_stats(stats)["sites"]
    assert row["calls"] == nthreads * iterations and row["fallback"] == 0, row  # rank 0 of each


def test_allgatherv_entries_serve_allgatherv_only(tmp_path):
    """COLLECTIVE allgatherv: the entry serves MPI_Allgatherv calls whose every block is in
    its byte range (collsched-run's --all-modes: blocks of different sizes, in place and
    not); allgather calls find no group and run the MPI library's collective."""
    from rt_helpers import make_schedule, run_driver
    nranks = 5
    d = tmp_path / "cache"
    d.mkdir()
    make_schedule(d / "ring.sched", "ring", nranks, nseg=2)
    write_index(d, [entry("ring.sched", nranks, "regular", coll="allgatherv", bmin=0, bmax=100000)])
    run = run_driver(nranks, [d], "--bytes", "0,1,777,4096", "--all-modes", "--iterations", "2")
    assert run.returncode == 0 and len(run.rows) == 16 and all(r["data_ok"] for r in run.rows), run
    for r in run.rows:
        assert r["used_schedule"] == (r["collective"] == "allgatherv"), r
        assert r["used_schedule"] or "no entry for allgather, 5 ranks" in r["reason"], r


def test_entries_beyond_the_eager_bound_are_proven_on_first_use(tmp_path, apps):
    """More than 256 entries of the communicator's size: the set-up proves the first 256
    (here regular entries of other call sites), the '*' group at the end of the index is
    proven on its first choice, collectively, on every rank alike: it still serves."""
    nranks = 5
    d = tmp_path / "cache"
    files = build_cache(d, nranks)
    lines = []
    for i in range(260):
        shutil.copy(d / files["regular"], d / f"other-{i}.sched")
        lines.append(entry(f"other-{i}.sched", nranks, "regular", site=f"elsewhere{i}"))
    (d / "index").write_text((d / "index").read_text().replace(
        "# written by test_cache_mpi.py\n", "# written by test_cache_mpi.py\n" + "".join(l + "\n" for l in lines)))
    run = run_app(apps["plain"], nranks, d, 18, preload=True)
    assert run.proc.returncode == 0 and run.data_ok, run
    assert run.collsched_lines() == [], run
    assert run.iters[0][3].endswith(files["regular"]) and run.hit_rate(files) >= 0.9, run


@pytest.mark.parametrize("nranks", [5, 8])
def test_compact_entries_serve_calls(tmp_path, apps, nranks):
    """A cache whose regular entry is a compact description (docs/compact.md) and whose
    class entries are explicit files: the runtime loads both forms through one path, every
    call runs a schedule of the cache, data checked by the app; the Python side lists it."""
    from collsched.cache.store import load_cache
    from collsched.compact import for_default, write_compact

    files = build_cache(tmp_path / "cache", nranks, regular=False)
    write_compact(for_default("bruck", nranks, (1, 100000)), tmp_path / "cache" / "bruck.csc")
    lines = (tmp_path / "cache" / "index").read_text().splitlines()[2:]
    write_index(tmp_path / "cache", [entry("bruck.csc", nranks, "regular")] + lines)
    loaded = load_cache(tmp_path / "cache")
    assert loaded.warnings == [] and [s.algorithm for _, s in loaded.entries][0] == "bruck"
    run = run_app(apps["plain"], nranks, tmp_path / "cache", 12, preload=True)
    assert run.proc.returncode == 0 and run.data_ok, run
    assert all(u == "1" for _, _, u, _, _ in run.iters), run
    assert run.iters[0][3].endswith("bruck.csc"), run  # nothing predicted yet: the regular entry
    assert set(run.used_files()) <= {"bruck.csc", *files.values()}, run
    assert run.collsched_lines() == [], run
