"""Lower bounds on the time of alltoall, bcast, reduce and allreduce, for ANY schedule.

`lower_bound(collective, topology, nranks=P, nbytes=n, ...)` bounds the run time (max
finish - min arrival) and the average elapsed time (mean of finish_r - a_r) of every
program the verifier accepts (collectives/verify.py), timed by either model of this
package (model.py, fluid.py) on the same topology, sizes and arrivals. Arrivals are
shifted so that min a = 0 (both models do the same).

What the bound relies on (facts of both models; the same executor, model._Executor):
(M1) Rates. A message of m bytes from s to r is charged at least m / bf bytes, bf <= BF,
     the largest bandwidth factor over sizes up to the largest message
     (Topology.factor_bounds), and waits at least L(s, r) x LF (the smallest latency
     factor). Rank r's bytes leave it at no more than S[r] bytes/s and arrive at no more
     than R[r] bytes/s, all its messages together: the event model keeps a rank's send
     intervals [ready, ready + min(os(m), duration)] and its receive intervals [ready +
     duration - m_eff / recv_rate, ready + duration] disjoint (one port each way; these
     are at least m / S[r], m / R[r] long), and the fluid model shares the host's NIC
     (at most its capacity for the host's inter-host flows) plus, per rank on the same
     host, one intra-host flow at most at its cap. S and R are the largest of these rates
     (_rates): a bound for both models. Every interval lies between the rank's first
     possible activity (>= 0) and its finish.
     With the default os(m) (m_eff over the port's rate) a send interval ends at least a
     latency L x LF before its transfer does; in the fluid model a flow's bytes move only
     after its latency: so a rank's sent bytes arrive at the earliest one least outgoing
     latency after S[r] allows, and every byte lands a least incoming latency after 0.
(M2) Data. A rank issues nothing before it arrives, a piece is forwarded only after it was
     received, and every message waits at least its latency: a byte of rank s's data
     reaches rank r no earlier than a_s + d(s, r), d the shortest latency path
     (model/lowerbound._path_latency of L x LF).
(M3) Shared links (links.SharedLinks.link_of, the route's bottleneck k, capacity beta_k):
     the event model serves the transfers charged to k one after the other (each holds k
     for m_eff / beta_k), the fluid model shares k between every flow crossing it; a
     flow over k waits at least L_k (the least latency of a pair charged to k). If X
     bytes must cross k, the last of them arrives at or after L_k + X / (beta_k BF).
     Which bytes must: G_k is the site graph whose edges are the site pairs not charged
     to k; data of site A reaches without k only A's closure in G_k.
(M3') Site-set cuts. On a full mesh of sites no single link is a cut, but every set X of
     sites is: each byte from X to the other sites crosses the bottleneck resource of its
     pair (link_of) in both models, so X's outgoing bytes move at most at the sum of the
     capacities of the distinct resources charged to the pairs leaving X (a resource
     shared by both directions only loses capacity to the other way). The bytes that
     must leave X: alltoall n |X| |not X| (ranks); bcast n if X holds the root; reduce n
     if the root is outside X; allreduce n (each result element outside X depends on X's
     contributions). Every subset of up to 12 sites is tried; the largest term is kept
     as "cut:sites:<X>". Skipped when some pair leaving X crosses no shared resource.
(M4) Reductions. A RECV_REDUCE of m bytes costs gamma m of its host's CPU, one after the
     other per host, before the rank finishes (inputs/compute.py).
Volume facts of the collectives (verify.py proves the delivery they rest on):
(V1) alltoall: rank d receives every block (s, d), s != d, n bytes each (never locally:
     no op copies), and rank s sends each of its blocks at least once after a_s. Blocks
     are distinct data, so a block crossing from site A to site B out of A's closure in
     G_k crosses k at least once.
(V2) bcast: every non-root receives all n bytes, all of it from the root's data (after
     a_root); the root sends n bytes at least.
(V3) reduce: every non-root's contribution (n bytes) leaves it at least once; the root
     receives every element at least once (P >= 2): n bytes. Merging P disjoint
     contribution sets of one element into one needs P - 1 combines (each RECV_REDUCE
     unions two disjoint sets, a RECV overwrite unions nothing): (P - 1) n bytes of
     reduction in all, over H hosts: gamma (P - 1) n / H at least on one host.
(V5) alltoall's average elapsed: every sender's blocks leave it one port-time after the
     other, so the ranks waiting for them finish in a staircase (_departures).
(V4) allreduce: (V3) per rank, and the one-way gossip bound (Harary and Schwenk, "The
     communication problem on graphs and digraphs", 1974: every node learning every
     node's item by one-way calls takes at least 2 (n - 1) calls): each element travels
     in at least 2 (P - 1) messages, so all ranks together send (and receive) at least
     2 (P - 1) n bytes (a combined value is one element whatever it carries): the time
     is at least 2 (P - 1) n / sum_r S[r] (Patarasuk and Yuan's 2 (P - 1) / P n / B on
     P equal ports). Combines: (P - 1) n bytes as in (V3) (Chan et al.'s (P - 1) / P n
     gamma per rank on P hosts).
Not claimed: a ceil(log2 P) x latency term. Under these models a rank may post many
sends at once (nonblocking; a zero-byte message occupies no port), so a root reaches every
rank in one latency when the data is small; d(s, r) is the latency term that holds.

Per-rank bounds F_r on finish_r (from M1-M4 and V1-V4, with arrivals) give the average
elapsed bound mean(F_r - a_r) ("avg_elapsed_s") and max F_r for the run time; the global
terms (total volume, links, CPU) bound the run time only. `seconds` is the largest
run-time term.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..inputs.compute import reduction_gamma
from ..model.lowerbound import _path_latency
from .program import COLLECTIVES


@dataclass
class CollBound:
    """A lower bound on the run time (`seconds`) and the terms it is the largest of; with
    the per-rank bounds, terms["avg_elapsed_s"] bounds the average elapsed time."""

    seconds: float
    terms: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "terms": dict(self.terms)}


def _restricted(topo, p):
    from .model import _restrict
    return _restrict(topo, p)


def _rates(topo, bf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S, R): per rank, the most bytes per second it can send / receive in all (M1)."""
    from ..model import fluid as allgather_fluid

    p = topo.nranks
    off = ~np.eye(p, dtype=bool)
    bw = np.asarray(topo.bandwidth, np.float64)
    ps, pr = (np.asarray(x, np.float64) for x in topo.port_bandwidth)
    send = np.maximum(bw, ps)
    if topo.os_per_byte is not None:
        with np.errstate(divide="ignore"):
            send = np.maximum(send, np.where(topo.os_per_byte > 0, 1.0 / topo.os_per_byte, np.inf))
    recv = np.maximum(bw, pr)
    dag_s = np.where(off, send * bf, 0.0).max(1)
    dag_r = np.where(off, recv * bf, 0.0).max(0)
    # The fluid model: the host's NIC (its inter-host flows) + intra-host flows at their cap.
    net = allgather_fluid._Network(topo, np.zeros(0, np.int64), np.zeros(0, np.int64))
    nh = len(topo.hosts)
    nic = np.asarray(net.capacity[:nh], np.float64)
    host = np.asarray(topo.rank_host)
    same = (host[:, None] == host[None, :]) & off
    flow = np.asarray(topo.flow_bandwidth(), np.float64)
    intra = np.where(same, flow, 0.0)
    bfm = np.where(off, bf, 0.0).max()
    fl_s = (nic[host] + intra.sum(1)) * bfm
    fl_r = (nic[host] + intra.sum(0)) * bfm
    return np.maximum(dag_s, fl_s), np.maximum(dag_r, fl_r)


