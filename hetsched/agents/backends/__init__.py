"""One backend per vendor: how the node agent and the device plugin count chips, read their health and
hand them to containers.

Who calls it: ``agents.deviceplugin.server`` and ``agents.node_agent``, through :func:`make_backend`.
Each backend answers :meth:`Backend.chips` (raising ``ToolError`` or ``ToolOutputError`` when the vendor
tool is missing, fails or prints garbage — never an empty list by accident),
:meth:`Backend.container_devices` (env, device nodes and mounts for the chips a container gets) and
:meth:`Backend.supernode` (the server's place in the network, where the hardware knows it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
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

    def supernode(self) -> str | None:
        """The supernode (a tier-1 network domain the hardware itself reports, e.g. an Ascend A3 SuperPoD)
        of this server, after :meth:`chips`: its id; "" when the driver says the server is in none; None
        when the driver cannot tell (other hardware). May raise ``ToolError``/``ToolOutputError``."""
        ...


def make_backend(vendor: str, *, config: Path | None = None, ascend_runtime: bool = False,
                 resource: str | None = None) -> Backend:
    """The backend for ``vendor`` (ascend, cambricon, nvidia, fake); a ValueError names a bad choice."""
    from hetsched.agents.backends import ascend, cambricon, fake, nvidia

    if vendor == "ascend":
        return ascend.AscendBackend(runtime=ascend_runtime, resource=resource)
    if vendor == "cambricon":
        return cambricon.CambriconBackend(resource=resource)
    if vendor == "nvidia":
        return nvidia.NvidiaBackend(resource=resource)
    if vendor == "fake":
        if config is None:
            raise ValueError("--vendor fake needs --config FILE (the fake chips and their health)")
        return fake.FakeBackend(config)
    raise ValueError(f"unknown vendor {vendor!r}: expected ascend, cambricon, nvidia or fake")
