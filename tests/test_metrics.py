"""Prometheus metrics: the scheduler's and controllers' series, parsed back with prometheus_client's own
parser (names, label sets, types), the numbers they carry after real cycles on the embedded cluster, the
/metrics endpoint on loopback, and the simulator's ``--metrics`` file."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from hetsched.agents.backends.fake import FakeBackend
from hetsched.api.objects import QueueUsage
from hetsched.cli.main import app
from hetsched.devices.inventory import POD_ANNOTATION
from hetsched.metrics.agents import NodeAgentMetrics
from hetsched.metrics.scheduler import SchedulerMetrics
from hetsched.metrics.serve import MetricsServer, parse_address
from tests.builders import accel_node, gang, harness, pod, podgroup, queue

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def families(registry: CollectorRegistry) -> dict[str, tuple[str, list[tuple[str, dict[str, str], float]]]]:
    """name → (type, samples) from the text exposition, as Prometheus would read it."""
    parsed = text_string_to_metric_families(generate_latest(registry).decode())
    return {f.name: (f.type, [(s.name, s.labels, s.value) for s in f.samples]) for f in parsed}


def value(found: dict, family: str, sample: str | None = None, **labels: str) -> float:  # type: ignore[type-arg]
    for name, sample_labels, number in found[family][1]:
        if name == (sample or family) and all(sample_labels.get(k) == v for k, v in labels.items()):
            return float(number)
    raise AssertionError(f"no {sample or family} sample with {labels}")


def scheduler_run() -> tuple[SchedulerMetrics, object]:
    held = pod("held-0", "held", cpu="1", limits={"huawei.com/Ascend910": 2},
               annotations={POD_ANNOTATION: json.dumps({"huawei.com/Ascend910": [0, 4]})})
    held = held.model_copy(update={"spec": held.spec.model_copy(update={"nodeName": "n0"})})
    objects = [
        accel_node("n0"), accel_node("n1", unhealthy=(7,), advertise=8),  # n1 advertises a broken chip
        queue("default"), queue("research", capability={"huawei.com/Ascend910": "4"}),
        podgroup("held", 1, phase="Running"), held,
        *gang("fits", 2, cpu="1", limits={"huawei.com/Ascend910": 1}),
        *gang("huge", 1, cpu="1", limits={"huawei.com/Ascend910": 16}),
    ]
    h = harness(objects)
    h.cluster.create(QueueUsage.model_validate({  # research's books: 6 of its 4 chip-hours used, 1.5 decayed
        "metadata": {"name": "research"}, "spec": {"budget": {"huawei.com/Ascend910": 4}},
        "status": {"used": {"huawei.com/Ascend910": 6.0}, "decayed": {"huawei.com/Ascend910": 1.5},
                   "exhausted": ["huawei.com/Ascend910"], "periodEnd": 86400}}))
    metrics = SchedulerMetrics()
    h.scheduler.observers.append(metrics)
    h.scheduler.stopwatch = iter(float(i) for i in range(10_000)).__next__
    for _ in range(3):
        h.cycle()
    return metrics, h


def test_scheduler_series_parse_back_with_names_labels_and_types() -> None:
    metrics, _ = scheduler_run()
    found = families(metrics.registry)
    expected_types = {
        "hetsched_e2e_scheduling_duration_seconds": "histogram", "hetsched_session_duration_seconds": "histogram",
        "hetsched_action_duration_seconds": "histogram", "hetsched_plugin_duration_seconds": "histogram",
        "hetsched_pod_scheduling_duration_seconds": "histogram", "hetsched_job_queue_wait_seconds": "histogram",
        "hetsched_pods_scheduled": "counter", "hetsched_pods_unschedulable": "counter",
        "hetsched_scheduling_cycles": "counter", "hetsched_pending_pods": "gauge", "hetsched_podgroups": "gauge",
        "hetsched_pods_waiting_for_podgroup": "gauge",
        "hetsched_queue_allocated": "gauge", "hetsched_queue_deserved": "gauge", "hetsched_queue_capability": "gauge",
        "hetsched_node_chips_physical": "gauge", "hetsched_node_chips_allocatable": "gauge",
        "hetsched_node_chips_accounted": "gauge", "hetsched_node_chips_mismatch": "gauge",
        "hetsched_node_chips_health": "gauge", "hetsched_node_chips_allocated": "gauge",
        "hetsched_node_chip_fragmentation_ratio": "gauge", "hetsched_chips": "gauge",
        "hetsched_chip_fragmentation_ratio": "gauge",
    }
    for name, kind in expected_types.items():
        assert name in found, name
        assert found[name][0] == kind, (name, found[name][0])
    # every action of the default configuration was timed, with the injected stopwatch's readings
    actions = {labels["action"] for name, labels, _ in found["hetsched_action_duration_seconds"][1]
               if name.endswith("_count")}
    assert actions == {"enqueue", "allocate", "backfill"}
    assert value(found, "hetsched_scheduling_cycles", "hetsched_scheduling_cycles_total") == 3
    e2e = "hetsched_e2e_scheduling_duration_seconds"
    assert value(found, e2e, f"{e2e}_count") == 3
    plugin_points = {(labels["plugin"], labels["point"]) for name, labels, _ in
                     found["hetsched_plugin_duration_seconds"][1] if name.endswith("_count")}
    assert ("gang", "OnSessionClose") in plugin_points and ("proportion", "OnSessionOpen") in plugin_points


def test_scheduler_numbers_chips_queues_and_reasons() -> None:
    metrics, _ = scheduler_run()
    found = families(metrics.registry)
    labels = {"kind": "ascend", "model": "ascend910-8"}
    # the two 1-chip pods of "fits" were bound, each counted once, with its kind and model
    assert value(found, "hetsched_pods_scheduled", "hetsched_pods_scheduled_total", **labels) == 2
    # the seed's two numbers: physical vs allocatable vs accounted, and the mismatch on n1
    assert value(found, "hetsched_node_chips_physical", node="n1", **labels) == 8
    assert value(found, "hetsched_node_chips_allocatable", node="n1", **labels) == 8
    assert value(found, "hetsched_node_chips_accounted", node="n1", **labels) == 7
    assert value(found, "hetsched_node_chips_mismatch", node="n1", **labels) == 1
    assert value(found, "hetsched_node_chips_mismatch", node="n0", **labels) == 0
    assert value(found, "hetsched_node_chips_health", node="n1", state="Unhealthy", **labels) == 1
    # n0 holds chips 0 and 4 for "held" and two more for "fits"
    held_n0 = value(found, "hetsched_node_chips_allocated", node="n0", **labels)
    held_n1 = value(found, "hetsched_node_chips_allocated", node="n1", **labels)
    assert held_n0 + held_n1 == 4
    assert value(found, "hetsched_chips", state="unhealthy", **labels) == 1
    assert value(found, "hetsched_chips", state="allocated", **labels) == 4
    # the 16-chip pod can never fit: it waits in Pending (admission), counted by reason every cycle
    reasons = {s[1]["reason"]: s[2] for s in found["hetsched_pods_unschedulable"][1]
               if s[0] == "hetsched_pods_unschedulable_total"}
    assert reasons and all(count > 0 for count in reasons.values())
    assert value(found, "hetsched_queue_capability", queue="research", resource="huawei.com/Ascend910",
                 unit="chip") == 4
    assert value(found, "hetsched_queue_allocated", queue="default", resource="huawei.com/Ascend910",
                 unit="chip") == 4
    assert value(found, "hetsched_queue_allocated", queue="default", resource="cpu", unit="core") == 3
    assert value(found, "hetsched_pending_pods", queue="default") == 1  # the 16-chip pod, which never fits
    chips = {"queue": "research", "resource": "huawei.com/Ascend910"}
    assert (value(found, "hetsched_queue_usage_hours", **chips), value(found, "hetsched_queue_budget_hours", **chips),
            value(found, "hetsched_queue_budget_exhausted", **chips),
            value(found, "hetsched_queue_decayed_usage_hours", **chips)) == (6.0, 4.0, 1.0, 1.5)
    assert value(found, "hetsched_pending_pods", queue="research") == 0
    # the fragmentation ratio is a share of free chips
    for _, _, number in found["hetsched_node_chip_fragmentation_ratio"][1]:
        assert 0.0 <= number <= 1.0


def test_podgroup_counts_include_settled_jobs_when_scraped_after_a_later_snapshot() -> None:
    """Settled jobs are not rebuilt per cycle (``cache.settled``); the scrape still counts them as Running,
    and reading the last cycle's snapshot after the cache took a newer one is not an error."""
    metrics, h = scheduler_run()
    h.scheduler.cache.snapshot()  # type: ignore[attr-defined]  # e.g. `hetsched explain`, between cycles
    found = families(metrics.registry)
    assert value(found, "hetsched_podgroups", queue="default", phase="Running") == 2  # held, fits
    assert value(found, "hetsched_podgroups", queue="default", phase="Inqueue") == 1  # huge waits


