"""The ``mpi`` job plugin (Volcano's): ``mpirun`` on the master finds the workers.

Who calls it: ``controllers.jobplugins.shape`` for every pod of a Job listing ``mpi``. Turning it on turns
on ``svc`` (the names) and ``ssh`` (the logins), and the master task waits for the workers unless it names
its own ``dependsOn`` (``api.job_plugins``, as Volcano's webhook).

What it does, as Volcano: the master task's containers (and init containers) get ``MPI_HOST``, the worker
task's DNS names comma-separated; every container of every pod opens ``--port`` (22, named
``mpijob-port``) unless it already does. Arguments: ``--master``, ``--worker`` (task names), ``--port``.
"""

from __future__ import annotations

from hetsched.api.job_plugins import Value
from hetsched.controllers.jobplugins.draft import Draft, task_hosts, task_named

ENV = "MPI_HOST"


def on_pod(draft: Draft, values: dict[str, Value]) -> None:
    if draft.task.name == values["master"]:
        worker = task_named(draft.job, str(values["worker"]))
        if worker is not None:
            draft.env(ENV, ",".join(task_hosts(draft.job, worker)))
    for container in draft.containers():
        draft.open_port(container, "mpijob-port", int(values["port"]))
