"""Simulated kubelets: bound pods start running at once and finish after their ``hetsched.io/duration``.

Who calls it: ``sim.simulator``. Watches pods; on a bind it sets phase Running and schedules the pod's
completion (phase Succeeded) ``duration`` seconds later. A pod without the annotation runs until the
simulation ends. Completion is skipped if the pod was deleted or replaced meanwhile (its uid changed).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from hetsched.api.objects import Pod
from hetsched.ports import NotFound, ObjectStore, WatchEvent
from hetsched.sim.kernel import COMPLETION, EventLoop

DURATION = "hetsched.io/duration"


def duration_of(pod: Pod) -> float | None:
    raw = pod.metadata.annotations.get(DURATION)
    if raw is None:
        return None
    value = float(raw)
    if value < 0:
        raise ValueError(f"pod {pod.metadata.name}: {DURATION} must be ≥ 0, got {raw}")
    return value


class SimKubelet:
    def __init__(self, store: ObjectStore, loop: EventLoop,
                 on_start: Callable[[Pod], None] | None = None, on_finish: Callable[[Pod], None] | None = None):
        self.store = store
        self.loop = loop
        self.on_start = on_start
        self.on_finish = on_finish
        self._starting: dict[str, None] = {}
        self._unwatch = store.watch(("Pod",), self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        pod = event.object
        if (event.type != "DELETED" and isinstance(pod, Pod) and pod.spec.nodeName
                and pod.status.phase == "Pending"):
            self._starting[f"{pod.metadata.namespace}/{pod.metadata.name}"] = None

    def process(self) -> int:
        """Start every pod bound since the last call."""
        started = 0
        while self._starting:
            key = next(iter(self._starting))
            del self._starting[key]
            try:
                pod = self.store.get("Pod", key)
            except NotFound:
                continue
            assert isinstance(pod, Pod)
            if pod.status.phase != "Pending" or not pod.spec.nodeName:
                continue
            now = self.loop.clock.now()
            running = self.store.update(pod.model_copy(update={
                "status": pod.status.model_copy(update={"phase": "Running", "startTime": now})}))
            assert isinstance(running, Pod)
            started += 1
            if self.on_start:
                self.on_start(running)
            duration = duration_of(running)
            if duration is not None:
                self.loop.schedule(now + duration, partial(self._finish, key, running.metadata.uid), COMPLETION)
        return started

    def _finish(self, key: str, uid: str) -> None:
        try:
            pod = self.store.get("Pod", key)
        except NotFound:
            return
        assert isinstance(pod, Pod)
        if pod.metadata.uid != uid or pod.status.phase != "Running":
            return
        done = self.store.update(pod.model_copy(update={
            "status": pod.status.model_copy(update={"phase": "Succeeded"})}))
        assert isinstance(done, Pod)
        if self.on_finish:
            self.on_finish(done)
