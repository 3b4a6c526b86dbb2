"""Min3-Allgather (Gupta & Vadhiyar 2007) and its arrival-aware form: every schedule is
valid and wide-area optimal for its pool tree, the scheduler plans what the simulator
predicts, background receives are leading receives before arrival, and it wins where the
paper and the BDR comparison say it should."""
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from contextlib import contextmanager

from collsched.inputs import pools
from collsched.algorithms import Request, generate
from collsched.algorithms.min3 import pool_schedule, schedule as min3_schedule
from collsched.inputs.arrivals import write_pap
from collsched.errors import InputError
from collsched.ir import BACKGROUND, RECV, SEND
from collsched.inputs.links import shared_links
from collsched.lab.arrivals import arrival_pattern
from collsched.pipeline import compile_schedule
from collsched import passes
from collsched.model.policy import serial_list_schedule
from collsched.model.simulate import simulate
from collsched.inputs.topology import homogeneous, load_topology
from collsched.verify import verify

from test_pools import draw_arrivals, draw_grid, grid_yaml, write_yaml

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


ENGINES = ("exact", "rounds", "ring")


@contextmanager
def engine(kind: str):
    """Schedule pools of single ranks exactly, or as large ones are: in the ring where it
    fits (full duplex, one arrival time), else in vectorized rounds ("rounds": always)."""
    saved = min3_schedule.EXACT_LEAF_LIMIT, min3_schedule.RING_ENGINE
    min3_schedule.EXACT_LEAF_LIMIT = 10**12 if kind == "exact" else 0
    min3_schedule.RING_ENGINE = kind == "ring"
    try:
        yield
    finally:
        min3_schedule.EXACT_LEAF_LIMIT, min3_schedule.RING_ENGINE = saved


def min3(topo, nbytes, arrivals=None, nseg=1, aggregate=None):
    p = topo.nranks
    s = generate("min3", Request(p, nbytes=nbytes, nseg=nseg, full_duplex=topo.full_duplex,
                                 topology=topo, arrivals=arrivals, aggregate=aggregate))
    s = passes.apply(s, topo, nbytes)  # as the pipeline does: receive gating, FIFO marks
    return s


def check_valid(s, topo):
    parts = pools.partitions(pools.pool_tree(topo))
    assert verify(s, parts) == []
    if s.has_background:
        assert verify(s, parts, serial=True) == []


def check_background(s, arrivals):
    """Background ops lead their rank's list, at ranks not first. They are receives, and in
    serial plans also relays (sends of other ranks' pieces); dataflow plans send nothing
    in the background, so their background receives come before the rank's first send."""
    rank = s.rank_of_op
    bg = s.phase == BACKGROUND
    bg_send = bg & (s.kind == SEND)
    assert np.all(s.origin[bg_send] != rank[bg_send])  # the own piece waits for the arrival
    if not s.serial:
        assert not bg_send.any()
    if bg.any():
        a = np.zeros(s.nranks) if arrivals is None else np.asarray(arrivals)
        assert np.all(a[rank[bg]] > a.min())
    for r in np.unique(rank[bg]):
        lo, hi = s.offsets[r], s.offsets[r + 1]
        assert np.all(bg[lo:lo + int(bg[lo:hi].sum())])  # a prefix of the list
        if not s.serial:
            first_send = lo + int(np.argmax(s.kind[lo:hi] == SEND))
            assert np.all(np.nonzero(bg[lo:hi])[0] + lo < first_send)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=grid_yaml(max_sites=4, max_hosts=5), data=st.data(), nbytes=st.integers(0, 2 << 20),
       nseg=st.integers(1, 3), imbalanced=st.booleans(), kind=st.sampled_from(ENGINES))
def test_random_grids_verify_and_match_the_simulator(tmp_path, doc, data, nbytes, nseg, imbalanced,
                                                     kind):
    topo = draw_grid(tmp_path, doc, data)
    arrivals = draw_arrivals(data, topo.nranks) if imbalanced else None
    with engine(kind):
        s = min3(topo, nbytes, arrivals, nseg)
    check_valid(s, topo)
    check_background(s, arrivals)
    check_prediction_against_plan(s, topo, nbytes, arrivals)


