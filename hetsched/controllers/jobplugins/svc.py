"""The ``svc`` job plugin (Volcano's): a job's pods find each other by name.

Who calls it: ``controllers.jobplugins`` — :func:`objects` before the job's first pods (the job controller
creates them, owned by the Job), :func:`on_pod` for every pod, :func:`hosts` again when the Job is scaled.

What it makes, as Volcano does:
- a headless Service ``<job>`` selecting the job's pods (``--publish-not-ready-addresses`` to list pods
  before they are ready), so ``<pod>.<job>`` resolves to each pod;
- a ConfigMap ``<job>-svc`` holding each task's host list: ``<task>.host`` (one name per line, the file
  ``/etc/volcano/<task>.host`` in every container), ``VC_<TASK>_HOSTS`` (comma-separated) and
  ``VC_<TASK>_NUM`` — the last two handed to every container as environment variables read from the
  ConfigMap (``--inject-hosts-env=false`` leaves them out); a task's name has ``-`` written ``_``;
- a NetworkPolicy ``<job>`` admitting traffic to the job's pods from the job's pods only
  (``--disable-network-policy`` leaves it out);
- every pod gets ``hostname: <pod>`` and ``subdomain: <job>`` unless its template names them.
"""

from __future__ import annotations

from typing import Any

from hetsched.api.job_plugins import Value
from hetsched.api.objects import ConfigMap, Job, NetworkPolicy, Service
from hetsched.controllers.jobplugins.draft import JOB_NAME, JOB_NAMESPACE, Draft, owned_meta, task_hosts

MOUNT_PATH = "/etc/volcano"


def configmap_name(job: Job) -> str:
    return f"{job.metadata.name}-svc"


def _key(task: str) -> str:
    return task.replace("-", "_")


def hosts(job: Job) -> dict[str, str]:
    """The ConfigMap's data (Volcano's ``GenerateHosts``)."""
    data: dict[str, str] = {}
    for task in job.spec.tasks:
        names = task_hosts(job, task)
        key = _key(task.name)
        data[f"{key}.host"] = "\n".join(names)
        data[f"VC_{key.upper()}_HOSTS"] = ",".join(names)
        data[f"VC_{key.upper()}_NUM"] = str(len(names))
    return data


def selector(job: Job) -> dict[str, str]:
    return {JOB_NAME: job.metadata.name, JOB_NAMESPACE: job.metadata.namespace or "default"}


def hosts_configmap(job: Job, owner: dict[str, Any]) -> ConfigMap:
    """The ConfigMap ``<job>-svc`` with the host lists (made again when the Job is scaled)."""
    return ConfigMap.model_validate({"metadata": owned_meta(job, configmap_name(job), owner), "data": hosts(job)})


def objects(job: Job, values: dict[str, Value], owner: dict[str, Any]) -> list[Any]:
    """The ConfigMap, the headless Service and (unless disabled) the NetworkPolicy, owned by ``owner``."""
    made: list[Any] = [
        hosts_configmap(job, owner),
        Service.model_validate({"metadata": owned_meta(job, job.metadata.name, owner), "spec": {
            "clusterIP": "None", "selector": selector(job),
            "publishNotReadyAddresses": bool(values["publish-not-ready-addresses"])}}),
    ]
    if not values["disable-network-policy"]:
        made.append(NetworkPolicy.model_validate({"metadata": owned_meta(job, job.metadata.name, owner), "spec": {
            "podSelector": {"matchLabels": selector(job)},
            "ingress": [{"from": [{"podSelector": {"matchLabels": selector(job)}}]}],
            "policyTypes": ["Ingress"]}}))
    return made


def on_pod(draft: Draft, values: dict[str, Value]) -> None:
    draft.spec["hostname"] = draft.spec.get("hostname") or draft.name
    draft.spec["subdomain"] = draft.spec.get("subdomain") or draft.job.metadata.name
    name = configmap_name(draft.job)
    if values["inject-hosts-env"]:
        for task in draft.job.spec.tasks:
            key = _key(task.name).upper()
            for variable in (f"VC_{key}_HOSTS", f"VC_{key}_NUM"):
                draft.env(variable, value_from={"configMapKeyRef": {"name": name, "key": variable}})
    draft.mount({"name": name, "configMap": {"name": name}}, {"name": name, "mountPath": MOUNT_PATH})
