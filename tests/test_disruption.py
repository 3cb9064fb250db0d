"""PodDisruptionBudgets: the arithmetic (as Kubernetes' disruption controller), the embedded Eviction API
refusing what a budget forbids, preemption planning within budgets, a refused eviction holding back its
preemptor's binds, and a drain that waits for replacements."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsched.api.disruption import disruptions_allowed, refusal
from hetsched.api.manifest import ManifestError, load_text
from hetsched.api.objects import AnyObject, OwnerReference, Pod, PodDisruptionBudget
from hetsched.ports import TooManyRequests
from hetsched.scheduler.defaults import parse_conf
from hetsched.sim.faults import Fault
from hetsched.sim.simulator import Simulation
from tests.builders import accel_node, gang, harness, pod
from tests.test_faults import job
from tests.test_preemption import CONF, classes, evicted, running

ASCEND = "huawei.com/Ascend910"


def budget(name: str = "pdb", *, labels: dict[str, str] | None = None, **bound: Any) -> PodDisruptionBudget:
    return PodDisruptionBudget.model_validate({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": labels or {"app": "a"}}, **bound}})


def pods(running: int, pending: int = 0, labels: dict[str, str] | None = None) -> list[Pod]:
    made = []
    for i in range(running + pending):
        p = pod(f"p{i}")
        made.append(p.model_copy(update={
            "metadata": p.metadata.model_copy(update={"labels": labels or {"app": "a"}}),
            "status": p.status.model_copy(update={"phase": "Running" if i < running else "Pending"})}))
    return made


@pytest.mark.parametrize(("bound", "running", "pending", "allowed"), [
    ({"minAvailable": 3}, 4, 0, 1),
    ({"minAvailable": 3}, 3, 1, 0),
    ({"minAvailable": "50%"}, 4, 0, 2),
    ({"minAvailable": "50%"}, 3, 0, 1),      # 50 % of 3 rounds up to 2
    ({"maxUnavailable": 1}, 4, 0, 1),
    ({"maxUnavailable": 1}, 3, 1, 0),        # the pending replacement is the one missing
    ({"maxUnavailable": "25%"}, 8, 0, 2),
    ({"maxUnavailable": "10%"}, 4, 0, 1),    # rounds up to 1
    ({"minAvailable": "100%"}, 4, 0, 0),
])
def test_disruptions_allowed(bound: dict[str, Any], running: int, pending: int, allowed: int) -> None:
    assert disruptions_allowed(budget(**bound), [*pods(running, pending), *pods(5, labels={"app": "b"})], {}) == allowed


def test_a_pending_pod_may_always_go_and_a_selectorless_budget_covers_nothing() -> None:
    group = pods(3, 1)
    assert refusal(group[3], [budget(minAvailable=3)], group, {}) == ""
    assert "default/pdb" in refusal(group[0], [budget(minAvailable=3)], group, {})
    bare = PodDisruptionBudget.model_validate({"metadata": {"name": "bare"}, "spec": {"minAvailable": 10}})
    assert refusal(group[0], [bare], group, {}) == ""


def test_bad_budgets_are_refused_by_field() -> None:
    text = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: both}
spec: {minAvailable: 1, maxUnavailable: 1, selector: {matchLabels: {app: a}}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: half}
spec: {maxUnavailable: half, selector: {matchLabels: {app: a}}}
"""
    with pytest.raises(ManifestError) as info:
        load_text(text)
    message = str(info.value)
    assert "PodDisruptionBudget/both" in message and "minAvailable and maxUnavailable cannot both be set" in message
    assert "PodDisruptionBudget/half): spec.maxUnavailable: must be a count or a percentage" in message


def labelled_running(name: str, nodes: list[str], min_member: int) -> list[AnyObject]:
    """``running`` from the preemption tests, with the pods Running and labelled ``app: <name>``."""
    out: list[AnyObject] = []
    for obj in running(name, nodes, min_member=min_member):
        if isinstance(obj, Pod):
            obj = obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"labels": {"app": name}}),
                                         "status": obj.status.model_copy(update={"phase": "Running"})})
        out.append(obj)
    return out


