"""Fault rescheduling: chip faults and NotReady nodes injected into simulations; the fault controller's
force / grace / off modes, pod- and job-level rescheduling, the retry budget; the fault file's errors; and a
property over random fault schedules: nothing keeps running on a faulty chip, no job disappears, every job
ends Completed or Failed with a reason."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsched.api.manifest import load_text
from hetsched.api.objects import Job, Node, Pod
from hetsched.devices.inventory import NODE_ANNOTATION, parse_node_devices, pod_allocation
from hetsched.sim.faults import Fault, FaultError, load_faults
from hetsched.sim.simulator import Simulation
from tests.builders import accel_node

ASCEND = "huawei.com/Ascend910"


def job(name: str, pods: int, chips: int, *, labels: dict[str, str] | None = None, duration: int = 1000,
        at: int = 0) -> str:
    return f"""
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: {name}
  labels: {json.dumps(labels or {})}
  annotations: {{hetsched.io/submit-at: "{at}"}}
spec:
  minAvailable: {pods}
  tasks:
  - name: worker
    replicas: {pods}
    template:
      metadata: {{annotations: {{hetsched.io/duration: "{duration}"}}}}
      spec:
        containers:
        - name: w
          resources: {{limits: {{{ASCEND}: {chips}}}, requests: {{cpu: "1"}}}}
