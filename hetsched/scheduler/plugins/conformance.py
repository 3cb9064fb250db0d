"""``conformance``: critical pods are never chosen as eviction victims (Volcano's conformance plugin).

Who calls it: the eviction actions (``preempt``, ``reclaim``) through the session's ``evictable``
extension point, to filter victim candidates. Critical means: in ``kube-system``, or with the
``system-cluster-critical`` or ``system-node-critical`` priority class. Arguments: none.
"""

from __future__ import annotations

from hetsched.scheduler.contract.framework import Evictable, Plugin
from hetsched.scheduler.contract.snapshot import RunningPod

NAME = "conformance"
CRITICAL_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})


class Conformance(Plugin, Evictable):
    NAME = NAME

    def evictable(self, victim: RunningPod) -> bool:
        if victim.namespace == "kube-system":
            return False
        return victim.priority_class not in CRITICAL_CLASSES
