"""The replication lower bound (model/replication_bound.py): never above the DAG or the
fluid model's time of any registered algorithm (agg's multi-piece messages and min3
included), above the LP bound where replication binds, refusals in one line."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import passes
from collsched.algorithms import REGISTRY, Request, generate
from collsched.errors import InputError
from collsched.inputs.topology import homogeneous, load_topology
from collsched.model.fluid import fluid_pattern
from collsched.model.lowerbound import lower_bound
from collsched.model.replication_bound import combined_lower_bound, replication_lower_bound
from collsched.model.simulate import simulate_pattern
from pathlib import Path

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
SLACK = 1e-9


def pattern_of(kind: str, p: int, rng) -> np.ndarray:
    spread = 0.004
    if kind == "flat":
        return np.zeros(p)
    if kind == "uniform":
        return rng.uniform(0, spread, p)
    if kind == "one late":
        a = np.zeros(p)
        a[rng.integers(p)] = spread
        return a
    a = np.full(p, spread)  # all late but one
    a[rng.integers(p)] = 0.0
    return a


def min_piece(nbytes: int, nseg: int) -> int:
    """The smallest non-empty piece of a schedule with nseg segments per block."""
    return max(1, nbytes // nseg)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(2, 12), nbytes=st.sampled_from([1, 1000, 37448, 300_000]),
       nseg=st.integers(1, 4), full=st.booleans(), lat=st.sampled_from([1e-6, 50e-6, 1e-3]),
       bw=st.sampled_from([1e8, 125e6, 1e10]),
       kind=st.sampled_from(["flat", "uniform", "one late", "all late but one"]),
       seed=st.integers(0, 2**32 - 1))
def test_no_registered_algorithm_beats_the_bound(p, nbytes, nseg, full, lat, bw, kind, seed):
    rng = np.random.default_rng(seed)
    topo = homogeneous(p, latency_s=lat, bandwidth_Bps=bw, full_duplex=full)
    a = pattern_of(kind, p, rng)
    bounds = {}  # min_piece -> bound
    checked = 0
    for alg, entry in sorted(REGISTRY.items()):
        req = Request(p, nbytes=nbytes, nseg=nseg, full_duplex=full, topology=topo, arrivals=a)
        if entry.check(req) is not None:
            continue
        sched = passes.apply(generate(alg, req), topo, nbytes)
        m = min_piece(nbytes, sched.nseg)
        if m not in bounds:
            bounds[m] = replication_lower_bound(topo, nbytes, a, min_piece=m, run_time=True)
        b = bounds[m]
        for name, metrics in (("dag", simulate_pattern(sched, topo, nbytes, a[None, :])[2]),
                              ("fluid", fluid_pattern(sched, topo, nbytes, a[None, :])[2])):
            assert metrics.avg_elapsed_s >= b.avg_elapsed_s * (1 - SLACK) - SLACK * 1e-3, (alg, name, metrics, b)
            assert metrics.run_time_s >= b.run_time_s * (1 - SLACK) - SLACK * 1e-3, (alg, name, metrics, b)
        checked += 1
    assert checked >= 6
    assert "agg" in REGISTRY and "min3" in REGISTRY


def test_agg_multi_piece_messages_on_the_lab_pattern():
    """agg plans multi-piece messages at P = 12 on tryton-48 with an imbalanced pattern:
    the bound at its piece size stays below both models."""
    topo = load_topology(TOPOLOGIES / "tryton-48.yaml", 12)
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 0.005, 12)
    a -= a.min()
    for nseg in (1, 4):
        req = Request(12, nbytes=37448, nseg=nseg, topology=topo, arrivals=a, aggregate=True)
        sched = passes.apply(generate("agg", req), topo, 37448)
        b = replication_lower_bound(topo, 37448, a, min_piece=min_piece(37448, sched.nseg),
                                    run_time=True)
        dag = simulate_pattern(sched, topo, 37448, a[None, :])[2]
        fl = fluid_pattern(sched, topo, 37448, a[None, :])[2]
        assert dag.avg_elapsed_s >= b.avg_elapsed_s and fl.avg_elapsed_s >= b.avg_elapsed_s
        assert dag.run_time_s >= b.run_time_s and fl.run_time_s >= b.run_time_s


def test_replication_binds_where_one_rank_holds_everything_early():
    """All ranks late but one: the LP lets everybody forward block 0 from L on; with
    whole blocks (min_piece = B) a rank forwards only after receiving B bytes."""
    p, nbytes = 8, 100_000
    topo = homogeneous(p)
    a = np.full(p, 0.0008)  # one block time after rank 0 (0.8 ms at 100 kB, 1 Gbit/s)
    a[0] = 0.0
    lp = lower_bound(topo, nbytes, a)
    whole = replication_lower_bound(topo, nbytes, a, min_piece=nbytes)
    tiny = replication_lower_bound(topo, nbytes, a, min_piece=1)
    assert whole.avg_elapsed_s > lp.avg_elapsed_s * 1.05  # 5.59 against 5.05 ms
    assert whole.avg_elapsed_s >= tiny.avg_elapsed_s * (1 - 1e-6)
    assert tiny.avg_elapsed_s >= tiny.closed_form_avg_elapsed_s
    avg, run = combined_lower_bound(topo, nbytes, a, min_piece=nbytes)
    assert avg == max(lp.avg_elapsed_s, whole.avg_elapsed_s)


def test_flat_arrivals_match_the_known_optimum():
    """Flat arrivals on a homogeneous cluster: L + (P-1) B / b is met by spreading, so
    the bound may not exceed it."""
    p, nbytes = 6, 50_000
    topo = homogeneous(p)
    b = replication_lower_bound(topo, nbytes, None, min_piece=1)
    opt = 50e-6 + (p - 1) * nbytes / 125e6
    assert b.avg_elapsed_s <= opt * (1 + 1e-9)
    assert b.avg_elapsed_s >= opt * 0.999


def test_refusals_are_one_line():
    topo = homogeneous(4)
    with pytest.raises(InputError) as err:
        replication_lower_bound(topo, -1, None)
    assert "\n" not in str(err.value)
    with pytest.raises(InputError):
        replication_lower_bound(topo, 10, np.zeros(3))
    with pytest.raises(InputError):
        replication_lower_bound(topo, 10, None, min_piece=0)
    grid = load_topology(TOPOLOGIES / "three-site-grid.yaml")
    with pytest.raises(InputError) as err:
        replication_lower_bound(grid, 10, None)
    assert "one site" in str(err.value) and "\n" not in str(err.value)


def test_trivial_cases():
    assert replication_lower_bound(homogeneous(1), 100, None).avg_elapsed_s == 0.0
    assert replication_lower_bound(homogeneous(3), 0, None).avg_elapsed_s == 0.0