def test_chip_series_follow_each_new_cycle_not_a_cached_one() -> None:
    """The chip accounting is computed once per cycle's snapshot and cached for scrapes; a later cycle's
    scrape shows that cycle's chips (the cache is keyed by a generation counter, never by ``id()``)."""
    metrics, h = scheduler_run()
    labels = {"kind": "ascend", "model": "ascend910-8"}
    before = value(families(metrics.registry), "hetsched_chips", state="allocated", **labels)
    assert before == value(families(metrics.registry), "hetsched_chips", state="allocated", **labels)  # cached
    for obj in gang("more", 2, cpu="1", limits={"huawei.com/Ascend910": 2}):
        h.cluster.create(obj)  # type: ignore[attr-defined]
    for _ in range(3):
        h.cycle()  # type: ignore[attr-defined]
    assert value(families(metrics.registry), "hetsched_chips", state="allocated", **labels) == before + 4


def test_fragmentation_counts_free_chips_that_cannot_serve_the_largest_request() -> None:
    # n0: chips 0,1,2 and 4 held → free 3 + 5,6,7: the largest legal one-pod request on an Ascend 910 x8
    # is 8, and no 8-set is free, so all four free chips are stranded
    held = pod("h-0", "h", limits={"huawei.com/Ascend910": 4},
               annotations={POD_ANNOTATION: json.dumps({"huawei.com/Ascend910": [0, 1, 2, 4]})})
    held = held.model_copy(update={"spec": held.spec.model_copy(update={"nodeName": "n0"})})
    h = harness([accel_node("n0"), accel_node("n1"), podgroup("h", 1, phase="Running"), held])
    metrics = SchedulerMetrics()
    h.scheduler.observers.append(metrics)
    h.cycle()
    found = families(metrics.registry)
    labels = {"kind": "ascend", "model": "ascend910-8"}
    assert value(found, "hetsched_node_chip_fragmentation_ratio", node="n0", **labels) == 1.0
    assert value(found, "hetsched_node_chip_fragmentation_ratio", node="n1", **labels) == 0.0
    assert value(found, "hetsched_chip_fragmentation_ratio", **labels) == 4 / 12


