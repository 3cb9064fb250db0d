"""The ``capacity`` plugin (issue 31), each case translated from Volcano's
``pkg/scheduler/plugins/capacity/capacity_test.go`` (the case named in each test) or its user guide
(``docs/user-guide/how_to_use_capacity_plugin.md``): explicit deserved shares, real capability (capability
less other queues' guarantees), reclaim by dimension, enqueue net of elastic resources, and the hierarchy.
"""

from __future__ import annotations

from typing import Any

import pytest

from hetsched.api.objects import AnyObject, Node, Queue
from hetsched.api.quantity import parse_quantity
from hetsched.scheduler.defaults import ConfError, parse_conf
from tests.builders import Harness, harness, node, pod, podgroup, running_on

pytestmark = pytest.mark.timeout(120)

GUIDE = """\
actions: "enqueue, allocate, backfill, reclaim"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: capacity
{extra}  - name: nodeorder
  - name: binpack
"""
"""The user guide's configuration (``{extra}``: lines under the capacity entry)."""

HIERARCHY = GUIDE.format(extra="    enableHierarchy: true\n")
FLAT = GUIDE.format(extra="")
GPU = "nvidia.com/gpu"


def cq(name: str, deserved: dict[str, str] | None = None, capability: dict[str, str] | None = None,
       guarantee: dict[str, str] | None = None, parent: str = "", priority: int = 0,
       state: str = "Open") -> Queue:
    spec: dict[str, Any] = {"deserved": deserved or {}, "capability": capability or {},
                            "guarantee": {"resource": guarantee or {}}, "priority": priority}
    if parent:
        spec["parent"] = parent
    return Queue.model_validate({"metadata": {"name": name}, "spec": spec, "status": {"state": state}})


def cnode(name: str, cpu: str, memory: str, **extra: str) -> Node:
    made = node(name, cpu=cpu, memory=memory, pods=10)
    return made.model_copy(update={"status": made.status.model_copy(update={
        "allocatable": {**made.status.allocatable, **{k: parse_quantity(v) for k, v in extra.items()}}})})


def job(name: str, queue: str, cpu: str, memory: str, *, on: str = "", phase: str = "", preemptable: bool = True,
        min_resources: dict[str, str] | None = None, **extra: str) -> list[AnyObject]:
    """A one-pod job in ``queue``: running on ``on`` when given, else pending (Inqueue unless ``phase``)."""
    annotations = {} if preemptable else {"volcano.sh/preemptable": "false"}
    made = pod(name, name, cpu=cpu, memory=memory, annotations=annotations)
    if extra:
        containers = [c.model_copy(update={"resources": c.resources.model_copy(update={
            "requests": {**c.resources.requests, **{k: parse_quantity(v) for k, v in extra.items()}}})})
            for c in made.spec.containers]
        made = made.model_copy(update={"spec": made.spec.model_copy(update={"containers": containers})})
    group = podgroup(name, 1, queue=queue, phase=phase or ("Running" if on else "Inqueue"),
                     min_resources=min_resources)
    return [group, running_on(made, on) if on else made]


def evicted(h: Harness) -> list[str]:
    return sorted(e.key.split("/")[-1] for e in h.cluster.events if e.reason == "Evicted")


def run(objects: list[AnyObject], conf: str = FLAT, cycles: int = 1) -> Harness:
    h = harness(objects, conf)
    for _ in range(cycles):
        h.cycle()
    return h


def two_nodes() -> list[AnyObject]:
    return [cnode("n1", "2", "4Gi"), cnode("n2", "2", "4Gi")]


def test_case0_and_1_allocation_stays_within_capability() -> None:
    """case0: q1 (capability 2 CPU) runs 1 CPU; a 1-CPU pod fits. case1: capability 1.5 CPU; it does not."""
    h = run([*two_nodes(), cq("q1", capability={"cpu": "2", "memory": "2Gi"}),
             *job("p1", "q1", "1", "1Gi", on="n1"), *job("p2", "q1", "1", "1Gi")])
    assert h.bindings()["p2"] in ("n1", "n2")
    h = run([*two_nodes(), cq("q2", capability={"cpu": "1.5", "memory": "1.5Gi"}),
             *job("p3", "q2", "1", "1Gi", on="n1"), *job("p4", "q2", "1", "1Gi")])
    assert "p4" not in h.bindings()