def check_prediction_against_plan(s, topo, nbytes, arrivals=None):
    """The greedy plans with the simulator's cost model and each rank's list in its port
    order, and only adds constraints (receive starts in order; every piece at the largest
    piece's size): the prediction is never later than the plan. Except on shared WAN links:
    the simulator serves one in the order its transfers become ready, and a transfer the
    greedy took late may be ready early and go first (the min3 module docstring); rare, and
    at most 5.6 % seen (test_shared_link_taken_early)."""
    tl, m = simulate(s, topo, nbytes, arrivals)
    planned = s.planned_run_time_s
    slack = 1.10 if shared_links(topo).any else 1 + 1e-9
    assert m.run_time_s <= planned * slack + 1e-12
    assert m.run_time_s >= planned * 0.5
    return m.run_time_s / planned if planned else 1.0


def test_shared_link_taken_early(tmp_path):
    """The one case hypothesis found where the simulator runs after the plan: rank 2's own
    piece to rank 1 is planned after rank 4's and 3's pieces on the shared link s1 -> s0 but
    is ready first, as in the runtime, and delays them by one transfer."""
    doc = {"name": "random-grid", "duplex": "full",
           "sites": [{"name": "s0", "hosts": 1, "lan": {"latency": "1us", "bandwidth": "100Mbit/s"}},
                     {"name": "s1", "hosts": 2, "lan": {"latency": "1us", "bandwidth": "208Mbit/s"}}],
           "wan": [{"between": ["s0", "s1"], "latency": "2ms", "bandwidth": "189Mbit/s"}],
           "placement": {"ranks_per_host": 2}}
    topo = load_topology(write_yaml(tmp_path, doc), 5)
    with engine("exact"):
        s = min3(topo, 66658, None, 3)
    check_valid(s, topo)
    assert 1.05 < check_prediction_against_plan(s, topo, 66658) < 1.06


@pytest.mark.xfail(strict=True, reason="known: the input-pool greedy plans the slow 2 ms "
                   "s1 -> s0 receives one after another (6.03 ms) where the schedule it writes "
                   "overlaps them (the model: 3.0 ms); the schedule is valid, only the plan's "
                   "own estimate is pessimistic. Found by hypothesis; present since before the "
                   "min3 split. Remove the mark when the greedy plans the overlap.")
def test_plan_not_twice_the_prediction_on_slow_wide_links(tmp_path):
    doc = {"name": "random-grid", "duplex": "full",
           "sites": [{"name": n, "hosts": h, "lan": {"latency": "1us", "bandwidth": "100Mbit/s"}}
                     for n, h in (("s0", 2), ("s1", 3), ("s2", 1), ("s3", 1))],
           "wan": [{"between": ["s0", "s1"], "latency": "2ms", "bandwidth": "1Mbit/s"},
                   {"between": ["s0", "s2"], "latency": "1ms", "bandwidth": "100Mbit/s"},
                   {"between": ["s0", "s3"], "latency": "1ms", "bandwidth": "1Mbit/s"},
                   {"between": ["s1", "s2"], "latency": "1ms", "bandwidth": "111Mbit/s"},
                   {"between": ["s1", "s3"], "latency": "1ms", "bandwidth": "1Mbit/s"},
                   {"between": ["s2", "s3"], "latency": "1ms", "bandwidth": "1Mbit/s"}],
           "placement": {"ranks_per_host": 2}}
    topo = load_topology(write_yaml(tmp_path, doc), 12)
    with engine("exact"):
        s = min3(topo, 1, None, 2)
    check_valid(s, topo)  # the schedule itself is right
    check_prediction_against_plan(s, topo, 1)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 30), nbytes=st.integers(1, 1 << 20), full=st.booleans(), data=st.data(),
       kind=st.sampled_from(ENGINES))
def test_homogeneous_clusters_with_arrivals(p, nbytes, full, data, kind):
    topo = homogeneous(p, full_duplex=full)
    tau = float(topo.transfer_time(nbytes)[0, 1])
    a = np.array(data.draw(st.lists(st.floats(0, 1), min_size=p, max_size=p))) * 5 * tau
    with engine(kind):
        s = min3(topo, nbytes, a)
    check_valid(s, topo)  # progress proven under the schedule's own rules (serial here)
    check_background(s, a)
    assert s.serial == (np.ptp(a) > 0)  # one flow fills a LAN port: serial where imbalanced
    _, m = simulate(s, topo, nbytes, a)
    # Nobody can finish before the last rank arrived and its block reached everyone.
    assert m.run_time_s >= np.ptp(a) + tau * (1 - 1e-9)
    # Every rank takes in P-1 blocks through one port.
    assert m.run_time_s >= (p - 1) * nbytes / topo.bandwidth[0, 1] * (1 - 1e-9)


