"""What one session did for one job: the engine's own per-attempt record, never part of the snapshot.

Who calls it: the session keeps one :class:`Attempt` per job it touched (``Session.attempt``); statements
record the pods they place in it, placement and the actions record why a job did not fit, and the session
answers the plugins' questions about it (``SessionView.occupied`` …). The snapshot's ``JobInfo`` stays what
the cache built: a job's pods, counts and queue, read the same way by every plugin.

Invariant: ``allocated``, ``placed``, ``by_task`` and ``pipelined_pods`` change only through a statement
(allocate adds, discard subtracts), so a discarded statement leaves the attempt as it found it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetsched.scheduler.contract.arrays import IntArray
from hetsched.scheduler.contract.reasons import Reason


@dataclass
class Attempt:
    allocated: int = 0
    """Pods placed this session (not pipelined), bound when their statement commits."""
    placed: list[IntArray] = field(default_factory=list)
    """Node rows of those pods, one array per placement (the HyperNode they hold)."""
    by_task: dict[str, int] = field(default_factory=dict)
    pipelined_pods: int = 0
    """Pods reserved on resources being released (Volcano's pipelined tasks)."""
    failure: Reason | None = None
    """Why the job could not be placed this cycle (the gang plugin's condition says it)."""
    unresolvable: bool = False
    pipelined: bool = False
    """The gang holds a reservation on resources being released (Volcano's pipelined state)."""
    best_effort_counts: bool = True
    """Whether pending best-effort pods count toward the gang (False while ``backfill`` places them)."""
    short: int | None = None
    """Pods the gang lacked at its last attempt this cycle (None when not attempted)."""
    set_aside: bool = False
    """Handling this job raised in an earlier attempt (``engine.runner``'s fault isolation): no action
    places, admits or evicts for it until its back-off ends."""
    deferred: bool = False
    """The cycle's time budget ran out before ``allocate`` came to this job (or before it could lend to it):
    no later action touches it and it gets no status this cycle; the next cycle, run at once, takes it
    (``Session.out_of_time``)."""


@dataclass(frozen=True)
class Outcome:
    """What a placement attempt says about its job (why it failed, whether resolvable, how many pods short,
    pipelined): a dry run puts it back as it was."""

    failure: Reason | None
    unresolvable: bool
    short: int | None
    pipelined: bool

    @classmethod
    def of(cls, attempt: Attempt) -> Outcome:
        return cls(attempt.failure, attempt.unresolvable, attempt.short, attempt.pipelined)

    def restore(self, attempt: Attempt) -> None:
        attempt.failure, attempt.unresolvable = self.failure, self.unresolvable
        attempt.short, attempt.pipelined = self.short, self.pipelined
