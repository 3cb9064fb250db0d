"""Volcano's scheduling annotations hetsched reads, parsed in one place and checked where manifests are read.

Who calls it: ``api.manifest.parse_document`` (so ``hetsched validate`` and the admission webhook name the
object and the field of a bad value), the job controller (it hands a Job's cooldown to its pods, as
Volcano's does) and the ``sla`` and ``cdp`` plugins (they read the values).

- ``volcano.sh/sla-waiting-time``, and the older ``sla-waiting-time`` (a Job's, on its PodGroup): how long
  the job may wait before the ``sla`` plugin admits it and holds resources for it — a Go duration > 0;
- ``volcano.sh/cooldown-time`` (a pod's label, else annotation; a Job's annotation is handed to its pods):
  how long after it starts the ``cdp`` plugin keeps the pod from being a victim — a Go duration;
- ``volcano.sh/resource-strategy-scoring-type`` (``MostAllocated`` or ``LeastAllocated``) with
  ``volcano.sh/resource-strategy-weight`` (a JSON map of resource → weight) on a pod: how
  ``resource-strategy-fit`` scores nodes for it, instead of the plugin's arguments; the one without the
  other is an error;
- ``volcano.sh/nodegroup-resource-limits`` (a Queue's): a JSON map of node group → resources (quantities)
  the queue may hold on that group's nodes (``nodegroup``);
- ``volcano.sh/hierarchy`` and ``volcano.sh/hierarchy-weights`` (a Queue's): Volcano's hierarchical DRF
  (``drf`` with ``enableHierarchy``), which hetsched does not do — refused, pointing to ``spec.parent``
  (``proportion``'s hierarchy, or ``capacity`` with ``enableHierarchy``), never silently ignored;
- ``volcano.sh/task-topology-affinity``, ``…-anti-affinity`` (``"ps,worker;ps,chief"``: groups of task names,
  ``;``-separated; a group of one: the task with itself) and ``volcano.sh/task-topology-task-order``
  (``"ps,worker"``) on a Job (its PodGroup): ``task-topology``'s rules; every name must be one of the Job's
  tasks, once per group.

Volcano logs a bad value and ignores it; hetsched refuses it at admission and in ``validate``, and the
plugins treat a value that got past both (written around the webhook) as absent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from hetsched.api.annotations import go_duration
from hetsched.api.quantity import QuantityError, parse_quantity

SLA_WAITING_TIME = "volcano.sh/sla-waiting-time"
SLA_WAITING_TIME_OLD = "sla-waiting-time"
"""The key Volcano's scheduler reads when the ``volcano.sh/`` one is absent (its design document's spelling)."""
COOLDOWN_TIME = "volcano.sh/cooldown-time"
STRATEGY_TYPE = "volcano.sh/resource-strategy-scoring-type"
STRATEGY_WEIGHT = "volcano.sh/resource-strategy-weight"
STRATEGIES = ("MostAllocated", "LeastAllocated")
SCORING = (STRATEGY_TYPE, STRATEGY_WEIGHT)
"""Pod annotations that change how nodes are scored for the pod: the scheduler's cache groups pods by them
(pods of one group are interchangeable)."""
NODEGROUP_LIMITS = "volcano.sh/nodegroup-resource-limits"
HIERARCHY = ("volcano.sh/hierarchy", "volcano.sh/hierarchy-weights")
TASK_AFFINITY = "volcano.sh/task-topology-affinity"
TASK_ANTI_AFFINITY = "volcano.sh/task-topology-anti-affinity"
TASK_ORDER = "volcano.sh/task-topology-task-order"
_TASK_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True)
class TaskTopology:
    """A job's ``task-topology`` rules: groups of tasks to put together, groups to keep apart (a group of
    one: the task's own pods), and the order tasks are placed in."""

    affinity: tuple[tuple[str, ...], ...] = ()
    anti_affinity: tuple[tuple[str, ...], ...] = ()
    order: tuple[str, ...] = ()
