"""``reclaim``: a queue below its deserved share takes resources back from queues above theirs
(Volcano's reclaim action).

Who calls it: the session runner, when ``reclaim`` is in the configuration's action list.

For each starving job (gang not met, highest priority first, ``preemptionPolicy: Never`` jobs excluded)
whose queue stays within its deserved share once the gang is placed (allocated + what the gang still
needs ≤ deserved, in every resource the gang asks for: Volcano's ``preemptive`` check; deserved comes
from ``proportion``, without it reclaim does nothing), the victims may be running pods of jobs in *other*
queues that are ``reclaimable`` and above their deserved share, with a job priority not above the
reclaimer's, that every ``evictable`` plugin allows. A unit is taken only while its queue is still above
its deserved share. Together these make reclaim converge: a reclaimer never ends above its share, so
what it took is never reclaimed back (no ping-pong between two queues). Victims are chosen by
``scheduler.engine.eviction`` (gang- and topology-aware, minimal); the reclaimer's pods bind in the same cycle,
after the evictions.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from hetsched.scheduler.contract.snapshot import JobInfo, QueueInfo, deserved_share
from hetsched.scheduler.engine.eviction import Unit, evict_for, starving
from hetsched.scheduler.engine.session import Session

NAME = "reclaim"
_EPS = 1e-6


def _share(queue: QueueInfo) -> float:
    assert queue.deserved is not None
    return deserved_share(queue.allocated, queue.deserved)


def _above(session: Session, queue: QueueInfo, reclaimer: str) -> bool:
    """May ``queue`` give back to ``reclaimer``'s queue (``proportion``: another queue, reclaimable, above its
    deserved share)? Asked of every plugin with ``enableReclaimable``."""
    return session.reclaimable(queue, session.snapshot.queues[reclaimer])


def _within_deserved(queue: QueueInfo, job: JobInfo) -> bool:
    """Would ``queue`` stay within its deserved share with ``job``'s gang placed (the resources it asks for)?"""
    assert queue.deserved is not None
    need = np.maximum(job.min_resources - job.allocated, 0.0)
    asked = need > 0
    return bool(np.all(queue.allocated[asked] + need[asked] <= queue.deserved[asked] + _EPS))


def _unit_allowed(session: Session, reclaimer: str, unit: Unit) -> bool:
    """Take the unit only while its queue is still above its deserved share."""
    return _above(session, session.snapshot.queues[session.snapshot.jobs[unit[0].job].queue], reclaimer)


def execute(session: Session) -> None:
    queues = session.snapshot.queues
    if any(q.deserved is None for q in queues.values()):
        return  # no deserved shares (proportion is off): nothing is "above its share"
    jobs = session.snapshot.jobs
    for job in starving(session):
        mine = job.queue
        if session.occupied(job) + session.pipelined_pods(job) >= job.min_member or _share(queues[mine]) >= 1.0 - _EPS \
                or not _within_deserved(queues[mine], job):
            continue
        candidates = [
            pod for pod in session.snapshot.running
            if _above(session, queues[jobs[pod.job].queue], mine) and jobs[pod.job].priority <= job.priority
        ]
        if candidates:
            with session.working_on(job):
                evict_for(session, NAME, job, candidates,
                          f"reclaimed by queue {mine} (below its deserved share) for {job.key}",
                          partial(_unit_allowed, session, mine))
