"""The CronJob controller: Volcano's ``batch.volcano.sh/v1alpha1`` CronJob — a Volcano Job made on a schedule.

Who calls it: the simulator (``sim.simulator``, on the simulated clock, woken at :meth:`next_deadline`) and
``hetsched controller`` (``cli.serve``, with the Kubernetes adapter). It watches CronJobs and the Jobs they
own, and on each sync, at the clock's ``now`` (Kubernetes' CronJob controller's rules, which Volcano's
follows):

1. the CronJob's Jobs are read back (owner reference): unfinished ones are ``status.active``; the latest
   completion sets ``lastSuccessfulTime``; finished ones beyond ``successfulJobsHistoryLimit`` (Completed)
   or ``failedJobsHistoryLimit`` (Failed, Aborted, Terminated) are deleted, oldest first, with their pods
   and PodGroup;
2. unless ``suspend``, the latest scheduled time in (``lastScheduleTime`` or creation, now] is due:
   - more than ``startingDeadlineSeconds`` ago: missed — a Warning Event ``MissSchedule``, and it counts as
     handled;
   - ``concurrencyPolicy: Forbid`` with a Job still active: not started (Event ``JobAlreadyActive``), and not
     counted, so it starts once the active Job finishes if the deadline still allows;
   - ``Replace``: the active Jobs are deleted first; ``Allow``: they run on beside the new one;
   - the Job ``<cronjob>-<minutes since the epoch of the scheduled time>`` is created from ``jobTemplate``
     (labels and annotations with it; the CronJob its controller owner), Event ``SuccessfulCreate``, and
     ``lastScheduleTime`` is set;
3. the next scheduled time is when to look again (:meth:`next_deadline`).

Schedules and time zones are ``hetsched.cron``'s. A CronJob that missed more than 100 starts since it last
ran gets a Warning Event ``TooManyMissedTimes`` and starts only the latest, as Kubernetes does.
"""

from __future__ import annotations

import contextlib
from typing import Any

from hetsched import cron
from hetsched.api.objects import CronJob, Job, ObjectRef
from hetsched.controllers.owned import FINISHED, delete_job, owned_jobs
from hetsched.controllers.workqueue import WorkQueue
from hetsched.ports import Clock, Conflict, Invalid, NotFound, ObjectStore, StatusUpdater, WatchEvent

KIND = "CronJob"
CREATED_BY = "volcano.sh/cronjob-name"
"""Label on the Jobs a CronJob makes (its name), besides the owner reference."""
MAX_MISSED = 100


def job_name(cronjob: str, scheduled: float) -> str:
    """The Job for the run scheduled at ``scheduled`` (Kubernetes' rule: minutes since the epoch)."""
    return f"{cronjob}-{int(scheduled // 60)}"


