"""``--cluster`` takes what operators have (issue 16): ``kubectl get nodes -o yaml`` output and a dump of
what runs there now, so tomorrow's workload can be replayed on today's cluster. The dumps below have the
shape kubectl prints (a v1 ``List``, RFC 3339 times, managedFields, status fields hetsched does not read)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hetsched.api.manifest import ManifestError, load_text
from hetsched.api.objects import Node, Pod
from hetsched.cluster.dump import load_cluster
from hetsched.sim.simulator import Simulation

NODES = """\
apiVersion: v1
items:
- apiVersion: v1
  kind: Node
  metadata:
    annotations: {node.alpha.kubernetes.io/ttl: "0"}
    creationTimestamp: "2026-11-02T08:14:22Z"
    labels: {kubernetes.io/arch: arm64, kubernetes.io/hostname: npu-a01, kubernetes.io/os: linux, pool: train}
    managedFields:
    - {apiVersion: v1, fieldsType: FieldsV1, fieldsV1: {f:metadata: {}}, manager: kubelet, operation: Update,
       time: "2026-11-02T08:14:22Z"}
    name: npu-a01
    resourceVersion: "8812231"
    uid: 7d2b5a8e-4a9d-4a27-a0f6-2b1f3c9a1e11
  spec: {podCIDR: 10.244.1.0/24, podCIDRs: [10.244.1.0/24]}
  status:
    addresses: [{address: 192.168.10.11, type: InternalIP}]
    allocatable: {cpu: "190", ephemeral-storage: "846594933865", huawei.com/Ascend910: "8", hugepages-1Gi: "0",
                  memory: 1515224744Ki, pods: "110"}
    capacity: {cpu: "192", ephemeral-storage: 918602388Ki, huawei.com/Ascend910: "8", memory: 1583554760Ki,
               pods: "110"}
    conditions:
    - {lastHeartbeatTime: "2026-12-03T06:01:12Z", lastTransitionTime: "2026-11-02T08:15:02Z",
       message: kubelet is posting ready status, reason: KubeletReady, status: "True", type: Ready}
    nodeInfo: {architecture: arm64, kubeletVersion: v1.28.2, operatingSystem: linux}
- apiVersion: v1
  kind: Node
  metadata: {name: npu-a02, labels: {kubernetes.io/hostname: npu-a02}, creationTimestamp: "2026-11-02T08:14:25Z"}
  spec:
    taints: [{effect: NoSchedule, key: node.kubernetes.io/unschedulable, timeAdded: "2026-12-01T10:00:00Z"}]
    unschedulable: true
  status:
    allocatable: {cpu: "190", huawei.com/Ascend910: "8", memory: 1515224744Ki, pods: "110"}
    capacity: {cpu: "192", huawei.com/Ascend910: "8", memory: 1583554760Ki, pods: "110"}
- apiVersion: v1
  kind: Node
  metadata: {name: npu-a03, labels: {kubernetes.io/hostname: npu-a03}}
  status:
    allocatable: {cpu: "190", huawei.com/Ascend910: "8", memory: 1515224744Ki, pods: "110"}
    capacity: {cpu: "192", huawei.com/Ascend910: "8", memory: 1583554760Ki, pods: "110"}
kind: List
metadata: {resourceVersion: ""}
"""

RUNNING = """\
apiVersion: v1
kind: List
items:
- apiVersion: scheduling.volcano.sh/v1beta1
  kind: Queue
  metadata: {name: research, creationTimestamp: "2026-11-01T00:00:00Z", generation: 1, resourceVersion: "12"}
  spec: {weight: 1}
  status: {state: Open}
- apiVersion: scheduling.volcano.sh/v1beta1
  kind: PodGroup
  metadata: {name: llm-sft, namespace: team-a, creationTimestamp: "2026-12-03T05:00:00Z"}
  spec: {minMember: 1, queue: research}
  status:
    phase: Running
    conditions: [{type: Scheduled, status: "True", lastTransitionTime: "2026-12-03T05:00:05Z"}]
- apiVersion: v1
  kind: Pod
  metadata:
    name: llm-sft-worker-0
    namespace: team-a
    creationTimestamp: "2026-12-03T05:00:00Z"
    annotations: {scheduling.k8s.io/group-name: llm-sft, volcano.sh/task-spec: worker, hetsched.io/duration: "3600"}
  spec:
    schedulerName: volcano
    nodeName: npu-a01
    containers:
    - name: main
      image: mindspore:2.3
      resources: {limits: {huawei.com/Ascend910: "8"}, requests: {huawei.com/Ascend910: "8", cpu: "32"}}
    volumes: [{name: data, hostPath: {path: /data}}]
  status:
    phase: Running
    startTime: "2026-12-03T05:00:04Z"
    containerStatuses:
    - {name: main, ready: true, restartCount: 0, state: {running: {startedAt: "2026-12-03T05:00:08Z"}}}
