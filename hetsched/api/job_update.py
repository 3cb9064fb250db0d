"""What may change in a Job once it exists: Volcano's admission webhook allows only ``spec.minAvailable``
and each task's ``replicas`` (scaling); anything else must be a new Job.

Who calls it: the simulator (a workload file listing a Job a second time, with a later
``hetsched.io/submit-at``, updates it as ``kubectl apply`` would) and, with the Kubernetes issue, the
webhook. The job controller then raises ``JobUpdated``, resizes the PodGroup and creates or deletes pods.
"""

from __future__ import annotations

from typing import Any

from hetsched.api.job_plugins import effective
from hetsched.api.objects import Job

SCALABLE = ("minAvailable",)
TASK_SCALABLE = ("replicas", "minAvailable")


def update_problem(old: Job, new: Job) -> tuple[str, str] | None:
    """(field, message) for the first change the webhook would refuse, or None."""
    before: dict[str, Any] = old.spec.model_dump(mode="json")
    after: dict[str, Any] = new.spec.model_dump(mode="json")
    # the plugins as the webhook completes them: a manifest without the svc (ssh) plugin that pytorch (mpi)
    # turned on at creation, sent again whole (kubectl replace), changes nothing
    before["plugins"], after["plugins"] = effective(before["plugins"]), effective(after["plugins"])
    old_tasks, new_tasks = before.pop("tasks"), after.pop("tasks")
    for name in sorted(set(before) | set(after)):
        if name not in SCALABLE and before.get(name) != after.get(name):
            return f"spec.{name}", "may not change once the Job exists (only minAvailable and task replicas may)"
    if [t["name"] for t in old_tasks] != [t["name"] for t in new_tasks]:
        return "spec.tasks", "tasks may not be added, removed, renamed or reordered once the Job exists"
    for old_task, new_task in zip(old_tasks, new_tasks, strict=True):
        for name in sorted(set(old_task) | set(new_task)):
            if name not in TASK_SCALABLE and old_task.get(name) != new_task.get(name):
                return (f"spec.tasks[{new_task['name']}].{name}",
                        "may not change once the Job exists (only minAvailable and replicas may)")
    return None


def apply_update(current: Job, new: Job) -> Job:
    """``current`` with ``new``'s spec (the caller checked :func:`update_problem`), status kept."""
    return current.model_copy(update={"spec": new.spec})
