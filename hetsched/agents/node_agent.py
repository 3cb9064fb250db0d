"""``hetsched node-agent``: turn what the vendor tools say into what the cluster sees — per-chip health for
the scheduler, a node condition, a taint when the node is unusable, and the accelerator labels.

Who calls it: the ``hetsched node-agent`` command (a DaemonSet; one :meth:`NodeAgent.sync` per period) and
the tests (on the embedded cluster). It talks to the cluster only through the ports (``ObjectStore``), so
it runs the same against the embedded cluster and, with the Kubernetes adapter, against an API server.

Each sync:
- reads the chips from the backend (``agents.backends``). A missing, failing or garbled tool does not
  crash the agent: the node's last known chips are all reported Unhealthy, with the tool's message;
- writes the inventory annotation ``hetsched.io/devices`` (chip ids, health, NUMA node, memory, the
  topology), and for Ascend also Ascend's ``kube-system/mindx-dl-deviceinfo-<node>`` ConfigMap
  (``DeviceInfoCfg`` with its CheckCode), so Ascend's own scheduler plugin reads the same health;
- sets the node condition ``AcceleratorHealthy``: True when every chip is healthy; False with reason
  ``ChipsUnhealthy`` (naming the chips and why), ``NoHealthyChips`` or ``ToolFailed``;
- adds the taint ``hetsched.io/accelerator-unhealthy:NoSchedule`` when the node is unusable (no healthy
  chip, or the tool fails) and removes it on recovery — a node with some bad chips stays schedulable,
  the scheduler just never picks those chips;
- labels the node ``accelerator=huawei-ascend|cambricon-mlu|nvidia-gpu`` (seed 004 §3) and
  ``hetsched.io/accelerator-model=<model>``;
- where the hardware reports the server's supernode (an Ascend A3 SuperPoD), labels it
  ``topology.hetsched.io/tier-1=superpod-<id>`` (``--supernode-label``), so HyperNode discovery puts the
  supernode's servers in one tier-1 HyperNode without hand work; a server that left its supernode loses the
  label (only a value this agent wrote is ever removed), and a failed query leaves it as it is;
- on Ascend nodes, annotates the driver release (``hetsched.io/ascend-driver-version``, from ``npu-smi``'s
  header; also as the label ``hetsched.io/ascend-driver``, which the scheduler matches pods' declared CANN
  against) and the host's CANN toolkit release (``hetsched.io/cann-version``) for doctor's
  ``cann-driver-match`` (``devices.cann``);
- with a kubelet configuration file, annotates ``hetsched.io/topology-manager-policy=<topology>/<cpu>`` so
  ``hetsched doctor`` can tell where the ``numaaware`` plugin is a silent no-op.
Writes are optimistic: on a conflict the node is read again and the change re-applied.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path

from hetsched.agents.backends import Backend
from hetsched.agents.chips import InventoryGuard, ToolChip
from hetsched.agents.kubelet_config import read_policies
from hetsched.agents.tables import ToolOutputError
from hetsched.agents.tools import ToolError
from hetsched.api.hypernodes import TIER_LABEL
from hetsched.api.objects import Condition, ConfigMap, Node, Taint
from hetsched.devices.cann import CANN_ANNOTATION, DRIVER_ANNOTATION, DRIVER_LABEL
from hetsched.devices.catalog import MODEL_LABEL
from hetsched.devices.inventory import (
    ASCEND_NAMESPACE,
    NODE_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    Chip,
    DeviceSet,
    InventoryError,
    NodeDevices,
    ascend_info_name,
    parse_node_devices,
    to_ascend_device_info,
)
from hetsched.devices.partition_requests import (
    HAMI_CORES,
    HAMI_MEMORY,
    HAMI_MEMORY_PERCENT,
    VGPU_CORES,
    VGPU_MEMORY,
    hami_ascend_name,
)
from hetsched.devices.partitions import geometry_for
from hetsched.ports import Conflict, NotFound, ObjectStore

SUPERNODE_LABEL = TIER_LABEL.format(tier=1)
"""Where the supernode goes by default: the tier-1 label HyperNode discovery reads (``api.hypernodes``)."""
SUPERNODE_PREFIX = "superpod-"
log = logging.getLogger("hetsched.node-agent")
CONDITION = "AcceleratorHealthy"
TAINT = Taint(key="hetsched.io/accelerator-unhealthy", effect="NoSchedule")
ACCELERATOR_LABEL = "accelerator"
ASCEND_REWRITE = 300.0
"""Seconds after which the Ascend device-info ConfigMap is written again though its chips did not change:
the agent never reads it, so one deleted or overwritten meanwhile comes back within this."""


def label_value(text: str) -> str:
    """A Kubernetes label value from free text ("NVIDIA A100-SXM4-80GB" → "NVIDIA-A100-SXM4-80GB"): letters,
    digits, '-', '_', '.', at most 63 characters, alphanumeric at both ends."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)


