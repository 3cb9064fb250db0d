"""Pending: the gang is not up yet. Moves to Running once minAvailable pods run or have finished; an action
from the policies (a pod failed or was evicted before the gang came up) is handled as in Running."""

from __future__ import annotations

from hetsched.controllers.lifecycle import Step, Sync
from hetsched.controllers.phases.running import act


def step(sync: Sync, action: str | None) -> Step:
    if action is not None:
        return act(sync, action)
    counts = sync.counts
    if sync.pods and counts["Running"] + counts["Succeeded"] + counts["Failed"] >= sync.job.spec.min_available:
        return Step("Running")
    return Step("Pending")
