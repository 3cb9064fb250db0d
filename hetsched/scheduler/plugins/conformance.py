"""``conformance``: critical pods are never chosen as eviction victims (Volcano's conformance plugin).

Who calls it: the eviction actions (``preempt``, ``reclaim``, node drain) through :meth:`evictable`
to filter victim candidates. Critical means: in ``kube-system``, or with the ``system-cluster-critical``
or ``system-node-critical`` priority class. Arguments: none.
"""

from __future__ import annotations

from hetsched.api.objects import Pod
from hetsched.scheduler.framework import Plugin

NAME = "conformance"
CRITICAL_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})


class Conformance(Plugin):
    NAME = NAME

    @staticmethod
    def evictable(pod: Pod) -> bool:
        if pod.metadata.namespace == "kube-system":
            return False
        return pod.spec.priorityClassName not in CRITICAL_CLASSES
