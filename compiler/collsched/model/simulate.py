"""Cost-model simulator: when does each transfer start and end, and when does each rank exit.

Model: the Min3 paper's Eq. 1-3 (latency, bandwidth, send overhead os(m), gap g(m);
single-port hosts, half or full duplex) with per-rank arrival times; details and the one
deliberate simplification (a rank's list order is its port order) in docs/semantics.md.
In half duplex, lists that give no single-port order (a schedule compiled for full
duplex) keep their sends and receives in list order and share the one port greedily in
simulated time instead (dag._GreedyPorts): no ModelCycle for any verified schedule.

The transfer graph and its timing (waves, _PyGraph, the C kernel, shared WAN
links) are in dag.py; this module builds a dag.Plan per schedule, times it for each
arrival pattern and derives the BDR paper's metrics from the timelines.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Schedule
from .dag import Plan, Timeline

# The cost model serves shared WAN links in start order (dag.py); lowerbound.py and tests
# check for this constant.
SHARED_LINKS = True


@dataclass
class Metrics:
    """The BDR paper's evaluation criteria (section 2.3)."""

    avg_elapsed_s: float
    run_time_s: float
    absorption_s: float
    imbalance_s: float  # omega
    tau_s: float
    imbalance_factor: float  # omega / tau
    exit_times_s: list[float]

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def simulate(sched: Schedule, topo, nbytes: int, arrivals=None,
             matching=None) -> tuple[Timeline, Metrics]:
    """Time one collective call; `arrivals` per rank in seconds (default: all at 0).

    `matching` (from verify.verify_and_match) saves matching the transfers again.
    """
    plan = Plan(sched, topo, nbytes, matching, sched.serial)
    a = np.zeros(sched.nranks) if arrivals is None else np.asarray(arrivals, np.float64)
    tl = plan.time(a)
    flat = plan.time(np.zeros(sched.nranks)) if np.ptp(a) > 0 else tl
    return tl, _metrics(tl, flat, topo, sched, nbytes)


def simulate_pattern(sched: Schedule, topo, nbytes: int, pattern: np.ndarray, matching=None,
                     serial_sends: bool | None = None):
    """Simulate every iteration of an arrival pattern (iterations x P); mean metrics.

    `serial_sends`: time serial execution (docs/semantics.md): each send waits for the
    previous one to arrive, each receive for the previous receive. Default: as the
    schedule says (Schedule.serial)."""
    plan = Plan(sched, topo, nbytes, matching, sched.serial if serial_sends is None else serial_sends)
    flat = plan.time(np.zeros(sched.nranks))
    per_iter = []
    timelines = []
    for a in np.atleast_2d(pattern):
        a = a - a.min()  # each iteration's clock starts at its first arrival
        # A flat iteration (all +0.0, as np.zeros) times exactly as `flat` did.
        tl = flat if not (a.any() or np.signbit(a).any()) else plan.time(a)
        timelines.append(tl)
        per_iter.append(_metrics(tl, flat, topo, sched, nbytes))
    return timelines, per_iter, mean_metrics(per_iter)


def mean_metrics(per_iter: list[Metrics]) -> Metrics:
    """The metrics of several iterations averaged (tau is the schedule's, the same in each)."""
    return Metrics(
        avg_elapsed_s=float(np.mean([m.avg_elapsed_s for m in per_iter])),
        run_time_s=float(np.mean([m.run_time_s for m in per_iter])),
        absorption_s=float(np.mean([m.absorption_s for m in per_iter])),
        imbalance_s=float(np.mean([m.imbalance_s for m in per_iter])),
        tau_s=per_iter[0].tau_s,
        imbalance_factor=float(np.mean([m.imbalance_factor for m in per_iter])),
        exit_times_s=np.mean([m.exit_times_s for m in per_iter], 0).tolist(),
    )


def piece_time(topo, piece_bytes: int) -> float:
    """tau: the median over rank pairs of the time to move one piece (docs/semantics.md)."""
    p = topo.nranks
    if p < 2:
        return 0.0
    t = topo.transfer_time(int(piece_bytes))
    return float(np.median(t[~np.eye(p, dtype=bool)]))


def tau(topo, sched: Schedule, nbytes: int) -> float:
    """tau of a schedule: its largest piece at `nbytes` per rank."""
    return piece_time(topo, int(sched.piece_bytes(nbytes).max()))


def _metrics(tl: Timeline, flat: Timeline, topo, sched: Schedule, nbytes: int) -> Metrics:
    a, f = tl.arrivals, tl.exits
    run = float(f.max() - a.min())
    omega = float(np.ptp(a))
    flat_run = float(flat.exits.max() - flat.arrivals.min())
    t = tau(topo, sched, nbytes)
    return Metrics(
        avg_elapsed_s=float(np.mean(f - a)),
        run_time_s=run,
        absorption_s=flat_run - run + omega,
        imbalance_s=omega,
        tau_s=t,
        imbalance_factor=omega / t if t > 0 else 0.0,
        exit_times_s=f.tolist(),
    )
