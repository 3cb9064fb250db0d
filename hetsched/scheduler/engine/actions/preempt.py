"""``preempt``: inside a queue, a starving gang evicts lower-priority work (Volcano's preempt action).

Who calls it: the session runner, when ``preempt`` is in the configuration's action list (typically
``enqueue, allocate, preempt, reclaim, backfill``).

For each starving job (gang not met, highest priority first; ``preemptionPolicy: Never`` jobs never
preempt), the victims may be any running pods of *other* jobs in the *same* queue whose job priority is
strictly lower, and that every ``evictable`` plugin allows (``conformance`` protects critical pods); a
victim unit goes only while every ``preemptable_victims`` plugin agrees (``extender``).
Victims are chosen by ``scheduler.engine.eviction``: whole gangs or pods above minMember, cheapest first, only
as many as the gang needs, and only if a legal placement (chips included) results; otherwise nothing is
evicted. The preemptor's pods bind in the same cycle, after the evictions.
"""

from __future__ import annotations

from functools import partial

from hetsched.scheduler.engine.eviction import evict_for, starving
from hetsched.scheduler.engine.session import Session

NAME = "preempt"


def execute(session: Session) -> None:
    jobs = session.snapshot.jobs
    for job in starving(session):
        if session.occupied(job) + session.pipelined_pods(job) >= job.min_member:
            continue  # an earlier eviction in this cycle already made room
        candidates = [
            pod for pod in session.snapshot.running
            if pod.job != job.key and jobs[pod.job].queue == job.queue and jobs[pod.job].priority < job.priority
        ]
        if candidates:
            with session.working_on(job):
                evict_for(session, NAME, job, candidates,
                          f"preempted by {job.key} (priority {job.priority}) in queue {job.queue}",
                          partial(session.preemptable_victims, preemptor=job))
