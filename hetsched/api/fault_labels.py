"""How a Job asks for fault rescheduling: Ascend MindCluster's job labels, plus hetsched's escalation
timeout, parsed and checked in one place.

Who calls it: the Job model's validation (``api.objects``: a bad value is refused with the label's name
when the manifest is loaded) and the fault controller (``controllers.fault``).

Labels: ``fault-scheduling`` (``force``, ``grace``, ``off``; default ``force``), ``pod-rescheduling``
(``on``/``off``), ``fault-retry-times`` (a count; default the job's ``maxRetry``), ``grace-over-time``
(seconds; default 900). Annotation: ``hetsched.io/pod-rescheduling-timeout`` (seconds; default 60).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hetsched.api.annotations import seconds

FAULT_SCHEDULING = "fault-scheduling"
POD_RESCHEDULING = "pod-rescheduling"
FAULT_RETRY_TIMES = "fault-retry-times"
GRACE_OVER_TIME = "grace-over-time"
POD_RESCHEDULING_TIMEOUT = "hetsched.io/pod-rescheduling-timeout"
DEFAULT_GRACE = 900.0
DEFAULT_POD_RESCHEDULING_TIMEOUT = 60.0


@dataclass(frozen=True)
class FaultSettings:
    mode: str
    pod_level: bool
    retry_times: int
    grace: float
    pod_rescheduling_timeout: float


def _seconds(raw: str, where: str) -> float:
    try:
        return seconds(raw)
    except ValueError as exc:
        raise ValueError(f"{where} {exc}") from None


def parse(labels: Mapping[str, str], annotations: Mapping[str, str], max_retry: int) -> FaultSettings:
    """The settings, or a ValueError naming the label or annotation that is wrong."""
    mode = labels.get(FAULT_SCHEDULING, "force")
    if mode not in ("force", "grace", "off"):
        raise ValueError(f"labels[{FAULT_SCHEDULING}] must be force, grace or off, got {mode!r}")
    pod = labels.get(POD_RESCHEDULING, "off")
    if pod not in ("on", "off"):
        raise ValueError(f"labels[{POD_RESCHEDULING}] must be on or off, got {pod!r}")
    raw = labels.get(FAULT_RETRY_TIMES)
    retry_times = max_retry
    if raw is not None:
        if not raw.isdigit():
            raise ValueError(f"labels[{FAULT_RETRY_TIMES}] must be a count ≥ 0, got {raw!r}")
        retry_times = int(raw)
    grace = _seconds(labels[GRACE_OVER_TIME], f"labels[{GRACE_OVER_TIME}]") if GRACE_OVER_TIME in labels \
        else DEFAULT_GRACE
    timeout = _seconds(annotations[POD_RESCHEDULING_TIMEOUT], f"annotations[{POD_RESCHEDULING_TIMEOUT}]") \
        if POD_RESCHEDULING_TIMEOUT in annotations else DEFAULT_POD_RESCHEDULING_TIMEOUT
    return FaultSettings(mode, pod == "on", retry_times, grace, timeout)
