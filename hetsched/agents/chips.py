"""What a vendor tool says about one chip, in one shape for every vendor.

Who calls it: the parsers (``agents.npu_smi``, ``agents.cnmon``) and backends produce :class:`ToolChip`;
the node agent and the device plugin consume them; ``hetsched devices parse`` prints them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Level = Literal["OK", "Warning", "Alarm", "Critical", "UNKNOWN"]
LEVELS: tuple[Level, ...] = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
HEALTHY_LEVELS = frozenset({"OK", "Warning"})
"""A Warning is reported but the chip stays schedulable (as Ascend's device plugin treats it); Alarm,
Critical and UNKNOWN make it Unhealthy."""


@dataclass(frozen=True)
class ToolChip:
    id: int
    """The device index the node exposes (``/dev/davinci<id>``, ``/dev/cambricon_dev<id>``, NVML index)."""
    model: str
    level: Level
    """The tool's health level, normalised (see :data:`LEVELS`)."""
    memory_mib: int
    bus_id: str
    card: int
    """The card (NPU id, cnmon Card) the chip sits on."""
    uuid: str = ""
    numa: int = -1
    reason: str = ""
    """Why the level is not OK, when the tool says (an ECC count, an XID event …)."""

    @property
    def healthy(self) -> bool:
        return self.level in HEALTHY_LEVELS

    def to_json(self) -> dict[str, Any]:
        """The JSON ``hetsched devices parse --json`` prints (keys as in the inventory contract)."""
        return {"id": self.id, "model": self.model, "health": "Healthy" if self.healthy else "Unhealthy",
                "level": self.level, "memoryMiB": self.memory_mib, "busId": self.bus_id, "card": self.card,
                "uuid": self.uuid, "numa": self.numa, "reason": self.reason}


class InventoryGuard:
    """A chip list that suddenly has fewer (or more) chips than the last good one is the tool's output cut
    short or garbled, not chips gone: :meth:`check` raises for it, until the new count has held for
    ``CONFIRM`` reads in a row (a chip really removed or added, after a driver reload). The node agent and
    the device plugin read through one each, so a truncated table is every chip Unhealthy, never a shrink.

    Who calls it: ``agents.node_agent``, ``agents.deviceplugin.server``."""

    CONFIRM = 3

    def __init__(self) -> None:
        self.known: frozenset[int] | None = None
        self._pending: frozenset[int] | None = None
        self._seen = 0

    def check(self, chips: list[ToolChip], tool: str) -> list[ToolChip]:
        ids = frozenset(c.id for c in chips)
        if self.known is None or ids == self.known:
            self.known, self._pending, self._seen = ids, None, 0
            return chips
        self._seen = self._seen + 1 if ids == self._pending else 1
        self._pending = ids
        if self._seen >= self.CONFIRM:
            self.known, self._pending, self._seen = ids, None, 0
            return chips
        raise ChipCountChanged(f"{tool}: {len(ids)} chip(s) ({sorted(ids)[:16]}) where there were {len(self.known)} "
                               f"({sorted(self.known)[:16]}); truncated or garbled output? (accepted after "
                               f"{self.CONFIRM} reads in a row)")


class ChipCountChanged(ValueError):
    """The chips read differ from the last good inventory (see :class:`InventoryGuard`)."""
