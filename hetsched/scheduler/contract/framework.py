"""The plugin contract: result values, the :class:`Plugin` base class and one protocol per extension point.

Who calls it: every plugin subclasses :class:`Plugin` and the protocols of the points it takes part in;
the plugin registry (``scheduler.plugins.registry``) checks each class with :func:`check_plugin` when it is
registered or loaded from the ``hetsched.plugins`` entry-point group; the session (``scheduler.engine.session``)
asks each enabled plugin at the points it declares and combines the answers across tiers with Volcano's
rules. The points, their switches and their combination rules are :data:`EXTENSION_POINTS` (docs/scheduler.md
lists them from there; a test compares the two):
- ordering keys (queue, job, task): plugins contribute keys in tier order; the first that differs decides
  (lexicographic comparison of the key tuple);
- ``JobReady``/``JobValid``/``NodeFilter``/``Evictable``: every participating plugin must agree;
  ``JobStarving``/``Reclaimable`` too, and with none enabled nothing is evicted;
- ``JobEnqueue`` and ``JobPipelined``: Volcano's tiered vote — any rejection rejects (its reason is
  reported); a permit (``Code.PERMIT``; ``True`` from ``job_pipelined``) with no rejection in its tier
  decides yes without asking later tiers; abstentions (``Code.SUCCESS``; ``None``) leave it to them; all
  abstaining is yes;
- ``Allocatable`` and ``NodeCapacity``: the smallest allowance wins; ``Overused``: any plugin may declare a
  queue overused;
- ``NodeScore`` and ``HyperNodeOrder``: sum (each plugin applies its own weight).

Reasons are data (``contract.reasons``): a :class:`~hetsched.scheduler.contract.status.Status` carries
:class:`~hetsched.scheduler.contract.reasons.Reason` values, and node filters return them with their masks;
text is rendered in one place. A plugin sees the session only as a
:class:`~hetsched.scheduler.contract.view.SessionView`.

Invariant for ``NodeScore``: a node's score may depend only on that node's state and the task, never on
other nodes. The allocate action relies on it to place a whole group of identical pods from one
vectorised evaluation (see ``scheduler.engine.placement``).
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

from hetsched.scheduler.contract.arrays import BoolArray, FloatArray, IntArray
from hetsched.scheduler.contract.reasons import Reason
from hetsched.scheduler.contract.snapshot import JobInfo, QueueInfo, RunningPod, TaskGroup
from hetsched.scheduler.contract.status import Status
from hetsched.scheduler.contract.view import SessionView


@dataclass
class Arguments:
    """A plugin's ``arguments`` map with typed getters that fail with the plugin and key named."""

    plugin: str
    values: Mapping[str, Any] = field(default_factory=dict)
    switches: Mapping[str, bool] = field(default_factory=dict)
    """The plugin's own switches (``Plugin.SWITCHES``) as the configuration gives them."""

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
    """Base class of scheduler plugins: a ``NAME``, the arguments, and the session lifecycle hooks.

    A plugin takes part in an extension point by *declaring* it: it subclasses that point's protocol
    (below) and defines the point's methods, e.g. ``class Priority(Plugin, JobOrder, TaskOrder)``. mypy
    checks the signatures of in-tree plugins; :func:`check_plugin` checks every plugin class when it is
    registered or loaded from an entry point, so a point declared and not implemented, a point implemented
    and not declared, a misspelt point or a wrong signature is an error at load, never a method that
    silently does not run. A plugin's public methods are its points and these hooks; helpers are private.

    A plugin instance lives for one session: it is built at session open from its validated arguments,
    so per-cycle state may be kept on ``self``. Plugins never perform side effects; they only answer.
    """

    NAME: ClassVar[str] = ""
    SWITCHES: ClassVar[frozenset[str]] = frozenset()
    """Configuration switches that are no extension point's and that this plugin reads itself (``capacity``:
    Volcano's ``enableHierarchy``); given ones reach it as :attr:`Arguments.switches`."""
    NEEDS: ClassVar[tuple[str, ...]] = ()
    """Plugins this one's work needs beside it: a configuration naming this one and not them gets them, with
    their default arguments, right after it (``deviceshare`` needs ``devicetopology``, which carves what
    Volcano's ``deviceshare`` allocates itself)."""
    BORROWS: ClassVar[Mapping[str, frozenset[str]]] = MappingProxyType({})
    """Arguments of another configured plugin that this one reads too (plugin name → keys), when the two
    split one Volcano plugin's work: ``devicetopology`` carves the vGPUs ``deviceshare`` configures, so it
    reads ``deviceshare.GPUExclusiveRules``. The session adds them to :attr:`Arguments.values` when that
    plugin is configured; the owner checks them."""

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments

    @classmethod
    def read_labels(cls, arguments: Arguments) -> frozenset[str]:
        """Pod label keys this plugin reads from a task group's labels (``TaskGroup.labels``) when configured
        with ``arguments``: the cache keeps them on every group (else it keeps only the labels pod affinity
        or spread selectors need, and only while some pod has such a selector)."""
        return frozenset()

    def on_session_open(self, session: SessionView) -> None:
        """Compute per-cycle state (shares, deserved resources) from the snapshot."""

    def on_session_close(self, session: SessionView) -> None:
        """Contribute status (e.g. PodGroup conditions) to the session's decisions. A plugin that kept the
        session (or anything of its snapshot) at open lets go of it here: the session holds its plugins, and
        the cycle would keep a snapshot's arrays — megabytes at 10,000 nodes — alive until the cyclic
        collector runs, so a scheduler running cycles back to back grew by gigabytes."""

    def on_allocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        """``pods[i]`` of ``group`` was tentatively placed on node ``nodes[i]`` (statement not committed).
        A plugin may record bind annotations for them in ``session.bind_annotations``."""

    def on_deallocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        """A statement was discarded: undo :meth:`on_allocate` for these pods."""


