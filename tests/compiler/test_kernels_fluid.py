"""The fluid model's sharing in C (kernels/fluid.c, driven by model/fluid_share.py) ends
every flow when model.fluid._share_flows does: the same finish times within a relative
1e-9 (not bit for bit: where _max_min fixes several flows at one level it subtracts their
rates in a set's order, the kernel in the flows' start order), the same batches handed to
the callback (but no empty one), on random networks (flows crossing several resources with coefficients,
caps, weights, flows that start as others end) against both the global solve and
local=True, and whole fluid timelines on the lab's topologies."""
import heapq
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import kernels
from collsched.pipeline import compile_schedule
from collsched.inputs.topology import load_topology
from collsched.model import fluid, fluid_share

from switches import c_kernels, setting

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
RTOL = 1e-9


def test_fluid_kernel_is_built_and_loaded():
    assert kernels.status() == "c", kernels.status()
    assert fluid_share.available()
    with c_kernels(False):
        assert not fluid_share.available()


def run(share, case, **kw):
    """Times `case` with a sharing loop: each flow's finish and the batches that ended."""
    n = len(case["size"])
    finish = [math.inf] * n
    starts = [(t, f) for f, t in enumerate(case["first"]) if t is not None]
    heapq.heapify(starts)
    batches = []

    def ended(flows, now):
        batches.append((now, sorted(flows)))
        for f in flows:  # a flow's followers become ready a delay after it ends
            for g, delay in case["after"].get(f, ()):
                heapq.heappush(starts, (now + delay, g))

    net = SimpleNamespace(resources=case["resources"], capacity=case["capacity"])
    share(net, starts, case["size"], case["cap"], case["weight"], finish, ended, **kw)
    return finish, batches


def assert_same(fast, ref):
    (f1, b1), (f2, b2) = fast, ref
    b2 = [(t, b) for t, b in b2 if b]  # share_flows makes no empty calls (flows only started)
    assert np.allclose(f1, f2, rtol=RTOL, atol=0), max(
        abs(a - b) / max(abs(b), 1e-300) for a, b in zip(f1, f2) if a != b)
    assert [b for _, b in b1] == [b for _, b in b2]
    assert np.allclose([t for t, _ in b1], [t for t, _ in b2], rtol=RTOL, atol=0)


@st.composite
def networks(draw):
    """Flows over a few resources (some with none: loopback), each crossing up to four with
    a coefficient, some of them capped; each flow ready at a time or after another ends."""
    nres = draw(st.integers(1, 6))
    n = draw(st.integers(1, 24))
    dyadic = st.integers(1, 64).map(lambda k: k / 8)  # exact sums: ties stay ties
    capacity = [draw(dyadic) * 1e6 for _ in range(nres)]
    resources, size, cap, weight, first, after = [], [], [], [], [], {}
    for f in range(n):
        crossed = draw(st.lists(st.integers(0, nres - 1), max_size=4, unique=True))
        coef = st.sampled_from([1.0, 1.0, 0.5, 2.0, 1.5])
        resources.append(tuple((r, draw(coef)) for r in crossed))
        size.append(draw(st.sampled_from([0.0, 1.0, 4096.0, 1e5, 3e6, 2.5e5])))
        cap.append(draw(st.sampled_from([math.inf, math.inf, 1e6, 2.5e5])) if crossed else
                   draw(st.sampled_from([1e6, 4e5])))
        weight.append(draw(st.sampled_from([1.0, 1.0, 2.0, 1 / 3, 1e4])))
        if f and draw(st.booleans()):
            first.append(None)
            after.setdefault(draw(st.integers(0, f - 1)), []).append(
                (f, draw(st.sampled_from([0.0, 1e-6, 3e-3]))))
        else:
            first.append(draw(st.sampled_from([0.0, 0.0, 1e-3, 0.25, 0.1])))
    return dict(resources=resources, capacity=capacity, size=size, cap=cap, weight=weight,
                first=first, after=after)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(networks())
def test_random_networks_global(case):
    with c_kernels(False):
        ref = run(fluid._share_flows, case)
    assert_same(run(fluid_share.share_flows, case), ref)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(networks())
def test_random_networks_local(case):
    """local=True (_share_flows_local, as the intergroup models run it): the kernel's global
    solve gives its rates; finish times within the tolerance (batches may split where the
    two loops' tolerances differ, so only the times are compared)."""
    f1, _ = run(fluid_share.share_flows, case, local=True)
    with c_kernels(False):
        f2, _ = run(fluid._share_flows, case, local=True)
    assert np.allclose(f1, f2, rtol=RTOL, atol=0)


