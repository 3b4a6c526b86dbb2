"""The PAT engine (runtime/src/pat.c) end to end: the BDR paper's mini-benchmark with
PAT_ProcessingStart / PAT_Edge(50%) / PAT_ProcessingEnd around the computation, every byte
checked in every iteration, under real Open MPI (progress thread, and explicit progress)
and under SimGrid SMPI (explicit progress; deterministic, so bounds are checked too)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from collsched.lab.runner import LabConfig, run_lab
from collsched.pipeline import compile_schedule
from collsched.inputs.arrivals import write_pap
from collsched.lab.arrivals import arrival_pattern
from rt_helpers import BUILD, ROOT, TIMEOUT, mpirun_cmd, build_mpi_app

MINIBENCH = BUILD / "bin" / "collsched-minibench"
TRYTON = str(ROOT / "topologies" / "tryton-48.yaml")


def minibench(nranks, *args, env=None):
    if not MINIBENCH.exists():
        pytest.skip(f"{MINIBENCH} not built (make lab)")
    proc = subprocess.run(mpirun_cmd(nranks) + [str(MINIBENCH), *map(str, args)], capture_output=True,
                          text=True, timeout=TIMEOUT, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("{"))
    return json.loads(line), proc.stderr


def background_ops(stderr: str) -> int:
    return sum(int(n) for n in re.findall(r"(\d+) of \d+ ops in the background", stderr))


@pytest.mark.mpi
def test_bdr_real_mpi_progress_thread_p8():
    """The real-MPI check: P = 8, the thread driver, pre-steps really run early."""
    out, err = minibench(8, "--bytes", 65536, "--iterations", 3, "--flat-iterations", 1,
                         "--max-delay-ms", 5, "--seed", 1, "--pat", "bdr", "--pat-tau", 5e-4,
                         env={"COLLSCHED_VERBOSE": "1"})
    assert out["data_ok"] and out["errors"] == 0 and out["fallbacks"] == 0
    assert "(thread driver)" in err and "(explicit driver)" not in err
    assert background_ops(err) > 0  # late ranks received in the background


@pytest.mark.mpi
def test_bdr_real_mpi_explicit_progress_odd_ranks_odd_bytes():
    out, err = minibench(5, "--bytes", 1001, "--iterations", 3, "--flat-iterations", 1,
                         "--max-delay-ms", 5, "--seed", 2, "--pat", "bdr", "--pat-tau", 2e-4,
                         env={"COLLSCHED_VERBOSE": "1", "COLLSCHED_PAT_DRIVER": "explicit"})
    assert out["data_ok"] and out["fallbacks"] == 0
    assert "(explicit driver)" in err and background_ops(err) > 0


@pytest.mark.mpi
def test_tau_is_learned_from_the_first_call():
    """No tau given: the first call runs without PAT (and says why), the rest with it."""
    out, err = minibench(4, "--bytes", 4096, "--iterations", 3, "--flat-iterations", 0,
                         "--max-delay-ms", 5, "--seed", 3, "--pat", "bdr", "--pat-tau", 0,
                         env={"COLLSCHED_VERBOSE": "1"})
    assert out["errors"] == 0
    assert out["fallbacks"] == 4  # iteration 0 on each of the 4 ranks
    assert "tau unknown" in out["fallback_reason"]
    assert err.count("PAT bdr (online") == 2 * 4  # iterations 1 and 2 ran the engine


def _smpi(ranks, nbytes, algorithms, **kw):
    if not shutil.which("smpirun") or not (BUILD / "smpi" / "bin" / "collsched-minibench").exists():
        pytest.skip("SMPI build or smpirun missing")
    cfg = LabConfig(backend="smpi", topology=TRYTON, ranks=ranks, nbytes=nbytes, **kw)
    return {r["algorithm"]: r for r in run_lab(cfg, algorithms)["results"]}


@pytest.mark.smpi
@pytest.mark.parametrize("ranks,nbytes", [(7, 3001), (16, 37448)])
def test_bdr_smpi_data_and_determinism(ranks, nbytes):
    a = _smpi(ranks, nbytes, ["bdr"], iterations=3, flat_iterations=1, max_delay_ms=5, seed=4)
    b = _smpi(ranks, nbytes, ["bdr"], iterations=3, flat_iterations=1, max_delay_ms=5, seed=4)
    assert a["bdr"]["data_ok"] and "fallback_reason" not in a["bdr"]
    for key in ("avg_elapsed_s", "run_time_s", "absorption_s", "predicted_avg_elapsed_s"):
        assert a["bdr"][key] == b["bdr"][key], key


@pytest.mark.smpi
@pytest.mark.parametrize("late_ms", [6.0, 60.0])
def test_wrong_prediction_correct_and_within_the_paper_bound(late_ms):
    """The rank predicted to arrive first arrives last (6 ms: just after the latest; 60 ms:
    far later than any prediction): data still right, and the average elapsed time at
    most (P - 2) tau above the ring's under the same arrivals."""
    p, nbytes = 16, 37448
    res = _smpi(p, nbytes, ["ring", "bdr"], iterations=2, flat_iterations=0, max_delay_ms=5, seed=3,
                late_ms=late_ms)
    assert res["bdr"]["data_ok"] and res["ring"]["data_ok"]
    tau = _tau(p, nbytes)
    penalty = res["bdr"]["avg_elapsed_s"] - res["ring"]["avg_elapsed_s"]
    assert penalty <= (p - 2) * tau, (penalty / tau, p - 2)


