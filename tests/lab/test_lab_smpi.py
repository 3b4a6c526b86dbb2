"""The performance lab on SimGrid SMPI: small runs (P <= 16) that check every byte, give
identical numbers for identical inputs, and agree with the generated platform and the
seeded arrival patterns."""
import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from collsched.runtime_build import build_dir
from collsched.lab.arrivals import arrival_pattern, uniform
from collsched.lab.platform import build_platform
from collsched.lab.runner import LabConfig, run_lab
from collsched.errors import InputError
from collsched.pipeline import compile_schedule
from collsched.model.simulate import simulate
from collsched.inputs.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
TOPO = ROOT / "topologies"
BUILD = build_dir()
MINIBENCH = BUILD / "smpi" / "bin" / "collsched-minibench"

pytestmark = [pytest.mark.smpi]


@pytest.fixture(autouse=True)
def _need_smpi():
    if shutil.which("smpirun") is None or not MINIBENCH.exists():
        pytest.skip("SimGrid SMPI or build/smpi/bin/collsched-minibench missing (make)")


def smpirun(platform_dir, nranks, *args):
    cmd = ["smpirun", "-np", str(nranks), "-platform", str(platform_dir / "platform.xml"),
           "-hostfile", str(platform_dir / "platform.hosts"), "--cfg=network/model:CM02",
           "--cfg=network/crosstraffic:0",
           "--cfg=smpi/simulate-computation:no", "--log=root.thres:error", str(MINIBENCH), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return out


def test_c_and_python_arrival_generators_agree(tmp_path):
    build_platform(load_topology(TOPO / "tryton-48.yaml", 6)).write(tmp_path)
    out = smpirun(tmp_path, 6, "--print-u", "--iterations", "3", "--seed", "12345")
    rows = [ln.split() for ln in out.stdout.splitlines() if ln and ln[0].isdigit()]
    assert len(rows) == 18
    for k, r, u in rows:
        assert float(u) == uniform(12345, int(k), int(r))  # bit for bit


@pytest.mark.parametrize("topo, p", [("tryton-48", 5), ("wan-3x16", 6), ("three-site-grid", 7)])
def test_all_baselines_byte_checked_and_deterministic(topo, p):
    algs = ["ring", "lnbc", "bruck", "spreading", "native", "native:ring"] + (["nex"] if p % 2 == 0 else [])
    cfg = dict(backend="smpi", topology=str(TOPO / f"{topo}.yaml"), ranks=p, nbytes=4099,
               iterations=2, max_delay_ms=3.0, seed=7)
    a = run_lab(LabConfig(**cfg), algs)
    b = run_lab(LabConfig(**cfg), algs)
    assert [r["algorithm"] for r in a["results"]] == algs
    for r in a["results"]:
        assert r["data_ok"], r
        assert r["checked_bytes_per_piece"] == 4099
    # wall time and the command (its run directory) belong to the launch, not the simulation
    strip = lambda rep: [{k: v for k, v in r.items() if k not in ("wall_s", "command")} for r in rep["results"]]
    assert strip(a) == strip(b)  # simulated time is deterministic


def test_measured_arrivals_follow_the_seeded_pattern(tmp_path):
    p, delay_ms = 8, 5.0
    build_platform(load_topology(TOPO / "tryton-48.yaml", p)).write(tmp_path)
    out = smpirun(tmp_path, p, "--bytes", "64", "--iterations", "3", "--flat-iterations", "0",
                  "--max-delay-ms", str(delay_ms), "--seed", "3", "--native")
    run = json.loads(out.stdout.strip().splitlines()[-1])
    measured = np.array(run["arrivals"])
    expected = arrival_pattern(3, 3, p, delay_ms / 1e3)
    # Up to one latency of barrier skew (50 us on tryton) plus usleep's microsecond steps.
    assert np.all(measured >= expected - 2e-6)
    assert np.allclose(measured, expected, atol=60e-6)


def test_wrong_data_is_reported(tmp_path):
    build_platform(load_topology(TOPO / "tryton-48.yaml", 4)).write(tmp_path)
    out = smpirun(tmp_path, 4, "--bytes", "100", "--iterations", "1", "--seed", "1", "--native",
                  "--inject-error")
    run = json.loads(out.stdout.strip().splitlines()[-1])
    assert run["errors"] == 1 and run["data_ok"] is False


def test_shared_data_still_checks_every_piece(tmp_path):
    cfg = LabConfig("smpi", str(TOPO / "tryton-48.yaml"), 4, 1 << 20, iterations=1,
                    flat_iterations=0, shared_data="yes")
    rep = run_lab(cfg, ["ring", "native"])
    for r in rep["results"]:
        assert r["data_ok"] and r["checked_bytes_per_piece"] == 4096


@pytest.mark.parametrize("topo", ["three-site-grid", "wan-3x16"])
def test_platform_reproduces_pair_costs(topo, tmp_path):
    """Two ranks on chosen hosts exchange one message each way: SMPI's exit times equal the
    cost model's for the same (measured) arrivals, i.e. the platform has the topology's L, b."""
    t = load_topology(TOPO / f"{topo}.yaml")
    plat = build_platform(t)
    plat.write(tmp_path)
    hosts = plat.host_names
    nbytes = 200_000
    sched_path = tmp_path / "pair.sched"
    sched = compile_schedule("ring", 2, nbytes, output=sched_path).schedule
    for i, j in [(0, 1), (0, len(hosts) - 1), (len(hosts) // 2, 0)]:
        (tmp_path / "platform.hosts").write_text(f"{hosts[i]}\n{hosts[j]}\n")
        out = smpirun(tmp_path, 2, "--bytes", str(nbytes), "--iterations", "1", "--flat-iterations", "0",
                      "--seed", "1", "--schedule", str(sched_path))
        run = json.loads(out.stdout.strip().splitlines()[-1])
        a, f = np.array(run["arrivals"][0]), np.array(run["exits"][0])
        ix = np.ix_([i, j], [i, j])
        pair = dataclasses.replace(t, rank_host=np.array([i, j]), latency=t.latency[ix],
                                   bandwidth=t.bandwidth[ix])
        tl, _ = simulate(sched, pair, nbytes, a)
        assert f == pytest.approx(tl.exits, rel=0.01), (i, j)


def test_unknown_native_algorithm_is_bad_input():
    with pytest.raises(InputError, match="native:NAME"):
        run_lab(LabConfig("smpi", None, 4, 64), ["native:nope"])


def test_fluid_model_predicts_what_the_dag_model_misses():
    """lnbc on tryton-48: the root's sends to its children overlap and share its NIC in
    SimGrid. The DAG model serves them in turn (25% too fast at P = 16); the fluid model
    replays the sharing and the executor's walk (docs/lab.md)."""
    cfg = LabConfig("smpi", str(TOPO / "tryton-48.yaml"), 16, 1 << 20, iterations=1,
                    flat_iterations=0, fluid=True)
    r = run_lab(cfg, ["lnbc", "ring"])["results"]
    lnbc, ring = r
    assert lnbc["data_ok"] and ring["data_ok"]
    assert lnbc["model_ratio"] < 0.85
    assert abs(lnbc["fluid_ratio"] - 1) < 0.02
    assert abs(ring["fluid_ratio"] - 1) < 0.02 and abs(ring["model_ratio"] - 1) < 0.02


def test_imbalanced_report_says_how_and_bounds_what_smpi_measured():
    """With imbalanced arrivals the report names the algorithms compiled ahead, gives their
    speedup over the best regular one, and the lower bounds for the pattern; SMPI's
    measurements respect them (the serial one for the serial schedules bdr and min3)."""
    from collsched.lab.report import markdown, notes

    cfg = LabConfig("smpi", str(TOPO / "tryton-48.yaml"), 7, 37448, iterations=2, max_delay_ms=3.0,
                    seed=5)
    rep = run_lab(cfg, ["ring", "native", "bdr", "min3"])
    b = rep["bounds"]
    assert 0 < b["lp_avg_elapsed_s"] < b["serial_avg_elapsed_s"]
    for r in rep["results"]:
        assert r["data_ok"], r
        # Measured arrivals trail the seeded ones by up to one latency of barrier skew.
        assert r["avg_elapsed_s"] >= b["lp_avg_elapsed_s"] * 0.99, r
        if r["algorithm"] in ("bdr", "min3"):
            assert r["avg_elapsed_s"] >= b["serial_avg_elapsed_s"] * 0.99, r
        # The row's own bound (its measured arrivals) and the measured gaps to it (issue 20).
        assert r["lower_bound_avg_elapsed_s"] == pytest.approx(b["lp_avg_elapsed_s"], rel=0.05), r
        assert r["gap_avg_elapsed"] == pytest.approx(r["avg_elapsed_s"] / r["lower_bound_avg_elapsed_s"] - 1)
        assert r["gap_avg_elapsed"] >= -0.01 and r["gap_run_time"] >= -0.01, r
    text = "\n".join(notes(rep))
    assert "min3: compiled ahead" in text and "known from the seed" in text
    assert "Speedup over the best regular algorithm" in text and "1.9x" in text
    assert f"{b['serial_avg_elapsed_s'] * 1e3:.3f} ms for a serial one" in text
    assert text.splitlines()[0] in markdown(rep)
    flat = run_lab(dataclasses.replace(cfg, max_delay_ms=0.0, iterations=1), ["ring", "min3"])
    assert "bounds" not in flat
    # Flat arrivals: nothing about arrival-aware schedules or the pattern's bounds, only the
    # compiler's pick and the measured rows' gaps to the LP bound.
    assert [n.split(" (")[0] for n in notes(flat)] == ["The compiler's pick", "Gaps"]


def test_grid_report_gives_min3s_improvement_over_the_paper_baselines():
    """The Min3 paper's figure (52% on average over its baselines) is checked in the
    report: 1 - min3 / baseline per baseline and their mean, from the measured rows."""
    from collsched.lab.report import notes

    cfg = LabConfig("smpi", str(TOPO / "three-site-grid.yaml"), 6, 65536, iterations=1, flat_iterations=0)
    rep = run_lab(cfg, ["min3", "magpie", "mpichg2", "bcast-trees"])
    t = {r["algorithm"]: r["avg_elapsed_s"] for r in rep["results"] if r["data_ok"]}
    assert len(t) == 4
    gains = [1 - t["min3"] / t[b] for b in ("magpie", "mpichg2", "bcast-trees")]
    (line,) = [ln for ln in notes(rep) if ln.startswith("Min3's improvement")]
    assert f"magpie {gains[0]:.1%}" in line and f"average {sum(gains) / 3:.1%}" in line
    assert "bounds" not in rep  # flat arrivals