HOOKS = ("on_session_open", "on_session_close", "on_allocate", "on_deallocate")
"""Lifecycle hooks every plugin has (no-ops unless overridden); not extension points."""
DECLARATIONS = ("read_labels",)
"""Class methods every plugin has, read when a scheduler starts (what its configuration makes it read)."""


# ---------------------------------------------------------------------------------- extension points
# One protocol per point. Ordering keys: lower first.

class QueueOrder(Protocol):
    def queue_order_key(self, queue: QueueInfo) -> float | tuple[float, ...]:
        """The queue's key among queues of equal ``spec.priority`` (``proportion``: its share)."""
        ...


class JobOrder(Protocol):
    def job_order_key(self, job: JobInfo) -> float:
        """The job's key among the jobs of its queue."""
        ...


class TaskOrder(Protocol):
    def task_order_key(self, group: TaskGroup) -> float:
        """The group's key among the job's groups of pending pods."""
        ...


class JobValid(Protocol):
    def job_valid(self, job: JobInfo) -> Status:
        """Can this job be scheduled at all (e.g. enough pods exist for its gang)?"""
        ...


class JobEnqueue(Protocol):
    def job_enqueueable(self, job: JobInfo) -> Status:
        """May this Pending PodGroup move to Inqueue (its pods be created) now? Not ok → the reason;
        ``Code.PERMIT``: yes, whatever later tiers say; ``Code.SUCCESS``: no objection."""
        ...

    def job_enqueued(self, job: JobInfo) -> None:
        """Account a job just moved to Inqueue, so that later votes in the same cycle see it."""
        ...


class JobReady(Protocol):
    def job_ready(self, job: JobInfo) -> bool:
        """Has the job enough allocated pods to be bound (gang satisfied)?"""
        ...


class JobPipelined(Protocol):
    def job_pipelined(self, job: JobInfo) -> bool | None:
        """May the job keep what it was given this cycle as a reservation, though it cannot bind yet (enough
        allocated plus pipelined pods for its gang; ``sla``: it waited past its SLA)? True: permit,
        False: reject, None: abstain."""
        ...


class Overused(Protocol):
    def overused(self, queue: QueueInfo) -> bool:
        """Is the queue over what it may hold (its jobs are skipped by ``allocate``)?"""
        ...


