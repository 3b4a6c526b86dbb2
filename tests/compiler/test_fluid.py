"""The fluid cost model (fluid.py): it agrees with the DAG model where one flow at a time
crosses every port, shares ports and links max-min fairly (weighted by 1 / latency) where
flows overlap, follows the executor's walk, and completes every schedule the compiler
emits, serial and dataflow, with and without arrivals."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from collsched.algorithms import Request, generate
from collsched.errors import InputError
from collsched.model.fluid import _max_min, fluid_pattern, fluid_timeline, simulate_fluid
from collsched.ir import from_op_lists
from collsched.pipeline import compile_schedule, simulate_file
from collsched.model.simulate import simulate
from collsched.inputs import msgcosts
from collsched.inputs.topology import homogeneous, load_topology

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def test_weighted_max_min_by_hand():
    # Two flows through one resource of 12: weights 1 and 2 get 4 and 8.
    assert _max_min([0, 1], [((0, 1.0),), ((0, 1.0),)], [np.inf, np.inf], [1.0, 2.0], [12.0]) == {0: 4.0, 1: 8.0}
    # A capped flow leaves the rest to the other: caps 3 and inf on 12 -> 3 and 9.
    assert _max_min([0, 1], [((0, 1.0),), ((0, 1.0),)], [3.0, np.inf], [1.0, 1.0], [12.0]) == {0: 3.0, 1: 9.0}
    # Flow 1 crosses two resources; the tighter one (6, shared with flow 2) decides it.
    rates = _max_min([0, 1, 2], [((0, 1.0),), ((0, 1.0), (1, 1.0)), ((1, 1.0),)],
                     [np.inf] * 3, [1.0] * 3, [10.0, 6.0])
    assert rates == {0: 7.0, 1: 3.0, 2: 3.0}


def test_two_sends_at_once_share_the_port():
    """One rank sends its piece to two others at once: both end at L + 2m/b (the DAG model
    ends the first at L + m/b)."""
    topo = homogeneous(3)
    lists = [[("send", 1, 0, 0), ("send", 2, 0, 0), ("recv", 1, 1, 0), ("recv", 2, 2, 0)],
             [("recv", 0, 0, 0), ("send", 0, 1, 0), ("send", 2, 1, 0), ("recv", 2, 2, 0)],
             [("recv", 0, 0, 0), ("recv", 1, 1, 0), ("send", 0, 2, 0), ("send", 1, 2, 0)]]
    s = from_op_lists(3, 1, lists)
    m = 1 << 20
    L, b = float(topo.latency[0, 1]), float(topo.bandwidth[0, 1])
    tl = fluid_timeline(s, topo, m)
    from0 = tl.src == 0
    assert np.allclose(tl.end[from0], L + 2 * m / b, rtol=1e-12)


def test_a_synchronous_send_waits_for_its_receive():
    """Serial schedules send synchronously (PMPI_Issend), so even an eager-sized message
    moves only once the receiver's chain has posted its receive: rank 2 takes rank 0's
    piece, then rank 1's, one after the other, not both at once sharing its port."""
    topo = homogeneous(3)
    lists = [[("send", 2, 0, 0), ("recv", 2, 2, 0), ("send", 1, 0, 0), ("recv", 1, 1, 0)],
             [("send", 2, 1, 0), ("recv", 2, 2, 0), ("recv", 0, 0, 0), ("send", 0, 1, 0)],
             [("recv", 0, 0, 0), ("recv", 1, 1, 0), ("send", 0, 2, 0), ("send", 1, 2, 0)]]
    s = from_op_lists(3, 1, lists)
    m = 4096  # far below the eager limit
    L, b = float(topo.latency[0, 1]), float(topo.bandwidth[0, 1])
    s.serial = False
    tl = fluid_timeline(s, topo, m)
    into2 = tl.dst == 2
    assert np.allclose(tl.end[into2], L + 2 * m / b, rtol=1e-12)  # eager: both at once
    s.serial = True
    tl = fluid_timeline(s, topo, m)
    assert np.allclose(np.sort(tl.end[into2]), [L + m / b, 2 * (L + m / b)], rtol=1e-12)
    _, dag = simulate(s, topo, m)
    _, fl = simulate_fluid(s, topo, m)
    assert fl.avg_elapsed_s == pytest.approx(dag.avg_elapsed_s, rel=1e-9)


