"""Simulation results: per-workload timings and placements, and the summary a person reads.

Who calls it: ``sim.simulator`` feeds a :class:`Recorder` from watch events and scheduler cycles; the CLI
prints :func:`summary_rows` and writes :meth:`Results.to_json`.

A workload is a PodGroup: every Volcano Job has one, every plain pod gets one. Its *start* is the moment
its minMember-th pod started running (the gang is up), its *end* the moment its last pod finished or was
deleted (completed, evicted, aborted), or the moment its Job reached a final phase. Queue wait = start −
submit; completion time = end − submit.

A pod holds its chips only while it runs: each run (start → finish or deletion) is recorded, so an evicted
pod that waits and runs again is not charged for the wait. Invariant: at no instant do the runs of one
accelerator kind hold more chips than the cluster has, so allocation never exceeds 100 %.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from hetsched.api import membership
from hetsched.api.accelerators import accelerator_kind
from hetsched.api.objects import Job, Node, Pod, PodGroup
from hetsched.devices.inventory import NODE_ANNOTATION, InventoryError, parse_node_devices
from hetsched.devices.partition_requests import ANNOTATIONS as PARTITION_ANNOTATIONS
from hetsched.devices.partition_requests import LABELS as PARTITION_LABELS
from hetsched.devices.partition_requests import advertised, is_partition_resource, read_request, whole_milli
from hetsched.devices.partitions import Profile, geometry_for
from hetsched.ports import WatchEvent
from hetsched.scheduler.contract.reasons import fragments
from hetsched.scheduler.engine.runner import CycleResult
from hetsched.sim.network import NetworkRecorder
from hetsched.sim.timeline import Timeline

FINAL_PHASES = ("Completed", "Failed", "Aborted", "Terminated")
WAITING_PHASES = ("Pending", "Inqueue", "Restarting")
"""Phases of a workload that waits for its gang; at the end of a run that ran out of events, it is stuck."""
MAX_REASONS = 10
"""Distinct unschedulable messages kept per job (the first ones met)."""


@dataclass
class PodRecord:
    name: str
    node: str = ""
    start: float | None = None
    """When it first ran."""
    end: float | None = None
    """When its last run ended (finished, or deleted: evicted, aborted); None while it runs or waits to run."""
    requests: dict[str, int] = field(default_factory=dict)
    partition: tuple[dict[str, str], dict[str, str]] = ({}, {})
    """The annotations and labels its partition request reads (``devices.partition_requests``)."""
    runs: list[list[float]] = field(default_factory=list)
    """[start, end] of each run; the last one's end is missing while it runs."""
    phase: str = ""
    """How its last run ended: Succeeded, or Failed (also when deleted while running, as an evicted pod)."""

    def open(self) -> bool:
        return bool(self.runs) and len(self.runs[-1]) == 1

    def close(self, now: float) -> None:
        if self.open():
            self.runs[-1].append(now)
            self.end = now

    def held(self, end_time: float) -> float:
        """Seconds it ran, open run counted up to ``end_time``."""
        return sum((run[1] if len(run) == 2 else end_time) - run[0] for run in self.runs)


@dataclass
class WorkloadRecord:
    key: str
    kind: str
    name: str
    namespace: str
    queue: str
    min_member: int
    submit: float
    phase: str = "Pending"
    start: float | None = None
    end: float | None = None
    pods: dict[str, PodRecord] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    blocked_by: set[str] = field(default_factory=set)
    """What blocked it, from those reasons (``scheduler.contract.reasons.fragments``), for the summary's counts."""
    final: float | None = None
    """When its Job reached a final phase (Completed, Failed, Aborted, Terminated)."""
    last_reason: str = ""
    """The latest cycle's reason it could not be scheduled."""


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p95": None, "count": 0}
    array = np.asarray(values, dtype=np.float64)
    return {"mean": float(array.mean()), "p50": float(np.percentile(array, 50)),
            "p95": float(np.percentile(array, 95)), "count": len(values)}


FloatArray = npt.NDArray[np.float64]


