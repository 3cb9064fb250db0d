"""Which topology policy governs a node's chips: hardware topology name (from the node's inventory) plus
the scheduler's policy settings → a :class:`~hetsched.devices.policy.TopologyPolicy`.

Who calls it: the cluster-spec expander (default topology for a model) and the ``devicetopology``
scheduler plugin (one policy object per distinct topology).
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsched.devices.ascend310p import Ascend310PDuo
from hetsched.devices.ascend910 import Ascend910Compat, Ascend910Hccs
from hetsched.devices.ascend910b import Ascend910B8, Ascend910B16
from hetsched.devices.cambricon import MODES, MLULink
from hetsched.devices.generic import Generic
from hetsched.devices.nvidia import SHAPES, NvidiaLinks
from hetsched.devices.policy import TopologyPolicy

ASCEND910_POLICIES = ("ascend-hccs", "ascend-volcano-compat")
MODEL_LABEL = "hetsched.io/accelerator-model"
"""Node label naming the accelerator model (set by the cluster-spec expander and by the node agent)."""
TOPOLOGIES = ("ascend910-8", "ascend910b-8", "ascend910b-16", "ascend310p-duo", "mlu370-x8", *SHAPES, "generic")


@dataclass(frozen=True)
class PolicySettings:
    ascend910: str = "ascend-hccs"
    """``ascend-hccs`` (hetsched's) or ``ascend-volcano-compat`` (Ascend-for-Volcano's exact rules)."""
    mlulink: str = "best-effort"

    def __post_init__(self) -> None:
        if self.ascend910 not in ASCEND910_POLICIES:
            raise ValueError(f"ascend910 policy must be one of {', '.join(ASCEND910_POLICIES)}, got {self.ascend910!r}")
        if self.mlulink not in MODES:
            raise ValueError(f"MLU-Link policy must be one of {', '.join(MODES)}, got {self.mlulink!r}")


def default_topology(kind: str, model: str, count: int) -> str:
    """The usual server shape for a model and chip count (overridable per pool in the cluster spec)."""
    lowered = model.lower().replace("-", "")
    if kind == "ascend":
        if lowered.startswith("ascend910b") or lowered.startswith("910b"):
            return "ascend910b-16" if count == 16 else "ascend910b-8"
        if lowered.startswith("ascend910") and count == 8:
            return "ascend910-8"
        if lowered.startswith("ascend310p"):
            return "ascend310p-duo"
    if kind == "cambricon" and lowered.startswith("mlu370") and count == 8:
        return "mlu370-x8"
    if kind == "nvidia" and count == 8:
        if any(tag in lowered for tag in ("a100sxm", "h100", "h800", "a800", "h200")):
            return "nvswitch-8"
        if "v100" in lowered and "sxm" in lowered:
            return "cube-mesh-8"
        return "pcie-8"
    return "generic"


def chips_of(topology: str) -> int | None:
    """Chip count a topology implies (None where it depends on the inventory)."""
    return {"ascend910b-16": 16, "ascend910-8": 8, "ascend910b-8": 8, "mlu370-x8": 8}.get(
        topology, 8 if topology in SHAPES else None)


def policy_for(topology: str, chips: int, settings: PolicySettings) -> TopologyPolicy:
    if topology == "ascend910-8":
        return Ascend910Compat() if settings.ascend910 == "ascend-volcano-compat" else Ascend910Hccs()
    if topology == "ascend910b-8":
        return Ascend910B8()
    if topology == "ascend910b-16":
        return Ascend910B16()
    if topology == "ascend310p-duo":
        return Ascend310PDuo(chips)
    if topology == "mlu370-x8":
        return MLULink(settings.mlulink)
    if topology in SHAPES:
        return NvidiaLinks(topology)
    return Generic(chips)