def test_case2_reclaims_from_a_queue_above_its_deserved_share() -> None:
    """case2: q3 deserves 2 CPU/4Gi and holds 4/8Gi (p5 not preemptable); q4's pending p7 (2/4Gi) takes p6."""
    h = run([*two_nodes(), cq("q3", deserved={"cpu": "2", "memory": "4Gi"}),
             cq("q4", deserved={"cpu": "2", "memory": "4Gi"}),
             *job("p5", "q3", "2", "4Gi", on="n1", preemptable=False), *job("p6", "q3", "2", "4Gi", on="n2"),
             *job("p7", "q4", "2", "4Gi")])
    assert evicted(h) == ["p6"]
    assert h.bindings()["p7"] == "n2"


def test_case5_reclaims_when_one_requested_dimension_stays_within_deserved() -> None:
    """case5: q10 deserves 2 CPU/2Gi and holds 1 CPU/3Gi; p17 (1/1Gi) keeps CPU within deserved (memory is
    over), so it may reclaim q11's p18 — proportion would refuse (every dimension must stay within)."""
    objects = [cnode("n1", "2", "4Gi"), cq("q10", deserved={"cpu": "2", "memory": "2Gi"},
                                           capability={"cpu": "4", "memory": "4Gi"}),
               cq("q11", deserved={"cpu": "0", "memory": "0"}, capability={"cpu": "2", "memory": "2Gi"}),
               *job("p16", "q10", "1", "3Gi", on="n1"), *job("p17", "q10", "1", "1Gi"),
               *job("p18", "q11", "1", "1Gi", on="n1")]
    h = run(objects)
    assert evicted(h) == ["p18"] and h.bindings()["p17"] == "n1"


def test_case6_does_not_reclaim_when_every_dimension_would_pass_deserved() -> None:
    """case6: q12 deserves 1 CPU/2Gi, holds 1/1Gi; p20 (1/2Gi) would pass deserved in both: no reclaim."""
    objects = [cnode("n1", "2", "4Gi"), cq("q12", deserved={"cpu": "1", "memory": "2Gi"},
                                           capability={"cpu": "4", "memory": "4Gi"}),
               cq("q13", deserved={"cpu": "0", "memory": "0"}, capability={"cpu": "2", "memory": "2Gi"}),
               *job("p19", "q12", "1", "1Gi", on="n1"), *job("p20", "q12", "1", "2Gi"),
               *job("p21", "q13", "1", "1Gi", on="n1")]
    h = run(objects)
    assert evicted(h) == [] and "p20" not in h.bindings()


def test_case8_only_victims_holding_what_the_reclaimer_asks_for() -> None:
    """case8: the cluster's one GPU is held by p28 in queue17 (which deserves no GPU: an immediate victim);
    p30 asks 1 CPU + 1 GPU. Only p28 goes — not p26 (memory only) though queue17 is over its memory."""
    objects = [cnode("n8", "4", "8Gi", **{GPU: "1"}),
               cq("queue17", deserved={"cpu": "2", "memory": "2Gi"}),
               cq("queue18", deserved={"cpu": "2", "memory": "4Gi", GPU: "1"}),
               *job("p26", "queue17", "0", "4Gi", on="n8"), *job("p27", "queue17", "1", "0", on="n8"),
               *job("p28", "queue17", "0", "0", on="n8", **{GPU: "1"}), *job("p29", "queue18", "2", "4Gi", on="n8"),
               *job("p30", "queue18", "1", "0", **{GPU: "1"})]
    h = run(objects)
    assert evicted(h) == ["p28"] and h.bindings()["p30"] == "n8"


def test_case9_a_pod_within_its_queues_gpu_share_is_not_reclaimed_for_cpu() -> None:
    """case9: p31 takes all 4 CPUs but only the 1 GPU its queue deserves; p32 (1 CPU) in a queue under its
    deserved CPU may not reclaim it: queue19 is not above deserved in anything it deserves."""
    objects = [cnode("n8", "4", "8Gi", **{GPU: "1"}), cq("queue19", deserved={GPU: "1"}),
               cq("queue20", deserved={"cpu": "2", "memory": "2Gi"}),
               *job("p31", "queue19", "4", "4Gi", on="n8", **{GPU: "1"}), *job("p32", "queue20", "1", "1Gi")]
    h = run(objects)
    assert evicted(h) == [] and "p32" not in h.bindings()


