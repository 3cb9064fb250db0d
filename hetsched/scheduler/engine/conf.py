"""Scheduler configuration in ``volcano-scheduler.conf`` form, checked by a schema.

Who calls it: ``scheduler.defaults`` (with the in-tree plugin registry: what the CLI, the simulator and
the benchmarks use), the runner and the session (the resolved plugin classes). The engine imports no
plugin: :func:`parse_conf` resolves every named plugin through the registry its caller hands it.

Form::

    actions: "enqueue, allocate, backfill"
    tiers:
    - plugins:
      - name: priority
      - name: binpack
        enableNodeOrder: true
        arguments: {binpack.weight: 2, binpack.resources: huawei.com/Ascend910}

Every switch is spelled as Volcano's scheduler reads it (``framework.EXTENSION_POINTS``: ``enable<Point>``, and
``enabledOverused``, ``enabledAllocatable``, ``enabledHyperNodeOrder`` — Volcano's YAML tags; hetsched's
earlier ``enable…`` spellings of those three are aliases). A switch acts only on a plugin that takes part
in its point: ``true`` on one that does not is an error; ``false`` is accepted and said in
:attr:`SchedulerConf.notes` (Volcano's configurations turn off points its plugin of that name has, e.g.
``enablePreemptable: false`` on ``gang``), and so are Volcano's switches for points hetsched has none of
(``VOLCANO_ONLY``), except where the plugin reads the switch itself (``Plugin.SWITCHES``: ``capacity``'s
``enableHierarchy``). Any other spelling is an error naming Volcano's. Unknown plugins, actions and keys are
errors. Every switch does what Volcano's does
(``enableReclaimable: false`` on ``proportion`` turns ``reclaim`` off, ``enableJobStarving: false`` on
``gang`` stops evictions for gangs, ``enablePreemptable: false`` on ``conformance`` lets critical pods be
victims). ``configurations:`` may only name listed actions, and since hetsched's actions take no
arguments, any argument there is an error rather than a silent no-op.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from hetsched.api.validation import first_problem
from hetsched.api.yamlsafe import YamlLimitError, read_text, safe_load
from hetsched.scheduler.contract.framework import EXTENSION_POINTS, Arguments, Plugin, PluginRegistry, declared_points

SWITCHES = sorted({point.switch for point in EXTENSION_POINTS.values()})
ALIASES = {"enableOverused": "enabledOverused", "enableAllocatable": "enabledAllocatable",
           "enableHyperNodeOrder": "enabledHyperNodeOrder"}
"""Earlier hetsched spellings of three switches → Volcano's (its YAML tags say ``enabled…`` for these)."""
VOLCANO_ONLY = frozenset({
    "enableHierarchy", "enabledClusterOrder", "enableBestNode", "enableTargetJob",
    "enableReservedNodes", "enabledVictim", "enabledSubJobReady", "enabledSubJobPipelined", "enabledSubJobOrder",
    "enabledHyperNodeGradient"})
"""Switches Volcano's scheduler reads for points no hetsched plugin has: ``false`` is accepted (and said),
``true`` is an error naming it — never silently ignored."""


def canonical(key: str) -> str:
    """A switch key as Volcano spells it."""
    return ALIASES.get(key, key)
ACTIONS = ("enqueue", "allocate", "backfill", "preempt", "reclaim")
"""The actions a configuration may name (``engine.actions.registry`` maps each to its function)."""

VOLCANO_DEFAULT_CONF_YAML = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"""
"""Volcano's built-in default (``pkg/scheduler/util.go`` ``DefaultSchedulerConf``), verbatim."""

DEFAULT_CONF_YAML = (VOLCANO_DEFAULT_CONF_YAML + "  - name: nodegroup\n    arguments: {strict: false}\n"
                     "  - name: devicetopology\n  - name: network-topology-aware\n")
"""hetsched's default: Volcano's plus ``devicetopology``, without which no chips would be chosen (the device
plugin would pick them after the node, the very problem hetsched exists to fix), ``nodegroup`` with
``strict: false``, so a queue's node-group affinity is honoured and unlabelled nodes stay open to queues
without one (Volcano's default, ``strict: true``, would need every node labelled), and
``network-topology-aware``, so gangs bounded to a HyperNode leave whole domains free (both no-ops where there
are no node groups or HyperNodes)."""


class ConfError(ValueError):
    """An invalid scheduler configuration; the message names the key."""


