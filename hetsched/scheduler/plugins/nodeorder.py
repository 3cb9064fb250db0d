"""``nodeorder``: kube-scheduler's node scores — least/most requested, balanced allocation, preferred
node affinity and PreferNoSchedule taints — weighted and summed (Volcano's nodeorder plugin).

Who calls it: the session's ``score``, vectorised over (node, pods-already-placed) pairs; see
``scheduler.engine.placement``. Each score is 0–100 as in kube-scheduler; the plugin returns
``Σ weight × score``. Least/most requested and balanced allocation look at CPU and memory, as
kube-scheduler's defaults do.

Arguments (Volcano's keys and defaults)::

    - name: nodeorder
      arguments:
        leastrequested.weight: 1
        mostrequested.weight: 0
        balancedresource.weight: 1
        nodeaffinity.weight: 1       # preferredDuringScheduling node affinity
        tainttoleration.weight: 1    # fewer intolerable PreferNoSchedule taints is better
        podaffinity.weight: 1        # preferred pod affinity / anti-affinity (scheduler.podtopology)
        podtopologyspread.weight: 2  # ScheduleAnyway spread: fewer matching pods in the domain is better
        # imagelocality.weight: accepted, no effect (hetsched models no images)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.scheduler.contract.arrays import FloatArray, IntArray
from hetsched.scheduler.contract.framework import Arguments, NodeScore, Plugin
from hetsched.scheduler.contract.nodematch import prefer_no_schedule_scores, preferred_affinity_scores
from hetsched.scheduler.contract.snapshot import TaskGroup

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "nodeorder"
MAX_SCORE = 100.0
_KEYS = {"leastrequested.weight", "mostrequested.weight", "balancedresource.weight", "nodeaffinity.weight",
         "tainttoleration.weight", "podaffinity.weight", "imagelocality.weight", "podtopologyspread.weight"}


def requested_fraction(session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray,
                       column: int) -> FloatArray:
    """(used + this pod and the ``placed`` ones before it) / allocatable for one resource column; 1 on nodes
    without that resource (divided only where there is some: no warning to silence, no select after)."""
    alloc = session.nodes.alloc[column][nodes]
    total = session.nodes.used[column][nodes] + (placed + 1) * group.request[column]
    fraction = np.ones(len(nodes), dtype=np.float64)
    np.divide(total, alloc, out=fraction, where=alloc > 0)
    return fraction


class NodeOrder(Plugin, NodeScore):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known(_KEYS)
        self.least = arguments.number("leastrequested.weight", 1)
        self.most = arguments.number("mostrequested.weight", 0)
        self.balanced = arguments.number("balancedresource.weight", 1)
        self.affinity = arguments.number("nodeaffinity.weight", 1)
        self.taint = arguments.number("tainttoleration.weight", 1)
        self.pod_affinity = arguments.number("podaffinity.weight", 1)
        self.spread = arguments.number("podtopologyspread.weight", 2)
        self._static: dict[object, FloatArray] = {}

    def _static_scores(self, session: SessionView, group: TaskGroup) -> FloatArray | None:
        if not (self.affinity or self.taint):
            return None
        key = (group.placement_key, group.priority)
        cached = self._static.get(key)
        if cached is None:
            cached = (self.affinity * preferred_affinity_scores(session.nodes, group.spec)
                      + self.taint * prefer_no_schedule_scores(session.nodes, group.spec))
            self._static[key] = cached
        return cached

    def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        columns = session.snapshot.resources.columns
        cpu = requested_fraction(session, group, nodes, placed, columns["cpu"])
        memory = requested_fraction(session, group, nodes, placed, columns["memory"])
        score = np.zeros(len(nodes), dtype=np.float64)
        if self.most:
            most = (np.where(cpu <= 1.0, cpu, 0.0) + np.where(memory <= 1.0, memory, 0.0)) * (MAX_SCORE / 2)
            score += self.most * most
        # the fractions are this call's own: clamped once, in place, then the same arithmetic in the same
        # order as kube-scheduler's formulas read (so equal nodes stay exactly equal, ties break as before)
        np.minimum(cpu, 1.0, out=cpu)
        np.minimum(memory, 1.0, out=memory)
        if self.least:
            least = 1.0 - cpu
            least += 1.0 - memory
            least *= MAX_SCORE / 2
            score += self.least * least
        if self.balanced:
            spread = np.abs(cpu - memory)
            spread /= 2
            score += self.balanced * (1.0 - spread) * MAX_SCORE
        static = self._static_scores(session, group)
        if static is not None:
            score += static[nodes]
        if group.spec.pod_topology and (self.pod_affinity or self.spread):
            score += session.pod_topology.scores(group, nodes, self.pod_affinity, self.spread)
        return score