class Recorder:
    """Builds workload records from watch events (Jobs, PodGroups, Pods) and scheduler cycles."""

    def __init__(self, timeline: bool = False) -> None:
        self.workloads: dict[str, WorkloadRecord] = {}
        self.job_phase: dict[str, str] = {}
        self._pod_group: dict[str, str] = {}
        self.missing_groups: dict[str, set[str]] = {}
        """PodGroup key → the pending pods naming it while it does not exist (they wait for it)."""
        self.cycles = 0
        self.binds = 0
        self.last_time = 0.0
        self.evictions: list[dict[str, Any]] = []
        self.queue_series: dict[str, list[list[float]]] = {}
        """queue → [time, allocated dominant share, deserved dominant share] whenever either changes."""
        self.faults: list[dict[str, Any]] = []
        self.running: dict[str, set[str]] = {}
        """Workload key → its pods running now (to see when a job hit by a fault is back)."""
        self.job_retries: dict[str, tuple[int, int, str, str]] = {}
        """Job key → (retryCount, fault retries, state reason, state message) at the end (set by the simulator)."""
        self.fairness: list[tuple[float, float]] = []
        """(time, Jain's index over queues of allocated / deserved dominant share) per cycle with demand."""
        self.restarts: list[tuple[float, str, tuple[str, ...], bool, str]] = []
        """Fault restarts: (time, job key, pods deleted, counted as a fault retry, level) (set by the simulator)."""
        self.pod_workload: dict[str, str] = {}
        """Pod key → its workload's key."""
        self.lost: dict[tuple[str, float], float] = {}
        """(pod key, deletion time) → chip-seconds lost (the simulated kubelet's ledger, set by the simulator)."""
        self.timeline = Timeline() if timeline else None
        """Chip occupancy per node over time (for the report; None unless asked for)."""
        self.network = NetworkRecorder()
        """Where gangs ran over the HyperNode tree, and whole free HyperNodes over time."""

    def on_fault(self, time: float, target: str, kind: str, jobs: list[str]) -> None:
        """A fault was applied at ``time``; ``jobs`` are the workloads it restarted (more may follow:
        :meth:`on_fault_hit`, and a drain's evictions, :meth:`on_drained`)."""
        self.faults.append({"time": time, "target": target, "kind": kind, "jobs": [], "pending": set(),
                            "time_to_recover_s": 0.0})
        self.on_fault_hit(jobs)

    def on_fault_hit(self, jobs: list[str]) -> None:
        """The latest fault restarted ``jobs``: each is down until it runs its gang again."""
        fault = self.faults[-1]
        for job in jobs:
            if job not in fault["jobs"]:
                fault["jobs"].append(job)
            fault["pending"].add(job)
            fault["time_to_recover_s"] = None

    def on_drained(self, node: str, job: str) -> None:
        """A drain of ``node`` evicted a pod of ``job``: the latest drain of that node hit the job (which is
        down until it runs its gang again; at once if it still does, as a service its budget protects)."""
        fault = next((f for f in reversed(self.faults) if f["kind"] == "Drain" and f["target"] == node), None)
        if fault is None:
            return
        if job not in fault["jobs"]:
            fault["jobs"].append(job)
        workload = self.workloads.get(job)
        if workload is None or len(self.running.get(job, ())) < max(workload.min_member, 1):
            fault["pending"].add(job)  # down: recovered once it runs its gang again
            fault["time_to_recover_s"] = None

    def _recovered(self, key: str, now: float) -> None:
        for fault in self.faults:
            if key in fault["pending"] and now >= fault["time"]:
                fault["pending"].discard(key)
                if not fault["pending"]:
                    fault["time_to_recover_s"] = now - fault["time"]

    def on_event(self, event: WatchEvent, now: float) -> None:
        obj = event.object
        self.last_time = max(self.last_time, now)
        if isinstance(obj, Pod):
            group = membership.group_name(obj.metadata.annotations, obj.metadata.labels)
            if group:
                key = f"{obj.metadata.namespace}/{group}"
                self.pod_workload[f"{obj.metadata.namespace}/{obj.metadata.name}"] = key
                running = self.running.setdefault(key, set())
                if event.type != "DELETED" and obj.status.phase in ("Running", "Succeeded"):
                    running.add(obj.metadata.name)
                else:
                    running.discard(obj.metadata.name)
                workload = self.workloads.get(key)
                if workload is not None and len(running) >= max(workload.min_member, 1):
                    self._recovered(key, now)
                if workload is None:
                    waiting = self.missing_groups.setdefault(key, set())
                    if event.type == "DELETED" or obj.spec.nodeName or obj.status.phase != "Pending":
                        waiting.discard(obj.metadata.name)
                    else:
                        waiting.add(obj.metadata.name)
                    if not waiting:
                        del self.missing_groups[key]
        if isinstance(obj, PodGroup) and event.type == "ADDED":
            key = f"{obj.metadata.namespace}/{obj.metadata.name}"
            self.missing_groups.pop(key, None)
            owner = next((r for r in obj.metadata.ownerReferences if r.controller), None)
            kind = owner.kind if owner else "PodGroup"
            name = owner.name if owner else obj.metadata.name
            submit = obj.metadata.creationTimestamp or now
            self.workloads[key] = WorkloadRecord(key, kind, name, obj.metadata.namespace or "default",
                                                 obj.spec.queue, obj.spec.minMember, submit)
        elif isinstance(obj, Job) and event.type != "DELETED":
            key = f"{obj.metadata.namespace}/{obj.metadata.name}"
            self.job_phase[key] = obj.status.state.phase
            if key in self.workloads:
                workload = self.workloads[key]
                workload.submit = min(workload.submit, obj.metadata.creationTimestamp or now)
                if obj.status.state.phase in FINAL_PHASES:
                    workload.final = now if workload.final is None else workload.final
                else:
                    workload.final = None  # resumed, restarted
        elif isinstance(obj, Pod) and event.type == "DELETED":
            group = membership.group_name(obj.metadata.annotations, obj.metadata.labels)
            workload = self.workloads.get(f"{obj.metadata.namespace}/{group}") if group else None
            record = workload.pods.get(obj.metadata.name) if workload is not None else None
            if record is not None and record.open():
                record.close(now)  # evicted, deleted by a restart or an abort while it ran
                record.phase = "Failed"
        elif isinstance(obj, Pod):
            group = membership.group_name(obj.metadata.annotations, obj.metadata.labels)
            if not group:
                return
            key = f"{obj.metadata.namespace}/{group}"
            workload = self.workloads.get(key)
            if workload is None:
                return
            if workload.kind == "Pod":
                workload.submit = min(workload.submit, obj.metadata.creationTimestamp or now)
            record = workload.pods.get(obj.metadata.name)
            if record is None:
                meta = obj.metadata
                record = workload.pods[meta.name] = PodRecord(meta.name, requests=dict(obj.spec.requests), partition=(
                    {k: v for k, v in meta.annotations.items() if k in PARTITION_ANNOTATIONS},
                    {k: v for k, v in meta.labels.items() if k in PARTITION_LABELS}))
            record.node = obj.spec.nodeName
            if obj.status.phase == "Running" and not record.open():
                record.runs.append([now])
                record.end = None
                if record.start is None:
                    record.start = now
                started = sum(1 for p in workload.pods.values() if p.start is not None)
                if workload.start is None and started >= max(workload.min_member, 1):
                    workload.start = now
            elif obj.status.phase in ("Succeeded", "Failed"):
                record.close(now)
                record.phase = obj.status.phase
            else:  # Pending: alive again (a replacement after an eviction or a restart), not ended
                record.end = None
                record.phase = ""

    def _queue_shares(self, result: CycleResult, now: float) -> None:
        """Per queue, allocated and deserved dominant shares after the cycle (deserved comes from the
        ``proportion`` plugin; queues are skipped when it is off), and Jain's index over the queues that
        deserve something: how evenly allocated / deserved is spread."""
        snapshot = result.snapshot
        # every node, cordoned or not: pods on a draining node still hold their share of the cluster
        total = snapshot.nodes.alloc.sum(axis=1).astype(np.float64)
        ratios = []
        for name, queue in sorted(snapshot.queues.items()):
            if queue.deserved is None:
                continue
            allocated = dominant_share(queue.allocated, total)
            deserved = dominant_share(queue.deserved, total)
            series = self.queue_series.setdefault(name, [])
            if not series or series[-1][1:] != [allocated, deserved]:
                series.append([now, allocated, deserved])
            if deserved > 0:
                ratios.append(min(allocated / deserved, 1.0))
        if ratios:
            self.fairness.append((now, jain(ratios)))

    def on_cycle(self, result: CycleResult, now: float = 0.0) -> None:
        self.cycles += 1
        self.binds += len(result.decisions.binds)
        for eviction in result.decisions.evictions:
            self.evictions.append({"time": now, "pod": eviction.pod, "job": eviction.job, "action": eviction.action,
                                   "reason": eviction.reason, "for": eviction.preemptor})
        self._queue_shares(result, now)
        self.network.on_cycle(result, now)
        if self.timeline is not None:
            self.timeline.sample(result.snapshot, now)
        for key, status in result.decisions.unschedulable.items():
            workload = self.workloads.get(key)
            if workload is None:
                continue
            message = status.message
            workload.last_reason = message
            if message not in workload.reasons and len(workload.reasons) < MAX_REASONS:
                workload.reasons.append(message)
                workload.blocked_by.update(f for reason in status.reasons for f in fragments(reason))


