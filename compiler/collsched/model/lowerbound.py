"""Lower bounds on allgather time under the cost model of docs/semantics.md.

`lower_bound(topo, nbytes, arrivals)` returns two bounds that hold for *every* schedule
the verifier accepts, whatever its algorithm, segmentation, phases or FIFO marks, timed by
`simulate.simulate` on the same topology, bytes per rank and arrival pattern:

- `run_time_s`: run time  r = max_r exit_r - min_r a_r  (Metrics.run_time_s), and
- `avg_elapsed_s`: average elapsed time  e = mean_r (exit_r - a_r)  (Metrics.avg_elapsed_s).

Notation: P ranks, B bytes per rank, a_r arrival (shifted so that min a = 0, as
simulate_pattern does), L(s, r) latency, b(s, r) bandwidth, bflow <= b the windowed flow
bandwidth, bs(s, r), br(s, r) >= b the rates at which the flow occupies the sender's and
the receiver's port (links.port_bandwidth: b, except across a shared WAN link, where the
NIC's rate), os(m) >= m * pb(s, r) the send overhead (pb = 1/bs by default). E_r = exit_r.
The bound uses 1/max(b, bs) and 1/max(b, br), valid whether the ports are charged at b or
at the NIC's rate.

Facts of the model the bound rests on (dag.py; each is one line of its recurrences):

(F1) A transfer s -> r of m bytes that starts at t ends at t + L + m/bflow. Its *receive
     interval* [end - m/br, end] starts at or after t + L. In list order the receive
     intervals of one rank are disjoint (Start >= HostAvailForRecv - early).
(F2) A rank's *send intervals* [start, start + min(os(m), L + m/bflow)] are disjoint in list
     order (Start >= HostAvailForSend = previous Start + os) and end by the transfer's end.
(F3) Half duplex: all send and receive intervals of a rank are disjoint (the one port is
     released at Start + os after a send, at the end after a receive, `early` before the
     end for a receive after a receive; since L + m/bflow >= m/br the intervals above never
     overlap).
(F4) Nothing starts before min a = 0; a send of the rank's own piece starts at or after its
     arrival; a forwarded piece is sent only after the transfer delivering it has ended.
     Hence a byte of origin o can be sent by s no earlier than hold[o, s] = a_o + d(o, s),
     and its receive interval at r starts no earlier than rel[o, r] = a_o + d(o, r), where d
     is the shortest-path latency (Floyd-Warshall; for P > 256 the cheaper
     max(min_x L(o, x), min_s L(s, r)), also a lower bound on any path).
(F5) E_r >= a_r, and E_r >= the end of every transfer r sends or receives.
(F6) The verifier's delivery pass: every rank receives every byte of every other origin;
     so each byte of o enters every rank set S not containing o at least once, over an
     edge from outside S, and o itself sends each of its own bytes at least once.
(F7) Shared resources (links.shared_links; topologies with a network): the flows from
     site A to site B != A cross the resources of one route (network.py: wide-area links
     shared by both directions, or one direction of a split link; several site pairs may
     cross the same one). Resource k of capacity beta_k moves at most beta_k bytes per
     second, all its flows together: the fluid model shares it so (fluid.py), as SimGrid
     does; the DAG model serves the transfers on the route's bottleneck k one after the
     other (Start >= previous Start on k + previous m / beta_k). Either way a transfer's
     bytes move on k only after its start plus its latency, L >= L_k = min L over the
     rank pairs whose route crosses k, at c_k = min(1/beta_k, 1/bflow) s/byte or more
     (c_k = 1/beta_k up to float noise, since bflow <= b <= beta_k). Hence if the
     transfers over k that start at or after t carry X > 0 bytes in all, the last of them
     ends at or after t + L_k + X c_k.
(F8) Bytes that must cross a resource: let G_k be the site graph with an edge x -> y when
     route(x, y) avoids k. A block of origin o (site A) reaches the sites of A's closure
     in G_k without crossing k; every transfer over k adds one site (and its closure), so
     at least n_k(A) transfers over k carry each byte of o, n_k(A) = the fewest sites
     whose addition makes the closure every site (breadth-first over site sets;
     _crossings). Such a transfer starts at or after relk[o] = min hold[o, s] over the
     ranks s of the sites with a route across k (F4). So, by F7,
         T >= max_t ( t + L_k + B c_k * sum_{o : relk[o] >= t} n_k(site of o) )
     for every resource k (_resource_bound): both directions of a shared link and every
     site pair behind it count on it. This bounds the run time only.
     The DAG model charges each transfer only its route's bottleneck (dag.py): on a
     route of several resources it may beat F8 and the LP's constraints on a resource
     that is not the bottleneck of every route crossing it (the random links networks of
     tests/compiler/test_network_models.py: DAG times down to 0.87 of the bound, the
     fluid model never below it). On the `wan:` form, one resource per route, both hold.

Closed form, per rank r (O(P^2 log P)). By (F1, F4, F5) the receive intervals of origins o
with rel[o, r] >= t all lie in [t, E_r] and together last at least B * min_s 1/br(s, r) per
origin: preemptive single-machine scheduling with release dates gives
    E_r >= max_t ( t + B * #{o != r : rel[o, r] >= t} * min_s 1/br(s, r) ).
By (F2, F4, F6) r sends its own B bytes after a_r, the last of them arriving one latency
later:  E_r >= a_r + min_s L(r, s) + B * min_s min(pb(r, s), 1/bflow(r, s)).  In half duplex
the send job joins the receive jobs on one machine (F3). Call the largest of these cf_r.

Shared links, closed form (F7, per union S of sites, O(P^2)). Let every site pair entering
S (A outside, B inside) have a shared resource (else skip S), K_S their routes'
bottlenecks (links.SharedLinks.link_of: each pair crosses its own). Let M_S be the latest
time at which some byte of an origin outside S first enters S (the end of the first
transfer into S carrying it). Every r in S needs each such byte, and any chain of transfers
bringing it to r enters S no earlier (F4), so E_r >= M_S. A first entry carrying a byte of
o starts at or after relS[o] = min_{s outside S} hold[o, s]. Take t among the relS; the
first entries of the N_t origins with relS[o] >= t move B N_t bytes, X_k over link k;
some k has X_k c_k >= B N_t / R with R = sum_{k in K_S} 1/c_k, and by F7 the last of them
ends at or after t + L_k + X_k c_k. So
    M_S >= max_t ( t + min_k L_k + B * N_t / R ),
and cf_r is raised to it for r in S (for bytes > 0). The LP below uses these cf_r.

LP relaxation (PuLP, bundled CBC). Ranks are grouped into *nodes* N (single ranks, or
whole sites for large P) and origins into *commodities* g (single origins, or sites).
Variable F[g, u, v] >= 0: blocks of commodity g moved from a rank of node u to a rank of
node v over the whole call; W_v = sum of E_r over r in v; T the run time. For any verified
schedule, setting F to its actual traffic, W and T to its actual exits satisfies:
  cuts (F6):      for every union S of sites, and each node as S:  inflow of g into S
                  >= |g \\ S| blocks; each node receives >= sum_r |g \\ {r}|, sends >= |g ∩ v|;
  ports (F1-F5):  for every node v and threshold t among its release (resp. hold) times,
                  W_v >= sum_{r in v} min(t, cf_r) + sum_{g released at v no earlier than t}
                  sum_u F[g, u, v] * B * min 1/br(u -> v)     (receive port; sends likewise
                  with hold and min(pb, 1/bflow); half duplex: both sums in one constraint).
                  Each member's intervals counted there start at or after t and end by E_r
                  (and if a member has none, E_r >= cf_r >= min(t, cf_r) anyway);
  exits:          W_v >= sum_{r in v} cf_r;  T >= W_v / |v|;  T >= max_r cf_r;
  links (F7):     for every resource k and threshold t among when[g] = min hold time of g
                  at k's sending nodes:  T >= min(t + L_k, T0) + sum_{g: when[g] >= t}
                  y[g, k] * B * c_k,  with y[g, k] = sum of F[g, u, v] over the node pairs
                  (u, v) whose members all lie in one site pair whose route crosses k (a
                  node mixing sites takes no part); T0 = max(max_r cf_r, F8's bound),
                  also T's own lower bound. The blocks counted start at or after t on
                  k; if there are none, T >= T0 anyway; else the last ends by T. (This
                  bounds T only; the average elapsed time gets F7 through the cf_r of the
                  closed form.)
So min T (resp. min sum W_v / P - mean a) over the LP is at most the schedule's run time
(resp. average elapsed time): both are lower bounds. The solver's value is multiplied by
(1 - 1e-6) to absorb its tolerances, and never reported below the closed form.

Tightness (measured in docs/grid-baselines.md): on a homogeneous cluster with flat
arrivals the bound is L + (P-1) B / b, which the ring misses only by (P-2) L. On grids
with shared WAN links (F7) a site's wide-area inflow is limited by the sum of its inbound
links' bandwidths, which is what limits Min3-style schedules (three-site grid: 12 blocks
into UT over 160 + 145 kB/s); the relaxation has no time structure beyond release dates (a
relay may forward while it receives: a fluid, perfectly pipelined view), and it ignores
the TCP window beyond one latency per hop (a schedule with many small pieces in flight
escapes it), so on window-limited wide-area links it is loose.

Size: per-origin commodities with per-rank nodes up to P = 8 (on the bundled topologies
per-site commodities gave the same bound to 4 digits in a tenth of the time); per-site
commodities with per-rank nodes while sites * P^2 <= 12,000 (P = 63 on three sites);
beyond that, sites as nodes (a few hundred variables, under a second at P = 1024). A
single-site topology beyond that size gets the closed form only: with one site the LP
adds nothing but the send-port capacity.
"""
from __future__ import annotations

