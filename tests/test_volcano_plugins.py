"""Volcano's plugins that hetsched had no counterpart for (issue 31), each case translated from Volcano's
own tests or user guide (the source is named in each test):

- ``sla``: a job past its SLA waiting time goes first, is admitted whatever later tiers say, and holds
  what it is given until its gang fits;
- ``cdp``: a Running pod is no victim until its ``volcano.sh/cooldown-time`` has passed;
- ``resource-strategy-fit``: per-resource MostAllocated/LeastAllocated scores, the pod's own strategy,
  scarce-resource avoidance and CPU kept for idle GPUs.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import yaml

from hetsched.api.manifest import ManifestError, load_text
from hetsched.api.objects import AnyObject, Condition, Node, Pod, PodGroup
from hetsched.api.quantity import parse_quantity
from hetsched.ports import WatchEvent
from hetsched.scheduler.cache import SchedulerCache
from hetsched.scheduler.contract.framework import Arguments
from hetsched.scheduler.defaults import ConfError, parse_conf
from hetsched.scheduler.engine.session import Session
from hetsched.scheduler.plugins.resourcestrategyfit import NAME, ResourceStrategyFit
from tests.builders import gang, harness, node, pod, podgroup, priority_class, queue, running_on

pytestmark = pytest.mark.timeout(120)

SLA_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enableJobPipelined: {pipelined}
  - name: conformance
  - name: sla
    arguments: {arguments}
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"""


def sla_conf(*, gang_pipelined: bool = False, arguments: str = "{}") -> str:
    return SLA_CONF.format(pipelined=str(gang_pipelined).lower(), arguments=arguments)


def with_sla(objects: list[AnyObject], waiting: str) -> list[AnyObject]:
    """The PodGroup among ``objects`` annotated with ``volcano.sh/sla-waiting-time: waiting``."""
    out: list[AnyObject] = []
    for obj in objects:
        if isinstance(obj, PodGroup):
            obj = obj.model_copy(update={"metadata": obj.metadata.model_copy(
                update={"annotations": {"volcano.sh/sla-waiting-time": waiting}})})
        out.append(obj)
    return out


def scheduled_running(made: Pod, node_name: str, at: float) -> Pod:
    """``made`` bound to ``node_name``, Running, scheduled at ``at`` (the PodScheduled condition)."""
    bound = running_on(made, node_name)
    return bound.model_copy(update={"status": bound.status.model_copy(update={
        "conditions": [Condition(type="PodScheduled", status="True", lastTransitionTime=at)]})})


# ------------------------------------------------------------------------------------------------ sla


def test_sla_orders_jobs_by_deadline_and_those_without_one_last() -> None:
    """sla_test.go TestSlaPlugin: with ``sla-waiting-time: 3m`` for every job, a job without its own goes
    before one whose annotation says 1h; with no argument, the one with an SLA goes first. Here each job
    is one 4-CPU pod and the node fits one: the first in order runs."""
    objects: list[AnyObject] = [node("n0", cpu="4"), *gang("job1", 1, cpu="4"),
                                *with_sla(gang("job2", 1, cpu="4"), "1h")]
    h = harness(objects, sla_conf(arguments='{"sla-waiting-time": 3m}'))
    h.cycle()
    assert h.bindings() == {"job1-0": "n0"}
    h = harness(objects, sla_conf())
    h.cycle()
    assert h.bindings() == {"job2-0": "n0"}


@pytest.mark.parametrize(("arguments", "message"), [
    ('{"sla-waiting-time": 1}', "sla-waiting-time must be a duration"),
    ('{"sla-waiting-time": "0s"}', "must be a duration above 0"),
    ('{"sla-waiting-time": "soon"}', "must be a duration"),
    ('{"sla-wait": "1h"}', "unknown argument 'sla-wait'"),
])
def test_a_bad_sla_argument_is_an_error_not_ignored(arguments: str, message: str) -> None:
    """sla_test.go's "sla error type placement" (an integer): Volcano logs it and runs without an SLA;
    here the configuration is refused naming the plugin and the argument."""
    with pytest.raises(ConfError, match=message):
        parse_conf(sla_conf(arguments=arguments))


