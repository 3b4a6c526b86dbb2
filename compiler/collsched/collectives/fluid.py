"""The fluid model of collectives beyond allgather: model.py's execution rules, with the
messages moving as flows that share every resource they cross max-min fairly.

The executor (model._Executor: walks, settling, FIFO, fences, reductions on the receiving
host's CPU, arrivals) is model.py's; only the network differs, and it is the allgather
fluid model's (model/fluid.py, docs/semantics.md "The fluid model"): a message that may
move waits its latency L x latency_factor(m), then moves m / bandwidth_factor(m) bytes as
one flow sharing, weighted by 1 / latency as SimGrid's CM02 weights TCP flows,
- the sender's NIC up and the receiver's NIC down (the site's LAN rate; in half duplex one
  capacity for both directions),
- every shared resource of the route between the two sites (each wide-area link or
  direction of a split one), or on matrix topologies the host pair's own link,
and never faster than b_flow = min(b, tcp_window / (2 L)) (Topology.flow_bandwidth), the
cap SimGrid's CM02 puts on one TCP flow. The sharing is model/fluid_share.share_flows
(the C kernel; model/fluid.py's Python solver without it).

Timed events of the executor's own (a rank's arrival, the end of a reduction's CPU time)
are zero-byte flows crossing no resource, started at their time: the flow loop owns the
clock, and such a flow ends the moment it starts.

simgrid_eager=True runs small messages as SimGrid's SMPI does (model/fluid.py,
fluid_timeline): every message waits until its receive is posted, and one below
smpi/send-is-detached-thresh (detached_below, 64 KiB; not a FIFO one, which is
synchronous) completes for its sender as soon as it is issued: a bcast root whose
messages are small leaves at once (chain of 64 x 16 KiB on tryton-48, P = 4: the root's
exit 0 as SMPI's, average elapsed 7.726 ms against SMPI's 7.732 ms).
The lab's SMPI comparisons want it; the default is an MPI's eager protocol (a small
message moves at once and completes when it arrives).

Under SMPI with smpi/simulate-computation:no (the lab's setting) MPI_Reduce_local costs
no simulated time: compare against SMPI with a topology whose reduction gamma is 0
(docs/measure.md, "Reduction cost (gamma)").
"""
from __future__ import annotations

import heapq

import numpy as np

from ..model import fluid as allgather_fluid
from .model import (CollTiming, Plan, _Executor, _restrict, check_inputs, executor_inputs,
                    timing)
from .program import Program


# SimGrid's smpi/send-is-detached-thresh default (bytes): smaller sends complete at once.
SMPI_DETACHED_BELOW = 65536


class _FlowNetwork:
    """Transfers and timers as flows of model/fluid.py's network."""

    def __init__(self, plan: Plan, topo, ntimers: int):
        n = plan.n
        self.n = n
        src, dst = plan.src, plan.dst
        if n:
            net = allgather_fluid._Network(topo, src, dst)
            lat, moved, weight = allgather_fluid._flow_costs(topo, net, src, dst, plan.size)
            cap = topo.flow_bandwidth()[src, dst].tolist()
        else:
            net = _Empty()
            lat, moved, weight, cap = [], [], [], []
        # Timers: no resource, no bytes (they end as they start).
        net.resources = list(net.resources) + [()] * ntimers
        self.net = net
        self.lat = lat
        self.size = list(moved) + [0.0] * ntimers
        self.cap = list(cap) + [1.0] * ntimers
        self.weight = list(weight) + [1.0] * ntimers
        self.starts: list = []
        self.events: dict = {}  # timer flow -> executor event
        self.free_timer = n

    def timer(self, when, ev) -> None:
        f = self.free_timer
        self.free_timer += 1
        self.events[f] = ev
        heapq.heappush(self.starts, (when, f))

    def ready(self, t, now) -> None:
        heapq.heappush(self.starts, (now + self.lat[t], t))

    def run(self, ex: _Executor) -> None:
        n, events = self.n, self.events
        finish = [float("inf")] * len(self.size)

        def ended(flows, now):
            for f in flows:
                if f < n:
                    ex.transfer_end(f, now)
                else:
                    ex.event(events.pop(f), now)

        allgather_fluid._share_flows(self.net, self.starts, self.size, self.cap, self.weight,
                                     finish, ended)


class _Empty:
    resources: list = []
    capacity: list = []


def simulate_fluid(prog: Program, topology, *, nbytes: int, elem_bytes: int = 4,
                   arrivals=None, simgrid_eager: bool = False,
                   detached_below: int = SMPI_DETACHED_BELOW) -> CollTiming:
    """Time one call of `prog` under the fluid model (module docstring). detached_below
    (simgrid_eager only): SimGrid's smpi/send-is-detached-thresh."""
    a = check_inputs(prog, topology, nbytes, elem_bytes, arrivals)
    topo = _restrict(topology, prog.nranks)
    plan = Plan(prog, int(nbytes), int(elem_bytes))
    shift = float(a.min()) if len(a) else 0.0
    eager, cpu, host = executor_inputs(plan, prog, topo)
    detached = None
    if simgrid_eager:
        # small, not synchronous: done for the sender once issued (whatever the topology's
        # eager_limit, which the lab sets to 0 for SMPI: no message moves before its receive)
        detached = [m < detached_below and not plan.fifo[so]
                    for m, so in zip(plan.size.tolist(), plan.send_op)]
        eager = [False] * plan.n  # every message waits for its receive
    # One timer per arrival and at most one per receive op (its reduction's CPU time).
    ntimers = prog.nranks + sum(1 for k in plan.kind if k != 0)
    net = _FlowNetwork(plan, topo, ntimers)
    ex = _Executor(plan, a - shift, eager, cpu, host, net, detached)
    for r in range(prog.nranks):
        net.timer(float(a[r] - shift), ("arrive", r))
    net.run(ex)
    ex.check_done()
    return timing(ex, a, shift, "fluid")


def compare(prog: Program, topology, *, nbytes: int, elem_bytes: int = 4, arrivals=None) -> dict:
    """Both models' run and average elapsed times (the lab's model columns)."""
    from .model import simulate

    d = simulate(prog, topology, nbytes=nbytes, elem_bytes=elem_bytes, arrivals=arrivals)
    f = simulate_fluid(prog, topology, nbytes=nbytes, elem_bytes=elem_bytes, arrivals=arrivals)
    return {"dag": d.run_time_s, "fluid": f.run_time_s,
            "dag_avg_elapsed_s": d.avg_elapsed_s, "fluid_avg_elapsed_s": f.avg_elapsed_s,
            "ratio": f.run_time_s / d.run_time_s if d.run_time_s > 0 else float(np.nan)}
