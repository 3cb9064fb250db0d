"""The cluster a simulation starts from, read from files: hetsched's ``ClusterSpec`` (node pools), or what
an operator has today — ``kubectl get nodes -o yaml`` (a ``List`` of Nodes, or Node documents) and a dump
of what runs on it (``kubectl get pods,podgroups,queues,priorityclasses -A -o yaml``).

Who calls it: ``hetsched simulate``/``doctor``/``explain`` for ``--cluster`` (repeatable), before the
workloads.

What a dump becomes:
- Nodes are the simulated nodes, with their labels, taints, allocatable and (when hetsched's node agent
  published it) chip inventory;
- Pods bound to a node and still running hold their resources from t=0 (the simulated kubelet starts them
  at once; ``hetsched.io/duration`` on them says how long they still run, else they run to the end);
  pending pods wait to be scheduled; finished pods (Succeeded, Failed) are dropped, as they hold nothing;
- PodGroups, Queues, PriorityClasses, PodDisruptionBudgets, ConfigMaps are created as they are.
Timestamps and server-owned fields (times, ``managedFields``, ``resourceVersion``) are dropped: the
simulation's clock starts at 0. Other fields the API server adds are kept or ignored as the models say.
A dump is the cluster *now*: a ``hetsched.io/submit-at`` on a dumped object (the Job controller copies a
Job's annotations onto its PodGroup and pods) is dropped, so nothing in it arrives later than t=0.

Order: whatever order kubectl listed them in (it lists pods before PodGroups), the state is created in
dependency order — classes, queues, configuration, HyperNodes, PodGroups, then pods — so a running pod never
arrives before the PodGroup it belongs to (``STATE_ORDER``).

Bad input is an error naming the file, the document (or List item) and the field; a kind hetsched does
not read is an error, not silently skipped (it could be the object that explains the cluster's state).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hetsched.api.manifest import ManifestError, Problem, list_items, parse_document
from hetsched.api.objects import TIME_KEYS, AnyObject, Node, Pod
from hetsched.api.workload_annotations import SUBMIT_AT
from hetsched.api.yamlsafe import YamlLimitError, read_text, safe_load_all
from hetsched.cluster.spec import is_cluster_spec, load_cluster_spec

SERVER_OWNED = frozenset({"managedFields", "resourceVersion", "selfLink", "generation"})
STATE_ORDER = ("PriorityClass", "Queue", "ConfigMap", "PodDisruptionBudget", "HyperNode", "PodGroup")
"""Kinds created in this order; every other kind after them, pods last."""


def _state_rank(obj: AnyObject) -> int:
    if obj.kind in STATE_ORDER:
        return STATE_ORDER.index(obj.kind)
    return len(STATE_ORDER) + (1 if obj.kind == "Pod" else 0)


def _now(obj: AnyObject) -> AnyObject:
    """``obj`` without a ``submit-at``: in a dump, everything is there at t=0."""
    if SUBMIT_AT not in obj.metadata.annotations:
        return obj
    annotations = {k: v for k, v in obj.metadata.annotations.items() if k != SUBMIT_AT}
    return obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"annotations": annotations})})


@dataclass
class ClusterFiles:
    nodes: list[Node] = field(default_factory=list)
    state: list[AnyObject] = field(default_factory=list)
    """Objects the simulation starts with (created at t=0, before any workload)."""


def _strip(data: Any) -> Any:
    """Drop times and server-owned fields, recursively."""
    if isinstance(data, dict):
        return {k: _strip(v) for k, v in data.items() if k not in TIME_KEYS and k not in SERVER_OWNED}
    if isinstance(data, list):
        return [_strip(v) for v in data]
    return data


def _running(pod: Pod) -> Pod | None:
    """A dumped pod as the simulation starts it: bound and not finished → bound, to be started at t=0."""
    if pod.status.phase in ("Succeeded", "Failed"):
        return None
    if pod.spec.nodeName:
        return pod.model_copy(update={"status": pod.status.model_copy(update={"phase": "Pending"})})
    return pod


def load_dump(path: Path) -> ClusterFiles:
    source = str(path)
    try:
        text = read_text(path)
        documents = safe_load_all(text)
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ManifestError([Problem(source, 0, "", "", "", f"cannot read file: {reason}")]) from None
    except yaml.YAMLError as exc:
        raise ManifestError([Problem(source, 0, "", "", "", f"malformed YAML: {exc}".splitlines()[0])]) from None
    except YamlLimitError as exc:
        raise ManifestError([Problem(source, 0, "", "", "", str(exc))]) from None
    found = ClusterFiles()
    problems: list[Problem] = []
    for index, document in enumerate(documents, start=1):
        for where, item in list_items(document):
            parsed = parse_document(_strip(item), source, index)
            if isinstance(parsed, list):
                problems += [p if not where else Problem(p.source, p.document, p.kind, p.name,
                                                         f"{where}.{p.path}" if p.path else where, p.message)
                             for p in parsed]
            elif isinstance(parsed, Node):
                found.nodes.append(parsed)
            elif isinstance(parsed, Pod):
                started = _running(parsed)
                if started is not None:
                    found.state.append(_now(started))
            else:
                found.state.append(_now(parsed))
    if problems:
        raise ManifestError(problems)
    found.state.sort(key=_state_rank)  # stable: the dump's order within a kind
    return found


def load_cluster(paths: Sequence[Path]) -> ClusterFiles:
    """Every ``--cluster`` file: cluster specs and dumps together; nodes named twice are an error."""
    found = ClusterFiles()
    problems: list[Problem] = []
    for path in paths:
        try:
            if is_cluster_spec(path):
                spec = load_cluster_spec(path)
                nodes = spec.nodes()
                part = ClusterFiles(nodes, list(spec.hypernodes(nodes)))
            else:
                part = load_dump(path)
        except ManifestError as exc:
            problems += exc.problems
            continue
        found.nodes += part.nodes
        found.state += part.state
    seen: set[str] = set()
    for node in found.nodes:
        if node.metadata.name in seen:
            problems.append(Problem(", ".join(map(str, paths)), 0, "Node", node.metadata.name, "metadata.name",
                                    "this node is given twice"))
        seen.add(node.metadata.name)
    found.state.sort(key=_state_rank)  # across files too: pods in one dump, their PodGroups in another
    if not found.nodes and not problems:
        problems.append(Problem(", ".join(map(str, paths)), 0, "", "", "",
                                "no nodes: give a ClusterSpec or Node objects (kubectl get nodes -o yaml)"))
    if problems:
        raise ManifestError(problems)
    return found
