"""``capacity``: queues with an explicit deserved share, lending what is idle and taking it back, with
guarantees reserved (Volcano's capacity plugin, its recommended replacement for ``proportion``).

Who calls it: the session, for ``queue_order_key``, ``allocatable``, ``job_enqueueable``/``job_enqueued``,
``reclaimable``, ``reclaimable_victims`` and ``preemptive``.

Per queue and resource:
- **real capability**: what the cluster has less every queue's ``guarantee``, plus the queue's own
  guarantee, capped by its ``capability`` — a guarantee is reserved: no other queue may grow into it;
- **deserved**: ``spec.deserved`` (0 where not given) capped by the real capability, and at least the
  guarantee; the queue's **share** is the largest allocated/deserved over the resources it deserves
  (1 for a queue that deserves nothing).

Rules:
- ``queue_order_key``: lowest share first; at equal shares a queue that deserves something goes first;
- ``allocatable``: the queue (and, with ``enableHierarchy``, each ancestor) stays within its real
  capability in every resource the pod asks for — beyond deserved, work conservation: idle capacity is lent;
- ``job_enqueueable``: minResources + allocated + admitted − elastic (what its running jobs hold beyond their
  minResources) within the real capability on every resource the job asks for — Permit, else Reject with
  the resources named; a job of a queue that has children (with ``enableHierarchy``) is refused;
- ``preemptive``: a queue may reclaim for a job when, with what the gang still needs, it stays within its
  real capability in every resource and within deserved in **at least one** of them (or, with
  ``ancestorReclaimLevel``, an ancestor is);
- ``reclaimable``: another queue's pods, while that queue is ``spec.reclaimable``;
- ``reclaimable_victims``: a unit may go while it shares a resource with what the reclaimer asks for, its
  queue stays at or above its guarantee in every resource without it, and the queue holds more than it
  deserves in a resource the unit holds (a unit holding nothing the queue deserves goes first); with
  ``enableHierarchy`` and ``ancestorReclaimLevel: N``, each of its ancestors up to N levels above that is not
  the reclaimer's must be above its own deserved share in such a resource too.

Hierarchy (``enableHierarchy: true``): queues form a tree by ``spec.parent`` (none, or one that does not
exist: under ``root``). The root's real capability is the cluster's (its ``capability`` where a Queue ``root``
sets one: Volcano uses that alone, with no capability meaning unbounded; hetsched bounds it by what the
cluster has so that top-level guarantees reserve); each child's is its parent's less its siblings'
guarantees (its own kept), capped by its capability; deserved is ``spec.deserved`` (at least the guarantee)
and is not capped. Jobs belong in leaf queues; a parent's allocation is what its subtree holds. Leaves are
ordered before parents, and two leaves by the shares of their ancestors where their paths part.

Arguments (Volcano's keys)::

    - name: capacity
      enableHierarchy: true        # a switch of the plugin option, as Volcano reads it
      arguments:
        ancestorReclaimLevel: 1    # 0 (default): only the victim's own queue is checked

Volcano's DRA quota dimensions (``deviceclass/…`` resources) are not supported: naming them in a Queue is
an unknown resource like any other.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from hetsched.scheduler.contract.arrays import FloatArray
from hetsched.scheduler.contract.framework import (
    Allocatable,
    Arguments,
    JobEnqueue,
    Plugin,
    Preemptive,
    QueueOrder,
    Reclaimable,
    ReclaimableVictims,
)
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.snapshot import JobInfo, QueueInfo, RunningPod, TaskGroup
from hetsched.scheduler.contract.status import Code, Status

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "capacity"
ROOT = "root"
HIERARCHY = "enableHierarchy"
LEVEL = "ancestorReclaimLevel"
DRA = ("capacity.DynamicResourceAllocationEnable", "capacity.DRAConsumableCapacityEnable")
"""Volcano's DRA quota switches: off is accepted, on is an error (hetsched allocates no ResourceClaims)."""
_EPS = 1e-6
_NO_DESERVED = math.nextafter(1.0, 2.0)
"""The order key of a queue that deserves nothing: share 1, after queues at exactly 1 that deserve something."""


