"""The LP lower bound: never above any registered algorithm's predicted
time, exact where the optimum is known, the LP part binding on grids, fast enough."""
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import collsched.model.simulate
from collsched.algorithms import REGISTRY, Request, generate
from collsched.cli import main
from collsched.errors import InputError
from collsched.inputs.links import shared_links
from collsched.model.lowerbound import lower_bound, pattern_lower_bound, serial_lower_bound
from collsched.pipeline import compile_schedule
from collsched import passes
from collsched.model.simulate import simulate_pattern
from collsched.inputs.topology import _from_hosts, homogeneous, load_topology, with_wan_network

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
SLACK = 1e-9  # float noise of the simulator's sums


def random_topology(p, nsites, rng, full_duplex, window, overheads):
    """Random per-site-pair classes, asymmetric, sometimes with os/g and a TCP window."""
    site = rng.integers(0, nsites, p)
    lat_cls = rng.uniform(1e-6, 5e-2, (nsites, nsites))
    bw_cls = 10 ** rng.uniform(5, 10, (nsites, nsites))
    lat, bw = lat_cls[np.ix_(site, site)], bw_cls[np.ix_(site, site)]
    os_h = g_h = None
    if overheads:
        os_h = (rng.uniform(0, 1e-5, (p, p)), rng.uniform(0.2, 2.0, (p, p)) / bw)
        g_h = (rng.uniform(0, 1e-5, (p, p)), rng.uniform(0.2, 2.0, (p, p)) / bw)
    topo = _from_hosts("random", "<test>", [f"h{i}" for i in range(p)],
                       [f"s{s}" for s in site], np.arange(p), lat, bw, full_duplex, os_h, g_h)
    return dataclasses.replace(topo, tcp_window=window)


def class_shaped_topology(p, nsites, rng, full_duplex, window, overheads, ranks_per_host):
    """Random sites with a LAN each and one WAN class per ordered site pair, no faster
    than the LANs at its ends (often much slower): shared WAN links (links.py)."""
    nhosts = -(-p // ranks_per_host)
    host_site = rng.integers(0, nsites, nhosts)
    host_site[: min(2, nhosts - 1)] = 0  # site 0 has two hosts when there are three
    host_site[-1] = 1
    lan_lat = rng.uniform(1e-6, 1e-4, nsites)
    lan_bw = 10 ** rng.uniform(7, 10, nsites)
    wan_bw = np.minimum(lan_bw[:, None], lan_bw[None, :]) * 10 ** rng.uniform(-3, 0, (nsites, nsites))
    wan_lat = (lan_lat[:, None] + lan_lat[None, :]) / 2 + rng.uniform(1e-4, 5e-2, (nsites, nsites))
    same = host_site[:, None] == host_site[None, :]
    lat = np.where(same, lan_lat[host_site][:, None], wan_lat[np.ix_(host_site, host_site)])
    bw = np.where(same, lan_bw[host_site][:, None], wan_bw[np.ix_(host_site, host_site)])
    np.fill_diagonal(lat, 1e-6)
    np.fill_diagonal(bw, 1e10)
    os_h = g_h = None
    if overheads:
        os_h = (rng.uniform(0, 1e-5, lat.shape), rng.uniform(0.2, 2.0, lat.shape) / bw)
        g_h = (rng.uniform(0, 1e-5, lat.shape), rng.uniform(0.2, 2.0, lat.shape) / bw)
    topo = _from_hosts("classes", "<test>", [f"h{i}" for i in range(nhosts)],
                       [f"s{s}" for s in host_site], np.arange(p) // ranks_per_host, lat, bw,
                       full_duplex, os_h, g_h)
    return dataclasses.replace(with_wan_network(topo), tcp_window=window)


def predicted(alg, topo, nbytes, nseg, pattern):
    p = topo.nranks
    a = pattern[0] - pattern[0].min()
    sched = generate(alg, Request(p, nbytes=nbytes, nseg=nseg, full_duplex=topo.full_duplex,
                                  topology=topo, arrivals=a))
    sched = passes.apply(sched, topo, nbytes)  # as compile_schedule does
    return simulate_pattern(sched, topo, nbytes, pattern)[2]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(2, 10), nsites=st.integers(1, 3), seed=st.integers(0, 2**32 - 1),
       nbytes=st.sampled_from([0, 1, 1000, 65536, 300_000, 2 << 20]), nseg=st.integers(1, 3),
       full=st.booleans(), window=st.sampled_from([None, 65536, 4 << 20]),
       overheads=st.booleans(), arrivals=st.sampled_from(["flat", "random", "two iterations"]))