def _tau(p, nbytes):
    """The tau the lab gives the engine: the cost model's time to move one block."""
    import dataclasses
    from collsched.lab.platform import DEFAULT_TCP_GAMMA
    from collsched.pipeline import resolve_topology
    from collsched.model.simulate import piece_time
    topo = resolve_topology(p, TRYTON, None)
    return piece_time(dataclasses.replace(topo, tcp_window=float(topo.tcp_window or DEFAULT_TCP_GAMMA)), nbytes)


@pytest.mark.mpi
def test_compiled_schedules_per_iteration_and_a_corrupt_one(tmp_path):
    """PAT_UseSchedule: compiled bdr files, one per iteration; iteration 1's file is
    corrupt, so that iteration falls back (and says why) while the others run the files."""
    p, nbytes, iters = 6, 20000, 3
    pattern = arrival_pattern(5, iters, p, 0.005)
    for k in range(iters):
        pap = tmp_path / f"it{k}.yaml"
        write_pap(pap, pattern[k:k + 1] - pattern[k].min(), unit="s")
        compile_schedule("bdr", p, nbytes, topology=TRYTON, pap=str(pap), output=tmp_path / f"bdr-it{k}.sched")
    raw = bytearray((tmp_path / "bdr-it1.sched").read_bytes())
    raw[-5] ^= 0xFF
    (tmp_path / "bdr-it1.sched").write_bytes(bytes(raw))
    out, err = minibench(p, "--bytes", nbytes, "--iterations", iters, "--flat-iterations", 0,
                         "--max-delay-ms", 5, "--seed", 5, "--pat", "bdr-files",
                         "--pat-schedules", tmp_path / "bdr-it%d.sched", env={"COLLSCHED_VERBOSE": "1"})
    assert out["errors"] == 0
    assert out["fallbacks"] == p  # iteration 1, every rank
    assert "no schedule named for this iteration" in out["fallback_reason"]
    assert "checksum" in err  # the loader said what was wrong with the file
    assert err.count("bdr-it0.sched,") == p and err.count("bdr-it2.sched,") == p


@pytest.mark.smpi
@pytest.mark.parametrize("ranks,nbytes", [(13, 20011), (24, 10922)])
def test_pap_aware_runs_agree_with_the_cost_model(ranks, nbytes):
    """bdr (online), bslb and arrival-aware min3 (compiled per iteration, serial) through
    the PAT engine under SMPI: every byte right, and the measured average elapsed time
    within 5% of the cost model's. This caught SMPI's growing MPI_Test charge (ranks
    arrived up to 1.4 ms after their own prediction), the executor's serial walk holding
    sends behind receive waits, and the engine napping 200 us between serial background
    receives when it was not told tau (docs/pat.md)."""
    res = _smpi(ranks, nbytes, ["bdr", "bslb", "min3"], iterations=3, flat_iterations=0,
                max_delay_ms=5, seed=1)
    for alg, r in res.items():
        assert r["data_ok"] and "fallback_reason" not in r, alg
        assert 0.95 <= r["model_ratio"] <= 1.05, (alg, r["model_ratio"])


