"""The whole chain on real kubelets and containers (tests/realnodes.py): hetsched installed from its own
manifests (``hetsched install --print``, the same objects as deploy/hetsched.yaml and the chart) and its
own image, on three nodes — two fake "Ascend 910 ×8" servers and one fake "Cambricon MLU370 ×4" — whose
kubelets run hetsched's device plugin. Every assertion is on what the real cluster reports: node
allocatable from the real kubelet, pod phases from the real kubelet, what each container printed about
the devices it sees.

In CI (``CI`` set) a missing binary or image is a failure, not a skip: .ci/run provisions them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from hetsched.benchmark.apiserver import server_version
from hetsched.cluster.kubernetes import ApiError, KubeClient
from hetsched.devices.inventory import pod_allocation
from hetsched.ports import Conflict, NotFound
from tests.builders import table
from tests.realnodes import BUSYBOX, RealCluster, missing, real_cluster, wait_for

ROOT = Path(__file__).resolve().parents[1]
WHY = missing()
if WHY and os.environ.get("CI"):
    raise RuntimeError(f"real-node tests cannot run in CI: {WHY}")
pytestmark = pytest.mark.skipif(bool(WHY), reason=WHY or "available")

NODES = {
    "ascend-0": {"hetsched.io/vendor": "fake", "huawei.com/Ascend910": "true"},
    "ascend-1": {"hetsched.io/vendor": "fake", "huawei.com/Ascend910": "true"},
    "mlu-0": {"hetsched.io/vendor": "fake", "cambricon.com/mlu": "true"},
    "npu-0": {"hetsched.io/vendor": "fake"},
    "gpu-0": {"hetsched.io/vendor": "fake"},
    "gpu-1": {"hetsched.io/vendor": "fake"},
    "npu-1": {"hetsched.io/vendor": "fake"},
}
CHIPS = {
    "ascend-0": {"resource": "huawei.com/Ascend910", "model": "Ascend910", "like": "ascend", "count": 8, "superPod": 0},
    "ascend-1": {"resource": "huawei.com/Ascend910", "model": "Ascend910", "like": "ascend", "count": 8, "superPod": 0},
    "mlu-0": {"resource": "cambricon.com/mlu", "model": "MLU370", "like": "cambricon", "count": 4},
    "npu-0": {"resource": "huawei.com/Ascend310P", "model": "Ascend310P3", "like": "ascend", "count": 2,
              "partitioning": "vnpu"},  # an Atlas 300I Duo carved into vNPUs on demand
    "gpu-0": {"resource": "nvidia.com/gpu", "model": "Tesla-V100-SXM2-16GB", "like": "nvidia", "count": 2,
              "partitioning": "vgpu"},  # GPUs shared as HAMi-core vGPUs
    "gpu-1": {"resource": "nvidia.com/gpu", "model": "NVIDIA A100-SXM4-40GB", "like": "nvidia", "count": 1,
              "partitioning": "mig"},  # an A100 in MIG mode, instances made on demand
    "npu-1": {"resource": "huawei.com/Ascend910", "model": "Ascend910B3", "like": "ascend", "count": 2,
              "partitioning": "vnpu"},  # 910B3s carved into vNPUs on demand, asked by HAMi's names
}
VALUES = {  # what a cluster without a pod network or kube-proxy needs; nothing else differs from the defaults
    "hostNetwork": True,
    "image": {"pullPolicy": "Never"},
    "nodeImage": {"pullPolicy": "Never"},
    "webhook": {"url": "https://127.0.0.1:{port}", "replicas": 1},  # one loopback: one server on the port
    "metrics": {"address": ""},  # all nodes share one loopback: the components' fixed ports would clash
    "probes": {"enabled": False},  # so would the scheduler replicas' health ports
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
    "PodDisruptionBudget": "/apis/{policy}/namespaces/{ns}/poddisruptionbudgets",  # the server's (install())
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets",
    "ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    "MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
}
FIGURES: dict[str, float] = {}


def advertised_chips(spec: dict[str, Any]) -> str:
    """What kubelet's allocatable shows for the chips' own name: the chips, or on a vGPU node the vGPUs (10 per
    GPU, as HAMi's plugin advertises ``nvidia.com/gpu``)."""
    return str(int(spec["count"]) * (10 if spec.get("partitioning") == "vgpu" else 1))


def write_chips(cluster: RealCluster, node: str, bad: tuple[int, ...] = ()) -> None:
    spec = CHIPS[node]
    chips = [{"id": i, "health": "Critical" if i in bad else "OK"} for i in range(int(spec["count"]))]
    path = cluster.nodes[node].path("/etc/hetsched/fake/chips.yaml")
    partial = path.with_name("chips.yaml.new")
    data = {"resource": spec["resource"], "model": spec["model"], "like": spec["like"], "chips": chips}
    if "superPod" in spec:  # the supernode the hardware reports, as an Atlas A3 does
        data["superPod"] = spec["superPod"]
    if "partitioning" in spec:
        data["partitioning"] = spec["partitioning"]
    partial.write_text(yaml.safe_dump(data))
    partial.replace(path)


def apply(client: KubeClient, text: str) -> list[dict[str, Any]]:
    """Create every object of a manifest, as ``kubectl apply -f`` does on a cluster that has none of them."""
    applied = []
    for document in yaml.safe_load_all(text):
        if not document:
            continue
        path = PATHS[document["kind"]].format(ns=document["metadata"].get("namespace", ""),
                                              policy=document["apiVersion"])
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
    major, minor = server_version(cluster.client.request("GET", "/version"))
    rendered = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "install", "--print", "--kube-version",
                               f"{major}.{minor}", "--values", str(folder / "values.yaml"), "--set",
                               f"apiServer={cluster.api.url}"],  # what this cluster's version serves
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
                 .get("allocatable", {}).get(spec["resource"]) == advertised_chips(spec), 120,
                 explain=lambda: cluster.logs("hetsched", "device-plugin"))
    FIGURES["install_to_ready_s"] = time.monotonic() - started


