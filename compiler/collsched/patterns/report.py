"""The arrival report: per call site, how imbalanced its calls are and who is late.

Input is a trace (docs/trace-format.md: one Series per (call site, communicator)) or a
PAP file with iterations (one Series, bytes given). For each Series (docs/trace.md):

- the Faraj imbalance factor of every call, omega / T: omega = latest - earliest
  arrival, T = the time of one message of the call's bytes (model.simulate.piece_time:
  the median over rank pairs of the topology's transfer time); its worst case, mean and
  median, and the fraction of calls with factor > 1 (imbalanced, in Faraj's terms);
- who is late: per rank, how often it is the last to arrive and how often among the
  k = max(1, P // 8) latest (predict.late_k);
- the time lost waiting: per call, the sum over ranks of (latest arrival - own arrival),
  what the ranks spend in the call before the last one arrives; its total, and per rank;
- elapsed times (exit - arrival), when the input has exits.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..inputs.arrivals import load_pap
from .predict import late_k
from .tracefile import Trace, group_mask, groups, is_trace, read_trace


@dataclass(frozen=True)
class Series:
    """The calls of one (call site, communicator): what one arrival-pattern sequence is."""
    name: str                     # the call site's name
    comm: int                     # communicator index in the trace (0 for a PAP file)
    comm_id: int
    collective: str
    bytes: np.ndarray             # (n,) bytes per rank of each call
    arrivals: np.ndarray          # (n, P) seconds, each row's earliest at 0
    exits: np.ndarray | None      # (n, P) seconds from the same base, or None
    flags: np.ndarray | None = None

    @property
    def nranks(self) -> int:
        return int(self.arrivals.shape[1])

    @property
    def ncalls(self) -> int:
        return int(self.arrivals.shape[0])

    def label(self) -> str:
        return f"{self.name} (comm {self.comm}, {self.nranks} ranks)"


@dataclass(frozen=True)
class Source:
    """What a report was made from."""
    path: str
    kind: str                     # 'trace' or 'pap'
    series: list
    trace: Trace | None = None


def series_of(trace: Trace) -> list[Series]:
    """One Series per (call site, communicator) group of the trace, in groups() order."""
    out = []
    for g in groups(trace):
        block, m = group_mask(trace, g)
        out.append(Series(g.site_name, g.comm, g.comm_id, g.collective, block.bytes[m],
                          block.arrivals[m], block.exits[m], block.flags[m]))
    return out


def load_source(path, nbytes: int | None = None, need_bytes: bool = True) -> Source:
    """A trace file (detected by its magic) or a PAP file with iterations (one Series
    named 'pap', every call of `nbytes` bytes per rank: required then, unless
    `need_bytes` is False; a trace records its own, so `nbytes` is refused there)."""
    if is_trace(path):
        if nbytes is not None:
            raise InputError("--bytes", str(nbytes), f"expected only with an arrival-pattern "
                                                     f"file: the trace {path} records its bytes")
        trace = read_trace(path)
        return Source(str(path), "trace", series_of(trace), trace)
    a = load_pap(path)
    if nbytes is None and need_bytes:
        raise InputError("--bytes", "", f"{path} is an arrival-pattern file, which records no "
                                        f"message size: give the bytes per rank (e.g. --bytes 1MiB)")
    a = a - a.min(axis=1, keepdims=True)
    size = np.full(len(a), int(nbytes or 0), dtype=np.int64)
    return Source(str(path), "pap", [Series("pap", 0, 0, "allgather", size, a, None)])


def select(source: Source, site: str | None) -> Series:
    """The one Series of `site` (a name, or 'NAME@COMM' for a site on several
    communicators); without a site, the only Series. InputError listing them otherwise."""
    found = source.series if site is None else [
        s for s in source.series if site in (s.name, f"{s.name}@{s.comm}")]
    if len(found) == 1:
        return found[0]
    names = "; ".join(f"{s.name}@{s.comm} ({s.nranks} ranks, {s.ncalls} calls)" for s in source.series)
    what = ("several call sites: name one with --site" if site is None else
            f"no call site {site!r}" if not found else f"call site {site!r} is on several "
                                                        f"communicators: name one as SITE@COMM")
    raise InputError(source.path, "--site", f"{what}; the sites: {names or 'none'}")


@dataclass
class SiteReport:
    series: Series
    t_message: np.ndarray         # (n,) T of each call, seconds
    omega: np.ndarray             # (n,) latest - earliest arrival, seconds
    factor: np.ndarray            # (n,) omega / T
    wait: np.ndarray              # (n,) sum over ranks of latest - own arrival, seconds
    wait_rank: np.ndarray         # (P,) total waiting per rank, seconds
    last: np.ndarray              # (P,) calls in which the rank arrived last
    latest: np.ndarray            # (P,) calls in which it was among the k latest
    k: int
    elapsed: np.ndarray | None    # (n, P) exit - arrival, seconds
    extra: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """Plain numbers for JSON and the text table."""
        s, f = self.series, self.factor
        d = {"site": s.name, "comm": s.comm, "comm_id": s.comm_id, "ranks": s.nranks,
             "collective": s.collective, "calls": s.ncalls,
             "bytes_min": int(s.bytes.min()), "bytes_max": int(s.bytes.max()),
             "t_message_s": float(np.median(self.t_message)),
             "imbalance_factor": {"worst": float(f.max()), "mean": float(f.mean()),
                                  "median": float(np.median(f)),
                                  "fraction_over_1": float((f > 1).mean())},
             "omega_s": {"mean": float(self.omega.mean()), "max": float(self.omega.max())},
             "wait_s": {"total": float(self.wait.sum()), "mean_per_call": float(self.wait.mean()),
                        "per_rank": self.wait_rank.tolist()},
             "late": {"k": self.k, "last": self.last.tolist(), "latest_k": self.latest.tolist(),
                      "most_often_last": top_ranks(self.last)},
             "elapsed_s": None}
        if self.elapsed is not None:
            e = self.elapsed
            d["elapsed_s"] = {"mean": float(e.mean()), "median": float(np.median(e)),
                              "p95": float(np.percentile(e, 95)), "max": float(e.max()),
                              "mean_per_rank": e.mean(axis=0).tolist()}
        if s.flags is not None:
            d["schedule_ran_fraction"] = float(((s.flags & 1) != 0).mean())
            d["site_mismatch_calls"] = int(((s.flags & 2) != 0).sum())
        return d


def top_ranks(counts: np.ndarray, n: int = 3) -> list:
    """The (up to) n ranks with the largest nonzero counts: [[rank, count], ...]."""
    order = np.argsort(-counts, kind="stable")[:n]
    return [[int(r), int(counts[r])] for r in order if counts[r] > 0]


def message_times(topology, nbytes: np.ndarray) -> np.ndarray:
    """T for every call: piece_time once per distinct size."""
    from ..model.simulate import piece_time

    sizes, inverse = np.unique(nbytes, return_inverse=True)
    times = np.array([piece_time(topology, int(b)) for b in sizes])
    return times[inverse]


def site_report(series: Series, topology) -> SiteReport:
    """The report of one Series under `topology` (a Topology of series.nranks ranks)."""
    a = series.arrivals
    n, p = a.shape
    t = message_times(topology, series.bytes)
    latest_t = a.max(axis=1)
    omega = latest_t - a.min(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(t > 0, omega / np.where(t > 0, t, 1.0), np.where(omega > 0, np.inf, 0.0))
    behind = latest_t[:, None] - a
    k = late_k(p)
    last = np.bincount(np.argmax(a, axis=1), minlength=p)
    top = np.argsort(-a, axis=1, kind="stable")[:, :k]
    latest = np.bincount(top.ravel(), minlength=p)
    elapsed = None if series.exits is None else series.exits - a
    return SiteReport(series, t, omega, factor, behind.sum(axis=1), behind.sum(axis=0),
                      last, latest, k, elapsed)


def report(source: Source, topology_for) -> list[SiteReport]:
    """site_report for every Series; topology_for(nranks) gives each one's topology."""
    cache: dict = {}
    out = []
    for s in source.series:
        if s.nranks not in cache:
            cache[s.nranks] = topology_for(s.nranks)
        out.append(site_report(s, cache[s.nranks]))
    return out


