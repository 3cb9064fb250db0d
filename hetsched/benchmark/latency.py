"""``hetsched bench latency``: how long an arriving job waits for the scheduler in a busy cluster.

Who calls it: the CLI (``hetsched bench latency``) and ``bench/latency_sweep.py`` (one process per cluster
size, so each peak RSS is its own).

Method. A synthetic heterogeneous cluster (``benchmark.workload``: Ascend, Cambricon and NVIDIA servers with
their chip topologies, CPU servers) is filled with ``running`` bound pods, then jobs arrive at ``rate`` pods
per second (a Poisson stream of gangs of 1–32 pods, mean ≈ 6; one job in six asks for 1–8 chips per pod of
one accelerator kind) and finish after an exponential run time whose mean, ``running / rate``, keeps the
number of running pods steady (Little's law). A finished job's pods and PodGroup are deleted.

Cycles are bounded as the scheduler process bounds them (``--cycle-budget``, ``Scheduler.cycle_budget``):
a cycle starts no new job after the budget, and the next cycle runs at once for the jobs it deferred.

Time is the scheduler's own work. One thread does everything, as the scheduler process does: it takes the
watch events that are due (arrivals, completions) into its cache, then, while some job waits, runs a cycle
(snapshot, session, applying the binds to the embedded store). Virtual time advances by the wall-clock time
that work took, and jumps to the next arrival when nothing waits. A job's *latency* is the end of the cycle
that bound its gang minus its arrival: waiting for the cycle in progress, its own ingestion and its own
cycle — the scheduler-side time from arrival to bind decision, without an API server's round trips.
Everything an embedded store does on a create, delete or bind (validation, watch delivery) is counted as
scheduler work too, so the figures err on the slow side.

Reported: latency p50/p99/max over jobs that arrived after the warm-up (all jobs, and 8-pod gangs alone),
cycle time and snapshot time p50/p99/max, the share of time the scheduler was busy, jobs still waiting at
the end, and RSS (of the whole process: the embedded store's objects included, and the objects of the jobs
still to arrive, which are built before the run so that building them is not counted as scheduler work):
``peak_rss_mb`` over the whole run, and on Linux ``rss_after_fill_mb`` and ``steady_peak_rss_mb``, the peak
while jobs arrive and finish. The fill is a one-off: it schedules every running pod in a few huge cycles,
where a restarted scheduler would list them already bound.
"""

from __future__ import annotations

import gc
import heapq
import math
import random
import resource
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hetsched.api.objects import AnyObject, Pod, PodGroup, Queue
from hetsched.benchmark.workload import ACCELERATORS, QUEUES, gang, synthetic_cluster
from hetsched.cluster.memory import MemoryCluster
from hetsched.metrics.gc_pauses import CollectionSchedule, PauseMeter
from hetsched.ports import CYCLE_BUDGET_MS, ManualClock
from hetsched.scheduler.defaults import default_conf
from hetsched.scheduler.engine.runner import Scheduler

SIZES = (1, 2, 4, 8, 16, 32)
SIZE_WEIGHTS = (30, 20, 15, 20, 10, 5)
ACCELERATED_JOBS = 1 / 6
CHIPS = (1, 1, 2, 2, 4, 8)
WARMUP_SECONDS = 2.0
"""Jobs arriving before this (or a quarter of the run, if shorter) are not measured."""
MAX_NODES = 100_000
MAX_PODS = 1_000_000
GRACE_SECONDS = 5.0
"""After the last arrival, how long the run goes on for the jobs still waiting."""


@dataclass
class Job:
    key: str
    size: int
    duration: float
    objects: list[PodGroup | Pod]
    """The PodGroup and its pods until they are created (then dropped: the store holds them)."""
    arrival: float = 0.0
    bound: int = 0
    decided: float | None = None
    refused: bool = False
    """A cycle tried the job and could not place it (it waited for capacity, not for the scheduler)."""

    def names(self) -> list[str]:
        name = self.key.split("/", 1)[1]
        return [f"bench/{name}-{i}" for i in range(self.size)]


@dataclass(order=True)
class _Event:
    time: float
    seq: int
    kind: str = field(compare=False)
    """"arrive" or "finish"."""
    job: Job = field(compare=False)


