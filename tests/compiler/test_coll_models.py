"""The cost models and lower bounds of alltoall / bcast / reduce / allreduce
(collectives/model.py, fluid.py, bounds.py) and the reduction cost input (inputs/compute.py)."""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsched.collectives.algorithms import CollRequest, generate
from collsched.collectives.bounds import lower_bound
from collsched.collectives.fluid import simulate_fluid
from collsched.collectives.model import segment_bytes, simulate
from collsched.collectives.program import Builder, from_op_lists
from collsched.errors import InputError
from collsched.inputs.compute import reduction_gamma, with_gamma
from collsched.inputs.topology import homogeneous, load_topology, write_topology

L, B = 50e-6, 125e6


# --- programs built by hand (the registry's come below when present) --------------------

def a2a_shift(p, nseg=1, order=None):
    b = Builder("alltoall", p, nseg)
    for k in (order or range(1, p)):
        for r in range(p):
            d = (r + k) % p
            b.add(k, r, d, [(r, d, s) for s in range(nseg)])
    return b.build()


def bcast_tree(p, parent, root=0, nseg=1):
    """parent[v] for v != root (any tree over 0..p-1, parents listed before children)."""
    b = Builder("bcast", p, nseg, root=root)
    depth = {root: 0}
    todo = [root]
    while todo:
        u = todo.pop(0)
        for v in range(p):
            if v != root and parent[v] == u:
                depth[v] = depth[u] + 1
                todo.append(v)
                for s in range(nseg):
                    b.add(depth[u] * nseg + s, u, v, [(0, 0, s)])
    return b.build()


def reduce_tree(p, parent, root=0):
    """Children reduce into parents, deepest first (commutative order)."""
    b = Builder("reduce", p, 1, root=root)
    depth = {root: 0}
    changed = True
    while changed:
        changed = False
        for v in range(p):
            if v not in depth and parent[v] in depth:
                depth[v] = depth[parent[v]] + 1
                changed = True
    top = max(depth.values())
    for v in sorted(depth, key=lambda x: -depth[x]):
        if v != root:
            b.add(top - depth[v], v, parent[v], [(0, 0, 0)], reduce=True)
    prog = b.build()
    prog.commutative_only = True
    return prog


def allreduce_ring(p):
    b = Builder("allreduce", p, p)
    for k in range(p - 1):
        for r in range(p):
            b.add(k, r, (r + 1) % p, [(0, 0, (r - k) % p)], reduce=True)
    for k in range(p - 1):
        for r in range(p):
            b.add(p + k, r, (r + 1) % p, [(0, 0, (r + 1 - k) % p)])
    prog = b.build()
    prog.commutative_only = True
    return prog


def both(prog, topo, **kw):
    return simulate(prog, topo, **kw), simulate_fluid(prog, topo, **kw)


# --- reduction cost input ------------------------------------------------------------------

def _topo_file(tmp_path, extra):
    src = load_topology("tryton-48", 4)
    path = tmp_path / "t.yaml"
    write_topology(src, path)
    path.write_text(path.read_text() + extra)
    return path


def test_gamma_default_zero_and_read(tmp_path):
    assert reduction_gamma(load_topology("tryton-48", 4)) == 0.0
    assert reduction_gamma(None) == 0.0
    t = load_topology(_topo_file(tmp_path, "reduction: {gamma_s_per_byte: 2.5e-10}\n"))
    assert t.reduction_gamma == pytest.approx(2.5e-10)
    t2 = load_topology(_topo_file(tmp_path, "reduction: {gamma_s_per_byte: 0.25ns}\n"))
    assert t2.reduction_gamma == pytest.approx(2.5e-10)


def test_gamma_written_back_and_in_digest(tmp_path):
    t = load_topology(_topo_file(tmp_path, "reduction: {gamma_s_per_byte: 1e-9}\n"))
    out = tmp_path / "o.yaml"
    write_topology(t, out)
    t2 = load_topology(out)
    assert t2.reduction_gamma == 1e-9 and t2.digest() == t.digest()
    assert t.digest() != load_topology("tryton-48", 4).digest()
    plain = tmp_path / "p.yaml"
    write_topology(load_topology("tryton-48", 4), plain)
    assert "reduction" not in plain.read_text()


