"""Execution policies the compiler decides per schedule, apart from the algorithms.

Concurrency is chosen by the cost model, not by fixed rules (docs/semantics.md, "How
concurrency is chosen"): these functions only say which candidates are worth timing; the
pipeline compiles each, times it with the DAG model for the topology, size and arrival
pattern, and keeps the fastest.

Segments (`--segments auto`, segment_candidates): where the TCP window caps a path below
its bandwidth, one flow cannot fill it and more pieces in flight can; Min3 then tries
cutting each block into 1, 2, 4, 8 and 16 segments (under SMPI on wan-3x16 the count it
picks runs faster than unsegmented blocks, and the cost model ranks the counts as SMPI
does; docs/grid.md). Where the topology has size-dependent costs (message_costs), a
smaller piece may cost less per byte (SimGrid's SMPI model: 9 KB pieces move at 1.09x
the link's bandwidth, 37 KB ones at 0.70x, and 64 KiB ones pay 11.6 latencies): every
algorithm that takes segments then tries those counts and the ones that put a piece just
under each breakpoint of the table. Elsewhere (a cluster, the three-site grid's narrow
links) segments only add latency and messages, so there is no search.

Serial or dataflow (execution_candidates): an arrival-aware Min3 plan may be made for
serial execution (serial_list_schedule says where that can pay); with size-dependent costs
both plans are timed and the faster kept (a serial plan pays each message's latency in
turn, which SimGrid's SMPI factors multiply by up to 11.6).

FIFO per link (docs/semantics.md): a send marked FIFO waits until the previous send to
the same peer has completed, so two messages to one peer never share the link and the
first one, which the peer may have to forward, is not slowed by the second. The price is
that the next message cannot start while the previous one is still in flight: one latency
per message. So a send is marked where its link's latency is below the message's transfer
time (a LAN, large pieces) and left unmarked on long links (a WAN), where keeping many
messages in flight is what fills the link - and never where the TCP window caps the
path: there one flow cannot fill the link at any size, and a large piece's transfer time
grows with the window's cap (2 L m / W), so the latency rule alone would mark it (on
wan-3x16 with 4 MiB pieces magpie's coordinators would then send their blocks one after
another, and take several times as long).
"""
from __future__ import annotations

import numpy as np

from ..ir import SEND, Schedule


def window_capped(flow_bw, bandwidth):
    """Elementwise: does the TCP window hold the path below its bandwidth (one flow
    cannot fill it)? flow_bw is Topology.flow_bandwidth()."""
    return flow_bw < bandwidth * (1 - 1e-9)


def fifo_link(latency, piece_bytes, flow_bw, bandwidth):
    """Whether a message of piece_bytes goes FIFO on a link (module docstring): its
    latency is below the transfer time, and the TCP window does not cap the path. Works
    elementwise; the one rule of mark_fifo_links and of the Min3 planner's model."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (latency < piece_bytes / flow_bw) & ~window_capped(flow_bw, bandwidth)


def mark_fifo_links(sched: Schedule, topo, nbytes: int) -> int:
    """Set sched.fifo for sends on the links fifo_link picks; returns how many.

    Multi-piece messages (docs/semantics.md): a message's FIFO mark is its head's, and
    the rule weighs the whole message's bytes (one transfer); joined ops stay unmarked."""
    rank = sched.rank_of_op
    send = sched.kind == SEND
    if sched.has_messages:
        send &= sched.join == 0
        piece = sched.message_sizes(nbytes)
    else:
        piece = sched.piece_bytes(nbytes)[sched.segment]
    src, dst = rank[send], sched.peer[send]
    flow = topo.flow_bandwidth()
    lat_factor, meff = topo.effective_sizes(src, dst, piece[send])  # inputs/msgcosts.py
    fifo = np.zeros(sched.total_ops, np.uint8)
    fifo[np.nonzero(send)[0]] = fifo_link(topo.latency[src, dst] * lat_factor, meff, flow[src, dst],
                                          topo.bandwidth[src, dst]).astype(np.uint8)
    sched.fifo = fifo
    return int(fifo.sum())


def serial_list_schedule(topo, arrivals) -> bool:
    """Whether a serial plan is a candidate for an arrival-aware list schedule (min3 --pap).

    With imbalanced arrivals the greedy gives an early rank's free port one transfer after
    another. In dataflow order they all leave at once and share the rank's NIC, so every
    piece lands late and the pieces forwarded from them later still: arrival-aware min3
    on tryton-48 ran well behind its plan under SMPI. Planned for serial execution (a send
    holds the port until its message has arrived) and run so, it runs as planned, and
    faster still once late ranks relay pieces in the background (min3's plan_serial;
    docs/grid.md has the figures). That holds where one flow fills
    the sender's port, so that parallel flows gain nothing. Where flows are slower than
    the port (window-capped WAN paths), several in flight are what fills a link: dataflow
    stays. Where it holds, the pipeline times both plans and keeps the faster
    (execution_candidates): with size-dependent costs a serial plan pays every message's
    full latency in turn (under SimGrid's SMPI model 11.6 x 50 us per 64 KiB message),
    which a dataflow plan hides.
    """
    if arrivals is None or topo.nranks < 2 or not np.ptp(np.asarray(arrivals, np.float64)) > 0:
        return False
    flow = topo.flow_bandwidth()
    send_rate = topo.port_bandwidth[0]
    off = ~np.eye(topo.nranks, dtype=bool)
    return bool(np.all(flow[off] >= send_rate[off] * (1 - 1e-9)))


