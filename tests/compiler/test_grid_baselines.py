"""The Min3 paper's grid baselines: magpie, mpichg2, bcast-trees.

Every schedule verifies (progress under the in-order executor included) and is wide-area
optimal, for P = 2..64, on random multi-site topologies and on one site; each follows the
structure its docstring promises.
"""
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched.algorithms import Request, generate
from collsched.errors import InputError
from collsched.ir import SEND
from collsched.pipeline import compile_schedule
from collsched.model.policy import mark_fifo_links
from collsched.model.simulate import simulate
from collsched.inputs.topology import _from_hosts, homogeneous, load_topology, with_wan_network
from collsched.verify import verify

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
GRID = ["magpie", "mpichg2", "bcast-trees"]


def random_sites_topology(site_of_rank, rng, full_duplex=True, window=None):
    """One rank per host; LAN/WAN classes drawn at random (WAN slower, farther)."""
    site = np.asarray(site_of_rank)
    n = int(site.max()) + 1
    lan_lat, lan_bw = rng.uniform(1e-6, 1e-4, n), rng.uniform(1e7, 1e10, n)
    wan_lat, wan_bw = rng.uniform(1e-3, 1e-1, (n, n)), rng.uniform(1e5, 1e9, (n, n))
    same = site[:, None] == site[None, :]
    lat = np.where(same, lan_lat[site][:, None], wan_lat[site][:, site])
    bw = np.where(same, lan_bw[site][:, None], wan_bw[site][:, site])
    p = len(site)
    topo = _from_hosts("random-grid", "<test>", [f"h{i}" for i in range(p)],
                       [f"site{s}" for s in site], np.arange(p), lat, bw, full_duplex)
    return dataclasses.replace(with_wan_network(topo), tcp_window=window)


def site_index(topo):
    labels = topo.rank_site()
    first = {}
    return np.array([first.setdefault(lab, len(first)) for lab in labels])


def check(sched, topo, nbytes):
    mark_fifo_links(sched, topo, nbytes)
    assert verify(sched, pools=[site_index(topo)]) == []
    simulate(sched, topo, nbytes)  # the cost model can order it (no port-order cycle)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(alg=st.sampled_from(GRID), p=st.integers(2, 64), nsites=st.integers(1, 6),
       seed=st.integers(0, 2**32 - 1), nseg=st.integers(1, 3), full=st.booleans(),
       nbytes=st.integers(0, 4 << 20), window=st.sampled_from([None, 65536, 4 << 20]),
       late=st.booleans())
def test_valid_and_wide_area_optimal_on_random_grids(alg, p, nsites, seed, nseg, full, nbytes,
                                                      window, late):
    rng = np.random.default_rng(seed)
    site = rng.integers(0, nsites, p)  # sites interleaved in rank order, some maybe empty
    topo = random_sites_topology(site, rng, full, window)
    arrivals = rng.uniform(0, 0.01, p) if late else None
    sched = generate(alg, Request(p, nbytes=nbytes, nseg=nseg, full_duplex=full, topology=topo,
                                  arrivals=arrivals))
    check(sched, topo, nbytes)


@pytest.mark.parametrize("alg", GRID)
def test_every_rank_count_on_one_site_and_without_topology(alg):
    for p in range(2, 65):
        topo = homogeneous(p)
        check(generate(alg, Request(p, nbytes=65536, topology=topo)), topo, 65536)
        assert verify(generate(alg, Request(p))) == []


@pytest.mark.parametrize("alg", GRID)
@pytest.mark.parametrize("name,p", [("three-site-grid.yaml", 20), ("wan-3x16.yaml", 48)])
def test_bundled_grids_both_duplex_modes(alg, name, p):
    for duplex in ("full", "half"):
        res = compile_schedule(alg, p, 1 << 20, topology=str(TOPOLOGIES / name), duplex=duplex)
        topo = load_topology(TOPOLOGIES / name, p)
        assert verify(res.schedule, pools=[site_index(topo)]) == []


