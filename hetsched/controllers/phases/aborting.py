"""Aborting and Completing: every pod is being deleted; once none is left, Aborted or Completed. An aborting
or aborted job resumes (a ``ResumeJob`` Command, counting a retry) into Restarting, or fails when its retry
budget is spent."""

from __future__ import annotations

from hetsched.controllers.lifecycle import Step, Sync, max_retry


def step(sync: Sync, action: str | None) -> Step:
    if action == "ResumeJob":
        job = sync.job
        if job.status.retryCount >= max_retry(job):
            return Step("Failed", kill="all", reason="MaxRetryExceeded",
                        message=f"ResumeJob after {job.status.retryCount} retries (maxRetry {max_retry(job)})")
        return Step("Restarting", retry=True, reason="ResumeJob")
    return Step("Aborting" if sync.pods else "Aborted")


def completing(sync: Sync, action: str | None) -> Step:
    return Step("Completing" if sync.pods else "Completed")
