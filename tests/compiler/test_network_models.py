"""The cost models and the lower bound on wide-area networks of `links:` (network.py):
routes through several shared resources, resources shared by several site pairs and by
both directions. The fluid model charges every resource of a route; the DAG model the
route's bottleneck (docs/semantics.md); the lower bound is never above the fluid model's
time of any registered algorithm."""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import passes
from collsched.algorithms import REGISTRY, Request, generate
from collsched.inputs.network import SHARED, SPLIT, WanLink
from collsched.model.fluid import _Network, fluid_pattern
from collsched.model.lowerbound import _crossings, lower_bound, pattern_lower_bound
from collsched.model.simulate import simulate_pattern

from netcases import (CASES, GBIT, behind_one_link, links_topology, random_links_topology,
                      shared_both_ways, two_hop_route)

SLACK = 1e-6  # the fluid model's relative tolerance on rates and remainders


def schedule(alg, topo, nbytes, nseg=1, arrivals=None):
    p = topo.nranks
    sched = generate(alg, Request(p, nbytes=nbytes, nseg=nseg, full_duplex=topo.full_duplex,
                                  topology=topo, arrivals=arrivals))
    return passes.apply(sched, topo, nbytes)


def applicable(topo, nbytes, nseg=1):
    req = Request(topo.nranks, nbytes=nbytes, nseg=nseg, full_duplex=topo.full_duplex, topology=topo)
    return [alg for alg, e in sorted(REGISTRY.items()) if e.check(req) is None]


def test_fluid_flows_cross_every_resource_of_their_route():
    topo = two_hop_route()
    links = topo.shared_links
    names = links.names
    site = np.array(topo.rank_site())
    a, c = int(np.argmax(site == "a")), int(np.argmax(site == "c"))
    net = _Network(topo, np.array([a, c]), np.array([c, a]))
    nh = len(topo.hosts)
    crossed = [{names[r - 2 * nh] for r, _ in res if r >= 2 * nh} for res in net.resources]
    assert crossed == [{"ab>", "bc"}, {"bc", "ab<"}]


def two_flows(topo, pairs, nbytes):
    """The fluid end of each of a few concurrent single transfers (a hand-made DAG-free
    case): a schedule where every listed pair sends its own block, nothing forwarded."""
    from collsched.model.fluid import _max_min
    src = np.array([s for s, _ in pairs])
    dst = np.array([r for _, r in pairs])
    net = _Network(topo, src, dst)
    n = len(pairs)
    rates = _max_min(list(range(n)), net.resources, [np.inf] * n, [1.0] * n, net.capacity)
    return [rates[f] for f in range(n)]


def test_sites_behind_one_link_share_it():
    """paris -> chicago and lyon -> chicago both cross `atlantic` (10 Gbit/s): two flows
    get half each, though each site's access link is 100 Gbit/s."""
    topo = behind_one_link()
    site = np.array(topo.rank_site())
    p, ly, ch = (int(np.nonzero(site == s)[0][0]) for s in ("paris", "lyon", "chicago"))
    ch2 = int(np.nonzero(site == "chicago")[0][1])
    assert two_flows(topo, [(p, ch), (ly, ch2)], 1) == pytest.approx([5 * GBIT, 5 * GBIT])


@pytest.mark.parametrize("sharing, want", [(SHARED, 0.5 * GBIT), (SPLIT, 1 * GBIT)])
def test_a_shared_link_carries_both_directions(sharing, want):
    sites = [("e", 2, 1e-5, 10 * GBIT), ("w", 2, 1e-5, 10 * GBIT)]
    topo = links_topology(sites, [WanLink("wire", ("e", "w"), 5e-3, 1 * GBIT, sharing)])
    assert two_flows(topo, [(0, 2), (3, 1)], 1) == pytest.approx([want, want])


def test_wan_form_unchanged_one_resource_per_route():
    """The `wan:` form's network has one link per ordered site pair: route = link_of."""
    from collsched.inputs.topology import load_topology
    from pathlib import Path
    topo = load_topology(Path(__file__).resolve().parents[2] / "topologies" / "wan-3x16.yaml", 12)
    links = topo.shared_links
    assert not links.multi
    on = links.route_of >= 0
    assert all(links.routes[i] == (links.link_of[s, r],)
               for s, r, i in zip(*np.nonzero(on), links.route_of[on]))


def test_crossings_count_the_fewest_transfers_over_a_resource():
    # three sites, k on every pair but 0 -> 1: from 0, one crossing (to 2); from 2, one
    # (to 0, which reaches 1 freely); from 1 every way out crosses k and, wherever the
    # first lands, the last site needs another crossing: two
    on = {(0, 2), (1, 0), (1, 2), (2, 0), (2, 1)}
    assert _crossings(3, lambda x, y: (x, y) in on).tolist() == [1, 2, 1]
    assert _crossings(3, lambda x, y: False).tolist() == [0, 0, 0]
    assert _crossings(2, lambda x, y: True).tolist() == [1, 1]


