"""``nodegroup``: bind queues to node pools (Volcano's nodegroup plugin and Queue ``spec.affinity``).

Who calls it: the session — ``node_filter`` (required affinity and anti-affinity) and ``node_score``
(preferred ones). In hetsched's default configuration.

Nodes belong to a node group by the label ``volcano.sh/nodegroup-name``. A queue says::

    spec:
      affinity:
        nodeGroupAffinity:
          requiredDuringSchedulingIgnoredDuringExecution: [training-pool]
          preferredDuringSchedulingIgnoredDuringExecution: [spare-pool]
        nodeGroupAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution: [inference-pool]

Its pods then go only to nodes of a required group (and never to an anti-affine one), scoring 100 on a
preferred group and 0 on a preferred-to-avoid one. So big training jobs use pool A and tests pool B, and
neither starves the other. A queue without affinity may use every node. Arguments: ``weight`` (1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.scheduler.contract.arrays import BoolArray, FloatArray, IntArray
from hetsched.scheduler.contract.framework import Arguments, NodeFilter, NodeScore, Plugin
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.snapshot import TaskGroup

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "nodegroup"
LABEL = "volcano.sh/nodegroup-name"


class NodeGroup(Plugin, NodeFilter, NodeScore):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({"weight"})
        self.weight = arguments.number("weight", 1)

    @staticmethod
    def _in(session: SessionView, groups: list[str]) -> BoolArray:
        codes, vocab = session.nodes.label_codes(LABEL)
        return np.isin(codes, [vocab[g] for g in groups if g in vocab])

    def node_filter(self, session: SessionView, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        queue = session.snapshot.queues[group.job.queue]
        affinity = queue.affinity
        failures: list[tuple[Reason, BoolArray]] = []
        if affinity is None:
            return failures
        if affinity.nodeGroupAffinity and affinity.nodeGroupAffinity.requiredDuringSchedulingIgnoredDuringExecution:
            required = affinity.nodeGroupAffinity.requiredDuringSchedulingIgnoredDuringExecution
            failures.append((Reason.of(ReasonCode.NODE_GROUP_REQUIRED, queue=queue.name, groups=tuple(required)),
                             ~self._in(session, required)))
        anti = affinity.nodeGroupAntiAffinity
        if anti and anti.requiredDuringSchedulingIgnoredDuringExecution:
            avoided = anti.requiredDuringSchedulingIgnoredDuringExecution
            failures.append((Reason.of(ReasonCode.NODE_GROUP_AVOIDED, queue=queue.name, groups=tuple(avoided)),
                             self._in(session, avoided)))
        return failures

    def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        score = np.zeros(len(nodes), dtype=np.float64)
        affinity = session.snapshot.queues[group.job.queue].affinity
        if affinity is None or not self.weight:
            return score
        if affinity.nodeGroupAffinity and affinity.nodeGroupAffinity.preferredDuringSchedulingIgnoredDuringExecution:
            preferred = self._in(session, affinity.nodeGroupAffinity.preferredDuringSchedulingIgnoredDuringExecution)
            score += np.where(preferred[nodes], 100.0, 0.0)
        anti = affinity.nodeGroupAntiAffinity
        if anti and anti.preferredDuringSchedulingIgnoredDuringExecution:
            avoided = self._in(session, anti.preferredDuringSchedulingIgnoredDuringExecution)
            score += np.where(avoided[nodes], 0.0, 100.0)
        result: FloatArray = score * self.weight
        return result
