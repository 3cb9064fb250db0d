"""The scheduler cache: what the scheduler knows of the cluster, kept up to date from watch events.

Who calls it: the scheduler runner subscribes :meth:`SchedulerCache.handle` to the object store's watch
(the embedded cluster or the Kubernetes adapter's informers) and calls :meth:`SchedulerCache.snapshot` once
per cycle. This module routes events to the parts that keep state — node rows and usage
(``cache.nodes``), pod records and PodGroup counts (``cache.pods``), chips and NUMA (``cache.devicestate``),
the HyperNode tree (``cache.network``) — and builds the snapshot from them (``cache.build``).

Usage is maintained incrementally: every pod event un-accounts the pod's previous record and accounts the
new one (one symmetric pair, so the two can never drift apart). Binds the scheduler has decided but the
store has not yet confirmed are *assumed* (:meth:`SchedulerCache.assume`) so the next cycle never
double-books a node; the confirming event replaces the assumed record at no net change.

Single-thread contract: the cache is not thread-safe, and a snapshot is a value — arrays, node facts, jobs
and queues are copies — except the pod lists a session may ask for lazily (placed pods, running pods),
which are read from the cache on first use. The cache counts its changes (:attr:`SchedulerCache.generation`)
and a snapshot refuses to build those lists once the cache changed after it was taken
(``StaleSnapshot``), so a change after ``snapshot()`` can never silently alter a decision
(``tests/test_cache_snapshot.py``).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np

from hetsched.api import membership
from hetsched.api.objects import (
    ConfigMap,
    HyperNode,
    Namespace,
    Node,
    Pod,
    PodDisruptionBudget,
    PodGroup,
    PriorityClass,
    Queue,
    QueueUsage,
    ResourceQuota,
)
from hetsched.api.priority_policy import DEFAULT as DEFAULT_PRIORITY
from hetsched.api.priority_policy import PriorityPolicy
from hetsched.devices.inventory import ASCEND_NAMESPACE, NODE_ANNOTATION
from hetsched.ports import WatchEvent
from hetsched.scheduler.cache import build
from hetsched.scheduler.cache.devicestate import DeviceLedger
from hetsched.scheduler.cache.network import NetworkState
from hetsched.scheduler.cache.nodes import NodeTable
from hetsched.scheduler.cache.parked import ParkedJobs
from hetsched.scheduler.cache.pods import (
    TASK_ANNOTATION,
    Groups,
    PodRecord,
    pod_state,
    required_anti,
    selects_by_labels,
)
from hetsched.scheduler.cache.settled import SettledJobs
from hetsched.scheduler.contract.arrays import IntArray
from hetsched.scheduler.contract.snapshot import ResourceIndex, Snapshot

KINDS = ("Node", "Pod", "PodGroup", "Queue", "PriorityClass", "PodDisruptionBudget", "ConfigMap", "HyperNode",
         "QueueUsage", "ResourceQuota", "Namespace")
SCOPES = {"ConfigMap": ASCEND_NAMESPACE}
"""Kinds the scheduler watches in one namespace only: Ascend's device-info ConfigMaps (the chip health of a
node whose inventory annotation is absent — a cluster running Huawei's device plugin, not hetsched's
agent). Its role may read no other ConfigMaps."""


class SchedulerCache:
    def __init__(self, scheduler_names: tuple[str, ...] = ("hetsched", "volcano"), default_queue: str = "default",
                 priority_policy: PriorityPolicy = DEFAULT_PRIORITY):
        self.scheduler_names = frozenset(scheduler_names)
        self.default_queue = default_queue
        self.priority_policy = priority_policy
        """Which namespaces may use which PriorityClasses: a class a namespace may not use counts as none (its
        pods get the default priority and no shield from eviction), whatever admission let through."""
        self.resources = ResourceIndex()
        self.nodes = NodeTable(self.resources)
        self.devices = DeviceLedger()
        self.groups = Groups()
        self.settled = SettledJobs()
        """Records of settled jobs, reused by every snapshot until their group changes (``cache.settled``)."""
        self.network = NetworkState()
        self.parked = ParkedJobs(rooms=self.nodes.rooms)
        """Jobs ``allocate`` found no room for, not tried again until room may have been freed
        (``cache.parked``)."""
        self.generation = 0
        """Counts every change (events, assumed and forgotten binds): a snapshot is stale once it moved."""
        self._pods: dict[str, PodRecord] = {}
        self._anti_pods: set[str] = set()
        """Placed pods with required pod anti-affinity (which every pod placed after them must respect)."""
        self._label_readers = 0
        """Pods (any state, any scheduler's) with pod affinity, anti-affinity or spread rules. While there are
        none, no placement depends on other pods' labels, so pending pods are grouped without them (an
        operator's pods differ in an index label each: 1,000 workers are one group, not 1,000)."""
        self.read_labels: frozenset[str] = frozenset()
        """Pod label keys the configured plugins read (``Plugin.read_labels``): kept on every task group, so
        pods differing in them are never one group."""
        self._queues: dict[str, Queue] = {}
        self._usages: dict[str, QueueUsage] = {}
        self._namespace_labels: dict[str, dict[str, str]] = {}
        """Namespace → its labels, for every Namespace: replaced, never changed in place, so a snapshot may hold
        it."""
        self._quotas: dict[str, ResourceQuota] = {}
        """ResourceQuotas by ``namespace/name`` (the ``resourcequota`` plugin)."""
        self._quota_view: dict[str, tuple[tuple[str, dict[str, int], dict[str, int]], ...]] | None = None
        """What snapshots show of them, built once per change (read-only)."""
        """Each queue's ``QueueUsage`` (its budget state, ``controllers.usage``)."""
        self._priority_classes: dict[str, PriorityClass] = {}
        self._budgets: dict[str, PodDisruptionBudget] = {}
        self._vectors: dict[object, IntArray] = {}

    @property
    def inventory_errors(self) -> dict[str, str]:
        """Node → why its device inventory could not be read (its chips are then untracked)."""
        return self.devices.errors

    # ----------------------------------------------------------------------------- events

    def handle(self, event: WatchEvent) -> None:
        """Apply one watch event. Safe to call for kinds it does not track (ignored)."""
        self.generation += 1
        obj = event.object
        if isinstance(obj, Pod):
            self._on_pod(event.type, obj)
            return
        if isinstance(obj, PodGroup):
            if event.type != "DELETED":
                self._register(obj.spec.minResources)
            key = f"{obj.metadata.namespace}/{obj.metadata.name}"
            group = self.groups.by_key.get(key)
            if event.type != "MODIFIED" or group is None or group.podgroup is None or _moved(group.podgroup, obj):
                self.parked.touched(key)  # a status the scheduler wrote changes nothing that placement reads
            self.groups.on_podgroup(event.type, obj, len(self.resources))
            return
        if isinstance(obj, QueueUsage):
            self._on_usage(event.type, obj)
            return
        if isinstance(obj, Namespace):  # its labels: what queues' and pod-affinity namespace selectors match
            name = obj.metadata.name
            if event.type == "DELETED" or self._namespace_labels.get(name) != obj.metadata.labels:
                labels = dict(self._namespace_labels)  # replaced, not changed: a snapshot keeps the old one
                if event.type == "DELETED":
                    labels.pop(name, None)
                else:
                    labels[name] = dict(obj.metadata.labels)
                self._namespace_labels = labels
                self.parked.freed()
            return
        if isinstance(obj, ResourceQuota):  # admission only (``enqueue``): what fits where is unchanged
            key = f"{obj.metadata.namespace or 'default'}/{obj.metadata.name}"
            if event.type == "DELETED":
                self._quotas.pop(key, None)
            else:
                self._quotas[key] = obj
            self._quota_view = None
            return
        self.parked.freed()  # every other kind may change what fits where (nodes, chips, queues, classes …)
        if isinstance(obj, Node):
            self._on_node(event.type, obj)
        elif isinstance(obj, Queue):
            if event.type == "DELETED":
                self._queues.pop(obj.metadata.name, None)
            else:
                self._register(obj.spec.capability)
                self._queues[obj.metadata.name] = obj
        elif isinstance(obj, PriorityClass):
            self.settled.clear()  # a job's priority and whether it may preempt read the classes
            if event.type == "DELETED":
                self._priority_classes.pop(obj.metadata.name, None)
            else:
                self._priority_classes[obj.metadata.name] = obj
        elif isinstance(obj, ConfigMap):
            node = self.devices.on_config_map(event.type, obj)
            known = self.nodes.objects.get(node) if node is not None else None
            if known is not None and NODE_ANNOTATION not in known.metadata.annotations:
                self._on_node("MODIFIED", known)
        elif isinstance(obj, HyperNode):
            self.network.on_hypernode(event.type, obj)
        elif isinstance(obj, PodDisruptionBudget):
            key = f"{obj.metadata.namespace or 'default'}/{obj.metadata.name}"
            if event.type == "DELETED":
                self._budgets.pop(key, None)
            else:
                self._budgets[key] = obj

    def _on_usage(self, kind: str, usage: QueueUsage) -> None:
        """A queue's budget state: only a change of what is used up (or of what that means) matters to
        placement — the accountant's periodic status writes wake no parked gang."""
        name = usage.metadata.name
        before = self._usages.get(name)
        if kind == "DELETED":
            self._usages.pop(name, None)
        else:
            self._usages[name] = usage
        after = self._usages.get(name)

        def state(found: QueueUsage | None) -> tuple[object, ...]:
            return found.budget_state() if found is not None else ()

        if state(before) != state(after):
            self.parked.freed()

    def assume(self, pod_key: str, node: str, annotations: dict[str, str] | None = None) -> None:
        """Account a bind the scheduler decided before the store confirms it (with its chosen chips)."""
        record = self._pods.get(pod_key)
        if record is None or record.state != "pending":
            return
        self.generation += 1
        self._unaccount(pod_key, record)
        pod = record.pod
        if annotations:
            pod = pod.model_copy(update={"metadata": pod.metadata.model_copy(
                update={"annotations": {**pod.metadata.annotations, **annotations}})})
        assumed = PodRecord(pod, record.group, record.task, self.nodes.index[node], "bound", record.request,
                            record.priority)
        self._pods[pod_key] = assumed
        self._account(pod_key, assumed)

    def forget(self, pod_key: str) -> None:
        """Undo :meth:`assume` after a failed bind: the pod is pending again."""
        record = self._pods.get(pod_key)
        if record is None or record.state != "bound" or record.pod.spec.nodeName:
            return
        self.generation += 1
        self.parked.freed()
        self._unaccount(pod_key, record)
        pending = PodRecord(record.pod, record.group, record.task, -1, "pending", record.request, record.priority)
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
        old = self._pods.get(key)
        if type_ == "MODIFIED" and old is not None and old.state == "pending" and _status_only(old.pod, pod):
            self._pods[key] = replace(old, pod=pod)  # the scheduler's own condition or nomination: nothing moved
            return
        if type_ == "MODIFIED" and old is not None and _confirms(old, pod, self.nodes.index.get(pod.spec.nodeName, -1)):
            self._pods[key] = replace(old, pod=pod)  # the store confirming a bind :meth:`assume` accounted already
            return
        self._pods.pop(key, None)
        if old is not None:
            if old.group:
                self.parked.touched(old.group)
            self._unaccount(key, old)
            self._label_readers -= selects_by_labels(old.pod)
        if type_ == "DELETED":
            if old is not None and old.placed:
                self._room_freed(old)
            return
        self._label_readers += selects_by_labels(pod)
        group_name = membership.group_name(pod.metadata.annotations, pod.metadata.labels)
        group = f"{pod.metadata.namespace}/{group_name}" if group_name else ""
        state = pod_state(pod)
        if state == "pending" and pod.spec.schedulerName not in self.scheduler_names:
            state = "foreign-pending"
        node = self.nodes.index.get(pod.spec.nodeName, -1) if pod.spec.nodeName else -1
        request = self._vector(pod.spec.placement_key, pod.spec.requests)
        namespace = pod.metadata.namespace or "default"
        if not self.priority_policy.permits(pod.spec.priorityClassName, namespace):
            priority = self._class_value("")  # a class its namespace may not use: as if it named none
        else:
            priority = pod.spec.priority if pod.spec.priority is not None else \
                self._class_value(pod.spec.priorityClassName)
        record = PodRecord(pod, group, pod.metadata.annotations.get(TASK_ANNOTATION, ""), node, state, request,
                           priority)
        if group:
            self.parked.touched(group)
        if old is not None and old.placed and not (record.placed and record.node == old.node and record.state ==
                                                   old.state and np.array_equal(record.request, old.request)):
            self._room_freed(old)  # it held room and moved (a status update, or the store confirming a bind: not)
        self._pods[key] = record
        self._account(key, record)

    def _room_freed(self, old: PodRecord) -> None:
        """A placed pod left its node or changed what it holds there: room was freed on that node — and, for a
        pod with affinity, anti-affinity or spread rules, wherever its rules kept other pods away."""
        if old.pod.spec.pod_topology:  # cached per spec: most pods have none
            self.parked.freed()
        else:
            # the pod is no longer charged there; a terminating pod's share already counted as room
            freed = old.request if old.state != "releasing" else np.zeros_like(old.request)
            self.parked.freed_on(old.node, self.nodes.room_on(old.node), freed)

    def _account(self, key: str, record: PodRecord, sign: int = 1) -> None:
        if record.placed:
            if record.pod.spec.pod_topology and required_anti(record.pod):  # cached: most pods have none
                if sign > 0:
                    self._anti_pods.add(key)
                else:
                    self._anti_pods.discard(key)
            self.nodes.charge(record.node, record.request, sign, record.state == "releasing")
            self.devices.account(record, sign, int(record.request[self.resources.columns["cpu"]]))
        self.groups.account(key, record, sign, len(self.resources))

    def _unaccount(self, key: str, record: PodRecord) -> None:
        self._account(key, record, -1)

    # ----------------------------------------------------------------------------- nodes

    def _register(self, amounts: dict[str, int]) -> bool:
        """Add unknown resource names; when any is new, widen every vector. Returns True if widened."""
        new = [name for name in amounts if name not in self.resources.columns]
        if not new:
            return False
        for name in new:
            self.resources.add(name)
        self.settled.clear()  # every record's vectors are one resource short
        pad = len(self.resources) - self.nodes.alloc.shape[0]
        self.nodes.pad(pad)
        self._vectors = {k: np.pad(v, (0, pad)) for k, v in self._vectors.items()}
        for record in self._pods.values():
            record.request = self._vectors.get(record.pod.spec.placement_key, np.pad(record.request, (0, pad)))
        self.groups.pad(pad)
        return True

    def _on_node(self, type_: str, node: Node) -> None:
        if type_ == "DELETED":
            self.nodes.delete(node.metadata.name)
            return
        self._register(node.status.allocatable)
        row, grew = self.nodes.upsert(node)
        if grew:
            self.devices.grow(self.nodes.capacity)
        self.devices.on_node(row, len(self.nodes.names), node)

    def mismatches(self) -> dict[str, str]:
        """Nodes whose allocatable disagrees with their healthy chip count (the seed's "fake resources")."""
        nodes = self.nodes
        return self.devices.mismatches(nodes.alloc, self.resources.columns, nodes.names, nodes.exists)

    # ----------------------------------------------------------------------------- classes

    def _class_preempts(self, podgroup: PodGroup) -> bool:
        """False when the job's PriorityClass says ``preemptionPolicy: Never`` (its pods are checked where
        the snapshot walks them)."""
        priority_class = self._priority_classes.get(podgroup.spec.priorityClassName)
        return priority_class is None or priority_class.preemptionPolicy != "Never"

    def _class_value(self, name: str, namespace: str | None = None) -> int:
        """The value of PriorityClass ``name`` (the global default's, or 0, when there is none, or when
        ``namespace`` may not use it)."""
        if namespace is not None and not self.priority_policy.permits(name, namespace):
            name = ""
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
        return self.nodes.version

    def node(self, name: str) -> Node | None:
        return self.nodes.objects.get(name)

    def podgroup(self, key: str) -> PodGroup | None:
        group = self.groups.by_key.get(key)
        return group.podgroup if group else None

    def pending_pods(self, group: str) -> list[str]:
        """Keys of PodGroup ``group``'s pods waiting to be placed (binds assumed this cycle are not)."""
        found = self.groups.by_key.get(group)
        return list(found.pending) if found is not None else []

    def waiting(self, key: str) -> Pod | None:
        """Pod ``key`` while it waits to be placed (not bound, not assumed bound this cycle); else None."""
        record = self._pods.get(key)
        return record.pod if record is not None and record.state == "pending" else None

    def pod(self, key: str) -> Pod | None:
        record = self._pods.get(key)
        return record.pod if record else None

    def used(self) -> dict[str, dict[str, float]]:
        """Node → resources in use by bound pods (for checks and tests)."""
        return self.nodes.used_by_node()

    def snapshot(self) -> Snapshot:
        """Copy what a cycle needs. O(nodes × resources) array copies plus O(pending pods + groups); the
        placed and running pod lists are built on first use, while the cache has not changed."""
        for key in self.groups.changed:
            self.settled.touched(key)
        self.groups.changed.clear()
        self.settled.epoch += 1
        epoch = self.settled.epoch
        active, missing = build.jobs(self.groups.by_key, self._pods, self.resources, self.default_queue,
                                     self._label_readers > 0, self._class_value, self._class_preempts, self.settled,
                                     self.read_labels)
        settled = self.settled.jobs
        rows = self.nodes.rows
        devices, numa = self.devices.arrays(rows, self.nodes.alloc[self.resources.columns["cpu"], :rows],
                                            self.nodes.version)
        generation = self.generation
        budgets = list(self._budgets.values())
        if self._quota_view is None:
            self._quota_view = build.quotas(self._quotas)
        return Snapshot(
            resources=self.resources, nodes=self.nodes.arrays(),
            queues=build.queues(self._queues, active, self.resources, self.settled, self._usages), devices=devices,
            numa=numa,
            running_source=lambda: build.running({**settled, **active}, self.groups.by_key, self._pods, budgets,
                                                 self.priority_policy),
            placed_source=partial(build.placed, self._pods),
            anti_source=partial(build.placed, self._pods, tuple(self._anti_pods)) if self._anti_pods else None,
            priority_classes={n: c.value for n, c in self._priority_classes.items()},
            default_queue=self.default_queue, missing_groups=missing, network=self.network.arrays(self.nodes),
            fresh=lambda: self.generation == generation, _active=active, _settled=settled,
            settled_fresh=lambda: self.settled.epoch == epoch, settled_by_queue=dict(self.settled.jobs_by_queue),
            parked=self.parked.for_snapshot(), room=self.parked.room, quotas=self._quota_view,
            namespace_labels=self._namespace_labels,
        )


def _status_only(old: Pod, new: Pod) -> bool:
    """Did a pending pod change only in what the scheduler writes itself (its ``PodScheduled`` condition, its
    nominated node)? Then it needs no new accounting and unparks no job (the write would retry the very job
    it reports on, every cycle)."""
    return (old.status.phase == new.status.phase and old.metadata.uid == new.metadata.uid
            and old.metadata.deletionTimestamp == new.metadata.deletionTimestamp
            and (old.spec is new.spec or old.spec == new.spec)
            and old.metadata.labels == new.metadata.labels and old.metadata.annotations == new.metadata.annotations)


def _confirms(old: PodRecord, new: Pod, node: int) -> bool:
    """Is ``new`` the store confirming the bind the cache assumed as ``old`` — the same pod, now bound to the
    node it was assumed on, with the annotations the bind carried? Then it is accounted already, exactly."""
    assumed = old.pod
    return (old.state == "bound" and not assumed.spec.nodeName and node >= 0 and node == old.node
            and new.metadata.deletionTimestamp is None and new.status.phase == assumed.status.phase
            and new.metadata.uid == assumed.metadata.uid and assumed.metadata.deletionTimestamp is None
            and new.metadata.annotations == assumed.metadata.annotations
            and new.metadata.labels == assumed.metadata.labels
            and new.spec.placement_key == assumed.spec.placement_key
            and new.spec.priority == assumed.spec.priority
            and new.spec.priorityClassName == assumed.spec.priorityClassName
            and new.spec.schedulerName == assumed.spec.schedulerName)


def _moved(old: PodGroup, new: PodGroup) -> bool:
    """Did a PodGroup change in what placement reads (its spec, labels or annotations), not only its status?"""
    if old.spec is not new.spec and old.spec != new.spec:
        return True
    return old.metadata.labels != new.metadata.labels or old.metadata.annotations != new.metadata.annotations
