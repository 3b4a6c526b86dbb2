"""Pattern classes: normalised arrival patterns, their distance, and their clustering.

An arrival pattern is one arrival time per rank (seconds). What a schedule cares about is
who is late by how much, not when the call happened, so patterns are compared
*normalised*: minus their minimum (arrival offsets, the earliest rank at 0). The
distance of a pattern to a class pattern is the root mean square over ranks of the
difference (docs/cache.md, "Distance"); the runtime (cache.c) uses the same one.

`cluster` finds the recurring classes of a set of patterns; `nearest` labels a new
pattern with its class or -1. Both are deterministic (no randomness).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# k-means refinement steps after the threshold pass: the threshold pass leaves at most a
# few borderline patterns with the wrong leader; two or three steps settle them.
KMEANS_STEPS = 10


def normalise(a) -> np.ndarray:
    """Arrival offsets: `a` minus its minimum over ranks (the last axis)."""
    a = np.asarray(a, dtype=np.float64)
    return a - a.min(axis=-1, keepdims=True)


def distance(x, c) -> np.ndarray | float:
    """RMS over ranks of normalise(x) - c (seconds). Broadcasts: x (..., P) against c
    (..., P); a float for one pattern and one class."""
    d = np.sqrt(np.mean((normalise(x) - np.asarray(c, dtype=np.float64)) ** 2, axis=-1))
    return float(d) if np.ndim(d) == 0 else d


# Elements of the (rows, classes, ranks) difference array distances() builds at once: it
# works in chunks of rows, so many patterns against many classes stay in bounded memory.
CHUNK_ELEMENTS = 1 << 22


def distances(patterns, centroids) -> np.ndarray:
    """(n, k): distance of each of n patterns (n, P) to each of k class patterns (k, P),
    computed as distance() does (the difference, not an expansion that would round
    differently from the runtime's)."""
    x = normalise(np.atleast_2d(patterns))
    c = np.atleast_2d(np.asarray(centroids, dtype=np.float64))
    out = np.empty((x.shape[0], c.shape[0]))
    step = max(1, CHUNK_ELEMENTS // max(1, c.shape[0] * x.shape[1]))
    for i in range(0, x.shape[0], step):
        d = x[i:i + step, None, :] - c[None, :, :]
        out[i:i + step] = np.sqrt(np.mean(d * d, axis=-1))
    return out


def nearest(x, centroids, radius) -> int:
    """The class of pattern x: the index of the nearest class pattern (ties to the lower
    index) if x lies within that class's radius, else -1. No classes: -1."""
    c = np.atleast_2d(np.asarray(centroids, dtype=np.float64))
    if c.shape[0] == 0 or c.size == 0:
        return -1
    d = distances(np.asarray(x, dtype=np.float64)[None, :], c)[0]
    k = int(np.argmin(d))  # argmin returns the first of equal minima: the lower index
    return k if d[k] <= float(np.asarray(radius, dtype=np.float64)[k]) else -1


def label_all(patterns, centroids, radius) -> np.ndarray:
    """nearest() for every row of `patterns` (n, P): labels (n,), -1 for unknown."""
    x = np.atleast_2d(np.asarray(patterns, dtype=np.float64))
    c = np.atleast_2d(np.asarray(centroids, dtype=np.float64))
    if c.shape[0] == 0 or c.size == 0 or x.shape[0] == 0:
        return np.full(x.shape[0], -1, dtype=np.int64)
    d = distances(x, c)
    k = np.argmin(d, axis=1)
    inside = d[np.arange(len(k)), k] <= np.asarray(radius, dtype=np.float64)[k]
    return np.where(inside, k, -1).astype(np.int64)


@dataclass(frozen=True)
class Clustering:
    """The classes of a set of patterns.

    labels (n,): each pattern's class; centroids (k, P): each class's representative
    pattern (normalised: smallest offset 0); radius (k,): seconds, the distance within
    which a new pattern belongs to the class; counts (k,): members per class; threshold:
    the distance the clustering used (seconds). Classes are numbered in order of first
    appearance: the first pattern is in class 0."""
    labels: np.ndarray
    centroids: np.ndarray
    radius: np.ndarray
    counts: np.ndarray
    threshold: float

    @property
    def k(self) -> int:
        return int(self.centroids.shape[0])


# Patterns the noise estimate looks at (its cost is quadratic in them).
NOISE_SAMPLE = 512


def noise_scale(patterns) -> float:
    """The median distance of a pattern to its nearest other pattern (seconds), over the
    first NOISE_SAMPLE patterns: in a trace of recurring patterns, a pattern's nearest
    neighbour is a member of its own class, so this measures the run-to-run noise (about
    sqrt(2) x its standard deviation), not the differences between classes."""
    x = normalise(np.atleast_2d(patterns))[:NOISE_SAMPLE]
    if len(x) < 2:
        return 0.0
    d = distances(x, x)
    np.fill_diagonal(d, np.inf)
    return float(np.median(d.min(axis=1)))


def default_threshold(patterns, t_message: float) -> float:
    """The distance under which two patterns are one class (seconds):
    max(0.1 x t_message, 0.2 x median spread, 2.5 x noise_scale), spread = max - min of
    a pattern.

    Why: 0.2 of the typical spread sits between what separates real classes and noise:
    classes that differ in which group of ranks is late differ by a large part of the
    spread (one eighth of the ranks late by the whole spread is sqrt(1/8) = 0.35 of it
    RMS, twice that for two disjoint groups), while run-to-run noise of 5% of the spread
    puts members about 0.07 of it apart. The median (not the maximum) keeps one outlier
    call from widening every class. 2.5 x the nearest-neighbour distance keeps noisier
    classes whole (a member is within about 1.5 noise scales of its class's first member),
    and makes pure noise (balanced calls: the spread is the noise) one class, not many.
    0.1 x t_message: differences far below one message time call for the same schedule
    (one rank late by T among 28 is 0.19 T RMS, still a class of its own); splitting them
    would only multiply the cache's entries."""
    x = normalise(np.atleast_2d(patterns))
    spread = float(np.median(x.max(axis=1))) if x.size else 0.0
    return max(0.1 * float(t_message), 0.2 * spread, 2.5 * noise_scale(x))


def _leaders(x: np.ndarray, tau: float) -> np.ndarray:
    """Threshold ("leader") pass: each pattern, in order, joins the nearest existing
    leader within tau, else leads a new class. Returns labels."""
    labels = np.empty(len(x), dtype=np.int64)
    leaders = np.empty_like(x)
    k = 0
    for i, row in enumerate(x):
        if k:
            d = leaders[:k] - row
            d = np.sqrt(np.mean(d * d, axis=1))
            j = int(np.argmin(d))
            if d[j] <= tau:
                labels[i] = j
                continue
        labels[i] = k
        leaders[k] = row
        k += 1
    return labels


def zero_smallest(m) -> np.ndarray:
    """A copy of `m` (..., P) with the smallest entry of each row set to 0 (ties: the
    first): how an average of normalised patterns is made one (class_pattern says why)."""
    m = np.array(m, dtype=np.float64)
    np.put_along_axis(m, np.argmin(m, axis=-1)[..., None], 0.0, axis=-1)
    return m


def class_pattern(members: np.ndarray) -> np.ndarray:
    """The representative of normalised patterns (n, P): their mean, each rank's expected
    offset, with its smallest entry set to 0 (the cache index wants one 0).

    Why not the mean minus its minimum: in an observed pattern the earliest rank is at 0
    and the other on-time ranks scatter above it (by about 2 noise deviations, the gap to
    the minimum of many noisy arrivals), so their mean offsets are all about that gap;
    subtracting it from every rank would put a systematic error on each of them. Setting
    only the smallest to 0 is the pattern nearest the mean (RMS) among those with a 0."""
    return zero_smallest(members.mean(axis=0))


def _centroids(x: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Each class's pattern (class_pattern of its members)."""
    return np.stack([class_pattern(x[labels == j]) for j in range(k)])


def _renumber(labels: np.ndarray) -> np.ndarray:
    """Classes numbered by first appearance, empty ones dropped."""
    order = {}
    for v in labels.tolist():
        order.setdefault(v, len(order))
    return np.array([order[v] for v in labels.tolist()], dtype=np.int64)


def class_radius(member_d: np.ndarray, own: int, separation: np.ndarray, tau: float) -> float:
    """The radius of one class: max(1.5 * its largest member distance, 0.5 * tau), but at
    most half the distance to the nearest other class pattern (then the balls of two
    classes never overlap: a pattern is in one class at most, by the triangle inequality)
    and never below the largest member distance (every member is inside its class).

    Why 1.5x: a class seen n times has met its noise n times; a new member may fall a
    little further out than any seen. 0.5 * tau: a class seen once or twice gets the
    clustering's own tolerance."""
    far = float(member_d.max()) if member_d.size else 0.0
    r = max(1.5 * far, 0.5 * tau)
    others = np.delete(separation[own], own)
    if others.size:
        r = min(r, 0.5 * float(others.min()))
    return max(r, far)


def cluster(patterns, t_message: float, threshold: float | None = None,
            steps: int = KMEANS_STEPS) -> Clustering:
    """The classes of `patterns` (n, P) arrival times in seconds (normalised here).

    A threshold ("leader") pass finds k (each pattern joins the nearest class leader
    within the threshold, else founds a class; default_threshold explains the threshold),
    then up to `steps` k-means steps with that k move borderline patterns to their
    nearest class mean (the leader pass compared them with one member, the first). Empty
    classes are dropped; classes are renumbered by first appearance; the radius of each
    class is class_radius's. Deterministic: the same input gives the same classes."""
    x = normalise(np.atleast_2d(np.asarray(patterns, dtype=np.float64)))
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"cluster: expected patterns of shape (n, P), n, P >= 1, got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("cluster: patterns must be finite")
    tau = default_threshold(x, t_message) if threshold is None else float(threshold)
    labels = _renumber(_leaders(x, tau))
    for _ in range(steps):
        k = int(labels.max()) + 1
        c = _centroids(x, labels, k)
        new = _renumber(np.argmin(distances(x, c), axis=1))
        if np.array_equal(new, labels):
            break
        labels = new
    k = int(labels.max()) + 1
    c = _centroids(x, labels, k)
    d = distances(x, c)[np.arange(len(x)), labels]
    sep = distances(c, c)
    radius = np.array([class_radius(d[labels == j], j, sep, tau) for j in range(k)])
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    return Clustering(labels, c, radius, counts, tau)
