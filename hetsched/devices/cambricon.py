"""Cambricon MLU370 servers: 8 MLUs joined by MLU-Link. Ring groups: the two chips of a dual-chip card
({0,1}, {2,3}, {4,5}, {6,7}), the four-chip bridges ({0–3}, {4–7}) and the whole node.

Who calls it: the ``devicetopology`` scheduler plugin, through ``devices.catalog``. The link policy is
the Cambricon device plugin's ``--mlulink-policy`` (peers.md §4.5), set cluster-wide by the plugin
argument ``cambricon.mluLinkPolicy``:

- ``best-effort``: prefer chips forming the most rings (a whole ring group of the request's size, else
  chips inside the smallest group that holds them); otherwise any free chips;
- ``guaranteed``: only 1, 2, 4, 8; the chips must form at least one ring (all inside one ring group);
- ``restricted``: only 1, 2, 4, 8; the chips must be exactly the best ring (a whole group of that size).

Node score: keep whole ring groups intact (fewest ring chips broken), then the fuller node.
"""

from __future__ import annotations

from itertools import combinations

from hetsched.devices.policy import TopologyPolicy, lowest, popcount

GROUPS = (0x03, 0x0C, 0x30, 0xC0, 0x0F, 0xF0, 0xFF)
MODES = ("best-effort", "guaranteed", "restricted")


def _ring_value(free: int) -> float:
    """Chips held in fully free ring groups (larger groups count more): what future requests can use."""
    return sum(popcount(g) * popcount(g) for g in GROUPS if (free & g) == g) / 8.0


class MLULink(TopologyPolicy):
    NAME = "mlu370-mlulink"
    LINK_GROUPS = (0x0F, 0xF0)
    LINK_NAME = "MLU-Link group"
    CHIPS = 8

    def __init__(self, mode: str = "best-effort") -> None:
        if mode not in MODES:
            raise ValueError(f"MLU-Link policy must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode

    def _key(self) -> tuple[object, ...]:
        return (self.mode,)

    def legal(self, n: int, multi_pod: bool) -> bool:
        if self.mode == "best-effort":
            return 1 <= n <= 8
        return n in (1, 2, 4, 8)

    def illegal_reason(self, n: int, multi_pod: bool) -> str:
        return f"{n} MLU(s) per pod: MLU-Link policy {self.mode} accepts 1, 2, 4 or 8"

    def _rings(self, free: int, n: int) -> list[int]:
        """Chip sets of size n forming a ring, best first: exact groups, then sets inside the smallest group."""
        exact = [g for g in GROUPS if popcount(g) == n and (free & g) == g]
        inside = []
        for group in sorted(GROUPS, key=popcount):
            if popcount(group) > n:
                chips = [c for c in range(8) if (free & group) >> c & 1]
                inside += [sum(1 << c for c in combo) for combo in combinations(chips, n)]
        return exact + inside

    def choose(self, free: int, n: int) -> int:
        if not self.legal(n, False):
            return 0
        if n == 1:
            candidates = [1 << c for c in range(8) if free >> c & 1]
        elif self.mode == "restricted":
            candidates = [g for g in GROUPS if popcount(g) == n and (free & g) == g]
        else:
            candidates = self._rings(free, n)
        if not candidates:
            return lowest(free, n) if self.mode == "best-effort" else 0
        return max(candidates, key=lambda s: (_ring_value(free & ~s), -s))

    def score(self, free: int, n: int) -> float:
        chosen = self.choose(free, n)
        loss = _ring_value(free) - _ring_value(free & ~chosen)
        return 100.0 - 10.0 * loss + (8 - popcount(free))