def _waiting_reason(recorder: Recorder, workload: WorkloadRecord) -> str:
    """Why a job still waits: the scheduler's last reason; else, for a Volcano Job whose pods could not even
    be created (a missing PriorityClass, say), what the job controller wrote in its state."""
    if workload.last_reason or workload.reasons:
        return workload.last_reason or workload.reasons[-1]
    state = recorder.job_retries.get(workload.key)
    return state[3] if state is not None else ""


def _retries(recorder: Recorder, key: str, lost: dict[str, float]) -> dict[str, Any]:
    retry, fault, reason, message = recorder.job_retries.get(key, (0, 0, "", ""))
    return {"retryCount": retry, "faultRetries": fault, "reason": reason, "message": message,
            "lostChipSeconds": round(lost.get(key, 0.0), 3)}


def _fault_report(recorder: Recorder) -> list[dict[str, Any]]:
    """Each fault with what it cost: every fault restart is charged to the latest fault at or before it that
    hit the job (a grace period's restart comes later than its fault; an escalation is the same fault)."""
    retries = [0] * len(recorder.faults)
    lost = [0.0] * len(recorder.faults)
    for eviction in recorder.evictions:
        if eviction["action"] == "drain":  # charged to the latest drain of that node at or before it
            causes = [i for i, f in enumerate(recorder.faults) if f["kind"] == "Drain"
                      and f["target"] == eviction["node"] and f["time"] <= eviction["time"] + 1e-9]
            if causes:
                lost[max(causes, key=lambda i: recorder.faults[i]["time"])] += eviction.get("lostChipSeconds", 0.0)
    for time, job, pods, counted, _ in recorder.restarts:
        causes = [i for i, f in enumerate(recorder.faults) if job in f["jobs"] and f["time"] <= time + 1e-9]
        if not causes:
            continue
        cause = max(causes, key=lambda i: recorder.faults[i]["time"])
        retries[cause] += 1 if counted else 0
        lost[cause] += sum(recorder.lost.get((pod, time), 0.0) for pod in pods)
    return [{"time": f["time"], "target": f["target"], "kind": f["kind"], "jobs": f["jobs"],
             "time_to_recover_s": f["time_to_recover_s"], "retries_used": retries[i],
             "lost_chip_seconds": round(lost[i], 3)}
            for i, f in enumerate(recorder.faults)]


