"""The PodGroup controller: every plain pod that names our scheduler gets a one-member PodGroup.

Who calls it: the simulator and the ``hetsched controller`` process, via :meth:`process` after watch
events.
Volcano does the same for pods not created by a Volcano Job, so the scheduler only ever handles groups:
the group is named ``podgroup-<pod uid>``, takes the queue from the pod's
``scheduling.volcano.sh/queue-name`` annotation (or label) and its priority class from the pod, and the pod
gets the ``scheduling.k8s.io/group-name`` annotation pointing at it. A pod that already names a group, by any
of the keys ``api.membership`` reads, is left to that group (an operator's PodGroup). When the pod finishes,
its own group is Completed.
"""

from __future__ import annotations

from hetsched.api import membership
from hetsched.api.objects import Pod, PodGroup, quantity_strings
from hetsched.controllers.workqueue import WorkQueue
from hetsched.ports import NotFound, ObjectStore, WatchEvent

GROUP_ANNOTATION = membership.K8S_GROUP_KEY
"""What this controller writes on a pod it made a group for (the key Volcano's own controller writes)."""


class PodGroupController:
    def __init__(self, store: ObjectStore, scheduler_names: tuple[str, ...] = ("hetsched", "volcano")) -> None:
        self.store = store
        self.scheduler_names = frozenset(scheduler_names)
        self.queue = WorkQueue()
        self._unwatch = store.watch(("Pod",), self._on_event)

    def close(self) -> None:
        self._unwatch()

    def _on_event(self, event: WatchEvent) -> None:
        pod = event.object
        if event.type == "DELETED" or not isinstance(pod, Pod):
            return
        if pod.spec.schedulerName not in self.scheduler_names:
            return
        named = membership.group_name(pod.metadata.annotations, pod.metadata.labels)
        if not named or pod.status.phase in ("Succeeded", "Failed"):
            self.queue.add(f"{pod.metadata.namespace}/{pod.metadata.name}")

    def process(self) -> int:
        """Reconcile every queued pod; returns how many syncs ran."""
        return self.queue.drain(self.sync)

    def sync(self, key: str) -> None:
        try:
            pod = self.store.get("Pod", key)
        except NotFound:
            return
        assert isinstance(pod, Pod)
        namespace = pod.metadata.namespace or "default"
        group_name = membership.group_name(pod.metadata.annotations, pod.metadata.labels)
        if not group_name:
            group_name = f"podgroup-{pod.metadata.uid}"
            self.store.create(PodGroup.model_validate({
                "metadata": {"name": group_name, "namespace": namespace,
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name,
                                                  "uid": pod.metadata.uid, "controller": True}]},
                "spec": {"minMember": 1, "queue": membership.queue_name(pod.metadata.annotations, pod.metadata.labels),
                         "priorityClassName": pod.spec.priorityClassName,
                         "minResources": quantity_strings({k: v for k, v in pod.spec.requests.items() if k != "pods"})},
            }))
            meta = pod.metadata.model_copy(update={"annotations": {**pod.metadata.annotations,
                                                                   GROUP_ANNOTATION: group_name}})
            self.store.update(pod.model_copy(update={"metadata": meta}))
            return
        if pod.status.phase in ("Succeeded", "Failed"):
            try:
                group = self.store.get("PodGroup", f"{namespace}/{group_name}")
            except NotFound:
                return
            assert isinstance(group, PodGroup)
            owned = any(ref.kind == "Pod" for ref in group.metadata.ownerReferences)
            if owned and group.status.phase != "Completed":
                self.store.update(group.model_copy(update={
                    "status": group.status.model_copy(update={"phase": "Completed"})}))