def full_cluster() -> list[AnyObject]:
    """Two 4-CPU nodes; a job runs on n0 (forever)."""
    busy = [podgroup("busy", 1, phase="Running"), running_on(pod("busy-0", "busy", cpu="4"), "n0")]
    return [node("n0", cpu="4"), node("n1", cpu="4"), *busy]


def test_past_its_sla_a_job_is_admitted_whatever_later_tiers_say() -> None:
    """Volcano's sla design (docs/design/sla-plugin.md): JobEnqueueable votes Permit once the job waited
    past its SLA, and the later tier's ``overcommit`` is not asked. The cluster's headroom (8 CPUs × 1.2
    − 4 running) cannot take a job of 8 CPUs: before its 10 minutes it stays Pending, after it is Inqueue."""
    waiting = with_sla([podgroup("big", 2, phase="Pending", min_resources={"cpu": "8"})], "10m")
    h = harness([*full_cluster(), *waiting, *[pod(f"big-{i}", "big", cpu="4") for i in range(2)]], sla_conf())
    h.cycle()
    assert h.podgroup("big").status.phase == "Pending"
    assert "headroom" in h.condition("big")
    h.clock.advance_to(601)
    h.cycle()
    assert h.podgroup("big").status.phase == "Inqueue"


def test_past_its_sla_a_gang_holds_what_it_gets_until_the_rest_frees() -> None:
    """The design's JobPipelined Permit: the 2-pod gang ``big`` (past its SLA) fits one pod now; it keeps
    that room this cycle, so the later one-pod job ``small`` does not take it, and once ``busy`` ends the
    gang runs whole. Without the SLA (and gang's own rule on pipelining back on), ``small`` takes n1."""
    objects = [*full_cluster(), *with_sla(gang("big", 2, cpu="4"), "1m"), *gang("small", 1, cpu="4")]
    h = harness(objects, sla_conf())
    h.clock.advance_to(3600)
    h.cycle()
    assert h.bindings() == {"busy-0": "n0"}
    assert "reserving room for 1 pod(s) this cycle while 1 more are missing" in h.condition("big")
    h.cluster.delete("Pod", "default/busy-0")
    h.cycle()
    assert sorted(k for k, v in h.bindings().items() if v) == ["big-0", "big-1"]

    h = harness([*full_cluster(), *gang("big", 2, cpu="4"), *gang("small", 1, cpu="4")],
                sla_conf(gang_pipelined=True))
    h.clock.advance_to(3600)
    h.cycle()
    assert h.bindings() == {"busy-0": "n0", "small-0": "n1"}


def test_with_gang_in_the_same_tier_gang_rejects_the_partial_reservation() -> None:
    """Volcano's tiered vote: ``gang`` rejects pipelining a partial gang in the tier where ``sla`` permits
    it, and a rejection wins — so the reservation needs ``sla`` in an earlier tier (or gang's
    ``enableJobPipelined: false``), as the plugin's docstring says."""
    objects = [*full_cluster(), *with_sla(gang("big", 2, cpu="4"), "1m"), *gang("small", 1, cpu="4")]
    h = harness(objects, sla_conf(gang_pipelined=True))
    h.clock.advance_to(3600)
    h.cycle()
    assert h.bindings() == {"busy-0": "n0", "small-0": "n1"}


@pytest.mark.parametrize("value", ["soon", "0s", "-5m", "1" * 100])
def test_a_bad_sla_annotation_is_refused_naming_the_field(value: str) -> None:
    text = f"""\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: train, annotations: {{sla-waiting-time: "{value}"}}}}
spec:
  tasks: [{{name: w, replicas: 1, template: {{spec: {{containers: [{{name: c, image: x}}]}}}}}}]
"""
    with pytest.raises(ManifestError) as error:
        load_text(text, "job.yaml")
    assert 'metadata.annotations["sla-waiting-time"]' in str(error.value.problems[0])


# ------------------------------------------------------------------------------------------------ cdp

