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