"""


def simulate(jobs: str, faults: list[Fault], nodes: int = 3, until: float | None = None) -> tuple[Simulation, Any]:
    simulation = Simulation([accel_node(f"n{i}") for i in range(nodes)], load_text(jobs), None, faults=faults,
                            until=until)
    return simulation, simulation.run()


def holders(simulation: Simulation, node: str) -> dict[str, list[int]]:
    return {p.metadata.name: pod_allocation(p.metadata.annotations).get(ASCEND, [])
            for p in simulation.cluster.list("Pod") if isinstance(p, Pod) and p.spec.nodeName == node}


def test_a_dead_chip_restarts_the_whole_job_on_healthy_chips() -> None:
    _, results = simulate(job("train", 2, 8, labels={"fault-retry-times": "2"}),
                          [Fault(at=100, node="n0", kind="ChipUnhealthy", chips=[5])])
    (record,) = results.jobs
    assert record["phase"] == "Completed" and record["faultRetries"] == 1
    (fault,) = results.faults
    assert fault["jobs"] == ["default/train"] and fault["retries_used"] == 1
    assert fault["time_to_recover_s"] is not None
    assert all(p["node"] != "n0" for p in record["pods"])  # n0 has 7 healthy chips: an 8-chip pod cannot go back
    assert record["end"] >= 100 + 1000  # the restarted job ran its full duration again


def test_pod_rescheduling_replaces_only_the_pod_that_was_hit() -> None:
    _, results = simulate(job("train", 2, 4, labels={"pod-rescheduling": "on"}),
                          [Fault(at=100, node="n0", kind="ChipUnhealthy", chips=[0])], nodes=2)
    (record,) = results.jobs
    ends = sorted(p["end"] for p in record["pods"])
    assert ends[0] == pytest.approx(1000, abs=2)  # the untouched pod finished on time
    assert ends[1] >= 1100  # the replaced one started again after the fault


def test_grace_mode_asks_for_a_checkpoint_then_reschedules() -> None:
    labels = {"fault-scheduling": "grace", "grace-over-time": "200"}
    simulation, results = simulate(job("train", 1, 8, labels=labels, duration=2000),
                                   [Fault(at=100, node="n0", kind="ChipUnhealthy", chips=[1])], until=250)
    pods = [p for p in simulation.cluster.list("Pod") if isinstance(p, Pod)]
    assert pods and pods[0].spec.nodeName == "n0" and pods[0].metadata.annotations["hetsched.io/checkpoint-by"] == "300"
    simulation, results = simulate(job("train", 1, 8, labels=labels, duration=2000),
                                   [Fault(at=100, node="n0", kind="ChipUnhealthy", chips=[1])])
    assert results.jobs[0]["faultRetries"] == 1 and results.jobs[0]["pods"][0]["node"] != "n0"
    # it checkpointed when told (t=300, 300 s into its run): the new run needs only the 1,700 s left
    assert results.jobs[0]["end"] == pytest.approx(300 + 1700, abs=3)
    assert results.jobs[0]["lostChipSeconds"] == 0 and results.faults[0]["lost_chip_seconds"] == 0


def test_lost_work_is_the_chip_time_since_the_last_checkpoint() -> None:
    """Force mode, checkpoints every 60 s: the fault at t=100 (the pod started at t=0) loses 40 s on 8
    chips; the replacement resumes from the t=60 checkpoint. Without checkpoints all 100 s are lost."""
    text = job("train", 1, 8, duration=1000).replace(
        'hetsched.io/duration: "1000"', 'hetsched.io/duration: "1000", hetsched.io/checkpoint-interval: "60"')
    _, results = simulate(text, [Fault(at=100, node="n0", kind="ChipUnhealthy", chips=[1])])
    (fault,) = results.faults
    assert fault["lost_chip_seconds"] == pytest.approx(8 * 40, abs=8) and fault["retries_used"] == 1
    assert results.jobs[0]["end"] == pytest.approx(100 + 940, abs=3)
    _, results = simulate(job("train", 1, 8, duration=1000), [Fault(at=100, node="n0", kind="ChipUnhealthy",
                                                                    chips=[1])])
    assert results.faults[0]["lost_chip_seconds"] == pytest.approx(8 * 100, abs=8)
    assert results.jobs[0]["lostChipSeconds"] == results.faults[0]["lost_chip_seconds"]


def test_off_leaves_the_job_alone_and_says_so() -> None:
    simulation, results = simulate(job("train", 1, 8, labels={"fault-scheduling": "off"}),
                                   [Fault(at=100, node="n0", kind="ChipUnhealthy", chips=[1])])
    assert results.jobs[0]["faultRetries"] == 0 and results.jobs[0]["pods"][0]["end"] == pytest.approx(1000, abs=2)
    assert any(e.reason == "FaultIgnored" for e in simulation.cluster.events)


def test_the_fault_retry_budget_fails_the_job_with_the_reason() -> None:
    faults = [Fault(at=100, node="n0", kind="NodeNotReady"), Fault(at=150, node="n1", kind="NodeNotReady")]
    _, results = simulate(job("train", 1, 8, labels={"fault-retry-times": "1"}), faults, nodes=3)
    (record,) = results.jobs
    assert record["phase"] == "Failed" and record["reason"] == "FaultRetryExhausted"
    assert "NotReady" in record["message"]


def test_fault_files_name_the_fault_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "f.yaml"
    bad.write_text("faults:\n- {at: 10, node: n0, kind: ChipMelted, chips: [1]}\n")
    with pytest.raises(FaultError, match=r"f.yaml: faults\[0\]\.kind: Input should be 'ChipUnhealthy'"):
        load_faults(bad)
    bad.write_text("faults:\n- {at: 10, node: n0, kind: ChipUnhealthy}\n")
    with pytest.raises(FaultError, match=r"faults\[0\]\.chips: ChipUnhealthy needs the chip ids"):
        load_faults(bad)
    with pytest.raises(FaultError, match="node n9 does not exist"):
        simulate(job("train", 1, 8), [Fault(at=10, node="n9", kind="NodeNotReady")])
    with pytest.raises(FaultError, match="node n0 has no chip"):
        simulate(job("train", 1, 8), [Fault(at=10, node="n0", kind="ChipUnhealthy", chips=[12])])


HEAL_AT = 3000
"""Every random schedule ends with the cluster repaired at this time, so every job can finish."""


def _fault_job(index: int, chips: int, pods: int, mode: str, pod_level: bool, at: int, codes: str) -> str:
    labels: dict[str, str] = {"fault-scheduling": mode, "grace-over-time": "120"}
    if pod_level:
        labels["pod-rescheduling"] = "on"
    text = job(f"j{index}", pods, chips, at=at, duration=500, labels=labels).replace(
        'hetsched.io/duration: "500"',
        f'hetsched.io/duration: "500", hetsched.io/exit-code: "{codes}", hetsched.io/checkpoint-interval: "100"')
    return text.replace("  minAvailable:", "  maxRetry: 2\n  policies: [{event: PodFailed, action: RestartJob}]\n"
                                           "  minAvailable:")


@settings(max_examples=int(os.environ.get("HETSCHED_FAULT_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(jobs=st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(1, 2), st.sampled_from(["force", "grace"]),
                               st.booleans(), st.integers(0, 300), st.sampled_from(["0", "0", "1,0", "1"])),
                     min_size=1, max_size=4),
       faults=st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 2),
                                 st.sampled_from(["ChipUnhealthy", "ChipNetworkUnhealthy", "ChipRecovered",
                                                  "NodeNotReady", "NodeReady", "Drain", "Uncordon"]),
                                 st.lists(st.integers(0, 7), min_size=1, max_size=3, unique=True)),
                       max_size=6))
def test_random_fault_schedules_never_leave_work_on_a_faulty_chip(
        jobs: list[tuple[int, int, str, bool, int, str]], faults: list[tuple[int, int, str, list[int]]]) -> None:
    """Random jobs (force or grace, job- or pod-level, apps that fail once or always) under random chip
    faults, NotReady nodes and drains, then everything repaired. After every step of the simulation: no
    live pod holds an unhealthy chip (nor, for a multi-pod job, a network-unhealthy one) — except, in grace
    mode, a pod told to checkpoint, until its grace period ends — and no task index has two live pods. At
    the end: no job disappeared, and each one Completed, or Failed with its retry budget spent and the
    reason."""
    text = "---".join(_fault_job(i, *spec) for i, spec in enumerate(jobs))
    schedule = [Fault(at=at, node=f"n{node}", kind=kind, chips=chips if kind.startswith("Chip") else [])  # type: ignore[arg-type]
                for at, node, kind, chips in faults]
    for node in range(3):
        schedule += [Fault(at=HEAL_AT, node=f"n{node}", kind="ChipRecovered", chips=list(range(8))),
                     Fault(at=HEAL_AT, node=f"n{node}", kind="NodeReady"),
                     Fault(at=HEAL_AT, node=f"n{node}", kind="Uncordon")]
    simulation = Simulation([accel_node(f"n{i}") for i in range(3)], load_text(text), None, faults=schedule,
                            until=50_000)  # a guard: these workloads end long before
    seen_bad: list[str] = []
    replicas = {f"j{i}": spec[1] for i, spec in enumerate(jobs)}

    def check() -> None:
        for node in simulation.cluster.list("Node"):
            assert isinstance(node, Node)
            inventory = parse_node_devices(node.metadata.annotations[NODE_ANNOTATION], node.metadata.name)
            dead = {c.id for d in inventory.devices for c in d.chips if c.health == "Unhealthy"}
            cut = {c.id for d in inventory.devices for c in d.chips if c.health == "NetworkUnhealthy"}
            for name, chips in holders(simulation, node.metadata.name).items():
                pod = simulation.cluster.get("Pod", f"default/{name}")
                assert isinstance(pod, Pod)
                multi = replicas[pod.metadata.annotations["scheduling.k8s.io/group-name"]] > 1
                grace = float(pod.metadata.annotations.get("hetsched.io/checkpoint-by", "-1"))
                if simulation.clock.now() <= grace + 1e-9:
                    continue  # told to checkpoint: it may finish doing so on the chip until its grace ends
                if pod.status.phase in ("Pending", "Running") and set(chips) & (dead | (cut if multi else set())):
                    seen_bad.append(f"{name} on {node.metadata.name} chips {chips} dead {sorted(dead)} "
                                    f"cut {sorted(cut)}")
        live = [p for p in simulation.cluster.list("Pod")
                if isinstance(p, Pod) and p.status.phase in ("Pending", "Running")]
        indexes = [(p.metadata.annotations["scheduling.k8s.io/group-name"],
                    p.metadata.annotations["volcano.sh/task-index"]) for p in live]
        assert len(indexes) == len(set(indexes)), sorted(indexes)

    original = simulation._settle

    def settle_and_check() -> None:
        original()
        check()

    simulation._settle = settle_and_check  # type: ignore[method-assign]
    results = simulation.run()
    assert not seen_bad, seen_bad[:3]
    assert {r["name"] for r in results.jobs} == {f"j{i}" for i in range(len(jobs))}  # no job disappears
    assert all(isinstance(j, Job) for j in simulation.cluster.list("Job"))
    for record in results.jobs:
        assert record["phase"] in ("Completed", "Failed"), record
        if record["phase"] == "Failed":
            assert record["reason"] in ("FaultRetryExhausted", "MaxRetryExceeded"), record
            assert record["message"]
            spent = record["faultRetries"] > 2 if record["reason"] == "FaultRetryExhausted" \
                else record["retryCount"] == 2
            assert spent, record


def test_a_drain_evicts_within_the_disruption_budget_and_waits_for_replacements() -> None:
    """Both pods of a job run on n0 and the job allows one missing pod. Draining n0 evicts one, waits until
    its replacement runs on n1, then evicts the other: the job never has two pods missing."""
    text = job("serve", 2, 4, duration=1000).replace(
        'annotations: {hetsched.io/submit-at: "0"}',
        'annotations: {hetsched.io/submit-at: "0", hetsched.io/max-unavailable: "1"}')
    simulation = Simulation([accel_node("n0"), accel_node("n1")], load_text(text), None,
                            faults=[Fault(at=50, node="n1", kind="Cordon"), Fault(at=100, node="n0", kind="Drain"),
                                    Fault(at=100, node="n1", kind="Uncordon")])
    lowest: list[int] = []

    def watch(event: Any) -> None:
        if 100 <= simulation.clock.now() < 900 and isinstance(event.object, Pod):  # before any pod finishes
            running = sum(1 for p in simulation.cluster.list("Pod") if isinstance(p, Pod)
                          and p.status.phase == "Running")
            lowest.append(running)

    simulation.cluster.watch(("Pod",), watch, replay=False)
    results = simulation.run()
    drains = [e for e in results.evictions if e["action"] == "drain"]
    assert len(drains) == 2
    assert min(lowest) >= 1  # never two missing
    assert all(p["node"] == "n1" for p in results.jobs[0]["pods"])
    assert results.jobs[0]["phase"] == "Completed"


def test_a_bad_budget_is_refused_by_name() -> None:
    from hetsched.api.manifest import ManifestError

    text = job("serve", 2, 4).replace('annotations: {hetsched.io/submit-at: "0"}',
                                      'annotations: {hetsched.io/max-unavailable: "half"}')
    with pytest.raises(ManifestError, match=r"hetsched\.io/max-unavailable must be a count or a percentage"):
        load_text(text)


@settings(max_examples=int(os.environ.get("HETSCHED_FAULT_EXAMPLES", "300")) // 3, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(jobs=st.lists(st.tuples(st.sampled_from([2, 4, 8]), st.integers(1, 3), st.integers(1, 2), st.booleans()),
                     min_size=1, max_size=3),
       drains=st.lists(st.tuples(st.integers(10, 400), st.integers(0, 2), st.booleans()), min_size=1, max_size=4))
def test_random_drains_never_exceed_a_disruption_budget(
        jobs: list[tuple[int, int, int, bool]], drains: list[tuple[int, int, bool]]) -> None:
    """Jobs with budgets of 1–2 pods — the job's ``hetsched.io/max-unavailable`` or a PodDisruptionBudget
    selecting its pods; random drains (and uncordons) of three nodes. Whenever a drain evicts pods of a
    job, the job is left missing no more pods than its budget."""
    import hetsched.sim.simulator as simulator_module

    budgets = {f"default/j{i}": budget for i, (_, _, budget, _) in enumerate(jobs)}
    documents = []
    for i, (chips, pods, budget, as_pdb) in enumerate(jobs):
        if as_pdb:
            documents.append(job(f"j{i}", pods, chips, duration=600))
            documents.append(f"""
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: j{i}, namespace: default}}
spec: {{maxUnavailable: {budget}, selector: {{matchLabels: {{volcano.sh/job-name: j{i}}}}}}}
""")
        else:
            documents.append(job(f"j{i}", pods, chips, duration=600).replace(
                'annotations: {hetsched.io/submit-at: "0"}',
                f'annotations: {{hetsched.io/submit-at: "0", hetsched.io/max-unavailable: "{budget}"}}'))
    text = "---".join(documents)
    faults = []
    for at, node, uncordon in drains:
        faults.append(Fault(at=at, node=f"n{node}", kind="Drain"))
        if uncordon:
            faults.append(Fault(at=at + 50, node=f"n{node}", kind="Uncordon"))
    simulation = Simulation([accel_node(f"n{i}") for i in range(3)], load_text(text), None, faults=faults,
                            until=50_000)  # a guard: these workloads end long before
    replicas = {f"default/j{i}": pods for i, (_, pods, _, _) in enumerate(jobs)}
    original = simulator_module.drain_step

    def checked(cluster: Any, node: str) -> Any:
        evicted, empty = original(cluster, node)
        running: dict[str, int] = {}
        for pod in cluster.list("Pod"):  # running, or done: finished work is not missing
            if isinstance(pod, Pod) and pod.status.phase in ("Running", "Succeeded"):
                key = f"default/{pod.metadata.annotations['scheduling.k8s.io/group-name']}"
                running[key] = running.get(key, 0) + 1
        for job_key in {j for _, j in evicted}:
            assert replicas[job_key] - running.get(job_key, 0) <= budgets[job_key], (job_key, evicted)
        return evicted, empty

    simulator_module.drain_step = checked  # type: ignore[assignment]
    try:
        simulation.run()
    finally:
        simulator_module.drain_step = original  # type: ignore[assignment]


def test_a_restarted_job_comes_back_to_its_previous_healthy_nodes() -> None:
    """train runs on n2 and n3 (a short blocker held n0 and n1). n3 goes NotReady: the job restarts and
    prefers n2, where it ran, over the equally free n0 and n1."""
    text = job("blocker", 2, 8, duration=50) + "---" + job("train", 2, 8, duration=1000)
    simulation, results = simulate(text, [Fault(at=100, node="n3", kind="NodeNotReady")], nodes=4)
    train = next(j for j in results.jobs if j["name"] == "train")
    assert train["faultRetries"] == 1 and train["phase"] == "Completed"
    nodes = {p["name"]: p["node"] for p in train["pods"]}
    assert "n2" in nodes.values() and "n3" not in nodes.values()
    job_object = simulation.cluster.get("Job", "default/train")
    assert job_object.metadata.annotations["hetsched.io/preferred-nodes"] == "n2"


def test_pod_rescheduling_escalates_to_the_job_when_the_replacement_stays_pending() -> None:
    """Pod-level rescheduling on two full nodes: the hit pod's replacement has nowhere to go (n0 has 7
    healthy chips, n1 holds the other pod). After the 60 s timeout the whole job is rescheduled, the same
    fault (one fault retry); it runs again once the chip is repaired."""
    text = job("train", 2, 8, labels={"pod-rescheduling": "on"}, duration=1000)
    simulation, results = simulate(text, [Fault(at=100, node="n0", kind="ChipUnhealthy", chips=[0]),
                                          Fault(at=400, node="n0", kind="ChipRecovered", chips=[0])], nodes=2)
    levels = [(r.level, r.counted) for r in simulation.fault_controller.rescheduled]
    assert levels == [("pod", True), ("escalated", False)]
    escalated = simulation.fault_controller.rescheduled[1]
    assert escalated.time == pytest.approx(160, abs=2) and "job-level rescheduling" in escalated.reason
    (record,) = results.jobs
    assert record["faultRetries"] == 1 and record["phase"] == "Completed" and record["start"] is not None
    assert results.faults[0]["retries_used"] == 1
    assert min(p["end"] for p in record["pods"]) >= 400 + 1000  # both ran again after the repair


@pytest.mark.parametrize(("labels", "message"), [
    ({"fault-scheduling": "soft"}, "labels[fault-scheduling] must be force, grace or off, got 'soft'"),
    ({"pod-rescheduling": "yes"}, "labels[pod-rescheduling] must be on or off"),
    ({"fault-retry-times": "-1"}, "labels[fault-retry-times] must be a count ≥ 0"),
    ({"grace-over-time": "15m"}, "labels[grace-over-time] must be a number of seconds from 0 to 31,536,000, got '15m'"),
])
def test_bad_fault_labels_are_refused_by_name(labels: dict[str, str], message: str) -> None:
    from hetsched.api.manifest import ManifestError

    with pytest.raises(ManifestError) as info:
        load_text(job("train", 1, 8, labels=labels))
    assert message in str(info.value) and "Job/train" in str(info.value)


TORS = """
apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: tor-a}
spec:
  tier: 1
  members: [{type: Node, selector: {regexMatch: {pattern: "n[0-2]"}}}]