- apiVersion: v1
  kind: Pod
  metadata: {name: old-eval-0, namespace: team-a, annotations: {scheduling.k8s.io/group-name: old-eval}}
  spec:
    nodeName: npu-a03
    containers: [{name: main, resources: {limits: {huawei.com/Ascend910: "8"}}}]
  status: {phase: Succeeded}
"""

TOMORROW = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: pretrain, annotations: {hetsched.io/submit-at: "60"}}
spec:
  minAvailable: 2
  queue: research
  tasks:
  - name: w
    replicas: 2
    template:
      metadata: {annotations: {hetsched.io/duration: "600"}}
      spec: {containers: [{name: w, resources: {limits: {huawei.com/Ascend910: "8"}}}]}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_kubectl_node_and_pod_dumps_are_the_starting_cluster(tmp_path: Path) -> None:
    start = load_cluster([write(tmp_path, "nodes.yaml", NODES), write(tmp_path, "running.yaml", RUNNING)])
    assert [n.metadata.name for n in start.nodes] == ["npu-a01", "npu-a02", "npu-a03"]
    first = start.nodes[0]
    assert isinstance(first, Node) and first.metadata.labels["pool"] == "train"
    assert start.nodes[1].spec.unschedulable  # cordoned today, cordoned in the replay
    kinds = sorted((o.kind, o.metadata.name) for o in start.state)
    # the finished pod is dropped
    assert kinds == [("Pod", "llm-sft-worker-0"), ("PodGroup", "llm-sft"), ("Queue", "research")]
    pod = next(o for o in start.state if isinstance(o, Pod))
    assert pod.spec.nodeName == "npu-a01" and pod.metadata.creationTimestamp is None  # the replay's clock starts at 0
    # tomorrow's job waits for today's run (npu-a01 busy until t=3600, npu-a02 cordoned), then runs
    simulation = Simulation(start.nodes, [*start.state, *load_text(TOMORROW)])
    jobs = {j["name"]: j for j in simulation.run().jobs}
    assert jobs["llm-sft"]["pods"][0]["runs"] == [[0.0, 3600.0]]
    assert jobs["pretrain"]["phase"] == "Completed" and jobs["pretrain"]["start"] == pytest.approx(3601, abs=1)
    assert {p["node"] for p in jobs["pretrain"]["pods"]} == {"npu-a01", "npu-a03"}


def test_a_dump_in_kubectls_order_replays_running_jobs_as_running(tmp_path: Path) -> None:
    """Issue 32: kubectl lists pods before PodGroups (``kubectl get pods,podgroups -A -o yaml``), and the job
    controller copies a Job's ``submit-at`` onto its PodGroup and pods: the replay still starts the running
    job at t=0, whatever the order and in however many files."""
    items = RUNNING.split("\n- ")
    queue_item, group_item, pod_items = items[1], items[2], items[3:]
    copied = group_item.replace("metadata: {name: llm-sft, namespace: team-a,",
                                "metadata: {name: llm-sft, namespace: team-a, annotations: {hetsched.io/submit-at: "
                                "\"7200\"},")
    pods_first = "\n- ".join([items[0], *pod_items, copied, queue_item])
    assert pods_first.index("kind: Pod\n") < pods_first.index("kind: PodGroup")
    for dumps in ([pods_first], [pods_first.replace("\n- " + copied, ""),
                                 "apiVersion: v1\nkind: List\nitems:\n- " + copied]):
        paths = [write(tmp_path, f"dump-{i}.yaml", text) for i, text in enumerate(dumps)]
        start = load_cluster([write(tmp_path, "nodes.yaml", NODES), *paths])
        assert [o.kind for o in start.state] == ["Queue", "PodGroup", "Pod"]
        assert all("hetsched.io/submit-at" not in o.metadata.annotations for o in start.state)
        jobs = {j["name"]: j for j in Simulation(start.nodes, start.state).run().jobs}
        assert jobs["llm-sft"]["pods"][0]["runs"] == [[0.0, 3600.0]], jobs["llm-sft"]
        assert jobs["llm-sft"]["phase"] == "Completed"


def test_a_dump_holding_the_default_and_root_queues_replays_with_its_own(tmp_path: Path) -> None:
    """Every hetsched cluster has the ``default`` and ``root`` Queues its controller made, so a dump of
    ``queues`` lists them: the replay takes them as the cluster's own (their weights and state), not as a
    second ``default`` — which crashed ``simulate --cluster`` with a Conflict (found by running
    docs/simulator.md's commands against a real API server, tests/test_docs_commands.py)."""
    queues = ("apiVersion: v1\nkind: List\nitems:\n"
              "- {apiVersion: scheduling.volcano.sh/v1beta1, kind: Queue, metadata: {name: default, resourceVersion: "
              "\"12\", creationTimestamp: \"2026-12-05T13:00:00Z\"}, spec: {weight: 3}, status: {state: Open}}\n"
              "- {apiVersion: scheduling.volcano.sh/v1beta1, kind: Queue, metadata: {name: root}, spec: {weight: 1}}\n")
    start = load_cluster([write(tmp_path, "nodes.yaml", NODES), write(tmp_path, "queues.yaml", queues)])
    tomorrow = load_text(TOMORROW.replace("queue: research", "queue: default"))
    simulation = Simulation(start.nodes, [*start.state, *tomorrow])
    results = simulation.run()
    assert {job["phase"] for job in results.jobs} == {"Completed"}
    weights = {q.metadata.name: q.spec.weight for q in simulation.cluster.list("Queue")}
    assert weights == {"default": 3, "root": 1}


def test_simulate_takes_the_dumps_on_the_command_line(tmp_path: Path) -> None:
    nodes, running, tomorrow = (str(write(tmp_path, name, text)) for name, text in
                                (("n.yaml", NODES), ("r.yaml", RUNNING), ("t.yaml", TOMORROW)))
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "simulate", "-c", nodes, "-c", running, tomorrow,
                          "-q"], capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize(("text", "message"), [
    (NODES.replace('huawei.com/Ascend910: "8", hugepages', 'huawei.com/Ascend910: "eight", hugepages'),
     "document 1 (Node/npu-a01): items[0].status.allocatable"),
    (NODES.replace("- apiVersion: v1\n  kind: Node\n  metadata: {name: npu-a03",
                   "- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: npu-a03"),
     "unknown kind apps/v1/Deployment"),
    (NODES + "---\n" + NODES.split("- apiVersion: v1\n  kind: Node\n  metadata: {name: npu-a02")[0] + "kind: List\n",
     "(Node/npu-a01): metadata.name: this node is given twice"),
    ("apiVersion: v1\nkind: List\nitems: []\n", "no nodes: give a ClusterSpec or Node objects"),
    ("[" * 5000 + "]" * 5000, "nested more than 100 levels deep"),
    ("items: [", "malformed YAML"),
], ids=["bad-quantity", "unknown-kind", "node-twice", "no-nodes", "deep", "malformed"])
def test_bad_dumps_are_errors_naming_the_file_item_and_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ManifestError) as error:
        load_cluster([write(tmp_path, "bad.yaml", text)])
    assert message in "; ".join(map(str, error.value.problems))


