"""``allocate``: place pending pods of Inqueue and Running jobs, gang by gang (Volcano's allocate action).

Who calls it: the session runner. Three passes:

1. **Gangs, within shares.** Queue order (``queue_order_key``, queues at their capability skipped) → job
   (``job_order_key``) → task (``task_order_key``); each job's gang goes into one statement
   (``scheduler.engine.placement.place_job``): committed when ready, kept when pipelined, discarded otherwise.
2. **Elastic pods, within shares.** The pods beyond minAvailable of ready jobs, one pod per turn in queue
   order, each queue re-ranked after every pod (Volcano re-queues a ready job after each task): two ready
   jobs in two equal queues get a pod each, not two for the first served. With one queue only, each job's
   elastic pods go at once (the order among queues is then moot).
3. **Lending.** Jobs that stopped at their queue's bound in 1 or 2 are tried again with
   ``SessionView.lending`` set: plugins bounding a queue by its deserved share (``proportion``) lift that
   bound, keeping capability and guarantees. Every queue has had its turn within its share by then, so what is
   lent is capacity no queue in the cycle could use within its own share — work is never left waiting on
   idle capacity it fits, and what a queue holds beyond its share is what ``reclaim`` takes back.

A cycle with a time budget (``Session.out_of_time``; the ``hetsched scheduler`` process gives one) starts
no new job once it is spent, after at least one job in each pass: the rest are *deferred* to the next cycle,
which the caller runs at once — no status, no parking, and no later action (preempt, reclaim, backfill)
touches them in this cycle. A cycle thus stays short however many jobs arrive together, and the jobs are
served in the same order as without a budget.

Best-effort pods (no requests) are left to ``backfill``, as in Volcano. A job that found no room and for
which none was freed since is not tried again (``scheduler.cache.parked``): its last status stands.
"""

from __future__ import annotations

from collections.abc import Callable

from hetsched.scheduler.contract.decisions import PodGroupUpdate
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.snapshot import JobInfo, TaskGroup
from hetsched.scheduler.contract.status import Code, Status
from hetsched.scheduler.engine.actions.ordering import jobs_by_queue
from hetsched.scheduler.engine.placement import place_job
from hetsched.scheduler.engine.session import Session

NAME = "allocate"
LENT_TO = frozenset({ReasonCode.QUEUE_AT_LIMIT, ReasonCode.BUDGET_IDLE})
"""Why a job stopped that lending can help: its queue's deserved share, or its used-up ``Idle`` budget."""


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
    # its namespace may not use the queue (``api.queue_access``), or the queue's budget is used up (``Wait``)
    blocked = session.queue_forbidden(job) or session.budget_exhausted(job)
    if blocked is not None:
        session.decisions.unschedulable[job.key] = Status(Code.UNSCHEDULABLE, (blocked,), NAME)
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
    complete = True
    for job in jobs_by_queue(session, jobs, skip):
        if served and session.out_of_time():
            complete = False
            break
        served.append(job)
        with session.working_on(job):
            place_job(session, job, [g for g in job.groups if not g.best_effort])
    complete = complete and _elastic(session, [job for job in served if session.job_ready(job)], skip)
    bounded = [job for job in jobs if _at_queue_bound(session, job)]
    if bounded and complete:
        session.lending = True
        try:
            for turn, job in enumerate(jobs_by_queue(session, bounded, skip)):
                if turn and session.out_of_time():
                    complete = False
                    break
                session.attempt(job).failure = None
                with session.working_on(job):
                    place_job(session, job, [g for g in job.groups if not g.best_effort],
                              gang=not session.job_ready(job))
        finally:
            session.lending = False
    if not complete:
        _defer_rest(session, jobs, served)
    for job in jobs:
        attempt = session.attempt(job)
        if attempt.deferred:
            continue
        if attempt.failure is not None:
            code = Code.WAIT if attempt.pipelined else (
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE if attempt.unresolvable else Code.UNSCHEDULABLE)
            session.decisions.unschedulable[job.key] = Status(code, (attempt.failure,), NAME)
        elif job.queue in overused and job not in served:
            attempt.failure = Reason.of(ReasonCode.QUEUE_OVERUSED, queue=job.queue)
            session.decisions.unschedulable[job.key] = Status(Code.UNSCHEDULABLE, (attempt.failure,), NAME)


def _defer_rest(session: Session, jobs: list[JobInfo], served: list[JobInfo]) -> None:
    """The cycle's time budget ran out (``Session.out_of_time``): what allocate did not come to waits for the
    next cycle — jobs whose turn did not come, and jobs stopped at their queue's bound that lending did not
    reach — with no status, so none is parked on a verdict it never got. Each pass tries at least one job
    before it looks at the budget, so every cycle makes progress."""
    tried = {job.key for job in served}
    for job in jobs:
        if job.key not in tried or _at_queue_bound(session, job):
            session.defer(job)


def _pending(job: JobInfo) -> list[TaskGroup]:
    return [g for g in job.groups if g.pending and not g.best_effort]


def _at_queue_bound(session: Session, job: JobInfo) -> bool:
    failure = session.attempt(job).failure
    return failure is not None and failure.code in LENT_TO and bool(_pending(job))


def _elastic(session: Session, ready: list[JobInfo], skip: Callable[[str], bool]) -> bool:
    """Pass 2: elastic pods of ready jobs, one per turn in queue order when several queues want more.
    Returns False when the cycle's time budget ran out first (what is left waits for the next cycle)."""
    wanting = [job for job in ready if _pending(job)]
    if len({job.queue for job in wanting}) <= 1:
        for turn, job in enumerate(wanting):
            if turn and session.out_of_time():
                return False
            with session.working_on(job):
                place_job(session, job, _pending(job), gang=False)
        return True
    placed: dict[str, bool] = {}

    def again(job: JobInfo) -> bool:
        return placed.get(job.key, False) and bool(_pending(job))

    for job in jobs_by_queue(session, wanting, skip, again=again):
        if placed and session.out_of_time():
            return False
        group = min(_pending(job), key=session.task_order_key)
        held_back = group.pending[1:]
        del group.pending[1:]
        try:
            with session.working_on(job):
                place_job(session, job, [group], gang=False)
        finally:
            placed[job.key] = not group.pending
            group.pending.extend(held_back)
    return True
