"""The JobFlow and JobTemplate controller: Volcano's ``flow.volcano.sh/v1alpha1`` — Jobs made from templates,
each once the flows it depends on completed.

Who calls it: the simulator (``sim.simulator``) and ``hetsched controller`` (``cli.serve``). It watches
JobFlows, JobTemplates and the Jobs they made, and follows Volcano's jobflow controller:

- a flow ``f`` of JobFlow ``w`` is the Job ``w-f``, made from the JobTemplate ``f`` of the same namespace
  (labels and annotations ``volcano.sh/createdByJobFlow: <namespace>.<w>`` and
  ``volcano.sh/createdByJobTemplate: <namespace>.<f>``; the JobFlow its controller owner), with the flow's
  ``patch.jobSpec`` laid over the template's spec (top-level fields replaced; hetsched's reading of the
  design Volcano's controller leaves unapplied);
- a flow without ``dependsOn`` starts at once, one with targets once every target's Job is Completed;
- ``status``: the Jobs by phase (pending, running, completed, failed, terminated, unknown), one entry per Job
  with its phase, start, end and restarts, and ``state.phase``: Pending → Running (a Job running or
  completed, none failed) → Succeed (every flow's Job completed) or Failed (a Job failed or terminated);
- ``jobRetainPolicy: delete``: once Succeed, the Jobs are deleted (with their pods and PodGroups);
- a JobTemplate's ``status.jobDependsOnList``: the Jobs made from it.

A flow whose JobTemplate does not exist (yet) waits, with a Warning Event naming it; a template that, with
its patch, is not a valid Job spec is an Event too, never a crash. The dependency graph is checked at
admission (``api.objects.JobFlowSpec``: targets that exist, no cycle).
"""

from __future__ import annotations

import contextlib
from typing import Any

from hetsched.api.objects import Job, JobFlow, JobFlowJobStatus, JobFlowState, JobFlowStatus, JobSpec, JobTemplate
from hetsched.controllers.owned import delete_job, owned_jobs
from hetsched.controllers.workqueue import WorkQueue
from hetsched.ports import Clock, Conflict, Invalid, NotFound, ObjectStore, StatusUpdater, WatchEvent

KIND = "JobFlow"
BY_FLOW = "volcano.sh/createdByJobFlow"
BY_TEMPLATE = "volcano.sh/createdByJobTemplate"
LISTS = {"Pending": "pendingJobs", "Running": "runningJobs", "Completed": "completedJobs",
         "Failed": "failedJobs", "Terminated": "terminatedJobs"}
"""Job phase → the status list it goes in (Completing and Terminating: none; any other: ``unKnowJobs``, as
Volcano)."""


def flow_job_name(jobflow: str, flow: str) -> str:
    return f"{jobflow}-{flow}"


def reference(namespace: str, name: str) -> str:
    """Volcano's ``<namespace>.<name>`` label value."""
    return f"{namespace}.{name}"


