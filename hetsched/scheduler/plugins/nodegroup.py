"""``nodegroup``: bind queues to node pools (Volcano's nodegroup plugin and Queue ``spec.affinity``).

Who calls it: the session — ``node_filter`` (which node groups a queue may use), ``node_capacity`` (the
queue's per-group resource limits) and ``node_score`` (preferred groups). In hetsched's default
configuration, with ``strict: false``.

Nodes belong to a node group by the label ``volcano.sh/nodegroup-name``. A queue says::

    metadata:
      annotations:
        volcano.sh/nodegroup-resource-limits: '{"training-pool": {"cpu": "100", "huawei.com/Ascend910": "64"}}'
    spec:
      affinity:
        nodeGroupAffinity:
          requiredDuringSchedulingIgnoredDuringExecution: [training-pool]
          preferredDuringSchedulingIgnoredDuringExecution: [spare-pool]
        nodeGroupAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution: [inference-pool]

Rules, as Volcano's plugin has them:
- **Which nodes.** A queue with affinity may use the nodes of the groups it names as required or preferred
  affinity, or as preferred anti-affinity (avoided when possible, allowed), and never those of a required
  anti-affinity group, nor any other group. A queue without affinity may use no labelled node; nodes
  without the label are for queues without affinity, and only with ``strict: false`` (Volcano's default is
  ``strict: true``: every pod needs a labelled node its queue names).
- **Limits.** ``volcano.sh/nodegroup-resource-limits`` caps what the queue holds on one group's nodes (only
  the resources listed; the rest of the queue's allowed groups take the overflow).
- **Score.** A required group scores 100; a preferred one 50 more — or, with ``enablePreferredOrder``,
  50 × (n − i) / n for the i-th of n preferred groups, so the first listed is filled first; a preferred
  anti-affinity group scores −1 whatever else it is; unlabelled nodes and queues without affinity 0. Times
  ``weight`` (hetsched's, default 1).
- **Hierarchy** (``enableHierarchy: true``): a queue without affinity takes its nearest ancestor's (limits
  are not inherited).

Arguments: ``strict`` (default true), ``enablePreferredOrder`` (default false), ``weight`` (default 1).
A Queue's limits annotation that cannot be read is refused at admission (``api.volcano_annotations``); one
that got past it keeps the queue off every labelled node, as in Volcano.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from hetsched.api.objects import QueueAffinity
from hetsched.api.volcano_annotations import nodegroup_limits
from hetsched.scheduler.contract.arrays import BoolArray, FloatArray, IntArray
from hetsched.scheduler.contract.framework import Arguments, NodeCapacity, NodeFilter, NodeScore, Plugin
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.snapshot import QueueInfo, TaskGroup

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "nodegroup"
LABEL = "volcano.sh/nodegroup-name"
HIERARCHY = "enableHierarchy"
ROOT = "root"
BASE_SCORE = 100.0
_NO_LIMIT = np.iinfo(np.int64).max


class _Affinity:
    """A queue's four lists of node groups."""

    def __init__(self, affinity: QueueAffinity | None) -> None:
        near = affinity.nodeGroupAffinity if affinity is not None else None
        anti = affinity.nodeGroupAntiAffinity if affinity is not None else None
        self.required = list(near.requiredDuringSchedulingIgnoredDuringExecution) if near else []
        self.preferred = list(near.preferredDuringSchedulingIgnoredDuringExecution) if near else []
        self.avoided = list(anti.requiredDuringSchedulingIgnoredDuringExecution) if anti else []
        self.discouraged = list(anti.preferredDuringSchedulingIgnoredDuringExecution) if anti else []

    @property
    def unset(self) -> bool:
        return not (self.required or self.preferred or self.avoided or self.discouraged)

    def allowed(self) -> list[str]:
        """Groups whose nodes the queue may use (Volcano's predicate: required, preferred and preferred
        anti-affinity groups; a required anti-affinity group is out unless it is also preferred-avoided)."""
        groups = {*self.required, *self.preferred} - set(self.avoided)
        return sorted(groups | set(self.discouraged))


