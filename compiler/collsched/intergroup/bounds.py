"""Bounds on intergroup allgather(v) time on a topology, in seconds (docs/intergroup.md,
"Models").

Two kinds, in one dict (`bounds`):

- **Lower bounds**, valid for every schedule of the collective as both models of
  timing.py time it (and as SMPI runs it: the same platform): `M`, the paper's bound
  max(q k_B, p k_A) t_w generalised to block vectors and a topology (each rank must take
  all of the remote group's bytes through its own receiving port or NIC: per rank r,
  min latency into r + K_remote(r) / the fastest rate at which r can receive), and `cut`,
  the bound of the cut between the two groups' ranks (all of A's K_A bytes cross from a
  rank of A to a rank of B at least once, through A's sending ports, B's receiving ports
  and, where every such pair crosses a shared WAN link, those links: K_A / the cut's
  capacity, and likewise B -> A). `lower_bound` is the larger. They use the most
  favourable rates a model may apply (model/lowerbound.py's conventions: the largest
  bandwidth factor and smallest latency factor of message-size-dependent costs over sizes
  up to a group's data; the larger of the DAG model's port rate and the fluid model's NIC;
  the intra-host flows of ranks sharing a host added to the NIC's rate, as the fluid model
  lets them pass beside it). On a homogeneous cluster M = L + max(K_A, K_B) / b.

- **The paper's bounds** (cost.py's formulas) with t_s and t_w taken from the topology:
  t_s the largest latency and t_w the inverse of the smallest one-flow bandwidth
  (Topology.flow_bandwidth: the TCP window's cap included) over all pairs of distinct
  ranks, since the algorithms use pairs within the groups as well as between them: the
  paper's homogeneous model with the slowest pair standing for every pair, so on a
  heterogeneous topology these are pessimistic readings of the formulas, on a homogeneous
  one exactly the paper's. Size-dependent cost factors are not applied. They are upper
  estimates of the algorithms' times in the paper's model, not guarantees of any model's
  prediction (docs/intergroup.md says where they hold): `theorem1` (equal blocks only),
  `kang` (cost.kang_bound), `theorem3` (Eq. 4), `kang_v` (cost.kang_v_bound), `eq1`,
  `eq2`, each with one t_s per message on the busiest port's chain where the paper's
  formula has no startup term (`kang`, `kang_v`, `theorem3`: the exchange's messages
  at the busiest port, then n - 1 ring messages).
"""
from __future__ import annotations

import numpy as np

from . import cost
from .groups import A, B, Groups, even_cuts
from ..errors import InputError
from ..model import fluid
from ..model.lowerbound import _path_latency


def paper_rates(topo) -> tuple[float, float]:
    """(t_s, t_w) for the paper's formulas: the slowest pair of distinct ranks."""
    off = ~np.eye(topo.nranks, dtype=bool)
    if not off.any():
        return 0.0, 0.0
    return float(np.asarray(topo.latency)[off].max()), float(1.0 / topo.flow_bandwidth()[off].min())


def _rates(topo, max_bytes: int):
    """(lat, into, out_of) per rank pair [s, r]: the smallest latency and the largest rates at
    which a flow s -> r can leave s and enter r under either model (module docstring)."""
    p = topo.nranks
    off = ~np.eye(p, dtype=bool)
    lat_factor, bw_factor = topo.factor_bounds(max(int(max_bytes), 1))
    lat = np.where(off, np.asarray(topo.latency, np.float64) * lat_factor, np.inf)
    bw = np.asarray(topo.bandwidth, np.float64)
    flow = topo.flow_bandwidth()
    send_port, recv_port = topo.port_bandwidth
    with np.errstate(divide="ignore"):
        os_rate = send_port if topo.os_per_byte is None else 1.0 / np.asarray(topo.os_per_byte)
    dag_out = np.maximum(os_rate, flow)  # a send interval lasts min(os, L + m / b_flow)
    dag_in = np.maximum(bw, recv_port)
    # The fluid model: a host's NIC up and down, plus loopback flows beside it.
    src, dst = np.nonzero(off)
    net = fluid._Network(topo, src[:1], dst[:1])
    nh = len(topo.hosts)
    host = np.asarray(topo.rank_host)
    down = nh if topo.full_duplex else 0
    nic_up = np.asarray(net.capacity[:nh])[host]
    nic_down = np.asarray(net.capacity[down:down + nh])[host]
    same = (host[:, None] == host[None, :]) & off
    loop = np.where(same, flow, 0.0)
    fluid_out = nic_up + loop.sum(1)  # per sender
    fluid_in = nic_down + loop.sum(0)  # per receiver
    out_of = np.maximum(dag_out, fluid_out[:, None]) * bw_factor
    into = np.maximum(dag_in, fluid_in[None, :]) * bw_factor
    return lat, np.where(off, into, 0.0), np.where(off, out_of, 0.0)


