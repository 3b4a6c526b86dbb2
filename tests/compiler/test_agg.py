"""agg: the arrival-aware planner with multi-piece messages (docs/agg.md).

Every schedule verifies (serial rules where it is serial), delivers every piece, and no
model times it below the lower bound; the plan's own serial timing (agg.retime) is the
DAG model's for one-piece messages. The issue's targets are benchmarks (docs/agg.md),
not timed tests.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsched.algorithms import Request, generate
from collsched.algorithms import agg
from collsched.errors import InputError
from collsched.inputs.topology import _from_hosts, homogeneous, load_topology
from collsched.ir import BACKGROUND, SEND
from collsched.model.fluid import fluid_pattern
from collsched.model.lowerbound import lower_bound
from collsched.model.simulate import simulate, simulate_pattern
from collsched.verify import verify

FLUID_OPS = 1500  # fluid-model checks up to this many ops (seconds beyond)
TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def hetero(p: int, seed: int, full_duplex: bool = True):
    """One site, one rank per host, per-pair latency and bandwidth drawn at random."""
    rng = np.random.default_rng(seed)
    lat = rng.uniform(5e-6, 2e-4, (p, p))
    bw = rng.uniform(5e7, 1e9, (p, p))
    lat, bw = (lat + lat.T) / 2, (bw + bw.T) / 2
    return _from_hosts("hetero", "<test>", [f"h{i}" for i in range(p)], ["s"] * p,
                       np.arange(p), lat, bw, full_duplex)


def pattern(kind: str, p: int, seed: int, spread: float) -> np.ndarray | None:
    rng = np.random.default_rng(seed)
    if kind == "none":
        return None
    if kind == "flat":
        return np.zeros(p)
    if kind == "uniform":
        return rng.uniform(0, spread, p)
    a = np.zeros(p) if kind == "one-late" else np.full(p, spread)
    a[rng.integers(p)] = spread if kind == "one-late" else 0.0
    return a


def check_schedule(sched, topo, nbytes, a):
    assert verify(sched, serial=sched.serial) == []
    if sched.has_background:
        # Background ops lead every list, and a send of the rank's own piece never is one.
        rank = sched.rank_of_op
        bg = sched.phase == BACKGROUND
        assert not np.any(bg & (sched.kind == SEND) & (sched.origin == rank))
        for r in range(sched.nranks):
            ph = sched.phase[sched.offsets[r]:sched.offsets[r + 1]]
            assert np.all(np.diff((ph == BACKGROUND).astype(int)) <= 0)
    bound = lower_bound(topo, nbytes, a, use_lp=sched.nranks <= 8)
    arr = np.zeros(sched.nranks) if a is None else np.asarray(a) - np.min(a)
    _, dag = simulate(sched, topo, nbytes, arr)
    tol = 1e-9 + 1e-9 * bound.avg_elapsed_s
    assert dag.avg_elapsed_s >= bound.avg_elapsed_s - tol
    if sched.total_ops <= FLUID_OPS:  # the fluid model is the slow one
        _, _, fl = fluid_pattern(sched, topo, nbytes, arr[None, :])
        assert fl.avg_elapsed_s >= bound.avg_elapsed_s - tol
    return bound


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(1, 40), nbytes=st.sampled_from([0, 1, 1000, 37448, 200_000]),
       nseg=st.integers(1, 3), kind=st.sampled_from(["none", "flat", "uniform", "one-late", "all-late"]),
       topo_kind=st.sampled_from(["homogeneous", "tryton", "hetero", "half"]),
       seed=st.integers(0, 1000), aggregate=st.sampled_from([None, False]))
def test_every_schedule_verifies_and_respects_the_bound(p, nbytes, nseg, kind, topo_kind, seed,
                                                       aggregate):
    if topo_kind == "tryton":
        if p > 48:
            p = 48
        topo = load_topology(TOPOLOGIES / "tryton-48.yaml", p)
    elif topo_kind == "hetero":
        topo = hetero(p, seed)
    else:
        topo = homogeneous(p, full_duplex=topo_kind != "half")
    a = pattern(kind, p, seed, 0.005)
    req = Request(nranks=p, nbytes=nbytes, nseg=nseg, topology=topo, arrivals=a,
                  full_duplex=topo.full_duplex, aggregate=aggregate)
    sched = generate("agg", req)
    assert sched.nranks == p and sched.nseg == nseg
    if aggregate is False:
        assert not sched.has_messages
    bound = check_schedule(sched, topo, nbytes, a)
    if sched.serial and p > 1:
        # The plan's own timing (the cost model's serial timing of messages) respects it too.
        arr = np.zeros(p) if a is None else a - a.min()
        msgs = agg.plan_request(req)
        ex = agg.retime(msgs, topo, p, nseg, agg.item_bytes(nbytes, nseg), arr, topo.full_duplex)
        assert np.mean(ex - arr) >= bound.avg_elapsed_s - 1e-9


@pytest.mark.parametrize("aggregate", [False, None])
@pytest.mark.parametrize("nseg", [1, 3])
def test_retime_is_the_dag_and_fluid_models_timing(nseg, aggregate):
    """agg.retime (the planner's serial timing, by which it picks its plan) and both cost
    models agree to rounding, one-piece and multi-piece messages alike: the same rules
    (docs/semantics.md, "Multi-piece messages", rule 6)."""
    topo = load_topology(TOPOLOGIES / "tryton-48.yaml", 20)
    a = np.random.default_rng(3).uniform(0, 0.004, 20)
    a -= a.min()
    req = Request(nranks=20, nbytes=37448, nseg=nseg, topology=topo, arrivals=a, aggregate=aggregate)
    sched = generate("agg", req)
    assert sched.serial and sched.has_messages == (aggregate is None)
    ex = agg.retime(agg.plan_request(req), topo, 20, nseg, agg.item_bytes(37448, nseg), a)
    tl, _, _ = simulate_pattern(sched, topo, 37448, a[None, :])
    np.testing.assert_allclose(tl[0].exits, ex, rtol=0, atol=1e-12)
    if nseg == 1:
        tl, _, _ = fluid_pattern(sched, topo, 37448, a[None, :])
        np.testing.assert_allclose(tl[0].exits, ex, rtol=0, atol=1e-12)


def test_aggregates_on_the_lab_pattern():
    """With a spread of arrivals the plan is serial, carries multi-piece messages, and its
    serial timing beats the one-piece-per-message plan of the same scheduler."""
    from collsched.lab.arrivals import arrival_pattern

    p = 28
    topo = load_topology(TOPOLOGIES / "tryton-48.yaml", p)
    a = arrival_pattern(1, 1, p, 0.005)[0]
    a -= a.min()
    sched = generate("agg", Request(nranks=p, nbytes=37448, topology=topo, arrivals=a))
    assert sched.serial and sched.has_messages
    ib = agg.item_bytes(37448, 1)
    times = {}
    for aggregate in (None, False):
        req = Request(nranks=p, nbytes=37448, topology=topo, arrivals=a, aggregate=aggregate)
        times[aggregate] = np.mean(agg.retime(agg.plan_request(req), topo, p, 1, ib, a) - a)
    assert times[None] < times[False]


def test_flat_arrivals_are_no_slower_than_spreading():
    topo = load_topology(TOPOLOGIES / "tryton-48.yaml", 28)
    req = Request(nranks=28, nbytes=37448, topology=topo)
    mine = simulate(generate("agg", req), topo, 37448)[1].avg_elapsed_s
    theirs = simulate(generate("spreading", req), topo, 37448)[1].avg_elapsed_s
    assert mine <= theirs


def test_grids_are_refused_in_one_line():
    topo = load_topology(TOPOLOGIES / "wan-3x16.yaml", 48)
    with pytest.raises(InputError) as e:
        generate("agg", Request(nranks=48, nbytes=1024, topology=topo))
    assert "one site" in str(e.value) and "\n" not in str(e.value)