def test_no_registered_algorithm_beats_the_bound(p, nsites, seed, nbytes, nseg, full, window,
                                                 overheads, arrivals):
    rng = np.random.default_rng(seed)
    topo = random_topology(p, nsites, rng, full, window, overheads)
    rows = {"flat": 1, "random": 1, "two iterations": 2}[arrivals]
    pattern = np.zeros((1, p)) if arrivals == "flat" else rng.uniform(0, 0.02, (rows, p))
    bound = pattern_lower_bound(topo, nbytes, pattern)
    assert bound.run_time_s >= bound.closed_form_run_time_s
    assert bound.avg_elapsed_s >= bound.closed_form_avg_elapsed_s
    checked = 0
    for alg, entry in sorted(REGISTRY.items()):
        req = Request(p, nbytes=nbytes, nseg=nseg, full_duplex=full, topology=topo)
        if entry.check(req) is not None:
            continue
        m = predicted(alg, topo, nbytes, nseg, pattern)
        assert m.run_time_s >= bound.run_time_s * (1 - SLACK), (alg, m.run_time_s, bound)
        assert m.avg_elapsed_s >= bound.avg_elapsed_s * (1 - SLACK), (alg, m.avg_elapsed_s, bound)
        checked += 1
    assert checked >= 6  # ring, lnbc, bruck, spreading, magpie, mpichg2, bcast-trees, ...


@settings(max_examples=30, deadline=None)
@given(p=st.integers(2, 40), nbytes=st.integers(1, 8 << 20), lat=st.floats(1e-7, 1e-2),
       bw=st.floats(1e6, 1e11))
def test_exact_on_a_homogeneous_cluster(p, nbytes, lat, bw):
    """Flat arrivals: L + (P-1) B / b, which spreading simple meets in the model (its
    receive port never idles after the first latency)."""
    topo = homogeneous(p, latency_s=lat, bandwidth_Bps=bw)
    b = lower_bound(topo, nbytes)
    assert b.run_time_s == pytest.approx(lat + (p - 1) * nbytes / bw, rel=1e-9)
    assert b.avg_elapsed_s == pytest.approx(b.run_time_s, rel=1e-9)
    m = predicted("spreading", topo, nbytes, 1, np.zeros((1, p)))
    assert m.run_time_s == pytest.approx(b.run_time_s, rel=1e-6)


def test_two_ranks_asymmetric_link_is_exact():
    """Each rank sends its block once; the slower direction decides."""
    lat = np.array([[0, 0.01], [0.01, 0]])
    bw = np.array([[np.inf, 1e6], [4e6, np.inf]])
    topo = _from_hosts("two", "<test>", ["a", "b"], ["x", "y"], np.arange(2), lat, bw, True)
    b = lower_bound(topo, 1 << 20)
    assert b.run_time_s == pytest.approx(0.01 + (1 << 20) / 1e6, rel=1e-6)
    assert b.run_time_s == pytest.approx(predicted("ring", topo, 1 << 20, 1, np.zeros((1, 2))).run_time_s)


def test_late_rank_pushes_everyone():
    """A rank arriving at 1 s delays every exit past 1 s + L + B/b, and its own elapsed
    time is at least L + B/b (it must still send its block)."""
    p, lat, bw, nbytes = 6, 1e-4, 1e8, 1 << 20
    topo = homogeneous(p, latency_s=lat, bandwidth_Bps=bw)
    a = np.zeros(p)
    a[3] = 1.0
    b = lower_bound(topo, nbytes, a)
    assert b.run_time_s >= 1.0 + lat + nbytes / bw
    expect_avg = ((p - 1) * (1.0 + lat + nbytes / bw) + (lat + nbytes / bw)) / p
    assert b.avg_elapsed_s >= expect_avg * (1 - 1e-9)


@pytest.mark.parametrize("nbytes", [256 << 10, 1 << 20])
def test_site_cuts_bind_on_the_three_site_grid(nbytes):
    """The Min3 grid: the LP (site cuts over the slow WAN) is several times the closed form
    and stays below every registered algorithm, Min3 included."""
    topo = load_topology(TOPOLOGIES / "three-site-grid.yaml", 20)
    b = lower_bound(topo, nbytes)
    assert b.method.startswith("lp")
    assert b.run_time_s > 4 * b.closed_form_run_time_s
    # UK (4 ranks) takes 16 blocks over the WAN; its best inbound class is 4.75 Mbit/s:
    assert b.run_time_s >= 16 * nbytes / 4 / (4.75e6 / 8)
    best = min(predicted(alg, topo, nbytes, 1, np.zeros((1, 20))).run_time_s
               for alg, e in REGISTRY.items() if e.check(Request(20, topology=topo)) is None)
    assert b.run_time_s <= best


