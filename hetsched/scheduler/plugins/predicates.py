"""``predicates``: node filters — readiness, cordon, nodeSelector, required node affinity, taints (static),
and pod affinity, pod anti-affinity and topology spread (which depend on where pods are).

Who calls it: the session's ``static_checks`` (``node_filter``), once per distinct placement key per cycle,
vectorised over all nodes via integer label codes. Every failure there is *unresolvable*: freeing
resources would not make the node fit. Pod (anti-)affinity and ``DoNotSchedule`` spread constraints
(``scheduler.contract.podtopology``) are a ``node_capacity``, asked again after each placement: a node passes with
room for one more pod of the group, and ``explain`` names the rule that failed. Resource fit and the
pod-count limit are checked by the allocate action itself (the ``pods`` resource), as Volcano does.

Arguments (Volcano's keys)::

    - name: predicates
      arguments:
        predicate.NodeAffinityEnable: true      # nodeSelector + required node affinity
        predicate.TaintTolerationEnable: true   # NoSchedule / NoExecute taints
        predicate.PodAffinityEnable: true       # required pod affinity / anti-affinity
        predicate.PodTopologySpreadEnable: true # DoNotSchedule topology spread constraints
        predicate.NodePortsEnable: true         # host ports free on the node

Volcano's volume predicates (``predicate.NodeVolumeLimitsEnable``, ``VolumeZoneEnable``, ``VolumeBindingEnable``,
``volumebinding.bindTimeoutSeconds``) and ``predicate.CacheEnable`` are accepted and do nothing: hetsched
does not read pods' volumes (docs/scheduler.md says so). ``predicate.GPUSharingEnable`` and
``predicate.GPUNumberEnable`` (Volcano ≤ 1.8.2's place for ``volcano.sh/gpu-memory`` and ``volcano.sh/gpu-number``)
are accepted either way: hetsched serves those requests with its chip-partition model (``devicetopology``, as
``deviceshare``'s switches). ``predicate.DynamicResourceAllocationEnable`` is accepted off and refused on.

A pod with ``schedulingGates`` fits no node until its gates are removed (the reason names them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.scheduler.contract.arrays import BoolArray, IntArray
from hetsched.scheduler.contract.framework import Arguments, NodeCapacity, NodeFilter, Plugin
from hetsched.scheduler.contract.nodematch import required_affinity_matches, selector_matches, taint_text, untolerated
from hetsched.scheduler.contract.podtopology import (
    AFFINITY_REASON,
    ANTI_AFFINITY_REASON,
    EXISTING_ANTI_REASON,
    PORTS_REASON,
    SPREAD_REASON,
)
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.snapshot import TaskGroup

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "predicates"
_ACCEPTED = {
    "predicate.NodeAffinityEnable", "predicate.TaintTolerationEnable", "predicate.NodePortsEnable",
    "predicate.PodAffinityEnable", "predicate.NodeVolumeLimitsEnable", "predicate.VolumeZoneEnable",
    "predicate.PodTopologySpreadEnable", "predicate.VolumeBindingEnable", "predicate.CacheEnable",
    "predicate.DynamicResourceAllocationEnable", "predicate.GPUSharingEnable", "predicate.GPUNumberEnable",
    "volumebinding.bindTimeoutSeconds", "dynamicresources.filterTimeoutSeconds",
}

_NOT_SERVED = {
    "predicate.DynamicResourceAllocationEnable": "Dynamic Resource Allocation (ResourceClaims)",
}
"""Volcano switches that would turn on what hetsched does not do: off is accepted, on is an error."""


class Predicates(Plugin, NodeCapacity, NodeFilter):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known(_ACCEPTED)
        for key, what in _NOT_SERVED.items():
            if arguments.flag(key, False):
                raise ValueError(f"plugin {NAME}: argument {key}: {what} is not supported by hetsched yet")
        arguments.flag("predicate.GPUSharingEnable", False)
        arguments.flag("predicate.GPUNumberEnable", False)
        self.affinity = arguments.flag("predicate.NodeAffinityEnable", True)
        self.taints = arguments.flag("predicate.TaintTolerationEnable", True)
        self.pod_affinity = arguments.flag("predicate.PodAffinityEnable", True)
        self.spread = arguments.flag("predicate.PodTopologySpreadEnable", True)
        self.ports = arguments.flag("predicate.NodePortsEnable", True)

    def _pod_rules(self, session: SessionView, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        topology = session.pod_topology
        if not (group.spec.pod_topology or (self.pod_affinity and topology.repels())):
            return []
        skip = set()
        if not self.ports:
            skip.add(PORTS_REASON)
        if not self.pod_affinity:
            skip |= {AFFINITY_REASON, ANTI_AFFINITY_REASON, EXISTING_ANTI_REASON}
        if not self.spread:
            skip.add(SPREAD_REASON)
        return [(reason, mask) for reason, mask in topology.failures(group) if reason not in skip]

    def node_capacity(self, session: SessionView, group: TaskGroup) -> IntArray | None:
        rules = self._pod_rules(session, group)
        if not rules:
            return None
        failing = np.zeros(len(session.nodes), dtype=bool)
        for _, mask in rules:
            failing |= mask
        # pods placing themselves relative to others go one at a time (placement.place_job), so one more
        # per passing node; otherwise only placed pods' anti-affinity applies, which these pods do not change
        room = 1 if group.spec.pod_topology else np.iinfo(np.int64).max // 4
        return np.where(failing, 0, room).astype(np.int64)

    def node_capacity_reasons(self, session: SessionView, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        return self._pod_rules(session, group)

    def node_filter(self, session: SessionView, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        nodes = session.nodes
        spec = group.spec
        failures: list[tuple[Reason, BoolArray]] = [
            (Reason.of(ReasonCode.NODE_NOT_READY), ~nodes.ready),
            (Reason.of(ReasonCode.NODE_UNSCHEDULABLE), nodes.cordoned),
        ]
        if self.affinity:
            failures.append((Reason.of(ReasonCode.NODE_SELECTOR), ~selector_matches(nodes, spec.nodeSelector)))
            matched = required_affinity_matches(nodes, spec)
            if matched is not None:
                failures.append((Reason.of(ReasonCode.NODE_AFFINITY), ~matched))
        if self.taints:
            for taint, mask in untolerated(nodes, spec.tolerations, ("NoSchedule", "NoExecute")).items():
                failures.append((Reason.of(ReasonCode.UNTOLERATED_TAINT, taint=taint_text(taint)), mask))
        if spec.schedulingGates:  # kube-scheduler's SchedulingGates: not scheduled until the gates are removed
            gates = tuple(gate.name for gate in spec.schedulingGates)
            failures.append((Reason.of(ReasonCode.SCHEDULING_GATED, gates=gates), np.ones(len(nodes), dtype=bool)))
        return failures
