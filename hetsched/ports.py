"""The narrow ports between hetsched's logic and a cluster backend.

Who implements them: ``cluster.memory`` (the embedded in-memory cluster used by the simulator, the demo
and tests) and ``cluster.kubernetes`` (the API server). Who calls them: the scheduler runner
(``scheduler.engine.runner``), the controllers and the simulator. Nothing below this layer knows which backend
is in use; nothing in the scheduler core imports a backend.

Time is a port too: everything that needs "now" receives a :class:`Clock`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol

from hetsched.api.objects import AnyObject, Condition

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change to one object, delivered in resourceVersion order."""

    type: EventType
    object: AnyObject
    old: AnyObject | None = None


WatchHandler = Callable[[WatchEvent], None]


class Clock(Protocol):
    """Seconds since an arbitrary origin; simulated in the simulator, wall-clock when live."""

    def now(self) -> float: ...


class ManualClock:
    """A :class:`Clock` that its owner moves by setting ``time``: benchmarks and replays that advance time
    themselves (one step per batch, or by the work done). Nothing waits on it."""

    def __init__(self, start: float = 0.0) -> None:
        self.time = start

    def now(self) -> float:
        return self.time


Stopwatch = Callable[[], float]
"""A monotonic reading in seconds for measuring how long work takes (``time.perf_counter`` when live).
Separate from :class:`Clock`: a simulation measures real compute time while its clock is simulated."""

CYCLE_BUDGET_MS = 10.0
"""The scheduler process's default time budget per cycle, in milliseconds of :data:`Stopwatch` time
(``hetsched scheduler --cycle-budget``; ``Scheduler.cycle_budget`` has the rule). The latency benchmark runs
with it too. With one placement (about 1 ms at 10,000 nodes) and the binds on top, a cycle stays under 20 ms."""


class NotFound(LookupError):
    """The object does not exist (HTTP 404)."""


class Conflict(RuntimeError):
    """Optimistic-concurrency failure or create of an existing name (HTTP 409): re-read and retry."""


class Invalid(ValueError):
    """The change would produce an invalid object (HTTP 422)."""


class TooManyRequests(RuntimeError):
    """The eviction would break a PodDisruptionBudget (HTTP 429): nothing was done; try again later."""


class ObjectStore(Protocol):
    """List, watch and change typed objects, as an API server offers them.

    Objects are immutable values; ``update`` takes a modified copy whose ``metadata.resourceVersion`` must
    match the stored one (else :class:`Conflict`).
    """

    def get(self, kind: str, key: str) -> AnyObject: ...

    def list(self, kind: str) -> list[AnyObject]: ...

    def watch(self, kinds: tuple[str, ...], handler: WatchHandler, *, replay: bool = True) -> Callable[[], None]:
        """Call ``handler`` for every later change of these kinds (after ADDED for existing objects when
        ``replay``); returns a function that stops the watch."""
        ...

    def create(self, obj: AnyObject) -> AnyObject: ...

    def update(self, obj: AnyObject) -> AnyObject: ...

    def patch(self, kind: str, key: str, patch: Mapping[str, Any]) -> AnyObject:
        """JSON merge patch (RFC 7386), validated like a create."""
        ...

    def delete(self, kind: str, key: str) -> AnyObject: ...


class BindRequest(NamedTuple):
    """One pod to bind: its key, the node, and the annotations that travel with the binding."""

    pod: str
    node: str
    annotations: Mapping[str, str] | None = None


class Failure(NamedTuple):
    """A write that did not happen — a bind, an eviction, a status update: the object's key (``pod``: the
    pod's, or the PodGroup's for its status) and why."""

    pod: str
    error: str


class PodGroupStatusUpdate(NamedTuple):
    """A PodGroup's new phase and/or conditions (None leaves a field as it is)."""

    key: str
    phase: str | None = None
    conditions: Sequence[Condition] | None = None


class Binder(Protocol):
    def bind(self, pod_key: str, node: str, annotations: Mapping[str, str] | None = None) -> None:
        """Bind a pending pod to a node (the Binding subresource); annotations travel with it."""
        ...

    def bind_all(self, binds: Sequence[BindRequest]) -> list[Failure]:
        """Bind every pod of a cycle — one after the other on the embedded cluster, concurrently within a QPS
        budget against an API server — and say which did not bind (the pod vanished, or was bound
        elsewhere: ``Conflict``/``NotFound``); each node's pods with chips bind in the order given."""
        ...


class Evictor(Protocol):
    def evict(self, pod_key: str, reason: str) -> None:
        """Ask for a pod to be evicted (the Eviction API); it is gone once its deletion is observed. Raises
        :class:`TooManyRequests` when a PodDisruptionBudget forbids it now, :class:`NotFound` when the pod
        is gone already."""
        ...


class StatusUpdater(Protocol):
    def update_podgroup_status(self, key: str, phase: str | None, conditions: Sequence[Condition] | None) -> None:
        """Set a PodGroup's phase and/or conditions (the status subresource); None leaves a field as is."""
        ...

    def update_podgroup_statuses(self, updates: Sequence[PodGroupStatusUpdate]) -> list[Failure]:
        """Each update as :meth:`update_podgroup_status` writes it — one after the other on the embedded
        cluster, concurrently within the QPS budget against an API server (a cycle that enqueues 5,000 jobs
        would otherwise spend seconds on writes in a row) — and say which PodGroups were not written
        (gone, or changing under us: ``Conflict``/``NotFound``; the next cycle writes them again). Any
        other error is raised."""
        ...

    def nominate(self, pod_key: str, node: str) -> None:
        """Record that a pending pod waits for resources being released on ``node`` (``nominatedNodeName``)."""
        ...

    def set_pod_conditions(self, updates: Sequence[tuple[str, Condition]]) -> list[Failure]:
        """Set one condition of each pod's status (replacing the one of its type) — the scheduler's
        ``PodScheduled=False``/``Unschedulable``, which cluster-autoscaler and Karpenter read to scale out —
        concurrently within the QPS budget against an API server; returns the pods not updated (gone)."""
        ...

    def record_event(self, obj: AnyObject, reason: str, message: str, type_: str = "Normal") -> None: ...
