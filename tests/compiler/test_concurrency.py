"""Concurrency chosen by the cost model (docs/semantics.md, "How concurrency is chosen"):
serial or dataflow arrival-aware Min3 (policy.execution_candidates), segment counts with
size-dependent costs (policy.segment_candidates), and `--algorithm auto`
(pipeline.compile_schedule). Every choice must be the one the model's predictions say,
on topologies with and without message_costs."""
from pathlib import Path

import numpy as np
import pytest

from collsched.algorithms import Request, generate
from collsched.errors import InputError
from collsched.inputs.arrivals import write_pap
from collsched.inputs.topology import load_topology
from collsched.lab.arrivals import arrival_pattern
from collsched.model.policy import (execution_candidates, near_breakpoint,
                                    segment_candidates)
from collsched.pipeline import AUTO, compile_schedule

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
TRYTON = (TOPOLOGIES / "tryton-48.yaml").read_text()


def tryton(tmp_path, costs: str | None, name="t.yaml") -> str:
    """tryton-48 (50 us, 1 Gbit/s), with a message_costs section if given."""
    path = tmp_path / name
    path.write_text(TRYTON + (f"\nmessage_costs:\n{costs}\n" if costs else ""))
    return str(path)


SMPI = "  preset: simgrid-smpi"
# Pieces under 1,000 B move at twice the link's bandwidth, larger ones at a third: cutting
# blocks pays whenever it gets the pieces under 1,000 B.
SMALL_CHEAP = ("  all:\n    - {from: 0, latency_factor: 1.0, bandwidth_factor: 2.0}\n"
               "    - {from: 1000, latency_factor: 1.0, bandwidth_factor: 0.33}")
# Small pieces pay 20 latencies: cutting never pays.
SMALL_DEAR = ("  all:\n    - {from: 0, latency_factor: 20.0, bandwidth_factor: 0.5}\n"
              "    - {from: 1000, latency_factor: 1.0, bandwidth_factor: 1.0}")


def pap(tmp_path, p, seed=1) -> str:
    a = arrival_pattern(seed, 1, p, 0.005)
    path = tmp_path / f"pap-{p}-{seed}.yaml"
    write_pap(path, a - a.min())
    return str(path)


# --- serial or dataflow -----------------------------------------------------------------

def test_execution_candidates(tmp_path):
    topo = load_topology(tryton(tmp_path, SMPI), 12)
    a = np.linspace(0, 0.004, 12)
    assert execution_candidates("min3", topo, a) == [{"serial": True}, {"serial": False},
                                                     {"serial": False, "relays": False}]
    # constant costs: serial_list_schedule decides alone (schedules as before)
    assert execution_candidates("min3", load_topology(TOPOLOGIES / "tryton-48.yaml", 12), a) == [{}]
    assert execution_candidates("min3", topo, np.zeros(12)) == [{}]  # flat: no serial plan
    assert execution_candidates("ring", topo, a) == [{}]  # no knob
    wan = load_topology(TOPOLOGIES / "wan-3x16.yaml", 48)  # window-capped: dataflow only
    assert execution_candidates("min3", wan, np.linspace(0, 0.004, 48)) == [{}]


@pytest.mark.parametrize("costs, pick", [(SMPI, "dataflow, direct"), (SMALL_DEAR, "serial")])
def test_serial_or_dataflow_as_the_model_says(tmp_path, costs, pick):
    """Serial, dataflow and direct (no relays) plans are timed with the DAG model, then with
    the fluid model, which picks. Under SimGrid's SMPI factors a serial plan pays 3.5
    latencies per 37 KB message in turn and the relays of a dataflow plan wait for pieces
    that shared their sender's NIC: the direct plan wins (P = 28 under SMPI: 9.77 ms,
    dataflow 15.22, serial 15.46). With factors 1 at that size the serial plan wins, as
    with constant costs (8.04 against 9.07 ms at P = 28)."""
    p, m = 16, 37448
    res = compile_schedule("min3", p, m, topology=tryton(tmp_path, costs), pap=pap(tmp_path, p))
    tried, fluid = res.execution_tried, res.execution_fluid
    assert set(tried) == set(fluid) == {"serial", "dataflow", "dataflow, direct"}
    assert min(fluid, key=fluid.get) == pick == res.summary()["execution"]
    assert res.metrics.avg_elapsed_s == tried[pick]
    assert res.schedule.serial is (pick == "serial")
    forwarded = ((res.schedule.kind == 0) & (res.schedule.origin != res.schedule.rank_of_op)).sum()
    assert bool(forwarded == 0) is (pick == "dataflow, direct")
    # Request.serial forces either plan (None: policy.serial_list_schedule decides).
    topo = load_topology(tryton(tmp_path, costs), p)
    a = arrival_pattern(1, 1, p, 0.005)[0]
    for forced in (True, False, None):
        s = generate("min3", Request(nranks=p, nbytes=m, topology=topo, arrivals=a - a.min(),
                                     serial=forced))
        assert s.serial is (True if forced is None else forced)


