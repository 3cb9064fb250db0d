"""``reclaim``: a queue below its deserved share takes resources back from queues above theirs
(Volcano's reclaim action).

Who calls it: the session runner, when ``reclaim`` is in the configuration's action list.

For each starving job (gang not met, highest priority first, ``preemptionPolicy: Never`` jobs excluded)
whose queue may reclaim for it (``preemptive``, asked of the plugins: ``proportion`` — allocated + what
the gang still needs ≤ deserved in every resource it asks for, and the queue below its share; ``capacity``
— within its real capability, and within deserved in at least one of them), the victims may be running
pods of jobs in *other* queues that are ``reclaimable`` (``proportion``: above their deserved share), with
a job priority not above the reclaimer's, that every ``evictable`` plugin allows. A unit is taken only
while every ``reclaimable`` and ``reclaimable_victims`` plugin still allows it as things stand after the
units chosen before (``proportion``: its queue is still above its deserved share; ``capacity``: above
deserved in a resource the unit holds, and not below its guarantee once it goes). Together these make
reclaim converge: a reclaimer never ends above its share, so what it took is never reclaimed back (no
ping-pong between two queues). Without deserved shares (neither ``proportion`` nor ``capacity``) reclaim
does nothing. Victims are chosen by ``scheduler.engine.eviction`` (gang- and topology-aware, minimal); the
reclaimer's pods bind in the same cycle, after the evictions.
"""

from __future__ import annotations

from functools import partial

from hetsched.scheduler.contract.snapshot import JobInfo, QueueInfo
from hetsched.scheduler.engine.eviction import Unit, evict_for, starving
from hetsched.scheduler.engine.session import Session

NAME = "reclaim"


def _above(session: Session, queue: QueueInfo, reclaimer: str) -> bool:
    """May ``queue`` give back to ``reclaimer``'s queue? Asked of every plugin with ``enableReclaimable``."""
    return session.reclaimable(queue, session.snapshot.queues[reclaimer])


def _unit_allowed(session: Session, job: JobInfo, unit: Unit) -> bool:
    """Take the unit only while its queue may still give it back, as things stand now."""
    queue = session.snapshot.queues[session.snapshot.jobs[unit[0].job].queue]
    return _above(session, queue, job.queue) and session.reclaimable_victims(unit, job)


def execute(session: Session) -> None:
    queues = session.snapshot.queues
    if any(q.deserved is None for q in queues.values()):
        return  # no deserved shares (proportion is off): nothing is "above its share"
    jobs = session.snapshot.jobs
    for job in starving(session):
        mine = job.queue
        if session.occupied(job) + session.pipelined_pods(job) >= job.min_member or session.overused(queues[mine]) \
                or not session.preemptive(queues[mine], job):
            continue
        candidates = [
            pod for pod in session.snapshot.running
            if _above(session, queues[jobs[pod.job].queue], mine) and jobs[pod.job].priority <= job.priority
        ]
        if candidates:
            with session.working_on(job):
                evict_for(session, NAME, job, candidates,
                          f"reclaimed by queue {mine} (below its deserved share) for {job.key}",
                          partial(_unit_allowed, session, job))
