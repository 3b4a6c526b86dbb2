"""Recurring load patterns in the lab (issue 17, item 7): the scenario (bounded noise,
256K floats in total), replayed delays (--pap, the minibench's --delays), the arrival
trace of a training run, caches built from it (engine none for cache:DIR, engine pat for
cache-pat:DIR), the runtime's selection from them, the oracle, the report, and bad
inputs. Small runs: P = 8, 4-16 KiB per rank, 12 iterations of 3 classes, under SimGrid
SMPI (and real MPI for the preload check)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from collsched.runtime_build import build_dir
from collsched.lab.recurring import _entry_classes, _hits, default_bytes, scenario
from collsched.lab.recurring_report import stats_use
from collsched.lab.runner import LabConfig, run_lab, write_delays

ROOT = Path(__file__).resolve().parents[2]
TOPO = str(ROOT / "topologies" / "tryton-48.yaml")
BUILD = build_dir()
MINIBENCH = BUILD / "smpi" / "bin" / "collsched-minibench"
P, NBYTES, ITERATIONS = 8, 4096, 12


def _need_smpi():
    if shutil.which("smpirun") is None or not MINIBENCH.exists():
        pytest.skip("SimGrid SMPI or build/smpi/bin/collsched-minibench missing (make lab)")


def _cfg(tmp: Path, delays, nbytes=NBYTES, **kw) -> LabConfig:
    return LabConfig(backend="smpi", topology=TOPO, ranks=P, nbytes=nbytes, iterations=len(delays),
                     flat_iterations=0, delays=delays, delays_source="test", workdir=str(tmp), bounds=False, **kw)


@pytest.fixture(scope="module")
def sc():
    return scenario(P)


def _labels(n=ITERATIONS, k=3):
    return np.arange(n) % k


@pytest.mark.smpi
def test_replayed_delays_are_the_arrivals(tmp_path, sc):
    """The minibench waits exactly the replayed delays: measured arrivals minus their
    earliest equal the delays (SMPI's clock; barrier exits are one latency apart)."""
    _need_smpi()
    delays = sc.draw(_labels(6), 5)
    row = run_lab(_cfg(tmp_path, delays), ["native"])["results"][0]
    assert row["data_ok"]
    assert row["used"] == [""] * 6  # the MPI library ran every call
    assert len(row["elapsed_per_iteration_s"]) == 6
    assert row["imbalance_s"] == pytest.approx(float(np.mean(np.ptp(delays, axis=1))), abs=1e-4)


def test_scenario_noise_is_bounded_and_bytes_are_256k_floats():
    """Every arrival off its class pattern by at most 5% of the spread (before the shift
    to the earliest); the Gaussian draw has the same classes; bytes 4 x floor(262144 / P)."""
    sc = scenario(28)
    labels = _labels(300)
    d = sc.draw(labels, 2)
    # d = class + noise - (one shift per iteration): the noise's range is at most 2 x 5%
    assert np.ptp(d - sc.classes[labels], axis=1).max() <= 2 * sc.noise * sc.spread + 1e-12
    assert d.min() == 0.0 and np.all(d.min(axis=1) == 0.0)
    g = sc.draw(labels, 2, gaussian=True)
    assert np.ptp(g - sc.classes[labels], axis=1).max() > 2 * sc.noise * sc.spread  # unbounded tails
    assert default_bytes("smpi", 28) == 37448 and default_bytes("smpi", 8) == 4 * 32768
    assert default_bytes("mpi", 8) == 64 << 10


def _train_and_build(tmp: Path, sc, nbytes=NBYTES, engines=("none",)) -> tuple[Path, dict]:
    from collsched.lab.recurring import _build_cache

    trace = tmp / "train.trace"
    row = run_lab(_cfg(tmp / "train", sc.draw(_labels(), 1), environ={"COLLSCHED_ARRIVALS": str(trace)},
                       library_native=True, nbytes=nbytes), ["native"])["results"][0]
    assert row["data_ok"] and trace.is_file()
    caches = {}
    for engine in engines:
        caches[engine] = tmp / f"cache-{engine}"
        built = _build_cache(trace, caches[engine], str(tmp / "train" / "network-topology.yaml"), None, engine)
        assert built["groups"] and built["groups"][0]["calls"] == ITERATIONS
    return trace, caches


@pytest.mark.smpi
def test_trace_cache_build_and_selection(tmp_path, sc):
    """Training run with COLLSCHED_ARRIVALS -> trace -> cache build -> cache:DIR on new
    noise: every byte checked; after 2 cycles every call ran the cache's right entry (the
    true class's, or the regular one where the build kept no class entry)."""
    _need_smpi()
    _, caches = _train_and_build(tmp_path, sc)
    cache = caches["none"]
    labels = _labels()
    stats = tmp_path / "stats.txt"
    row = run_lab(_cfg(tmp_path / "eval", sc.draw(labels, 2), environ={"COLLSCHED_STATS": str(stats)}),
                  [f"cache:{cache}"])["results"][0]
    assert row["data_ok"]
    entries = _entry_classes(cache, sc)
    hits = _hits(row["used"], labels, entries, 6)
    assert hits["hit_rate"] >= 0.9, (row["used"], entries)
    assert stats.is_file() and stats.stat().st_size > 0


@pytest.mark.smpi
def test_pat_cache_from_a_training_trace(tmp_path, sc):
    """The pat variant end to end: a cache built with engine pat from a training trace
    (under site *, where the PAT engine picks), cache-pat:DIR on new noise: data checked,
    after 2 cycles at least 90% of the calls ran the right entry of that cache (the
    engine's "used" names are the entries' file names)."""
    _need_smpi()
    nbytes = 16384  # the 3 classes worth a class entry of their own with engine pat
    _, caches = _train_and_build(tmp_path, sc, nbytes, engines=("pat",))
    cache = caches["pat"]
    labels = _labels()
    row = run_lab(_cfg(tmp_path / "eval", sc.draw(labels, 2), nbytes), [f"cache-pat:{cache}"])["results"][0]
    assert row["data_ok"]
    entries = _entry_classes(cache, sc)
    assert set(row["used"]) <= set(entries), (row["used"], entries)
    hits = _hits(row["used"], labels, entries, 6)
    assert hits["hit_rate"] >= 0.9, (hits["mapped"], entries)
    # at 16 KiB engine pat keeps a class entry per class: the hits are the classes' own
    assert hits["classes_with_entry"] == [0, 1, 2] and hits["class_hit_rate"] >= 0.9, (hits["mapped"], entries)


def _class_cache(tmp: Path, sc, radius: float) -> Path:
    """A cache with one entry per class (distinct algorithms, so the file says which ran)
    and a regular one, written by collsched.cache.store."""
    from collsched import schedfile
    from collsched.cache.index import Entry, pattern_tuple
    from collsched.cache.store import commit, file_name
    from collsched.pipeline import compile_schedule

    new = []
    for klass, alg in [(None, "spreading"), (0, "ring"), (1, "bruck"), (2, "nex")]:
        data = schedfile.encode(compile_schedule(alg, P, NBYTES, topology=TOPO).schedule)
        pattern = None if klass is None else pattern_tuple(sc.classes[klass] - sc.classes[klass].min())
        new.append((Entry(file_name(data, "*", pattern), "allgather", P, NBYTES, NBYTES, "*", "-", klass,
                          None if klass is None else radius, 4, pattern), data))
    commit(tmp / "cache", new)
    return tmp / "cache"


@pytest.mark.smpi
def test_selection_predicts_the_recurring_class(tmp_path, sc):
    """The runtime's whole selection path: from the arrivals it has seen, it predicts the
    next class of the cycle and runs that class's entry: after 2 cycles at least 90% of the
    calls run the true class's entry; data checked."""
    _need_smpi()
    cache = _class_cache(tmp_path, sc, radius=1.5e-3)  # classes are >= 2.5 ms apart, noise ~0.5 ms
    labels = _labels()
    row = run_lab(_cfg(tmp_path / "eval", sc.draw(labels, 2)), [f"cache:{cache}"])["results"][0]
    assert row["data_ok"]
    hits = _hits(row["used"], labels, _entry_classes(cache, sc), 6)
    assert hits["class_hit_rate"] >= 0.9, hits["mapped"]
    # an unseen class: never a class entry of the cycle, bytes still right
    unseen = run_lab(_cfg(tmp_path / "unseen", sc.draw(np.full(6, 3), 3)), [f"cache:{cache}"])["results"][0]
    assert unseen["data_ok"]
    mapped = _hits(unseen["used"], np.full(6, 3), _entry_classes(cache, sc), 0)["mapped"]
    assert all(m in ("regular", "library") for m in mapped), mapped


@pytest.mark.smpi
def test_oracle_runs_one_schedule_per_iteration(tmp_path, sc):
    _need_smpi()
    row = run_lab(_cfg(tmp_path, sc.draw(_labels(4), 4)), ["oracle"])["results"][0]
    assert row["data_ok"]
    assert row["used"] == [f"oracle-it{k}.sched" for k in range(4)]
    assert sum(row["oracle_picked"].values()) == 4
    assert row["predicted_avg_elapsed_s"] > 0


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "collsched", *args], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT / "compiler")))


