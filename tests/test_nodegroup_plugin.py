"""The ``nodegroup`` plugin as Volcano's has it (issue 31), each case translated from Volcano's
``pkg/scheduler/plugins/nodegroup/nodegroup_test.go`` (``TestNodeGroup`` and the resource-limit test):
which labelled nodes a queue may use, ``strict``, the scores with and without ``enablePreferredOrder``,
affinity inherited down the queue tree, and ``volcano.sh/nodegroup-resource-limits``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import yaml

from hetsched.api.manifest import ManifestError, load_text
from hetsched.api.objects import AnyObject, Node, Queue
from hetsched.ports import WatchEvent
from hetsched.scheduler.cache import SchedulerCache
from hetsched.scheduler.defaults import parse_conf
from hetsched.scheduler.engine.session import Session
from tests.builders import harness, node, pod, podgroup, running_on

pytestmark = pytest.mark.timeout(120)

LABEL = "volcano.sh/nodegroup-name"


def grouped(name: str, group: str | None, cpu: str = "4", memory: str = "16Gi") -> Node:
    made = node(name, cpu=cpu, memory=memory)
    labels = {**made.metadata.labels, **({LABEL: group} if group else {})}
    return made.model_copy(update={"metadata": made.metadata.model_copy(update={"labels": labels})})


def nodes() -> list[AnyObject]:
    return [grouped("n1", "group1", "2", "4Gi"), grouped("n2", "group2"), grouped("n3", "group3"),
            grouped("n4", "group4"), grouped("n5", None)]


def bound(name: str, *, required: list[str] | None = None, preferred: list[str] | None = None,
          avoided: list[str] | None = None, discouraged: list[str] | None = None, parent: str = "",
          annotations: dict[str, str] | None = None) -> Queue:
    affinity: dict[str, Any] = {}
    if required or preferred:
        affinity["nodeGroupAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": required or [],
                                         "preferredDuringSchedulingIgnoredDuringExecution": preferred or []}
    if avoided or discouraged:
        affinity["nodeGroupAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": avoided or [],
                                             "preferredDuringSchedulingIgnoredDuringExecution": discouraged or []}
    spec: dict[str, Any] = {"affinity": affinity} if affinity else {}
    if parent:
        spec["parent"] = parent
    return Queue.model_validate({"metadata": {"name": name, "annotations": annotations or {}}, "spec": spec})


Q1 = {"required": ["group1", "group3"], "preferred": ["group3"], "avoided": ["group2", "group4"],
      "discouraged": ["group4"]}


def verdicts(objects: list[AnyObject], queue_name: str, option: str = "") -> dict[str, float | None]:
    """For the one pending pod of ``queue_name``: per node, its nodegroup score, or None where nodegroup
    rules the node out (a filter or its per-group limit), as Volcano's test reads ``PredicateFn`` and
    ``NodeOrderFn``."""
    cache = SchedulerCache()
    for obj in [*objects, podgroup("pg", 1, queue=queue_name), pod("p", "pg", cpu="2", memory="4Gi")]:
        cache.handle(WatchEvent("ADDED", obj))
    conf = parse_conf(f'actions: "allocate"\ntiers:\n- plugins:\n  - name: nodegroup\n{option}')
    session = Session(cache.snapshot(), conf)
    (group,) = session.snapshot.active["default/pg"].groups
    ok, _ = session.static_checks(group)
    limit = session.capacity_limit(group)
    if limit is not None:
        ok = ok & (limit > 0)
    everywhere = np.arange(len(session.nodes))
    scores = session.score(group, everywhere, np.zeros(len(everywhere), dtype=np.int64))
    return {name: (float(scores[i]) if ok[i] else None) for i, name in enumerate(session.nodes.names)}


def test_soft_constraints_within_the_hard_ones() -> None:
    """Case "soft constraints is subset of hard constraints": group1 and group3 required, group3 preferred,
    group2 and group4 avoided, group4 discouraged — so group4's node is allowed, scoring −1; the unlabelled
    node is not (strict)."""
    assert verdicts([*nodes(), bound("q1", **Q1)], "q1") == {
        "n1": 100.0, "n2": None, "n3": 150.0, "n4": -1.0, "n5": None}


def test_soft_constraints_outside_the_hard_ones() -> None:
    """Case "soft constraints is not subset of hard constraints": group3 is only preferred — allowed, 50."""
    queue = bound("q2", required=["group1"], preferred=["group3"], avoided=["group2"], discouraged=["group4"])
    assert verdicts([*nodes(), queue], "q2") == {"n1": 100.0, "n2": None, "n3": 50.0, "n4": -1.0, "n5": None}


def test_a_queue_without_affinity_gets_no_labelled_node() -> None:
    """Cases "queue without affinity" (strict, the default: nothing at all) and "affinity is not set …
    strict=false" (only the unlabelled node)."""
    assert verdicts([*nodes(), bound("plain")], "plain") == dict.fromkeys(("n1", "n2", "n3", "n4", "n5"))
    assert verdicts([*nodes(), bound("plain")], "plain", "    arguments: {strict: false}\n") == {
        "n1": None, "n2": None, "n3": None, "n4": None, "n5": 0.0}


