"""``binpack``: prefer fuller nodes, so large jobs find whole empty nodes later (Volcano's binpack).

Who calls it: the session's ``score``, vectorised over (node, pods-already-placed) pairs.

Per resource r that the pod requests and that has a weight w_r:
``s_r = (used_r + request_r) / allocatable_r × w_r``; the node scores 0 if any such resource would exceed
allocatable. ``score = Σ s_r / Σ w_r × 100 × binpack.weight`` (Volcano's ``BinPackingScore``; hetsched
uses kube-scheduler's 0–100 scale for every score plugin so weights compare across plugins).

Arguments (Volcano's keys)::

    - name: binpack
      arguments:
        binpack.weight: 1
        binpack.cpu: 1
        binpack.memory: 1
        binpack.resources: huawei.com/Ascend910, nvidia.com/gpu
        binpack.resources.huawei.com/Ascend910: 5
        binpack.resources.nvidia.com/gpu: 2
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.scheduler.contract.arrays import FloatArray, IntArray
from hetsched.scheduler.contract.framework import Arguments, NodeScore, Plugin
from hetsched.scheduler.contract.snapshot import TaskGroup

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "binpack"
MAX_SCORE = 100.0


class Binpack(Plugin, NodeScore):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({"binpack.weight", "binpack.cpu", "binpack.memory", "binpack.resources"},
                              prefixes=("binpack.resources.",))
        self.weight = arguments.number("binpack.weight", 1)
        self.resource_weights: dict[str, float] = {
            "cpu": arguments.number("binpack.cpu", 1),
            "memory": arguments.number("binpack.memory", 1),
        }
        listed = [r.strip() for r in arguments.text("binpack.resources", "").split(",") if r.strip()]
        for resource in listed:
            self.resource_weights[resource] = arguments.number(f"binpack.resources.{resource}", 1)
        for key in arguments.values:
            if key.startswith("binpack.resources.") and key[len("binpack.resources."):] not in listed:
                raise ValueError(f"plugin binpack: {key} is set but {key[len('binpack.resources.'):]} is not "
                                 f"listed in binpack.resources")

    def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        if not self.weight:
            return np.zeros(len(nodes), dtype=np.float64)
        columns = session.snapshot.resources.columns
        score = np.zeros(len(nodes), dtype=np.float64)
        over = np.zeros(len(nodes), dtype=bool)
        weight_sum = 0.0
        for resource, weight in self.resource_weights.items():
            column = columns.get(resource)
            if column is None or not weight or group.request[column] == 0:
                continue
            alloc = session.nodes.alloc[column][nodes]
            total = session.nodes.used[column][nodes] + (placed + 1) * group.request[column]
            over |= total > alloc
            with np.errstate(divide="ignore", invalid="ignore"):
                score += np.where(alloc > 0, total / np.where(alloc > 0, alloc, 1), 0.0) * weight
            weight_sum += weight
        if weight_sum == 0:
            return score
        return np.where(over, 0.0, score / weight_sum * MAX_SCORE * self.weight)
