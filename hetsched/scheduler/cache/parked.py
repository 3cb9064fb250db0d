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
  parked only when nothing that could free room for it happened since its snapshot, and the job did not
  change; in a cycle that kept a reservation (a pipelined or reserved gang holds room without a pod there,
  and may drop it next cycle without any event), only when the gang bound below holds. What it was parked
  with is its status and how many pods its gang was short, so its condition does not change while it is
  parked.
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
- **Gang bound.** A gang of one kind of pod (one task group, no best-effort pods, no per-task minimum, no
  network bound) needs ``minMember`` less its running pods placed, each on a node with room for it. It is
  parked owing pods on two counts, each a necessary condition for it to fit, and released only when
  neither is owed:
  - *by count*: what it needs less the pods all nodes' room in the cache holds (each node's room divided
    by one pod's request, whatever the predicates say) — counted when it is parked, so whatever happened
    since its snapshot counts; each freeing pays what it adds to that node's count;
  - *by its attempt*: placement takes ``min(wanted, Σ per-node capacity)`` of one task group, so the pods
    its attempt was short are exactly what the session's device- and predicate-aware capacity lacked.
    Room freed after the snapshot pays, and each later freeing, as many pods as the node's room then
    holds (an upper bound on the node's capacity after it), each node at most its largest such count.
    Not used when a reservation was kept in the cycle: a pipelined or reserved gang holds room the cache
    does not count.
  Freed room is taken again by other jobs, so once nothing is owed the count is checked against the
  cache's room when the next snapshot is taken: still short, the job stays parked owing the difference.
  In a full cluster one finished 8-chip pod no longer wakes every 64-chip gang.
- While parked, ``allocate`` does not try the job and reports its last status again, so its condition and
  ``explain`` stay as they were. Preemption and reclaim still see it.
- A job parked for ``MAX_PARKED`` seconds (the runner's injected clock) is tried again whatever happened, as
  kube-scheduler flushes its unschedulable queue after five minutes: should an event that frees room ever go
  unrecognised, a job waits five minutes longer than it had to, never forever.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from hetsched.scheduler.contract.arrays import IntArray
from hetsched.scheduler.contract.reasons import ReasonCode
from hetsched.scheduler.contract.status import Code, Status

if TYPE_CHECKING:
    from hetsched.scheduler.contract.snapshot import JobInfo, Snapshot

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

_MANY = np.iinfo(np.int64).max // 4


class ParkedJobs:
    def __init__(self, rooms: Callable[[], IntArray] | None = None) -> None:
        self.rooms = rooms
        """Resource × node: each node's room now (allocatable less what its pods hold, terminating pods'
        share counted as free), for the gang bound; None: no bound (every job waits for the first room
        that could hold one of its pods)."""
        self.room = 0
        """Counts the events that may have freed room or changed what fits."""
        self.jobs: dict[str, Parked] = {}
        """PodGroup key → the status it was parked with, and how many pods its gang was short."""
        self.asks: dict[str, list[IntArray]] = {}
        """PodGroup key → one pod's request per task group of the parked job (what a node must be able to
        hold for room freed there to matter to it)."""
        self.owed: dict[str, Owed] = {}
        """PodGroup key → for a gang-bound job, what freed room still owes it (see the gang bound above)."""
        self.check: set[str] = set()
        """Gang-bound jobs owed nothing any more: checked against the cache's room at the next snapshot."""
        self.moved: set[str] = set()
        """Keys whose pods or PodGroup spec changed since the last snapshot."""
        self.since: dict[str, float] = {}
        """PodGroup key → when it was parked (the runner's clock)."""
        self.log: list[tuple[int, int, IntArray | None]] = []
        """Room events since the last snapshot: (``room`` after it, the node row where room was freed, the
        room then on that node; None: anything may have changed)."""
        self.log_start = 1
        """The ``room`` value of the first event the log holds (earlier ones were trimmed at a snapshot)."""
        self._matrix: tuple[list[str], IntArray] | None = None

    def freed(self) -> None:
        """Something may have made room anywhere or changed what fits: every parked job is tried again."""
        self._note(None)
        self.jobs.clear()
        self.asks.clear()
        self.owed.clear()
        self.check.clear()
        self.since.clear()
        self._matrix = None

    def freed_on(self, row: int, room: IntArray, freed: IntArray) -> None:
        """``freed`` was freed on node ``row``, which now has ``room`` (vectors of its own, kept): the parked
        jobs with a pod that room could hold are tried again — a gang-bound one once nothing is owed to it."""
        self._note(room, row)
        if not self.jobs:
            return
        for key, (after, added) in self._holdable(room, freed).items():
            owed = self.owed.get(key)
            if owed is None:
                self._release(key)
                continue
            owed.by_count -= added
            if owed.by_attempt is not None:
                owed.by_attempt -= owed.credit(row, after)
            if owed.by_count <= 0 and (owed.by_attempt is None or owed.by_attempt <= 0):
                self.check.add(key)

    def touched(self, key: str) -> None:
        """The job's own pods or spec changed: it is tried again."""
        self.moved.add(key)
        self._release(key)

    def expire(self, now: float) -> None:
        """Release the jobs parked for ``MAX_PARKED`` seconds or longer (the runner calls it before each cycle)."""
        for key in [k for k, at in self.since.items() if now - at >= MAX_PARKED]:
            self._release(key)

    def for_snapshot(self) -> dict[str, Parked]:
        if self.check:
            rooms = self.rooms() if self.rooms is not None else None
            for key in list(self.check):  # releasing one discards it from the set
                owed = self.owed.get(key)
                if owed is None or rooms is None:
                    self._release(key)
                    continue
                short = owed.needed - _pods(rooms, self.asks[key][0])
                if short > 0:
                    owed.by_count = short  # the room freed was taken again: still short by count
                else:
                    self._release(key)
            self.check.clear()
        self.moved.clear()
        self.log.clear()  # a snapshot taken now has seen every room event so far
        self.log_start = self.room + 1
        return dict(self.jobs)

    def park(self, snapshot: Snapshot, unschedulable: dict[str, Status], shortfalls: dict[str, int | None],
             now: float) -> None:
        """After the cycle on ``snapshot`` (at ``now``): park the jobs ``allocate`` found no room for, unless
        room that matters to them may have been freed, or the job changed, since the snapshot was taken."""
        since = self._since(snapshot.room)
        active = snapshot.active
        rooms: IntArray | None = None
        # a reservation kept in the cycle (a pipelined or reserved gang) held room the cache does not count:
        # a gang's shortfall then says less about the room there is
        kept = any(status.code is Code.WAIT for status in unschedulable.values())
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
            owed: Owed | None = None
            needed = _gang_needs(job) if self.rooms is not None else None
            if needed is not None and self.rooms is not None:
                rooms = self.rooms() if rooms is None else rooms
                owed = Owed(needed, needed - _pods(rooms, asks[0]), None)
                short = shortfalls.get(key)
                if short is not None and since is not None and not kept:
                    owed.by_attempt = short - sum(owed.credit(row, _pods(room[:, None], asks[0]))
                                                  for row, room in since)
                if owed.by_count <= 0 and (owed.by_attempt is None or owed.by_attempt <= 0):
                    owed = None  # there may be room for it now: only the per-pod rule
            # unbounded, it is parked unless room one of its pods could use was freed after the snapshot, or
            # a reservation kept in the cycle may have held the room it lacked (and may be gone next cycle
            # without any event)
            if owed is None and (kept or since is None
                                 or any(_pods(room[:, None], ask) for _, room in since for ask in asks)):
                continue
            self.jobs[key] = (status, shortfalls.get(key))
            self.asks[key] = asks
            if owed is not None:
                self.owed[key] = owed
            self.since[key] = now
            self._matrix = None

    # ----------------------------------------------------------------------------- internals

    def _note(self, room: IntArray | None, row: int = -1) -> None:
        self.room += 1
        if len(self.log) >= MAX_LOG:
            self.log = [(self.room, -1, None)]
        else:
            self.log.append((self.room, row, room))

    def _since(self, seen: int) -> list[tuple[int, IntArray]] | None:
        """Each node row where room was freed after a snapshot taken at ``room`` = ``seen``, with the room it
        had then; None when that is unknown or anything may have changed."""
        if seen == self.room:
            return []
        if seen + 1 < self.log_start:
            return None  # an older snapshot than the log covers
        freed: list[tuple[int, IntArray]] = []
        for seq, row, room in self.log:
            if seq <= seen:
                continue
            if room is None:
                return None
            freed.append((row, room))
        return freed

    def _release(self, key: str) -> None:
        if self.jobs.pop(key, None) is not None:
            self._matrix = None
        self.asks.pop(key, None)
        self.owed.pop(key, None)
        self.check.discard(key)
        self.since.pop(key, None)

    def _holdable(self, room: IntArray, freed: IntArray) -> dict[str, tuple[int, int]]:
        """Parked jobs with a pod request ``room`` covers → how many of those pods it holds, and how many more
        than before ``freed`` was freed (the most over the job's task groups), in one vectorised division."""
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
            return {}
        if matrix.shape[1] > len(room):  # a resource the node table does not know yet: release all
            return dict.fromkeys(keys, (_MANY, _MANY))
        after = _each(room[:, None], matrix.T)
        width = min(len(room), len(freed))
        before = room.copy()
        before[:width] -= freed[:width]
        before = _each(before[:, None], matrix.T)
        holdable: dict[str, tuple[int, int]] = {}
        for i in np.flatnonzero(after > 0).tolist():
            held, added = holdable.get(keys[i], (0, 0))
            holdable[keys[i]] = (max(held, int(after[i])), max(added, int(after[i] - before[i])))
        return holdable


@dataclass(slots=True)
class Owed:
    """What freed room still owes a gang-bound parked job, in pods (see the gang bound above)."""

    needed: int
    """Pods it must place (``minMember`` less its running pods)."""
    by_count: int
    """Pods the cache's room, counted by resources alone, lacks."""
    by_attempt: int | None
    """Pods its attempt's device- and predicate-aware capacity lacked, less the room freed since (None: not
    known, or not trusted)."""
    paid: dict[int, int] = field(default_factory=dict)
    """Node row → the most pods room freed there has paid ``by_attempt``: a node's capacity now is at most
    the most its room held after any freeing since (room is only taken in between), so a node pays its
    largest count once, not every freeing's."""

    def credit(self, row: int, pods: int) -> int:
        """What room freed on node ``row``, now holding ``pods`` pods, pays beyond what that node paid."""
        paid = self.paid.get(row, 0)
        if pods <= paid:
            return 0
        self.paid[row] = pods
        return pods - paid


def _gang_needs(job: JobInfo) -> int | None:
    """How many pods a gang of one kind of pod must still place (None: the gang bound does not apply)."""
    if len(job.groups) != 1 or job.min_task_member or job.subgroups or job.podgroup.spec.networkTopology:
        return None
    if job.groups[0].best_effort:
        return None
    needed = job.min_member - job.ready
    return needed if needed > 0 else None


def _pods(rooms: IntArray, ask: IntArray) -> int:
    """How many pods asking ``ask`` the nodes' ``rooms`` (resources × nodes) hold, all nodes together."""
    if len(ask) > len(rooms):
        return _MANY  # a resource the node table does not know yet
    columns = np.flatnonzero(ask)  # only the resources it asks for (every pod asks a pod slot)
    if not columns.size:
        return _MANY
    per = (rooms[columns] // ask[columns, None]).min(axis=0)
    return int(np.maximum(per, 0).sum())


def _each(rooms: IntArray, asks: IntArray) -> IntArray:
    """Per column of ``rooms`` × ``asks`` (resources × n, broadcast; as many rows in ``asks`` as in ``rooms``
    or fewer): how many pods asking that column's request that column's room holds (0 if none)."""
    width = asks.shape[0]
    asked = asks > 0
    per: IntArray = np.where(asked, rooms[:width] // np.maximum(asks, 1), _MANY).min(axis=0)
    return np.maximum(per, 0, out=per)
