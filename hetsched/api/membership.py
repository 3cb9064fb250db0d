"""Which PodGroup a pod belongs to, and which queue a plain pod asks for — read the ways Volcano's users and
the operators that hand their gangs to Volcano write them.

Who calls it: the scheduler's cache (a pod's gang), the PodGroup controller (a pod that names no group
gets one of its own), the simulator's results and input checks, the job controller (what it writes).

Keys, in the order they are read (the first one set wins):
1. annotation ``scheduling.k8s.io/group-name`` — what Volcano's scheduler reads and its job controller,
   Kubeflow's training operator, Spark's Volcano feature step, KubeRay and the MPI operator write;
2. annotation ``scheduling.volcano.sh/group-name`` — Volcano's newer key;
3. the same two keys as labels (``scheduling.k8s.io/group-name``, then ``scheduling.volcano.sh/group-name``),
   which newer operators (Kubeflow Trainer v2) set.
An empty value counts as unset. A pod's queue comes from its PodGroup; a pod without one asks for
``scheduling.volcano.sh/queue-name`` (annotation, else label), else ``default``.
"""

from __future__ import annotations

from collections.abc import Mapping

K8S_GROUP_KEY = "scheduling.k8s.io/group-name"
VOLCANO_GROUP_KEY = "scheduling.volcano.sh/group-name"
GROUP_KEYS = (K8S_GROUP_KEY, VOLCANO_GROUP_KEY)
QUEUE_KEY = "scheduling.volcano.sh/queue-name"


def group_name(annotations: Mapping[str, str], labels: Mapping[str, str]) -> str:
    """The PodGroup a pod names (in its own namespace), "" when it names none."""
    for source in (annotations, labels):
        for key in GROUP_KEYS:
            value = source.get(key)
            if value:
                return value
    return ""


def group_source(annotations: Mapping[str, str], labels: Mapping[str, str]) -> str:
    """Where :func:`group_name` found the name (``annotation K`` or ``label K``), "" when nowhere: for
    messages that must say which field to fix."""
    for kind, source in (("annotation", annotations), ("label", labels)):
        for key in GROUP_KEYS:
            if source.get(key):
                return f"{kind} {key}"
    return ""


def queue_name(annotations: Mapping[str, str], labels: Mapping[str, str]) -> str:
    """The queue a pod without a PodGroup asks for."""
    return annotations.get(QUEUE_KEY) or labels.get(QUEUE_KEY) or "default"
