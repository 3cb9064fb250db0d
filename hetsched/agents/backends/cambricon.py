"""Cambricon MLUs: chips and health from ``cnmon``; containers get ``/dev/cambricon_dev<N>``, the
control device ``/dev/cambricon_ctl`` and ``CAMBRICON_VISIBLE_DEVICES``.

Who calls it: ``agents.backends.make_backend("cambricon")``.
"""

from __future__ import annotations

from hetsched.agents import cnmon
from hetsched.agents.backends.base import ContainerDevices
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

    def versions(self) -> dict[str, str]:
        return {}  # no driver/toolkit pairing is checked for this vendor

    def supernode(self) -> str | None:
        return None  # cnmon does not report a network domain

    def container_devices(self, chips: list[ToolChip]) -> ContainerDevices:
        return hand_off(chips)


def hand_off(chips: list[ToolChip], *, host_dir: str = "/dev") -> ContainerDevices:
    """What a container with ``chips`` gets, as Cambricon's plugin gives it: ``/dev/cambricon_dev<N>`` and the
    control device ``/dev/cambricon_ctl`` (from ``host_dir`` on the node), and ``CAMBRICON_VISIBLE_DEVICES``."""
    ordered = sorted(chips, key=lambda c: c.id)
    names = [f"cambricon_dev{c.id}" for c in ordered] + ["cambricon_ctl"]
    return ContainerDevices(envs={"CAMBRICON_VISIBLE_DEVICES": ",".join(str(c.id) for c in ordered)},
                            devices=[(f"/dev/{name}", f"{host_dir}/{name}", "rw") for name in names])
