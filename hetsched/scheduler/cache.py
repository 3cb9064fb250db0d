"""The scheduler cache: what the scheduler knows of the cluster, kept up to date from watch events.

Who calls it: the scheduler runner subscribes :meth:`SchedulerCache.handle` to the object store's watch
(the embedded cluster or, later, Kubernetes informers) and calls :meth:`snapshot` once per cycle.

Node usage is maintained incrementally: every pod event un-accounts the pod's previous record and
accounts the new one (one symmetric pair, so the two can never drift apart). Binds the scheduler has
decided but the store has not yet confirmed are *assumed* (:meth:`assume`) so the next cycle never
double-books a node; the confirming event replaces the assumed record at no net change.

Invariants: ``used[:, n]`` is the sum of requests of unfinished pods bound to node ``n``, terminating ones
included; ``releasing[:, n]`` is the part of it held by terminating pods (free once they are gone:
Volcano's FutureIdle = idle + releasing). Not thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

import numpy as np

from hetsched.api import membership
from hetsched.api.disruption import covers, disruptions_allowed
from hetsched.api.objects import (
    NUMA_POLICY_ANNOTATION,
    ConfigMap,
    Node,
    Pod,
    PodAffinityTerm,
    PodDisruptionBudget,
    PodGroup,
    PriorityClass,
    Queue,
    Taint,
    max_unavailable,
)
from hetsched.devices.catalog import default_topology
from hetsched.devices.inventory import (
    ASCEND_INFO_PREFIX,
    ASCEND_NAMESPACE,
    MEMORY_OF,
    NODE_ANNOTATION,
    SHARE_OF,
    DeviceSet,
    InventoryError,
    from_ascend_device_info,
    parse_node_devices,
    pod_allocation,
)
from hetsched.devices.policy import lowest
from hetsched.ports import WatchEvent
from hetsched.scheduler.framework import IntArray
from hetsched.scheduler.snapshot import (
    MLU_LINK_ANNOTATION,
    MODELS_ANNOTATION,
    NUMA_ANNOTATION,
    DeviceArrays,
    JobInfo,
    NodeArrays,
    NumaArrays,
    PlacedPod,
    QueueInfo,
    ResourceIndex,
    RunningPod,
    Snapshot,
    TaskGroup,
)

TASK_ANNOTATION = "volcano.sh/task-spec"
KINDS = ("Node", "Pod", "PodGroup", "Queue", "PriorityClass", "PodDisruptionBudget", "ConfigMap")
SCOPES = {"ConfigMap": ASCEND_NAMESPACE}
"""Kinds the scheduler watches in one namespace only: Ascend's device-info ConfigMaps (the chip health of a
node whose inventory annotation is absent — a cluster running Huawei's device plugin, not hetsched's
agent). Its role may read no other ConfigMaps."""

CHIP_SLOTS = 16
MAX_NUMA = 8
def _required_anti(pod: Pod) -> tuple[PodAffinityTerm, ...]:
    affinity = pod.spec.affinity
    anti = affinity.podAntiAffinity if affinity is not None else None
    return tuple(anti.requiredDuringSchedulingIgnoredDuringExecution) if anti is not None else ()


def _selects_by_labels(pod: Pod) -> bool:
    """Does the pod have rules that select other pods by their labels (pod affinity, anti-affinity, spread)?
    Host ports, the other pod-topology rule, do not read labels."""
    spec = pod.spec
    if not spec.pod_topology:  # cached per spec: most pods have none
        return False
    affinity = spec.affinity
    return bool(spec.topologySpreadConstraints or (affinity is not None and (
        affinity.podAffinity is not None or affinity.podAntiAffinity is not None)))


PREEMPTABLE = "volcano.sh/preemptable"
_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})


def preemptable(pod: Pod) -> bool:
    """Volcano's ``GetPodPreemptable``: the ``volcano.sh/preemptable`` annotation, else the label. Absent: the
    pod may be a victim; present, only a value Go's ParseBool reads as true allows it ("false", and a value
    that is not a boolean, protect the pod, as Volcano treats an unparsable one)."""
    value = pod.metadata.annotations.get(PREEMPTABLE, pod.metadata.labels.get(PREEMPTABLE))
    return value is None or value.strip() in _TRUE


@dataclass(slots=True)
class _PodRecord:
    pod: Pod
    group: str
    task: str
    node: int
    """Row of the node it is bound to, or -1."""
    state: str
    """pending | bound | releasing | succeeded | failed | foreign-pending"""
    request: IntArray
    priority: int
    chips: dict[str, int] | None = None
    """Chips held whole per accelerator resource (bitmask), fixed when first accounted on a node."""
    shares: dict[str, tuple[int, int, int]] | None = None
    """Fractional holdings per accelerator resource: (chip, milli, memory MiB)."""
    numa: int | None = None
    """NUMA node its exclusive CPUs are pinned to (``hetsched.io/numa-node``), fixed when first accounted."""
    placement: tuple[str, str, str, bool, tuple[tuple[str, str], ...]] | None = None
    """Annotations that split pods into groups (models, MLU-Link policy, NUMA policy), whether it says
    ``preemptionPolicy: Never``, and its labels (what pod affinity and spread selectors match): read once
    per pod, not once per cycle."""


class _Devices:
    """Chip state of one accelerator resource across node rows (bitmasks; row = node index)."""

    def __init__(self, rows: int) -> None:
        self.topology: list[str] = [""] * rows
        self.chips = np.zeros(rows, dtype=np.int64)
        self.used = np.zeros(rows, dtype=np.int64)
        self.unhealthy = np.zeros(rows, dtype=np.int64)
        self.network = np.zeros(rows, dtype=np.int64)
        self.shared = np.zeros((rows, CHIP_SLOTS), dtype=np.int64)
        self.memory = np.zeros((rows, CHIP_SLOTS), dtype=np.int64)
        """MiB of device memory per chip (0 = not stated)."""
        self.shared_memory = np.zeros((rows, CHIP_SLOTS), dtype=np.int64)
        self.numa = np.zeros((rows, CHIP_SLOTS), dtype=np.int64)
        """NUMA node of each chip."""
        self.models: list[str] = [""] * rows

    def grow(self, rows: int) -> None:
        extra = rows - len(self.topology)
        if extra > 0:
            self.topology += [""] * extra
            self.models += [""] * extra
            zeros = np.zeros(extra, dtype=np.int64)
            self.chips = np.concatenate([self.chips, zeros])
            self.used = np.concatenate([self.used, zeros])
            self.unhealthy = np.concatenate([self.unhealthy, zeros])
            self.network = np.concatenate([self.network, zeros])
            self.shared = np.vstack([self.shared, np.zeros((extra, CHIP_SLOTS), dtype=np.int64)])
            self.memory = np.vstack([self.memory, np.zeros((extra, CHIP_SLOTS), dtype=np.int64)])
            self.numa = np.vstack([self.numa, np.zeros((extra, CHIP_SLOTS), dtype=np.int64)])
            self.shared_memory = np.vstack([self.shared_memory, np.zeros((extra, CHIP_SLOTS), dtype=np.int64)])


@dataclass(slots=True)
class _Group:
    podgroup: PodGroup | None
    pods: dict[str, None]
    pending: dict[str, None]
    ready: int
    ready_by_task: dict[str, int]
    succeeded: int
    failed: int
    allocated: IntArray


def pod_state(pod: Pod) -> str:
    phase = pod.status.phase
    if phase == "Succeeded":
        return "succeeded"
    if phase == "Failed":
        return "failed"
    if not pod.spec.nodeName:
        return "pending" if pod.metadata.deletionTimestamp is None else "failed"
    return "releasing" if pod.metadata.deletionTimestamp is not None else "bound"


class SchedulerCache:
    def __init__(self, scheduler_names: tuple[str, ...] = ("hetsched", "volcano"), default_queue: str = "default"):
        self.scheduler_names = frozenset(scheduler_names)
        self.default_queue = default_queue
        self.resources = ResourceIndex()
        self._rows = 0
        self._node_names: list[str] = []
        self._node_index: dict[str, int] = {}
        # resource × node (one contiguous row per resource: the hot loops read a few resources of many nodes)
        self._alloc = np.zeros((len(self.resources), 0), dtype=np.int64)
        self._used = np.zeros((len(self.resources), 0), dtype=np.int64)
        self._releasing = np.zeros((len(self.resources), 0), dtype=np.int64)
        self._labels: list[dict[str, str]] = []
        self._taints: list[tuple[Taint, ...]] = []
        self._cordoned: list[bool] = []
        self._ready: list[bool] = []
        self._exists: list[bool] = []
        self._node_objects: dict[str, Node] = {}
        self._node_version = 0
        self._numa_count = np.ones(0, dtype=np.int64)
        """Per node row: NUMA nodes (the highest chip ``numa`` in its inventory + 1; 1 without chips)."""
        self._numa_used = np.zeros((0, MAX_NUMA), dtype=np.int64)
        """node row × NUMA node: milli CPU pinned there by bound pods."""
        self._pods: dict[str, _PodRecord] = {}
        self._anti_pods: set[str] = set()
        """Placed pods with required pod anti-affinity (which every pod placed after them must respect)."""
        self._label_readers = 0
        """Pods (any state, any scheduler's) with pod affinity, anti-affinity or spread rules. While there are
        none, no placement depends on other pods' labels, so pending pods are grouped without them (an
        operator's pods differ in an index label each: 1,000 workers are one group, not 1,000)."""
        self._groups: dict[str, _Group] = {}
        self._queues: dict[str, Queue] = {}
        self._priority_classes: dict[str, PriorityClass] = {}
        self._budgets: dict[str, PodDisruptionBudget] = {}
        self._ascend_info: dict[str, dict[str, str]] = {}
        """Node name → the data of its Ascend device-info ConfigMap."""
        self._vectors: dict[object, IntArray] = {}
        self._static_arrays: NodeArrays | None = None
        self._devices: dict[str, _Devices] = {}
        self.inventory_errors: dict[str, str] = {}
        """Node → why its device inventory annotation could not be read (its chips are then untracked)."""

    # ----------------------------------------------------------------------------- events

    def handle(self, event: WatchEvent) -> None:
        """Apply one watch event. Safe to call for kinds it does not track (ignored)."""
        obj = event.object
        if isinstance(obj, Pod):
            self._on_pod(event.type, obj)
        elif isinstance(obj, Node):
            self._on_node(event.type, obj)
        elif isinstance(obj, PodGroup):
            self._on_podgroup(event.type, obj)
        elif isinstance(obj, Queue):
            if event.type == "DELETED":
                self._queues.pop(obj.metadata.name, None)
            else:
                self._register(obj.spec.capability)
                self._queues[obj.metadata.name] = obj
        elif isinstance(obj, PriorityClass):
            if event.type == "DELETED":
                self._priority_classes.pop(obj.metadata.name, None)
            else:
                self._priority_classes[obj.metadata.name] = obj
        elif isinstance(obj, ConfigMap):
            self._on_config_map(event.type, obj)
        elif isinstance(obj, PodDisruptionBudget):
            key = f"{obj.metadata.namespace or 'default'}/{obj.metadata.name}"
            if event.type == "DELETED":
                self._budgets.pop(key, None)
            else:
                self._budgets[key] = obj

    def assume(self, pod_key: str, node: str, annotations: dict[str, str] | None = None) -> None:
        """Account a bind the scheduler decided before the store confirms it (with its chosen chips)."""
        record = self._pods.get(pod_key)
        if record is None or record.state != "pending":
            return
        self._unaccount(pod_key, record)
        pod = record.pod
        if annotations:
            pod = pod.model_copy(update={"metadata": pod.metadata.model_copy(
                update={"annotations": {**pod.metadata.annotations, **annotations}})})
        assumed = _PodRecord(pod, record.group, record.task, self._node_index[node], "bound",
                             record.request, record.priority)
        self._pods[pod_key] = assumed
        self._account(pod_key, assumed)

    def forget(self, pod_key: str) -> None:
        """Undo :meth:`assume` after a failed bind: the pod is pending again."""
        record = self._pods.get(pod_key)
        if record is None or record.state != "bound" or record.pod.spec.nodeName:
            return
        self._unaccount(pod_key, record)
        pending = _PodRecord(record.pod, record.group, record.task, -1, "pending", record.request, record.priority)
        self._pods[pod_key] = pending
        self._account(pod_key, pending)

    # ----------------------------------------------------------------------------- pods

    def _vector(self, spec_key: object, requests: dict[str, int]) -> IntArray:
        vec = self._vectors.get(spec_key)
        if vec is None:
            if self._register(requests):
                return self._vector(spec_key, requests)
            vec = self.resources.vector(requests)
            self._vectors[spec_key] = vec
        return vec

    def _on_pod(self, type_: str, pod: Pod) -> None:
        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        old = self._pods.pop(key, None)
        if old is not None:
            self._unaccount(key, old)
            self._label_readers -= _selects_by_labels(old.pod)
        if type_ == "DELETED":
            return
        self._label_readers += _selects_by_labels(pod)
        group_name = membership.group_name(pod.metadata.annotations, pod.metadata.labels)
        group = f"{pod.metadata.namespace}/{group_name}" if group_name else ""
        state = pod_state(pod)
        if state == "pending" and pod.spec.schedulerName not in self.scheduler_names:
            state = "foreign-pending"
        node = self._node_index.get(pod.spec.nodeName, -1) if pod.spec.nodeName else -1
        request = self._vector(pod.spec.placement_key, pod.spec.requests)
        priority = pod.spec.priority if pod.spec.priority is not None else self._class_value(pod.spec.priorityClassName)
        record = _PodRecord(pod, group, pod.metadata.annotations.get(TASK_ANNOTATION, ""), node, state, request,
                            priority)
        self._pods[key] = record
        self._account(key, record)

    def _group(self, key: str) -> _Group:
        group = self._groups.get(key)
        if group is None:
            group = _Group(None, {}, {}, 0, {}, 0, 0, np.zeros(len(self.resources), dtype=np.int64))
            self._groups[key] = group
        return group

    def _account(self, key: str, record: _PodRecord, sign: int = 1) -> None:
        if record.node >= 0 and record.state in ("bound", "releasing"):
            if record.pod.spec.pod_topology and _required_anti(record.pod):  # cached: most pods have none
                if sign > 0:
                    self._anti_pods.add(key)
                else:
                    self._anti_pods.discard(key)
            self._used[:, record.node] += sign * record.request
            if record.state == "releasing":
                self._releasing[:, record.node] += sign * record.request
            if self._devices:
                self._account_chips(record, sign)
            self._account_numa(record, sign)
        if not record.group:
            return
        group = self._group(record.group)
        if sign > 0:
            group.pods[key] = None
        else:
            group.pods.pop(key, None)
        if record.state == "pending":
            if sign > 0:
                group.pending[key] = None
            else:
                group.pending.pop(key, None)
        elif record.state in ("bound", "succeeded"):
            group.ready += sign
            group.ready_by_task[record.task] = group.ready_by_task.get(record.task, 0) + sign
            if record.state == "succeeded":
                group.succeeded += sign
            else:
                group.allocated += sign * record.request
        elif record.state == "failed":
            group.failed += sign
        if sign < 0 and group.podgroup is None and not group.pods:
            del self._groups[record.group]

    def _unaccount(self, key: str, record: _PodRecord) -> None:
        self._account(key, record, -1)

    def _account_numa(self, record: _PodRecord, sign: int) -> None:
        """Charge a pinned pod's CPU to its NUMA node (annotation ``hetsched.io/numa-node``, written at bind
        by the ``numaaware`` plugin); an unreadable or out-of-range value is ignored (the pod is not pinned)."""
        if record.numa is None:
            raw = record.pod.metadata.annotations.get(NUMA_ANNOTATION)
            record.numa = int(raw) if raw is not None and raw.isdigit() and int(raw) < MAX_NUMA else -1
        if record.numa >= 0 and record.node < len(self._numa_used):
            self._numa_used[record.node, record.numa] += sign * int(record.request[self.resources.columns["cpu"]])

    def _account_chips(self, record: _PodRecord, sign: int) -> None:
        """Mark the pod's chips used (or free). The chips come from its hand-off annotation; a pod bound
        without one (another scheduler, a plain device plugin) is charged the lowest free healthy chips."""
        row = record.node
        if record.chips is None:
            record.chips, record.shares = {}, {}
            named = pod_allocation(record.pod.metadata.annotations)
            requests = record.pod.spec.requests
            for resource, devices in self._devices.items():
                if not devices.topology[row]:
                    continue
                share = requests.get(SHARE_OF.get(resource, ""), 0) // 1000
                memory = requests.get(MEMORY_OF.get(resource, ""), 0) // 1000
                if share > 0:
                    chips = [c for c in named.get(resource, []) if c < CHIP_SLOTS]
                    if not chips:  # bound without a hand-off: the first chip with room
                        room = [c for c in range(CHIP_SLOTS) if devices.chips[row] >> c & 1
                                and not devices.used[row] >> c & 1 and devices.shared[row, c] + share <= 1000
                                and (not memory or devices.shared_memory[row, c] + memory <= devices.memory[row, c])]
                        chips = room[:1]
                    if chips:
                        record.shares[resource] = (chips[0], share, memory)
                amount = requests.get(resource, 0)
                if amount <= 0:
                    continue
                if resource in named:
                    mask = sum(1 << c for c in named[resource] if c < CHIP_SLOTS)
                else:
                    free = int(devices.chips[row] & ~devices.used[row] & ~devices.unhealthy[row])
                    mask = lowest(free, -(-amount // 1000)) or free
                record.chips[resource] = mask
        for resource, (chip, share, memory) in (record.shares or {}).items():
            state = self._devices.get(resource)
            if state is not None:
                state.shared[row, chip] += sign * share
                state.shared_memory[row, chip] += sign * memory
        for resource, mask in record.chips.items():
            state = self._devices.get(resource)
            if state is None:
                continue
            if sign > 0:
                state.used[row] |= mask
            else:
                state.used[row] &= ~mask

    # ----------------------------------------------------------------------------- nodes

    def _register(self, amounts: dict[str, int]) -> bool:
        """Add unknown resource names; when any is new, rebuild every vector. Returns True if rebuilt."""
        new = [name for name in amounts if name not in self.resources.columns]
        if not new:
            return False
        for name in new:
            self.resources.add(name)
        width = len(self.resources)
        pad = width - self._alloc.shape[0]
        self._alloc = np.pad(self._alloc, ((0, pad), (0, 0)))
        self._used = np.pad(self._used, ((0, pad), (0, 0)))
        self._releasing = np.pad(self._releasing, ((0, pad), (0, 0)))
        self._vectors = {k: np.pad(v, (0, pad)) for k, v in self._vectors.items()}
        for record in self._pods.values():
            record.request = self._vectors.get(record.pod.spec.placement_key, np.pad(record.request, (0, pad)))
        for group in self._groups.values():
            group.allocated = np.pad(group.allocated, (0, pad))
        return True

    def _on_node(self, type_: str, node: Node) -> None:
        name = node.metadata.name
        self._node_version += 1
        self._static_arrays = None
        if type_ == "DELETED":
            row = self._node_index.get(name)
            if row is not None:
                self._exists[row] = False
                self._alloc[:, row] = 0
                self._node_objects.pop(name, None)
            return
        self._register(node.status.allocatable)
        row = self._node_index.get(name)
        if row is None:
            row = self._rows
            self._rows += 1
            if row >= self._alloc.shape[1]:
                grow = np.zeros((len(self.resources), max(16, self._alloc.shape[1])), dtype=np.int64)
                self._alloc = np.hstack([self._alloc, grow])
                self._used = np.hstack([self._used, grow])
                self._releasing = np.hstack([self._releasing, grow])
                self._numa_count = np.concatenate([self._numa_count, np.ones(grow.shape[1], dtype=np.int64)])
                self._numa_used = np.vstack([self._numa_used, np.zeros((grow.shape[1], MAX_NUMA), dtype=np.int64)])
            self._node_index[name] = row
            self._node_names.append(name)
            self._labels.append({})
            self._taints.append(())
            self._cordoned.append(False)
            self._ready.append(True)
            self._exists.append(True)
        self._node_objects[name] = node
        self._alloc[:, row] = self.resources.vector(node.status.allocatable)
        self._on_node_devices(row, node)
        self._labels[row] = dict(node.metadata.labels)
        self._taints[row] = tuple(node.spec.taints)
        self._cordoned[row] = node.spec.unschedulable
        self._ready[row] = node.status.ready
        self._exists[row] = True

    def _on_config_map(self, type_: str, config_map: ConfigMap) -> None:
        name = config_map.metadata.name
        if config_map.metadata.namespace != ASCEND_NAMESPACE or not name.startswith(ASCEND_INFO_PREFIX):
            return
        node = name[len(ASCEND_INFO_PREFIX):]
        if type_ == "DELETED":
            self._ascend_info.pop(node, None)
        else:
            self._ascend_info[node] = dict(config_map.data)
        known = self._node_objects.get(node)
        if known is not None and NODE_ANNOTATION not in known.metadata.annotations:
            self._on_node("MODIFIED", known)

    def _ascend_sets(self, node: Node) -> list[DeviceSet]:
        """The node's chips from Ascend's device-info ConfigMap (CheckCode verified), topology from its
        model label and chip count."""
        name = node.metadata.name
        data = self._ascend_info[name]
        sets = from_ascend_device_info(data, name, topology="generic")
        model = node.metadata.labels.get("node.kubernetes.io/npu.chip.name", "")
        return [s.model_copy(update={"model": model, "topology": default_topology(
            "ascend", f"Ascend{model}" if model else s.resource.rsplit("/", 1)[-1], len(s.chips))}) for s in sets]

    def _on_node_devices(self, row: int, node: Node) -> None:
        """Read the node's chip inventory (``hetsched.io/devices``, else Ascend's device-info ConfigMap);
        keep chips in use across updates."""
        name = node.metadata.name
        raw = node.metadata.annotations.get(NODE_ANNOTATION)
        self.inventory_errors.pop(name, None)
        sets = []
        if raw is not None:
            try:
                sets = parse_node_devices(raw, name).devices
            except InventoryError as exc:
                self.inventory_errors[name] = str(exc)
        elif name in self._ascend_info:
            try:
                sets = self._ascend_sets(node)
            except InventoryError as exc:
                self.inventory_errors[name] = str(exc)
        for devices in self._devices.values():
            devices.grow(len(self._node_names))
            devices.topology[row] = ""
            devices.chips[row] = devices.unhealthy[row] = devices.network[row] = 0
            devices.memory[row] = devices.numa[row] = 0
        self._numa_count[row] = min(MAX_NUMA, 1 + max((c.numa for d in sets for c in d.chips), default=0))
        for device_set in sets:
            state = self._devices.get(device_set.resource)
            if state is None:
                state = self._devices[device_set.resource] = _Devices(len(self._node_names))
            state.topology[row] = device_set.topology
            state.models[row] = device_set.model
            state.chips[row] = device_set.mask()
            state.unhealthy[row] = device_set.mask("Unhealthy")
            state.network[row] = device_set.mask("NetworkUnhealthy")
            for chip in device_set.chips:
                if chip.id < CHIP_SLOTS:
                    state.memory[row, chip.id] = chip.memoryMiB
                    state.numa[row, chip.id] = min(chip.numa, MAX_NUMA - 1)

    def mismatches(self) -> dict[str, str]:
        """Nodes whose allocatable disagrees with their healthy chip count (the seed's "fake resources")."""
        found: dict[str, str] = {}
        for resource, devices in self._devices.items():
            column = self.resources.columns.get(resource)
            if column is None:
                continue
            for row in np.flatnonzero(devices.chips[: self._rows]).tolist():
                if not self._exists[row]:
                    continue
                healthy = (int(devices.chips[row]) & ~int(devices.unhealthy[row])).bit_count()
                advertised = int(self._alloc[column, row]) // 1000
                if advertised != healthy:
                    found[self._node_names[row]] = (f"{resource}: allocatable {advertised} but {healthy} healthy "
                                                    f"chip(s) of {int(devices.chips[row]).bit_count()}")
        return found

    # ----------------------------------------------------------------------------- groups, classes

    def _on_podgroup(self, type_: str, podgroup: PodGroup) -> None:
        key = f"{podgroup.metadata.namespace}/{podgroup.metadata.name}"
        if type_ == "DELETED":
            group = self._groups.get(key)
            if group is not None:
                group.podgroup = None
                if not group.pods:
                    del self._groups[key]
            return
        self._register(podgroup.spec.minResources)
        self._group(key).podgroup = podgroup

    def _placed(self, keys: Iterable[str] | None = None) -> list[PlacedPod]:
        """Every pod on a node (bound, or terminating there) — or those of ``keys`` — for pod affinity,
        topology spread and host ports."""
        placed = []
        records = self._pods.values() if keys is None else [self._pods[k] for k in keys if k in self._pods]
        for record in records:
            if record.node < 0 or record.state not in ("bound", "releasing"):
                continue
            pod = record.pod
            placed.append(PlacedPod(pod.metadata.namespace or "default", pod.metadata.labels, record.node,
                                    _required_anti(pod), pod.spec.host_ports))
        return placed

    def _running(self, jobs: dict[str, JobInfo]) -> tuple[list[RunningPod], list[int]]:
        """Bound pods of the snapshot's jobs with what they hold, and the disruptions each
        PodDisruptionBudget allows (``api.disruption``), for the eviction actions."""
        budgets = list(self._budgets.values())
        pods = [r.pod for r in self._pods.values()] if budgets else []
        replicas = {key: len(group.pods) for key, group in self._groups.items()} if budgets else {}
        allowed = [disruptions_allowed(b, pods, replicas) for b in budgets]
        result = []
        for job_key in jobs:
            group = self._groups.get(job_key)
            if group is None:
                continue
            for pod_key in group.pods:
                record = self._pods.get(pod_key)
                if record is None or record.state != "bound" or record.node < 0:
                    continue
                pod = record.pod
                result.append(RunningPod(
                    key=pod_key, job=job_key, task=record.task, node=record.node, request=record.request,
                    priority=record.priority, created=pod.metadata.creationTimestamp or 0.0,
                    namespace=pod.metadata.namespace or "default", priority_class=pod.spec.priorityClassName,
                    chips=dict(record.chips or {}), shares=dict(record.shares or {}),
                    numa=record.numa if record.numa is not None else -1,
                    budgets=tuple(i for i, b in enumerate(budgets)
                                  if pod.status.phase == "Running" and covers(b, pod)),
                    job_priority=jobs[job_key].priority, preemptable=preemptable(pod)))
        return result, allowed

    @staticmethod
    def _budget(podgroup: PodGroup, pods: int) -> int | None:
        """The PodGroup's disruption budget; an unreadable one counts as 0 (nothing may be evicted) — the
        webhook and ``hetsched validate`` reject it up front."""
        try:
            return max_unavailable(podgroup.metadata.annotations, pods, f"PodGroup {podgroup.metadata.name}")
        except ValueError:
            return 0

    def _class_preempts(self, podgroup: PodGroup) -> bool:
        """False when the job's PriorityClass says ``preemptionPolicy: Never`` (its pods are checked where
        the snapshot walks them)."""
        priority_class = self._priority_classes.get(podgroup.spec.priorityClassName)
        return priority_class is None or priority_class.preemptionPolicy != "Never"

    def _class_value(self, name: str) -> int:
        if name and name in self._priority_classes:
            return self._priority_classes[name].value
        for priority_class in self._priority_classes.values():
            if priority_class.globalDefault:
                return priority_class.value
        return 0

    # ----------------------------------------------------------------------------- reads

    @property
    def node_version(self) -> int:
        """Changes whenever any node changes."""
        return self._node_version

    def node(self, name: str) -> Node | None:
        return self._node_objects.get(name)

    def podgroup(self, key: str) -> PodGroup | None:
        group = self._groups.get(key)
        return group.podgroup if group else None

    def pod(self, key: str) -> Pod | None:
        record = self._pods.get(key)
        return record.pod if record else None

    def used(self) -> dict[str, dict[str, float]]:
        """Node → resources in use by bound pods (for checks and tests)."""
        rows = self._rows
        return {self._node_names[r]: self.resources.as_dict(self._used[:, r]) for r in range(rows) if self._exists[r]}

    def _node_arrays(self) -> NodeArrays:
        rows = self._rows
        if self._static_arrays is None or len(self._static_arrays.names) != rows:
            cordoned = np.array(self._cordoned, dtype=bool)
            ready = np.array(self._ready, dtype=bool)
            exists = np.array(self._exists, dtype=bool)
            self._static_arrays = NodeArrays(
                names=list(self._node_names), alloc=self._alloc[:, :rows], used=self._used[:, :rows],
                releasing=self._releasing[:, :rows], schedulable=exists & ready & ~cordoned,
                labels=self._labels, taints=self._taints, cordoned=cordoned, ready=ready, exists=exists,
                version=self._node_version, index=dict(self._node_index),
            )
        static = self._static_arrays
        return NodeArrays(
            names=static.names, alloc=self._alloc[:, :rows].copy(), used=self._used[:, :rows].copy(),
            releasing=self._releasing[:, :rows].copy(), schedulable=static.schedulable, labels=static.labels,
            taints=static.taints, cordoned=static.cordoned, ready=static.ready, exists=static.exists,
            version=static.version, index=static.index, _label_codes=static._label_codes,
        )

    def snapshot(self) -> Snapshot:
        """Copy what a cycle needs. O(nodes × resources) array copies plus O(pending pods + groups)."""
        width = len(self.resources)
        jobs: dict[str, JobInfo] = {}
        missing: dict[str, int] = {}
        keep_labels = self._label_readers > 0
        for key, group in self._groups.items():
            podgroup = group.podgroup
            if podgroup is None:
                if group.pending:  # pods name a PodGroup that does not exist (yet): they wait for it
                    missing[key] = len(group.pending)
                continue
            if podgroup.status.phase == "Completed" and not group.pending:
                continue
            by_placement: dict[tuple[str, object, int, str, str, str, tuple[tuple[str, str], ...]], list[str]] = {}
            never = False
            for pod_key in group.pending:
                record = self._pods[pod_key]
                if record.placement is None:
                    annotations = record.pod.metadata.annotations
                    record.placement = (annotations.get(MODELS_ANNOTATION, ""),
                                        annotations.get(MLU_LINK_ANNOTATION, "").strip(),
                                        annotations.get(NUMA_POLICY_ANNOTATION, "").strip(),
                                        record.pod.spec.preemptionPolicy == "Never",
                                        tuple(sorted(record.pod.metadata.labels.items())))
                models, mlu_link, numa_policy, refuses, labels = record.placement
                never = never or refuses
                by_placement.setdefault((record.task, record.pod.spec.placement_key, record.priority, models,
                                         mlu_link, numa_policy, labels if keep_labels else ()), []).append(pod_key)
            job = JobInfo(
                key=key, podgroup=podgroup, queue=podgroup.spec.queue or self.default_queue,
                priority=self._class_value(podgroup.spec.priorityClassName) if podgroup.spec.priorityClassName
                else 0,
                min_member=podgroup.spec.minMember, min_task_member=dict(podgroup.spec.minTaskMember),
                phase=podgroup.status.phase,
                created=podgroup.metadata.creationTimestamp or 0.0, groups=[], ready=group.ready,
                ready_by_task=dict(group.ready_by_task), pending_count=len(group.pending),
                total_pods=len(group.pods), allocated=group.allocated.astype(np.float64),
                min_resources=self.resources.vector(podgroup.spec.minResources).astype(np.float64),
                preempts=not never and self._class_preempts(podgroup),
                max_unavailable=self._budget(podgroup, len(group.pods)),
            )
            for (task, placement_key, priority, models, mlu_link, numa_policy, labels), keys in by_placement.items():
                record = self._pods[keys[0]]
                request = record.request
                job.groups.append(TaskGroup(
                    job=job, task=task, spec=record.pod.spec,
                    placement_key=(placement_key, models, mlu_link, numa_policy), numa_policy=numa_policy,
                    request=request, columns=np.flatnonzero(request), priority=priority, pending=keys,
                    models=tuple(m.strip() for m in models.split("|") if m.strip()), mlu_link=mlu_link,
                    labels=dict(labels), namespace=record.pod.metadata.namespace or "default",
                ))
            jobs[key] = job
        queues: dict[str, QueueInfo] = {}
        names = set(self._queues) | {job.queue for job in jobs.values()}
        for name in sorted(names):
            queue = self._queues.get(name)
            capability = np.full(width, np.inf)
            guarantee = np.zeros(width)
            fixed = np.full(width, np.nan)
            if queue is not None:
                for resource, amount in queue.spec.capability.items():
                    capability[self.resources.columns[resource]] = amount
                for resource, amount in queue.spec.guarantee.resource.items():
                    if resource in self.resources.columns:
                        guarantee[self.resources.columns[resource]] = amount
                for resource, amount in queue.spec.deserved.items():
                    if resource in self.resources.columns:
                        fixed[self.resources.columns[resource]] = amount
            queues[name] = QueueInfo(
                name=name, weight=float(queue.spec.weight) if queue else 1.0, capability=capability,
                guarantee=guarantee, state=queue.status.state if queue else "NotFound",
                reclaimable=queue.spec.reclaimable if queue else True,
                affinity=queue.spec.affinity if queue else None, parent=queue.spec.parent if queue else "",
                fixed_deserved=fixed, priority=queue.spec.priority if queue else 0,
                allocated=np.zeros(width), inqueue=np.zeros(width), request=np.zeros(width),
            )
        for job in jobs.values():
            queue_info = queues[job.queue]
            queue_info.allocated += job.allocated
            pending = sum((g.request.astype(np.float64) * len(g.pending) for g in job.groups), np.zeros(width))
            queue_info.request += job.allocated + pending
            if job.phase == "Pending":  # no pods yet: its minResources are what the queue waits to run
                queue_info.request += job.min_resources
            if job.phase == "Inqueue":
                queue_info.inqueue += np.maximum(job.min_resources - job.allocated, 0)
        rows = self._rows
        devices = {
            resource: DeviceArrays(
                topology=list(state.topology[:rows]), models=list(state.models[:rows]),
                chips=state.chips[:rows].copy(), used=state.used[:rows].copy(),
                unhealthy=state.unhealthy[:rows].copy(), network=state.network[:rows].copy(),
                shared=state.shared[:rows].copy(),
                memory=state.memory[:rows].copy() if state.memory[:rows].any() else None,
                shared_memory=state.shared_memory[:rows].copy(), numa=state.numa[:rows].copy())
            for resource, state in self._devices.items()
        }
        cpu = self._alloc[self.resources.columns["cpu"], :rows]
        count = self._numa_count[:rows]
        numa_cpu = np.where(np.arange(MAX_NUMA)[None, :] < count[:, None], (cpu // count)[:, None], 0)
        numa = NumaArrays(cpu=numa_cpu.astype(np.int64), used=self._numa_used[:rows].copy())
        return Snapshot(
            resources=self.resources, nodes=self._node_arrays(), jobs=jobs, queues=queues, devices=devices,
            numa=numa, running_source=lambda: self._running(jobs), placed_source=self._placed,
            anti_source=partial(self._placed, tuple(self._anti_pods)) if self._anti_pods else None,
            priority_classes={n: c.value for n, c in self._priority_classes.items()},
            default_queue=self.default_queue, missing_groups=missing,
        )
