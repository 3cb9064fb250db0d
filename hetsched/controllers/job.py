"""The Volcano Job controller: Job → PodGroup + pods, pod changes → lifecycle events → Job phase.

Who calls it: the simulator and the ``hetsched controller`` process call :meth:`process` after
watch events; events queue job keys and record lifecycle events (a pod failed, was evicted, went Unknown).

What a sync does (Volcano's ``syncJob``):
1. create the PodGroup ``<job>`` if missing: minMember = minAvailable, minTaskMember from tasks'
   minAvailable, queue, priorityClassName, minResources = requests of the minAvailable pods that must run
   first (each task's own minimum, then task order), owner = the Job;
2. gather the events since the last sync (plus TaskCompleted), ask the policies for an action
   (``controllers.lifecycle``) and the current phase's module (``controllers.phases``) for the step: the
   next phase, pods to delete, a retry to count;
3. in Pending and Running, once the PodGroup has left Pending (the scheduler's ``enqueue`` admitted it),
   create the missing pods ``<job>-<task>-<index>`` with Volcano's annotations (group, job, task, index,
   job version) and ``VC_TASK_INDEX``/``VK_TASK_INDEX`` env; before that no pod exists, so a job that
   cannot run holds nothing;
4. write the status (counts, phase with reason and message, retry count); a finished Job's PodGroup
   becomes Completed (and Pending again if a ResumeJob brings the job back). The state machine is drawn in
   docs/jobs.md.

Also: Commands (``bus.volcano.sh/v1alpha1``) are applied on the next :meth:`process` and deleted; a change
of the Job's spec (scaling) raises ``JobUpdated``, resizes the PodGroup and deletes pods past the new
replica counts; a policy's ``timeout`` is kept as a deadline (:meth:`next_deadline`); Volcano's job plugins
(``controllers.jobplugins``: env, svc, ssh, mpi, pytorch, tensorflow, ray, hcclrank) shape every pod, and
what they need (the ssh Secret, the svc Service, ConfigMap and NetworkPolicy, the Ray head's Service) is
made before the first pods.

Invariant: at most one pod per task index exists (pods are named by index and created only when missing).
"""

from __future__ import annotations

import contextlib
from typing import Any

from hetsched.api import membership
from hetsched.api.objects import (
    NUMA_POLICY_ANNOTATION,
    PARTITION_LABEL,
    Command,
    Job,
    JobSpec,
    Pod,
    PodGroup,
    TaskSpec,
    quantity_strings,
)
from hetsched.api.volcano_annotations import COOLDOWN_TIME
from hetsched.controllers import jobplugins
from hetsched.controllers.fault import FAULT_REASON, PREFERRED_NODES, RETRIES_EXHAUSTED
from hetsched.controllers.jobplugins import ssh
from hetsched.controllers.jobplugins.draft import JOB_NAME, JOB_NAMESPACE, TASK_SPEC, Draft, pod_name
from hetsched.controllers.lifecycle import FINISHED, Delayed, Event, Step, Sync, decide
from hetsched.controllers.phases import PHASES
from hetsched.controllers.workqueue import WorkQueue
from hetsched.ports import Clock, Conflict, Invalid, NotFound, ObjectStore, StatusUpdater, WatchEvent

GROUP_ANNOTATION = membership.K8S_GROUP_KEY
TASK_INDEX = "volcano.sh/task-index"
JOB_VERSION = "volcano.sh/job-version"
HANDED_TO_PODS = ("volcano.sh/preemptable", COOLDOWN_TIME)
"""Job annotations its pods carry (Volcano's controller hands the same): whether they may be victims, and
for how long after they start they may not (``cdp``)."""