def test_nothing_can_move_leaves_flows_unfinished():
    """A flow on a resource of no capacity never ends, as in the Python loop."""
    case = dict(resources=[((0, 1.0),), ((1, 1.0),)], capacity=[0.0, 1e6], size=[1e3, 1e3],
                cap=[math.inf] * 2, weight=[1.0, 1.0], first=[0.0, 0.0], after={})
    with c_kernels(False):
        ref = run(fluid._share_flows, case)
    fast = run(fluid_share.share_flows, case)
    assert fast[0][0] == ref[0][0] == math.inf and fast[0][1] == ref[0][1] == 1e-3


def timelines(s, topo, nbytes, arrivals):
    with c_kernels(False):
        ref = fluid.fluid_timeline(s, topo, nbytes, arrivals)
    with setting(fluid, "_share_flows", fluid_share.share_flows):
        fast = fluid.fluid_timeline(s, topo, nbytes, arrivals)
    return fast, ref


@pytest.mark.parametrize("name,p", [("tryton-48", 16), ("wan-3x16", 12), ("three-site-grid", 12),
                                    ("four-site", 12), ("hub-3site", 9)])
@pytest.mark.parametrize("alg,nbytes,nseg", [("ring", 1 << 20, 1), ("bruck", 64 << 10, 1),
                                             ("lnbc", 1 << 20, 2), ("min3", 4 << 20, 4),
                                             ("min3", 256 << 10, 2)])
def test_lab_topologies(name, p, alg, nbytes, nseg):
    path = str(TOPOLOGIES / f"{name}.yaml")
    topo = load_topology(path, p)
    s = compile_schedule(alg, p, nbytes, topology=path, segments=nseg, model="dag").schedule
    rng = np.random.default_rng(p)
    for arrivals in (None, rng.uniform(0, 2e-3, p)):
        fast, ref = timelines(s, topo, nbytes, arrivals)
        for a, b in ((fast.start, ref.start), (fast.end, ref.end), (fast.exits, ref.exits)):
            assert np.allclose(a, b, rtol=RTOL, atol=0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 9), st.integers(1, 9), st.integers(0, 300_000), st.booleans(),
       st.sampled_from(["kang", "kang-v", "root-gather", "root-gather-mpich"]))
def test_intergroup_fluid_model(p, q, block, full_duplex, name):
    """The intergroup models' fluid timing (_share_flows(local=True)) on the kernel."""
    from collsched.inputs.topology import homogeneous
    from collsched.intergroup import PLANS, Groups
    from collsched.intergroup.schedule import from_plan
    from collsched.intergroup.timing import _time_fluid, match_transfers
    g = Groups.equal(p, q, block, block + 1)
    tr = match_transfers(from_plan(PLANS[name](g)))
    topo = homogeneous(g.nranks, latency_s=50e-6, bandwidth_Bps=1e9, full_duplex=full_duplex)
    a = np.zeros(g.nranks)
    with c_kernels(False):
        ref = _time_fluid(tr, topo, a, False)
    with setting(fluid, "_share_flows", fluid_share.share_flows):
        fast = _time_fluid(tr, topo, a, False)
    for x, y in zip(fast, ref):
        assert np.allclose(x, y, rtol=RTOL, atol=0)


def test_no_flow_and_no_resource():
    case = dict(resources=[], capacity=[], size=[], cap=[], weight=[], first=[], after={})
    assert run(fluid_share.share_flows, case) == ([], [])
    case = dict(resources=[()], capacity=[], size=[8.0], cap=[4.0], weight=[1.0], first=[1.0],
                after={})
    assert run(fluid_share.share_flows, case) == ([3.0], [(3.0, [0])])


def test_bind_checks_the_arguments_once():
    """kernels.bind: the wrapper's checks when bound (types, names), none per call."""
    z = np.zeros(1)
    with pytest.raises(TypeError, match="missing"):
        kernels.bind(kernels.fluid_step, n=1)
    fields = {name: z for name in kernels.parse_prototypes(
        kernels.HEADER.read_text())["fluid_step"].names}
    fields.update(n=1, nres=1)
    with pytest.raises(TypeError, match="int64 array"):
        kernels.bind(kernels.fluid_step, **fields)
    with pytest.raises(TypeError, match="not a kernel's wrapper"):
        kernels.bind(print, **fields)


def test_a_flow_made_ready_twice_is_refused():
    """Each flow starts once (the kernel's arrays hold n): a callback that pushes one again,
    or a flow that is not one of the n, is a caller's bug the kernel reports."""
    for again in (0, 2):
        case = dict(resources=[((0, 1.0),), ((0, 1.0),)], capacity=[1e6], size=[1e3, 1e3],
                    cap=[math.inf] * 2, weight=[1.0, 1.0], first=[0.0, None],
                    after={0: [(1, 0.0), (again, 0.0)]})
        with pytest.raises(RuntimeError, match="fluid_step failed"):
            run(fluid_share.share_flows, case)