import itertools
import time
import warnings
from dataclasses import dataclass

import numpy as np

from ..errors import InputError

MAX_PER_ORIGIN_RANKS = 8  # per-origin commodities up to here (P^3 variables)
MAX_RANK_LP_VARIABLES = 12_000  # per-rank nodes while commodities * P^2 stays below this
MAX_SHORTEST_PATH_RANKS = 256  # Floyd-Warshall in numpy up to here
MAX_UNION_SITES = 6  # all unions of sites as cuts up to here (2^S sets)
SOLVER_SAFETY = 1e-6  # relative slack for the LP solver's tolerances


@dataclass
class LowerBound:
    """Lower bounds on the run time and the average elapsed time of one call (seconds)."""

    run_time_s: float
    avg_elapsed_s: float
    method: str  # "lp: <nodes> x <commodities>", "closed form", ...
    solve_time_s: float
    closed_form_run_time_s: float
    closed_form_avg_elapsed_s: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _check(topo, nbytes, arrivals) -> tuple[int, np.ndarray]:
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
        raise InputError("lower bound", "nbytes", f"expected a non-negative integer, got {nbytes!r}")
    p = topo.nranks
    a = np.zeros(p) if arrivals is None else np.asarray(arrivals, np.float64)
    if a.shape != (p,):
        raise InputError("lower bound", "arrivals", f"expected {p} arrival times, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise InputError("lower bound", "arrivals", "expected finite arrival times")
    return int(nbytes), a - (a.min() if p else 0.0)


def _path_latency(lat: np.ndarray) -> np.ndarray:
    """(P, P) lower bound on the summed latency of any chain of transfers o -> ... -> r."""
    p = len(lat)
    off = ~np.eye(p, dtype=bool)
    if p <= MAX_SHORTEST_PATH_RANKS:
        d = np.where(off, lat, 0.0)
        for k in range(p):
            np.minimum(d, d[:, k, None] + d[None, k, :], out=d)
        return d
    masked = np.where(off, lat, np.inf)
    first_hop = masked.min(1)  # leaving o
    last_hop = masked.min(0)  # entering r
    return np.where(off, np.maximum(first_hop[:, None], last_hop[None, :]), 0.0)


def _port_rates(topo, bw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(send, recv) rates at which a flow occupies its ends' ports: b, except across a
    shared WAN link, where it is the NIC's rate (>= b): links.port_bandwidth, as simulate
    uses it. The smaller per-byte costs are valid whichever of the two the model uses."""
    if topo.nranks < 2:
        return bw, bw
    send, recv = topo.port_bandwidth
    return np.maximum(bw, send), np.maximum(bw, recv)


def _block_reduce(mat: np.ndarray, site: np.ndarray, ufunc) -> np.ndarray:
    """(S, S) reduction (ufunc = np.minimum or np.maximum) of a (P, P) matrix over site blocks."""
    order = np.argsort(site, kind="stable")
    counts = np.bincount(site)
    starts = np.cumsum(counts) - counts
    m = mat[np.ix_(order, order)]
    return ufunc.reduceat(ufunc.reduceat(m, starts, 0), starts, 1)


@dataclass
class _Links:
    """The shared resources of F7 and F8 between the sites of `_site_index` (compact
    indices): wide-area links, or one direction of a split one (links.SharedLinks)."""

    site_link: np.ndarray  # (S, S): the route's bottleneck resource from site A to B, or -1
    site_res: dict  # (A, B) -> every shared resource of the route from A to B, A != B
    cost: np.ndarray  # (K,) c_k = min over its pairs of min(1/capacity[k], 1/bflow), s/byte
    latency: np.ndarray  # (K,) min latency over the rank pairs whose route crosses k


def _shared_link_data(topo, model: "_Model", site: np.ndarray) -> _Links | None:
    """F7's and F8's resources, or None when the topology has none (or they do not follow
    the sites)."""
    if model.p < 2:
        return None
    links = topo.shared_links
    if not links.any:
        return None
    nsites = int(site.max()) + 1
    rep = np.array([np.argmax(site == s) for s in range(nsites)])
    raw = links.link_of[np.ix_(rep, rep)]
    raw_route = links.route_of[np.ix_(rep, rep)]
    # links.py gives a whole site pair one route; the bound relies on it, so check it.
    if not (np.array_equal(links.link_of, raw[site[:, None], site[None, :]])
            and np.array_equal(links.route_of, raw_route[site[:, None], site[None, :]])):
        return None
    site_res = {(a, b): tuple(links.routes[raw_route[a, b]])
                for a in range(nsites) for b in range(nsites) if a != b and raw_route[a, b] >= 0}
    used = np.unique([k for res in site_res.values() for k in res]).astype(np.int64)
    if len(used) == 0:
        return None
    renum = {int(k): i for i, k in enumerate(used)}
    site_res = {ab: tuple(renum[k] for k in res) for ab, res in site_res.items()}
    site_link = np.full((nsites, nsites), -1, np.int64)
    site_link[raw >= 0] = [renum[int(k)] for k in raw[raw >= 0]]
    flow_max = _block_reduce(np.where(model.off, model.flow, -np.inf), site, np.maximum)
    lat_min = _block_reduce(np.where(model.off, model.latency, np.inf), site, np.minimum)
    cost = 1.0 / (links.bandwidth[used] * model.bw_factor_max)  # model.flow has its factor
    latency = np.full(len(used), np.inf)
    for (a, b), res in site_res.items():
        for k in res:
            cost[k] = min(cost[k], 1.0 / flow_max[a, b])
            latency[k] = min(latency[k], lat_min[a, b])
    return _Links(site_link, site_res, cost, latency)


MAX_CROSSING_SITES = 8  # F8's crossing counts by search over site sets up to here


def _crossings(nsites: int, crosses) -> np.ndarray:
    """F8: per origin site A, the fewest transfers over resource k that bring a block of
    A to every site, when transfers x -> y cross k iff crosses(x, y). The sites a block
    reaches without crossing k from a set X are X's closure over the other pairs; each
    transfer over k adds one site (and its closure). Breadth-first over site sets; beyond
    MAX_CROSSING_SITES sites, 1 if some site is out of A's closure (also a lower bound)."""
    free = [[y for y in range(nsites) if y != x and not crosses(x, y)] for x in range(nsites)]

    def closure(xs):
        seen, todo = set(xs), list(xs)
        while todo:
            for y in free[todo.pop()]:
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        return frozenset(seen)

    everything = frozenset(range(nsites))
    out = np.zeros(nsites, np.int64)
    for a in range(nsites):
        start = closure([a])
        if start == everything:
            continue
        if nsites > MAX_CROSSING_SITES:
            out[a] = 1
            continue
        level, seen, steps = {start}, {start}, 0
        while everything not in level:
            steps += 1
            nxt = set()
            for xs in level:
                for y in everything - xs:
                    c = closure(xs | {y})
                    if c not in seen:
                        seen.add(c)
                        nxt.add(c)
            level = nxt
        out[a] = steps
    return out


def _resource_bound(model: "_Model", links: _Links, site: np.ndarray) -> float:
    """F8: a lower bound on the run time from each shared resource's bytes (docstring)."""
    nb = model.nbytes
    if nb == 0:
        return -np.inf
    nsites = int(site.max()) + 1
    order = np.argsort(site, kind="stable")
    counts = np.bincount(site)
    hold_site = np.minimum.reduceat(model.hold[:, order], np.cumsum(counts) - counts, 1)  # [o, A]
    best = -np.inf
    for k in range(len(links.cost)):
        on = {ab for ab, res in links.site_res.items() if k in res}
        need = _crossings(nsites, lambda x, y: (x, y) in on)[site]  # per origin rank
        if not need.any():
            continue
        senders = np.zeros(nsites, bool)
        senders[[a for a, _ in on]] = True
        rel = hold_site[:, senders].min(1)  # [o]: earliest a byte of o may start over k
        idx = np.argsort(-rel, kind="stable")
        work = np.cumsum(need[idx] * nb * links.cost[k])
        m = rel[idx] + links.latency[k] + work
        best = max(best, float(np.max(m[need[idx] > 0])))
    return best


def _link_closed_form(model: "_Model", links: _Links, site: np.ndarray) -> np.ndarray:
    """Per-rank lower bound on E_r from F7 (docstring, 'Shared links, closed form')."""
    p, nb = model.p, model.nbytes
    out = np.full(p, -np.inf)
    if nb == 0:
        return out
    nsites = int(site.max()) + 1
    order = np.argsort(site, kind="stable")
    counts = np.bincount(site)
    hold_site = np.minimum.reduceat(model.hold[:, order], np.cumsum(counts) - counts, 1)  # [o, A]
    for cut in _cut_sets(site):
        in_s = np.zeros(nsites, bool)
        in_s[site[cut]] = True
        ks = links.site_link[np.ix_(~in_s, in_s)]
        if np.any(ks < 0):
            continue  # some pair enters S over its own path: not limited by a link
        ks = np.unique(ks)
        rate = float(np.sum(1.0 / links.cost[ks]))
        rel = np.sort(hold_site[np.ix_(~cut, ~in_s)].min(1))[::-1]  # origins outside S
        m = float(np.max(rel + links.latency[ks].min() + nb * np.arange(1, len(rel) + 1) / rate))
        out[cut] = np.maximum(out[cut], m)
    return out


class _Model:
    """Per-rank-pair quantities of the bound (seconds per byte, earliest times)."""

    def __init__(self, topo, nbytes: int, a: np.ndarray):
        p = topo.nranks
        self.p, self.nbytes, self.a, self.full = p, nbytes, a, bool(topo.full_duplex)
        off = ~np.eye(p, dtype=bool)
        self.off = off
        # Size-dependent costs (inputs/msgcosts.py): a schedule may cut a block into pieces
        # of any size, and a multi-piece message (docs/semantics.md) may carry up to the
        # P - 1 blocks its receiver lacks, so the bound takes, per pair, the smallest latency
        # factor and the largest bandwidth factor over message sizes 1..(P - 1) * nbytes
        # (valid for every message size a verified schedule can have).
        lat_factor, bw_factor = topo.factor_bounds(max_message_bytes(p, nbytes))
        lat = np.asarray(topo.latency, np.float64) * lat_factor
        flow = topo.flow_bandwidth() * bw_factor
        self.latency, self.flow = lat, flow
        self.bw_factor_max = float(bw_factor.max()) if p else 1.0
        send_bw, recv_bw = _port_rates(topo, np.asarray(topo.bandwidth, np.float64))
        send_bw, recv_bw = send_bw * bw_factor, recv_bw * bw_factor
        self.recv_cost = np.where(off, 1.0 / recv_bw, np.inf)  # receive port s per byte (F1)
        per_byte_os = 1.0 / send_bw if topo.os_a is None else np.asarray(topo.os_per_byte)
        self.send_cost = np.where(off, np.minimum(per_byte_os, 1.0 / flow), np.inf)  # (F2)
        d = _path_latency(lat)
        self.hold = a[:, None] + d  # [o, s]: earliest s may send a byte of o (F4)
        self.rel = np.where(off, self.hold, np.inf)  # [o, r]: earliest receive interval at r
        self.min_out_latency = np.where(off, lat, np.inf).min(1) if p > 1 else np.zeros(p)

    def closed_form(self) -> np.ndarray:
        """cf_r: per-rank lower bound on E_r (docstring, 'Closed form')."""
        p, nb, a = self.p, self.nbytes, self.a
        recv_work = nb * self.recv_cost.min(0)  # per origin, at r
        own_send = nb * self.send_cost.min(1)
        cf = np.maximum(a, a + self.min_out_latency + own_send)
        # Jobs per rank r: P-1 receive jobs (release rel[o, r]); half duplex adds the send job.
        release = self.rel.T.copy()  # [r, o]
        work = np.broadcast_to(recv_work[:, None], (p, p)).copy()
        work[~self.off] = 0.0
        if not self.full:
            release = np.concatenate([release, a[:, None]], 1)
            work = np.concatenate([work, own_send[:, None]], 1)
        return np.maximum(cf, _single_machine(np.where(np.isfinite(release), release, -np.inf), work))


def _single_machine(release: np.ndarray, work: np.ndarray) -> np.ndarray:
    """Per row r, max over t of t + the work of the jobs released at or after t: a lower
    bound on when one machine (a port) can have finished them all, preemptive or not.
    release, work: (P, J); a release of -inf marks no job."""
    order = np.argsort(-release, 1, kind="stable")  # latest release first
    rs = np.take_along_axis(release, order, 1)
    ws = np.cumsum(np.take_along_axis(work, order, 1), 1)
    return np.where(np.isfinite(rs), rs + ws, -np.inf).max(1)


def _site_index(topo) -> np.ndarray:
    labels = topo.rank_site()
    first: dict[str, int] = {}
    return np.array([first.setdefault(lab, len(first)) for lab in labels], np.int64)


def _cut_sets(site: np.ndarray) -> list[np.ndarray]:
    """Rank masks of the site unions used as cuts (proper, non-empty)."""
    n = int(site.max()) + 1
    if n < 2:
        return []
    if n <= MAX_UNION_SITES:
        combos = [c for k in range(1, n) for c in itertools.combinations(range(n), k)]
    else:
        everything = set(range(n))
        combos = [(i,) for i in range(n)] + [tuple(sorted(everything - {i})) for i in range(n)]
    return [np.isin(site, c) for c in combos]


def _solve_lp(model: _Model, cf: np.ndarray, nodes: list[np.ndarray], groups: list[np.ndarray],
              site: np.ndarray, links: _Links | None = None,
              floor: float = -np.inf) -> tuple[float, float]:
    """(min T, min sum E_r) of the LP relaxation, in seconds; cf: any per-rank lower
    bounds on E_r (the closed forms); floor: a lower bound on T (F8)."""
    import pulp

    p, full = model.p, model.full
    scale = float(cf.max())  # times in units of the closed-form run time: well-scaled LP
    blk = model.nbytes / scale  # time units per byte-cost unit, for a whole block
    nn, ng = len(nodes), len(groups)
    size = np.array([len(m) for m in nodes])
    node_of = np.empty(p, np.int64)
    for v, members in enumerate(nodes):
        node_of[members] = v
    # Aggregated per node pair: cheapest per-byte port costs among member pairs.
    rc = np.full((nn, nn), np.inf)
    sc = np.full((nn, nn), np.inf)
    np.minimum.at(rc, (node_of[:, None], node_of[None, :]), model.recv_cost)
    np.minimum.at(sc, (node_of[:, None], node_of[None, :]), model.send_cost)
    gmask = np.zeros((ng, p), bool)
    for g, origins in enumerate(groups):
        gmask[g, origins] = True
    # Earliest receive (per node) and send (per node) time of any byte of each commodity.
    grel = np.full((ng, nn), np.inf)
    ghold = np.full((ng, nn), np.inf)
    for g in range(ng):
        rel_g = model.rel[gmask[g]].min(0)
        hold_g = model.hold[gmask[g]].min(0)
        np.minimum.at(grel[g], node_of, rel_g)
        np.minimum.at(ghold[g], node_of, hold_g)
    gsize = gmask.sum(1)
    in_node = np.zeros((ng, nn), np.int64)  # |g ∩ v|
    for g in range(ng):
        np.add.at(in_node[g], node_of, gmask[g].astype(np.int64))
    need_recv = gsize[:, None] * size[None, :] - in_node  # sum_r |g \ {r}| over r in v
    cf_t = cf / scale

    lp = pulp.LpProblem("allgather_lower_bound", pulp.LpMinimize)
    if hasattr(lp, "add_variable"):  # PuLP >= 3.3 attaches variables to the model
        def variable(name, low):
            return lp.add_variable(name, lowBound=low)
    else:
        def variable(name, low):
            return pulp.LpVariable(name, lowBound=low)
    flow = {}
    for g in range(ng):
        for u in range(nn):
            for v in range(nn):
                if (u == v and size[u] == 1) or not np.isfinite(rc[u, v]):
                    continue
                if need_recv[g, v] == 0:  # v never needs bytes of g: moving them only costs
                    continue
                flow[g, u, v] = variable(f"f_{g}_{u}_{v}", 0.0)
    W = [variable(f"w_{v}", float(cf_t[nodes[v]].sum())) for v in range(nn)]
    T = variable("T", max(float(cf_t.max()), floor / scale))
    for v in range(nn):
        lp += size[v] * T >= W[v]
    def at_least(terms, rhs):  # sum(coef * var) >= rhs, built without operator overloading
        lp.addConstraint(pulp.LpConstraint(pulp.LpAffineExpression(terms), pulp.LpConstraintGE,
                                           rhs=float(rhs)))

    into = {}  # (g, v) -> [(var, u)]
    outof = {}
    for (g, u, v), var in flow.items():
        into.setdefault((g, v), []).append((var, u))
        outof.setdefault((g, u), []).append((var, v))
    # Cuts: per node (receive and send needs), per union of sites.
    for g in range(ng):
        for v in range(nn):
            if need_recv[g, v] > 0:
                at_least([(var, 1.0) for var, _ in into.get((g, v), [])], need_recv[g, v])
            if in_node[g, v] > 0:
                at_least([(var, 1.0) for var, _ in outof.get((g, v), [])], in_node[g, v])
    for cut in _cut_sets(site):
        cut_nodes = np.zeros(nn, bool)
        cut_nodes[node_of[cut]] = True
        for g in range(ng):
            need = int(np.count_nonzero(gmask[g] & ~cut))
            if need == 0:
                continue
            at_least([(var, 1.0) for v in np.nonzero(cut_nodes)[0]
                      for var, u in into.get((g, v), []) if not cut_nodes[u]], need)
    # Ports with release thresholds.
    for v in range(nn):
        members = nodes[v]
        recv_terms = [(grel[g, v], (var, float(blk * rc[u, v])))
                      for g in range(ng) for var, u in into.get((g, v), [])]
        send_terms = [(ghold[g, v], (var, float(blk * sc[v, w])))
                      for g in range(ng) for var, w in outof.get((g, v), [])]
        families = [recv_terms, send_terms] if full else [recv_terms + send_terms]
        for terms in families:
            thresholds = sorted({t for t, _ in terms if np.isfinite(t)})
            for t in thresholds:
                base = float(np.minimum(t / scale, cf_t[members]).sum())
                at_least([(W[v], 1.0)] + [(var, -c) for when, (var, c) in terms if when >= t], base)
    # Shared resources (F7), on node pairs within one site pair whose route crosses one.
    if links is not None:
        _link_constraints(links, flow, nodes, site, ghold, max(float(cf_t.max()), floor / scale),
                          T, blk, scale, variable, at_least)
    with warnings.catch_warnings():  # PuLP 3.3 deprecates the bundled-CBC class we rely on
        warnings.simplefilter("ignore", DeprecationWarning)
        solver = pulp.PULP_CBC_CMD(msg=False)
    results = []
    for objective in (T, pulp.lpSum(W)):
        lp.setObjective(objective)
        status = lp.solve(solver)
        if pulp.LpStatus[status] != "Optimal":
            raise RuntimeError(f"lower-bound LP: solver status {pulp.LpStatus[status]}")
        results.append(float(pulp.value(objective)) * scale * (1 - SOLVER_SAFETY))
    return results[0], results[1]


def _link_constraints(links: _Links, flow: dict, nodes: list[np.ndarray], site: np.ndarray,
                      ghold: np.ndarray, t_low: float, T, blk: float, scale: float,
                      variable, at_least) -> None:
    """_solve_lp's constraints of the shared resources (F7), on the flows between node
    pairs that lie within one site pair whose route crosses the resource; t_low: a lower
    bound on T (in LP units)."""
    nn = len(nodes)
    node_site = np.full(nn, -1)
    for v, members in enumerate(nodes):
        if np.all(site[members] == site[members[0]]):
            node_site[v] = site[members[0]]
    on_link = {}  # k -> [(g, sending node, F var)]
    for (g, u, v), var in flow.items():
        if node_site[u] >= 0 and node_site[v] >= 0 and node_site[u] != node_site[v]:
            for k in links.site_res.get((int(node_site[u]), int(node_site[v])), ()):
                on_link.setdefault(k, []).append((g, u, var))
    for k, terms in on_link.items():
        # Blocks of g cross k no earlier than g's hold time at the link's senders.
        when = {}
        for g, u, _ in terms:
            when[g] = min(when.get(g, np.inf), ghold[g, u])
        y = {g: variable(f"y_{g}_{k}", 0.0) for g in when}
        for g, yg in y.items():  # y[g, k] = blocks of g over link k
            at_least([(yg, 1.0)] + [(var, -1.0) for h, _, var in terms if h == g], 0.0)
        c = float(blk * links.cost[k])
        for t in sorted({when[g] for g in when if np.isfinite(when[g])}):
            head = min((t + float(links.latency[k])) / scale, t_low)
            at_least([(T, 1.0)] + [(y[g], -c) for g in y if when[g] >= t], head)


def _lp_shape(p: int, site: np.ndarray):
    """(nodes, commodities, label) of the LP for P ranks, or None when no LP is worth it."""
    nsites = int(site.max()) + 1
    ranks = [np.array([r]) for r in range(p)]
    by_site = [np.nonzero(site == s)[0] for s in range(nsites)]
    if p <= MAX_PER_ORIGIN_RANKS:
        return ranks, ranks, "ranks x origins"
    if nsites * p * p <= MAX_RANK_LP_VARIABLES:
        return ranks, by_site, "ranks x sites"
    if nsites > 1:
        return by_site, by_site, "sites x sites"
    return None


def lower_bound(topo, nbytes: int, arrivals=None, *, use_lp: bool = True) -> LowerBound:
    """Lower bounds on run time and average elapsed time of any verified allgather schedule."""
    t0 = time.perf_counter()
    nbytes, a = _check(topo, nbytes, arrivals)
    p = topo.nranks
    if p < 2:
        return LowerBound(0.0, 0.0, "trivial", 0.0, 0.0, 0.0)
    model = _Model(topo, nbytes, a)
    cf = model.closed_form()
    cf_run, cf_avg = float(cf.max()), float(np.mean(cf - a))
    run, avg, method = cf_run, cf_avg, "closed form"
    site = _site_index(topo)
    links = _shared_link_data(topo, model, site)
    floor = -np.inf  # F8: bounds the run time only
    if links is not None:  # F7's closed form joins the per-rank one
        cf = np.maximum(cf, _link_closed_form(model, links, site))
        floor = _resource_bound(model, links, site)
        if max(float(cf.max()), floor) > cf_run:
            method = "closed form + links"
        run, avg = max(float(cf.max()), floor), float(np.mean(cf - a))
    shape = _lp_shape(p, site) if use_lp and nbytes > 0 and cf_run > 0 else None
    if shape is not None:
        nodes, groups, label = shape
        lp_run, lp_sum = _solve_lp(model, cf, nodes, groups, site, links, floor)
        run = max(run, lp_run)
        avg = max(avg, lp_sum / p - float(a.mean()))
        method = f"lp: {label}"
    return LowerBound(run, avg, method, time.perf_counter() - t0, cf_run, cf_avg)


def pattern_lower_bound(topo, nbytes: int, pattern, *, max_lp_iterations: int = 4) -> LowerBound:
    """Mean of per-iteration bounds over an arrival pattern (iterations x P), as
    simulate_pattern averages its metrics; iterations past `max_lp_iterations` use the
    closed form only (a mean of lower bounds is a lower bound of the mean)."""
    t0 = time.perf_counter()
    rows = np.atleast_2d(np.asarray(pattern, np.float64))
    if rows.shape[0] == 0:
        raise InputError("lower bound", "pattern", "expected at least one iteration")
    bounds = [lower_bound(topo, nbytes, row, use_lp=i < max_lp_iterations)
              for i, row in enumerate(rows)]
    methods = sorted({b.method for b in bounds})
    return LowerBound(
        run_time_s=float(np.mean([b.run_time_s for b in bounds])),
        avg_elapsed_s=float(np.mean([b.avg_elapsed_s for b in bounds])),
        method=" + ".join(methods),
        solve_time_s=time.perf_counter() - t0,
        closed_form_run_time_s=float(np.mean([b.closed_form_run_time_s for b in bounds])),
        closed_form_avg_elapsed_s=float(np.mean([b.closed_form_avg_elapsed_s for b in bounds])),
    )


# --- serial schedules ------------------------------------------------------------------

@dataclass
class SerialBound:
    """Lower bounds for *serial* schedules (Schedule.serial), seconds; see serial_lower_bound."""

    run_time_s: float
    avg_elapsed_s: float


def max_message_bytes(nranks: int, nbytes: int) -> int:
    """The largest message a verified allgather schedule can send: every block its receiver
    lacks in one multi-piece message."""
    return max(int(nbytes) * max(int(nranks) - 1, 1), 1)


def serial_lower_bound(topo, nbytes: int, pattern=None) -> SerialBound:
    """Lower bounds on run time and average elapsed time of every *serial* schedule whose
    messages carry one piece each (docs/semantics.md: bdr, bslb, arrival-aware min3 on a
    cluster; not agg, whose messages share one latency among their pieces), averaged over the
    iterations of `pattern` (P arrival times, or iterations x P) as simulate_pattern
    averages its metrics.

    Serial execution posts a rank's receives one at a time, each once the previous one has
    completed, and issues its sends one at a time, each once the previous one has arrived
    (the runtime's run_serial and PAT engine; `simulate` times exactly that). So a receive
    holds the port for its whole transfer, latency included: at least
    c_r = min_s (L(s, r) + m / bflow(s, r)) per origin (with segments, nseg latencies and
    the same bytes: more). The transfer that first brings origin o to r starts no earlier
    than a_o (its sender holds o's piece no earlier), so by the single-machine argument
    with release dates (as in the closed form above, F1/F4/F5):
        E_r >= max_t ( t + c_r * #{o != r : a_o >= t} ),
    and r's own piece leaves after a_r and has arrived when the send completes:
    E_r >= a_r + min_s (L(r, s) + m / bflow(r, s)) (in half duplex that send joins the
    receives on the one port). The LP bound (lower_bound) counts a receive as m / b only,
    as a dataflow receive overlaps the previous one's latency; a serial one cannot, so
    this bound is the larger on clusters with imbalanced arrivals (tryton-48 with the
    lab's patterns; docs/grid.md has both bounds).
    Valid for SMPI runs too: a transfer takes at least L + m / bflow there."""
    nbytes = _check(topo, nbytes, None)[0]
    p = topo.nranks
    rows = np.atleast_2d(np.zeros(p) if pattern is None else np.asarray(pattern, np.float64))
    if rows.shape[1:] != (p,) or rows.shape[0] == 0 or not np.all(np.isfinite(rows)):
        raise InputError("serial lower bound", "pattern", f"expected finite arrival times for {p} ranks")
    if p < 2:
        return SerialBound(0.0, 0.0)
    off = ~np.eye(p, dtype=bool)
    # Size-dependent costs: the most favourable factors over piece sizes 1..nbytes (_Model).
    lat_factor, bw_factor = topo.factor_bounds(max(int(nbytes), 1))
    flow = topo.flow_bandwidth() * bw_factor
    transfer = np.where(off, np.asarray(topo.latency, np.float64) * lat_factor + nbytes / flow, np.inf)
    recv_job, send_job = transfer.min(0), transfer.min(1)  # [r]: into r, out of r
    runs, elapsed = [], []
    for a in rows:
        a = a - a.min()
        # Per rank r: jobs = the P-1 other origins (release a_o, length recv_job[r]); in
        # half duplex also r's own send (release a_r, length send_job[r]).
        release = np.where(off, a[None, :], -np.inf)  # [r, o]
        work = np.where(off, recv_job[:, None], 0.0)
        exits = a + send_job
        if not topo.full_duplex:
            release = np.concatenate([release, a[:, None]], 1)
            work = np.concatenate([work, send_job[:, None]], 1)
        exits = np.maximum(exits, _single_machine(release, work))
        runs.append(float(exits.max()))
        elapsed.append(float(np.mean(exits - a)))
    return SerialBound(float(np.mean(runs)), float(np.mean(elapsed)))
