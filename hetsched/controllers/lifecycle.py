"""Volcano Job lifecycle: the events a sync observes, the policies that map them to actions, and what a
phase decides. Shared by the job controller and the phase modules (``controllers.phases``).

Who calls it: ``controllers.job.JobController.sync`` builds a :class:`Sync` from the store, asks
:func:`decide` which action the observed events call for (and which a policy's timeout holds back), and
hands both to the current phase's module, which returns the :class:`Step` to take.

Events (Volcano's ``bus/v1alpha1`` names): ``PodFailed`` (a pod failed; carries its first container's exit
code, which ``exitCode`` policies match), ``PodEvicted`` (a pod was deleted by someone other than this
controller: preemption, reclaim, a drain, a fault), ``Unknown`` (a pod's phase is Unknown),
``TaskCompleted`` (every pod of a task succeeded), ``TaskFailed`` (a task's pods restarted their containers
in place more than the task's ``maxRetry``, default 3), ``PodPending`` (a pod still pending when its
policy's ``timeout`` ran out — without a timeout such a policy never fires, as in Volcano), ``JobUpdated``
(the Job's spec changed: replicas or minAvailable), ``*`` (any non-internal event). ``PodRunning``,
``OutOfSync`` and ``CommandIssued`` are internal: no policy fires on them; a Command's action applies
directly. Events from pods of an older job version (before the last restart) fire nothing.

Policies: task-level first, then job-level; the first whose event (or exit code) matches wins. A policy's
``timeout`` delays its action; the delayed action is dropped if the job restarted meanwhile, or (for
``PodPending``) the pod is no longer pending. Without a matching policy nothing special happens: a failed
pod stays failed, an evicted pod is created again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetsched.api.objects import Job, LifecyclePolicy  # event and action names: api.objects.JobEvent/JobAction

ACTION_ORDER = {"TerminateJob": 0, "AbortJob": 1, "CompleteJob": 2, "RestartJob": 3, "RestartTask": 4,
                "RestartPod": 5, "ResumeJob": 6, "SyncJob": 7}
"""When several events call for different actions in one sync, the strongest wins."""
FINISHED = ("Completed", "Failed", "Aborted", "Terminated")


INTERNAL_EVENTS = frozenset({"PodRunning", "OutOfSync", "CommandIssued"})
"""Events no policy fires on (Volcano's ``isInternalEvent``)."""


@dataclass(frozen=True)
class Event:
    name: str
    task: str = ""
    pod: str = ""
    exit_code: int | None = None
    version: int | None = None
    """The job version (``volcano.sh/job-version``) of the pod it is about; None: the job's current one."""
    uid: str = ""
    """The pod's uid (a delayed PodPending checks the same pod is still pending)."""
    action: str = ""
    """Set for a Command (CommandIssued) or a delayed action that came due: applied without policies."""


@dataclass(frozen=True)
class Delayed:
    """An action a policy's ``timeout`` holds back until ``due``, for the job version it was raised in."""

    due: float
    action: str
    event: Event
    version: int


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
    if event.name == "PodPending" and policy.timeout is None:
        return False  # a pending pod is not a fault by itself: only "still pending after <timeout>" is
    return "*" in names or event.name in names


def decide(job: Job, events: list[Event], now: float) -> tuple[tuple[str, Event] | None, list[Delayed]]:
    """The action the events call for now (the strongest; task-level policies before job-level), and the
    actions held back by a policy's timeout."""
    tasks = {t.name: t for t in job.spec.tasks}
    version = job.status.retryCount
    found: list[tuple[str, Event]] = []
    delayed: list[Delayed] = []
    for event in events:
        if event.action:
            found.append((event.action, event))
            continue
        if event.name in INTERNAL_EVENTS or (event.version is not None and event.version < version):
            continue
        task = tasks.get(event.task)
        for policy in [*(task.policies if task else []), *job.spec.policies]:
            if _matches(policy, event):
                wait = policy.timeout_seconds
                if wait:
                    delayed.append(Delayed(now + wait, policy.action, event, version))
                else:
                    found.append((policy.action, event))
                break
    if not found:
        return None, delayed
    return min(found, key=lambda f: ACTION_ORDER.get(f[0], len(ACTION_ORDER))), delayed


def max_retry(job: Job) -> int:
    return job.spec.maxRetry