@pytest.mark.parametrize("text, what", [
    ("reduction: {gamma_s_per_byte: -1}\n", "reduction.gamma_s_per_byte"),
    ("reduction: {gamma_s_per_byte: true}\n", "reduction.gamma_s_per_byte"),
    ("reduction: {gamma_s_per_byte: fast}\n", "reduction.gamma_s_per_byte"),
    ("reduction: {gamma_s_per_byte: 5}\n", "reduction.gamma_s_per_byte"),
    ("reduction: {}\n", "reduction.gamma_s_per_byte"),
    ("reduction: {gamma: 1e-9}\n", "reduction.gamma"),
    ("reduction: 3\n", "reduction"),
])
def test_gamma_errors_one_line(tmp_path, text, what):
    with pytest.raises(InputError) as e:
        load_topology(_topo_file(tmp_path, text))
    msg = str(e.value)
    assert "\n" not in msg and what in msg


# --- closed forms --------------------------------------------------------------------------

def test_ring_allreduce_closed_form_both_models():
    p, n = 8, 1 << 20
    topo = homogeneous(p, L, B)
    want = 2 * (p - 1) * (L + n / p / B)
    for t in both(allreduce_ring(p), topo, nbytes=n):
        assert t.run_time_s == pytest.approx(want, rel=1e-9)
        assert t.avg_elapsed_s == pytest.approx(want, rel=1e-9)


def test_gamma_serialised_on_the_receiving_host():
    p, n, g = 8, 1 << 20, 1e-9
    topo = with_gamma(homogeneous(p, L, B), g)
    base = simulate(allreduce_ring(p), homogeneous(p, L, B), nbytes=n).run_time_s
    t = simulate(allreduce_ring(p), topo, nbytes=n).run_time_s
    assert t == pytest.approx(base + (p - 1) * g * n / p, rel=1e-9)
    # Linear reduce, fluid: 7 flows share the root's NIC and end together, then the root
    # reduces them one after the other.
    prog = reduce_tree(p, [0] * p)
    f = simulate_fluid(prog, topo, nbytes=n).run_time_s
    assert f == pytest.approx(L + (p - 1) * n / B + (p - 1) * g * n, rel=1e-9)


def test_alltoall_shift_pipelines_on_ports():
    p, n = 8, 1 << 20
    topo = homogeneous(p, L, B)
    for t in both(a2a_shift(p), topo, nbytes=n):
        assert t.run_time_s == pytest.approx(L + (p - 1) * n / B, rel=1e-9)
    half = simulate(a2a_shift(p), topo.with_duplex(False), nbytes=n).run_time_s
    assert half > 1.9 * (p - 1) * n / B


def test_binomial_root_shares_its_port_in_the_fluid_model():
    p, n = 8, 1 << 20
    topo = homogeneous(p, L, B)
    parent = [0, 0, 0, 1, 0, 1, 2, 3]  # binomial from 0: 0->1,2,4; 1->3,5; 2->6; 3->7
    prog = bcast_tree(p, parent)
    d, f = both(prog, topo, nbytes=n)
    assert d.run_time_s == pytest.approx(3 * (n / B + L), rel=1e-9)  # 0 -> 1 -> 3 -> 7
    assert f.run_time_s > d.run_time_s * 1.5


def test_arrivals_rank_issues_nothing_before_it_arrives():
    p, n = 4, 1000
    topo = homogeneous(p, L, B)
    a = np.array([0.0, 0.0, 0.5, 0.0])
    for t in both(allreduce_ring(p), topo, nbytes=n, arrivals=a):
        assert t.finish_s.min() > 0.5  # everyone needs rank 2's contribution
        assert t.run_time_s == pytest.approx(t.finish_s.max())
        assert t.avg_elapsed_s == pytest.approx(np.mean(t.finish_s - a))


