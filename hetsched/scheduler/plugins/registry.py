"""Plugin name → class: the in-tree plugins and those other distributions register as entry points.

Who calls it: ``scheduler.defaults`` hands :data:`REGISTRY` to the engine's configuration loader
(``scheduler.engine.conf``: is every named plugin known, are its arguments valid; the session then builds
the classes it resolved) — the engine itself imports no plugin. In-tree plugins are listed here (Volcano's
``plugins/factory.go``); an out-of-tree plugin is a class in any installed distribution that declares it in
the ``hetsched.plugins`` entry-point group under its ``NAME`` (docs/plugins.md, ``examples/plugins/``).
Every class, in-tree or not, is checked against the contract (``framework.check_plugin``) before it is
used; an entry point that cannot be imported, names a non-plugin, breaks the contract or takes an in-tree
plugin's name is an error naming the entry point and its distribution — when a configuration names it,
never for a plugin nobody asked for.
"""

from __future__ import annotations

import functools
from importlib.metadata import EntryPoint, entry_points

from hetsched.scheduler.contract.framework import Plugin, PluginContractError, check_plugin
from hetsched.scheduler.plugins.binpack import Binpack
from hetsched.scheduler.plugins.capacity import Capacity
from hetsched.scheduler.plugins.cdp import CooldownProtection
from hetsched.scheduler.plugins.conformance import Conformance
from hetsched.scheduler.plugins.deviceshare import DeviceShare
from hetsched.scheduler.plugins.devicetopology import DeviceTopology
from hetsched.scheduler.plugins.drf import DRF
from hetsched.scheduler.plugins.extender import Extender
from hetsched.scheduler.plugins.fairshare import FairShare
from hetsched.scheduler.plugins.fgd import FGD
from hetsched.scheduler.plugins.gang import Gang
from hetsched.scheduler.plugins.networktopologyaware import NetworkTopologyAware
from hetsched.scheduler.plugins.nodegroup import NodeGroup
from hetsched.scheduler.plugins.nodeorder import NodeOrder
from hetsched.scheduler.plugins.numaaware import NumaAware
from hetsched.scheduler.plugins.overcommit import Overcommit
from hetsched.scheduler.plugins.pdb import PDB
from hetsched.scheduler.plugins.predicates import Predicates
from hetsched.scheduler.plugins.priority import Priority
from hetsched.scheduler.plugins.proportion import Proportion
from hetsched.scheduler.plugins.resourcequota import ResourceQuotaPlugin
from hetsched.scheduler.plugins.resourcestrategyfit import ResourceStrategyFit
from hetsched.scheduler.plugins.sla import SLA
from hetsched.scheduler.plugins.tasktopology import TaskTopologyPlugin

ENTRY_POINT_GROUP = "hetsched.plugins"
_CONTRACT = "plugins import hetsched.scheduler.contract (SessionView, Plugin, the points; docs/plugins.md)"
MOVED = {f"hetsched.scheduler.{name}": _CONTRACT for name in (
    "framework", "session", "snapshot", "reasons", "decisions", "nodematch", "podtopology", "numa_fit", "chips",
    "placement", "statement", "eviction", "conf", "runner", "why", "actions", "network_fragmentation")}
"""Modules a plugin written before contract version 1 may import, and what to use instead."""

IN_TREE: dict[str, type[Plugin]] = {
    cls.NAME: cls
    for cls in (Priority, Gang, Conformance, Overcommit, DRF, Proportion, Predicates, NodeOrder, Binpack,
                DeviceTopology, FGD, NumaAware, NodeGroup, NetworkTopologyAware, SLA,
                CooldownProtection, ResourceStrategyFit, Capacity, TaskTopologyPlugin,
                Extender, DeviceShare, PDB, FairShare, ResourceQuotaPlugin)
}
for _cls in IN_TREE.values():
    check_plugin(_cls, "in-tree")
ALIASES = {"numa-aware": NumaAware.NAME}
"""Volcano's plugin names where hetsched's differ: a Volcano configuration names them as it always has."""
NOT_YET = {
    "tdm": "Volcano's time-division multiplexing of revocable nodes (volcano.sh/revocable-zone) is not supported "
           "by hetsched",
    "rescheduling": "Volcano's rescheduling (evicting running pods to rebalance nodes) is not supported by "
                    "hetsched; it evicts only to place waiting work (preempt, reclaim)",
    "usage": "Volcano's usage plugin (scores from nodes' measured load) is not supported by hetsched; it "
             "schedules on requests",
}
"""Volcano's plugins hetsched has no counterpart for: naming one is an error saying so (never an unknown name
among others, never silently skipped)."""

_loaded: dict[str, type[Plugin]] = {}


class PluginLoadError(ValueError):
    """A plugin entry point that cannot be used; the message names it and its distribution."""


@functools.cache
def _entry_points() -> dict[str, EntryPoint]:
    """The installed distributions' plugins, read once per process (a distribution installed later is seen
    after a restart, as with any import)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available() -> list[str]:
    """Every plugin name a configuration may use: in-tree ones and installed entry points."""
    return sorted({*IN_TREE, *ALIASES, *_entry_points()})


def resolve(name: str) -> type[Plugin]:
    """The class registered as ``name``, loading and checking an entry point of that name; KeyError when
    there is none, :class:`PluginLoadError` when an entry point of that name cannot be used."""
    name = ALIASES.get(name, name)
    found = _entry_points().get(name)
    if found is None and name in NOT_YET:
        raise PluginLoadError(f"{name}: {NOT_YET[name]}")
    if found is not None:
        dist = found.dist.name if found.dist is not None else "an unknown distribution"
        where = f"entry point {found.name} = {found.value} ({ENTRY_POINT_GROUP}, from {dist})"
        if name in IN_TREE:
            raise PluginLoadError(f"{where}: {name} is an in-tree plugin's name; the entry point must use another")
    if name in IN_TREE:
        return IN_TREE[name]
    if name in _loaded:
        return _loaded[name]
    if found is None:
        raise KeyError(name)
    try:
        cls = found.load()
    except Exception as exc:  # any import-time failure of someone else's code is reported, not raised
        gone = exc.name if isinstance(exc, ModuleNotFoundError) and exc.name in MOVED else None
        hint = f" ({gone} is gone since contract version 1: {MOVED[gone]})" if gone else ""
        raise PluginLoadError(f"{where}: cannot be imported: {type(exc).__name__}: {exc}{hint}") from None
    try:
        check_plugin(cls, where)
    except PluginContractError as exc:
        raise PluginLoadError(str(exc)) from None
    if name != cls.NAME:
        raise PluginLoadError(f"{where}: the class's NAME is {cls.NAME!r}; the entry point must carry the same name")
    checked: type[Plugin] = cls
    _loaded[name] = checked
    return checked


class Registry:
    """The in-tree plugins and the installed entry points, as the engine asks for them
    (``contract.framework.PluginRegistry``)."""

    def resolve(self, name: str) -> type[Plugin]:
        return resolve(name)

    def available(self) -> list[str]:
        return available()


REGISTRY = Registry()
"""What ``scheduler.defaults`` hands the engine."""