def test_arrival_aware_min3_on_tryton_agrees_with_the_dag_model():
    """The serial plan min3 makes for a cluster with arrivals (one flow per port at a time):
    both models time it alike, as SMPI does (docs/benchmarks.md, lab-tryton: 1.00)."""
    path = str(TOPOLOGIES / "tryton-48.yaml")
    topo = load_topology(path, 28)
    a = np.random.default_rng(1).uniform(0, 0.005, 28)
    s = generate("min3", Request(nranks=28, nbytes=37448, nseg=1, full_duplex=True,
                                 topology=topo, arrivals=a - a.min()))
    assert s.serial
    _, dag = simulate(s, topo, 37448, a)
    _, fl = simulate_fluid(s, topo, 37448, a)
    assert fl.avg_elapsed_s == pytest.approx(dag.avg_elapsed_s, rel=0.02)


@pytest.mark.parametrize("alg,p", [("ring", 7), ("ring", 8), ("ring", 16), ("nex", 8), ("nex", 16)])
def test_one_flow_per_port_agrees_with_the_dag_model(alg, p):
    """Ring and neighbor exchange keep one flow in each port at a time, one message per peer
    and step: both models time them alike. (Not rd: there a FIFO send holds back the walk,
    and so the posting of the next step's receives, which only the fluid model replays.)"""
    topo = homogeneous(p)
    s = compile_schedule(alg, p, 1 << 18).schedule
    rng = np.random.default_rng(p)
    for a in (np.zeros(p), rng.uniform(0, 0.002, p)):
        _, dag = simulate(s, topo, 1 << 18, a)
        _, fl = simulate_fluid(s, topo, 1 << 18, a)
        assert fl.avg_elapsed_s == pytest.approx(dag.avg_elapsed_s, rel=1e-9)
        assert fl.run_time_s == pytest.approx(dag.run_time_s, rel=1e-9)


def test_binomial_root_shares_its_port_and_is_slower_than_the_dag_model():
    """lnbc's root feeds its children side by side (the DAG model serves them in turn): the
    case the model check found 20% off (docs/lab.md)."""
    topo = load_topology(TOPOLOGIES / "tryton-48.yaml", 16)
    s = compile_schedule("lnbc", 16, 1 << 20, topology=str(TOPOLOGIES / "tryton-48.yaml")).schedule
    _, dag = simulate(s, topo, 1 << 20)
    _, fl = simulate_fluid(s, topo, 1 << 20)
    assert fl.avg_elapsed_s > 1.2 * dag.avg_elapsed_s


@settings(max_examples=40, deadline=None)
@given(alg=st.sampled_from(["ring", "nex", "lnbc", "bruck", "spreading", "bdr", "bslb", "min3", "magpie"]),
       p=st.integers(2, 12), nbytes=st.sampled_from([0, 1, 4099, 65536, 1 << 20]),
       imbalanced=st.booleans(), topo_name=st.sampled_from(["tryton-48", "wan-3x16", "three-site-grid"]),
       seed=st.integers(0, 10**6))
def test_every_schedule_completes_and_flows_obey_their_bounds(alg, p, nbytes, imbalanced, topo_name, seed):
    path = str(TOPOLOGIES / f"{topo_name}.yaml")
    topo = load_topology(path, p)
    try:
        s = compile_schedule(alg, p, nbytes, topology=path).schedule
    except InputError:  # an algorithm that does not serve this request (nex at odd P)
        assume(False)
    a = np.random.default_rng(seed).uniform(0, 0.01, p) if imbalanced else np.zeros(p)
    tl = fluid_timeline(s, topo, nbytes, a)
    assert np.isfinite(tl.end).all()
    # No transfer beats its latency plus its bytes at its own cap, or starts before its
    # sender arrived (a foreground send) - nor does anything run backwards.
    cap = topo.flow_bandwidth()[tl.src, tl.dst]
    lat = topo.latency[tl.src, tl.dst]
    assert np.all(tl.end >= tl.start + lat + tl.nbytes / cap - 1e-12)
    assert np.all(tl.exits >= a)
    again = fluid_timeline(s, topo, nbytes, a)
    assert again.end.tobytes() == tl.end.tobytes()  # deterministic


