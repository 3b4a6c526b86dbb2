"""LabConfig.predict_topology: SimGrid runs the bundled topology, the compiler and the cost
models use another one (the model check's --measured DIR: topologies `collsched measure`
wrote); and the option's bad inputs, each one InputError line before anything runs."""
import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from collsched.runtime_build import build_dir
from collsched.errors import InputError
from collsched.inputs.topology import load_topology, write_topology
from collsched.lab import modelcheck
from collsched.lab.runner import LabConfig, run_lab

ROOT = Path(__file__).resolve().parents[2]
TOPO = ROOT / "topologies"
BUILD = build_dir()
MINIBENCH = BUILD / "smpi" / "bin" / "collsched-minibench"


def _slow_copy(tmp_path, p: int) -> Path:
    """tryton-48 for p ranks with twice its latencies (what a bad measurement might say)."""
    t = load_topology(TOPO / "tryton-48.yaml", p)
    path = tmp_path / "slow.yaml"
    write_topology(dataclasses.replace(t, host_latency=t.host_latency * 2), path)
    return path


@pytest.mark.smpi
@pytest.mark.skipif(shutil.which("smpirun") is None or not MINIBENCH.exists(),
                    reason="SimGrid SMPI or build/smpi/bin/collsched-minibench missing (make)")
def test_predict_topology_predicts_and_simgrid_runs_the_given_one(tmp_path):
    p, given = 4, str(TOPO / "tryton-48.yaml")
    slow = _slow_copy(tmp_path, p)

    def run(predict, name):
        cfg = LabConfig("smpi", given, p, 64 << 10, iterations=1, flat_iterations=0, fluid=True,
                        network_model="SMPI", bounds=False, segments=1, predict_topology=predict,
                        workdir=str(tmp_path / name))
        return run_lab(cfg, ["ring"])

    plain, same, doubled = run(None, "plain"), run(given, "same"), run(str(slow), "slow")
    assert "predict_topology" not in plain["inputs"]  # unchanged without the option
    assert doubled["inputs"]["predict_topology"] == str(slow)
    assert str(slow) in doubled["network_notes"][-1]
    r0, r1, r2 = (rep["results"][0] for rep in (plain, same, doubled))
    # SimGrid ran the same platform and settings every time.
    assert r0["avg_elapsed_s"] == r1["avg_elapsed_s"] == r2["avg_elapsed_s"]
    assert plain["network"] == doubled["network"]
    # The predictions are the predict topology's: constant costs (the bundled file has no
    # message_costs) differ from SimGrid's SMPI factors, twice the latency costs more.
    assert r1["predicted_avg_elapsed_s"] != r0["predicted_avg_elapsed_s"]
    assert r2["predicted_avg_elapsed_s"] > r1["predicted_avg_elapsed_s"] * 1.01
    assert r2["fluid_avg_elapsed_s"] > r1["fluid_avg_elapsed_s"] * 1.01
    # ... and the compiler read it, with SimGrid's protocol rule (eager_limit 0).
    written = yaml.safe_load((tmp_path / "slow" / "predict-topology.yaml").read_text())
    assert written["eager_limit"] == 0
    assert written["matrix"]["latency"][0][1] == pytest.approx(2 * load_topology(given, p).latency[0, 1])


def test_measured_directory_must_exist(tmp_path):
    with pytest.raises(InputError, match="--measured") as err:
        modelcheck.measured_topologies(tmp_path / "nope", {"tryton-48": 48}, ("SMPI",))
    assert "\n" not in err.value.line()


def test_bad_measured_file_is_one_input_error_before_anything_runs(tmp_path, monkeypatch):
    import collsched.lab.measure as measure

    monkeypatch.setattr(measure, "measure", lambda *a, **k: pytest.fail("measured before checking"))
    (tmp_path / "tryton-48-SMPI.yaml").write_text("name: [unclosed\n  latency: :\n")
    with pytest.raises(InputError, match="tryton-48-SMPI.yaml") as err:
        modelcheck.measured_topologies(tmp_path, {"tryton-48": 48, "wan-3x16": 48}, ("SMPI",))
    assert "\n" not in err.value.line()
    # A topology with too few hosts for the check's ranks is refused as well.
    write_topology(load_topology(TOPO / "tryton-48.yaml", 4), tmp_path / "tryton-48-SMPI.yaml")
    with pytest.raises(InputError, match="tryton-48-SMPI.yaml"):
        modelcheck.measured_topologies(tmp_path, {"tryton-48": 48}, ("SMPI",))


