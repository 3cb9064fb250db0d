"""``predicates``: static node filters — readiness, cordon, nodeSelector, required node affinity, taints.

Who calls it: the session's ``static_checks`` (``node_filter``), once per distinct placement key per cycle,
vectorised over all nodes via integer label codes. Every failure here is *unresolvable*: freeing
resources would not make the node fit. Resource fit and the pod-count limit are checked by the allocate
action itself (the ``pods`` resource), as Volcano does.

Arguments (Volcano's keys; the ones hetsched has no counterpart for are accepted and have no effect)::

    - name: predicates
      arguments:
        predicate.NodeAffinityEnable: true      # nodeSelector + required node affinity
        predicate.TaintTolerationEnable: true   # NoSchedule / NoExecute taints
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.scheduler.framework import Arguments, BoolArray, Plugin
from hetsched.scheduler.nodematch import selector_matches, taint_text, term_matches, untolerated
from hetsched.scheduler.snapshot import TaskGroup

if TYPE_CHECKING:
    from hetsched.scheduler.session import Session

NAME = "predicates"
_ACCEPTED = {
    "predicate.NodeAffinityEnable", "predicate.TaintTolerationEnable", "predicate.NodePortsEnable",
    "predicate.PodAffinityEnable", "predicate.NodeVolumeLimitsEnable", "predicate.VolumeZoneEnable",
    "predicate.PodTopologySpreadEnable", "predicate.VolumeBindingEnable", "predicate.CacheEnable",
    "predicate.DynamicResourceAllocationEnable", "predicate.GPUSharingEnable", "predicate.GPUNumberEnable",
    "volumebinding.bindTimeoutSeconds", "dynamicresources.filterTimeoutSeconds",
}


class Predicates(Plugin):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known(_ACCEPTED)
        self.affinity = arguments.flag("predicate.NodeAffinityEnable", True)
        self.taints = arguments.flag("predicate.TaintTolerationEnable", True)

    def node_filter(self, session: Session, group: TaskGroup) -> list[tuple[str, BoolArray]]:
        nodes = session.nodes
        spec = group.spec
        failures: list[tuple[str, BoolArray]] = [
            ("node(s) were not ready", ~nodes.ready),
            ("node(s) were unschedulable", nodes.cordoned),
        ]
        if self.affinity:
            failures.append(("node(s) didn't match Pod's node selector", ~selector_matches(nodes, spec.nodeSelector)))
            affinity = spec.affinity.nodeAffinity if spec.affinity else None
            required = affinity.requiredDuringSchedulingIgnoredDuringExecution if affinity else None
            if required is not None:
                matched = np.zeros(len(nodes), dtype=bool)
                for term in required.nodeSelectorTerms:
                    matched |= term_matches(nodes, term)
                failures.append(("node(s) didn't match Pod's node affinity", ~matched))
        if self.taints:
            for taint, mask in untolerated(nodes, spec.tolerations, ("NoSchedule", "NoExecute")).items():
                failures.append((f"node(s) had untolerated taint {taint_text(taint)}", mask))
        return failures