def min_resources(spec: JobSpec) -> dict[str, int]:
    """Requests of the pods that must run for the gang: each task's minAvailable first, then task order
    until minAvailable pods are counted (Volcano's ``calcPGMinResources``)."""
    counts = {t.name: (t.minAvailable or 0) for t in spec.tasks}
    remaining = spec.min_available - sum(counts.values())
    for task in spec.tasks:
        if remaining <= 0:
            break
        extra = min(task.replicas - counts[task.name], remaining)
        counts[task.name] += extra
        remaining -= extra
    total: dict[str, int] = {}
    for task in spec.tasks:
        for name, amount in task.template.spec.requests.items():
            if name != "pods":  # Volcano's minResources counts resources, not pod slots
                total[name] = total.get(name, 0) + amount * counts[task.name]
    return total


def _owner(job: Job) -> dict[str, Any]:
    return {"apiVersion": job.apiVersion, "kind": "Job", "name": job.metadata.name, "uid": job.metadata.uid,
            "controller": True}



def _subgroup_policy(task: TaskSpec) -> dict[str, object]:
    """The PodGroup ``subGroupPolicy`` entry for a task with a ``partitionPolicy``: its pods (by the task
    label), grouped by the partition label, ``partitionSize`` each, bounded as the partition says."""
    partition = task.partitionPolicy
    assert partition is not None
    entry: dict[str, object] = {
        "name": task.name, "subGroupSize": partition.partitionSize,
        "minSubGroups": partition.minPartitions if partition.minPartitions is not None else partition.totalPartitions,
        "labelSelector": {"matchLabels": {TASK_SPEC: task.name}}, "matchLabelKeys": [PARTITION_LABEL]}
    if partition.networkTopology is not None:
        entry["networkTopology"] = partition.networkTopology.model_dump(exclude_none=True)
    return entry

