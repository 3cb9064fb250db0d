"""The waiting line: every job that waits, in the order the scheduler serves it, with why it waits.

Who calls it: ``hetsched pending`` (on a real cluster or the embedded one), like Kueue's pending-workloads
view. It opens a read-only session on a snapshot — the configured plugins' queue and job order, exactly as
``allocate`` ranks them this cycle — and changes nothing.

- Queues are ranked as ``allocate`` serves them now (queue priority, then the ``proportion`` share …);
  allocate re-ranks after each job it places, so the queue rank is the order of the next turn, not a promise.
- Within a queue, a job's position is its place in the session's job order (``gang``, ``priority``,
  ``drf``, … then creation time): the first is served first.
- A job waits when it is not admitted yet (``Pending``), admitted but not placed (``Inqueue``), or running
  with pods still pending (a gang short of a lost pod, an elastic job growing).
- Why: the PodGroup's ``Unschedulable`` condition (what the last cycle said), else the queue's state.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsched.scheduler.contract.reasons import queue_state_reason, render
from hetsched.scheduler.contract.snapshot import JobInfo, Snapshot
from hetsched.scheduler.engine.conf import SchedulerConf
from hetsched.scheduler.engine.session import PluginSessionError, Session


@dataclass(frozen=True)
class Waiting:
    job: str
    """``namespace/podgroup``."""
    queue: str
    queue_rank: int
    """1 = the queue allocate serves first now."""
    position: int
    """1 = served first within its queue."""
    phase: str
    priority: int
    pending: int
    """Pods waiting to be placed (0 for a job not admitted yet: its pods are made once it is)."""
    min_member: int
    ready: int
    created: float
    why: str


def waits(job: JobInfo) -> bool:
    return job.phase in ("Pending", "Inqueue") or (job.phase == "Running" and job.pending_count > 0)


def waiting_line(snapshot: Snapshot, conf: SchedulerConf, now: float = 0.0) -> tuple[list[Waiting], list[str]]:
    """The waiting jobs, by queue rank then position; and notes (a plugin left out because it raised)."""
    notes: list[str] = []
    without: set[str] = set()
    while True:  # a plugin that raises opening a session is left out, and said so (as the runner does)
        try:
            session = Session(snapshot, conf, now=now, without=without)
            break
        except PluginSessionError as exc:
            without.add(exc.plugin.NAME)
            notes.append(f"plugin {exc.plugin.NAME} raised opening the session ({type(exc.error).__name__}: "
                         f"{exc.error}); ordered without it")
    by_queue: dict[str, list[JobInfo]] = {}
    for job in snapshot.jobs.values():
        if waits(job):
            by_queue.setdefault(job.queue, []).append(job)
    known = [q for q in snapshot.queues.values() if q.name in by_queue]
    ranked = [q.name for q in sorted(known, key=session.queue_order_key)]
    ranked += sorted(set(by_queue) - set(ranked))  # a queue that does not exist: last
    line: list[Waiting] = []
    for rank, name in enumerate(ranked, start=1):
        queue = snapshot.queues.get(name)
        for position, job in enumerate(sorted(by_queue[name], key=session.job_order_key), start=1):
            said = next((c.message for c in job.podgroup.status.conditions if c.type == "Unschedulable"
                         and c.message), "")
            if not said and (queue is None or queue.state != "Open"):
                said = render(queue_state_reason(name, queue.state if queue is not None else "NotFound"))
            line.append(Waiting(job.key, name, rank, position, job.phase, job.priority, job.pending_count,
                                job.min_member, job.ready, job.created, said or "not tried yet"))
    return line, notes