@pytest.mark.parametrize("nbytes, at_least", [(256 << 10, 9.5), (1 << 20, 38.0)])
def test_shared_links_bind_on_the_three_site_grid(nbytes, at_least):
    """F7: Europe's 12 blocks must enter UT over UK->UT (160 kB/s) and NTH->UT (145 kB/s),
    so no schedule beats 12 B / 305 kB/s; the closed form of F7 alone says it too."""
    topo = load_topology(TOPOLOGIES / "three-site-grid.yaml", 20)
    assert shared_links(topo).any
    b = lower_bound(topo, nbytes)
    assert b.run_time_s >= at_least
    assert b.run_time_s >= 0.05 + 12 * nbytes / (160_000 + 145_000) * (1 - 1e-6)
    cf = lower_bound(topo, nbytes, use_lp=False)
    assert cf.method == "closed form + links" and cf.run_time_s >= at_least
    assert b.avg_elapsed_s >= cf.avg_elapsed_s > cf.closed_form_avg_elapsed_s
    if hasattr(collsched.model.simulate, "SHARED_LINKS"):
        for alg, e in sorted(REGISTRY.items()):
            if e.check(Request(20, topology=topo)) is None:
                m = predicted(alg, topo, nbytes, 1, np.zeros((1, 20)))
                assert m.run_time_s >= b.run_time_s * (1 - SLACK), (alg, m.run_time_s, b)
                assert m.avg_elapsed_s >= b.avg_elapsed_s * (1 - SLACK), (alg, m.avg_elapsed_s, b)


@pytest.mark.skipif(not hasattr(collsched.model.simulate, "SHARED_LINKS"),
                    reason="simulate does not model shared WAN links yet (F7 would not hold)")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(3, 10), nsites=st.integers(2, 3), seed=st.integers(0, 2**32 - 1),
       nbytes=st.sampled_from([1, 1000, 65536, 300_000, 2 << 20]), nseg=st.integers(1, 3),
       full=st.booleans(), window=st.sampled_from([None, 65536, 4 << 20]),
       overheads=st.booleans(), ranks_per_host=st.sampled_from([1, 1, 2]),
       arrivals=st.sampled_from(["flat", "random", "two iterations"]))
def test_no_registered_algorithm_beats_the_bound_over_shared_links(
        p, nsites, seed, nbytes, nseg, full, window, overheads, ranks_per_host, arrivals):
    rng = np.random.default_rng(seed)
    topo = class_shaped_topology(p, nsites, rng, full, window, overheads, ranks_per_host)
    assume(shared_links(topo).any)
    rows = {"flat": 1, "random": 1, "two iterations": 2}[arrivals]
    pattern = np.zeros((1, p)) if arrivals == "flat" else rng.uniform(0, 0.02, (rows, p))
    bound = pattern_lower_bound(topo, nbytes, pattern)
    assert bound.run_time_s >= bound.closed_form_run_time_s
    checked = 0
    for alg, entry in sorted(REGISTRY.items()):
        req = Request(p, nbytes=nbytes, nseg=nseg, full_duplex=full, topology=topo)
        if entry.check(req) is not None:
            continue
        m = predicted(alg, topo, nbytes, nseg, pattern)
        assert m.run_time_s >= bound.run_time_s * (1 - SLACK), (alg, m.run_time_s, bound)
        assert m.avg_elapsed_s >= bound.avg_elapsed_s * (1 - SLACK), (alg, m.avg_elapsed_s, bound)
        checked += 1
    assert checked >= 6


def test_half_duplex_is_at_least_full_duplex():
    topo = load_topology(TOPOLOGIES / "three-site-grid.yaml", 12)
    full = lower_bound(topo, 1 << 20)
    half = lower_bound(topo.with_duplex(False), 1 << 20)
    assert half.run_time_s >= full.run_time_s
    assert half.closed_form_run_time_s > full.closed_form_run_time_s