def test_one_plan_on_flat_arrivals_or_constant_costs(tmp_path):
    res = compile_schedule("min3", 8, 37448, topology=tryton(tmp_path, SMPI), segments=1)
    assert res.execution_tried is None and not res.schedule.serial
    res = compile_schedule("min3", 16, 37448, topology=tryton(tmp_path, None), pap=pap(tmp_path, 16))
    assert res.execution_tried is None and res.schedule.serial


# --- segment counts ---------------------------------------------------------------------

def test_no_segment_search_without_message_costs(tmp_path):
    topo = load_topology(tryton(tmp_path, None), 16)
    for alg in ("ring", "spreading", "bruck", "min3", "bslb", "bdr"):
        assert segment_candidates(alg, topo, 16, 37448) == [1]
        assert segment_candidates(alg, topo, 16) == [1]
    res = compile_schedule("ring", 16, 37448, topology=tryton(tmp_path, None))
    assert res.segments_tried is None and res.schedule.nseg == 1


def test_segment_candidates_with_message_costs(tmp_path):
    topo = load_topology(tryton(tmp_path, SMPI), 28)
    counts = segment_candidates("ring", topo, 28, 65536)
    assert counts[0] == 1 and set(counts) > {1, 2, 8, 16}
    # 65536 / 7 = 9363 B lies 0.15% under the breakpoint at 9377 B, where SimGrid already
    # switches (16 B early): not tried. 8192 B pieces are.
    assert near_breakpoint(topo, 9363) and not near_breakpoint(topo, 8192)
    assert 7 not in counts and 8 in counts
    # breakpoint counts: largest piece at most 1% under each breakpoint
    assert 5 in segment_candidates("ring", topo, 28, 37448)  # 7490 B, under 5777..9376
    assert 4 not in segment_candidates("ring", topo, 28, 37448)  # 9362 B: too near 9377
    assert segment_candidates("bdr", topo, 28, 65536) == [1]  # bdr moves whole blocks
    assert all(2 * 28 * 27 * k <= 600_000 for k in counts)
    assert segment_candidates("ring", topo, 1024, 65536) == [1]  # over MAX_AUTO_OPS


