"""Running: the gang is up. Policies' actions move the job (restart, abort, complete, terminate); once
every pod finished, Completed if enough succeeded (``minSuccess``, else minAvailable), else Failed."""

from __future__ import annotations

from hetsched.controllers.lifecycle import Step, Sync, max_retry


def act(sync: Sync, action: str) -> Step:
    """The transition an action causes from Pending or Running (Volcano's ``pendingState``/``runningState``)."""
    job = sync.job
    if action in ("RestartJob", "RestartTask", "RestartPod"):
        if job.status.retryCount >= max_retry(job):
            return Step("Failed", kill="all", reason="MaxRetryExceeded",
                        message=f"{action} after {job.status.retryCount} retries (maxRetry {max_retry(job)})")
        trigger = sync.trigger
        kill = "all"
        if action == "RestartTask" and trigger is not None and trigger.task:
            kill = f"task:{trigger.task}"
        elif action == "RestartPod" and trigger is not None and trigger.pod:
            kill = f"pod:{trigger.pod}"
        return Step("Restarting", kill=kill, retry=True, reason=action)
    if action == "AbortJob":
        return Step("Aborting", kill="all", reason="AbortJob")
    if action == "CompleteJob":
        return Step("Completing", kill="all", reason="CompleteJob")
    if action == "TerminateJob":
        return Step("Terminating", kill="all", reason="TerminateJob")
    return Step(job.status.state.phase)


def step(sync: Sync, action: str | None) -> Step:
    if action is not None:
        return act(sync, action)
    counts = sync.counts
    spec = sync.job.spec
    if counts["Succeeded"] + counts["Failed"] == spec.total_replicas and sync.pods == spec.total_replicas:
        needed = spec.minSuccess or spec.min_available
        if counts["Succeeded"] >= needed:
            return Step("Completed")
        return Step("Failed", reason="PodFailed",
                     message=f"{counts['Succeeded']} of {spec.total_replicas} pods succeeded, {needed} needed")
    if spec.minSuccess and counts["Succeeded"] >= spec.minSuccess:
        return Step("Completed", kill="all")
    return Step("Running")
