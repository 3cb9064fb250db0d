"""Building a snapshot's jobs, queues and pod lists from the cache's records.

Who calls it: ``SchedulerCache.snapshot`` (``cache.routing``) once per cycle for the jobs and queues, and
— lazily, only when a session asks — for the placed pods (pod affinity, spread, host ports) and the
running pods with their disruption budgets (the eviction actions).

Pending pods are grouped into ``TaskGroup``s of interchangeable pods: same task, placement key, priority,
placement and scoring annotations (``api.volcano_annotations.SCORING``), network-bounded sub-group
(``subGroupPolicy``), and same labels only while ``keep_labels`` (some pod in the cluster selects others
by labels; operators give every pod an index label, and 1,000 workers stay one group otherwise).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from hetsched.api import queue_access
from hetsched.api.disruption import covers, disruptions_allowed
from hetsched.api.objects import (
    NUMA_POLICY_ANNOTATION,
    NetworkTopology,
    PodDisruptionBudget,
    PodGroup,
    Queue,
    QueueUsage,
    ResourceQuota,
    max_unavailable,
)
from hetsched.api.priority_policy import DEFAULT as DEFAULT_PRIORITY
from hetsched.api.priority_policy import PriorityPolicy
from hetsched.api.volcano_annotations import SCORING
from hetsched.devices.cann import CANN_ANNOTATION
from hetsched.devices.partition_requests import ANNOTATIONS as PARTITION_ANNOTATIONS
from hetsched.devices.partition_requests import LABELS as PARTITION_LABELS
from hetsched.scheduler.cache.pods import (
    Group,
    PodRecord,
    cooldown,
    ends_by,
    preemptable,
    required_anti,
    running_since,
)
from hetsched.scheduler.cache.settled import SettledJobs, is_settled
from hetsched.scheduler.contract.snapshot import (
    MLU_LINK_ANNOTATION,
    MODELS_ANNOTATION,
    JobInfo,
    PlacedPod,
    QueueInfo,
    ResourceIndex,
    RunningPod,
    TaskGroup,
)

Pairs = tuple[tuple[str, str], ...]
READ = (*SCORING, CANN_ANNOTATION, *PARTITION_ANNOTATIONS)
"""The pods' annotations plugins read (scoring, the declared CANN the device plugin filters nodes by, and the
vGPU/vNPU modes of a partition request)."""
READ_LABELS = frozenset(PARTITION_LABELS)
"""Pod labels a plugin reads (Ascend's vNPU level and DVPP): kept on each task group even when no pod
affinity or spread selector needs the labels."""
GroupKey = tuple[str, object, int, str, str, str, Pairs, str, Pairs]


def _placement(record: PodRecord) -> tuple[str, str, str, bool, Pairs, Pairs]:
    if record.placement is None:
        annotations = record.pod.metadata.annotations
        record.placement = (annotations.get(MODELS_ANNOTATION, ""),
                            annotations.get(MLU_LINK_ANNOTATION, "").strip(),
                            annotations.get(NUMA_POLICY_ANNOTATION, "").strip(),
                            record.pod.spec.preemptionPolicy == "Never",
                            tuple(sorted(record.pod.metadata.labels.items())),
                            tuple((k, annotations[k]) for k in READ if k in annotations))
    return record.placement


def _read_labels(labels: Pairs, configured: frozenset[str]) -> Pairs:
    """The labels plugins read even where no selector needs them all (``READ_LABELS``, and the ``configured``
    ones: ``Plugin.read_labels``)."""
    return tuple(pair for pair in labels if pair[0] in READ_LABELS or pair[0] in configured)


def _budget(podgroup: PodGroup, pods: int) -> int | None:
    """The PodGroup's disruption budget; an unreadable one counts as 0 (nothing may be evicted) — the
    webhook and ``hetsched validate`` reject it up front."""
    try:
        return max_unavailable(podgroup.metadata.annotations, pods, f"PodGroup {podgroup.metadata.name}")
    except ValueError:
        return 0


def jobs(groups: dict[str, Group], pods: dict[str, PodRecord], resources: ResourceIndex, default_queue: str,
         keep_labels: bool, class_value: Callable[[str, str], int], class_preempts: Callable[[PodGroup], bool],
         settled: SettledJobs, read_labels: frozenset[str] = frozenset()) -> tuple[dict[str, JobInfo], dict[str, int]]:
    """The :class:`JobInfo` of every PodGroup a session may act on — all but the settled ones, which stay in
    ``settled`` (a Completed one with nothing pending left out) — and the pending pods per PodGroup key that
    does not exist (they wait for it). Only ``settled.unsettled`` keys are built, and a job that just
    settled is stored: O(jobs not settled)."""
    active: dict[str, JobInfo] = {}
    missing: dict[str, int] = {}
    for key in list(settled.unsettled):
        group = groups.get(key)
        if group is None:
            del settled.unsettled[key]
            continue
        podgroup = group.podgroup
        if podgroup is None:
            if group.pending:
                missing[key] = len(group.pending)
            continue
        if podgroup.status.phase == "Completed" and not group.pending:
            continue
        by_placement: dict[GroupKey, list[str]] = {}
        never = bool(group.pending)  # until a pending pod may preempt (Volcano decides per task)
        subgroups: dict[str, NetworkTopology] = {}
        partitioned = bool(podgroup.spec.subGroupPolicy)
        for pod_key in group.pending:
            record = pods[pod_key]
            models, mlu_link, numa_policy, refuses, labels, scoring = _placement(record)
            never = never and refuses
            subgroup = ""
            if partitioned:  # pods of one network-bounded sub-group are placed together, in one HyperNode
                member = podgroup.spec.subgroup_of(record.pod.metadata.labels)
                if member is not None:
                    subgroup = member[0]
                    subgroups[subgroup] = member[1]
            by_placement.setdefault((record.task, record.pod.spec.placement_key, record.priority, models,
                                     mlu_link, numa_policy,
                                     labels if keep_labels else _read_labels(labels, read_labels), subgroup, scoring),
                                    []).append(pod_key)
        job = JobInfo(
            key=key, podgroup=podgroup, queue=podgroup.spec.queue or default_queue,
            priority=class_value(podgroup.spec.priorityClassName, podgroup.metadata.namespace or "default")
            if podgroup.spec.priorityClassName else 0,
            min_member=podgroup.spec.minMember, min_task_member=dict(podgroup.spec.minTaskMember),
            phase=podgroup.status.phase,
            created=podgroup.metadata.creationTimestamp or 0.0, groups=[], ready=group.ready,
            ready_by_task=dict(group.ready_by_task), pending_count=len(group.pending),
            total_pods=len(group.pods), allocated=group.allocated.astype(np.float64),
            min_resources=resources.vector(podgroup.spec.minResources).astype(np.float64),
            preempts=not never and class_preempts(podgroup),
            max_unavailable=_budget(podgroup, len(group.pods)), subgroups=subgroups, failed=group.failed,
        )
        for (task, placement_key, priority, models, mlu_link, numa_policy, labels, subgroup, scoring), keys in (
                by_placement.items()):
            record = pods[keys[0]]
            request = record.request
            cann = dict(scoring).get(CANN_ANNOTATION, "")
            job.groups.append(TaskGroup(
                job_ref=weakref.ref(job), task=task, spec=record.pod.spec,
                placement_key=(placement_key, models, mlu_link, numa_policy, cann), numa_policy=numa_policy,
                request=request, columns=np.flatnonzero(request), priority=priority, pending=keys,
                models=tuple(m.strip() for m in models.split("|") if m.strip()), mlu_link=mlu_link,
                labels=dict(labels), namespace=record.pod.metadata.namespace or "default", subgroup=subgroup,
                annotations=dict(scoring),
            ))
        if is_settled(job):
            settled.put(job, group.allocated)
            del settled.unsettled[key]
        else:
            active[key] = job
    return active, missing


def queues(objects: dict[str, Queue], jobs: dict[str, JobInfo], resources: ResourceIndex,
           settled: SettledJobs | None = None, usages: dict[str, QueueUsage] | None = None) -> dict[str, QueueInfo]:
    """Every Queue object's and every queue a job names (state NotFound when it does not exist), with what
    its jobs hold, admitted and request. ``jobs`` are the active ones when ``settled`` holds the rest."""
    width = len(resources)
    found: dict[str, QueueInfo] = {}
    held = settled.allocated_by_queue if settled is not None else {}
    for name in sorted(set(objects) | {job.queue for job in jobs.values()} | set(held)):
        queue = objects.get(name)
        capability = np.full(width, np.inf)
        guarantee = np.zeros(width)
        fixed = np.full(width, np.nan)
        if queue is not None:
            for resource, amount in queue.spec.capability.items():
                capability[resources.columns[resource]] = amount
            for resource, amount in queue.spec.guarantee.resource.items():
                if resource in resources.columns:
                    guarantee[resources.columns[resource]] = amount
            for resource, amount in queue.spec.deserved.items():
                if resource in resources.columns:
                    fixed[resources.columns[resource]] = amount
        found[name] = QueueInfo(
            name=name, weight=float(queue.spec.weight) if queue else 1.0, capability=capability,
            guarantee=guarantee, state=queue.status.state if queue else "NotFound",
            reclaimable=queue.spec.reclaimable if queue else True,
            affinity=queue.spec.affinity if queue else None, parent=queue.spec.parent if queue else "",
            annotations=queue.metadata.annotations if queue else {},
            namespaces=queue_access.read(queue.metadata.annotations) if queue else None,
            **_spent((usages or {}).get(name)),
            fixed_deserved=fixed, priority=queue.spec.priority if queue else 0,
            allocated=np.zeros(width), inqueue=np.zeros(width), request=np.zeros(width),
        )
    for name, allocated in held.items():
        total = allocated.astype(np.float64)
        found[name].allocated += total
        found[name].request += total
    for job in jobs.values():
        info = found[job.queue]
        info.allocated += job.allocated
        pending = sum((g.request.astype(np.float64) * len(g.pending) for g in job.groups), np.zeros(width))
        info.request += job.allocated + pending
        if job.phase == "Pending":  # no pods yet: its minResources are what the queue waits to run
            info.request += job.min_resources
        if job.phase == "Inqueue":
            info.inqueue += np.maximum(job.min_resources - job.allocated, 0)
    return found


def placed(pods: dict[str, PodRecord], keys: Iterable[str] | None = None) -> list[PlacedPod]:
    """Every pod on a node (bound, or terminating there) — or those of ``keys`` — for pod affinity,
    topology spread and host ports."""
    result = []
    records = pods.items() if keys is None else [(k, pods[k]) for k in keys if k in pods]
    for key, record in records:
        if not record.placed:
            continue
        pod = record.pod
        result.append(PlacedPod(pod.metadata.namespace or "default", pod.metadata.labels, record.node,
                                required_anti(pod), pod.spec.host_ports, key))
    return result


def running(jobs: dict[str, JobInfo], groups: dict[str, Group], pods: dict[str, PodRecord],
            budgets: list[PodDisruptionBudget], policy: PriorityPolicy = DEFAULT_PRIORITY,
            ) -> tuple[list[RunningPod], list[int]]:
    """Bound pods of ``jobs`` with what they hold, and the disruptions each PodDisruptionBudget allows
    (``api.disruption``), for the eviction actions."""
    every = [r.pod for r in pods.values()] if budgets else []
    replicas = {key: len(group.pods) for key, group in groups.items()} if budgets else {}
    allowed = [disruptions_allowed(b, every, replicas) for b in budgets]
    result = []
    for job_key in jobs:
        group = groups.get(job_key)
        if group is None:
            continue
        for pod_key in group.pods:
            record = pods.get(pod_key)
            if record is None or record.state != "bound" or record.node < 0:
                continue
            pod = record.pod
            podgroup = jobs[job_key].podgroup
            member = podgroup.spec.subgroup_of(pod.metadata.labels) if podgroup.spec.subGroupPolicy else None
            result.append(RunningPod(
                key=pod_key, job=job_key, task=record.task, node=record.node, request=record.request,
                priority=record.priority, created=pod.metadata.creationTimestamp or 0.0,
                namespace=pod.metadata.namespace or "default",
                priority_class=pod.spec.priorityClassName  # one its namespace may not use shields nothing
                if policy.permits(pod.spec.priorityClassName, pod.metadata.namespace or "default") else "",
                chips=dict(record.chips or {}), shares=dict(record.shares or {}),
                partitions=tuple(record.partitions or ()),
                labels=pod.metadata.labels,
                numa=record.numa if record.numa is not None else -1,
                budgets=tuple(i for i, b in enumerate(budgets) if pod.status.phase == "Running" and covers(b, pod)),
                job_priority=jobs[job_key].priority, preemptable=preemptable(pod),
                subgroup=member[0] if member is not None else "", running_since=running_since(pod),
                started=pod.status.startTime, ends_by=ends_by(pod),
                cooldown=cooldown(pod)))
    return result, allowed


def _spent(usage: QueueUsage | None) -> dict[str, Any]:
    """The QueueInfo fields a queue's ``QueueUsage`` sets: its decayed usage, what its budget has used up, and
    what that means."""
    if usage is None:
        return {}
    found: dict[str, Any] = {"decayed": usage.status.decayed, "decayed_by_namespace": usage.status.decayedByNamespace,
                             "used": usage.status.used, "budget": usage.spec.budget,
                             "when_exhausted": usage.spec.whenExhausted,
                             "accounted_until": usage.status.accountedUntil, "renewal": usage.status.periodEnd}
    if usage.status.exhausted:
        found.update(exhausted=tuple(usage.status.exhausted))
    return found


def quotas(objects: dict[str, ResourceQuota]) -> dict[str, tuple[tuple[str, dict[str, int], dict[str, int]], ...]]:
    """Namespace → its ResourceQuotas as (name, hard, used): the quota controller's ``status.hard`` where it
    wrote one, else ``spec.hard``."""
    found: dict[str, list[tuple[str, dict[str, int], dict[str, int]]]] = {}
    for quota in objects.values():
        hard = quota.status.hard or quota.spec.hard
        found.setdefault(quota.metadata.namespace or "default", []).append(
            (quota.metadata.name, dict(hard), dict(quota.status.used)))
    return {namespace: tuple(sorted(entries)) for namespace, entries in found.items()}
