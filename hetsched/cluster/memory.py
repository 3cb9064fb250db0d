"""The embedded cluster: an in-memory object store with resourceVersions and watches, plus the binder,
evictor and status updater the scheduler and controllers use.

Who calls it: the simulator, ``hetsched demo``, the benchmark and tests. It implements every port of
``hetsched.ports``; the Kubernetes adapter implements the same ones against a real API server.

Invariants:
- Stored objects are immutable values. ``update`` requires the caller's ``metadata.resourceVersion`` to
  equal the stored one (optimistic concurrency, :class:`~hetsched.ports.Conflict` otherwise), then stores
  the copy under the next resourceVersion.
- Watch events are delivered in resourceVersion order, one at a time: a handler that writes to the store
  during delivery has its own events queued behind the current one, never delivered re-entrantly.
- Not thread-safe; the simulator and tests drive it from one thread.
"""

from __future__ import annotations

import builtins
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from hetsched.api.disruption import refusal
from hetsched.api.objects import (
    CLUSTER_SCOPED,
    KINDS,
    AnyObject,
    Condition,
    Job,
    Pod,
    PodDisruptionBudget,
    PodGroup,
    PriorityClass,
    object_key,
)
from hetsched.api.priority_policy import DEFAULT as DEFAULT_PRIORITY
from hetsched.api.priority_policy import PriorityPolicy
from hetsched.api.validation import first_problem
from hetsched.ports import (
    BindRequest,
    Clock,
    Conflict,
    Failure,
    Invalid,
    NotFound,
    PodGroupStatusUpdate,
    TooManyRequests,
    WatchEvent,
    WatchHandler,
)

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""Kubernetes' ``utilrand.String`` alphabet."""