class NodeAgent:
    def __init__(self, store: ObjectStore, node: str, backend: Backend,
                 now: Callable[[], float] = time.time, kubelet_config: Path | None = None,
                 supernode_label: str = SUPERNODE_LABEL) -> None:
        self.store = store
        self.supernode_label = supernode_label
        """The node label for the server's supernode ("" = never write one)."""
        self.versions: dict[str, str] | None = None
        """The driver and toolkit releases read at the last sync (None: not read; they stay as published)."""
        self.supernode: str | None = None
        """The supernode the hardware reported at the last sync ("" = none; None = it cannot tell)."""
        self.kubelet_config = kubelet_config
        self.node = node
        self.backend = backend
        self.now = now
        self.last_error = ""
        self.last_chips: list[ToolChip] | None = None
        """What the tool reported at the last sync (None when it failed)."""
        self.guard = InventoryGuard()
        self._ascend_written: tuple[object, float] | None = None
        """The chips of the Ascend device-info ConfigMap this agent last wrote, and when."""

    def sync(self) -> Node:
        """One check: read the chips, publish health, condition, taint and labels; returns the node."""
        device_set: DeviceSet | None
        try:
            chips = self.guard.check(self.backend.chips(), self.backend.resource)
            self.last_chips = chips
            self.last_error = ""
            device_set = self._device_set(chips)
            self.supernode = self._supernode()
            self.versions = self.backend.versions()
            unhealthy = [c for c in chips if not c.healthy]
            usable = len(unhealthy) < len(chips)
            if not unhealthy:
                condition = Condition(type=CONDITION, status="True", reason="AllChipsHealthy",
                                      message=f"{len(chips)} chip(s) healthy")
            else:
                why = ", ".join(f"{c.id} ({c.level}{': ' + c.reason if c.reason else ''})" for c in unhealthy)
                condition = Condition(type=CONDITION, status="False",
                                      reason="ChipsUnhealthy" if usable else "NoHealthyChips",
                                      message=f"unhealthy chip(s): {why}")
        except Exception as exc:  # whatever the tool or a parser does, the node's health never freezes
            message = str(exc) if isinstance(exc, ToolError | ToolOutputError) else \
                f"{self.backend.resource}: reading the chips failed ({type(exc).__name__}: {exc})"
            self.last_error = message
            self.last_chips = None
            device_set = self._last_known()
            usable = False
            condition = Condition(type=CONDITION, status="False", reason="ToolFailed", message=message[:1024])
        node = self._update_node(device_set, condition, usable)
        if device_set is not None and self.backend.vendor == "ascend":
            self._publish_ascend(device_set)
        return node

    def _supernode(self) -> str | None:
        """The backend's answer; a failed or garbled query is "cannot tell" (the label stays as it is)."""
        try:
            return self.backend.supernode()
        except (ToolError, ToolOutputError) as exc:
            log.warning("node %s: supernode query failed, label left as it is: %s", self.node, exc)
            return None

    def _device_set(self, chips: list[ToolChip]) -> DeviceSet:
        return DeviceSet(resource=self.backend.resource, model=chips[0].model, topology=self.backend.topology,
                         partitioning=getattr(self.backend, "partitioning", ""),
                         chips=[Chip(id=c.id, health="Healthy" if c.healthy else "Unhealthy", numa=max(c.numa, 0),
                                     memoryMiB=c.memory_mib) for c in chips])

    def _last_known(self) -> DeviceSet | None:
        """The chips the node last published, all Unhealthy (the tool cannot vouch for them now)."""
        with contextlib.suppress(NotFound, InventoryError):
            node = self.store.get("Node", self.node)
            raw = node.metadata.annotations.get(NODE_ANNOTATION)
            if raw:
                for device_set in parse_node_devices(raw, self.node).devices:
                    if device_set.resource == self.backend.resource:
                        chips = [c.model_copy(update={"health": "Unhealthy"}) for c in device_set.chips]
                        return device_set.model_copy(update={"chips": chips})
        return None

    def _update_node(self, device_set: DeviceSet | None, condition: Condition, usable: bool) -> Node:
        for _ in range(5):
            node = self.store.get("Node", self.node)
            assert isinstance(node, Node)
            updated = self._apply(node, device_set, condition, usable)
            if updated == node:
                return node
            try:
                stored = self.store.update(updated)
                assert isinstance(stored, Node)
                return stored
            except Conflict:
                continue  # someone else wrote the node: read it again and re-apply
        raise Conflict(f"node {self.node}: kept changing under the node agent; will try next period")

    def _apply(self, node: Node, device_set: DeviceSet | None, condition: Condition, usable: bool) -> Node:
        annotations = dict(node.metadata.annotations)
        labels = {**node.metadata.labels, ACCELERATOR_LABEL: self.backend.label}
        if self.supernode is not None and self.supernode_label:
            if self.supernode:
                labels[self.supernode_label] = SUPERNODE_PREFIX + label_value(self.supernode)
            elif labels.get(self.supernode_label, "").startswith(SUPERNODE_PREFIX):
                del labels[self.supernode_label]  # ours, and the server left its supernode; others' stay
        if self.versions is not None:  # read this sync: publish them, and drop one no longer there
            for key, annotation in (("driver", DRIVER_ANNOTATION), ("cann", CANN_ANNOTATION)):
                if self.versions.get(key):
                    annotations[annotation] = self.versions[key]
                else:
                    annotations.pop(annotation, None)
            if self.versions.get("driver"):
                labels[DRIVER_LABEL] = label_value(self.versions["driver"])
            else:
                labels.pop(DRIVER_LABEL, None)
        if self.kubelet_config is not None:
            with contextlib.suppress(ValueError):  # an unreadable file: leave the last published value
                policies = read_policies(self.kubelet_config)
                if policies is None:
                    annotations.pop(TOPOLOGY_ANNOTATION, None)
                else:
                    annotations[TOPOLOGY_ANNOTATION] = "/".join(policies)
        if device_set is not None:
            others: list[DeviceSet] = []
            with contextlib.suppress(InventoryError):
                if NODE_ANNOTATION in annotations:
                    others = [d for d in parse_node_devices(annotations[NODE_ANNOTATION], self.node).devices
                              if d.resource != device_set.resource]
            annotations[NODE_ANNOTATION] = NodeDevices(devices=[*others, device_set]).to_annotation()
            if device_set.model:
                labels[MODEL_LABEL] = label_value(device_set.model)
        previous = next((c for c in node.status.conditions if c.type == CONDITION), None)
        if previous is not None and (previous.status, previous.reason, previous.message) == (
                condition.status, condition.reason, condition.message):
            condition = previous
        else:
            condition = condition.model_copy(update={"lastTransitionTime": self.now()})
        conditions = [*(c for c in node.status.conditions if c.type != CONDITION), condition]
        taints = [t for t in node.spec.taints if t.key != TAINT.key]
        if not usable:
            taints.append(TAINT)
        status: dict[str, object] = {"conditions": conditions}
        if device_set is not None and device_set.partitioning == "vgpu":
            status.update(_vgpu_resources(node, device_set))
        elif device_set is not None and device_set.partitioning in ("vnpu", "mig"):
            status.update(_template_memory(node, device_set))
        return node.model_copy(update={
            "metadata": node.metadata.model_copy(update={"annotations": annotations, "labels": labels}),
            "spec": node.spec.model_copy(update={"taints": taints}),
            "status": node.status.model_copy(update=status),
        })

    def _publish_ascend(self, device_set: DeviceSet) -> None:
        """Ascend's device-info ConfigMap, for Ascend's own scheduler plugin (and our cache's fallback),
        written when its chips changed since this agent last wrote it (or ``ASCEND_REWRITE`` seconds ago).
        Written blind (an update without a
        resourceVersion, a create when it is not there): the agent may write this one ConfigMap and read
        none in kube-system (its role and ``cluster.restriction``)."""
        data = to_ascend_device_info(device_set, int(self.now()))
        chips = json.loads(data["DeviceInfoCfg"])["DeviceInfo"]["DeviceList"]
        now = self.now()
        if self._ascend_written is not None and self._ascend_written[0] == chips and (
                now - self._ascend_written[1] < ASCEND_REWRITE):
            return
        config_map = ConfigMap.model_validate({"metadata": {"name": ascend_info_name(self.node),
                                                            "namespace": ASCEND_NAMESPACE}, "data": data})
        try:
            self.store.update(config_map)
        except NotFound:
            try:
                self.store.create(config_map)
            except Conflict:  # made meanwhile (Huawei's plugin beside us): the next period writes it over
                return
        self._ascend_written = (chips, now)


