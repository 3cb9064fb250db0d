"""RFC 3339 times as the API server writes them → seconds, as hetsched's models hold them.

Who calls it: the Kubernetes adapter (``cluster.kubernetes``: every object read and written), the admission
webhook (``cluster.webhook``: the objects under review) and the manifest reader (``api.manifest``: a
``kubectl get -o yaml`` dump carries ``creationTimestamp`` and ``startTime`` as RFC 3339 strings, and
``hetsched validate`` reads such dumps as ``simulate --cluster`` does). Only the fields named in
``api.objects.TIME_KEYS`` are converted; a string that is not a time is left for the model to refuse,
naming the field. The other way, seconds → RFC 3339 (:func:`rfc3339`): the scheduler's extender plugin
(``scheduler.plugins.extender``: Volcano's payloads carry times).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Mapping
from typing import Any

from hetsched.api.objects import TIME_KEYS

_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(\.\d{1,9})?(Z|z|[+-]\d\d:\d\d)")


def to_epoch(value: Any) -> Any:
    """An RFC 3339 string as seconds since the epoch; anything else (a string that is not such a time
    included) unchanged. Parsed here, not with ``datetime``: the API layer reads no clock."""
    if not isinstance(value, str) or len(value) > 64:
        return value
    match = _RFC3339.fullmatch(value.strip())
    if match is None:
        return value
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1] and hour < 24 and minute < 60
            and second < 61):
        return value
    zone = match.group(8)
    offset = 0 if zone in ("Z", "z") else (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    fraction = float(match.group(7)) if match.group(7) else 0.0
    return calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) + fraction - offset


def convert_times(data: Any, convert: Callable[[Any], Any]) -> Any:
    """``data`` with every ``TIME_KEYS`` field passed through ``convert`` (a copy; ``data`` is not changed)."""
    if isinstance(data, dict):
        return {k: (convert(v) if k in TIME_KEYS else convert_times(v, convert)) for k, v in data.items()}
    if isinstance(data, list):
        return [convert_times(v, convert) for v in data]
    return data


def epoch_times(data: Mapping[str, Any]) -> dict[str, Any]:
    """An API object with its RFC 3339 timestamps as seconds (hetsched's models' form)."""
    return convert_times(dict(data), to_epoch)  # type: ignore[no-any-return]


def rfc3339(seconds: float) -> str:
    """Seconds since the epoch as Kubernetes writes a time (UTC, whole seconds)."""
    days, rest = divmod(int(seconds), 86_400)
    hours, rest = divmod(rest, 3600)
    year, month, day = _civil(days)
    return f"{year:04d}-{month:02d}-{day:02d}T{hours:02d}:{rest // 60:02d}:{rest % 60:02d}Z"


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day count since 1970-01-01 (proleptic Gregorian; the core reads no clock
    and imports no ``datetime``)."""
    days += 719_468
    era = days // 146_097
    day_of_era = days - era * 146_097
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    month_index = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * month_index + 2) // 5 + 1
    month = month_index + 3 if month_index < 10 else month_index - 9
    return year_of_era + era * 400 + (month <= 2), month, day
