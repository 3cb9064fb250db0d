"""``resource-strategy-fit``: per-resource node scoring (MostAllocated or LeastAllocated, each with its weight),
scarce-resource avoidance, and CPU and memory kept for idle accelerators (Volcano's resource-strategy-fit).

Who calls it: the session — ``node_score`` (vectorised over (node, pods-already-placed) pairs) and, with
``proportional`` on, ``node_capacity`` (asked again after each placement: it depends on what is idle).

- **Strategy score.** For each resource the pod requests (``pods`` aside) that has a strategy — the pod's own
  (``volcano.sh/resource-strategy-scoring-type`` with ``volcano.sh/resource-strategy-weight``: only the
  resources named there), else the ``resources`` argument (an exact name, else the longest ``prefix/*``
  pattern that matches) — ``MostAllocated`` scores ``(used + request) / allocatable × w``, ``LeastAllocated``
  ``(allocatable − used − request) / allocatable × w`` (0 where the node has none of it). A node where
  any such resource would exceed allocatable scores 0. ``score = Σ / Σ w × 100 × resourceStrategyFitWeight``.
- **sra** (scarce-resource avoidance): ``(1 − Σ w_r over the listed resources the node has / Σ w_r) × 100 ×
  sra.weight`` — nodes without GPUs score higher for any pod, so CPU work leaves GPU servers to GPU work;
  0 on a node lacking something the pod requests.
- **proportional**: a pod requesting none of the listed accelerators may use a node only while the node
  keeps ``<resource>.cpu`` CPUs and ``<resource>.memory`` GB (10^9 bytes) of memory per idle chip of each of
  them — CPU jobs cannot strand a GPU server's chips without CPUs to drive them.

Arguments (Volcano's keys)::

    - name: resource-strategy-fit
      arguments:
        resourceStrategyFitWeight: 10            # default 10 (a negative one is 10, as in Volcano)
        resources:                                # default: cpu and memory LeastAllocated, weight 1
          nvidia.com/gpu: {type: MostAllocated, weight: 2}
          cpu: {type: LeastAllocated, weight: 1}
          nvidia.com/gpu/*: {type: MostAllocated, weight: 3}
        sra: {enable: true, resources: "nvidia.com/gpu", weight: 10, resourceWeight: {nvidia.com/gpu: 1}}
        proportional: {enable: true, resources: "nvidia.com/gpu",
                       resourceProportion: {nvidia.com/gpu.cpu: 4, nvidia.com/gpu.memory: 8}}

A weight of 0 or less in ``resources`` counts as 1, and a negative ``sra.resourceWeight`` or proportion
as 1, as Volcano reads them. What Volcano would ignore with a log line — an unknown strategy, a pattern
other than one trailing ``*`` (a bare ``*`` included), a value of the wrong type, an unknown key — is a
configuration error naming the argument here. A pod's unreadable annotations are refused at admission
(``api.volcano_annotations``); one that got past it scores 0, as in Volcano.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hetsched.api.volcano_annotations import STRATEGIES, resource_strategy
from hetsched.scheduler.contract.arrays import BoolArray, FloatArray, IntArray
from hetsched.scheduler.contract.framework import Arguments, NodeCapacity, NodeScore, Plugin
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.snapshot import TaskGroup

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "resource-strategy-fit"
MAX_SCORE = 100.0
DEFAULT_WEIGHT = 10
DEFAULT_RESOURCES = {"cpu": ("LeastAllocated", 1), "memory": ("LeastAllocated", 1)}
_NO_LIMIT = np.iinfo(np.int64).max
GB = 10**9 * 1000
"""10^9 bytes in hetsched's milli-units (Volcano's proportion counts memory per chip in 10^9 bytes)."""


@dataclass(frozen=True)
class _Sra:
    weight: int
    resources: dict[str, int]


def _mapping(plugin: str, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"plugin {plugin}: argument {key} must be a map, got {value!r:.80}")
    return value


def _whole(plugin: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"plugin {plugin}: argument {key} must be a whole number, got {value!r:.80}")
    return value


def _number(plugin: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"plugin {plugin}: argument {key} must be a number, got {value!r:.80}")
    return float(value)


def _known(plugin: str, key: str, value: dict[str, Any], known: set[str]) -> None:
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"plugin {plugin}: argument {key}: unknown key {unknown[0]!r} "
                         f"(known: {', '.join(sorted(known))})")


def _flag(plugin: str, key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"plugin {plugin}: argument {key} must be true or false, got {value!r:.80}")


def _names(plugin: str, key: str, value: Any) -> list[str]:
    if not isinstance(value, str):
        raise ValueError(f"plugin {plugin}: argument {key} must be a comma-separated list of resources, "
                         f"got {value!r:.80}")
    return [name.strip() for name in value.split(",") if name.strip()]


class ResourceStrategyFit(Plugin, NodeScore, NodeCapacity):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({"resourceStrategyFitWeight", "resources", "sra", "proportional"})
        raw = arguments.values.get("resourceStrategyFitWeight", DEFAULT_WEIGHT)
        weight = _whole(NAME, "resourceStrategyFitWeight", raw)
        self.weight = DEFAULT_WEIGHT if weight < 0 else weight
        self.strategies: dict[str, tuple[str, int]] = {}
        """Resource name or ``prefix/*`` pattern → (strategy, weight)."""
        given = _mapping(NAME, "resources", arguments.values.get("resources") or {})
        for resource, option in given.items():
            where = f"resources.{resource}"
            if "*" in resource and (resource == "*" or not resource.endswith("*") or resource.count("*") != 1):
                raise ValueError(f"plugin {NAME}: argument {where}: a pattern may only end in one '*' after a "
                                 f"prefix, such as 'nvidia.com/gpu/*' (Volcano ignores any other)")
            option = _mapping(NAME, where, option)
            _known(NAME, where, option, {"type", "weight"})
            kind = option.get("type", "LeastAllocated")
            if kind not in STRATEGIES:
                raise ValueError(f"plugin {NAME}: argument {where}.type must be {' or '.join(STRATEGIES)}, "
                                 f"got {kind!r:.80}")
            resource_weight = _whole(NAME, f"{where}.weight", option.get("weight", 1))
            self.strategies[resource] = (kind, max(resource_weight, 1))
        if not self.strategies:
            self.strategies = dict(DEFAULT_RESOURCES)
        self.sra: _Sra | None = None
        sra = _mapping(NAME, "sra", arguments.values.get("sra") or {})
        _known(NAME, "sra", sra, {"enable", "resources", "weight", "resourceWeight"})
        if _flag(NAME, "sra.enable", sra.get("enable", False)):
            weights = _mapping(NAME, "sra.resourceWeight", sra.get("resourceWeight") or {})
            listed = _names(NAME, "sra.resources", sra.get("resources", ""))
            self.sra = _Sra(_whole(NAME, "sra.weight", sra.get("weight", 0)), {
                name: (lambda w: 1 if w < 0 else w)(_whole(NAME, f"sra.resourceWeight.{name}", weights.get(name, 1)))
                for name in listed})
        self.proportional: dict[str, tuple[float, float]] = {}
        """Accelerator resource → (CPUs, GB of memory) kept per idle chip."""
        proportional = _mapping(NAME, "proportional", arguments.values.get("proportional") or {})
        _known(NAME, "proportional", proportional, {"enable", "resources", "resourceProportion"})
        if _flag(NAME, "proportional.enable", proportional.get("enable", False)):
            rates = _mapping(NAME, "proportional.resourceProportion", proportional.get("resourceProportion") or {})
            for name in _names(NAME, "proportional.resources", proportional.get("resources", "")):
                cpu, memory = (_number(NAME, f"proportional.resourceProportion.{name}.{what}",
                                       rates.get(f"{name}.{what}", 1.0)) for what in ("cpu", "memory"))
                self.proportional[name] = (1.0 if cpu < 0 else cpu, 1.0 if memory < 0 else memory)

    # ---------------------------------------------------------------------------------------- score

    def _strategy(self, resource: str) -> tuple[str, int] | None:
        found = self.strategies.get(resource)
        if found is not None:
            return found
        best, length = None, -1
        for pattern, option in self.strategies.items():
            if pattern.endswith("*") and resource.startswith(pattern[:-1]) and len(pattern) - 1 > length:
                best, length = option, len(pattern) - 1
        return best

    def _terms(self, session: SessionView, group: TaskGroup) -> list[tuple[int, str, int]] | None:
        """(column, strategy, weight) per requested resource that has a strategy; None: score 0 (the pod's
        own annotations cannot be read)."""
        names = session.snapshot.resources.names
        try:
            own = resource_strategy(group.annotations)
        except ValueError:
            return None
        terms = []
        for column in group.columns.tolist():
            resource = names[column]
            if resource == "pods":
                continue
            if own is not None:
                if resource in own[1]:
                    terms.append((column, own[0], own[1][resource]))
                continue
            option = self._strategy(resource)
            if option is not None:
                terms.append((column, *option))
        return terms

    def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        score = np.zeros(len(nodes), dtype=np.float64)
        if self.weight > 0:
            score += self._strategy_score(session, group, nodes, placed)
        if self.sra is not None and self.sra.weight > 0:
            score += self._sra_score(session, group, nodes)
        return score

    def _strategy_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        terms = self._terms(session, group)
        score = np.zeros(len(nodes), dtype=np.float64)
        if not terms:
            return score
        over = np.zeros(len(nodes), dtype=bool)
        weights = 0
        for column, kind, weight in terms:
            weights += weight
            alloc = session.nodes.alloc[column][nodes].astype(np.float64)
            final = session.nodes.used[column][nodes] + (placed + 1) * float(group.request[column])
            has = alloc > 0
            over |= has & (final > alloc)
            if not weight:
                continue
            free = final if kind == "MostAllocated" else alloc - final
            score += np.where(has, free * weight / np.where(has, alloc, 1.0), 0.0)
        if weights > 0:
            score /= weights
        return np.where(over, 0.0, score * MAX_SCORE * self.weight)

    def _sra_score(self, session: SessionView, group: TaskGroup, nodes: IntArray) -> FloatArray:
        assert self.sra is not None
        alloc = session.nodes.alloc
        columns = session.snapshot.resources.columns
        names = session.snapshot.resources.names
        lacking = np.zeros(len(nodes), dtype=bool)
        for column in group.columns.tolist():
            if names[column] != "pods":
                lacking |= alloc[column][nodes] == 0
        total = sum(self.sra.resources.values())
        held = np.zeros(len(nodes), dtype=np.float64)
        for resource, weight in self.sra.resources.items():
            column = columns.get(resource)
            if column is not None:
                held += (alloc[column][nodes] > 0) * float(weight)
        score = (1.0 - held / total) if total > 0 else held
        return np.where(lacking, 0.0, score * MAX_SCORE * self.sra.weight)

    # ------------------------------------------------------------------------------- proportional

    def _reserves(self, session: SessionView, group: TaskGroup) -> list[tuple[str, FloatArray, FloatArray]]:
        """Per listed accelerator the nodes have: (name, CPU kept, memory kept) per node, in milli-units;
        [] when the group asks for one of them (its pods are what the reserve is for)."""
        columns = session.snapshot.resources.columns
        if any(group.request[columns[name]] > 0 for name in self.proportional if name in columns):
            return []
        found = []
        for name, (cpu, memory) in self.proportional.items():
            column = columns.get(name)
            if column is None:
                continue
            idle = (session.nodes.alloc[column] - session.nodes.used[column]).astype(np.float64)  # milli-chips
            found.append((name, idle * cpu, idle * memory * GB / 1000))
        return found

    def node_capacity(self, session: SessionView, group: TaskGroup) -> IntArray | None:
        reserves = self._reserves(session, group)
        if not reserves:
            return None
        columns = session.snapshot.resources.columns
        limit = np.full(len(session.nodes), _NO_LIMIT, dtype=np.int64)
        for _, *kept in reserves:
            for resource, keep in zip(("cpu", "memory"), kept, strict=True):
                column = columns.get(resource)
                if column is None:
                    continue
                idle = (session.nodes.alloc[column] - session.nodes.used[column]).astype(np.float64)
                request = float(group.request[column])
                room = idle - keep
                if request > 0:
                    count = np.floor(np.maximum(room, -1.0) / request)
                    limit = np.minimum(limit, np.where(room >= 0, np.minimum(count, _NO_LIMIT), 0).astype(np.int64))
                else:
                    limit = np.where(room >= 0, limit, 0)
        return limit

    def node_capacity_reasons(self, session: SessionView, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        reasons = []
        for name, cpu_kept, memory_kept in self._reserves(session, group):
            blocked = np.zeros(len(session.nodes), dtype=bool)
            for resource, keep in (("cpu", cpu_kept), ("memory", memory_kept)):
                column = session.snapshot.resources.columns.get(resource)
                if column is not None:
                    idle = session.nodes.alloc[column] - session.nodes.used[column]
                    blocked |= idle - group.request[column] < keep
            if blocked.any():
                reasons.append((Reason.of(ReasonCode.ACCELERATOR_RESERVE, resource=name), blocked))
        return reasons