WAN_3x3 = """name: wan-3x3
duplex: full
tcp_window: 4MiB
sites:
  - {name: A, hosts: 3, lan: {latency: 5us, bandwidth: 10Gbit/s}}
  - {name: B, hosts: 3, lan: {latency: 5us, bandwidth: 10Gbit/s}}
  - {name: C, hosts: 3, lan: {latency: 5us, bandwidth: 10Gbit/s}}
wan:
  - {between: [A, B], latency: 20ms, bandwidth: 10Gbit/s}
  - {between: [A, C], latency: 40ms, bandwidth: 10Gbit/s}
  - {between: [B, C], latency: 80ms, bandwidth: 10Gbit/s}
"""


@pytest.mark.smpi
def test_compiled_schedules_do_not_wait_for_the_estimates(tmp_path):
    """A compiled schedule needs no other rank's estimate, so the engine takes it at once
    and lets the exchange finish in the background: min3 over three sites 20/40/80 ms
    apart, flat arrivals (no computation to hide the exchange behind), runs as the fluid
    model predicts. While the engine waited for every estimate it ran 1.5x slower
    (ratio 0.67: the 80 ms link's latency once more)."""
    if not shutil.which("smpirun") or not (BUILD / "smpi" / "bin" / "collsched-minibench").exists():
        pytest.skip("SMPI build or smpirun missing")
    topo = tmp_path / "wan-3x3.yaml"
    topo.write_text(WAN_3x3)
    cfg = LabConfig(backend="smpi", topology=str(topo), ranks=9, nbytes=1 << 18, iterations=2,
                    flat_iterations=1, fluid=True)
    r = run_lab(cfg, ["min3"])["results"][0]
    assert r["pat"] and r["data_ok"] and "fallback_reason" not in r
    assert 0.97 <= r["fluid_ratio"] <= 1.03, r["fluid_ratio"]


@pytest.mark.mpi
@pytest.mark.parametrize("p", [5, 8])
def test_min3_relays_in_the_background_under_real_mpi(tmp_path, p):
    """Arrival-aware min3 on a cluster is serial, and late ranks relay early ranks' pieces
    from the staging buffer before they arrive: run through the progress thread under
    Open MPI, compiled per iteration, every byte checked, no fallback."""
    from collsched.ir import BACKGROUND, SEND
    nbytes, iters = 30011, 3
    pattern = arrival_pattern(7, iters, p, 0.005)
    relays = 0
    for k in range(iters):
        pap = tmp_path / f"it{k}.yaml"
        write_pap(pap, pattern[k:k + 1] - pattern[k].min(), unit="s")
        res = compile_schedule("min3", p, nbytes, topology=TRYTON, pap=str(pap),
                               output=tmp_path / f"min3-it{k}.sched")
        s = res.schedule
        assert s.serial
        relays += int(((s.phase == BACKGROUND) & (s.kind == SEND)).sum())
    assert relays > 0  # the relay path is exercised
    out, err = minibench(p, "--bytes", nbytes, "--iterations", iters, "--flat-iterations", 0,
                         "--max-delay-ms", 5, "--seed", 7, "--pat", "min3",
                         "--pat-schedules", tmp_path / "min3-it%d.sched", env={"COLLSCHED_VERBOSE": "1"})
    assert out["data_ok"] and out["errors"] == 0 and out["fallbacks"] == 0, out.get("fallback_reason")
    assert "(thread driver)" in err and background_ops(err) > 0


# ---- hostile input: every variable and argument validated ----

QUICK = 60  # a hang (a negative slice became a 71-minute usleep) fails within a minute