# segment_candidates stops where a candidate's schedule would exceed this many operations:
# each one is generated, verified and timed (48 ranks x 16 segments: 72,192 ops).
MAX_AUTO_OPS = 600_000
AUTO_SEGMENTS = (1, 2, 4, 8, 16)


def window_limited(topo) -> bool:
    """Does the TCP window hold some path below its bandwidth (one flow cannot fill it)?"""
    capped = window_capped(topo.flow_bandwidth(), topo.bandwidth)  # a fresh array: cheap to edit
    np.fill_diagonal(capped, False)
    return bool(capped.any())


# A direct plan (no relays) is planned by the exact Python greedy: up to this many
# (rank, piece) pairs per pool, about a second (28 ranks x 8 segments: 6,272).
DIRECT_MAX_PAIRS = 20_000


def execution_candidates(algorithm: str, topo, arrivals) -> list[dict]:
    """Request fields of the plans the pipeline times ({}: serial_list_schedule decides, or
    the algorithm has no choice). Min3 with imbalanced arrivals where a serial plan can
    pay, on a topology with size-dependent costs: serial (kept on a tie), dataflow, and
    dataflow with every piece straight from its origin (no relays: nothing waits for a
    forwarded piece, which NIC sharing delays). With constant costs the serial plan stays
    without a search: the DAG model does not see an early rank's dataflow sends share its
    NIC, and ranks dataflow plans too well (on small clusters it prefers them; SimGrid ran
    the dataflow plan on tryton-48 at 14.0 ms against the serial plan's 8.1, docs/grid.md)."""
    if (algorithm == "min3" and getattr(topo, "message_costs", None) is not None
            and serial_list_schedule(topo, arrivals)):
        return [{"serial": True}, {"serial": False}, {"serial": False, "relays": False}]
    return [{}]


# Algorithms whose blocks cannot be cut (bdr: one segment per rank, the paper's ring).
UNSEGMENTED = frozenset({"bdr"})
# Breakpoint counts beyond this are not tried (each candidate is compiled and timed).
MAX_BREAKPOINT_SEGMENTS = 64


# A breakpoint count keeps its pieces this far (relative) under the breakpoint: a measured
# table's breakpoints are approximate, and a message carries envelope bytes besides its
# payload (SimGrid's 16: a 9361-byte payload already pays the 9377+ factors; the table
# lookup adds MessageCosts.envelope_bytes, the margin covers what a table does not say).
BREAKPOINT_MARGIN = 0.01


def breakpoint_segments(topo, nbytes: int) -> list[int]:
    """Segment counts that put a piece of an nbytes block just under a breakpoint of the
    topology's size-dependent costs: for every table segment starting at or below the
    block size, the smallest count whose largest piece falls BREAKPOINT_MARGIN below the
    next segment."""
    costs = getattr(topo, "message_costs", None)
    if costs is None or nbytes <= 1:
        return []
    counts = set()
    for table in costs.tables:
        for nxt in table.starts[1:]:
            limit = int((nxt - 1) * (1 - BREAKPOINT_MARGIN))
            if nxt <= nbytes and limit >= 1:  # pieces of ceil(nbytes / k) bytes up to limit
                counts.add(-(-nbytes // limit))
    return sorted(k for k in counts if 1 < k <= MAX_BREAKPOINT_SEGMENTS)


def near_breakpoint(topo, piece: int) -> bool:
    """Does a piece of this many bytes lie within BREAKPOINT_MARGIN under a breakpoint of
    the topology's size-dependent costs (where the table is least certain)?"""
    costs = getattr(topo, "message_costs", None)
    return costs is not None and any((nxt - 1) * (1 - BREAKPOINT_MARGIN) < piece < nxt
                                     for table in costs.tables for nxt in table.starts[1:])


def segment_candidates(algorithm: str, topo, nranks: int, nbytes: int | None = None) -> list[int]:
    """Segment counts `--segments auto` tries (module docstring), up to MAX_AUTO_OPS
    operations: Min3 on a topology with window-capped paths; with size-dependent costs
    (and nbytes given) every algorithm that takes segments, also at the breakpoint counts;
    otherwise unsegmented."""
    ops = 2 * nranks * (nranks - 1)  # one send and one receive per piece and rank pair
    costs = nbytes is not None and getattr(topo, "message_costs", None) is not None
    counts = sorted(set(AUTO_SEGMENTS) | set(breakpoint_segments(topo, nbytes) if costs else ()))
    fit = [k for k in counts if ops * k <= MAX_AUTO_OPS]
    if len(fit) < 2 or algorithm in UNSEGMENTED:
        return [1]
    if costs:  # the largest piece of k segments: ceil(nbytes / k)
        return [k for k in fit if k == 1 or not near_breakpoint(topo, -(-nbytes // k))]
    if algorithm != "min3" or not window_limited(topo):
        return [1]
    return [k for k in fit if k in AUTO_SEGMENTS]
