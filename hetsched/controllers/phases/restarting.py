"""Restarting: the pods to restart are being deleted. Once they are gone (no pod of the job left for a
job restart), back to Pending: the controller creates the pods again (with the next job version).

The deletion is asked for again on every sync while pods remain (deleting a pod already going is a no-op):
the controller that began the restart may have died before its deletes were sent, and the next one
knows only what the Job's status says."""

from __future__ import annotations

from hetsched.controllers.lifecycle import Step, Sync


def step(sync: Sync, action: str | None) -> Step:
    if sync.job.status.state.reason in ("RestartJob", "ResumeJob") and sync.pods:
        return Step("Restarting", kill="all")
    return Step("Pending")
