"""The simulator: the real controllers and scheduler on the embedded cluster, driven by simulated time.

Who calls it: ``hetsched simulate``, ``hetsched demo`` and tests.

Events: object arrivals (``hetsched.io/submit-at`` seconds, default 0), pod completions (the simulated
kubelet, ``hetsched.io/duration``), injected faults (``sim.faults``), controller timers (a job's
``ttlSecondsAfterFinished``, a fault's grace period) and scheduler cycles every ``period`` seconds (default
1 s, as Volcano's ``--schedule-period``). After every event the controllers (job, PodGroup, fault), the
kubelets and any drain in progress run until nothing is left to do, at the same simulated instant.

A cycle that changed nothing (no object written) would repeat identically until something else
happens, so the scheduler then sleeps until the next event and resumes on the next period boundary.
This changes no outcome and keeps long, quiet stretches cheap. Runs are deterministic.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from hetsched.api import membership, workload_annotations
from hetsched.api.job_update import apply_update, update_problem
from hetsched.api.manifest import ManifestError, Problem, duplicate_problems
from hetsched.api.objects import AnyObject, CronJob, Job, Node, Queue, QueueUsage, object_key
from hetsched.api.usage_report import books
from hetsched.api.workload_annotations import SUBMIT_AT
from hetsched.cluster.memory import MemoryCluster
from hetsched.controllers.cronjob import CronJobController
from hetsched.controllers.fault import FAULT_RETRIES, FaultController
from hetsched.controllers.job import JobController
from hetsched.controllers.jobflow import JobFlowController
from hetsched.controllers.podgroup import PodGroupController
from hetsched.controllers.queue import QueueController
from hetsched.controllers.usage import HALF_LIFE, UsageController
from hetsched.metrics.controller import ControllerMetrics
from hetsched.metrics.scheduler import SchedulerMetrics
from hetsched.ports import NotFound, WatchEvent
from hetsched.scheduler.cache import KINDS
from hetsched.scheduler.contract.decisions import Decisions
from hetsched.scheduler.contract.reasons import ReasonCode
from hetsched.scheduler.defaults import default_conf
from hetsched.scheduler.engine.conf import SchedulerConf
from hetsched.scheduler.engine.runner import Scheduler
from hetsched.sim.faults import Fault, drain_step
from hetsched.sim.faults import apply as apply_fault
from hetsched.sim.kernel import ARRIVAL, SCHEDULE, EventLoop, SimClock
from hetsched.sim.kubelet import SimKubelet
from hetsched.sim.results import Recorder, Results, build_results


def _seconds(obj: AnyObject, annotation: str, index: int) -> float | None:
    raw = obj.metadata.annotations.get(annotation)
    if raw is None:
        return None
    try:
        return workload_annotations.seconds(raw)
    except ValueError as exc:
        raise ManifestError([Problem("<workload>", index, obj.kind, obj.metadata.name,
                                     f'metadata.annotations["{annotation}"]', str(exc))]) from None


def check_durations(obj: AnyObject, index: int) -> None:
    """The simulation annotations of an object built in code (files are checked when read)."""
    templates = [(f"spec.tasks[{t.name}].template.metadata.annotations", t.template.metadata.annotations)
                 for t in obj.spec.tasks] if isinstance(obj, Job) else []
    bad = workload_annotations.problems(obj.kind, obj.metadata.annotations, templates)
    if bad:
        raise ManifestError([Problem("<workload>", index, obj.kind, obj.metadata.name, field, message)
                             for field, message in bad])


def check_queues(objects: Sequence[AnyObject]) -> None:
    """Every Job, PodGroup and plain pod must name a queue the workload defines (or ``default``), as
    Volcano's admission webhook requires; otherwise it would wait forever."""
    queues = {"default"} | {o.metadata.name for o in objects if o.kind == "Queue"}
    problems = []
    for index, obj in enumerate(objects, start=1):
        if obj.kind in ("Job", "PodGroup"):
            name, field = obj.spec.queue, "spec.queue"
        elif obj.kind == "Pod":
            if membership.group_name(obj.metadata.annotations, obj.metadata.labels):
                continue  # its PodGroup's queue is the one that counts
            name = membership.queue_name(obj.metadata.annotations, obj.metadata.labels)
            where = "annotations" if membership.QUEUE_KEY in obj.metadata.annotations else "labels"
            field = f'metadata.{where}["{membership.QUEUE_KEY}"]'
        else:
            continue
        if name not in queues:
            problems.append(Problem("<workload>", index, obj.kind, obj.metadata.name, field,
                                    f"queue {name!r} does not exist (defined: {', '.join(sorted(queues))})"))
    if problems:
        raise ManifestError(problems)


