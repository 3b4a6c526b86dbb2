"""Both cost models of intergroup schedules (intergroup/timing.py) and their bounds on a
topology (intergroup/bounds.py): on a homogeneous cluster the DAG model is the paper's
model (cost.simulate, dataflow) where latency cannot pipeline, both models are exactly it
for Algorithm 1 with p = q; no prediction of any plan beats the lower bounds; the fluid
model shares a NIC between the flows that cross it and caps each at the TCP window; a
shared WAN link between the groups' sites makes the cut bound the binding one; 512 ranks
are timed in seconds."""
import dataclasses
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched.errors import InputError
from collsched.inputs.topology import homogeneous, load_topology
from collsched.intergroup import A, B, PLANS, Groups, Plan, PlanInfo, Transfer, simulate
from collsched.intergroup.bounds import bounds, paper_rates
from collsched.intergroup.schedule import from_plan
from switches import c_kernels
from collsched.intergroup.timing import _time_fluid, match_transfers, predict

HYP = settings(max_examples=40, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
T_W = 1e-9  # 1 GB/s
REL = 1e-9  # float noise: the models add m / b where cost.simulate adds m * t_w


@st.composite
def groups(draw, max_ranks=10, max_block=300_000):
    """Two groups of 1..max_ranks ranks, equal blocks or arbitrary vectors, some data."""
    p, q = draw(st.integers(1, max_ranks)), draw(st.integers(1, max_ranks))
    block = st.integers(0, max_block)
    if draw(st.booleans()):
        g = Groups.equal(p, q, draw(block), draw(block))
    else:
        g = Groups(tuple(draw(st.lists(block, min_size=p, max_size=p))),
                   tuple(draw(st.lists(block, min_size=q, max_size=q))))
    return g if g.total(A) + g.total(B) else Groups.equal(p, q, 1, 1)


def cluster(g, t_s=0.0, full_duplex=True):
    return homogeneous(g.nranks, latency_s=t_s, bandwidth_Bps=1 / T_W, full_duplex=full_duplex)


# ---- the DAG model is the paper's model on a homogeneous cluster without latency ---------

@HYP
@given(groups(), st.sampled_from(sorted(PLANS)))
def test_dag_is_the_papers_model_without_latency(g, name):
    """With t_s = 0 the DAG model's rules (ports in list order, data from the receives that
    first bring it, pairs, rendezvous) are the paper's single-port model's, duplicates
    (MPICH's broadcast ring) included: neither waits for them."""
    plan = PLANS[name](g)
    paper = simulate(g, plan.transfers, t_s=0.0, t_w=T_W).finish
    dag = predict(from_plan(plan), cluster(g), "dag").run_time_s
    assert dag == pytest.approx(paper, rel=REL, abs=1e-15)


@HYP
@given(st.integers(1, 12), st.integers(0, 1 << 20), st.sampled_from([0.0, 2e-6, 50e-6]),
       st.sampled_from(["kang", "kang-v"]))
def test_both_models_are_the_papers_for_algorithm1_with_p_equal_q(n, k, t_s, name):
    """p = q, equal blocks: every port carries one message at a time and every message
    waits for the one before it on its chain, so neither latency pipelining (DAG) nor
    sharing (fluid) changes anything: both models give the paper's time, t_s included."""
    g = Groups.equal(n, n, k, k)
    plan = PLANS[name](g)
    paper = simulate(g, plan.transfers, t_s=t_s, t_w=T_W).finish
    topo = cluster(g, t_s)
    for model in ("dag", "fluid"):
        assert predict(from_plan(plan), topo, model).run_time_s == pytest.approx(paper, rel=REL)


def test_latency_pipelines_in_the_dag_model():
    """Where a port carries several messages in a row, the DAG model frees it after the
    bytes (os = m / b) and lets the next message's latency overlap: faster than the paper's
    t_s + m t_w per message, never faster than its bytes."""
    g = Groups.equal(5, 3, 4096, 4096)
    plan = PLANS["kang"](g)
    t_s = 50e-6
    paper = simulate(g, plan.transfers, t_s=t_s, t_w=T_W).finish
    no_latency = simulate(g, plan.transfers, t_s=0.0, t_w=T_W).finish
    dag = predict(from_plan(plan), cluster(g, t_s), "dag").run_time_s
    assert no_latency + t_s <= dag < paper


# ---- the lower bounds hold for every plan and model ----------------------------------

@HYP
@given(groups(max_ranks=8), st.sampled_from(sorted(PLANS)), st.sampled_from([0.0, 50e-6]),
       st.booleans())
def test_no_prediction_beats_the_lower_bound(g, name, t_s, full_duplex):
    topo = cluster(g, t_s, full_duplex)
    b = bounds(g, topo)
    sched = from_plan(PLANS[name](g))
    for model in ("dag", "fluid"):
        assert predict(sched, topo, model).run_time_s >= b["lower_bound"] * (1 - REL)
    assert b["lower_bound"] == max(b["M"], b["cut"])


@HYP
@given(groups(max_ranks=12))
def test_m_on_a_homogeneous_cluster_is_the_papers(g):
    """M = t_s + max(K_A, K_B) t_w; the paper's bounds read t_s and t_w off the cluster."""
    topo = cluster(g, 50e-6)
    b = bounds(g, topo)
    assert (b["t_s"], b["t_w"]) == pytest.approx((50e-6, T_W))
    assert b["M"] == pytest.approx(50e-6 + max(g.total(A), g.total(B)) * T_W, rel=REL)
    assert b["M_paper"] == pytest.approx(b["M"], rel=REL)
    assert b["eq1"] <= b["eq2"]


def test_no_data_no_time():
    g = Groups.equal(3, 2, 0, 0)
    b = bounds(g, cluster(g, 50e-6))
    assert b["M"] == b["cut"] == b["lower_bound"] == 0.0 and b["eq5_ratio"] is None
    sched = from_plan(PLANS["kang"](g))
    assert sched.total_ops == 0
    for model in ("dag", "fluid"):
        assert predict(sched, cluster(g, 50e-6), model).run_time_s == 0.0


@HYP
@given(st.integers(1, 10), st.integers(1, 10), st.integers(1, 1 << 16), st.integers(1, 1 << 16))
def test_algorithm1_meets_its_derived_bound_in_the_dag_model(p, q, ka, kb):
    """cost.kang_bound plus one t_s per message of the busiest chain: plan_kang's DAG-model
    time on a homogeneous cluster stays within it (latency only pipelines)."""
    g = Groups.equal(p, q, ka, kb)
    topo = cluster(g, 50e-6)
    dag = predict(from_plan(PLANS["kang"](g)), topo, "dag").run_time_s
    assert dag <= bounds(g, topo)["kang"] * (1 + REL)


# ---- sharing: NICs, the TCP window, a WAN link between the groups --------------------

@HYP
@given(groups(max_ranks=9), st.sampled_from(sorted(PLANS)), st.booleans())
def test_local_sharing_is_the_global_max_min(g, name, full_duplex):
    """fluid._share_flows(local=True) solves the sharing again only for the flows connected
    to those that started or ended: the same times as solving it for every flow."""
    tr = match_transfers(from_plan(PLANS[name](g)))
    topo = cluster(g, 50e-6, full_duplex)
    a = np.zeros(g.nranks)
    with c_kernels(False):  # the Python paths' two solves (the C kernel has one for both)
        local, whole = _time_fluid(tr, topo, a, False), _time_fluid(tr, topo, a, False, False)
    for x, y in zip(local, whole):
        assert x == pytest.approx(y, rel=REL, abs=1e-15)


def fan(m):
    """a_0 sends its block to b_0 and b_1 and receives both of theirs: every list issues
    both of a_0's sends at once (rule 2: own data), so its NIC carries two flows each way."""
    g = Groups((m,), (m, m))
    ts = (Transfer(0, 0, 1, A, 0, m), Transfer(0, 0, 2, A, 0, m),
          Transfer(0, 1, 0, B, 0, m), Transfer(0, 2, 0, B, m, 2 * m))
    return g, from_plan(Plan(g, ts, PlanInfo("fan")))


def test_two_flows_sharing_a_nic_take_twice_as_long():
    m, t_s = 1 << 20, 50e-6
    g, sched = fan(m)
    topo = cluster(g, t_s)
    fluid = predict(sched, topo, "fluid")
    assert fluid.end == pytest.approx(np.full(4, t_s + 2 * m * T_W), rel=REL)
    dag = predict(sched, topo, "dag")  # the port takes them one after the other
    assert sorted(dag.end[dag.transfers.src == 0]) == pytest.approx(
        [t_s + m * T_W, t_s + 2 * m * T_W], rel=REL)
    assert fluid.run_time_s == pytest.approx(dag.run_time_s, rel=REL)
    one = Groups((m,), (m,))
    alone = predict(from_plan(PLANS["kang"](one)), cluster(one, t_s), "fluid")
    assert alone.run_time_s == pytest.approx(t_s + m * T_W, rel=REL)


def test_the_tcp_window_caps_each_flow_not_the_nic():
    """A window of b L / 2 caps one flow at b / 4: two flows from one NIC each still get
    b / 4, so the fan takes as long as one flow would."""
    m, t_s = 1 << 20, 50e-6
    g, sched = fan(m)
    topo = dataclasses.replace(cluster(g, t_s), tcp_window=t_s / T_W / 2)
    cap = topo.flow_bandwidth()[0, 1]
    assert cap == pytest.approx(1 / T_W / 4)
    fluid = predict(sched, topo, "fluid")
    assert fluid.end == pytest.approx(np.full(4, t_s + m / cap), rel=REL)


def two_sites(tmp_path, p, q, wan="100Mbit/s"):
    path = tmp_path / "sites.yaml"
    path.write_text(
        "name: two-sites\nduplex: full\nsites:\n"
        f"  - {{name: A, hosts: {p}, lan: {{latency: 5us, bandwidth: 10Gbit/s}}}}\n"
        f"  - {{name: B, hosts: {q}, lan: {{latency: 5us, bandwidth: 10Gbit/s}}}}\n"
        f"wan:\n  - {{between: [A, B], latency: 1ms, bandwidth: {wan}}}\n")
    return load_topology(path, p + q)


def test_a_wan_link_between_the_groups_binds_the_cut(tmp_path):
    """Groups on two sites joined by one 100 Mbit/s link: all of A's data crosses it once,
    so K_A / 12.5 MB/s bounds every plan, far above M; the paper's t_s and t_w are the
    link's (the slowest pair)."""
    g = Groups.equal(6, 4, 1 << 18, 1 << 18)
    topo = two_sites(tmp_path, 6, 4)
    b = bounds(g, topo)
    assert (b["t_s"], b["t_w"]) == pytest.approx((1e-3, 1 / 12.5e6))
    assert b["cut"] == pytest.approx(1e-3 + g.total(A) / 12.5e6, rel=REL)
    assert b["lower_bound"] == b["cut"] > 5 * b["M"]
    for name in PLANS:
        sched = from_plan(PLANS[name](g))
        for model in ("dag", "fluid"):
            assert predict(sched, topo, model).run_time_s >= b["cut"] * (1 - REL)


# ---- the result: per-operation times, arrivals, errors, scale ------------------------

@HYP
@given(groups(max_ranks=7, max_block=5000), st.sampled_from(sorted(PLANS)))
def test_each_send_waits_for_exactly_the_new_receives_meeting_its_range(g, name):
    """match_transfers' vectorised dependency search against the rule read literally: the
    earlier receives of the sender's list, of the same group, whose ranges meet the send's,
    duplicates left out (a receive meeting the own block or an earlier receive: rule 4)."""
    sched = from_plan(PLANS[name](g))
    tr = match_transfers(sched)
    recv_of_op = {int(op): t for t, op in enumerate(tr.recv_op)}

    def meets(i, j):
        return (sched.group[i] == sched.group[j] and sched.lo[i] < sched.hi[j]
                and sched.lo[j] < sched.hi[i])

    for r in range(sched.nranks):
        own_g, own_lo, own_hi = g.own_range(r)
        first, new = int(sched.offsets[r]), []  # the rank's new receives so far
        for op in range(first, int(sched.offsets[r + 1])):
            if op in recv_of_op:
                earlier = [i for i in range(first, op) if i in recv_of_op]
                own = sched.group[op] == own_g and sched.lo[op] < own_hi and own_lo < sched.hi[op]
                if not own and not any(meets(i, op) for i in earlier):
                    new.append(op)
                continue
            t = int(np.nonzero(tr.send_op == op)[0][0])
            assert sorted(tr.needs(t)) == sorted(recv_of_op[i] for i in new if meets(i, op))


def test_per_operation_times_and_the_gantt_chart(tmp_path):
    g = Groups.equal(5, 3, 40_000, 70_000)
    sched = from_plan(PLANS["kang-v"](g))
    topo = load_topology("topologies/tryton-48.yaml", g.nranks)
    timing = predict(sched, topo, "dag")
    start, end = timing.op_times(sched.total_ops)
    tr = match_transfers(sched)
    assert np.array_equal(start[tr.send_op], start[tr.recv_op])
    assert np.all(end > start)
    for r in range(sched.nranks):  # full duplex: each port in list order
        ops = np.arange(sched.offsets[r], sched.offsets[r + 1])
        for kind in (0, 1):
            mine = ops[sched.kind[ops] == kind]
            assert np.all(np.diff(start[mine]) >= 0)
    assert timing.exits.max() == pytest.approx(end.max())
    from collsched import plot
    plot.gantt(timing.timeline, "kang-v 5:3", tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 0


@HYP
@given(groups(max_ranks=6), st.sampled_from(sorted(PLANS)),
       st.lists(st.floats(0, 1e-3), min_size=12, max_size=12))
def test_late_arrivals_never_speed_anything_up(g, name, late):
    """The DAG model is a max-plus system: later arrivals give later (or equal) exits, and
    each rank leaves after it arrives."""
    sched = from_plan(PLANS[name](g))
    topo = cluster(g, 50e-6)
    a = np.array(late[:g.nranks])
    flat, delayed = predict(sched, topo, "dag"), predict(sched, topo, "dag", a)
    assert np.all(delayed.exits >= flat.exits * (1 - REL))
    assert np.all(delayed.exits >= a)
    assert delayed.avg_elapsed_s == pytest.approx(float(np.mean(delayed.exits - a)))
    assert delayed.run_time_s == pytest.approx(float(delayed.exits.max() - a.min()))


def test_bad_input_is_one_clear_error():
    g = Groups.equal(3, 2, 100, 100)
    sched = from_plan(PLANS["kang"](g))
    with pytest.raises(InputError, match="nranks: expected 5 ranks"):
        predict(sched, homogeneous(6), "dag")
    with pytest.raises(InputError, match="model"):
        predict(sched, homogeneous(5), "loggp")
    with pytest.raises(InputError, match="arrivals"):
        predict(sched, homogeneous(5), "dag", [0.0, 1.0])
    with pytest.raises(InputError, match="nranks"):
        bounds(g, homogeneous(4))
    assert paper_rates(homogeneous(5, 2e-6, 1e9)) == pytest.approx((2e-6, 1e-9))


def test_512_ranks_predict_in_seconds():
    g = Groups.equal(256, 256, 1 << 20, 1 << 20)
    sched = from_plan(PLANS["kang"](g))
    topo = homogeneous(512)
    t0 = time.perf_counter()
    timing = predict(sched, topo, "dag")
    elapsed = time.perf_counter() - t0
    # 2-3 s on an idle 2-core machine; the limit leaves room for a loaded one and still
    # catches anything quadratic (minutes).
    assert elapsed < 30, f"{elapsed:.1f} s for {sched.total_ops} operations"
    # Algorithm 1, p = q: one exchange round and p - 1 ring steps of k bytes and latency.
    assert timing.run_time_s == pytest.approx(256 * (50e-6 + (1 << 20) / 125e6), rel=REL)
