"""Piecewise-linear fit of a transfer time by message size: T(m) = a_i + m * per_byte_i on
segment i, the breakpoints found from the data.

Real MPIs change protocol with the message size (eager / rendezvous, copies through a
bounce buffer, ...), and SimGrid's SMPI network model scales latency and bandwidth by
piecewise-constant factors: either way the time of one message is piecewise linear in its
size. `collsched measure` times one message per size on a dense log-spaced sweep and fits
this module's model to it (docs/measure.md, "Size-dependent costs"):

* **Segmentation**: optimal by dynamic programming over the sorted sizes, for every number
  of segments K up to `max_segments`, minimising the sum of squared *relative* residuals
  (each segment a weighted least-squares line; a segment has `min_points` sizes at least).
* **How many segments**: the K minimising SSE_K / sigma^2 + penalty * 3K * ln(n) (a BIC with
  known noise: each segment costs an intercept, a slope and a breakpoint). sigma is the
  relative noise, estimated from the data (how far each point lies off a line through its
  four neighbours, robustly) and never below `noise_floor`: exact piecewise data (SimGrid)
  finds every break, noisy straight data stays one line.
* **Outliers**: first, isolated ones: a point that the line through its two left
  neighbours and the line through its two right neighbours both miss by more than
  10 sigma (next to a breakpoint a point lies on one of them; a disturbed sample on
  neither, and would otherwise get a segment of its own). Then points further
  than max(6 sigma, 2%) off the first fit are dropped and the fit repeated.
* **Breakpoints**: a segment starts somewhere after the last size of the one before and at
  the latest at its own first size; we take the size where the two fitted lines cross
  when that lies in between, else the geometric middle (a jump).

A segment whose line has a negative intercept or slope is refitted with that term at 0, so
every segment is a valid latency and bandwidth.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_SEGMENTS = 12
MIN_POINTS = 4
NOISE_FLOOR = 1e-4  # relative: 0.01 %
PENALTY = 3.0
OUTLIER_SIGMAS, OUTLIER_MIN = 6.0, 0.02
ISOLATED_SIGMAS = 10.0


@dataclass(frozen=True)
class Segment:
    start: int  # smallest size the segment covers (0 for the first)
    first: int  # first and last measured size in it
    last: int
    a: float  # seconds
    per_byte: float  # seconds per byte

    def time(self, m):
        return self.a + np.asarray(m, np.float64) * self.per_byte


@dataclass(frozen=True)
class SizeFit:
    segments: tuple[Segment, ...]
    noise: float  # relative noise sigma used to choose the number of segments
    rms: float  # root mean square relative residual of the kept points
    dropped: tuple[int, ...]  # sizes dropped as outliers

    @property
    def breakpoints(self) -> list[int]:
        return [s.start for s in self.segments[1:]]

    def predict(self, sizes) -> np.ndarray:
        m = np.asarray(sizes, np.float64)
        starts = np.array([s.start for s in self.segments], np.float64)
        i = np.maximum(np.searchsorted(starts, m, side="right") - 1, 0)
        a = np.array([s.a for s in self.segments])[i]
        pb = np.array([s.per_byte for s in self.segments])[i]
        return a + m * pb

    def to_dict(self) -> dict:
        return {"segments": [{"from": s.start, "sizes": [s.first, s.last], "a_s": s.a,
                              "per_byte_s": s.per_byte} for s in self.segments],
                "breakpoints": self.breakpoints, "noise": self.noise, "rms": self.rms,
                "dropped": list(self.dropped)}


def log_sizes(lo: int, hi: int, per_octave: int) -> list[int]:
    """0 and the integers round(2^(k / per_octave)) from lo to hi (both included), deduplicated."""
    lo, hi = max(int(lo), 1), int(hi)
    k0 = math.floor(per_octave * math.log2(lo))
    k1 = math.ceil(per_octave * math.log2(hi))
    out = {0, lo, hi}
    out.update(int(round(2 ** (k / per_octave))) for k in range(k0, k1 + 1))
    return sorted(x for x in out if x == 0 or lo <= x <= hi)


def _line(x, y, sxx, sxy, syy, sx, sy, cnt):
    """Weighted line through cumulative sums (arrays over segment ends): (a, s, sse)."""
    det = sxx * syy - sxy * sxy
    ok = det > 1e-12 * np.maximum(sxx * syy, 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(ok, (sx * syy - sy * sxy) / det, sx / sxx)
        s = np.where(ok, (sy * sxx - sx * sxy) / det, 0.0)
    sse = np.maximum(cnt - (a * sx + s * sy), 0.0)
    return a, s, sse


def _segment_costs(x, y, min_points):
    """cost[i, j]: relative SSE of the best line through points i..j (inf if too short)."""
    n = len(x)
    cost = np.full((n, n), np.inf)
    for i in range(n):
        xs, ys = x[i:], y[i:]
        sums = [np.cumsum(v) for v in (xs * xs, xs * ys, ys * ys, xs, ys)]
        cnt = np.arange(1, n - i + 1, dtype=np.float64)
        sse = _line(xs, ys, *sums, cnt)[2]
        sse[: min_points - 1] = np.inf
        cost[i, i:] = sse
    return cost


def _segmentations(cost, max_k):
    """For K = 1..max_k: (SSE, [start index of each segment]) of the best K-segmentation."""
    n = len(cost)
    best = np.full((max_k + 1, n + 1), np.inf)  # best[k][j]: points 0..j-1 in k segments
    arg = np.zeros((max_k + 1, n + 1), np.int64)
    best[0][0] = 0.0
    out = []
    for k in range(1, max_k + 1):
        for j in range(1, n + 1):
            cand = best[k - 1][:j] + cost[:j, j - 1]
            i = int(np.argmin(cand))
            best[k][j], arg[k][j] = cand[i], i
        if not np.isfinite(best[k][n]):
            break
        starts, j = [], n
        for kk in range(k, 0, -1):
            i = int(arg[kk][j])
            starts.append(i)
            j = i
        out.append((float(best[k][n]), starts[::-1]))
    return out


def estimate_noise(sizes, times) -> float:
    """Relative noise: robust spread of each point's deviation from the weighted line through
    its two neighbours on either side (points next to a break are outvoted)."""
    m, t = np.asarray(sizes, np.float64), np.asarray(times, np.float64)
    errs = []
    for k in range(2, len(m) - 2):
        idx = [k - 2, k - 1, k + 1, k + 2]
        w = 1.0 / t[idx]
        design = np.column_stack([w, m[idx] * w / max(m[-1], 1.0)])
        coef, *_ = np.linalg.lstsq(design, np.ones(4), rcond=None)
        pred = coef[0] + coef[1] * m[k] / max(m[-1], 1.0)
        errs.append(pred / t[k] - 1.0)
    if len(errs) < 3:
        return 0.0
    e = np.asarray(errs)
    # the prediction itself is uncertain: its error is about 1.2 times the point's noise
    return float(1.4826 * np.median(np.abs(e - np.median(e))) / 1.2)


def isolated_outliers(m, t, sigma) -> np.ndarray:
    """Mask of the isolated outliers (see the module): inner points that the line through
    their two left neighbours and the line through their two right neighbours both miss by
    more than ISOLATED_SIGMAS sigma (relative). A point next to a true breakpoint lies on
    one of the two lines; a disturbed sample lies on neither."""
    out = np.zeros(len(m), bool)
    if len(m) < 5:
        return out
    k = np.arange(2, len(m) - 2)

    def miss(i, j):  # relative miss at k of the line through points i and j
        slope = (t[j] - t[i]) / (m[j] - m[i])
        return np.abs((t[i] + slope * (m[k] - m[i])) / t[k] - 1.0)

    limit = ISOLATED_SIGMAS * sigma
    out[k] = (miss(k - 2, k - 1) > limit) & (miss(k + 1, k + 2) > limit)
    return out


def _fit_segment(m, t):
    """(a, per_byte) >= 0 of the relative least-squares line through the points."""
    w = 1.0 / t
    design = np.column_stack([w, m * w])
    (a, pb), *_ = np.linalg.lstsq(design, np.ones(len(m)), rcond=None)
    if pb < 0:
        a, pb = float(np.sum(w) / np.sum(w * w)), 0.0
    if a < 0:
        a, pb = 0.0, float(np.sum(m * w) / np.sum((m * w) ** 2))
    return float(a), float(pb)


def _break(prev: Segment, nxt_first: int, a: float, pb: float) -> int:
    """Start of the next segment: where the two lines cross, if strictly after prev.last and
    not after nxt_first; else the geometric middle of the gap."""
    lo, hi = prev.last, nxt_first
    if pb != prev.per_byte:
        x = (prev.a - a) / (pb - prev.per_byte)
        if lo < x <= hi:
            return int(min(hi, max(lo + 1, math.ceil(x))))
    mid = math.sqrt(max(lo, 0.5) * hi) if lo > 0 else hi / 2.0
    return int(min(hi, max(lo + 1, round(mid))))


def _choose(options, n, sigma, penalty):
    scores = [sse / sigma**2 + penalty * 3 * len(starts) * math.log(max(n, 2))
              for sse, starts in options]
    return options[int(np.argmin(scores))][1]


def fit_piecewise(sizes, times, max_segments: int = MAX_SEGMENTS, min_points: int = MIN_POINTS,
                  noise_floor: float = NOISE_FLOOR, penalty: float = PENALTY) -> SizeFit:
    """Fit T(m) piecewise linear (see the module). sizes: distinct, >= 0; times: seconds
    (non-finite = not measured, ignored). Needs 2 finite points at least."""
    m = np.asarray(sizes, np.float64)
    t = np.asarray(times, np.float64)
    order = np.argsort(m)
    m, t = m[order], t[order]
    use = np.isfinite(t) & (t > 0)
    m, t = m[use], t[use]
    if len(m) < 2 or len(np.unique(m)) != len(m):
        raise ValueError("fit_piecewise: expected two distinct sizes at least, each once")
    sigma = max(estimate_noise(m, t), noise_floor)
    lone = isolated_outliers(m, t, sigma)
    dropped: list[int] = [int(x) for x in m[lone]]
    m, t = m[~lone], t[~lone]
    for attempt in range(2):
        starts = _best_starts(m, t, max_segments, min_points, sigma, penalty)
        segs = _segments(m, t, starts)
        rel = SizeFit(segs, sigma, 0.0, ()).predict(m) / t - 1.0
        bad = np.abs(rel) > max(OUTLIER_SIGMAS * sigma, OUTLIER_MIN)
        if attempt or not bad.any() or (~bad).sum() < 2:
            break
        dropped += [int(x) for x in m[bad]]
        m, t = m[~bad], t[~bad]
    rms = float(np.sqrt(np.mean(rel**2)))
    return SizeFit(segs, sigma, rms, tuple(dropped))


def _best_starts(m, t, max_segments, min_points, sigma, penalty):
    n = len(m)
    mp = max(1, min(min_points, n // 2))
    x = t.min() / t  # relative residuals, scaled so that the sums stay well conditioned
    y = (m / max(m.max(), 1.0)) * x
    options = _segmentations(_segment_costs(x, y, mp), max(1, min(max_segments, n // mp)))
    return _choose(options, n, sigma, penalty) if options else [0]


def _segments(m, t, starts) -> tuple[Segment, ...]:
    bounds = list(starts) + [len(m)]
    segs: list[Segment] = []
    for i, j in zip(bounds, bounds[1:]):
        a, pb = _fit_segment(m[i:j], t[i:j])
        first, last = int(m[i]), int(m[j - 1])
        start = 0 if not segs else _break(segs[-1], first, a, pb)
        segs.append(Segment(start, first, last, a, pb))
    return tuple(segs)
