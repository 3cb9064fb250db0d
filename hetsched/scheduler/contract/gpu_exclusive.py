"""Volcano's GPU exclusivity rules (``deviceshare.GPUExclusiveRules``): pods matching a rule never share a
physical GPU with another pod matching the same rule.

Who calls it: ``deviceshare`` checks the rules when a configuration loads; ``devicetopology`` reads them
(the session hands it ``deviceshare``'s argument, ``Plugin.BORROWS``) and keeps a matching pod's vGPUs off
the GPUs :func:`reserved` names, in its filter, capacity, score and choice of chip.

Semantics, as Volcano's ``gpuexclusive.go``: a rule is a map of label → value; a pod matches it when it
carries every one of those labels with that value (extra labels do not matter). A pod matching rules R may
not take a vGPU on a GPU where a pod matching any rule of R holds one; pods matching different rules, and
pods matching none, share GPUs as usual. Only HAMi-core vGPUs (partitioning mode ``vgpu``) are concerned:
MIG instances are isolated by the hardware already. Where Volcano silently drops a rule it cannot read (a
value that is not a string, an empty map), hetsched refuses the configuration naming the rule: a rule that
does nothing while its author thinks it protects their jobs is the worst outcome.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetsched.scheduler.contract.arrays import BoolArray
from hetsched.scheduler.contract.carving import Carving, Labels

KEY = "deviceshare.GPUExclusiveRules"
MODE = "vgpu"
"""The partitioning mode the rules apply to (HAMi-core vGPUs)."""
MAX_RULES = 64
"""More rules than any operator writes; bounds the work per pod."""

Rule = tuple[tuple[str, str], ...]


def parse_rules(raw: Any, plugin: str) -> tuple[Rule, ...]:
    """The rules of ``raw`` (the argument's YAML value), each a sorted tuple of (label, value); ValueError
    naming the rule and the label on anything Volcano would drop or misread."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"plugin {plugin}: argument {KEY} must be a list of label maps, got {type(raw).__name__}")
    if len(raw) > MAX_RULES:
        raise ValueError(f"plugin {plugin}: argument {KEY} has {len(raw)} rules; at most {MAX_RULES}")
    rules = []
    for i, rule in enumerate(raw):
        where = f"plugin {plugin}: argument {KEY}[{i}]"
        if not isinstance(rule, dict):
            raise ValueError(f"{where} must be a map of label to value, got {type(rule).__name__}")
        if not rule:
            raise ValueError(f"{where} is empty: a rule names at least one label (Volcano ignores an empty rule)")
        for label, value in rule.items():
            if not isinstance(label, str) or not label:
                raise ValueError(f"{where}: label {label!r} must be a non-empty string")
            if not isinstance(value, str):
                raise ValueError(f"{where}: the value of {label[:100]!r} must be a string (quote it: "
                                 f"'{value}'); Volcano ignores a label whose value is not a string")
        rules.append(tuple(sorted(rule.items())))
    return tuple(rules)


def matching(labels: Labels | None, rules: tuple[Rule, ...]) -> tuple[int, ...]:
    """Indexes of the rules a pod with ``labels`` matches (all their labels, same values)."""
    if not labels:
        return ()
    return tuple(i for i, rule in enumerate(rules) if all(labels.get(k) == v for k, v in rule))


def reserved(carving: Carving | None, rules: tuple[Rule, ...], matched: tuple[int, ...]) -> BoolArray | None:
    """Node row × chip slot: the GPUs, on nodes carving vGPUs, where a pod matching one of the ``matched``
    rules holds a partition (a pod matching them may not take one there); None where there are none."""
    if carving is None or not matched or not carving.holders:
        return None
    result = np.zeros(carving.cores.shape, dtype=bool)
    wanted = [rules[i] for i in matched]
    for (row, chip), owners in carving.holders.items():
        if carving.modes[row] != MODE:
            continue
        if any(all(owner.get(k) == v for k, v in rule) for owner in owners for rule in wanted):
            result[row, chip] = True
    return result if result.any() else None


def describe(rules: tuple[Rule, ...], matched: tuple[int, ...]) -> str:
    """The matched rules as a message shows them (``app=training,team=ml``)."""
    return "; ".join(",".join(f"{k}={v}" for k, v in rules[i]) for i in matched)[:200]
