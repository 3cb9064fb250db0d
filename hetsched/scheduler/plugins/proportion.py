"""``proportion``: queues share the cluster by weight, bounded by capability, floored by guarantee.

Who calls it: the session, for ``queue_order_key``, ``overused``, ``allocatable``, ``reclaimable``,
``preemptive`` and ``job_enqueueable``/``job_enqueued`` (Volcano's proportion plugin).

Deserved share, per resource (each accelerator kind is its own resource): a queue's ``spec.deserved``
where it sets one (capped by capability; the capacity plugin's entitlement), else water-filling. Every round the
unassigned capacity is split among the queues that still want more, in proportion to their weights; a
queue never gets more than it requests (allocated + pending) or than its capability, and at least its
guarantee (when it asks for it). Rounds repeat until capacity or demand runs out.

- ``queue_order_key``: the queue's share, ``max over resources of allocated / deserved`` (lowest first):
  queues below their deserved share are served first;
- ``allocatable``: how many more pods fit within the queue's deserved share (Volcano's proportion) and
  its real capability — its capability, and for a leaf queue, in a resource other leaf queues guarantee,
  no more than the cluster less their guarantees (a guarantee is reserved) — and within each ancestor's
  capability, counting only the
  resources the pod requests. While ``allocate`` lends (``SessionView.lending``: its last pass, once every
  queue had its turn within its share) the deserved bound is lifted: a queue borrows capacity no queue in
  the cycle could use within its share, and what it holds beyond its deserved share is what ``reclaim``
  takes back for a queue below its own. Invariant (work conservation): no capacity stays idle while a job
  it fits waits within its queue's real capability;
- ``overused``: the queue is at its capability in every resource (it can take nothing more);
- ``reclaimable``: another queue's pods may be reclaimed while that queue is ``spec.reclaimable`` and
  above its deserved share (``enableReclaimable: false`` turns reclaim off);
- ``preemptive``: a queue may reclaim for a job while it is below its deserved share and stays within it
  with what the gang still needs placed, in every resource the gang asks for (Volcano's proportion);
- ``job_enqueueable``: allocated + inqueue + minResources within the queue's real capability (and each
  ancestor's capability) — or allocated + admitted this cycle + minResources, so jobs admitted earlier that cannot be
  placed yet never hold capability another job could use now; a gang larger than a capability itself can
  never run there and is Unresolvable.

Hierarchy: a queue may name a ``parent``; then the cluster is water-filled across the top-level queues,
each queue's deserved amount across its children, and so on (a parent asks for what its subtree asks,
bounded by its capability). Jobs belong in leaf queues (a job in a parent queue stays Pending with that
reason), and admission also checks every ancestor's capability.

Arguments: none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.scheduler.contract.arrays import FloatArray
from hetsched.scheduler.contract.framework import (
    Allocatable,
    JobEnqueue,
    Overused,
    Plugin,
    Preemptive,
    QueueOrder,
    Reclaimable,
)
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.snapshot import JobInfo, QueueInfo, TaskGroup, deserved_share
from hetsched.scheduler.contract.status import Code, Status

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "proportion"
_EPS = 1e-6


def deserved_shares(total: FloatArray, queues: list[QueueInfo]) -> dict[str, FloatArray]:
    """Water-fill ``total`` across ``queues`` by weight; see the module docstring."""
    if not queues:
        return {}
    weights = np.array([q.weight for q in queues], dtype=np.float64)
    limit = np.array([np.minimum(q.request, q.capability) for q in queues])
    deserved = np.minimum(np.array([q.guarantee for q in queues]), limit)
    for i, queue in enumerate(queues):  # an explicit spec.deserved is the entitlement, whatever the demand
        if queue.fixed_deserved is not None:
            fixed = ~np.isnan(queue.fixed_deserved)
            value = np.minimum(np.where(fixed, queue.fixed_deserved, 0.0), queue.capability)
            deserved[i] = np.where(fixed, value, deserved[i])
            limit[i] = np.where(fixed, value, limit[i])
    remaining = np.maximum(total - deserved.sum(axis=0), 0.0)
    for _ in range(len(queues) + 1):
        wanting = deserved < limit - _EPS
        if not wanting.any() or not (remaining > _EPS).any():
            break
        active_weight = (wanting * weights[:, None]).sum(axis=0)
        offer = np.where(active_weight > 0, remaining / np.where(active_weight > 0, active_weight, 1), 0.0)
        grant = np.minimum(wanting * weights[:, None] * offer[None, :], limit - deserved)
        deserved += grant
        remaining = np.maximum(remaining - grant.sum(axis=0), 0.0)
    return {q.name: deserved[i] for i, q in enumerate(queues)}


ROOT = "root"


def hierarchical_shares(total: FloatArray, queues: list[QueueInfo]) -> dict[str, FloatArray]:
    """Deserved shares down a queue tree (``spec.parent``; no parent, ``root`` or a parent that does not
    exist = top level): the cluster is water-filled across the top level, then each queue's deserved amount
    across its children, and so on. A parent asks for what its subtree asks, bounded by its own capability,
    so a child never deserves more than its parent."""
    by_name = {q.name: q for q in queues}
    children: dict[str, list[QueueInfo]] = {}
    for queue in queues:
        parent = queue.parent if queue.parent in by_name and queue.parent != queue.name else ROOT
        children.setdefault(parent, []).append(queue)

    def subtree_request(queue: QueueInfo, seen: frozenset[str]) -> FloatArray:
        request = queue.request.copy()
        for child in children.get(queue.name, []):
            if child.name not in seen:
                request = request + subtree_request(child, seen | {child.name})
        return request

    result: dict[str, FloatArray] = {}

    def fill(parent: str, amount: FloatArray, seen: frozenset[str]) -> None:
        level = [q for q in children.get(parent, []) if q.name not in seen]
        if not level:
            return
        proxies = [QueueInfo(name=q.name, weight=q.weight, capability=q.capability, guarantee=q.guarantee,
                             state=q.state, reclaimable=q.reclaimable, allocated=q.allocated, inqueue=q.inqueue,
                             request=subtree_request(q, seen | {q.name}), fixed_deserved=q.fixed_deserved)
                   for q in level]
        for name, deserved in deserved_shares(amount, proxies).items():
            result[name] = deserved
            fill(name, deserved, seen | {name})

    fill(ROOT, total, frozenset({ROOT}))
    return result


share = deserved_share
"""Re-exported: the share proportion orders queues by (``scheduler.contract.snapshot.deserved_share``)."""


class Proportion(Plugin, QueueOrder, Overused, Reclaimable, Preemptive, Allocatable, JobEnqueue):
    NAME = NAME

    def on_session_open(self, session: SessionView) -> None:
        snapshot = session.snapshot
        total = snapshot.total_capacity().astype(np.float64)
        self._session_queues = snapshot.queues
        self._resources = snapshot.resources
        queues = list(snapshot.queues.values())
        shares = hierarchical_shares(total, queues) if any(q.parent for q in queues) \
            else deserved_shares(total, queues)
        for name, deserved in shares.items():
            snapshot.queues[name].deserved = deserved
        for queue in queues:  # the tree's root (a Queue ``root``, as installs make) deserves the whole cluster
            if queue.deserved is None:
                queue.deserved = total.copy() if queue.name == ROOT else np.zeros_like(total)
        self._parents = {q.name for q in queues if any(c.parent == q.name for c in queues)}
        self._now: dict[str, FloatArray] = {}
        """Queue → minResources of the jobs admitted this cycle."""
        self._view = session
        self._pods = snapshot.resources.columns.get("pods")
        guarantees = sum((q.guarantee for q in queues if q.name not in self._parents), np.zeros_like(total))
        self._real = {}
        """Queue → real capability: its capability, and for a leaf queue, in a resource other leaf queues
        guarantee, no more than the cluster less their guarantees (Volcano's realCapability: a guarantee is
        reserved). Where nobody guarantees anything the capability alone bounds it, so a job may still be
        admitted into a full cluster for ``preempt`` or ``reclaim`` to make room (``overcommit`` judges the
        cluster's headroom)."""
        for queue in queues:
            others = guarantees - (queue.guarantee if queue.name not in self._parents else 0.0)
            reserved = (others > _EPS) & (queue.name not in self._parents)
            self._real[queue.name] = np.where(reserved, np.minimum(queue.capability, np.maximum(total - others, 0.0)),
                                              queue.capability)

    def on_session_close(self, session: SessionView) -> None:
        del self._view  # the session holds its plugins (``Plugin.on_session_close``)

    @staticmethod
    def _deserved(queue: QueueInfo) -> FloatArray:
        assert queue.deserved is not None, "proportion: deserved is computed at session open"
        return queue.deserved

    def queue_order_key(self, queue: QueueInfo) -> float:
        queue.share = share(queue.allocated, self._deserved(queue))
        return queue.share

    def overused(self, queue: QueueInfo) -> bool:
        return bool(np.all(queue.capability <= queue.allocated + _EPS))

    def reclaimable(self, queue: QueueInfo, reclaimer: QueueInfo) -> bool:
        above = share(queue.allocated, self._deserved(queue)) > 1.0 + _EPS
        return queue.name != reclaimer.name and queue.reclaimable and above

    def preemptive(self, queue: QueueInfo, job: JobInfo) -> bool:
        deserved = self._deserved(queue)
        if share(queue.allocated, deserved) >= 1.0 - _EPS:
            return False
        need = np.maximum(job.min_resources - job.allocated, 0.0)
        asked = need > 0
        return bool(np.all(queue.allocated[asked] + need[asked] <= deserved[asked] + _EPS))

    def allocatable(self, queue: QueueInfo, group: TaskGroup, wanted: int) -> int:
        columns = group.columns
        request = group.request[columns].astype(np.float64)
        bounds = [(self._real.get(queue.name, queue.capability), queue.allocated),
                  *((a.capability, self._below(a, inqueue=False)) for a in self._ancestors(queue))]
        if not self._view.lending:  # within its share; lending lifts this bound (``allocate``'s third pass)
            deserved = self._deserved(queue).copy()
            if self._pods is not None:
                deserved[self._pods] = np.inf  # pod slots are no share (Volcano's shares count resources)
            bounds.append((deserved, queue.allocated))
        for bound, used in bounds:
            capability = bound[columns]
            finite = np.isfinite(capability)  # no capability: no bound
            room = (capability[finite] - used[columns][finite] + _EPS) // request[finite]
            wanted = int(max(0, min(wanted, room.min(initial=wanted))))
        return wanted

    def job_enqueueable(self, job: JobInfo) -> Status:
        """Within the queue's (and every ancestor's) capability, counting either what is allocated and
        admitted, or — so that jobs admitted earlier that cannot be placed yet never block one that can —
        what is allocated and what this cycle admitted."""
        queue = self._session_queues[job.queue]
        names = self._resources.names
        if queue.name in self._parents:
            return Status(Code.UNSCHEDULABLE, (Reason.of(ReasonCode.QUEUE_NOT_LEAF, queue=queue.name),), NAME)
        for limit in (queue, *self._ancestors(queue)):  # capability itself: a guarantee's reserve may change
            never = np.flatnonzero((job.min_resources > 0) & (job.min_resources > limit.capability + _EPS))
            if never.size:
                amounts = tuple((names[c], int(job.min_resources[c]), int(limit.capability[c])) for c in never)
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                              (Reason.of(ReasonCode.LARGER_THAN_QUEUE, queue=limit.name, amounts=amounts),), NAME)
        problem: Reason | None = None
        for counted in ("admitted", "now"):
            problem = self._over(job, queue, counted)
            if problem is None:
                return Status(Code.PERMIT, (), NAME)
        assert problem is not None
        return Status(Code.UNSCHEDULABLE, (problem,), NAME)

    def _over(self, job: JobInfo, queue: QueueInfo, counted: str) -> Reason | None:
        """None when the job fits every capability on its way up, counting ``admitted`` (allocated +
        inqueue) or ``now`` (allocated + admitted this cycle); else why not."""
        names = self._resources.names
        for limit in (queue, *self._ancestors(queue)):
            if counted == "admitted":
                used = limit.allocated + limit.inqueue if limit is queue else self._below(limit, inqueue=True)
            else:
                used = self._below(limit, inqueue=False, now=True) if limit is not queue else (
                    queue.allocated + self._now.get(queue.name, 0.0))
            future = used + job.min_resources
            bound = self._real.get(limit.name, limit.capability) if limit is queue else limit.capability
            short = np.flatnonzero((job.min_resources > 0) & (future > bound + _EPS))
            if short.size:
                amounts = tuple((names[c], int(future[c]), int(bound[c])) for c in short)
                reserved = limit is queue and bool(np.any(bound[short] < limit.capability[short] - _EPS))
                return Reason.of(ReasonCode.QUEUE_REAL_CAPABILITY_EXCEEDED if reserved  # guarantees reserve it
                                 else ReasonCode.QUEUE_CAPABILITY_EXCEEDED, queue=limit.name,
                                 child="" if limit is queue else queue.name, amounts=amounts)
        return None

    def _ancestors(self, queue: QueueInfo) -> list[QueueInfo]:
        chain, seen = [], {queue.name}
        parent = self._session_queues.get(queue.parent) if queue.parent else None
        while parent is not None and parent.name not in seen:
            chain.append(parent)
            seen.add(parent.name)
            parent = self._session_queues.get(parent.parent) if parent.parent else None
        return chain

    def _below(self, ancestor: QueueInfo, *, inqueue: bool, now: bool = False) -> FloatArray:
        """What the queues under ``ancestor`` hold: allocated, plus admitted (``inqueue``) or plus admitted
        this cycle (``now``)."""
        total = np.zeros_like(ancestor.allocated)
        for queue in self._session_queues.values():
            if any(a.name == ancestor.name for a in self._ancestors(queue)):
                total = total + queue.allocated
                if inqueue:
                    total = total + queue.inqueue
                if now:
                    total = total + self._now.get(queue.name, 0.0)
        return total

    def job_enqueued(self, job: JobInfo) -> None:
        queue = self._session_queues[job.queue]
        queue.inqueue = queue.inqueue + job.min_resources
        self._now[queue.name] = self._now.get(queue.name, 0.0) + job.min_resources