def check_updates(objects: Sequence[AnyObject]) -> None:
    """A Job listed again (a later ``hetsched.io/submit-at``) is an update: only what Volcano's webhook lets
    change may differ (``api.job_update``)."""
    seen: dict[str, Job] = {}
    problems = []
    timed = sorted(enumerate(objects, start=1),
                   key=lambda item: (_seconds(item[1], SUBMIT_AT, item[0]) or 0.0, item[0]))
    for index, obj in timed:
        if not isinstance(obj, Job):
            continue
        key = object_key(obj)
        if key in seen:
            problem = update_problem(seen[key], obj)
            if problem is not None:
                problems.append(Problem("<workload>", index, "Job", obj.metadata.name, *problem))
        seen[key] = obj
    if problems:
        raise ManifestError(problems)


@dataclass
class Progress:
    now: float
    finished: int
    total: int


class Simulation:
    def __init__(self, nodes: Sequence[Node], objects: Sequence[AnyObject], conf: SchedulerConf | None = None, *,
                 period: float = 1.0, until: float | None = None,
                 scheduler_names: tuple[str, ...] = ("hetsched", "volcano"), faults: Sequence[Fault] = (),
                 metrics: tuple[SchedulerMetrics, ControllerMetrics] | None = None, timeline: bool = False,
                 usage_half_life: float = HALF_LIFE) -> None:
        if period <= 0:
            raise ValueError("period must be > 0")
        self.period = period
        self.until = until
        self.clock = SimClock()
        self.loop = EventLoop(self.clock)
        self.cluster = MemoryCluster(self.clock)
        self.recorder = Recorder(timeline)
        self.nodes = list(nodes)
        self.cluster.watch(("Job", "PodGroup", "Pod"), self._record, replay=False)
        for node in self.nodes:
            self.cluster.create(node)
        if not any(o.kind == "Queue" and o.metadata.name == "default" for o in objects):
            self.cluster.create(Queue.model_validate({"metadata": {"name": "default"}}))
        self.job_controller = JobController(self.cluster, self.clock, events=self.cluster)
        self.fault_controller = FaultController(self.cluster, self.clock, events=self.cluster)
        self.podgroup_controller = PodGroupController(self.cluster, scheduler_names)
        self.cronjob_controller = CronJobController(self.cluster, self.clock, events=self.cluster)
        self.jobflow_controller = JobFlowController(self.cluster, self.clock, events=self.cluster)
        self.queue_controller = QueueController(self.cluster, events=self.cluster)
        self.usage_controller = UsageController(self.cluster, self.clock, half_life=usage_half_life)
        self._spent: dict[str, tuple[object, ...]] = {}
        """Each queue's budget state as last seen: only its change wakes the scheduler (``_wake``)."""
        self.kubelet = SimKubelet(self.cluster, self.loop)
        self.metrics = metrics
        self.scheduler = Scheduler(self.cluster, self.cluster, self.cluster, self.clock, conf or default_conf(),
                                   evictor=self.cluster,
                                   scheduler_names=scheduler_names,
                                   stopwatch=time.perf_counter if metrics is not None else None)
        if metrics is not None:  # durations are real compute time; latencies and waits are simulated time
            self.scheduler.observers.append(metrics[0])
            self.fault_controller.listeners.append(metrics[1].restarted)
        duplicates = duplicate_problems([("<workload>", index, obj) for index, obj in enumerate(objects, start=1)])
        if duplicates:  # e.g. a Queue in both the --cluster dump and a workload file
            raise ManifestError(duplicates)
        check_queues(objects)
        check_updates(objects)
        if until is None and any(isinstance(o, CronJob) and not o.spec.suspend for o in objects):
            raise ValueError("a CronJob makes Jobs for ever: give the simulation an end (--until)")
        self.total_workloads = len({(o.kind, object_key(o)) for o in objects if o.kind in ("Job", "Pod", "PodGroup")})
        for index, obj in enumerate(objects, start=1):
            at = _seconds(obj, SUBMIT_AT, index) or 0.0
            check_durations(obj, index)
            self.loop.schedule(at, partial(self._arrive, obj), ARRIVAL)
        for fault in faults:
            self.loop.schedule(fault.at, partial(self._fault, fault), ARRIVAL)
        self._tick_pending = False
        self._in_tick = False
        self._timers: set[float] = set()
        self._renewals: set[float] = set()
        self._renewed = False
        """The event just handled was a budget's renewal only (``run`` does not move the run's end for it)."""
        self._for_renewal = False
        """The pending cycle was woken by a renewal."""
        self._draining: set[str] = set()
        self._schedule_tick(0.0)
        self._unwatch_wake = self.cluster.watch(KINDS, self._wake, replay=False)

    # ---------------------------------------------------------------------------------------- events

    def _record(self, event: WatchEvent) -> None:
        self.recorder.on_event(event, self.clock.now())

    def _arrive(self, obj: AnyObject) -> None:
        meta = obj.metadata
        if meta.creationTimestamp is not None or meta.deletionTimestamp is not None:
            # a manifest from `kubectl get -o yaml` carries the real cluster's times; the simulation's clock
            # starts at 0 and the object is created when it arrives
            obj = obj.model_copy(update={"metadata": meta.model_copy(
                update={"creationTimestamp": None, "deletionTimestamp": None})})
        if isinstance(obj, Job):
            try:
                current = self.cluster.get("Job", object_key(obj))
            except NotFound:
                pass
            else:  # listed again later: an update (scaling), as ``kubectl apply`` would send
                assert isinstance(current, Job)
                self.cluster.update(apply_update(current, obj))
                return
        if isinstance(obj, QueueUsage):  # made empty by the accountant with its Queue: the manifest's spec wins
            try:
                current = self.cluster.get("QueueUsage", object_key(obj))
            except NotFound:
                pass
            else:
                assert isinstance(current, QueueUsage)
                self.cluster.update(current.model_copy(update={"spec": obj.spec}))
                return
        if isinstance(obj, Queue):
            try:
                current = self.cluster.get("Queue", object_key(obj))
            except NotFound:
                pass
            else:  # default or root, made by the queue controller before a dump's own arrived: the dump's wins
                self.cluster.update(obj.model_copy(update={"metadata": obj.metadata.model_copy(
                    update={"resourceVersion": current.metadata.resourceVersion, "uid": current.metadata.uid})}))
                return
        self.cluster.create(obj)

    def _fault(self, fault: Fault) -> None:
        before = len(self.fault_controller.hit)
        apply_fault(self.cluster, fault, self.clock.now())
        self.recorder.on_fault(fault.at, fault.target, fault.kind, [])  # before a drain's first evictions
        if fault.kind == "Drain":
            self._draining.add(fault.node)
        elif fault.kind == "Uncordon":  # an uncordon ends a drain still waiting on budgets
            self._draining.discard(fault.node)
        self._settle()
        self.recorder.on_fault_hit(sorted({job for _, job in self.fault_controller.hit[before:]}))

    def _wake(self, event: WatchEvent) -> None:
        usage = event.object
        if isinstance(usage, QueueUsage):  # the accountant's writes matter only when a budget's state changes
            state = usage.budget_state() if event.type != "DELETED" else ()
            if self._spent.get(usage.metadata.name) == state:
                return
            self._spent[usage.metadata.name] = state
            self._for_renewal = self._for_renewal or self._renewed
        if not self._tick_pending and not self._in_tick:
            self._schedule_tick(math.ceil(self.clock.now() / self.period - 1e-9) * self.period)

    def _schedule_tick(self, when: float) -> None:
        self._tick_pending = True
        self.loop.schedule(when, self._tick, SCHEDULE)

    def _tick(self) -> None:
        self._tick_pending = False
        self._in_tick = True
        before = self.cluster.resource_version
        try:
            result = self.scheduler.run_once()
            self.recorder.on_cycle(result, self.clock.now())
            self._settle()
        finally:
            self._in_tick = False
        decided = result.decisions
        self._wait_for_periods(decided)
        if self._for_renewal and not (decided.binds or decided.evictions or decided.nominations):
            self._renewed = True  # a cycle a renewal woke, with nothing left to start: the run had ended
        self._for_renewal = False
        if self.cluster.resource_version != before:
            self._schedule_tick(self.clock.now() + self.period)

    def _settle(self) -> None:
        started = time.perf_counter()
        items = {"fault": 0, "job": 0, "podgroup": 0, "cronjob": 0, "jobflow": 0, "queue": 0, "usage": 0}
        while True:
            done = {"fault": self.fault_controller.process(), "job": self.job_controller.process(),
                    "podgroup": self.podgroup_controller.process(), "cronjob": self.cronjob_controller.process(),
                    "jobflow": self.jobflow_controller.process(), "queue": self.queue_controller.process(),
                    "usage": self.usage_controller.process()}
            for name, count in done.items():
                items[name] += count
            if sum(done.values()) + self.kubelet.process() + self._drain() == 0:
                break
        if self.metrics is not None and any(items.values()):
            self.metrics[1].observe_round(self.cluster, time.perf_counter() - started, items, list_jobs=False)
        for due in (self.job_controller.next_deadline(), self.fault_controller.next_deadline(),
                    self.cronjob_controller.next_deadline()):
            if due is not None and due not in self._timers:  # ttlSecondsAfterFinished, fault grace, schedules
                self._timers.add(due)
                self.loop.schedule(due, partial(self._timer, due), ARRIVAL)
        renewal = self.usage_controller.renewal()  # a used-up budget's next period
        if renewal is not None and renewal not in self._renewals:
            self._renewals.add(renewal)
            self.loop.schedule(renewal, partial(self._renew, renewal), ARRIVAL)

    def _drain(self) -> int:
        """Evict what the disruption budgets allow from draining nodes; a node leaves the set when empty."""
        evicted = 0
        for node in sorted(self._draining):
            done, empty = drain_step(self.cluster, node)
            for pod, job in done:
                self.recorder.evictions.append({"time": self.clock.now(), "pod": pod, "job": job, "action": "drain",
                                                "reason": f"node {node} drained", "for": "", "node": node})
                self.recorder.on_drained(node, job)
            evicted += len(done)
            if empty:
                self._draining.discard(node)
        return evicted

    def _account(self) -> None:
        """Charge run time up to now after every event (``controllers.usage``), and at the second a budget runs
        out at the current rate (a timer): exact, and before any later cycle decides. Its status writes wake
        the scheduler only when a budget's state changes (``_wake``), and come after a cycle's own check for
        changes, so they add no cycle."""
        accountant = self.usage_controller
        if accountant.runs and (accountant.last_tick is None or self.clock.now() > accountant.last_tick
                                or accountant.changed):
            accountant.tick()
        due = accountant.predicted  # a budget runs out then at the current rate: seen at that very second
        if due is not None and due > self.clock.now() and due not in self._renewals:
            self._renewals.add(due)  # books only, like a renewal: a stale one does not move the run's end
            self.loop.schedule(due, partial(self._renew, due), ARRIVAL)

    def _wait_for_periods(self, decided: Decisions) -> None:
        """A job a hard budget holds back (``BudgetShort``) may fit the next period: the books open it then
        (a timer like a renewal: it does not move the run's end), which wakes the scheduler."""
        short = {reason["queue"] for status in decided.unschedulable.values() for reason in status.reasons
                 if reason.code is ReasonCode.BUDGET_SHORT}
        for name in short:
            try:
                usage = self.cluster.get("QueueUsage", name)
            except NotFound:
                continue
            due = usage.status.periodEnd if isinstance(usage, QueueUsage) else None
            if due is not None and due > self.clock.now() and due not in self._renewals:
                self._renewals.add(due)
                self.loop.schedule(due, partial(self._renew, due, True), ARRIVAL)

    def _renew(self, due: float, period_end: bool = False) -> None:
        """A used-up budget's period ended: the accountant opens the next one (what waited for it may run).
        Only the books change here, so the run's end is not moved by it (``run``)."""
        self._renewals.discard(due)
        self._renewed = True
        if period_end:  # a period's end the accountant need not tick at by itself (nothing was used up)
            self.usage_controller.tick()
        else:
            self.usage_controller.wake()

    def _timer(self, due: float) -> None:
        self._timers.discard(due)
        self.job_controller.wake()
        self.fault_controller.wake()
        self.cronjob_controller.wake()
        self.usage_controller.wake()

    def finished_workloads(self) -> int:
        return sum(1 for w in self.recorder.workloads.values()
                   if w.pods and all(p.end is not None for p in w.pods.values()))

    # ---------------------------------------------------------------------------------------- run

    def run(self, on_progress: Callable[[Progress], None] | None = None) -> Results:
        ended_by = "no more events"
        active = self.clock.now()  # the last event that was more than a budget's renewal: when the run ended
        while True:
            upcoming = self.loop.peek()
            if upcoming is None:
                break
            if self.until is not None and upcoming > self.until:
                ended_by = "until"
                break
            self._renewed = False
            self.loop.step()
            self._settle()
            self._account()
            if not self._renewed:
                active = self.clock.now()
            if on_progress is not None and self.loop.processed % 50 == 0:
                on_progress(Progress(self.clock.now(), self.finished_workloads(), self.total_workloads))
        self.usage_controller.tick()  # the books closed at the end: every QueueUsage counts the whole run
        # stopped by --until: the cluster was watched up to that time (pods still running are counted to it)
        end = max(self.clock.now(), self.until) if ended_by == "until" and self.until is not None else active
        if on_progress is not None:
            on_progress(Progress(end, self.finished_workloads(), self.total_workloads))
        for job in self.cluster.list("Job"):
            if isinstance(job, Job):
                self.recorder.job_retries[f"{job.metadata.namespace}/{job.metadata.name}"] = (
                    job.status.retryCount, int(job.metadata.annotations.get(FAULT_RETRIES, "0")),
                    job.status.state.reason, job.status.state.message)
        self.recorder.restarts = [(r.time, r.job, r.pods, r.counted, r.level)
                                  for r in self.fault_controller.rescheduled]
        self.recorder.lost = dict(self.kubelet.lost)
        if self.metrics is not None:
            self.metrics[1].observe_jobs(self.cluster.list("Job"))
        results = build_results(self.recorder, self.nodes, end, {
            "periodSeconds": self.period,
            "endedBy": ended_by,
            "deviceMismatches": self.scheduler.cache.mismatches(),
        })
        results.usage = [books(u) for u in self.cluster.list("QueueUsage") if isinstance(u, QueueUsage)]
        return results