@pytest.mark.parametrize("costs, cut", [(SMALL_CHEAP, True), (SMALL_DEAR, False)])
def test_segments_as_the_model_says(tmp_path, costs, cut):
    """With pieces under 1,000 B at twice the bandwidth, the search cuts 4,000 B blocks
    into such pieces; where they pay 20 latencies it keeps pieces of 1,000 B or more."""
    res = compile_schedule("spreading", 8, 4000, topology=tryton(tmp_path, costs))
    tried = res.segments_tried
    assert tried is not None and len(tried) > 2
    best = min(tried, key=lambda k: (tried[k], k))
    assert res.schedule.nseg == best and res.metrics.avg_elapsed_s == tried[best]
    assert (-(-4000 // best) < 1000) is cut  # the pick's pieces are the cheap ones or not


# --- --algorithm auto ---------------------------------------------------------------------

def check_auto(res):
    """The pick is the DAG model's fastest, or, where finalists were re-timed with the fluid
    model (those within 2x of the DAG's best), the fluid model's fastest of them."""
    tried = res.algorithms_tried
    times = {n: t for n, t in tried.items() if isinstance(t, float)}
    best = min(times.values())
    pick = res.schedule.algorithm
    fluid = res.fluid_checked
    if fluid:
        assert all(times[n] <= 2 * best for n in fluid) and len(fluid) >= 2
        assert fluid[pick] <= min(fluid.values()) * (1 + 1e-9)
    else:
        assert times[pick] <= best * (1 + 1e-9)
    assert res.metrics.avg_elapsed_s == times[pick]
    s = res.summary()
    assert s["auto"]["picked"] == s["algorithm"] == pick
    assert s["auto"]["fluid_avg_elapsed_s"] == fluid
    return tried


def test_auto_picks_the_fastest_predicted(tmp_path):
    tried = check_auto(compile_schedule(AUTO, 12, 65536, topology=tryton(tmp_path, None)))
    assert "rd" in tried and tried["rd"].startswith("not applicable")  # 12 is no power of two
    assert "bslb" not in tried  # flat arrivals: no arrival-aware candidates
    res = compile_schedule(AUTO, 12, 37448, topology=tryton(tmp_path, None), pap=pap(tmp_path, 12))
    tried = check_auto(res)
    assert {"bslb", "bdr", "min3"} <= set(tried)
    assert res.schedule.algorithm == "min3"  # arrival-aware min3 is the fastest with the pattern
    assert res.schedule.serial and res.fluid_checked["min3"] == min(res.fluid_checked.values())


def test_auto_rechecks_finalists_with_the_fluid_model(tmp_path):
    """Under SimGrid's SMPI factors with imbalanced arrivals the DAG model ranks min3 first
    (8.9 ms at P = 28); the fluid model has spreading as fast (its direct plan and spreading
    both 9.8 ms under SMPI, native 13.98), and of equals the one first in the candidate
    order is kept; the ring and bruck, which forward pieces, it has far slower."""
    res = compile_schedule(AUTO, 16, 37448, topology=tryton(tmp_path, SMPI), pap=pap(tmp_path, 16))
    tried = check_auto(res)
    dag_best = min((t, n) for n, t in tried.items() if isinstance(t, float))[1]
    assert dag_best == "min3" and res.schedule.algorithm == "spreading"
    fluid = res.fluid_checked
    assert fluid["spreading"] <= fluid["min3"] and fluid["spreading"] < 0.8 * fluid["ring"]


def test_auto_spreading_on_tryton_at_64k_under_smpi(tmp_path):
    """tryton-48, P = 28, 64 KiB, SimGrid's SMPI factors: spreading (everything in flight,
    8 KiB pieces: 13.16 ms under SMPI against 17.84 for SMPI's own allgather) ties with the
    ring, nex and bruck at the port bound, and is the one of them that forwards nothing."""
    res = compile_schedule(AUTO, 28, 65536, topology=tryton(tmp_path, SMPI))
    tried = check_auto(res)
    assert res.schedule.algorithm == "spreading"
    assert res.schedule.nseg == 8
    assert tried["spreading"] < 0.8 * tried["lnbc"]


def test_auto_writes_the_pick_and_refuses_when_nothing_fits(tmp_path):
    out = tmp_path / "a.sched"
    res = compile_schedule(AUTO, 4, 1024, output=out, segments=1)
    from collsched.schedfile import read
    assert read(out).algorithm == res.schedule.algorithm
    assert set(res.algorithms_tried) >= {"ring", "bruck", "rd", "spreading", "min3"}
    with pytest.raises(InputError):
        compile_schedule("nope", 4, 1024)


def test_cli_compile_auto(tmp_path):
    import json
    import subprocess
    import sys
    out = tmp_path / "a.sched"
    run = subprocess.run([sys.executable, "-m", "collsched", "compile", "--algorithm", "auto",
                          "--ranks", "8", "--bytes", "64KiB", "-o", str(out), "--json"],
                         capture_output=True, text=True, check=True)
    d = json.loads(run.stdout)
    assert d["auto"]["picked"] == d["algorithm"] != "auto"
    times = {n: t for n, t in d["auto"]["predicted_avg_elapsed_s"].items() if isinstance(t, float)}
    assert d["predicted_avg_elapsed_s"] == min(times.values())
    text = subprocess.run([sys.executable, "-m", "collsched", "compile", "--algorithm", "auto",
                           "--ranks", "8", "--bytes", "64KiB", "-o", str(out)],
                          capture_output=True, text=True, check=True).stdout
    assert text.startswith(f"{out}: {d['algorithm']} (auto: the fastest predicted of ")
