"""Go durations (``time.ParseDuration``) as Volcano's annotations, arguments and schedules write them.

Who calls it: ``api.annotations`` (annotation and argument values), ``cron`` (``@every <duration>``
schedules). The bottom of the package: it imports nothing of hetsched.
"""

from __future__ import annotations

import re

MAX_SECONDS = 365 * 24 * 3600.0
"""A year: beyond it a simulation would never end, and a timeout, a cooldown or an interval is a typo."""

_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(raw: str) -> float:
    """Seconds in a Go duration, as Volcano's annotations and arguments are read (``time.ParseDuration``:
    ``"1h2m3s4ms5us6ns"``, ``"90s"``, ``"600s"``; a bare ``"0"``), from 0 to a year; ValueError otherwise."""
    text = raw.strip()
    position, total = 0, 0.0
    if text != "0" and len(text) <= 64:
        for match in _GO_PART.finditer(text):
            if match.start() != position:
                break
            total += float(match.group(1)) * _GO_UNITS[match.group(2)]
            position = match.end()
    if text != "0" and (not text or position != len(text)):
        raise ValueError(f"must be a duration such as \"90s\", \"10m\" or \"1h30m\", got {raw[:80]!r}")
    if total > MAX_SECONDS:
        raise ValueError(f"must be at most a year, got {raw[:80]!r}")
    return total
