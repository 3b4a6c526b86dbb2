"""Predicting the next arrival pattern from the ones seen, and scoring the predictors.

Every predictor works on normalised patterns (classes.normalise: offsets, the earliest
rank at 0) and predicts a normalised pattern. `predict_all(x)` returns, for every
iteration i, the prediction made from x[:i] (NaN where it has none): one pass, so a
trace of many calls is scored without a quadratic cost.

- LastPattern: the previous pattern.
- SimpleMovingAverage(k): the mean of the last k patterns.
- ExponentialMovingAverage(alpha): e_i = alpha x_i + (1 - alpha) e_{i-1}, the EMA over
  iterations the BDR paper names as its future work.
  (Averages of normalised patterns are made normalised again as class patterns are:
  their smallest entry set to 0, classes.zero_smallest.)
- LinearExtrapolation: the BDR paper's predictor (Proficz 2021, Listing 1) extrapolates
  *within* an iteration: at PAT_Edge(p%) after t seconds of computing, the end is
  expected at t / p. A trace holds no progress marks, only whole iterations, so it is
  applied *across* iterations: each rank's offset continues the line through its last
  two, 2 x[n-1] - x[n-2], clipped at 0 and normalised again.
- Recurrence: docs/cache.md's selection rule, steps 4-5 (the C runtime's cache.c
  implements the same): each observed pattern is labelled with its class (nearest), the
  next label is next_label's, the prediction is that class's pattern; an unknown or no
  label predicts the last pattern.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .classes import Clustering, cluster, label_all, normalise, zero_smallest

# The longest cycle the recurrence rule looks for (docs/cache.md, step 5).
MAX_PERIOD = 16


def next_label(history) -> int | None:
    """The class predicted to come next after the labels `history` (h[0..n-1], -1 for
    unknown): the smallest period p in 1..16 with n >= 2p whose last p labels repeat the
    p before them (h[n-1-i] == h[n-1-i-p] for i = 0..p-1) predicts h[n-p]; without such
    a period, the last label h[n-1]; without history, None. The result may be -1 (an
    unknown pattern recurs): then the caller has no class to use."""
    h = list(history)[-2 * MAX_PERIOD:]
    n = len(h)
    if n == 0:
        return None
    for p in range(1, MAX_PERIOD + 1):
        if n < 2 * p:
            break
        if h[n - p:] == h[n - 2 * p:n - p]:
            return int(h[n - p])
    return int(h[-1])


def _check(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"expected patterns of shape (iterations, P), got {x.shape}")
    return normalise(x)


class Predictor:
    name = "predictor"

    def predict_all(self, x) -> np.ndarray:
        """(n, P): row i predicts x[i] from x[:i]; NaN rows where there is no prediction."""
        raise NotImplementedError

    def predict(self, history) -> np.ndarray | None:
        """The next pattern after `history` (n, P); None without a prediction."""
        h = _check(history)
        row = self.predict_all(np.vstack([h, np.zeros((1, h.shape[1]))]))[-1]
        return None if np.isnan(row).any() else row


class LastPattern(Predictor):
    name = "last"

    def predict_all(self, x):
        x = _check(x)
        out = np.full_like(x, np.nan)
        out[1:] = x[:-1]
        return out


@dataclass
class SimpleMovingAverage(Predictor):
    k: int = 4

    @property
    def name(self):
        return f"sma({self.k})"

    def predict_all(self, x):
        x = _check(x)
        if self.k < 1:
            raise ValueError(f"sma: expected k >= 1, got {self.k}")
        c = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
        i = np.arange(1, len(x))
        lo = np.maximum(i - self.k, 0)
        out = np.full_like(x, np.nan)
        out[1:] = zero_smallest((c[i] - c[lo]) / (i - lo)[:, None])
        return out


@dataclass
class ExponentialMovingAverage(Predictor):
    alpha: float = 0.5

    @property
    def name(self):
        return f"ema({self.alpha:g})"

    def predict_all(self, x):
        x = _check(x)
        if not 0 < self.alpha <= 1:
            raise ValueError(f"ema: expected 0 < alpha <= 1, got {self.alpha}")
        out = np.full_like(x, np.nan)
        e = x[0].copy()
        for i in range(1, len(x)):
            out[i] = zero_smallest(e)
            e = self.alpha * x[i] + (1 - self.alpha) * e
        return out


class LinearExtrapolation(Predictor):
    name = "linear"

    def predict_all(self, x):
        x = _check(x)
        out = np.full_like(x, np.nan)
        if len(x) > 1:
            out[1] = x[0]
        if len(x) > 2:
            out[2:] = normalise(np.maximum(2 * x[1:-1] - x[:-2], 0.0))
        return out


class Recurrence(Predictor):
    """The cache's rule over given classes (a Clustering, or centroids and radii from a
    cache index)."""
    name = "recurrence"

    def __init__(self, centroids, radius):
        self.centroids = np.atleast_2d(np.asarray(centroids, dtype=np.float64))
        self.radius = np.asarray(radius, dtype=np.float64)

    @classmethod
    def trained(cls, clustering: Clustering) -> "Recurrence":
        return cls(clustering.centroids, clustering.radius)

    def labels(self, x) -> np.ndarray:
        return label_all(_check(x), self.centroids, self.radius)

    def predicted_labels(self, x) -> list:
        """Row i: next_label(labels of x[:i]) (None for i = 0)."""
        h = self.labels(x).tolist()
        return [next_label(h[max(0, i - 2 * MAX_PERIOD):i]) for i in range(len(h))]

    def predict_all(self, x):
        x = _check(x)
        out = np.full_like(x, np.nan)
        for i, lab in enumerate(self.predicted_labels(x)):
            if lab is not None and lab >= 0:
                out[i] = self.centroids[lab]
            elif i > 0:
                out[i] = x[i - 1]
        return out


def default_predictors() -> list:
    """The predictors `collsched trace --predict` scores besides the recurrence."""
    return [LastPattern(), SimpleMovingAverage(4), ExponentialMovingAverage(0.5),
            LinearExtrapolation()]


def late_k(nranks: int) -> int:
    """How many of the latest ranks the order score compares: max(1, P // 8)."""
    return max(1, nranks // 8)


@dataclass(frozen=True)
class Score:
    name: str
    mae_t: float          # mean |predicted - actual| offset over scored calls and ranks, / T
    max_t: float          # the largest per-call mean error, / T
    late_set: float       # fraction of calls whose k latest ranks were predicted (as a set)
    late_order: float     # ... and in the right order (latest first)
    calls: int            # calls scored


def _latest(x: np.ndarray, k: int) -> np.ndarray:
    """(n, k): the k latest ranks of each row, latest first (ties: the lower rank)."""
    return np.argsort(-x, axis=1, kind="stable")[:, :k]


def score(name: str, predicted: np.ndarray, actual: np.ndarray, t_message: float) -> Score:
    """Scores predictions (n, P) of normalised patterns against the actual ones."""
    k = late_k(actual.shape[1])
    err = np.abs(predicted - actual).mean(axis=1) / t_message
    lp, la = _latest(predicted, k), _latest(actual, k)
    order = (lp == la).all(axis=1)
    same = (np.sort(lp, axis=1) == np.sort(la, axis=1)).all(axis=1)
    n = len(actual)
    return Score(name, float(err.mean()) if n else float("nan"),
                 float(err.max()) if n else float("nan"),
                 float(same.mean()) if n else float("nan"),
                 float(order.mean()) if n else float("nan"), n)


def default_train(n: int) -> int:
    """Training prefix when none is given: a quarter of the calls, at least 2."""
    return max(2, n // 4)


def evaluate(patterns, t_message: float, train: int | None = None, predictors=None,
             clustering: Clustering | None = None) -> tuple[list[Score], Clustering]:
    """Score the predictors (default_predictors() plus a Recurrence over cluster() of the
    first `train` patterns, or over `clustering`) on patterns (n, P) seconds.

    Every predictor sees every pattern in order; the scored calls are those from index
    max(train, 2) on: after the recurrence's training prefix and once linear
    extrapolation has two patterns - the same calls for every predictor. Errors are in
    units of t_message (T, the time of one message of the calls' bytes)."""
    x = _check(patterns)
    if t_message <= 0:
        raise ValueError(f"evaluate: expected a message time > 0, got {t_message}")
    n = len(x)
    train = default_train(n) if train is None else int(train)
    if not 1 <= train < n:
        raise ValueError(f"evaluate: expected a training prefix of 1 to {n - 1} calls, got {train}")
    if clustering is None:
        clustering = cluster(x[:train], t_message)
    preds = list(default_predictors() if predictors is None else predictors)
    preds.append(Recurrence.trained(clustering))
    start = max(train, 2)
    scores = [score(p.name, p.predict_all(x)[start:], x[start:], t_message) for p in preds]
    return scores, clustering