def test_job_queue_wait_and_pod_latency_use_the_injected_clock() -> None:
    h = harness([accel_node("n0"), *gang("g", 2, cpu="1", limits={"huawei.com/Ascend910": 4})])
    metrics = SchedulerMetrics()
    h.scheduler.observers.append(metrics)
    h.clock.advance_to(30.0)  # the gang was created at 0 and is placed at 30
    h.cycle()
    found = families(metrics.registry)
    assert value(found, "hetsched_job_queue_wait_seconds", "hetsched_job_queue_wait_seconds_sum",
                 queue="default") == 30.0
    assert value(found, "hetsched_pod_scheduling_duration_seconds", "hetsched_pod_scheduling_duration_seconds_count",
                 kind="ascend") == 2


def test_metrics_are_served_on_loopback_and_scraped() -> None:
    metrics, _ = scheduler_run()
    server = MetricsServer(metrics.registry, "127.0.0.1:0")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        server.stop()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"hetsched_node_chips_mismatch", "hetsched_e2e_scheduling_duration_seconds"} <= names


def test_a_bad_metrics_address_is_refused_with_the_option_named() -> None:
    for bad in ("8080", "localhost:http", "127.0.0.1:99999"):
        try:
            parse_address(bad)
        except ValueError as exc:
            assert "--metrics-address" in str(exc) and bad in str(exc)
        else:
            raise AssertionError(bad)
    assert parse_address("[::1]:9100") == ("::1", 9100)


def test_node_agent_metrics_report_each_chip_and_tool_failures(tmp_path: Path) -> None:
    config = tmp_path / "chips.yaml"
    chips = [{"id": i, "health": "Alarm" if i == 2 else "OK"} for i in range(4)]
    config.write_text(json.dumps({"resource": "hetsched.io/fake", "model": "FakeChip", "chips": chips}))
    metrics = NodeAgentMetrics()
    backend = FakeBackend(config)
    metrics.observe(backend, backend.chips(), None, 0.01)
    found = families(metrics.registry)
    assert found["hetsched_agent_chip_healthy"][0] == "gauge"
    assert value(found, "hetsched_agent_chip_healthy", chip="2", model="FakeChip") == 0
    assert value(found, "hetsched_agent_chip_healthy", chip="1", model="FakeChip") == 1
    assert value(found, "hetsched_agent_node_usable", vendor="fake") == 1
    # the tool fails: it can vouch for no chip, and the failure is counted
    metrics.observe(backend, None, "fake: garbage", 0.02)
    found = families(metrics.registry)
    assert value(found, "hetsched_agent_chip_healthy", chip="1", model="FakeChip") == 0
    assert value(found, "hetsched_agent_node_usable", vendor="fake") == 0
    assert value(found, "hetsched_agent_tool_failures", "hetsched_agent_tool_failures_total", vendor="fake") == 1
    assert value(found, "hetsched_agent_check_duration_seconds", "hetsched_agent_check_duration_seconds_count",
                 vendor="fake") == 2


