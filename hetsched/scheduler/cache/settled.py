"""Settled jobs: the records a snapshot reuses instead of rebuilding, and what they add to their queues.

Who calls it: before each snapshot the cache (``cache.routing``) hands over every PodGroup key an event
touched — the group or one of its pods, ``Groups.changed`` — (:meth:`SettledJobs.touched`: its record is
dropped and the key marked for building); the snapshot builder (``cache.build``) reuses every stored
record, builds only the marked keys, and stores the records of jobs that just settled.

A job is *settled* when a session has nothing to do for it: no pending pod, phase Running, its gang
``Scheduled`` and not ``Unschedulable`` (``is_settled``). At 100,000 running pods nearly every job is
settled, and rebuilding them was most of a cycle; a busy cycle now builds only the jobs that changed.

Invariants: a stored record is identical to what ``build.jobs`` would build now, because every input it
reads is either the group (any change touches it) or cache-wide (priority classes, the resource index:
their change calls :meth:`SettledJobs.clear`). Records are shared between snapshots, so sessions change
only copies (``Snapshot.own``). ``allocated_by_queue`` is the exact integer sum of the stored jobs'
allocations per queue (integer milli-units: adding and taking back never drifts).
"""

from __future__ import annotations

from hetsched.scheduler.contract.arrays import IntArray
from hetsched.scheduler.contract.snapshot import JobInfo


def is_settled(job: JobInfo) -> bool:
    if job.groups or job.phase != "Running" or job.ready < job.min_member or job.ready <= 0:
        return False
    types = {c.type for c in job.podgroup.status.conditions}
    return "Scheduled" in types and "Unschedulable" not in types


class SettledJobs:
    def __init__(self) -> None:
        self.jobs: dict[str, JobInfo] = {}
        self._held: dict[str, IntArray] = {}
        """Key → the integer allocation it added to its queue's sum."""
        self.allocated_by_queue: dict[str, IntArray] = {}
        self.jobs_by_queue: dict[str, int] = {}
        self.epoch = 0
        """Counts snapshots: the records change only while one is taken (a snapshot reads them, uncopied,
        until the next)."""
        self.unsettled: dict[str, None] = {}
        """PodGroup keys to build at the next snapshot (an ordered set): every key an event touched since it
        was last found settled. A key whose group is gone leaves at the next build."""

    def put(self, job: JobInfo, allocated: IntArray) -> None:
        job.shared = True
        self.jobs[job.key] = job
        held = allocated.copy()
        self._held[job.key] = held
        total = self.allocated_by_queue.get(job.queue)
        self.allocated_by_queue[job.queue] = held.copy() if total is None else total + held
        self.jobs_by_queue[job.queue] = self.jobs_by_queue.get(job.queue, 0) + 1

    def drop(self, key: str) -> None:
        job = self.jobs.pop(key, None)
        if job is None:
            return
        held = self._held.pop(key)
        self.allocated_by_queue[job.queue] = self.allocated_by_queue[job.queue] - held
        self.jobs_by_queue[job.queue] -= 1
        if not self.jobs_by_queue[job.queue]:
            del self.jobs_by_queue[job.queue], self.allocated_by_queue[job.queue]

    def touched(self, key: str) -> None:
        """An event touched the group ``key`` or one of its pods: build it at the next snapshot."""
        self.drop(key)
        self.unsettled[key] = None

    def clear(self) -> None:
        """Something every record reads changed (priority classes, the resource index): rebuild all. New
        containers, not cleared ones: a snapshot taken before still reads the records it was taken with."""
        self.unsettled.update(dict.fromkeys(self.jobs))
        self.jobs = {}
        self._held = {}
        self.allocated_by_queue = {}
        self.jobs_by_queue = {}
