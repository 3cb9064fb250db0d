"""Reading multi-document Kubernetes YAML into typed objects, with errors a person can act on.

Who calls it: ``hetsched validate``, ``hetsched simulate`` (workload files), the cluster-spec loader and
tests. Each problem becomes one line::

    job.yaml: document 1 (Job/ascend-bert-pretrain): spec.tasks[0].template.spec.nodeSelector: value of
    'huawei.com/Ascend910' must be a string, got bool true; … quote it: huawei.com/Ascend910: "true"

A document may be a ``List`` (``kubectl get … -o yaml``): its items are read as documents, a problem naming
``items[i]``; times the API server wrote (``creationTimestamp``, …) are read as RFC 3339 (``api.times``).

Invariant: loading either returns every object of every file, or raises :class:`ManifestError` holding every
problem found; nothing is half-loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from hetsched.api import hypernodes as hypernodes_tree
from hetsched.api import queue_access, volcano_annotations, workload_annotations
from hetsched.api.objects import CLUSTER_SCOPED, KINDS, AnyObject, HyperNode, Job, Node, object_key
from hetsched.api.priority_policy import DEFAULT as DEFAULT_PRIORITY
from hetsched.api.priority_policy import job_class_names
from hetsched.api.times import epoch_times
from hetsched.api.validation import problems
from hetsched.api.yamlsafe import YamlLimitError, iter_load_all, read_text


@dataclass(frozen=True)
class Problem:
    """One invalid thing in one document."""

    source: str
    document: int
    """1-based index of the document in its file (0 when the file itself is unreadable)."""
    kind: str
    name: str
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.source}: document {self.document}" if self.document else self.source
        what = f" ({self.kind}/{self.name})" if self.kind else ""
        field = f" {self.path}:" if self.path else ""
        return f"{where}{what}:{field} {self.message}"


class ManifestError(ValueError):
    """Raised with every :class:`Problem` found; ``str()`` is one line per problem."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def _pydantic_problems(exc: ValidationError, source: str, index: int, kind: str, name: str) -> list[Problem]:
    return [Problem(source, index, kind, name, where, text)
            for where, text in problems(exc, unknown="unknown field (check the spelling against the Volcano API)")]


def list_items(document: Any) -> list[tuple[str, Any]]:
    """A document, or the items of a ``List``/``NodeList``/… (what ``kubectl get -o yaml`` prints), each with
    where it was found (``items[3]``, "" for a plain document)."""
    if isinstance(document, dict) and isinstance(document.get("kind"), str) and document["kind"].endswith("List") \
            and "items" in document:
        items = document["items"]
        if not isinstance(items, list):
            return [("items", document)]  # parse_document reports a map it cannot read
        kind = document["kind"].removesuffix("List")
        version = document.get("apiVersion")
        out = []
        for index, item in enumerate(items):
            if isinstance(item, dict) and kind and "kind" not in item:  # NodeList items carry no kind
                item = {"kind": kind, "apiVersion": version, **item}
            out.append((f"items[{index}]", item))
        return out
    return [("", document)]


OLDER_VERSIONS = {("scheduling.k8s.io/v1beta1", "PriorityClass"): "scheduling.k8s.io/v1",
                  ("scheduling.k8s.io/v1alpha1", "PriorityClass"): "scheduling.k8s.io/v1",
                  ("policy/v1beta1", "PodDisruptionBudget"): "policy/v1"}
"""Earlier API versions of kinds whose fields did not change (Volcano's examples still write
``scheduling.k8s.io/v1beta1`` PriorityClasses; servers before 1.21 serve PodDisruptionBudgets only as
``policy/v1beta1``, and the webhook sees them so): read as the current version, as the Kubernetes adapter
reads them."""


