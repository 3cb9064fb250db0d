"""The plugin contract: result values, enqueue votes and the :class:`Plugin` base class.

Who calls it: every plugin subclasses :class:`Plugin` and overrides the extension points it implements;
the session (``scheduler.session``) finds the overridden ones and combines them across tiers with
Volcano's rules. There are 13 extension points, each documented on its method below. A plugin that does
not override a method does not take part in that point.

Combination rules (Volcano's, plus ``node_capacity`` for device topology):
- ordering keys (job, task, queue): plugins contribute keys in tier order; the first that differs decides
  (lexicographic comparison of the key tuple);
- ``job_ready``/``job_pipelined``/``job_valid``/``node_filter``: every participating plugin must agree;
- ``job_enqueueable``: any non-ok status rejects, and its reason is reported;
- ``allocatable`` and ``node_capacity``: the smallest allowance wins; ``overused``: any plugin may declare a
  queue overused;
- ``node_score``: weighted sum (each plugin applies its own weight).

Invariant for ``node_score``: a node's score may depend only on that node's state and the task, never on
other nodes. The allocate action relies on it to place a whole group of identical pods from one
vectorised evaluation (see ``scheduler.placement``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from hetsched.scheduler.session import Session
    from hetsched.scheduler.snapshot import JobInfo, QueueInfo, RunningPod, TaskGroup

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class Code(enum.Enum):
    """Outcome of a scheduling step (the Kubernetes framework's codes)."""

    SUCCESS = "Success"
    ERROR = "Error"
    UNSCHEDULABLE = "Unschedulable"
    """Not now, maybe later: resources may free up or be preempted."""
    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
    """No node can ever take it as things stand (selector, affinity, taints, an impossible request)."""
    WAIT = "Wait"
    """Pipelined: waiting for resources that are being released."""
    SKIP = "Skip"


@dataclass(frozen=True)
class Status:
    """A result value: a code, human-readable reasons and the plugin or action that produced it."""

    code: Code
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def message(self) -> str:
        return "; ".join(self.reasons)


@dataclass
class Arguments:
    """A plugin's ``arguments`` map with typed getters that fail with the plugin and key named."""

    plugin: str
    values: Mapping[str, Any] = field(default_factory=dict)

    def number(self, key: str, default: float, *, minimum: float | None = 0.0) -> float:
        raw = self.values.get(key, default)
        if isinstance(raw, bool):
            raise ValueError(f"plugin {self.plugin}: argument {key} must be a number, got {raw!r}")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"plugin {self.plugin}: argument {key} must be a number, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise ValueError(f"plugin {self.plugin}: argument {key} must be ≥ {minimum:g}, got {value:g}")
        return value

    def text(self, key: str, default: str) -> str:
        raw = self.values.get(key, default)
        if not isinstance(raw, str):
            raise ValueError(f"plugin {self.plugin}: argument {key} must be a string, got {raw!r}")
        return raw

    def flag(self, key: str, default: bool) -> bool:
        raw = self.values.get(key, default)
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        raise ValueError(f"plugin {self.plugin}: argument {key} must be true or false, got {raw!r}")

    def check_known(self, known: set[str], prefixes: tuple[str, ...] = ()) -> None:
        for key in self.values:
            if key not in known and not key.startswith(prefixes):
                raise ValueError(
                    f"plugin {self.plugin}: unknown argument {key!r} (known: {', '.join(sorted(known))})"
                )


class Plugin:
    """Base class of scheduler plugins. Subclasses set ``NAME`` and override extension points.

    A plugin instance lives for one session: it is built at session open from its validated arguments,
    so per-cycle state may be kept on ``self``. Plugins never perform side effects; they only answer.
    """

    NAME: ClassVar[str] = ""

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments

    # -- lifecycle
    def on_session_open(self, session: Session) -> None:
        """Compute per-cycle state (shares, deserved resources) from the snapshot."""

    def on_session_close(self, session: Session) -> None:
        """Contribute status (e.g. PodGroup conditions) to the session's decisions."""

    # -- ordering (lower key first)
    def queue_order_key(self, queue: QueueInfo) -> float:
        raise NotImplementedError

    def job_order_key(self, job: JobInfo) -> float:
        raise NotImplementedError

    def task_order_key(self, group: TaskGroup) -> float:
        raise NotImplementedError

    # -- job gates
    def job_valid(self, job: JobInfo) -> Status:
        """Can this job be scheduled at all (e.g. enough pods exist for its gang)?"""
        raise NotImplementedError

    def job_enqueueable(self, job: JobInfo) -> Status:
        """May this Pending PodGroup move to Inqueue (its pods be created) now? Not ok → the reason."""
        raise NotImplementedError

    def job_enqueued(self, job: JobInfo) -> None:
        """Account a job just moved to Inqueue, so later votes in the same cycle see it."""
        raise NotImplementedError

    def job_ready(self, job: JobInfo) -> bool:
        """Has the job enough allocated pods to be bound (gang satisfied)?"""
        raise NotImplementedError

    def job_pipelined(self, job: JobInfo) -> bool:
        """Has the job enough allocated plus pipelined pods to keep its reservation?"""
        raise NotImplementedError

    # -- queues
    def overused(self, queue: QueueInfo) -> bool:
        raise NotImplementedError

    def allocatable(self, queue: QueueInfo, group: TaskGroup, wanted: int) -> int:
        """How many of ``wanted`` pods of ``group`` may the queue take now (0 … wanted)?"""
        raise NotImplementedError

    # -- eviction
    def evictable(self, victim: RunningPod) -> bool:
        """May ``victim`` be evicted by ``preempt`` or ``reclaim``? Every enabled plugin must agree."""
        raise NotImplementedError

    def job_starving(self, job: JobInfo) -> bool:
        """Does the job want more than it holds, so that it may evict for it (``preempt``, ``reclaim``)?
        Every enabled plugin must agree; with none enabled no job is starving (nothing is evicted)."""
        raise NotImplementedError

    def reclaimable(self, queue: QueueInfo, reclaimer: QueueInfo) -> bool:
        """May ``reclaim`` take from ``queue``'s pods for a job of ``reclaimer``? Every enabled plugin must
        agree; with none enabled nothing is reclaimable."""
        raise NotImplementedError

    # -- nodes
    def node_filter(self, session: Session, group: TaskGroup) -> list[tuple[str, BoolArray]]:
        """Static predicates: ``(reason, failing-nodes mask)`` pairs over all snapshot nodes.

        Failures here are unresolvable (freeing resources would not help). Evaluated once per distinct
        placement key per session and cached. Resource fit is not a filter: the allocate action checks
        it itself, as Volcano does.
        """
        raise NotImplementedError

    def node_capacity(self, session: Session, group: TaskGroup) -> IntArray | None:
        """How many pods of ``group`` each node can take by this plugin's own rules (e.g. which chip sets
        are still free and legal), on top of resource fit; None: no limit for this group. Combined by
        minimum. Unlike ``node_filter`` it is asked again after every placement (it may depend on them)."""
        raise NotImplementedError

    def node_capacity_reasons(self, session: Session, group: TaskGroup) -> list[tuple[str, BoolArray]]:
        """Why ``node_capacity`` rules nodes out, as (reason, nodes) pairs, for ``explain``; [] = the
        generic device-topology reason."""
        return []

    def node_score(self, session: Session, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        """Weighted score of putting one more pod of ``group`` on each ``nodes[i]`` that already holds
        ``placed[i]`` pods of the group from this placement (node-local: see module docstring)."""
        raise NotImplementedError

    # -- events inside the session
    def on_allocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        """``pods[i]`` of ``group`` was tentatively placed on node ``nodes[i]`` (statement not committed).
        A plugin may record bind annotations for them in ``session.bind_annotations``."""

    def on_deallocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        """A statement was discarded: undo :meth:`on_allocate` for these pods."""


EXTENSION_POINTS: dict[str, str] = {
    "queue_order_key": "enableQueueOrder",
    "job_order_key": "enableJobOrder",
    "task_order_key": "enableTaskOrder",
    "job_valid": "enableJobValid",
    "job_enqueueable": "enableJobEnqueued",
    "job_enqueued": "enableJobEnqueued",
    "job_ready": "enableJobReady",
    "job_pipelined": "enableJobPipelined",
    "overused": "enableOverused",
    "allocatable": "enableAllocatable",
    "node_filter": "enablePredicate",
    "node_capacity": "enablePredicate",
    "node_score": "enableNodeOrder",
    "evictable": "enablePreemptable",
    "job_starving": "enableJobStarving",
    "reclaimable": "enableReclaimable",
}
"""Extension point → the configuration switch that turns it off for one plugin."""


def implements(plugin: Plugin, point: str) -> bool:
    return getattr(type(plugin), point) is not getattr(Plugin, point)
