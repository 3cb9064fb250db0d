"""One module per Volcano Job phase (Volcano's ``pkg/controllers/job/state``): each answers, for a job in
that phase, given what a sync observed and the action its policies call for, which :class:`Step` to take.

Who calls it: ``controllers.job.JobController`` through :data:`PHASES`. The state machine is drawn in
docs/jobs.md.
"""

from __future__ import annotations

from collections.abc import Callable

from hetsched.controllers.lifecycle import Step, Sync
from hetsched.controllers.phases import aborting, pending, restarting, running, terminating

Handler = Callable[[Sync, str | None], Step]

PHASES: dict[str, Handler] = {
    "Pending": pending.step,
    "Running": running.step,
    "Restarting": restarting.step,
    "Aborting": aborting.step,
    "Aborted": aborting.step,  # only reached with a ResumeJob command
    "Completing": aborting.completing,
    "Terminating": terminating.step,
}
"""Phase → its handler. Finished phases (Completed, Failed, Terminated) have none: nothing moves them; Aborted
moves only on ResumeJob."""