class CronJobController:
    def __init__(self, store: ObjectStore, clock: Clock, events: StatusUpdater | None = None) -> None:
        self.store = store
        self.clock = clock
        self.events = events
        self.queue = WorkQueue()
        self.deadlines: dict[str, float] = {}
        """CronJob key → its next scheduled time."""
        self._unwatch = store.watch(("CronJob", "Job"), self._on_event)

    def close(self) -> None:
        self._unwatch()

    def _on_event(self, event: WatchEvent) -> None:
        obj = event.object
        namespace = obj.metadata.namespace or "default"
        if isinstance(obj, CronJob):
            self.queue.add(f"{namespace}/{obj.metadata.name}")
        elif isinstance(obj, Job):
            for ref in obj.metadata.ownerReferences:
                if ref.kind == KIND:
                    self.queue.add(f"{namespace}/{ref.name}")

    def process(self) -> int:
        return self.queue.drain(self.sync)

    def wake(self) -> None:
        """Queue the CronJobs whose next scheduled time has come; the caller then runs :meth:`process`."""
        now = self.clock.now()
        for key, due in list(self.deadlines.items()):
            if due <= now + 1e-9:
                self.queue.add(key)

    def next_deadline(self) -> float | None:
        return min(self.deadlines.values(), default=None)

    def _event(self, obj: CronJob, reason: str, message: str, type_: str = "Normal") -> None:
        if self.events is not None:
            self.events.record_event(obj, reason, message, type_)

    def sync(self, key: str) -> None:
        try:
            found = self.store.get("CronJob", key)
        except NotFound:
            self.deadlines.pop(key, None)
            return
        assert isinstance(found, CronJob)
        cronjob, now = found, self.clock.now()
        namespace, name = key.split("/", 1)
        spec = cronjob.spec
        jobs = owned_jobs(self.store, KIND, namespace, name)
        active = [job for job in jobs if job.status.state.phase not in FINISHED]
        last_success = cronjob.status.lastSuccessfulTime
        for job in jobs:
            if job.status.state.phase == "Completed":
                finished_at = job.status.state.lastTransitionTime or now
                last_success = max(last_success or finished_at, finished_at)
        self._trim([j for j in jobs if j.status.state.phase == "Completed"], spec.successfulJobsHistoryLimit)
        self._trim([j for j in jobs if j.status.state.phase in FINISHED[1:]], spec.failedJobsHistoryLimit)
        schedule = cron.parse(spec.schedule, spec.timeZone)  # checked at admission
        last_scheduled = cronjob.status.lastScheduleTime
        if not spec.suspend:
            created = cronjob.metadata.creationTimestamp
            since = last_scheduled if last_scheduled is not None else (created if created is not None else now)
            due, missed = schedule.last_due(since, now, MAX_MISSED)
            if due is not None:
                if missed > MAX_MISSED:
                    self._event(cronjob, "TooManyMissedTimes", f"more than {MAX_MISSED} starts were missed; "
                                "starting the latest only", "Warning")
                if spec.startingDeadlineSeconds is not None and now - due > spec.startingDeadlineSeconds:
                    self._event(cronjob, "MissSchedule", f"missed the run scheduled {now - due:.0f}s ago "
                                f"(startingDeadlineSeconds {spec.startingDeadlineSeconds})", "Warning")
                    last_scheduled = due
                elif spec.concurrencyPolicy == "Forbid" and active:
                    self._event(cronjob, "JobAlreadyActive", "not starting a Job: concurrencyPolicy Forbid and "
                                f"{active[0].metadata.name} is still active")
                else:
                    if spec.concurrencyPolicy == "Replace":
                        for job in active:
                            delete_job(self.store, job)
                            self._event(cronjob, "SuccessfulDelete", f"deleted the active Job {job.metadata.name} "
                                        "(concurrencyPolicy Replace)")
                        active = []
                    made = self._create(cronjob, due)
                    if made is not None:
                        active.append(made)
                    last_scheduled = due
            self.deadlines[key] = schedule.next_after(now)
        else:
            self.deadlines.pop(key, None)
        status = cronjob.status.model_copy(update={
            "active": [ObjectRef(name=j.metadata.name, namespace=namespace, uid=j.metadata.uid) for j in active],
            "lastScheduleTime": last_scheduled, "lastSuccessfulTime": last_success})
        if status != cronjob.status:
            with contextlib.suppress(NotFound):
                self.store.update(cronjob.model_copy(update={"status": status}))

    def _create(self, cronjob: CronJob, scheduled: float) -> Job | None:
        """The Job for the run at ``scheduled`` (None when the template cannot make one: said in an Event)."""
        template = cronjob.spec.jobTemplate
        namespace = cronjob.metadata.namespace or "default"
        name = job_name(cronjob.metadata.name, scheduled)
        body: dict[str, Any] = {
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {**template.metadata.labels, CREATED_BY: cronjob.metadata.name},
                         "annotations": dict(template.metadata.annotations),
                         "ownerReferences": [{"apiVersion": cronjob.apiVersion, "kind": KIND,
                                              "name": cronjob.metadata.name, "uid": cronjob.metadata.uid,
                                              "controller": True}]},
            "spec": template.spec.model_dump(mode="json", exclude_none=True, by_alias=True)}
        try:
            job = Job.model_validate(body)
            made = self.store.create(job)
        except (ValueError, Invalid) as exc:
            self._event(cronjob, "FailedCreate", f"cannot create Job {name}: {str(exc)[:300]}", "Warning")
            return None
        except Conflict:  # a Job of that name exists: this run was made before (a restart, a lost status write)
            try:
                existing = self.store.get("Job", f"{namespace}/{name}")
            except NotFound:
                return None
            return existing if isinstance(existing, Job) else None
        self._event(cronjob, "SuccessfulCreate", f"created Job {name}")
        assert isinstance(made, Job)
        return made

    def _trim(self, finished: list[Job], keep: int) -> None:
        """Delete the oldest of ``finished`` beyond ``keep``."""
        for job in finished[:max(len(finished) - keep, 0)]:
            delete_job(self.store, job)
