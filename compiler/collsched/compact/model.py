"""Cost model and lower bound of compact schedules, per level (issue 24 part 4;
docs/compact-model.md): predictions at 65,536 ranks in seconds, from site-level inputs.

- `predict(desc, topology=None)`: the predicted run time (s) of one call of the schedule
  the description stands for, every rank arriving at 0, under the DAG model of
  docs/semantics.md (model/dag.py).
  * ring, bruck, spreading, nex, rd on a homogeneous cluster (one site, one rank per
    host): the DAG over classes of symmetric transfers (model_sym.py), O(one rank's
    list) = O(P nseg), equal to the full model's (exact for the first four by symmetry;
    rd measured exact, see model_sym.rep_ranks).
  * lnbc, magpie, mpichg2 (one site): an alpha-beta form per level (model_tree.py), with
    the error bound measured against the full model (docs/compact-model.md).
  * hier: per level (model_hier.py): the intra-site rings by the class DAG on each site's
    LAN, the inter-site plan by a site-level event model of its entries over the shared
    WAN links.
- `lower_bound(desc, topology=None)`: a bound no execution under the model can beat,
  from facts F1 and F7 of model/lowerbound.py taken per site (O(2^S S^2), S sites: any
  schedule), and from the described schedule's own chains (F4: the symmetric algorithms'
  forwarding depth, hier's WAN hop and ring) and root (F2: lnbc, magpie, mpichg2).
- `summary(desc, topology_path=None)`: both, with the per-level breakdown, as a dict.

`topology`: None (the default cluster of `compile_schedule`), a Topology, or a topology
file's path; `site_sizes` gives a multi-site file's rank counts beyond its capacity.
"""
from __future__ import annotations

import itertools
import time

import numpy as np

from ..errors import InputError
from ..ir import SEND
from . import model_closed, model_hier, model_sites, model_sym, model_tree, native
from .desc import CompactDesc

SOURCE = "compact model"
MAX_UNION_SITES = 8  # every union of sites as a cut up to here (2^S); beyond, singletons
# The bound's terms are closed forms (one product) where the model sums term by term:
# they can differ in the last bits, so the bound is lowered by this much (relative).
ROUNDING = 1e-9


def _nbytes(desc: CompactDesc, nbytes) -> int:
    n = desc.bytes_max if nbytes is None else nbytes
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not desc.bytes_min <= n <= desc.bytes_max:
        raise InputError(SOURCE, "nbytes", f"expected an integer in the description's range "
                         f"{desc.bytes_min}..{desc.bytes_max}, found {n!r}")
    return int(n)


def _sites(desc: CompactDesc, topology, site_sizes) -> model_sites.Sites:
    if site_sizes is None and desc.algorithm == "hier":
        site_sizes = model_hier.plan_of(desc)[0].sizes  # the tail's
    sites = model_sites.load(topology, desc.nranks, site_sizes)
    if not sites.full_duplex:
        raise InputError(sites.source, "duplex", "expected full duplex (the compact form's)")
    return sites


def _one_site(sites: model_sites.Sites, algorithm: str) -> None:
    if sites.nsites != 1:
        raise InputError(sites.source, "sites", f"expected one site for {algorithm} (the per-level "
                         f"model prices regular algorithms on a homogeneous cluster; hier composes sites)")


def predict(desc: CompactDesc, topology=None, nbytes: int | None = None, site_sizes=None) -> float:
    """Predicted run time (s) of one call (module docstring)."""
    return breakdown(desc, topology, nbytes, site_sizes)["predicted_s"]


def breakdown(desc: CompactDesc, topology=None, nbytes=None, site_sizes=None) -> dict:
    """predicted_s and its levels (a list of dicts: level, what, seconds)."""
    nb = _nbytes(desc, nbytes)
    sites = _sites(desc, topology, site_sizes)
    alg = desc.algorithm
    if alg in model_sym.SYMMETRY:
        _one_site(sites, alg)
        t, info = model_sym.time_classes(desc, lambda m: sites.costs(0, 0, m), sites.eager_limit, nb)
        info["closed_form_s"] = _closed(desc, sites, nb)
        exact = "measured exact" if alg == "rd" else "exact"
        return {"predicted_s": t, "method": f"class DAG ({exact})",
                "levels": [{"level": "ranks", "site": sites.names[0], "ranks": desc.nranks,
                            "seconds": t, **info}]}
    if alg in model_tree.ALGORITHMS:
        _one_site(sites, alg)
        return model_tree.predict(desc, sites, nb)
    if alg == "hier":
        plan, fifo = model_hier.plan_of(desc)
        return model_hier.predict(plan, sites, nb, desc.nseg, fifo)
    served = sorted(set(model_sym.SYMMETRY) | set(model_tree.ALGORITHMS) | {"hier"})
    raise InputError(SOURCE, "algorithm", f"expected one of {', '.join(served)}, found {alg!r}")