@pytest.mark.smpi
def test_bench_pap_replays_a_file(tmp_path):
    _need_smpi()
    pap = tmp_path / "pap.yaml"
    pap.write_text("unit: ms\niterations:\n  - [0, 3, 0, 0, 1, 0]\n  - [2, 0, 0, 0, 0, 0]\n  - [0, 3, 0, 0, 1, 0]\n")
    out = _cli("bench", "--backend", "smpi", "--topology", TOPO, "--ranks", "6", "--bytes", "1KiB",
               "--algorithms", "native,ring", "--flat-iterations", "0", "--pap", str(pap), "--json")
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["inputs"]["iterations"] == 3 and rep["inputs"]["delays"].startswith("replayed from")
    for row in rep["results"]:
        assert row["data_ok"]
        assert row["imbalance_s"] == pytest.approx((3e-3 + 2e-3 + 3e-3) / 3, abs=1e-4)


def test_bench_pap_wrong_ranks_is_one_line(tmp_path):
    pap = tmp_path / "pap.yaml"
    pap.write_text("iterations:\n  - [0, 0.001, 0]\n")
    out = _cli("bench", "--backend", "smpi", "--ranks", "4", "--pap", str(pap), "--algorithms", "native")
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and str(pap) in out.stderr and "4" in out.stderr
    out = _cli("bench", "--backend", "smpi", "--ranks", "3", "--iterations", "2", "--pap", str(pap))
    assert out.returncode == 2 and "--iterations" in out.stderr


