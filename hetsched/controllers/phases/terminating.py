"""Terminating: every pod is being deleted; once none is left, Terminated."""

from __future__ import annotations

from hetsched.controllers.lifecycle import Step, Sync


def step(sync: Sync, action: str | None) -> Step:
    return Step("Terminating" if sync.pods else "Terminated")