class NodeGroup(Plugin, NodeFilter, NodeCapacity, NodeScore):
    NAME = NAME
    SWITCHES = frozenset({HIERARCHY})

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({"weight", "strict", "enablePreferredOrder"})
        self.weight = arguments.number("weight", 1)
        self.strict = arguments.flag("strict", True)
        self.ordered = arguments.flag("enablePreferredOrder", False)
        self.hierarchy = bool(arguments.switches.get(HIERARCHY, False))
        self._limits: dict[str, dict[str, dict[str, int]] | None] = {}
        self._held: dict[tuple[str, str], np.ndarray] | None = None

    def on_session_open(self, session: SessionView) -> None:
        self._session = session

    def on_session_close(self, session: SessionView) -> None:
        del self._session  # the session holds its plugins (``Plugin.on_session_close``)

    # ------------------------------------------------------------------------------------ queues

    def _affinity(self, queue: QueueInfo) -> _Affinity:
        found = _Affinity(queue.affinity)
        if not self.hierarchy or not found.unset:
            return found
        queues, seen = self._session.snapshot.queues, {queue.name}
        parent = queues.get(queue.parent or ROOT) if queue.name != ROOT else None
        while parent is not None and parent.name not in seen:
            inherited = _Affinity(parent.affinity)
            if parent.affinity is not None:
                return inherited
            seen.add(parent.name)
            parent = queues.get(parent.parent or ROOT) if parent.name != ROOT else None
        return found

    def _queue_limits(self, queue: QueueInfo) -> dict[str, dict[str, int]] | None:
        """The queue's per-group limits; {} when it has none; None when its annotation cannot be read."""
        if queue.name not in self._limits:
            try:
                self._limits[queue.name] = nodegroup_limits(queue.annotations) or {}
            except ValueError:
                self._limits[queue.name] = None
        return self._limits[queue.name]

    def _in(self, groups: list[str]) -> BoolArray:
        codes, vocab = self._session.nodes.label_codes(LABEL)
        return np.isin(codes, [vocab[g] for g in groups if g in vocab])

    def _labelled(self) -> BoolArray:
        codes, vocab = self._session.nodes.label_codes(LABEL)
        return np.isin(codes, list(vocab.values()))

    # ------------------------------------------------------------------------------------ points

    def node_filter(self, session: SessionView, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        queue = session.snapshot.queues[group.job.queue]
        affinity = self._affinity(queue)
        labelled = self._labelled()
        failures: list[tuple[Reason, BoolArray]] = []
        if self.strict or not affinity.unset:
            failures.append((Reason.of(ReasonCode.NODE_GROUP_UNLABELLED), ~labelled))
        if affinity.unset:
            failures.append((Reason.of(ReasonCode.NODE_GROUP_NO_AFFINITY, queue=queue.name), labelled))
            return failures
        if self._queue_limits(queue) is None:
            failures.append((Reason.of(ReasonCode.NODE_GROUP_LIMITS_UNREADABLE, queue=queue.name), labelled))
            return failures
        allowed = affinity.allowed()
        outside = labelled & ~self._in(allowed)
        avoided = labelled & self._in([g for g in affinity.avoided if g not in affinity.discouraged])
        if avoided.any():
            failures.append((Reason.of(ReasonCode.NODE_GROUP_AVOIDED, queue=queue.name,
                                       groups=tuple(affinity.avoided)), avoided))
        failures.append((Reason.of(ReasonCode.NODE_GROUP_REQUIRED, queue=queue.name, groups=tuple(allowed)),
                         outside & ~avoided))
        return failures

    def _holdings(self) -> dict[tuple[str, str], np.ndarray]:
        """(queue, node group) → what the queue's running pods hold on that group's nodes (built on first use:
        only queues with limits need it)."""
        if self._held is None:
            snapshot = self._session.snapshot
            codes, vocab = self._session.nodes.label_codes(LABEL)
            names = {code: name for name, code in vocab.items()}
            held: dict[tuple[str, str], np.ndarray] = defaultdict(lambda: np.zeros(len(snapshot.resources),
                                                                                   dtype=np.int64))
            for pod in snapshot.running:
                name = names.get(int(codes[pod.node]))
                if name is not None:
                    held[(snapshot.jobs[pod.job].queue, name)] += pod.request
            self._held = held
        return self._held

    def node_capacity(self, session: SessionView, group: TaskGroup) -> IntArray | None:
        queue = session.snapshot.queues[group.job.queue]
        limits = self._queue_limits(queue)
        if not limits:
            return None
        columns = session.snapshot.resources.columns
        result = np.full(len(session.nodes), _NO_LIMIT, dtype=np.int64)
        held = self._holdings()
        for name, limit in limits.items():
            nodes = self._in([name])
            if not nodes.any():
                continue
            room = _NO_LIMIT
            used = held.get((queue.name, name))
            for resource, amount in limit.items():
                column = columns.get(resource)
                request = int(group.request[column]) if column is not None else 0
                if request <= 0:
                    continue
                now = int(used[column]) if used is not None else 0
                room = min(room, max(amount - now, 0) // request)
            result[nodes] = room
        return result

    def node_capacity_reasons(self, session: SessionView, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        limit = self.node_capacity(session, group)
        if limit is None:
            return []
        queue = session.snapshot.queues[group.job.queue]
        return [(Reason.of(ReasonCode.NODE_GROUP_LIMIT, queue=queue.name), limit == 0)]

    def on_allocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        self._account(group, nodes, 1)

    def on_deallocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        self._account(group, nodes, -1)

    def _account(self, group: TaskGroup, nodes: IntArray, sign: int) -> None:
        queue = self._session.snapshot.queues[group.job.queue]
        if not self._queue_limits(queue):
            return
        codes, vocab = self._session.nodes.label_codes(LABEL)
        names = {code: name for name, code in vocab.items()}
        held = self._holdings()
        for row in nodes.tolist():
            name = names.get(int(codes[row]))
            if name is not None:
                held[(queue.name, name)] += sign * group.request

    def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        score = np.zeros(len(nodes), dtype=np.float64)
        affinity = self._affinity(session.snapshot.queues[group.job.queue])
        if affinity.unset or not self.weight:
            return score
        score += np.where(self._in(affinity.required)[nodes], BASE_SCORE, 0.0)
        count = len(affinity.preferred)
        for index, name in enumerate(affinity.preferred):
            bonus = 0.5 * BASE_SCORE * ((count - index) / count if self.ordered else 1.0)
            score += np.where(self._in([name])[nodes], bonus, 0.0)
        score = np.where(self._in(affinity.discouraged)[nodes], -1.0, score)
        result: FloatArray = score * self.weight
        return result
