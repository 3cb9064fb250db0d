"""The scheduler's contract: everything a plugin may name — the extension-point protocols, the
:class:`Plugin` base class, result values and reasons, the snapshot types, and the :class:`SessionView`
(what a plugin may read or ask of the session). Contract version :data:`CONTRACT_VERSION`.

Who calls it: every plugin, in-tree (``scheduler.plugins``) or installed by entry point (docs/plugins.md,
``examples/plugins/``), imports from here; the cache (``scheduler.cache``) builds the snapshot types; the
engine (``scheduler.engine``) implements the view and combines the points' answers. Nothing here imports a
plugin, the cache or the engine (import-linter's scheduler-rooms contract).

The modules behind it: ``framework`` (points, ``Plugin``, ``check_plugin``, ``PluginRegistry``), ``view``,
``status``, ``reasons``, ``snapshot``, ``decisions``, ``arrays``, and the shared rules plugins and the
engine apply alike (``nodematch``, ``podtopology``, ``numa_fit``; ``typical``, the shares of FGD's typical
pods, which the openb replay uses too; and the read-only accounting ``chips`` and
``network_fragmentation``). Versioning: a change that removes or changes a name in ``__all__`` or a
member of ``SessionView`` bumps :data:`CONTRACT_VERSION`; additions do not.
"""

from __future__ import annotations

from hetsched.scheduler.contract.arrays import BoolArray, FloatArray, IntArray
from hetsched.scheduler.contract.decisions import Bind, Decisions, Eviction, PodGroupUpdate
from hetsched.scheduler.contract.framework import (
    EXTENSION_POINTS,
    HOOKS,
    Allocatable,
    Arguments,
    Evictable,
    ExtensionPoint,
    HyperNodeOrder,
    JobEnqueue,
    JobOrder,
    JobPipelined,
    JobReady,
    JobStarving,
    JobValid,
    NodeCapacity,
    NodeFilter,
    NodeScore,
    Overused,
    Plugin,
    PluginContractError,
    PluginRegistry,
    PreemptableVictims,
    Preemptive,
    QueueOrder,
    Reclaimable,
    ReclaimableVictims,
    TaskOrder,
    check_plugin,
    declared_points,
)
from hetsched.scheduler.contract.reasons import Reason, ReasonCode, render
from hetsched.scheduler.contract.snapshot import (
    DeviceArrays,
    JobInfo,
    NetworkArrays,
    NodeArrays,
    NumaArrays,
    PlacedPod,
    QueueInfo,
    RunningPod,
    Snapshot,
    TaskGroup,
)
from hetsched.scheduler.contract.status import Code, Status
from hetsched.scheduler.contract.view import SessionView

CONTRACT_VERSION = 1
"""1: the session is seen through ``SessionView`` (before it, plugins took the engine's ``Session``)."""

__all__ = [
    "CONTRACT_VERSION",
    "EXTENSION_POINTS",
    "HOOKS",
    "Allocatable",
    "Arguments",
    "Bind",
    "BoolArray",
    "Code",
    "Decisions",
    "DeviceArrays",
    "Evictable",
    "Eviction",
    "ExtensionPoint",
    "FloatArray",
    "HyperNodeOrder",
    "IntArray",
    "JobEnqueue",
    "JobInfo",
    "JobOrder",
    "JobPipelined",
    "JobReady",
    "JobStarving",
    "JobValid",
    "NetworkArrays",
    "NodeArrays",
    "NodeCapacity",
    "NodeFilter",
    "NodeScore",
    "NumaArrays",
    "Overused",
    "PlacedPod",
    "Plugin",
    "PluginContractError",
    "PluginRegistry",
    "PodGroupUpdate",
    "PreemptableVictims",
    "Preemptive",
    "QueueInfo",
    "QueueOrder",
    "Reason",
    "ReasonCode",
    "Reclaimable",
    "ReclaimableVictims",
    "RunningPod",
    "SessionView",
    "Snapshot",
    "Status",
    "TaskGroup",
    "TaskOrder",
    "check_plugin",
    "declared_points",
    "render",
]