def test_missing_measured_file_is_measured_into_the_directory(tmp_path, monkeypatch):
    import collsched.lab.measure as measure

    calls = []
    monkeypatch.setattr(measure, "measure", lambda cfg, out, **k: calls.append((cfg, out)))
    paths = modelcheck.measured_topologies(tmp_path, {"three-site-grid": 20}, ("CM02",))
    assert paths == {("three-site-grid", "CM02"): str(tmp_path / "three-site-grid-CM02.yaml")}
    (cfg, out), = calls
    assert (cfg.backend, cfg.ranks, cfg.network_model) == ("smpi", 20, "CM02")
    assert cfg.fit_budget_s == modelcheck.MEASURE_SWEEP_BUDGET_S  # reaches SimGrid's 64 KiB step
    assert cfg.platform_from.endswith("topologies/three-site-grid.yaml")
    assert out == tmp_path / "three-site-grid-CM02.yaml"


def test_cli_measured_errors_are_one_line(capsys, tmp_path):
    from collsched.cli import main

    assert main(["bench", "--suite", "model", "--measured", str(tmp_path / "nope")]) == 2
    assert main(["bench", "--ranks", "4", "--measured", str(tmp_path)]) == 2  # model suite only
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("--measured" in line for line in err)


def test_markdown_puts_measured_rows_in_their_own_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(modelcheck, "_simgrid_version", lambda: "SimGrid 3.32")
    rows = [{"network_model": m, "topology": "wan-3x16", "topology_source": s, "ranks": 48,
             "bytes": 64 << 10, "algorithm": "ring", "avg_elapsed_s": 0.1,
             "predicted_avg_elapsed_s": 0.1 * r, "model_ratio": r, "fluid_avg_elapsed_s": 0.1 * r,
             "fluid_ratio": r, "data_ok": True}
            for m in ("CM02", "SMPI") for s, r in (("given", 1.0), ("measured", 0.3))]
    md = modelcheck.markdown(rows, None)
    assert "### Network model SMPI\n" in md
    assert "### Network model SMPI, topologies measured by `collsched measure`" in md
    assert "| ring | 48 | 100.00 / **0.30** / **0.30** | ok |" in md
    assert "- SMPI, measured topologies, fluid model: 0 of 1 cases within +-15%" in md
    assert "- SMPI, fluid model: 1 of 1 cases within +-15%" in md
    modelcheck.plot(rows, tmp_path / "mc.png")
    assert (tmp_path / "mc.png").stat().st_size > 0


def test_single_message_ratios_compare_the_predict_topology_with_the_run(tmp_path):
    slow = _slow_copy(tmp_path, 4)
    cfg = LabConfig("smpi", str(TOPO / "tryton-48.yaml"), 4, 1, network_model="CM02")
    same = modelcheck.single_message_ratios(dataclasses.replace(cfg, predict_topology=cfg.topology))
    assert same == {"single_ratio_min": pytest.approx(1.0), "single_ratio_max": pytest.approx(1.0)}
    doubled = modelcheck.single_message_ratios(dataclasses.replace(cfg, predict_topology=str(slow)))
    assert 1.9 < doubled["single_ratio_min"] <= doubled["single_ratio_max"] < 2.0  # 1 B: latency
    rows = [{"network_model": "CM02", "topology": "tryton-48", "topology_source": "measured",
             "ranks": 4, "bytes": 64 << 10, "algorithm": "ring", "avg_elapsed_s": 0.1,
             "predicted_avg_elapsed_s": 0.1, "model_ratio": 1.0, "data_ok": True, **doubled}]
    assert f"64 KiB {doubled['single_ratio_min']:.2f}." in modelcheck.markdown(rows, None)