@pytest.mark.smpi
@pytest.mark.parametrize("text, why", [
    ("ranks 4 iterations 2\n0 0 0 0\n", "line 3"),                 # a line missing
    ("ranks 4 iterations 1\n0 0 0\n", "delay 3"),                  # too few delays
    ("ranks 4 iterations 1\n0 0 0 -1\n", "delay 4"),               # negative
    ("ranks 4 iterations 1\n0 0  0 0\n", "delay 3"),               # two spaces
    ("ranks 4 iterations 1\n0 0 0 nan\n", "delay 4"),
    ("ranks 5 iterations 1\n0 0 0 0 0\n", "expected 4"),           # the run has 4 ranks
    ("ranks 4 iterations 1\n0 0 0 0\n1 1 1 1\n", "end of the file"),
    ("ranks 4  iterations 1\n0 0 0 0\n", "line 1"),
])
def test_minibench_refuses_bad_delays(tmp_path, text, why):
    """--delays: one line naming the file, the line and what was expected; exit 2."""
    _need_smpi()
    from collsched.inputs.topology import load_topology
    from collsched.lab.platform import build_platform

    build_platform(load_topology(TOPO, 4)).write(tmp_path)
    f = tmp_path / "delays.txt"
    f.write_text(text)
    cmd = ["smpirun", "-np", "4", "-platform", str(tmp_path / "platform.xml"), "-hostfile",
           str(tmp_path / "platform.hosts"), "--log=root.thres:error", str(MINIBENCH), "--bytes", "64",
           "--iterations", "1", "--native", "--delays", str(f)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("collsched-minibench")]
    assert len(lines) == 1 and str(f) in lines[0] and why in lines[0], out.stderr
    assert '"data_ok"' not in out.stdout


def test_write_delays_roundtrip(tmp_path):
    d = np.array([[0.0, 1e-3, -0.0], [2.5e-3, 0.0, 1e-9]])
    text = write_delays(tmp_path / "d.txt", d).read_text().splitlines()
    assert text[0] == "ranks 3 iterations 2"
    assert np.array_equal(np.array([[float(x) for x in ln.split(" ")] for ln in text[1:]]), d)
    assert not any(x.startswith("-") for ln in text[1:] for x in ln.split(" "))  # no "-0"


@pytest.mark.mpi
def test_real_mpi_preload_uses_the_cache(tmp_path, sc):
    """The issue's real-MPI check at P = 8: the unmodified minibench (--native: plain
    MPI_Allgather) under the preload library, trained with COLLSCHED_ARRIVALS, then run
    with COLLSCHED_SCHEDULES=the cache built from that trace: every byte checked, and
    COLLSCHED_STATS shows calls served by the cache's entries."""
    from collsched.lab.recurring import _build_cache

    lib = BUILD / "lib" / "libcollsched-preload.so"
    if shutil.which("mpirun") is None or not (BUILD / "bin" / "collsched-minibench").exists() or not lib.exists():
        pytest.skip("mpirun, build/bin/collsched-minibench or the preload library missing (make runtime lab)")
    labels = _labels(9)
    trace = tmp_path / "train.trace"
    cfg = LabConfig(backend="mpi", topology=None, ranks=P, nbytes=NBYTES, iterations=9, flat_iterations=0,
                    delays=sc.draw(labels, 1), workdir=str(tmp_path / "train"), bounds=False,
                    environ={"LD_PRELOAD": str(lib), "COLLSCHED_ARRIVALS": str(trace)})
    assert run_lab(cfg, ["native"])["results"][0]["data_ok"]
    assert trace.is_file()
    cache = tmp_path / "cache"
    _build_cache(trace, cache, None, None)
    stats = tmp_path / "stats.txt"
    cfg = LabConfig(backend="mpi", topology=None, ranks=P, nbytes=NBYTES, iterations=9, flat_iterations=0,
                    delays=sc.draw(labels, 2), workdir=str(tmp_path / "eval"), bounds=False,
                    environ={"LD_PRELOAD": str(lib), "COLLSCHED_SCHEDULES": str(cache),
                             "COLLSCHED_STATS": str(stats)})
    assert run_lab(cfg, ["native"])["results"][0]["data_ok"]
    text = stats.read_text()
    files = [e for e in _entry_classes(cache, sc)]
    assert any(f in text for f in files), text
    assert stats_use(text, _entry_classes(cache, sc))[0] > 0, text