def test_flat_homogeneous_reaches_the_receive_port_bound():
    """Ties go to ring predecessors: on a uniform LAN the greedy becomes a pipelined ring."""
    p, m = 28, 37448
    topo = load_topology(TOPOLOGIES / "tryton-48.yaml", p)
    s = min3(topo, m)
    _, mm = simulate(s, topo, m)
    bound = (p - 1) * m / topo.bandwidth[0, 1] + topo.latency[0, 1]
    assert mm.run_time_s == pytest.approx(bound, rel=1e-9)
    ring = generate("ring", Request(p))
    ring = passes.apply(ring, topo, m)
    assert mm.run_time_s < simulate(ring, topo, m)[1].run_time_s


def test_no_arrivals_no_background():
    topo = load_topology(TOPOLOGIES / "wan-3x16.yaml", 12)
    s = min3(topo, 4096)
    assert not s.has_background


def test_paper_three_site_grid_is_wide_area_optimal_and_fast():
    """Each block crosses UT<->Europe once and UK<->NTH once: 40 WAN transfers in all."""
    p, m = 20, 256 << 10
    topo = load_topology(TOPOLOGIES / "three-site-grid.yaml", p)
    for full in (True, False):
        t = topo.with_duplex(full)
        s = min3(t, m)
        check_valid(s, t)
        tl, mm = simulate(s, t, m)
        site = np.array([["UT", "UK", "NTH"].index(x) for x in t.rank_site()])
        wan = site[tl.src] != site[tl.dst]
        assert wan.sum() == 2 * p
        for alg in ("ring", "spreading", "bruck"):
            other = generate(alg, Request(p, full_duplex=full))
            other = passes.apply(other, t, m)
            assert mm.run_time_s < 0.5 * simulate(other, t, m)[1].run_time_s
            if alg != "ring":  # the ring enters each contiguous site once per block
                assert verify(other, pools.partitions(pools.pool_tree(t))) != [], \
                    f"{alg} is not wide-area optimal: the check must be able to fail"


def test_arrival_aware_beats_ring_and_bdr_on_tryton():
    """The BDR paper's setting: P = 28, 37448 B per rank, maxDelay = 5 ms (seeded pattern)."""
    p, m = 28, 37448
    topo = load_topology(TOPOLOGIES / "tryton-48.yaml", p)
    pattern = arrival_pattern(1, 3, p, 0.005)
    results = {"min3": [], "ring": [], "bdr": [], "spreading": []}
    for a in pattern:
        a = a - a.min()
        for alg in results:
            s = generate(alg, Request(p, nbytes=m, topology=topo, arrivals=a))
            s = passes.apply(s, topo, m)
            results[alg].append(simulate(s, topo, m, a)[1].avg_elapsed_s)
    mean = {k: np.mean(v) for k, v in results.items()}
    assert mean["min3"] < mean["bdr"] < mean["ring"]
    # Serial, with late ranks relaying in the background, the neediest receiver first on
    # ties: clearly ahead of the best regular algorithm (8.1 against 10.4 ms here, 0.78;
    # 0.82 with ties to the lower rank).
    assert mean["min3"] < 0.8 * mean["spreading"]
    # Knowing the pattern pays: compiled for flat arrivals, min3 does worse on it.
    a = pattern[0] - pattern[0].min()
    flat = min3(topo, m)
    assert simulate(flat, topo, m, a)[1].avg_elapsed_s > results["min3"][0]


def test_pipeline_checks_wide_area_and_round_trips(tmp_path):
    p = 20
    pap = tmp_path / "pap.yaml"
    write_pap(pap, [list(np.linspace(0, 0.2, p))], unit="s")
    res = compile_schedule("min3", p, 65536, topology=str(TOPOLOGIES / "three-site-grid.yaml"),
                           pap=str(pap), output=tmp_path / "m.sched")
    assert res.schedule.pool_partitions and res.schedule.has_background
    from collsched import schedfile
    back = schedfile.read(tmp_path / "m.sched")
    assert back.same_ops(res.schedule) and verify(back) == []


def test_segments_pipeline_pieces():
    topo = load_topology(TOPOLOGIES / "three-site-grid.yaml", 20)
    s1, s4 = min3(topo, 1 << 20), min3(topo, 1 << 20, nseg=4)
    check_valid(s4, topo)
    assert s4.nseg == 4 and s4.total_ops == 4 * s1.total_ops


def test_topology_with_other_rank_count_is_refused():
    with pytest.raises(InputError, match="places 8 ranks"):
        generate("min3", Request(4, nbytes=10, topology=homogeneous(8)))


