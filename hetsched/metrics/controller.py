"""The controllers' metrics: jobs by phase, fault restarts, work done per round and how long it took.

Who calls it: ``hetsched controller`` after every round of its Job, PodGroup and fault controllers, and the
simulator after each settle. :meth:`ControllerMetrics.observe_round` reads the store's Jobs (O(jobs), in the
calling thread; scrapes read the copy it keeps); :meth:`ControllerMetrics.restarted` listens to the fault
controller.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hetsched.api.objects import Job
from hetsched.controllers.fault import Restart
from hetsched.metrics.scheduler import DURATION_BUCKETS
from hetsched.ports import ObjectStore

JOBS_REFRESH_SECONDS = 5.0
"""The Jobs-by-phase gauges are refreshed at most this often (a round runs every 0.2 s; listing every Job
that often would cost more than the gauges are worth)."""


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.round = Histogram("hetsched_controller_round_duration_seconds",
                               "One round of the Job, PodGroup and fault controllers until idle", registry=r,
                               buckets=DURATION_BUCKETS)
        self.items = Counter("hetsched_controller_work_items", "Work items processed", ["controller"], registry=r)
        self.restarts = Counter("hetsched_fault_restarts", "Fault restarts by level (pod, job, escalated)",
                                ["level"], registry=r)
        self.restarted_pods = Counter("hetsched_fault_restarted_pods", "Pods deleted by fault restarts", registry=r)
        self._listed = -JOBS_REFRESH_SECONDS
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str], int] = {}
        self._retries: dict[str, int] = {}
        r.register(_JobCollector(self))

    def restarted(self, restart: Restart) -> None:
        """A fault restart (register as a ``FaultController`` listener)."""
        self.restarts.labels(restart.level).inc()
        self.restarted_pods.inc(len(restart.pods))

    def observe_round(self, store: ObjectStore, seconds: float, items: dict[str, int], *,
                      list_jobs: bool = True) -> None:
        """Account one round; ``list_jobs`` refreshes the Jobs-by-phase gauges (O(jobs), at most every
        :data:`JOBS_REFRESH_SECONDS`; the simulator does it once at the end instead)."""
        self.round.observe(seconds)
        for controller, count in items.items():
            if count:
                self.items.labels(controller).inc(count)
        if list_jobs and time.monotonic() - self._listed >= JOBS_REFRESH_SECONDS:
            self._listed = time.monotonic()
            self.observe_jobs(store.list("Job"))

    def observe_jobs(self, jobs: Sequence[object]) -> None:
        counts: dict[tuple[str, str], int] = {}
        retries: dict[str, int] = {}
        for job in jobs:
            if not isinstance(job, Job):
                continue
            queue = job.spec.queue or "default"
            phase = job.status.state.phase or "Pending"
            counts[(queue, phase)] = counts.get((queue, phase), 0) + 1
            retries[queue] = retries.get(queue, 0) + job.status.retryCount
        with self._lock:
            self._jobs, self._retries = counts, retries


class _JobCollector(Collector):
    def __init__(self, metrics: ControllerMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        with self.metrics._lock:
            jobs, retries = dict(self.metrics._jobs), dict(self.metrics._retries)
        family = GaugeMetricFamily("hetsched_jobs", "Volcano Jobs by queue and phase", labels=["queue", "phase"])
        for (queue, phase), count in sorted(jobs.items()):
            family.add_metric([queue, phase], count)
        yield family
        retried = GaugeMetricFamily("hetsched_job_retries", "Sum of retryCount over the queue's Jobs",
                                    labels=["queue"])
        for queue, count in sorted(retries.items()):
            retried.add_metric([queue], count)
        yield retried