_MODELS = {kind: model for (_, kind), model in KINDS.items()}


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes-style Event: something worth telling the user about an object."""

    time: float
    kind: str
    key: str
    type: str
    reason: str
    message: str


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class MemoryCluster:
    """Objects by kind and key; implements ``ObjectStore``, ``Binder``, ``Evictor`` and ``StatusUpdater``."""

    def __init__(self, clock: Clock, *, max_events: int = 10_000,
                 priority_policy: PriorityPolicy = DEFAULT_PRIORITY) -> None:
        self.clock = clock
        self.priority_policy = priority_policy
        """Which namespaces may use which PriorityClasses (the Priority admission refuses the rest, as the
        webhook's ``/pods`` does on a real cluster)."""
        self._objects: dict[str, dict[str, AnyObject]] = {kind: {} for kind in _MODELS}
        self._version = 0
        self._watchers: list[tuple[frozenset[str], WatchHandler]] = []
        self._queue: deque[tuple[WatchEvent, tuple[WatchHandler, ...]]] = deque()
        self._delivering = False
        self.events: deque[Event] = deque(maxlen=max_events)

    # ----------------------------------------------------------------------------------- reads

    def get(self, kind: str, key: str) -> AnyObject:
        try:
            return self._objects[kind][key]
        except KeyError:
            raise NotFound(f"{kind} {key} not found") from None

    def list(self, kind: str) -> list[AnyObject]:
        return list(self._objects[kind].values())

    def count(self, kind: str) -> int:
        return len(self._objects[kind])

    @property
    def resource_version(self) -> int:
        return self._version

    # ----------------------------------------------------------------------------------- watch

    def watch(self, kinds: tuple[str, ...], handler: WatchHandler, *, replay: bool = True) -> Callable[[], None]:
        entry = (frozenset(kinds), handler)
        self._watchers.append(entry)
        if replay:
            for kind in kinds:
                for obj in list(self._objects[kind].values()):
                    self._queue.append((WatchEvent("ADDED", obj), (handler,)))
            self._drain()

        def stop() -> None:
            if entry in self._watchers:
                self._watchers.remove(entry)

        return stop

    def _emit(self, event: WatchEvent) -> None:
        handlers = tuple(h for kinds, h in self._watchers if event.object.kind in kinds)
        if handlers:
            self._queue.append((event, handlers))
            self._drain()

    def _drain(self) -> None:
        if self._delivering:
            return
        self._delivering = True
        try:
            while self._queue:
                event, handlers = self._queue.popleft()
                for handler in handlers:
                    handler(event)
        finally:
            self._delivering = False

    # ----------------------------------------------------------------------------------- writes

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _generated_name(self, kind: str, meta: Any) -> str:
        """``generateName`` + 5 characters from Kubernetes' alphabet (no vowels, no 0/1/3), deterministic
        here (from the store's version counter) so that a simulation replays the same names."""
        seed = self._version * 2654435761 % (27 ** 5)
        for attempt in range(27 ** 5):
            value, suffix = (seed + attempt) % (27 ** 5), ""
            for _ in range(5):
                value, digit = divmod(value, 27)
                suffix += _NAME_ALPHABET[digit]
            name = f"{meta.generateName}{suffix}"
            namespace = f"{meta.namespace}/" if meta.namespace else ""
            if f"{namespace}{name}" not in self._objects[kind]:
                return name
        raise Conflict(f"{kind}: no free name left for generateName {meta.generateName!r}")

    def create(self, obj: AnyObject) -> AnyObject:
        kind = obj.kind
        meta = obj.metadata
        if kind not in CLUSTER_SCOPED and not meta.namespace:
            meta = meta.model_copy(update={"namespace": "default"})
            obj = obj.model_copy(update={"metadata": meta})
        if not meta.name:
            meta = meta.model_copy(update={"name": self._generated_name(kind, meta)})
            obj = obj.model_copy(update={"metadata": meta})
        key = object_key(obj)
        if key in self._objects[kind]:
            raise Conflict(f"{kind} {key} already exists")
        if isinstance(obj, Pod):
            obj = self._admit_priority(obj, key)
        version = self._next_version()
        meta = meta.model_copy(
            update={
                "resourceVersion": version,
                "uid": meta.uid or f"{kind.lower()}-{version}",
                "creationTimestamp": meta.creationTimestamp if meta.creationTimestamp is not None else self.clock.now(),
            }
        )
        stored = obj.model_copy(update={"metadata": meta})
        self._objects[kind][key] = stored
        self._emit(WatchEvent("ADDED", stored))
        return stored

    def _admit_priority(self, pod: Pod, key: str) -> Pod:
        """kube-apiserver's Priority admission: resolve ``priorityClassName`` into ``spec.priority``; a class the
        pod's namespace may not use (``api.priority_policy``) is refused, as hetsched's webhook refuses it. A
        pod that comes with its priority resolved (a dump of a running cluster) is taken as it is: the
        scheduler's cache gives a class its namespace may not use no weight."""
        if pod.spec.priority is not None:
            return pod
        name = pod.spec.priorityClassName
        problem = self.priority_policy.problem(name, pod.metadata.namespace or "default")
        if problem:
            raise Invalid(f"Pod {key}: spec.priorityClassName: {problem}")
        classes = self._objects["PriorityClass"]
        if name:
            found = classes.get(name)
            if found is None:
                raise Invalid(f"Pod {key}: spec.priorityClassName: no PriorityClass with name {name} was found")
        else:
            found = next((c for c in classes.values() if isinstance(c, PriorityClass) and c.globalDefault), None)
        if found is None:
            return pod
        assert isinstance(found, PriorityClass)
        spec = pod.spec.model_copy(update={"priority": found.value, "priorityClassName": found.metadata.name,
                                           "preemptionPolicy": pod.spec.preemptionPolicy or found.preemptionPolicy})
        return pod.model_copy(update={"spec": spec})

    def update(self, obj: AnyObject) -> AnyObject:
        key = object_key(obj)
        current = self.get(obj.kind, key)
        # as the API server: no resourceVersion is an unconditional update, a stale one a Conflict
        if obj.metadata.resourceVersion and obj.metadata.resourceVersion != current.metadata.resourceVersion:
            raise Conflict(
                f"{obj.kind} {key}: resourceVersion {obj.metadata.resourceVersion!r} is stale "
                f"(now {current.metadata.resourceVersion!r}); re-read and retry"
            )
        stored = obj.model_copy(
            update={"metadata": obj.metadata.model_copy(update={"resourceVersion": self._next_version()})}
        )
        self._objects[obj.kind][key] = stored
        self._emit(WatchEvent("MODIFIED", stored, current))
        return stored

    def patch(self, kind: str, key: str, patch: Mapping[str, Any]) -> AnyObject:
        current = self.get(kind, key)
        merged = merge_patch(current.model_dump(mode="json", exclude_none=True), patch)
        try:
            candidate = _MODELS[kind].model_validate(merged)
        except ValidationError as exc:
            raise Invalid(f"{kind} {key}: {first_problem(exc)}") from None
        if object_key(candidate) != key:
            raise Invalid(f"{kind} {key}: a patch cannot change the name or namespace")
        return self.update(candidate.model_copy(update={"metadata": candidate.metadata.model_copy(
            update={"resourceVersion": current.metadata.resourceVersion})}))

    def delete(self, kind: str, key: str) -> AnyObject:
        current = self.get(kind, key)
        del self._objects[kind][key]
        self._version += 1
        self._emit(WatchEvent("DELETED", current, current))
        return current

    # ----------------------------------------------------------------------------------- ports

    def bind(self, pod_key: str, node: str, annotations: Mapping[str, str] | None = None) -> None:
        pod = self.get("Pod", pod_key)
        if pod.spec.nodeName:  # type: ignore[union-attr]
            raise Conflict(f"pod {pod_key} is already bound to {pod.spec.nodeName}")  # type: ignore[union-attr]
        if node not in self._objects["Node"]:
            raise NotFound(f"node {node} not found")
        meta = pod.metadata
        if annotations:
            meta = meta.model_copy(update={"annotations": {**meta.annotations, **annotations}})
        scheduled = Condition(type="PodScheduled", status="True", lastTransitionTime=self.clock.now())
        status = pod.status.model_copy(  # type: ignore[union-attr]
            update={"conditions": [scheduled], "nominatedNodeName": ""}
        )
        self.update(pod.model_copy(update={
            "metadata": meta,
            "spec": pod.spec.model_copy(update={"nodeName": node}),  # type: ignore[union-attr]
            "status": status,
        }))

    def bind_all(self, binds: Sequence[BindRequest]) -> builtins.list[Failure]:
        """Each bind in order; a pod gone or bound elsewhere is a failure, and the others still bind."""
        failures: builtins.list[Failure] = []
        for request in binds:
            try:
                self.bind(request.pod, request.node, request.annotations)
            except (Conflict, NotFound) as exc:
                failures.append(Failure(request.pod, str(exc)))
        return failures

    def evict(self, pod_key: str, reason: str) -> None:
        """The Eviction API: refused (TooManyRequests) when a PodDisruptionBudget does not allow it now."""
        pod = self.get("Pod", pod_key)
        assert isinstance(pod, Pod)
        budgets = [b for b in self._objects["PodDisruptionBudget"].values() if isinstance(b, PodDisruptionBudget)]
        if budgets:
            replicas = {key: job.spec.total_replicas for key, job in self._objects["Job"].items()
                        if isinstance(job, Job)}
            why = refusal(pod, budgets, (p for p in self._objects["Pod"].values() if isinstance(p, Pod)), replicas)
            if why:
                raise TooManyRequests(f"pod {pod_key}: {why}")
        self.record_event(pod, "Evicted", reason, "Warning")
        self.delete("Pod", pod_key)

    def update_podgroup_status(self, key: str, phase: str | None, conditions: Sequence[Condition] | None) -> None:
        group = self.get("PodGroup", key)
        assert isinstance(group, PodGroup)
        update: dict[str, Any] = {}
        if phase is not None:
            update["phase"] = phase
        if conditions is not None:
            update["conditions"] = list(conditions)
        self.update(group.model_copy(update={"status": group.status.model_copy(update=update)}))

    def update_podgroup_statuses(self, updates: Sequence[PodGroupStatusUpdate]) -> builtins.list[Failure]:
        failures: builtins.list[Failure] = []
        for update in updates:
            try:
                self.update_podgroup_status(update.key, update.phase, update.conditions)
            except (Conflict, NotFound) as exc:
                failures.append(Failure(update.key, str(exc)))
        return failures

    def nominate(self, pod_key: str, node: str) -> None:
        pod = self.get("Pod", pod_key)
        assert isinstance(pod, Pod)
        if pod.status.nominatedNodeName != node and not pod.spec.nodeName:
            self.update(pod.model_copy(update={"status": pod.status.model_copy(update={"nominatedNodeName": node})}))

    def set_pod_conditions(self, updates: Sequence[tuple[str, Condition]]) -> builtins.list[Failure]:
        failures: builtins.list[Failure] = []
        for pod_key, condition in updates:
            try:
                pod = self.get("Pod", pod_key)
            except NotFound as exc:
                failures.append(Failure(pod_key, str(exc)))
                continue
            assert isinstance(pod, Pod)
            kept = [c for c in pod.status.conditions if c.type != condition.type]
            stamped = condition.model_copy(update={"lastTransitionTime": self.clock.now()})
            self.update(pod.model_copy(update={"status": pod.status.model_copy(
                update={"conditions": [*kept, stamped]})}))
        return failures

    def record_event(self, obj: AnyObject, reason: str, message: str, type_: str = "Normal") -> None:
        self.events.append(Event(self.clock.now(), obj.kind, object_key(obj), type_, reason, message))
