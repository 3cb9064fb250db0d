"""``backfill``: place best-effort pods (no resource requests) on idle capacity (Volcano's backfill).

Who calls it: the session runner, after ``allocate``. Best-effort pods take only a pod slot, so they
never take resources a gang reserved. Pending best-effort pods count toward a gang in ``allocate`` (as
Volcano's ``IsReady``: an MPI master with no requests beside its GPU workers); here, a job whose gang is
met places the rest one by one, and any other job's gang goes through one statement in which its
best-effort pods must really be placed. A job that still cannot place them says why (``pods``: every
node's pod slots are taken, most often) — a job of best-effort pods only is never seen by ``allocate``.
"""

from __future__ import annotations

from hetsched.scheduler.contract.status import Code, Status
from hetsched.scheduler.engine.placement import place_job
from hetsched.scheduler.engine.session import Session

NAME = "backfill"


def execute(session: Session) -> None:
    jobs = [
        job for job in session.jobs()
        if job.phase in ("Inqueue", "Running") and any(g.best_effort and g.pending for g in job.groups)
    ]
    for job in sorted(jobs, key=session.job_order_key):
        groups = [g for g in job.groups if g.best_effort]
        attempt = session.attempt(job)
        attempt.best_effort_counts = False
        try:
            with session.working_on(job):
                if session.job_ready(job):
                    place_job(session, job, groups, gang=False)
                elif session.job_valid(job).ok:
                    place_job(session, job, groups)
        finally:
            attempt.best_effort_counts = True
        if attempt.failure is not None and job.key not in session.decisions.unschedulable:
            # a job of best-effort pods only never reaches allocate: its reason is this one (pod slots, most often)
            code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if attempt.unresolvable else Code.UNSCHEDULABLE
            session.decisions.unschedulable[job.key] = Status(code, (attempt.failure,), NAME)
