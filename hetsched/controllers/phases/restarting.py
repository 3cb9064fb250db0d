"""Restarting: the pods to restart are being deleted. Once they are gone (no pod of the job left for a
job restart), back to Pending: the controller creates the pods again (with the next job version)."""

from __future__ import annotations

from hetsched.controllers.lifecycle import Step, Sync


def step(sync: Sync, action: str | None) -> Step:
    if sync.job.status.state.reason in ("RestartJob", "ResumeJob") and sync.pods:
        return Step("Restarting")
    return Step("Pending")
