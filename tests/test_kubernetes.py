"""Against a real kube-apiserver and etcd (tests/kubeapi.py): the Volcano-compatible CRDs apply; the
Kubernetes adapter lists and watches, writes with optimistic concurrency; and the same scheduler and
controllers that run in the simulator run the seed's 8-worker Ascend Job there — every pod bound once, the
gang whole, the chips handed off in the pods' annotations."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hetsched.api.manifest import load_files
from hetsched.api.objects import Job, Node, Pod, Queue
from hetsched.cluster.kubernetes import KubeClient, KubeCluster, WallClock
from hetsched.controllers.job import JobController
from hetsched.controllers.podgroup import PodGroupController
from hetsched.devices.inventory import pod_allocation
from hetsched.ports import Conflict
from hetsched.scheduler.cache import KINDS
from hetsched.scheduler.runner import Scheduler
from tests.builders import accel_node
from tests.kubeapi import ApiServer, missing, real_apiserver

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(bool(missing()), reason=missing() or "available")


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with real_apiserver(tmp_path_factory.mktemp("apiserver")) as server:
        client = KubeClient.from_token(server.url, server.token, ca_file=server.ca)
        for path in sorted((ROOT / "deploy" / "crds").glob("*.yaml")):
            client.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                           body=yaml.safe_load(path.read_text()))
        deadline = time.monotonic() + 30
        while True:  # the CRDs are served once established
            try:
                for path in ("/apis/batch.volcano.sh/v1alpha1/jobs", "/apis/scheduling.volcano.sh/v1beta1/queues",
                             "/apis/scheduling.volcano.sh/v1beta1/podgroups", "/apis/bus.volcano.sh/v1alpha1/commands"):
                    client.request("GET", path)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield server


def cluster_for(api: ApiServer) -> KubeCluster:
    return KubeCluster(KubeClient.from_token(api.url, api.token, ca_file=api.ca))


def add_node(cluster: KubeCluster, node: Node) -> None:
    """A node as a kubelet would present it: allocatable and capacity, Ready, and without the not-ready
    taint the API server puts on new nodes (there is no kubelet here: tests patch what it would)."""
    created = cluster.create(node)
    quantities = {k: str(v // 1000) if v % 1000 == 0 else f"{v}m" for k, v in node.status.allocatable.items()}
    name = created.metadata.name
    cluster.client.request("PATCH", f"/api/v1/nodes/{name}/status", content_type="application/merge-patch+json",
                           body={"status": {"allocatable": quantities, "capacity": quantities,
                                            "conditions": [{"type": "Ready", "status": "True", "reason": "Test"}]}})
    cluster.client.request("PATCH", f"/api/v1/nodes/{name}", content_type="application/merge-patch+json",
                           body={"spec": {"taints": None}})


def test_optimistic_concurrency_is_a_conflict_not_an_overwrite(api: ApiServer) -> None:
    cluster = cluster_for(api)
    queue = cluster.create(Queue.model_validate({"metadata": {"name": "occ"}, "spec": {"weight": 2}}))
    assert isinstance(queue, Queue) and queue.metadata.resourceVersion
    first = cluster.update(queue.model_copy(update={"spec": queue.spec.model_copy(update={"weight": 3})}))
    with pytest.raises(Conflict):  # the same old version again: refused
        cluster.update(queue.model_copy(update={"spec": queue.spec.model_copy(update={"weight": 4})}))
    assert isinstance(first, Queue) and first.spec.weight == 3


def test_the_seed_job_runs_on_a_real_apiserver(api: ApiServer) -> None:
    cluster = cluster_for(api)
    cluster.create(Queue.model_validate({"metadata": {"name": "training"}}))
    cluster.create(Queue.model_validate({"metadata": {"name": "default"}}))
    for i in range(2):
        add_node(cluster, accel_node(f"ascend-{i}", labels={"huawei.com/Ascend910": "true"}))
    (job,) = [o for o in load_files([ROOT / "examples" / "workloads" / "seeds.yaml"]) if o.kind == "Job"
              and o.metadata.name == "ascend-bert-pretrain"]
    assert isinstance(job, Job)
    cluster.create(job.model_copy(update={"metadata": job.metadata.model_copy(update={"namespace": "default"})}))
    clock = WallClock()
    scheduler = Scheduler(cluster, cluster, cluster, clock, evictor=cluster)
    jobs = JobController(cluster, clock, events=cluster)
    groups = PodGroupController(cluster, ("hetsched", "volcano"))
    cluster.start([*KINDS, "Job", "Command"])
    assert cluster.wait_synced(30)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        cluster.pump()
        jobs.process()
        groups.process()
        scheduler.run_once()
        time.sleep(0.1)
        cluster.pump()
        pods = [p for p in cluster.list("Pod") if isinstance(p, Pod)]
        if len(pods) == 8 and all(p.spec.nodeName for p in pods):
            break
    pods = [p for p in cluster.list("Pod") if isinstance(p, Pod)]
    assert len(pods) == 8 and all(p.spec.nodeName for p in pods), [(p.metadata.name, p.spec.nodeName) for p in pods]
    held = [(p.spec.nodeName, chip) for p in pods for chip in pod_allocation(p.metadata.annotations)[
        "huawei.com/Ascend910"]]
    assert len(held) == 8 and len(set(held)) == 8  # every pod bound once, its chip handed off, none shared
    assert {n for n, _ in held} == {"ascend-0"}  # the gang whole, on one server's 8 chips
    cluster.stop()