@pytest.mark.parametrize(("bound", "size", "expected"), [
    ({"maxUnavailable": 1}, 1, ["low-3"]),
    ({"maxUnavailable": 1}, 2, []),          # two nodes needed, one pod may go: nothing is evicted
    ({"maxUnavailable": 2}, 2, ["low-2", "low-3"]),
    ({"minAvailable": "100%"}, 1, []),
])
def test_preemption_stays_within_pod_disruption_budgets(bound: dict[str, Any], size: int,
                                                        expected: list[str]) -> None:
    nodes = [accel_node(f"n{i}") for i in range(4)]
    objects = [*classes(), *nodes, *labelled_running("low", [f"n{i}" for i in range(4)], min_member=1),
               *gang("high", size, limits={ASCEND: 8}, cpu="1", priority_class="high")]
    h = harness(objects, CONF)
    h.cluster.create(budget(labels={"app": "low"}, **bound))
    h.cycle()
    assert evicted(h) == expected


def test_a_refused_eviction_holds_back_its_preemptors_binds() -> None:
    """The Eviction API refuses (a budget the scheduler could not know of yet): the preemptor does not
    bind onto room that was not made, and nothing is double-booked."""
    nodes = [accel_node("n0")]
    objects = [*classes(), *nodes, *labelled_running("low", ["n0"], min_member=1),
               *gang("high", 1, limits={ASCEND: 8}, cpu="1", priority_class="high")]
    h = harness(objects, CONF)

    def refuse(pod_key: str, reason: str) -> None:
        raise TooManyRequests(f"pod {pod_key}: budget")

    h.cluster.evict = refuse  # type: ignore[method-assign]
    result = h.cycle()
    assert result.failed_evictions and any(b.job == "default/high" for b in result.decisions.binds)
    assert not any(isinstance(p, Pod) and p.metadata.name.startswith("high") and p.spec.nodeName
                   for p in h.cluster.list("Pod"))


def test_a_drain_waits_on_a_pod_disruption_budget() -> None:
    """A 2-pod job on n0 with a PodDisruptionBudget allowing one pod down: draining n0 evicts one pod,
    waits until its replacement runs on n1, then evicts the other."""
    pdb = """
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: serve, namespace: default}
spec: {maxUnavailable: 1, selector: {matchLabels: {volcano.sh/job-name: serve}}}
"""
    faults = [Fault(at=50, node="n1", kind="Cordon"), Fault(at=100, node="n0", kind="Drain"),
              Fault(at=100, node="n1", kind="Uncordon")]
    simulation = Simulation([accel_node("n0"), accel_node("n1")], load_text(job("serve", 2, 4, duration=1000) + pdb),
                            None, faults=faults)
    lowest: list[int] = []

    def watch(event: Any) -> None:
        if 100 <= simulation.clock.now() < 900 and isinstance(event.object, Pod):
            lowest.append(sum(1 for p in simulation.cluster.list("Pod")
                              if isinstance(p, Pod) and p.status.phase == "Running"))

    simulation.cluster.watch(("Pod",), watch, replay=False)
    results = simulation.run()
    assert len([e for e in results.evictions if e["action"] == "drain"]) == 2
    assert min(lowest) >= 1
    assert results.jobs[0]["phase"] == "Completed"


def test_a_jobs_replicas_are_expected_even_while_an_evicted_pod_is_not_back_yet() -> None:
    owner = OwnerReference(kind="Job", name="train", apiVersion="batch.volcano.sh/v1alpha1")
    owned = [p.model_copy(update={"metadata": p.metadata.model_copy(update={"ownerReferences": [owner]})})
             for p in pods(3)]
    assert disruptions_allowed(budget(maxUnavailable=1), owned, {"default/train": 4}) == 0
    assert disruptions_allowed(budget(maxUnavailable=1), owned, {"default/train": 3}) == 1
    done = owned[0].model_copy(update={"metadata": owned[0].metadata.model_copy(update={"name": "p9"}),
                                       "status": owned[0].status.model_copy(update={"phase": "Succeeded"})})
    # a pod that already succeeded is finished work, not an unavailable one
    assert disruptions_allowed(budget(maxUnavailable=1), [*owned, done], {"default/train": 4}) == 1


