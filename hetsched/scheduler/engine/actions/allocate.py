"""``allocate``: place pending pods of Inqueue and Running jobs, gang by gang (Volcano's allocate action).

Who calls it: the session runner. Order: queue (``queue_order_key``, queues at their capability skipped) → job
(``job_order_key``) → task (``task_order_key``). Each job's gang goes into one statement
(``scheduler.engine.placement.place_job``): committed when ready, kept when pipelined, discarded otherwise.
After every job had its gang turn, a second pass places the elastic pods (beyond minAvailable) of
ready jobs, so one job's elastic pods never starve another job's gang.

Best-effort pods (no requests) are left to ``backfill``, as in Volcano. A job that found no room and for
which none was freed since is not tried again (``scheduler.cache.parked``): its last status stands.
"""

from __future__ import annotations

from hetsched.scheduler.contract.decisions import PodGroupUpdate
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.snapshot import JobInfo
from hetsched.scheduler.contract.status import Code, Status
from hetsched.scheduler.engine.actions.ordering import jobs_by_queue
from hetsched.scheduler.engine.placement import place_job
from hetsched.scheduler.engine.session import Session

NAME = "allocate"


def _candidates(session: Session) -> list[JobInfo]:
    enqueue_configured = "enqueue" in session.conf.action_names
    jobs: list[JobInfo] = []
    for job in session.jobs():
        with session.working_on(job):
            _candidate(session, job, enqueue_configured, jobs)
    return jobs


def _candidate(session: Session, job: JobInfo, enqueue_configured: bool, jobs: list[JobInfo]) -> None:
    if job.phase == "Pending":
        if enqueue_configured:
            return
        job.phase = "Inqueue"  # without an enqueue action every job is admitted (Volcano's behaviour)
        session.decisions.podgroups[job.key] = PodGroupUpdate("Inqueue", None)
    if job.phase not in ("Inqueue", "Running") or not any(g.pending and not g.best_effort for g in job.groups):
        return
    if session.snapshot.queues[job.queue].state == "NotFound":
        session.decisions.unschedulable[job.key] = Status(
            Code.UNSCHEDULABLE, (Reason.of(ReasonCode.QUEUE_MISSING, queue=job.queue),), NAME)
        return
    valid = session.job_valid(job)
    if not valid.ok:
        session.decisions.unschedulable[job.key] = valid
        return
    parked = session.snapshot.parked.get(job.key)
    if parked is not None:  # no room for it last time, and none freed since (``cache.parked``)
        session.decisions.unschedulable[job.key], session.attempt(job).short = parked
        return
    jobs.append(job)


def execute(session: Session) -> None:
    queues = session.snapshot.queues
    jobs = _candidates(session)
    overused: set[str] = set()

    def skip(name: str) -> bool:
        if session.overused(queues[name]):
            overused.add(name)
            return True
        return False

    served: list[JobInfo] = []
    for job in jobs_by_queue(session, jobs, skip):
        served.append(job)
        with session.working_on(job):
            place_job(session, job, [g for g in job.groups if not g.best_effort])
    for job in served:
        with session.working_on(job):
            if session.job_ready(job):
                place_job(session, job, [g for g in job.groups if not g.best_effort], gang=False)
    for job in jobs:
        attempt = session.attempt(job)
        if attempt.failure is not None:
            code = Code.WAIT if attempt.pipelined else (
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE if attempt.unresolvable else Code.UNSCHEDULABLE)
            session.decisions.unschedulable[job.key] = Status(code, (attempt.failure,), NAME)
        elif job.queue in overused and job not in served:
            attempt.failure = Reason.of(ReasonCode.QUEUE_OVERUSED, queue=job.queue)
            session.decisions.unschedulable[job.key] = Status(Code.UNSCHEDULABLE, (attempt.failure,), NAME)
