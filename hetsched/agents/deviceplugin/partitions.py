"""The device plugin's vNPU resource: ``huawei.com/npu-core`` slots on a 310P (MindCluster's request), HAMi's
``huawei.com/Ascend910B3`` … slots on a 910, whose containers get exactly the vNPUs the scheduler carved for the
pod kubelet is admitting — created on demand with ``npu-smi`` and destroyed once their pod is gone.

Who calls it: ``hetsched device-plugin`` serves a second :class:`~hetsched.agents.deviceplugin.server.DevicePlugin`
with a :class:`VnpuBackend` when the chips' backend says its node is carved into vNPUs (``partitioning: vnpu``:
``--partitioning vnpu`` for Ascend, the fake chips file for tests); the plugin calls :meth:`VnpuBackend.admit`
from ``Allocate`` and :meth:`VnpuBackend.reconcile` after each health poll.

How a partition reaches a container:
- kubelet counts ``huawei.com/npu-core`` in slots, one per AI core of each chip (a 310P: 8), so it admits a pod
  asking ``huawei.com/npu-core: 2`` when two slots are free; which slots it picks does not matter;
- ``Allocate`` finds the pod being admitted: the first by bind order (``predicate-time``) of this node's pods
  that kubelet has not started and this plugin has not served, asking as many AI cores as slots were
  allocated, whose partition hand-off (``hetsched.io/partitions``) is trusted — stamped by the scheduler for
  this pod and node, as many partitions as the pod asks (``devices.inventory.trusted_partitions``). No such
  pod: the allocation is refused (the pod fails admission and is recreated by its controller), never served
  with a partition the scheduler did not choose;
- a pod asking a multiple of a chip's AI cores (``huawei.com/npu-core: 8``: a whole 310P, as MindCluster reads
  it) gets the whole chips its trusted ``hetsched.io/allocation`` names (healthy and holding no vNPU);
- each partition's vNPU id follows from its placement: on a 310P ``100 + 16·phy + first AI core`` (placements
  on a chip never overlap, so neither do ids), vGroup = first core // 2; on a 910, whose templates have no
  place, ``100 + 16·phy + instance slot`` (the scheduler gives each vNPU a free slot of 16), no vGroup; a vNPU
  not there yet is created (``npu-smi set -t create-vnpu … -v <id> [-g <vgroup>]``); HAMi's ``whole``
  template (a 910 asked without memory) is the chip itself, healthy and holding no vNPU;
- the container gets ``/dev/vdavinci<id>`` as ``/dev/davinci<id>``, the management devices, and
  ``ASCEND_VISIBLE_DEVICES=<ids>`` — nothing of any other vNPU or chip.

Health: a slot is Healthy only when its chip is *and* the chip's vNPU listing reads cleanly; a chip whose
listing is missing, truncated or garbled has every slot Unhealthy (kubelet then admits nothing there), and
no vNPU is created on an unhealthy chip. A vNPU no pod on the node holds any more is destroyed at the second
poll that finds it orphaned (a pod bound between two listings is not raced).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from hetsched.agents.backends.ascend import SHARED_DEVICES
from hetsched.agents.backends.base import Backend, ContainerDevices
from hetsched.agents.chips import ToolChip
from hetsched.agents.tables import ToolOutputError
from hetsched.agents.tools import ToolError
from hetsched.agents.vnpu import STRIDE, VNpu, VnpuTool, id_range
from hetsched.api.objects import Pod
from hetsched.devices.inventory import PREDICATE_TIME, trusted_allocation, trusted_partitions
from hetsched.devices.partition_requests import NPU_CORE, hami_ascend_name, read_request
from hetsched.devices.partitions import Geometry, geometry_for, most_partitions, slot_of

log = logging.getLogger("hetsched.device-plugin")


class PartitionRefused(RuntimeError):
    """Allocate cannot say which partitions the pod being admitted gets (the message says why)."""


T = TypeVar("T")


def admitting(pods: list[Pod], node: str, served: set[str], resource: str, slots: int,
              wanted: Callable[[Pod], T | None]) -> tuple[Pod | None, T | None]:
    """The pod kubelet is admitting with ``slots`` of ``resource``, and what ``wanted`` says it gets: the first
    by bind order (``predicate-time``, then creation, then name) of this node's pods that kubelet has not
    started and this plugin has not served, asking exactly ``slots`` of ``resource``, for which ``wanted``
    answers (its trusted hand-off); (None, None) when there is none. Kubelet admits pods one at a time, in
    the order they were bound."""
    candidates = []
    for pod in pods:
        admitted = pod.status.startTime is not None or bool(pod.status.containerStatuses)
        if (admitted or pod.status.phase != "Pending" or pod.metadata.uid in served
                or pod.spec.nodeName != node or pod.spec.requests.get(resource, 0) != slots * 1000):
            continue
        found = wanted(pod)
        if found:
            stamp = pod.metadata.annotations.get(PREDICATE_TIME, "")
            order = int(stamp) if stamp.isdigit() else 1 << 62
            candidates.append((order, pod.metadata.creationTimestamp or 0.0, pod.metadata.name, pod, found))
    if not candidates:
        return None, None
    _, _, _, pod, chosen = min(candidates, key=lambda c: c[:3])
    return pod, chosen


@dataclass(frozen=True)
class Wanted:
    """One vNPU a pod holds on this node (``vnpu`` -1: HAMi's ``whole`` template, the chip itself)."""

    phy: int
    template: str
    vnpu: int
    vgroup: int | None


WHOLE = "whole"
"""The template of a HAMi 910 ask with no memory: the whole chip, mounted as itself (no vNPU is created)."""


def _geometry(chips: list[ToolChip]) -> Geometry:
    """The vNPU geometry of the node's chips: a 310P's (ids from AI cores) or a 910's (ids from slots)."""
    model = chips[0].model if chips else ""
    geometry = geometry_for("vnpu", model if model.lower().startswith("ascend") else f"Ascend{model}")
    if geometry is None or not (geometry.slices or geometry.slotted):
        raise ToolError(f"{model[:40] or 'no chips'}: creating vNPUs on the node is supported for Ascend 310P and "
                        f"910 chips (their vNPU ids follow from the AI cores or the instance slots they take)")
    return geometry


class VnpuBackend:
    """``huawei.com/npu-core`` slots over the chips of ``chips`` (an Ascend backend, or a fake one like it)."""

    def __init__(self, chips: Backend, node: str, vnpu_tool: VnpuTool, device_dir: str = "/dev") -> None:
        self.base = chips
        self.node = node
        self.tool = vnpu_tool
        self.device_dir = device_dir
        self.vendor = f"{chips.vendor}-vnpu"
        self.geometry = _geometry(chips.chips())  # the chips' model, read once: it names the resource
        self.slotted = self.geometry.slotted
        self.resource = hami_ascend_name(self.geometry.name) if self.slotted else NPU_CORE
        """``huawei.com/npu-core`` on a 310P (MindCluster's; one slot per AI core), HAMi's
        ``huawei.com/Ascend910B3`` … on a 910 (one slot per vNPU the chip can hold)."""
        self.per_chip = most_partitions(self.geometry) if self.slotted else self.geometry.cores
        self.label = chips.label
        self.topology = "generic"
        self.cards: dict[int, tuple[int, int]] = {}
        """Chip device id → (NPU id, chip index on the card): what ``npu-smi -i -c`` name."""
        self.healthy: set[int] = set()
        self.listed: dict[int, list[VNpu]] = {}
        """Chip device id → its vNPUs at the last clean listing (chips whose listing failed are left out)."""
        self.orphans: set[int] = set()

    # ------------------------------------------------------------------------------------- Backend

    def chips(self) -> list[ToolChip]:
        """One slot per AI core of each chip (a 310P) or per vNPU it can hold (a 910); a slot's health is its
        chip's, and Unhealthy when the chip's vNPUs cannot be listed."""
        chips = self.base.chips()
        geometry = self.geometry = _geometry(chips)
        by_card: dict[int, list[int]] = {}
        for chip in sorted(chips, key=lambda c: c.id):
            by_card.setdefault(chip.card, []).append(chip.id)
        self.cards = {phy: (card, ids.index(phy)) for card, ids in by_card.items() for phy in ids}
        self.healthy = {c.id for c in chips if c.healthy}
        slots: list[ToolChip] = []
        for chip in chips:
            level, reason = chip.level, chip.reason
            card, index = self.cards[chip.id]
            try:
                self.listed[chip.id] = self.tool.list(card, index, chip.id, STRIDE if self.slotted else 8)
            except (ToolError, ToolOutputError) as exc:
                self.listed.pop(chip.id, None)
                level, reason = "UNKNOWN", f"vNPUs cannot be listed: {str(exc)[:200]}"
                log.error("chip %d: %s: its AI-core slots are Unhealthy", chip.id, reason)
            what = "vNPU slot" if self.slotted else "AI core"
            slots += [ToolChip(id=chip.id * STRIDE + slot, model=f"{geometry.name} {what}", level=level,
                               memory_mib=0, bus_id=chip.bus_id, card=chip.card, numa=chip.numa, reason=reason)
                      for slot in range(self.per_chip)]
        return slots

    def container_devices(self, chips: list[ToolChip]) -> ContainerDevices:
        raise PartitionRefused("vNPU slots are served per pod (admit), never by slot")

    def versions(self) -> dict[str, str]:
        return {}

    def supernode(self) -> str | None:
        return None

    # ------------------------------------------------------------------------------------- partitions

    def _wanted(self, pod: Pod) -> list[Wanted] | None:
        """The vNPUs the pod's trusted hand-off names on this node (None: no trusted hand-off)."""
        request = read_request(pod.spec.requests, pod.metadata.annotations, pod.metadata.labels)
        asks = [ask for ask in request.asks if ask.mode == "vnpu"]
        if not asks:
            return None
        entries = trusted_partitions(pod.metadata.annotations, pod.metadata.uid, self.node,
                                     sum(ask.count for ask in request.asks))
        found = []
        for resource, phy, template, placement in entries:
            if resource != asks[0].resource or placement <= 0:
                continue
            if not self.slotted:
                first = (placement & -placement).bit_length() - 1
                found.append(Wanted(phy, template, id_range(phy).start + first, first // 2))
                continue
            slot = slot_of(placement)  # a 910 vNPU's id is its instance slot's (no vGroups on a 910)
            if slot is not None and slot < STRIDE:
                found.append(Wanted(phy, template, -1 if template == WHOLE else id_range(phy, STRIDE).start + slot,
                                    None))
        return found or None

    def _ensure(self, wanted: Wanted) -> None:
        if wanted.phy not in self.cards or wanted.phy not in self.listed:
            raise PartitionRefused(f"chip {wanted.phy}: not on this node, or its vNPUs cannot be listed now")
        if wanted.phy not in self.healthy:
            raise PartitionRefused(f"chip {wanted.phy} is Unhealthy: no vNPU is created on it")
        present = {v.id: v for v in self.listed[wanted.phy]}
        if wanted.vnpu in present:
            if present[wanted.vnpu].template != wanted.template:
                raise PartitionRefused(f"vNPU {wanted.vnpu} on chip {wanted.phy} is a {present[wanted.vnpu].template}, "
                                       f"not the {wanted.template} the scheduler chose")
            return
        card, index = self.cards[wanted.phy]
        try:
            self.tool.create(card, index, wanted.template, wanted.vnpu, wanted.vgroup)
        except (ToolError, ToolOutputError, ValueError) as exc:
            raise PartitionRefused(f"creating vNPU {wanted.vnpu} ({wanted.template}) on chip {wanted.phy}: "
                                   f"{str(exc)[:200]}") from None
        self.listed[wanted.phy] = [*self.listed[wanted.phy],
                                   VNpu(wanted.vnpu, wanted.vgroup or 0, "0", 0, wanted.template)]
        self.orphans.discard(wanted.vnpu)

    def _whole(self, pod: Pod, slots: int) -> list[int] | None:
        """The whole chips the pod's trusted hand-off names when it asks a multiple of a chip's AI cores
        (MindCluster's ``huawei.com/npu-core: 8`` is one whole 310P); None otherwise."""
        cores = self.geometry.cores
        if self.slotted or slots % cores:  # HAMi's whole 910 is a partition of its own (``WHOLE``)
            return None
        named = trusted_allocation(pod.metadata.annotations, pod.metadata.uid, self.node,
                                   {self.base.resource: slots // cores}).get(self.base.resource)
        return sorted(named) if named else None

    def admit(self, pods: list[Pod], slots: int, served: set[str]) -> tuple[Pod, ContainerDevices]:
        """The pod kubelet is admitting with ``slots`` AI cores, and its vNPUs as devices (created if need be) —
        or, for a multiple of a chip's AI cores, the whole chips the scheduler gave it."""
        def wanted(pod: Pod) -> list[Wanted | int] | None:
            found = self._wanted(pod) or self._whole(pod, slots)
            return list(found) if found else None

        pod, chosen = admitting(pods, self.node, served, self.resource, slots, wanted)
        if pod is None or not chosen:
            unit = "vNPU(s)" if self.slotted else "AI core(s)"
            raise PartitionRefused(f"no pod being admitted on {self.node} asks {slots} {unit} with a vNPU (or "
                                   f"whole chips) the scheduler chose: refusing rather than guessing")
        shared = [(f"/dev/{name}", f"{self.device_dir}/{name}", "rw") for name in SHARED_DEVICES]
        chips = [each for each in chosen if isinstance(each, int)]
        chips += [each.phy for each in chosen if isinstance(each, Wanted) and each.vnpu < 0]
        if chips:  # whole chips: healthy, and holding no vNPU
            if any(c not in self.healthy or self.listed.get(c, [None]) for c in chips):
                raise PartitionRefused(f"chips {chips}: not all healthy and free of vNPUs here")
            devices = [(f"/dev/davinci{c}", f"{self.device_dir}/davinci{c}", "rw") for c in chips]
            return pod, ContainerDevices(envs={"ASCEND_VISIBLE_DEVICES": ",".join(map(str, chips))},
                                         devices=devices + shared)
        vnpus = [each for each in chosen if isinstance(each, Wanted) and each.vnpu >= 0]
        for each in vnpus:
            self._ensure(each)
        ids = sorted(w.vnpu for w in vnpus)
        devices = [(f"/dev/davinci{i}", f"{self.device_dir}/vdavinci{i}", "rw") for i in ids]
        return pod, ContainerDevices(envs={"ASCEND_VISIBLE_DEVICES": ",".join(map(str, ids))}, devices=devices + shared)

    def reconcile(self, pods: list[Pod]) -> list[int]:
        """Destroy the vNPUs no pod on this node holds any more (at the second listing that finds one
        orphaned); the ids destroyed."""
        held: set[int] = set()
        for pod in pods:
            if pod.spec.nodeName == self.node and pod.status.phase not in ("Succeeded", "Failed"):
                held.update(w.vnpu for w in self._wanted(pod) or () if w.vnpu >= 0)
        destroyed = []
        orphans: set[int] = set()
        for phy, vnpus in list(self.listed.items()):
            for vnpu in vnpus:
                if vnpu.id in held:
                    continue
                if vnpu.id not in self.orphans:
                    orphans.add(vnpu.id)
                    continue
                card, index = self.cards[phy]
                try:
                    self.tool.destroy(card, index, vnpu.id)
                except (ToolError, ToolOutputError) as exc:
                    log.warning("chip %d: destroying vNPU %d failed (tried again later): %s", phy, vnpu.id, exc)
                    orphans.add(vnpu.id)
                    continue
                destroyed.append(vnpu.id)
                self.listed[phy] = [v for v in self.listed[phy] if v.id != vnpu.id]
        self.orphans = orphans
        return destroyed
