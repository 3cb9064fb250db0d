"""The device plugin's MIG resources: ``nvidia.com/mig-<profile>`` slots (NVIDIA's "mixed" strategy names), whose
containers get exactly the MIG instances the scheduler carved for them — created on demand through NVML at the
scheduler's placement and destroyed once their pod is gone.

Who calls it: ``hetsched device-plugin`` serves one :class:`~hetsched.agents.deviceplugin.server.DevicePlugin`
per profile of the GPUs' model, and one for Volcano's ``volcano.sh/vgpu-number`` (vGPUs asked with
``volcano.sh/vgpu-mode: mig``), each with a :class:`MigBackend` over one shared :class:`MigState`, when the
node's GPUs are in MIG mode (``--partitioning mig``; a fake node says ``partitioning: mig`` with ``like:
nvidia`` in its chips file); the plugins call :meth:`MigBackend.admit` from ``Allocate`` and the first
profile's :meth:`MigBackend.reconcile` after each health poll.

How an instance reaches a container:
- kubelet counts each profile in slots, as many per GPU as instances of that profile a GPU may hold (a 40 GB
  A100: seven ``1g.5gb``, three ``2g.10gb``, two ``3g.20gb``, one ``4g.20gb``, one ``7g.40gb``); which slots it
  picks does not matter;
- ``Allocate`` finds the pod being admitted (``partitions.admitting``) asking as many of the profile as slots
  were allocated, whose trusted hand-off names that many instances of that profile on this node's GPUs, each
  with its placement (a memory-slice mask); an instance not there yet is created at that placement
  (``agents.mig``: the GI, then its compute instance); one there of another profile or place is refused;
- the container gets ``NVIDIA_VISIBLE_DEVICES`` naming the instances' MIG device UUIDs — nothing of any other
  instance or GPU.

Health: a slot is Healthy only when its GPU is *and* the GPU's instances list cleanly through NVML; a GPU whose
listing fails or reads garbage has every slot Unhealthy, and no instance is created on an unhealthy GPU. An
instance no pod on the node holds any more is destroyed at the second poll that finds it orphaned.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from hetsched.agents.backends.base import Backend, ContainerDevices
from hetsched.agents.chips import ToolChip
from hetsched.agents.deviceplugin.partitions import PartitionRefused, admitting
from hetsched.agents.mig import MigInstance, MigTool
from hetsched.agents.tables import ToolOutputError
from hetsched.agents.tools import ToolError
from hetsched.agents.vnpu import STRIDE
from hetsched.api.objects import Pod
from hetsched.devices.inventory import trusted_partitions
from hetsched.devices.partition_requests import MIG_PREFIX, VGPU_NUMBER, read_request
from hetsched.devices.partitions import Geometry, Profile, geometry_for, pack_table

log = logging.getLogger("hetsched.device-plugin")


@dataclass
class MigState:
    """What the MIG plugins of one node share: the GPUs, and each GPU's instances at the last clean listing."""

    base: Backend
    node: str
    tool: MigTool
    geometry: Geometry | None = None
    healthy: set[int] = field(default_factory=set)
    listed: dict[int, list[MigInstance]] = field(default_factory=dict)
    """GPU index → its instances at the last clean listing (GPUs whose listing failed are left out)."""
    reasons: dict[int, str] = field(default_factory=dict)
    orphans: set[tuple[int, int]] = field(default_factory=set)
    """(GPU, GI id) found held by no pod at the last reconcile."""

    def refresh(self) -> list[ToolChip]:
        """The GPUs, and their instances listed again."""
        chips = self.base.chips()
        geometry = geometry_for("mig", chips[0].model)
        if geometry is None:
            raise ToolError(f"{chips[0].model[:40]}: no MIG geometry for this GPU (MIG is A100/A30/H100/H200-class)")
        self.geometry = geometry
        self.healthy = {c.id for c in chips if c.healthy}
        for chip in chips:
            try:
                self.listed[chip.id] = self.tool.list(chip.id)
                self.reasons.pop(chip.id, None)
            except (ToolError, ToolOutputError) as exc:
                self.listed.pop(chip.id, None)
                self.reasons[chip.id] = f"MIG instances cannot be listed: {str(exc)[:200]}"
                log.error("GPU %d: %s: its MIG slots are Unhealthy", chip.id, self.reasons[chip.id])
        return chips

    def wanted(self, pod: Pod, profile: str | None) -> list[tuple[int, str, int, int]] | None:
        """(GPU, profile, placement start, size) of each instance the pod's trusted hand-off names here: those
        asked as ``nvidia.com/mig-<profile>``, or with ``profile`` None those of a Volcano vGPU asked in MIG
        mode (``volcano.sh/vgpu-number`` with ``volcano.sh/vgpu-mode: mig``, any profile) — None when there
        are none, or the hand-off is not the pod's own. The hand-off lists the pod's asks' partitions in order."""
        request = read_request(pod.spec.requests, pod.metadata.annotations, pod.metadata.labels)
        if not request.asks or any(ask.mode != "mig" for ask in request.asks):
            return None
        entries = trusted_partitions(pod.metadata.annotations, pod.metadata.uid, self.node,
                                     sum(ask.count for ask in request.asks))
        if not entries:
            return None
        found = []
        index = 0
        for ask in request.asks:
            mine = ask.source == VGPU_NUMBER if profile is None else ask.template == profile
            for resource, gpu, template, mask in entries[index:index + ask.count]:
                if not mine or resource != ask.resource or mask <= 0 or (profile and template != profile):
                    continue
                start = (mask & -mask).bit_length() - 1
                size = mask.bit_count()
                if mask != ((1 << size) - 1) << start:
                    return None  # not one run of slices: no MIG placement
                found.append((gpu, template, start, size))
            index += ask.count
        return found or None

    def ensure(self, gpu: int, profile: str, start: int, size: int) -> MigInstance:
        if gpu not in self.listed:
            raise PartitionRefused(f"GPU {gpu}: not on this node, or its MIG instances cannot be listed now")
        if gpu not in self.healthy:
            raise PartitionRefused(f"GPU {gpu} is Unhealthy: no MIG instance is created on it")
        for instance in self.listed[gpu]:
            if (instance.start, instance.size) == (start, size):
                if instance.profile != profile or not instance.uuid:
                    raise PartitionRefused(f"GPU {gpu}: the instance at {start}:{size} is a {instance.profile}, not "
                                           f"the {profile} the scheduler chose")
                return instance
        try:
            made = self.tool.create(gpu, profile, start, size)
        except (ToolError, ToolOutputError) as exc:
            raise PartitionRefused(f"creating a {profile} instance on GPU {gpu} at {start}:{size}: "
                                   f"{str(exc)[:200]}") from None
        self.listed[gpu] = [*self.listed[gpu], made]
        self.orphans.discard((gpu, made.gi))
        return made

    def reconcile(self, pods: list[Pod]) -> list[tuple[int, int]]:
        """Destroy the instances no pod on this node holds any more (at the second reconcile that finds one
        orphaned); (GPU, GI id) of those destroyed."""
        held: set[tuple[int, int, int]] = set()
        profiles = [p.name for p in self.geometry.profiles] if self.geometry is not None else []
        for pod in pods:
            if pod.spec.nodeName == self.node and pod.status.phase not in ("Succeeded", "Failed"):
                for profile in [*profiles, None]:
                    held.update((gpu, start, size) for gpu, _, start, size in self.wanted(pod, profile) or ())
        destroyed = []
        orphans: set[tuple[int, int]] = set()
        for gpu, instances in list(self.listed.items()):
            for instance in instances:
                if (gpu, instance.start, instance.size) in held:
                    continue
                if (gpu, instance.gi) not in self.orphans:
                    orphans.add((gpu, instance.gi))
                    continue
                try:
                    self.tool.destroy(gpu, instance.gi)
                except (ToolError, ToolOutputError) as exc:
                    log.warning("GPU %d: destroying GPU instance %d failed (tried again later): %s", gpu,
                                instance.gi, exc)
                    orphans.add((gpu, instance.gi))
                    continue
                destroyed.append((gpu, instance.gi))
                self.listed[gpu] = [i for i in self.listed[gpu] if i.gi != instance.gi]
        self.orphans = orphans
        return destroyed


