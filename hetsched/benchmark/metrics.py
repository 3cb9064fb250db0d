"""``hetsched bench metrics``: what Prometheus metrics cost the scheduler, measured in one run.

Who calls it: the CLI. The same synthetic backlog (``benchmark.workload``) is drained twice on fresh
embedded clusters with full cycles (``Scheduler.run_once``: decide, bind, status): once bare, once with a
stopwatch and :class:`~hetsched.metrics.scheduler.SchedulerMetrics` observing every cycle — each twice,
in the order bare, metrics, metrics, bare, keeping each variant's faster run. Reports both rates and their
ratio (noisy on a busy machine: a few per cent either way), the share of the cycle time spent inside the
metrics observer (the direct cost, stable), then the cost of one scrape of the final state (every node's
chip series) and the exposition's size — what decides whether a 10,000-node cluster can be scraped every
15 s.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from prometheus_client import generate_latest

from hetsched.api.objects import AnyObject
from hetsched.benchmark.workload import synthetic_workload
from hetsched.cluster.memory import MemoryCluster
from hetsched.metrics.scheduler import SchedulerMetrics
from hetsched.scheduler.cache import SchedulerCache
from hetsched.scheduler.defaults import default_conf
from hetsched.scheduler.engine.runner import CycleResult, Scheduler


class _Clock:
    def now(self) -> float:
        return time.monotonic()


def _drain(objects: list[AnyObject], metrics: SchedulerMetrics | None) -> tuple[int, float, float]:
    """Drain the backlog; (pods bound, seconds in cycles, seconds of those inside the metrics observer)."""
    clock = _Clock()
    cluster = MemoryCluster(clock, max_events=1000)
    scheduler = Scheduler(cluster, cluster, cluster, clock, default_conf(), evictor=cluster,
                          stopwatch=time.perf_counter if metrics is not None else None)
    observed = [0.0]
    if metrics is not None:
        def timed(cache: SchedulerCache, result: CycleResult) -> None:
            started = time.perf_counter()
            metrics(cache, result)
            observed[0] += time.perf_counter() - started

        scheduler.observers.append(timed)
    for obj in objects:
        cluster.create(obj)
    gc.collect()
    gc.freeze()
    bound = 0
    seconds = 0.0
    while True:
        started = time.perf_counter()
        result = scheduler.run_once()
        seconds += time.perf_counter() - started
        bound += len(result.decisions.binds)
        if not result.decisions.binds and not result.decisions.enqueued:
            break
    gc.unfreeze()
    scheduler.close()
    return bound, seconds, observed[0]


def run_metrics_benchmark(nodes: int, pods: int, *, seed: int = 1, topology: bool = True,
                          scrapes: int = 3) -> dict[str, Any]:
    if nodes < 10 or pods < 1:
        raise ValueError("bench metrics: need at least 10 nodes and 1 pod")
    workload = synthetic_workload(nodes, pods, seed, topology)
    objects: list[AnyObject] = [*workload.nodes, *workload.queues, *workload.podgroups, *workload.pods]
    # bare, with metrics, then each again: the second drain of a process runs on a bigger heap, so each
    # variant gets one early and one late run and keeps its faster one
    runs: dict[str, list[tuple[int, float, float]]] = {"bare": [], "metrics": []}
    metrics = SchedulerMetrics()
    for variant in ("bare", "metrics", "metrics", "bare"):
        runs[variant].append(_drain(objects, metrics if variant == "metrics" else None))
        gc.collect()
    bare_bound, bare_seconds, _ = min(runs["bare"], key=lambda run: run[1])
    bound, seconds, observer = min(runs["metrics"], key=lambda run: run[1])
    scrape_seconds = []
    size = 0
    for _ in range(scrapes):
        metrics.forget_chip_tables()  # measure the chip accounting too, not only the formatting
        started = time.perf_counter()
        size = len(generate_latest(metrics.registry))
        scrape_seconds.append(time.perf_counter() - started)
    bare_rate = bare_bound / bare_seconds if bare_seconds else 0.0
    rate = bound / seconds if seconds else 0.0
    return {
        "nodes": nodes, "pods": len(workload.pods), "topology": topology,
        "pods_bound": {"bare": bare_bound, "with_metrics": bound},
        "pods_per_second": {"bare": round(bare_rate, 1), "with_metrics": round(rate, 1)},
        "metrics_rate_ratio": round(rate / bare_rate, 3) if bare_rate else None,
        "observer_share_of_cycle_time": round(observer / seconds, 4) if seconds else None,
        "scrape_seconds": round(min(scrape_seconds), 3),
        "exposition_bytes": size,
    }
