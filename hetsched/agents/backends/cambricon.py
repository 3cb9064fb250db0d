"""Cambricon MLUs: chips and health from ``cnmon``; containers get ``/dev/cambricon_dev<N>`` and the
control device ``/dev/cambricon_ctl``.

Who calls it: ``agents.backends.make_backend("cambricon")``.
"""

from __future__ import annotations

from hetsched.agents import cnmon
from hetsched.agents.backends import ContainerDevices
from hetsched.agents.chips import ToolChip
from hetsched.agents.tools import run_tool
from hetsched.devices.catalog import default_topology


class CambriconBackend:
    vendor = "cambricon"
    label = "cambricon-mlu"

    def __init__(self, *, resource: str | None = None, timeout: float = 10.0) -> None:
        self.resource = resource or "cambricon.com/mlu"
        self.timeout = timeout
        self.topology = "generic"

    def chips(self) -> list[ToolChip]:
        chips = cnmon.parse(run_tool(["cnmon"], self.timeout))
        self.topology = default_topology("cambricon", chips[0].model, len(chips))
        return chips

    def container_devices(self, chips: list[ToolChip]) -> ContainerDevices:
        devices = [(f"/dev/cambricon_dev{c.id}", f"/dev/cambricon_dev{c.id}", "rw")
                   for c in sorted(chips, key=lambda c: c.id)]
        devices.append(("/dev/cambricon_ctl", "/dev/cambricon_ctl", "rw"))
        return ContainerDevices(devices=devices)
