"""``deviceshare``: Volcano's device-sharing plugin, as far as hetsched serves it today.

Who calls it: the configuration loader (its arguments are checked when a configuration loads); the
session builds it and asks it nothing.

Volcano's ``deviceshare`` turns on, one argument each, its sharing back-ends: GPU sharing by GPU memory
(``deviceshare.GPUSharingEnable``, resource ``volcano.sh/gpu-memory``), whole GPUs by number
(``deviceshare.GPUNumberEnable``, ``volcano.sh/gpu-number``), HAMi-style vGPU (``deviceshare.VGPUEnable``,
``volcano.sh/vgpu-number``/``-memory``/``-cores``) and Ascend vNPU (``deviceshare.AscendMindClusterVNPUEnable``,
``deviceshare.AscendHAMiVNPUEnable``), with ``deviceshare.SchedulePolicy`` (binpack or spread),
``deviceshare.ScheduleWeight``, ``deviceshare.NodeLockEnable``, ``deviceshare.KnownGeometriesCMName`` and
``…Namespace``, and ``deviceshare.GPUExclusiveRules``.

Those device models are the finer-grained sharing work (vendor templates, device memory per partition,
creating partitions on the node), not yet in hetsched. So that a configuration never silently does less
than it says, this plugin accepts Volcano's arguments with every back-end off — a configuration listing
``deviceshare`` with nothing enabled loads and means what it means in Volcano: nothing — and refuses one
that turns a back-end on, naming the argument and what hetsched offers meanwhile: fractional chips
(``hetsched.io/gpu-milli`` with ``hetsched.io/gpu-memory``, and the same for NPUs and MLUs; docs/devices.md),
scheduled with the chips by ``devicetopology``. The settings of a back-end (policy, weight, node lock,
geometries, exclusive rules) are checked for type and accepted.
"""

from __future__ import annotations

from hetsched.scheduler.contract.framework import Arguments, Plugin

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
            "deviceshare.GPUExclusiveRules"}
OFFERED = ("hetsched shares chips as fractions instead: hetsched.io/gpu-milli (+ hetsched.io/gpu-memory), "
           "hetsched.io/npu-milli, hetsched.io/mlu-milli, placed with the chips by devicetopology (docs/devices.md)")


class DeviceShare(Plugin):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({*BACK_ENDS, *SETTINGS})
        for key, what in BACK_ENDS.items():
            if arguments.flag(key, False):
                raise ValueError(f"plugin {NAME}: argument {key}: {what} is not supported by hetsched yet; "
                                 f"{OFFERED}")
        policy = arguments.text("deviceshare.SchedulePolicy", "binpack")
        if policy not in ("binpack", "spread", ""):
            raise ValueError(f"plugin {NAME}: argument deviceshare.SchedulePolicy must be binpack or spread, "
                             f"got {policy!r}")
        arguments.number("deviceshare.ScheduleWeight", 0)
        arguments.flag("deviceshare.NodeLockEnable", False)
        arguments.text("deviceshare.KnownGeometriesCMName", "")
        arguments.text("deviceshare.KnownGeometriesCMNamespace", "")
        rules = arguments.values.get("deviceshare.GPUExclusiveRules", [])
        if not isinstance(rules, list) or not all(isinstance(rule, dict) for rule in rules):
            raise ValueError(f"plugin {NAME}: argument deviceshare.GPUExclusiveRules must be a list of maps")