class PluginOption(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_switches(self) -> PluginOption:
        seen: dict[str, str] = {}
        for key, value in (self.model_extra or {}).items():
            if key in SWITCHES or key in ALIASES or key in VOLCANO_ONLY:
                if not isinstance(value, bool):
                    raise ValueError(f"plugin {self.name}: {key} must be true or false, got {value!r}")
                if canonical(key) in seen:
                    raise ValueError(f"plugin {self.name}: {key} and {seen[canonical(key)]} are the same switch; "
                                     f"give it once, as {canonical(key)}")
                seen[canonical(key)] = key
                continue
            hint = ""
            flipped = ("enable" + key[len("enabled"):] if key.startswith("enabled")
                       else "enabled" + key[len("enable"):] if key.startswith("enable") else "")
            if flipped in SWITCHES or flipped in VOLCANO_ONLY:
                hint = f"; Volcano spells this switch {flipped}"
            raise ValueError(f"plugin {self.name}: unknown key {key!r}{hint} (switches: {', '.join(SWITCHES)})")
        return self

    def own_switches(self, cls: type[Plugin]) -> dict[str, bool]:
        """The switches given here that ``cls`` reads itself (``Plugin.SWITCHES``)."""
        return {key: bool(value) for key, value in (self.model_extra or {}).items() if key in cls.SWITCHES}

    def arguments_for(self, cls: type[Plugin]) -> Arguments:
        """What ``cls`` is built from: the arguments and its own switches."""
        return Arguments(self.name, self.arguments, self.own_switches(cls))

    def enabled(self, switch: str) -> bool:
        for key, value in (self.model_extra or {}).items():
            if canonical(key) == switch:
                return bool(value)
        return True


class Tier(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    plugins: list[PluginOption] = Field(min_length=1)


class ActionConfiguration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class SchedulerConf(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    actions: str
    tiers: list[Tier] = Field(min_length=1)
    configurations: list[ActionConfiguration] = Field(default_factory=list)
    _classes: dict[str, type[Plugin]] = PrivateAttr(default_factory=dict)
    """Plugin name → class, resolved by :func:`parse_conf` through the caller's registry."""
    _notes: list[str] = PrivateAttr(default_factory=list)

    @property
    def notes(self) -> list[str]:
        """What the configuration says that does nothing here, and is accepted (a switch turning off a point
        the plugin does not take part in): the CLI prints these as warnings, the scheduler logs them."""
        return list(self._notes)

    def plugin_class(self, name: str) -> type[Plugin]:
        """The class the configuration's plugin ``name`` resolved to."""
        found = self._classes.get(name)
        if found is None:
            raise ConfError(f"plugin {name}: not resolved (a configuration comes from parse_conf with a registry)")
        return found

    @field_validator("actions")
    @classmethod
    def _actions_listed(cls, value: str) -> str:
        if not [a for a in value.split(",") if a.strip()]:
            raise ValueError("must name at least one action")
        return value

    @property
    def action_names(self) -> list[str]:
        return [a.strip() for a in self.actions.split(",") if a.strip()]

    def read_labels(self) -> frozenset[str]:
        """The pod label keys the configured plugins read (``Plugin.read_labels``)."""
        keys: set[str] = set()
        for tier in self.tiers:
            for option in tier.plugins:
                cls = self._classes.get(option.name)
                if cls is not None:
                    keys |= cls.read_labels(self.arguments_for(option, cls))
        return frozenset(keys)

    def arguments_for(self, option: PluginOption, cls: type[Plugin]) -> Arguments:
        """What ``cls`` (configured as ``option``) is built from: its arguments and switches, plus the
        arguments it borrows from another configured plugin (``Plugin.BORROWS``; its own win)."""
        arguments = option.arguments_for(cls)
        if not cls.BORROWS:
            return arguments
        borrowed: dict[str, Any] = {}
        for name, keys in cls.BORROWS.items():
            lender = next((o for tier in self.tiers for o in tier.plugins if o.name == name), None)
            if lender is not None:
                borrowed.update({key: lender.arguments[key] for key in keys if key in lender.arguments})
        if not borrowed:
            return arguments
        return Arguments(arguments.plugin, {**borrowed, **arguments.values}, arguments.switches)



def parse_conf(text: str, source: str = "<scheduler.conf>", *, registry: PluginRegistry) -> SchedulerConf:
    """Parse YAML text, resolving every plugin through ``registry``; raise :class:`ConfError` naming the
    source and field on any problem, including unknown actions and plugins."""
    try:
        data = safe_load(text)
    except YamlLimitError as exc:
        raise ConfError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfError(f"{source}: malformed YAML: {str(exc).splitlines()[0]}") from None
    try:
        conf = SchedulerConf.model_validate(data)
    except ValidationError as exc:
        raise ConfError(f"{source}: {first_problem(exc, unknown='unknown key')}") from None
    for action in conf.action_names:
        if action not in ACTIONS:
            raise ConfError(f"{source}: actions: unknown action {action!r} (available: {', '.join(ACTIONS)})")
    for c, configuration in enumerate(conf.configurations):
        if configuration.name == "init-params":  # read by Volcano's Ascend vNPU back-end, not by an action
            _check_init_params(configuration.arguments, f"{source}: configurations[{c}].arguments")
            continue
        if configuration.name not in conf.action_names:
            raise ConfError(f"{source}: configurations[{c}].name: {configuration.name!r} is not one of the actions "
                            f"({', '.join(conf.action_names)}); its configuration would have no effect")
        if configuration.arguments:
            raise ConfError(f"{source}: configurations[{c}].arguments: hetsched's {configuration.name} action takes "
                            f"no arguments (got: {', '.join(sorted(map(str, configuration.arguments)))}); "
                            f"it would silently ignore them")
    for t, tier in enumerate(conf.tiers):
        for p, option in enumerate(tier.plugins):
            try:
                cls = registry.resolve(option.name)
            except KeyError:
                raise ConfError(
                    f"{source}: tiers[{t}].plugins[{p}].name: unknown plugin {option.name!r} "
                    f"(available: {', '.join(registry.available())})"
                ) from None
            except ValueError as exc:  # an entry point that cannot be used, named by the registry
                raise ConfError(f"{source}: tiers[{t}].plugins[{p}].name: {exc}") from None
            switches = {point.switch for point in declared_points(cls)}
            for key, value in sorted((option.model_extra or {}).items()):
                if canonical(key) in switches or key in cls.SWITCHES:
                    continue
                # a switch for a point the plugin does not take part in does nothing: never silently
                names = " or ".join(point.name for point in EXTENSION_POINTS.values() if point.switch == canonical(key))
                where = f"{source}: tiers[{t}].plugins[{p}].{key}"
                point = f"no {names} point" if names else "nothing hetsched has for it (a Volcano-only point)"
                said = (f"plugin {option.name} has {point}, so the switch does nothing (its switches: "
                        f"{', '.join(sorted(switches)) or 'none'})")
                if value:
                    raise ConfError(f"{where}: {said}")
                conf._notes.append(f"{where}: {said}; turning it off is accepted, as Volcano's own configurations "
                                   "do for its plugin of this name")
            try:
                cls(conf.arguments_for(option, cls))
            except ValueError as exc:
                raise ConfError(f"{source}: tiers[{t}].plugins[{p}].arguments: {exc}") from None
            conf._classes[option.name] = cls
    return _with_needed(conf, registry)


def _with_needed(conf: SchedulerConf, registry: PluginRegistry) -> SchedulerConf:
    """``conf`` with the plugins its plugins need (``Plugin.NEEDS``) and it leaves out, each added with its
    default arguments right after the first plugin needing it (``deviceshare`` → ``devicetopology``, which
    carves the partitions Volcano's ``deviceshare`` allocates itself)."""
    named = {option.name for tier in conf.tiers for option in tier.plugins}
    tiers: list[Tier] = []
    added: dict[str, type[Plugin]] = {}
    for tier in conf.tiers:
        plugins: list[PluginOption] = []
        for option in tier.plugins:
            plugins.append(option)
            for needed in conf.plugin_class(option.name).NEEDS:
                if needed not in named and needed not in added:
                    added[needed] = registry.resolve(needed)
                    plugins.append(PluginOption(name=needed))
        tiers.append(Tier(plugins=plugins))
    if not added:
        return conf
    result = conf.model_copy(update={"tiers": tiers})
    result._classes = {**conf._classes, **added}
    result._notes = list(conf._notes)
    for name, cls in added.items():
        cls(result.arguments_for(next(o for t in tiers for o in t.plugins if o.name == name), cls))
    return result


def read_conf(path: str | Path) -> str:
    """A configuration file's text; :class:`ConfError` naming the file when it cannot be read."""
    try:
        return read_text(path)
    except OSError as exc:
        raise ConfError(f"{path}: cannot read file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfError(f"{path}: cannot read file: not UTF-8 text ({exc.reason})") from None


def _check_init_params(arguments: dict[str, Any], where: str) -> None:
    """Ascend MindCluster vNPU's ``init-params`` (``deviceshare.AscendMindClusterVNPUEnable``): hetsched carves vNPUs
    on demand, as ``presetVirtualDevice: "false"`` (dynamic vNPU) asks; ``grace-over-time`` (seconds a destroyed
    vNPU's chip waits before reuse) is checked and left to the node agent."""
    for key, value in arguments.items():
        text = str(value)
        if key == "presetVirtualDevice":
            if text not in ("false", "true"):
                raise ConfError(f"{where}: presetVirtualDevice must be \"true\" or \"false\", got {text[:40]!r}")
            if text == "true":
                raise ConfError(f"{where}: presetVirtualDevice \"true\" (vNPUs created by hand beforehand) is not "
                                "supported; hetsched creates them on demand (\"false\")")
        elif key == "grace-over-time":
            if not text.isdigit():
                raise ConfError(f"{where}: grace-over-time must be a whole number of seconds, got {text[:40]!r}")
        else:
            raise ConfError(f"{where}: unknown key {key[:60]!r} (init-params takes presetVirtualDevice and "
                            "grace-over-time)")
