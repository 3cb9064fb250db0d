"""Simulated kubelets: bound pods start running at once and finish after their ``hetsched.io/duration``.

Who calls it: ``sim.simulator``. Watches pods; on a bind it sets phase Running and schedules the pod's
end ``duration`` seconds later. A pod without the annotation runs until the simulation ends. The end is
skipped if the pod was deleted or replaced meanwhile (its uid changed).

How a pod ends: ``hetsched.io/exit-code`` (default 0) is its container's exit code, or a comma-separated
list, one per attempt: the n-th entry is used for the pod's n-th run, counting the job version
(``volcano.sh/job-version``, a restarted job runs again) plus in-place restarts; the last entry repeats.
``"1,0"`` fails once and then succeeds. Exit 0 ends the pod Succeeded. A non-zero exit ends it Failed
(with the code in ``status.containerStatuses``, as Volcano's exitCode policies read it) unless its
``restartPolicy`` is ``OnFailure`` or ``Always``: then the kubelet restarts the container in place
(``restartCount`` + 1) and the run starts over. A pod still running ``activeDeadlineSeconds`` after it
started fails with reason ``DeadlineExceeded`` (exit 137), as the kubelet ends it.

Checkpoints and lost work: a pod whose template sets ``hetsched.io/checkpoint-interval`` (seconds) saves its
progress every interval of a run; a pod deleted while running (a fault, an eviction, a restart) keeps what
it saved — its task index starts the next run from there, running only the rest of its duration — and
loses the rest. A pod told to checkpoint (``hetsched.io/checkpoint-by``, the fault controller's grace
period) and deleted at or after that time saved everything. What is lost is recorded per deletion in
:attr:`SimKubelet.lost` as whole-chip-seconds (accelerator chips requested × seconds since the last
checkpoint).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

from hetsched.api.accelerators import accelerator_kind
from hetsched.api.objects import ContainerState, ContainerStateTerminated, ContainerStatus, Pod
from hetsched.api.workload_annotations import CHECKPOINT_INTERVAL, DURATION, EXIT_CODE, exit_codes, seconds
from hetsched.controllers.fault import CHECKPOINT_BY
from hetsched.ports import NotFound, ObjectStore, WatchEvent
from hetsched.sim.kernel import COMPLETION, EventLoop


def chips_of(pod: Pod) -> float:
    """Whole accelerator chips the pod requests (CPU, memory and chip shares are not counted)."""
    return sum(amount / 1000 for name, amount in pod.spec.requests.items() if accelerator_kind(name) is not None)


def exit_code_of(pod: Pod) -> int:
    """The exit code of the pod's current attempt (see the module docstring)."""
    raw = pod.metadata.annotations.get(EXIT_CODE)
    if raw is None:
        return 0
    codes = exit_codes(raw, f"pod {pod.metadata.name}")
    try:
        version = int(pod.metadata.annotations.get("volcano.sh/job-version", "0"))
    except ValueError:
        version = 0
    return codes[min(version + pod.status.restarts, len(codes) - 1)]


def _interval(pod: Pod) -> float | None:
    raw = pod.metadata.annotations.get(CHECKPOINT_INTERVAL)
    return (_seconds(pod, CHECKPOINT_INTERVAL, raw) or None) if raw is not None else None


def duration_of(pod: Pod) -> float | None:
    raw = pod.metadata.annotations.get(DURATION)
    return _seconds(pod, DURATION, raw) if raw is not None else None


def _seconds(pod: Pod, annotation: str, raw: str) -> float:
    try:
        return seconds(raw)
    except ValueError as exc:
        raise ValueError(f"pod {pod.metadata.name}: {annotation} {exc}") from None


