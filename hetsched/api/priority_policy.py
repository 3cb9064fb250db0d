"""Which PriorityClasses a namespace may use: priority is not a tenant's to choose.

Who calls it: the webhook (``/pods`` for pods, ``/validate`` for Volcano Jobs and PodGroups), the embedded
cluster's Priority admission (``cluster.memory``: the simulator), the scheduler's cache (a class a
namespace may not use counts as no class: it never outranks anyone or shields its pods from eviction),
and the ``scheduler``/``webhook`` commands (``--priority-class CLASS=NAMESPACE[,NAMESPACE…]``).

The default is Kubernetes' long-standing rule, which newer API servers leave to ResourceQuota: the two
system classes (``system-node-critical``, ``system-cluster-critical``: 2,000,001,000 and 2,000,000,000,
above every workload) only in ``kube-system``. Any class may be limited the same way; a class not listed
may be used by every namespace. A class listed with ``*`` may be used anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

SYSTEM_CLASSES = ("system-node-critical", "system-cluster-critical")
SYSTEM_NAMESPACE = "kube-system"


def _defaults() -> dict[str, frozenset[str]]:
    return {name: frozenset({SYSTEM_NAMESPACE}) for name in SYSTEM_CLASSES}


@dataclass(frozen=True)
class PriorityPolicy:
    limited: Mapping[str, frozenset[str]] = field(default_factory=_defaults)
    """PriorityClass name → the namespaces that may use it (``*``: all)."""

    def permits(self, class_name: str, namespace: str) -> bool:
        allowed = self.limited.get(class_name)
        return allowed is None or "*" in allowed or (namespace or "default") in allowed

    def problem(self, class_name: str, namespace: str) -> str:
        """Why ``namespace`` may not use ``class_name`` ("" when it may)."""
        if not class_name or self.permits(class_name, namespace):
            return ""
        allowed = ", ".join(sorted(self.limited[class_name]))
        return (f"PriorityClass {class_name} may be used only in namespace(s) {allowed}, not in "
                f"{namespace or 'default'} (priority is given by the platform team: --priority-class)")


DEFAULT = PriorityPolicy()


def parse(entries: Iterable[str]) -> PriorityPolicy:
    """``CLASS=NAMESPACE[,NAMESPACE…]`` entries on top of the defaults (a later entry for a class replaces
    the earlier one); one argument may hold several, each ended by ``;`` (the install's ``priorityClasses``
    value; an argument of none is nothing); a ValueError names the entry."""
    limited = _defaults()
    for entry in (part for argument in entries for part in argument.split(";") if part.strip()):
        name, sep, namespaces = entry.partition("=")
        spaces = frozenset(n.strip() for n in namespaces.split(",") if n.strip())
        if not sep or not name.strip() or not spaces:
            raise ValueError(f"--priority-class {entry[:100]!r}: expected CLASS=NAMESPACE[,NAMESPACE…] (or CLASS=*)")
        limited[name.strip()] = spaces
    return PriorityPolicy(limited)


def job_class_names(raw: Mapping[str, object]) -> list[tuple[str, str]]:
    """(field path, PriorityClass name) of every class a Volcano Job, PodGroup or Pod (as a raw mapping)
    names: the Job's and its task templates', the PodGroup's, the Pod's."""
    found: list[tuple[str, str]] = []
    spec = raw.get("spec")
    if not isinstance(spec, Mapping):
        return found
    name = spec.get("priorityClassName")
    if isinstance(name, str) and name:
        found.append(("spec.priorityClassName", name))
    tasks = spec.get("tasks")
    if raw.get("kind") == "Job" and isinstance(tasks, list):
        for index, task in enumerate(tasks):
            template = task.get("template") if isinstance(task, Mapping) else None
            inner = template.get("spec") if isinstance(template, Mapping) else None
            klass = inner.get("priorityClassName") if isinstance(inner, Mapping) else None
            if isinstance(klass, str) and klass:
                found.append((f"spec.tasks[{index}].template.spec.priorityClassName", klass))
    return found