class Capacity(Plugin, QueueOrder, Allocatable, JobEnqueue, Reclaimable, ReclaimableVictims, Preemptive):
    NAME = NAME
    SWITCHES = frozenset({HIERARCHY})

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({LEVEL, *DRA})
        for key in DRA:
            if arguments.flag(key, False):
                raise ValueError(f"plugin {NAME}: argument {key}: quotas on Dynamic Resource Allocation device "
                                 "classes (deviceclass/… resources) are not supported by hetsched")
        level = arguments.values.get(LEVEL, 0)
        if isinstance(level, bool) or not isinstance(level, int):
            raise ValueError(f"plugin {NAME}: argument {LEVEL} must be a whole number, got {level!r:.80}")
        self.level = max(level, 0)  # Volcano reads a negative level as 0
        self.hierarchy = bool(arguments.switches.get(HIERARCHY, False))
        if self.level and not self.hierarchy:
            raise ValueError(f"plugin {NAME}: argument {LEVEL} acts only with {HIERARCHY}: true (Volcano ignores it "
                             "without)")

    # ----------------------------------------------------------------------------------- session

    def on_session_open(self, session: SessionView) -> None:
        snapshot = session.snapshot
        self._snapshot = snapshot
        self._queues = snapshot.queues
        self._names = snapshot.resources.names
        self._pods = snapshot.resources.columns.get("pods")
        total = snapshot.total_capacity().astype(np.float64)
        self._real: dict[str, FloatArray] = {}
        self._admitted: dict[str, FloatArray] = {}
        self._elastic: dict[str, FloatArray] = {}
        for job in snapshot.jobs.values():  # running jobs' pods beyond their minResources, settled ones too
            spare = np.maximum(job.allocated - job.min_resources, 0.0)
            self._elastic[job.queue] = self._elastic.get(job.queue, 0.0) + spare
        queues = list(snapshot.queues.values())
        self._parent: dict[str, str] = {}
        self._children: dict[str, list[str]] = {}
        if self.hierarchy:
            self._tree(queues, total)
        else:
            guarantees = sum((q.guarantee for q in queues), np.zeros_like(total))
            for queue in queues:
                self._real[queue.name] = np.minimum(np.maximum(total - guarantees, 0.0) + queue.guarantee,
                                                    queue.capability)
                queue.deserved = np.maximum(np.minimum(self._spec_deserved(queue), self._real[queue.name]),
                                            queue.guarantee)

    @staticmethod
    def _spec_deserved(queue: QueueInfo) -> FloatArray:
        if queue.fixed_deserved is None:
            return np.zeros_like(queue.guarantee)
        return np.where(np.isnan(queue.fixed_deserved), 0.0, queue.fixed_deserved)

    def _tree(self, queues: list[QueueInfo], total: FloatArray) -> None:
        names = {q.name for q in queues}
        for queue in queues:
            if queue.name == ROOT:
                continue
            parent = queue.parent if queue.parent in names and queue.parent != queue.name else ROOT
            self._parent[queue.name] = parent
        for name, parent in list(self._parent.items()):  # a loop in spec.parent: the queue hangs under root
            seen, walk = {name}, parent
            while walk != ROOT:
                if walk in seen:
                    self._parent[name] = ROOT
                    break
                seen.add(walk)
                walk = self._parent.get(walk, ROOT)
        for name, parent in self._parent.items():
            self._children.setdefault(parent, []).append(name)
        root = self._queues.get(ROOT)
        self._real[ROOT] = np.minimum(total, root.capability) if root is not None else total.copy()
        deserved_root = np.zeros_like(total)
        for queue in queues:
            if queue.name != ROOT:
                queue.deserved = np.maximum(self._spec_deserved(queue), queue.guarantee)
                if self._parent[queue.name] == ROOT:
                    deserved_root = deserved_root + queue.deserved
        if root is not None:
            root.deserved = deserved_root
        pending = [ROOT]
        while pending:
            parent = pending.pop()
            children = [self._queues[c] for c in self._children.get(parent, [])]
            guarantees = sum((c.guarantee for c in children), np.zeros_like(total))
            for child in children:
                self._real[child.name] = np.minimum(
                    np.maximum(self._real[parent] - guarantees, 0.0) + child.guarantee, child.capability)
                pending.append(child.name)

    def _ancestors(self, name: str) -> list[str]:
        """Parent first, up to (not including) the root."""
        chain = []
        walk = self._parent.get(name, ROOT)
        while walk != ROOT:
            chain.append(walk)
            walk = self._parent.get(walk, ROOT)
        return chain

    def _subtree(self, name: str) -> list[str]:
        found, pending = [], [name]
        while pending:
            current = pending.pop()
            found.append(current)
            pending.extend(self._children.get(current, []))
        return found

    def _held(self, name: str) -> FloatArray:
        """What the queue holds now: its own allocation, or its subtree's for a parent."""
        if not self._children.get(name):
            return self._queues[name].allocated
        return sum((self._queues[q].allocated for q in self._subtree(name) if q in self._queues),
                   np.zeros_like(self._queues[name].allocated))

    def _admitted_in(self, name: str) -> FloatArray:
        names = self._subtree(name) if self._children.get(name) else [name]
        total = np.zeros_like(self._queues[name].allocated)
        for queue in names:
            if queue in self._queues:
                total = total + self._queues[queue].inqueue - self._elastic.get(queue, 0.0)
        return total

    def _leaf(self, name: str) -> bool:
        return not (self.hierarchy and self._children.get(name))

    def _share(self, queue: QueueInfo) -> float:
        deserved = queue.deserved
        assert deserved is not None, "capacity: deserved is computed at session open"
        held = self._held(queue.name)
        deserves = deserved > _EPS
        if not deserves.any():
            return _NO_DESERVED
        return float(np.max(held[deserves] / deserved[deserves]))

    def _limits(self, queue: QueueInfo) -> list[str]:
        """The queue and, with the hierarchy, its ancestors: whose real capability bounds it."""
        return [queue.name, *self._ancestors(queue.name)] if self.hierarchy else [queue.name]

    # ----------------------------------------------------------------------------------- points

    def queue_order_key(self, queue: QueueInfo) -> float | tuple[float, ...]:
        own = self._share(queue)
        queue.share = own
        if not self.hierarchy:
            return own
        if not self._leaf(queue.name):
            return (1.0, own)
        path = [*reversed(self._ancestors(queue.name)), queue.name]
        return (0.0, *(self._share(self._queues[name]) for name in path))

    def allocatable(self, queue: QueueInfo, group: TaskGroup, wanted: int) -> int:
        if queue.state != "Open" or not self._leaf(queue.name):
            return 0
        columns = [c for c in group.columns.tolist() if c != self._pods]
        if not columns:
            return wanted
        request = group.request[columns].astype(np.float64)
        for name in self._limits(queue):
            real = self._real.get(name)
            if real is None:
                continue
            bound = real[columns]
            finite = np.isfinite(bound)
            room = (bound[finite] - self._held(name)[columns][finite] + _EPS) // request[finite]
            wanted = int(max(0, min(wanted, room.min(initial=wanted))))
        return wanted

    def job_enqueueable(self, job: JobInfo) -> Status:
        queue = self._queues[job.queue]
        if not self._leaf(queue.name):
            return Status(Code.UNSCHEDULABLE, (Reason.of(ReasonCode.QUEUE_NOT_LEAF, queue=queue.name),), NAME)
        asked = job.min_resources > 0
        if not asked.any():
            return Status(Code.PERMIT, (), NAME)
        for name in self._limits(queue):
            real = self._real.get(name)
            if real is None:
                continue
            future = job.min_resources + self._held(name) + self._admitted_in(name) + self._admitted.get(name, 0.0)
            over = np.flatnonzero(asked & (future > real + _EPS))
            if over.size:
                amounts = tuple((self._names[c], int(future[c]), int(real[c])) for c in over)
                return Status(Code.UNSCHEDULABLE, (Reason.of(
                    ReasonCode.QUEUE_REAL_CAPABILITY_EXCEEDED, queue=name,
                    child="" if name == queue.name else queue.name, amounts=amounts),), NAME)
        return Status(Code.PERMIT, (), NAME)

    def job_enqueued(self, job: JobInfo) -> None:
        for name in self._limits(self._queues[job.queue]):
            self._admitted[name] = self._admitted.get(name, 0.0) + job.min_resources

    def reclaimable(self, queue: QueueInfo, reclaimer: QueueInfo) -> bool:
        return queue.name != reclaimer.name and queue.reclaimable

    def _need(self, job: JobInfo) -> FloatArray:
        """What the gang still needs: minResources less what it holds, else one pending pod's request."""
        need = np.maximum(job.min_resources - job.allocated, 0.0)
        if not need.any():
            for group in job.groups:
                if group.pending:
                    need = group.request.astype(np.float64)
                    break
        if self._pods is not None:
            need = need.copy()
            need[self._pods] = 0.0
        return need

    def preemptive(self, queue: QueueInfo, job: JobInfo) -> bool:
        need = self._need(job)
        asked = need > 0
        if not asked.any():
            return False
        future = self._held(queue.name) + need
        real = self._real.get(queue.name)
        if real is not None and np.any(future[asked] > real[asked] + _EPS):
            return False
        assert queue.deserved is not None
        if np.any(future[asked] <= queue.deserved[asked] + _EPS):
            return True
        for ancestor in self._ancestors(queue.name)[:self.level]:
            deserved = self._queues[ancestor].deserved
            assert deserved is not None
            if np.any((self._held(ancestor) + need)[asked] <= deserved[asked] + _EPS):
                return True
        return False

    def reclaimable_victims(self, victims: list[RunningPod], reclaimer: JobInfo) -> bool:
        if not victims:
            return True
        victim_job = self._job_queue(victims[0])
        queue = self._queues[victim_job]
        request = sum((p.request.astype(np.float64) for p in victims), np.zeros_like(queue.allocated))
        if self._pods is not None:
            request[self._pods] = 0.0
        holds = request > 0
        wants = np.zeros_like(holds)
        for group in reclaimer.groups:
            if group.pending:
                wants |= group.request > 0
        if self._pods is not None:
            wants[self._pods] = False
        if not (holds & wants).any():
            return False  # nothing the reclaimer asks for would be freed
        held = self._held(queue.name)
        if np.any(held - request < queue.guarantee - _EPS):
            return False  # the queue would fall below its guarantee
        if not self._above(queue.name, holds):
            return False
        if self.hierarchy and self.level and not self._relevant(queue.name, holds) \
                and self._shares_ancestor(queue.name, reclaimer.queue) and not self._relevant(reclaimer.queue, wants):
            return False  # an immediate victim, but within the reclaimer's own part of the tree
        for depth, ancestor in enumerate(self._ancestors(queue.name)[:self.level], start=1):
            theirs = self._ancestors(reclaimer.queue)
            if len(theirs) >= depth and theirs[depth - 1] == ancestor:
                continue  # the reclaimer is under the same ancestor at this level
            if not self._above(ancestor, holds):
                return False
        return True

    def _relevant(self, name: str, holds: np.ndarray) -> bool:
        deserved = self._queues[name].deserved
        assert deserved is not None
        return bool((holds & (deserved > _EPS)).any())

    def _above(self, name: str, holds: np.ndarray) -> bool:
        """Is the queue above its deserved share in a resource ``holds`` names (or does it deserve none of
        them: an immediate victim)?"""
        deserved = self._queues[name].deserved
        assert deserved is not None
        relevant = holds & (deserved > _EPS)
        if not relevant.any():
            return True
        return bool(np.any(self._held(name)[relevant] > deserved[relevant] + _EPS))

    def _shares_ancestor(self, a: str, b: str) -> bool:
        return bool(set(self._ancestors(a)[:self.level]) & set(self._ancestors(b)[:self.level]))

    def _job_queue(self, pod: RunningPod) -> str:
        return self._snapshot.jobs[pod.job].queue

    def on_session_close(self, session: SessionView) -> None:
        del self._snapshot, self._queues  # the session holds its plugins (``Plugin.on_session_close``)
