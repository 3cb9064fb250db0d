"""Fault controller: pods on a chip that went bad, or on a node that went NotReady, are rescheduled the
Ascend way, as the job's labels ask.

Who calls it: the simulator and the ``hetsched controller`` process call :meth:`process` after
watch events and :meth:`wake` at :meth:`next_deadline`. It reads chip health from the node inventory
(``hetsched.io/devices``), chips held from the pods' hand-off (``hetsched.io/allocation``).

A pod is *hit* when it holds an Unhealthy chip, a NetworkUnhealthy chip while its job has several pods, or
runs on a NotReady node. Per job, from its labels (Ascend's MindCluster names):

- ``fault-scheduling``: ``force`` (default here: nothing keeps running on a faulty chip) deletes at once;
  ``grace`` first writes ``hetsched.io/checkpoint-by: <time>`` on the job's pods and deletes them when the
  grace period (``grace-over-time`` seconds, default 900) is over — the job's chance to checkpoint;
  ``off`` leaves the job alone (a Warning event says so).
- ``pod-rescheduling: on``: only the hit pods go; otherwise the whole job restarts (every pod goes).
- ``fault-retry-times``: how many fault restarts the job gets (default: its ``maxRetry``). Each one is
  counted on the Job (``hetsched.io/fault-retries``) with the reason (``hetsched.io/fault-reason``); past
  the budget the Job is marked ``hetsched.io/fault-retries-exhausted`` and the job controller fails it.

Deleted pods come back through the job controller (an eviction it did not cause creates the pod again, or
its own policy applies), and the scheduler never places them on an unhealthy chip.

- Previous nodes first: each restart writes ``hetsched.io/preferred-nodes`` on the Job — the Ready nodes
  its pods ran on — and the job controller turns it into a preferred node-affinity term (weight 100) on
  the pods it creates again, so the scheduler's ``nodeorder`` brings the job back where its data, images
  and network neighbours are when those nodes have room.
- Escalation: after a pod-level restart, if any replacement pod is still not running
  ``hetsched.io/pod-rescheduling-timeout`` seconds later (Job annotation, default 60), the whole job is
  restarted (job-level rescheduling, as MindCluster falls back to it); the same fault, so no second retry
  is counted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from hetsched.api.fault_labels import FaultSettings, parse
from hetsched.api.objects import Job, Node, Pod
from hetsched.controllers.workqueue import WorkQueue
from hetsched.devices.inventory import NODE_ANNOTATION, InventoryError, parse_node_devices, pod_allocation
from hetsched.ports import Clock, NotFound, ObjectStore, StatusUpdater, WatchEvent

CHECKPOINT_BY = "hetsched.io/checkpoint-by"
FAULT_RETRIES = "hetsched.io/fault-retries"
FAULT_REASON = "hetsched.io/fault-reason"
RETRIES_EXHAUSTED = "hetsched.io/fault-retries-exhausted"
PREFERRED_NODES = "hetsched.io/preferred-nodes"


def fault_settings(job: Job) -> FaultSettings:
    """The job's fault labels (checked when the Job was admitted)."""
    return parse(job.metadata.labels, job.metadata.annotations, job.spec.maxRetry)


@dataclass
class _Grace:
    due: float
    reason: str
    pods: set[str]


@dataclass
class _Watch:
    """Replacement pods of a pod-level restart that must run by ``due``, or the job restarts whole."""

    due: float
    reason: str
    pods: set[str]
    timeout: float


@dataclass(frozen=True)
class Restart:
    """One fault restart, for the simulator's report."""

    time: float
    job: str
    reason: str
    pods: tuple[str, ...]
    """The pods deleted."""
    counted: bool
    """Whether it spent a fault retry (an escalation of the same fault does not)."""
    level: str
    """``pod``, ``job`` or ``escalated`` (pod-level replacements stayed pending: the whole job)."""