def parse_document(doc: Any, source: str, index: int) -> AnyObject | list[Problem]:
    """Validate one decoded YAML document; return the object or its problems."""
    if not isinstance(doc, dict):
        got = type(doc).__name__
        return [Problem(source, index, "", "", "", f"expected a Kubernetes object (a map), got {got}")]
    kind = doc.get("kind")
    api_version = doc.get("apiVersion")
    metadata = doc.get("metadata")
    name = str(metadata.get("name", "")) if isinstance(metadata, dict) else ""
    if not isinstance(kind, str) or not kind:
        return [Problem(source, index, "", name, "kind", "required field is missing")]
    if not isinstance(api_version, str) or not api_version:
        return [Problem(source, index, kind, name, "apiVersion", "required field is missing")]
    if (api_version, kind) in OLDER_VERSIONS:  # a kind's earlier API version: read as the current one
        api_version = OLDER_VERSIONS[(api_version, kind)]
        doc = {**doc, "apiVersion": api_version}
    model = KINDS.get((api_version, kind))
    if model is None:
        known = ", ".join(f"{k} ({v})" for v, k in sorted(KINDS, key=lambda x: x[1]))
        message = f"unknown kind {api_version}/{kind}; hetsched reads {known}"
        return [Problem(source, index, kind, name, "kind", message)]
    try:
        obj = model.model_validate(doc)
    except ValidationError as exc:
        return _pydantic_problems(exc, source, index, kind, name)
    if kind not in CLUSTER_SCOPED and not obj.metadata.namespace:
        obj = obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"namespace": "default"})})
    bad = workload_annotations.problems(kind, obj.metadata.annotations, [
        (f"spec.tasks[{i}].template.metadata.annotations", task.template.metadata.annotations)
        for i, task in enumerate(obj.spec.tasks)] if isinstance(obj, Job) else [])
    bad += volcano_annotations.problems(kind, obj.metadata.labels, obj.metadata.annotations, [
        (f"spec.tasks[{i}].template.metadata", task.template.metadata.labels, task.template.metadata.annotations)
        for i, task in enumerate(obj.spec.tasks)] if isinstance(obj, Job) else [],
        [task.name for task in obj.spec.tasks] if isinstance(obj, Job) else None)
    bad += queue_access.problems(kind, obj.metadata.annotations)
    if bad:
        return [Problem(source, index, kind, name, field, message) for field, message in bad]
    return obj


def load_text(text: str, source: str = "<string>") -> list[AnyObject]:
    """Parse and validate every document of a YAML stream; raise :class:`ManifestError` on any problem
    (including an object named twice)."""
    entries = _entries(text, source)
    duplicates = duplicate_problems(entries)
    if duplicates:
        raise ManifestError(duplicates)
    return [obj for _, _, obj in entries]