def test_segments_of_reductions_split_elements():
    prog = allreduce_ring(3)
    assert segment_bytes(prog, 40, 8) == [8, 16, 16]
    assert sum(segment_bytes(prog, 41, 8)) == 41  # not whole elements: bytes


def test_deterministic_and_errors():
    p = 6
    topo = load_topology("wan-3x16", p)
    prog = a2a_shift(p, 2)
    a = np.random.default_rng(3).uniform(0, 1e-3, p)
    x, y = simulate(prog, topo, nbytes=4096, arrivals=a), simulate(prog, topo, nbytes=4096, arrivals=a)
    assert np.array_equal(x.finish_s, y.finish_s)
    with pytest.raises(ValueError, match="topology"):
        simulate(prog, None, nbytes=1)
    bad = from_op_lists("bcast", 2, 1, [[("send", 1, [(0, 0, 0)])], []])
    for fn in (simulate, simulate_fluid):
        with pytest.raises(ValueError, match="1 sends but 0 receives"):
            fn(bad, homogeneous(2), nbytes=8)
    stuck = from_op_lists("allreduce", 2, 1, [
        [("recv-reduce", 1, [(0, 0, 0)]), ("send", 1, [(0, 0, 0)])],
        [("recv-reduce", 0, [(0, 0, 0)]), ("send", 0, [(0, 0, 0)])]])
    for fn in (simulate, simulate_fluid):
        with pytest.raises(ValueError, match="cannot complete"):
            fn(stuck, homogeneous(2), nbytes=1 << 20)


def test_fifo_waits_for_the_previous_message():
    lists = [[("send", 1, [(0, 0, 0)]), ("send", 1, [(0, 0, 1)], "fifo")],
             [("recv", 0, [(0, 0, 0)]), ("recv", 0, [(0, 0, 1)])]]
    prog = from_op_lists("bcast", 2, 2, lists)
    topo = homogeneous(2, L, B)
    t = simulate(prog, topo, nbytes=200).run_time_s
    assert t == pytest.approx(2 * (L + 100 / B), rel=1e-9)  # not pipelined: synchronous


def test_large_program_is_fast():
    p, chunks = 48, 11
    b = Builder("allreduce", p, p * chunks)
    for k in range(p - 1):
        for c in range(chunks):
            for r in range(p):
                b.add(k * chunks + c, r, (r + 1) % p, [(0, 0, ((r - k) % p) * chunks + c)], reduce=True)
    for k in range(p - 1):
        for c in range(chunks):
            for r in range(p):
                b.add((p + k) * chunks + c, r, (r + 1) % p, [(0, 0, ((r + 1 - k) % p) * chunks + c)])
    prog = b.build()
    assert prog.total_ops > 90_000
    topo = load_topology("tryton-48")
    t0 = time.process_time()  # CPU time: the machine is shared
    simulate(prog, topo, nbytes=16 << 20)
    assert time.process_time() - t0 < 3.0  # ~1.2 s


# --- lower bounds ------------------------------------------------------------------------

def test_bound_closed_forms():
    p, n = 8, 1 << 20
    topo = homogeneous(p, L, B)
    ar = lower_bound("allreduce", topo, nranks=p, nbytes=n)
    assert ar.terms["volume"] == pytest.approx(L + 2 * (p - 1) / p * n / B)
    a2a = lower_bound("alltoall", topo, nranks=p, nbytes=n)
    assert a2a.seconds == pytest.approx(L + (p - 1) * n / B)
    g = lower_bound("allreduce", with_gamma(topo, 1e-9), nranks=p, nbytes=n)
    assert g.terms["gamma"] == pytest.approx(1e-9 * (p - 1) * n / p)
    a = np.zeros(p)
    a[3] = 1.0
    late = lower_bound("bcast", topo, nranks=p, nbytes=n, root=3, arrivals=a)
    assert late.seconds >= 1.0 + L + n / B
    assert late.terms["avg_elapsed_s"] > 0
    with pytest.raises(ValueError):
        lower_bound("gather", topo, nranks=p, nbytes=n)


