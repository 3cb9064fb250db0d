"""What every vendor backend is: the :class:`Backend` protocol and the :class:`ContainerDevices` it hands
kubelet for a container.

Who calls it: each vendor backend (``agents.backends.ascend`` …) implements it; ``agents.backends`` picks
one (:func:`~hetsched.agents.backends.make_backend`); the device plugin, the node agent and the node doctor
use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from hetsched.agents.chips import ToolChip


@dataclass
class ContainerDevices:
    """What Allocate tells kubelet for one container."""

    envs: dict[str, str] = field(default_factory=dict)
    devices: list[tuple[str, str, str]] = field(default_factory=list)
    """(container path, host path, cgroup permissions)."""
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)
    """(container path, host path, read-only)."""


class Backend(Protocol):
    vendor: str
    resource: str
    """The extended resource kubelet advertises (``huawei.com/Ascend910`` …)."""
    topology: str
    """The device family's topology policy (``devices.catalog``), for GetPreferredAllocation."""
    label: str
    """The node label value ``accelerator=…`` (``huawei-ascend``, ``cambricon-mlu``, ``nvidia-gpu``)."""

    def chips(self) -> list[ToolChip]: ...

    def container_devices(self, chips: list[ToolChip]) -> ContainerDevices: ...

    def versions(self) -> dict[str, str]:
        """The driver and toolkit releases on this node, after :meth:`chips` (``{"driver": …, "cann": …}``
        for Ascend; empty where the vendor has no such pairing to check). Never raises: a version that cannot
        be read is left out."""
        ...

    def supernode(self) -> str | None:
        """The supernode (a tier-1 network domain the hardware itself reports, e.g. an Ascend A3 SuperPoD)
        of this server, after :meth:`chips`: its id; "" when the driver says the server is in none; None
        when the driver cannot tell (other hardware). May raise ``ToolError``/``ToolOutputError``."""
        ...