class Allocatable(Protocol):
    def allocatable(self, queue: QueueInfo, group: TaskGroup, wanted: int) -> int:
        """How many of ``wanted`` pods of ``group`` may the queue take now (0 … wanted)?"""
        ...


class Evictable(Protocol):
    def evictable(self, victim: RunningPod) -> bool:
        """May ``victim`` be evicted by ``preempt`` or ``reclaim``?"""
        ...


class JobStarving(Protocol):
    def job_starving(self, job: JobInfo) -> bool:
        """Does the job want more than it holds, so that it may evict for it (``preempt``, ``reclaim``)?"""
        ...


class Reclaimable(Protocol):
    def reclaimable(self, queue: QueueInfo, reclaimer: QueueInfo) -> bool:
        """May ``reclaim`` take from ``queue``'s pods for a job of ``reclaimer``?"""
        ...


class PreemptableVictims(Protocol):
    def preemptable_victims(self, victims: list[RunningPod], preemptor: JobInfo) -> bool:
        """May ``preempt`` take these pods together (one victim unit: a pod, or a whole job) for
        ``preemptor``?"""
        ...


class ReclaimableVictims(Protocol):
    def reclaimable_victims(self, victims: list[RunningPod], reclaimer: JobInfo) -> bool:
        """May ``reclaim`` take these pods together (one victim unit: a pod, or a whole job, of one queue)
        for ``reclaimer``, as things stand now (victims chosen before in this cycle are already released)?"""
        ...


class Preemptive(Protocol):
    def preemptive(self, queue: QueueInfo, job: JobInfo) -> bool:
        """May ``job`` of ``queue`` reclaim from other queues for what its gang still needs (``proportion``:
        the queue stays within its deserved share; ``capacity``: within its real capability, and within
        deserved in at least one resource it asks for)?"""
        ...


