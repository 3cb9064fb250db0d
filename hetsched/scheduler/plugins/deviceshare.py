"""``deviceshare``: Volcano's device-sharing plugin — which node a pod asking for a chip partition goes to,
binpack or spread.

Who calls it: the configuration loader (its arguments are checked when a configuration loads) and the
session (``node_score`` for task groups that ask for partitions).

Volcano's ``deviceshare`` turns on, one argument each, its sharing back-ends: GPU sharing by GPU memory
(``deviceshare.GPUSharingEnable``, ``volcano.sh/gpu-memory``), whole GPUs by number
(``deviceshare.GPUNumberEnable``, ``volcano.sh/gpu-number``), HAMi vGPU and dynamic MIG
(``deviceshare.VGPUEnable``, ``volcano.sh/vgpu-number``/``-memory``/``-cores``) and Ascend vNPU
(``deviceshare.AscendMindClusterVNPUEnable``, ``deviceshare.AscendHAMiVNPUEnable``). In hetsched every one of
these requests is served by the chip-partition model (``devices.partition_requests``, ``devices.partitions``)
inside ``devicetopology``, which chooses the chip and the carving jointly with the node, fragmentation-aware
(a configuration naming ``deviceshare`` without it gets it: ``Plugin.NEEDS``);
the back-end switches are accepted with that meaning and turn nothing off (a request is served wherever a
node's inventory says its chips are partitioned in that mode).

What this plugin adds is Volcano's node policy: ``deviceshare.SchedulePolicy`` ``binpack`` (default: the node
whose chips are busiest — the share holding anything) or ``spread`` (the least busy), scaled by
``deviceshare.ScheduleWeight`` (0–10 points times the weight; default 0: no score, as Volcano).
``deviceshare.NodeLockEnable`` is accepted: Volcano needs the node lock because its device plugins and
scheduler race for a node's chips; hetsched's scheduler is the only writer of a hand-off, so there is
nothing to lock.
``deviceshare.KnownGeometriesCMName``/``…Namespace`` are accepted; hetsched carves with its built-in
geometries (docs/devices.md, the same templates HAMi's device ConfigMap lists). ``deviceshare.GPUExclusiveRules``
(label-matched pods never share a GPU with each other: ``contract.gpu_exclusive``) is checked here and
enforced where the vGPUs are carved, in ``devicetopology`` (which borrows the argument).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.devices.partition_requests import PartitionRequestError, partition_request
from hetsched.scheduler.contract.arrays import FloatArray, IntArray
from hetsched.scheduler.contract.framework import Arguments, NodeScore, Plugin
from hetsched.scheduler.contract.gpu_exclusive import KEY as EXCLUSIVE_RULES
from hetsched.scheduler.contract.gpu_exclusive import parse_rules
from hetsched.scheduler.contract.partition_fit import busy_fraction, geometry_rows
from hetsched.scheduler.contract.snapshot import TaskGroup

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "deviceshare"
BACK_ENDS = {
    "deviceshare.GPUSharingEnable": "GPU sharing by GPU memory (volcano.sh/gpu-memory)",
    "deviceshare.GPUNumberEnable": "whole GPUs by number (volcano.sh/gpu-number)",
    "deviceshare.VGPUEnable": "vGPU (volcano.sh/vgpu-number, -memory, -cores)",
    "deviceshare.AscendMindClusterVNPUEnable": "Ascend vNPU through MindCluster",
    "deviceshare.AscendHAMiVNPUEnable": "Ascend vNPU through HAMi",
}
SETTINGS = {"deviceshare.SchedulePolicy", "deviceshare.ScheduleWeight", "deviceshare.NodeLockEnable",
            "deviceshare.KnownGeometriesCMName", "deviceshare.KnownGeometriesCMNamespace",
            EXCLUSIVE_RULES}


class DeviceShare(Plugin, NodeScore):
    NAME = NAME
    NEEDS = ("devicetopology",)

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({*BACK_ENDS, *SETTINGS})
        for key in BACK_ENDS:
            arguments.flag(key, False)
        policy = arguments.text("deviceshare.SchedulePolicy", "binpack")
        if policy not in ("binpack", "spread", ""):
            raise ValueError(f"plugin {NAME}: argument deviceshare.SchedulePolicy must be binpack or spread, "
                             f"got {policy!r}")
        self.spread = policy == "spread"
        self.weight = float(arguments.number("deviceshare.ScheduleWeight", 0))
        if self.weight < 0:
            raise ValueError(f"plugin {NAME}: argument deviceshare.ScheduleWeight must be 0 or more, got {self.weight}")
        arguments.flag("deviceshare.NodeLockEnable", False)
        arguments.text("deviceshare.KnownGeometriesCMName", "")
        arguments.text("deviceshare.KnownGeometriesCMNamespace", "")
        parse_rules(arguments.values.get(EXCLUSIVE_RULES), NAME)  # enforced by devicetopology

    def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        """0–10 × weight per node for pods asking for partitions: how busy the node's chips are (binpack) or
        how free (spread)."""
        score = np.zeros(len(nodes), dtype=np.float64)
        if not self.weight:
            return score
        names = session.snapshot.resources.names
        try:
            request = partition_request({names[c]: int(group.request[c]) for c in group.columns.tolist()},
                                        group.annotations, group.labels)
        except PartitionRequestError:
            return score  # devicetopology filters it out, naming the problem
        for resource, mode in sorted({(ask.resource, ask.mode) for ask in request.asks}):
            devices = session.snapshot.devices.get(resource)
            if devices is None:
                continue
            for _geometry, rows in geometry_rows(devices, mode):
                positions = np.flatnonzero(np.isin(nodes, rows))
                if len(positions):
                    fullness = busy_fraction(devices, nodes[positions])
                    score[positions] += 10.0 * (1.0 - fullness if self.spread else fullness)
        return self.weight * score