def test_simulate_file_and_pattern_take_the_fluid_model(tmp_path):
    out = tmp_path / "l.sched"
    compile_schedule("lnbc", 8, 1 << 20, topology=str(TOPOLOGIES / "tryton-48.yaml"), output=out)
    topo = load_topology(TOPOLOGIES / "tryton-48.yaml", 8)
    _, per_iter, mean, _ = simulate_file(out, topology=str(TOPOLOGIES / "tryton-48.yaml"), model="fluid")
    _, direct = simulate_fluid(compile_schedule("lnbc", 8, 1 << 20, topology=str(TOPOLOGIES / "tryton-48.yaml")).schedule,
                               topo, 1 << 20)
    assert mean.avg_elapsed_s == direct.avg_elapsed_s
    pattern = np.array([np.zeros(8), np.linspace(0, 0.01, 8)])
    _, iters, avg = fluid_pattern(compile_schedule("ring", 8, 1 << 16).schedule, homogeneous(8), 1 << 16, pattern)
    assert len(iters) == 2 and avg.avg_elapsed_s == pytest.approx(np.mean([m.avg_elapsed_s for m in iters]))
    with pytest.raises(InputError):
        simulate_file(out, model="nope")


@pytest.mark.parametrize("alg", ["ring", "nex", "lnbc", "bruck", "spreading"])
def test_three_site_grid_completes(alg):
    """Regression: a rounding residue in a resource's load once its flows were gone kept the
    filling loop from ever finishing (nex on three-site-grid)."""
    path = str(TOPOLOGIES / "three-site-grid.yaml")
    s = compile_schedule(alg, 20, 1 << 16, topology=path).schedule
    _, m = simulate_fluid(s, load_topology(path, 20), 1 << 16)
    assert np.isfinite(m.avg_elapsed_s) and m.avg_elapsed_s > 0


def test_compile_predicts_with_either_model(tmp_path):
    path = str(TOPOLOGIES / "tryton-48.yaml")
    dag = compile_schedule("lnbc", 8, 1 << 20, topology=path)
    fl = compile_schedule("lnbc", 8, 1 << 20, topology=path, model="fluid")
    assert dag.summary()["model"] == "dag" and fl.summary()["model"] == "fluid"
    assert fl.schedule.same_ops(dag.schedule)  # the same schedule, another prediction
    _, direct = simulate_fluid(dag.schedule, load_topology(path, 8), 1 << 20)
    assert fl.metrics.avg_elapsed_s == direct.avg_elapsed_s > dag.metrics.avg_elapsed_s
    with pytest.raises(InputError):
        compile_schedule("ring", 4, 64, model="nope")


# --- message-size-dependent costs (msgcosts.py) ---------------------------------------

def _with_table(topo, starts, lat, bw, weight_s=0.0):
    table = msgcosts.CostTable(tuple(starts), tuple(lat), tuple(bw))
    return topo.with_message_costs(msgcosts.build({"all": table}, topo.host_site, weight_s))


def _exchange(p=2):
    """Every rank sends its piece straight to every other: on two ranks, two flows that
    share nothing (full duplex)."""
    lists = [[("send", q, r, 0) for q in range(p) if q != r] + [("recv", q, q, 0) for q in range(p) if q != r]
             for r in range(p)]
    return from_op_lists(p, 1, lists)