def test_simulate_writes_the_same_series_to_a_file(tmp_path: Path) -> None:
    out = tmp_path / "metrics.prom"
    result = CliRunner().invoke(app, ["simulate", "--cluster", str(EXAMPLES / "scenarios/ascend-4.yaml"),
                                      str(EXAMPLES / "scenarios/fault-jobs.yaml"), "--faults",
                                      str(EXAMPLES / "scenarios/faults.yaml"), "--metrics", str(out), "-q"])
    assert result.exit_code == 0, result.output
    parsed = {f.name: f for f in text_string_to_metric_families(out.read_text())}
    assert parsed["hetsched_pods_scheduled"].type == "counter"
    assert parsed["hetsched_node_chips_physical"].type == "gauge"
    assert parsed["hetsched_jobs"].type == "gauge"
    assert parsed["hetsched_fault_restarts"].type == "counter"
    restarts = sum(s.value for s in parsed["hetsched_fault_restarts"].samples if s.name.endswith("_total"))
    assert restarts >= 2  # the scenario's chip fault (escalated) and NotReady node each restart a job
    completed = sum(s.value for s in parsed["hetsched_jobs"].samples if s.labels["phase"] == "Completed")
    assert completed == 3


def test_the_grafana_dashboard_queries_only_series_hetsched_exports() -> None:
    from hetsched.metrics.agents import DevicePluginMetrics, WebhookMetrics
    from hetsched.metrics.controller import ControllerMetrics
    from hetsched.metrics.serve import leader_gauge

    dashboard = json.loads((EXAMPLES.parent / "deploy" / "grafana" / "hetsched.json").read_text())
    used = {name for panel in dashboard["panels"] for target in panel["targets"]
            for name in re.findall(r"\bhetsched_[a-z0-9_]+", target["expr"])}
    metrics, _ = scheduler_run()
    registries = [metrics.registry, ControllerMetrics().registry, NodeAgentMetrics().registry,
                  DevicePluginMetrics().registry, WebhookMetrics().registry]
    leader_gauge(registries[-1])
    exported: set[str] = set()
    for registry in registries:
        for family in registry.collect():
            exported |= {family.name, f"{family.name}_total", f"{family.name}_bucket", f"{family.name}_sum",
                         f"{family.name}_count"}
    assert used and used <= exported, sorted(used - exported)
    assert len(dashboard["panels"]) >= 12 and dashboard["uid"] == "hetsched"


def test_a_port_in_use_is_a_usage_error_naming_the_option() -> None:
    import typer

    from hetsched.cli.serve import serve_metrics

    first = MetricsServer(CollectorRegistry(), "127.0.0.1:0")
    try:
        try:
            serve_metrics(CollectorRegistry(), f"127.0.0.1:{first.port}")
        except typer.BadParameter as exc:
            assert f"--metrics-address 127.0.0.1:{first.port}: cannot listen" in str(exc)
        else:
            raise AssertionError("a second server bound the same port")
        assert serve_metrics(CollectorRegistry(), "") is None  # empty: metrics off
    finally:
        first.stop()


def test_a_long_running_fault_controller_keeps_no_log_but_counts_every_restart() -> None:
    from hetsched.api.manifest import load_files
    from hetsched.cluster.spec import load_cluster_spec
    from hetsched.metrics.controller import ControllerMetrics
    from hetsched.sim.faults import load_faults
    from hetsched.sim.simulator import Simulation

    scenarios = EXAMPLES / "scenarios"
    simulation = Simulation(load_cluster_spec(scenarios / "ascend-4.yaml").nodes(),
                            load_files([scenarios / "fault-jobs.yaml"]),
                            faults=load_faults(scenarios / "faults.yaml"))
    metrics = ControllerMetrics()
    simulation.fault_controller.history = False  # as `hetsched controller` runs it
    simulation.fault_controller.listeners.append(metrics.restarted)
    simulation.run()
    assert simulation.fault_controller.rescheduled == [] and simulation.fault_controller.hit == []
    restarts = sum(metrics.registry.get_sample_value("hetsched_fault_restarts_total", {"level": level}) or 0
                   for level in ("pod", "job", "escalated"))
    assert restarts >= 2
