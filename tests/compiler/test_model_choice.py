"""compile's --model auto (pipeline._retime): the DAG model searches; where it is known to be
off (shared wide-area links, size-dependent costs) the fluid model re-times the finalists,
picks and predicts, or calibrates the DAG model's figure of a schedule too large for it; the
result says which model and why."""
import numpy as np
import pytest

from collsched import pipeline
from collsched.errors import InputError
from collsched.inputs.topology import load_topology
from collsched.model.fluid import fluid_pattern


def test_no_shared_links_is_the_dag_model():
    auto = pipeline.compile_schedule("ring", 8, 1 << 16, topology="tryton-48", model="auto")
    dag = pipeline.compile_schedule("ring", 8, 1 << 16, topology="tryton-48", model="dag")
    assert auto.model == "dag" and auto.model_choice["by"] == "dag"
    assert "no shared wide-area links" in auto.model_choice["why"]
    assert auto.metrics.avg_elapsed_s == dag.metrics.avg_elapsed_s
    assert dag.summary()["model_choice"] is None


@pytest.mark.parametrize("algorithm", ["bruck", "min3"])
def test_shared_links_are_timed_by_the_fluid_model(algorithm):
    res = pipeline.compile_schedule(algorithm, 12, 1 << 16, topology="three-site-grid", model="auto")
    d = res.summary()
    assert d["model"] == "fluid" and d["model_choice"]["by"] == "fluid"
    assert "shared wide-area links" in d["model_choice"]["why"]
    topo = load_topology("three-site-grid", 12)
    fluid = fluid_pattern(res.schedule, topo, 1 << 16, np.zeros((1, 12)))[2]
    assert d["predicted_avg_elapsed_s"] == fluid.avg_elapsed_s
    # the pick is the fluid model's fastest finalist
    assert d["predicted_avg_elapsed_s"] == min(d["model_choice"]["fluid_avg_elapsed_s"].values())


def test_too_large_for_the_fluid_model_is_calibrated(monkeypatch):
    """Above FLUID_AUTO_OPS a finalist's DAG figure is scaled by fluid / DAG of the largest
    candidate of its execution the fluid model times (min3 at P = 24 on two sites of
    wan-3x16 tries 1 to 16 segments, about 1,100 operations per segment)."""
    monkeypatch.setattr(pipeline, "FLUID_AUTO_OPS", 3000)  # 1 and 2 segments fit
    res = pipeline.compile_schedule("min3", 24, 1 << 20, topology="wan-3x16", model="auto")
    c = res.model_choice
    assert len(res.segments_tried) >= 4
    assert set(c["fluid_avg_elapsed_s"]) <= {"dataflow, 1 segment", "dataflow, 2 segments"}
    if res.schedule.total_ops <= 3000:
        assert c["by"] == "fluid" and c["calibration"] is None
    else:
        assert c["by"] == "dag calibrated by fluid" and res.model == "dag calibrated by fluid"
        assert c["calibration"]["from"] == "dataflow, 2 segments"
        ratio = c["calibration"]["ratio"]
        assert ratio == pytest.approx(c["fluid_avg_elapsed_s"]["dataflow, 2 segments"]
                                      / res.segments_tried[2], rel=1e-12)
        assert res.metrics.avg_elapsed_s == pytest.approx(c["dag_avg_elapsed_s"] * ratio, rel=1e-12)


def test_auto_algorithm_compares_like_with_like():
    res = pipeline.compile_schedule("auto", 12, 1 << 16, topology="three-site-grid", model="auto")
    d = res.summary()
    assert d["model"] == "fluid"
    assert d["auto"]["picked"] == d["algorithm"]


def test_bad_model_is_one_line():
    with pytest.raises(InputError) as e:
        pipeline.compile_schedule("ring", 4, 64, model="exact")
    assert "auto, dag, fluid" in str(e.value) and "\n" not in str(e.value)
