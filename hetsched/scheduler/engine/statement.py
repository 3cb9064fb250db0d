"""Transactional placement: tentative allocations that are committed (binds issued) or discarded.

Who calls it: the allocate and backfill actions (through ``scheduler.engine.placement``). A gang's pods are
allocated into one statement; the statement commits only when the job is ready (minAvailable reached),
is kept without binds when pipelined, and is otherwise discarded, which restores node usage, the
pending lists and every plugin's accounting exactly (Volcano's ``Statement``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsched.scheduler.contract.arrays import IntArray
from hetsched.scheduler.contract.decisions import Bind
from hetsched.scheduler.contract.snapshot import TaskGroup
from hetsched.scheduler.engine.session import Session


@dataclass
class _Operation:
    group: TaskGroup
    pods: list[str]
    nodes: IntArray
    pipelined: bool


def _add_usage(used: IntArray, nodes: IntArray, request: IntArray, sign: int) -> None:
    columns = np.flatnonzero(request)
    if len(nodes) == 1:
        used[columns, nodes[0]] += sign * request[columns]
        return
    rows, counts = np.unique(nodes, return_counts=True)
    used[np.ix_(columns, rows)] += sign * request[columns, None] * counts[None, :]


class Statement:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._operations: list[_Operation] = []

    def allocate(self, group: TaskGroup, nodes: IntArray, *, pipelined: bool = False) -> None:
        """Take ``len(nodes)`` pods from the front of ``group.pending`` and place them on ``nodes``."""
        count = len(nodes)
        if count == 0:
            return
        pods = group.pending[:count]
        del group.pending[:count]
        _add_usage(self.session.nodes.used, nodes, group.request, 1)
        attempt = self.session.attempt(group.job)
        if pipelined:
            attempt.pipelined_pods += count
        else:
            attempt.allocated += count
            attempt.placed.append(nodes)
            attempt.by_task[group.task] = attempt.by_task.get(group.task, 0) + count
            self._account(group, count)
        self._operations.append(_Operation(group, pods, nodes, pipelined))
        if not pipelined:  # pipelined pods bind nothing now; their devices are chosen when they really fit
            self.session.on_allocate(group, pods, nodes)

    def _account(self, group: TaskGroup, count: int) -> None:
        """Keep the job's and its queue's allocated resources current (DRF and proportion read them)."""
        delta = group.request * count
        job = group.job
        job.allocated = job.allocated + delta
        queue = self.session.snapshot.queues[job.queue]
        queue.allocated = queue.allocated + delta

    def mark(self) -> int:
        """A point to roll back to with :meth:`discard_to` (a sub-group tried in one HyperNode, then another)."""
        return len(self._operations)

    def discard(self) -> None:
        self.discard_to(0)

    def discard_to(self, mark: int) -> None:
        """Undo the allocations made since :meth:`mark` returned ``mark``, newest first."""
        while len(self._operations) > mark:
            op = self._operations.pop()
            count = len(op.pods)
            _add_usage(self.session.nodes.used, op.nodes, op.group.request, -1)
            op.group.pending[:0] = op.pods
            attempt = self.session.attempt(op.group.job)
            if op.pipelined:
                attempt.pipelined_pods -= count
            else:
                attempt.allocated -= count
                attempt.placed.pop()
                attempt.by_task[op.group.task] -= count
                self._account(op.group, -count)
                self.session.on_deallocate(op.group, op.pods, op.nodes)

    def commit(self) -> None:
        """Issue binds for allocated pods and nominations for pipelined ones."""
        names = self.session.nodes.names
        decisions = self.session.decisions
        annotations = self.session.bind_annotations
        for op in self._operations:
            target = decisions.nominations if op.pipelined else decisions.binds
            job = op.group.job.key
            target.extend(Bind(pod, names[node], job, annotations.get(pod))
                          for pod, node in zip(op.pods, op.nodes.tolist(), strict=True))
        self._operations.clear()

    def keep(self) -> None:
        """Pipelined: keep the reservation inside this session, bind nothing, nominate the pods."""
        names = self.session.nodes.names
        for op in self._operations:
            self.session.decisions.nominations.extend(
                Bind(pod, names[node], op.group.job.key)
                for pod, node in zip(op.pods, op.nodes.tolist(), strict=True)
            )
        self._operations.clear()
