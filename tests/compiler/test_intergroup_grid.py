"""The grid-aware intergroup plan (issue 19 item 2; docs/intergroup.md, "Grid-aware
variant"): correct by the planning core's checker with no waste, every byte enters every
site at most once and the wide-area bytes are the minimum (strictly below Algorithm 1's
when a group alternates between sites), no slower than Algorithm 1 or 2 in the per-pair
single-port model when each group sits on one site, and the sites of a topology."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched.errors import InputError
from collsched.inputs.topology import load_topology
from collsched.intergroup import (A, B, Groups, Transfer, check_plan, plan_kang, plan_kang_v,
                                  simulate)
from collsched.intergroup.grid import (_fast_timing, plan_kang_grid, plan_kang_grid_on, simulate_pairs,
                                       site_costs, site_indices, sites_from_topology,
                                       topology_costs, wide_area_bytes, wide_area_minimum,
                                       wide_area_violations)
from collsched.intergroup.plan import Plan, PlanInfo
from collsched.intergroup.schedule import from_plan
from collsched.intergroup.timing import predict
from collsched.intergroup.verify import verify

HYP = settings(max_examples=60, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
block = st.integers(0, 600)


@st.composite
def groups(draw, max_ranks=12):
    p, q = draw(st.integers(1, max_ranks)), draw(st.integers(1, max_ranks))
    if draw(st.booleans()):
        return Groups.equal(p, q, draw(block), draw(block))
    return Groups(tuple(draw(st.lists(block, min_size=p, max_size=p))),
                  tuple(draw(st.lists(block, min_size=q, max_size=q))))


@st.composite
def placed(draw):
    """Groups and a random site per merged rank (1 to 4 sites, labels of any kind)."""
    g = draw(groups())
    labels = draw(st.sampled_from([(0, 1, 2, 3), ("x", "y", "z", "w")]))
    nsites = draw(st.integers(1, 4))
    site = draw(st.lists(st.sampled_from(labels[:nsites]), min_size=g.nranks, max_size=g.nranks))
    return g, site


@HYP
@given(placed(), st.sampled_from([None, 1, 2]))
def test_correct_and_each_byte_enters_each_site_once(case, wan_flows):
    g, site = case
    plan = plan_kang_grid(g, site, wan_flows=wan_flows)
    assert plan.info.no_waste
    assert check_plan(plan) == []
    assert wide_area_violations(plan, site) == []
    assert wide_area_bytes(plan, site) == wide_area_minimum(g, site)
    # Algorithm 1 is correct too but never below the minimum (the minimum is one).
    assert wide_area_bytes(plan_kang(g), site) >= wide_area_minimum(g, site)
    # The fast timing that picks the candidates is the model's.
    t_s, t_w = site_costs(site_indices(site, g.nranks), lan=(3.0, 1.0), wan=(30.0, 10.0))
    assert _fast_timing(g, plan.transfers, t_s, t_w)[0] == pytest.approx(
        simulate_pairs(g, plan.transfers, t_s, t_w).finish)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placed())
def test_schedule_from_the_plan_passes_the_verifier(case):
    """The plan as the runtime executes it (schedule.from_plan) passes the IR's verifier:
    the planning core's steps order every rank's operations as the executor needs."""
    g, site = case
    assert verify(from_plan(plan_kang_grid(g, site))) == []


@HYP
@given(st.integers(2, 4), st.integers(0, 6), st.integers(1, 12), st.integers(1, 600),
       st.integers(0, 600))
def test_strictly_below_kang_when_a_group_alternates_between_sites(nsites, extra, q, kb, ka):
    """Ranks dealt to sites in turn (merged rank r on site r mod S), p >= S + 2: every hop
    of Algorithm 1's ring in A but the wrap-around crosses sites, so each byte of B's data
    crosses at least p - 2 > S - 1 times, where once per other site is enough."""
    p = nsites + 2 + extra
    g = Groups.equal(p, q, ka, kb)
    site = [r % nsites for r in range(g.nranks)]
    grid = plan_kang_grid(g, site)
    assert wide_area_bytes(grid, site) == wide_area_minimum(g, site)
    assert wide_area_bytes(grid, site) < wide_area_bytes(plan_kang(g), site)
    assert wide_area_violations(plan_kang(g), site) != []


@HYP
@given(groups(max_ranks=16), st.booleans(), st.sampled_from([0.0, 5.0, 50.0]),
       st.sampled_from([1.0, 10.0, 60.0]))
def test_one_site_per_group_no_slower_than_kang(g, apart, t_s, ratio):
    """Each group on one site (two sites, or both on one): in the per-pair model whose
    costs the plan is given, no slower than Algorithm 1 or Algorithm 2."""
    site = [0] * g.p + [1 if apart else 0] * g.q
    t_sm, t_wm = site_costs(site, lan=(t_s, 1.0), wan=(t_s * ratio, ratio))
    plan = plan_kang_grid(g, site, costs=(t_sm, t_wm))
    assert check_plan(plan) == []
    mine = simulate_pairs(g, plan.transfers, t_sm, t_wm).finish
    for other in (plan_kang(g), plan_kang_v(g)):
        assert mine <= simulate_pairs(g, other.transfers, t_sm, t_wm).finish + 1e-9


@HYP
@given(groups(), st.booleans())
def test_one_site_per_group_lands_in_rank_order(g, apart):
    """After the exchange every rank holds one consecutive range of the remote data, the
    ranges in rank order (as Algorithms 1 and 2 leave them): the rings need no reordering."""
    site = [0] * g.p + [1 if apart else 0] * g.q
    plan = plan_kang_grid(g, site)
    got: dict[int, list[tuple[int, int]]] = {}
    for t in plan.transfers:
        if t.step < plan.info.exchange_steps:
            got.setdefault(t.dst, []).append((t.lo, t.hi))
    for grp in (A, B):
        ends = []
        for i in range(g.size(grp)):
            ranges = sorted(got.get(g.rank(grp, i), []))
            for (_, hi), (lo, _) in zip(ranges, ranges[1:]):
                assert hi == lo
            if ranges:
                ends.append((ranges[0][0], ranges[-1][1]))
        assert ends == sorted(ends)
        assert all(a[1] <= b[0] for a, b in zip(ends, ends[1:]))


def test_wide_area_minimum_by_hand():
    # A: a0 (3 bytes) on site 0, a1 (5) on site 1; B: b0 (7) on site 1, b1 (2) on site 2.
    g = Groups((3, 5), (7, 2))
    site = [0, 1, 1, 2]
    # a0 enters sites 1 and 2, a1 site 2; b0 enters site 0, b1 sites 0 and 1.
    assert wide_area_minimum(g, site) == 3 * 2 + 5 * 1 + 7 * 1 + 2 * 2
    plan = plan_kang_grid(g, site)
    assert wide_area_bytes(plan, site) == 22 and check_plan(plan) == []


def test_wide_area_violation_names_the_reentry():
    g = Groups((4,), (4, 4))
    site = [0, 1, 1]
    # b0 gets a0's block over the wide area, then b1 gets it a second time from a0.
    transfers = (Transfer(0, 0, 1, A, 0, 4), Transfer(0, 0, 2, A, 0, 4),
                 Transfer(0, 1, 0, B, 0, 4), Transfer(0, 2, 0, B, 4, 8))
    plan = Plan(g, transfers, PlanInfo(name="planted"))
    assert check_plan(plan) == []
    found = wide_area_violations(plan, site)
    assert [(v.kind, v.transfer, v.rank) for v in found] == [("wide-area", 1, 2)]
    assert "enter site 1 again" in found[0].message


@HYP
@given(groups(max_ranks=8), st.floats(0, 10), st.floats(0.1, 10))
def test_simulate_pairs_with_uniform_costs_is_cost_simulate(g, t_s, t_w):
    plan = plan_kang_v(g)
    n = g.nranks
    mine = simulate_pairs(g, plan.transfers, np.full((n, n), t_s), np.full((n, n), t_w))
    assert mine.finish == pytest.approx(simulate(g, plan.transfers, t_s=t_s, t_w=t_w).finish)


def test_bad_inputs_are_one_line_errors():
    g = Groups.equal(2, 2, 8, 8)
    with pytest.raises(InputError, match="site_of_rank.*4"):
        plan_kang_grid(g, [0, 1, 1])
    with pytest.raises(InputError, match="wan_flows"):
        plan_kang_grid(g, [0, 0, 1, 1], wan_flows=0)
    with pytest.raises(InputError, match="costs"):
        plan_kang_grid(g, [0, 0, 1, 1], costs=(np.zeros((3, 3)), np.ones((3, 3))))
    with pytest.raises(InputError, match="site_of_rank"):
        site_indices([[0], [1]], 2)


def test_sites_of_a_topology():
    topo = load_topology("wan-3x16")
    assert sites_from_topology(topo, 20, 12) == (0,) * 16 + (1,) * 16
    # The three-site grid's top-level pools join UK and NTH (their link is the faster).
    grid = load_topology("three-site-grid")
    assert sites_from_topology(grid, 10, 10) == (0,) * 8 + (1,) * 4 + (2,) * 8
    assert sites_from_topology(grid, 10, 10, by="pool") == (0,) * 8 + (1,) * 12
    with pytest.raises(InputError, match="at least 49 ranks"):
        sites_from_topology(topo, 40, 9)
    with pytest.raises(InputError, match="by"):
        sites_from_topology(topo, 2, 2, by="rack")


def test_on_wan_3x16_each_byte_over_the_wide_area_once_and_faster():
    """24 + 24 ranks over wan-3x16's three sites (A on A-0..A-15 and B-0..B-7, B on
    B-8..B-15 and C), 64 KiB per rank, the topology's per-pair latency and one flow's
    bandwidth: Algorithm 1's rings cross the 20-80 ms links at every site boundary."""
    topo = load_topology("wan-3x16")
    g = Groups.equal(24, 24, 1 << 16, 1 << 16)
    plan = plan_kang_grid_on(topo)(g)
    site = sites_from_topology(topo, 24, 24)
    t_s, t_w = topology_costs(topo, 48)
    assert check_plan(plan) == [] and wide_area_violations(plan, site) == []
    assert wide_area_bytes(plan, site) == wide_area_minimum(g, site) < wide_area_bytes(plan_kang(g), site)
    mine = simulate_pairs(g, plan.transfers, t_s, t_w).finish
    assert mine < 0.5 * simulate_pairs(g, plan_kang(g).transfers, t_s, t_w).finish
    # The same in the topology's port model (timing.py: shared WAN links, the TCP
    # window, the executor's range rules), on the schedule compiled from the plan.
    topo48 = load_topology("wan-3x16", 48)
    dag = [predict(from_plan(x), topo48, "dag").run_time_s for x in (plan, plan_kang(g))]
    assert dag[0] < 0.5 * dag[1]
