"""What every job plugin works on: the pod being made (as JSON, before it is validated and created) and the
names that Volcano's plugins give a job's pods.

Who calls it: the plugin modules of ``controllers.jobplugins`` and the job controller, which builds one
:class:`Draft` per pod it creates.

Invariant: a plugin only adds to a draft or replaces what it owns (an env variable or a port of its name);
the template's own entries stay unless the plugin's name for them is the same (then the plugin's wins, as
the later entry wins in the kubelet).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hetsched.api.objects import Job, TaskSpec

JOB_NAME = "volcano.sh/job-name"
JOB_NAMESPACE = "volcano.sh/job-namespace"
TASK_SPEC = "volcano.sh/task-spec"


def pod_name(job: str, task: str, index: int) -> str:
    return f"{job}-{task}-{index}"


def _template_spec(task: TaskSpec) -> dict[str, Any]:
    return task.template.spec.model_extra or {}


def domain_name(job: Job, task: TaskSpec, index: int) -> str:
    """A pod's DNS name under the job's headless Service: ``<hostname>.<subdomain>`` from the template, else
    ``<job>-<task>-<index>.<job>`` (Volcano's ``MakeDomainName``)."""
    extra = _template_spec(task)
    host = str(extra.get("hostname") or pod_name(job.metadata.name, task.name, index))
    return f"{host}.{extra.get('subdomain') or job.metadata.name}"


def task_hosts(job: Job, task: TaskSpec) -> list[str]:
    """The task's pods' DNS names; one when its template names a hostname (all its pods share it), as
    Volcano's ``svc`` host lists."""
    if _template_spec(task).get("hostname"):
        return [domain_name(job, task, 0)] if task.replicas else []
    return [domain_name(job, task, i) for i in range(task.replicas)]


def owned_meta(job: Job, name: str, owner: dict[str, Any]) -> dict[str, Any]:
    """Metadata of an object a plugin makes for ``job``: in its namespace, labelled with it, owned by it."""
    return {"name": name, "namespace": job.metadata.namespace, "labels": {JOB_NAME: job.metadata.name},
            "ownerReferences": [owner]}


def task_named(job: Job, name: str) -> TaskSpec | None:
    return next((t for t in job.spec.tasks if t.name == name), None)


@dataclass
class Draft:
    """One pod of ``job``'s ``task`` at ``index`` while plugins shape it: ``spec`` and ``annotations`` are
    the JSON that becomes the pod."""

    job: Job
    task: TaskSpec
    index: int
    spec: dict[str, Any]
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return pod_name(self.job.metadata.name, self.task.name, self.index)

    def containers(self, init: bool = True) -> list[dict[str, Any]]:
        """The containers, then (``init``) the init containers."""
        found = list(self.spec.get("containers", []))
        return found + list(self.spec.get("initContainers", [])) if init else found

    def env(self, name: str, value: str | None = None, value_from: dict[str, Any] | None = None,
            init: bool = True) -> None:
        """Set ``name`` in every container (and ``init`` container), replacing an entry of that name."""
        entry: dict[str, Any] = {"name": name, "value": value} if value_from is None else {
            "name": name, "valueFrom": value_from}
        for container in self.containers(init):
            container["env"] = [e for e in container.get("env", []) if e.get("name") != name] + [entry]

    def open_port(self, container: dict[str, Any], name: str, port: int) -> None:
        """Add ``containerPort: port`` named ``name`` unless the container already opens that port."""
        ports = container.setdefault("ports", [])
        if not any(p.get("containerPort") == port for p in ports):
            ports.append({"name": name, "containerPort": port, "protocol": "TCP"})

    def mount(self, volume: dict[str, Any], mount: dict[str, Any]) -> None:
        """Add ``volume`` (replacing one of its name) and mount it in every container and init container."""
        self.spec["volumes"] = [*[v for v in self.spec.get("volumes", []) if v.get("name") != volume["name"]],
                                volume]
        for container in self.containers():
            mounts = [m for m in container.get("volumeMounts", []) if m.get("name") != mount["name"]]
            container["volumeMounts"] = [*mounts, mount]
