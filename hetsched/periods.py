"""Budget periods: where the calendar month, week or day containing a moment starts and ends, in a time zone.

Who calls it: the QueueUsage model's checks (``api.objects.QueueUsageSpec``: is the period, window and time
zone valid) and the usage accountant (``controllers.usage``: which period a stretch of run time falls in, and
when the current one ends). Times are seconds since the epoch from the caller's clock; this module reads no
clock, and sits at the bottom of the package beside ``cron`` (it imports only ``durations``).

Periods: ``Month`` (the 1st, 00:00), ``Week`` (Monday 00:00, ISO weeks), ``Day`` (00:00), each in
``timeZone`` (an IANA name; UTC by default), so a month in Asia/Shanghai starts eight hours before the UTC
one; and ``Rolling``, a window of fixed length ending now (``window``: a Go duration such as ``720h``), which
has no start of its own and is accounted in whole days.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hetsched.durations import go_duration

PERIODS = ("Month", "Week", "Day", "Rolling")
DAY = 86400.0
MAX_WINDOW = 366 * DAY


class PeriodError(ValueError):
    """A period, window or time zone that cannot be used; the message says why."""


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise PeriodError(f"unknown time zone {name[:80]!r} (an IANA name such as \"Asia/Shanghai\")") from None


def window_seconds(period: str, window: str) -> float:
    """The rolling window's length (0 for calendar periods); a PeriodError when it is missing or bad."""
    if period not in PERIODS:
        raise PeriodError(f"period must be one of {', '.join(PERIODS)}, got {period[:40]!r}")
    if period != "Rolling":
        if window:
            raise PeriodError("window is for period Rolling only (a calendar period has its own length)")
        return 0.0
    try:
        seconds = go_duration(window) if window else 0.0
    except ValueError as exc:
        raise PeriodError(f"window {exc}") from None
    if not DAY <= seconds <= MAX_WINDOW or seconds % DAY:
        raise PeriodError(f"window must be whole days from 24h to 8784h (a Rolling period is kept in days), "
                          f"got {window[:40]!r}")
    return seconds


def start_of(moment: float, period: str, time_zone: str = "UTC") -> float:
    """The start of the calendar period (``Month``, ``Week``, ``Day``) containing ``moment``; for ``Rolling``
    the start of its day (in the zone), the unit a rolling window is kept in."""
    local = datetime.fromtimestamp(moment, zone(time_zone))
    day = local.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "Month":
        day = day.replace(day=1)
    elif period == "Week":
        day = day - timedelta(days=day.weekday())
    return _instant(day)


def next_start(start: float, period: str, time_zone: str = "UTC") -> float:
    """The start of the period after the one starting at ``start`` (days for ``Rolling``)."""
    local = datetime.fromtimestamp(start, zone(time_zone)).replace(tzinfo=None)
    if period == "Month":
        following = local.replace(year=local.year + local.month // 12, month=local.month % 12 + 1, day=1)
    elif period == "Week":
        following = local + timedelta(days=7)
    else:
        following = local + timedelta(days=1)
    return _instant(following.replace(tzinfo=zone(time_zone)))


def _instant(local: datetime) -> float:
    """Seconds since the epoch of a wall-clock time in its zone (the earlier one where clocks go back)."""
    aware = local if local.tzinfo is not None else local.replace(tzinfo=ZoneInfo("UTC"))
    return aware.replace(fold=0).timestamp()


def iso(moment: float) -> str:
    """A moment as an RFC 3339 UTC time (``2026-12-01T00:00:00Z``), for messages."""
    return datetime.fromtimestamp(moment, ZoneInfo("UTC")).strftime("%Y-%m-%dT%H:%M:%SZ")
