"""The scheduler loop body: snapshot the cache, enforce hard budgets (``engine.budgets``), run the configured
actions, apply the decisions.

Who calls it: the simulator (on simulated time), the benchmarks and the ``hetsched scheduler`` process.
The runner owns the cache and subscribes it to the store's watch; it touches the cluster only through
the ports it is given, and time only through the injected clock.

Apply order: PodGroup phases first (so the job controller creates pods of newly Inqueue jobs), then
evictions (``preempt``/``reclaim``, through the evictor port; when one is refused — a disruption budget
changed since the snapshot — its preemptor's binds are skipped, as its room was not made), then binds —
each assumed in the cache before the bind call and forgotten if the bind fails — then nominations of
pipelined pods, then PodGroup conditions and what they tell users (``_tell``: Events, and
``PodScheduled=False`` on pods that wait). A failed bind (the pod vanished or was bound elsewhere) is
reported in the cycle's result; the next cycle decides again from fresh state.

Fault isolation: an exception while an action works on one job (``Session.handling`` names it: a plugin that
raises on it, input no check caught, a bug) never aborts the cycle for everyone. The job is *set aside* —
its PodGroup gets the ``Unschedulable`` condition with the error (``explain`` shows it), a Warning Event
``SchedulingError`` and a count in the cycle's result (the ``hetsched_scheduler_set_aside_total`` metric) —
and the cycle is decided again from a fresh snapshot without it (deciding has no side effects, so nothing
half-done survives). A set-aside job is retried after a back-off that doubles with each failure
(``SET_ASIDE_BASE`` … ``SET_ASIDE_MAX`` seconds of the injected clock). At most ``MAX_SET_ASIDE`` jobs are
set aside per cycle.

A plugin that raises opening or closing the session (``session.PluginSessionError``) is set aside too. One
that only ranks (``ADVISORY`` points: queue, job and task order, node and HyperNode scores) is left out of
sessions for the same doubling back-off — the cycle schedules everyone, in a worse order or placement,
never against a rule. One that guards placements (filters, capacity, gang, queue limits, eviction rules)
cannot be left out without breaking its rule, so the cycle then decides nothing at all: every active job
gets the ``PluginError`` reason naming the plugin and the error, and the plugin is tried again every cycle.
Either way the cycle completes, is counted in ``set_aside`` as ``plugin/<name>``, and the process keeps
running; only an exception no job or plugin can be blamed for raises to the process, which logs it and
retries the cycle.

Time budget: given ``cycle_budget`` (and a stopwatch), ``allocate`` starts no new job once the cycle has
run that long; the jobs it did not come to are *deferred* (``Decisions.deferred``, ``CycleResult.deferred``)
and the caller runs the next cycle at once. The scheduler process bounds its cycles so (the watch events it
pumps between cycles wait for no long one); the simulator does not, as its outcome must not depend on the
machine's speed.

Observation: given a stopwatch (``ports.Stopwatch``; the process passes ``time.perf_counter``), a cycle
measures its snapshot, each action, each plugin's session open/close, the apply phase and the whole cycle
into :class:`CycleTimings`; every observer (``metrics.scheduler`` for Prometheus) then sees the finished
:class:`CycleResult`. Observers only read; they never change the cycle's outcome.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hetsched.api.objects import Condition, Pod
from hetsched.api.priority_policy import DEFAULT as DEFAULT_PRIORITY
from hetsched.api.priority_policy import PriorityPolicy
from hetsched.devices.inventory import HANDOFF_FOR, PARTITIONS_ANNOTATION, POD_ANNOTATION, handoff_for
from hetsched.ports import (
    Binder,
    BindRequest,
    Clock,
    Conflict,
    Evictor,
    Failure,
    NotFound,
    ObjectStore,
    PodGroupStatusUpdate,
    StatusUpdater,
    Stopwatch,
    TooManyRequests,
)
from hetsched.scheduler.cache import KINDS, SchedulerCache
from hetsched.scheduler.contract.decisions import Bind, Decisions
from hetsched.scheduler.contract.framework import (
    HyperNodeOrder,
    JobOrder,
    NodeScore,
    QueueOrder,
    TaskOrder,
    declared_points,
)
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.snapshot import Snapshot
from hetsched.scheduler.engine import budgets
from hetsched.scheduler.engine.actions.registry import ACTIONS
from hetsched.scheduler.engine.conf import SchedulerConf
from hetsched.scheduler.engine.session import PluginSessionError, Session


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


ADVISORY: tuple[type, ...] = (QueueOrder, JobOrder, TaskOrder, NodeScore, HyperNodeOrder)
"""Extension points that only rank: a plugin answering nothing else may be left out of a session."""


CONDITIONS_PER_CYCLE = 1000
"""Pods given ``PodScheduled=False`` per cycle at most (each a status write through the QPS budget)."""


def advisory(cls: type) -> bool:
    """Only ranks (see ``ADVISORY``): leaving it out never breaks a rule. A plugin of hooks only is not."""
    points = declared_points(cls)
    return bool(points) and all(point.protocol in ADVISORY for point in points)


MAX_SET_ASIDE = 8
"""Jobs set aside in one cycle before the cycle gives up (the others are caught in later cycles)."""
SET_ASIDE_BASE = 10.0
SET_ASIDE_MAX = 600.0


@dataclass
class SetAside:
    """A job whose handling raised: skipped until ``until`` (the injected clock)."""

    error: str
    failures: int
    until: float
    backoff: float


def _backed_off(previous: SetAside | None, error: str, now: float) -> SetAside:
    """Set aside again after ``previous`` (or the first time): the back-off doubles with each failure."""
    failures = previous.failures + 1 if previous is not None else 1
    backoff = min(SET_ASIDE_BASE * 2 ** (failures - 1), SET_ASIDE_MAX)
    return SetAside(error, failures, now + backoff, backoff)


@dataclass
class CycleResult:
    decisions: Decisions
    snapshot: Snapshot
    failed_binds: list[Failure] = field(default_factory=list)
    failed_evictions: list[Failure] = field(default_factory=list)
    now: float = 0.0
    """The injected clock's reading at the start of the cycle."""
    timings: CycleTimings = field(default_factory=CycleTimings)
    set_aside: list[tuple[str, str]] = field(default_factory=list)
    """(job key, error) of each job set aside in this cycle (its handling raised), and (``plugin/<name>``,
    error) of each plugin that raised opening or closing the session."""

    @property
    def deferred(self) -> bool:
        """The time budget left jobs to the next cycle: run it at once rather than after a period."""
        return bool(self.decisions.deferred)


