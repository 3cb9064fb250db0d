"""The one parser of seconds-valued labels and annotations.

Who calls it: the simulation annotations (``api.workload_annotations``: submit-at, duration,
checkpoint-interval; read again by the simulated kubelet), the fault-rescheduling label and annotation
(``api.fault_labels``: ``grace-over-time``, ``hetsched.io/pod-rescheduling-timeout``). One rule everywhere:
a finite number of seconds from 0 to a year, else a ValueError saying so with the value (cut to 80
characters: annotations may be huge).
"""

from __future__ import annotations

import math

from hetsched.durations import MAX_SECONDS, go_duration

__all__ = ["MAX_SECONDS", "go_duration", "seconds"]


def seconds(raw: str) -> float:
    """The value of a seconds label or annotation; ValueError saying what is wrong."""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or value > MAX_SECONDS:
        raise ValueError(f"must be a number of seconds from 0 to {MAX_SECONDS:,.0f}, got {raw[:80]!r}")
    return value

