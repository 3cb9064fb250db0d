"""``cdp``: cooldown protection — a pod is no victim for a while after it starts (Volcano's cdp plugin).

Who calls it: the session, for ``evictable`` (asked by ``preempt`` and ``reclaim`` for every candidate).

A pod that says ``volcano.sh/cooldown-time`` (a Go duration: label, else annotation; a Job's annotation
reaches its pods) and is Running may not be evicted until that long after it was scheduled (its
``PodScheduled`` condition), so an elastic or preemptable job that just started is not torn down before it
did any work. Pods without it, and pods not yet Running, are not protected by this plugin.

Arguments: none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetsched.scheduler.contract.framework import Arguments, Evictable, Plugin
from hetsched.scheduler.contract.snapshot import RunningPod

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "cdp"


class CooldownProtection(Plugin, Evictable):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known(set())
        self._now = 0.0

    def on_session_open(self, session: SessionView) -> None:
        self._now = session.now

    def evictable(self, victim: RunningPod) -> bool:
        if victim.cooldown is None or victim.running_since is None:
            return True
        return victim.running_since + victim.cooldown <= self._now
