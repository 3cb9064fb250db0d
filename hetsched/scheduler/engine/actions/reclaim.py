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
ping-pong between two queues). Without deserved shares (neither ``proportion`` nor ``capacity``) only guests
are reclaimed.

Guests (``Session.guests``): the jobs of a queue whose budget is used up with ``whenExhausted: Idle``
(``QueueUsage``) run only on capacity no other queue asked for; any other queue's starving job, within its
capability and not itself held by a used-up budget, may reclaim them whatever its share and priority, and
they are the first victims tried.

Victims are chosen by ``scheduler.engine.eviction`` (gang- and topology-aware, minimal); the reclaimer's
pods bind in the same cycle, after the evictions.
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
    """Take the unit only while it is a guest, or its queue may still give it back, as things stand now."""
    if unit[0].job in session.guests():
        return True
    queue = session.snapshot.queues[session.snapshot.jobs[unit[0].job].queue]
    return _above(session, queue, job.queue) and session.reclaimable_victims(unit, job)


def execute(session: Session) -> None:
    queues = session.snapshot.queues
    shares = all(q.deserved is not None for q in queues.values())  # else nothing is "above its share"
    guest_jobs = session.guests()
    guests = {pod.key: guest_jobs[pod.job] for pod in session.snapshot.running
              if pod.job in guest_jobs} if guest_jobs else {}  # the running pods are built only when needed
    if not shares and not guests:
        return
    for job in starving(session):
        mine = job.queue
        if session.occupied(job) + session.pipelined_pods(job) >= job.min_member or session.overused(queues[mine]) \
                or any(session.budget_idle(queues[mine], g) for g in job.groups if g.pending):
            continue
        with session.working_on(job):
            _reclaim_for(session, job, shares and session.preemptive(queues[mine], job), guests)


def _reclaim_for(session: Session, job: JobInfo, shared: bool, guests: dict[str, str]) -> None:
    """Guests first, on their own: what they hold nobody asked for, so the reclaimer may take it beyond its
    deserved share (as ``allocate`` lends); then, when the queue may reclaim by share, guests and queues above
    their deserved share together, the reclaimer staying within its own."""
    jobs, queues, mine = session.snapshot.jobs, session.snapshot.queues, job.queue
    visiting = [pod for pod in session.snapshot.running if pod.key in guests and jobs[pod.job].queue != mine]
    if visiting:
        lenders = ", ".join(sorted({guests[pod.key] for pod in visiting}))
        session.lending = True
        try:
            if evict_for(session, NAME, job, visiting, f"reclaimed by queue {mine} for {job.key}: queue {lenders} "
                         f"has used its budget and runs only on idle capacity"):
                return
        finally:
            session.lending = False
    if not shared:
        return
    candidates = [pod for pod in session.snapshot.running if jobs[pod.job].queue != mine and (
        pod.key in guests or (_above(session, queues[jobs[pod.job].queue], mine)
                              and jobs[pod.job].priority <= job.priority))]
    if candidates:
        evict_for(session, NAME, job, candidates, f"reclaimed by queue {mine} (below its deserved share) for {job.key}",
                  partial(_unit_allowed, session, job))
