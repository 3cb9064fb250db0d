"""The Volcano Job controller (basic lifecycle): Job → PodGroup + pods, pod states → Job phase.

Who calls it: the simulator (and later the ``hetsched controller`` process) calls :meth:`process` after
watch events; events only queue job keys.

What a sync does (Volcano's ``syncJob``):
1. create the PodGroup ``<job>`` if missing: minMember = minAvailable, minTaskMember from tasks'
   minAvailable, queue, priorityClassName, minResources = requests of the minAvailable pods that must run
   first (each task's own minimum, then task order), owner = the Job;
2. once the PodGroup has left Pending (the scheduler's ``enqueue`` admitted it), create the missing pods
   ``<job>-<task>-<index>`` with Volcano's annotations (group, job, task, index) and ``VC_TASK_INDEX``/
   ``VK_TASK_INDEX`` env; before that no pod exists, so a job that cannot run holds nothing;
3. count pods and move the Job phase: Pending → Running (running + succeeded + failed ≥ minAvailable),
   Running → Completed (every pod finished and succeeded ≥ minSuccess or minAvailable) or Failed
   (every pod finished and too few succeeded); a finished Job's PodGroup becomes Completed.

Room left for the full lifecycle (policies, restarts, retries, Aborting/Terminating, ttl): phase moves
go through :meth:`_transition`, and ``spec.policies`` is kept on the Job for the lifecycle issue.
"""

from __future__ import annotations

from typing import Any

from hetsched.api.objects import NUMA_POLICY_ANNOTATION, Job, JobSpec, Pod, PodGroup, TaskSpec, quantity_strings
from hetsched.controllers.workqueue import WorkQueue
from hetsched.ports import Clock, Invalid, NotFound, ObjectStore, WatchEvent

GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
JOB_NAME = "volcano.sh/job-name"
TASK_SPEC = "volcano.sh/task-spec"
TASK_INDEX = "volcano.sh/task-index"
JOB_VERSION = "volcano.sh/job-version"
FINISHED = ("Completed", "Failed", "Aborted", "Terminated")


def pod_name(job: str, task: str, index: int) -> str:
    return f"{job}-{task}-{index}"


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


