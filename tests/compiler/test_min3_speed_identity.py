"""The compiler's fast paths compute exactly what their general forms compute.

Several stages have two implementations of one computation, chosen by size for speed:
Min3's pool search on Python lists or on numpy arrays (with row classes), the simulator's
timing transfer by transfer or in numpy waves, the verifier's progress proof rank by rank or
in waves. Each pair must agree to the bit (schedules, times), not approximately.
"""
import copy
from pathlib import Path

import numpy as np
import pytest

from collsched.model import dag as dag_module, simulate as simulate_module
from collsched.algorithms import Request, min3 as min3_module
from collsched.algorithms.min3 import input_pool
from collsched.pipeline import compile_schedule
from collsched.model.simulate import simulate
from collsched.inputs.topology import load_topology
from collsched.verify import verify

from switches import c_kernels, dag_reference, setting

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def topo(name, p, duplex="full"):
    t = load_topology(TOPOLOGIES / f"{name}.yaml", p)
    return t.with_duplex(duplex == "full")


def plan_of(t, nbytes, arrivals, nseg=1):
    plan, _, model = min3_module.pool_schedule(
        Request(t.nranks, nbytes=nbytes, nseg=nseg, full_duplex=t.full_duplex, topology=t,
                arrivals=arrivals))
    return (tuple(c.tobytes() for c in plan.columns()),
            [getattr(model, a).tobytes() for a in ("send_free", "recv_free", "recv_after", "link_free")])


@pytest.mark.parametrize("name,p", [("three-site-grid", 20), ("wan-3x16", 48)])
@pytest.mark.parametrize("duplex", ["full", "half"])
def test_pool_search_on_lists_and_arrays_agree(name, p, duplex):
    t = topo(name, p, duplex)
    for arrivals in (np.zeros(p), np.linspace(0, 0.2, p)[::-1]):
        with setting(input_pool, "LIST_SEARCH_LIMIT", 10**9):
            lists = plan_of(t, 1 << 18, arrivals)
        with setting(input_pool, "LIST_SEARCH_LIMIT", -1):
            arrays = plan_of(t, 1 << 18, arrivals)
        assert lists == arrays


@pytest.mark.parametrize("algorithm,name,p", [("min3", "three-site-grid", 20), ("ring", "three-site-grid", 20),
                                              ("bruck", "wan-3x16", 48)])
@pytest.mark.parametrize("duplex", ["full", "half"])
def test_timing_in_python_and_in_waves_agree(algorithm, name, p, duplex):
    t = topo(name, p, duplex)
    s = compile_schedule(algorithm, p, 1 << 20, topology=str(TOPOLOGIES / f"{name}.yaml"), duplex=duplex).schedule
    arrivals = np.random.default_rng(p).uniform(0, 0.01, p)
    with c_kernels(False), dag_reference():
        tl_py, m_py = simulate(s, t, 1 << 20, arrivals)
    with c_kernels(False):
        tl_np, m_np = simulate(s, t, 1 << 20, arrivals)
    for a in ("start", "end", "exits"):
        assert getattr(tl_py, a).tobytes() == getattr(tl_np, a).tobytes()
    assert m_py == m_np


def test_progress_proof_by_ranks_and_in_waves_agree():
    """Valid schedules and ones made to deadlock by swapping ops get the same verdicts."""
    rng = np.random.default_rng(3)
    base = [compile_schedule(a, p, 65536).schedule for a, p in (("ring", 12), ("bruck", 12), ("bdr", 12), ("rd", 16))]
    deadlocks = 0
    for trial in range(200):
        s = base[trial % len(base)]
        s = copy.deepcopy(s)
        r = int(rng.integers(s.nranks))
        lo, hi = int(s.offsets[r]), int(s.offsets[r + 1])
        i, j = rng.integers(lo, hi, 2)
        for name in ("kind", "peer", "origin", "segment", "phase", "fifo"):
            a = getattr(s, name)
            a[i], a[j] = a[j], a[i]
        for serial in (False, True):
            fast = verify(s, serial=serial)
            with c_kernels(False):
                waves = verify(s, serial=serial)
            assert [str(v) for v in fast] == [str(v) for v in waves]
            deadlocks += any(v.check == "progress" for v in fast)
    assert deadlocks > 0  # the swaps did make some schedules deadlock


