"""Gang membership the ways Volcano's users and operators write it (issue 18): the PodGroup named by the
annotation ``scheduling.k8s.io/group-name``, else ``scheduling.volcano.sh/group-name``, else the same keys
as labels — and plain pods' queue from ``scheduling.volcano.sh/queue-name``."""

from __future__ import annotations

from typing import Any

import pytest

from hetsched.api.membership import K8S_GROUP_KEY, QUEUE_KEY, VOLCANO_GROUP_KEY, group_name, queue_name
from hetsched.api.objects import Pod, PodGroup
from hetsched.controllers.podgroup import PodGroupController
from tests.builders import harness, node, pod, podgroup, queue


@pytest.mark.parametrize(("annotations", "labels", "expected"), [
    ({K8S_GROUP_KEY: "a"}, {}, "a"),
    ({VOLCANO_GROUP_KEY: "b"}, {}, "b"),
    ({}, {K8S_GROUP_KEY: "c"}, "c"),
    ({}, {VOLCANO_GROUP_KEY: "d"}, "d"),
    ({K8S_GROUP_KEY: "a", VOLCANO_GROUP_KEY: "b"}, {VOLCANO_GROUP_KEY: "d"}, "a"),  # Volcano's scheduler key first
    ({VOLCANO_GROUP_KEY: "b"}, {K8S_GROUP_KEY: "c"}, "b"),  # annotations before labels
    ({K8S_GROUP_KEY: "", VOLCANO_GROUP_KEY: "b"}, {}, "b"),  # empty is unset
    ({}, {}, ""),
])
def test_the_group_a_pod_names(annotations: dict[str, str], labels: dict[str, str], expected: str) -> None:
    assert group_name(annotations, labels) == expected


def test_a_plain_pods_queue() -> None:
    assert queue_name({QUEUE_KEY: "q"}, {QUEUE_KEY: "r"}) == "q"
    assert queue_name({}, {QUEUE_KEY: "r"}) == "r"
    assert queue_name({}, {}) == "default"


def member(name: str, group: str, *, key: str, as_label: bool = False, **kwargs: Any) -> Pod:
    made = pod(name, None, **kwargs)
    meta = made.metadata
    if as_label:
        meta = meta.model_copy(update={"labels": {**meta.labels, key: group}})
    else:
        meta = meta.model_copy(update={"annotations": {**meta.annotations, key: group}})
    return made.model_copy(update={"metadata": meta})


@pytest.mark.parametrize(("key", "as_label"), [(VOLCANO_GROUP_KEY, False), (K8S_GROUP_KEY, True),
                                               (VOLCANO_GROUP_KEY, True)])
def test_an_operators_podgroup_of_two_is_one_gang_whatever_key_names_it(key: str, as_label: bool) -> None:
    """The issue's reproduction: a PodGroup of 2 and two pods naming it by another key than Volcano's
    scheduler reads. Before: each pod got a one-member group of its own and ran alone, and the PodGroup
    stayed Pending. Now: both wait while only one fits, then run together; no group is made for them."""
    h = harness([node("small", cpu="3"), podgroup("op", 2, phase="Pending"),
                 member("op-0", "op", key=key, as_label=as_label, cpu="2"),
                 member("op-1", "op", key=key, as_label=as_label, cpu="2")])
    groups = PodGroupController(h.cluster)
    groups.process()
    for _ in range(3):
        h.cycle()
        groups.process()
    assert not any(p.spec.nodeName for p in h.cluster.list("Pod"))  # one node of 3 CPUs: not both, so neither
    assert [g.metadata.name for g in h.cluster.list("PodGroup")] == ["op"]  # none made for its pods
    h.cluster.create(node("big", cpu="8"))
    for _ in range(3):
        h.cycle()
    pods = [p for p in h.cluster.list("Pod") if isinstance(p, Pod)]
    assert all(p.spec.nodeName for p in pods) and len(pods) == 2
    group = h.cluster.get("PodGroup", "default/op")
    assert isinstance(group, PodGroup) and group.status.phase == "Running"


def test_a_plain_pod_gets_a_group_in_the_queue_its_label_names() -> None:
    h = harness([queue("research"), node("n", cpu="4")])
    plain = pod("plain", None)
    h.cluster.create(plain.model_copy(update={"metadata": plain.metadata.model_copy(update={
        "labels": {QUEUE_KEY: "research"}})}))
    groups = PodGroupController(h.cluster)
    groups.process()
    (made,) = [g for g in h.cluster.list("PodGroup") if isinstance(g, PodGroup)]
    assert made.spec.queue == "research" and made.metadata.name.startswith("podgroup-")