def test_each_node_advertises_its_chips_through_our_device_plugin(installed: RealCluster) -> None:
    client = installed.client
    for name, spec in CHIPS.items():
        node = node_status(client, name)
        assert node["status"]["allocatable"][spec["resource"]] == advertised_chips(spec)
        labels, annotations = node["metadata"]["labels"], node["metadata"]["annotations"]
        assert labels["accelerator"] == {"ascend": "huawei-ascend", "cambricon": "cambricon-mlu",
                                         "nvidia": "nvidia-gpu"}[str(spec["like"])]
        inventory = json.loads(annotations["hetsched.io/devices"])
        assert inventory  # the node agent's chip inventory
        condition = next(c for c in node["status"]["conditions"] if c["type"] == "AcceleratorHealthy")
        assert condition["status"] == "True", condition
        supernode = labels.get("topology.hetsched.io/tier-1")
        assert supernode == (f"superpod-{spec['superPod']}" if "superPod" in spec else None), labels
    print(f"figures: {json.dumps({k: round(v, 1) for k, v in FIGURES.items()})}")


def test_the_controller_discovers_the_supernode_the_node_agents_labelled(installed: RealCluster) -> None:
    """The node agents (in their containers, on real kubelets) labelled both Ascend servers with supernode 0;
    the controller's discovery made it a tier-1 HyperNode selecting them, owned by the discovery."""
    client = installed.client

    def supernode() -> dict[str, Any] | None:
        try:
            return client.request("GET", "/apis/topology.volcano.sh/v1alpha1/hypernodes/tier1-superpod-0")
        except NotFound:
            return None

    wait_for("HyperNode tier1-superpod-0", lambda: supernode() is not None, 60,
             explain=lambda: installed.logs("hetsched", "controller"))
    found = supernode()
    assert found is not None
    assert found["metadata"]["labels"]["hetsched.io/discovered-from"] == "node-labels"
    assert found["spec"]["tier"] == 1
    (member,) = found["spec"]["members"]
    assert member["type"] == "Node"
    assert member["selector"]["labelMatch"]["matchLabels"] == {"topology.hetsched.io/tier-1": "superpod-0"}


# ------------------------------------------------------------------------------------------ workloads

SHOW = ("trap 'exit 0' TERM; "
        "echo \"devices: $(ls /dev | grep -E '^(davinci[0-9]+|cambricon_dev[0-9]+)$' | sort | tr '\\n' ' ')\"; "
        "echo \"visible: ${ASCEND_VISIBLE_DEVICES:-}${CAMBRICON_VISIBLE_DEVICES:-}\"; "
        "sleep 3600 & wait")
"""What every workload container does: print the accelerator device files and the vendor's visibility
variable it sees, then wait (ending at once on SIGTERM)."""


def workload(spec: dict[str, Any], command: str = SHOW) -> dict[str, Any]:
    """A pod template's spec made runnable here: the local busybox image, the host network, our command."""
    spec = dict(spec)
    spec["hostNetwork"] = True
    spec["terminationGracePeriodSeconds"] = 2
    spec["containers"] = [dict(c, image=BUSYBOX, imagePullPolicy="Never", command=["sh", "-c", command])
                          for c in spec["containers"]]
    return spec


def job(name: str, tasks: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": "volcano", "tasks": tasks, **spec}}  # no queue: the default one


def task(name: str, replicas: int, resource: str, chips: int, selector: dict[str, str],
         command: str = SHOW, **template: Any) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, "template": {"spec": workload({
        "nodeSelector": selector, **template,
        "containers": [{"name": name, "resources": {"limits": {resource: chips}}}]}, command)}}


JOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs"


