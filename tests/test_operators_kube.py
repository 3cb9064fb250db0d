"""The operators' gangs (tests/fixtures/operators) on a real kube-apiserver: each fixture's objects are
created as the operator creates them (PodGroup first, then its pods; a Job for Argo), and hetsched's
scheduler, job and PodGroup controllers run against the server. Every gang is bound whole, in its queue, or
not at all; no PodGroup of their own is made for an operator's pods."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hetsched.api.manifest import load_files
from hetsched.api.membership import group_name
from hetsched.api.objects import Pod, PodGroup
from hetsched.benchmark.apiserver import ApiServer, missing, real_apiserver
from hetsched.cluster.kubernetes import KubeClient, KubeCluster, WallClock
from hetsched.controllers.job import JobController
from hetsched.controllers.podgroup import PodGroupController
from hetsched.ports import Conflict
from hetsched.scheduler.cache import KINDS
from hetsched.scheduler.defaults import default_conf
from hetsched.scheduler.engine.runner import Scheduler
from tests.builders import node
from tests.test_kubernetes import add_node, install_crds

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "operators"
pytestmark = pytest.mark.skipif(bool(missing()), reason=missing() or "available")


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with real_apiserver(tmp_path_factory.mktemp("operators")) as server:
        install_crds(KubeClient.from_token(server.url, server.token, ca_file=server.ca))
        yield server


def gpu_node(name: str) -> Any:
    return node(name, cpu="64", memory="512Gi", nvidia_com__gpu=8)


class Control:
    """hetsched's scheduler, Job and PodGroup controllers on one connection, stepped by the test."""

    def __init__(self, api: ApiServer) -> None:
        self.cluster = KubeCluster(KubeClient.from_token(api.url, api.token, ca_file=api.ca))
        clock = WallClock()
        self.scheduler = Scheduler(self.cluster, self.cluster, self.cluster, clock, default_conf(),
                                   evictor=self.cluster)
        self.jobs = JobController(self.cluster, clock, events=self.cluster)
        self.groups = PodGroupController(self.cluster, ("hetsched", "volcano"))
        self.cluster.start([*KINDS, "Job", "Command"])
        assert self.cluster.wait_synced(30)

    def run(self, seconds: float, done: Any) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.cluster.pump()
            self.jobs.process()
            self.groups.process()
            self.scheduler.run_once()
            time.sleep(0.1)
            self.cluster.pump()
            if done():
                return

    def pods(self, prefix: str) -> list[Pod]:
        return [p for p in self.cluster.list("Pod") if isinstance(p, Pod) and p.metadata.name.startswith(prefix)]

    def stop(self) -> None:
        self.cluster.stop()


def create(cluster: KubeCluster, fixture: str) -> list[Any]:
    """The fixture's objects in the operator's order (Queues, PodGroups, then pods and Jobs)."""
    objects = load_files([FIXTURES / fixture])
    order = ["Queue", "PodGroup", "Job", "Pod"]
    for obj in sorted(objects, key=lambda o: order.index(o.kind)):
        with contextlib.suppress(Conflict):
            cluster.create(obj)
    return objects


def test_operator_gangs_are_bound_whole_in_their_queues(api: ApiServer) -> None:
    control = Control(api)
    try:
        with contextlib.suppress(Conflict):
            control.cluster.create(yaml_queue("default"))
        for i in range(2):
            add_node(control.cluster, gpu_node(f"gpu-{i}"))
        create(control.cluster, "kubeflow-pytorchjob.yaml")  # 3 × 8 GPUs on 2 servers: none may run
        control.run(5, lambda: False)
        assert not any(p.spec.nodeName for p in control.pods("bert-"))
        for i in range(2, 11):
            add_node(control.cluster, gpu_node(f"gpu-{i}"))
        add_node(control.cluster, node("cpu-0", cpu="64", memory="256Gi"))
        expected = {"kubeflow-pytorchjob.yaml": ("bert-", 3, "default"),
                    "mpi-operator-mpijob.yaml": ("allreduce-", 3, "research"),
                    "kuberay-raycluster.yaml": ("rc-", 3, "research"),
                    "kubeflow-trainer-v2-trainjob.yaml": ("llama-ft-", 2, "research"),
                    "spark-volcano.yaml": ("pi-", 3, "default")}
        for fixture in expected:
            if fixture != "kubeflow-pytorchjob.yaml":
                create(control.cluster, fixture)
        create(control.cluster, "argo-workflow-volcano-job.yaml")

        wanted = [(prefix, count) for prefix, count, _ in expected.values()] + [("step-job-hello1-", 2)]

        def all_bound() -> bool:
            return all(len(control.pods(prefix)) == count and all(p.spec.nodeName for p in control.pods(prefix))
                       for prefix, count in wanted)

        control.run(90, all_bound)
        assert all_bound(), {prefix: [(p.metadata.name, p.spec.nodeName) for p in control.pods(prefix)]
                             for prefix, _, _ in expected.values()}
        groups = {g.metadata.name: g for g in control.cluster.list("PodGroup") if isinstance(g, PodGroup)}
        for prefix, _, queue in expected.values():
            (named,) = {group_name(p.metadata.annotations, p.metadata.labels) for p in control.pods(prefix)}
            assert groups[named].spec.queue == queue and groups[named].status.phase == "Running", named
        assert not any(name.startswith("podgroup-") for name in groups)  # none made for an operator's pods
        used = [p.spec.nodeName for p in control.pods("bert-")] + [p.spec.nodeName for p in control.pods("llama-ft-")]
        assert len(set(used)) == len(used)  # 8-GPU pods: one per server
    finally:
        control.stop()


def yaml_queue(name: str) -> Any:
    from hetsched.api.objects import Queue

    return Queue.model_validate(yaml.safe_load(f"metadata: {{name: {name}}}"))
