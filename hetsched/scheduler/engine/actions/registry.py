"""Action name → function run on a session. The one place actions are registered."""

from __future__ import annotations

from collections.abc import Callable

from hetsched.scheduler.engine.actions import allocate, backfill, enqueue, preempt, reclaim
from hetsched.scheduler.engine.conf import ACTIONS as NAMES
from hetsched.scheduler.engine.session import Session

ACTIONS: dict[str, Callable[[Session], None]] = {
    enqueue.NAME: enqueue.execute,
    allocate.NAME: allocate.execute,
    backfill.NAME: backfill.execute,
    preempt.NAME: preempt.execute,
    reclaim.NAME: reclaim.execute,
}
assert tuple(ACTIONS) == NAMES, "engine.conf.ACTIONS names exactly the registered actions, in this order"
