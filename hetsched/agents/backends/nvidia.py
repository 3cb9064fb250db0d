"""NVIDIA GPUs through NVML (``nvidia-ml-py``): count, UUID, model, memory, bus id and NUMA node; health
from XID events (critical XIDs make a GPU Unhealthy until the agent restarts, as NVIDIA's device plugin
does). Containers get ``NVIDIA_VISIBLE_DEVICES`` (UUIDs) for the NVIDIA container runtime.

Who calls it: ``agents.backends.make_backend("nvidia")``. The NVML calls used are the ones a thin fake of
``pynvml`` provides in the tests when no GPU is present.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hetsched.agents.backends.base import ContainerDevices
from hetsched.agents.chips import Level, ToolChip
from hetsched.agents.mig import MigTool
from hetsched.agents.tools import ToolError
from hetsched.devices.catalog import default_topology

IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""Application errors, not hardware faults (the list NVIDIA's device plugin skips by default)."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvidiaBackend:
    vendor = "nvidia"
    label = "nvidia-gpu"

    def __init__(self, *, resource: str | None = None, nvml: Any = None, partitioning: str = "") -> None:
        self.resource = resource or "nvidia.com/gpu"
        self.partitioning = partitioning
        """``vgpu``: the GPUs are shared as HAMi-core vGPUs (``agents.deviceplugin.vgpu``); ``mig``: they are in
        MIG mode, instances made on demand (``agents.deviceplugin.mig``)."""
        self.topology = "generic"
        self._nvml = nvml
        self._events: Any = None
        self._xids: dict[int, int] = {}
        """GPU index → the critical XID seen on it."""

    def _lib(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                raise ToolError("nvidia-ml-py is not installed") from None
            self._nvml = pynvml
        return self._nvml

    def _init(self) -> Any:
        nvml = self._lib()
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError: driver missing, no device
            raise ToolError(f"NVML: cannot initialise: {exc}") from None
        return nvml

    def chips(self) -> list[ToolChip]:
        nvml = self._init()
        try:
            count = nvml.nvmlDeviceGetCount()
            chips = []
            handles = []
            for index in range(count):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                handles.append(handle)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                bus = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
                chips.append((index, handle, _text(nvml.nvmlDeviceGetName(handle)),
                              _text(nvml.nvmlDeviceGetUUID(handle)), int(memory.total) // (1024 * 1024), bus))
            self._watch_xids(nvml, handles)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(f"NVML: {exc}") from None
        result = []
        for index, _, name, uuid, memory_mib, bus in chips:
            xid = self._xids.get(index)
            level: Level = "Critical" if xid is not None else "OK"
            result.append(ToolChip(id=index, model=name, level=level, memory_mib=memory_mib, bus_id=bus, card=index,
                                   uuid=uuid, numa=_numa(bus), reason=f"XID {xid}" if xid is not None else ""))
        if result:
            self.topology = default_topology("nvidia", result[0].model, len(result))
        return result

    def _watch_xids(self, nvml: Any, handles: list[Any]) -> None:
        """Register for critical XID events once, then drain what arrived since the last poll."""
        if self._events is None:
            self._events = nvml.nvmlEventSetCreate()
            for handle in handles:
                try:
                    nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._events)
                except Exception:  # a GPU that cannot report events is watched by the other checks
                    continue
        while True:
            try:
                event = nvml.nvmlEventSetWait(self._events, 0)
            except Exception:  # NVML_ERROR_TIMEOUT: nothing new
                return
            xid = int(event.eventData)
            if xid in IGNORED_XIDS:
                continue
            index = next((i for i, h in enumerate(handles) if h == event.device), None)
            if index is not None:
                self._xids[index] = xid

    def versions(self) -> dict[str, str]:
        return {}  # no driver/toolkit pairing is checked for this vendor

    def supernode(self) -> str | None:
        return None  # NVLink domains across servers (NVL72 cliques) are not read yet

    def mig_tool(self) -> MigTool:
        """MIG instances of these GPUs through the same NVML (``agents.mig``)."""
        return MigTool(self._lib())

    def container_devices(self, chips: list[ToolChip]) -> ContainerDevices:
        return ContainerDevices(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(c.uuid or str(c.id) for c in chips)})


def _numa(bus: str) -> int:
    """The GPU's NUMA node from sysfs (-1 when unknown)."""
    path = Path("/sys/bus/pci/devices") / bus.lower()[-12:] / "numa_node"
    try:
        return max(int(path.read_text().strip()), -1)
    except (OSError, ValueError):
        return -1
