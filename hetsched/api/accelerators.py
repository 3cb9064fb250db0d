"""Accelerator families and the extended-resource names their device plugins advertise.

Who calls it: the cluster-spec expander (which resource a pool's chips are), the simulator's results and
timeline, the scheduler's chip maps and metrics (allocation per accelerator kind).
"""

from __future__ import annotations

from typing import Literal

AcceleratorKind = Literal["ascend", "cambricon", "nvidia"]

# model (as written in a cluster spec, case-insensitive prefix) → resource name, per family
_RESOURCE_BY_MODEL: dict[str, list[tuple[str, str]]] = {
    "ascend": [("ascend310p", "huawei.com/Ascend310P"), ("ascend310", "huawei.com/Ascend310"),
               ("ascend950", "huawei.com/npu"), ("ascend910", "huawei.com/Ascend910")],
    "cambricon": [("", "cambricon.com/mlu")],
    "nvidia": [("", "nvidia.com/gpu")],
}
_KIND_BY_DOMAIN = {"huawei.com": "ascend", "cambricon.com": "cambricon", "nvidia.com": "nvidia"}


def resource_for(kind: AcceleratorKind, model: str) -> str:
    """The extended resource a device plugin advertises for ``model`` chips of family ``kind``."""
    lowered = model.lower().replace("-", "").replace("_", "")
    for prefix, resource in _RESOURCE_BY_MODEL[kind]:
        if lowered.startswith(prefix):
            return resource
    return _RESOURCE_BY_MODEL[kind][-1][1]


def accelerator_kind(resource: str) -> str | None:
    """``huawei.com/Ascend910`` → ``ascend``; ``None`` for CPU, memory and unknown resources."""
    domain = resource.split("/", 1)[0] if "/" in resource else ""
    return _KIND_BY_DOMAIN.get(domain)
