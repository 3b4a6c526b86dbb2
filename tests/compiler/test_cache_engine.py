"""The pipeline's engine option: with none, every operation runs inside the call (foreground),
the verifier proves it so and the model times it so; pat is the behaviour of before."""
from pathlib import Path

import numpy as np
import pytest

from collsched import schedfile
from collsched.cli import main
from collsched.errors import InputError
from collsched.inputs.arrivals import write_pap
from collsched.ir import BACKGROUND
from collsched.pipeline import compile_schedule, verify_file

ROOT = Path(__file__).resolve().parents[2]
TRYTON = str(ROOT / "topologies" / "tryton-48.yaml")
LATE = [0, 0, 3e-3, 0, 0, 2e-3, 0, 0]  # two late ranks: bdr and min3 get background parts


@pytest.fixture(scope="module")
def pap(tmp_path_factory):
    path = tmp_path_factory.mktemp("engine") / "late.yaml"
    write_pap(path, np.array(LATE))
    return str(path)


@pytest.mark.parametrize("algorithm", ["bdr", "bslb", "min3"])
def test_engine_none_is_all_foreground_and_verifies(algorithm, pap, tmp_path):
    out = tmp_path / f"{algorithm}.sched"
    pat = compile_schedule(algorithm, 8, 16384, topology=TRYTON, pap=pap)
    none = compile_schedule(algorithm, 8, 16384, topology=TRYTON, pap=pap, engine="none", output=out)
    assert none.engine == "none" and none.summary()["engine"] == "none"
    assert not none.schedule.has_background
    sched, violations = verify_file(out)  # the written file proves, as foreground
    assert violations == [] and not sched.has_background
    # A different compile job: the input hash says which engine it was compiled for.
    assert none.schedule.input_hash != pat.schedule.input_hash
    # Running the background part inside the call never makes it earlier.
    assert none.metrics.avg_elapsed_s >= pat.metrics.avg_elapsed_s * (1 - 1e-9)
    if algorithm in ("bdr", "min3"):
        assert pat.schedule.has_background
        assert np.any(pat.schedule.phase == BACKGROUND)


def test_engine_none_applies_to_every_auto_candidate(pap):
    pat = compile_schedule("auto", 8, 16384, topology=TRYTON, pap=pap)
    none = compile_schedule("auto", 8, 16384, topology=TRYTON, pap=pap, engine="none")
    assert not none.schedule.has_background
    tried_pat, tried_none = pat.algorithms_tried, none.algorithms_tried
    assert set(tried_pat) == set(tried_none) and {"bdr", "bslb", "min3"} <= set(tried_none)
    # bdr's pre-steps and min3's early receives now wait for the call: slower predictions;
    # the algorithms without a background part are timed as before.
    assert tried_none["bdr"] > tried_pat["bdr"] and tried_none["min3"] > tried_pat["min3"]
    assert tried_none["ring"] == pytest.approx(tried_pat["ring"])


def test_engine_pat_is_the_default_and_bad_engine_refused(pap):
    a = compile_schedule("bdr", 8, 4096, pap=pap)
    b = compile_schedule("bdr", 8, 4096, pap=pap, engine="pat")
    assert a.schedule.same_ops(b.schedule) and a.schedule.input_hash == b.schedule.input_hash
    with pytest.raises(InputError, match="--engine"):
        compile_schedule("bdr", 8, 4096, pap=pap, engine="preload")


def test_cli_compile_engine(pap, tmp_path, capsys):
    out = tmp_path / "b.sched"
    assert main(["compile", "--algorithm", "bdr", "--ranks", "8", "--bytes", "4KiB", "--pap", pap,
                 "--engine", "none", "-o", str(out)]) == 0
    assert not schedfile.read(out).has_background
    capsys.readouterr()
    assert main(["compile", "--algorithm", "bdr", "--ranks", "8", "--bytes", "4KiB", "--pap", pap,
                 "--engine", "x", "-o", str(out)]) == 2
    assert "--engine" in capsys.readouterr().err


def _leading_only(sched) -> bool:
    """Every background op is a receive among its rank's leading background receives."""
    for r in range(sched.nranks):
        lo, hi = int(sched.offsets[r]), int(sched.offsets[r + 1])
        bg = sched.phase[lo:hi] == BACKGROUND
        n = 0
        while n < hi - lo and bg[n] and sched.kind[lo + n] == 1:
            n += 1
        if bg[n:].any():
            return False
    return True


@pytest.mark.parametrize("algorithm", ["bdr", "bslb", "min3"])
def test_engine_ahead_keeps_only_leading_receives_and_verifies(algorithm, pap, tmp_path):
    out = tmp_path / f"{algorithm}.sched"
    ahead = compile_schedule(algorithm, 8, 16384, topology=TRYTON, pap=pap, engine="ahead", output=out)
    assert ahead.engine == "ahead" and _leading_only(ahead.schedule)
    if algorithm == "min3":  # serial, dataflow and the direct plan: each generated and verified
        tried = ahead.summary()["execution_tried"]
        assert set(tried) == {"serial", "dataflow", "dataflow, direct"}
    sched, violations = verify_file(out)  # the written file proves with its leading receives
    assert violations == [] and _leading_only(sched)
    if ahead.schedule.serial:  # the runtime runs serial entries inside the call
        assert not ahead.schedule.has_background


def test_engine_ahead_min3_lies_between_pat_and_none(tmp_path):
    # a class pattern of the shape: 3 of 8 ranks 5 ms late, 37448 B per rank
    path = tmp_path / "cls.yaml"
    write_pap(path, np.array([0, 0, 5e-3, 0, 5e-3, 0, 0, 5e-3]))
    t = {e: compile_schedule("min3", 8, 37448, topology=TRYTON, pap=str(path), engine=e).metrics.avg_elapsed_s
         for e in ("pat", "ahead", "none")}
    assert t["pat"] * (1 - 1e-9) <= t["ahead"] <= t["none"] * (1 + 1e-9)
    assert t["ahead"] < t["none"]  # the late ranks' early receives pay off


def test_cli_cache_build_engine_ahead(pap, tmp_path, capsys):
    out = tmp_path / "cache"
    assert main(["cache", "build", pap, "--ranks", "8", "--bytes", "16KiB", "--topology", TRYTON,
                 "--algorithms", "spreading,min3", "--engine", "ahead", "--min-calls", "1",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["cache", "verify", str(out)]) == 0
    for f in out.glob("*.sched"):
        assert _leading_only(schedfile.read(f))
