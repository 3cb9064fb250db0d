"""``hetsched bench engine``: drain a synthetic pending backlog and report pods placed per second.

Who calls it: the CLI and ``bench/engine_sweep.py`` (which runs one process per cluster size so each peak
RSS is its own). Measures, in one run:

- ``pods_per_second``: pods bound / time spent in scheduling cycles (snapshot + session + actions),
  cycles repeated until one binds nothing (a full drain);
- ``end_to_end_pods_per_second``: the same, also counting the binds applied to the embedded store and the
  cache's handling of the resulting watch events;
- ``naive_pods_per_second``: the per-pod, per-node loop of ``benchmark.naive`` on the same cluster and
  jobs, over a time-bounded sample (it would take hours to drain 100k pods at 10k nodes);
- ``peak_rss_mb``: the process's peak resident set size.
"""

from __future__ import annotations

import gc
import resource
import time
from typing import Any

from hetsched.api.objects import AnyObject
from hetsched.benchmark.naive import NaiveScheduler
from hetsched.benchmark.workload import synthetic_workload
from hetsched.cluster.memory import MemoryCluster
from hetsched.scheduler.defaults import default_conf
from hetsched.scheduler.engine.runner import Scheduler


class _WallClock:
    def now(self) -> float:
        return time.monotonic()


def run_engine_benchmark(nodes: int, pods: int, *, naive_seconds: float = 20.0, seed: int = 1,
                         topology: bool = False, network: bool = False) -> dict[str, Any]:
    if nodes < 10 or pods < 1:
        raise ValueError("bench engine: need at least 10 nodes and 1 pod")
    started = time.perf_counter()
    workload = synthetic_workload(nodes, pods, seed, topology, network)
    generated = time.perf_counter()

    clock = _WallClock()
    cluster = MemoryCluster(clock, max_events=1000)
    scheduler = Scheduler(cluster, cluster, cluster, clock, default_conf())
    objects: list[AnyObject] = [*workload.nodes, *workload.hypernodes, *workload.queues, *workload.podgroups,
                                *workload.pods]
    for obj in objects:
        cluster.create(obj)
    # Like a long-running scheduler after its initial sync: move the synced objects out of the cyclic
    # collector's reach, so collections only scan what changes afterwards.
    gc.collect()
    gc.freeze()
    ingested = time.perf_counter()

    decide_seconds = 0.0
    apply_seconds = 0.0
    bound = 0
    cycles = 0
    while True:
        t0 = time.perf_counter()
        _, decisions = scheduler.decide()
        t1 = time.perf_counter()
        for key, update in decisions.podgroups.items():
            if update.phase is not None:
                cluster.update_podgroup_status(key, update.phase, None)
        for bind in decisions.binds:
            scheduler.cache.assume(bind.pod, bind.node, bind.annotations)
            cluster.bind(bind.pod, bind.node, bind.annotations)
        t2 = time.perf_counter()
        decide_seconds += t1 - t0
        apply_seconds += t2 - t1
        cycles += 1
        bound += len(decisions.binds)
        if not decisions.binds and not decisions.enqueued:
            break

    jobs = list(zip(workload.podgroups, _pods_by_group(workload), strict=True))
    naive = NaiveScheduler(workload.nodes)
    attempted, naive_elapsed = naive.run(jobs, naive_seconds, time.perf_counter)

    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    engine_rate = bound / decide_seconds if decide_seconds else 0.0
    naive_rate = attempted / naive_elapsed if naive_elapsed else 0.0
    return {
        "topology": topology,
        "network": network,
        "hypernodes": len(workload.hypernodes),
        "bounded_jobs": sum(1 for g in workload.podgroups if g.spec.networkTopology is not None),
        "nodes": nodes,
        "pods": len(workload.pods),
        "jobs": len(workload.podgroups),
        "pods_bound": bound,
        "cycles": cycles,
        "engine_seconds": round(decide_seconds, 4),
        "pods_per_second": round(engine_rate, 1),
        "apply_seconds": round(apply_seconds, 4),
        "end_to_end_pods_per_second": round(bound / (decide_seconds + apply_seconds), 1),
        "microseconds_per_pod": round(1e6 * decide_seconds / max(bound, 1), 2),
        "naive_pods_sampled": attempted,
        "naive_seconds": round(naive_elapsed, 3),
        "naive_pods_per_second": round(naive_rate, 2),
        "speedup_vs_naive": round(engine_rate / naive_rate, 1) if naive_rate else None,
        "generate_seconds": round(generated - started, 3),
        "ingest_seconds": round(ingested - generated, 3),
        "peak_rss_mb": round(peak_kb / 1024, 1),
    }


def _pods_by_group(workload: Any) -> list[list[Any]]:
    by_group: dict[str, list[Any]] = {}
    for pod in workload.pods:
        by_group.setdefault(pod.metadata.annotations["scheduling.k8s.io/group-name"], []).append(pod)
    return [by_group[g.metadata.name] for g in workload.podgroups]