---
apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: tor-b}
spec:
  tier: 1
  members: [{type: Node, selector: {regexMatch: {pattern: "n[3-5]"}}}]
"""


@pytest.mark.parametrize("labels", [{"pod-rescheduling": "on"}, {"fault-retry-times": "2"}],
                         ids=["pod-rescheduling", "job-restart"])
def test_a_rescheduled_bounded_job_stays_inside_its_tier_bound(labels: dict[str, str]) -> None:
    """Two 8-chip pods bounded to one ToR (tier 1); a chip dies under one of them. The replacement pod (or
    the restarted job) lands inside one ToR again — next to the pod still running, never on the dead chip."""
    text = job("train", 2, 8, labels=labels).replace(
        "spec:\n  minAvailable: 2", "spec:\n  networkTopology: {mode: hard, highestTierAllowed: 1}\n  minAvailable: 2")
    simulation = Simulation([accel_node(f"n{i}") for i in range(6)], load_text(text + "---" + TORS), None,
                            faults=[Fault(at=100, node="n0", kind="ChipUnhealthy", chips=[3])])
    results = simulation.run()
    (record,) = results.jobs
    assert record["phase"] == "Completed" and record["faultRetries"] <= 1
    assert any(len(p["runs"]) > 1 for p in record["pods"]), record["pods"]  # the fault hit it (on n0)
    final = {p["node"] for p in record["pods"]}
    assert "n0" not in final
    assert final <= {"n0", "n1", "n2"} or final <= {"n3", "n4", "n5"}, record["pods"]
    if "pod-rescheduling" in labels:
        assert final == {"n1", "n2"}  # its partner still runs on n1: the replacement joins it in tor-a