def _time_mean(series: list[list[float]], column: int, end_time: float) -> float:
    """Time-weighted mean of a piecewise-constant series up to ``end_time``."""
    if not series or end_time <= series[0][0]:
        return series[-1][column] if series else 0.0
    total = 0.0
    for (start, *values), nxt in zip(series, [*series[1:], [end_time]], strict=True):
        total += values[column - 1] * (min(nxt[0], end_time) - start)
    return total / (end_time - series[0][0])


def dominant_share(amounts: FloatArray, total: FloatArray) -> float:
    """DRF's dominant share: the largest fraction of the cluster's capacity of any one resource."""
    mask = total > 0
    return float((amounts[mask] / total[mask]).max(initial=0.0))


def time_weighted(samples: list[tuple[float, float]], end: float) -> float | None:
    """The mean of a value sampled at cycles ``(time, value)``, each sample holding until the next (the last
    until ``end``): a state that lasts an hour counts for an hour, not for the cycles that happened to run
    in it. None without samples; the plain mean when no time passed."""
    if not samples:
        return None
    times = np.asarray([t for t, _ in samples] + [max(end, samples[-1][0])], dtype=np.float64)
    values = np.asarray([v for _, v in samples], dtype=np.float64)
    spans = np.diff(times)
    total = float(spans.sum())
    return float(values.mean()) if total <= 0 else float(np.dot(values, spans) / total)


def jain(values: list[float]) -> float:
    """Jain's fairness index: 1 when all values are equal, 1/n when one holds everything."""
    if not values or not any(values):
        return 1.0
    array = np.asarray(values, dtype=np.float64)
    return float(array.sum() ** 2 / (len(array) * (array ** 2).sum()))


