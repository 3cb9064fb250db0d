"""Paired comparisons of two placement policies over the same replays (same pod list, same seed).

Who calls it: ``replay.sweep``'s summary, for ``hetsched sweep`` and ``bench/openb_table.py``. Each seed is a
pair: both policies saw the same shuffled arrivals and the same node order, so the seed-to-seed noise (about
0.1–0.5 points of unallocated GPU) cancels in the difference. Two tests, both two-sided, no distribution
assumed:

- :func:`sign_test` — exact binomial test on the seeds won and lost (ties dropped); valid for any count, the
  one to read per pod list (10 seeds: p ≥ 0.002).
- :func:`signed_rank_test` — Wilcoxon's signed-rank test, normal approximation with the tie and zero
  corrections (Pratt's zeros dropped as Wilcoxon's); it uses the sizes of the differences too, for the
  pooled comparison over every pod list and seed (n in the hundreds).

Hand-written because the project's dependencies (numpy, no scipy) do not have them; each is a few lines and
``tests/test_paired.py`` checks them against published values.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact p-value that wins and losses are equally likely (ties already dropped)."""
    if wins < 0 or losses < 0:
        raise ValueError("wins and losses must be non-negative")
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1))
    return min(1.0, 2.0 * tail / float(2**n))


def signed_rank_test(differences: Sequence[float]) -> float:
    """Two-sided p-value of Wilcoxon's signed-rank test that the paired differences are centred on zero
    (normal approximation, tie-corrected variance, zero differences dropped, continuity-corrected)."""
    values = [d for d in differences if d != 0 and not math.isnan(d)]
    n = len(values)
    if n == 0:
        return 1.0
    ordered = sorted(range(n), key=lambda i: abs(values[i]))
    ranks = [0.0] * n
    start = 0
    while start < n:  # equal sizes share the mean of their ranks
        end = start
        while end + 1 < n and abs(values[ordered[end + 1]]) == abs(values[ordered[start]]):
            end += 1
        for position in range(start, end + 1):
            ranks[ordered[position]] = (start + end) / 2 + 1
        start = end + 1
    positive = sum(r for r, v in zip(ranks, values, strict=True) if v > 0)
    mean = n * (n + 1) / 4
    ties = Counter(abs(v) for v in values).values()
    variance = n * (n + 1) * (2 * n + 1) / 24 - sum(t**3 - t for t in ties) / 48
    if variance <= 0:
        return 1.0
    z = max(abs(positive - mean) - 0.5, 0.0) / math.sqrt(variance)
    return min(1.0, math.erfc(z / math.sqrt(2)))