def wan_sends(sched, topo):
    """(src, dst, origin) of every send that crosses sites."""
    site = site_index(topo)
    rank = sched.rank_of_op
    send = np.nonzero(sched.kind == SEND)[0]
    cross = send[site[rank[send]] != site[sched.peer[send]]]
    return set(zip(rank[cross].tolist(), sched.peer[cross].tolist(), sched.origin[cross].tolist()))


def test_magpie_and_mpichg2_cross_sites_only_between_coordinators():
    topo = load_topology(TOPOLOGIES / "three-site-grid.yaml", 20)  # UT 0-7, UK 8-11, NTH 12-19
    coordinators = {0, 8, 12}
    sizes = {0: 8, 8: 4, 12: 8}
    for alg in ("magpie", "mpichg2"):
        wan = wan_sends(generate(alg, Request(20, topology=topo)), topo)
        assert {s for s, _, _ in wan} <= coordinators and {d for _, d, _ in wan} <= coordinators
        # each block enters each other site exactly once
        assert len(wan) == sum(20 - n for n in sizes.values())
    # magpie: spreading simple, every coordinator sends its own site's blocks straight to the others
    wan = wan_sends(generate("magpie", Request(20, topology=topo)), topo)
    site = site_index(topo)
    assert all(site[o] == site[s] for s, _, o in wan)
    # mpichg2 with 3 sites folds NTH into UT: NTH talks to UT only, UK never sends to NTH
    wan = wan_sends(generate("mpichg2", Request(20, topology=topo)), topo)
    assert {(s, d) for s, d, _ in wan} == {(12, 0), (0, 8), (8, 0), (0, 12)}


def test_bcast_trees_spread_wide_area_receives_over_ranks():
    """Rotating each site's ranks by the root makes different trees enter a site at
    different ranks, so no single port takes all wide-area traffic."""
    topo = load_topology(TOPOLOGIES / "three-site-grid.yaml", 20)
    wan = wan_sends(generate("bcast-trees", Request(20, nbytes=1 << 20, topology=topo)), topo)
    receivers = [d for _, d, _ in wan]
    assert len(wan) == (20 - 8) + (20 - 4) + (20 - 8)  # each block enters each other site once
    assert len(set(receivers)) >= 15


@pytest.mark.parametrize("p", [8, 16, 48])
def test_bcast_trees_on_one_site(p):
    """Homogeneous cluster: trees are log-depth, so for small blocks they beat the ring
    (P-1 latencies); for large blocks they stay within 1.8x of the receive-port bound
    L + (P-1) B / b, which the ring all but meets (the paper's Figure 11 finding)."""
    topo = homogeneous(p)
    lat, bw = topo.latency[0, 1], topo.bandwidth[0, 1]

    def run_time(alg, nbytes):
        sched = generate(alg, Request(p, nbytes=nbytes, topology=topo))
        mark_fifo_links(sched, topo, nbytes)
        return simulate(sched, topo, nbytes)[1].run_time_s

    assert run_time("bcast-trees", 4096) < 0.7 * run_time("ring", 4096)
    assert run_time("bcast-trees", 1 << 20) < 1.8 * (lat + (p - 1) * (1 << 20) / bw)


def test_predicted_order_on_the_three_site_grid():
    """At 1 MiB the paper's ranking of its baselines holds in our model as far as the
    shared WAN links let it: MagPIe and the trees beat MPICH-G2; MagPIe beats the
    topology-blind ring. (The paper also has the trees beat MagPIe. Their many concurrent
    WAN flows queue on the shared site links, which the model serves one after another
    where SimGrid shares them fairly: the model puts the trees about 10-15% behind MagPIe
    in run time, SimGrid about 5% ahead; docs/benchmarks.md has both.)"""
    grid = str(TOPOLOGIES / "three-site-grid.yaml")
    t = {alg: compile_schedule(alg, 20, 1 << 20, topology=grid).metrics.run_time_s
         for alg in GRID + ["ring"]}
    assert t["bcast-trees"] < t["mpichg2"]
    assert t["magpie"] < t["mpichg2"]
    assert t["magpie"] < t["ring"]


def test_refuses_a_topology_of_another_size():
    with pytest.raises(InputError, match="topology with 5 ranks"):
        generate("magpie", Request(5, topology=homogeneous(4)))