def _single_machine(release: np.ndarray, work: float) -> float:
    """max_t (t + work x #{release >= t}): jobs of `work` seconds on one machine."""
    if not len(release):
        return 0.0
    r = np.sort(release)[::-1]
    return float(np.max(r + work * np.arange(1, len(r) + 1)))


def _closures(topo, p):
    """Per shared resource k: (sites, site of each rank, closure sets of G_k per site,
    L_k, beta_k); [] without shared links."""
    links = topo.shared_links
    if p < 2 or not links.any:
        return []
    labels = topo.rank_site()
    sites = list(dict.fromkeys(labels))
    site = np.array([sites.index(x) for x in labels], np.int64)
    ns = len(sites)
    rep = [int(np.argmax(site == a)) for a in range(ns)]
    link = links.link_of
    out = []
    for k in np.unique(link[link >= 0]):
        free = [[b for b in range(ns) if b != a and link[rep[a], rep[b]] != k] for a in range(ns)]
        # The bound needs k to follow the sites (one link per site pair), as links.py gives.
        on = link == k
        if not np.array_equal(on, on[np.ix_(rep, rep)][site[:, None], site[None, :]]):
            continue
        clos = []
        for a in range(ns):
            seen, todo = {a}, [a]
            while todo:
                for b in free[todo.pop()]:
                    if b not in seen:
                        seen.add(b)
                        todo.append(b)
            clos.append(seen)
        out.append((int(k), site, clos, on, float(links.bandwidth[k])))
    return out