def test_plan_is_in_greedy_time_order_per_port():
    """Each rank's sends start in list order (its send port is used in that order)."""
    topo = load_topology(TOPOLOGIES / "three-site-grid.yaml", 20)
    a = np.linspace(0, 0.3, 20)[::-1]
    s = min3(topo, 1 << 18, a)
    tl, _ = simulate(s, topo, 1 << 18, a)
    plan, _, _ = pool_schedule(Request(20, nbytes=1 << 18, topology=topo, arrivals=a))
    assert len(plan.src) == len(tl.src) == 20 * 19
    for r in range(20):
        starts = np.sort(tl.start[tl.src == r])
        assert np.all(np.diff(starts) >= 0)


def test_large_pool_engines_on_a_grid_are_close_to_exact():
    """wan-3x16 at 48 ranks: every engine valid; rounds and ring within 10% of the exact
    greedy."""
    topo = load_topology(TOPOLOGIES / "wan-3x16.yaml", 48)
    times = {}
    for kind in ENGINES:
        with engine(kind):
            s = min3(topo, 1 << 20)
        check_valid(s, topo)
        times[kind] = simulate(s, topo, 1 << 20)[1].run_time_s
    assert times["rounds"] <= 1.1 * times["exact"]
    assert times["ring"] <= 1.1 * times["exact"]


def test_ring_engine_on_sites_fed_over_shared_links():
    """grid-8x128's first 256 ranks (lyon and grenoble, 128 each), 64 KiB: the other site's
    pieces trickle in over one shared link. The ring (with backfilling between the WAN transfers) is valid, its
    plan is what the simulator predicts within 1 % (backfilled ops keep the port order the
    simulator sees), and it is well ahead of the round engine there."""
    topo = load_topology(TOPOLOGIES / "grid-8x128.yaml", 256)
    runs = {}
    for kind in ("rounds", "ring"):
        with engine(kind):
            s = min3(topo, 1 << 16)
        check_valid(s, topo)
        runs[kind] = simulate(s, topo, 1 << 16)[1].run_time_s
        if kind == "ring":
            assert runs[kind] == pytest.approx(s.planned_run_time_s, rel=0.01)
    assert runs["ring"] <= 0.8 * runs["rounds"]


def test_ring_engine_only_where_it_fits(monkeypatch):
    """The ring takes the large sites of a grid (full duplex, one arrival time); half
    duplex, unequal arrivals and a cluster that is one pool go to the round engine."""
    calls = []
    real = min3_schedule._schedule_ring
    monkeypatch.setattr(min3_schedule, "_schedule_ring",
                        lambda model, plan, holders, ranks, *a: calls.append(len(ranks))
                        or real(model, plan, holders, ranks, *a))
    grid = load_topology(TOPOLOGIES / "grid-8x128.yaml", 256)
    cases = [(grid, None, [128, 128]), (grid.with_duplex(False), None, []),
             (grid, np.linspace(0, 1e-3, 256), []), (homogeneous(256), None, [])]
    for topo, arrivals, expected in cases:
        calls.clear()
        with engine("ring"):
            s = min3(topo, 1 << 14, arrivals, aggregate=False)  # engines as before (no gateway plan)
        assert calls == expected
        check_valid(s, topo)


def test_serial_only_where_one_flow_fills_the_port():
    """policy.serial_list_schedule: imbalanced arrivals on a cluster, not flat arrivals and
    not window-capped WAN paths (where parallel flows fill the link)."""
    a = np.linspace(0, 0.004, 12)
    cluster = load_topology(TOPOLOGIES / "tryton-48.yaml", 12)
    assert serial_list_schedule(cluster, a)
    assert not serial_list_schedule(cluster, None)
    assert not serial_list_schedule(cluster, np.zeros(12))
    wan = load_topology(TOPOLOGIES / "wan-3x16.yaml", 48)  # three sites of 16
    assert not serial_list_schedule(wan, np.linspace(0, 0.004, 48))
    assert serial_list_schedule(load_topology(TOPOLOGIES / "wan-3x16.yaml", 12), a)  # one site
    assert min3(cluster, 37448, a).serial
    assert not min3(cluster, 37448).serial


def test_serial_plan_is_what_serial_execution_times():
    """Planned for serial execution, the plan and the simulator agree: the simulator times
    the schedule serially because it is marked so, with the same port rules."""
    p, m = 28, 37448
    topo = load_topology(TOPOLOGIES / "tryton-48.yaml", p)
    a = arrival_pattern(1, 1, p, 0.005)[0]
    a = a - a.min()
    s = min3(topo, m, a)
    tl, mm = simulate(s, topo, m, a)
    assert s.serial
    assert mm.run_time_s == pytest.approx(s.planned_run_time_s, rel=1e-9)
    # Late ranks relay early ranks' pieces before they arrive (background sends).
    relay = (tl.start < a[tl.src]) & (tl.origin != tl.src)
    assert relay.sum() > p


