"""The ``tensorflow`` job plugin (Volcano's): ``TF_CONFIG`` for TensorFlow's distribution strategies.

Who calls it: ``controllers.jobplugins.shape`` for every pod of a Job listing ``tensorflow`` (which turns
on ``svc``).

What every container gets, as Volcano: ``TF_CONFIG`` = ``{"cluster": {"ps": [...], "worker": [...],
"chief": [...], "evaluator": [...]}, "task": {"type": ..., "index": i}}`` — each role's pods as
``<dns name>:<port>`` (``--port``, 2222), roles without a task left out; the roles' task names are
``--ps``, ``--worker``, ``--chief``, ``--evaluator``; a pod of another task has its task's name as its type.
A job of one task with one pod gets nothing (it is not distributed).
"""

from __future__ import annotations

import json

from hetsched.api.job_plugins import Value
from hetsched.controllers.jobplugins.draft import Draft, domain_name

ROLES = ("ps", "worker", "chief", "evaluator")
TYPE_ORDER = ("chief", "worker", "ps", "evaluator")
"""The order a pod's own type is looked up in (Volcano's), when one task name is given to two roles."""


def config(draft: Draft, values: dict[str, Value]) -> str:
    port = int(values["port"])
    found: dict[str, list[str]] = {}
    for task in draft.job.spec.tasks:  # a task takes the first role named by it (Volcano's switch)
        role = next((r for r in ROLES if values[r] == task.name), None)
        if role is not None and task.replicas:
            found[role] = [f"{domain_name(draft.job, task, i)}:{port}" for i in range(task.replicas)]
    cluster = {role: found[role] for role in ROLES if role in found}
    kind = next((role for role in TYPE_ORDER if values[role] == draft.task.name), draft.task.name)
    return json.dumps({"cluster": cluster, "task": {"type": kind, "index": draft.index}}, separators=(",", ":"))


def on_pod(draft: Draft, values: dict[str, Value]) -> None:
    tasks = draft.job.spec.tasks
    if len(tasks) == 1 and tasks[0].replicas == 1:
        return
    draft.env("TF_CONFIG", config(draft, values), init=False)
