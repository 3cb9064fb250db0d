"""What one scheduling cycle decided: the only output of the scheduling core.

Who calls it: the session fills it; the runner (``scheduler.engine.runner``) applies it through the ports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetsched.api.objects import Condition
from hetsched.scheduler.contract.status import Status


@dataclass(frozen=True, slots=True)
class Bind:
    pod: str
    node: str
    job: str
    annotations: dict[str, str] | None = None
    """Written on the pod with the binding: the device hand-off (chosen chips) when devices are involved."""


@dataclass(frozen=True, slots=True)
class Eviction:
    pod: str
    job: str
    action: str
    """``preempt`` or ``reclaim``."""
    reason: str
    preemptor: str
    """The job the pod makes room for."""


@dataclass(frozen=True, slots=True)
class PodGroupUpdate:
    phase: str | None
    conditions: list[Condition] | None


@dataclass
class Decisions:
    binds: list[Bind] = field(default_factory=list)
    nominations: list[Bind] = field(default_factory=list)
    """Pipelined pods: placed on resources still being released; nominated, not bound."""
    podgroups: dict[str, PodGroupUpdate] = field(default_factory=dict)
    unschedulable: dict[str, Status] = field(default_factory=dict)
    """Job key → why it (or part of it) could not be placed this cycle."""
    shortfalls: dict[str, int | None] = field(default_factory=dict)
    """Job key (of each unschedulable job) → how many pods its gang lacked at its last attempt (None: not
    attempted); the cache parks a job with it (``cache.parked``)."""
    enqueued: list[str] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    """Applied before the binds: a preemptor's pods bind in the same cycle, after its victims are gone."""
    deferred: list[str] = field(default_factory=list)
    """Jobs the cycle's time budget left for the next cycle, which the caller runs at once."""
