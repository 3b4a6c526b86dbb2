"""Block-size rules and the eight experimental settings of Kang et al. 2019, Section 5.

The paper gives p/q and the relation of the sizes in words; the settings below are the
shapes that reproduce its Eq. 5 ratios (7.0, 4.84, 4.21, 6.68, 7.0, 7.0, 4.84, 4.84).
Eq. 5 is (M + 3 K_A + 3 K_B) / M = 4 + 3x with x = min(K_A, K_B) / max(K_A, K_B):

- 1, 5: p = q, equal blocks: x = 1, 7.0.
- 2, 7: p/q = 25/7, equal blocks (k_A = k_B): x = 7/25, 4.84.
- 3: p/q = 25/7, group A's blocks 4 times B's: x = 7/100, 4.21. The text says "group A
  sends larger messages than group A"; 4.21 needs the larger group to send the larger
  blocks, by a factor 4.
- 4: p/q = 25/7, group B's blocks 4 times A's: x = 25/28, 4 + 75/28 = 6.68.
- 6: p = q, arithmetic sizes: x = 1, 7.0 (any rule that is the same in both groups).
- 8: p/q = 25/7, arithmetic sizes: 4.84 needs x = 7/25, i.e. the two groups' mean
  block equal; with the same step k in both groups x would be 105/1275 (4.25). So each
  group gets its own step, k_A : k_B = (q + 1) : (p + 1).

Arithmetic sizes: rank i contributes k (i + 1). The paper writes k i, which gives rank 0
nothing; (i + 1) keeps every rank contributing (docs/intergroup.md).
The process counts are the paper's: 64, 256 or 2048 ranks in all (p + q), so 25/7 means
p = 25 n / 32, q = 7 n / 32 (50 + 14 for 64 ranks).
"""
from __future__ import annotations

from .groups import Groups


def equal_sizes(n: int, k: int) -> tuple[int, ...]:
    return (k,) * n


def arithmetic_sizes(n: int, k: int, first: int = 1) -> tuple[int, ...]:
    """Rank i contributes k (i + first) bytes; first = 1 by default (see module doc),
    first = 0 is the paper's literal k i."""
    return tuple(k * (i + first) for i in range(n))


EQ5 = {1: 7.0, 2: 4.84, 3: 4.21, 4: 6.68, 5: 7.0, 6: 7.0, 7: 4.84, 8: 4.84}
ALLGATHERV_SETTINGS = (5, 6, 7, 8)  # the settings of Algorithm 2 (the rest: Algorithm 1)


def setting_shape(number: int, nprocs: int = 64) -> tuple[int, int]:
    """(p, q) of a setting for nprocs ranks in all (a multiple of 32)."""
    if nprocs % 32:
        raise ValueError("the settings' process counts are multiples of 32")
    if number in (1, 5, 6):
        return nprocs // 2, nprocs // 2
    if number in (2, 3, 4, 7, 8):
        return 25 * nprocs // 32, 7 * nprocs // 32
    raise ValueError(f"no setting {number} (1..8)")


def setting(number: int, k: int, nprocs: int = 64) -> Groups:
    """The groups of a setting with unit size k bytes (module docstring)."""
    p, q = setting_shape(number, nprocs)
    if number in (1, 2, 5, 7):
        return Groups(equal_sizes(p, k), equal_sizes(q, k))
    if number == 3:
        return Groups(equal_sizes(p, 4 * k), equal_sizes(q, k))
    if number == 4:
        return Groups(equal_sizes(p, k), equal_sizes(q, 4 * k))
    if number == 6:
        return Groups(arithmetic_sizes(p, k), arithmetic_sizes(q, k))
    return Groups(arithmetic_sizes(p, k * (q + 1)), arithmetic_sizes(q, k * (p + 1)))
