"""Usage-decayed fair share (issue 35, ``plugins.fairshare``): queues ordered by the hours they used lately for
their weight, jobs within a queue by their namespace's — read from each queue's QueueUsage books."""

from __future__ import annotations

from typing import Any

import pytest

from hetsched.api.objects import AnyObject, Pod, QueueUsage
from hetsched.scheduler.defaults import ConfError, parse_conf
from tests.builders import harness, node, pod, podgroup, queue

pytestmark = pytest.mark.timeout(120)
CONF = """actions: "enqueue, allocate, backfill"
tiers:
- plugins: [{name: priority}, {name: gang}, {name: fairshare}]
- plugins: [{name: drf}, {name: predicates}, {name: proportion}, {name: nodeorder}]
"""
WITHOUT = CONF.replace(", {name: fairshare}", "")


def books(name: str, decayed: dict[str, float], by_namespace: dict[str, dict[str, float]] | None = None) -> QueueUsage:
    return QueueUsage.model_validate({"metadata": {"name": name}, "status": {
        "decayed": decayed, "decayedByNamespace": by_namespace or {}}})


def job(name: str, queue_name: str, namespace: str = "default", cpu: str = "8") -> list[AnyObject]:
    return [podgroup(name, 1, queue=queue_name, namespace=namespace, phase="Inqueue"),
            pod(f"{name}-0", name, namespace=namespace, cpu=cpu)]


def placed(objects: list[Any], conf: str) -> set[str]:
    h = harness([o for o in objects if not isinstance(o, QueueUsage)], conf)
    for usage in (o for o in objects if isinstance(o, QueueUsage)):
        h.cluster.create(usage)
    h.cycle()
    return {p.metadata.name for p in h.cluster.list("Pod") if isinstance(p, Pod) and p.spec.nodeName}


def test_the_queue_that_used_least_lately_goes_first() -> None:
    """Two equal queues, room for one 8-CPU job: by instant share they tie and alpha (first by name) goes;
    alpha ran 100 core-hours lately, beta nothing, so with fairshare beta goes."""
    objects: list[Any] = [queue("alpha"), queue("beta"), node("n1", cpu="8"), *job("a", "alpha"), *job("b", "beta"),
                          books("alpha", {"cpu": 100.0})]
    assert placed(objects, WITHOUT) == {"a-0"}
    assert placed(objects, CONF) == {"b-0"}


def test_a_queues_weight_divides_its_usage() -> None:
    """alpha used twice beta's hours but has three times the weight: it goes first."""
    heavy = queue("alpha", weight=3)
    objects: list[Any] = [heavy, queue("beta"), node("n1", cpu="8"), *job("a", "alpha"), *job("b", "beta"),
                          books("alpha", {"cpu": 100.0}), books("beta", {"cpu": 50.0})]
    assert placed(objects, CONF) == {"a-0"}


def test_within_a_queue_the_namespace_that_used_least_goes_first() -> None:
    objects: list[Any] = [queue("shared"), node("n1", cpu="8"), *job("heavy-job", "shared", namespace="heavy"),
                          *job("light-job", "shared", namespace="light"),
                          books("shared", {"cpu": 100.0}, {"heavy": {"cpu": 100.0}})]
    assert placed(objects, WITHOUT) == {"heavy-job-0"}  # older by a tick: the default order
    assert placed(objects, CONF) == {"light-job-0"}


def test_chip_hours_weigh_against_the_clusters_chips_and_a_weight_argument_changes_that() -> None:
    """alpha used 10 chip-hours of an 8-chip cluster (1.25 cluster-hours), beta 40 core-hours of 64 cores
    (0.625): beta first — unless chips are weighed at 0.1."""
    objects: list[Any] = [queue("alpha"), queue("beta"), node("n1", cpu="64", huawei_com__Ascend910=8),
                          node("n2", cpu="1"),
                          podgroup("a", 1, queue="alpha", phase="Inqueue"),
                          pod("a-0", "a", cpu="40", limits={"huawei.com/Ascend910": 1}), *job("b", "beta", cpu="40"),
                          books("alpha", {"huawei.com/Ascend910": 10.0}), books("beta", {"cpu": 40.0})]
    assert placed(objects, CONF) == {"b-0"}
    light = CONF.replace("{name: fairshare}",
                         "{name: fairshare, arguments: {fairshare.weight.huawei.com/Ascend910: 0.1}}")
    assert placed(objects, light) == {"a-0"}


@pytest.mark.parametrize(("arguments", "message"), [
    ("{fairshare.weight.cpu: -1}", "must be ≥ 0"), ("{fairshare.weight.cpu: .nan}", "finite"),
    ("{fairshare.halfLife: 1h}", "fairshare.halfLife"),
])
def test_bad_arguments_are_configuration_errors(arguments: str, message: str) -> None:
    with pytest.raises(ConfError, match=message):
        parse_conf(CONF.replace("{name: fairshare}", f"{{name: fairshare, arguments: {arguments}}}"))
