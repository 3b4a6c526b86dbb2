"""The forest allgather (algorithms/forest.py, forest_routes.py; docs/forest.md): every
schedule verifies and can be timed, its prediction never beats the LP lower bound, the
site-level packing's congestion is the LP optimum (checked against an independent grid
search and the cut bound), and on one cluster it is the ring's packing."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched.algorithms import Request, generate
from collsched.algorithms.forest import assign_routes
from collsched.algorithms.forest_routes import _solve, congestion, route_fractions, site_graph
from collsched.inputs.topology import homogeneous, load_topology
from collsched.model.lowerbound import lower_bound
from collsched.model.simulate import simulate
from collsched.verify import verify

from test_pools import draw_grid, grid_yaml, write_yaml


def forest(topo, nbytes, nseg=1):
    return generate("forest", Request(nranks=topo.nranks, nbytes=nbytes, nseg=nseg,
                                      full_duplex=topo.full_duplex, topology=topo))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=grid_yaml(max_sites=4, max_hosts=5), data=st.data(), nbytes=st.integers(0, 2 << 20),
       nseg=st.integers(1, 3))
def test_random_grids_verify_and_respect_the_bound(tmp_path, doc, data, nbytes, nseg):
    topo = draw_grid(tmp_path, doc, data)
    s = forest(topo, nbytes, nseg)
    assert verify(s) == []
    assert s.nseg == nseg and s.total_ops == 2 * topo.nranks * (topo.nranks - 1) * nseg
    _, m = simulate(s, topo, nbytes)  # no cycle in the cost model's port orders
    if nbytes and topo.nranks <= 8:
        lb = lower_bound(topo, nbytes)
        assert m.run_time_s >= lb.run_time_s * (1 - 1e-9)


@settings(max_examples=10, deadline=None)
@given(p=st.integers(2, 16), nbytes=st.integers(1, 1 << 20), nseg=st.integers(1, 4),
       full=st.booleans())
def test_one_cluster_is_the_ring_packing(p, nbytes, nseg, full):
    topo = homogeneous(p, full_duplex=full)
    s = forest(topo, nbytes, nseg)
    assert verify(s) == []
    # every rank sends only to its ring successor and receives only from its predecessor
    for r in range(p):
        lo, hi = s.offsets[r], s.offsets[r + 1]
        peers = set(zip(s.kind[lo:hi].tolist(), s.peer[lo:hi].tolist()))
        assert peers <= {(0, (r + 1) % p), (1, (r - 1) % p)}
    if full:
        _, m = simulate(s, topo, nbytes)
        lb = lower_bound(topo, nbytes, use_lp=False)
        assert lb.run_time_s * (1 - 1e-9) <= m.run_time_s
        ring = generate("ring", Request(nranks=p, nbytes=nbytes, nseg=nseg, topology=topo))
        ring_s = simulate(ring, topo, nbytes)[1].run_time_s
        lat, piece = topo.latency[0, 1], -(-nbytes // nseg) / topo.bandwidth[0, 1]
        if nseg == 1:  # the ring itself
            assert m.run_time_s <= ring_s * 1.01 + 1e-9
        # segment waves: each piece is stored and forwarded, one latency per piece and hop
        # (the ring pays one per block and hop; docs/forest.md)
        assert m.run_time_s <= (p - 1) * nseg * (lat + piece) * 1.01 + 1e-9


def _three_sites(tmp_path, n, caps_mbit):
    """Three sites with n[i] hosts and one WAN link per ordered pair (caps_mbit[(i, j)])."""
    sites = [{"name": f"s{i}", "hosts": n[i], "lan": {"latency": "10us", "bandwidth": "10Gbit/s"}}
             for i in range(3)]
    wan = []
    for i, j in itertools.combinations(range(3), 2):
        wan.append({"between": [f"s{i}", f"s{j}"], "latency": f"{5 + 7 * i + 3 * j}ms",
                    "bandwidth": f"{caps_mbit[i, j]}Mbit/s", "bandwidth_back": f"{caps_mbit[j, i]}Mbit/s"})
    doc = {"name": "three", "duplex": "full", "sites": sites, "wan": wan}
    return load_topology(write_yaml(tmp_path, doc), sum(n))


def _grid_search(g, nbytes, steps=11):
    """Independent minimum congestion of the same tree family on three sites: r[x, y] is the
    share of x's blocks that reach y through the third site z (they must reach z directly:
    r[x, z] <= 1 - r[x, y]). Exhaustive over a grid of shares."""
    pairs = [(x, y) for x in range(3) for y in range(3) if x != y]
    grid = np.linspace(0, 1, steps)
    r = np.stack(np.meshgrid(*[grid] * 6, indexing="ij"), -1).reshape(-1, 6)
    share = {xy: r[:, i] for i, xy in enumerate(pairs)}
    ok = np.ones(len(r), bool)
    load = {xy: np.zeros(len(r)) for xy in pairs}
    for x, y in pairs:
        z = 3 - x - y
        ok &= share[x, z] <= 1 - share[x, y] + 1e-12
        size = len(g.members[x]) * nbytes
        load[x, y] = load[x, y] + size * (1 - share[x, y])  # x's blocks straight to y
        load[z, y] = load[z, y] + size * share[x, y]  # relayed by z
    cong = np.max([load[xy] / g.capacity[g.resources[xy][0]] for xy in pairs], 0)
    return float(cong[ok].min())


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.tuples(*[st.integers(1, 4)] * 3),
       caps=st.lists(st.sampled_from([5, 10, 20, 40, 80]), min_size=6, max_size=6))
def test_packing_congestion_is_the_lp_optimum(tmp_path, n, caps):
    caps_mbit = {}
    for (x, y), c in zip([(x, y) for x in range(3) for y in range(3) if x != y], caps):
        caps_mbit[x, y] = c
    topo = _three_sites(tmp_path, n, caps_mbit)
    g = site_graph(topo)
    nbytes = 1 << 20
    c, frac = _solve(g, nbytes, np.inf, 0.0)
    # the fractions achieve it, a grid search of the same family never beats it, and the
    # cut bound (a site's inflow over its inbound links) never exceeds it
    assert congestion(g, nbytes, frac) == pytest.approx(c, rel=1e-5)
    assert c <= _grid_search(g, nbytes) * (1 + 1e-6)
    for y in range(3):
        inflow = sum(len(g.members[x]) for x in range(3) if x != y) * nbytes
        cap_in = sum(g.capacity[g.resources[x, y][0]] for x in range(3) if x != y)
        assert c >= inflow / cap_in * (1 - 1e-6)
    # the rounded routes are trees: a piece relayed by z reached z directly
    routes = assign_routes(g, frac, 3)
    for (x, y), r in routes.items():
        for z in np.unique(r[r >= 0]):
            assert np.all(routes[x, int(z)][r == z] == -1)


def test_two_sites_congestion_is_the_cut():
    topo = load_topology("topologies/wan-3x16.yaml", 32)  # sites A and B only
    g = site_graph(topo)
    frac, _, c, _ = route_fractions(g, 1 << 20)
    worst = max(16 * (1 << 20) / g.capacity[g.resources[xy][0]] for xy in ((0, 1), (1, 0)))
    assert c == pytest.approx(worst, rel=1e-6)
    assert all(z == -1 for (_, _, z), v in frac.items() if v > 1e-9)


def test_wan_3x16_relays_b_c_through_a():
    """B <-> C (80 ms) is slower than B -> A -> C (20 + 40 ms): the packing relays there."""
    topo = load_topology("topologies/wan-3x16.yaml", 48)
    frac, lmax, c, _ = route_fractions(site_graph(topo), 1 << 20)
    assert frac[1, 2, 0] == pytest.approx(1.0) and frac[2, 1, 0] == pytest.approx(1.0)
    assert lmax == pytest.approx(0.06)
    s = forest(topo, 1 << 20, 2)
    assert verify(s) == []
