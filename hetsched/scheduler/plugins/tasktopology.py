"""``task-topology``: put a job's tasks together or apart, and place them in a given order (Volcano's
task-topology plugin).

Who calls it: the session — ``task_order_key`` (which of a job's tasks is placed first) and ``node_score``
(vectorised over (node, pods-already-placed) pairs).

A Job (its PodGroup) says, by annotation (``api.volcano_annotations``)::

    volcano.sh/task-topology-affinity: "ps,worker;ps,evaluator"       # ps near workers, ps near evaluators
    volcano.sh/task-topology-anti-affinity: "ps;worker,chief"         # ps pods apart, workers apart from chief
    volcano.sh/task-topology-task-order: "ps,worker,chief,evaluator"

- ``task_order_key``: tasks named in an affinity or anti-affinity go first — earlier in the task order first,
  then by how strong their rule is (Volcano's: own anti-affinity, then affinity with another task, own
  affinity, anti-affinity with another task); other tasks after them.
- ``node_score``: for a pod of task T, each pod of the same job already on the node (bound, or placed
  earlier in this cycle) of a task T must be near adds one, of a task T must be apart from takes one away;
  times ``task-topology.weight`` × 100 / the job's pod count. So ps pods land on their workers' nodes and
  anti-affine pods spread.

Volcano builds per-pod "buckets" sized to a node before placing; hetsched scores node by node from what
the job already has there, which keeps the plugin's preference (together / apart / order) and the
engine's invariant that a node's score depends only on that node (placement of identical pods in one
vectorised pass). Arguments: ``task-topology.weight`` (default 1). Annotations that cannot be read are
refused at admission; ones that got past it leave the job without rules, as in Volcano.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.api.volcano_annotations import TaskTopology, task_topology
from hetsched.scheduler.contract.arrays import FloatArray, IntArray
from hetsched.scheduler.contract.framework import Arguments, NodeScore, Plugin, TaskOrder
from hetsched.scheduler.contract.snapshot import JobInfo, TaskGroup

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "task-topology"
WEIGHT = "task-topology.weight"
MAX_SCORE = 100.0
_SELF_ANTI, _INTER_AFFINITY, _SELF_AFFINITY, _INTER_ANTI = 4, 3, 2, 1
"""How strong a task's rule is (Volcano's affinityPriority): the strongest decides the task's order."""


class _Rules:
    """One job's rules, as sets of task pairs."""

    def __init__(self, topology: TaskTopology) -> None:
        self.near: dict[str, set[str]] = {}
        self.apart: dict[str, set[str]] = {}
        self.strength: dict[str, int] = {}
        for groups, pairs, alone, together in ((topology.affinity, self.near, _SELF_AFFINITY, _INTER_AFFINITY),
                                              (topology.anti_affinity, self.apart, _SELF_ANTI, _INTER_ANTI)):
            for group in groups:
                for task in group:
                    others = set(group) - {task} if len(group) > 1 else {task}
                    pairs.setdefault(task, set()).update(others)
                    strength = alone if len(group) == 1 else together
                    self.strength[task] = max(self.strength.get(task, 0), strength)
        self.order = {task: len(topology.order) - i for i, task in enumerate(topology.order)}


class TaskTopologyPlugin(Plugin, TaskOrder, NodeScore):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({WEIGHT})
        self.weight = arguments.number(WEIGHT, 1)
        self._rules: dict[str, _Rules | None] = {}
        self._counts: dict[str, dict[str, IntArray]] | None = None

    def on_session_open(self, session: SessionView) -> None:
        self._session = session

    def on_session_close(self, session: SessionView) -> None:
        del self._session  # the session holds its plugins (``Plugin.on_session_close``)

    def _of(self, job: JobInfo) -> _Rules | None:
        if job.key not in self._rules:
            try:
                topology = task_topology(job.podgroup.metadata.annotations)
            except ValueError:  # refused at admission; one written around the webhook: no rules
                topology = None
            self._rules[job.key] = _Rules(topology) if topology is not None else None
        return self._rules[job.key]

    def _job_counts(self, job: JobInfo) -> dict[str, IntArray]:
        """Task → the job's pods of it per node: bound ones (the running pods read once, on first use: only
        jobs with rules need them), then this cycle's."""
        if self._counts is None:
            self._counts = {}
            self._running: dict[str, list[tuple[str, int]]] = {}
            for pod in self._session.snapshot.running:
                self._running.setdefault(pod.job, []).append((pod.task, pod.node))
        found = self._counts.get(job.key)
        if found is None:
            found = self._counts[job.key] = {}
            width = len(self._session.nodes)
            for task, node in self._running.get(job.key, []):
                found.setdefault(task, np.zeros(width, dtype=np.int64))[node] += 1
        return found

    def task_order_key(self, group: TaskGroup) -> float:
        rules = self._of(group.job)
        if rules is None or group.task not in rules.strength:
            return 0.0
        return -(1.0 + rules.order.get(group.task, 0) * 10 + rules.strength[group.task])

    def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        rules = self._of(group.job)
        score = np.zeros(len(nodes), dtype=np.float64)
        if rules is None or not self.weight:
            return score
        counts = self._job_counts(group.job)
        for tasks, sign in ((rules.near.get(group.task, set()), 1.0), (rules.apart.get(group.task, set()), -1.0)):
            for task in tasks:
                there = counts.get(task)
                if there is not None:
                    score += sign * there[nodes]
                if task == group.task:
                    score += sign * placed
        return score * self.weight * MAX_SCORE / max(group.job.total_pods, 1)

    def on_allocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        self._account(group, nodes, 1)

    def on_deallocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        self._account(group, nodes, -1)

    def _account(self, group: TaskGroup, nodes: IntArray, sign: int) -> None:
        if self._of(group.job) is None:
            return
        by_task = self._job_counts(group.job)
        there = by_task.setdefault(group.task, np.zeros(len(self._session.nodes), dtype=np.int64))
        np.add.at(there, nodes, sign)