PRIORITY_CLASSES = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
"""


def _budgeted_job(name: str, replicas: int, minimum: int, chips: int, klass: str, at: int, budget: int | None,
                  as_pdb: bool) -> str:
    annotations = f'hetsched.io/submit-at: "{at}"'
    if budget is not None and not as_pdb:
        annotations += f', hetsched.io/max-unavailable: "{budget}"'
    text = f"""
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: {name}, namespace: default, annotations: {{{annotations}}}}}
spec:
  minAvailable: {minimum}
  priorityClassName: {klass}
  tasks:
  - name: worker
    replicas: {replicas}
    template:
      metadata: {{annotations: {{hetsched.io/duration: "600"}}}}
      spec:
        containers: [{{name: w, resources: {{limits: {{{ASCEND}: {chips}}}, requests: {{cpu: "1"}}}}}}]
"""
    if budget is not None and as_pdb:
        text += f"""---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: {name}, namespace: default}}
spec: {{maxUnavailable: {budget}, selector: {{matchLabels: {{volcano.sh/job-name: {name}}}}}}}
"""
    return text


@settings(max_examples=int(os.environ.get("HETSCHED_FAULT_EXAMPLES", "300")) // 6, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(low=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 2), st.sampled_from([2, 4, 8]),
                              st.one_of(st.none(), st.integers(0, 2)), st.booleans()), min_size=1, max_size=4),
       high=st.lists(st.tuples(st.integers(1, 2), st.sampled_from([2, 4, 8]), st.integers(50, 300)),
                     min_size=1, max_size=3))
def test_random_preemption_never_exceeds_a_budget(
        low: list[tuple[int, int, int, int | None, bool]], high: list[tuple[int, int, int]]) -> None:
    """Low-priority jobs (elastic or not) with random budgets — the job's annotation or a
    PodDisruptionBudget — fill three Ascend servers; high-priority gangs arrive and preempt. Whenever a pod
    is evicted, its job still has at least its replicas minus its budget running (or already done)."""
    documents = [PRIORITY_CLASSES]
    replicas: dict[str, int] = {}
    budgets: dict[str, int] = {}
    for i, (minimum, spare, chips, budget, as_pdb) in enumerate(low):
        replicas[f"low{i}"] = minimum + spare
        if budget is not None:
            budgets[f"low{i}"] = budget
        documents.append(_budgeted_job(f"low{i}", minimum + spare, minimum, chips, "low", 0, budget, as_pdb))
    for i, (size, chips, at) in enumerate(high):
        documents.append(_budgeted_job(f"high{i}", size, size, chips, "high", at, None, False))
    simulation = Simulation([accel_node(f"n{i}") for i in range(3)], load_text("---".join(documents)),
                            parse_conf(CONF), until=20_000)
    broken: list[str] = []

    def watch(event: Any) -> None:
        pod = event.object
        if event.type != "DELETED" or not isinstance(pod, Pod) or pod.status.phase != "Running":
            return
        job = pod.metadata.annotations["volcano.sh/job-name"]
        if job not in budgets:
            return
        up = sum(1 for p in simulation.cluster.list("Pod") if isinstance(p, Pod)
                 and p.status.phase in ("Running", "Succeeded")
                 and p.metadata.annotations["volcano.sh/job-name"] == job)
        if up < replicas[job] - budgets[job]:
            broken.append(f"{job}: {up} running or done of {replicas[job]}, budget {budgets[job]}")

    simulation.cluster.watch(("Pod",), watch, replay=False)
    results = simulation.run()
    assert not broken, broken[:3]
    assert {j["name"] for j in results.jobs} == set(replicas) | {f"high{i}" for i in range(len(high))}
