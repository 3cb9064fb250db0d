"""The Queue controller: the queues every installation has, and each Queue's status from its PodGroups.

Who calls it: the simulator and ``hetsched controller``. As Volcano's queue controller does:
- the ``default`` and ``root`` Queues exist (made once, at start, if missing: a Volcano Job that names no
  queue goes to ``default``; ``root`` is the top of queue trees, ``spec.parent``);
- ``status.pending``, ``inqueue``, ``running`` and ``completed`` count the queue's PodGroups by phase, and
  ``kubectl get queue`` prints them (the CRD's columns). ``status.state`` is left as it is (the scheduler
  reads it; opening and closing a queue sets it).

Counts are kept incrementally from watch events (PodGroup key -> queue and phase), so a sync costs
O(1) whatever the number of PodGroups; a status is written only when a count changed.
"""

from __future__ import annotations

import contextlib

from hetsched.api.objects import PodGroup, Queue
from hetsched.controllers.workqueue import WorkQueue
from hetsched.ports import Conflict, NotFound, ObjectStore, WatchEvent

ESSENTIAL = ("default", "root")
PHASES = {"Pending": "pending", "Inqueue": "inqueue", "Running": "running", "Completed": "completed"}


class QueueController:
    def __init__(self, store: ObjectStore, essential: tuple[str, ...] = ESSENTIAL) -> None:
        self.store = store
        self.essential = essential
        self.queue = WorkQueue()
        self._made = False
        self._groups: dict[str, tuple[str, str]] = {}  # PodGroup key -> (queue, counted status field)
        self._counts: dict[str, dict[str, int]] = {}  # queue -> field -> PodGroups
        self._unwatch = store.watch(("Queue", "PodGroup"), self._on_event)

    def close(self) -> None:
        self._unwatch()

    def _on_event(self, event: WatchEvent) -> None:
        obj = event.object
        if isinstance(obj, Queue):
            self.queue.add(obj.metadata.name)
        elif isinstance(obj, PodGroup):
            key = f"{obj.metadata.namespace}/{obj.metadata.name}"
            before = self._groups.pop(key, None)
            if before is not None:
                self._counts[before[0]][before[1]] -= 1
                self.queue.add(before[0])
            field = PHASES.get(obj.status.phase)
            if event.type != "DELETED" and field is not None:
                name = obj.spec.queue or "default"
                self._groups[key] = (name, field)
                counts = self._counts.setdefault(name, dict.fromkeys(PHASES.values(), 0))
                counts[field] += 1
                self.queue.add(name)

    def process(self) -> int:
        made = 0
        if not self._made:
            for name in self.essential:
                with contextlib.suppress(Conflict):  # there already
                    self.store.create(Queue.model_validate({"metadata": {"name": name}}))
                    made += 1
            self._made = True
        return made + self.queue.drain(self.sync)

    def sync(self, name: str) -> None:
        try:
            queue = self.store.get("Queue", name)
        except NotFound:
            return
        assert isinstance(queue, Queue)
        counts = self._counts.get(name, dict.fromkeys(PHASES.values(), 0))
        status = queue.status.model_copy(update=counts)
        if status != queue.status:
            with contextlib.suppress(NotFound):
                self.store.update(queue.model_copy(update={"status": status}))