def test_both_directions_bound_on_a_shared_link():
    """16 blocks of 1 MiB cross one 1 Gbit/s SHARED link (8 each way): the bound says so,
    and the fluid model's ring takes at least that."""
    topo = shared_both_ways()
    nb = 1 << 20
    b = lower_bound(topo, nb)
    assert b.run_time_s >= 5e-3 + 16 * nb / GBIT * (1 - 1e-9)
    split = shared_both_ways()
    split = links_topology([("east", 8, 10e-6, 10 * GBIT), ("west", 8, 10e-6, 10 * GBIT)],
                           [WanLink("wire", ("east", "west"), 5e-3, 1 * GBIT, SPLIT)])
    assert lower_bound(split, nb).run_time_s < b.run_time_s * 0.6
    ring = fluid_pattern(schedule("ring", topo, nb), topo, nb, np.zeros((1, 16)))[2]
    assert ring.run_time_s >= b.run_time_s


@pytest.mark.parametrize("case", sorted(CASES))
def test_models_and_planners_run_on_links_networks(case):
    """Every registered algorithm compiles and is timed by both models on each case; the
    fluid time is never below the bound; the DAG model is within a factor of the fluid."""
    topo = CASES[case]()
    nb = 256 << 10
    bound = lower_bound(topo, nb)
    z = np.zeros((1, topo.nranks))
    for alg in applicable(topo, nb):
        sched = schedule(alg, topo, nb, arrivals=z[0])
        dag = simulate_pattern(sched, topo, nb, z)[2]
        fl = fluid_pattern(sched, topo, nb, z)[2]
        assert fl.run_time_s >= bound.run_time_s * (1 - SLACK), (alg, fl.run_time_s, bound)
        assert 0.2 < dag.run_time_s / fl.run_time_s < 5, (alg, dag.run_time_s, fl.run_time_s)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), nsites=st.integers(2, 4), nrouters=st.integers(0, 2),
       extra=st.integers(0, 3), full=st.booleans(), window=st.sampled_from([None, 65536, 4 << 20]),
       nbytes=st.sampled_from([1, 1000, 65536, 300_000, 2 << 20]), nseg=st.integers(1, 2),
       ranks_per_host=st.sampled_from([1, 1, 2]),
       arrivals=st.sampled_from(["flat", "random"]), costs=st.sampled_from(["CM02", "SMPI", "LV08"]))
def test_no_algorithm_timed_by_the_fluid_model_beats_the_bound(
        seed, nsites, nrouters, extra, full, window, nbytes, nseg, ranks_per_host, arrivals, costs):
    """costs: the lab's network models (lab/netmodel.py): constant costs, or SimGrid's
    message-size-dependent factors and sharing penalty (the bound takes the most
    favourable factors; the fluid model applies them per message)."""
    from collsched.lab.netmodel import network_setup
    rng = np.random.default_rng(seed)
    hosts = rng.integers(1, 4, nsites)
    topo = random_links_topology(rng, nsites, hosts, nrouters, extra, full, window, ranks_per_host)
    topo = network_setup(costs, topo).topology
    p = topo.nranks
    pattern = np.zeros((1, p)) if arrivals == "flat" else rng.uniform(0, 0.02, (1, p))
    bound = pattern_lower_bound(topo, nbytes, pattern)
    checked = 0
    for alg in applicable(topo, nbytes, nseg):
        sched = schedule(alg, topo, nbytes, nseg, pattern[0] - pattern[0].min())
        m = fluid_pattern(sched, topo, nbytes, pattern)[2]
        assert m.run_time_s >= bound.run_time_s * (1 - SLACK), (alg, m.run_time_s, bound)
        assert m.avg_elapsed_s >= bound.avg_elapsed_s * (1 - SLACK), (alg, m.avg_elapsed_s, bound)
        checked += 1
    assert checked >= 4


@pytest.mark.parametrize("case", ["behind-one-link", "two-hop"])
def test_intergroup_models_and_bounds_on_links_networks(case):
    """Intergroup plans between the first site and the others: the fluid model (fluid.py's
    network: every resource of the route) never below the bounds (cut: the routes'
    bottlenecks); the DAG model (bottleneck only) times every plan."""
    from collsched.intergroup import PLANS, Groups
    from collsched.intergroup.bounds import bounds
    from collsched.intergroup.schedule import from_plan
    from collsched.intergroup.timing import predict
    topo = CASES[case]()
    g = Groups.equal(6, topo.nranks - 6, 1 << 18, 1 << 17)
    b = bounds(g, topo)
    for name in sorted(PLANS):
        sched = from_plan(PLANS[name](g))
        fl = predict(sched, topo, "fluid").run_time_s
        assert fl >= b["lower_bound"] * (1 - SLACK), (name, fl, b)
        assert predict(sched, topo, "dag").run_time_s > 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_compact_site_model_runs_on_links_networks(case):
    """The compact package's per-site costs (model_sites) take a links network: each site
    pair's route charged at its bottleneck, as the DAG model does."""
    from collsched.compact import model_sites
    topo = CASES[case]()
    sites = model_sites.from_topology(topo)
    assert sites.nranks == topo.nranks
    names = topo.sites()
    for a in range(len(names)):
        for b in range(len(names)):
            if a != b:
                c = model_sites._costs(sites, a, b, 1 << 20)
                assert c.duration > 0 and (c.wan_time > 0) == (c.link >= 0)
