"""The whole chain on real kubelets and containers (tests/realnodes.py): hetsched installed from its own
manifests (``hetsched install --print``, the same objects as deploy/hetsched.yaml and the chart) and its
own image, on three nodes — two fake "Ascend 910 ×8" servers and one fake "Cambricon MLU370 ×4" — whose
kubelets run hetsched's device plugin. Every assertion is on what the real cluster reports: node
allocatable from the real kubelet, pod phases from the real kubelet, what each container printed about
the devices it sees.

In CI (``CI`` set) a missing binary or image is a failure, not a skip: .ci/run provisions them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hetsched.cluster.kubernetes import KubeClient
from tests.realnodes import RealCluster, missing, real_cluster, wait_for

ROOT = Path(__file__).resolve().parents[1]
WHY = missing()
if WHY and os.environ.get("CI"):
    raise RuntimeError(f"real-node tests cannot run in CI: {WHY}")
pytestmark = pytest.mark.skipif(bool(WHY), reason=WHY or "available")

NODES = {
    "ascend-0": {"hetsched.io/vendor": "fake", "huawei.com/Ascend910": "true"},
    "ascend-1": {"hetsched.io/vendor": "fake", "huawei.com/Ascend910": "true"},
    "mlu-0": {"hetsched.io/vendor": "fake", "cambricon.com/mlu": "true"},
}
CHIPS = {
    "ascend-0": {"resource": "huawei.com/Ascend910", "model": "Ascend910", "like": "ascend", "count": 8},
    "ascend-1": {"resource": "huawei.com/Ascend910", "model": "Ascend910", "like": "ascend", "count": 8},
    "mlu-0": {"resource": "cambricon.com/mlu", "model": "MLU370", "like": "cambricon", "count": 4},
}
VALUES = {  # what a cluster without a pod network or kube-proxy needs; nothing else differs from the defaults
    "hostNetwork": True,
    "image": {"pullPolicy": "Never"},
    "webhook": {"url": "https://127.0.0.1:{port}"},
    "metrics": {"address": ""},  # all nodes share one loopback: the components' fixed ports would clash
    "controller": {"replicas": 1},
    "vendors": {"ascend": {"enabled": False}, "fake": {"enabled": True}},
}
PATHS = {  # kind → collection path
    "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "Namespace": "/api/v1/namespaces",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Service": "/api/v1/namespaces/{ns}/services",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets",
    "ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    "MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
}
FIGURES: dict[str, float] = {}


def write_chips(cluster: RealCluster, node: str, bad: tuple[int, ...] = ()) -> None:
    spec = CHIPS[node]
    chips = [{"id": i, "health": "Critical" if i in bad else "OK"} for i in range(int(spec["count"]))]
    path = cluster.nodes[node].path("/etc/hetsched/fake/chips.yaml")
    partial = path.with_name("chips.yaml.new")
    partial.write_text(yaml.safe_dump({"resource": spec["resource"], "model": spec["model"], "like": spec["like"],
                                       "chips": chips}))
    partial.replace(path)


def apply(client: KubeClient, text: str) -> list[dict[str, Any]]:
    """Create every object of a manifest, as ``kubectl apply -f`` does on a cluster that has none of them."""
    applied = []
    for document in yaml.safe_load_all(text):
        if not document:
            continue
        path = PATHS[document["kind"]].format(ns=document["metadata"].get("namespace", ""))
        client.request("POST", path, body=document)
        applied.append(document)
        if document["kind"] == "CustomResourceDefinition":
            name = document["metadata"]["name"]
            wait_for(f"CRD {name} established", lambda name=name: any(
                c["type"] == "Established" and c["status"] == "True" for c in client.request(
                    "GET", f"{PATHS['CustomResourceDefinition']}/{name}").get("status", {}).get("conditions") or []),
                30, 0.2)
    return applied


def pods(client: KubeClient, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    query = {"labelSelector": selector} if selector else None
    return list(client.request("GET", f"/api/v1/namespaces/{namespace}/pods", query=query)["items"])


def running(items: list[dict[str, Any]]) -> bool:
    return bool(items) and all(p["status"].get("phase") == "Running" and all(
        c.get("ready") for c in p["status"].get("containerStatuses", [])) for p in items)


def node_status(client: KubeClient, name: str) -> dict[str, Any]:
    return client.request("GET", f"/api/v1/nodes/{name}")  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    directory = Path(os.environ.get("TMPDIR", "/tmp")) / f"rn-{os.getpid()}"  # short: socket paths
    directory.mkdir()
    started = time.monotonic()
    try:
        with real_cluster(directory, NODES) as real:
            FIGURES["cluster_start_s"] = time.monotonic() - started
            for name in NODES:
                write_chips(real, name)
            yield real
    finally:
        subprocess.run(["rm", "-rf", str(directory)], check=False)


@pytest.fixture(scope="module")
def installed(cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> RealCluster:
    install(cluster, tmp_path_factory.mktemp("install"))
    return cluster


def install(cluster: RealCluster, folder: Path) -> None:
    """hetsched from its manifests, everything up: DaemonSet pods Running on every node, the Leases held,
    the webhook serving with its CA in the registrations, the chips in every node's allocatable."""
    values = json.loads(json.dumps(VALUES).replace("{port}", "9443"))
    (folder / "values.yaml").write_text(yaml.safe_dump(values))
    rendered = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "install", "--print", "--values",
                               str(folder / "values.yaml"), "--set", f"apiServer={cluster.api.url}"],
                              capture_output=True, text=True, timeout=120, check=True).stdout
    started = time.monotonic()
    apply(cluster.client, rendered)
    client = cluster.client
    wait_for("hetsched's pods Running", lambda: len(pods(client, "hetsched")) == 2 + 1 + 1 + 2 * len(NODES)
             and running(pods(client, "hetsched")), 240, 1, explain=lambda: cluster.logs("hetsched"))
    for name in ("scheduler", "controller"):
        wait_for(f"{name} Lease held", lambda name=name: client.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/hetsched/leases/hetsched-{name}")
            .get("spec", {}).get("holderIdentity"), 60)
    registrations = ("validatingwebhookconfigurations/hetsched-validate",
                     "mutatingwebhookconfigurations/hetsched-mutate")
    wait_for("the webhook's CA in its registrations", lambda: all(
        entry["clientConfig"].get("caBundle") for path in registrations
        for entry in client.request("GET", f"/apis/admissionregistration.k8s.io/v1/{path}")["webhooks"]), 60)
    for name, spec in CHIPS.items():
        wait_for(f"{name} advertises its chips", lambda name=name, spec=spec: node_status(client, name)["status"]
                 .get("allocatable", {}).get(spec["resource"]) == str(spec["count"]), 120,
                 explain=lambda: cluster.logs("hetsched", "device-plugin"))
    FIGURES["install_to_ready_s"] = time.monotonic() - started


def test_each_node_advertises_its_chips_through_our_device_plugin(installed: RealCluster) -> None:
    client = installed.client
    for name, spec in CHIPS.items():
        node = node_status(client, name)
        assert node["status"]["allocatable"][spec["resource"]] == str(spec["count"])
        labels, annotations = node["metadata"]["labels"], node["metadata"]["annotations"]
        assert labels["accelerator"] == ("huawei-ascend" if spec["like"] == "ascend" else "cambricon-mlu")
        inventory = json.loads(annotations["hetsched.io/devices"])
        assert inventory  # the node agent's chip inventory
        condition = next(c for c in node["status"]["conditions"] if c["type"] == "AcceleratorHealthy")
        assert condition["status"] == "True", condition
    print(f"figures: {json.dumps({k: round(v, 1) for k, v in FIGURES.items()})}")