class MigBackend:
    """``nvidia.com/mig-<profile>`` slots over the GPUs of ``state`` — or with ``profile`` None Volcano's
    ``volcano.sh/vgpu-number`` slots, for vGPUs asked in MIG mode (each the instance the scheduler chose to
    hold its memory); ``primary``: the one whose polls also reconcile (the plugins share the instances)."""

    def __init__(self, state: MigState, profile: Profile | None, primary: bool = False) -> None:
        self.state = state
        self.profile = profile
        self.primary = primary
        self.name = profile.name if profile is not None else "vGPU"
        self.vendor = f"{state.base.vendor}-mig-{profile.name if profile is not None else 'vgpu'}"
        self.resource = MIG_PREFIX + profile.name if profile is not None else VGPU_NUMBER
        self.label = state.base.label
        self.topology = "generic"

    def chips(self) -> list[ToolChip]:
        """As many slots per GPU as instances of this profile a GPU may hold (of any profile for vGPUs); a
        slot's health is its GPU's, and Unhealthy when the GPU's instances cannot be listed."""
        chips = self.state.refresh()
        geometry = self.state.geometry
        assert geometry is not None
        per_gpu = (int(pack_table(geometry.slices, self.profile.placements)[0]) if self.profile is not None
                   else geometry.instances)
        slots = []
        for chip in chips:
            reason = self.state.reasons.get(chip.id, chip.reason)
            level = "UNKNOWN" if chip.id in self.state.reasons else chip.level
            slots += [ToolChip(id=chip.id * STRIDE + k, model=f"{chip.model} MIG {self.name}", level=level,
                               memory_mib=0, bus_id=chip.bus_id, card=chip.card, numa=chip.numa, reason=reason)
                      for k in range(min(per_gpu, STRIDE))]
        return slots

    def container_devices(self, chips: list[ToolChip]) -> ContainerDevices:
        raise PartitionRefused("MIG slots are served per pod (admit), never by slot")

    def versions(self) -> dict[str, str]:
        return {}

    def supernode(self) -> str | None:
        return None

    def admit(self, pods: list[Pod], slots: int, served: set[str]) -> tuple[Pod, ContainerDevices]:
        """The pod kubelet is admitting with ``slots`` instances of this profile, and their MIG devices
        (created if need be)."""
        def wanted(pod: Pod) -> list[tuple[int, str, int, int]] | None:
            found = self.state.wanted(pod, self.profile.name if self.profile is not None else None)
            return found if found is not None and len(found) == slots else None

        pod, chosen = admitting(pods, self.state.node, served, self.resource, slots, wanted)
        if pod is None or chosen is None:
            raise PartitionRefused(f"no pod being admitted on {self.state.node} asks {slots} {self.name} "
                                   f"instance(s) the scheduler carved: refusing rather than guessing")
        made = [self.state.ensure(gpu, profile, start, size) for gpu, profile, start, size in chosen]
        return pod, ContainerDevices(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(m.uuid for m in made)})

    def reconcile(self, pods: list[Pod]) -> list[tuple[int, int]]:
        return self.state.reconcile(pods) if self.primary else []