def _port_bound(groups: Groups, lat, into) -> float:
    """M on the topology: max over ranks of the earliest a remote byte can reach the rank
    (the shortest chain of latencies from the remote group: a relay may be nearer) + the
    remote group's bytes at the fastest rate the rank can receive at."""
    p = groups.p
    lat = _path_latency(np.where(np.isfinite(lat), lat, 0.0))
    best = 0.0
    for g, ranks, remote in ((A, slice(0, p), slice(p, None)), (B, slice(p, None), slice(0, p))):
        k_remote = groups.total(groups.other(g))
        if k_remote == 0:
            continue
        first = lat[remote, ranks].min(0)
        rate = into[:, ranks].max(0)
        best = max(best, float(np.max(first + k_remote / rate)))
    return best


def _cut_bound(groups: Groups, topo, lat, into, out_of, bw_factor: float) -> float:
    """All of one group's bytes cross into the other through the cut's capacity."""
    p = groups.p
    links = topo.shared_links
    best = 0.0
    for g, snd, rcv in ((A, slice(0, p), slice(p, None)), (B, slice(p, None), slice(0, p))):
        k = groups.total(g)
        if k == 0:
            continue
        cap = min(float(out_of[snd, rcv].max(1).sum()), float(into[snd, rcv].max(0).sum()))
        if links.any:
            crossing = links.link_of[snd, rcv]
            if (crossing >= 0).all():
                used = np.unique(crossing)
                cap = min(cap, float(links.bandwidth[used].sum()) * bw_factor)
        best = max(best, float(lat[snd, rcv].min()) + k / cap)
    return best


def _exchange_messages(groups: Groups) -> int:
    """Most exchange messages at one port in `plan_kang_v`: per receiver the senders whose
    blocks meet its chunk, per sender the chunks its block meets."""
    most = 1
    for g in (A, B):
        n_recv = groups.size(groups.other(g))
        cuts = np.asarray(even_cuts(groups.total(g), n_recv))
        off = np.asarray(groups.offsets(g))
        lo, hi = off[:-1], off[1:]
        full = hi > lo
        # chunk index of each block's first and last byte
        first = np.searchsorted(cuts, lo[full], "right") - 1
        last = np.searchsorted(cuts, hi[full] - 1, "right") - 1
        if len(first):
            most = max(most, int((last - first + 1).max()))
            per_chunk = np.zeros(n_recv + 1, np.int64)
            np.add.at(per_chunk, first, 1)
            np.add.at(per_chunk, last + 1, -1)
            most = max(most, int(np.cumsum(per_chunk).max()))
    return most


def bounds(groups: Groups, topo) -> dict:
    """Lower bounds and the paper's bounds of an intergroup allgather(v) on `topo`, in
    seconds (module docstring), with the t_s and t_w used for the paper's bounds."""
    if topo.nranks != groups.nranks:
        raise InputError(topo.source, "nranks", f"expected {groups.nranks} ranks (p + q = "
                                                f"{groups.p} + {groups.q}), got {topo.nranks}")
    largest = max(groups.total(A), groups.total(B))
    lat, into, out_of = _rates(topo, largest)
    bw_factor = float(topo.factor_bounds(max(largest, 1))[1].max())
    m = _port_bound(groups, lat, into)
    cut = _cut_bound(groups, topo, lat, into, out_of, bw_factor)
    t_s, t_w = paper_rates(topo)
    p, q = groups.p, groups.q
    n, c = max(p, q), -(-max(p, q) // min(p, q))
    uniform = len(set(groups.sizes_a)) == 1 and len(set(groups.sizes_b)) == 1
    ring = (n - 1) * t_s
    kang_v_startup = _exchange_messages(groups) * t_s + ring
    return {
        "t_s": t_s, "t_w": t_w,
        "M": m, "cut": cut, "lower_bound": max(m, cut),
        "M_paper": cost.lower_bound_m(groups, t_w) + t_s,
        "theorem1": cost.theorem1_bound(groups, t_s, t_w) if uniform else None,
        "kang": cost.kang_bound(groups, t_w) + c * t_s + ring if uniform else None,
        "theorem3": cost.theorem3_bound(groups, t_w) + kang_v_startup,
        "kang_v": cost.kang_v_bound(groups, t_w) + kang_v_startup,
        "eq1": cost.eq1_bound(groups, t_s, t_w),
        "eq2": cost.eq2_bound(groups, t_s, t_w),
        "eq5_ratio": cost.eq5_ratio(groups) if largest else None,  # a ratio of zero times
    }