@pytest.mark.parametrize("window", [None, 4000.0])
def test_one_flow_with_size_factors_by_hand(window):
    """One flow: latency L x latency_factor(m), then m at its rate x bandwidth_factor(m); the
    TCP window's cap window / 2L uses the unscaled L (SimGrid: network_cm02.cpp), so a
    4000 B window (2 MB/s over 1 ms, not 2 MB/s over 2-5 ms) leaves the NIC's 1 MB/s."""
    topo = dataclasses.replace(homogeneous(2, latency_s=1e-3, bandwidth_Bps=1e6), tcp_window=window)
    topo = _with_table(topo, (0, 1000, 100_000), (2.0, 3.0, 5.0), (0.5, 0.8, 1.0))
    s = _exchange()
    for m, lf, bf in ((500, 2.0, 0.5), (20_000, 3.0, 0.8), (200_000, 5.0, 1.0)):
        tl = fluid_timeline(s, topo, m)
        assert np.allclose(tl.end, 1e-3 * lf + m / (1e6 * bf), rtol=1e-12)
        assert np.array_equal(tl.nbytes, [m, m])  # the timeline keeps the real size
    # A window that binds: 1000 B / (2 x 1 ms) = 500 kB/s, times the bandwidth factor.
    slow = dataclasses.replace(topo, tcp_window=1000.0)
    tl = fluid_timeline(s, slow, 20_000)
    assert np.allclose(tl.end, 3e-3 + 20_000 / (5e5 * 0.8), rtol=1e-12)


def test_two_flows_share_a_nic_weighted_by_latency_and_weight_s(tmp_path):
    """Rank 0 sends to rank 1 (same site, L = 0.5 ms) and to rank 2 (other site, L = 2 ms) at
    once; ranks 1 and 2 arrive 10 s later, so nothing else moves meanwhile. Both flows
    cross rank 0's NIC (1 MB/s; the WAN link has 1 MB/s too). m = 20,000 B: latency factor
    3, bandwidth factor 0.8, so each is charged 25,000 B. With weight_s = 1000 B the sharing
    penalty is L + weight_s x sum(1 / b over the route's links): 0.5 ms + 1000 x 2 / 1e6 =
    2.5 ms (NIC up, NIC down) and 2 ms + 1000 x 3 / 1e6 = 5 ms (NIC up, WAN, NIC down): they
    share the NIC 2 : 1 (by 1 / L alone, 4 : 1).
    f1 moves alone from 1.5 ms to 6 ms (4,500 B), then at 666.7 kB/s: 20,500 B in 30.75 ms,
    ends at 36.75 ms; f2 moved 10,250 B at 333.3 kB/s meanwhile, the remaining 14,750 B at
    1 MB/s end at 51.5 ms (= 1.5 ms + 50,000 B / 1 MB/s)."""
    path = tmp_path / "t.yaml"
    path.write_text(
        "name: t\nduplex: full\nsites:\n"
        "  - {name: A, hosts: 2, lan: {latency: 500us, bandwidth: 8Mbit/s}}\n"
        "  - {name: B, hosts: 1, lan: {latency: 500us, bandwidth: 8Mbit/s}}\n"
        "wan:\n  - {between: [A, B], latency: 2ms, bandwidth: 8Mbit/s}\n"
        "message_costs:\n  weight_s: 1000\n  all:\n"
        "    - {from: 0, latency_factor: 2.0, bandwidth_factor: 0.5}\n"
        "    - {from: 10000, latency_factor: 3.0, bandwidth_factor: 0.8}\n")
    topo = load_topology(path, 3)
    assert topo.latency[0, 1] == pytest.approx(5e-4) and topo.latency[0, 2] == pytest.approx(2e-3)
    assert topo.shared_links.link_of[0, 2] >= 0  # the WAN link is on the route
    s = _exchange(3)
    late = np.array([0.0, 10.0, 10.0])
    tl = fluid_timeline(s, topo, 20_000, late)
    f1 = (tl.src == 0) & (tl.dst == 1)
    f2 = (tl.src == 0) & (tl.dst == 2)
    assert tl.end[f1][0] == pytest.approx(36.75e-3, rel=1e-9)
    assert tl.end[f2][0] == pytest.approx(51.5e-3, rel=1e-9)
    # weight_s 0: weights 1 / L, 4 : 1; f1 gets 800 kB/s from 6 ms on.
    plain = _with_table(topo, (0, 10_000), (2.0, 3.0), (0.5, 0.8))
    tl = fluid_timeline(s, plain, 20_000, late)
    assert tl.end[f1][0] == pytest.approx(6e-3 + 20_500 / 8e5, rel=1e-9)
    assert tl.end[f2][0] == pytest.approx(51.5e-3, rel=1e-9)