def test_case10_no_reclaim_past_the_real_capability() -> None:
    """case10: queue21 (capability = deserved = 8 CPU/100Gi) holds 7/90Gi; its 2-CPU pod would pass its
    capability, so it reclaims nothing from queue22 though it is under deserved in memory."""
    objects = [cnode("n9", "8", "100Gi"), cnode("n10", "8", "100Gi"),
               cq("queue21", deserved={"cpu": "8", "memory": "100Gi"}, capability={"cpu": "8", "memory": "100Gi"}),
               cq("queue22", capability={"cpu": "2", "memory": "5Gi"}),
               *job("p33", "queue21", "7", "90Gi", on="n9"), *job("p34", "queue21", "2", "5Gi"),
               *job("p35", "queue22", "2", "5Gi", on="n10")]
    h = run(objects)
    assert evicted(h) == [] and "p34" not in h.bindings()


def test_enqueue_counts_only_the_resources_the_job_asks_for() -> None:
    """TestEnqueueAndAllocatable case0/1: a queue over its capability in memory still admits and places a
    job that asks only CPU; case2: a job whose CPU passes the capability waits, saying so; case4: a closed
    queue admits nothing."""
    nodes = [cnode("n1", "3", "3G"), cnode("n2", "3", "3G")]
    busy = job("busy", "q1", "1", "3G", on="n1", min_resources={"cpu": "1", "memory": "3G"})
    queue = cq("q1", capability={"cpu": "3", "memory": "2G"})
    h = run([*nodes, queue, *busy, *job("cpu-only", "q1", "1", "0", phase="Pending",
                                        min_resources={"cpu": "1"})], cycles=2)
    assert h.podgroup("cpu-only").status.phase in ("Inqueue", "Running") and "cpu-only" in h.bindings()
    h = run([*nodes, queue, *busy, *job("big", "q1", "3", "0", phase="Pending", min_resources={"cpu": "3"})])
    assert h.podgroup("big").status.phase == "Pending"
    assert "real capability" in h.condition("big") and "cpu (needs 4 > 3)" \
        in h.condition("big")
    h = run([*nodes, cq("q1", capability={"cpu": "3"}, state="Closed"),
             *job("late", "q1", "1", "0", phase="Pending", min_resources={"cpu": "1"})])
    assert h.podgroup("late").status.phase == "Pending"


def test_a_guarantee_is_reserved_from_other_queues() -> None:
    """The real capability: the cluster (4 CPU) less q-reserved's guarantee (2 CPU) is all q-busy may use,
    though q-reserved runs nothing now."""
    objects: list[AnyObject] = [cnode("n1", "2", "4Gi"), cnode("n2", "2", "4Gi"),
                                cq("q-reserved", guarantee={"cpu": "2"}), cq("q-busy")]
    objects += [o for i in range(4) for o in job(f"w{i}", "q-busy", "1", "100Mi")]
    h = run(objects)
    assert sorted(h.bindings()) == ["w0", "w1"]


def test_idle_deserved_capacity_is_lent_and_taken_back() -> None:
    """The user guide's walk-through: queue1 deserves 2 CPU, queue2 6 CPU of an 8-CPU cluster (two 4-CPU
    nodes). queue1's 8 one-CPU pods all run while queue2 is idle; then queue2's pods reclaim until queue1 is
    back at its deserved 2."""
    objects: list[AnyObject] = [cnode("a", "4", "16Gi"), cnode("b", "4", "16Gi"),
                                cq("queue1", deserved={"cpu": "2", "memory": "8Gi"}),
                                cq("queue2", deserved={"cpu": "6", "memory": "24Gi"})]
    objects += [o for i in range(8) for o in job(f"demo1-{i}", "queue1", "1", "1Gi")]
    h = harness(objects, FLAT)
    h.cycle()
    assert len(h.bindings()) == 8
    for i in range(6):
        for obj in job(f"demo2-{i}", "queue2", "1", "1Gi"):
            h.cluster.create(obj)
    for _ in range(8):
        h.cycle()
    running = h.bindings()
    assert sum(1 for name in running if name.startswith("demo2-")) == 6
    assert sum(1 for name in running if name.startswith("demo1-")) == 2


# ---------------------------------------------------------------------------------------------- hierarchy


