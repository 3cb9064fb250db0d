"""Queue shares: proportion's water-filling (weights, capability caps, demand caps, guarantees), the
queue order it produces, and DRF's dominant-share job order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hetsched.api.objects import AnyObject
from hetsched.scheduler.contract.snapshot import QueueInfo
from hetsched.scheduler.plugins.drf import dominant_share
from hetsched.scheduler.plugins.proportion import deserved_shares, hierarchical_shares, share
from tests.builders import gang, harness, node, pod, podgroup, queue, running_on


def q(name: str, weight: float, request: list[float], capability: list[float] | None = None,
      guarantee: list[float] | None = None) -> QueueInfo:
    width = len(request)
    return QueueInfo(name=name, weight=weight,
                     capability=np.array(capability if capability else [np.inf] * width, dtype=float),
                     guarantee=np.array(guarantee or [0.0] * width), state="Open", reclaimable=True,
                     allocated=np.zeros(width), inqueue=np.zeros(width), request=np.array(request, dtype=float))


def test_weights_split_contended_capacity() -> None:
    shares = deserved_shares(np.array([90.0]), [q("a", 2, [100]), q("b", 1, [100])])
    assert shares["a"][0] == pytest.approx(60) and shares["b"][0] == pytest.approx(30)


def test_unused_share_flows_to_queues_that_still_want_more() -> None:
    shares = deserved_shares(np.array([90.0]), [q("a", 2, [10]), q("b", 1, [100])])
    assert shares["a"][0] == pytest.approx(10) and shares["b"][0] == pytest.approx(80)


def test_capability_caps_the_deserved_share() -> None:
    shares = deserved_shares(np.array([100.0]), [q("a", 5, [100], capability=[20]), q("b", 1, [100])])
    assert shares["a"][0] == pytest.approx(20) and shares["b"][0] == pytest.approx(80)


def test_guarantee_is_a_floor() -> None:
    shares = deserved_shares(np.array([100.0]), [q("a", 1, [50], guarantee=[40]), q("b", 9, [100])])
    assert shares["a"][0] >= 40 - 1e-6
    assert shares["a"][0] + shares["b"][0] == pytest.approx(100)


def test_each_accelerator_kind_is_shared_on_its_own() -> None:
    shares = deserved_shares(np.array([16.0, 8.0]), [q("npu", 1, [16, 0]), q("gpu", 1, [0, 8])])
    assert list(shares["npu"]) == pytest.approx([16, 0]) and list(shares["gpu"]) == pytest.approx([0, 8])


def test_share_and_dominant_share() -> None:
    assert share(np.array([5.0, 1.0]), np.array([10.0, 1.0])) == pytest.approx(1.0)
    assert dominant_share(np.array([2.0, 6.0]), np.array([10.0, 8.0])) == pytest.approx(0.75)


def test_heavier_queue_gets_more_of_a_contended_cluster_end_to_end() -> None:
    nodes = [node(f"n{i}", cpu="4") for i in range(3)]
    objects = [queue("big", weight=2), queue("small", weight=1), *nodes]
    for j in range(6):
        objects += gang(f"big{j}", 1, queue="big", cpu="2")
        objects += gang(f"small{j}", 1, queue="small", cpu="2")
    h = harness(objects)
    h.cycle()
    bound = h.bindings()
    big = sum(1 for name in bound if name.startswith("big"))
    small = sum(1 for name in bound if name.startswith("small"))
    assert (big, small) == (4, 2)


def test_drf_serves_the_job_with_the_smaller_dominant_share_first() -> None:
    conf = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n  - name: drf\n  - name: predicates\n"
    objects = [node("n1", cpu="4"), *gang("hog", 3, min_member=1, cpu="1"), *gang("fresh", 1, cpu="1")]
    h = harness(objects, conf)
    h.cluster.bind("default/hog-0", "n1")
    h.cluster.bind("default/hog-1", "n1")
    h.cycle()
    assert "fresh-0" in h.bindings()


def child(name: str, parent: str, weight: float, request: list[float],
          capability: list[float] | None = None) -> QueueInfo:
    made = q(name, weight, request, capability)
    made.parent = parent
    return made


def test_hierarchical_shares_split_the_parent_not_the_cluster() -> None:
    """root → research (weight 1), production (weight 3); research → nlp (1), vision (1). 80 chips: the top
    level gets 20 / 60, and research's 20 is split 10 / 10 between its children, not 20 / 20 of the cluster."""
    queues = [q("research", 1, [0.0]), q("production", 3, [100.0]),
              child("nlp", "research", 1, [100.0]), child("vision", "research", 1, [100.0])]
    shares = hierarchical_shares(np.array([80.0]), queues)
    assert shares["production"] == pytest.approx([60.0])
    assert shares["research"] == pytest.approx([20.0])
    assert shares["nlp"] == pytest.approx([10.0]) and shares["vision"] == pytest.approx([10.0])


def test_a_parents_capability_bounds_its_children() -> None:
    queues = [q("team", 1, [0.0], capability=[16.0]), q("other", 1, [100.0]),
              child("a", "team", 1, [100.0]), child("b", "team", 3, [100.0])]
    shares = hierarchical_shares(np.array([100.0]), queues)
    assert shares["team"] == pytest.approx([16.0])
    assert shares["a"] + shares["b"] == pytest.approx([16.0])
    assert shares["b"] == pytest.approx([12.0])