class FaultController:
    def __init__(self, store: ObjectStore, clock: Clock, events: StatusUpdater | None = None, *,
                 history: bool = True) -> None:
        self.store = store
        self.clock = clock
        self.events = events
        self.queue = WorkQueue()
        self.graces: dict[str, _Grace] = {}
        """Job key → a grace period running for it."""
        self.watches: dict[str, _Watch] = {}
        """Job key → replacement pods of a pod-level restart that must come up in time."""
        self.history = history
        """Keep :attr:`rescheduled` and :attr:`hit` (the simulator's report needs them; a long-running
        controller does not, and would grow them forever): listeners see every restart either way."""
        self.rescheduled: list[Restart] = []
        """Every fault restart, for the simulator's report (when ``history``)."""
        self.hit: list[tuple[float, str]] = []
        """(time, job key) of every job a fault reached that will be rescheduled (now or after its grace; when
        ``history``)."""
        self.listeners: list[Callable[[Restart], None]] = []
        """Called with every fault restart as it happens (the controller's metrics)."""
        self._warned: set[tuple[str, str]] = set()
        self._unwatch = store.watch(("Node",), self._on_event)

    def close(self) -> None:
        self._unwatch()

    def _restarted(self, restart: Restart) -> None:
        if self.history:
            self.rescheduled.append(restart)
        for listener in self.listeners:
            listener(restart)

    def _on_event(self, event: WatchEvent) -> None:
        if event.type != "DELETED":
            self.queue.add(event.object.metadata.name)

    def process(self) -> int:
        return self.queue.drain(self.sync)

    def next_deadline(self) -> float | None:
        return min([*(g.due for g in self.graces.values()), *(w.due for w in self.watches.values())], default=None)

    def wake(self) -> None:
        now = self.clock.now()
        for job_key, grace in list(self.graces.items()):
            if grace.due <= now + 1e-9:
                del self.graces[job_key]
                job = self._job(job_key)
                if job is not None:
                    self._restart(job, grace.pods, grace.reason)
        for job_key, watch in list(self.watches.items()):
            if watch.due <= now + 1e-9:
                del self.watches[job_key]
                self._escalate(job_key, watch)

    def _escalate(self, job_key: str, watch: _Watch) -> None:
        """Job-level rescheduling when a pod-level restart's replacements are not all running."""
        job = self._job(job_key)
        if job is None or job.status.state.phase not in ("Pending", "Running"):
            return
        stuck = []
        for key in sorted(watch.pods):
            try:
                pod = self.store.get("Pod", key)
            except NotFound:
                stuck.append(key)
                continue
            if not isinstance(pod, Pod) or pod.status.phase not in ("Running", "Succeeded"):
                stuck.append(key)
        if not stuck:
            return
        reason = (f"{watch.reason}; replacement pod(s) {', '.join(k.split('/')[-1] for k in stuck)} not running "
                  f"after {watch.timeout:g}s: job-level rescheduling")
        self._restart(job, set(self._job_pods(job)), reason, counted=False, level="escalated")

    # ------------------------------------------------------------------------------------------- sync

    def sync(self, name: str) -> None:
        try:
            node = self.store.get("Node", name)
        except NotFound:
            return
        assert isinstance(node, Node)
        unhealthy, network = self._bad_chips(node)
        not_ready = not node.status.ready
        if not (unhealthy or network or not_ready):
            return
        hit: dict[str, tuple[set[str], str]] = {}
        jobs: dict[str, Job | None] = {}
        for pod in self.store.list("Pod"):
            if not isinstance(pod, Pod) or pod.spec.nodeName != name or pod.status.phase not in ("Pending", "Running"):
                continue
            if pod.metadata.deletionTimestamp is not None:  # already going (a restart under way): not hit again
                continue
            job_key = self._job_key(pod)
            if job_key is None:
                continue
            if job_key not in jobs:
                jobs[job_key] = self._job(job_key)
            job = jobs[job_key]
            if job is None:
                continue
            reason = self._why(pod, name, unhealthy, network, not_ready, job.spec.total_replicas > 1)
            if reason:
                pods, _ = hit.get(job_key, (set(), reason))
                pods.add(f"{pod.metadata.namespace}/{pod.metadata.name}")
                hit[job_key] = (pods, reason)
        for job_key, (pods, reason) in hit.items():
            found = jobs[job_key]
            assert found is not None
            self._handle(found, job_key, pods, reason)

    def _bad_chips(self, node: Node) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
        raw = node.metadata.annotations.get(NODE_ANNOTATION)
        if raw is None:
            return {}, {}
        try:
            inventory = parse_node_devices(raw, node.metadata.name)
        except InventoryError:
            return {}, {}  # the scheduler reports unreadable inventories
        unhealthy = {d.resource: {c.id for c in d.chips if c.health == "Unhealthy"} for d in inventory.devices}
        network = {d.resource: {c.id for c in d.chips if c.health == "NetworkUnhealthy"} for d in inventory.devices}
        return ({r: s for r, s in unhealthy.items() if s}, {r: s for r, s in network.items() if s})

    def _why(self, pod: Pod, node: str, unhealthy: dict[str, set[int]], network: dict[str, set[int]],
             not_ready: bool, multi_pod: bool) -> str:
        if not_ready:
            return f"node {node} is NotReady"
        held = pod_allocation(pod.metadata.annotations)
        for resource, chips in held.items():
            bad = sorted(set(chips) & unhealthy.get(resource, set()))
            if bad:
                return f"{resource} chip(s) {', '.join(map(str, bad))} on {node} unhealthy"
            lost = sorted(set(chips) & network.get(resource, set()))
            if lost and multi_pod:
                return f"{resource} chip(s) {', '.join(map(str, lost))} on {node} network-unhealthy"
        return ""

    @staticmethod
    def _job_key(pod: Pod) -> str | None:
        for ref in pod.metadata.ownerReferences:
            if ref.kind == "Job":
                return f"{pod.metadata.namespace}/{ref.name}"
        return None

    def _job(self, key: str) -> Job | None:
        try:
            job = self.store.get("Job", key)
        except NotFound:
            return None
        return job if isinstance(job, Job) else None

    def _handle(self, job: Job, job_key: str, pods: set[str], reason: str) -> None:
        mode = fault_settings(job).mode
        if mode == "off":
            self._warn(job, job_key, "FaultIgnored", f"{reason}; fault-scheduling is off, the job is left alone")
            return
        if self.history:
            self.hit.append((self.clock.now(), job_key))
        if mode == "grace":
            if job_key in self.graces:
                self.graces[job_key].pods |= pods
                return
            grace = fault_settings(job).grace
            due = self.clock.now() + grace
            self.graces[job_key] = _Grace(due, reason, set(pods))
            for key in self._job_pods(job):
                self._annotate(key, {CHECKPOINT_BY: f"{due:.3f}".rstrip("0").rstrip(".")})
            self._warn(job, job_key, "FaultGracePeriod", f"{reason}; checkpoint before t={due:g}s")
            return
        self._restart(job, pods, reason)

    def _restart(self, job: Job, pods: set[str], reason: str, *, counted: bool = True, level: str = "") -> None:
        job_key = f"{job.metadata.namespace}/{job.metadata.name}"
        retries = int(job.metadata.annotations.get(FAULT_RETRIES, "0")) + (1 if counted else 0)
        budget = fault_settings(job).retry_times
        everything = set(self._job_pods(job))
        pod_level = not level and fault_settings(job).pod_level
        victims = pods if pod_level else everything
        annotations = {**job.metadata.annotations, FAULT_RETRIES: str(retries), FAULT_REASON: reason}
        preferred = self._ready_nodes(everything)
        if preferred:
            annotations[PREFERRED_NODES] = ",".join(preferred)
        if retries > budget:
            annotations[RETRIES_EXHAUSTED] = "true"
        self.store.update(job.model_copy(update={"metadata": job.metadata.model_copy(
            update={"annotations": annotations})}))
        level = level or ("pod" if pod_level else "job")
        if retries > budget:
            # the job controller fails the job and removes its pods
            self._restarted(Restart(self.clock.now(), job_key, reason, tuple(sorted(everything)), counted, level))
            return
        self._restarted(Restart(self.clock.now(), job_key, reason, tuple(sorted(victims)), counted, level))
        if self.events is not None:
            self.events.record_event(job, "FaultRescheduling",
                                     f"{reason}: {len(victims)} pod(s) rescheduled (fault retry {retries}/{budget})",
                                     "Warning")
        for key in sorted(victims):
            with contextlib.suppress(NotFound):
                self.store.delete("Pod", key)
        if pod_level:
            timeout = fault_settings(job).pod_rescheduling_timeout
            watch = self.watches.get(job_key)
            if watch is not None:
                watch.pods |= victims
            else:
                self.watches[job_key] = _Watch(self.clock.now() + timeout, reason, set(victims), timeout)
        else:
            self.watches.pop(job_key, None)

    def _ready_nodes(self, pods: set[str]) -> list[str]:
        """The Ready nodes ``pods`` are bound to (where the job should come back first)."""
        nodes: set[str] = set()
        for key in pods:
            with contextlib.suppress(NotFound):
                pod = self.store.get("Pod", key)
                if isinstance(pod, Pod) and pod.spec.nodeName:
                    nodes.add(pod.spec.nodeName)
        ready = []
        for name in sorted(nodes):
            with contextlib.suppress(NotFound):
                node = self.store.get("Node", name)
                if isinstance(node, Node) and node.status.ready:
                    ready.append(name)
        return ready

    def _job_pods(self, job: Job) -> list[str]:
        prefix = f"{job.metadata.name}-"
        return [f"{p.metadata.namespace}/{p.metadata.name}" for p in self.store.list("Pod")
                if isinstance(p, Pod) and p.metadata.namespace == job.metadata.namespace
                and p.metadata.name.startswith(prefix)
                and self._job_key(p) == f"{job.metadata.namespace}/{job.metadata.name}"]

    def _annotate(self, key: str, values: dict[str, str]) -> None:
        with contextlib.suppress(NotFound):
            pod = self.store.get("Pod", key)
            assert isinstance(pod, Pod)
            self.store.update(pod.model_copy(update={"metadata": pod.metadata.model_copy(
                update={"annotations": {**pod.metadata.annotations, **values}})}))

    def _warn(self, job: Job, job_key: str, reason: str, message: str) -> None:
        if self.events is not None and (job_key, reason) not in self._warned:
            self._warned.add((job_key, reason))
            self.events.record_event(job, reason, message, "Warning")
