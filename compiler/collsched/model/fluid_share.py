"""The fluid model's flow sharing in C: model.fluid._share_flows on the kernel fluid_step.

fluid.py's event loop solves the max-min sharing of every flow in progress at each event
in Python (_max_min), which is most of the fluid model's time. share_flows takes the same
arguments and keeps the same callback protocol, but the flows in progress, their rates
and the heap of starts live in the kernel's arrays (kernels/fluid.c): per event, Python
hands over the flows its callback made ready, and gets back the time and the flows that
ended. The same finish times as _share_flows within a relative 1e-9, most often to the bit
(where several flows are fixed at one level, the kernel takes their rates off the
resources in another order: tests/compiler/test_kernels_fluid.py compares the two), at a
fraction of the cost.
"""
from __future__ import annotations

import numpy as np

from .. import kernels


def available() -> bool:
    """Whether share_flows can run (the kernels are built, current and enabled)."""
    return kernels.available()


def _csr(resources) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flow f's (resource, coefficient) pairs as rid[roff[f]:roff[f + 1]], rcoef[...]."""
    roff = np.zeros(len(resources) + 1, np.int64)
    roff[1:] = np.cumsum([len(res) for res in resources])
    flat = [x for res in resources for x in res]
    rid = np.array([r for r, _ in flat], np.int64)
    rcoef = np.array([c for _, c in flat], np.float64)
    return roff, rid, rcoef


def share_flows(net, starts, size, cap, weight, finish, ended, local=False):
    """model.fluid._share_flows(net, starts, size, cap, weight, finish, ended, local) on the
    kernel: from the heap `starts` of (time its bytes begin, flow), move the flows at their
    max-min fair rates over net.resources (per flow, (resource, coefficient) pairs) with
    net.capacity until none is left; set finish[f] as each ends and call ended(flows, now)
    for every batch that ends together (it may push more flows on `starts`). Unlike
    _share_flows, it does not call ended([], now) at an event where flows only start: the
    callers' callbacks do nothing with no flow.

    local: accepted for _share_flows' signature. _share_flows_local solves again only the
    flows connected to those that changed, which gives the rates of a global solve; the
    kernel solves every flow in progress at each event, cheaply, so one path serves both.
    """
    del local  # the same rates (see above)
    n = len(size)
    resources, capacity = net.resources, np.asarray(net.capacity, np.float64)
    roff, rid, rcoef = _csr(resources)
    cap, weight = np.asarray(cap, np.float64), np.asarray(weight, np.float64)
    nres = len(capacity)
    if not len(resources) == len(cap) == len(weight) == n:
        raise ValueError(f"{n} flows but {len(resources)} resource lists, {len(cap)} caps "
                         f"and {len(weight)} weights")
    if len(rid) and (rid.min() < 0 or rid.max() >= nres):
        raise ValueError("a flow crosses a resource the network does not have")
    def flows(dtype=np.float64):  # one entry per flow (or resource, crossing)
        return np.zeros(max(n, 1), dtype)

    def per(count, dtype=np.float64):
        return np.zeros(max(count, 1), dtype)

    new_time, new_flow, out, clock = flows(), flows(np.int64), flows(np.int64), np.zeros(1)
    # fluid.c: S_HEAP, S_ACTIVE, S_NEW, S_SOLVE, S_EVENT, S_QUIET (on: no empty batches)
    state = np.array([0, 0, 0, 0, 0, 1], np.int64)
    step = kernels.bind(
        kernels.fluid_step, n=n, nres=nres, roff=roff, rid=rid, rcoef=rcoef,
        size=np.asarray(size, np.float64), cap=cap, cap_level=cap / weight, weight=weight,
        capacity=capacity, new_time=new_time, new_flow=new_flow, heap_key=flows(),
        heap_id=flows(np.int64), active=flows(np.int64), rem=flows(), rate=flows(),
        clock=clock, state=state, out=out, uoff=np.zeros(nres + 1, np.int64),
        uflow=per(len(rid), np.int64), ucoef=per(len(rid)), left=per(nres), load=per(nres),
        count=per(nres, np.int64), open=flows(np.int64), done=flows(np.uint8),
        live=per(nres, np.int64), seen=flows(np.uint8))
    while True:
        if starts:  # hand the flows made ready since the last event to the kernel's heap
            for i, (t, f) in enumerate(starts):
                new_time[i], new_flow[i] = t, f
            state[2] = len(starts)
            del starts[:]
        k = step()
        if not state[4]:
            break  # nothing can move: the verifier would have refused the schedule
        now = float(clock[0])
        ending = out[:k].tolist()
        for f in ending:
            finish[f] = now
        ended(ending, now)
