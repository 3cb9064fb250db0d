"""The Queue controller: the queues every installation has, and each Queue's status from its PodGroups.

Who calls it: the simulator and ``hetsched controller``. As Volcano's queue controller does:
- the ``default`` and ``root`` Queues exist (made once, at start, if missing: a Volcano Job that names no
  queue goes to ``default``; ``root`` is the top of queue trees, ``spec.parent``);
- ``status.pending``, ``inqueue``, ``running`` and ``completed`` count the queue's PodGroups by phase, and
  ``kubectl get queue`` prints them (the CRD's columns);
- ``OpenQueue`` / ``CloseQueue`` Commands (``bus.volcano.sh/v1alpha1``, what ``vcctl queue operate`` and
  ``hetsched queue open|close`` create) set ``status.state``: Open; Closed, or Closing while PodGroups that
  are not finished remain (Closing becomes Closed when the last one finishes). Only Commands in
  ``command_namespace`` (``default``, where vcctl makes them) are obeyed: closing a queue stops every team
  in it, so whoever may create Commands there is a cluster administrator — a Command elsewhere is refused
  with a Warning Event and deleted. The scheduler admits no job of a queue that is not Open.

Counts are kept incrementally from watch events (PodGroup key -> queue and phase), so a sync costs
O(1) whatever the number of PodGroups; a status is written only when a count changed.
"""

from __future__ import annotations

import contextlib

from hetsched.api.objects import Command, PodGroup, Queue
from hetsched.controllers.workqueue import WorkQueue
from hetsched.ports import Conflict, NotFound, ObjectStore, StatusUpdater, WatchEvent

ESSENTIAL = ("default", "root")
PHASES = {"Pending": "pending", "Inqueue": "inqueue", "Running": "running", "Completed": "completed"}


class QueueController:
    def __init__(self, store: ObjectStore, essential: tuple[str, ...] = ESSENTIAL, *,
                 events: StatusUpdater | None = None, command_namespace: str = "default") -> None:
        self.store = store
        self.essential = essential
        self.events = events
        self.command_namespace = command_namespace
        self._commands: list[Command] = []
        self.queue = WorkQueue()
        self._made = False
        self._groups: dict[str, tuple[str, str]] = {}  # PodGroup key -> (queue, counted status field)
        self._counts: dict[str, dict[str, int]] = {}  # queue -> field -> PodGroups
        self._unwatch = store.watch(("Queue", "PodGroup", "Command"), self._on_event)

    def close(self) -> None:
        self._unwatch()

    def _on_event(self, event: WatchEvent) -> None:
        obj = event.object
        if isinstance(obj, Command):
            if event.type == "ADDED" and obj.target.kind == "Queue":
                self._commands.append(obj)
            return
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
        while self._commands:
            self._command(self._commands.pop(0))
            made += 1
        return made + self.queue.drain(self.sync)

    def _say(self, obj: Command | Queue, reason: str, message: str, type_: str = "Normal") -> None:
        if self.events is not None:
            self.events.record_event(obj, reason, message, type_)

    def _command(self, command: Command) -> None:
        namespace = command.metadata.namespace or "default"
        name = command.target.name
        try:
            if namespace != self.command_namespace:
                self._say(command, "CommandRefused", f"{command.action} {name}: queue Commands are obeyed only in "
                          f"namespace {self.command_namespace} (closing a queue stops every team in it)", "Warning")
                return
            try:
                queue = self.store.get("Queue", name)
            except NotFound:
                self._say(command, "CommandFailed", f"target Queue {name} does not exist; {command.action} not "
                          "applied", "Warning")
                return
            assert isinstance(queue, Queue)
            state = "Open" if command.action == "OpenQueue" else self._closed_state(name)
            if queue.status.state != state:
                self.store.update(queue.model_copy(update={"status": queue.status.model_copy(
                    update={"state": state})}))
            self._say(queue, command.action, f"queue {name} is {state} ({command.action} by Command "
                      f"{namespace}/{command.metadata.name})")
        finally:
            with contextlib.suppress(NotFound):
                self.store.delete("Command", f"{namespace}/{command.metadata.name}")

    def _closed_state(self, name: str) -> str:
        """Closed, or Closing while the queue still holds PodGroups that are not finished."""
        counts = self._counts.get(name, {})
        busy = counts.get("pending", 0) + counts.get("inqueue", 0) + counts.get("running", 0)
        return "Closing" if busy else "Closed"

    def sync(self, name: str) -> None:
        try:
            queue = self.store.get("Queue", name)
        except NotFound:
            return
        assert isinstance(queue, Queue)
        counts = self._counts.get(name, dict.fromkeys(PHASES.values(), 0))
        update: dict[str, object] = dict(counts)
        if queue.status.state == "Closing" and self._closed_state(name) == "Closed":
            update["state"] = "Closed"  # the last PodGroup it held has finished
        status = queue.status.model_copy(update=update)
        if status != queue.status:
            with contextlib.suppress(NotFound):
                self.store.update(queue.model_copy(update={"status": status}))