def submit(client: KubeClient, manifest: dict[str, Any]) -> float:
    """Create the Job, and the queue it names unless that is one the installation made (default, root)."""
    queue = manifest["spec"].get("queue") or "default"
    if queue not in ("default", "root"):
        with contextlib.suppress(Conflict):
            client.request("POST", "/apis/scheduling.volcano.sh/v1beta1/queues", body={
                "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                "metadata": {"name": queue}, "spec": {"weight": 1}})
    client.request("POST", JOBS, body=manifest)
    return time.monotonic()


def job_pods(client: KubeClient, name: str) -> list[dict[str, Any]]:
    return pods(client, "default", f"volcano.sh/job-name={name}")


def saw(cluster: RealCluster, pod: dict[str, Any]) -> tuple[list[int], str]:
    """(device numbers, visibility variable) the pod's (latest) container printed."""
    node = cluster.nodes[pod["spec"]["nodeName"]]
    meta = pod["metadata"]
    folder = node.path("/var/log/pods") / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"

    def printed() -> tuple[list[int], str] | None:
        logs = sorted(folder.glob("*/*.log"), key=lambda p: int(p.stem))
        if not logs:
            return None
        lines = [line.split(" ", 3)[-1] for line in logs[-1].read_text().splitlines()]
        devices = next((line for line in lines if line.startswith("devices:")), None)
        visible = next((line for line in lines if line.startswith("visible:")), None)
        if devices is None or visible is None:
            return None
        return ([int(re.sub(r"\D", "", d)) for d in devices.split()[1:]], visible.split(" ", 1)[1].strip()
                if " " in visible else "")

    return wait_for(f"{meta['name']} printed its devices", printed, 30)  # type: ignore[no-any-return]


def printed_lines(cluster: RealCluster, pod: dict[str, Any], *prefixes: str) -> dict[str, str]:
    """The first line the pod's (latest) container printed starting with each prefix, once all are there."""
    node = cluster.nodes[pod["spec"]["nodeName"]]
    meta = pod["metadata"]
    folder = node.path("/var/log/pods") / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"

    def found() -> dict[str, str] | None:
        logs = sorted(folder.glob("*/*.log"), key=lambda p: int(p.stem))
        lines = [line.split(" ", 3)[-1] for line in logs[-1].read_text().splitlines()] if logs else []
        first = {p: next((line for line in lines if line.startswith(p)), None) for p in prefixes}
        return None if None in first.values() else {p: str(line) for p, line in first.items()}

    return wait_for(f"{meta['name']} printed {', '.join(prefixes)}", found, 30)  # type: ignore[no-any-return]


def handed_off(pod: dict[str, Any], resource: str) -> list[int]:
    return sorted(pod_allocation(pod["metadata"].get("annotations") or {}).get(resource, []))


def delete_job(client: KubeClient, name: str) -> None:
    with contextlib.suppress(NotFound):
        client.request("DELETE", f"{JOBS}/{name}")
    wait_for(f"job {name}'s pods gone", lambda: not job_pods(client, name), 120)


def assert_sees_its_chips(cluster: RealCluster, pod: dict[str, Any], resource: str) -> list[int]:
    chips = handed_off(pod, resource)
    devices, visible = saw(cluster, pod)
    assert chips and devices == chips, (pod["metadata"]["name"], chips, devices)
    assert visible == ",".join(str(c) for c in chips), (pod["metadata"]["name"], visible)
    return chips


def test_doctor_reports_every_check_ok_on_the_fresh_installation(installed: RealCluster, tmp_path: Path) -> None:
    report = doctor(installed, tmp_path)
    problems = [f for f in report["findings"] if f["severity"] != "ok"]
    assert not problems, problems


def doctor(cluster: RealCluster, folder: Path) -> dict[str, Any]:
    token = folder / "token"
    token.write_text(cluster.api.token)
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "doctor", "--server", cluster.api.url,
                          "--token-file", str(token), "--ca-file", cluster.api.ca, "--json"],  # Leases: found
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode in (0, 1, 2) and run.stdout, run.stderr
    return json.loads(run.stdout)  # type: ignore[no-any-return]


def test_the_seed_bert_job_runs_whole_on_one_server_each_container_seeing_its_chip(installed: RealCluster) -> None:
    """Seed 000 §3.2's Job (8 workers × 1 chip, nodeSelector quoted): all 8 pods Running on one server;
    each container sees exactly the chip in the scheduler's hand-off, as device file and
    ASCEND_VISIBLE_DEVICES; no chip twice."""
    seeds = list(yaml.safe_load_all((ROOT / "examples" / "workloads" / "seeds.yaml").read_text()))
    bert = next(d for d in seeds if d["kind"] == "Job")
    template = bert["spec"]["tasks"][0]["template"]
    template["spec"] = workload(template["spec"])
    bert["metadata"]["namespace"] = "default"
    client = installed.client
    submitted = submit(client, bert)
    wait_for("the BERT job's 8 pods Running", lambda: len(job_pods(client, "ascend-bert-pretrain")) == 8
             and running(job_pods(client, "ascend-bert-pretrain")), 180,
             explain=lambda: installed.logs("hetsched", "scheduler"))
    FIGURES["bert_submit_to_all_running_s"] = time.monotonic() - submitted
    workers = job_pods(client, "ascend-bert-pretrain")
    assert len({p["spec"]["nodeName"] for p in workers}) == 1  # the gang whole, on one server
    chips = [chip for p in workers for chip in assert_sees_its_chips(installed, p, "huawei.com/Ascend910")]
    assert sorted(chips) == list(range(8))  # every chip of the server, none twice
    delete_job(client, "ascend-bert-pretrain")


def test_the_first_hour_a_job_without_a_queue_runs_kubectl_shows_it_and_a_misfit_says_why(
        installed: RealCluster) -> None:
    """Issue 32, on the plain install: a Volcano Job that names no queue runs (the controller made the default
    Queue); ``kubectl get vcjob,pg,queue`` print Volcano's columns and the Queue counts it; the Job has its
    Events; a pod no node can hold says ``PodScheduled=False`` / ``Unschedulable`` with why, and a
    FailedScheduling Event."""
    client = installed.client
    first = job("first", [task("w", 1, "huawei.com/Ascend910", 1, {"huawei.com/Ascend910": "true"})],
                minAvailable=1)
    assert "queue" not in first["spec"]
    submit(client, first)
    wait_for("the first Job Running", lambda: (client.request("GET", f"{JOBS}/first").get("status") or {})
             .get("state", {}).get("phase") == "Running", 180, explain=lambda: installed.logs("hetsched"))
    jobs = table(installed.api, JOBS)
    names = [c["name"] for c in jobs["columnDefinitions"]]
    row = next(r["cells"] for r in jobs["rows"] if r["cells"][0] == "first")
    assert row[names.index("STATUS")] == "Running" and row[names.index("QUEUE")] == "default", (names, row)
    groups = table(installed.api, "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups")
    assert {"STATUS", "MINMEMBER", "RUNNINGS", "QUEUE"} <= {c["name"] for c in groups["columnDefinitions"]}
    queues = table(installed.api, "/apis/scheduling.volcano.sh/v1beta1/queues")
    qnames = [c["name"] for c in queues["columnDefinitions"]]
    wait_for("the default Queue counts the running PodGroup", lambda: next(
        r["cells"] for r in table(installed.api, "/apis/scheduling.volcano.sh/v1beta1/queues")["rows"]
        if r["cells"][0] == "default")[qnames.index("RUNNING")] >= 1, 60)
    wait_for("the Job's Running Event", lambda: any(
        e["involvedObject"].get("name") == "first" and e["involvedObject"].get("kind") == "Job"
        and e["reason"] == "Running" for e in client.request("GET", "/api/v1/namespaces/default/events")["items"]),
        60)
    delete_job(client, "first")
    # the installation's webhook keeps the queues every Job needs, as Volcano's does
    with pytest.raises(ApiError) as refused:
        client.request("DELETE", "/apis/scheduling.volcano.sh/v1beta1/queues/default")
    assert refused.value.status == 403 and "Queue default cannot be deleted" in str(refused.value)

    misfit = job("misfit", [task("w", 1, "huawei.com/Ascend910", 1, {"no-such-pool": "true"})], minAvailable=1)
    submit(client, misfit)

    def verdict() -> dict[str, Any] | None:
        for pod in job_pods(client, "misfit"):
            for condition in pod.get("status", {}).get("conditions") or []:
                if condition["type"] == "PodScheduled" and condition["status"] == "False":
                    return condition  # type: ignore[no-any-return]
        return None

    condition = wait_for("the misfit pod's PodScheduled=False", verdict, 120,
                         explain=lambda: installed.logs("hetsched", "scheduler"))
    assert condition["reason"] == "Unschedulable" and "node selector" in condition["message"].lower(), condition
    wait_for("a FailedScheduling Event on the misfit pod", lambda: any(
        e["reason"] == "FailedScheduling" and e["involvedObject"].get("name", "").startswith("misfit-")
        for e in client.request("GET", "/api/v1/namespaces/default/events")["items"]), 60)
    delete_job(client, "misfit")


def test_a_mixed_vendor_gang_runs_each_container_with_its_own_vendors_devices(installed: RealCluster) -> None:
    client = installed.client
    submit(client, job("mixed", [
        task("train", 2, "huawei.com/Ascend910", 2, {"huawei.com/Ascend910": "true"}),
        task("serve", 1, "cambricon.com/mlu", 1, {"cambricon.com/mlu": "true"})], minAvailable=3))
    wait_for("the mixed gang Running", lambda: len(job_pods(client, "mixed")) == 3 and running(
        job_pods(client, "mixed")), 180, explain=lambda: installed.logs("hetsched", "scheduler"))
    for pod in job_pods(client, "mixed"):
        serving = pod["metadata"]["name"].startswith("mixed-serve")
        assert pod["spec"]["nodeName"] == ("mlu-0" if serving else pod["spec"]["nodeName"])
        chips = assert_sees_its_chips(installed, pod, "cambricon.com/mlu" if serving else "huawei.com/Ascend910")
        assert len(chips) == (1 if serving else 2)
    delete_job(client, "mixed")


def test_an_operators_gang_named_by_label_runs_whole_on_real_kubelets(installed: RealCluster) -> None:
    """Issue 18 on real nodes: a PodGroup of 2 and two 8-chip pods that name it only by the label
    scheduling.volcano.sh/group-name, as Kubeflow Trainer v2 makes them — no group of their own is made,
    both run at once, one per server, each container seeing its 8 chips."""
    client = installed.client
    groups = "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups"
    client.request("POST", groups, body={"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                                         "metadata": {"name": "op-train"}, "spec": {"minMember": 2}})
    for i in range(2):
        client.request("POST", "/api/v1/namespaces/default/pods", body={
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"op-train-node-{i}", "labels": {"scheduling.volcano.sh/group-name": "op-train",
                                                                  "jobset.sigs.k8s.io/jobset-name": "op-train"}},
            "spec": workload({"schedulerName": "volcano", "nodeSelector": {"huawei.com/Ascend910": "true"},
                              "containers": [{"name": "node", "resources": {
                                  "limits": {"huawei.com/Ascend910": 8}}}]})})
    selector = "jobset.sigs.k8s.io/jobset-name=op-train"
    wait_for("the operator's gang Running", lambda: running(pods(client, "default", selector))
             and len(pods(client, "default", selector)) == 2, 180,
             explain=lambda: installed.logs("hetsched", "scheduler"))
    members = pods(client, "default", selector)
    assert len({p["spec"]["nodeName"] for p in members}) == 2  # 8 chips each: one per server
    for member in members:
        assert sorted(assert_sees_its_chips(installed, member, "huawei.com/Ascend910")) == list(range(8))
    made = [g["metadata"]["name"] for g in client.request("GET", groups)["items"]]
    assert not any(f"podgroup-{p['metadata']['uid']}" in made for p in members)  # none of their own
    for member in members:
        client.request("DELETE", f"/api/v1/namespaces/default/pods/{member['metadata']['name']}")
    client.request("DELETE", f"{groups}/op-train")
    wait_for("the operator's pods gone", lambda: not pods(client, "default", selector), 120)


def test_a_vnpu_pod_sees_only_the_vnpu_carved_for_it_which_goes_with_the_pod(installed: RealCluster) -> None:
    """Issue 34: a Job asking one 310P vNPU the MindCluster way (``huawei.com/npu-core: 2`` and the pod label
    ``ring-controller.atlas: ascend-310P``) lands on the node whose chips are carved into vNPUs; the scheduler
    hands off a vir02_1c and its place; at admission the device plugin creates that vNPU with npu-smi (the
    fake node's emulation of it) and the container sees that vNPU only — ``/dev/davinci<vnpu id>`` and
    ``ASCEND_VISIBLE_DEVICES`` naming it, no physical chip. Deleting the Job destroys the vNPU."""
    client = installed.client
    wait_for("npu-0 advertises 16 AI-core slots", lambda: node_status(client, "npu-0")["status"]
             .get("allocatable", {}).get("huawei.com/npu-core") == "16", 120,
             explain=lambda: installed.logs("hetsched", "device-plugin"))
    template = {"metadata": {"labels": {"ring-controller.atlas": "ascend-310P"}}, "spec": workload({
        "containers": [{"name": "infer", "resources": {"limits": {"huawei.com/npu-core": 2}}}]})}
    submit(client, job("vnpu-infer", [{"name": "infer", "replicas": 1, "template": template}], minAvailable=1))
    wait_for("the vNPU pod Running", lambda: running(job_pods(client, "vnpu-infer")), 180,
             explain=lambda: installed.logs("hetsched", "device-plugin") + installed.logs("hetsched", "scheduler"))
    (pod,) = job_pods(client, "vnpu-infer")
    assert pod["spec"]["nodeName"] == "npu-0"
    (entry,) = json.loads(pod["metadata"]["annotations"]["hetsched.io/partitions"])
    resource, phy, template_name, placement = entry
    assert resource == "huawei.com/Ascend310P" and template_name == "vir02_1c"
    vnpu = 100 + 16 * phy + (placement & -placement).bit_length() - 1
    devices, visible = saw(installed, pod)
    assert devices == [vnpu] and visible == str(vnpu), (devices, visible, vnpu)  # its vNPU, nothing else
    state = installed.nodes["npu-0"].path("/etc/hetsched/fake/vnpus.json")
    assert json.loads(state.read_text())[str(phy)] == [[vnpu, (vnpu - 100 - 16 * phy) // 2, "vir02_1c"]]
    delete_job(client, "vnpu-infer")
    wait_for("the vNPU destroyed with its pod", lambda: json.loads(state.read_text()).get(str(phy)) == [], 60,
             explain=lambda: installed.logs("hetsched", "device-plugin"))


def test_two_hami_910_vnpu_pods_each_see_only_their_own_vnpu(installed: RealCluster) -> None:
    """Issue 34, the 910 way: two pods each asking HAMi's ``huawei.com/Ascend910B3: 1`` with 16 GiB of its memory
    land on the node whose 910B3s are carved on demand; the scheduler gives each a vir05_1c_16g and an
    instance slot, the device plugin creates vNPU ``100 + 16·chip + slot`` at admission, and each container
    sees its own vNPU only. Deleting the Job destroys both."""
    client = installed.client
    wait_for("npu-1 advertises 8 vNPU slots and 128 GiB", lambda: (
        node_status(client, "npu-1")["status"].get("allocatable", {}).get("huawei.com/Ascend910B3"),
        node_status(client, "npu-1")["status"].get("allocatable", {}).get("huawei.com/Ascend910B3-memory"))
        == ("8", "131072"), 120, explain=lambda: installed.logs("hetsched", "device-plugin"))
    limits = {"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 16384}
    template = {"spec": workload({"containers": [{"name": "infer", "resources": {"limits": limits}}]})}
    submit(client, job("b3-infer", [{"name": "infer", "replicas": 2, "template": template}], minAvailable=2))
    wait_for("both vNPU pods Running", lambda: len(pods := job_pods(client, "b3-infer")) == 2 and running(pods), 180,
             explain=lambda: installed.logs("hetsched", "device-plugin") + installed.logs("hetsched", "scheduler"))
    state = installed.nodes["npu-1"].path("/etc/hetsched/fake/vnpus.json")
    seen = set()
    for pod in job_pods(client, "b3-infer"):
        assert pod["spec"]["nodeName"] == "npu-1"
        (entry,) = json.loads(pod["metadata"]["annotations"]["hetsched.io/partitions"])
        resource, phy, template_name, placement = entry
        assert resource == "huawei.com/Ascend910" and template_name == "vir05_1c_16g"
        vnpu = 100 + 16 * phy + placement.bit_length() - 1
        devices, visible = saw(installed, pod)
        assert devices == [vnpu] and visible == str(vnpu), (devices, visible, vnpu)  # its vNPU, nothing else
        assert [vnpu, 0, "vir05_1c_16g"] in json.loads(state.read_text())[str(phy)]
        seen.add(vnpu)
    assert len(seen) == 2
    delete_job(client, "b3-infer")
    wait_for("the vNPUs destroyed with their pods",
             lambda: not any(json.loads(state.read_text()).values()), 60,
             explain=lambda: installed.logs("hetsched", "device-plugin"))


def test_vgpu_pods_see_only_the_gpu_their_vgpu_was_carved_on_with_its_caps(installed: RealCluster) -> None:
    """Issue 34: two pods asking one vGPU each the Volcano way (``volcano.sh/vgpu-number: 1``, ``-memory: 6000``,
    ``-cores: 30``) and one in HAMi's names (``nvidia.com/gpu: 1``, ``nvidia.com/gpumem: 3000``) land on the
    node whose GPUs are shared as HAMi-core vGPUs (the node agent publishes the vGPU memory and compute it
    has, the device plugin the vGPU slots under both names); each container sees exactly the GPU its own
    hand-off names, with HAMi-core's caps for its vGPU — no other GPU."""
    client = installed.client
    wait_for("gpu-0 advertises 20 vGPU slots and 32768 MiB of vGPU memory", lambda: {
        key: node_status(client, "gpu-0")["status"].get("allocatable", {}).get(key)
        for key in ("volcano.sh/vgpu-number", "volcano.sh/vgpu-memory")} == {
        "volcano.sh/vgpu-number": "20", "volcano.sh/vgpu-memory": "32768"}, 120,
        explain=lambda: installed.logs("hetsched", "device-plugin") + installed.logs("hetsched", "node-agent"))
    show = ('echo "visible: $NVIDIA_VISIBLE_DEVICES"; echo "memory: $CUDA_DEVICE_MEMORY_LIMIT_0 '
            '${CUDA_DEVICE_MEMORY_LIMIT_1:-}"; echo "sm: $CUDA_DEVICE_SM_LIMIT"; sleep 3600')
    template = {"spec": workload({"containers": [{"name": "infer", "resources": {"limits": {
        "volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 6000, "volcano.sh/vgpu-cores": 30}}}]}, show)}
    hami = {"spec": workload({"containers": [{"name": "hami", "resources": {"limits": {
        "nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}}}]}, show)}
    submit(client, job("vgpu-infer", [{"name": "infer", "replicas": 2, "template": template},
                                      {"name": "hami", "replicas": 1, "template": hami}], minAvailable=3))
    wait_for("the vGPU pods Running", lambda: running(job_pods(client, "vgpu-infer")), 180,
             explain=lambda: installed.logs("hetsched", "device-plugin") + installed.logs("hetsched", "scheduler"))
    pods_seen = job_pods(client, "vgpu-infer")
    assert len(pods_seen) == 3
    for pod in pods_seen:
        assert pod["spec"]["nodeName"] == "gpu-0"
        (entry,) = json.loads(pod["metadata"]["annotations"]["hetsched.io/partitions"])
        resource, phy, template_name, _placement = entry
        volcano = pod["metadata"]["name"].startswith("vgpu-infer-infer-")  # the hami task's: vgpu-infer-hami-0
        assert resource == "nvidia.com/gpu" and template_name == ("30%-6000MiB" if volcano else "0%-3000MiB")
        lines = printed_lines(installed, pod, "visible:", "memory:", "sm:")
        assert lines["visible:"] == f"visible: {phy}", lines  # its GPU, nothing else
        assert lines["memory:"].strip() == ("memory: 6000m" if volcano else "memory: 3000m"), lines
        assert lines["sm:"].strip() == ("sm: 30" if volcano else "sm:"), lines
    delete_job(client, "vgpu-infer")


def test_a_mig_pod_sees_only_the_instance_made_for_it_which_goes_with_the_pod(installed: RealCluster) -> None:
    """Issue 34: a pod asking ``nvidia.com/mig-3g.20gb: 1`` (NVIDIA's mixed-strategy name) lands on the node
    whose A100 is in MIG mode; the scheduler hands off a 3g.20gb and its memory slices; at admission the
    device plugin creates that instance through NVML (the fake node's emulation of it) and the container
    sees that instance's UUID only. Deleting the Job destroys the instance."""
    client = installed.client
    wait_for("gpu-1 advertises two 3g.20gb slots", lambda: node_status(client, "gpu-1")["status"]
             .get("allocatable", {}).get("nvidia.com/mig-3g.20gb") == "2", 120,
             explain=lambda: installed.logs("hetsched", "device-plugin"))
    show = 'echo "visible: $NVIDIA_VISIBLE_DEVICES"; sleep 3600'
    template = {"spec": workload({"containers": [{"name": "infer", "resources": {"limits": {
        "nvidia.com/mig-3g.20gb": 1}}}]}, show)}
    submit(client, job("mig-infer", [{"name": "infer", "replicas": 1, "template": template}], minAvailable=1))
    wait_for("the MIG pod Running", lambda: running(job_pods(client, "mig-infer")), 180,
             explain=lambda: installed.logs("hetsched", "device-plugin") + installed.logs("hetsched", "scheduler"))
    (pod,) = job_pods(client, "mig-infer")
    assert pod["spec"]["nodeName"] == "gpu-1"
    (entry,) = json.loads(pod["metadata"]["annotations"]["hetsched.io/partitions"])
    resource, phy, template_name, placement = entry
    assert resource == "nvidia.com/gpu" and template_name == "3g.20gb" and placement in (0b1111, 0b11110000)
    state = installed.nodes["gpu-1"].path("/etc/hetsched/fake/migs.json")
    ((gi, profile, start, size, _compute),) = json.loads(state.read_text())[str(phy)]
    assert (profile, ((1 << size) - 1) << start) == ("3g.20gb", placement)  # made where the scheduler said
    lines = printed_lines(installed, pod, "visible:")
    assert lines["visible:"] == f"visible: MIG-fa4e0000-{phy:04d}-{gi:04d}", lines  # that instance only
    delete_job(client, "mig-infer")
    wait_for("the instance destroyed with its pod", lambda: json.loads(state.read_text()).get(str(phy)) == [], 60,
             explain=lambda: installed.logs("hetsched", "device-plugin"))


def test_a_failed_worker_restarts_the_real_job_which_then_completes(installed: RealCluster) -> None:
    """``PodFailed → RestartJob``: at job version 0 every worker exits 1 (pod phase Failed, set by the real
    kubelet); the controller restarts the job (retryCount 1), and version 1's workers exit 0: Completed."""
    client = installed.client
    flaky = "if [ \"$JOB_VERSION\" = 0 ]; then echo failing; exit 1; fi; echo done"
    env = [{"name": "JOB_VERSION", "valueFrom": {"fieldRef": {"fieldPath":
                                                              "metadata.annotations['volcano.sh/job-version']"}}}]
    spec = task("worker", 2, "huawei.com/Ascend910", 1, {"huawei.com/Ascend910": "true"}, flaky,
                restartPolicy="Never")
    spec["template"]["spec"]["containers"][0]["env"] = env
    submit(client, job("flaky", [spec], minAvailable=2, maxRetry=3,
                       policies=[{"event": "PodFailed", "action": "RestartJob"}]))

    def state() -> tuple[str, int]:
        status = client.request("GET", f"{JOBS}/flaky").get("status", {})
        return status.get("state", {}).get("phase", ""), int(status.get("retryCount", 0))

    wait_for("the flaky job Completed", lambda: state()[0] == "Completed", 180,
             explain=lambda: f"{state()} {installed.logs('hetsched', 'controller')}")
    assert state() == ("Completed", 1)
    delete_job(client, "flaky")


def test_a_pytorch_job_reads_its_rendezvous_and_host_lists_through_the_real_kubelet(installed: RealCluster) -> None:
    """Volcano's ``pytorch`` plugin and the ``svc`` plugin it turns on, on the installation: the controller,
    under its own ServiceAccount and through /restrict, makes the Job's headless Service, host-list ConfigMap
    and NetworkPolicy (owned by the Job, so they go with it); the real kubelet resolves the variables read
    from that ConfigMap and mounts it at /etc/volcano; each container prints its rank."""
    client, ascend = installed.client, "huawei.com/Ascend910"
    show = ("trap 'exit 0' TERM; echo \"rdzv: $MASTER_ADDR $MASTER_PORT $WORLD_SIZE $RANK\"; "
            "echo \"hosts: $VC_WORKER_HOSTS $VC_MASTER_NUM $(cat /etc/volcano/worker.host)\"; sleep 3600 & wait")
    tasks = [task(name, 1, ascend, 1, {"huawei.com/Ascend910": "true"}, show) for name in ("master", "worker")]
    submit(client, job("torch", tasks, minAvailable=2, plugins={"pytorch": []}))
    try:
        wait_for("the pytorch job's 2 pods Running", lambda: len(job_pods(client, "torch")) == 2 and running(
            job_pods(client, "torch")), 180, explain=lambda: installed.logs("hetsched", "controller"))
        for pod in job_pods(client, "torch"):
            rank = "0" if pod["metadata"]["name"] == "torch-master-0" else "1"
            lines = printed_lines(installed, pod, "rdzv:", "hosts:")
            assert lines["rdzv:"] == f"rdzv: torch-master-0.torch 23456 2 {rank}", lines
            assert lines["hosts:"] == "hosts: torch-worker-0.torch 1 torch-worker-0.torch", lines
        service = client.request("GET", "/api/v1/namespaces/default/services/torch")
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["selector"] == {"volcano.sh/job-name": "torch", "volcano.sh/job-namespace": "default"}
        policy = client.request("GET", "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/torch")
        assert [ref["kind"] for ref in policy["metadata"]["ownerReferences"]] == ["Job"]
    finally:  # the chips go back for the tests after this one, whatever happened
        delete_job(client, "torch")

    def gone(path: str) -> bool:
        try:
            client.request("GET", path)
        except NotFound:
            return True
        return False

    wait_for("the Job's Service and ConfigMap gone with it", lambda: gone(
        "/api/v1/namespaces/default/services/torch") and gone("/api/v1/namespaces/default/configmaps/torch-svc"), 60)


def allocatable(client: KubeClient, node: str, resource: str) -> int:
    return int(node_status(client, node)["status"].get("allocatable", {}).get(resource, "0"))


def condition(client: KubeClient, node: str) -> dict[str, Any]:
    return next((c for c in node_status(client, node)["status"]["conditions"] if c["type"] == "AcceleratorHealthy"),
                {})


def test_a_chip_fault_moves_the_job_off_the_faulty_chip(installed: RealCluster) -> None:
    """The fake vendor's health file flips one chip of a running job to Critical: ListAndWatch tells the
    real kubelet (allocatable 8 → 7), the node agent sets AcceleratorHealthy False, and the fault controller
    moves the job; no replacement container sees the faulty chip."""
    client, ascend = installed.client, "huawei.com/Ascend910"
    submit(client, job("resilient", [task("worker", 2, ascend, 4, {"huawei.com/Ascend910": "true"})],
                       minAvailable=2))
    wait_for("the resilient job Running", lambda: len(job_pods(client, "resilient")) == 2 and running(
        job_pods(client, "resilient")), 180, explain=lambda: installed.logs("hetsched", "scheduler"))
    before = {p["metadata"]["uid"] for p in job_pods(client, "resilient")}
    victim = job_pods(client, "resilient")[0]
    node, chip = victim["spec"]["nodeName"], handed_off(victim, ascend)[0]
    faulted = time.monotonic()
    write_chips(installed, node, bad=(chip,))
    try:
        wait_for(f"{node}'s allocatable down to 7", lambda: allocatable(client, node, ascend) == 7, 60)
        wait_for(f"{node} AcceleratorHealthy False", lambda: condition(client, node).get("status") == "False", 60)

        def moved() -> bool:
            current = job_pods(client, "resilient")
            return (len(current) == 2 and running(current) and not before & {p["metadata"]["uid"] for p in current})

        wait_for("the job running again on healthy chips", moved, 180,
                 explain=lambda: installed.logs("hetsched", "controller"))
        FIGURES["chip_fault_to_running_again_s"] = time.monotonic() - faulted
        for pod in job_pods(client, "resilient"):
            chips = assert_sees_its_chips(installed, pod, ascend)
            assert pod["spec"]["nodeName"] != node or chip not in chips, (node, chip, chips)
    finally:
        write_chips(installed, node)
        delete_job(client, "resilient")
    wait_for(f"{node}'s allocatable back to 8", lambda: allocatable(client, node, ascend) == 8, 60)


def test_a_garbage_vendor_file_makes_every_chip_unhealthy_never_an_empty_list(installed: RealCluster) -> None:
    client, ascend, node = installed.client, "huawei.com/Ascend910", "ascend-1"
    installed.nodes[node].path("/etc/hetsched/fake/chips.yaml").write_text("chips: [{id: zero}]\n<<garbage>>")
    try:
        wait_for("allocatable 0 with the chips still known", lambda: allocatable(client, node, ascend) == 0
                 and node_status(client, node)["status"]["capacity"].get(ascend) == "8", 60)
        wait_for("AcceleratorHealthy False", lambda: condition(client, node).get("status") == "False", 60)
    finally:
        write_chips(installed, node)
    wait_for(f"{node}'s allocatable back to 8", lambda: allocatable(client, node, ascend) == 8, 60)


def plugin_log(cluster: RealCluster, node: str) -> str:
    folder = cluster.nodes[node].path("/var/log/pods")
    return "".join(log.read_text(errors="replace") for log in folder.glob("hetsched_hetsched-device-plugin-*/*/*.log"))


def test_a_kubelet_restart_keeps_running_pods_and_their_chips(installed: RealCluster) -> None:
    client, ascend = installed.client, "huawei.com/Ascend910"
    submit(client, job("steady", [task("worker", 1, ascend, 2, {"huawei.com/Ascend910": "true"})], minAvailable=1))
    wait_for("the steady job Running", lambda: running(job_pods(client, "steady")), 180)
    (pod,) = job_pods(client, "steady")
    node = installed.nodes[pod["spec"]["nodeName"]]
    container = pod["status"]["containerStatuses"][0]["containerID"]
    chips = assert_sees_its_chips(installed, pod, ascend)
    registered = "registered huawei.com/Ascend910 with kubelet"
    before = plugin_log(installed, node.name).count(registered)
    node.stop_kubelet()
    restarted, wall = time.monotonic(), time.time()

    def heartbeat() -> float:  # the kubelet's latest (whole seconds)
        ready = next(c for c in node_status(client, node.name)["status"]["conditions"] if c["type"] == "Ready")
        return datetime.fromisoformat(ready["lastHeartbeatTime"].replace("Z", "+00:00")).timestamp()

    node.start_kubelet()
    wait_for("the device plugin registered again and the chips allocatable",
             lambda: plugin_log(installed, node.name).count(registered) > before and heartbeat() >= int(wall) + 1
             and allocatable(client, node.name, ascend) == 8, 120,
             explain=lambda: installed.logs("hetsched", "device-plugin"))
    FIGURES["kubelet_restart_to_allocatable_s"] = time.monotonic() - restarted
    (after,) = job_pods(client, "steady")
    status = after["status"]["containerStatuses"][0]
    assert (status["containerID"], status["restartCount"]) == (container, 0)  # the same container, never restarted
    assert handed_off(after, ascend) == chips and running([after])
    delete_job(client, "steady")


def test_after_the_leading_schedulers_kill_9_a_new_leader_schedules_and_nothing_runs_twice(
        installed: RealCluster) -> None:
    client = installed.client
    lease = "/apis/coordination.k8s.io/v1/namespaces/hetsched/leases/hetsched-scheduler"
    leader = client.request("GET", lease)["spec"]["holderIdentity"]  # <pod name>_<this start's suffix>
    pod = client.request("GET", f"/api/v1/namespaces/hetsched/pods/{leader.rsplit('_', 1)[0]}")
    node = installed.nodes[pod["spec"]["nodeName"]]
    container = pod["status"]["containerStatuses"][0]["containerID"].split("//")[1]
    tasks = subprocess.run(["ctr", "--address", str(node.socket), "-n", "k8s.io", "tasks", "ls"],
                           capture_output=True, text=True, check=True, timeout=30).stdout
    pid = int(next(line.split()[1] for line in tasks.splitlines() if line.startswith(container)))
    os.kill(pid, 9)
    killed = time.monotonic()
    # the standby, or the killed one restarted in place by kubelet (a new holder): whichever is first once
    # the dead holder's Lease expired
    successor = wait_for("a new scheduler holds the Lease", lambda: (
        holder := client.request("GET", lease)["spec"].get("holderIdentity")) not in ("", leader) and holder, 60)
    FIGURES["scheduler_kill_9_to_takeover_s"] = time.monotonic() - killed
    ascend = "huawei.com/Ascend910"
    submit(client, job("failover", [task("worker", 4, ascend, 1, {"huawei.com/Ascend910": "true"})], minAvailable=4))
    wait_for(f"{successor} schedules the next job", lambda: len(job_pods(client, "failover")) == 4 and running(
        job_pods(client, "failover")), 180)
    held = [(p["spec"]["nodeName"], chip) for p in pods(client, "default") if p["status"].get("phase") == "Running"
            for chip in handed_off(p, ascend)]
    assert len(held) == len(set(held))  # no chip given twice
    assert len(job_pods(client, "failover")) == 4  # every pod once
    delete_job(client, "failover")


def test_the_webhook_refuses_an_accelerator_set_only_in_requests(installed: RealCluster) -> None:
    """Seed 000 §4.2 ("scheduled, but the container sees no NPU"): a Job whose template asks for a chip only
    in requests is refused at admission with ``hetsched validate``'s message; a plain pod so written is
    refused by the API server's own validation."""
    from hetsched.cluster.kubernetes import ApiError
    from hetsched.ports import Invalid

    client = installed.client
    bad = task("worker", 1, "huawei.com/Ascend910", 1, {"huawei.com/Ascend910": "true"})
    resources = bad["template"]["spec"]["containers"][0]["resources"]
    resources["requests"] = resources.pop("limits")
    with pytest.raises((ApiError, Invalid)) as refused:
        client.request("POST", JOBS, body=job("requests-only", [bad]))
    assert "admission: document 1 (Job/requests-only)" in str(refused.value)
    assert "huawei.com/Ascend910 is set only in requests" in str(refused.value)
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "requests-only"},
             "spec": dict(bad["template"]["spec"], schedulerName="volcano")}
    with pytest.raises((ApiError, Invalid)) as also:
        client.request("POST", "/api/v1/namespaces/default/pods", body=plain)
    assert "Limit must be set" in str(also.value)


def test_a_tenant_can_neither_forge_a_hand_off_nor_squat_nor_claim_a_system_priority(installed: RealCluster) -> None:
    """Issue 29 on the real API server and kubelets: a pod whose creator writes the chip hand-off (chips 0
    and 1 of a server, bound there by itself), four 1-chip "squatters" whose annotations claim all 8 chips
    of each server, a Job whose template carries the hand-off, and a pod naming system-node-critical outside
    kube-system are all refused at admission (``/pods``, ``/validate``), naming the field. Beside them a
    legitimate gang of 4 × 4 chips takes both servers whole, each container seeing exactly its hand-off."""
    from hetsched.cluster.kubernetes import ApiError
    from hetsched.ports import Invalid

    client = installed.client
    registration = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/hetsched-pods"
    wait_for("the /pods registration's CA", lambda: all(
        entry["clientConfig"].get("caBundle") for entry in client.request("GET", registration)["webhooks"]), 60)
    resource = "huawei.com/Ascend910"

    def bound_pod(name: str, node: str, chips: int, claimed: list[int], **spec: Any) -> dict[str, Any]:
        notes = {"hetsched.io/allocation": json.dumps({resource: claimed}),
                 "hetsched.io/allocation-for": f"anything/{node}",
                 resource: ",".join(f"Ascend910-{c}" for c in claimed)}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": notes},
                "spec": workload({"nodeName": node, **spec,
                                  "containers": [{"name": "c", "resources": {"limits": {resource: chips}}}]})}

    attacks = [bound_pod("forged", "ascend-0", 2, [0, 1]),
               *(bound_pod(f"squatter-{node}-{i}", node, 1, list(range(8))) for node in ("ascend-0", "ascend-1")
                 for i in range(2))]
    for attack in attacks:
        with pytest.raises((ApiError, Invalid)) as refused:
            client.request("POST", "/api/v1/namespaces/default/pods", body=attack)
        assert f"Pod default/{attack['metadata']['name']}: metadata.annotations[" in str(refused.value)
        assert "written only by the scheduler" in str(refused.value)
    vip = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vip"},
           "spec": workload({"priorityClassName": "system-node-critical", "containers": [{"name": "c"}]})}
    with pytest.raises((ApiError, Invalid)) as refused:
        client.request("POST", "/api/v1/namespaces/default/pods", body=vip)
    assert "spec.priorityClassName: PriorityClass system-node-critical may be used only" in str(refused.value)
    smuggled = task("worker", 1, resource, 1, {resource: "true"})
    smuggled["template"]["metadata"] = {"annotations": {"hetsched.io/allocation": json.dumps({resource: [0]})}}
    with pytest.raises((ApiError, Invalid)) as refused:
        client.request("POST", JOBS, body=job("smuggled", [smuggled]))
    assert "template.metadata.annotations[hetsched.io/allocation]: written only by the scheduler" in \
        str(refused.value)
    assert not [p for p in pods(client, "default") if p["metadata"]["name"] in {"forged", "vip"}]

    submit(client, job("beside", [task("worker", 4, resource, 4, {resource: "true"})], minAvailable=4))
    wait_for("the legitimate gang Running", lambda: len(job_pods(client, "beside")) == 4
             and running(job_pods(client, "beside")), 180, explain=lambda: installed.logs("hetsched", "scheduler"))
    workers = job_pods(client, "beside")
    held = [(p["spec"]["nodeName"], chip) for p in workers for chip in assert_sees_its_chips(installed, p, resource)]
    assert len(held) == 16 and len(set(held)) == 16  # both servers whole, no chip twice
    delete_job(client, "beside")


def test_doctor_flags_a_node_whose_device_plugin_stopped(installed: RealCluster, tmp_path: Path) -> None:
    client = installed.client
    client.request("PATCH", "/api/v1/nodes/mlu-0", content_type="application/merge-patch+json",
                   body={"metadata": {"labels": {"hetsched.io/vendor": None}}})  # its DaemonSet pods leave
    wait_for("mlu-0's chips no longer allocatable", lambda: allocatable(client, "mlu-0", "cambricon.com/mlu") == 0,
             120)
    report = doctor(installed, tmp_path)
    flagged = {(f["check"], f["severity"]) for f in report["findings"] if f["object"] == "Node/mlu-0"}
    assert any(severity == "error" for _, severity in flagged), report["findings"]
    print(f"figures: {json.dumps({k: round(v, 1) for k, v in FIGURES.items()})}")
