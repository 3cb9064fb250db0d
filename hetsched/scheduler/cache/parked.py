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
- Every parked job is released by any event that may change what fits: a failed bind, any node, device
  ConfigMap, HyperNode, queue, PriorityClass or budget event. A job's own pods or its PodGroup's spec
  changing release that job. A PodGroup status written by the scheduler releases nothing.
- A pod that held room on a node leaving, or changing its state (terminating, finished) or requests — not a
  status update, nor the store confirming the scheduler's own bind — frees room on that node only
  (:meth:`ParkedJobs.freed_on`, kube-scheduler's queueing hints): it releases the parked jobs with a pod
  that the node's room now (allocatable less what its pods hold, a terminating pod's share counted as free)
  could hold. Where that room holds none of a job's pods, the node held none before either, so the number
  of its pods each node can take — all that placement, a HyperNode's room and a gang's count read — is
  unchanged, and the job would fail the same way. Only the node counts in its last message may be stale
  until it is tried again. A pod with affinity, anti-affinity or spread rules leaving releases every parked
  job: its rules may have kept pods off other nodes.
- While parked, ``allocate`` does not try the job and reports its last status again, so its condition and
  ``explain`` stay as they were. Preemption and reclaim still see it.
- A job parked for ``MAX_PARKED`` seconds (the runner's injected clock) is tried again whatever happened, as
  kube-scheduler flushes its unschedulable queue after five minutes: should an event that frees room ever go
  unrecognised, a job waits five minutes longer than it had to, never forever.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.scheduler.contract.arrays import IntArray
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


MAX_LOG = 1024
"""Room events remembered between two snapshots; beyond that they count as one event that frees everything."""


class ParkedJobs:
    def __init__(self) -> None:
        self.room = 0
        """Counts the events that may have freed room or changed what fits."""
        self.jobs: dict[str, Parked] = {}
        """PodGroup key → the status it was parked with, and how many pods its gang was short."""
        self.asks: dict[str, list[IntArray]] = {}
        """PodGroup key → one pod's request per task group of the parked job (what a node must be able to
        hold for room freed there to matter to it)."""
        self.moved: set[str] = set()
        """Keys whose pods or PodGroup spec changed since the last snapshot."""
        self.since: dict[str, float] = {}
        """PodGroup key → when it was parked (the runner's clock)."""
        self.log: list[tuple[int, IntArray | None]] = []
        """Room events since the last snapshot: (``room`` after it, the room then on the node where it was
        freed; None: anything may have changed)."""
        self.log_start = 1
        """The ``room`` value of the first event the log holds (earlier ones were trimmed at a snapshot)."""
        self._matrix: tuple[list[str], IntArray] | None = None

    def freed(self) -> None:
        """Something may have made room anywhere or changed what fits: every parked job is tried again."""
        self._note(None)
        self.jobs.clear()
        self.asks.clear()
        self.since.clear()
        self._matrix = None

    def freed_on(self, room: IntArray) -> None:
        """Room was freed on a node, which now has ``room`` (a vector of its own, kept): the parked jobs with a
        pod that room could hold are tried again."""
        self._note(room)
        if not self.jobs:
            return
        for key in self._holdable(room):
            self._release(key)

    def touched(self, key: str) -> None:
        """The job's own pods or spec changed: it is tried again."""
        self.moved.add(key)
        self._release(key)

    def expire(self, now: float) -> None:
        """Release the jobs parked for ``MAX_PARKED`` seconds or longer (the runner calls it before each cycle)."""
        for key in [k for k, at in self.since.items() if now - at >= MAX_PARKED]:
            self._release(key)

    def for_snapshot(self) -> dict[str, Parked]:
        self.moved.clear()
        self.log.clear()  # a snapshot taken now has seen every room event so far
        self.log_start = self.room + 1
        return dict(self.jobs)

    def park(self, snapshot: Snapshot, unschedulable: dict[str, Status], shortfalls: dict[str, int | None],
             now: float) -> None:
        """After the cycle on ``snapshot`` (at ``now``): park the jobs ``allocate`` found no room for, unless
        room that matters to them may have been freed, or the job changed, since the snapshot was taken."""
        since = self._since(snapshot.room)
        if since is None:
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
            asks = [group.request for group in job.groups]
            if any(_holds(room, ask) for room in since for ask in asks):
                continue  # room it could use was freed after the snapshot: try it next cycle
            self.jobs[key] = (status, shortfalls.get(key))
            self.asks[key] = asks
            self.since[key] = now
            self._matrix = None

    # ----------------------------------------------------------------------------- internals

    def _note(self, room: IntArray | None) -> None:
        self.room += 1
        if len(self.log) >= MAX_LOG:
            self.log = [(self.room, None)]
        else:
            self.log.append((self.room, room))

    def _since(self, seen: int) -> list[IntArray] | None:
        """The room on each node where room was freed after a snapshot taken at ``room`` = ``seen``; None when
        that is unknown or anything may have changed (then nothing is parked)."""
        if seen == self.room:
            return []
        if seen + 1 < self.log_start:
            return None  # an older snapshot than the log covers
        freed: list[IntArray] = []
        for seq, room in self.log:
            if seq <= seen:
                continue
            if room is None:
                return None
            freed.append(room)
        return freed

    def _release(self, key: str) -> None:
        if self.jobs.pop(key, None) is not None:
            self._matrix = None
        self.asks.pop(key, None)
        self.since.pop(key, None)

    def _holdable(self, room: IntArray) -> list[str]:
        """Parked jobs with a pod request ``room`` covers, in one vectorised comparison."""
        if self._matrix is None:
            keys = [key for key, asks in self.asks.items() for _ in asks]
            width = max((len(ask) for asks in self.asks.values() for ask in asks), default=0)
            matrix = np.zeros((len(keys), width), dtype=np.int64)
            row = 0
            for asks in self.asks.values():
                for ask in asks:
                    matrix[row, :len(ask)] = ask
                    row += 1
            self._matrix = (keys, matrix)
        keys, matrix = self._matrix
        if not keys:
            return []
        if matrix.shape[1] > len(room):
            return list(dict.fromkeys(keys))  # a resource the node table does not know yet: release all
        fits = (matrix <= room[:matrix.shape[1]]).all(axis=1)
        return list(dict.fromkeys(keys[i] for i in np.flatnonzero(fits).tolist()))


def _holds(room: IntArray, ask: IntArray) -> bool:
    """Could a node with ``room`` free hold one pod asking ``ask``?"""
    if len(ask) > len(room):
        return True
    return bool((ask <= room[:len(ask)]).all())
