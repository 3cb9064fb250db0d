"""Ascend 910B: Atlas 800T A2 (8 chips, one HCCS full mesh) and Atlas 200T A2 Box16 (16 chips in halves
{0–7}, {8–15}).

Who calls it: the ``devicetopology`` scheduler plugin, through ``devices.catalog``.

- ``ascend910b-8`` (Ascend-for-Volcano's base handler for ``module-910b-8``): any 1–8 chips, lowest free
  ids; node score ``100 × healthy − free`` → fuller nodes first.
- ``ascend910b-16`` (``module910bx16``): legal 1–8, 10, 12, 14, 16. ≤ 8 chips inside one half, tightest
  half first (free count n, n+1, …, 8; half 0 checked first), lowest ids; 10/12/14 as 5/6/7 cross pairs
  (i, i+8); 16 the whole node. Node score ``16 × (healthy − best) + (16 − free)``, best = min over halves
  of (free − request).
"""

from __future__ import annotations

import numpy as np

from hetsched.devices.policy import FloatArray, IntArray, TopologyPolicy, lowest, popcount

HALF0, HALF1 = 0x00FF, 0xFF00
LEGAL16 = (*range(1, 9), 10, 12, 14, 16)


class Ascend910B8(TopologyPolicy):
    NAME = "ascend910b-8"
    CHIPS = 8

    def legal(self, n: int, multi_pod: bool) -> bool:
        return 1 <= n <= 8

    def choose(self, free: int, n: int) -> int:
        return lowest(free, n) if 1 <= n <= 8 else 0

    def score(self, free: int, n: int) -> float:
        return -float(popcount(free))

    def health_score(self, healthy: IntArray, chips: int) -> FloatArray:
        return 100.0 * healthy.astype(np.float64)


class Ascend910B16(TopologyPolicy):
    NAME = "ascend910b-16"
    LINK_GROUPS = (HALF0, HALF1)
    LINK_NAME = "HCCS half"
    CHIPS = 16

    def legal(self, n: int, multi_pod: bool) -> bool:
        return n in LEGAL16

    def illegal_reason(self, n: int, multi_pod: bool) -> str:
        return f"{n} chip(s) per pod: Ascend 910B x16 accepts 1–8, 10, 12, 14 or 16"

    def choose(self, free: int, n: int) -> int:
        if n == 16:
            return free if free == 0xFFFF else 0
        if n in (10, 12, 14):
            pairs = [i for i in range(8) if free >> i & 1 and free >> (i + 8) & 1][: n // 2]
            if len(pairs) < n // 2:
                return 0
            return sum((1 << i) | (1 << (i + 8)) for i in pairs)
        if not 1 <= n <= 8:
            return 0
        halves = (free & HALF0, free & HALF1)
        for wanted in range(n, 9):
            for half in halves:
                if popcount(half) == wanted:
                    return lowest(half, n)
        return 0

    def score(self, free: int, n: int) -> float:
        if n > 8:
            best = 0
        else:
            fits = [popcount(h) - n for h in (free & HALF0, free & HALF1) if popcount(h) >= n]
            best = min(fits) if fits else 8
        return -16.0 * best + (16 - popcount(free))

    def health_score(self, healthy: IntArray, chips: int) -> FloatArray:
        return 16.0 * healthy.astype(np.float64)