class JobController:
    def __init__(self, store: ObjectStore, clock: Clock, events: StatusUpdater | None = None) -> None:
        self.store = store
        self.clock = clock
        self.events = events
        """Where Warning events go (the embedded cluster, the API server); None: nowhere."""
        self.queue = WorkQueue()
        self._events: dict[str, list[Event]] = {}
        """Job key → lifecycle events seen since its last sync."""
        self._deleting: set[str] = set()
        """Pods this controller deletes itself (their deletion is not an eviction)."""
        self._completed_tasks: dict[str, set[str]] = {}
        """Job key → tasks whose TaskCompleted event was raised (once per job version)."""
        self._failed_tasks: dict[str, set[str]] = {}
        """Job key → tasks whose TaskFailed event was raised (once per job version)."""
        self.deadlines: dict[str, float] = {}
        """Job key → when it must be looked at again (``ttlSecondsAfterFinished``)."""
        self._delayed: dict[str, list[Delayed]] = {}
        """Job key → actions a policy's timeout holds back."""
        self._commands: list[Command] = []
        self._unwatch = store.watch(("Job", "PodGroup", "Pod", "Command"), self._on_event)

    def close(self) -> None:
        self._unwatch()

    def _on_event(self, event: WatchEvent) -> None:
        obj = event.object
        namespace = obj.metadata.namespace or "default"
        if isinstance(obj, Command):
            if event.type == "ADDED" and obj.target.kind == "Job":  # a Queue's: the queue controller's
                self._commands.append(obj)
            return
        if isinstance(obj, Job):
            key = f"{namespace}/{obj.metadata.name}"
            self.queue.add(key)
            if event.type == "MODIFIED" and isinstance(event.old, Job) and event.old.spec != obj.spec:
                self._events.setdefault(key, []).append(Event("JobUpdated"))
            return
        for ref in obj.metadata.ownerReferences:
            if ref.kind == "Job":
                job_key = f"{namespace}/{ref.name}"
                self.queue.add(job_key)
                if isinstance(obj, Pod):
                    self._pod_event(job_key, event, obj)
                elif isinstance(obj, PodGroup):
                    self._podgroup_pending(job_key, event, obj)

    def _pod_event(self, job_key: str, event: WatchEvent, pod: Pod) -> None:
        """Turn a pod change into a lifecycle event: failed, evicted (deleted by someone else), unknown."""
        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        task = pod.metadata.annotations.get(TASK_SPEC, "")
        old = event.old if isinstance(event.old, Pod) else None
        try:
            version: int | None = int(pod.metadata.annotations.get(JOB_VERSION, ""))
        except ValueError:
            version = None
        found = self._events.setdefault(job_key, [])
        name, uid = pod.metadata.name, pod.metadata.uid
        if event.type == "DELETED":
            if key in self._deleting:
                self._deleting.discard(key)
            elif pod.status.phase not in ("Succeeded", "Failed"):
                found.append(Event("PodEvicted", task, name, version=version, uid=uid))
            return
        phase = pod.status.phase
        if event.type == "ADDED" and phase == "Pending":
            found.append(Event("PodPending", task, name, version=version, uid=uid))
        elif old is not None and old.status.phase != phase:
            if phase == "Failed":
                found.append(Event("PodFailed", task, name, pod.status.exit_code, version, uid))
            elif phase == "Unknown":
                found.append(Event("Unknown", task, name, version=version, uid=uid))
            elif phase == "Running":
                found.append(Event("PodRunning", task, name, version=version, uid=uid))

    def _podgroup_pending(self, job_key: str, event: WatchEvent, podgroup: PodGroup) -> None:
        """Volcano's ``PodGroupPending`` Warning on the Job when the scheduler says anew why its gang waits."""
        if self.events is None or event.type == "DELETED":
            return
        verdict = next((c for c in podgroup.status.conditions if c.type == "Unschedulable"), None)
        before = event.old.status.conditions if isinstance(event.old, PodGroup) else []
        if verdict is None or any(c.type == "Unschedulable" and c.message == verdict.message for c in before):
            return
        with contextlib.suppress(NotFound):
            job = self.store.get("Job", job_key)
            self.events.record_event(job, "PodGroupPending", f"PodGroup {job_key} unschedulable, reason: "
                                     f"{verdict.message}", "Warning")

    def process(self) -> int:
        """Apply the Commands that arrived, then reconcile every queued job; returns how much was done."""
        handled = 0
        while self._commands:
            self._command(self._commands.pop(0))
            handled += 1
        return handled + self.queue.drain(self.sync)

    def _command(self, command: Command) -> None:
        """A Command (``bus.volcano.sh/v1alpha1``) names a Job and an action: raise CommandIssued with that
        action for the job's next sync, and delete the Command (it is one-shot, as in Volcano)."""
        namespace = command.metadata.namespace or "default"
        job_key = f"{namespace}/{command.target.name}"
        try:
            self.store.get("Job", job_key)
        except NotFound:
            if self.events is not None:
                self.events.record_event(command, "CommandFailed",
                                         f"target Job {job_key} does not exist; {command.action} not applied",
                                         "Warning")
        else:
            self._events.setdefault(job_key, []).append(Event("CommandIssued", action=command.action))
            self.queue.add(job_key)
        with contextlib.suppress(NotFound):
            self.store.delete("Command", f"{namespace}/{command.metadata.name}")

    # ------------------------------------------------------------------------------------------- sync

    def sync(self, key: str) -> None:
        try:
            job = self.store.get("Job", key)
        except NotFound:
            self._events.pop(key, None)
            self._delayed.pop(key, None)
            return
        assert isinstance(job, Job)
        events = self._events.pop(key, []) + self._due(key, job)
        resume = job.status.state.phase == "Aborted" and any(e.action == "ResumeJob" for e in events)
        if job.status.state.phase in FINISHED and not resume:
            self._delayed.pop(key, None)
            self._expire(key, job)
            return
        podgroup = self._ensure_podgroup(job, update=any(e.name == "JobUpdated" for e in events))
        pods = self._pods(job)
        if any(e.name == "JobUpdated" for e in events):
            self._kill_extra(job)
            self._refresh_hosts(job)
        events += self._task_events(key, job, pods)
        counts = self._counts(pods)
        chosen, delayed = decide(job, events, self.clock.now())
        if delayed:
            self._delayed.setdefault(key, []).extend(delayed)
        sync = Sync(job, counts, len(pods), events, chosen[1] if chosen else None)
        if job.metadata.annotations.get(RETRIES_EXHAUSTED) == "true":  # the fault controller's verdict
            last = job.metadata.annotations.get(FAULT_REASON, "")
            step = Step("Failed", kill="all", reason="FaultRetryExhausted",
                        message=f"fault retries exhausted; last fault: {last}")
        else:
            step = PHASES[job.status.state.phase](sync, chosen[0] if chosen else None)
        if step.kill:
            pods = self._kill(job, pods, step.kill)
        if step.retry:
            job = job.model_copy(update={"status": job.status.model_copy(
                update={"retryCount": job.status.retryCount + 1})})
            self._completed_tasks.pop(key, None)
            self._failed_tasks.pop(key, None)
        problem = ""
        if step.phase in ("Pending", "Running") and podgroup.status.phase != "Pending":
            try:
                job = self._ensure_plugin_objects(job, pods)
                pods = self._create_pods(job, pods)
            except Invalid as exc:
                # e.g. a missing PriorityClass: the Job says why and waits; the next change retries
                problem = f"cannot create pods: {exc}"
                pods = self._pods(job)
        self._update_status(job, podgroup, pods, step, problem)
        if step.phase != job.status.state.phase and step.phase not in FINISHED:
            self.queue.add(key)  # a new phase may move on at once (e.g. Restarting with its pods gone)

    def _expire(self, key: str, job: Job) -> None:
        """``ttlSecondsAfterFinished``: delete a finished Job (its PodGroup and pods with it, as Kubernetes'
        garbage collector would) once the time is up; until then remember when to look again."""
        ttl = job.spec.ttlSecondsAfterFinished
        if ttl is None:
            return
        due = (job.status.state.lastTransitionTime or self.clock.now()) + ttl
        if self.clock.now() + 1e-9 < due:
            self.deadlines[key] = due
            return
        self.deadlines.pop(key, None)
        for pod_key in self._pods(job):
            self._deleting.add(pod_key)
            with contextlib.suppress(NotFound):
                self.store.delete("Pod", pod_key)
        with contextlib.suppress(NotFound):
            self.store.delete("PodGroup", key)
        self._delete_plugin_objects(job)
        with contextlib.suppress(NotFound):
            self.store.delete("Job", key)

    def wake(self) -> None:
        """Queue the jobs whose deadline (``ttlSecondsAfterFinished``, a delayed action) has come; the
        caller then runs :meth:`process`. The simulator calls it at :meth:`next_deadline`."""
        now = self.clock.now()
        for key, due in list(self.deadlines.items()):
            if due <= now + 1e-9:
                self.queue.add(key)
        for key, waiting in self._delayed.items():
            if any(d.due <= now + 1e-9 for d in waiting):
                self.queue.add(key)

    def next_deadline(self) -> float | None:
        dues = [*self.deadlines.values(), *(d.due for waiting in self._delayed.values() for d in waiting)]
        return min(dues, default=None)

    def _due(self, key: str, job: Job) -> list[Event]:
        """Delayed actions whose timeout ran out and that still apply: the job has not restarted since
        (same version) and, for PodPending, the same pod is still pending."""
        waiting = self._delayed.get(key)
        if not waiting:
            return []
        now = self.clock.now()
        due = [d for d in waiting if d.due <= now + 1e-9]
        rest = [d for d in waiting if d.due > now + 1e-9 and d.version == job.status.retryCount]
        if rest:
            self._delayed[key] = rest
        else:
            self._delayed.pop(key, None)
        fired = []
        for delayed in due:
            if delayed.version != job.status.retryCount:
                continue
            event = delayed.event
            if event.name == "PodPending":
                try:
                    pod = self.store.get("Pod", f"{job.metadata.namespace}/{event.pod}")
                except NotFound:
                    continue
                assert isinstance(pod, Pod)
                if pod.metadata.uid != event.uid or pod.status.phase != "Pending":
                    continue
            fired.append(Event(event.name, event.task, event.pod, event.exit_code, event.version, event.uid,
                               action=delayed.action))
        return fired

    @staticmethod
    def _counts(pods: dict[str, Pod]) -> dict[str, int]:
        counts = {"Pending": 0, "Running": 0, "Succeeded": 0, "Failed": 0, "Unknown": 0}
        for pod in pods.values():
            counts[pod.status.phase] += 1
        return counts

    def _task_events(self, key: str, job: Job, pods: dict[str, Pod]) -> list[Event]:
        """Once per job version and task: TaskCompleted when every pod of the task succeeded; TaskFailed when
        its live pods restarted their containers in place more than the task's ``maxRetry`` (default 3)."""
        done = self._completed_tasks.setdefault(key, set())
        failed = self._failed_tasks.setdefault(key, set())
        events = []
        for task in job.spec.tasks:
            names = [f"{job.metadata.namespace}/{pod_name(job.metadata.name, task.name, i)}"
                     for i in range(task.replicas)]
            if task.name not in done and names and all(
                    n in pods and pods[n].status.phase == "Succeeded" for n in names):
                done.add(task.name)
                events.append(Event("TaskCompleted", task.name))
            restarts = sum(pods[n].status.restarts for n in names
                           if n in pods and pods[n].status.phase in ("Pending", "Running"))
            limit = task.maxRetry if task.maxRetry is not None else 3
            if task.name not in failed and restarts > limit:
                failed.add(task.name)
                events.append(Event("TaskFailed", task.name))
        return events

    def _kill_extra(self, job: Job) -> None:
        """After a spec change (scaled down, a task renamed away): delete the job's pods whose task or index
        the spec no longer has."""
        wanted = {pod_name(job.metadata.name, t.name, i) for t in job.spec.tasks for i in range(t.replicas)}
        for pod in self.store.list("Pod"):
            if (isinstance(pod, Pod) and pod.metadata.namespace == job.metadata.namespace
                    and pod.metadata.annotations.get(JOB_NAME) == job.metadata.name
                    and any(r.kind == "Job" and r.uid == job.metadata.uid for r in pod.metadata.ownerReferences)
                    and pod.metadata.name not in wanted):
                key = f"{pod.metadata.namespace}/{pod.metadata.name}"
                self._deleting.add(key)
                with contextlib.suppress(NotFound):
                    self.store.delete("Pod", key)

    def _kill(self, job: Job, pods: dict[str, Pod], target: str) -> dict[str, Pod]:
        """Delete the pods a step names ("all", "task:<name>", "pod:<name>"); returns the ones left."""
        left = {}
        for key, pod in pods.items():
            task = pod.metadata.annotations.get(TASK_SPEC, "")
            if target == "all" or target == f"task:{task}" or target == f"pod:{pod.metadata.name}":
                self._deleting.add(key)
                with contextlib.suppress(NotFound):
                    self.store.delete("Pod", key)
            else:
                left[key] = pod
        return left

    def _ensure_podgroup(self, job: Job, update: bool = False) -> PodGroup:
        """The job's PodGroup, created if missing; with ``update`` (the Job's spec changed) its gang
        fields follow the new spec."""
        key = f"{job.metadata.namespace}/{job.metadata.name}"
        spec = job.spec
        gang = {"minMember": spec.min_available,
                "minTaskMember": {t.name: t.minAvailable for t in spec.tasks if t.minAvailable is not None},
                "queue": spec.queue, "priorityClassName": spec.priorityClassName,
                "minResources": quantity_strings(min_resources(spec))}
        if spec.networkTopology is not None:  # Volcano's controller hands the Job's bound to its PodGroup
            gang["networkTopology"] = spec.networkTopology.model_dump(exclude_none=True)
        partitioned = [t for t in spec.tasks if t.partitionPolicy is not None]
        if partitioned:  # each task's partitions: sub-groups by the partition label its pods carry
            gang["subGroupPolicy"] = [_subgroup_policy(t) for t in partitioned]
        try:
            podgroup = self.store.get("PodGroup", key)
            assert isinstance(podgroup, PodGroup)
        except NotFound:
            pass
        else:
            if update:
                wanted = podgroup.spec.model_validate({**podgroup.spec.model_dump(exclude_none=True), **gang})
                if wanted != podgroup.spec:
                    updated = self.store.update(podgroup.model_copy(update={"spec": wanted}))
                    assert isinstance(updated, PodGroup)
                    return updated
            return podgroup
        podgroup = PodGroup.model_validate({
            "metadata": {"name": job.metadata.name, "namespace": job.metadata.namespace,
                         "labels": dict(job.metadata.labels), "annotations": dict(job.metadata.annotations),
                         "ownerReferences": [_owner(job)]},
            "spec": gang,
        })
        created = self.store.create(podgroup)
        assert isinstance(created, PodGroup)
        return created

    def _pods(self, job: Job) -> dict[str, Pod]:
        prefix = f"{job.metadata.namespace}/{job.metadata.name}-"
        pods: dict[str, Pod] = {}
        for task in job.spec.tasks:
            for index in range(task.replicas):
                key = f"{job.metadata.namespace}/{pod_name(job.metadata.name, task.name, index)}"
                try:
                    pod = self.store.get("Pod", key)
                except NotFound:
                    continue
                assert isinstance(pod, Pod) and key.startswith(prefix)
                pods[key] = pod
        return pods

    def _pod_for(self, job: Job, task: TaskSpec, index: int, plugins: jobplugins.Configured) -> Pod:
        template = task.template
        name = pod_name(job.metadata.name, task.name, index)
        spec = template.spec.model_dump(mode="json", exclude_none=True)
        spec.update({
            "schedulerName": job.spec.schedulerName,
            "priorityClassName": template.spec.priorityClassName or job.spec.priorityClassName,
        })
        preferred = [n for n in job.metadata.annotations.get(PREFERRED_NODES, "").split(",") if n]
        if preferred:  # after a fault: back to the job's previous healthy nodes when they have room
            affinity = dict(spec.get("affinity") or {})
            node_affinity = dict(affinity.get("nodeAffinity") or {})
            terms = list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
            terms.append({"weight": 100, "preference": {"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": preferred}]}})
            node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = terms
            affinity["nodeAffinity"] = node_affinity
            spec["affinity"] = affinity
        annotations = {**template.metadata.annotations, GROUP_ANNOTATION: job.metadata.name,
                       JOB_NAME: job.metadata.name, TASK_SPEC: task.name, TASK_INDEX: str(index),
                       JOB_VERSION: str(job.status.retryCount)}
        for key in HANDED_TO_PODS:  # a Job's victim rules reach its pods, over the template's, as Volcano's
            if key in job.metadata.annotations:
                annotations[key] = job.metadata.annotations[key]
        if task.topologyPolicy and task.topologyPolicy != "none":  # Volcano's hand-off to numaaware
            annotations[NUMA_POLICY_ANNOTATION] = task.topologyPolicy
        jobplugins.shape(Draft(job, task, index, spec, annotations), plugins)
        labels = {**template.metadata.labels, JOB_NAME: job.metadata.name,
                  JOB_NAMESPACE: job.metadata.namespace or "default", TASK_SPEC: task.name}
        if task.partitionPolicy is not None:
            labels[PARTITION_LABEL] = str(index // task.partitionPolicy.partitionSize)
        return Pod.model_validate({
            "metadata": {"name": name, "namespace": job.metadata.namespace, "labels": labels,
                         "annotations": annotations, "ownerReferences": [_owner(job)]},
            "spec": spec,
        })

    @staticmethod
    def _task_up(job: Job, task: TaskSpec, pods: dict[str, Pod]) -> bool:
        """A task is up when its minAvailable (else all replicas) pods run or have succeeded."""
        keys = [f"{job.metadata.namespace}/{pod_name(job.metadata.name, task.name, i)}" for i in range(task.replicas)]
        up = sum(1 for k in keys if k in pods and pods[k].status.phase in ("Running", "Succeeded"))
        return up >= (task.minAvailable if task.minAvailable is not None else task.replicas)

    def _ready_to_create(self, job: Job, task: TaskSpec, pods: dict[str, Pod]) -> bool:
        """``dependsOn``: the named tasks are up — all of them, or any one with ``iteration: any``."""
        depends = task.dependsOn
        if depends is None:
            return True
        tasks = {t.name: t for t in job.spec.tasks}
        up = [self._task_up(job, tasks[name], pods) for name in depends.name]
        return any(up) if depends.iteration == "any" else all(up)

    def _create_pods(self, job: Job, pods: dict[str, Pod]) -> dict[str, Pod]:
        plugins = jobplugins.configured(job)
        for task in job.spec.tasks:
            if not self._ready_to_create(job, task, pods):
                continue
            for index in range(task.replicas):
                key = f"{job.metadata.namespace}/{pod_name(job.metadata.name, task.name, index)}"
                if key in pods:
                    continue
                created = self.store.create(self._pod_for(job, task, index, plugins))
                assert isinstance(created, Pod)
                pods[key] = created
        return pods

    def _ensure_plugin_objects(self, job: Job, pods: dict[str, Pod]) -> Job:
        """What the job's plugins need before its pods (``controllers.jobplugins``), made once per Job and
        recorded in its ``status.controlledResources`` (the Job returned carries the record):

        - the ``ssh`` key pair. The controller never reads a Secret (its role may only create and delete
          them): a Secret of that name it did not create — its key could be an attacker's — is an Invalid
          (the Job says why and waits), never mounted, never deleted;
        - the ``svc`` plugin's ConfigMap (one of that name is overwritten: it holds only host names, and
          the pods read it), headless Service and NetworkPolicy, and the ``ray`` plugin's head Service; a
          Service or NetworkPolicy of that name that exists already is used as it is (as Volcano does).
        """
        if all(f"{job.metadata.namespace}/{pod_name(job.metadata.name, t.name, i)}" in pods
               for t in job.spec.tasks for i in range(t.replicas)):
            return job
        controlled = job.status.controlledResources
        record: dict[str, str] = {}
        if jobplugins.uses(job, "ssh") and controlled.get(ssh.CONTROLLED) != "ssh":
            key = f"{job.metadata.namespace}/{ssh.secret_name(job)}"
            try:
                self.store.create(ssh.make_secret(job))
            except Conflict:
                raise Invalid(f"Secret {key} exists and was not created for Job {job.metadata.name}: hetsched "
                              "neither uses nor deletes it (delete or rename it)") from None
            record[ssh.CONTROLLED] = "ssh"
        for plugin, made in jobplugins.objects(job, jobplugins.configured(job), _owner(job)).items():
            if controlled.get(f"plugin-{plugin}") == plugin:
                continue
            for obj in made:
                try:
                    self.store.create(obj)
                except Conflict:
                    if obj.kind == "ConfigMap":
                        self.store.update(obj)  # no resourceVersion: an unconditional write
            record[f"plugin-{plugin}"] = plugin
        if not record:
            return job
        for _ in range(3):  # the record must land, or the next sync would take its own Secret for a planted one
            status = job.status.model_copy(update={
                "controlledResources": {**job.status.controlledResources, **record}})
            try:
                updated = self.store.update(job.model_copy(update={"status": status}))
            except Conflict:
                fresh = self.store.get("Job", f"{job.metadata.namespace}/{job.metadata.name}")
                assert isinstance(fresh, Job)
                job = fresh
                continue
            assert isinstance(updated, Job)
            return updated
        raise Conflict(f"Job {job.metadata.namespace}/{job.metadata.name} kept changing while its plugins' "
                       "objects were recorded")

    def _refresh_hosts(self, job: Job) -> None:
        """After a scaling: the ``svc`` plugin's host lists name the pods the Job now has."""
        if not jobplugins.uses(job, "svc") or job.status.controlledResources.get("plugin-svc") != "svc":
            return
        hosts = jobplugins.svc.hosts_configmap(job, _owner(job))
        try:
            self.store.update(hosts)
        except NotFound:
            self.store.create(hosts)

    def _delete_plugin_objects(self, job: Job) -> None:
        """With the Job: what its plugins made (a Kubernetes garbage collector does the same through the owner
        references; the embedded cluster has none). A Service or NetworkPolicy is deleted only when it is
        the Job's own (one that existed before the Job was used as it is)."""
        namespace = job.metadata.namespace or "default"
        controlled = job.status.controlledResources
        owned: list[tuple[str, str]] = []
        if controlled.get(ssh.CONTROLLED) == "ssh":  # never a Secret it did not create
            owned.append(("Secret", ssh.secret_name(job)))
        for plugin, made in jobplugins.objects(job, jobplugins.configured(job), _owner(job)).items():
            if controlled.get(f"plugin-{plugin}") == plugin:  # what the plugin made, named as it names them
                owned += [(obj.kind, obj.metadata.name) for obj in made]
        for kind, name in owned:
            with contextlib.suppress(NotFound):
                if kind in ("Service", "NetworkPolicy"):
                    found = self.store.get(kind, f"{namespace}/{name}")
                    if not any(ref.uid == job.metadata.uid for ref in found.metadata.ownerReferences):
                        continue
                self.store.delete(kind, f"{namespace}/{name}")

    def _update_status(self, job: Job, podgroup: PodGroup, pods: dict[str, Pod], step: Step,
                       problem: str = "") -> None:
        counts = self._counts(pods)
        spec = job.spec
        phase = step.phase
        status = job.status.model_copy(update={
            "minAvailable": spec.min_available, "pending": counts["Pending"], "running": counts["Running"],
            "succeeded": counts["Succeeded"], "failed": counts["Failed"], "unknown": counts["Unknown"],
        })
        if phase != job.status.state.phase:
            status = self._transition(status, phase)
            if step.reason or step.message:
                status = status.model_copy(update={"state": status.state.model_copy(
                    update={"reason": step.reason, "message": step.message})})
        if phase == "Pending" and (problem or status.state.reason == "PodCreationFailed") \
                and problem != status.state.message:
            reason = "PodCreationFailed" if problem else ""
            status = status.model_copy(update={"state": status.state.model_copy(
                update={"reason": reason, "message": problem})})
        if status != job.status:
            self.store.update(job.model_copy(update={"status": status}))
            if phase != job.status.state.phase and self.events is not None:
                said = status.state.message or status.state.reason or f"job is {phase.lower()}"
                self.events.record_event(job, phase, said, "Warning" if phase in ("Failed", "Aborted",
                                                                                 "Terminated") else "Normal")
        if phase in FINISHED and podgroup.status.phase != "Completed":
            self.store.update(podgroup.model_copy(update={
                "status": podgroup.status.model_copy(update={"phase": "Completed"})}))
        elif phase not in FINISHED and podgroup.status.phase == "Completed":  # resumed: admit the gang anew
            self.store.update(podgroup.model_copy(update={
                "status": podgroup.status.model_copy(update={"phase": "Pending", "conditions": []})}))

    def _transition(self, status: Any, phase: str) -> Any:
        now = self.clock.now()
        state = status.state.model_copy(update={"phase": phase, "lastTransitionTime": now})
        update: dict[str, Any] = {"state": state}
        if phase in FINISHED and status.state.phase == "Running" and status.state.lastTransitionTime is not None:
            update["runningDuration"] = now - status.state.lastTransitionTime
        return status.model_copy(update=update)