BAD_ENV = [
    ("COLLSCHED_PAT_SLICE_US", "-100", "microseconds from 1 to 1000000"),
    ("COLLSCHED_PAT_SLICE_US", "0", "microseconds from 1 to 1000000"),
    ("COLLSCHED_PAT_SLICE_US", "nan", "microseconds from 1 to 1000000"),
    ("COLLSCHED_PAT_SLICE_US", "1e99", "microseconds from 1 to 1000000"),
    ("COLLSCHED_PAT_SLICE_US", "200us", "microseconds from 1 to 1000000"),
    ("COLLSCHED_PAT_POLL_US", "-1", "microseconds from 1 to 1000000"),
    ("COLLSCHED_PAT_POLL_US", "2e6", "microseconds from 1 to 1000000"),
    ("COLLSCHED_PAT_TAU", "1e-300", "0 (unknown) or seconds from 1e-09 to 1000"),
    ("COLLSCHED_PAT_TAU", "-1", "0 (unknown) or seconds from 1e-09 to 1000"),
    ("COLLSCHED_PAT_TAU", "inf", "0 (unknown) or seconds from 1e-09 to 1000"),
    ("COLLSCHED_PAT_TAU", "1e999", "0 (unknown) or seconds from 1e-09 to 1000"),
    ("COLLSCHED_PAT_TAU", "0x", "0 (unknown) or seconds from 1e-09 to 1000"),
    ("COLLSCHED_PAT_EMA", "1.5", "a weight from 0 (off) to 1"),
    ("COLLSCHED_PAT_EMA", "-0.1", "a weight from 0 (off) to 1"),
    ("COLLSCHED_PAT_CHECK", "yes", "0 or 1"),
    ("COLLSCHED_PAT_CHECK", "2", "0 or 1"),
    ("COLLSCHED_PAT_DRIVER", "threads", "thread or explicit"),
]


@pytest.mark.mpi
@pytest.mark.parametrize("driver", ["explicit", "thread"])
@pytest.mark.parametrize("var,value,expected", BAD_ENV)
def test_bad_environment_turns_the_engine_off_with_one_line(var, value, expected, driver):
    """PAT_Init refuses on every rank, the first rank that saw the value says so in one
    line, and the program runs on without the engine (every byte right), quickly."""
    if not MINIBENCH.exists():
        pytest.skip(f"{MINIBENCH} not built (make lab)")
    env = {**os.environ, "COLLSCHED_PAT_DRIVER": driver, var: value}
    proc = subprocess.run(mpirun_cmd(3) + [str(MINIBENCH), "--bytes", "1000", "--iterations", "2",
                                           "--flat-iterations", "0", "--max-delay-ms", "2", "--seed", "1",
                                           "--pat", "bdr", "--pat-tau", "2e-4"],
                          capture_output=True, text=True, timeout=QUICK, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("{")))
    assert out["errors"] == 0 and out["fallbacks"] == 3 * 2  # no engine: every call plain
    lines = [ln for ln in proc.stderr.splitlines() if "collsched" in ln]
    assert lines == [f"collsched PAT (rank 0): {var}={value}: expected {expected}; the PAT engine is off"], \
        proc.stderr[-2000:]


@pytest.mark.mpi
@pytest.mark.parametrize("level", ["single", "multiple"])
def test_bad_api_arguments_are_refused_and_the_engine_still_works(tmp_path, level):
    """PAT_Declare(MPI_COMM_NULL) used to abort the job; PAT_Edge(1e-300) overflowed a
    cast in bdr.c; PAT_Sleep(NaN) never returned. Each now returns its error code."""
    exe = build_mpi_app(tmp_path / "pat_args_app", "pat_args_app.c", "-std=c11", "-g", "-Wextra",
                        "-Werror", "-pthread", linked=True)
    proc = subprocess.run(mpirun_cmd(3) + [str(exe), level], capture_output=True, text=True, timeout=QUICK)
    assert proc.returncode == 0 and "pat_args_app: OK" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert "PAT_Declare: expected an intracommunicator" in proc.stderr


def test_online_bdr_refuses_overflowing_patterns(tmp_path):
    """A tiny tau, a huge spread or non-finite numbers: the pre-step count is compared with
    the limit before the cast (UBSan: a float-to-int64 overflow before the fix, and the
    limit bypassed). Exactly the limit is still built."""
    from rt_helpers import build_c_tool
    exe = build_c_tool(tmp_path / "bdr_main", ["bdr.c"], "bdr_main.c", "-O1", "-fsanitize=undefined,float-cast-overflow",
                       "-fno-sanitize-recover=all")
    cases = ["2 1e-300 0 1", "2 1e-9 0 1e300", "3 1e-4 0 inf 0", "3 1e-4 0 nan 0", "2 nan 0 1", "2 inf 0 1",
             "2 1 0 1000001", "2 1 0 1000000"]
    proc = subprocess.run([str(exe)], input="\n".join(cases) + "\n", capture_output=True, text=True, timeout=QUICK)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:7] == ["refused"] * 7, lines[:8]
    assert lines[7].startswith("0:") and lines[8].startswith("1:"), lines[7:]