class SimKubelet:
    def __init__(self, store: ObjectStore, loop: EventLoop,
                 on_start: Callable[[Pod], None] | None = None, on_finish: Callable[[Pod], None] | None = None):
        self.store = store
        self.loop = loop
        self.on_start = on_start
        self.on_finish = on_finish
        self._starting: dict[str, None] = {}
        self._runs: dict[str, tuple[str, float]] = {}
        """Pod key → (uid, when its current run started)."""
        self.saved: dict[str, float] = {}
        """Pod key (a task index) → seconds of its work saved by checkpoints, kept across its replacements."""
        self.lost: dict[tuple[str, float], float] = {}
        """(pod key, deletion time) → chip-seconds lost by deleting it while it ran."""
        self._unwatch = store.watch(("Pod",), self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        pod = event.object
        if not isinstance(pod, Pod):
            return
        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        if event.type == "DELETED":
            self._deleted(key, pod)
        elif pod.spec.nodeName and pod.status.phase == "Pending":
            self._starting[key] = None

    def _deleted(self, key: str, pod: Pod) -> None:
        run = self._runs.pop(key, None)
        if run is None or run[0] != pod.metadata.uid or pod.status.phase != "Running":
            return
        now = self.loop.clock.now()
        ran = now - run[1]
        told = pod.metadata.annotations.get(CHECKPOINT_BY)
        interval = _interval(pod)
        if told is not None and now >= float(told) - 1e-9:
            kept = ran  # it checkpointed when told to
        elif interval:
            kept = math.floor(ran / interval + 1e-9) * interval
        else:
            kept = 0.0
        self.saved[key] = self.saved.get(key, 0.0) + kept
        chips = chips_of(pod)
        if chips and ran > kept:
            self.lost[(key, now)] = chips * (ran - kept)

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
            self._runs[key] = (running.metadata.uid, now)
            duration = duration_of(running)
            if duration is not None:
                left = max(0.0, duration - self.saved.get(key, 0.0))
                self.loop.schedule(now + left, partial(self._finish, key, running.metadata.uid), COMPLETION)
            deadline = running.spec.activeDeadlineSeconds
            if deadline is not None and (duration is None or deadline < duration - self.saved.get(key, 0.0)):
                self.loop.schedule(now + deadline, partial(self._finish, key, running.metadata.uid, True),
                                   COMPLETION)
        return started

    def _finish(self, key: str, uid: str, deadline: bool = False) -> None:
        """The pod's run ends: its duration is over, or (``deadline``) its ``activeDeadlineSeconds`` — then it
        fails ``DeadlineExceeded`` whatever its restart policy, as the kubelet ends it."""
        try:
            pod = self.store.get("Pod", key)
        except NotFound:
            return
        assert isinstance(pod, Pod)
        if pod.metadata.uid != uid or pod.status.phase != "Running":
            return
        now = self.loop.clock.now()
        code = 137 if deadline else exit_code_of(pod)
        name = pod.spec.containers[0].name
        restarts = pod.status.restarts
        if code != 0 and pod.spec.restartPolicy in ("OnFailure", "Always") and not deadline:
            status = ContainerStatus(name=name, ready=True, restartCount=restarts + 1,
                                     state=ContainerState(running={"startedAt": now}))
            restarted = self.store.update(pod.model_copy(update={
                "status": pod.status.model_copy(update={"containerStatuses": [status]})}))
            assert isinstance(restarted, Pod)
            duration = duration_of(restarted)
            assert duration is not None
            interval = _interval(pod)  # the crashed run keeps what it checkpointed
            ran = now - self._runs.get(key, (uid, now))[1]
            if interval:
                self.saved[key] = self.saved.get(key, 0.0) + math.floor(ran / interval + 1e-9) * interval
            self._runs[key] = (uid, now)
            left = max(0.0, duration - self.saved.get(key, 0.0))
            self.loop.schedule(now + left, partial(self._finish, key, uid), COMPLETION)
            return
        run = self._runs.pop(key, None)
        interval = _interval(pod)
        if code != 0 and interval and run is not None:  # a failed run keeps what it checkpointed
            kept = math.floor((now - run[1]) / interval + 1e-9) * interval
            self.saved[key] = self.saved.get(key, 0.0) + kept
        why = "DeadlineExceeded" if deadline else "Completed" if code == 0 else "Error"
        terminated = ContainerStateTerminated(exitCode=code, reason=why, finishedAt=now)
        status = ContainerStatus(name=name, restartCount=restarts, state=ContainerState(terminated=terminated))
        done = self.store.update(pod.model_copy(update={"status": pod.status.model_copy(update={
            "phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [status],
            "reason": "" if code == 0 else "DeadlineExceeded" if deadline else "Error"})}))
        assert isinstance(done, Pod)
        if self.on_finish:
            self.on_finish(done)