MAX_WEIGHTS = 64
"""Resources one ``resource-strategy-weight`` may name (a node has a few dozen at most)."""


def sla_waiting_time(annotations: Mapping[str, str]) -> float | None:
    """Seconds the job may wait (``volcano.sh/sla-waiting-time``, else ``sla-waiting-time``); None when
    absent; ValueError when set and not a positive duration."""
    for key in (SLA_WAITING_TIME, SLA_WAITING_TIME_OLD):
        if key in annotations:
            value = go_duration(annotations[key])
            if value <= 0:
                raise ValueError(f"must be a duration above 0, got {annotations[key][:80]!r}")
            return value
    return None


def cooldown_time(labels: Mapping[str, str], annotations: Mapping[str, str]) -> float | None:
    """Seconds a pod is protected after it starts (the label, else the annotation); None when absent;
    ValueError when not a duration."""
    raw = labels.get(COOLDOWN_TIME, annotations.get(COOLDOWN_TIME))
    return None if raw is None else go_duration(raw)


def resource_strategy(annotations: Mapping[str, str]) -> tuple[str, dict[str, int]] | None:
    """The pod's own scoring (strategy, resource → weight); None when it has none; ValueError naming the
    annotation when it is half given or not readable."""
    kind, raw = annotations.get(STRATEGY_TYPE), annotations.get(STRATEGY_WEIGHT)
    if kind is None and raw is None:
        return None
    if kind is None or raw is None:
        given, missing = (STRATEGY_TYPE, STRATEGY_WEIGHT) if raw is None else (STRATEGY_WEIGHT, STRATEGY_TYPE)
        raise ValueError(f"{given} is set but {missing} is not; give both")
    if kind not in STRATEGIES:
        raise ValueError(f"{STRATEGY_TYPE} must be {' or '.join(STRATEGIES)}, got {kind[:80]!r}")
    try:
        weights = json.loads(raw) if len(raw) <= 4096 else None
    except (ValueError, RecursionError):  # "[[[[…" nests past the parser's recursion limit
        weights = None
    if not isinstance(weights, dict) or not weights or len(weights) > MAX_WEIGHTS or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1_000_000
            for k, v in weights.items()):
        raise ValueError(f"{STRATEGY_WEIGHT} must be a JSON map of resource names to whole weights ≥ 0, "
                         f"such as '{{\"nvidia.com/gpu\": 5, \"cpu\": 1}}', got {raw[:80]!r}")
    return kind, weights


def nodegroup_limits(annotations: Mapping[str, str]) -> dict[str, dict[str, int]] | None:
    """Node group → resource → milli-units the queue may hold there; None when absent; ValueError saying
    what is wrong otherwise."""
    raw = annotations.get(NODEGROUP_LIMITS)
    if raw is None:
        return None
    example = '\'{"gpu-pool": {"cpu": "100", "nvidia.com/gpu": "16"}}\''
    try:
        parsed = json.loads(raw) if len(raw) <= 65536 else None
    except (ValueError, RecursionError):
        parsed = None
    if not isinstance(parsed, dict) or len(parsed) > 1024:
        raise ValueError(f"must be a JSON map of node group to resources, such as {example}, got {raw[:80]!r}")
    limits: dict[str, dict[str, int]] = {}
    for group, resources in parsed.items():
        if not isinstance(resources, dict) or len(resources) > MAX_WEIGHTS:
            raise ValueError(f"node group {group[:80]!r}: must map resource names to quantities, such as {example}")
        limits[group] = {}
        for name, amount in resources.items():
            try:
                limits[group][name] = parse_quantity(amount)
            except QuantityError as exc:
                raise ValueError(f"node group {group[:80]!r}, resource {name[:80]!r}: {exc}") from None
    return limits