def _entries(text: str, source: str) -> list[tuple[str, int, AnyObject]]:
    objects: list[tuple[str, int, AnyObject]] = []
    problems: list[Problem] = []
    try:  # one raw document held at a time: each becomes its object (or its problems) and is let go
        for index, doc in enumerate(iter_load_all(text), start=1):
            for where, item in list_items(doc):
                result = parse_document(epoch_times(item) if isinstance(item, dict) else item, source, index)
                if not isinstance(result, list) and result.kind in ("Job", "PodGroup", "Pod"):
                    result = priority_problems(item, result, source, index) or result
                if isinstance(result, list):
                    problems.extend(p if not where else Problem(p.source, p.document, p.kind, p.name,
                                                                f"{where}.{p.path}" if p.path else where, p.message)
                                    for p in result)
                else:
                    objects.append((source, index, result))
    except YamlLimitError as exc:
        raise ManifestError([Problem(source, 0, "", "", "", str(exc))]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ManifestError([Problem(source, 0, "", "", "", f"malformed YAML{where}: {reason}")]) from None
    if problems:
        raise ManifestError(problems)
    return objects


def priority_problems(doc: dict[str, Any], obj: AnyObject, source: str, index: int) -> list[Problem]:
    """A PriorityClass the object's namespace may not use (``api.priority_policy``'s default rule: the
    system classes only in kube-system), one problem per field that names one."""
    namespace = obj.metadata.namespace or "default"
    return [Problem(source, index, obj.kind, obj.metadata.name, path, problem) for path, name in job_class_names(doc)
            if (problem := DEFAULT_PRIORITY.problem(name, namespace))]


def duplicate_problems(entries: list[tuple[str, int, AnyObject]]) -> list[Problem]:
    """Objects named twice (same kind, namespace and name), across all files, as the API server would refuse
    the second create. A Job may be listed again with a later ``hetsched.io/submit-at``: that is an update
    (scaling), as ``kubectl apply`` would send it."""
    seen: dict[tuple[str, str], list[tuple[str, str, int]]] = {}
    problems = []
    for source, index, obj in entries:
        if not obj.metadata.name:
            continue  # generateName: named on creation
        key = (obj.kind, object_key(obj))
        at = obj.metadata.annotations.get(workload_annotations.SUBMIT_AT, "0")
        earlier = seen.setdefault(key, [])
        if earlier and (obj.kind != "Job" or any(float(at) == float(previous) for previous, _, _ in earlier)):
            first_source, first_index = earlier[0][1], earlier[0][2]
            hint = (f" (a Job listed again needs a later {workload_annotations.SUBMIT_AT}: it is an update)"
                    if obj.kind == "Job" else "")
            problems.append(Problem(source, index, obj.kind, obj.metadata.name, "metadata.name",
                                    f"{obj.kind} {object_key(obj)} is already defined in {first_source} document "
                                    f"{first_index}{hint}"))
        earlier.append((at, source, index))
    return problems


def topology_problems(entries: list[tuple[str, int, AnyObject]], *, with_nodes: bool) -> list[Problem]:
    """The HyperNodes among ``entries`` checked as one tree (``api.hypernodes``), against the Nodes among
    them when ``with_nodes`` (a whole cluster is given), else against each other only."""
    hypernodes = [(source, index, obj) for source, index, obj in entries if isinstance(obj, HyperNode)]
    if not hypernodes:
        return []
    nodes = [obj for _, _, obj in entries if isinstance(obj, Node)] if with_nodes else None
    _, found = hypernodes_tree.build([obj for _, _, obj in hypernodes], nodes)
    where = {obj.metadata.name: (source, index) for source, index, obj in hypernodes}
    return [Problem(*where[p.hypernode], "HyperNode", p.hypernode, p.path, p.message) for p in found]


def check_cluster(objects: list[AnyObject]) -> None:
    """Cross-object checks of a whole cluster (its nodes and the workload): the HyperNode tree against the
    nodes. Raises :class:`ManifestError`."""
    problems = topology_problems([("the cluster", 0, obj) for obj in objects], with_nodes=True)
    if problems:
        raise ManifestError(problems)


def load_files(paths: Iterable[str | Path],
               check: Callable[[str, int, AnyObject], list[Problem]] | None = None) -> list[AnyObject]:
    """Load several files; problems of all files are collected before raising. ``check`` (source, document,
    object → problems) is the caller's own check of each object, e.g. ``hetsched validate`` parsing a
    scheduler ConfigMap's configuration as the scheduler would (the API layer knows no scheduler)."""
    entries: list[tuple[str, int, AnyObject]] = []
    problems: list[Problem] = []
    for path in paths:
        source = str(path)
        try:
            text = read_text(path)
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            problems.append(Problem(source, 0, "", "", "", f"cannot read file: {reason}"))
            continue
        try:
            entries.extend(_entries(text, source))
        except ManifestError as exc:
            problems.extend(exc.problems)
    problems += duplicate_problems(entries)
    if not problems:
        problems += topology_problems(entries, with_nodes=any(isinstance(obj, Node) for _, _, obj in entries))
    if check is not None:
        for source, index, obj in entries:
            problems += check(source, index, obj)
    if problems:
        raise ManifestError(problems)
    return [obj for _, _, obj in entries]