def lower_bound(collective: str, topology, *, nranks: int, nbytes: int, root: int = 0,
                elem_bytes: int = 4, arrivals=None) -> CollBound:
    """A lower bound for `collective` (module docstring); ValueError on bad arguments."""
    if collective not in COLLECTIVES:
        raise ValueError(f"lower bound: unknown collective {collective!r}")
    if topology is None:
        raise ValueError("lower bound: a topology is required")
    p = int(nranks)
    if p < 1 or topology.nranks < p:
        raise ValueError(f"lower bound: nranks {nranks} (the topology has {topology.nranks})")
    if isinstance(nbytes, bool) or int(nbytes) != nbytes or nbytes < 0:
        raise ValueError(f"lower bound: nbytes: expected a non-negative integer, got {nbytes!r}")
    if not 0 <= root < p:
        raise ValueError(f"lower bound: root {root} not in 0..{p - 1}")
    del elem_bytes  # volumes are in bytes whatever the element; kept for the interface
    a = np.zeros(p) if arrivals is None else np.asarray(arrivals, np.float64).reshape(-1)
    if a.shape != (p,) or not np.all(np.isfinite(a)):
        raise ValueError(f"lower bound: arrivals: expected {p} finite times")
    a = a - a.min()
    n = float(nbytes)
    if p < 2:
        return CollBound(0.0, {"avg_elapsed_s": 0.0, "run_time_s": 0.0})
    topo = _restricted(topology, p)
    biggest = int(nbytes) * (p * p if collective == "alltoall" else p)
    lf, bf = topo.factor_bounds(max(biggest, 1))
    lat = np.asarray(topo.latency, np.float64) * lf
    d = _path_latency(lat)
    S, R = _rates(topo, bf)
    F = a.copy()  # per-rank finish bounds
    terms: dict[str, float] = {}
    others = ~np.eye(p, dtype=bool)
    # (M1') the bytes a rank sends reach their receiver a latency after its send intervals
    # end (default os(m) = m_eff / port rate < duration - latency); a given os may not
    lin = np.where(others, lat, np.inf).min(0)
    lout = np.where(others, lat, np.inf).min(1) if topo.os_a is None else np.zeros(p)
    if collective == "alltoall":
        for r in range(p):
            rel = (a + d[:, r])[others[:, r]]
            F[r] = max(F[r], _single_machine(rel, n / R[r]), a[r] + lout[r] + (p - 1) * n / S[r])
            if n > 0:
                F[r] = max(F[r], float(np.max(rel)))
    elif collective == "bcast":
        F[root] = max(F[root], a[root] + lout[root] + n / S[root])
        for r in range(p):
            if r != root:
                F[r] = max(F[r], a[root] + d[root, r] + n / R[r])
    else:  # reduce, allreduce
        sends_done = a + lout + n / S  # each contribution's last byte is out of its rank
        dest = [root] if collective == "reduce" else range(p)
        for r in range(p):
            F[r] = max(F[r], sends_done[r]) if (collective == "allreduce" or r != root) else F[r]
        for r in dest:
            src = others[:, r]
            F[r] = max(F[r], float(np.max(np.maximum(a + d[:, r], sends_done)[src])),
                       float(np.min(a[src] + d[src, r])) + n / R[r])
        gamma = reduction_gamma(topo)
        if gamma > 0 and n > 0:
            hosts = len(set(np.asarray(topo.rank_host).tolist()))
            terms["gamma"] = gamma * (p - 1) * n / hosts
        if collective == "allreduce" and n > 0:
            terms["volume"] = float(lout.min()) + 2 * (p - 1) * n / float(S.sum())
            terms["volume_recv"] = float(lin.min()) + 2 * (p - 1) * n / float(R.sum())
    terms.update(_cut_terms(collective, topo, p, n, root, lf, lat, bf))
    terms.update(_site_set_cut(collective, topo, p, n, root, lat, bf))
    terms["per_rank"] = float(F.max())
    run = max(terms.values())
    total = float(F.sum())
    if collective == "alltoall" and n > 0:
        total = max(total, _departures(F, a, S, n))
    terms["avg_elapsed_s"] = total / p - float(np.mean(a))
    terms["run_time_s"] = run
    return CollBound(float(run), terms)


