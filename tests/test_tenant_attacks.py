"""Tenants are not trusted (issue 29), on the embedded cluster and the scheduler's own code path: a pod's
creator can write any annotation and name any PriorityClass, and neither takes or blocks another team's
chips nor buys a priority the team was not given."""

from __future__ import annotations

import json

import pytest

from hetsched.api.manifest import ManifestError, load_text
from hetsched.api.objects import AnyObject, Pod
from hetsched.cluster.memory import Invalid
from hetsched.devices.inventory import pod_allocation
from tests.builders import accel_node, harness, pod, podgroup, priority_class, running_on
from tests.test_preemption import CONF

ASCEND = "huawei.com/Ascend910"


def squatter(name: str, node: str, stamp: str | None) -> list[AnyObject]:
    """A 1-chip pod of team-a, bound on ``node``, whose annotations claim all 8 chips of the server."""
    notes = {"hetsched.io/allocation": json.dumps({ASCEND: list(range(8))}),
             ASCEND: ",".join(f"Ascend910-{c}" for c in range(8))}
    if stamp is not None:
        notes["hetsched.io/allocation-for"] = stamp
    made = running_on(pod(f"{name}-0", name, cpu="1", limits={ASCEND: 1}, namespace="team-a", annotations=notes),
                      node)
    return [podgroup(name, 1, phase="Running", namespace="team-a"), made]


def test_squatters_claiming_every_chip_block_nothing() -> None:
    """Four 1-chip pods whose annotations claim all 8 chips of each of 4 servers (unstamped, stamped for
    another pod, stamped for themselves but naming 8 chips for a 1-chip request): the cache charges each
    the one chip it asks for, and team-b's 4 × 4-chip gang runs on the 28 chips that are free."""
    nodes = [accel_node(f"npu-{i}") for i in range(4)]
    squatters = [*squatter("s0", "npu-0", None), *squatter("s1", "npu-1", "uid-of-another-pod/npu-1"),
                 *squatter("s2", "npu-2", "pod-s2/npu-2"), *squatter("s3", "npu-3", "")]
    train = [podgroup("train", 4, namespace="team-b"),
             *(pod(f"train-{i}", "train", cpu="1", limits={ASCEND: 4}, namespace="team-b") for i in range(4))]
    run = harness([*nodes, *squatters, *train])
    run.cycle()
    placed = {p.metadata.name: (p.spec.nodeName, pod_allocation(p.metadata.annotations)[ASCEND])
              for p in run.cluster.list("Pod") if isinstance(p, Pod) and p.metadata.name.startswith("train")}
    assert len(placed) == 4 and all(node for node, _ in placed.values()), placed
    assert all(len(chips) == 4 for _, chips in placed.values())


def test_a_system_priority_class_buys_a_tenant_nothing() -> None:
    """team-a names system-node-critical (2,000,001,000): its pods are refused at admission, as the webhook
    refuses them on a real cluster, and a PodGroup that names it outranks nobody — team-b's running gang
    is not preempted for it — and `hetsched validate` says why for a Job."""
    classes = [priority_class("system-node-critical", 2_000_001_000), priority_class("low", 10)]
    nodes = [accel_node("npu-0")]
    victims = [podgroup("base", 1, phase="Running", namespace="team-b", priority_class="low"),
               running_on(pod("base-0", "base", cpu="1", limits={ASCEND: 8}, namespace="team-b"), "npu-0")]
    run = harness([*classes, *nodes, *victims,
                   podgroup("urgent", 1, namespace="team-a", priority_class="system-node-critical"),
                   pod("urgent-0", "urgent", cpu="1", limits={ASCEND: 8}, namespace="team-a")], CONF)
    run.cycle()
    run.cycle()
    assert run.cluster.get("Pod", "team-b/base-0") is not None  # not evicted
    forged = pod("vip-0", "urgent", cpu="1", namespace="team-a").model_copy()
    forged = forged.model_copy(update={"spec": forged.spec.model_copy(
        update={"priorityClassName": "system-node-critical"})})
    with pytest.raises(Invalid, match=r"spec.priorityClassName: PriorityClass system-node-critical may be used "
                                      r"only in namespace.s. kube-system, not in team-a"):
        run.cluster.create(forged)
    job = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: vip, namespace: team-a}
spec:
  priorityClassName: system-node-critical
  tasks:
  - name: w
    replicas: 1
    template: {spec: {containers: [{name: w, image: x}]}}
"""
    with pytest.raises(ManifestError, match=r"Job/vip\): spec.priorityClassName: PriorityClass "
                                            r"system-node-critical may be used only"):
        load_text(job)
    assert load_text(job.replace("team-a", "kube-system"))
