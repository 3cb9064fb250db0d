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


OPERATOR_PODS = """apiVersion: v1
kind: Pod
metadata:
  name: ghost-{i}
  labels: {{scheduling.volcano.sh/group-name: ghost}}
  annotations: {{hetsched.io/duration: "100"}}
spec:
  schedulerName: volcano
  containers: [{{name: c, image: x, resources: {{limits: {{huawei.com/Ascend910: 8}}}}}}]
"""
GHOST_GROUP = """apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: ghost, annotations: {hetsched.io/submit-at: "50"}}
spec: {minMember: 2, queue: default}
"""


def test_pods_naming_a_podgroup_that_does_not_exist_wait_for_it_and_say_so(tmp_path: Any) -> None:
    """An operator may create the pods before their PodGroup: they wait for it — never placed alone — and
    ``simulate`` and ``explain`` say which PodGroup they wait for. Once it comes, they run as one gang."""
    from typer.testing import CliRunner

    from hetsched.cli.main import app
    from tests.builders import ascend_cluster_spec

    cluster = ascend_cluster_spec(tmp_path / "cluster.yaml")
    pods = tmp_path / "pods.yaml"
    pods.write_text("---\n".join(OPERATOR_PODS.format(i=i) for i in range(2)))
    runner = CliRunner()
    stuck = runner.invoke(app, ["simulate", "--cluster", str(cluster), str(pods), "--json"])
    assert stuck.exit_code == 3, stuck.output
    assert "default/ghost: PodGroup default/ghost does not exist: 2 pending pod(s) name it" in stuck.output
    explained = runner.invoke(app, ["explain", "ghost", "--cluster", str(cluster), str(pods), "--until", "10"])
    assert explained.exit_code == 0, explained.output
    assert "PodGroup default/ghost does not exist: 2 pending pod(s) name it and wait for it" in explained.output
    group = tmp_path / "group.yaml"
    group.write_text(GHOST_GROUP)
    ran = runner.invoke(app, ["simulate", "--cluster", str(cluster), str(pods), str(group), "--json"])
    assert ran.exit_code == 0, ran.output
    import json

    results = json.loads(ran.output[ran.output.index("{"):])
    (job,) = results["jobs"]
    assert job["name"] == "ghost" and job["phase"] == "Completed"
    starts = {p["start"] for p in job["pods"]}
    assert len(starts) == 1 and starts.pop() >= 50  # together, once the PodGroup came


def test_pods_waiting_for_a_missing_podgroup_are_counted_for_prometheus() -> None:
    from prometheus_client import generate_latest

    from hetsched.metrics.scheduler import SchedulerMetrics

    h = harness([node("n", cpu="8"), member("w-0", "later", key=K8S_GROUP_KEY),
                 member("w-1", "later", key=VOLCANO_GROUP_KEY, as_label=True)])
    metrics = SchedulerMetrics()
    h.scheduler.observers.append(metrics)
    h.cycle()
    assert not any(p.spec.nodeName for p in h.cluster.list("Pod"))
    assert "hetsched_pods_waiting_for_podgroup 2.0" in generate_latest(metrics.registry).decode()
    h.cluster.create(podgroup("later", 2))
    h.cycle()
    assert all(p.spec.nodeName for p in h.cluster.list("Pod"))
    assert "hetsched_pods_waiting_for_podgroup 0.0" in generate_latest(metrics.registry).decode()


def test_a_podgroup_without_pods_is_admitted_when_its_min_resources_fit() -> None:
    """Kubeflow's training operator creates a job's pods only once its PodGroup has left Pending: a PodGroup
    alone must move to Inqueue when its minResources fit (and stay Pending while they do not), or the job
    never starts."""
    h = harness([node("n", cpu="8"), podgroup("fits", 3, phase="Pending", min_resources={"cpu": "6"}),
                 podgroup("too-big", 3, phase="Pending", min_resources={"cpu": "12"})])
    h.cycle()
    phases = {g.metadata.name: g.status.phase for g in h.cluster.list("PodGroup") if isinstance(g, PodGroup)}
    assert phases == {"fits": "Inqueue", "too-big": "Pending"}


def test_an_operators_indexed_pods_are_one_group_unless_a_pod_rule_reads_labels() -> None:
    """Operators give every pod its own index label: while no pod in the cluster has affinity, anti-affinity
    or spread rules, labels decide nothing and 100 workers are one task group (one vectorised pass); once a
    pod with such a rule exists, each pod's labels count again (they may be what the rule selects)."""
    workers = []
    for i in range(100):
        made = pod(f"w-{i}", "op", cpu="1")
        workers.append(made.model_copy(update={"metadata": made.metadata.model_copy(update={
            "labels": {"training.kubeflow.org/replica-index": str(i)}})}))
    h = harness([node("n", cpu="8"), podgroup("op", 100, phase="Pending"), *workers])
    (job,) = h.scheduler.cache.snapshot().jobs.values()
    assert len(job.groups) == 1 and len(job.groups[0].pending) == 100
    rule = {"topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"training.kubeflow.org/replica-index": "3"}}}
    h.cluster.create(pod("picky", None, affinity={"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [rule]}}))
    jobs = h.scheduler.cache.snapshot().jobs
    assert len(jobs["default/op"].groups) == 100


def test_host_ports_do_not_keep_labels_in_the_grouping() -> None:
    """Host-network pods (every DaemonSet of a CNI or kube-proxy) place themselves by host ports, which read
    no labels: with them in the cluster, an operator's indexed pods are still one group."""
    workers = []
    for i in range(10):
        made = pod(f"w-{i}", "op", cpu="1")
        workers.append(made.model_copy(update={"metadata": made.metadata.model_copy(update={
            "labels": {"training.kubeflow.org/replica-index": str(i)}})}))
    daemon = Pod.model_validate({"metadata": {"name": "kube-proxy-x", "namespace": "default"}, "spec": {
        "schedulerName": "volcano", "hostNetwork": True,
        "containers": [{"name": "proxy", "ports": [{"containerPort": 10256}]}]}})
    assert daemon.spec.pod_topology  # it does place itself relative to other pods: by its host port
    h = harness([node("n", cpu="32"), podgroup("op", 10, phase="Pending"), daemon, *workers])
    assert len(h.scheduler.cache.snapshot().jobs["default/op"].groups) == 1
