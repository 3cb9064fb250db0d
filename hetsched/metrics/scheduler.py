"""The scheduler's metrics: cycle, action and plugin durations, placement counters, queue and chip state.

Who calls it: ``hetsched scheduler`` (served on ``/metrics``) and the simulator (``--metrics FILE``) register
a :class:`SchedulerMetrics` as an observer of :class:`~hetsched.scheduler.engine.runner.Scheduler`; it sees every
finished cycle. Counters and histograms are updated per cycle (O(binds + unschedulable jobs)); state gauges
(queues, pending work, per-node chips) are computed from the last cycle's snapshot when scraped, so a cycle
pays nothing for them. A snapshot is never changed once its cycle is over, so a scrape from the HTTP
thread reads a consistent cycle.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hetsched.api.accelerators import accelerator_kind
from hetsched.devices.catalog import PolicySettings
from hetsched.devices.partitions import GEOMETRIES
from hetsched.scheduler.cache import SchedulerCache
from hetsched.scheduler.contract import network_fragmentation
from hetsched.scheduler.contract.chips import ChipAccounts, ChipTable
from hetsched.scheduler.contract.reasons import label as reason_label
from hetsched.scheduler.contract.snapshot import Snapshot
from hetsched.scheduler.engine.runner import CycleResult

log = logging.getLogger("hetsched.metrics")
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
WAIT_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400, 259200)
"""Queue waits span seconds (an idle cluster) to days (a busy one)."""


def unit_of(resource: str) -> tuple[str, float]:
    """(unit label, divisor from milli-units) for a resource column."""
    if resource == "cpu":
        return "core", 1000.0
    if resource == "memory" or resource.endswith("storage"):
        return "byte", 1000.0
    if resource == "pods":
        return "pod", 1000.0
    if accelerator_kind(resource) is not None:
        return "chip", 1000.0
    return "unit", 1000.0


class SchedulerMetrics:
    """Call it with ``(cache, result)`` after every cycle (``Scheduler.observers``)."""

    def __init__(self, registry: CollectorRegistry | None = None, settings: PolicySettings | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.e2e = Histogram("hetsched_e2e_scheduling_duration_seconds",
                             "One scheduling cycle end to end: snapshot, session, binds and status writes",
                             registry=r, buckets=DURATION_BUCKETS)
        self.snapshot_seconds = Histogram("hetsched_snapshot_duration_seconds", "Building the cycle's snapshot",
                                          registry=r, buckets=DURATION_BUCKETS)
        self.session = Histogram("hetsched_session_duration_seconds",
                                 "Session open, actions and close (the decision, without snapshot and apply)",
                                 registry=r, buckets=DURATION_BUCKETS)
        self.action = Histogram("hetsched_action_duration_seconds", "One action in one cycle", ["action"],
                                registry=r, buckets=DURATION_BUCKETS)
        self.plugin = Histogram("hetsched_plugin_duration_seconds", "One plugin at session open or close",
                                ["plugin", "point"], registry=r, buckets=DURATION_BUCKETS)
        self.apply = Histogram("hetsched_apply_duration_seconds", "Applying decisions: evictions, binds, status",
                               registry=r, buckets=DURATION_BUCKETS)
        self.pod_latency = Histogram(
            "hetsched_pod_scheduling_duration_seconds",
            "From pod creation to its bind, on the scheduler's clock (simulated time in a simulation)",
            ["kind"], registry=r, buckets=WAIT_BUCKETS)
        self.queue_wait = Histogram("hetsched_job_queue_wait_seconds",
                                    "From PodGroup creation to Running (its gang placed)", ["queue"],
                                    registry=r, buckets=WAIT_BUCKETS)
        self.cycles = Counter("hetsched_scheduling_cycles", "Scheduling cycles run", registry=r)
        self.scheduled = Counter("hetsched_pods_scheduled", "Pods bound, by accelerator kind and model",
                                 ["kind", "model"], registry=r)
        self.unschedulable = Counter(
            "hetsched_pods_unschedulable",
            "Pending pods left unplaced by a cycle, by first reason (one count per pod per cycle)",
            ["reason"], registry=r)
        self.bind_failures = Counter("hetsched_bind_failures", "Binds the API refused", registry=r)
        self.set_aside = Counter("hetsched_scheduler_set_aside", "Jobs set aside because handling them raised "
                                 "(the rest of the cycle went on without them)", registry=r)
        self.deferred = Counter("hetsched_scheduler_deferred_jobs", "Jobs a cycle's time budget left to the next "
                                "cycle, which ran at once (--cycle-budget)", registry=r)
        self.evictions = Counter("hetsched_evictions", "Evictions requested", ["action"], registry=r)
        self.eviction_failures = Counter("hetsched_eviction_failures", "Evictions refused or moot", registry=r)
        self.accounts = ChipAccounts(settings)
        self._errors: set[str] = set()
        self._kind_of: dict[str, str] = {}
        """Resource name → accelerator kind ("" for none), memoised: binds come by the thousand."""
        self._lock = threading.Lock()
        self._last: tuple[Snapshot, dict[str, str]] | None = None
        self._generation = 0
        """Counts the snapshots observed: the chip tables are cached per generation (never by ``id()``, which
        a later snapshot may reuse once the last one is freed)."""
        self._tables: tuple[int, list[ChipTable]] | None = None
        self.templates: dict[tuple[str, str, str], int] = {}
        """(resource, geometry, template) → partitions held, copied from the cache after each cycle."""
        r.register(_StateCollector(self))

    def __call__(self, cache: SchedulerCache, result: CycleResult) -> None:
        """Account one cycle. Never raises: a metrics bug must not stop scheduling (it is logged once per
        distinct error, and the cycle's series are skipped)."""
        try:
            self._observe(cache, result)
        except Exception as exc:
            if str(exc) not in self._errors:
                self._errors.add(str(exc))
                log.exception("metrics: cannot account a cycle")

    def _observe(self, cache: SchedulerCache, result: CycleResult) -> None:
        timings = result.timings
        if cache.devices.templates:
            self.templates = dict(cache.devices.templates)
        self.cycles.inc()
        self.e2e.observe(timings.total)
        self.snapshot_seconds.observe(timings.snapshot)
        self.session.observe(timings.session)
        self.apply.observe(timings.apply)
        for action, seconds in timings.actions.items():
            self.action.labels(action).observe(seconds)
        for (plugin, point), seconds in timings.plugins.items():
            self.plugin.labels(plugin, point).observe(seconds)
        snapshot, decisions = result.snapshot, result.decisions
        failed = {failure.pod for failure in result.failed_binds}
        scheduled: dict[tuple[str, str], int] = {}
        latencies: dict[str, list[float]] = {}
        kind_of = self._kind_of
        for bind in decisions.binds:
            pod = cache.pod(bind.pod) if bind.pod not in failed else None
            if pod is None:
                continue
            kind, model = "cpu", ""
            for resource in pod.spec.requests:
                found = kind_of.get(resource)
                if found is None:
                    found = kind_of[resource] = accelerator_kind(resource) or ""
                if found:
                    devices = snapshot.devices.get(resource)
                    row = snapshot.nodes.index.get(bind.node)
                    kind, model = found, devices.models[row] if devices is not None and row is not None else ""
                    break
            scheduled[(kind, model)] = scheduled.get((kind, model), 0) + 1
            created = pod.metadata.creationTimestamp
            if created is not None:
                latencies.setdefault(kind, []).append(max(result.now - created, 0.0))
        for (kind, model), count in scheduled.items():  # one labelled update per kind, not per pod
            self.scheduled.labels(kind, model).inc(count)
        for kind, values in latencies.items():
            child = self.pod_latency.labels(kind)
            for value in values:
                child.observe(value)
        self.bind_failures.inc(len(result.failed_binds))
        self.set_aside.inc(len(result.set_aside))
        self.deferred.inc(len(decisions.deferred))
        for eviction in decisions.evictions:
            self.evictions.labels(eviction.action).inc()
        self.eviction_failures.inc(len(result.failed_evictions))
        for key, status in decisions.unschedulable.items():
            job = snapshot.job(key)
            pods = sum(len(g.pending) for g in job.groups) if job is not None else 0
            if pods:
                self.unschedulable.labels(reason_label(status.reasons[0]) if status.reasons else "other").inc(pods)
        for key, update in decisions.podgroups.items():
            job = snapshot.job(key)
            if update.phase == "Running" and job is not None and job.podgroup.status.phase in ("Pending", "Inqueue"):
                self.queue_wait.labels(job.queue).observe(max(result.now - job.created, 0.0))
        phases = {key: update.phase for key, update in decisions.podgroups.items() if update.phase is not None}
        with self._lock:
            self._last = (snapshot, phases)
            self._generation += 1

    def chip_tables(self) -> list[ChipTable]:
        """Chip accounting of the last cycle's snapshot (computed once per snapshot)."""
        with self._lock:
            last, generation, cached = self._last, self._generation, self._tables
        if last is None:
            return []
        if cached is not None and cached[0] == generation:
            return cached[1]
        tables = self.accounts.tables(last[0])
        with self._lock:
            if self._generation == generation:  # not if a newer snapshot came meanwhile
                self._tables = (generation, tables)
        return tables

    def forget_chip_tables(self) -> None:
        """Drop the cached chip accounting, so the next scrape computes it again (the benchmark times that)."""
        with self._lock:
            self._tables = None

    def last(self) -> tuple[Snapshot, dict[str, str]] | None:
        with self._lock:
            return self._last


class _StateCollector(Collector):
    """Gauges computed at scrape time from the last cycle."""

    def __init__(self, metrics: SchedulerMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterator[Metric]:
        return iter(())  # state series come and go with queues and nodes

    def collect(self) -> Iterator[Metric]:
        last = self.metrics.last()
        if last is None:
            return
        snapshot, phases = last
        yield from _queue_families(snapshot, phases)
        yield from _network_families(snapshot)
        yield from _chip_families(self.metrics.chip_tables())
        yield from _partition_families(snapshot, self.metrics.templates)


def _network_families(snapshot: Snapshot) -> Iterator[Metric]:
    """Per tier of the HyperNode tree: free servers, wholly free HyperNodes, and free servers stranded in
    HyperNodes too small for the largest hard-bounded gang waiting (``scheduler.contract.network_fragmentation``)."""
    tiers = network_fragmentation.by_tier(snapshot)
    if not tiers:
        return
    free = GaugeMetricFamily("hetsched_hypernode_free_servers", "Free servers inside HyperNodes of the tier",
                             labels=["tier"])
    whole = GaugeMetricFamily("hetsched_hypernode_whole_free", "HyperNodes of the tier all of whose servers are free",
                              labels=["tier"])
    stranded = GaugeMetricFamily(
        "hetsched_hypernode_fragmented_servers",
        "Free servers in HyperNodes of the tier too small for the largest hard-bounded gang waiting",
        labels=["tier"])
    for entry in tiers:
        free.add_metric([str(entry.tier)], entry.free)
        whole.add_metric([str(entry.tier)], entry.whole)
        stranded.add_metric([str(entry.tier)], entry.fragmented)
    needed = GaugeMetricFamily("hetsched_hypernode_largest_waiting_servers",
                               "Servers the largest hard-bounded gang waiting needs in one HyperNode (0: none waits)")
    needed.add_metric([], tiers[0].needed)
    yield from (free, whole, stranded, needed)


def _queue_families(snapshot: Snapshot, phases: dict[str, str]) -> Iterator[Metric]:
    pending = GaugeMetricFamily("hetsched_pending_pods", "Pods waiting for a node, by queue", labels=["queue"])
    groups = GaugeMetricFamily("hetsched_podgroups", "PodGroups by queue and phase", labels=["queue", "phase"])
    by_queue: dict[str, int] = {name: 0 for name in snapshot.queues}
    by_phase: dict[tuple[str, str], int] = {}
    for key, job in snapshot.active.items():  # read at scrape time: never the settled records (see Snapshot)
        by_queue[job.queue] = by_queue.get(job.queue, 0) + sum(len(g.pending) for g in job.groups)
        phase = phases.get(key, job.phase)
        by_phase[(job.queue, phase)] = by_phase.get((job.queue, phase), 0) + 1
    for name, count in snapshot.settled_by_queue.items():  # settled: Running, nothing pending
        by_queue.setdefault(name, 0)
        by_phase[(name, "Running")] = by_phase.get((name, "Running"), 0) + count
    for name, count in sorted(by_queue.items()):
        pending.add_metric([name], count)
    for (name, phase), count in sorted(by_phase.items()):
        groups.add_metric([name, phase], count)
    yield pending
    yield groups
    missing = GaugeMetricFamily("hetsched_pods_waiting_for_podgroup",
                                "Pending pods that name a PodGroup that does not exist (they wait for it)")
    missing.add_metric([], sum(snapshot.missing_groups.values()))
    yield missing
    families: dict[str, GaugeMetricFamily] = {
        name: GaugeMetricFamily(f"hetsched_queue_{name}", text, labels=["queue", "resource", "unit"])
        for name, text in (("allocated", "Resources held by the queue's pods"),
                           ("deserved", "The queue's deserved resources (proportion plugin)"),
                           ("capability", "The queue's capability (limit); absent where unlimited"),
                           ("request", "Held plus still requested by the queue's jobs"))}
    state = GaugeMetricFamily("hetsched_queue_state", "1 for the queue's current state", labels=["queue", "state"])
    names = snapshot.resources.names
    for queue in snapshot.queues.values():
        state.add_metric([queue.name, queue.state], 1)
        vectors: dict[str, Any] = {"allocated": queue.allocated, "capability": queue.capability,
                                   "request": queue.request, "deserved": queue.deserved}
        for name, vector in vectors.items():
            if vector is None:
                continue
            for column, value in enumerate(vector.tolist()):
                if not math.isfinite(value) or (value == 0 and name != "capability"):
                    continue
                unit, divisor = unit_of(names[column])
                families[name].add_metric([queue.name, names[column], unit], value / divisor)
    yield state
    yield from families.values()
    yield from _budget_families(snapshot)


def _budget_families(snapshot: Snapshot) -> Iterator[Metric]:
    """Per queue and resource, from each queue's ``QueueUsage``: hours used this period, the budget, whether
    it is used up, and the decayed hours fair share orders by (``controllers.usage``)."""
    labels = ["queue", "resource"]
    used = GaugeMetricFamily("hetsched_queue_usage_hours", "Hours the queue's pods used this budget period "
                             "(chip-hours, core-hours, GiB-hours)", labels=labels)
    budget = GaugeMetricFamily("hetsched_queue_budget_hours", "The queue's budget per period", labels=labels)
    exhausted = GaugeMetricFamily("hetsched_queue_budget_exhausted", "1 where this period has used the budget up",
                                  labels=labels)
    decayed = GaugeMetricFamily("hetsched_queue_decayed_usage_hours",
                                "Hours used, halved every half-life since (what fairshare orders by)", labels=labels)
    for queue in sorted(snapshot.queues.values(), key=lambda q: q.name):
        for family, values in ((used, queue.used), (budget, queue.budget), (decayed, queue.decayed)):
            for resource, hours in sorted(values.items()):
                family.add_metric([queue.name, resource], hours)
        for resource in sorted(queue.budget):
            exhausted.add_metric([queue.name, resource], 1.0 if resource in queue.exhausted else 0.0)
    yield from (used, budget, exhausted, decayed)


def _partition_families(snapshot: Snapshot, templates: dict[tuple[str, str, str], int]) -> Iterator[Metric]:
    """Per template: partitions held by bound pods, and the chips carved into partitions (per mode and model)."""
    carved_any = [(resource, devices) for resource, devices in sorted(snapshot.devices.items())
                  if devices.carving is not None and any(devices.carving.modes)]
    if not carved_any:
        return
    held = GaugeMetricFamily("hetsched_partitions_allocated", "Chip partitions held by bound pods, per template",
                             labels=["kind", "mode", "geometry", "template"])
    chips = GaugeMetricFamily("hetsched_partition_chips", "Partitionable chips, carved (holding a partition) or "
                              "not", labels=["kind", "mode", "geometry", "state"])
    counts: dict[tuple[str, str, str, str], int] = {}
    modes: dict[str, str] = {g.name: g.mode for g in GEOMETRIES}
    for (resource, name, template), count in templates.items():
        if count > 0 and name in modes:
            held_key = (accelerator_kind(resource) or "other", modes[name], name, template)
            counts[held_key] = counts.get(held_key, 0) + count
    for held_key, count in sorted(counts.items()):
        held.add_metric(list(held_key), count)
    for resource, devices in carved_any:
        carving = devices.carving
        assert carving is not None
        states: dict[tuple[str, str, str, str], int] = {}
        mask = carving.mask()
        for row, mode in enumerate(carving.modes):
            geometry = carving.geometry(row, devices.models[row]) if mode and snapshot.nodes.exists[row] else None
            if geometry is None:
                continue
            healthy = int(devices.chips[row]) & ~int(devices.unhealthy[row])
            carved = (int(mask[row]) & healthy).bit_count()
            for state, count in (("carved", carved), ("uncarved", healthy.bit_count() - carved)):
                key = (accelerator_kind(resource) or "other", mode, geometry.name, state)
                states[key] = states.get(key, 0) + count
        for key, count in sorted(states.items()):
            chips.add_metric(list(key), count)
    yield held
    yield chips


def _chip_families(tables: list[ChipTable]) -> Iterator[Metric]:
    labels = ["node", "kind", "model"]
    node_families = {
        "physical": GaugeMetricFamily("hetsched_node_chips_physical", "Chips in the node's inventory", labels=labels),
        "advertised": GaugeMetricFamily("hetsched_node_chips_allocatable",
                                        "Chips the node advertises (its allocatable, from the device plugin)",
                                        labels=labels),
        "accounted": GaugeMetricFamily("hetsched_node_chips_accounted",
                                       "Chips the scheduler places on: healthy and advertised", labels=labels),
        "mismatch": GaugeMetricFamily("hetsched_node_chips_mismatch",
                                      "Allocatable minus healthy physical chips (non-zero: the device plugin and "
                                      "the hardware disagree)", labels=labels),
        "held": GaugeMetricFamily("hetsched_node_chips_allocated", "Chips held by bound pods", labels=labels),
        "fragmentation": GaugeMetricFamily(
            "hetsched_node_chip_fragmentation_ratio",
            "Share of free chips that cannot serve a request of the node's largest legal size", labels=labels),
    }
    health = GaugeMetricFamily("hetsched_node_chips_health", "Chips by health state", labels=[*labels, "state"])
    cluster = GaugeMetricFamily("hetsched_chips", "Chips in the cluster by state (allocated, free, unhealthy)",
                                labels=["kind", "model", "state"])
    fragmentation = GaugeMetricFamily("hetsched_chip_fragmentation_ratio",
                                      "Cluster-wide share of free chips stranded by topology fragmentation",
                                      labels=["kind", "model"])
    for table in tables:
        totals: dict[str, dict[str, float]] = {}
        for i, node in enumerate(table.nodes):
            values = [node, table.kind, table.models[i]]
            physical, healthy = int(table.physical[i]), int(table.healthy[i])
            free, stranded = int(table.free[i]), int(table.stranded[i])
            node_families["physical"].add_metric(values, physical)
            node_families["advertised"].add_metric(values, int(table.advertised[i]))
            node_families["accounted"].add_metric(values, int(table.accounted[i]))
            node_families["mismatch"].add_metric(values, int(table.mismatch[i]))
            node_families["held"].add_metric(values, int(table.held[i]))
            node_families["fragmentation"].add_metric(values, stranded / free if free else 0.0)
            network = int(table.network_unhealthy[i])
            health.add_metric([*values, "Healthy"], healthy - network)
            health.add_metric([*values, "NetworkUnhealthy"], network)
            health.add_metric([*values, "Unhealthy"], physical - healthy)
            total = totals.setdefault(table.models[i], {"allocated": 0, "free": 0, "unhealthy": 0, "stranded": 0})
            total["allocated"] += int(table.held[i])
            total["free"] += free
            total["unhealthy"] += physical - healthy
            total["stranded"] += stranded
        for model, total in sorted(totals.items()):
            for state in ("allocated", "free", "unhealthy"):
                cluster.add_metric([table.kind, model, state], total[state])
            fragmentation.add_metric([table.kind, model], total["stranded"] / total["free"] if total["free"] else 0.0)
    yield from node_families.values()
    yield health
    yield cluster
    yield fragmentation