def _job(rng: random.Random, name: str, mean_duration: float) -> Job:
    size = rng.choices(SIZES, SIZE_WEIGHTS)[0]
    queue = rng.choice(QUEUES)[0]
    if rng.random() < ACCELERATED_JOBS:
        weights = [share for *_, share in ACCELERATORS]
        _, label, resource_name, _ = rng.choices(ACCELERATORS, weights)[0]
        chips = rng.choice(CHIPS)
        limits = {resource_name: str(chips)}
        requests = {"cpu": str(2 * chips), "memory": f"{16 * chips}Gi"}
        selector = {"accelerator": label}
    else:
        limits, selector = {}, {}
        requests = {"cpu": str(rng.choice((1, 2, 4))), "memory": f"{rng.choice((2, 4, 8))}Gi"}
    podgroup, pods = gang(name, size, queue, requests, limits, selector)
    return Job(f"bench/{name}", size, rng.expovariate(1.0 / mean_duration), [podgroup, *pods])


def stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"count": 0, "p50": None, "p99": None, "max": None}
    array = np.asarray(values) * 1000.0
    return {"count": len(values), "p50": round(float(np.percentile(array, 50)), 2),
            "p99": round(float(np.percentile(array, 99)), 2), "max": round(float(array.max()), 2)}


