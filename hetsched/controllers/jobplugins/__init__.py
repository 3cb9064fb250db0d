"""Volcano's job plugins as the job controller runs them: one module per plugin (``env``, ``svc``, ``ssh``,
``mpi``, ``pytorch``, ``tensorflow``, ``ray``, ``hcclrank``), each shaping the pods it is given and naming
the objects it needs before them.

Who calls it: ``controllers.job.JobController`` — :func:`configured` once per sync, :func:`shape` for every
pod it creates, :func:`objects` before the job's first pods (the Service, ConfigMap, NetworkPolicy the
plugins need; the ssh Secret is made by the controller itself, see ``jobplugins.ssh``).

The plugins run in one fixed order (Volcano walks a Go map: any order), ``hcclrank`` last so it reads the
``RANK`` that ``pytorch`` set. Which plugins run is ``api.job_plugins.effective``: ``svc`` comes with
``mpi``, ``pytorch``, ``tensorflow`` and ``ray``; ``ssh`` with ``mpi``. ``env`` always runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hetsched.api.job_plugins import Value, effective, parse
from hetsched.api.objects import Job
from hetsched.controllers.jobplugins import env, hcclrank, mpi, pytorch, ray, ssh, svc, tensorflow
from hetsched.controllers.jobplugins.draft import Draft

OnPod = Callable[[Draft, dict[str, Value]], None]
ORDER: tuple[tuple[str, OnPod], ...] = (
    ("env", env.on_pod), ("svc", svc.on_pod), ("ssh", ssh.on_pod), ("mpi", mpi.on_pod),
    ("pytorch", pytorch.on_pod), ("tensorflow", tensorflow.on_pod), ("ray", ray.on_pod),
    ("hcclrank", hcclrank.on_pod))
MAKERS = {"svc": svc.objects, "ray": ray.objects}
"""Plugins that need objects before the pods: recorded in the Job's ``status.controlledResources`` as
``plugin-<name>: <name>`` (Volcano's key) once made."""

Configured = list[tuple[str, dict[str, Value]]]


def configured(job: Job) -> Configured:
    """The plugins that run for ``job``, in order, with their arguments (checked at admission)."""
    plugins = effective(job.spec.plugins)
    return [(name, parse(name, plugins.get(name, []))) for name, _ in ORDER if name in plugins or name == "env"]


def shape(draft: Draft, plugins: Configured) -> None:
    steps = dict(ORDER)
    for name, values in plugins:
        steps[name](draft, values)


def objects(job: Job, plugins: Configured, owner: dict[str, Any]) -> dict[str, list[Any]]:
    """Per plugin, the objects it needs before the job's pods, owned by ``owner`` (the Job's reference)."""
    return {name: MAKERS[name](job, values, owner) for name, values in plugins if name in MAKERS}


def uses(job: Job, plugin: str) -> bool:
    return plugin in effective(job.spec.plugins)