def _closed(desc, sites, nb):
    """model_closed's form where it applies (constant costs, no window cap), else None."""
    topo = sites.sample
    if desc.nranks < 2 or topo.message_costs is not None or topo.os_a is not None or topo.g_a is not None:
        return None
    s, r = sites.pair(0, 0)
    lat, bw = float(topo.latency[s, r]), float(topo.bandwidth[s, r])
    if topo.flow_bandwidth()[s, r] < bw:
        return None
    m = nb // desc.nseg
    return model_closed.closed_form(desc.algorithm, desc.nranks, desc.nseg, nb, lat, bw,
                                    m >= desc.fifo_min_piece)


# --- the lower bound --------------------------------------------------------------------

def _factor_bounds(sites, a, b, nbytes):
    """(smallest latency factor, largest bandwidth factor) of site a -> b over sizes up to
    nbytes (Topology.factor_bounds on the sample pair)."""
    topo = sites.sample
    s, r = sites.pair(a, b)
    if topo.message_costs is None:
        return 1.0, 1.0
    lf, bf = topo.factor_bounds(max(int(nbytes), 1))
    return float(lf[s, r]), float(bf[s, r])


def lower_bound(desc: CompactDesc, topology=None, nbytes=None, site_sizes=None) -> float:
    """A proven lower bound (s) on the run time of one call under the DAG model."""
    return bound_terms(desc, topology, nbytes, site_sizes)["lower_bound_s"]


