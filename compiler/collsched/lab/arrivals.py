"""Arrival patterns of the mini-benchmark (BDR paper, Listing 4), reproducible from a seed.

In iteration k, rank r computes for 100 ms + u * maxDelay, split in two halves around
PAT_Edge(50%), where u in [0, 1) comes from a counter-based generator of (seed, k, r).
The C mini-benchmark (runtime/src/minibench.c) uses the same generator, so the compiler
knows each iteration's arrival pattern exactly and can predict it, and the lab can say
what PAT_Edge would have predicted there (tests check C and Python agree bit for bit).
"""
from __future__ import annotations

import numpy as np

BASE_COMPUTE_S = 0.100
_MASK = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def uniform(seed: int, iteration: int, rank: int) -> float:
    """u in [0, 1) for one rank in one iteration (53-bit resolution)."""
    x = _splitmix64(_splitmix64(_splitmix64(seed & _MASK) ^ (iteration & _MASK)) ^ (rank & _MASK))
    return (x >> 11) * (1.0 / (1 << 53))


def delays(seed: int, iterations: int, nranks: int, max_delay_s: float) -> np.ndarray:
    """(iterations, P) random share of the computation per rank, in seconds (0 .. maxDelay)."""
    return np.array([[uniform(seed, k, r) * max_delay_s for r in range(nranks)]
                     for k in range(iterations)])


def arrival_pattern(seed: int, iterations: int, nranks: int, max_delay_s: float) -> np.ndarray:
    """Arrival times after the double barrier: 100 ms + the random share (iterations x P)."""
    return BASE_COMPUTE_S + delays(seed, iterations, nranks, max_delay_s)
