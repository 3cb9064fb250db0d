"""``proportion``: queues share the cluster by weight, bounded by capability, floored by guarantee.

Who calls it: the session, for ``queue_order_key``, ``overused``, ``allocatable`` and
``job_enqueueable``/``job_enqueued`` (Volcano's proportion plugin).

Deserved share, per resource (each accelerator kind is its own resource): a queue's ``spec.deserved``
where it sets one (capped by capability; the capacity plugin's entitlement), else water-filling. Every round the
unassigned capacity is split among the queues that still want more, in proportion to their weights; a
queue never gets more than it requests (allocated + pending) or than its capability, and at least its
guarantee (when it asks for it). Rounds repeat until capacity or demand runs out.

- ``queue_order_key``: the queue's share, ``max over resources of allocated / deserved`` (lowest first);
- ``overused``: allocated ≥ deserved in every resource → the queue gets nothing more this cycle;
- ``allocatable``: how many more pods fit within the queue's deserved share and capability, counting only
  the resources the pod requests;
- ``job_enqueueable``: allocated + inqueue + minResources within the queue's capability.

Hierarchy: a queue may name a ``parent``; then the cluster is water-filled across the top-level queues,
each queue's deserved amount across its children, and so on (a parent asks for what its subtree asks,
bounded by its capability). Jobs belong in leaf queues (a job in a parent queue stays Pending with that
reason), and admission also checks every ancestor's capability.

Arguments: none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.api.quantity import format_quantity
from hetsched.scheduler.framework import Code, FloatArray, Plugin, Status
from hetsched.scheduler.snapshot import JobInfo, QueueInfo, TaskGroup, deserved_share

if TYPE_CHECKING:
    from hetsched.scheduler.session import Session

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
"""Re-exported: the share proportion orders queues by (``scheduler.snapshot.deserved_share``)."""


class Proportion(Plugin):
    NAME = NAME

    def on_session_open(self, session: Session) -> None:
        snapshot = session.snapshot
        total = snapshot.total_capacity().astype(np.float64)
        self._session_queues = snapshot.queues
        self._resources = snapshot.resources
        queues = list(snapshot.queues.values())
        shares = hierarchical_shares(total, queues) if any(q.parent for q in queues) \
            else deserved_shares(total, queues)
        for name, deserved in shares.items():
            snapshot.queues[name].deserved = deserved
        self._parents = {q.name for q in queues if any(c.parent == q.name for c in queues)}

    @staticmethod
    def _deserved(queue: QueueInfo) -> FloatArray:
        assert queue.deserved is not None, "proportion: deserved is computed at session open"
        return queue.deserved

    def queue_order_key(self, queue: QueueInfo) -> float:
        queue.share = share(queue.allocated, self._deserved(queue))
        return queue.share

    def overused(self, queue: QueueInfo) -> bool:
        return bool(np.all(self._deserved(queue) <= queue.allocated + _EPS))

    def allocatable(self, queue: QueueInfo, group: TaskGroup, wanted: int) -> int:
        columns = group.columns
        request = group.request[columns].astype(np.float64)
        bound = np.minimum(self._deserved(queue)[columns], queue.capability[columns])
        room = (bound - queue.allocated[columns] + _EPS) // request
        return int(max(0, min(wanted, room.min(initial=wanted))))

    def job_enqueueable(self, job: JobInfo) -> Status:
        queue = self._session_queues[job.queue]
        if queue.name in self._parents:
            return Status(Code.UNSCHEDULABLE, (f"queue {queue.name} has child queues; jobs go to leaf queues",), NAME)
        for ancestor in self._ancestors(queue):
            future = self._subtree_allocated(ancestor) + job.min_resources
            over = np.flatnonzero((job.min_resources > 0) & (future > ancestor.capability + _EPS))
            if over.size:
                names = self._resources.names
                return Status(Code.UNSCHEDULABLE, (
                    f"queue {ancestor.name} (parent of {queue.name}) capability would be exceeded for "
                    f"{', '.join(names[c] for c in over)}",), NAME)
        future = queue.allocated + queue.inqueue + job.min_resources
        short = np.flatnonzero((job.min_resources > 0) & (future > queue.capability + _EPS))
        if short.size == 0:
            return Status(Code.SUCCESS)
        names = self._resources.names
        detail = ", ".join(f"{names[c]} (allocated + admitted + minResources = "
                           f"{format_quantity(int(future[c]), names[c])} > "
                           f"{format_quantity(int(queue.capability[c]), names[c])})" for c in short)
        return Status(Code.UNSCHEDULABLE, (f"queue {queue.name} capability would be exceeded for {detail}",), NAME)

    def _ancestors(self, queue: QueueInfo) -> list[QueueInfo]:
        chain, seen = [], {queue.name}
        parent = self._session_queues.get(queue.parent) if queue.parent else None
        while parent is not None and parent.name not in seen:
            chain.append(parent)
            seen.add(parent.name)
            parent = self._session_queues.get(parent.parent) if parent.parent else None
        return chain

    def _subtree_allocated(self, ancestor: QueueInfo) -> FloatArray:
        """Allocated plus admitted of every queue below ``ancestor``."""
        total = np.zeros_like(ancestor.allocated)
        for queue in self._session_queues.values():
            if any(a.name == ancestor.name for a in self._ancestors(queue)):
                total = total + queue.allocated + queue.inqueue
        return total

    def job_enqueued(self, job: JobInfo) -> None:
        queue = self._session_queues[job.queue]
        queue.inqueue = queue.inqueue + job.min_resources