@dataclass
class Results:
    jobs: list[dict[str, Any]]
    summary: dict[str, Any]
    cluster: dict[str, Any]
    queues: dict[str, Any] = field(default_factory=dict)
    """Per queue: allocated vs deserved dominant share over time."""
    faults: list[dict[str, Any]] = field(default_factory=list)
    evictions: list[dict[str, Any]] = field(default_factory=list)
    timeline: Timeline | None = None
    """Chip occupancy over time (for ``--report``; not part of results.json)."""
    usage: list[dict[str, Any]] = field(default_factory=list)
    """Each queue's QueueUsage at the end (``api.usage_report.books``): budgets and the hours used, per period
    and namespace (``hetsched usage --results``)."""

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "jobs": self.jobs, "summary": self.summary, "queues": self.queues,
                "evictions": self.evictions, "faults": self.faults, "usage": self.usage}


def _partitioned(nodes: list[Node]) -> dict[str, dict[str, tuple[str, str]]]:
    """Node → its partitioned chips: device resource → (partitioning mode, model)."""
    found: dict[str, dict[str, tuple[str, str]]] = {}
    for node in nodes:
        raw = node.metadata.annotations.get(NODE_ANNOTATION)
        if not raw:
            continue
        try:
            sets = parse_node_devices(raw, node.metadata.name).devices
        except InventoryError:
            continue
        partitioned = {d.resource: (str(d.partitioning), d.model) for d in sets if d.partitioning}
        if partitioned:
            found[node.metadata.name] = partitioned
    return found


def _chips_held(pod: PodRecord, partitioned: dict[str, tuple[str, str]]) -> dict[str, float]:
    """Chips of each accelerator kind the pod holds: its whole chips (under any name), and for each partition
    its share of one chip's compute (a ``1g.5gb`` is 1/7 of an A100)."""
    request = read_request(pod.requests, *pod.partition)
    held: dict[str, float] = {}
    names = {r for r in pod.requests if accelerator_kind(r) is not None and not is_partition_resource(r)}
    for resource in names | set(request.whole):
        kind = accelerator_kind(resource)
        if kind is not None:
            held[kind] = held.get(kind, 0.0) + whole_milli(pod.requests, resource, request) / 1000
    for ask in request.asks:
        mode, model = partitioned.get(ask.resource, ("", ""))
        geometry = geometry_for(mode, model) if mode == ask.mode else None
        profile = ask.profile(geometry) if geometry is not None else None
        kind = accelerator_kind(ask.resource)
        if geometry is not None and isinstance(profile, Profile) and kind is not None:
            held[kind] = held.get(kind, 0.0) + ask.count * profile.cores / max(geometry.cores, 1)
    return held


