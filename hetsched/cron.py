"""Cron schedules of Volcano CronJobs: when a schedule is due, in a time zone, on an injected clock.

Who calls it: the manifest checks (``api.objects.CronJobSpec`` — is the schedule and the time zone valid)
— so it sits below the API layer and imports only ``durations`` of hetsched —
and the CronJob controller (``controllers.cronjob``: the last due time not yet run, the next one to wake
at). Times are seconds since the epoch from the caller's clock (simulated or real); this module reads no
clock. Date arithmetic is ``croniter``'s, time zones the IANA database's (``zoneinfo``, with ``tzdata`` where
the host has none).

Schedules are what Kubernetes' and Volcano's CronJobs take: five fields (minute, hour, day of month, month,
day of week), a descriptor (``@yearly``, ``@annually``, ``@monthly``, ``@weekly``, ``@daily``,
``@midnight``, ``@hourly``) or ``@every <duration>``. ``TZ=``/``CRON_TZ=`` inside the schedule is refused,
as Kubernetes refuses it: the time zone goes in ``spec.timeZone``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from hetsched.durations import go_duration

DESCRIPTORS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
               "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
MAX_LENGTH = 256


class ScheduleError(ValueError):
    """A schedule or time zone that cannot be used; the message says why."""


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule: a cron expression in a zone, or a fixed interval (``@every``)."""

    expression: str
    zone: str
    every: float = 0.0

    def next_after(self, moment: float) -> float:
        """The first due time strictly after ``moment``."""
        if self.every:
            return moment + self.every
        start = datetime.fromtimestamp(moment, ZoneInfo(self.zone))
        found: datetime = croniter(self.expression, start).get_next(datetime)
        return found.timestamp()

    def last_due(self, after: float, until: float, limit: int = 100) -> tuple[float | None, int]:
        """The latest due time in (``after``, ``until``] and how many fell there — counted up to ``limit`` + 1
        (Kubernetes warns about a CronJob that missed more than 100 starts and starts only the latest)."""
        last, count, moment = None, 0, after
        while count <= limit:
            due = self.next_after(moment)
            if due > until:
                return last, count
            last, count, moment = due, count + 1, due
        return self._latest(after, until), count

    def _latest(self, after: float, until: float) -> float:
        """The latest due time in (``after``, ``until``] (once more than ``limit`` were missed)."""
        if self.every:
            return after + ((until - after) // self.every) * self.every
        zone = ZoneInfo(self.zone)
        probe = croniter(self.expression, datetime.fromtimestamp(until, zone)).get_prev(datetime)
        found: float = probe.timestamp()
        return found if self.next_after(found) > until else self.next_after(found)


def parse(schedule: str, time_zone: str | None = None) -> Schedule:
    """The schedule, or :class:`ScheduleError` saying what is wrong with it or the zone."""
    text = " ".join(schedule.split())
    if not text or len(text) > MAX_LENGTH:
        raise ScheduleError(f"must be a cron schedule such as \"*/5 * * * *\", got {schedule[:80]!r}")
    if text.upper().startswith(("TZ=", "CRON_TZ=")):
        raise ScheduleError("a time zone in the schedule (TZ=, CRON_TZ=) is not allowed: give spec.timeZone")
    zone = time_zone or "UTC"
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"unknown time zone {zone[:80]!r} (an IANA name such as \"Asia/Shanghai\")") from None
    if text.startswith("@every "):
        try:
            every = go_duration(text[len("@every "):])
        except ValueError as exc:
            raise ScheduleError(f"@every {exc}") from None
        if every < 1:
            raise ScheduleError("@every must be at least 1s")
        return Schedule(text, zone, every)
    expression = DESCRIPTORS.get(text, text)
    if expression.startswith("@") or len(expression.split()) != 5 or not croniter.is_valid(expression):
        raise ScheduleError(f"must be five cron fields (minute hour day-of-month month day-of-week) or a "
                            f"descriptor such as @hourly, got {schedule[:80]!r}")
    return Schedule(expression, zone)
