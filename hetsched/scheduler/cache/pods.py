"""Per-pod facts the cache keeps, and the per-PodGroup counts built from them.

Who calls it: the cache's event routing (``cache.routing``) builds a :class:`PodRecord` per pod event and
charges it to its PodGroup with :meth:`Groups.account` — one symmetric account/un-account pair, so the
counts can never drift from the pods; the snapshot builder (``cache.build``) reads both.

Invariants (per PodGroup key): ``pods`` holds every pod naming it; ``pending`` the pending ones of our
schedulers; ``ready`` bound plus succeeded pods (per task in ``ready_by_task``); ``allocated`` the requests
of bound ones. A group without a PodGroup object and without pods is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsched.api.objects import Pod, PodAffinityTerm, PodGroup
from hetsched.api.volcano_annotations import cooldown_time
from hetsched.scheduler.contract.arrays import IntArray
from hetsched.scheduler.contract.carving import Holding

TASK_ANNOTATION = "volcano.sh/task-spec"
PREEMPTABLE = "volcano.sh/preemptable"
_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})


def required_anti(pod: Pod) -> tuple[PodAffinityTerm, ...]:
    affinity = pod.spec.affinity
    anti = affinity.podAntiAffinity if affinity is not None else None
    return tuple(anti.requiredDuringSchedulingIgnoredDuringExecution) if anti is not None else ()


def selects_by_labels(pod: Pod) -> bool:
    """Does the pod have rules that select other pods by their labels (pod affinity, anti-affinity, spread)?
    Host ports, the other pod-topology rule, do not read labels."""
    spec = pod.spec
    if not spec.pod_topology:  # cached per spec: most pods have none
        return False
    affinity = spec.affinity
    return bool(spec.topologySpreadConstraints or (affinity is not None and (
        affinity.podAffinity is not None or affinity.podAntiAffinity is not None)))


def preemptable(pod: Pod) -> bool:
    """Volcano's ``GetPodPreemptable``: the ``volcano.sh/preemptable`` annotation, else the label. Absent: the
    pod may be a victim; present, only a value Go's ParseBool reads as true allows it ("false", and a value
    that is not a boolean, protect the pod, as Volcano treats an unparsable one)."""
    value = pod.metadata.annotations.get(PREEMPTABLE, pod.metadata.labels.get(PREEMPTABLE))
    return value is None or value.strip() in _TRUE


def ends_by(pod: Pod) -> float | None:
    """The latest a started pod runs to: its ``status.startTime`` plus ``activeDeadlineSeconds`` (None without
    either)."""
    deadline, started = pod.spec.activeDeadlineSeconds, pod.status.startTime
    return started + deadline if deadline is not None and started is not None else None


def running_since(pod: Pod) -> float | None:
    """When a Running pod was scheduled (its ``PodScheduled=True`` condition's time), as Volcano's ``cdp``
    reads it; None for a pod not Running or without the condition."""
    if pod.status.phase != "Running":
        return None
    for condition in pod.status.conditions:
        if condition.type == "PodScheduled" and condition.status == "True":
            return condition.lastTransitionTime
    return None


def cooldown(pod: Pod) -> float | None:
    """``volcano.sh/cooldown-time`` (label, else annotation) in seconds; None when absent or not a duration
    (refused at admission, so only one written around the webhook)."""
    try:
        return cooldown_time(pod.metadata.labels, pod.metadata.annotations)
    except ValueError:
        return None


def pod_state(pod: Pod) -> str:
    phase = pod.status.phase
    if phase == "Succeeded":
        return "succeeded"
    if phase == "Failed":
        return "failed"
    if not pod.spec.nodeName:
        return "pending" if pod.metadata.deletionTimestamp is None else "failed"
    return "releasing" if pod.metadata.deletionTimestamp is not None else "bound"


@dataclass(slots=True)
class PodRecord:
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
    partitions: list[Holding] | None = None
    """Chip partitions it holds (``devices.partitions``), fixed when first accounted on a node."""
    numa: int | None = None
    """NUMA node its exclusive CPUs are pinned to (``hetsched.io/numa-node``), fixed when first accounted."""
    placement: tuple[str, str, str, bool, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] | None = None
    """Annotations that split pods into groups (models, MLU-Link policy, NUMA policy), whether it says
    ``preemptionPolicy: Never``, its labels (what pod affinity and spread selectors match) and its scoring
    annotations (``api.volcano_annotations.SCORING``): read once per pod, not once per cycle."""

    @property
    def placed(self) -> bool:
        """On a node and holding what it requested (bound, or terminating there)."""
        return self.node >= 0 and self.state in ("bound", "releasing")


@dataclass(slots=True)
class Group:
    podgroup: PodGroup | None
    pods: dict[str, None]
    pending: dict[str, None]
    ready: int
    ready_by_task: dict[str, int]
    succeeded: int
    failed: int
    allocated: IntArray


class Groups:
    """PodGroup key → its :class:`Group`: the PodGroup object (once seen) and the counts of its pods."""

    def __init__(self) -> None:
        self.by_key: dict[str, Group] = {}
        self.changed: set[str] = set()
        """Keys whose group or pods changed since the snapshot builder last looked (``cache.settled``)."""

    def get(self, key: str, width: int) -> Group:
        group = self.by_key.get(key)
        if group is None:
            group = Group(None, {}, {}, 0, {}, 0, 0, np.zeros(width, dtype=np.int64))
            self.by_key[key] = group
        return group

    def account(self, key: str, record: PodRecord, sign: int, width: int) -> None:
        """Count (``sign`` 1) or uncount (-1) pod ``key`` in its group."""
        if not record.group:
            return
        self.changed.add(record.group)
        group = self.get(record.group, width)
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
            del self.by_key[record.group]

    def on_podgroup(self, type_: str, podgroup: PodGroup, width: int) -> None:
        key = f"{podgroup.metadata.namespace}/{podgroup.metadata.name}"
        self.changed.add(key)
        if type_ == "DELETED":
            group = self.by_key.get(key)
            if group is not None:
                group.podgroup = None
                if not group.pods:
                    del self.by_key[key]
            return
        self.get(key, width).podgroup = podgroup

    def pad(self, extra: int) -> None:
        """New resources were registered: widen every group's allocated vector."""
        for group in self.by_key.values():
            group.allocated = np.pad(group.allocated, (0, extra))