CDP_CONF = """\
actions: "enqueue, allocate, preempt, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
  - name: cdp
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


def cooled(name: str, cooldown: str | None, scheduled_at: float, node_name: str, **labels: Any) -> list[AnyObject]:
    annotations = {"volcano.sh/cooldown-time": cooldown} if cooldown is not None else {}
    made = pod(f"{name}-0", name, cpu="1", annotations=annotations)
    return [podgroup(name, 1, phase="Running", priority_class="low"),
            scheduled_running(made.model_copy(update={"spec": made.spec.model_copy(
                update={"priorityClassName": "low"})}), node_name, scheduled_at)]


def test_a_pod_in_its_cooldown_is_no_victim() -> None:
    """cdp_test.go TestPreemptableFn: a pod with ``cooldown-time: 600s`` scheduled 100 s ago is protected;
    one scheduled 800 s ago is not. One 1-CPU node, a high-priority pod waiting."""
    for scheduled_at, evicts in ((0.0, False), (-700.0, True)):
        objects = [priority_class("low", 10), priority_class("high", 1000), node("n0", cpu="1"),
                   *cooled("warm", "600s", scheduled_at, "n0"),
                   *gang("urgent", 1, cpu="1", priority_class="high")]
        h = harness(objects, CDP_CONF)
        h.clock.advance_to(100)
        h.cycle()
        events = [e.key for e in h.cluster.events if e.reason == "Evicted"]
        assert (events == ["default/warm-0"]) is evicts, (scheduled_at, events)


def test_after_the_cooldown_the_pod_is_a_victim_again() -> None:
    objects = [priority_class("low", 10), priority_class("high", 1000), node("n0", cpu="1"),
               *cooled("warm", "10m", 0.0, "n0"), *gang("urgent", 1, cpu="1", priority_class="high")]
    h = harness(objects, CDP_CONF)
    h.cycle()
    assert not [e for e in h.cluster.events if e.reason == "Evicted"]
    h.clock.advance_to(601)
    h.cycle()
    assert [e.key for e in h.cluster.events if e.reason == "Evicted"] == ["default/warm-0"]


def test_a_pod_without_a_cooldown_or_not_running_is_not_protected() -> None:
    objects = [priority_class("low", 10), priority_class("high", 1000), node("n0", cpu="1"),
               *cooled("plain", None, 0.0, "n0"), *gang("urgent", 1, cpu="1", priority_class="high")]
    h = harness(objects, CDP_CONF)
    h.cycle()
    assert [e.key for e in h.cluster.events if e.reason == "Evicted"] == ["default/plain-0"]


def test_a_jobs_cooldown_reaches_its_pods_and_a_bad_one_is_refused() -> None:
    """The user guide's cdp example puts ``volcano.sh/cooldown-time`` on the Job; Volcano's controller hands
    it to the pods. ``600abcde`` (cdp_test.go's "not-enabled" case) is refused naming the field."""
    job = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: test-job
  annotations: {volcano.sh/preemptable: "true", volcano.sh/cooldown-time: "%s"}
spec:
  minAvailable: 1
  tasks: [{name: worker, replicas: 1, template: {spec: {containers: [{name: c, image: nginx}]}}}]
"""
    from hetsched.cluster.memory import MemoryCluster
    from hetsched.controllers.job import JobController
    from hetsched.sim.kernel import SimClock

    clock = SimClock()
    cluster = MemoryCluster(clock)
    cluster.create(queue("default"))
    controller = JobController(cluster, clock)
    (made,) = load_text(job % "600s")
    cluster.create(made)
    controller.process()
    cluster.update_podgroup_status("default/test-job", "Inqueue", None)
    controller.process()
    pods = [p for p in cluster.list("Pod") if isinstance(p, Pod)]
    assert pods and all(p.metadata.annotations["volcano.sh/cooldown-time"] == "600s" for p in pods)
    assert all(p.metadata.annotations["volcano.sh/preemptable"] == "true" for p in pods)
    with pytest.raises(ManifestError) as error:
        load_text(job % "600abcde", "job.yaml")
    assert 'metadata.annotations["volcano.sh/cooldown-time"]: must be a duration' in str(error.value.problems[0])


# ----------------------------------------------------------------------------------- resource-strategy-fit

GPU = "nvidia.com/gpu"
FOO = "example.com/foo"


def fit_node(name: str, **extra: str) -> Node:
    made = node(name, cpu="4", memory="4Gi", pods=10)
    return made.model_copy(update={"status": made.status.model_copy(update={
        "allocatable": {**made.status.allocatable, **{k: parse_quantity(v) for k, v in extra.items()}}})})


def scores(objects: list[AnyObject], arguments: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each pending pod's ``resource-strategy-fit`` score on every node, as Volcano's tests read
    ``ssn.NodeOrderFn`` (one pod at a time, on an empty cluster)."""
    cache = SchedulerCache()
    cache.handle(WatchEvent("ADDED", queue("default")))
    for obj in objects:
        cache.handle(WatchEvent("ADDED", obj))
    conf = parse_conf('actions: "allocate"\ntiers:\n- plugins:\n  - name: resource-strategy-fit\n')
    session = Session(cache.snapshot(), conf)
    plugin = ResourceStrategyFit(Arguments(NAME, arguments))
    nodes = np.arange(len(session.nodes))
    found: dict[str, dict[str, float]] = {}
    for job in session.snapshot.active.values():
        for group in job.groups:
            values = plugin.node_score(session, group, nodes, np.zeros(len(nodes), dtype=np.int64))
            for pod_key in group.pending:
                found[pod_key.split("/")[-1]] = dict(zip(session.nodes.names, values.tolist(), strict=True))
    return found


def flat(found: dict[str, dict[str, float]]) -> dict[str, float]:
    return {f"{pod_name}@{node_name}": value for pod_name, row in found.items() for node_name, value in row.items()}


def requesting(name: str, cpu: str, memory: str, annotations: dict[str, str] | None = None,
               **extra: str) -> list[AnyObject]:
    made = pod(name, name, cpu=cpu, memory=memory, annotations=annotations)
    containers = [c.model_copy(update={"resources": c.resources.model_copy(update={
        "requests": {**c.resources.requests, **{k: parse_quantity(v) for k, v in extra.items()}}})})
        for c in made.spec.containers]
    return [podgroup(name, 1),
            made.model_copy(update={"spec": made.spec.model_copy(update={"containers": containers})})]


def test_resource_strategy_fit_scores_as_volcanos_tests_say() -> None:
    """resource_strategy_fit_test.go TestResourceStrategyFitPlugin, both cases: GPU MostAllocated, foo
    LeastAllocated (weights 1/1, then 1/2), plugin weight 10, on nodes with and without each resource."""
    objects: list[AnyObject] = [
        fit_node("n1", **{GPU: "10"}), fit_node("n2", **{GPU: "5"}), fit_node("n3", **{FOO: "10"}),
        fit_node("n4", **{FOO: "5"}),
        *requesting("p1", "1", "1Gi", **{FOO: "2"}), *requesting("p2", "1", "1Gi", **{FOO: "3"}),
        *requesting("p3", "1", "10Gi", **{GPU: "2"}), *requesting("p4", "1", "1Gi", **{GPU: "3"})]
    arguments = {"resourceStrategyFitWeight": 10, "resources": {
        GPU: {"type": "MostAllocated", "weight": 1}, FOO: {"type": "LeastAllocated", "weight": 1}}}
    assert flat(scores(objects, arguments)) == pytest.approx(flat({
        "p1": {"n1": 0, "n2": 0, "n3": 800, "n4": 600}, "p2": {"n1": 0, "n2": 0, "n3": 700, "n4": 400},
        "p3": {"n1": 200, "n2": 400, "n3": 0, "n4": 0}, "p4": {"n1": 300, "n2": 600, "n3": 0, "n4": 0}}))
    objects = [fit_node("n5", **{GPU: "10", FOO: "5"}), fit_node("n6", **{FOO: "10"}),
               *requesting("p5", "1", "1Gi", **{GPU: "4", FOO: "4"})]
    arguments["resources"][FOO]["weight"] = 2  # type: ignore[index]
    assert flat(scores(objects, arguments)) == pytest.approx(flat({"p5": {"n5": 800 / 3, "n6": 400}}))


def test_a_pods_own_strategy_replaces_the_arguments() -> None:
    """The user guide's pod-level example: MostAllocated with weights {gpu: 5, cpu: 1} on the pod; memory,
    not named there, is not scored; a wildcard in the arguments matches by the longest prefix."""
    own = {"volcano.sh/resource-strategy-scoring-type": "MostAllocated",
           "volcano.sh/resource-strategy-weight": '{"nvidia.com/gpu": 5, "cpu": 1}'}
    objects: list[AnyObject] = [fit_node("n1", **{GPU: "4"}), *requesting("p", "2", "2Gi", own, **{GPU: "1"})]
    # (1/4 × 5 + 2/4 × 1) / 6 × 100 × 10
    assert scores(objects, {})["p"]["n1"] == pytest.approx((1.25 + 0.5) / 6 * 1000)
    wild = {"resources": {"nvidia.com/*": {"type": "LeastAllocated", "weight": 1},
                          "nvidia.com/gpu*": {"type": "MostAllocated", "weight": 1}}}
    plain: list[AnyObject] = [fit_node("n1", **{GPU: "4"}), *requesting("q", "2", "2Gi", **{GPU: "1"})]
    assert scores(plain, wild)["q"]["n1"] == pytest.approx(0.25 * 1000)  # the longer pattern: MostAllocated


def test_sra_sends_cpu_work_away_from_gpu_servers() -> None:
    """sra: a CPU pod scores higher on the node without GPUs; on both nodes a GPU pod scores the same."""
    objects: list[AnyObject] = [fit_node("gpu", **{GPU: "8"}), fit_node("cpu"), *requesting("web", "1", "1Gi")]
    arguments = {"resourceStrategyFitWeight": 0, "sra": {"enable": True, "resources": GPU, "weight": 10}}
    assert scores(objects, arguments) == {"web": {"gpu": 0.0, "cpu": 1000.0}}


def test_proportional_keeps_cpu_for_idle_gpus() -> None:
    """proportional (nvidia.com/gpu.cpu: 1 per idle GPU): on a 4-CPU node with 2 idle GPUs a CPU pod may use
    only 2 CPUs, so of three 1-CPU pods two run and the third waits, saying why; a GPU pod is not held back."""
    conf = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: gang
  - name: predicates
  - name: resource-strategy-fit
    arguments:
      proportional: {enable: true, resources: nvidia.com/gpu, resourceProportion: {nvidia.com/gpu.cpu: 1,
                     nvidia.com/gpu.memory: 0.5}}
"""
    objects: list[AnyObject] = [fit_node("n1", **{GPU: "2"}), *[o for i in range(3)
                                                               for o in requesting(f"cpu{i}", "1", "100Mi")]]
    h = harness(objects, conf)
    h.cycle()
    assert sorted(h.bindings()) == ["cpu0", "cpu1"]
    assert "keep CPU and memory in proportion to their idle nvidia.com/gpu" in h.condition("cpu2")
    h = harness([fit_node("n1", **{GPU: "2"}), *requesting("train", "4", "1Gi", **{GPU: "2"})], conf)
    h.cycle()
    assert h.bindings() == {"train": "n1"}


@pytest.mark.parametrize(("arguments", "message"), [
    ({"resources": {"*": {"type": "MostAllocated"}}}, "a pattern may only end in one '*'"),
    ({"resources": {"a*/b": {"type": "MostAllocated"}}}, "a pattern may only end in one '*'"),
    ({"resources": {GPU: {"type": "MostAlocated"}}}, "type must be MostAllocated or LeastAllocated"),
    ({"resources": {GPU: {"kind": "MostAllocated"}}}, "unknown key 'kind'"),
    ({"resourceStrategyFitWeight": "ten"}, "must be a whole number"),
    ({"sra": {"enable": "yes"}}, "sra.enable must be true or false"),
    ({"proportional": {"enable": True, "resources": GPU, "resourceProportion": {f"{GPU}.cpu": "four"}}},
     "must be a number"),
])
def test_what_volcano_would_ignore_is_an_error(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ResourceStrategyFit(Arguments(NAME, arguments))


def test_volcanos_lenient_weights_mean_the_same() -> None:
    """Volcano reads a resource weight of 0 or less as 1 and a negative plugin weight as 10."""
    plugin = ResourceStrategyFit(Arguments(NAME, {"resourceStrategyFitWeight": -1,
                                                  "resources": {GPU: {"type": "MostAllocated", "weight": 0}}}))
    assert plugin.weight == 10 and plugin.strategies == {GPU: ("MostAllocated", 1)}


@pytest.mark.parametrize(("annotations", "field"), [
    ({"volcano.sh/resource-strategy-scoring-type": "MostAllocated"}, "volcano.sh/resource-strategy-scoring-type"),
    ({"volcano.sh/resource-strategy-scoring-type": "MostAllocated", "volcano.sh/resource-strategy-weight": "{gpu}"},
     "volcano.sh/resource-strategy-weight"),
    ({"volcano.sh/resource-strategy-scoring-type": "Best", "volcano.sh/resource-strategy-weight": '{"cpu": 1}'},
     "volcano.sh/resource-strategy-scoring-type"),
])
def test_a_bad_pod_strategy_is_refused_naming_the_annotation(annotations: dict[str, str], field: str) -> None:
    made = pod("p", annotations=annotations)
    text = yaml.safe_dump(made.model_dump(mode="json", exclude_none=True))
    with pytest.raises(ManifestError) as error:
        load_text(text, "pod.yaml")
    assert f'metadata.annotations["{field}"]' in str(error.value.problems[0])


# ------------------------------------------------------------------------------------------- task-topology

TOPOLOGY_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: task-topology
    arguments:
      task-topology.weight: 10
  - name: proportion
  - name: nodeorder
{binpack}"""


def tf_job(annotations: dict[str, str], workers: int = 2) -> list[AnyObject]:
    group = podgroup("tf", 1 + workers)
    group = group.model_copy(update={"metadata": group.metadata.model_copy(update={"annotations": annotations})})
    return [group, pod("tf-ps-0", "tf", task="ps"), *[pod(f"tf-worker-{i}", "tf", task="worker")
                                                      for i in range(workers)]]


def test_task_affinity_puts_the_ps_with_its_workers() -> None:
    """The user guide's TensorFlow job: with ``ps,worker`` affinity the parameter server and its workers
    share a node; without it, ``nodeorder``'s least-requested score spreads them over the three nodes."""
    nodes = [node(f"n{i}", cpu="8") for i in range(3)]
    h = harness([*nodes, *tf_job({"volcano.sh/task-topology-affinity": "ps,worker",
                                  "volcano.sh/task-topology-task-order": "ps,worker"})],
                TOPOLOGY_CONF.format(binpack=""))
    h.cycle()
    assert len(set(h.bindings().values())) == 1 and len(h.bindings()) == 3
    h = harness([*nodes, *tf_job({})], TOPOLOGY_CONF.format(binpack=""))
    h.cycle()
    assert len(set(h.bindings().values())) == 3


def test_task_anti_affinity_spreads_pods_binpack_would_pack() -> None:
    """``worker`` anti-affine with itself: the workers take a node each, though binpack would pack them."""
    nodes = [node(f"n{i}", cpu="8") for i in range(3)]
    conf = TOPOLOGY_CONF.format(binpack="  - name: binpack\n").replace("  - name: nodeorder\n", "")
    h = harness([*nodes, *tf_job({"volcano.sh/task-topology-anti-affinity": "worker"}, workers=3)], conf)
    h.cycle()
    workers = {v for k, v in h.bindings().items() if "worker" in k}
    assert len(workers) == 3
    h = harness([*nodes, *tf_job({}, workers=3)], conf)
    h.cycle()
    assert len(set(h.bindings().values())) == 1


@pytest.mark.parametrize(("annotation", "value", "message"), [
    ("volcano.sh/task-topology-affinity", "$%GF$^trtqwrg^", "is not a task name"),
    ("volcano.sh/task-topology-anti-affinity", "ps;worker,chief", "task 'chief' is not one of the job's tasks"),
    ("volcano.sh/task-topology-task-order", "ps,ps", "a task is named twice"),
])
def test_task_topology_annotations_are_checked_against_the_jobs_tasks(annotation: str, value: str,
                                                                      message: str) -> None:
    """topology_test.go Test_readTopologyFromPgAnnotations: garbage and unknown tasks are errors (Volcano
    skips the job's rules with a log line; hetsched refuses the Job, naming the annotation)."""
    text = f"""\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: tf, annotations: {{"{annotation}": "{value}"}}}}
spec:
  tasks:
  - {{name: ps, replicas: 1, template: {{spec: {{containers: [{{name: c, image: x}}]}}}}}}
  - {{name: worker, replicas: 2, template: {{spec: {{containers: [{{name: c, image: x}}]}}}}}}
"""
    with pytest.raises(ManifestError) as error:
        load_text(text, "job.yaml")
    assert f'metadata.annotations["{annotation}"]' in str(error.value.problems[0])
    assert message in str(error.value.problems[0])
    good = text.replace(value, "ps,worker")
    (job,) = load_text(good, "job.yaml")
    assert job.metadata.annotations[annotation] == "ps,worker"


def test_hierarchical_drf_annotations_are_refused_not_ignored() -> None:
    """hdrf_test.go's queues carry volcano.sh/hierarchy annotations; hetsched has no hierarchical DRF, so
    such a Queue is refused naming the annotation and what to use instead (issue 31: never silently ignored)."""
    text = """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: root-eng-dev
  annotations: {volcano.sh/hierarchy: root/eng/dev, volcano.sh/hierarchy-weights: 100/50/50}
spec: {weight: 1}
"""
    with pytest.raises(ManifestError) as error:
        load_text(text, "queue.yaml")
    found = "; ".join(map(str, error.value.problems))
    assert 'metadata.annotations["volcano.sh/hierarchy"]' in found and "spec.parent" in found


def test_nodeorder_scores_are_kube_schedulers_formulas_on_every_node() -> None:
    """``nodeorder``'s least-requested, most-requested and balanced-allocation scores (kube-scheduler's
    NodeResourcesFit and NodeResourcesBalancedAllocation, as Volcano's nodeorder weighs them), node by node,
    against the formulas written out here: nodes with nothing free, over-committed ones (fraction > 1), one
    with no memory at all (fraction 1), and pods placed earlier in the cycle counted."""
    from hetsched.scheduler.plugins.nodeorder import NodeOrder

    rng = np.random.default_rng(5)
    nodes = [node(f"n{i}", cpu=str(int(rng.integers(1, 64))), memory=f"{int(rng.integers(1, 256))}Gi")
             for i in range(40)] + [node("no-memory", cpu="8", memory="0")]
    running = [running_on(pod(f"r{i}", None, cpu=str(int(rng.integers(1, 8))), memory=f"{int(rng.integers(1, 64))}Gi"),
                          f"n{int(rng.integers(0, 40))}") for i in range(60)]
    cache = SchedulerCache()
    for obj in [queue("default"), *nodes, podgroup("web", 1), pod("web-0", "web", cpu="2", memory="3Gi"), *running]:
        cache.handle(WatchEvent("ADDED", obj))
    snapshot = cache.snapshot()
    group = snapshot.jobs["default/web"].groups[0]
    rows = np.arange(len(snapshot.nodes), dtype=np.int64)
    placed = rng.integers(0, 3, len(rows)).astype(np.int64)
    columns = snapshot.resources.columns
    for weights in ({}, {"mostrequested.weight": 2, "leastrequested.weight": 0}, {"balancedresource.weight": 3}):
        arguments = {"nodeaffinity.weight": 0, "tainttoleration.weight": 0, **weights}
        plugin = NodeOrder(Arguments("nodeorder", arguments))
        session = Session(snapshot, parse_conf("actions: allocate\ntiers:\n- plugins: [{name: nodeorder}]"))
        got = plugin.node_score(session, group, rows, placed)
        fractions = []
        for column in (columns["cpu"], columns["memory"]):
            alloc = snapshot.nodes.alloc[column].astype(np.float64)
            total = snapshot.nodes.used[column] + (placed + 1) * group.request[column]
            fractions.append([t / a if a > 0 else 1.0 for t, a in zip(total.tolist(), alloc.tolist(), strict=True)])
        least, most, balanced = (float(weights.get(k, d)) for k, d in (
            ("leastrequested.weight", 1), ("mostrequested.weight", 0), ("balancedresource.weight", 1)))
        for row, (cpu, memory) in enumerate(zip(*fractions, strict=True)):
            c, m = min(cpu, 1.0), min(memory, 1.0)
            expected = (least * ((1 - c) + (1 - m)) * 50 + most * ((cpu if cpu <= 1 else 0) + (memory if memory <= 1
                        else 0)) * 50 + balanced * (1 - abs(c - m) / 2) * 100)
            assert got[row] == pytest.approx(expected, abs=1e-9), (weights, snapshot.nodes.names[row])