class LatencyRun:
    """One steady-state run (see the module docstring)."""

    def __init__(self, nodes: int, running: int, rate: float, seconds: float, seed: int,
                 collector: str = "scheduled", cycle_budget_ms: float = CYCLE_BUDGET_MS) -> None:
        if collector not in COLLECTORS:
            raise ValueError(f"bench latency: --collector must be one of {', '.join(COLLECTORS)}, not {collector!r}")
        if not (cycle_budget_ms >= 0 and math.isfinite(cycle_budget_ms)):
            raise ValueError(f"bench latency: --cycle-budget must be 0 (no limit) or a positive number of "
                             f"milliseconds, not {cycle_budget_ms}")
        self.collector = collector
        self.cycle_budget = cycle_budget_ms / 1000 if cycle_budget_ms > 0 else None
        """As the scheduler process bounds its cycles (``Scheduler.cycle_budget``), from the end of the fill."""
        self.rng = random.Random(seed)
        self.mean_duration = running / rate
        self.clock = ManualClock()
        self.cluster = MemoryCluster(self.clock, max_events=1000)
        self.scheduler = Scheduler(self.cluster, self.cluster, self.cluster, self.clock, default_conf(),
                                   stopwatch=time.perf_counter)
        self.events: list[_Event] = []
        self.seq = 0
        self.waiting: dict[str, Job] = {}
        self.jobs: list[Job] = []
        self.cycles: list[float] = []
        self.cut = 0
        """Cycles whose time budget deferred jobs to the next one."""
        self.snapshots: list[float] = []
        self.busy = 0.0
        self.index = 0
        self.arrivals_left = 0
        self.nodes = synthetic_cluster(nodes, topology=True)
        self.running_target, self.rate, self.seconds = running, rate, seconds
        self.collections = CollectionSchedule()
        """As the ``hetsched scheduler`` process collects (``cli.serve._run``): between cycles, old objects
        frozen (``collector`` "scheduled"; "automatic" settles only after the fill, "off" disables the
        collector during the run: the comparisons)."""
        self.pauses = PauseMeter()
        self.frozen_after_fill = 0

    def _push(self, at: float, kind: str, job: Job) -> None:
        self.seq += 1
        heapq.heappush(self.events, _Event(at, self.seq, kind, job))

    def _new_job(self) -> Job:
        self.index += 1
        return _job(self.rng, f"job-{self.index:06d}", self.mean_duration)

    def fill(self) -> int:
        """Create the nodes and ``running`` pods' worth of jobs, bind them all, and schedule each job's end
        (memoryless run times: a remaining time is a fresh draw). Returns the pods bound."""
        objects: list[AnyObject] = [*self.nodes]
        objects += [Queue.model_validate({"metadata": {"name": n}, "spec": {"weight": w}}) for n, w in QUEUES]
        for obj in objects:
            self.cluster.create(obj)
        pods = 0
        initial: list[Job] = []
        while pods < self.running_target:
            job = self._new_job()
            initial.append(job)
            pods += job.size
            self._create(job)
        bound = 0
        while True:
            result = self.scheduler.run_once()
            bound += len(result.decisions.binds)
            if not result.decisions.binds and not result.decisions.enqueued:
                break
        for job in initial:
            self._push(job.duration, "finish", job)
        at = 0.0
        while True:
            at += self.rng.expovariate(self.rate / mean_size())
            if at >= self.seconds:
                break
            job = self._new_job()
            job.arrival = at
            self._push(at, "arrive", job)
            self.arrivals_left += 1
        # like a long-running scheduler after its initial sync: what is there now (the arrivals' manifests too,
        # which a real scheduler would not hold) is out of the collector's way
        self.collections.settle()
        self.frozen_after_fill = gc.get_freeze_count()
        self.scheduler.cycle_budget = self.cycle_budget  # the fill is a one-off: it ran unbounded
        return bound

    def _create(self, job: Job) -> None:
        for obj in job.objects:
            self.cluster.create(obj)
        job.objects = []

    def _apply(self, event: _Event) -> None:
        job = event.job
        if event.kind == "arrive":
            self._create(job)
            self.waiting[job.key] = job
            self.jobs.append(job)
            self.arrivals_left -= 1
            return
        for pod in job.names():
            self.cluster.delete("Pod", pod)
        self.cluster.delete("PodGroup", job.key)
        self.waiting.pop(job.key, None)

    def run(self) -> None:
        """Until the last arrival is bound, or ``GRACE_SECONDS`` after the last one arrived; every collector
        pause is measured (``gc_pauses``)."""
        self.pauses.install()
        was_enabled = gc.isenabled()
        if self.collector == "off":
            gc.disable()
        try:
            self._run()
        finally:
            if was_enabled:
                gc.enable()
            self.pauses.uninstall()

    def _run(self) -> None:
        clock = self.clock
        end = self.seconds + GRACE_SECONDS
        while clock.time < end:
            began = time.perf_counter()
            while self.events and self.events[0].time <= clock.time:
                self._apply(heapq.heappop(self.events))
            spent = time.perf_counter() - began
            clock.time += spent
            self.busy += spent
            if self.waiting:
                began = time.perf_counter()
                result = self.scheduler.run_once()
                spent = time.perf_counter() - began
                clock.time += spent
                self.busy += spent
                self.cycles.append(spent)
                self.snapshots.append(result.timings.snapshot)
                self.cut += result.deferred
                self._decided(result.decisions.binds)
                for key in result.decisions.unschedulable:
                    refused = self.waiting.get(key)
                    if refused is not None:
                        refused.refused = True
                del result
                began = time.perf_counter()  # the process's collections between cycles take real time too
                if self.collector == "scheduled":
                    self.collections.between_cycles()
                spent = time.perf_counter() - began
                clock.time += spent
                self.busy += spent
            elif self.arrivals_left and self.events:
                clock.time = max(clock.time, self.events[0].time)
            else:
                return

    def _decided(self, binds: list[Any]) -> None:
        for bind in binds:
            job = self.waiting.get(bind.job)
            if job is None:
                continue
            job.bound += 1
            if job.bound == job.size:
                job.decided = self.clock.time
                del self.waiting[bind.job]
                self._push(self.clock.time + job.duration, "finish", job)

    def figures(self) -> dict[str, Any]:
        measured = [j for j in self.jobs if j.arrival >= min(WARMUP_SECONDS, self.seconds / 4)]
        prompt = [(j.size, j.decided - j.arrival) for j in measured if j.decided is not None and not j.refused]
        waited = [j.decided - j.arrival for j in measured if j.decided is not None and j.refused]
        return {
            "jobs_arrived": len(self.jobs),
            "pods_arrived": sum(j.size for j in self.jobs),
            "jobs_measured": len(measured),
            "jobs_waiting_at_end": sum(1 for j in measured if j.decided is None),
            "latency_ms": stats([wait for _, wait in prompt]),
            "latency_8_pod_gangs_ms": stats([wait for size, wait in prompt if size == 8]),
            "jobs_that_waited_for_capacity": len(waited),
            "latency_after_waiting_for_capacity_ms": stats(waited),
            "cycles": len(self.cycles),
            "cycle_ms": stats(self.cycles),
            "cycle_budget_ms": round(self.cycle_budget * 1000, 3) if self.cycle_budget is not None else None,
            "cycles_cut_by_budget": self.cut,
            "snapshot_ms": stats(self.snapshots),
            "busy_share": round(self.busy / self.clock.time, 3) if self.clock.time else None,
            "collector": self.collector,
            "gc_pauses": self.pauses.figures(),
            "gc_settlings": self.collections.settlings,
            "frozen_objects": {"after_fill": self.frozen_after_fill, "at_end": gc.get_freeze_count()},
        }


