"""The device plugin's HAMi-core vGPU resources: ``volcano.sh/vgpu-number`` (Volcano's name) and the GPUs' own
``nvidia.com/gpu`` counted in vGPUs (HAMi's), whose containers get exactly the GPUs the scheduler carved their
vGPUs on, with the memory and compute caps HAMi-core's library enforces.

Who calls it: ``hetsched device-plugin`` serves two :class:`~hetsched.agents.deviceplugin.server.DevicePlugin`
with a :class:`VgpuBackend` each — one per name, the second in place of the whole-GPU plugin — when the node's
GPUs are shared as vGPUs (``--partitioning vgpu``; a fake node says ``partitioning: vgpu`` in its chips file);
the plugins call :meth:`VgpuBackend.admit` from ``Allocate``.

How a vGPU reaches a container:
- kubelet counts each name in slots, as many per GPU as vGPUs a GPU may hold (10, HAMi's ``deviceSplitCount``,
  which is how HAMi's plugin advertises ``nvidia.com/gpu``); which slots it picks does not matter.
  ``volcano.sh/vgpu-memory`` and ``volcano.sh/vgpu-cores`` are node-level extended resources the node agent
  publishes (``agents.node_agent``): kubelet checks them, nothing allocates them;
- a pod asking ``nvidia.com/gpu`` alone (no memory or cores: whole GPUs, which the scheduler gives on vGPU nodes
  too) gets the GPUs its trusted ``hetsched.io/allocation`` names, uncapped;
- ``Allocate`` finds the pod being admitted (``partitions.admitting``: first by bind order among this node's
  pods kubelet has not started, asking as many vGPUs as slots were allocated) whose trusted partition hand-off
  names as many distinct GPUs of this node, each for the pod's own request (``<cores>%-<memory>`` as the
  scheduler names it); no such pod: refused, never a guess;
- the container gets ``NVIDIA_VISIBLE_DEVICES`` (the GPUs' UUIDs; indexes where the backend has none),
  ``CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m`` for the i-th of them, ``CUDA_DEVICE_SM_LIMIT=<percent>`` when the pod
  caps compute, ``CUDA_DEVICE_MEMORY_SHARED_CACHE`` (HAMi-core's per-container usage file) — HAMi-core's names —
  and, where HAMi-core's library is installed on the node (``--vgpu-library``), the library and an
  ``/etc/ld.so.preload`` naming it, so every CUDA process of the container is held to its caps. Without the
  library the caps are the environment only: said once at start.

Health: a slot is Healthy only when its GPU is; a GPU that is not there or not healthy now is never handed out.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hetsched.agents.backends.base import Backend, ContainerDevices
from hetsched.agents.chips import ToolChip
from hetsched.agents.deviceplugin import VGPU_LIBRARY, VGPU_STATE
from hetsched.agents.deviceplugin.partitions import PartitionRefused, admitting
from hetsched.agents.tools import ToolError
from hetsched.agents.vnpu import STRIDE
from hetsched.api.objects import Pod
from hetsched.devices.inventory import trusted_allocation, trusted_partitions
from hetsched.devices.partition_requests import VGPU_NUMBER, read_request
from hetsched.devices.partitions import Geometry, geometry_for, memory_percent

log = logging.getLogger("hetsched.device-plugin")

CACHE = "/tmp/vgpu"
"""HAMi-core's usage files inside the container."""
WHOLE = 1 << 62
"""In :meth:`VgpuBackend._wanted`'s answer: a whole GPU (no cap)."""