@contextmanager
def ungated():
    """Lists as before receive gating (passes.gate_link_receives): every op at its planned start."""
    saved = passes._gating_keys
    passes._gating_keys = lambda topo, full_duplex, src, dst, item, step, *rest: (step, None)
    try:
        yield
    finally:
        passes._gating_keys = saved


def per_rank(s, kind):
    """Each rank's ops of one kind, in list order: (peer, origin, segment)."""
    return [[(int(s.peer[i]), int(s.origin[i]), int(s.segment[i])) for i in range(lo, hi) if s.kind[i] == kind]
            for lo, hi in zip(s.offsets[:-1], s.offsets[1:])]


def test_link_receives_wait_for_the_link_as_planned():
    """Three-site grid, 1 MiB: the receives over shared WAN links wait behind the forward
    of the piece the link brought before, so the rendezvous transfers take the link one
    after another, as planned, instead of all at once: the fluid model (which matches
    SMPI) comes within 5% of the plan, and 5% or more ahead of the ungated lists."""
    from collsched.model.fluid import fluid_timeline

    topo = load_topology(TOPOLOGIES / "three-site-grid.yaml", 20)
    m = 1 << 20
    gated = min3(topo, m)
    with ungated():
        plain = min3(topo, m)
    check_valid(gated, topo)
    assert not gated.same_ops(plain)
    assert per_rank(gated, SEND) == per_rank(plain, SEND) and per_rank(gated, RECV) == per_rank(plain, RECV)
    fluid = {k: float(fluid_timeline(s, topo, m).exits.mean()) for k, s in (("gated", gated), ("plain", plain))}
    dag = float(simulate(gated, topo, m)[0].exits.mean())
    assert fluid["gated"] < 0.95 * fluid["plain"], fluid
    assert abs(fluid["gated"] / dag - 1) < 0.05, (fluid, dag)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=grid_yaml(max_sites=4, max_hosts=5), data=st.data(),
       nbytes=st.sampled_from([1 << 16, 300_000, 1 << 20]), nseg=st.integers(1, 2), imbalanced=st.booleans())
def test_gating_moves_receives_only_past_sends(tmp_path, doc, data, nbytes, nseg, imbalanced):
    """Each rank's receives keep their order, and so do its sends: gating only moves a
    receive past sends, so the schedule verifies and the cost model can time it."""
    topo = draw_grid(tmp_path, doc, data)
    arrivals = draw_arrivals(data, topo.nranks) if imbalanced else None
    gated = min3(topo, nbytes, arrivals, nseg)
    with ungated():
        plain = min3(topo, nbytes, arrivals, nseg)
    check_valid(gated, topo)
    for kind in (SEND, RECV):
        assert per_rank(gated, kind) == per_rank(plain, kind)
    simulate(gated, topo, nbytes, arrivals)  # no cycle in the model's port orders


def test_two_relays_of_a_piece_enter_a_pool_inside_once(tmp_path):
    """Hypothesis found it: on this grid (11 ranks, two per host) piece 1 was relayed at
    the top level through two ranks of one site, 1 -> 3 and 1 -> 4, so it entered that
    site (a pool inside the relays' sub-pool) twice. A relay's first hop may not enter a
    pool that already holds the piece (_enters_once)."""
    doc = {"name": "random-grid", "duplex": "full", "placement": {"ranks_per_host": 2},
           "sites": [{"name": f"s{i}", "hosts": h, "lan": {"latency": "1us", "bandwidth": "100Mbit/s"}}
                     for i, h in enumerate((1, 2, 2, 1))],
           "wan": [{"between": [f"s{a}", f"s{b}"], "latency": "1ms", "bandwidth": f"{bw}Mbit/s"}
                   for a, b, bw in ((0, 1, 3), (0, 2, 1), (0, 3, 1), (1, 2, 2), (1, 3, 1), (2, 3, 2))]}
    topo = load_topology(write_yaml(tmp_path, doc), 11)
    for k in (1, 2):
        check_valid(min3(topo, 291, None, k), topo)


def test_min3_neither_verifies_nor_gates_itself():
    """Receive gating and the FIFO marks are pipeline passes (collsched.passes): no module
    of the algorithm imports the verifier, the passes or the FIFO marking."""
    import ast

    package = Path(min3_schedule.__file__).parent
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text())
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names.add(node.module or "")
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
        assert not {n.rpartition(".")[2] for n in names} & {"verify", "passes", "mark_fifo_links"}, path