def test_bound_cut_on_a_grid():
    topo = load_topology("three-site-grid", 12)
    b = lower_bound("alltoall", topo, nranks=12, nbytes=1 << 16)
    assert any(k.startswith("cut:") for k in b.terms)
    assert b.seconds == max(v for k, v in b.terms.items() if k not in ("avg_elapsed_s", "run_time_s"))


def test_bound_site_set_cut_on_a_full_mesh_of_sites():
    """three-site-grid is a full mesh of three sites: no single link is a cut, but each
    site set is. An allreduce must move n bytes out of every site set: the bound is at
    least the best set's n over its outgoing capacity (and the grid allreduce stays
    above it)."""
    topo = load_topology("three-site-grid", 12)
    n = 1 << 20
    b = lower_bound("allreduce", topo, nranks=12, nbytes=n)
    cut = [v for k, v in b.terms.items() if k.startswith("cut:sites:")]
    assert cut and b.seconds == max(cut)
    links = topo.shared_links
    assert b.seconds > n / float(np.asarray(links.bandwidth).sum())
    prog = generate("hier", CollRequest("allreduce", 12, n, 1, topology=topo))
    for t in both(prog, topo, nbytes=n):
        assert b.seconds <= t.run_time_s


TOPOS = ["homogeneous", "tryton-48", "wan-3x16", "three-site-grid", "hub-3site"]


def _topo(name, p, gamma, half):
    t = homogeneous(p, L, B) if name == "homogeneous" else load_topology(name, p)
    t = with_gamma(t, gamma)
    return t.with_duplex(False) if half else t


def _check_bound(prog, topo, nbytes, arrivals):
    d, f = both(prog, topo, nbytes=nbytes, arrivals=arrivals)
    b = lower_bound(prog.collective, topo, nranks=prog.nranks, nbytes=nbytes, root=prog.root,
                    arrivals=arrivals)
    for t in (d, f):
        assert b.seconds <= t.run_time_s * (1 + 1e-9), (b.terms, t.run_time_s)
        assert b.terms["avg_elapsed_s"] <= t.avg_elapsed_s * (1 + 1e-9), (b.terms, t.avg_elapsed_s)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_bound_below_both_models_hand_built(data):
    p = data.draw(st.integers(2, 9))
    topo = _topo(data.draw(st.sampled_from(TOPOS)), p, data.draw(st.sampled_from([0.0, 1e-9])),
                 data.draw(st.booleans()))
    nbytes = data.draw(st.sampled_from([0, 1, 1000, 70_000, 1 << 20]))
    kind = data.draw(st.sampled_from(["a2a", "bcast", "reduce", "ring"]))
    root = data.draw(st.integers(0, p - 1))
    if kind == "a2a":
        order = data.draw(st.permutations(list(range(1, p))))
        prog = a2a_shift(p, data.draw(st.integers(1, 3)), order)
    elif kind in ("bcast", "reduce"):
        others = data.draw(st.permutations([v for v in range(p) if v != root]))
        parent = [0] * p
        placed = [root]
        for v in others:
            parent[v] = data.draw(st.sampled_from(placed))
            placed.append(v)
        prog = bcast_tree(p, parent, root, data.draw(st.integers(1, 3))) if kind == "bcast" \
            else reduce_tree(p, parent, root)
    else:
        prog = allreduce_ring(p)
    arrivals = None
    if data.draw(st.booleans()):
        arrivals = np.array(data.draw(st.lists(st.floats(0, 0.01), min_size=p, max_size=p)))
    _check_bound(prog, topo, nbytes, arrivals)


def _registered():
    try:
        from collsched.collectives.algorithms import names
    except ImportError:
        return []
    return [(c, n) for c in ("alltoall", "bcast", "reduce", "allreduce") for n in names(c)]