class JobFlowController:
    def __init__(self, store: ObjectStore, clock: Clock, events: StatusUpdater | None = None) -> None:
        self.store = store
        self.clock = clock
        self.events = events
        self.flows = WorkQueue()
        self.templates = WorkQueue()
        self._unwatch = store.watch(("JobFlow", "JobTemplate", "Job"), self._on_event)

    def close(self) -> None:
        self._unwatch()

    def _on_event(self, event: WatchEvent) -> None:
        obj = event.object
        namespace = obj.metadata.namespace or "default"
        if isinstance(obj, JobFlow):
            self.flows.add(f"{namespace}/{obj.metadata.name}")
        elif isinstance(obj, JobTemplate):
            self.templates.add(f"{namespace}/{obj.metadata.name}")
            for flow in self.store.list("JobFlow"):  # a template that arrives late lets its flows go on
                if isinstance(flow, JobFlow) and (flow.metadata.namespace or "default") == namespace:
                    self.flows.add(f"{namespace}/{flow.metadata.name}")
        elif isinstance(obj, Job):
            for ref in obj.metadata.ownerReferences:
                if ref.kind == KIND:
                    self.flows.add(f"{namespace}/{ref.name}")
            template = obj.metadata.labels.get(BY_TEMPLATE, "")
            if template.startswith(f"{namespace}."):
                self.templates.add(f"{namespace}/{template[len(namespace) + 1:]}")

    def process(self) -> int:
        return self.flows.drain(self.sync) + self.templates.drain(self.sync_template)

    def _event(self, obj: JobFlow, reason: str, message: str, type_: str = "Normal") -> None:
        if self.events is not None:
            self.events.record_event(obj, reason, message, type_)

    def sync(self, key: str) -> None:
        try:
            found = self.store.get("JobFlow", key)
        except NotFound:
            return
        assert isinstance(found, JobFlow)
        jobflow = found
        namespace, name = key.split("/", 1)
        if jobflow.spec.jobRetainPolicy == "delete" and jobflow.status.state.phase == "Succeed":
            for job in owned_jobs(self.store, KIND, namespace, name):
                delete_job(self.store, job)
            return
        jobs = {job.metadata.name: job for job in owned_jobs(self.store, KIND, namespace, name)}
        for flow in jobflow.spec.flows:
            wanted = flow_job_name(name, flow.name)
            if wanted in jobs:
                continue
            targets = flow.dependsOn.targets if flow.dependsOn is not None else []
            if all(jobs.get(flow_job_name(name, t)) is not None
                   and jobs[flow_job_name(name, t)].status.state.phase == "Completed" for t in targets):
                made = self._create(jobflow, flow.name, flow.patch.jobSpec if flow.patch else {})
                if made is not None:
                    jobs[made.metadata.name] = made
        status = self._status(jobflow, list(jobs.values()))
        if status != jobflow.status:
            with contextlib.suppress(NotFound):
                self.store.update(jobflow.model_copy(update={"status": status}))
            if status.state.phase != jobflow.status.state.phase:
                self.flows.add(key)  # Succeed with jobRetainPolicy delete: the next sync deletes

    def _create(self, jobflow: JobFlow, flow: str, patch: dict[str, Any]) -> Job | None:
        namespace = jobflow.metadata.namespace or "default"
        name = flow_job_name(jobflow.metadata.name, flow)
        try:
            template = self.store.get("JobTemplate", f"{namespace}/{flow}")
        except NotFound:
            self._event(jobflow, "TemplateNotFound", f"flow {flow}: JobTemplate {namespace}/{flow} does not exist; "
                        "the flow waits for it", "Warning")
            return None
        assert isinstance(template, JobTemplate)
        marks = {BY_FLOW: reference(namespace, jobflow.metadata.name), BY_TEMPLATE: reference(namespace, flow)}
        try:
            spec = JobSpec.model_validate({**template.spec.model_dump(mode="json", exclude_none=True, by_alias=True),
                                           **patch})
            job = Job.model_validate({
                "metadata": {"name": name, "namespace": namespace, "labels": marks, "annotations": marks,
                             "ownerReferences": [{"apiVersion": jobflow.apiVersion, "kind": KIND,
                                                  "name": jobflow.metadata.name, "uid": jobflow.metadata.uid,
                                                  "controller": True}]},
                "spec": spec.model_dump(mode="json", exclude_none=True, by_alias=True)})
            made = self.store.create(job)
        except (ValueError, Invalid) as exc:
            self._event(jobflow, "FailedCreate", f"flow {flow}: cannot create Job {name}: {str(exc)[:300]}",
                        "Warning")
            return None
        except Conflict:  # made before (a restart): read it back
            try:
                existing = self.store.get("Job", f"{namespace}/{name}")
            except NotFound:
                return None
            return existing if isinstance(existing, Job) else None
        self._event(jobflow, "Created", f"created Job {name} from JobTemplate {flow}")
        assert isinstance(made, Job)
        return made

    def _status(self, jobflow: JobFlow, jobs: list[Job]) -> JobFlowStatus:
        lists: dict[str, list[str]] = {field: [] for field in (*LISTS.values(), "unKnowJobs")}
        entries = []
        for job in sorted(jobs, key=lambda j: j.metadata.name):
            phase = job.status.state.phase
            if phase not in ("Completing", "Terminating"):  # passing through: in no list, as in Volcano
                lists[LISTS.get(phase, "unKnowJobs")].append(job.metadata.name)
            start = job.metadata.creationTimestamp
            end = start + job.status.runningDuration if start is not None and job.status.runningDuration else None
            entries.append(JobFlowJobStatus(name=job.metadata.name, state=phase, startTimestamp=start,
                                            endTimestamp=end, restartCount=job.status.retryCount))
        phase = jobflow.status.state.phase
        if len(lists["completedJobs"]) == len(jobflow.spec.flows):
            phase = "Succeed"
        elif lists["failedJobs"] or lists["terminatedJobs"]:
            phase = "Failed"
        elif lists["runningJobs"] or lists["completedJobs"]:
            phase = "Running"
        return JobFlowStatus(**lists, jobStatusList=entries, state=JobFlowState(phase=phase))

    def sync_template(self, key: str) -> None:
        try:
            found = self.store.get("JobTemplate", key)
        except NotFound:
            return
        assert isinstance(found, JobTemplate)
        namespace, name = key.split("/", 1)
        made = sorted(job.metadata.name for job in self.store.list("Job") if isinstance(job, Job)
                      and job.metadata.labels.get(BY_TEMPLATE) == reference(namespace, name))
        if made != found.status.jobDependsOnList:
            with contextlib.suppress(NotFound):
                self.store.update(found.model_copy(update={"status": found.status.model_copy(
                    update={"jobDependsOnList": made})}))
