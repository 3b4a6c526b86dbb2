"""The hierarchical composition (algorithms/hier.py) and its inter-site plans
(algorithms/site_plan.py): verified schedules on any site grouping (contiguous or not),
every remote block crosses the wide area once per site, plans are valid and the model's
choice is the faster, one site is the ring."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import passes
from collsched.algorithms import Request, generate, hier, site_plan
from collsched.errors import InputError
from collsched.inputs.topology import homogeneous, load_topology
from collsched.ir import SEND
from collsched.verify import verify

SLOW = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def grouped_topology(tmp_path, labels, lan=5e-6, wan_lat=0.01, bw=1.25e9):
    """A class-form topology with one host per rank, host i in site labels[i] (sites in
    any order: non-contiguous groupings too)."""
    names = sorted(set(labels))
    lines = ["hosts:"] + [f"  - {{name: h{i}, site: {s}}}" for i, s in enumerate(labels)]
    lines += ["sites:"] + [f"  - {{name: {s}, lan: {{latency: {lan}, bandwidth: {bw}}}}}" for s in names]
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    lines += ["wan: [" + ", ".join(f"{{between: [{a}, {b}], latency: {wan_lat * (1 + k % 3)}, "
                                   f"bandwidth: {bw / (1 + k % 2)}}}" for k, (a, b) in enumerate(pairs)) + "]"]
    path = tmp_path / "g.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_topology(str(path))


@given(st.lists(st.sampled_from("ABCDE"), min_size=1, max_size=40), st.integers(1, 3),
       st.integers(0, 1 << 21), st.sampled_from([None, "direct", "relay"]))
@settings(max_examples=60, **SLOW)
def test_verified_on_any_site_grouping(tmp_path, labels, nseg, nbytes, kind):
    topo = grouped_topology(tmp_path, labels)
    p = len(labels)
    req = Request(p, nbytes=nbytes, nseg=nseg, topology=topo)
    groups = hier.site_groups(req)
    plan = hier.plan_for(req, kind if len(groups) > 1 else None)
    sched = passes.apply(generate("hier", req) if kind is None else
                         _build(req, groups, plan), topo, nbytes)
    assert verify(sched) == []
    # Wide-area optimal: every site receives every remote block once over the wide area.
    site = np.empty(p, np.int64)
    for k, g in enumerate(groups):
        site[g] = k
    rank = sched.rank_of_op
    wide = (sched.kind == SEND) & (site[rank] != site[sched.peer])
    assert wide.sum() == sum(p - len(g) for g in groups) * nseg


def _build(req, groups, plan):
    from collsched.algorithms.registry import block_transfers

    return block_transfers(req, "hier", *hier.transfers(groups, plan))


@given(st.integers(1, 40), st.integers(1, 3))
@settings(max_examples=20, deadline=None)
def test_one_site_is_the_ring(p, nseg):
    req = Request(p, nseg=nseg, topology=homogeneous(p))
    assert generate("hier", req).same_ops(generate("ring", req))


@st.composite
def site_costs(draw, max_sites=7):
    s = draw(st.integers(1, max_sites))
    sizes = tuple(draw(st.lists(st.integers(1, 50), min_size=s, max_size=s)))
    lat = np.array(draw(st.lists(st.sampled_from([1e-5, 1e-3, 0.02, 0.08]), min_size=s * s, max_size=s * s))).reshape(s, s)
    bw = np.array(draw(st.lists(st.sampled_from([1e6, 1e8, 1.25e9]), min_size=s * s, max_size=s * s))).reshape(s, s)
    flow = np.minimum(bw, np.where(lat > 0, (4 << 20) / (2 * lat), np.inf)) if draw(st.booleans()) else bw
    return site_plan.SiteCosts(sizes, lat, bw, flow)


@given(site_costs(), st.integers(0, 1 << 24))
@settings(max_examples=80, deadline=None)
def test_plans_are_valid_and_the_choice_is_the_faster(costs, nbytes):
    s = costs.nsites
    direct = site_plan.direct(s)
    relay = site_plan.relay(costs, nbytes)
    assert site_plan.refusal(direct, s) is None
    assert site_plan.refusal(relay, s) is None
    plan = site_plan.choose(costs, nbytes)
    assert plan.kind in site_plan.PLANS and site_plan.refusal(list(plan.entries), s) is None
    if s > 2:
        d, r = site_plan.predict(direct, costs, nbytes), site_plan.predict(relay, costs, nbytes)
        assert plan.predicted_s == {"direct": d, "relay": r}
        assert plan.kind == ("relay" if r < d else "direct")


def test_relay_pays_where_a_link_is_slow():
    """Three sites; 0-1 and 0-2 at 10 ms, 1-2 at 200 ms: site 0 relays between 1 and 2."""
    lat = np.array([[0, 0.01, 0.01], [0.01, 0, 0.2], [0.01, 0.2, 0]])
    bw = np.full((3, 3), 1.25e9)
    plan = site_plan.choose(site_plan.SiteCosts((4, 4, 4), lat, bw, bw), 1 << 16)
    assert plan.kind == "relay" and plan.predicted_s["relay"] < plan.predicted_s["direct"]
    relayed = [e for e in plan.entries if e.src != e.origin]
    assert {(e.src, e.dst, e.origin) for e in relayed} == {(0, 1, 2), (0, 2, 1)}
    assert plan.nsteps == 2 and plan.first == (0, 4, 8)


def test_refusals_in_one_line():
    bad = [site_plan.PlanEntry(0, 0, 1, 0), site_plan.PlanEntry(0, 1, 0, 1), site_plan.PlanEntry(0, 0, 1, 0)]
    assert site_plan.refusal(bad, 2)[0] == "entries"
    twice = [site_plan.PlanEntry(0, 0, 1, 0), site_plan.PlanEntry(0, 0, 1, 0)]
    assert "receive origin site 0's blocks once" in site_plan.refusal(twice, 2)[1]
    early = [site_plan.PlanEntry(0, 0, 1, 0), site_plan.PlanEntry(0, 1, 2, 0), site_plan.PlanEntry(0, 0, 2, 2)]
    early += [site_plan.PlanEntry(1, 1, 0, 1), site_plan.PlanEntry(1, 1, 2, 1), site_plan.PlanEntry(1, 2, 0, 2)]
    assert site_plan.refusal(early, 3) == ("entries[1]", "expected site 1 to hold origin site 0's blocks before step 0")
    with pytest.raises(InputError, match="expected a topology with 5 ranks"):
        generate("hier", Request(5, topology=homogeneous(4)))


def test_wan_3x16_compiles_and_beats_magpie():
    """On the bundled three-site WAN grid hier verifies and is predicted faster than
    magpie (one coordinator per site carries all wide-area traffic there)."""
    from collsched.pipeline import compile_schedule

    h = compile_schedule("hier", 48, 1 << 20, topology="topologies/wan-3x16.yaml")
    m = compile_schedule("magpie", 48, 1 << 20, topology="topologies/wan-3x16.yaml")
    assert h.metrics.avg_elapsed_s < m.metrics.avg_elapsed_s
