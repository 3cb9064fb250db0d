"""Ascend 910 (Atlas 800 9000/9010, 8 chips in two HCCS rings {0–3} and {4–7}).

Who calls it: the ``devicetopology`` scheduler plugin, through the registry in ``devices.catalog``.

Two policies:

``ascend-volcano-compat`` — exactly Ascend-for-Volcano's ``module910x8`` (volcano-ascend.md §3.3):
legal 1, 2, 4, 8 chips per pod, and 8 for every pod of a multi-pod job; ≤ 4 chips inside one ring;
ring preference by free count 1 → {1, 3, 2, 4}, 2 → {2, 4, 3}, 4 → {4}, 8 → whole node, left ring first,
lowest ids; node score ``8 × (healthy × 4 − best) + (8 − free)`` with ``best`` from ``affScoreList``.

``ascend-hccs`` (hetsched's) — the same hardware rules (≤ 4 in one ring, 1/2/4/8 per pod) but multi-pod
jobs may use any legal size, so the seed's 8 × 1-chip Job is valid; the chip set and the node are chosen to
minimise the loss of *placement potential*: how many 8-, 4-, 2- and 1-chip pods the node could still take
(weighted by chip count). Taking chips from a whole node destroys its 8-slot, so 1-chip pods of one job
pack onto an already-broken node — one node's 8 chips when one is free — and rings are split so the
leftover stays usable for 2- and 4-chip requests.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from hetsched.devices.policy import FloatArray, IntArray, TopologyPolicy, lowest, popcount

LEFT, RIGHT = 0x0F, 0xF0
LEGAL = (1, 2, 4, 8)
_PRIORITY = {1: (1, 3, 2, 4), 2: (2, 4, 3), 4: (4,)}
# affScoreList: row = request − 1 (1, 2, 4 → rows 0, 1, 3), column = free-in-ring − 1; 4 = infeasible
_AFF = {1: (0, 2, 1, 3), 2: (4, 0, 2, 1), 4: (4, 4, 4, 0)}


def _ring_choice(free: int, n: int, order: tuple[int, ...]) -> int:
    left, right = free & LEFT, free & RIGHT
    for wanted in order:
        for ring in (left, right):
            if popcount(ring) == wanted:
                return lowest(ring, n)
    return 0


class Ascend910Compat(TopologyPolicy):
    NAME = "ascend-volcano-compat"
    LINK_GROUPS = (LEFT, RIGHT)
    LINK_NAME = "HCCS ring"
    CHIPS = 8
    LOCALITY_BONUS = 0.0  # Ascend-for-Volcano scores each pod on its own

    def health_score(self, healthy: IntArray, chips: int) -> FloatArray:
        """``8 × 4 × healthy`` of ScoreBestNPUNodes: the healthy-chip count dominates the score."""
        return 32.0 * healthy.astype(np.float64)

    def legal(self, n: int, multi_pod: bool) -> bool:
        return n == 8 if multi_pod else n in LEGAL

    def illegal_reason(self, n: int, multi_pod: bool) -> str:
        if multi_pod:
            return (f"{n} chip(s) per pod: ascend-volcano-compat (Ascend-for-Volcano's module910x8) requires 8 "
                    f"chips per pod in a multi-pod job")
        return f"{n} chip(s) per pod: Ascend 910 x8 accepts 1, 2, 4 or 8"

    def choose(self, free: int, n: int) -> int:
        if n == 8:
            return free if free == 0xFF else 0
        if n not in _PRIORITY:
            return 0
        return _ring_choice(free, n, _PRIORITY[n])

    def score(self, free: int, n: int) -> float:
        if n == 8:
            best = 0
        else:
            aff = _AFF[n]
            counts = [popcount(free & LEFT), popcount(free & RIGHT)]
            best = min((aff[c - 1] if c else 4) for c in counts)
        return -8.0 * best + (8 - popcount(free))


def potential(free: int) -> float:
    """Chips' worth of future pods the free set can still host: whole node for 8, then per ring how many
    4-, 2- and 1-chip pods fit (each ring on its own, since ≤ 4 chips must stay in one ring)."""
    if free == 0xFF:
        return 8.0 + 2 * 4.0 + 4 * 2.0 + 8 * 1.0  # an empty node can take every shape
    total = 0.0
    for ring in (free & LEFT, free & RIGHT):
        count = popcount(ring)
        total += 4.0 * (count == 4) + 2.0 * (count // 2 if count < 4 else 2) + 1.0 * count
    return total


class Ascend910Hccs(TopologyPolicy):
    NAME = "ascend-hccs"
    LINK_GROUPS = (LEFT, RIGHT)
    LINK_NAME = "HCCS ring"
    CHIPS = 8

    def legal(self, n: int, multi_pod: bool) -> bool:
        return n in LEGAL

    def illegal_reason(self, n: int, multi_pod: bool) -> str:
        return f"{n} chip(s) per pod: Ascend 910 x8 accepts 1, 2, 4 or 8 (≤ 4 chips within one HCCS ring)"

    def _candidates(self, free: int, n: int) -> list[int]:
        if n == 8:
            return [0xFF] if free == 0xFF else []
        sets = []
        for ring_mask in (LEFT, RIGHT):
            ring = free & ring_mask
            chips = [c for c in range(8) if ring >> c & 1]
            sets += _subsets(chips, n)
        return sets

    def choose(self, free: int, n: int) -> int:
        if n not in LEGAL:
            return 0
        best, best_key = 0, None
        for chosen in self._candidates(free, n):
            key = (potential(free) - potential(free & ~chosen), chosen)  # least loss, then lowest ids
            if best_key is None or key < best_key:
                best, best_key = chosen, key
        return best

    def score(self, free: int, n: int) -> float:
        chosen = self.choose(free, n)
        loss = potential(free) - potential(free & ~chosen)
        return 100.0 - 2.0 * loss + 0.5 * (8 - popcount(free))  # least loss first, then the fuller node


def _subsets(chips: list[int], n: int) -> list[int]:
    return [sum(1 << c for c in combo) for combo in combinations(chips, n)]