def test_flat_iteration_is_timed_once_and_alike():
    t = topo("three-site-grid", 20)
    res = compile_schedule("min3", 20, 1 << 18, topology=str(TOPOLOGIES / "three-site-grid.yaml"))
    tls, per_iter, _ = simulate_module.simulate_pattern(res.schedule, t, 1 << 18, np.zeros((2, 20)))
    tl, m = simulate(res.schedule, t, 1 << 18)
    for x in tls:
        assert x.end.tobytes() == tl.end.tobytes() and x.exits.tobytes() == tl.exits.tobytes()
    assert per_iter[0] == per_iter[1] == m


def test_receipt_by_table_and_by_sorting_agree():
    """Plan._receipt: the table for distinct keys, sorting otherwise (duplicates, misses)."""
    rng = np.random.default_rng(7)
    receipt = dag_module.Plan._receipt
    for trial in range(300):
        n, nkeys = int(rng.integers(1, 60)), int(rng.integers(1, 200))
        distinct = trial % 2 == 0 and n <= nkeys
        rkey = rng.permutation(nkeys)[:n] if distinct else rng.integers(0, nkeys, n)
        pool = rkey if trial % 3 else np.r_[rkey, rng.integers(0, nkeys, 3)]
        fkey = rng.choice(pool, int(rng.integers(1, 40)))
        srt = np.argsort(rkey, kind="stable")
        pos = np.searchsorted(rkey[srt], fkey)
        if (pos >= n).any():
            with pytest.raises(IndexError):
                receipt(rkey, fkey, nkeys)
            continue
        assert np.array_equal(receipt(rkey, fkey, nkeys), srt[pos])


@pytest.mark.parametrize("nseg", [1, 3, 4])
def test_os_and_gap_per_transfer_agree_with_the_loop(nseg):
    t = topo("three-site-grid", 20)
    s = compile_schedule("ring", 20, 1 << 20, topology=str(TOPOLOGIES / "three-site-grid.yaml"),
                         segments=nseg).schedule
    plan = dag_module.Plan(s, t, (1 << 20) + 1 - (nseg == 4))  # 4 divides, 3 does not
    for fn, got in ((plan.os, plan.os_all), (plan.g, plan.g_all)):
        loop = np.empty(plan.n)
        for size in np.unique(plan.nbytes):
            sel = plan.nbytes == size
            loop[sel] = fn(int(size))[sel]
        assert got.tobytes() == loop.tobytes()


def test_previous_in_list_agrees_with_binary_search():
    """Plan._previous_in_list by a running max against its searchsorted form."""
    rng = np.random.default_rng(11)
    for trial in range(200):
        total = int(rng.integers(1, 80))
        rank = np.sort(rng.integers(0, 5, total))
        eligible = rng.random(total) < rng.random()
        ops = np.sort(rng.choice(total, int(rng.integers(0, total + 1)), replace=False))
        tr_of_op = rng.permutation(total)
        idx = np.nonzero(eligible)[0]
        pos = np.searchsorted(idx, ops)
        want = np.full(len(ops), -1, np.int64)
        has = pos > 0
        cand = idx[np.maximum(pos - 1, 0)] if len(idx) else np.zeros(len(ops), np.int64)
        has &= rank[cand] == rank[ops]
        want[has] = tr_of_op[cand[has]]
        got = dag_module.Plan._previous_in_list(ops, rank, tr_of_op, eligible, total)
        assert np.array_equal(got, want)
