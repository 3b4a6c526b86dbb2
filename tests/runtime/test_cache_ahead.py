"""Receive-ahead for cached schedules (docs/cache.md, "Receive-ahead"; runtime/src/cache_ahead.c):
at the exit of a call a cache served, the runtime predicts the call site's next entry and
posts that entry's leading background receives; the next call that runs the entry takes
them over. A program cycling through 3 imbalance classes (tests/runtime/apps/
cache_ahead_app.c), every byte of every call checked: under SMPI (exact clocks) the choice
sequence is the rule's and the late ranks' time in the call drops against
COLLSCHED_AHEAD=0; under real MPI (the preload library) the data stay right with calls of
another size and from another call site in between, a communicator freed and MPI
finalized with receives posted ahead outstanding."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from collsched.pipeline import compile_schedule
from rt_helpers import APPS, BUILD, ROOT, TIMEOUT, build_mpi_app, mpirun_cmd

pytestmark = pytest.mark.mpi

PRELOAD = BUILD / "lib" / "libcollsched-preload.so"
SMPI_LIB = Path(os.environ.get("COLLSCHED_SMPI_BUILD", ROOT / "build" / "smpi")) / "lib" / "libcollsched.a"
BYTES = 16384
WARMUP = 6  # two cycles of three classes
ITER_RE = re.compile(r"^iter (\d+) class (\d+) used (-?\d+) schedule (\S+)$")
POSTED = "collsched: receive-ahead: "


def late(nranks: int, k: int, spread: float) -> list[float]:
    return [spread if r % 3 == k else 0.0 for r in range(nranks)]


def build_cache(d: Path, nranks: int, spread: float) -> dict:
    """The regular entry (ring) and min3 per class compiled with engine ahead, for exactly
    BYTES per rank (the default topology: 1 Gbit/s, 50 us, as the SMPI platform below);
    returns {class: file name}. Every class entry is dataflow with early receives."""
    d.mkdir(parents=True, exist_ok=True)
    compile_schedule("ring", nranks, BYTES, engine="none", output=d / "ring.sched")
    files = {"regular": "ring.sched"}
    lines = [f"entry ring.sched allgather {nranks} {BYTES} {BYTES} * - regular - 5 -"]
    for k in range(3):
        pap = d.parent / f"pap-{nranks}-{k}.yaml"
        pap.write_text(yaml.safe_dump({"unit": "s", "arrivals": late(nranks, k, spread)}))
        name = f"min3-c{k}.sched"
        r = compile_schedule("min3", nranks, BYTES, pap=str(pap), engine="ahead", output=d / name)
        assert not r.schedule.serial and r.schedule.has_background, r.summary()
        files[k] = name
        pat = ",".join(repr(x) for x in late(nranks, k, spread))
        lines.append(f"entry {name} allgather {nranks} {BYTES} {BYTES} * 0123456789abcdef {k} "
                     f"{spread * 0.2!r} 5 {pat}")
    (d / "index").write_text("collsched-cache 1\n" + "".join(l + "\n" for l in lines))
    return files


class AppRun:
    def __init__(self, proc):
        self.proc = proc
        out = proc.stdout.splitlines()
        self.iters = [m.groups() for m in map(ITER_RE.match, out) if m]
        self.times = {int(l.split()[1]): [float(x) for x in l.split()[2:]] for l in out if l.startswith("times ")}
        self.others = [l.split() for l in out if l.startswith(("other ", "flat "))]
        self.data_ok = "data_ok 1" in proc.stdout

    def __repr__(self):
        return f"rc={self.proc.returncode}\nstdout:\n{self.proc.stdout[-3000:]}\nstderr:\n{self.proc.stderr[-3000:]}"

    def used(self) -> list[str]:
        return [Path(s).name if u == "1" else "-" for _, _, u, s in self.iters]

    def late_mean(self) -> float:
        """Mean time in the call of the late ranks, after the warm-up."""
        v = [t[r] for i, t in self.times.items() if i >= WARMUP for r in range(len(t)) if r % 3 == i % 3]
        return sum(v) / len(v)

    def failures(self) -> list[str]:
        return [l for l in self.proc.stderr.splitlines() if l.startswith(POSTED) and "withdrawn" in l]


def expected_sequence(files: dict, iters: int) -> list[str]:
    """The rule's choices: the regular entry (no history), the last label (no period
    yet), then the period 3."""
    return [files["regular"]] + [files[(i - 1) % 3] for i in range(1, WARMUP)] + \
           [files[i % 3] for i in range(WARMUP, iters)]


def smpi_platform(d: Path, nranks: int) -> tuple[Path, Path]:
    plat, hosts = d / f"platform-{nranks}.xml", d / f"hostfile-{nranks}.txt"
    plat.write_text("<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
                    "<platform version=\"4.1\"><zone id=\"z\" routing=\"Full\">"
                    f"<cluster id=\"c\" prefix=\"node-\" suffix=\"\" radical=\"0-{nranks - 1}\" speed=\"1Gf\" "
                    "bw=\"125MBps\" lat=\"50us\"/></zone></platform>\n")
    hosts.write_text("".join(f"node-{i}\n" for i in range(nranks)))
    return plat, hosts


@pytest.mark.smpi
@pytest.mark.parametrize("nranks", [6, 8])
def test_smpi_late_ranks_receive_ahead(tmp_path, nranks):
    if not shutil.which("smpirun") or not shutil.which("smpicc") or not SMPI_LIB.exists():
        pytest.skip("smpirun, smpicc or the SMPI build of libcollsched missing")
    spread, iters = 0.005, 15
    files = build_cache(tmp_path / "cache", nranks, spread)
    exe = tmp_path / "cache_ahead_smpi"
    subprocess.run(["smpicc", "-DCACHE_APP_API", f"-I{ROOT / 'runtime' / 'include'}",
                    str(APPS / "cache_ahead_app.c"), str(SMPI_LIB), "-lm", "-o", str(exe)],
                   check=True, capture_output=True, timeout=TIMEOUT)
    plat, hosts = smpi_platform(tmp_path, nranks)
    runs = {}
    for ahead in ("1", "0"):
        cmd = ["smpirun", "-np", str(nranks), "-platform", str(plat), "-hostfile", str(hosts),
               "--cfg=smpi/display-timing:no", "--log=root.thr:warning", str(exe), str(iters), str(BYTES),
               str(int(spread * 1e6))]
        env = dict(os.environ, COLLSCHED_SCHEDULES=str(tmp_path / "cache"), COLLSCHED_AHEAD=ahead,
                   COLLSCHED_VERBOSE="1")
        run = runs[ahead] = AppRun(subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env))
        assert run.proc.returncode == 0 and run.data_ok, run
        assert run.used() == expected_sequence(files, iters), run
        assert not run.failures(), run
    posted = [l for l in runs["1"].proc.stderr.splitlines() if l.startswith(POSTED)]
    assert posted and not any(l.startswith(POSTED) for l in runs["0"].proc.stderr.splitlines())
    # The late ranks took the early ranks' pieces in while they slept.
    on, off = runs["1"].late_mean(), runs["0"].late_mean()
    assert on < 0.85 * off, (on, off)


@pytest.fixture(scope="module")
def plain_app(tmp_path_factory):
    return build_mpi_app(tmp_path_factory.mktemp("ahead_apps") / "cache_ahead_app", "cache_ahead_app.c")


def run_preload(exe: Path, nranks: int, cache: Path, iters: int, spread: float, *opts: str) -> AppRun:
    if not PRELOAD.exists():
        pytest.skip(f"{PRELOAD} not built")
    libs = [str(PRELOAD)]
    if os.environ.get("COLLSCHED_ASAN"):
        libs.insert(0, subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                                      text=True, check=True).stdout.strip())
    env = dict(os.environ, COLLSCHED_SCHEDULES=str(cache), LD_PRELOAD=":".join(libs), COLLSCHED_VERBOSE="1")
    cmd = mpirun_cmd(nranks) + ["--mca", "mpi_yield_when_idle", "1"]
    for k in ("COLLSCHED_SCHEDULES", "LD_PRELOAD", "COLLSCHED_VERBOSE"):
        cmd += ["-x", k]
    cmd += [str(exe), str(iters), str(BYTES), str(int(spread * 1e6)), *opts]
    return AppRun(subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env))


@pytest.mark.parametrize("nranks", [5, 8])
def test_preload_other_sizes_other_sites_and_a_freed_communicator(tmp_path, plain_app, nranks):
    spread, iters = 0.03, 15
    files = build_cache(tmp_path / "cache", nranks, spread)
    # Between the cycle's calls: a call of another size (no entry: the MPI library's) and
    # one from another call site, every rank on time (the regular entry, not the one the
    # cycle's site has posted ahead); the last call's receives stay out at finalize.
    run = run_preload(plain_app, nranks, tmp_path / "cache", iters, spread, "--other-bytes", "1000", "--flat-site")
    assert run.proc.returncode == 0 and run.data_ok, run
    assert not run.failures(), run
    assert any(l.startswith(POSTED) for l in run.proc.stderr.splitlines()), run
    assert [o[3] for o in run.others if o[0] == "other"] == ["0"] * len([o for o in run.others if o[0] == "other"])
    flats = [Path(o[5]).name for o in run.others if o[0] == "flat"]
    assert flats and set(flats) == {files["regular"]}, run
    # The cycle's own calls choose as the rule says (real clocks: at least 90% after warm-up).
    used = run.used()
    right = sum(1 for i in range(WARMUP, iters) if used[i] == files[i % 3])
    assert right >= 0.9 * (iters - WARMUP), run
    # The iterations on a communicator freed with receives posted ahead outstanding, one
    # of them mispredicted (iteration 7 another class's pattern: the entry posted ahead
    # runs for it, and the two after are predicted from a broken period).
    run = run_preload(plain_app, nranks, tmp_path / "cache", 10, spread, "--dup", "--break", "7")
    assert run.proc.returncode == 0 and run.data_ok, run
    assert not run.failures(), run


@pytest.mark.parametrize("nranks,nthreads", [(3, 3), (4, 2)])
def test_threads_receive_ahead_on_their_own_communicators(tmp_path, nranks, nthreads):
    """MPI_THREAD_MULTIPLE (tests/runtime/apps/threads_app.c): threads call
    collsched_allgather at once, each on its own duplicate of MPI_COMM_WORLD, cycling
    through 3 sizes, every result compared with PMPI_Allgather. Each size has a class whose
    PATTERN is flat with a radius of 1 s (every call is in it) served by min3 compiled for
    a late pattern with engine ahead: from the second call of a size on, its entry runs,
    posted ahead at the exit of the size's previous call, with the other sizes' calls in
    between (their entries' receives outstanding on other communicators)."""
    exe = build_mpi_app(tmp_path / "threads_app", "threads_app.c", "-std=c11", "-D_POSIX_C_SOURCE=200809L",
                        "-pthread", linked=True)
    d = tmp_path / "cache"
    d.mkdir()
    ints, lines = 1024, []
    pap = tmp_path / "late.yaml"
    pap.write_text(yaml.safe_dump({"unit": "s", "arrivals": late(nranks, 0, 0.005)}))
    for i in range(3):
        b = 4 * (ints + i)
        compile_schedule("ring", nranks, b, engine="none", output=d / f"ring-{b}.sched")
        r = compile_schedule("min3", nranks, b, pap=str(pap), engine="ahead", output=d / f"min3-{b}.sched")
        assert not r.schedule.serial and r.schedule.has_background, r.summary()
        lines += [f"entry ring-{b}.sched allgather {nranks} {b} {b} * - regular - 5 -",
                  f"entry min3-{b}.sched allgather {nranks} {b} {b} * - 0 1.0 5 " + ",".join(["0"] * nranks)]
    (d / "index").write_text("collsched-cache 1\n" + "".join(l + "\n" for l in lines))
    iterations = 30
    env = dict(os.environ, COLLSCHED_SCHEDULES=str(d), COLLSCHED_VERBOSE="1")
    cmd = mpirun_cmd(nranks) + ["-x", "COLLSCHED_SCHEDULES", "-x", "COLLSCHED_VERBOSE",
                                str(exe), str(nthreads), str(iterations), str(ints)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    if "threads_app: SKIP:" in proc.stdout:
        pytest.skip(proc.stdout.strip())
    calls = nranks * nthreads * iterations
    assert proc.returncode == 0, proc
    assert f"threads_app: OK calls={calls} scheduled={calls} wrong=0 errors=0" in proc.stdout, proc
    # every call's exit posts the next call's on the late ranks (those with early receives)
    posted = [l for l in proc.stderr.splitlines() if l.startswith(POSTED)]
    late_ranks = sum(1 for r in range(nranks) if r % 3 == 0)
    assert len(posted) == late_ranks * nthreads * iterations, proc.stderr[-2000:]
    assert not any("withdrawn" in l for l in posted), proc.stderr[-2000:]
