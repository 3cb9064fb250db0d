"""Devices without topology rules: any count, lowest free ids, fuller nodes first.

Who calls it: ``devices.catalog`` for accelerators whose topology is unknown or flat (e.g. a single PCIe
switch), and as the fallback when a node advertises chips without an inventory.
"""

from __future__ import annotations

from hetsched.devices.policy import TopologyPolicy, lowest, popcount


class Generic(TopologyPolicy):
    NAME = "generic"

    def __init__(self, chips: int = 8) -> None:
        self.CHIPS = chips

    def _key(self) -> tuple[object, ...]:
        return (self.CHIPS,)

    def legal(self, n: int, multi_pod: bool) -> bool:
        return 1 <= n <= self.CHIPS

    def choose(self, free: int, n: int) -> int:
        return lowest(free, n)

    def score(self, free: int, n: int) -> float:
        return float(self.CHIPS - popcount(free))
