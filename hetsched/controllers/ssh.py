"""The ``ssh`` job plugin (Volcano's): one SSH key pair per Job, so its pods can log in to each other
(MPI launchers, Horovod, DeepSpeed's pdsh) without baking keys into images.

Who calls it: ``controllers.job.JobController`` when a Job lists ``ssh`` in ``spec.plugins`` — before it
creates the job's pods (:func:`make_secret`, recorded under ``CONTROLLED``), for every pod it creates
(:func:`mount`) and when the Job is deleted (the Secret goes with it).

What it hands out, as Volcano does: a Secret ``<job>-ssh`` with ``id_rsa`` (an RSA-2048 private key,
OpenSSH format), ``id_rsa.pub``, ``authorized_keys`` (the same public key) and ``config`` (host-key
checking off, and a ``Host`` entry per pod naming ``<pod>.<job>``, the ``svc`` plugin's DNS names),
mounted read-only with mode 0600 at ``/root/.ssh`` in every container. Arguments:
``--ssh-key-file-path=PATH`` mounts elsewhere; others are refused with their name when the Job is
admitted (``api.objects.JobSpec``). The key is made once per
Job and kept across restarts (a restarted rank must still be trusted by the others).
"""

from __future__ import annotations

import base64
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from hetsched.api.objects import Job, Secret

DEFAULT_PATH = "/root/.ssh"
CONTROLLED = "plugin-ssh"
"""The Job's ``status.controlledResources`` key (Volcano's) recording that the controller made the Secret:
only then is it mounted and, with the Job, deleted. The controller never reads Secrets."""
KEY_BITS = 2048


def secret_name(job: Job) -> str:
    return f"{job.metadata.name}-ssh"


def key_path(job: Job) -> str:
    """The mount path from the plugin's arguments (checked when the Job was admitted)."""
    path = DEFAULT_PATH
    for argument in job.spec.plugins.get("ssh", []):
        name, _, value = argument.partition("=")
        if name == "--ssh-key-file-path":
            path = value
    return path


def _config(job: Job) -> str:
    lines = ["StrictHostKeyChecking no", "UserKnownHostsFile /dev/null", ""]
    for task in job.spec.tasks:
        for index in range(task.replicas):
            host = f"{job.metadata.name}-{task.name}-{index}"
            lines += [f"Host {host}", f"  HostName {host}.{job.metadata.name}", ""]
    return "\n".join(lines)


def make_secret(job: Job) -> Secret:
    """A new key pair for ``job`` as a Secret owned by it."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    files = {"id_rsa": private, "id_rsa.pub": public + b"\n", "authorized_keys": public + b"\n",
             "config": _config(job).encode()}
    return Secret.model_validate({
        "metadata": {"name": secret_name(job), "namespace": job.metadata.namespace,
                     "labels": {"volcano.sh/job-name": job.metadata.name},
                     "ownerReferences": [{"apiVersion": job.apiVersion, "kind": "Job", "name": job.metadata.name,
                                          "uid": job.metadata.uid, "controller": True}]},
        "data": {name: base64.b64encode(content).decode() for name, content in files.items()},
    })


def mount(job: Job, spec: dict[str, Any]) -> None:
    """Add the Secret's volume to a pod spec (as dumped JSON) and mount it in every container."""
    volume = f"{job.metadata.name}-ssh"
    spec["volumes"] = [*[v for v in spec.get("volumes", []) if v.get("name") != volume],
                       {"name": volume, "secret": {"secretName": secret_name(job), "defaultMode": 0o600}}]
    path = key_path(job)
    for container in spec["containers"]:
        mounts = [m for m in container.get("volumeMounts", []) if m.get("name") != volume]
        container["volumeMounts"] = [*mounts, {"name": volume, "mountPath": path, "readOnly": True}]