@pytest.mark.skipif(not _registered(), reason="no registered algorithms yet")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_bound_below_both_models_registered(data):
    from collsched.collectives.algorithms import CollRequest, generate

    collective, name = data.draw(st.sampled_from(_registered()))
    p = data.draw(st.integers(2, 12))
    topo = _topo(data.draw(st.sampled_from(TOPOS)), p, data.draw(st.sampled_from([0.0, 5e-10])), False)
    nbytes = data.draw(st.sampled_from([64, 4096, 100_000, 1 << 20]))
    arrivals = None
    if data.draw(st.booleans()):
        arrivals = np.array(data.draw(st.lists(st.floats(0, 0.005), min_size=p, max_size=p)))
    req = CollRequest(collective, p, nbytes=nbytes, nseg=data.draw(st.integers(1, 4)),
                      root=data.draw(st.integers(0, p - 1)) if collective in ("bcast", "reduce") else 0,
                      topology=topo, arrivals=arrivals)
    try:
        prog = generate(name, req)
    except InputError:
        return  # the algorithm refuses this request
    _check_bound(prog, topo, nbytes, arrivals)


TWO_SITES = """name: two-sites
sites:
  - {name: A, hosts: 2, lan: {latency: 5us, bandwidth: 10Gbit/s}}
  - {name: B, hosts: 1, lan: {latency: 5us, bandwidth: 10Gbit/s}}
wan:
  - {between: [A, B], latency: 20ms, bandwidth: 10Gbit/s}
placement: {hosts: [A-0, B-0, A-1]}
"""


def test_lan_message_lands_during_a_wan_latency(tmp_path):
    """Rank 2 (site A) receives from rank 1 (site B, 20 ms away) first in its list, then
    from rank 0 (its own site): the LAN message is not held behind the WAN one."""
    path = tmp_path / "two.yaml"
    path.write_text(TWO_SITES)
    topo = load_topology(path)
    lists = [[("send", 2, [(0, 2, 0)])], [("send", 2, [(1, 2, 0)])],
             [("recv", 1, [(1, 2, 0)]), ("recv", 0, [(0, 2, 0)])]]
    prog = from_op_lists("alltoall", 3, 1, lists)
    d, f = both(prog, topo, nbytes=1000)
    for t in (d, f):
        assert t.finish_s[0] < 1e-3 < 0.02 < t.finish_s[2] < 0.021


def test_simgrid_detached_sends_let_a_root_leave_at_once():
    p, nseg = 4, 64
    b = Builder("bcast", p, nseg)
    for s in range(nseg):
        for r in range(p - 1):
            b.add(s + r, r, r + 1, [(0, 0, s)])
    prog = b.build()
    topo = load_topology("tryton-48", p)
    smpi = simulate_fluid(prog, topo, nbytes=1 << 20, simgrid_eager=True)
    mpi = simulate_fluid(prog, topo, nbytes=1 << 20)
    assert smpi.finish_s[0] == 0.0 < mpi.finish_s[0]
    # SMPI (CM02, collsched-coll-bench, the registry's chain@64, 2026-11-27): run time
    # 10.672 ms, with ranks 1-3 arriving 50 us after the root
    assert smpi.run_time_s == pytest.approx(0.010672, rel=0.01)
    big = simulate_fluid(prog, topo, nbytes=64 << 20, simgrid_eager=True)  # 1 MiB segments
    assert big.finish_s[0] > 0.0


def test_alltoall_average_bound_counts_a_late_senders_staircase():
    p, n = 8, 1 << 20
    topo = homogeneous(p, L, B)
    a = np.zeros(p)
    a[7] = 1.0  # the others wait for rank 7's blocks, which leave it one after the other
    b = lower_bound("alltoall", topo, nranks=p, nbytes=n, arrivals=a)
    assert b.terms["avg_elapsed_s"] >= (7 + 35 * n / B) / 8 * (1 - 1e-12)
    for t in both(a2a_shift(p), topo, nbytes=n, arrivals=a):
        assert b.terms["avg_elapsed_s"] <= t.avg_elapsed_s