def build_results(recorder: Recorder, nodes: list[Node], end_time: float, extra: dict[str, Any]) -> Results:
    jobs: list[dict[str, Any]] = []
    for eviction in recorder.evictions:  # what each eviction cost: the chip-seconds since its last checkpoint
        eviction["lostChipSeconds"] = round(recorder.lost.get((eviction["pod"], eviction["time"]), 0.0), 3)
    lost_by_job: dict[str, float] = {}
    for (pod_key, _), chip_seconds in recorder.lost.items():
        job_key = recorder.pod_workload.get(pod_key)
        if job_key is not None:
            lost_by_job[job_key] = lost_by_job.get(job_key, 0.0) + chip_seconds
    for workload in recorder.workloads.values():
        pods = list(workload.pods.values())
        phase = recorder.job_phase.get(workload.key) if workload.kind == "Job" else None
        if phase is None:
            if pods and all(p.end is not None for p in pods):
                phase = "Completed" if all(p.phase == "Succeeded" for p in pods) else "Failed"
            elif workload.start is not None:
                phase = "Running"
            else:
                phase = "Pending"
        workload.phase = phase
        ends = [p.end for p in pods if p.end is not None]
        if pods and not any(p.open() for p in pods) and (len(ends) == len(pods) or workload.final is not None):
            workload.end = max([*ends, *([workload.final] if workload.final is not None else [])])
        jobs.append({
            "name": workload.name, "namespace": workload.namespace, "kind": workload.kind,
            "queue": workload.queue, "phase": phase, "minMember": workload.min_member,
            "submit": workload.submit, "start": workload.start, "end": workload.end,
            "pods": [{"name": p.name, "node": p.node or None, "start": p.start, "end": p.end,
                      "runs": [list(run) for run in p.runs]}
                     for p in sorted(pods, key=lambda p: p.name)],
            "unschedulableReasons": list(workload.reasons),
            **_retries(recorder, workload.key, lost_by_job),
        })
    waits = [w.start - w.submit for w in recorder.workloads.values() if w.start is not None]
    waiting = [{"name": w.name, "namespace": w.namespace, "kind": w.kind, "queue": w.queue, "phase": w.phase,
                "ran": w.start is not None, "reason": _waiting_reason(recorder, w)}
               for w in sorted(recorder.workloads.values(), key=lambda w: (w.submit, w.namespace, w.name))
               if w.phase in WAITING_PHASES]
    for key, named in sorted(recorder.missing_groups.items()):
        namespace, _, name = key.partition("/")
        waiting.append({"name": name, "namespace": namespace, "kind": "PodGroup", "queue": "", "phase": "Missing",
                        "ran": False, "reason": f"PodGroup {key} does not exist: {len(named)} pending pod(s) name "
                                                "it and wait for it"})
    completions = [w.end - w.submit for w in recorder.workloads.values() if w.end is not None]
    capacity: Counter[str] = Counter()
    inventories = _partitioned(nodes)
    for node in nodes:
        for resource, amount in node.status.allocatable.items():
            kind = accelerator_kind(resource)
            if kind is not None and not is_partition_resource(resource):  # chips, not what partitions advertise
                mode, model = inventories.get(node.metadata.name, {}).get(resource, ("", ""))
                per_chip = advertised(mode, model, 0).get(resource, 1) if mode else 1  # HAMi: 10 vGPUs a GPU
                capacity[kind] += amount // 1000 // max(per_chip, 1)
    busy: dict[str, float] = {}
    for workload in recorder.workloads.values():
        for pod in workload.pods.values():
            run = pod.held(end_time)
            if run <= 0:
                continue
            for kind, chips in _chips_held(pod, inventories.get(pod.node, {})).items():
                busy[kind] = busy.get(kind, 0.0) + chips * run
    allocation = {kind: (busy.get(kind, 0.0) / (capacity[kind] * end_time) if end_time > 0 else 0.0)
                  for kind in sorted(capacity)}
    reasons: Counter[str] = Counter()
    for workload in recorder.workloads.values():
        for fragment in workload.blocked_by:
            reasons[fragment] += 1
    lost_by_action: Counter[str] = Counter()
    for eviction in recorder.evictions:
        lost_by_action[eviction["action"]] += eviction["lostChipSeconds"]
    evictions = {
        "total": len(recorder.evictions),
        "byAction": dict(sorted(Counter(e["action"] for e in recorder.evictions).items())),
        "jobsByAction": {action: len({e["job"] for e in recorder.evictions if e["action"] == action})
                         for action in sorted({e["action"] for e in recorder.evictions})},
        "lostChipSecondsByAction": {a: round(v, 3) for a, v in sorted(lost_by_action.items())},
        "byReason": dict(Counter(e["reason"] for e in recorder.evictions).most_common(MAX_REASONS)),
    }
    fairness = time_weighted(recorder.fairness, end_time)
    summary = {
        "jobs": len(jobs),
        "phases": dict(sorted(Counter(j["phase"] for j in jobs).items())),
        "queueWaitSeconds": _percentiles(waits),
        "completionSeconds": _percentiles(completions),
        "allocationRatio": allocation,
        "unschedulableReasons": dict(sorted(reasons.items(), key=lambda item: (-item[1], item[0]))),
        "simulatedSeconds": end_time,
        "schedulerCycles": recorder.cycles,
        "binds": recorder.binds,
        "evictions": evictions,
        "fairnessIndex": fairness,
        "waiting": waiting,
        **extra,
    }
    network = recorder.network.summary(jobs, end_time)
    if network is not None:
        summary["network"] = network
    cluster = {"nodes": len(nodes), "acceleratorChips": dict(sorted(capacity.items()))}
    queues = {name: {"columns": ["time", "allocatedDominantShare", "deservedDominantShare"], "series": series,
                     "meanAllocated": _time_mean(series, 1, end_time), "meanDeserved": _time_mean(series, 2, end_time)}
              for name, series in sorted(recorder.queue_series.items())}
    faults = _fault_report(recorder)
    return Results(jobs=sorted(jobs, key=lambda j: (j["submit"], j["namespace"], j["name"])),
                   summary=summary, cluster=cluster, queues=queues, evictions=list(recorder.evictions),
                   faults=faults, timeline=recorder.timeline)