def test_jobs_go_to_leaf_queues_and_respect_every_ancestors_capability() -> None:
    def with_parent(name: str, parent: str, **kwargs: object) -> object:
        made = queue(name, **kwargs)  # type: ignore[arg-type]
        return made.model_copy(update={"spec": made.spec.model_copy(update={"parent": parent})})

    objects = [node(f"n{i}", cpu="8") for i in range(4)]
    objects += [queue("team", capability={"cpu": "8"}), with_parent("leaf", "team")]
    for name, cpu, where in (("in-parent", "1", "team"), ("fits", "6", "leaf"), ("too-big", "4", "leaf")):
        objects += [podgroup(name, 1, queue=where, phase="Pending", min_resources={"cpu": cpu}),
                    pod(f"{name}-0", name, cpu=cpu)]
    h = harness(objects)  # type: ignore[arg-type]
    h.cycle()
    assert h.podgroup("fits").status.phase in ("Inqueue", "Running")
    assert "queue team has child queues; jobs go to leaf queues" in h.condition("in-parent")
    assert "queue team (parent of leaf) capability would be exceeded for cpu" in h.condition("too-big")


def test_an_explicit_deserved_is_the_entitlement_and_the_rest_is_shared_by_weight() -> None:
    fixed = q("reserved", 1, [0.0])
    fixed.fixed_deserved = np.array([30.0])
    shares = deserved_shares(np.array([100.0]), [fixed, q("a", 1, [100.0]), q("b", 1, [100.0])])
    assert shares["reserved"] == pytest.approx([30.0])  # even with no demand right now
    assert shares["a"] == pytest.approx([35.0]) and shares["b"] == pytest.approx([35.0])


# ------------------------------------------------------------------------ competing queues (issue 31)


def elastic_job(name: str, queue_name: str, running: int, pending: int, cpu: str = "1") -> list[AnyObject]:
    """A ready job (minMember 1) with ``running`` pods on n0 and ``pending`` elastic pods waiting."""
    objects: list[AnyObject] = [podgroup(name, 1, queue=queue_name, phase="Running")]
    objects += [running_on(pod(f"{name}-{i}", name, cpu=cpu), "n0") for i in range(running)]
    objects += [pod(f"{name}-{running + i}", name, cpu=cpu) for i in range(pending)]
    return objects


def placed(h: Any, job: str) -> int:
    return sum(1 for name in h.bindings() if name.startswith(f"{job}-"))


def test_elastic_pods_of_competing_queues_go_in_share_order() -> None:
    """Two ready jobs in two equal queues each want two more pods and two slots are free: Volcano gives one
    each (a ready job goes back in line after every task, its queue re-ranked by share), not two to the job
    served first."""
    objects: list[AnyObject] = [node("n0", cpu="2"), node("n1", cpu="2"), queue("a"), queue("b"),
                                *elastic_job("ja", "a", 1, 2), *elastic_job("jb", "b", 1, 2)]
    h = harness(objects)
    h.cycle()
    assert placed(h, "ja") == 2 and placed(h, "jb") == 2  # one running + one placed each


def test_contended_resources_split_by_deserved_share() -> None:
    """hdrf_test.go "rescaling test", as proportion computes it: 10 CPU and 10G; sci's pods ask 1 CPU + 1G,
    dev's 1 CPU, prod's 1G, ten each. Each queue deserves half of what it competes for, so 5/5/5 pods run —
    not 10 to the queues served first."""
    pods: list[AnyObject] = []
    for job, cpu, memory in (("sci", "1", "1G"), ("dev", "1", "0"), ("prod", "0", "1G")):
        pods.append(podgroup(job, 0, queue=job))
        pods += [pod(f"{job}-{i}", job, cpu=cpu, memory=memory) for i in range(10)]
    h = harness([node("n", cpu="10", memory="10G", pods=50), queue("sci"), queue("dev"), queue("prod"), *pods])
    h.cycle()
    assert (placed(h, "sci"), placed(h, "dev"), placed(h, "prod")) == (5, 5, 5)


def test_capacity_no_queue_asks_for_is_lent() -> None:
    """Work conservation kept: queue a deserves half the cluster but b asks for nothing more; a's elastic
    pods take the rest (lent), so nothing stays idle."""
    objects: list[AnyObject] = [node("n0", cpu="2"), node("n1", cpu="2"), queue("a"), queue("b"),
                                *elastic_job("ja", "a", 1, 3)]
    h = harness(objects)
    h.cycle()
    assert placed(h, "ja") == 4


def test_a_guarantee_is_reserved_by_proportion() -> None:
    """Volcano's proportion realCapability: the cluster (4 CPU) less queue reserved's guarantee (2 CPU) is
    all queue busy may hold, lent or not — so its third and fourth pods wait though two CPUs are idle."""
    objects: list[AnyObject] = [node("n0", cpu="2"), node("n1", cpu="2"),
                                queue("reserved", guarantee={"cpu": "2"}), queue("busy")]
    objects += [o for i in range(4) for o in gang(f"w{i}", 1, cpu="1", queue="busy")]
    h = harness(objects)
    h.cycle()
    assert sum(1 for name in h.bindings() if name.startswith("w")) == 2


def test_a_job_kept_pending_by_another_queues_guarantee_says_so() -> None:
    """Volcano keeps a job Pending when only another queue's guarantee would make room: its reason names the
    real capability and the guarantees, not a plain capability the queue does not set."""
    objects: list[AnyObject] = [node("n0", cpu="4"), queue("reserved", guarantee={"cpu": "3"}), queue("busy"),
                                podgroup("big", 2, queue="busy", phase="Pending", min_resources={"cpu": "2"}),
                                pod("big-0", "big", cpu="1"), pod("big-1", "big", cpu="1")]
    h = harness(objects)
    h.cycle()
    assert h.podgroup("big").status.phase == "Pending"
    assert "queue busy real capability (its capability, less what other queues' guarantees reserve) would be " \
           "exceeded for cpu (needs 2 > 1)" in h.condition("big")
