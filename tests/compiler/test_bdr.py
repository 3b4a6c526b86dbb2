"""BDR (Proficz 2021, Listing 2) as a compiled schedule: the paper's example, equivalence
with ring when nobody is late, validity for random arrival patterns, and the paper's bound."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from collsched.algorithms import Request, generate
from collsched.ir import BACKGROUND
from collsched.model.simulate import simulate
from collsched.inputs.topology import homogeneous
from collsched.verify import verify

M = 65536


def tau_of(topo):
    return float(topo.latency[0, 1] + M / topo.bandwidth[0, 1])


def test_paper_figure_4():
    """Process 0 late by 2 tau: it gets segments 1 and 2 in the background and needs one step."""
    p = 4
    topo = homogeneous(p)
    tau = tau_of(topo)
    a = np.array([2 * tau, 0, 0, 0])
    bdr = generate("bdr", Request(p, nbytes=M, topology=topo, arrivals=a))
    assert verify(bdr) == []
    bg = [(k, peer, o) for k, peer, o, _, ph in bdr.ops_of(0) if ph == "bg"]
    assert bg == [("recv", 1, 1), ("recv", 2, 2)]
    tl, m = simulate(bdr, topo, M, a)
    assert tl.exits[0] - a[0] == pytest.approx(tau)
    _, ring = simulate(generate("ring", Request(p)), topo, M, a)
    assert m.avg_elapsed_s < ring.avg_elapsed_s * 0.9


@settings(max_examples=60, deadline=None)
@given(p=st.integers(2, 40))
def test_flat_arrivals_give_exactly_the_ring(p):
    topo = homogeneous(p)
    bdr = generate("bdr", Request(p, nbytes=M, topology=topo, arrivals=np.zeros(p)))
    assert bdr.same_ops(generate("ring", Request(p)))


@settings(max_examples=120, deadline=None)
@given(p=st.integers(2, 48), data=st.data(), scale=st.floats(0.1, 20))
def test_random_patterns_verify_and_respect_the_paper_bound(p, data, scale):
    topo = homogeneous(p)
    tau = tau_of(topo)
    a = np.array(data.draw(st.lists(st.floats(0, 1), min_size=p, max_size=p))) * scale * tau
    bdr = generate("bdr", Request(p, nbytes=M, topology=topo, arrivals=a))
    assert verify(bdr) == []
    assert verify(bdr, serial=True) == []  # as the PAT engine runs it
    rank = bdr.rank_of_op
    # Background ops are receives of ranks that arrive later than someone else.
    bg = bdr.phase == BACKGROUND
    assert np.all(bdr.kind[bg] == 1)
    assert np.all(a[rank[bg]] > a.min())
    _, m_bdr = simulate(bdr, topo, M, a)
    _, m_ring = simulate(generate("ring", Request(p)), topo, M, a)
    assert m_bdr.avg_elapsed_s <= m_ring.avg_elapsed_s + (p - 2) * tau + 1e-12


def test_wrong_prediction_stays_correct_and_bounded():
    """Compiled for the first rank arriving first, run with it arriving last."""
    p = 8
    topo = homogeneous(p)
    tau = tau_of(topo)
    predicted = np.array([0] + [5 * tau] * (p - 1))
    actual = np.array([5 * tau] + [0] * (p - 1))
    bdr = generate("bdr", Request(p, nbytes=M, topology=topo, arrivals=predicted))
    assert verify(bdr) == [] and verify(bdr, serial=True) == []
    _, m_bdr = simulate(bdr, topo, M, actual)
    _, m_ring = simulate(generate("ring", Request(p)), topo, M, actual)
    assert m_bdr.avg_elapsed_s <= m_ring.avg_elapsed_s + (p - 2) * tau


def test_bdr_refuses_segments():
    from collsched.errors import InputError
    with pytest.raises(InputError, match="one segment"):
        generate("bdr", Request(4, nseg=2, topology=homogeneous(4)))


def test_serial_execution_is_proven_not_assumed():
    """Serial execution (the PAT engine's) deadlocks schedules that dataflow order runs:
    the verifier must say so rather than pass them."""
    s = generate("bruck", Request(5))
    assert verify(s) == []
    found = verify(s, serial=True)
    assert found and found[0].check == "progress" and "serial execution" in found[0].reason