class NodeFilter(Protocol):
    def node_filter(self, session: SessionView, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        """Static predicates: ``(reason, failing-nodes mask)`` pairs over all snapshot nodes.

        Failures here are unresolvable (freeing resources would not help). Evaluated once per distinct
        placement key per session and cached. Resource fit is not a filter: the allocate action checks
        it itself, as Volcano does.
        """
        ...


class NodeCapacity(Protocol):
    def node_capacity(self, session: SessionView, group: TaskGroup) -> IntArray | None:
        """How many pods of ``group`` each node can take by this plugin's own rules (e.g. which chip sets
        are still free and legal), on top of resource fit; None: no limit for this group. Unlike
        ``node_filter`` it is asked again after every placement (it may depend on them)."""
        ...

    def node_capacity_reasons(self, session: SessionView, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        """Why ``node_capacity`` rules nodes out, as (reason, nodes) pairs, for ``explain``; [] leaves the
        blocked nodes to the device-topology explanation (fragmentation, unhealthy chips)."""
        ...


class NodeScore(Protocol):
    def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        """Weighted score of putting one more pod of ``group`` on each ``nodes[i]`` that already holds
        ``placed[i]`` pods of the group from this placement (node-local: see the module docstring)."""
        ...


class HyperNodeOrder(Protocol):
    def hypernode_score(self, session: SessionView, job: JobInfo, tier: int, domains: IntArray) -> FloatArray:
        """Weighted score of each HyperNode ``domains[i]`` (ids at ``tier``: ``snapshot.NetworkArrays``) as
        the one to hold ``job``'s gang; placement tries the highest first, ties to the lowest id."""
        ...


@dataclass(frozen=True)
class ExtensionPoint:
    """One extension point: its protocol, the configuration switch that turns it off for one plugin (spelt as
    Volcano's scheduler reads it: its ``conf.PluginOption`` YAML tags, ``enabled…`` for three of them), who
    asks it and how the answers of several plugins combine (docs/scheduler.md's table is checked against
    these)."""

    protocol: type
    switch: str
    used_by: str
    combination: str

    @property
    def name(self) -> str:
        return self.protocol.__name__

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(name for name, value in vars(self.protocol).items()
                     if callable(value) and not name.startswith("_"))


EXTENSION_POINTS: dict[str, ExtensionPoint] = {point.name: point for point in (
    ExtensionPoint(QueueOrder, "enableQueueOrder", "allocate, enqueue",
                   "after the queue's priority, keys in tier order; the first that differs decides"),
    ExtensionPoint(JobOrder, "enableJobOrder", "allocate, enqueue, backfill",
                   "keys in tier order; the first that differs decides"),
    ExtensionPoint(TaskOrder, "enableTaskOrder", "placement", "keys in tier order; the first that differs decides"),
    ExtensionPoint(JobValid, "enableJobValid", "allocate, backfill", "all must pass; the first failure is the reason"),
    ExtensionPoint(JobEnqueue, "enableJobEnqueued", "enqueue",
                   "tiered vote: a rejection rejects, with its reason; a permit decides its tier, skipping later ones"),
    ExtensionPoint(JobReady, "enableJobReady", "placement, allocate, backfill", "all must agree"),
    ExtensionPoint(JobPipelined, "enableJobPipelined", "placement",
                   "tiered vote: any rejection rejects; a permit decides its tier and skips later ones"),
    ExtensionPoint(Overused, "enabledOverused", "allocate", "any plugin may declare a queue overused"),
    ExtensionPoint(Allocatable, "enabledAllocatable", "placement", "the smallest allowance wins"),
    ExtensionPoint(Evictable, "enablePreemptable", "preempt, reclaim", "all must agree"),
    ExtensionPoint(JobStarving, "enableJobStarving", "preempt, reclaim",
                   "all must agree; none enabled → no job evicts"),
    ExtensionPoint(Reclaimable, "enableReclaimable", "reclaim", "all must agree; none enabled → nothing is reclaimed"),
    ExtensionPoint(PreemptableVictims, "enablePreemptable", "preempt", "all must agree"),
    ExtensionPoint(ReclaimableVictims, "enableReclaimable", "reclaim", "all must agree"),
    ExtensionPoint(Preemptive, "enablePreemptive", "reclaim", "all must agree; none enabled → the queue may reclaim"),
    ExtensionPoint(NodeFilter, "enablePredicate", "placement",
                   "every failing mask removes nodes; failures are unresolvable"),
    ExtensionPoint(NodeCapacity, "enablePredicate", "placement",
                   "per node, the fewest pods any plugin allows; asked again after each placement"),
    ExtensionPoint(NodeScore, "enableNodeOrder", "placement", "weighted sum (each plugin applies its weight)"),
    ExtensionPoint(HyperNodeOrder, "enabledHyperNodeOrder", "placement",
                   "weighted sum; the highest HyperNode is tried first, ties to the lowest id"),
)}
"""Extension point name → its definition, in the order the session documents them."""


class PluginRegistry(Protocol):
    """Plugin name → class, as the caller hands it to the engine (kube-scheduler's ``NewFramework(registry)``):
    the engine resolves a configuration's plugins through it and imports no plugin itself
    (``scheduler.plugins.registry`` is the in-tree one, with the entry points)."""

    def resolve(self, name: str) -> type[Plugin]:
        """The class registered as ``name``; KeyError when there is none, ValueError (naming the plugin)
        when one of that name cannot be used."""
        ...

    def available(self) -> list[str]:
        """Every name :meth:`resolve` knows."""
        ...


class PluginContractError(TypeError):
    """A plugin class does not keep the contract; the message names the plugin and the method."""


_DECLARED: dict[type, tuple[ExtensionPoint, ...]] = {}


def declared_points(cls: type) -> tuple[ExtensionPoint, ...]:
    """The extension points ``cls`` declares (the point protocols among its bases)."""
    found = _DECLARED.get(cls)
    if found is None:
        found = _DECLARED[cls] = tuple(p for p in EXTENSION_POINTS.values() if p.protocol in cls.__mro__)
    return found


def check_plugin(cls: object, origin: str = "") -> None:
    """Raise :class:`PluginContractError` unless ``cls`` is a :class:`Plugin` subclass with a name that
    defines every method of every point it declares, with the point's parameters, and no other public
    method than those and the hooks."""
    where = f" ({origin})" if origin else ""
    if not (isinstance(cls, type) and issubclass(cls, Plugin)):
        raise PluginContractError(f"{cls!r}{where} is not a subclass of hetsched.scheduler.contract.framework.Plugin")
    label = f"plugin {cls.NAME or cls.__qualname__}{where}"
    if not cls.NAME or not _NAME.fullmatch(cls.NAME):
        raise PluginContractError(f"{label}: NAME must be a non-empty name of letters, digits, '-', '_' or '.'")
    declared = declared_points(cls)
    allowed = {method: point for point in declared for method in point.methods}
    every = {method: point for point in EXTENSION_POINTS.values() for method in point.methods}
    for point in declared:
        for method in point.methods:
            implementation = _defined(cls, method, point.protocol)
            if implementation is None:
                raise PluginContractError(f"{label}: declares {point.name} but does not define {method}()")
            _check_signature(label, method, implementation, vars(point.protocol)[method])
    for name in _public_methods(cls):
        if name in allowed or name in HOOKS or name in DECLARATIONS:
            continue
        if name in every:
            raise PluginContractError(f"{label}: defines {name}() but does not declare {every[name].name} "
                                      f"(add it to the class's bases)")
        close = difflib.get_close_matches(name, [*every, *HOOKS], n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]}()?" if close else ""
        raise PluginContractError(f"{label}: public method {name}() is not an extension point or hook{hint} "
                                  f"(helpers must start with '_')")
    for hook in HOOKS:
        implementation = _defined(cls, hook, Plugin)
        if implementation is not None:
            _check_signature(label, hook, implementation, vars(Plugin)[hook])


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def _defined(cls: type, method: str, owner: type) -> object | None:
    """The function ``cls`` uses for ``method``, unless it is ``owner``'s own (a protocol's stub or the base
    class's no-op)."""
    for klass in cls.__mro__:
        if method in vars(klass):
            return None if klass is owner else vars(klass)[method]
    return None


def _public_methods(cls: type) -> list[str]:
    names: list[str] = []
    for klass in cls.__mro__:
        if klass in (Plugin, object) or any(klass is p.protocol for p in EXTENSION_POINTS.values()):
            continue
        if klass.__module__ == "typing":  # Protocol, Generic
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and callable(getattr(value, "__func__", value)) and name not in names:
                names.append(name)
    return names


OLD_SESSION = ("a plugin sees the session as hetsched.scheduler.contract.SessionView since contract version 1 "
               "(snapshot, nodes, now, action_names, lending, pod_topology, bind_annotations, occupied(), "
               "occupied_by_task(), pending_best_effort(), pipelined_pods(), short(), unschedulable(), "
               "set_conditions(), condition()): docs/plugins.md")


def _check_session_type(label: str, method: str, function: object) -> None:
    """A ``session`` parameter annotated with the engine's ``Session`` is a plugin written before contract
    version 1: it would reach into the engine, so it is refused, saying what to use instead."""
    try:
        hints = inspect.get_annotations(function)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return
    hint = hints.get("session")
    name = hint if isinstance(hint, str) else getattr(hint, "__name__", "")
    if isinstance(name, str) and name.replace(" ", "").split("|")[0].rsplit(".", 1)[-1] == "Session":
        raise PluginContractError(f"{label}: {method}() takes the engine's Session; {OLD_SESSION}")


def _check_signature(label: str, method: str, implementation: object, expected: object) -> None:
    function = getattr(implementation, "__func__", implementation)
    if isinstance(implementation, (staticmethod, classmethod)) or not callable(function):
        raise PluginContractError(f"{label}: {method} must be a plain method")
    _check_session_type(label, method, function)
    want = [p.name for p in inspect.signature(expected).parameters.values()][1:]  # type: ignore[arg-type]
    params = list(inspect.signature(function).parameters.values())[1:]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
    required = [p for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if len(required) > len(want) or (len(positional) < len(want) and not variadic) or any(
            p.kind is p.KEYWORD_ONLY for p in required):
        got = ", ".join(p.name for p in params)
        raise PluginContractError(f"{label}: {method}(self, {got}) must take ({', '.join(want)})")
