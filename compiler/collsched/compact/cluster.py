"""The cluster a compact description stands for (docs/compact-regular.md): the default one
(`inputs.topology.homogeneous`) or a topology file whose rank pairs all cost the same.

A regular algorithm's lists depend on the cost model only through the FIFO marks
(policy.mark_fifo_links) and, for magpie and mpichg2, the sites. On one site where every
pair of ranks has the same latency, bandwidth and (hence) TCP-window cap, and costs do not
depend on the message size, the marks depend on the piece size alone: one threshold
(desc.fifo_min_piece), as on the default cluster, and `--segments auto` keeps one segment
(policy.segment_candidates: no size-dependent costs, not min3). Anything else is refused
in one line (several sites: the compact form for those is the `hier` composition).

The file is read at host level (the reader's own steps, without the P x P rank matrices
load_topology builds), so a check at P = 8192 costs no more than one at 8.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..inputs import topology as topology_file
from ..inputs.schemas import TOPOLOGY_SCHEMA, read_yaml
from .. import resources

DEFAULT_SOURCE = "<homogeneous>"


@dataclass(frozen=True)
class Cluster:
    """What a regular algorithm's lists depend on: one pair's costs and the duplex.
    latency/bandwidth/flow are None where no two ranks talk (P = 1)."""

    source: str  # the topology file, or DEFAULT_SOURCE
    full_duplex: bool
    latency: float | None
    bandwidth: float | None
    flow: float | None  # one flow's bandwidth: bandwidth capped by the TCP window


def default(duplex: str | None = None) -> Cluster:
    """The cluster compile_schedule uses without --topology (homogeneous's defaults)."""
    lat, bw = homogeneous_defaults()
    return Cluster(DEFAULT_SOURCE, duplex != "half", lat, bw, bw)


def homogeneous_defaults() -> tuple[float, float]:
    """(latency s, bandwidth B/s) of the default cluster, read from homogeneous's signature:
    one source of truth."""
    params = inspect.signature(topology_file.homogeneous).parameters
    return params["latency_s"].default, params["bandwidth_Bps"].default


class NotHomogeneous(Exception):
    """The file is a valid topology that no compact description of version 1 covers."""


def read(path: str, nranks: int, duplex: str | None = None) -> Cluster:
    """The cluster of a topology file at nranks ranks. InputError (one line) for a file the
    topology reader refuses; NotHomogeneous (its message: why, one line) for a valid one
    whose lists are not the default cluster's up to the FIFO threshold."""
    doc = read_yaml(resources.topology_path(path), TOPOLOGY_SCHEMA)
    reader = topology_file._Reader(doc)
    d = doc.data
    hosts, host_site = reader.read_hosts()
    if "matrix" in d:
        hlat, hbw, _, _ = reader.read_matrix(hosts)
    else:
        hlat, hbw, _, _ = reader.read_classes(hosts, host_site)
    rank_host = reader.read_placement(hosts, nranks)
    window = float(reader.size("tcp_window", positive=True)) if "tcp_window" in d else None
    full = (d.get("duplex", "full") == "full") if duplex is None else duplex == "full"
    if "message_costs" in d:
        raise NotHomogeneous("size-dependent message costs (the FIFO marks and --segments auto "
                             "then follow the cost tables)")
    used, per_host = np.unique(rank_host, return_counts=True)
    sites = sorted({host_site[h] for h in used.tolist()})
    if len(sites) > 1:
        raise NotHomogeneous(f"{len(sites)} sites ({', '.join(sites[:3])}{', ...' * (len(sites) > 3)}): "
                             f"the compact form over sites is the hier composition")
    # Every pair of distinct ranks: distinct used hosts, and a host with itself (the
    # intra-host class) where it holds two ranks or more.
    pair = ~np.eye(len(used), dtype=bool)
    pair[np.diag_indices(len(used))] = per_host > 1
    lat, bw = hlat[np.ix_(used, used)][pair], hbw[np.ix_(used, used)][pair]
    if lat.size == 0:
        return Cluster(str(path), full, None, None, None)
    # Exact equality: the FIFO pass compares each pair's own float64 values.
    for what, values in (("latencies", lat), ("bandwidths", bw)):
        if not np.all(values == values[0]):
            raise NotHomogeneous(f"rank pairs with different {what} ({values.min():g} to "
                                 f"{values.max():g}; the compact form needs one cost for every pair)")
    latency, bandwidth = np.float64(lat[0]), np.float64(bw[0])
    flow = bandwidth
    if window is not None:  # as Topology.flow_bandwidth computes it, for one pair
        cap = np.float64(window) / (2.0 * latency) if latency > 0 else np.float64(np.inf)
        flow = np.minimum(bandwidth, cap)
    return Cluster(str(path), full, float(latency), float(bandwidth), float(flow))


def resolve(topology: str | None, nranks: int, duplex: str | None = None) -> Cluster:
    """The cluster of a compile's --topology (None: the default) and --duplex (None: the
    topology's own); InputError / NotHomogeneous as `read`."""
    if duplex not in (None, "half", "full"):
        raise InputError("--duplex", str(duplex), "expected half or full")
    return default(duplex) if topology is None else read(topology, nranks, duplex)
