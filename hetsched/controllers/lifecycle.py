"""Volcano Job lifecycle: the events a sync observes, the policies that map them to actions, and what a
phase decides. Shared by the job controller and the phase modules (``controllers.phases``).

Who calls it: ``controllers.job.JobController.sync`` builds a :class:`Sync` from the store, asks
:func:`action_for` which action the observed events call for, and hands both to the current phase's module,
which returns the :class:`Step` to take.

Events: ``PodFailed`` (a pod of the job failed), ``PodEvicted`` (a pod was deleted by someone other than
this controller: preemption, reclaim, a drain), ``TaskCompleted`` (every pod of a task succeeded),
``Unknown`` (a pod's phase is Unknown), ``JobUpdated``/``CommandIssued`` (reserved: the webhook and the
CLI will raise them), ``*`` (any). Policies: task-level first, then job-level; the first whose event matches
wins. Without a matching policy nothing special happens: a failed pod stays failed, an evicted pod is
created again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetsched.api.objects import Job, LifecyclePolicy  # event and action names: api.objects.JobEvent/JobAction

ACTION_ORDER = {"TerminateJob": 0, "AbortJob": 1, "CompleteJob": 2, "RestartJob": 3, "RestartTask": 4,
                "RestartPod": 5, "ResumeJob": 6, "SyncJob": 7}
"""When several events call for different actions in one sync, the strongest wins."""
FINISHED = ("Completed", "Failed", "Aborted", "Terminated")


@dataclass(frozen=True)
class Event:
    name: str
    task: str = ""
    pod: str = ""
    exit_code: int | None = None


@dataclass
class Sync:
    """What one sync of one job observed."""

    job: Job
    counts: dict[str, int]
    """Pods by phase (Pending, Running, Succeeded, Failed, Unknown)."""
    pods: int
    """Pods that exist (any phase)."""
    events: list[Event] = field(default_factory=list)
    trigger: Event | None = None
    """The event whose policy chose the action (names the task or pod a restart is about)."""


@dataclass
class Step:
    """What a phase decides: the next phase, which pods to delete, whether to count a retry, and why."""

    phase: str
    kill: str = ""
    """"" (none), "all", or "task:<name>" / "pod:<name>"."""
    retry: bool = False
    reason: str = ""
    message: str = ""


def _matches(policy: LifecyclePolicy, event: Event) -> bool:
    if policy.exitCode is not None:
        return event.name == "PodFailed" and event.exit_code == policy.exitCode
    names = [policy.event] if policy.event else list(policy.events)
    return "*" in names or event.name in names


def action_for(job: Job, events: list[Event]) -> tuple[str, Event] | None:
    """The action the policies call for (task-level before job-level), strongest first; None if none."""
    tasks = {t.name: t for t in job.spec.tasks}
    found: list[tuple[str, Event]] = []
    for event in events:
        task = tasks.get(event.task)
        for policy in [*(task.policies if task else []), *job.spec.policies]:
            if _matches(policy, event):
                found.append((policy.action, event))
                break
    if not found:
        return None
    return min(found, key=lambda f: ACTION_ORDER.get(f[0], len(ACTION_ORDER)))


def max_retry(job: Job) -> int:
    return job.spec.maxRetry