def test_fast_at_48_ranks_and_degrades_for_large_p():
    topo = load_topology(TOPOLOGIES / "wan-3x16.yaml", 48)
    t = time.perf_counter()
    b = lower_bound(topo, 1 << 20, np.random.default_rng(0).uniform(0, 5e-3, 48))
    assert time.perf_counter() - t < 5.0 and b.method == "lp: ranks x sites"
    p = 512
    site = np.arange(p) * 8 // p
    lat = np.where(site[:, None] == site[None, :], 5e-6, 0.03)
    bw = np.where(site[:, None] == site[None, :], 1.25e9, 1.25e8)
    big = _from_hosts("big", "<test>", [f"h{i}" for i in range(p)], [f"s{s}" for s in site],
                      np.arange(p), lat, bw, True)
    big = with_wan_network(big)
    t = time.perf_counter()
    b = lower_bound(big, 1 << 20)
    assert time.perf_counter() - t < 5.0 and b.method == "lp: sites x sites"
    assert b.run_time_s > b.closed_form_run_time_s  # the WAN cut still binds


def test_bad_input_is_one_line():
    topo = homogeneous(4)
    with pytest.raises(InputError, match="expected 4 arrival times"):
        lower_bound(topo, 100, [0, 1])
    with pytest.raises(InputError, match="non-negative integer"):
        lower_bound(topo, -1)
    with pytest.raises(InputError, match="finite"):
        lower_bound(topo, 100, [0, np.nan, 0, 0])