class VgpuBackend:
    """``volcano.sh/vgpu-number`` slots over the GPUs of ``chips`` (an NVIDIA backend, or a fake one like it)."""

    def __init__(self, chips: Backend, node: str, library: str = VGPU_LIBRARY, state_dir: str = VGPU_STATE,
                 resource: str = VGPU_NUMBER) -> None:
        self.base = chips
        self.node = node
        self.resource = resource
        """``volcano.sh/vgpu-number``, or the GPUs' own resource (``chips.resource``: HAMi's names, whole GPUs)."""
        self.vendor = f"{chips.vendor}-vgpu" if resource == VGPU_NUMBER else chips.vendor
        self.label = chips.label
        self.topology = "generic"
        self.geometry: Geometry | None = None
        self.gpus: dict[int, ToolChip] = {}
        """GPU index → the GPU at the last listing."""
        self.library = Path(library)
        self.state_dir = Path(state_dir)
        self.preload: Path | None = None
        """The host file mounted as the container's ``/etc/ld.so.preload`` (None: no library on this node)."""
        if self.library.is_file():
            try:
                self.state_dir.mkdir(parents=True, exist_ok=True)
                preload = self.state_dir / "ld.so.preload"
                preload.write_text(f"{library}\n")
                self.preload = preload
            except OSError as exc:
                log.error("cannot write %s/ld.so.preload (%s): vGPU caps are environment only", state_dir, exc)
        else:
            log.warning("HAMi-core's library is not at %s on this node: vGPU memory and compute caps are given as "
                        "environment only (install it, or point --vgpu-library at it, to enforce them)", library)

    # ------------------------------------------------------------------------------------- Backend

    def chips(self) -> list[ToolChip]:
        """As many slots per GPU as vGPUs it may hold; a slot's health is its GPU's."""
        chips = self.base.chips()
        geometry = geometry_for("vgpu", chips[0].model)
        if geometry is None:
            raise ToolError(f"{chips[0].model[:40]}: no vGPU geometry for this GPU")
        self.geometry = geometry
        self.gpus = {c.id: c for c in chips}
        return [ToolChip(id=chip.id * STRIDE + k, model=f"{chip.model} vGPU", level=chip.level, memory_mib=0,
                         bus_id=chip.bus_id, card=chip.card, numa=chip.numa, reason=chip.reason)
                for chip in chips for k in range(min(geometry.instances, STRIDE))]

    def container_devices(self, chips: list[ToolChip]) -> ContainerDevices:
        raise PartitionRefused("vGPU slots are served per pod (admit), never by slot")

    def versions(self) -> dict[str, str]:
        return {}

    def supernode(self) -> str | None:
        return None

    # ------------------------------------------------------------------------------------- partitions

    def _wanted(self, pod: Pod, slots: int) -> list[tuple[int, int, int]] | None:
        """(GPU, memory cap: MiB, or minus the percent of the GPU's memory, compute percent cap or 0) for each
        vGPU the pod's trusted hand-off names on this node (None: no trusted hand-off for ``slots`` vGPUs of
        the pod's own request)."""
        request = read_request(pod.spec.requests, pod.metadata.annotations, pod.metadata.labels)
        asks = [ask for ask in request.asks if ask.mode == "vgpu" and ask.source == self.resource]
        if len(asks) != 1 or asks[0].count != slots or len(request.asks) != 1 or self.geometry is None:
            return None
        ask = asks[0]
        profile = ask.profile(self.geometry)
        entries = trusted_partitions(pod.metadata.annotations, pod.metadata.uid, self.node, slots)
        gpus = [phy for resource, phy, template, _ in entries
                if resource == ask.resource and not isinstance(profile, str) and template == profile.name]
        if len(gpus) != slots or len(set(gpus)) != slots:
            return None
        percent = memory_percent(ask.memory)
        return [(phy, -percent if percent is not None else ask.memory, ask.cores) for phy in gpus]

    def _whole(self, pod: Pod, slots: int) -> list[tuple[int, int, int]] | None:
        """The whole GPUs the pod's trusted hand-off names when it asks the GPUs' own name and no vGPU."""
        if self.resource == VGPU_NUMBER or read_request(pod.spec.requests, pod.metadata.annotations,
                                                        pod.metadata.labels).asks:
            return None
        named = trusted_allocation(pod.metadata.annotations, pod.metadata.uid, self.node,
                                   {self.resource: slots}).get(self.resource)
        return [(phy, WHOLE, 0) for phy in sorted(named)] if named else None

    def admit(self, pods: list[Pod], slots: int, served: set[str]) -> tuple[Pod, ContainerDevices]:
        """The pod kubelet is admitting with ``slots`` of this resource, and its GPUs: with HAMi-core's caps for
        vGPUs, uncapped for whole GPUs."""
        pod, wanted = admitting(pods, self.node, served, self.resource, slots,
                                lambda p: self._wanted(p, slots) or self._whole(p, slots))
        if pod is None or wanted is None:
            raise PartitionRefused(f"no pod being admitted on {self.node} asks {slots} vGPU(s) the scheduler "
                                   f"carved: refusing rather than guessing")
        envs: dict[str, str] = {}
        visible = []
        for i, (phy, memory, _cores) in enumerate(wanted):
            gpu = self.gpus.get(phy)
            if gpu is None or not gpu.healthy:
                raise PartitionRefused(f"GPU {phy}: not on this node or not healthy now; no vGPU is handed out on it")
            visible.append(gpu.uuid or str(gpu.id))
            if memory == WHOLE:
                continue
            cap = memory if memory > 0 else gpu.memory_mib * -memory // 100
            if cap > 0:
                envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{cap}m"
        envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(visible)
        if wanted[0][1] == WHOLE:  # whole GPUs: no caps, no library
            return pod, ContainerDevices(envs=envs)
        cores = wanted[0][2]
        if 0 < cores < 100:
            envs["CUDA_DEVICE_SM_LIMIT"] = str(cores)
        envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{CACHE}/{pod.metadata.uid}.cache"
        mounts: list[tuple[str, str, bool]] = []
        if self.preload is not None:
            mounts = [(str(self.library), str(self.library), True), ("/etc/ld.so.preload", str(self.preload), True)]
        return pod, ContainerDevices(envs=envs, mounts=mounts)
