"""Synthetic recurring load patterns: the issue's scenario, for tests, docs and the lab.

"P ranks, iterations cycling through K recurring pattern classes (different late groups,
spread up to `spread`) plus noise of `noise` x the spread." Concretely (seeded, so a
seed gives the same patterns everywhere):

- the ranks are shuffled and cut into K disjoint late groups of g = max(1, ceil(P / 8))
  ranks (at most P // K: K groups must fit);
- class k's spread is s_k = spread x U(0.8, 1) (class 0: exactly `spread`); each rank
  of its late group is late by s_k x U(0.8, 1), its first rank by s_k exactly; every
  other rank is on time;
- iteration i is class i mod K (or `order`'s), its pattern the class pattern plus
  Gaussian noise of standard deviation noise x spread on every rank, then shifted so the
  earliest arrival is 0 (arrival times are >= 0).

Two classes then differ by at least sqrt(2 g / P) x 0.64 x spread (RMS), about 0.32 x
spread: above what classes.default_threshold joins (0.2 x the median spread), while
5% noise keeps members about 0.07 x spread apart.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Scenario:
    patterns: np.ndarray    # (iterations, P) arrival times, seconds, min 0 per row
    labels: np.ndarray      # (iterations,) the true class of each
    classes: np.ndarray     # (K, P) the noiseless class patterns


def recurring(nranks: int, nclasses: int, iterations: int, spread: float = 5e-3,
              noise: float = 0.05, seed: int = 0, order=None) -> Scenario:
    """The scenario above. `order`: the sequence of classes to cycle through (default
    0, 1, ..., K-1)."""
    if not 1 <= nclasses <= nranks:
        raise ValueError(f"recurring: expected 1 <= classes <= ranks, got {nclasses}, {nranks}")
    rng = np.random.default_rng(seed)
    g = max(1, min(math.ceil(nranks / 8), nranks // nclasses))
    ranks = rng.permutation(nranks)
    classes = np.zeros((nclasses, nranks))
    for k in range(nclasses):
        s_k = spread if k == 0 else spread * rng.uniform(0.8, 1.0)
        group = ranks[k * g:(k + 1) * g]
        delay = s_k * rng.uniform(0.8, 1.0, size=g)
        delay[0] = s_k
        classes[k, group] = delay
    cycle = np.arange(nclasses) if order is None else np.asarray(order, dtype=np.int64)
    labels = cycle[np.arange(iterations) % len(cycle)]
    x = classes[labels] + rng.normal(0.0, noise * spread, size=(iterations, nranks))
    x -= x.min(axis=1, keepdims=True)
    return Scenario(x, labels.astype(np.int64), classes)