COLLECTORS = ("scheduled", "automatic", "off")
"""How a run's cyclic collections happen: as the scheduler process does them (between cycles, old objects
frozen: ``metrics.gc_pauses``), CPython's automatic ones only (after one settling after the fill: how this
benchmark and the process ran before), or none (the floor: what the scheduler's own work costs)."""


def mean_size() -> float:
    """Pods per arriving job, on average."""
    return sum(s * w for s, w in zip(SIZES, SIZE_WEIGHTS, strict=True)) / sum(SIZE_WEIGHTS)


def check_sizes(nodes: int, running: int, rate: float, seconds: float) -> None:
    """A ValueError naming the option when a size or rate is out of range (the run would never end, or
    hold more than memory allows)."""
    if not 10 <= nodes <= MAX_NODES:
        raise ValueError(f"bench latency: --nodes must be between 10 and {MAX_NODES:,}, not {nodes}")
    for option, value in (("--running", running), ("--arrival-rate", rate), ("--seconds", seconds)):
        if not (value > 0 and math.isfinite(value)):  # NaN fails too
            raise ValueError(f"bench latency: {option} must be a positive number, not {value}")
    if running > MAX_PODS or rate * seconds > MAX_PODS:
        raise ValueError(f"bench latency: --running and --arrival-rate × --seconds must each stay under "
                         f"{MAX_PODS:,} pods (the run holds them all in memory)")


def run_latency_benchmark(nodes: int, running: int, rate: float, *, seconds: float = 10.0,
                          seed: int = 1, collector: str = "scheduled",
                          cycle_budget_ms: float = CYCLE_BUDGET_MS) -> dict[str, Any]:
    check_sizes(nodes, running, rate, seconds)
    started = time.perf_counter()
    run = LatencyRun(nodes, running, rate, seconds, seed, collector, cycle_budget_ms)
    bound = run.fill()
    filled = time.perf_counter()
    fill_peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    steady = _reset_peak_rss()
    after_fill_kb = status_kb("VmRSS")  # after the reset: the new peak can only be at or above it
    run.run()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    steady_kb = status_kb("VmHWM")  # the same counters as VmRSS, so the two compare
    figures: dict[str, Any] = {
        "mode": "embedded", "nodes": nodes, "running_target": running, "running_at_start": bound, "arrival_rate": rate,
        "seconds": seconds, "seed": seed, **run.figures(), "fill_seconds": round(filled - started, 2),
        "peak_rss_mb": round(max(fill_peak_kb, peak_kb, steady_kb or 0) / 1024, 1),
    }
    if steady and after_fill_kb is not None and steady_kb is not None:
        figures["rss_after_fill_mb"] = round(after_fill_kb / 1024, 1)
        figures["steady_peak_rss_mb"] = round(steady_kb / 1024, 1)
    return figures


def status_kb(field_name: str, pid: int | str = "self") -> int | None:
    """A ``/proc/PID/status`` figure in kB (Linux: ``VmRSS``, ``VmHWM`` — the peak), or None where there is
    none (another system, or the process is gone). ``bench live`` reads its binders' with it."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(f"{field_name}:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (``clear_refs`` 5, Linux ≥ 4.0) so the peak read afterwards is the
    steady state's alone, not the fill's one-off scheduling of every running pod. False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        return False
    return True