def to_json(source: Source, reports: list[SiteReport], topology_name: str) -> dict:
    d = {"file": source.path, "kind": source.kind, "topology": topology_name,
         "sites": [r.summary() for r in reports]}
    if source.trace is not None:
        tr = source.trace
        d.update(world_size=tr.world_size, t0_s=tr.t0, calls=tr.ncalls,
                 clock_offsets_applied=bool(tr.flags & 1),
                 clock_offset_max_s=float(np.abs(tr.offsets).max()) if tr.offsets.size else 0.0)
    return d


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


def text_lines(source: Source, reports: list[SiteReport], topology_name: str) -> list[str]:
    """The report as plain text lines: a header, one table row per site, then per site
    the ranks most often late and the elapsed times."""
    head = f"{source.path}: {source.kind}"
    if source.trace is not None:
        tr = source.trace
        est = "corrected by the estimated offsets" if tr.flags & 1 else "one clock"
        sites = f"{len(reports)} call site" + ("s" if len(reports) != 1 else "")
        head += (f", {tr.world_size} ranks, {tr.ncalls} calls, {sites}; "
                 f"clocks {est}, largest offset {float(np.abs(tr.offsets).max()) * 1e6:.1f} us")
    lines = [head, f"T: one message of the call's bytes on {topology_name}", ""]
    cols = ("site", "comm", "P", "calls", "bytes", "T ms", "worst w/T", "mean w/T",
            ">1", "wait ms/call", "wait total s")
    rows = []
    for r in reports:
        d = r.summary()
        b = (f"{d['bytes_min']}" if d["bytes_min"] == d["bytes_max"]
             else f"{d['bytes_min']}..{d['bytes_max']}")
        f = d["imbalance_factor"]
        rows.append((d["site"], str(d["comm"]), str(d["ranks"]), str(d["calls"]), b,
                     _ms(d["t_message_s"]), f"{f['worst']:.2f}", f"{f['mean']:.2f}",
                     f"{100 * f['fraction_over_1']:.0f}%", _ms(d["wait_s"]["mean_per_call"]),
                     f"{d['wait_s']['total']:.4f}"))
    lines += table(cols, rows)
    for r in reports:
        d = r.summary()
        late = ", ".join(f"rank {q} ({c}x)" for q, c in d["late"]["most_often_last"]) or "-"
        top = ", ".join(f"rank {q} ({c}x)" for q, c in top_ranks(r.latest)) or "-"
        lines.append("")
        lines.append(f"{r.series.label()}:")
        lines.append(f"  last to arrive most often: {late}")
        lines.append(f"  among the {r.k} latest most often: {top}")
        if d["elapsed_s"]:
            e = d["elapsed_s"]
            lines.append(f"  elapsed ms: mean {_ms(e['mean'])}, median {_ms(e['median'])}, "
                         f"p95 {_ms(e['p95'])}, max {_ms(e['max'])}")
        if "schedule_ran_fraction" in d:
            lines.append(f"  a schedule ran in {100 * d['schedule_ran_fraction']:.0f}% of the calls"
                         + (f"; {d['site_mismatch_calls']} calls named different sites on some ranks"
                            if d["site_mismatch_calls"] else ""))
    return lines


def table(cols, rows) -> list[str]:
    """A plain text table: columns padded to their widest cell, the first left-aligned."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]

    def line(cells):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return [line(cols)] + [line(r) for r in rows]
