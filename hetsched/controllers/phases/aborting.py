"""Aborting and Completing: every pod is being deleted; once none is left, Aborted or Completed. An aborted
job resumes (``ResumeJob``, counting a retry) into Restarting."""

from __future__ import annotations

from hetsched.controllers.lifecycle import Step, Sync


def step(sync: Sync, action: str | None) -> Step:
    if action == "ResumeJob":
        return Step("Restarting", retry=True, reason="ResumeJob")
    return Step("Aborting" if sync.pods else "Aborted")


def completing(sync: Sync, action: str | None) -> Step:
    return Step("Completing" if sync.pods else "Completed")
