"""``enqueue``: move Pending PodGroups to Inqueue when their minResources fit (Volcano's enqueue action).

Who calls it: the session runner, first in the default action list. Only Inqueue jobs get pods created
by the job controller and are considered by ``allocate``, so jobs that cannot run do not hoard resources.
The decision is the plugins' (``job_enqueueable``: ``overcommit`` checks cluster headroom times the
overcommit factor or what is idle now, ``proportion`` the queue's capability). Jobs of Closed or Closing
queues, of a queue that does not exist, or of one their namespace may not use (``api.queue_access``), stay
Pending with that reason; a gang larger than the whole
cluster is Unresolvable.
"""

from __future__ import annotations

import numpy as np

from hetsched.scheduler.contract.decisions import PodGroupUpdate
from hetsched.scheduler.contract.reasons import Reason, ReasonCode, queue_state_reason
from hetsched.scheduler.contract.status import Code, Status
from hetsched.scheduler.engine.actions.ordering import jobs_by_queue
from hetsched.scheduler.engine.session import Session

NAME = "enqueue"


def execute(session: Session) -> None:
    pending = [job for job in session.jobs() if job.phase == "Pending"]
    queues = session.snapshot.queues
    capacity = session.snapshot.total_capacity()
    names = session.snapshot.resources.names
    for job in jobs_by_queue(session, pending):
        with session.working_on(job):
            larger = np.flatnonzero((job.min_resources > 0) & (job.min_resources > capacity + 1e-6))
            if larger.size:  # no amount of waiting helps: say so, do not let it wait as if it could run
                amounts = tuple((names[c], int(job.min_resources[c]), int(capacity[c])) for c in larger)
                larger_than = Reason.of(ReasonCode.LARGER_THAN_CLUSTER, amounts=amounts)
                session.decisions.unschedulable[job.key] = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (larger_than,),
                                                                  NAME)
                continue
            state = queues[job.queue].state
            if state != "Open":
                closed = queue_state_reason(job.queue, state)
                session.decisions.unschedulable[job.key] = Status(Code.UNSCHEDULABLE, (closed,), NAME)
                continue
            blocked = session.queue_forbidden(job) or session.budget_exhausted(job)
            if blocked is not None:
                session.decisions.unschedulable[job.key] = Status(Code.UNSCHEDULABLE, (blocked,), NAME)
                continue
            admitted = session.job_enqueueable(job)
            if not admitted.ok:
                session.decisions.unschedulable[job.key] = admitted
                continue
            job.phase = "Inqueue"
            session.job_enqueued(job)
            session.decisions.enqueued.append(job.key)
            session.decisions.podgroups[job.key] = PodGroupUpdate("Inqueue", None)
