"""``enqueue``: move Pending PodGroups to Inqueue when their minResources fit (Volcano's enqueue action).

Who calls it: the session runner, first in the default action list. Only Inqueue jobs get pods created
by the job controller and are considered by ``allocate``, so jobs that cannot run do not hoard resources.
The decision is the plugins' (``job_enqueueable``: ``overcommit`` checks cluster headroom times the
overcommit factor, ``proportion`` the queue's capability). Jobs of Closed or Closing queues, or of a
queue that does not exist, stay Pending with that reason.
"""

from __future__ import annotations

from hetsched.scheduler.actions.ordering import jobs_by_queue
from hetsched.scheduler.decisions import PodGroupUpdate
from hetsched.scheduler.framework import Code, Status
from hetsched.scheduler.session import Session

NAME = "enqueue"


def execute(session: Session) -> None:
    pending = [job for job in session.snapshot.jobs.values() if job.phase == "Pending"]
    queues = session.snapshot.queues
    for job in jobs_by_queue(session, pending):
        state = queues[job.queue].state
        if state != "Open":
            message = f"queue {job.queue} does not exist" if state == "NotFound" else f"queue {job.queue} is {state}"
            session.decisions.unschedulable[job.key] = Status(Code.UNSCHEDULABLE, (message,), NAME)
            continue
        admitted = session.job_enqueueable(job)
        if not admitted.ok:
            session.decisions.unschedulable[job.key] = admitted
            continue
        job.phase = "Inqueue"
        session.job_enqueued(job)
        session.decisions.enqueued.append(job.key)
        session.decisions.podgroups[job.key] = PodGroupUpdate("Inqueue", None)
