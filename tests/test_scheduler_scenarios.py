"""Scenario tables: a small cluster and objects in, the bindings and pending reasons a user expects out.

Covers: gang all-or-nothing, per-task minAvailable, resource fit per extended resource, nodeSelector,
required node affinity, taints/tolerations, cordoned and NotReady nodes, the pod-count limit, priority
order, enqueue gating (overcommit), queue capability in allocate, Closed queues, backfill of best-effort
pods, binpack vs least-requested spreading, PodGroup phases and conditions.
Not covered: preemption/reclaim and device topology (later issues).
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.builders import gang, harness, node, pod, podgroup, priority_class, queue

ASCEND = "huawei.com/Ascend910"


def test_gang_binds_all_pods_at_once_when_they_fit() -> None:
    h = harness([node("n1", **{"huawei.com__Ascend910": 8}), node("n2", **{"huawei.com__Ascend910": 8}),
                 *gang("bert", 8, cpu="500m", limits={ASCEND: 2})])
    result = h.cycle()
    assert len(result.decisions.binds) == 8
    assert Counter(h.bindings().values()) == {"n1": 4, "n2": 4}
    assert h.podgroup("bert").status.phase == "Running"
    assert "Scheduled" in {c.type for c in h.podgroup("bert").status.conditions}


def test_gang_that_does_not_fit_binds_nothing_and_says_why() -> None:
    h = harness([node("n1", **{"huawei.com__Ascend910": 8}), node("cpu1"),
                 *gang("bert", 3, limits={ASCEND: 4}, cpu="1")])
    h.cycle()
    assert h.bindings() == {}
    condition = h.condition("bert")
    assert condition.startswith("NotEnoughResources: 1/3 tasks in gang unschedulable: 0/2 nodes are available:")
    assert "2 Insufficient huawei.com/Ascend910" in condition
    assert h.podgroup("bert").status.phase == "Inqueue"


def test_two_gangs_compete_one_gets_everything_the_other_nothing() -> None:
    nodes = [node(f"n{i}", cpu="4") for i in range(4)]
    h = harness([*nodes, *gang("a", 4, cpu="3"), *gang("b", 4, cpu="3")])
    h.cycle()
    bound = Counter(name.rsplit("-", 1)[0] for name in h.bindings())
    assert sorted(bound.values()) == [4]


def test_selector_mismatch_is_unresolvable() -> None:
    h = harness([node("n1", labels={"accelerator": "cambricon-mlu"}),
                 *gang("npu", 1, selector={"accelerator": "huawei-ascend"})])
    result = h.cycle()
    status = result.decisions.unschedulable["default/npu"]
    assert status.code.name == "UNSCHEDULABLE_AND_UNRESOLVABLE"
    assert h.condition("npu") == ("Unresolvable: 1/1 tasks in gang unschedulable: 0/1 nodes are available: "
                                  "1 node(s) didn't match Pod's node selector")


@pytest.mark.parametrize(("tolerations", "expected"), [
    ([], None),
    ([{"key": "dedicated", "operator": "Equal", "value": "npu", "effect": "NoSchedule"}], "tainted"),
    ([{"key": "dedicated", "operator": "Exists"}], "tainted"),
    ([{"key": "dedicated", "operator": "Equal", "value": "gpu"}], None),
])
def test_taints_need_matching_tolerations(tolerations: list[dict[str, str]], expected: str | None) -> None:
    h = harness([node("tainted", taints=[{"key": "dedicated", "value": "npu", "effect": "NoSchedule"}]),
                 podgroup("p", 1), pod("p-0", "p", tolerations=tolerations)])
    h.cycle()
    assert h.bindings().get("p-0") == expected
    if expected is None:
        assert "untolerated taint {dedicated: npu}" in h.condition("p")


def test_cordoned_and_not_ready_nodes_are_skipped() -> None:
    h = harness([node("cordoned", unschedulable=True), node("down", ready=False), node("ok", cpu="1"),
                 *gang("g", 2, cpu="1")])
    h.cycle()
    assert h.bindings() == {}
    condition = h.condition("g")
    assert "1 node(s) were unschedulable" in condition and "1 node(s) were not ready" in condition
    assert "1 Insufficient cpu" in condition


@pytest.mark.parametrize(("operator", "values", "expected"), [
    ("In", ["a100", "h100"], "gpu-a"), ("NotIn", ["a100"], "gpu-h"), ("Exists", [], "gpu-a"),
    ("DoesNotExist", [], "plain"), ("Gt", ["70"], "gpu-a"), ("Lt", ["70"], "gpu-h"),
])
def test_required_node_affinity(operator: str, values: list[str], expected: str) -> None:
    key = "memory-gb" if operator in ("Gt", "Lt") else "gpu"
    nodes = [node("gpu-a", labels={"gpu": "a100", "memory-gb": "80"}),
             node("gpu-h", labels={"gpu": "h100", "memory-gb": "64"}), node("plain")]
    if key == "memory-gb":
        nodes = nodes[:2]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": key, "operator": operator, "values": values}]}]}}}
    h = harness([*nodes, podgroup("p", 1), pod("p-0", "p", affinity=affinity)])
    h.cycle()
    assert h.bindings()["p-0"] == expected


def test_pod_count_limit_is_a_resource() -> None:
    h = harness([node("small", pods=2), *gang("g", 3, cpu="100m")])
    h.cycle()
    assert h.bindings() == {}
    assert "1 Too many pods" in h.condition("g")


def test_task_level_min_available() -> None:
    objects = [node("n1", cpu="3"), podgroup("job", 2, min_task_member={"ps": 1}),
               pod("job-ps-0", "job", task="ps", cpu="2"), pod("job-worker-0", "job", task="worker", cpu="1"),
               pod("job-worker-1", "job", task="worker", cpu="1")]
    h = harness(objects)
    h.cycle()
    bound = h.bindings()
    assert "job-ps-0" in bound, "the ps task's minimum must be satisfied before workers fill the gang"
    assert len(bound) == 2


def test_elastic_pods_beyond_min_member_are_placed_when_room_remains() -> None:
    h = harness([node("n1", cpu="4"), *gang("elastic", 6, min_member=2, cpu="1")])
    h.cycle()
    assert len(h.bindings()) == 4
    assert h.podgroup("elastic").status.phase == "Running"


def test_higher_priority_job_gets_the_scarce_resource() -> None:
    objects = [priority_class("high", 1000), priority_class("low", 1), node("n1", **{"nvidia.com__gpu": 1}),
               podgroup("low", 1, priority_class="low"), pod("low-0", "low", limits={"nvidia.com/gpu": 1}),
               podgroup("high", 1, priority_class="high"), pod("high-0", "high", limits={"nvidia.com/gpu": 1})]
    h = harness(objects)
    h.cycle()
    assert h.bindings() == {"high-0": "n1"}


def test_enqueue_admits_only_what_fits_the_overcommitted_cluster() -> None:
    objects = [node("n1", cpu="10"),
               podgroup("fits", 1, phase="Pending", min_resources={"cpu": "8"}),
               podgroup("too-big", 1, phase="Pending", min_resources={"cpu": "8"})]
    h = harness(objects)
    result = h.cycle()
    assert result.decisions.enqueued == ["default/fits"]  # 10 × 1.2 = 12 cpu: only one 8-cpu job is admitted
    assert h.podgroup("fits").status.phase == "Inqueue"
    assert h.podgroup("too-big").status.phase == "Pending"
    loose = harness(objects, "actions: enqueue, allocate\ntiers:\n- plugins:\n  - name: overcommit\n"
                             "    arguments: {overcommit-factor: 2.0}\n")
    assert len(loose.cycle().decisions.enqueued) == 2


def test_queue_capability_is_enforced_when_allocating_not_only_at_admission() -> None:
    objects = [queue("capped", capability={"cpu": "2"}), node("n1", cpu="16"),
               *gang("a", 2, queue="capped", cpu="1"), *gang("b", 2, queue="capped", cpu="1")]
    h = harness(objects)
    h.cycle()
    h.cycle()
    assert len(h.bindings()) == 2
    assert "queue capped" in h.condition("b") or "queue capped" in h.condition("a")


def test_closed_queue_admits_nothing() -> None:
    h = harness([queue("frozen", state="Closed"), node("n1"),
                 podgroup("job", 1, queue="frozen", phase="Pending")])
    result = h.cycle()
    assert result.decisions.enqueued == []
    assert "queue frozen is Closed" in result.decisions.unschedulable["default/job"].message


def test_backfill_places_best_effort_pods() -> None:
    h = harness([node("n1", cpu="1"), *gang("busy", 1, cpu="1"), *gang("be", 2, best_effort=True)])
    h.cycle()
    bound = h.bindings()
    assert set(bound) == {"busy-0", "be-0", "be-1"}


def test_least_requested_spreads_and_binpack_packs() -> None:
    nodes = [node(f"n{i}", cpu="8") for i in range(4)]
    spread = harness([*nodes, *gang("g", 4, min_member=1, cpu="1")])
    spread.cycle()
    assert len(set(spread.bindings().values())) == 4
    packed = harness([*nodes, *gang("g", 4, min_member=1, cpu="1")],
                     "actions: enqueue, allocate\ntiers:\n- plugins:\n  - name: gang\n  - name: predicates\n"
                     "  - name: binpack\n")
    packed.cycle()
    assert set(packed.bindings().values()) == {"n0"}


def test_binpack_weights_extended_resources() -> None:
    conf = ("actions: allocate\ntiers:\n- plugins:\n  - name: gang\n  - name: binpack\n"
            "    arguments: {binpack.cpu: 0, binpack.memory: 0, binpack.resources: nvidia.com/gpu,"
            " binpack.resources.nvidia.com/gpu: 5}\n")
    objects = [node("empty", **{"nvidia.com__gpu": 8}), node("half", **{"nvidia.com__gpu": 8}),
               podgroup("running", 1), pod("running-0", "running", limits={"nvidia.com/gpu": 4}),
               podgroup("new", 1), pod("new-0", "new", limits={"nvidia.com/gpu": 2})]
    h = harness(objects, conf)
    h.cluster.bind("default/running-0", "half")
    h.cycle()
    assert h.bindings()["new-0"] == "half"


def test_pods_of_other_schedulers_are_left_alone_but_their_usage_counts() -> None:
    h = harness([node("n1", cpu="2"), podgroup("mine", 1),
                 pod("other", scheduler="default-scheduler", cpu="2"), pod("mine-0", "mine", cpu="1")])
    h.cluster.bind("default/other", "n1")
    h.cycle()
    assert h.bindings() == {"other": "n1"}
    assert "Insufficient cpu" in h.condition("mine")


def test_gang_waiting_for_resources_being_released_is_pipelined_not_bound() -> None:
    h = harness([node("n1", cpu="4"), *gang("old", 1, cpu="4"), *gang("new", 2, cpu="2")])
    h.cluster.bind("default/old-0", "n1")
    old = h.cluster.get("Pod", "default/old-0")
    h.cluster.update(old.model_copy(update={"metadata": old.metadata.model_copy(update={"deletionTimestamp": 0.0})}))
    result = h.cycle()
    assert result.decisions.binds == []
    assert sorted(n.pod for n in result.decisions.nominations) == ["default/new-0", "default/new-1"]
    assert result.decisions.unschedulable["default/new"].code.name == "WAIT"
    assert h.condition("new").startswith("Pipelined: 2/2 tasks in gang unschedulable: pipelined")
    nominated = h.cluster.get("Pod", "default/new-0")
    assert nominated.status.nominatedNodeName == "n1" and not nominated.spec.nodeName
    h.cluster.delete("Pod", "default/old-0")  # the terminating pod is gone: the gang binds
    h.cycle()
    assert sorted(h.bindings()) == ["new-0", "new-1"]


def test_job_naming_a_missing_queue_waits_with_that_reason() -> None:
    h = harness([node("n1"), podgroup("lost", 1, queue="nowhere", phase="Pending")])
    result = h.cycle()
    assert result.decisions.enqueued == []
    assert result.decisions.unschedulable["default/lost"].message == "queue nowhere does not exist"
