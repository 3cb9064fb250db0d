"""One backend per vendor: how the node agent and the device plugin count chips, read their health and
hand them to containers.

Who calls it: ``agents.deviceplugin.server`` and ``agents.node_agent``, through :func:`make_backend`.
Each backend answers :meth:`Backend.chips` (raising ``ToolError`` or ``ToolOutputError`` when the vendor
tool is missing, fails or prints garbage — never an empty list by accident),
:meth:`Backend.container_devices` (env, device nodes and mounts for the chips a container gets) and
:meth:`Backend.supernode` (the server's place in the network, where the hardware knows it).
"""

from __future__ import annotations

from pathlib import Path

from hetsched.agents.backends import ascend, cambricon, fake, nvidia
from hetsched.agents.backends.base import Backend, ContainerDevices

__all__ = ["Backend", "ContainerDevices", "make_backend"]


def make_backend(vendor: str, *, config: Path | None = None, ascend_runtime: bool = False,
                 resource: str | None = None, partitioning: str = "") -> Backend:
    """The backend for ``vendor`` (ascend, cambricon, nvidia, fake); a ValueError names a bad choice.
    ``partitioning`` (Ascend: ``vnpu``, NVIDIA: ``vgpu`` or ``mig``) says the node's chips are carved on demand."""
    if partitioning and (vendor, partitioning) not in (("ascend", "vnpu"), ("nvidia", "vgpu"), ("nvidia", "mig")):
        raise ValueError(f"--partitioning {partitioning[:20]}: partitions are served on the node for Ascend vNPUs "
                         f"(--vendor ascend --partitioning vnpu), HAMi-core vGPUs and MIG (--vendor nvidia "
                         f"--partitioning vgpu or mig); a fake node says it in its chips file")
    if vendor == "ascend":
        return ascend.AscendBackend(runtime=ascend_runtime, resource=resource, partitioning=partitioning)
    if vendor == "cambricon":
        return cambricon.CambriconBackend(resource=resource)
    if vendor == "nvidia":
        return nvidia.NvidiaBackend(resource=resource, partitioning=partitioning)
    if vendor == "fake":
        if config is None:
            raise ValueError("--vendor fake needs --config FILE (the fake chips and their health)")
        return fake.FakeBackend(config)
    raise ValueError(f"unknown vendor {vendor!r}: expected ascend, cambricon, nvidia or fake")