def test_an_object_in_both_the_dump_and_a_workload_is_an_error_not_a_crash(tmp_path: Path) -> None:
    queue = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: research}\nspec: {weight: 2}\n"
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "simulate", "-c",
                          str(write(tmp_path, "n.yaml", NODES)), "-c", str(write(tmp_path, "r.yaml", RUNNING)),
                          str(write(tmp_path, "q.yaml", queue)), "-q"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 2, run.stderr
    assert "(Queue/research): metadata.name: Queue research is already defined" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.timeout(120)
def test_validate_reads_the_dumps_simulate_takes(tmp_path: Path) -> None:
    """Issue 31: a `kubectl get -o yaml` dump (a List, RFC 3339 times) that `simulate --cluster` takes is valid
    for `validate` too; a time that is not one is refused naming the item and the field."""
    files = [str(write(tmp_path, name, text)) for name, text in (("n.yaml", NODES), ("r.yaml", RUNNING))]
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "validate", *files],
                         capture_output=True, text=True, timeout=100, check=False)
    assert run.returncode == 0, run.stderr
    assert "3 Node" in run.stdout and "Pod" in run.stdout
    bad = write(tmp_path, "bad.yaml", RUNNING.replace('creationTimestamp: "2026-12-03T05:00:00Z"',
                                                      'creationTimestamp: "yesterday"', 1))
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "validate", str(bad)],
                         capture_output=True, text=True, timeout=100, check=False)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "metadata.creationTimestamp" in run.stderr
