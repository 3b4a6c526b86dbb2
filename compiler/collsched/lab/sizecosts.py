"""From `collsched measure`'s fit sweep to a topology's message_costs tables.

collsched-measure times one message at every size of a dense log-spaced list (phase 3,
"fit_pairs" in its JSON) on one representative rank pair per link class. Here:

* each round trip T(m) (m bytes out, an empty answer back) becomes a one-way time
  t(m) = T(m) - T(0) / 2: the answer costs what half an empty round trip does (latency is
  taken as symmetric, as everywhere in `measure`);
* the pair's class: intra_host (two ranks on one host), lan:SITE (two hosts of a site;
  both directions are averaged) or wan:A:B (one direction, A's host sends);
* t(m) is fitted piecewise linear (sizefit.py): a_i + m / b_i on segment i;
* the table is relative to the nominal latency and bandwidth the topology file gives that
  pair (measure's straight-line fit): latency_factor_i = a_i / L, bandwidth_factor_i =
  b_i / b, so that L * latency_factor(m) + m / (b * bandwidth_factor(m)) is the fitted
  time at every size;
* pairs of a class that was not swept (a site with one host, ...) get the table of the
  first swept class of their kind (`lan`, `wan`), else `all` (the first swept class
  between hosts, else the intra-host one).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..inputs import msgcosts
from .sizefit import SizeFit, fit_piecewise


@dataclass
class ClassFit:
    cls: str  # link class selector (msgcosts)
    pairs: list[tuple[int, int]]  # measured directions (ranks)
    latency_s: float  # nominal L and b the factors are relative to
    bandwidth_Bps: float
    fit: SizeFit
    table: msgcosts.CostTable
    sizes: list[int]  # sizes with a one-way time
    one_way_s: list[float]

    def to_dict(self) -> dict:
        return {"pairs": [list(p) for p in self.pairs], "nominal_latency_s": self.latency_s,
                "nominal_bandwidth_Bps": self.bandwidth_Bps, **self.fit.to_dict(),
                "table": self.table.to_list(),
                "one_way_s": dict(zip(map(str, self.sizes), self.one_way_s))}


def one_way(sizes, round_trip) -> np.ndarray:
    """t(m) = T(m) - T(0) / 2 (nan where not measured); needs size 0."""
    sizes = list(sizes)
    t = np.array([np.nan if x is None else x for x in round_trip], np.float64)
    if 0 not in sizes or not np.isfinite(t[sizes.index(0)]):
        raise ValueError("the fit sweep needs the 0-byte round trip")
    return t - t[sizes.index(0)] / 2.0


def link_class(rank_host, host_site, src: int, dst: int) -> str:
    a, b = rank_host[src], rank_host[dst]
    if a == b:
        return "intra_host"
    if host_site[a] == host_site[b]:
        return f"lan:{host_site[a]}"
    return f"wan:{host_site[a]}:{host_site[b]}"


def _nominal(meas, cls: str, src: int, dst: int) -> tuple[float, float]:
    a, b = meas.rank_host[src], meas.rank_host[dst]
    if cls == "intra_host":
        return meas.intra_host
    lat, bw = meas.host_latency, meas.host_bandwidth
    if cls.startswith("lan"):  # both directions averaged: the harmonic mean of the rates
        return float(lat[a, b]), float(2.0 / (1.0 / bw[a, b] + 1.0 / bw[b, a]))
    return float(lat[a, b]), float(bw[a, b])


def table_of(fit: SizeFit, latency_s: float, bandwidth_Bps: float) -> msgcosts.CostTable:
    """The fit as factors relative to (latency_s, bandwidth_Bps), clipped to the valid range."""
    lo, hi = msgcosts.MIN_FACTOR, msgcosts.MAX_FACTOR
    lat, bw = [], []
    for s in fit.segments:
        lf = s.a / latency_s if latency_s > 0 else hi
        bf = 1.0 / (s.per_byte * bandwidth_Bps) if s.per_byte > 0 else hi
        lat.append(float(min(hi, max(lo, lf))))
        bw.append(float(min(hi, max(lo, bf))))
    return msgcosts.CostTable(tuple(s.start for s in fit.segments), tuple(lat), tuple(bw))


def class_times(raw: dict, meas) -> dict[str, tuple[list[tuple[int, int]], np.ndarray, np.ndarray]]:
    """{class: (measured directions, sizes, one-way times)} from the program's fit sweep: LAN
    and intra-host classes average both directions, a WAN class is one direction."""
    sizes = [int(x) for x in raw.get("fit_sizes") or []]
    groups: dict[str, list[dict]] = {}
    for rec in raw.get("fit_pairs") or []:
        cls = link_class(meas.rank_host, meas.host_site, int(rec["src"]), int(rec["dst"]))
        if len(groups.setdefault(cls, [])) < (1 if cls.startswith("wan") else 2):
            groups[cls].append(rec)
    out = {}
    for cls, recs in groups.items():
        times = np.array([one_way(sizes, r["time_s"]) for r in recs])
        with warnings.catch_warnings():  # a size no direction reached: nan, quietly
            warnings.simplefilter("ignore", RuntimeWarning)
            t = np.nanmean(times, axis=0)
        ok = np.isfinite(t) & (t > 0)
        out[cls] = ([(int(r["src"]), int(r["dst"])) for r in recs], np.asarray(sizes)[ok], t[ok])
    return out


def fit_classes(raw: dict, meas) -> list[ClassFit]:
    """One ClassFit per swept link class, in the order the program measured them."""
    out = []
    for cls, (pairs, sizes, t) in class_times(raw, meas).items():
        if len(sizes) < 2:
            continue
        nominal = _nominal(meas, cls, *pairs[0])
        fit = fit_piecewise(sizes, t)
        out.append(ClassFit(cls, pairs, nominal[0], nominal[1], fit, table_of(fit, *nominal),
                            [int(x) for x in sizes], [float(x) for x in t]))
    return out


def refine_sizes(fits: list[ClassFit]) -> list[int]:
    """Bisection: the middle of every gap between two segments' measured sizes (and 0, which
    the one-way times need); [] when every breakpoint is exact."""
    mids = {(p.last + n.first) // 2 for f in fits for p, n in zip(f.fit.segments, f.fit.segments[1:])
            if n.first - p.last > 1}
    return sorted(mids | {0}) if mids else []


def add_points(fits: list[ClassFit], raw: dict, meas) -> None:
    """Add a further fit sweep's sizes to the classes it measured, and refit them."""
    more = class_times(raw, meas)
    for f in fits:
        if f.cls not in more:
            continue
        have = dict(zip(f.sizes, f.one_way_s))
        for m, t in zip(*more[f.cls][1:]):
            if int(m) > 0:
                have.setdefault(int(m), float(t))
        f.sizes = sorted(have)
        f.one_way_s = [have[m] for m in f.sizes]
        f.fit = fit_piecewise(f.sizes, f.one_way_s)
        f.table = table_of(f.fit, f.latency_s, f.bandwidth_Bps)


def message_costs(fits: list[ClassFit], host_site) -> msgcosts.MessageCosts | None:
    """The swept classes' tables plus the fallbacks for pairs no swept class covers."""
    if not fits:
        return None
    tables = {f.cls: f.table for f in fits}
    h = len(host_site)
    covered = np.zeros((h, h), bool)
    for cls in tables:
        covered |= msgcosts.host_classes(host_site, cls, h)
    need = ~covered & ~np.eye(h, dtype=bool)  # (intra-host pairs: swept whenever they exist)
    for kind in ("lan", "wan"):
        same = [f for f in fits if f.cls.startswith(kind + ":")]
        if same and (need & msgcosts.host_classes(host_site, kind, h)).any():
            tables[kind] = same[0].table
            need &= ~msgcosts.host_classes(host_site, kind, h)
    if need.any():
        inter = [f for f in fits if f.cls != "intra_host"] or fits
        tables["all"] = inter[0].table
    return msgcosts.build(tables, host_site)
