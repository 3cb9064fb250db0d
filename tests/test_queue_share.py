"""Queue shares: proportion's water-filling (weights, capability caps, demand caps, guarantees), the
queue order it produces, and DRF's dominant-share job order.
"""

from __future__ import annotations

import numpy as np
import pytest

from hetsched.scheduler.contract.snapshot import QueueInfo
from hetsched.scheduler.plugins.drf import dominant_share
from hetsched.scheduler.plugins.proportion import deserved_shares, hierarchical_shares, share
from tests.builders import gang, harness, node, pod, podgroup, queue


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
