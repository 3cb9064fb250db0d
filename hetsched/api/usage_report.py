"""Chargeback rows from QueueUsage objects: hours per queue (business line), namespace (team), period and
resource, with each current period's budget and what is left of it.

Who calls it: ``hetsched usage`` (``cli.usage``: from a cluster's QueueUsages or a simulation's results) and
the simulator's results (``sim.results``: the books at the end of the run, under ``usage``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hetsched import periods
from hetsched.api.objects import QueueUsage, UsagePeriod

COLUMNS = ("queue", "namespace", "periodStart", "periodEnd", "resource", "hours", "budget", "remaining")
"""One row per queue × namespace (``*``: the whole queue) × period × resource."""


def books(usage: QueueUsage) -> dict[str, Any]:
    """What a QueueUsage says, as plain data (the simulator's results keep it)."""
    return {"queue": usage.metadata.name, "spec": usage.spec.model_dump(mode="json"),
            "status": usage.status.model_dump(mode="json")}


def rows(usages: Iterable[QueueUsage], *, queue: str = "", period: str = "all") -> list[dict[str, Any]]:
    """Chargeback rows (``COLUMNS``) of the closed periods and the current one (``period``: ``all``,
    ``current``, or a period's start as ``YYYY-MM`` or ``YYYY-MM-DD`` in UTC), for one queue or all."""
    found: list[dict[str, Any]] = []
    for usage in sorted(usages, key=lambda u: u.metadata.name):
        if queue and usage.metadata.name != queue:
            continue
        status = usage.status
        closed = [(p, False) for p in status.history] if period != "current" else []
        opened = status.days[0].periodStart if usage.spec.period == "Rolling" and status.days else status.periodStart
        current = UsagePeriod(periodStart=opened or 0.0, periodEnd=status.periodEnd or 0.0,
                              used=status.used, byNamespace=status.byNamespace)  # a Rolling one: its window
        for item, is_current in [*closed, *([(current, True)] if status.periodStart is not None else [])]:
            start = periods.iso(item.periodStart)
            if period not in ("all", "current") and not start.startswith(period):
                continue
            for namespace, used in [("*", item.used), *sorted(item.byNamespace.items())]:
                for resource, hours in sorted(used.items()):
                    limit = usage.spec.budget.get(resource) if is_current and namespace == "*" else None
                    found.append({"queue": usage.metadata.name, "namespace": namespace, "periodStart": start,
                                  "periodEnd": periods.iso(item.periodEnd), "resource": resource,
                                  "hours": round(hours, 6), "budget": limit,
                                  "remaining": round(max(limit - hours, 0.0), 6) if limit is not None else None})
    return found
