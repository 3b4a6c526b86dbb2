"""Min3 on grids under Request.aggregate (issue 20, item 3): False plans as Min3 always
did; None (the default) and True also plan with one gateway per ring site and keep the
shorter plan (Min3 plans no multi-piece messages: docs/grid.md, "Gateways into ring
sites").

Every mode must give schedules that verify, stay wide-area optimal (each piece enters
each pool once: the pool partitions go to the verifier), and are never predicted under
the LP lower bound."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import passes
from collsched.algorithms import Request, generate
from collsched.algorithms.min3 import pool_schedule, schedule as min3_schedule
from collsched.inputs import pools
from collsched.inputs.topology import load_topology
from collsched.model.lowerbound import lower_bound
from collsched.model.simulate import simulate
from collsched.verify import verify

from test_min3 import engine
from test_pools import draw_grid, grid_yaml

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
MODES = (False, None, True)


def min3(topo, nbytes, nseg=1, aggregate=None):
    req = Request(topo.nranks, nbytes=nbytes, nseg=nseg, full_duplex=topo.full_duplex,
                  topology=topo, aggregate=aggregate)
    return passes.apply(generate("min3", req), topo, nbytes)


def site_of(topo):
    labels = topo.rank_site()
    ids = {lab: i for i, lab in enumerate(dict.fromkeys(labels))}
    return np.array([ids[lab] for lab in labels])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=grid_yaml(max_sites=3, max_hosts=6), data=st.data(), nbytes=st.integers(1, 2 << 20),
       nseg=st.integers(1, 3))
def test_random_grids_every_mode_verifies_and_stays_above_the_bound(tmp_path, doc, data, nbytes, nseg):
    topo = draw_grid(tmp_path, doc, data, max_ranks=14)
    parts = pools.partitions(pools.pool_tree(topo))
    bound = lower_bound(topo, nbytes).run_time_s
    planned = {}
    with engine("ring"):  # sites of single ranks in the ring engine: where gateways apply
        for mode in MODES:
            s = min3(topo, nbytes, nseg, mode)
            assert verify(s, parts) == []  # wide-area optimal too
            _, m = simulate(s, topo, nbytes)
            assert m.run_time_s >= bound * (1 - 1e-9)
            assert s.planned_run_time_s >= bound * (1 - 1e-9)
            planned[mode] = s.planned_run_time_s
        # None and True keep the shorter of the two plans
        gated = pool_schedule(Request(topo.nranks, nbytes=nbytes, nseg=nseg, full_duplex=topo.full_duplex,
                                      topology=topo), gateways=1)[0]
        shorter = min(planned[False], float(gated.end.max()) if len(gated) else 0.0)
        assert planned[None] == planned[True] == shorter
        # False is Min3 as before: the plan without gateways
        req = Request(topo.nranks, nbytes=nbytes, nseg=nseg, full_duplex=topo.full_duplex, topology=topo)
        plan = pool_schedule(req)[0]
        assert planned[False] == pytest.approx(float(plan.end.max()) if len(plan) else 0.0, abs=0)


def test_gateways_only_where_the_ring_serves_a_site(tmp_path):
    """Gateways restrict nothing where no site goes to the ring engine (the exact engine's
    sites): the plans of all modes are the same."""
    topo = load_topology(TOPOLOGIES / "three-site-grid.yaml", 20)
    plans = {mode: min3(topo, 256 << 10, 1, mode).planned_run_time_s for mode in MODES}
    assert plans[False] == plans[None] == plans[True]


@pytest.fixture(scope="module")
def wan():
    return load_topology(TOPOLOGIES / "wan-3x16.yaml", 48)


def test_wan_3x16_enters_each_ring_site_through_one_gateway(wan):
    """The default: a piece entering site C from the pools above lands at C's lowest rank
    (32) only; relays' first hops (inside the sub-pool {A, B}) may land anywhere."""
    s = min3(wan, 1 << 20, 8, None)
    site = site_of(wan)
    recv = s.kind == 1
    rank, peer = s.rank_of_op[recv], s.peer[recv]
    into_c = (site[rank] == 2) & (site[peer] != 2)
    assert into_c.any() and set(np.unique(rank[into_c]).tolist()) == {32}
    plain = min3(wan, 1 << 20, 8, False)
    into_c = (site[plain.rank_of_op] == 2) & (site[plain.peer] != 2) & (plain.kind == 1)
    assert len(np.unique(plain.rank_of_op[into_c])) > 1  # before: several, adjacent in the ring


def test_wan_3x16_gateways_shorten_plan_and_prediction(wan):
    """The default (None) on wan-3x16 at 1 MiB, 8 segments: planned 114 -> 90 ms, and the
    DAG model predicts what was planned (docs/grid.md, "Gateways into ring sites")."""
    plain, gated = (min3(wan, 1 << 20, 8, mode) for mode in (False, None))
    assert gated.planned_run_time_s < 0.85 * plain.planned_run_time_s
    _, m_plain = simulate(plain, wan, 1 << 20)
    _, m_gated = simulate(gated, wan, 1 << 20)
    assert m_gated.run_time_s < 0.85 * m_plain.run_time_s
    assert m_gated.run_time_s <= gated.planned_run_time_s * 1.02
    assert m_gated.run_time_s >= lower_bound(wan, 1 << 20).run_time_s


def test_kernel_and_python_search_agree_with_gateways(wan, monkeypatch):
    """The C kernel searches the gateways as the Python reference does (same plan)."""
    req = Request(48, nbytes=1 << 20, nseg=4, full_duplex=True, topology=wan)
    with engine("ring"):
        c_plan = pool_schedule(req, gateways=1)[0].columns()
        monkeypatch.setattr(min3_schedule._schedule_input_pool.__globals__["kernels"], "available",
                            lambda: False)
        py_plan = pool_schedule(req, gateways=1)[0].columns()
    for a, b in zip(c_plan, py_plan):
        assert np.array_equal(a, b)
