"""patterns.classes: normalised patterns, the distance of docs/cache.md, nearest(), and
cluster() recovering the true classes of the issue's recurring scenario."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from collsched.patterns import classes as C
from collsched.patterns.scenario import recurring


def same_partition(a, b) -> bool:
    """Two labellings describe the same classes (up to their numbering)."""
    a, b = np.asarray(a), np.asarray(b)
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def test_normalise_and_distance_by_hand():
    x = np.array([3.0, 5.0, 3.0, 7.0])
    assert C.normalise(x).tolist() == [0, 2, 0, 4]
    c = np.array([0.0, 2.0, 0.0, 0.0])
    assert C.distance(x, c) == pytest.approx(np.sqrt(16 / 4))
    assert C.distance(x + 100, c) == pytest.approx(2.0)  # a shifted pattern: same offsets
    d = C.distances(np.stack([x, x + 1]), np.stack([c, C.normalise(x)]))
    assert d.shape == (2, 2) and d[0, 1] == 0 and d[1, 1] == 0 and d[1, 0] == pytest.approx(2)
    assert C.normalise(np.array([[1.0, 2.0], [5.0, 4.0]])).tolist() == [[0, 1], [1, 0]]


def test_nearest_radius_and_ties():
    cents = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    assert C.nearest([5.0, 6.0], cents, [0.1, 0.1, 0.1]) == 0      # tie 0/2: the lower
    assert C.nearest([6.0, 5.0], cents, [0.1, 0.1, 0.1]) == 1
    assert C.nearest([5.0, 5.0], cents, [0.1, 0.1, 0.1]) == -1     # outside every radius
    # exactly at the radius is inside: [0,0] is at RMS sqrt(1/2) from [0,1]
    assert C.nearest([5.0, 5.0], cents[:1], [np.sqrt(0.5)]) == 0
    assert C.nearest([1.0, 2.0], np.zeros((0, 2)), []) == -1
    labels = C.label_all([[5.0, 6.0], [6.0, 5.0], [5.0, 5.0]], cents, [0.1, 0.1, 0.1])
    assert labels.tolist() == [0, 1, -1]


def test_cluster_deterministic_numbered_by_first_appearance():
    sc = recurring(28, 3, 30, seed=4, order=[2, 0, 1])
    a = C.cluster(sc.patterns, 1e-4)
    b = C.cluster(sc.patterns.copy(), 1e-4)
    assert a.labels.tolist() == b.labels.tolist() and np.array_equal(a.centroids, b.centroids)
    assert a.labels[:3].tolist() == [0, 1, 2]
    assert a.counts.tolist() == [10, 10, 10]
    assert np.all(a.centroids.min(axis=1) == 0)
    assert a.threshold >= 0.2 * np.median(np.ptp(sc.patterns, axis=1))


def test_cluster_one_pattern_and_flat_patterns():
    one = C.cluster(np.array([[0.0, 1e-3, 2e-3]]), 1e-4)
    assert one.k == 1 and one.radius[0] == pytest.approx(0.5 * one.threshold)
    assert one.threshold == pytest.approx(0.2 * 2e-3)
    flat = C.cluster(np.zeros((5, 4)), 1e-4)
    assert flat.k == 1 and flat.labels.tolist() == [0] * 5 and flat.threshold == pytest.approx(1e-5)
    with pytest.raises(ValueError):
        C.cluster(np.zeros((0, 4)), 1e-4)
    with pytest.raises(ValueError):
        C.cluster(np.array([[0.0, np.nan]]), 1e-4)


def test_large_message_time_joins_small_differences():
    # patterns that differ by less than half a message time are one class
    sc = recurring(16, 3, 30, spread=1e-4, noise=0.0, seed=1)
    assert C.cluster(sc.patterns, t_message=1e-2).k == 1
    assert C.cluster(sc.patterns, t_message=1e-6).k == 3


def test_pure_noise_is_one_class():
    x = np.random.default_rng(3).normal(0, 1e-4, size=(200, 28))
    assert C.cluster(x, t_message=1e-6).k == 1


def test_issue_scenario_message_time_keeps_classes():
    # 1 MiB on tryton-48 takes 8.4 ms: more than the 5 ms spread, yet the 3 classes stay
    sc = recurring(28, 3, 120, seed=0)
    cl = C.cluster(sc.patterns, t_message=8.44e-3)
    assert cl.k == 3 and same_partition(cl.labels, sc.labels)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), nranks=st.integers(8, 64), k=st.integers(1, 5),
       noise=st.floats(0.0, 0.05), t_exp=st.integers(-6, -4))
def test_cluster_recovers_true_classes(seed, nranks, k, noise, t_exp):
    iterations = 24 * k
    sc = recurring(nranks, k, iterations, spread=5e-3, noise=noise, seed=seed)
    cl = C.cluster(sc.patterns, t_message=10.0 ** t_exp)
    assert cl.k == k
    assert same_partition(cl.labels, sc.labels)
    # every member is within its class's radius, and fresh noisy members fall inside
    # their own class while others' stay outside
    assert (C.label_all(sc.patterns, cl.centroids, cl.radius) == cl.labels).all()
    new = C.label_all(sc.classes[sc.labels[:12 * k]] + np.random.default_rng(seed + 1).normal(
        0, noise * 5e-3, size=(12 * k, nranks)), cl.centroids, cl.radius)
    mapping = {int(t): int(l) for t, l in zip(sc.labels, cl.labels)}
    assert new.tolist() == [mapping[int(t)] for t in sc.labels[:12 * k]]


def test_radius_never_overlaps():
    sc = recurring(28, 5, 100, seed=9)
    cl = C.cluster(sc.patterns, 1e-4)
    sep = C.distances(cl.centroids, cl.centroids)
    for i in range(cl.k):
        for j in range(cl.k):
            if i != j:
                assert cl.radius[i] + cl.radius[j] <= sep[i, j] + 1e-15


def test_class_pattern_keeps_the_on_time_ranks_typical_offset():
    assert C.zero_smallest([[2.0, 1.0, 3.0], [0.5, 0.5, 4.0]]).tolist() == [[2, 0, 3], [0, 0.5, 4]]
    # observed patterns: the earliest rank at 0, the other on-time ranks above it; the
    # class pattern keeps their mean offsets (only the smallest becomes 0)
    members = np.array([[0.0, 0.2, 0.1, 5.0], [0.1, 0.0, 0.2, 5.1], [0.2, 0.1, 0.0, 4.9]])
    c = C.class_pattern(members)
    assert c == pytest.approx([0.0, 0.1, 0.1, 5.0])
    assert C.distance(members[0], c) < C.distance(members[0], C.normalise(members.mean(axis=0)))
    sc = recurring(28, 3, 60, seed=5)
    cl = C.cluster(sc.patterns, 1e-3)
    for j in range(cl.k):
        assert cl.centroids[j] == pytest.approx(C.class_pattern(sc.patterns[cl.labels == j]))