def _departures(F: np.ndarray, a: np.ndarray, S: np.ndarray, n: float) -> float:
    """(V5) A bound on sum_r finish_r for alltoall. Rank q's block for r first leaves q at
    the end of a send interval of q; the intervals are disjoint, after a_q, and each block
    that has left took n / S[q] of them: the k-th block to leave (in any order of the
    destinations) leaves at or after a_q + k n / S[q], and its destination finishes after
    that. Over the P - 1 destinations, with their own bounds F_r, the smallest possible
    sum of max(F_r, departure) pairs both in ascending order (exchange argument). The
    largest such sum over the senders q (plus F_q) bounds sum_r finish_r."""
    p = len(F)
    k = np.arange(1, p)
    best = 0.0
    for q in np.argsort(-a)[:min(p, 64)]:  # the latest senders give the largest sums
        others = np.sort(np.delete(F, q))
        dep = a[q] + k * n / S[q]
        best = max(best, float(np.maximum(others, dep).sum() + F[q]))
    return best


def _cut_terms(collective, topo, p, n, root, lf, lat, bf) -> dict:
    """(M3) per shared resource k: the bytes that must cross it, at its capacity."""
    out = {}
    if n <= 0:
        return out
    links = topo.shared_links
    for k, site, clos, on, beta in _closures(topo, p):
        count = np.bincount(site, minlength=len(clos))
        present = [s for s in range(len(clos)) if count[s]]
        if collective == "alltoall":
            pairs = sum(count[x] * count[y] for x in present for y in present
                        if x != y and y not in clos[x])
            volume = n * pairs
        elif collective == "bcast":
            volume = n if any(y not in clos[site[root]] for y in present) else 0.0
        elif collective == "reduce":
            volume = n if any(site[root] not in clos[x] for x in present) else 0.0
        else:
            volume = n if any(y not in clos[x] for x in present for y in present) else 0.0
        if volume <= 0:
            continue
        lk = float(lat[on].min())
        cost = 1.0 / (beta * float(bf[on].max()))
        name = links.names[k] if k < len(links.names) else str(k)
        out[f"cut:{name}"] = lk + volume * cost
    return out


MAX_CUT_SITES = 12  # 2^12 subsets at most


def _site_set_cut(collective, topo, p, n, root, lat, bf) -> dict:
    """(M3') the largest site-set cut term."""
    links = topo.shared_links
    if n <= 0 or p < 2 or not links.any:
        return {}
    labels = list(topo.rank_site())[:p]
    sites = list(dict.fromkeys(labels))
    if not 2 <= len(sites) <= MAX_CUT_SITES:
        return {}
    site = np.array([sites.index(x) for x in labels], np.int64)
    link = np.asarray(links.link_of)[:p, :p]
    bfm = np.broadcast_to(np.asarray(bf, np.float64), (p, p))
    best, where = 0.0, ""
    for mask in range(1, (1 << len(sites)) - 1):
        inside = (mask >> site) & 1 == 1
        k = link[np.ix_(inside, ~inside)]
        if k.size == 0 or np.any(k < 0):
            continue
        if collective == "alltoall":
            volume = n * int(inside.sum()) * int((~inside).sum())
        elif collective == "bcast":
            volume = n if inside[root] else 0.0
        elif collective == "reduce":
            volume = 0.0 if inside[root] else n
        else:
            volume = n
        if volume <= 0:
            continue
        rate = float(np.asarray(links.bandwidth)[np.unique(k)].sum()) * float(bfm[np.ix_(inside, ~inside)].max())
        term = float(lat[np.ix_(inside, ~inside)].min()) + volume / rate
        if term > best:
            best, where = term, "+".join(str(sites[i]) for i in range(len(sites)) if mask >> i & 1)
    return {f"cut:sites:{where}": best} if best > 0 else {}