CycleObserver = Callable[[SchedulerCache, CycleResult], None]
"""Called after every cycle with the cache (for state read-outs) and the cycle's result."""


class Scheduler:
    def __init__(self, store: ObjectStore, binder: Binder, status: StatusUpdater, clock: Clock,
                 conf: SchedulerConf, *, scheduler_names: tuple[str, ...] = ("hetsched", "volcano"),
                 default_queue: str = "default", evictor: Evictor | None = None,
                 stopwatch: Stopwatch | None = None, priority_policy: PriorityPolicy = DEFAULT_PRIORITY,
                 cycle_budget: float | None = None) -> None:
        if cycle_budget is not None and (stopwatch is None or not cycle_budget > 0):
            raise ValueError("a cycle budget needs a stopwatch and a positive number of seconds")
        self.store = store
        self.binder = binder
        self.evictor = evictor
        self.status = status
        self.clock = clock
        self.conf = conf
        self.cache = SchedulerCache(scheduler_names, default_queue, priority_policy)
        self.cache.read_labels = conf.read_labels()
        self._unwatch = store.watch(KINDS, self.cache.handle)
        self.cycles = 0
        self.set_aside: dict[str, SetAside] = {}
        """Jobs whose handling raised, with their back-off (see the module docstring)."""
        self.plugins_aside: dict[str, SetAside] = {}
        """Ranking plugins that raised opening or closing a session, by plugin name, with their back-off."""
        self._reported: dict[str, str] = {}
        self._reported_at = -1
        self._untold: dict[str, str] = {}
        """Pods whose ``PodScheduled=False`` is still to be written (pod key → message), oldest first:
        at most ``CONDITIONS_PER_CYCLE`` are written per cycle, so a huge gang never stalls one."""
        self.stopwatch = stopwatch
        self.cycle_budget = cycle_budget
        """Seconds of stopwatch time after which a cycle starts no new job (``allocate``): the rest are
        deferred to the next cycle, which the caller runs at once (``CycleResult.deferred``). None: no limit
        (the simulator, whose results must not depend on the machine's speed)."""
        self.observers: list[CycleObserver] = []

    def close(self) -> None:
        self._unwatch()

    def _tick(self) -> float:
        return self.stopwatch() if self.stopwatch is not None else 0.0

    def decide(self, timings: CycleTimings | None = None, now: float | None = None,
               set_aside: list[tuple[str, str]] | None = None,
               deadline: float | None = None) -> tuple[Snapshot, Decisions]:
        """One cycle without side effects: the pure part (used directly by the benchmark). A job whose
        handling raises is set aside (appended to ``set_aside``) and the cycle decided again without it.
        ``deadline`` (a stopwatch reading) is the cycle's time budget (``Session.out_of_time``)."""
        timings = timings if timings is not None else CycleTimings()
        now = self.clock.now() if now is None else now
        halted: Reason | None = None
        self.cache.parked.expire(now)  # a job parked for five minutes is tried again whatever happened
        for attempt in range(MAX_SET_ASIDE + 1):
            started = self._tick()
            snapshot = self.cache.snapshot()
            timings.snapshot += self._tick() - started
            held = {key: Reason.of(ReasonCode.SET_ASIDE, error=entry.error, backoff=entry.backoff)
                    for key, entry in self.set_aside.items() if entry.until > now}
            without = {name for name, entry in self.plugins_aside.items() if entry.until > now}
            session: Session | None = None
            try:
                session = Session(snapshot, self.conf, now=now, stopwatch=self.stopwatch, set_aside=held,
                                  without=without, halted=halted, deadline=deadline)
                budgets.enforce(session)  # a hard budget binds whatever the actions are
                for action in self.conf.action_names:
                    began = self._tick()
                    ACTIONS[action](session)
                    timings.actions[action] = timings.actions.get(action, 0.0) + self._tick() - began
                decisions = session.close()
            except PluginSessionError as exc:
                if attempt == MAX_SET_ASIDE:
                    raise
                error, halted = self._plugin_aside(exc, now)
                if set_aside is not None:
                    set_aside.append((f"plugin/{exc.plugin.NAME}", error))
                continue
            except Exception as exc:
                culprit = session.handling if session is not None else None
                if culprit is None or attempt == MAX_SET_ASIDE:
                    raise
                error = self._set_aside(culprit, exc, now)
                if set_aside is not None:
                    set_aside.append((culprit, error))
                continue
            timings.plugins = session.plugin_seconds
            self._forget_recovered(snapshot, now)
            return snapshot, decisions
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _stamped(self, bind: Bind) -> Bind:
        """A bind that hands chips over carries their provenance: the pod's uid and the node
        (``devices.inventory.trusted_allocation``), so the hand-off is trusted for this pod only."""
        if not bind.annotations or (POD_ANNOTATION not in bind.annotations
                                    and PARTITIONS_ANNOTATION not in bind.annotations):
            return bind
        pod = self.cache.pod(bind.pod)
        uid = pod.metadata.uid if pod is not None else ""
        return replace(bind, annotations={**bind.annotations, HANDOFF_FOR: handoff_for(uid, bind.node)})

    def _set_aside(self, key: str, exc: Exception, now: float) -> str:
        error = f"{type(exc).__name__}: {exc}"[:300]
        self.set_aside[key] = _backed_off(self.set_aside.get(key), error, now)
        return error

    def _plugin_aside(self, exc: PluginSessionError, now: float) -> tuple[str, Reason | None]:
        """Set aside a plugin that raised opening or closing a session: a ranking one for a back-off; for a
        guarding one, the reason every job gets while the cycle decides nothing."""
        error = f"{type(exc.error).__name__}: {exc.error}"[:300]
        plugin = exc.plugin.NAME
        if advisory(type(exc.plugin)):
            self.plugins_aside[plugin] = _backed_off(self.plugins_aside.get(plugin), error, now)
            return error, None
        return error, Reason.of(ReasonCode.PLUGIN_FAILED, plugin=plugin, error=error)

    def _forget_recovered(self, snapshot: Snapshot, now: float) -> None:
        """Drop the set-aside records of jobs (and ranking plugins) retried without an error, and of jobs that
        are gone or settled."""
        for key in [k for k, entry in self.set_aside.items() if entry.until <= now or k not in snapshot.active]:
            del self.set_aside[key]
        for name in [n for n, entry in self.plugins_aside.items() if entry.until <= now]:
            del self.plugins_aside[name]

    def run_once(self) -> CycleResult:
        started = self._tick()
        timings = CycleTimings()
        now = self.clock.now()
        set_aside: list[tuple[str, str]] = []
        deadline = started + self.cycle_budget if self.cycle_budget is not None else None
        snapshot, decisions = self.decide(timings, now, set_aside, deadline)
        applying = self._tick()
        self.cycles += 1
        result = CycleResult(decisions, snapshot, now=now, timings=timings, set_aside=set_aside)
        for key, message in set_aside:
            podgroup = self.cache.podgroup(key)
            if podgroup is not None:
                self.status.record_event(podgroup, "SchedulingError", f"set aside: {message}", "Warning")
        if decisions.evictions and self.evictor is None:
            raise RuntimeError("the configuration has eviction actions but the scheduler has no evictor port")
        stalled: set[str] = set()
        for eviction in decisions.evictions:
            assert self.evictor is not None
            try:
                self.evictor.evict(eviction.pod, f"{eviction.action}: {eviction.reason}")
            except NotFound as exc:
                result.failed_evictions.append(Failure(eviction.pod, str(exc)))
            except TooManyRequests as exc:  # a budget changed under us: its preemptor waits for next cycle
                result.failed_evictions.append(Failure(eviction.pod, str(exc)))
                stalled.add(eviction.preemptor)
        binds = [self._stamped(b) for b in decisions.binds if b.job not in stalled]
        for bind in binds:
            self.cache.assume(bind.pod, bind.node, bind.annotations)
        failures = self.binder.bind_all([BindRequest(b.pod, b.node, b.annotations) for b in binds])
        for failure in failures:
            self.cache.forget(failure.pod)
            result.failed_binds.append(failure)
        for nomination in decisions.nominations:
            with contextlib.suppress(Conflict, NotFound):
                self.status.nominate(nomination.pod, nomination.node)
        # as Volcano's session close: the PodGroups' phases and conditions once the binds are on their way, one
        # write per PodGroup (a cycle that enqueues 5,000 jobs would otherwise delay its first bind by them)
        self.status.update_podgroup_statuses([PodGroupStatusUpdate(key, update.phase, update.conditions)
                                              for key, update in decisions.podgroups.items()
                                              if update.phase is not None or update.conditions is not None])
        self._tell(decisions)
        self.cache.parked.park(snapshot, decisions.unschedulable, decisions.shortfalls, now)
        self._report_mismatches()
        ended = self._tick()
        timings.apply, timings.total = ended - applying, ended - started
        for observe in self.observers:
            observe(self.cache, result)
        return result

    def _tell(self, decisions: Decisions) -> None:
        """What users and autoscalers read, for each PodGroup whose gang condition changed this cycle: a
        Warning Event ``Unschedulable`` (or a Normal ``Scheduled``) on the PodGroup, and on each of its pods
        still waiting, ``PodScheduled=False`` with reason ``Unschedulable`` and the message, and a Warning
        Event ``FailedScheduling`` (kube-scheduler's and Volcano's names). A pod whose condition already says
        so is not written again; at most ``CONDITIONS_PER_CYCLE`` pods are written per cycle (the rest in the
        next cycles, oldest first), and the Events sink aggregates and rate-limits the Events."""
        for key, update in decisions.podgroups.items():
            if update.conditions is None:
                continue
            podgroup = self.cache.podgroup(key)
            verdict = next((c for c in update.conditions if c.type == "Unschedulable"), None)
            if verdict is None:
                if podgroup is not None and any(c.type == "Scheduled" for c in update.conditions):
                    self.status.record_event(podgroup, "Scheduled", "pod group is ready")
                continue
            if podgroup is not None:
                self.status.record_event(podgroup, "Unschedulable", verdict.message, "Warning")
            for pod_key in self.cache.pending_pods(key):
                self._untold.pop(pod_key, None)
                self._untold[pod_key] = verdict.message  # the newest verdict, at the back of the line
        writes: list[tuple[str, Condition]] = []
        told: list[Pod] = []
        while self._untold and len(writes) < CONDITIONS_PER_CYCLE:
            pod_key, message = next(iter(self._untold.items()))
            del self._untold[pod_key]
            pod = self.cache.waiting(pod_key)
            if pod is None or any(
                    c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
                    and c.message == message for c in pod.status.conditions):
                continue  # gone, placed meanwhile, or already saying so
            writes.append((pod_key, Condition(type="PodScheduled", status="False", reason="Unschedulable",
                                              message=message)))
            told.append(pod)
        if not writes:
            return
        failed = {f.pod for f in self.status.set_pod_conditions(writes)}
        for (pod_key, condition), pod in zip(writes, told, strict=True):
            if pod_key not in failed:
                self.status.record_event(pod, "FailedScheduling", condition.message, "Warning")

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


