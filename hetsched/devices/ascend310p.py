"""Ascend 310P inference cards (Atlas 300I Duo: 2 chips per card; chips 2k and 2k+1 share card k).

Who calls it: the ``devicetopology`` scheduler plugin, through ``devices.catalog``.

Ascend-for-Volcano's ``card310px2`` rule (score table ``[[0, 1], [2, 0]]``): a 1-chip pod prefers a card
with 1 free chip (keeping whole cards for 2-chip pods), a 2-chip pod takes one whole card. Larger requests
take whole cards (even counts only); lowest card ids first. Node score: fuller node first.
"""

from __future__ import annotations

from hetsched.devices.policy import TopologyPolicy, popcount


class Ascend310PDuo(TopologyPolicy):
    NAME = "ascend310p-duo"

    LINK_NAME = "card"

    def __init__(self, chips: int = 8) -> None:
        self.CHIPS = chips
        self.LINK_GROUPS = tuple(0b11 << (2 * card) for card in range(chips // 2))

    def _key(self) -> tuple[object, ...]:
        return (self.CHIPS,)

    def legal(self, n: int, multi_pod: bool) -> bool:
        return n == 1 or (n % 2 == 0 and 2 <= n <= self.CHIPS)

    def illegal_reason(self, n: int, multi_pod: bool) -> str:
        return f"{n} chip(s) per pod: Atlas 300I Duo cards take 1 chip or whole cards (an even count)"

    def _cards(self, free: int) -> list[tuple[int, int]]:
        """(card, free chips on it) for each card."""
        return [(card, popcount(free >> (2 * card) & 0b11)) for card in range(self.CHIPS // 2)]

    def choose(self, free: int, n: int) -> int:
        cards = self._cards(free)
        if n == 1:
            for wanted in (1, 2):
                for card, count in cards:
                    if count == wanted:
                        pair = free >> (2 * card) & 0b11
                        chip = 0 if pair & 1 else 1
                        return 1 << (2 * card + chip)
            return 0
        if n % 2:
            return 0
        whole = [card for card, count in cards if count == 2][: n // 2]
        if len(whole) < n // 2:
            return 0
        return sum(0b11 << (2 * card) for card in whole)

    def score(self, free: int, n: int) -> float:
        return float(self.CHIPS - popcount(free))
