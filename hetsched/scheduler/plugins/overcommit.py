"""``overcommit``: admit a PodGroup only while the cluster has headroom for its minResources.

Who calls it: the ``enqueue`` action through ``job_enqueueable``/``job_enqueued``. Headroom, per
resource: ``allocatable × overcommit-factor − allocated − inqueue`` (Volcano's overcommit plugin); a job is
admitted when its minResources fit in every resource it names.

Work conservation: a job whose minResources fit in what nobody holds now (allocatable − allocated, less
what this cycle admitted that way) is admitted whatever the headroom says — jobs admitted earlier that
cannot be placed yet never keep capacity idle that another job could use now.

With ``preempt`` among the actions, what a job could preempt counts as headroom too: the resources held
by lower-priority jobs of its own queue (unless the job may not preempt). Otherwise a full cluster keeps a
high-priority job Pending forever — no pods, so nothing to preempt for (the chicken-and-egg of Volcano
#4151). With ``reclaim``, likewise what reclaimable queues hold above their deserved share, for a job
whose queue is below its own, and what guests hold (jobs of another queue whose ``Idle`` budget is used up,
``SessionView.guests``), for any job.

Arguments::

    - name: overcommit
      arguments: {overcommit-factor: 1.2}   # ≥ 1.0; default 1.2
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import numpy as np

from hetsched.scheduler.contract.arrays import FloatArray
from hetsched.scheduler.contract.framework import Arguments, JobEnqueue, Plugin
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.snapshot import JobInfo
from hetsched.scheduler.contract.status import Code, Status

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "overcommit"


class Overcommit(Plugin, JobEnqueue):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({"overcommit-factor"})
        self.factor = arguments.number("overcommit-factor", 1.2, minimum=1.0)
        self.headroom: FloatArray = np.zeros(0)
        self.session: SessionView | None = None

    def on_session_open(self, session: SessionView) -> None:
        capacity = session.snapshot.total_capacity().astype(np.float64)
        total = capacity * self.factor
        used = np.zeros_like(total)
        allocated = np.zeros_like(total)
        for queue in session.snapshot.queues.values():
            used += queue.allocated + queue.inqueue
            allocated += queue.allocated
        self.headroom = total - used
        self.idle = capacity - allocated
        self.resources = session.snapshot.resources
        self.session = session
        actions = session.action_names
        self.preempt = "preempt" in actions
        self.reclaim = "reclaim" in actions
        self.by_priority: dict[str, tuple[list[int], list[FloatArray]]] = {}
        """queue → (sorted job priorities, cumulative allocated up to each): what lower priorities hold."""
        if self.preempt:
            per_queue: dict[str, list[tuple[int, FloatArray]]] = {}
            for other in session.snapshot.jobs.values():
                per_queue.setdefault(other.queue, []).append((other.priority, other.allocated))
            for name, entries in per_queue.items():
                entries.sort(key=lambda e: e[0])
                cumulative, running = [], np.zeros_like(total)
                for _, allocated in entries:
                    running = running + allocated
                    cumulative.append(running)
                self.by_priority[name] = ([e[0] for e in entries], cumulative)

    def on_session_close(self, session: SessionView) -> None:
        self.session = None  # kept only while the session is open (framework.Plugin)

    def _evictable_room(self, job: JobInfo) -> FloatArray:
        """What ``job`` could take by preempt or reclaim (see the module docstring)."""
        room = np.zeros_like(self.headroom)
        if not job.preempts:
            return room
        if self.preempt and job.queue in self.by_priority:
            priorities, cumulative = self.by_priority[job.queue]
            below = bisect.bisect_left(priorities, job.priority)
            if below:
                room = room + cumulative[below - 1]
        assert self.session is not None, "asked outside a session"
        queues = self.session.snapshot.queues
        mine = queues[job.queue]
        asked = job.min_resources > 0
        if self.reclaim:  # guests (jobs of a queue whose Idle budget is used up) go for any other queue
            guests = self.session.guests()
            jobs = self.session.snapshot.jobs
            for key, lender in guests.items():
                if lender != job.queue and jobs[key].queue != job.queue:
                    room = room + jobs[key].allocated
        if self.reclaim and mine.deserved is not None and bool(np.all(  # reclaim serves it (its ``preemptive`` rule)
                mine.allocated[asked] + job.min_resources[asked] <= mine.deserved[asked] + 1e-6)):
            for queue in queues.values():
                if queue.name != job.queue and queue.reclaimable and queue.deserved is not None:
                    room = room + np.maximum(queue.allocated - queue.deserved, 0)
        return room

    def job_enqueueable(self, job: JobInfo) -> Status:
        short = np.flatnonzero((job.min_resources > 0) & (job.min_resources > self.headroom + 1e-6))
        if short.size == 0 or not np.flatnonzero((job.min_resources > 0) & (job.min_resources > self.idle + 1e-6)).size:
            return Status(Code.PERMIT, (), NAME)
        if (self.preempt or self.reclaim) and not np.flatnonzero(
                (job.min_resources > 0) & (job.min_resources > self.headroom + self._evictable_room(job) + 1e-6)).size:
            return Status(Code.PERMIT, (), NAME)
        names = self.resources.names
        amounts = tuple((names[c], int(job.min_resources[c]), int(self.headroom[c])) for c in short)
        return Status(Code.UNSCHEDULABLE, (Reason.of(ReasonCode.CLUSTER_HEADROOM, amounts=amounts,
                                                     factor=self.factor),), NAME)

    def job_enqueued(self, job: JobInfo) -> None:
        self.headroom -= job.min_resources
        self.idle -= job.min_resources