def _task_groups(key: str, raw: str, tasks: Collection[str] | None) -> tuple[tuple[str, ...], ...]:
    if len(raw) > 4096:
        raise ValueError(f"{key} is longer than 4096 characters")
    groups = []
    for part in raw.split(";"):
        names = [name.strip() for name in part.split(",") if name.strip()]
        for name in names:
            if not _TASK_NAME.fullmatch(name) or len(name) > 63:
                raise ValueError(f"{key}: {name[:80]!r} is not a task name")
            if tasks is not None and name not in tasks:
                raise ValueError(f"{key}: task {name!r} is not one of the job's tasks ({', '.join(sorted(tasks))})")
        if len(set(names)) != len(names):
            raise ValueError(f"{key}: a task is named twice in {part.strip()[:80]!r}")
        if names:
            groups.append(tuple(names))
    return tuple(groups)


def task_topology(annotations: Mapping[str, str], tasks: Collection[str] | None = None) -> TaskTopology | None:
    """The job's ``task-topology`` rules; None when it gives none; ValueError naming the annotation when one
    cannot be read or names a task the job does not have (``tasks``; None: not checked)."""
    if not any(key in annotations for key in (TASK_AFFINITY, TASK_ANTI_AFFINITY, TASK_ORDER)):
        return None
    order = _task_groups(TASK_ORDER, annotations.get(TASK_ORDER, "").replace(";", ","), tasks)
    return TaskTopology(_task_groups(TASK_AFFINITY, annotations.get(TASK_AFFINITY, ""), tasks),
                        _task_groups(TASK_ANTI_AFFINITY, annotations.get(TASK_ANTI_AFFINITY, ""), tasks),
                        order[0] if order else ())


def problems(kind: str, labels: Mapping[str, str], annotations: Mapping[str, str],
             templates: Sequence[tuple[str, Mapping[str, str], Mapping[str, str]]],
             tasks: Collection[str] | None = None) -> list[tuple[str, str]]:
    """(field, message) for each bad value: the object's own (``labels``, ``annotations``) and, for a Job,
    its task templates' (field prefix, labels, annotations) and its task names (``tasks``)."""
    found = []
    if kind in ("Job", "PodGroup"):
        for key in (TASK_AFFINITY, TASK_ANTI_AFFINITY, TASK_ORDER):
            if key in annotations:
                try:
                    task_topology({key: annotations[key]}, tasks)
                except ValueError as exc:
                    found.append((f'metadata.annotations["{key}"]', str(exc)))
    for key in HIERARCHY if kind == "Queue" else ():
        if key in annotations:
            found.append((f'metadata.annotations["{key}"]', "Volcano's hierarchical DRF by annotation is not "
                          "supported by hetsched; give the queue tree with spec.parent (proportion's hierarchy, or "
                          "capacity with enableHierarchy: true)"))
    if kind == "Queue" and NODEGROUP_LIMITS in annotations:
        try:
            nodegroup_limits(annotations)
        except ValueError as exc:
            found.append((f'metadata.annotations["{NODEGROUP_LIMITS}"]', str(exc)))
    if kind in ("Job", "PodGroup"):
        for key in (SLA_WAITING_TIME, SLA_WAITING_TIME_OLD):
            if key in annotations:
                try:
                    sla_waiting_time({key: annotations[key]})
                except ValueError as exc:
                    found.append((f'metadata.annotations["{key}"]', str(exc)))
    places = [("metadata", labels, annotations)] if kind in ("Job", "Pod") else []
    for prefix, place_labels, place_annotations in [*places, *templates]:
        if (kind == "Pod" or prefix != "metadata") and (STRATEGY_TYPE in place_annotations
                                                        or STRATEGY_WEIGHT in place_annotations):
            try:
                resource_strategy(place_annotations)
            except ValueError as exc:
                key = STRATEGY_TYPE if STRATEGY_TYPE in str(exc).split(" ")[0] else STRATEGY_WEIGHT
                found.append((f'{prefix}.annotations["{key}"]', str(exc)))
        for field, values in (("labels", place_labels), ("annotations", place_annotations)):
            if COOLDOWN_TIME in values:
                try:
                    go_duration(values[COOLDOWN_TIME])
                except ValueError as exc:
                    found.append((f'{prefix}.{field}["{COOLDOWN_TIME}"]', str(exc)))
    return found
