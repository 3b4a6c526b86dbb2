"""`collsched trace`'s work as library calls: the report of a trace (or PAP file), the
predictors' scores per call site, the export of one call site as a PAP file.

The command line (cli_trace.py) only parses options and prints what these return."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..inputs.arrivals import write_pap
from . import predict as P
from .report import SiteReport, Source, load_source, report, select, table, text_lines, to_json

DEFAULT_TOPOLOGY = "the default homogeneous cluster (1 Gbit/s, 50 us)"
# A call site needs this many calls to be scored: one to train on, two before the linear
# extrapolation predicts, one to score.
MIN_PREDICT_CALLS = 3


@dataclass
class Prediction:
    site: SiteReport
    train: int
    t_message: float              # the median T of the site's calls: the error's unit
    scores: list
    clustering: object

    def to_dict(self) -> dict:
        c = self.clustering
        return {"train": self.train, "t_message_s": self.t_message, "classes": c.k,
                "threshold_s": c.threshold, "class_counts": c.counts.tolist(),
                "late_k": P.late_k(self.site.series.nranks),
                "scores": [{"predictor": s.name, "mae_t": s.mae_t, "max_t": s.max_t,
                            "late_set": s.late_set, "late_order": s.late_order,
                            "calls": s.calls} for s in self.scores]}


@dataclass
class Analysis:
    source: Source
    reports: list
    topology: str
    predictions: list = field(default_factory=list)
    skipped: list = field(default_factory=list)   # sites too short to score

    def to_json(self) -> dict:
        """The report as JSON-ready data: a number that is not finite (the imbalance
        factor of a call whose T is 0: one rank) becomes None."""
        d = to_json(self.source, self.reports, self.topology)
        by = {id(p.site): p for p in self.predictions}
        for r, s in zip(self.reports, d["sites"]):
            s["prediction"] = by[id(r)].to_dict() if id(r) in by else None
        return _finite(d)

    def text_lines(self) -> list[str]:
        lines = text_lines(self.source, self.reports, self.topology)
        for p in self.predictions:
            lines += [""] + prediction_lines(p)
        for r in self.skipped:
            lines += ["", f"{r.series.label()}: {r.series.ncalls} calls, too few to score "
                          f"predictors (at least {MIN_PREDICT_CALLS})"]
        return lines


def _finite(x):
    if isinstance(x, float):
        return x if np.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def prediction_lines(p: Prediction) -> list[str]:
    c = p.clustering
    head = (f"prediction, {p.site.series.label()}: trained on the first {p.train} calls "
            f"({c.k} class{'es' if c.k != 1 else ''}, threshold {c.threshold * 1e3:.3f} ms), scored on the "
            f"{p.scores[0].calls} after; errors in T = {p.t_message * 1e3:.3f} ms; latest "
            f"{P.late_k(p.site.series.nranks)} ranks right as a set / in order")
    rows = [(s.name, f"{s.mae_t:.3f}", f"{s.max_t:.3f}", f"{100 * s.late_set:.0f}%",
             f"{100 * s.late_order:.0f}%") for s in p.scores]
    return [head] + ["  " + line for line in table(
        ("predictor", "MAE (T)", "worst call (T)", "latest set", "latest order"), rows)]


def topology_for(path: str | None):
    """nranks -> the Topology of `path` (or the default homogeneous cluster) for them."""
    from ..pipeline import resolve_topology

    return lambda n: resolve_topology(n, path, None)


def analyse(path, topology: str | None = None, nbytes: int | None = None,
            site: str | None = None, predict: bool = False,
            train: int | None = None) -> Analysis:
    """The report of the trace or PAP file at `path` (every call site, or `site`'s), with
    the predictors scored per call site when `predict` (training on the first `train`
    calls of each site; default predict.default_train)."""
    source = load_source(path, nbytes)
    if site is not None:
        source = Source(source.path, source.kind, [select(source, site)], source.trace)
    reports = report(source, topology_for(topology))
    out = Analysis(source, reports, topology or DEFAULT_TOPOLOGY)
    if predict:
        for r in reports:
            n = r.series.ncalls
            if n < MIN_PREDICT_CALLS:
                out.skipped.append(r)
                continue
            t = max(float(np.median(r.t_message)), 1e-12)
            k = P.default_train(n) if train is None else train
            if not 1 <= k < n:
                raise InputError("--train", str(train), f"expected 1 to {n - 1}: "
                                                        f"{r.series.label()} has {n} calls")
            scores, cl = P.evaluate(r.series.arrivals, t, train=k)
            out.predictions.append(Prediction(r, k, t, scores, cl))
    return out


def export_pap(path, out, site: str | None = None, nbytes: int | None = None) -> tuple:
    """Writes one call site's arrival patterns (one iteration per call, in call order,
    seconds, each call's earliest rank at 0) as a PAP file with iterations; returns the
    Series written. InputError listing the sites when `site` is needed and missing."""
    source = load_source(path, nbytes, need_bytes=False)
    s = select(source, site)
    write_pap(out, s.arrivals, unit="s",
              comment=f"from {source.path}: call site {s.name}, communicator {s.comm} "
                      f"({s.nranks} ranks), {s.ncalls} calls, {int(s.bytes.min())}.."
                      f"{int(s.bytes.max())} bytes per rank")
    return s
