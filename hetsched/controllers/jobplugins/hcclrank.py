"""The ``hcclrank`` job plugin (Volcano's): each pod of an Ascend HCCL job carries its rank.

Who calls it: ``controllers.jobplugins.shape`` for every pod of a Job listing ``hcclrank``, after the
other plugins (so the ``RANK`` the ``pytorch`` plugin set is the one used).

What it does, as Volcano: the pod's annotation ``hccl/rankIndex`` is the ``RANK`` environment variable of
its first container that sets one; else, in the master task (``--master``) the pod's index, in the worker
task (``--worker``) the master's replicas plus its index. A template that sets the annotation keeps it.
"""

from __future__ import annotations

from hetsched.api.job_plugins import Value
from hetsched.controllers.jobplugins.draft import Draft, task_named

ANNOTATION = "hccl/rankIndex"


def on_pod(draft: Draft, values: dict[str, Value]) -> None:
    if draft.annotations.get(ANNOTATION):
        return
    for container in draft.containers(init=False):
        rank = next((e.get("value") for e in container.get("env", []) if e.get("name") == "RANK"), None)
        if rank:
            draft.annotations[ANNOTATION] = str(rank)
            return
    if draft.task.name == values["master"]:
        draft.annotations[ANNOTATION] = str(draft.index)
    elif draft.task.name == values["worker"]:
        master = task_named(draft.job, str(values["master"]))
        draft.annotations[ANNOTATION] = str((master.replicas if master is not None else 0) + draft.index)