class JobController:
    def __init__(self, store: ObjectStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self.queue = WorkQueue()
        self._unwatch = store.watch(("Job", "PodGroup", "Pod"), self._on_event)

    def close(self) -> None:
        self._unwatch()

    def _on_event(self, event: WatchEvent) -> None:
        obj = event.object
        namespace = obj.metadata.namespace or "default"
        if isinstance(obj, Job):
            self.queue.add(f"{namespace}/{obj.metadata.name}")
            return
        for ref in obj.metadata.ownerReferences:
            if ref.kind == "Job":
                self.queue.add(f"{namespace}/{ref.name}")

    def process(self) -> int:
        """Reconcile every queued job; returns how many syncs ran."""
        return self.queue.drain(self.sync)

    # ------------------------------------------------------------------------------------------- sync

    def sync(self, key: str) -> None:
        try:
            job = self.store.get("Job", key)
        except NotFound:
            return
        assert isinstance(job, Job)
        if job.status.state.phase in FINISHED:
            return
        podgroup = self._ensure_podgroup(job)
        pods = self._pods(job)
        problem = ""
        if podgroup.status.phase != "Pending":
            try:
                pods = self._create_pods(job, pods)
            except Invalid as exc:
                # e.g. a missing PriorityClass: the Job says why and waits; the next change retries
                problem = f"cannot create pods: {exc}"
                pods = self._pods(job)
        self._update_status(job, podgroup, pods, problem)

    def _ensure_podgroup(self, job: Job) -> PodGroup:
        key = f"{job.metadata.namespace}/{job.metadata.name}"
        try:
            podgroup = self.store.get("PodGroup", key)
            assert isinstance(podgroup, PodGroup)
            return podgroup
        except NotFound:
            pass
        spec = job.spec
        podgroup = PodGroup.model_validate({
            "metadata": {"name": job.metadata.name, "namespace": job.metadata.namespace,
                         "labels": dict(job.metadata.labels), "annotations": dict(job.metadata.annotations),
                         "ownerReferences": [_owner(job)]},
            "spec": {"minMember": spec.min_available,
                     "minTaskMember": {t.name: t.minAvailable for t in spec.tasks if t.minAvailable is not None},
                     "queue": spec.queue, "priorityClassName": spec.priorityClassName,
                     "minResources": quantity_strings(min_resources(spec))},
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

    def _pod_for(self, job: Job, task: TaskSpec, index: int) -> Pod:
        template = task.template
        name = pod_name(job.metadata.name, task.name, index)
        containers = []
        for container in template.spec.containers:
            data = container.model_dump(mode="json", exclude_none=True)
            env = [e for e in data.get("env", []) if e.get("name") not in ("VC_TASK_INDEX", "VK_TASK_INDEX")]
            env += [{"name": "VC_TASK_INDEX", "value": str(index)}, {"name": "VK_TASK_INDEX", "value": str(index)}]
            data["env"] = env
            containers.append(data)
        spec = template.spec.model_dump(mode="json", exclude_none=True)
        spec.update({
            "containers": containers,
            "schedulerName": job.spec.schedulerName,
            "priorityClassName": template.spec.priorityClassName or job.spec.priorityClassName,
        })
        annotations = {**template.metadata.annotations, GROUP_ANNOTATION: job.metadata.name,
                       JOB_NAME: job.metadata.name, TASK_SPEC: task.name, TASK_INDEX: str(index),
                       JOB_VERSION: str(job.status.retryCount)}
        if task.topologyPolicy and task.topologyPolicy != "none":  # Volcano's hand-off to numaaware
            annotations[NUMA_POLICY_ANNOTATION] = task.topologyPolicy
        labels = {**template.metadata.labels, JOB_NAME: job.metadata.name, TASK_SPEC: task.name}
        return Pod.model_validate({
            "metadata": {"name": name, "namespace": job.metadata.namespace, "labels": labels,
                         "annotations": annotations, "ownerReferences": [_owner(job)]},
            "spec": spec,
        })

    def _create_pods(self, job: Job, pods: dict[str, Pod]) -> dict[str, Pod]:
        for task in job.spec.tasks:
            for index in range(task.replicas):
                key = f"{job.metadata.namespace}/{pod_name(job.metadata.name, task.name, index)}"
                if key in pods:
                    continue
                created = self.store.create(self._pod_for(job, task, index))
                assert isinstance(created, Pod)
                pods[key] = created
        return pods

    def _update_status(self, job: Job, podgroup: PodGroup, pods: dict[str, Pod], problem: str = "") -> None:
        counts = {"Pending": 0, "Running": 0, "Succeeded": 0, "Failed": 0, "Unknown": 0}
        for pod in pods.values():
            counts[pod.status.phase] += 1
        spec = job.spec
        phase = job.status.state.phase
        finished = counts["Succeeded"] + counts["Failed"]
        if phase == "Pending" and counts["Running"] + finished >= spec.min_available and pods:
            phase = "Running"
        if phase == "Running" and finished == spec.total_replicas:
            needed = spec.minSuccess or spec.min_available
            phase = "Completed" if counts["Succeeded"] >= needed else "Failed"
        status = job.status.model_copy(update={
            "minAvailable": spec.min_available, "pending": counts["Pending"], "running": counts["Running"],
            "succeeded": counts["Succeeded"], "failed": counts["Failed"], "unknown": counts["Unknown"],
        })
        if phase != job.status.state.phase:
            status = self._transition(status, phase)
        if problem != job.status.state.message and phase == "Pending":
            reason = "PodCreationFailed" if problem else ""
            status = status.model_copy(update={"state": status.state.model_copy(
                update={"reason": reason, "message": problem})})
        if status != job.status:
            self.store.update(job.model_copy(update={"status": status}))
        if phase in FINISHED and podgroup.status.phase != "Completed":
            self.store.update(podgroup.model_copy(update={
                "status": podgroup.status.model_copy(update={"phase": "Completed"})}))

    def _transition(self, status: Any, phase: str) -> Any:
        now = self.clock.now()
        state = status.state.model_copy(update={"phase": phase, "lastTransitionTime": now})
        update: dict[str, Any] = {"state": state}
        if phase in FINISHED and status.state.phase == "Running" and status.state.lastTransitionTime is not None:
            update["runningDuration"] = now - status.state.lastTransitionTime
        return status.model_copy(update=update)