def test_compile_reports_bound_and_gap(tmp_path, capsys):
    grid = str(TOPOLOGIES / "three-site-grid.yaml")
    res = compile_schedule("magpie", 20, 1 << 20, topology=grid)
    assert res.summary()["lower_bound_s"] is None and "not computed" in res.summary()["lower_bound_note"]
    out = tmp_path / "m.sched"
    argv = ["compile", "--algorithm", "magpie", "--ranks", "20", "--bytes", "1MiB",
            "--topology", grid, "-o", str(out)]
    # --json always carries the bound and the gaps (issue 20); the LP's time apart.
    assert main(argv + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["lower_bound_s"] > 0 and d["gap"] is not None and d["lower_bound_note"] is None
    assert d["lower_bound_time_s"] > 0
    assert main(argv + ["--lower-bound"]) == 0
    assert "lower bound on the run time" in capsys.readouterr().out
    code = main(argv + ["--lower-bound", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0
    assert d["lower_bound_s"] > 0 and d["lower_bound_note"] is None
    assert d["gap"] == pytest.approx(d["predicted_run_time_s"] / d["lower_bound_s"] - 1)
    assert d["gap_avg_elapsed"] == pytest.approx(
        d["predicted_avg_elapsed_s"] / d["lower_bound_avg_elapsed_s"] - 1)
    assert d["gap"] > 1  # magpie funnels the WAN through one port per site
    assert d["lower_bound_time_s"] > 0 and d["lower_bound_time_s"] not in d["timings_s"].values()


# --- serial schedules (serial_lower_bound) ---------------------------------------------

SERIAL_ALGORITHMS = ("bdr", "bslb", "min3")  # min3: serial with arrivals on a cluster


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(2, 12), seed=st.integers(0, 2**32 - 1), nseg=st.integers(1, 3),
       nbytes=st.sampled_from([0, 1, 1000, 37448, 300_000]), full=st.booleans(),
       hosts=st.sampled_from(["homogeneous", "random"]),
       arrivals=st.sampled_from(["random", "two iterations", "one late"]))
def test_no_serial_schedule_beats_the_serial_bound(p, seed, nseg, nbytes, full, hosts, arrivals):
    """Every serial schedule, timed by the cost model, exits no earlier than the serial
    bound says, on homogeneous and random clusters, both duplex modes, with segments."""
    rng = np.random.default_rng(seed)
    topo = (homogeneous(p, latency_s=float(rng.uniform(1e-6, 1e-3)), bandwidth_Bps=float(10 ** rng.uniform(7, 10)))
            if hosts == "homogeneous" else random_topology(p, 1, rng, full, None, False))
    topo = topo.with_duplex(full)
    rows = 2 if arrivals == "two iterations" else 1
    pattern = rng.uniform(0, 0.01, (rows, p))
    if arrivals == "one late":
        pattern[0] = 0.0
        pattern[0, rng.integers(p)] = 0.02
    bound = serial_lower_bound(topo, nbytes, pattern)
    checked = 0
    for alg in SERIAL_ALGORITHMS:
        req = Request(p, nbytes=nbytes, nseg=nseg, full_duplex=full, topology=topo,
                      arrivals=pattern[0] - pattern[0].min())
        if REGISTRY[alg].check(req) is not None:
            continue  # bdr and bslb move whole blocks
        sched = generate(alg, req)
        if not sched.serial:
            continue
        sched = passes.apply(sched, topo, nbytes)
        m = simulate_pattern(sched, topo, nbytes, pattern)[2]
        assert m.run_time_s >= bound.run_time_s * (1 - SLACK), (alg, m.run_time_s, bound)
        assert m.avg_elapsed_s >= bound.avg_elapsed_s * (1 - SLACK), (alg, m.avg_elapsed_s, bound)
        checked += 1
    assert checked >= (2 if nseg == 1 else 0)  # bdr and bslb; min3 where its plan is serial


@pytest.mark.parametrize("p", [2, 5, 8, 13])
def test_serial_bound_is_exact_for_the_serial_ring(p):
    """Flat arrivals: bdr is the ring, run serially: P-1 steps of L + B/b each, which is
    the bound exactly (a bound counting B/b per receive, as the LP does, would be lower)."""
    lat, bw, nbytes = 5e-5, 1.25e8, 37448
    topo = homogeneous(p, latency_s=lat, bandwidth_Bps=bw)
    b = serial_lower_bound(topo, nbytes)
    assert b.run_time_s == pytest.approx((p - 1) * (lat + nbytes / bw), rel=1e-12)
    assert b.avg_elapsed_s == pytest.approx(b.run_time_s, rel=1e-12)
    sched = generate("bdr", Request(p, nbytes=nbytes, topology=topo, arrivals=np.zeros(p)))
    assert sched.serial
    m = simulate_pattern(sched, topo, nbytes, np.zeros((1, p)))[2]
    assert m.run_time_s == pytest.approx(b.run_time_s, rel=1e-9)
    if p > 2:  # (P - 2) latencies above the LP bound
        assert b.run_time_s > lower_bound(topo, nbytes).run_time_s * (1 + 1e-9)


def test_serial_bound_by_hand():
    """Three ranks, full duplex, L = 1, B/b = 2 (c = 3), arrivals 0, 0, 10: rank 0 takes
    rank 1's piece from 0 and rank 2's from 10: exit 13; likewise rank 1; rank 2 takes
    both from 0 (exit 6) but must still send its own from 10: exit 13. Half duplex: rank
    2's send joins its receives on the one port, which changes nothing here; arrivals 0,
    0, 1 make it bind: rank 2's port has three transfers to carry from 0: exit 9, not 6."""
    topo = homogeneous(3, latency_s=1.0, bandwidth_Bps=1.0)
    a = np.array([0.0, 0.0, 10.0])
    b = serial_lower_bound(topo, 2, a)
    assert b.run_time_s == pytest.approx(13.0)
    assert b.avg_elapsed_s == pytest.approx((13 + 13 + 3) / 3)
    half = topo.with_duplex(False)
    assert serial_lower_bound(half, 2, a).avg_elapsed_s == pytest.approx((13 + 13 + 3) / 3)
    a = np.array([0.0, 0.0, 1.0])
    assert serial_lower_bound(topo, 2, a).run_time_s == pytest.approx(max(1 + 3, 3 + 3))
    assert serial_lower_bound(half, 2, a).run_time_s == pytest.approx(3 * 3)


def test_serial_bound_bad_input_is_one_line():
    with pytest.raises(InputError, match="finite arrival times for 4 ranks"):
        serial_lower_bound(homogeneous(4), 100, [0, 1])
    with pytest.raises(InputError, match="non-negative integer"):
        serial_lower_bound(homogeneous(4), -1)


def test_compile_reports_the_serial_bound_for_serial_schedules(tmp_path):
    """compile --lower-bound: serial_lower_bound_* for a serial schedule (bdr, arrival-aware min3
    on a cluster), between the LP bound and the prediction; None for a dataflow one."""
    tryton = str(TOPOLOGIES / "tryton-48.yaml")
    pap = tmp_path / "a.yaml"
    pap.write_text("unit: ms\narrivals: [0, 0.9, 0.2, 0.6, 0.05, 1.0, 0.5, 0.15]\n")
    for alg in ("bdr", "min3"):
        d = compile_schedule(alg, 8, 37448, topology=tryton, pap=str(pap), lower_bound=True).summary()
        assert d["lower_bound_avg_elapsed_s"] < d["serial_lower_bound_avg_elapsed_s"] <= d["predicted_avg_elapsed_s"]
        assert d["serial_lower_bound_s"] <= d["predicted_run_time_s"]
    d = compile_schedule("ring", 8, 37448, topology=tryton, pap=str(pap), lower_bound=True).summary()
    assert d["serial_lower_bound_s"] is None and d["serial_lower_bound_avg_elapsed_s"] is None