def bound_terms(desc: CompactDesc, topology=None, nbytes=None, site_sizes=None) -> dict:
    """lower_bound_s and its terms. Facts (model/lowerbound.py's F1, F4, F7):

    receive port (F1): a rank r of site X receives the (P - 1) B bytes of the other
    origins; its receive intervals are disjoint, each at least m / (bf_max br) long, and
    the first starts at least one latency after 0: E_r >= Lmin_X + (P - 1) B / max br.
    shared links (F7): for a union U of sites whose every entering site pair has a shared
    link, the last first entry into U ends no earlier than min L_k + B (P - |U|) / R_U,
    R_U the sum of the entering links' rates (each min(beta_k, b_flow) times bf_max).
    depth (F4, symmetric algorithms): some piece is forwarded D times one after another,
    each transfer lasting at least Lmin + m_min / b_flow_max; for hier, a remote block's
    one WAN hop and n_Y - 1 LAN hops round its site's ring.
    root's send port (F2, lnbc, magpie, mpichg2): rank 0's send intervals are disjoint,
    each at least m / (bf_max max(send port rate, b_flow)): E_0 >= Lmin + (bytes rank 0
    sends) / that rate."""
    nb = _nbytes(desc, nbytes)
    sites = _sites(desc, topology, site_sizes)
    p = desc.nranks
    out = {"terms": {}}
    if p < 2:
        out["lower_bound_s"] = 0.0
        return out
    S = sites.nsites
    topo = sites.sample
    lmin = np.full((S, S), np.inf)  # smallest scaled latency from site a to site b
    rate = np.zeros((S, S))  # fastest a receiving port of b takes bytes from a
    flow = np.zeros((S, S))  # fastest one flow a -> b moves (b_flow x bf)
    for a in range(S):
        for b in range(S):
            if a == b and sites.sizes[a] < 2:
                continue
            s, r = sites.pair(a, b)
            lf, bf = _factor_bounds(sites, a, b, nb)
            lmin[a, b] = topo.latency[s, r] * lf
            rate[a, b] = max(topo.bandwidth[s, r], topo.port_bandwidth[1][s, r]) * bf
            flow[a, b] = topo.flow_bandwidth()[s, r] * bf
    recv = 0.0
    for b in range(S):
        into = [a for a in range(S) if np.isfinite(lmin[a, b])]
        t = min(lmin[a, b] for a in into) + (p - 1) * nb / max(rate[a, b] for a in into)
        recv = max(recv, t)
    out["terms"]["receive_port_s"] = recv
    best = recv
    links = topo.shared_links
    if S > 1 and links.any and nb > 0:
        link = np.full((S, S), -1, np.int64)
        for a in range(S):
            for b in range(S):
                if a != b:
                    link[a, b] = links.link_of[sites.pair(a, b)]
        cuts = (itertools.chain.from_iterable(itertools.combinations(range(S), k) for k in range(1, S))
                if S <= MAX_UNION_SITES else ([x] for x in range(S)))
        wan = 0.0
        for cut in cuts:
            inside = set(cut)
            pairs = [(a, b) for a in range(S) if a not in inside for b in inside]
            if any(link[a, b] < 0 for a, b in pairs):
                continue
            ks = {}
            for a, b in pairs:
                k = int(link[a, b])
                _, bf = _factor_bounds(sites, a, b, nb)
                # rate 1 / c_k, c_k = min(1 / beta_k, 1 / b_flow) over k's pairs (F7)
                ks[k] = max(ks.get(k, 0.0), float(links.bandwidth[k]) * bf, flow[a, b])
            lk = min(lmin[a, b] for a, b in pairs)
            outside = p - sum(sites.sizes[x] for x in inside)
            wan = max(wan, lk + nb * outside / sum(ks.values()))
        out["terms"]["shared_links_s"] = wan
        best = max(best, wan)
    if desc.algorithm in model_tree.ALGORITHMS and S == 1 and nb > 0:
        # The root's send port (F2): its send intervals are disjoint, each at least
        # m / (bf_max max(send port rate, b_flow)) long, and its last transfer ends a
        # latency after its interval starts. The root sends every block of a round.
        ops = native.generate(desc, 0)
        pieces = model_sym._piece_bytes(nb, desc.nseg)
        sent = float(pieces[ops["segment"][ops["kind"] == SEND].astype(np.int64)].sum())
        s_, r_ = sites.pair(0, 0)
        _, bf = _factor_bounds(sites, 0, 0, nb)
        send_rate = max(topo.bandwidth[s_, r_], topo.port_bandwidth[0][s_, r_], flow[0, 0] / bf) * bf
        if topo.os_a is not None:  # os(m) = a + m per_byte >= m per_byte (LogGP given)
            pb = float(topo.os_per_byte[s_, r_])
            send_rate = max(send_rate, 1.0 / pb if pb > 0 else np.inf)
        root = lmin[0, 0] + sent / send_rate
        out["terms"]["root_send_port_s"] = root
        best = max(best, root)
    if desc.algorithm in model_sym.SYMMETRY and S == 1:
        _, info = model_sym.time_classes(desc, lambda m: sites.costs(0, 0, m), sites.eager_limit, nb)
        pieces = model_sym._piece_bytes(nb, desc.nseg)
        m_min = int(pieces.min())
        hop = lmin[0, 0] + m_min / flow[0, 0] if m_min else lmin[0, 0]
        depth = info["depth"] * hop
        out["terms"]["depth_s"] = depth
        best = max(best, depth)
    if desc.algorithm == "hier":
        # hier's chains (F4): a site's own block goes n_X - 1 LAN hops round phase 1's
        # ring; a remote block enters Y by one WAN transfer and goes n_Y - 1 LAN hops round
        # phase 3's ring to the owner's predecessor, each hop once the last has ended.
        m_min = int(model_sym._piece_bytes(nb, desc.nseg).min())

        def hop(a, b):
            return lmin[a, b] + (m_min / flow[a, b] if m_min else 0.0)
        chain = 0.0
        for y in range(S):
            lan = (sites.sizes[y] - 1) * hop(y, y) if sites.sizes[y] > 1 else 0.0
            wan = min((hop(x, y) for x in range(S) if x != y), default=None)
            chain = max(chain, lan + (wan if wan is not None else 0.0))
        out["terms"]["depth_s"] = chain
        best = max(best, chain)
    out["terms"] = {k: float(v) for k, v in out["terms"].items()}
    out["lower_bound_s"] = float(best) * (1 - ROUNDING)
    return out


def summary(desc: CompactDesc, topology_path=None, nbytes=None, site_sizes=None) -> dict:
    """predicted_s, lower_bound_s, model ("per-level"), levels, compute_s (the wall time of
    both, s): what `collsched compile --form compact --json` and the lab report."""
    t = time.perf_counter()
    b = breakdown(desc, topology_path, nbytes, site_sizes)
    lb = bound_terms(desc, topology_path, nbytes, site_sizes)
    return {"predicted_s": float(b["predicted_s"]), "lower_bound_s": float(lb["lower_bound_s"]),
            "model": "per-level", "method": b.get("method"), "levels": b["levels"],
            "bound_terms": lb["terms"], "compute_s": time.perf_counter() - t}
