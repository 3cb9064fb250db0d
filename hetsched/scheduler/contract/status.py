"""Result values of a scheduling step: a :class:`Code` and the :class:`Status` carrying it with its reasons.

Who calls it: plugins (their verdicts), the engine (combining them, and the decisions' unschedulable jobs),
the cache (parked jobs) and ``explain``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from hetsched.scheduler.contract.reasons import Reason


class Code(enum.Enum):
    """Outcome of a scheduling step (the Kubernetes framework's codes)."""

    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"
    """Not now, maybe later: resources may free up or be preempted."""
    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
    """No node can ever take it as things stand (selector, affinity, taints, an impossible request)."""
    WAIT = "Wait"
    """Pipelined: waiting for resources that are being released."""
    PERMIT = "Permit"
    """Yes, and plugins of later tiers are not asked (Volcano's Permit vote, for ``job_enqueueable``: ``sla``
    once a job waited past its SLA; ``proportion``, ``capacity`` and ``overcommit`` when the job fits).
    ``SUCCESS`` there is Volcano's Abstain: no objection, the next tier decides."""


@dataclass(frozen=True)
class Status:
    """A result value: a code, the reasons (data; see ``scheduler.contract.reasons``) and the plugin or action that
    produced it."""

    code: Code
    reasons: tuple[Reason, ...] = ()
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS or self.code is Code.PERMIT

    @property
    def message(self) -> str:
        return "; ".join(map(str, self.reasons))