def _vgpu_resources(node: Node, device_set: DeviceSet) -> dict[str, dict[str, int]]:
    """The node's capacity and allocatable with HAMi-core vGPU memory and compute as node-level extended
    resources, in Volcano's and HAMi's names (``volcano.sh/vgpu-memory``, ``nvidia.com/gpumem``: the healthy
    GPUs' MiB; ``volcano.sh/vgpu-cores``, ``nvidia.com/gpucores``, ``nvidia.com/gpumem-percentage``: 100 per
    healthy GPU): kubelet checks pods asking them against these, nothing allocates them; the vGPU counts
    (``volcano.sh/vgpu-number``, ``nvidia.com/gpu``) are the device plugin's (``agents.deviceplugin.vgpu``),
    and which GPU a vGPU goes on is the scheduler's."""
    healthy = [c for c in device_set.chips if c.health == "Healthy"]
    memory, percent = 1000 * sum(c.memoryMiB for c in healthy), 1000 * 100 * len(healthy)
    amounts = {VGPU_MEMORY: memory, HAMI_MEMORY: memory, VGPU_CORES: percent, HAMI_CORES: percent,
               HAMI_MEMORY_PERCENT: percent}
    return {"capacity": {**node.status.capacity, **amounts}, "allocatable": {**node.status.allocatable, **amounts}}


def _template_memory(node: Node, device_set: DeviceSet) -> dict[str, dict[str, int]]:
    """Where partitions are asked by memory and carved into templates, that memory as a node-level extended
    resource, the healthy chips' MiB: on a 910 carved into vNPUs HAMi's ``huawei.com/Ascend<chip>-memory``, on
    GPUs in MIG mode Volcano's ``volcano.sh/vgpu-memory`` (vGPUs in MIG mode). kubelet checks pods asking it
    against this; the counts are the device plugin's and which chip and template the scheduler's. Nothing on
    a 310P, whose vNPUs are asked by AI cores."""
    geometry = geometry_for(device_set.partitioning, device_set.model)
    if geometry is None:
        return {}
    if device_set.partitioning == "mig":
        name = VGPU_MEMORY
    else:
        name = f"{hami_ascend_name(geometry.name)}-memory" if geometry.slotted else ""
    if not name:
        return {}
    healthy = sum(1 for c in device_set.chips if c.health == "Healthy")
    amounts = {name: 1000 * geometry.memory * healthy}
    return {"capacity": {**node.status.capacity, **amounts}, "allocatable": {**node.status.allocatable, **amounts}}