def tree() -> list[AnyObject]:
    return [cnode("n1", "8", "8Gi"), cq("root", capability={"cpu": "8", "memory": "8Gi"}),
            cq("q3", parent="root", deserved={"cpu": "4", "memory": "4Gi"}, capability={"cpu": "4", "memory": "4Gi"}),
            cq("q31", parent="q3", deserved={"cpu": "2", "memory": "2Gi"}, capability={"cpu": "4", "memory": "4Gi"}),
            cq("q32", parent="q3", deserved={"cpu": "2", "memory": "2Gi"}, capability={"cpu": "4", "memory": "4Gi"})]


def test_hierarchy_case0_and_1_jobs_run_in_leaf_queues_only() -> None:
    h = run([*tree(), *job("leaf", "q31", "1", "1Gi"), *job("parent", "q3", "1", "1Gi", phase="Pending",
                                                            min_resources={"cpu": "1"})], HIERARCHY)
    assert "leaf" in h.bindings() and "parent" not in h.bindings()
    assert "has child queues" in h.condition("parent")


def test_hierarchy_case4_and_6_an_ancestors_capability_bounds_its_children() -> None:
    """case4/case6: q31 may hold 4 CPU on its own, but q3 (its parent) only 4 in all: with q32 holding 3
    (its minResources: none of it elastic; not preemptable, or q31, under its deserved share, would reclaim
    it), a 2-CPU pod of q31 is not placed, and a 2-CPU job of q31 is not
    admitted, naming the parent."""
    objects = [*tree(), *job("held", "q32", "3", "1Gi", on="n1", min_resources={"cpu": "3", "memory": "1Gi"},
                             preemptable=False),
               *job("more", "q31", "2", "1Gi"),
               *job("later", "q31", "2", "1Gi", phase="Pending", min_resources={"cpu": "2"})]
    h = run(objects, HIERARCHY)
    assert "more" not in h.bindings()
    assert "queue q3 (parent of q31) real capability" in h.condition("later")


def test_without_the_hierarchy_switch_parents_are_ordinary_queues() -> None:
    h = run([*tree(), *job("parent", "q3", "1", "1Gi")], FLAT)
    assert "parent" in h.bindings()


@pytest.mark.parametrize(("extra", "message"), [
    ("    arguments: {ancestorReclaimLevel: one}\n", "ancestorReclaimLevel must be a whole number"),
    ("    arguments: {ancestorReclaimLevel: 1}\n", "acts only with enableHierarchy: true"),
    ("    arguments: {reclaimLevel: 1}\n", "unknown argument 'reclaimLevel'"),
    ("    enableHierarchy: maybe\n", "enableHierarchy must be true or false"),
])
def test_bad_capacity_configuration_is_an_error(extra: str, message: str) -> None:
    with pytest.raises(ConfError, match=message):
        parse_conf(GUIDE.format(extra=extra))


def test_the_user_guides_configurations_load() -> None:
    """Both configurations of the capacity user guide: without and with the hierarchy (ancestorReclaimLevel 1)."""
    parse_conf(FLAT)
    conf = parse_conf(GUIDE.format(extra="    enableHierarchy: true\n    arguments:\n      ancestorReclaimLevel: 1\n"))
    assert conf.notes == [n for n in conf.notes if "enablePreemptable" in n]


def test_ancestor_reclaim_level_keeps_a_parent_within_its_share() -> None:
    """The user guide's ``ancestorReclaimLevel``: b1 holds 4 CPU, above its own deserved 2, but its parent b
    holds exactly what it deserves. a1 (under a) may reclaim from b1 with level 0; with level 1 b's share is
    checked too, and nothing is reclaimed across the parents."""
    def objects() -> list[AnyObject]:
        return [cnode("n1", "4", "8Gi"),
                cq("a", deserved={"cpu": "4"}), cq("b", deserved={"cpu": "4"}),
                cq("a1", parent="a", deserved={"cpu": "4"}),
                cq("b1", parent="b", deserved={"cpu": "2"}), cq("b2", parent="b", deserved={"cpu": "2"}),
                *job("b-0", "b1", "2", "1Gi", on="n1"), *job("b-1", "b1", "2", "1Gi", on="n1"),
                *job("wants", "a1", "2", "1Gi")]
    h = run(objects(), HIERARCHY)
    assert len(evicted(h)) == 1 and "wants" in h.bindings()
    h = run(objects(), GUIDE.format(extra="    enableHierarchy: true\n    arguments: {ancestorReclaimLevel: 1}\n"))
    assert evicted(h) == [] and "wants" not in h.bindings()