@pytest.mark.parametrize("topo_name,p", [("tryton-48", 16), ("wan-3x16", 12), ("three-site-grid", 20)])
def test_unit_factors_change_nothing(topo_name, p):
    """Factors of 1 and weight_s 0 give bit for bit what a topology without message_costs
    gives; the constant-cost path itself is the one the golden schedules and the model check
    were measured with."""
    path = str(TOPOLOGIES / f"{topo_name}.yaml")
    topo = load_topology(path, p)
    assert topo.message_costs is None
    unit = _with_table(topo, (0,), (1.0,), (1.0,))
    a = np.random.default_rng(p).uniform(0, 0.003, p)
    for alg in ("ring", "lnbc", "bruck", "spreading"):
        s = compile_schedule(alg, p, 1 << 16, topology=path).schedule
        for arr in (None, a):
            base, same = fluid_timeline(s, topo, 1 << 16, arr), fluid_timeline(s, unit, 1 << 16, arr)
            assert base.end.tobytes() == same.end.tobytes()
            assert base.exits.tobytes() == same.exits.tobytes()


def test_simgrid_smpi_preset_slows_a_ring_step_as_smpi_does():
    """tryton-48, one 64 KiB ring step: SimGrid's SMPI defaults scale the latency by 11.6436
    and the bandwidth by 0.940694 above 65,472 B (what SMPI measured: docs/lab.md); SMPI's 16-byte envelope rides along."""
    topo = load_topology(TOPOLOGIES / "tryton-48.yaml", 2)
    smpi = topo.with_message_costs(msgcosts.simgrid_smpi(topo.host_site))
    tl = fluid_timeline(_exchange(), smpi, 1 << 17)
    assert np.allclose(tl.end, 50e-6 * 11.6436 + ((1 << 17) + 16) / (125e6 * 0.940694), rtol=1e-12)


def test_simgrid_eager_small_messages_wait_for_their_receive_and_detach():
    """Under SimGrid's SMPI (simgrid_eager) a message below the eager limit moves only once
    its receive is posted (smpi/async-small-thresh 0) and is done for its sender at once
    (detached below smpi/send-is-detached-thresh); an MPI's eager protocol (the default)
    puts it on the wire at once. Rank 1 arrives 1 s late."""
    topo = homogeneous(2)
    L, b = float(topo.latency[0, 1]), float(topo.bandwidth[0, 1])
    s = _exchange()
    late = np.array([0.0, 1.0])
    for m in (4096, 1 << 17):
        eager, smpi = fluid_timeline(s, topo, m, late), fluid_timeline(s, topo, m, late, simgrid_eager=True)
        t01 = (smpi.src == 0)
        assert np.allclose(smpi.end[t01], 1.0 + L + m / b, rtol=1e-12)
        if m < topo.eager_limit:
            assert np.allclose(eager.end[t01], L + m / b, rtol=1e-12)
        else:  # a rendezvous message waits either way
            assert smpi.end.tobytes() == eager.end.tobytes()
    # Only rank 0 sends: detached, it is done at once; with the eager protocol at L + m/b.
    one = from_op_lists(2, 1, [[("send", 1, 0, 0)], [("recv", 0, 0, 0)]])
    assert fluid_timeline(one, topo, 4096).exits[0] == pytest.approx(L + 4096 / b, rel=1e-12)
    assert fluid_timeline(one, topo, 4096, simgrid_eager=True).exits[0] == 0.0
    assert fluid_timeline(one, topo, 1 << 17, simgrid_eager=True).exits[0] == pytest.approx(
        L + (1 << 17) / b, rel=1e-12)
