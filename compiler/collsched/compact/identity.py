"""The identity check: the C generators' lists against the explicit compiler's.

The explicit side is what compile_schedule does to a regular algorithm before the
verifier and the file (pipeline._compile_one): generate on the cluster (the default one,
or a topology file, in the description's duplex), then
passes.apply (receive gating, which a regular algorithm's schedule skips: it keeps no
transfer order; and the FIFO marks). Those are the columns a .sched section stores, so
equal columns are equal bytes; tests/compiler/test_compact_gen.py also compares whole
files written by compile_schedule for a sample.
"""
from __future__ import annotations

import numpy as np

from .. import passes
from ..algorithms import Request, generate as generate_explicit
from ..inputs.topology import Topology, homogeneous, load_topology
from ..ir import Schedule
from ..model.policy import fifo_link
from .desc import CompactDesc, _homogeneous_defaults
from .native import schedule as compact_schedule

COLUMNS = ("kind", "peer", "origin", "segment", "phase", "fifo")


def explicit(desc: CompactDesc, topology: str | Topology | None = None) -> Schedule:
    """The explicit compiler's lists for what `desc` describes, on the default cluster, the
    topology file `topology` or a Topology (its duplex replaced by the description's, as
    --duplex does)."""
    if topology is None:
        latency, bandwidth = _homogeneous_defaults()
        topo = homogeneous(desc.nranks, latency, bandwidth, full_duplex=desc.full_duplex)
    elif isinstance(topology, Topology):
        topo = topology.with_duplex(desc.full_duplex)
    else:
        topo = load_topology(topology, desc.nranks).with_duplex(desc.full_duplex)
    req = Request(nranks=desc.nranks, nbytes=desc.bytes_max, nseg=desc.nseg,
                  full_duplex=desc.full_duplex, topology=topo, arrivals=np.zeros(desc.nranks))
    sched = generate_explicit(desc.algorithm, req)
    return passes.apply(sched, topo, desc.bytes_max)


def stand_in(desc: CompactDesc) -> Topology | None:
    """A homogeneous cluster (the default bandwidth, a latency chosen here) on which the
    explicit compiler marks FIFO exactly the sends the record marks, or None if none does:
    what `collsched verify` compares a record with when it does not know the topology file
    it was compiled for (the lists depend on the file only through these marks). At
    bytes_max the pieces have one or two sizes, so the latency only has to put the
    smallest marked size above latency x bandwidth and the others below."""
    _, bandwidth = _homogeneous_defaults()
    q, r = divmod(desc.bytes_max, desc.nseg)
    sizes = [q] + ([q + 1] if r else [])
    marked = [m for m in sizes if m >= desc.fifo_min_piece]
    latency = (min(marked) - 0.5) / bandwidth if marked else (max(sizes) + 1) * 2.0 / bandwidth
    lat, bw = np.float64(latency) * np.float64(1.0), np.float64(bandwidth)
    if latency < 0 or any(bool(fifo_link(lat, np.float64(m), bw, bw)) != (m >= desc.fifo_min_piece)
                          for m in sizes):
        return None
    return homogeneous(desc.nranks, latency, bandwidth, full_duplex=desc.full_duplex)


def first_difference(desc: CompactDesc, topology: str | Topology | None = None) -> str | None:
    """None when every rank's generated list equals the explicit one (explicit(desc,
    topology)), column by column; else one line naming the first rank and operation that
    differ."""
    want, got = explicit(desc, topology), compact_schedule(desc)
    counts_want, counts_got = np.diff(want.offsets), np.diff(got.offsets)
    if not np.array_equal(counts_want, counts_got):
        r = int(np.nonzero(counts_want != counts_got)[0][0])
        return f"{desc}: rank {r}: {int(counts_got[r])} ops generated, explicit has {int(counts_want[r])}"
    for col in COLUMNS:
        a, b = getattr(want, col), getattr(got, col)
        bad = np.nonzero(a != b)[0]
        if len(bad):
            i = int(bad[0])
            r = int(np.searchsorted(want.offsets, i, side="right") - 1)
            return (f"{desc}: rank {r} op {i - int(want.offsets[r])}: {col} generated "
                    f"{int(b[i])}, explicit {int(a[i])}")
    return None
