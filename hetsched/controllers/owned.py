"""Jobs that a CronJob or a JobFlow made: finding them and deleting one with what it made.

Who calls it: the CronJob controller (``controllers.cronjob``: its active and finished Jobs, history
limits, ``Replace``) and the JobFlow controller (``controllers.jobflow``: ``jobRetainPolicy: delete``).
Deleting a Job deletes its pods and PodGroup too, as Kubernetes' garbage collector does for the owner
references the job controller writes (the embedded cluster has no garbage collector; against an API server
the extra deletes find nothing).
"""

from __future__ import annotations

import contextlib

from hetsched.api.objects import Job, Pod
from hetsched.ports import NotFound, ObjectStore

FINISHED = ("Completed", "Failed", "Aborted", "Terminated")
"""Job phases a Job does not leave (Volcano's finished phases)."""


def owned_jobs(store: ObjectStore, kind: str, namespace: str, name: str) -> list[Job]:
    """The Jobs whose controller owner is ``kind`` ``namespace/name``, oldest first."""
    found = [job for job in store.list("Job") if isinstance(job, Job) and (job.metadata.namespace or "default")
             == namespace and any(ref.kind == kind and ref.name == name for ref in job.metadata.ownerReferences)]
    return sorted(found, key=lambda j: (j.metadata.creationTimestamp or 0.0, j.metadata.name))


def delete_job(store: ObjectStore, job: Job) -> None:
    """Delete ``job`` with its pods and PodGroup (whatever of them is already gone)."""
    namespace = job.metadata.namespace or "default"
    for pod in store.list("Pod"):
        if isinstance(pod, Pod) and (pod.metadata.namespace or "default") == namespace and any(
                ref.kind == "Job" and ref.name == job.metadata.name for ref in pod.metadata.ownerReferences):
            with contextlib.suppress(NotFound):
                store.delete("Pod", f"{namespace}/{pod.metadata.name}")
    for kind in ("PodGroup", "Job"):
        with contextlib.suppress(NotFound):
            store.delete(kind, f"{namespace}/{job.metadata.name}")
