"""A lower bound on allgather time that charges replication: a rank can send only what it
holds, and at the start only the arrived ranks hold anything.

`replication_lower_bound(topo, nbytes, arrivals, min_piece=1)` returns a lower bound on
the average elapsed time  mean_r (E_r - a_r)  and on the run time  max_r E_r - min_r a_r
of *every* schedule the verifier accepts whose non-empty pieces all have at least
`min_piece` bytes (every schedule when min_piece = 1: a piece is a whole number of bytes),
timed by the DAG model (model/dag.py) or the fluid model (model/fluid.py) on a single-site
topology, multi-piece messages included. With nseg <= k segments per block every
non-empty piece has at least floor(B / k) bytes: `min_piece = max(1, B // k)` bounds the
schedules with at most k segments.

It differs from `lowerbound.lower_bound` (the LP of facts F1-F8), which lets every rank
forward a byte of origin o from a_o + L on "as if the byte were everywhere at once".
Report max(both) as the combined bound (`combined_lower_bound`).

Notation (seconds, bytes): P ranks, B bytes per rank, W = (P - 1) B bytes to receive per
rank, a_r arrivals shifted so that min a = 0, m = min_piece. Over all rank pairs and all
message sizes up to W (a message may carry many pieces): Lmin = the smallest latency
(times the smallest latency factor of `message_costs`), beta = the largest rate at which
any port or flow moves bytes (bandwidth, flow and port rates times the largest bandwidth
factor, and at least the unscaled rates), sigma = max(beta, 1 / min os_per_byte) when the
topology sets a send overhead, else beta.

Delivered bytes. In the DAG model the bytes of a transfer s -> r are *delivered* at r
uniformly over its receive interval [end - m/br, end] (F1 of lowerbound.py); in the fluid
model as its flow moves them. Y_r(t) = bytes delivered to r by t; X_s(t) = bytes that
transfers sent by s have delivered by t; D(t) = sum_r Y_r(t) = sum_s X_s(t).

Facts (each from the models' rules, docs/semantics.md):

(R1) Receive rate. Y_r grows at rate <= beta: the receive intervals of r are disjoint
     (F1); in the fluid model r's NIC moves at most its LAN rate.
(R2) Releases. A byte of origin o is carried by a message whose sender holds every piece
     of it, so the message starts no earlier than a_o (its own piece) or than the end of a
     message that delivered the piece to the sender (itself after a_o + Lmin); its bytes are
     delivered from start + Lmin on (F1; fluid: a flow waits its latency). So the bytes of
     any message carrying o are delivered at r no earlier than a_o + Lmin, at rate <= beta
     (R1): Y_r(t) <= Rcap_r(t) = sum_{o != r} min(B, beta (t - a_o - Lmin)^+).
(R3) Holding. A send message with bytes > 0 carries a non-empty piece, and its sender holds
     every piece of it when it starts. Let h_s = the first time s holds a non-empty piece:
     a_s, or the end of the first receive message of s carrying one, if earlier. At that
     end the whole message has been delivered to s, so h_s <= t < a_s implies
     Y_s(t) >= m.
(R4) Send capacity. Every transfer of s starts at or after h_s and delivers its bytes from
     start + Lmin on. DAG model, default os(m) = m / b: a transfer started at S has
     delivered by t at most b (t - L - S)^+ (its receive interval starts at or after S + L,
     bflow <= br) and at most m = b os(m); the send intervals [S, S + os(m)] of s are
     disjoint (F2), so X_s(t) <= beta |[h_s, t - Lmin]|. With os(m) = A + m pb the starts
     are at least m pb apart, so all transfers but the last delivered at most
     (S_last - S_first) / pb, the last at most b (t - L - S_last): X_s(t) <= sigma
     (t - Lmin - h_s)^+. Fluid model: a flow moves after its latency through the sender's
     NIC (<= beta). Hence  D(t) <= sigma sum_s |{tau <= t - Lmin : tau >= h_s}|.
(R5) Forwarding. A byte s delivers by t left in a transfer started by t - Lmin; a byte of
     another origin was delivered to s by then (R3's rule), and the verifier's delivery
     rule lets each byte reach each rank once and never its origin, so at most P - 2
     ranks get a given forwarded byte from anyone; s's own bytes leave after a_s:
     X_s(t) <= (P - 1) B [a_s <= t - Lmin] + (P - 2) Y_s(t - Lmin).
(R6) Exits. E_r >= the end of r's last receive; the bytes r still lacks at t arrive at
     rate <= beta (R1) after t: if some are left, E_r >= t + (W - Y_r(t)) / beta; if none,
     E_r >= cf_r (below). So E_r >= min(t, cf_r) + (W - Y_r(t)) / beta for every t. Also E_r >= a_r,
     E_r >= a_r + Lmin + B / sigma (r's own bytes must leave, R4), and E_r >= the
     single-machine bound with releases a_o + Lmin (R1, R2; lowerbound's closed form with
     these rates).

Time-expanded LP. Grid 0 = t_0 < t_1 < ... < t_K (width Lmin / 2 up to the last arrival
plus a few transfer times, then wider; any grid keeps the bound valid). Variables
y[r, k] >= 0 for Y_r(t_k), g[s, k] in [0, 1] for slot k = (t_{k-1}, t_k], e[r]. A
verified schedule gives a feasible point: y = Y at the grid points, g[s, k] = 1 if
h_s <= t_k (else 0), e = E. Constraints:
  y[r, k] - y[r, k-1] in [0, beta w_k];  y[r, k] <= min(W, Rcap_r(t_k))       (R1, R2)
  g[s, k] <= y[s, k] / m  where a_s > t_{k-1}                                 (R3)
  sum_r y[r, j] <= sigma sum_s sum_{k : slot k meets (0, t_j - Lmin]} (c[s, k] + l[s, k] g[s, k])
      with c = the slot part (cut at t_j - Lmin) after a_s, l = the part before a_s: on a
      slot's part before a_s, 1[h_s <= tau] <= 1[h_s <= t_k] = g[s, k]           (R4)
  sum_r y[r, j] <= (P-1) B #{s : a_s <= t_j - Lmin} + (P-2) sum_s y[s, k'] with
      t_{k'} the first grid point >= t_j - Lmin (Y is non-decreasing)             (R5)
  e[r] >= min(t_k, cf_r) + (W - y[r, k]) / beta at the last t_k <= cf_r (with R1 it
      implies the earlier ones) and at the first t_k > cf_r (y is non-decreasing, so it
      implies the later ones);  e[r] >= cf_r                                     (R6)
min sum_r e[r] (and min T with T >= e[r]) is at most the schedule's value. The solver's
value is multiplied by (1 - 1e-6) for its tolerances and never reported below cf.

What it captures, what not. With whole blocks (m = B) a rank forwards only after it has
received B bytes, so the holders of the first arrivals' data grow one transfer time at a
time (the log2 P rounds of a broadcast, relaxed to a fluid). With small pieces (m -> 1)
a rank forwards after a few bytes: the models let a schedule pipeline a broadcast in
tiny messages whose latencies overlap (dataflow: a port is busy for bytes only), so for
every schedule the bound can add little more than a latency or two to the LP's.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np

from ..errors import InputError

SOLVER_SAFETY = 1e-6  # relative slack for the LP solver's tolerances
FINE_PER_LATENCY = 2  # fine slots per Lmin
COARSE_FACTOR = 8  # coarse slots are this many fine ones
MAX_SLOTS = 600  # cap on the grid (the grid's extent shrinks past it, staying valid)


@dataclass
class ReplicationBound:
    """Lower bounds (seconds) of one call; see the module docstring."""

    avg_elapsed_s: float
    run_time_s: float
    closed_form_avg_elapsed_s: float
    closed_form_run_time_s: float
    min_piece: int
    slots: int
    solve_time_s: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _Rates:
    lmin: float
    beta: float
    sigma: float


def _rates(topo, nbytes: int) -> _Rates:
    """Lmin, beta, sigma of the docstring over every pair and message size up to W."""
    p = topo.nranks
    off = ~np.eye(p, dtype=bool)
    lat_f, bw_f = topo.factor_bounds(max(int(nbytes) * (p - 1), 1))
    lmin = float(np.min((np.asarray(topo.latency, np.float64) * lat_f)[off]))
    send, recv = topo.port_bandwidth
    rates = [np.asarray(m, np.float64)[off] for m in (topo.bandwidth, topo.flow_bandwidth(), send, recv)]
    fmax = max(1.0, float(np.max(bw_f[off])))
    beta = max(float(np.max(r)) for r in rates) * fmax
    sigma = beta
    if topo.os_a is not None:
        pb = float(np.min(np.asarray(topo.os_per_byte, np.float64)[off]))
        sigma = np.inf if pb <= 0 else max(beta, 1.0 / pb)
    return _Rates(lmin, beta, float(sigma))


def _check(topo, nbytes, arrivals, min_piece) -> tuple[int, np.ndarray, int]:
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
        raise InputError("replication bound", "nbytes", f"expected a non-negative integer, got {nbytes!r}")
    if isinstance(min_piece, bool) or not isinstance(min_piece, (int, np.integer)) or min_piece < 1:
        raise InputError("replication bound", "min_piece", f"expected a positive integer, got {min_piece!r}")
    p = topo.nranks
    a = np.zeros(p) if arrivals is None else np.asarray(arrivals, np.float64)
    if a.shape != (p,) or not np.all(np.isfinite(a)):
        raise InputError("replication bound", "arrivals", f"expected {p} finite arrival times, got shape {a.shape}")
    nsites = len(set(topo.rank_site()))
    if nsites != 1:
        raise InputError("replication bound", "topology",
                         f"expected one site (a cluster), got {nsites} sites (use lowerbound.lower_bound)")
    return int(nbytes), a - (a.min() if p else 0.0), int(min(min_piece, max(int(nbytes), 1)))


def _closed_form(a: np.ndarray, nbytes: int, r: _Rates) -> np.ndarray:
    """cf_r of R6: arrival, own bytes out, single machine with releases a_o + Lmin."""
    p = len(a)
    cf = a + r.lmin + nbytes / r.sigma
    for x in range(p):
        others = np.delete(a, x) + r.lmin
        rel = np.sort(others)[::-1]
        cf[x] = max(cf[x], float(np.max(rel + nbytes * np.arange(1, p) / r.beta)))
    return cf


def _grid(a: np.ndarray, nbytes: int, r: _Rates, horizon: float) -> np.ndarray:
    """Slot ends t_1 < ... < t_K: fine (Lmin / 2) while replication binds, then coarse."""
    fine = r.lmin / FINE_PER_LATENCY
    piece = nbytes / r.beta
    fine_end = min(horizon, float(a.max()) + 4 * piece + 4 * r.lmin)
    n_fine = int(np.ceil(fine_end / fine))
    n_coarse = int(np.ceil(max(horizon - n_fine * fine, 0.0) / (COARSE_FACTOR * fine)))
    if n_fine + n_coarse > MAX_SLOTS:  # wider slots: still valid, a little weaker
        scale = (n_fine + n_coarse) / MAX_SLOTS
        fine *= scale
        n_fine = int(np.ceil(fine_end / fine))
        n_coarse = int(np.ceil(max(horizon - n_fine * fine, 0.0) / (COARSE_FACTOR * fine)))
    ends = np.concatenate([fine * np.arange(1, n_fine + 1),
                           n_fine * fine + COARSE_FACTOR * fine * np.arange(1, n_coarse + 1)])
    return ends


def replication_lower_bound(topo, nbytes: int, arrivals=None, *, min_piece: int = 1,
                            run_time: bool = False) -> ReplicationBound:
    """Lower bounds on the average elapsed time and (run_time=True: a second LP solve;
    else the closed form's) the run time (module docstring)."""
    t0 = time.perf_counter()
    nbytes, a, m = _check(topo, nbytes, arrivals, min_piece)
    p = topo.nranks
    if p < 2 or nbytes == 0:
        return ReplicationBound(0.0, 0.0, 0.0, 0.0, m, 0, time.perf_counter() - t0)
    r = _rates(topo, nbytes)
    cf = _closed_form(a, nbytes, r)
    cf_avg, cf_run = float(np.mean(cf - a)), float(cf.max())
    ends = _grid(a, nbytes, r, cf_run)
    avg_sum, run = _solve(a, nbytes, m, r, cf, ends, run_time)
    avg = max(cf_avg, avg_sum / p - float(a.mean()))
    return ReplicationBound(avg, max(cf_run, run), cf_avg, cf_run, m, len(ends),
                            time.perf_counter() - t0)


def _solve(a, nbytes, m, r: _Rates, cf, ends, run_time: bool) -> tuple[float, float]:
    """(min sum e_r, min max e_r) of the time-expanded LP, seconds."""
    import pulp

    p, k_n = len(a), len(ends)
    w_all = (p - 1) * nbytes
    starts = np.concatenate([[0.0], ends[:-1]])
    width = ends - starts
    unit = float(cf.max())  # LP times in units of the closed-form run time
    byte = 1.0 / w_all  # LP bytes in units of W
    lp = pulp.LpProblem("replication_bound", pulp.LpMinimize)

    def var(name, low, up=None):
        if hasattr(lp, "add_variable"):
            return lp.add_variable(name, lowBound=low, upBound=up)
        return pulp.LpVariable(name, lowBound=low, upBound=up)

    def add(terms, sense, rhs):
        lp.addConstraint(pulp.LpConstraint(pulp.LpAffineExpression(terms), sense, rhs=float(rhs)))

    # R2: caps on Y per grid point.
    cap = np.zeros((p, k_n))
    for o in range(p):
        part = np.minimum(nbytes, r.beta * np.maximum(ends - a[o] - r.lmin, 0.0))
        cap += part[None, :]
        cap[o] -= part
    cap = np.minimum(cap, w_all)
    y = [[var(f"y_{i}_{k}", 0.0, float(cap[i, k] * byte)) for k in range(k_n)] for i in range(p)]
    step = r.beta * width * byte
    for i in range(p):  # R1
        for k in range(k_n):
            prev = [(y[i][k - 1], -1.0)] if k else []
            add([(y[i][k], 1.0)] + prev, pulp.LpConstraintLE, step[k])
            if k:
                add([(y[i][k], 1.0)] + prev, pulp.LpConstraintGE, 0.0)
    g = {}  # R3
    for i in range(p):
        for k in range(k_n):
            if a[i] > starts[k]:
                g[i, k] = var(f"g_{i}_{k}", 0.0, 1.0)
                add([(g[i, k], 1.0), (y[i][k], -1.0 / (m * byte))], pulp.LpConstraintLE, 0.0)
    _capacity_constraints(add, pulp, var, a, nbytes, r, ends, starts, y, g, byte)
    e = [var(f"e_{i}", float(cf[i] / unit)) for i in range(p)]
    for i in range(p):  # R6: at the last t_k <= cf_r (with R1 it implies the earlier ones),
        k1 = int(np.searchsorted(ends, cf[i], side="right")) - 1  # and with cf_r at the next
        for k, t in ((k1, ends[k1] if k1 >= 0 else 0.0), (k1 + 1, cf[i])):
            if 0 <= k < k_n:
                add([(e[i], 1.0), (y[i][k], 1.0 / (r.beta * byte * unit))], pulp.LpConstraintGE,
                    (t + w_all / r.beta) / unit)
    objectives = [pulp.lpSum(e)]
    if run_time:
        t_run = var("t_run", float(cf.max() / unit))
        for i in range(p):
            add([(t_run, 1.0), (e[i], -1.0)], pulp.LpConstraintGE, 0.0)
        objectives.append(t_run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        solver = pulp.PULP_CBC_CMD(msg=False)
    out = []
    for objective in objectives:
        lp.setObjective(objective)
        status = lp.solve(solver)
        if pulp.LpStatus[status] != "Optimal":
            raise RuntimeError(f"replication-bound LP: solver status {pulp.LpStatus[status]}")
        out.append(float(pulp.value(objective)) * unit * (1 - SOLVER_SAFETY))
    return out[0], (out[1] if run_time else -np.inf)


def _capacity_constraints(add, pulp, var, a, nbytes, r: _Rates, ends, starts, y, g, byte) -> None:
    """R4 and R5 at every grid point t_j (module docstring). z[k] = the holders' capacity
    of the whole slots 1..k from their parts before the arrivals (sum of l g)."""
    p, k_n = len(a), len(ends)
    z = [var(f"z_{k}", 0.0) for k in range(k_n)]
    for k in range(k_n):
        terms = [(z[k], 1.0)] + ([(z[k - 1], -1.0)] if k else [])
        for i in range(p):
            if (i, k) in g:
                terms.append((g[i, k], -(min(ends[k], a[i]) - starts[k])))
        add(terms, pulp.LpConstraintEQ, 0.0)
    for j in range(k_n):
        u = ends[j] - r.lmin
        total = [(y[i][j], 1.0) for i in range(p)]
        if u <= 0:
            add(total, pulp.LpConstraintLE, 0.0)
            continue
        # R4: whole slots up to u through z, the slot cut by u term by term.
        full = int(np.searchsorted(ends, u, side="right"))  # slots 0..full-1 end by u
        const = float(np.clip(np.minimum(ends[j], u) - a, 0.0, None).sum())  # after a_s
        terms = [(z[full - 1], -r.sigma * byte)] if full else []
        if full < k_n and starts[full] < u:
            for i in range(p):
                before = min(u, a[i]) - starts[full]
                if before > 0 and (i, full) in g:
                    terms.append((g[i, full], -r.sigma * before * byte))
        add(total + terms, pulp.LpConstraintLE, r.sigma * const * byte)
        # R5: Y_s(u) <= y[s, k'] at the first grid point >= u.
        kp = int(np.searchsorted(ends, u, side="left"))
        if kp >= k_n:
            continue
        own = (p - 1) * nbytes * int(np.count_nonzero(a <= u))
        add(total + [(y[i][kp], -(p - 2.0)) for i in range(p)], pulp.LpConstraintLE, own * byte)


def combined_lower_bound(topo, nbytes: int, arrivals=None, *, min_piece: int = 1) -> tuple[float, float]:
    """(avg elapsed, run time): the larger of this bound and lowerbound.lower_bound's."""
    from .lowerbound import lower_bound

    lb = lower_bound(topo, nbytes, arrivals)
    rb = replication_lower_bound(topo, nbytes, arrivals, min_piece=min_piece, run_time=True)
    return max(lb.avg_elapsed_s, rb.avg_elapsed_s), max(lb.run_time_s, rb.run_time_s)
