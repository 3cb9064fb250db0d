"""``hetsched explain``: why a job is pending, per-node reasons aggregated, for the classic causes —
not enough chips, HCCS ring fragmentation, unhealthy chips, taints, node selectors, a closed or missing
queue, a queue at its capability — plus the queue's status, what would unblock it, and a node's chip map.
Through the CLI on the embedded cluster as well."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from hetsched.api.objects import AnyObject
from hetsched.cli.main import app
from hetsched.scheduler.contract.chips import chip_map
from hetsched.scheduler.contract.reasons import Reason, ReasonCode, label, nodes_unavailable
from hetsched.scheduler.engine.why import Explanation, explain_job
from tests.builders import (
    Harness,
    accel_node,
    ascend_cluster_spec,
    gang,
    handed_off,
    harness,
    node,
    pod,
    podgroup,
    queue,
)


def bound(name: str, node_name: str, chips: list[int], group: str) -> list[AnyObject]:
    """A running one-pod job holding ``chips`` (by the hand-off annotation) on ``node_name``."""
    held = handed_off(pod(f"{name}", group, limits={"huawei.com/Ascend910": len(chips)}), node_name,
                      {"huawei.com/Ascend910": chips})
    held = held.model_copy(update={"status": held.status.model_copy(update={"phase": "Running"})})
    return [podgroup(group, 1, phase="Running"), held]


def explain(h: Harness, job: str) -> Explanation:
    h.cycle()
    return explain_job(h.scheduler.cache.snapshot(), h.scheduler.conf, f"default/{job}", h.clock.now())


def reasons(explanation: Explanation) -> dict[str, int]:
    return {str(reason): count for group in explanation.groups for count, reason in group.nodes}


def test_insufficient_chips_are_counted_per_node() -> None:
    objects: list[AnyObject] = [accel_node(f"n{i}") for i in range(3)]
    for i in range(3):
        objects += bound(f"fill{i}", f"n{i}", list(range(8)), f"fill{i}")
    objects += gang("wants", 1, limits={"huawei.com/Ascend910": 8})
    result = explain(harness(objects), "wants")
    assert reasons(result) == {"Insufficient huawei.com/Ascend910": 3}
    assert any("huawei.com/Ascend910" in hint and "3 node(s)" in hint for hint in result.unblock)
    assert "Insufficient huawei.com/Ascend910" in " ".join(result.scheduler_says)


def test_hccs_ring_fragmentation_says_how_the_free_chips_are_split() -> None:
    # n0..n7 each have 4 free chips, but split 2+2 across the two HCCS rings: a 4-chip pod needs one ring
    objects: list[AnyObject] = []
    for i in range(8):
        objects += [accel_node(f"n{i}"), *bound(f"h{i}", f"n{i}", [0, 1, 4, 5], f"h{i}")]
    objects += [node("cpu0", cpu="64"), *gang("ring", 1, limits={"huawei.com/Ascend910": 4})]
    result = explain(harness(objects), "ring")
    assert reasons(result) == {
        "HCCS ring fragmentation, 4 free chip(s) split 2+2 across HCCS rings": 8,
        "Insufficient huawei.com/Ascend910": 1,
    }
    assert any("split across link domains" in hint for hint in result.unblock)


def test_unhealthy_chips_are_named_as_the_cause() -> None:
    objects: list[AnyObject] = [accel_node("n0", unhealthy=(3,), advertise=8),
                                *gang("full", 1, limits={"huawei.com/Ascend910": 8})]
    result = explain(harness(objects), "full")
    assert reasons(result) == {"huawei.com/Ascend910: 7 free healthy chip(s) for 8 (1 unhealthy)": 1}
    assert any("unhealthy" in hint for hint in result.unblock)


def test_taints_and_selectors_are_static_reasons() -> None:
    taint = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    objects: list[AnyObject] = [node("a", taints=taint), node("b", taints=taint), node("c", labels={"zone": "x"}),
                                *gang("sel", 1, selector={"zone": "y"})]
    result = explain(harness(objects), "sel")
    found = reasons(result)
    assert found == {"node(s) didn't match Pod's node selector": 3}, found  # the selector fails first
    objects = [node("a", taints=taint), node("b", taints=taint), node("c", labels={"zone": "x"}),
               *gang("tol", 2, cpu="6")]
    found = reasons(explain(harness(objects), "tol"))
    assert found == {"node(s) had untolerated taint {dedicated: infer}": 2, "fits": 1}, found


def test_closed_and_missing_queues() -> None:
    closed = [node("a"), queue("batch", state="Closed"), podgroup("late", 1, queue="batch", phase="Pending")]
    result = explain(harness(closed), "late")
    assert any("queue batch is Closed" in said for said in result.scheduler_says)
    assert result.queue_status["state"] == "Closed"
    assert any("open queue batch" in hint for hint in result.unblock)
    missing = [node("a"), podgroup("lost", 1, queue="nowhere", phase="Pending")]
    result = explain(harness(missing), "lost")
    assert any("queue nowhere does not exist" in said for said in result.scheduler_says)
    assert any("create queue nowhere" in hint for hint in result.unblock)


def test_a_queue_at_its_capability() -> None:
    objects: list[AnyObject] = [accel_node("n0"), queue("small", capability={"huawei.com/Ascend910": "2"}),
                                podgroup("big", 1, queue="small", phase="Pending",
                                         min_resources={"huawei.com/Ascend910": "4"})]
    result = explain(harness(objects), "big")
    assert any("capability" in said for said in result.scheduler_says), result.scheduler_says
    assert result.queue_status["capability"] == {"huawei.com/Ascend910": "2"}
    assert any("capability" in hint for hint in result.unblock)


def test_chip_map_marks_held_free_and_unhealthy_chips_by_ring() -> None:
    objects = [accel_node("n0", unhealthy=(7,)), *bound("h", "n0", [0, 1], "h")]
    h = harness(objects)
    h.cycle()
    rows = chip_map(h.scheduler.cache.snapshot(), "n0")
    assert rows == [("huawei.com/Ascend910", "##..|...X",
                     "ascend910-8 (ascend910-8): 5 free chip(s) split 2+3 across HCCS rings; largest request that "
                     "fits: 2")]  # a 4-chip pod needs a whole ring of 4, and the right one has chip 7 broken


def test_reason_labels_are_short_and_bounded() -> None:
    short = Reason.of(ReasonCode.INSUFFICIENT, resource="huawei.com/Ascend910")
    selector = Reason.of(ReasonCode.NODE_SELECTOR)
    cause = nodes_unavailable(5, {short: 3, selector: 2})
    gang = Reason.of(ReasonCode.GANG_UNSCHEDULABLE, missing=2, min_member=2, cause=cause)
    assert str(gang) == ("2/2 tasks in gang unschedulable: 0/5 nodes are available: 3 Insufficient "
                         "huawei.com/Ascend910, 2 node(s) didn't match Pod's node selector")
    assert label(gang) == "insufficient huawei.com/Ascend910"  # the first node reason, by code
    assert label(Reason.of(ReasonCode.QUEUE_OVERUSED, queue="q")) == "queue overused"
    assert label(Reason.of(ReasonCode.CLUSTER_HEADROOM, amounts=(("cpu", 4000, 1000),), factor=1.2)) == \
        "cluster headroom"
    assert label(nodes_unavailable(0, {})) == "other"


def test_explain_command_on_the_embedded_cluster(tmp_path: Path) -> None:
    cluster = ascend_cluster_spec(tmp_path / "cluster.yaml")
    workload = tmp_path / "jobs.yaml"
    workload.write_text("""apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: eight}
