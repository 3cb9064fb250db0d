"""Action name → function run on a session. The one place actions are registered."""

from __future__ import annotations

from collections.abc import Callable

from hetsched.scheduler.actions import allocate, backfill, enqueue, preempt, reclaim
from hetsched.scheduler.session import Session

ACTIONS: dict[str, Callable[[Session], None]] = {
    enqueue.NAME: enqueue.execute,
    allocate.NAME: allocate.execute,
    backfill.NAME: backfill.execute,
    preempt.NAME: preempt.execute,
    reclaim.NAME: reclaim.execute,
}