def test_preferred_order() -> None:
    """Case "preferred nodegroup priority ordering": preferred [group1, group3] score 50 and 25."""
    queue = bound("q3", preferred=["group1", "group3"])
    assert verdicts([*nodes(), queue], "q3", "    arguments: {enablePreferredOrder: true}\n") == {
        "n1": 50.0, "n2": None, "n3": 25.0, "n4": None, "n5": None}


@pytest.mark.parametrize("chain", [["root", "q1", "q1-child"], ["root", "q-plain", "q-plain-child"]])
def test_affinity_is_inherited_with_the_hierarchy(chain: list[str]) -> None:
    """Cases "affinity inherits from parent queue" and "… from ancestor queue if parent queue has no
    affinity"; without ``enableHierarchy`` the child has none of it."""
    root, middle, child = chain
    queues = [bound(root, **Q1), bound(middle, parent=root, **(Q1 if middle == "q1" else {})),
              bound(child, parent=middle)]
    expected = {"n1": 100.0, "n2": None, "n3": 150.0, "n4": -1.0, "n5": None}
    assert verdicts([*nodes(), *queues], child, "    enableHierarchy: true\n") == expected
    assert set(verdicts([*nodes(), *queues], child).values()) == {None}


LIMITED = {"required": ["group1", "group2"], "preferred": ["group1"]}


def two_groups() -> list[AnyObject]:
    return [grouped("n1", "group1", "16", "64Gi"), grouped("n2", "group2", "16", "64Gi")]


@pytest.mark.parametrize(("limits", "running", "n1_allowed"), [
    (None, False, True),
    ('{"group1": {"cpu": "3", "memory": "8Gi"}}', False, True),
    ('{"group1": {"cpu": "3"}}', False, True),
    ('{"group1": {"cpu": "1"}}', False, False),
    ('{"group1": {"cpu": "3", "memory": "8Gi"}}', True, False),
], ids=["no-annotation", "under-limit", "omitted-dimension", "specified-dimension", "over-limit-fallback"])
def test_per_group_resource_limits(limits: str | None, running: bool, n1_allowed: bool) -> None:
    """The resource-limit cases: a 2-CPU pod may use group1 only while the queue stays within its limit
    there; group2, unlimited, takes the overflow."""
    annotations = {"volcano.sh/nodegroup-resource-limits": limits} if limits else {}
    objects: list[AnyObject] = [*two_groups(), bound("q", annotations=annotations, **LIMITED)]
    if running:
        objects += [podgroup("used", 1, queue="q", phase="Running"),
                    running_on(pod("used-0", "used", cpu="2", memory="4Gi"), "n1")]
    found = verdicts(objects, "q")
    assert (found["n1"] is not None) is n1_allowed and found["n2"] is not None


def test_the_limit_counts_pods_placed_in_the_same_cycle() -> None:
    """Two 2-CPU pods of a queue limited to 3 CPU on group1: one goes to group1, the other overflows."""
    annotations = {"volcano.sh/nodegroup-resource-limits": '{"group1": {"cpu": "3"}}'}
    objects: list[AnyObject] = [*two_groups(), bound("q", annotations=annotations, **LIMITED),
                                podgroup("two", 2, queue="q"), pod("two-0", "two", cpu="2"),
                                pod("two-1", "two", cpu="2")]
    h = harness(objects, 'actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: gang\n  - name: predicates\n'
                         '  - name: nodegroup\n')
    h.cycle()
    assert sorted(h.bindings().values()) == ["n1", "n2"]


def test_an_unreadable_limit_is_refused_at_admission_and_keeps_the_queue_off_labelled_nodes() -> None:
    """The case "invalid annotation rejects queue tasks": refused by validate and the webhook, naming the
    field; a queue that has one anyway (written around the webhook) gets no labelled node."""
    queue = bound("q", annotations={"volcano.sh/nodegroup-resource-limits": '{"group1":{"cpu":'}, **LIMITED)
    with pytest.raises(ManifestError) as error:
        load_text(yaml.safe_dump(queue.model_dump(mode="json", exclude_none=True)), "queue.yaml")
    assert 'metadata.annotations["volcano.sh/nodegroup-resource-limits"]: must be a JSON map' in \
        str(error.value.problems[0])
    assert verdicts([*two_groups(), queue], "q") == {"n1": None, "n2": None}