spec:
  minAvailable: 2
  tasks:
  - name: worker
    replicas: 2
    template:
      metadata: {annotations: {hetsched.io/duration: "1000"}}
      spec:
        containers: [{name: w, image: x, resources: {limits: {huawei.com/Ascend910: 8}}}]
---
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: waits, annotations: {hetsched.io/submit-at: "10"}}
spec:
  minAvailable: 1
  tasks:
  - name: worker
    replicas: 1
    template:
      spec:
        containers: [{name: w, image: x, resources: {limits: {huawei.com/Ascend910: 2}}}]
""")
    runner = CliRunner()
    result = runner.invoke(app, ["explain", "waits", "--cluster", str(cluster), str(workload), "--until", "20",
                                 "--node", "ascend-00"])
    assert result.exit_code == 0, result.output
    assert "2 node(s): Insufficient huawei.com/Ascend910" in result.output
    assert "ascend-00 huawei.com/Ascend910: [####|####]" in result.output
    assert "queue default: Open" in result.output
    as_json = runner.invoke(app, ["explain", "default/waits", "--cluster", str(cluster), str(workload), "--until",
                                  "20", "--json"])
    data = json.loads(as_json.output)
    assert data["tasks"][0]["nodes"] == [{"count": 2, "reason": "Insufficient huawei.com/Ascend910",
                                          "code": "InsufficientResource"}]
    missing = runner.invoke(app, ["explain", "nope", "--cluster", str(cluster), str(workload), "--until", "20"])
    assert missing.exit_code == 2 and "no such Job" in missing.output


def test_the_documented_fragmentation_example() -> None:
    """docs/observability.md shows this command's output: keep them honest."""
    examples = Path(__file__).resolve().parents[1] / "examples" / "scenarios"
    result = CliRunner().invoke(app, ["explain", "ring-job", "--cluster", str(examples / "ascend-4.yaml"),
                                      str(examples / "fragmented.yaml"), "--until", "60", "--node", "ascend-00"])
    assert result.exit_code == 0, result.output
    assert "4 node(s): HCCS ring fragmentation, 4 free chip(s) split 2+2 across HCCS rings" in result.output
    assert "ascend-00 huawei.com/Ascend910: [##..|##..]" in result.output
    doctor = CliRunner().invoke(app, ["doctor", "--cluster", str(examples / "ascend-4.yaml"),
                                      str(examples / "fragmented.yaml"), "--until", "600", "--json"])
    assert doctor.exit_code == 1
    flagged = [f for f in json.loads(doctor.output)["findings"] if f["severity"] != "ok"]
    assert [(f["check"], f["object"]) for f in flagged] == [("stuck-gangs", "PodGroup/default/ring-job")]


def test_a_plain_pod_is_found_by_its_name_and_a_running_job_has_nothing_to_unblock(tmp_path: Path) -> None:
    cluster = ascend_cluster_spec(tmp_path / "cluster.yaml", count=1)
    workload = tmp_path / "pod.yaml"
    workload.write_text("""apiVersion: v1
kind: Pod
metadata: {name: solo, annotations: {hetsched.io/duration: "100"}}
spec:
  schedulerName: volcano
  containers: [{name: c, image: x, resources: {limits: {huawei.com/Ascend910: 2}}}]
""")
    result = CliRunner().invoke(app, ["explain", "solo", "--cluster", str(cluster), str(workload), "--until", "10",
                                      "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["phase"] == "Running" and data["ready"] == 1 and data["unblock"] == []


def test_kubectl_hetsched_is_installed_as_a_console_script() -> None:
    """kubectl finds plugins as `kubectl-<name>` on PATH: the package installs one, the same app."""
    from importlib.metadata import entry_points

    scripts = {e.name: e.value for e in entry_points(group="console_scripts")}
    assert scripts.get("kubectl-hetsched") == "hetsched.cli.main:app" == scripts.get("hetsched")
