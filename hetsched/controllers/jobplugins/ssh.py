"""The ``ssh`` job plugin (Volcano's): one SSH key pair per Job, so its pods can log in to each other
(MPI launchers, Horovod, DeepSpeed's pdsh) without baking keys into images.

Who calls it: ``controllers.job.JobController`` when a Job lists ``ssh`` in ``spec.plugins`` (or ``mpi``,
which turns it on) — before it creates the job's pods (:func:`make_secret`, recorded under
``CONTROLLED``), for every pod it creates (:func:`on_pod`, through ``controllers.jobplugins``) and when the
Job is deleted (the Secret goes with it).

What it hands out, as Volcano does: a Secret ``<job>-ssh`` with ``id_rsa`` (an RSA-2048 private key,
OpenSSH format), ``id_rsa.pub``, ``authorized_keys`` (the same public key) and ``config`` (host-key
checking off, and a ``Host`` entry per pod naming ``<pod>.<job>``, the ``svc`` plugin's DNS names, and
``--ssh-port``), mounted read-only with mode 0600 at ``/root/.ssh`` in every container and init container.
Arguments (``api.job_plugins``): ``--ssh-key-file-path=PATH`` mounts elsewhere; ``--ssh-private-key`` with
``--ssh-public-key`` hands out the user's key pair instead of a new one; ``--ssh-port`` (22). The key is
made once per Job and kept across restarts (a restarted rank must still be trusted by the others).
"""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from hetsched.api.job_plugins import Value, parse
from hetsched.api.objects import Job, Secret
from hetsched.controllers.jobplugins.draft import Draft, domain_name

CONTROLLED = "plugin-ssh"
"""The Job's ``status.controlledResources`` key (Volcano's) recording that the controller made the Secret:
only then is it mounted and, with the Job, deleted. The controller never reads Secrets."""
KEY_BITS = 2048


def secret_name(job: Job) -> str:
    return f"{job.metadata.name}-ssh"


def _values(job: Job) -> dict[str, Value]:
    return parse("ssh", job.spec.plugins.get("ssh", []))  # checked when the Job was admitted


def _config(job: Job, port: int) -> str:
    lines = ["StrictHostKeyChecking no", "UserKnownHostsFile /dev/null", ""]
    for task in job.spec.tasks:
        for index in range(task.replicas):
            full = domain_name(job, task, index)
            host = full.partition(".")[0]
            lines += [f"Host {host}", f"  HostName {full}", f"  Port {port}", ""]
            if (task.template.spec.model_extra or {}).get("hostname"):
                break  # the task's pods share one name
    return "\n".join(lines)


def make_secret(job: Job) -> Secret:
    """The job's key pair (the user's, or a new one) as a Secret owned by it."""
    values = _values(job)
    if values["ssh-private-key"]:
        private, public = str(values["ssh-private-key"]).encode(), str(values["ssh-public-key"]).encode().rstrip()
    else:
        key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
        private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                    serialization.NoEncryption())
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    files = {"id_rsa": private, "id_rsa.pub": public + b"\n", "authorized_keys": public + b"\n",
             "config": _config(job, int(values["ssh-port"])).encode()}
    return Secret.model_validate({
        "metadata": {"name": secret_name(job), "namespace": job.metadata.namespace,
                     "labels": {"volcano.sh/job-name": job.metadata.name},
                     "ownerReferences": [{"apiVersion": job.apiVersion, "kind": "Job", "name": job.metadata.name,
                                          "uid": job.metadata.uid, "controller": True}]},
        "data": {name: base64.b64encode(content).decode() for name, content in files.items()},
    })


def on_pod(draft: Draft, values: dict[str, Value]) -> None:
    """Add the Secret's volume to the pod and mount it read-only in every container and init container."""
    name = secret_name(draft.job)
    draft.mount({"name": name, "secret": {"secretName": name, "defaultMode": 0o600}},
                {"name": name, "mountPath": str(values["ssh-key-file-path"]), "readOnly": True})
