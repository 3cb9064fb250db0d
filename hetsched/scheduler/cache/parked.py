"""Parked jobs: gangs that found no room, not tried again until something could have made room for them.

Who calls it: the cache (``cache.routing``) on every watch event and snapshot, and the runner after each
cycle (:meth:`ParkedJobs.park`). kube-scheduler keeps unschedulable pods aside until a cluster event could
make them schedulable; Volcano retries every pending job every cycle. In a busy cluster those retries are
a large part of every cycle, and they cannot succeed: a gang that did not fit fits later only if room was
freed, the cluster changed, or the job itself changed.

Rules (the invariant is that a parked job would fail again, the same way, if tried):

- A job is parked after a cycle in which ``allocate`` found no room for it: a ``NodesUnavailable`` or
  HyperNode-room failure, not a queue limit, an admission or a pipelined wait. Jobs with pod affinity,
  anti-affinity, spread or host ports are never parked (other pods' binds change where they fit). It is
  parked only when nothing that could free room happened since its snapshot, and the job did not change.
  What it was parked with is its status and how many pods its gang was short, so its condition does not
  change while it is parked.
- Every parked job is released by any event that may free room or change what fits: a pod that held room
  leaving, or changing its node, state (terminating, finished) or requests — not a status update, nor the
  store confirming the scheduler's own bind —, a failed bind, any node, device ConfigMap, HyperNode, queue,
  PriorityClass or budget event. A job's own pods or its PodGroup's spec changing release that job. A
  PodGroup status written by the scheduler releases nothing.
- While parked, ``allocate`` does not try the job and reports its last status again, so its condition and
  ``explain`` stay as they were. Preemption and reclaim still see it.
- A job parked for ``MAX_PARKED`` seconds (the runner's injected clock) is tried again whatever happened, as
  kube-scheduler flushes its unschedulable queue after five minutes: should an event that frees room ever go
  unrecognised, a job waits five minutes longer than it had to, never forever.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetsched.scheduler.contract.reasons import ReasonCode
from hetsched.scheduler.contract.status import Code, Status

if TYPE_CHECKING:
    from hetsched.scheduler.contract.snapshot import Snapshot

Parked = tuple[Status, "int | None"]
"""The status a job was parked with, and how many pods its gang was short then (its condition says how many
pods were missing, which a cycle that does not try the job cannot know)."""
MAX_PARKED = 300.0
"""Seconds a job stays parked at most (kube-scheduler's ``podMaxInUnschedulablePodsDuration``)."""
ROOM = frozenset({ReasonCode.NODES_UNAVAILABLE, ReasonCode.NO_HYPERNODE_ROOM, ReasonCode.SUBGROUP_NO_ROOM,
                  ReasonCode.HYPERNODE_SPLIT})
"""Failures that only more room (or a changed cluster or job) can cure."""


class ParkedJobs:
    def __init__(self) -> None:
        self.room = 0
        """Counts the events that may have freed room or changed what fits."""
        self.jobs: dict[str, Parked] = {}
        """PodGroup key → the status it was parked with, and how many pods its gang was short."""
        self.moved: set[str] = set()
        """Keys whose pods or PodGroup spec changed since the last snapshot."""
        self.since: dict[str, float] = {}
        """PodGroup key → when it was parked (the runner's clock)."""

    def freed(self) -> None:
        """Something may have made room: every parked job is tried again."""
        self.room += 1
        self.jobs.clear()
        self.since.clear()

    def touched(self, key: str) -> None:
        """The job's own pods or spec changed: it is tried again."""
        self.moved.add(key)
        self.jobs.pop(key, None)
        self.since.pop(key, None)

    def expire(self, now: float) -> None:
        """Release the jobs parked for ``MAX_PARKED`` seconds or longer (the runner calls it before each cycle)."""
        for key in [k for k, at in self.since.items() if now - at >= MAX_PARKED]:
            self.jobs.pop(key, None)
            del self.since[key]

    def for_snapshot(self) -> dict[str, Parked]:
        self.moved.clear()
        return dict(self.jobs)

    def park(self, snapshot: Snapshot, unschedulable: dict[str, Status], shortfalls: dict[str, int | None],
             now: float) -> None:
        """After the cycle on ``snapshot`` (at ``now``): park the jobs ``allocate`` found no room for, unless
        room may have been freed, or the job changed, since the snapshot was taken."""
        if snapshot.room != self.room:
            return
        active = snapshot.active
        for key, status in unschedulable.items():
            if key in self.jobs or key in self.moved or status.plugin != "allocate":
                continue
            if status.code not in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE):
                continue
            if not status.reasons or status.reasons[0].code not in ROOM:
                continue
            job = active.get(key)
            if job is None or any(group.spec.pod_topology for group in job.groups):
                continue
            self.jobs[key] = (status, shortfalls.get(key))
            self.since[key] = now
