"""The ``ray`` job plugin (Volcano's): a Ray cluster of a head and workers from one Job.

Who calls it: ``controllers.jobplugins`` — :func:`objects` before the first pods, :func:`on_pod` for every
pod of a Job listing ``ray`` (which turns on ``svc``). A Job with the plugin must have its head task
(refused at admission: Volcano's controller fails every pod of such a job).

What it does, as Volcano: the head task's container named ``--headContainer`` opens the GCS, dashboard
and client ports (``--port`` 6379, ``--dashboardPort`` 8265, ``--clientPort`` 10001) and runs
``ray start --head --block``; the worker task's container named ``--workerContainer`` runs
``ray start --block --address=<head>:<port>``; a Service ``<job>-head-svc`` publishes the head's three
ports.
"""

from __future__ import annotations

from typing import Any

from hetsched.api.job_plugins import Value
from hetsched.api.objects import Job, Service
from hetsched.controllers.jobplugins.draft import TASK_SPEC, Draft, domain_name, owned_meta, task_named
from hetsched.controllers.jobplugins.svc import selector


def service_name(job: Job) -> str:
    return f"{job.metadata.name}-head-svc"


def _ports(values: dict[str, Value]) -> list[tuple[str, int]]:
    return [("gcs", int(values["port"])), ("dashboard", int(values["dashboardPort"])),
            ("client-server", int(values["clientPort"]))]


def objects(job: Job, values: dict[str, Value], owner: dict[str, Any]) -> list[Any]:
    return [Service.model_validate({
        "metadata": owned_meta(job, service_name(job), owner),
        "spec": {"selector": {**selector(job), TASK_SPEC: str(values["head"])},
                 "ports": [{"name": name, "port": port, "targetPort": name, "protocol": "TCP"}
                           for name, port in _ports(values)]}})]


def on_pod(draft: Draft, values: dict[str, Value]) -> None:
    head = task_named(draft.job, str(values["head"]))
    if head is None:  # refused at admission
        return
    for container in draft.containers(init=False):
        if draft.task.name == head.name and container.get("name") == values["headContainer"]:
            for name, port in _ports(values):
                draft.open_port(container, name, port)
            container["command"] = ["sh", "-c", (
                f"ray start --head --block --dashboard-host=0.0.0.0 --port={values['port']} "
                f"--dashboard-port={values['dashboardPort']} --ray-client-server-port={values['clientPort']}")]
        elif draft.task.name == values["worker"] and container.get("name") == values["workerContainer"]:
            address = f"{domain_name(draft.job, head, 0)}:{values['port']}"
            container["command"] = ["sh", "-c", f"ray start --block --address={address}"]
