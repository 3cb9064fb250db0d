"""The scheduler loop body: snapshot the cache, run the configured actions, apply the decisions.

Who calls it: the simulator (on simulated time), the benchmarks and the ``hetsched scheduler`` process.
The runner owns the cache and subscribes it to the store's watch; it touches the cluster only through
the ports it is given, and time only through the injected clock.

Apply order: PodGroup phases first (so the job controller creates pods of newly Inqueue jobs), then
evictions (``preempt``/``reclaim``, through the evictor port; when one is refused — a disruption budget
changed since the snapshot — its preemptor's binds are skipped, as its room was not made), then binds —
each assumed in the cache before the bind call and forgotten if the bind fails — then nominations of
pipelined pods, then PodGroup conditions. A failed bind (the pod vanished or was bound elsewhere) is
reported in the cycle's result; the next cycle decides again from fresh state.

Observation: given a stopwatch (``ports.Stopwatch``; the process passes ``time.perf_counter``), a cycle
measures its snapshot, each action, each plugin's session open/close, the apply phase and the whole cycle
into :class:`CycleTimings`; every observer (``metrics.scheduler`` for Prometheus) then sees the finished
:class:`CycleResult`. Observers only read; they never change the cycle's outcome.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from hetsched.ports import (
    Binder,
    Clock,
    Conflict,
    Evictor,
    NotFound,
    ObjectStore,
    StatusUpdater,
    Stopwatch,
    TooManyRequests,
)
from hetsched.scheduler.actions.registry import ACTIONS
from hetsched.scheduler.cache import KINDS, SchedulerCache
from hetsched.scheduler.conf import SchedulerConf, default_conf
from hetsched.scheduler.decisions import Decisions
from hetsched.scheduler.session import Session
from hetsched.scheduler.snapshot import Snapshot


@dataclass
class CycleTimings:
    """Seconds spent in one cycle, by phase (all zero without a stopwatch)."""

    snapshot: float = 0.0
    actions: dict[str, float] = field(default_factory=dict)
    plugins: dict[tuple[str, str], float] = field(default_factory=dict)
    apply: float = 0.0
    total: float = 0.0

    @property
    def session(self) -> float:
        """Session open, actions and close: the decision, without snapshot and apply."""
        return sum(self.actions.values()) + sum(self.plugins.values())


@dataclass
class CycleResult:
    decisions: Decisions
    snapshot: Snapshot
    failed_binds: list[str] = field(default_factory=list)
    failed_evictions: list[str] = field(default_factory=list)
    now: float = 0.0
    """The injected clock's reading at the start of the cycle."""
    timings: CycleTimings = field(default_factory=CycleTimings)


CycleObserver = Callable[[SchedulerCache, CycleResult], None]
"""Called after every cycle with the cache (for state read-outs) and the cycle's result."""


class Scheduler:
    def __init__(self, store: ObjectStore, binder: Binder, status: StatusUpdater, clock: Clock,
                 conf: SchedulerConf | None = None, *, scheduler_names: tuple[str, ...] = ("hetsched", "volcano"),
                 default_queue: str = "default", evictor: Evictor | None = None,
                 stopwatch: Stopwatch | None = None) -> None:
        self.store = store
        self.binder = binder
        self.evictor = evictor
        self.status = status
        self.clock = clock
        self.conf = conf or default_conf()
        self.cache = SchedulerCache(scheduler_names, default_queue)
        self._unwatch = store.watch(KINDS, self.cache.handle)
        self.cycles = 0
        self._reported: dict[str, str] = {}
        self._reported_at = -1
        self.stopwatch = stopwatch
        self.observers: list[CycleObserver] = []

    def close(self) -> None:
        self._unwatch()

    def _tick(self) -> float:
        return self.stopwatch() if self.stopwatch is not None else 0.0

    def decide(self, timings: CycleTimings | None = None, now: float | None = None) -> tuple[Snapshot, Decisions]:
        """One cycle without side effects: the pure part (used directly by the benchmark)."""
        timings = timings if timings is not None else CycleTimings()
        now = self.clock.now() if now is None else now
        started = self._tick()
        snapshot = self.cache.snapshot()
        timings.snapshot = self._tick() - started
        session = Session(snapshot, self.conf, now=now, stopwatch=self.stopwatch)
        for action in self.conf.action_names:
            began = self._tick()
            ACTIONS[action](session)
            timings.actions[action] = timings.actions.get(action, 0.0) + self._tick() - began
        decisions = session.close()
        timings.plugins = session.plugin_seconds
        return snapshot, decisions

    def run_once(self) -> CycleResult:
        started = self._tick()
        timings = CycleTimings()
        now = self.clock.now()
        snapshot, decisions = self.decide(timings, now)
        applying = self._tick()
        self.cycles += 1
        result = CycleResult(decisions, snapshot, now=now, timings=timings)
        for key, update in decisions.podgroups.items():
            if update.phase is not None:
                self._update_podgroup(key, update.phase, None)
        if decisions.evictions and self.evictor is None:
            raise RuntimeError("the configuration has eviction actions but the scheduler has no evictor port")
        stalled: set[str] = set()
        for eviction in decisions.evictions:
            assert self.evictor is not None
            try:
                self.evictor.evict(eviction.pod, f"{eviction.action}: {eviction.reason}")
            except NotFound:
                result.failed_evictions.append(eviction.pod)
            except TooManyRequests as exc:  # a budget changed under us: its preemptor waits for next cycle
                result.failed_evictions.append(f"{eviction.pod}: {exc}")
                stalled.add(eviction.preemptor)
        binds = [b for b in decisions.binds if b.job not in stalled]
        for bind in binds:
            self.cache.assume(bind.pod, bind.node, bind.annotations)
        bind_all = getattr(self.binder, "bind_all", None)
        failures: list[tuple[str, Exception]] = []
        if bind_all is not None:  # a remote binder binds concurrently, within its QPS budget
            failures = list(bind_all([(b.pod, b.node, b.annotations) for b in binds]))
        else:
            for bind in binds:
                try:
                    self.binder.bind(bind.pod, bind.node, bind.annotations)
                except (Conflict, NotFound) as exc:
                    failures.append((bind.pod, exc))
        for pod, error in failures:
            self.cache.forget(pod)
            result.failed_binds.append(f"{pod}: {error}")
        for nomination in decisions.nominations:
            with contextlib.suppress(Conflict, NotFound):
                self.status.nominate(nomination.pod, nomination.node)
        for key, update in decisions.podgroups.items():
            if update.conditions is not None:
                self._update_podgroup(key, None, update.conditions)
        self.cache.parked.park(snapshot, decisions.unschedulable)
        self._report_mismatches()
        ended = self._tick()
        timings.apply, timings.total = ended - applying, ended - started
        for observe in self.observers:
            observe(self.cache, result)
        return result

    def _report_mismatches(self) -> None:
        """A Warning Event on each node whose allocatable disagrees with its healthy chips (once per change)."""
        if self.cache.node_version == self._reported_at:
            return
        self._reported_at = self.cache.node_version
        current = self.cache.mismatches()
        for name, message in current.items():
            node = self.cache.node(name)
            if node is not None and self._reported.get(name) != message:
                self.status.record_event(node, "AllocatableMismatch", message, "Warning")
        self._reported = current

    def _update_podgroup(self, key: str, phase: str | None, conditions: list | None) -> None:  # type: ignore[type-arg]
        # the PodGroup may have changed or vanished meanwhile; the next cycle decides again from fresh state
        with contextlib.suppress(Conflict, NotFound):
            self.status.update_podgroup_status(key, phase, conditions)
