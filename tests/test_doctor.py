"""``hetsched doctor``: every check with a case it must pass and a case it must flag, on the embedded cluster
(cluster mode) and on this machine with a fake vendor and a fake kubelet directory (node mode); the exit
code follows the worst finding; ``--json`` carries severity, object, evidence and fix. (The same cluster
checks on a real API server: ``tests/test_kubernetes.py``.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hetsched.agents.backends.fake import FakeBackend
from hetsched.agents.doctor import NodeFacts, run_node_checks
from hetsched.api.objects import AnyObject, Node
from hetsched.cli.main import app
from hetsched.devices.inventory import TOPOLOGY_ANNOTATION
from hetsched.diagnose.checks import ClusterFacts, ComponentStatus, run_checks
from hetsched.diagnose.findings import Finding, exit_code
from hetsched.scheduler.defaults import DEFAULT_CONF_YAML, parse_conf
from tests.builders import accel_node, ascend_cluster_spec, gang, harness, node, pod, podgroup, queue

NUMA_CONF = parse_conf(DEFAULT_CONF_YAML + "  - name: numaaware\n")


def facts(objects: list[AnyObject], *, cycles: int = 1, conf: Any = None, **extra: Any) -> ClusterFacts:
    """Run ``cycles`` scheduler cycles on the embedded cluster, then gather what doctor reads."""
    h = harness(objects)
    for _ in range(cycles):
        h.cycle()
    stored = [o for kind in ("Node", "Pod", "PodGroup", "Queue", "Job", "ConfigMap") for o in h.cluster.list(kind)]
    return ClusterFacts(objects=stored, conf=conf, now=h.clock.now(), **extra)


def only(found: ClusterFacts, check: str) -> list[Finding]:
    return run_checks(found, [check])


def severities(findings: list[Finding]) -> dict[str, str]:
    return {f.object: f.severity for f in findings}


def test_components_running() -> None:
    good = facts([node("a"), *gang("g", 1)], components=[ComponentStatus("scheduler", True, "leading")])
    assert severities(only(good, "components-running")) == {"component/scheduler": "ok"}
    orphan = pod("lonely", scheduler="kube-batch")
    bad = facts([node("a"), orphan], components=[ComponentStatus("webhook", False, "no webhook", "install it")])
    findings = only(bad, "components-running")
    assert severities(findings) == {"component/webhook": "error", "schedulerName/kube-batch": "error"}
    assert "default/lonely" in next(f.evidence for f in findings if f.object == "schedulerName/kube-batch")


def test_device_plugin_registered() -> None:
    assert severities(only(facts([accel_node("n0")]), "device-plugin-registered")) == {"cluster": "ok"}
    silent = accel_node("n0", advertise=0)  # chips in the inventory, nothing advertised
    labelled = node("n1", labels={"accelerator": "huawei-ascend"})  # says Ascend, no plugin, no inventory
    findings = only(facts([silent, labelled, node("cpu")]), "device-plugin-registered")
    assert severities(findings) == {"Node/n0": "error", "Node/n1": "error"}
    assert "8 huawei.com/Ascend910 chip(s)" in findings[0].evidence and "npu-smi info" in findings[0].fix


def test_a_device_plugin_that_went_away_is_flagged_though_kubelet_keeps_its_capacity() -> None:
    """What a real kubelet reports when the plugin stops: capacity kept, allocatable 0 (seen on real nodes,
    tests/test_realnodes.py). Every chip Unhealthy looks the same and is no plugin fault."""
    def kept(name: str, unhealthy: tuple[int, ...] = ()) -> Node:
        made = accel_node(name, unhealthy=unhealthy)
        allocatable = {**made.status.allocatable, "huawei.com/Ascend910": 0}
        capacity = {**made.status.allocatable, "huawei.com/Ascend910": 8000}
        return made.model_copy(update={"status": made.status.model_copy(
            update={"allocatable": allocatable, "capacity": capacity})})

    findings = only(facts([kept("gone"), kept("dead", unhealthy=tuple(range(8)))]), "device-plugin-registered")
    assert severities(findings) == {"Node/gone": "error"}
    assert "8 healthy huawei.com/Ascend910 chip(s)" in findings[0].evidence and "capacity 8" in findings[0].evidence


def test_allocatable_matches_chips() -> None:
    assert severities(only(facts([accel_node("n0"), accel_node("n1", unhealthy=(2,))]),
                           "allocatable-matches-chips")) == {"cluster": "ok"}
    fake = accel_node("n0", unhealthy=(2,), advertise=8)  # the seed's "fake resources"
    short = accel_node("n1", advertise=6)
    findings = only(facts([fake, short]), "allocatable-matches-chips")
    assert severities(findings) == {"Node/n0": "error", "Node/n1": "warning"}
    assert "allocatable 8 but 7 healthy of 8" in findings[0].evidence


def test_chip_health() -> None:
    assert severities(only(facts([accel_node("n0")]), "chip-health")) == {"cluster": "ok"}
    degraded = accel_node("n0", unhealthy=(3,))
    dead = accel_node("n1", unhealthy=tuple(range(8)))  # nothing usable and no taint
    findings = only(facts([degraded, dead]), "chip-health")
    assert severities(findings) == {"Node/n0": "warning", "Node/n1": "error"}
    assert "chip(s) 3 of 8 Unhealthy" in findings[0].evidence


def test_accelerator_limits() -> None:
    good = {"kind": "Job", "metadata": {"name": "ok"}, "spec": {"tasks": [{"name": "w", "template": {"spec": {
        "containers": [{"name": "c", "resources": {"limits": {"huawei.com/Ascend910": 8}}}]}}}]}}
    bad = {"kind": "Job", "metadata": {"name": "seed-42"}, "spec": {"tasks": [{"name": "w", "template": {"spec": {
        "containers": [{"name": "c", "resources": {"requests": {"huawei.com/Ascend910": 1}}}]}}}]}}
    unequal = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {
        "requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}}]}}
    assert severities(only(facts([node("a")], raw=[("f.yaml", good)]), "accelerator-limits")) == {"cluster": "ok"}
    findings = only(facts([node("a")], raw=[("f.yaml", bad), ("g.yaml", unequal)]), "accelerator-limits")
    assert severities(findings) == {"Job/seed-42": "error", "Pod/p": "error"}
    assert "spec.tasks[w].template.spec.containers[c].resources" in findings[0].evidence
    assert "only in requests" in findings[0].evidence and "limits" in findings[0].fix


def test_queue_capability() -> None:
    fine = [accel_node("n0"), queue("q", capability={"huawei.com/Ascend910": "8"}),
            *gang("g", 2, queue="q", limits={"huawei.com/Ascend910": 2})]
    assert severities(only(facts(fine), "queue-capability")) == {"cluster": "ok"}
    # the capability was lowered under running work, a gang that can never be admitted, a closed queue
    running = [accel_node("n0"), queue("q", capability={"huawei.com/Ascend910": "8"}),
               *gang("g", 2, queue="q", limits={"huawei.com/Ascend910": 4})]
    h = harness(running)
    h.cycle()
    lowered = h.cluster.get("Queue", "q").model_copy(deep=True)
    lowered.spec.capability["huawei.com/Ascend910"] = 4000
    objects = [o for o in h.cluster.list("Node") + h.cluster.list("Pod") + h.cluster.list("PodGroup")]
    objects += [lowered, queue("default"), queue("shut", state="Closed"),
                podgroup("never", 1, queue="q", phase="Pending", min_resources={"huawei.com/Ascend910": "16"}),
                podgroup("waiting", 1, queue="shut", phase="Pending")]
    findings = run_checks(ClusterFacts(objects=objects), ["queue-capability"])
    assert severities(findings) == {"Queue/q": "warning", "PodGroup/default/never": "error", "Queue/shut": "warning"}


def test_missing_queues_are_found_before_jobs_wait_forever() -> None:
    """Issue 32: right after a plain install without the controller, no ``default`` Queue: a warning; gangs
    waiting for a queue nobody made (``default`` or a typo): an error naming them and the fix."""
    nodes = [node("n0")]
    assert severities(run_checks(ClusterFacts(objects=nodes), ["queue-capability"])) == {"Queue/default": "warning"}
    waiting = [*nodes, queue("default"), podgroup("typo", 1, queue="reserch", phase="Pending"),
               podgroup("ok", 1, queue="default", phase="Pending")]
    findings = run_checks(ClusterFacts(objects=waiting), ["queue-capability"])
    assert severities(findings) == {"Queue/reserch": "error"}
    assert "default/typo" in findings[0].evidence and "hetsched queue create reserch" in (findings[0].fix or "")
    lost = run_checks(ClusterFacts(objects=[*nodes, podgroup("plain", 1, queue="", phase="Pending")]),
                      ["queue-capability"])
    assert severities(lost) == {"Queue/default": "error"} and "controller" in (lost[0].fix or "")


def test_doctor_without_any_cluster_says_so_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "no kubeconfig" in lines[0] and "--kubeconfig" in lines[0], result.output
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [\n")
    result = CliRunner().invoke(app, ["doctor", "--kubeconfig", str(broken)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and str(broken) in lines[0], result.output


def test_stuck_gangs() -> None:
    objects = [accel_node("n0"), *gang("big", 2, limits={"huawei.com/Ascend910": 8})]
    young = facts(objects, stuck_after=300)
    assert severities(only(young, "stuck-gangs")) == {"cluster": "ok"}
    old = facts(objects, stuck_after=300)
    old.now += 600
    findings = only(old, "stuck-gangs")
    assert severities(findings) == {"PodGroup/default/big": "warning"}
    # one node takes one of the two 8-chip pods: it "fits", but the gang needs both at once
    assert "task worker (2 pending): 1 node(s): fits" in findings[0].evidence
    assert "only 1 of the 2 pending worker pod(s) fit now" in findings[0].fix


def test_numaaware_topology_policy() -> None:
    aligned = accel_node("n0")
    aligned.metadata.annotations[TOPOLOGY_ANNOTATION] = "single-numa-node/static"
    assert severities(only(facts([aligned], conf=NUMA_CONF), "numaaware-topology-policy")) == {"cluster": "ok"}
    assert only(facts([accel_node("n1")]), "numaaware-topology-policy")[0].severity == "ok"  # not enabled
    silent = accel_node("n1")
    silent.metadata.annotations[TOPOLOGY_ANNOTATION] = "none/none"
    findings = only(facts([aligned, silent, accel_node("n2")], conf=NUMA_CONF), "numaaware-topology-policy")
    assert severities(findings) == {"Node/n1": "warning", "Node/n2": "warning"}
    assert "silent no-op" in findings[0].evidence


def test_exit_code_is_the_worst_finding() -> None:
    assert exit_code([Finding("a", "ok", "x", ""), Finding("b", "info", "y", "")]) == 0
    assert exit_code([Finding("a", "ok", "x", ""), Finding("b", "warning", "y", "")]) == 1
    assert exit_code([Finding("a", "error", "x", ""), Finding("b", "warning", "y", "")]) == 2
    with pytest.raises(ValueError, match="unknown check nope"):
        run_checks(ClusterFacts(objects=[]), ["nope"])


JOB = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: %s}
spec:
  minAvailable: %d
  tasks:
  - name: worker
    replicas: %d
    template:
      metadata: {annotations: {hetsched.io/duration: "100"}}
      spec:
        containers: [{name: w, image: x, resources: {%s: {huawei.com/Ascend910: 8}}}]
"""


def test_doctor_command_on_the_embedded_cluster(tmp_path: Path) -> None:
    cluster = ascend_cluster_spec(tmp_path / "cluster.yaml")
    clean = tmp_path / "clean.yaml"
    clean.write_text(JOB % ("fits", 2, 2, "limits"))
    runner = CliRunner()
    result = runner.invoke(app, ["doctor", "--cluster", str(cluster), str(clean), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["exitCode"] == 0
    assert {f["check"] for f in report["findings"]} >= {
        "components-running", "device-plugin-registered", "allocatable-matches-chips", "chip-health",
        "accelerator-limits", "queue-capability", "stuck-gangs", "numaaware-topology-policy", "admission-fail-open"}
    assert all(f["severity"] == "ok" for f in report["findings"])
    bad = tmp_path / "bad.yaml"
    bad.write_text(JOB % ("three", 3, 3, "limits") + "---\n" + JOB % ("requests-only", 1, 1, "requests"))
    result = runner.invoke(app, ["doctor", "--cluster", str(cluster), str(bad), "--json"])
    assert result.exit_code == 2, result.output
    report = json.loads(result.output)
    flagged = {(f["check"], f["object"], f["severity"]) for f in report["findings"] if f["severity"] != "ok"}
    assert flagged == {("accelerator-limits", "Job/requests-only", "error"),
                       ("stuck-gangs", "PodGroup/default/three", "warning")}
    for finding in report["findings"]:
        assert set(finding) == {"check", "severity", "object", "evidence", "fix"}
    text = runner.invoke(app, ["doctor", "--cluster", str(cluster), str(bad), "--check", "stuck-gangs"])
    assert text.exit_code == 1 and "PodGroup/default/three" in text.output
    unknown = runner.invoke(app, ["doctor", "--cluster", str(cluster), str(bad), "--check", "nope"])
    assert unknown.exit_code == 2 and "unknown check" in unknown.output


# ---------------------------------------------------------------------------------------------- node mode


def node_setup(tmp_path: Path, health: dict[int, str] | None = None) -> NodeFacts:
    config = tmp_path / "chips.yaml"
    chips = [{"id": i, "health": (health or {}).get(i, "OK")} for i in range(4)]
    config.write_text(json.dumps({"resource": "hetsched.io/fake", "model": "FakeChip", "chips": chips}))
    plugins = tmp_path / "device-plugins"
    plugins.mkdir()
    (plugins / "kubelet.sock").touch()
    (plugins / "hetsched-fake.sock").touch()
    (plugins / "kubelet_internal_checkpoint").write_text(json.dumps(
        {"Data": {"RegisteredDevices": {"hetsched.io/fake": ["fake-0"]}}, "Checksum": 1}))
    kubelet = tmp_path / "config.yaml"
    kubelet.write_text(yaml.safe_dump({"kind": "KubeletConfiguration", "topologyManagerPolicy": "single-numa-node",
                                       "cpuManagerPolicy": "static"}))
    return NodeFacts(backends=[FakeBackend(config)], plugin_dir=plugins, kubelet_config=kubelet, dev_root=tmp_path)


def node_severities(findings: list[Finding]) -> dict[str, str]:
    return {f.check: f.severity for f in findings}


def test_node_checks_pass_on_a_healthy_node(tmp_path: Path) -> None:
    found = node_setup(tmp_path)
    found.node = Node.model_validate({"metadata": {"name": "n0"}, "status": {"allocatable": {"hetsched.io/fake": "4"}}})
    assert node_severities(run_node_checks(found)) == {
        "driver-tool": "ok", "device-nodes": "ok", "device-plugin-registered": "ok",
        "allocatable-matches-chips": "ok", "numaaware-topology-policy": "ok"}


def test_node_checks_flag_each_problem(tmp_path: Path) -> None:
    found = node_setup(tmp_path, {1: "Alarm"})
    (found.plugin_dir / "kubelet_internal_checkpoint").write_text(json.dumps(
        {"Data": {"RegisteredDevices": {"nvidia.com/gpu": ["GPU-1"]}}}))
    found.kubelet_config.write_text("topologyManagerPolicy: none\n")
    found.node = Node.model_validate({"metadata": {"name": "n0"}, "status": {"allocatable": {"hetsched.io/fake": "4"}}})
    findings = run_node_checks(found)
    assert node_severities(findings) == {
        "driver-tool": "warning", "device-nodes": "ok", "device-plugin-registered": "error",
        "allocatable-matches-chips": "error", "numaaware-topology-policy": "warning"}
    by_check = {f.check: f for f in findings}
    assert "1 (Alarm" in by_check["driver-tool"].evidence
    assert "allocatable 4, the tool reports 3 healthy" in by_check["allocatable-matches-chips"].evidence
    assert "not hetsched.io/fake" in by_check["device-plugin-registered"].evidence.replace(
        "nvidia.com/gpu, not ", "not ")


def test_node_checks_for_a_broken_tool_a_missing_kubelet_and_missing_device_files(tmp_path: Path) -> None:
    found = node_setup(tmp_path)
    config = found.backends[0].config  # type: ignore[attr-defined]
    config.write_text("chips: [not, a, chip")
    (found.plugin_dir / "kubelet.sock").unlink()
    findings = run_node_checks(found)
    severity = node_severities(findings)
    assert severity["driver-tool"] == "error" and severity["device-plugin-registered"] == "error"
    assert "kubelet.sock does not exist" in next(f.evidence for f in findings if f.check == "device-plugin-registered")
    no_vendor = NodeFacts(backends=[], plugin_dir=found.plugin_dir, kubelet_config=tmp_path / "absent.yaml")
    findings = run_node_checks(no_vendor)
    assert node_severities(findings)["driver-tool"] == "error"
    assert node_severities(findings)["numaaware-topology-policy"] == "info"


def test_device_files_are_checked_for_a_real_backend(tmp_path: Path) -> None:
    from hetsched.agents.backends.ascend import AscendBackend
    from hetsched.agents.chips import ToolChip

    backend = AscendBackend()
    found = NodeFacts(backends=[backend], dev_root=tmp_path)
    found.chips["ascend"] = [ToolChip(id=i, model="910B3", level="OK", memory_mib=0, bus_id="", card=i)
                             for i in range(2)]
    (tmp_path / "dev").mkdir()
    for name in ("davinci0", "davinci_manager", "devmm_svm", "hisi_hdc"):
        (tmp_path / "dev" / name).touch()
    from hetsched.agents.doctor import device_nodes

    findings = device_nodes(found)
    assert [f.severity for f in findings] == ["error"] and "/dev/davinci1" in findings[0].evidence
    (tmp_path / "dev" / "davinci1").touch()
    assert [f.severity for f in device_nodes(found)] == ["ok"]


def test_doctor_node_command(tmp_path: Path) -> None:
    found = node_setup(tmp_path)
    config = found.backends[0].config  # type: ignore[attr-defined]
    args = ["doctor", "--node", "--vendor", "fake", "--config", str(config), "--plugin-dir", str(found.plugin_dir),
            "--kubelet-config", str(found.kubelet_config), "--dev-root", str(tmp_path), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert {f["check"]: f["severity"] for f in report["findings"]}["allocatable-matches-chips"] == "info"
    found.kubelet_config.write_text("topologyManagerPolicy: none\n")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output


def test_admission_that_fails_open_is_said_and_a_missing_pods_check_warned() -> None:
    """Issue 29: the checks on every pod, Node, ConfigMap and Secret write fail open; doctor says so, and
    whether the API server could narrow them (matchConditions from 1.27); no /pods registration warns."""
    from hetsched.diagnose.checks import ClusterFacts, admission_fail_open

    old = admission_fail_open(ClusterFacts(objects=[], admission={"hetsched-pods": "Ignore",
                                                                  "hetsched-restrict": "Ignore"},
                                           server_version="v1.20.2"))
    assert [f.severity for f in old] == ["ok"]
    assert "hetsched-pods: Ignore" in old[0].evidence and "no matchConditions (1.28+)" in old[0].evidence
    new = admission_fail_open(ClusterFacts(objects=[], admission={"hetsched-pods": "Ignore"}, server_version="v1.31.0"))
    assert [f.severity for f in new] == ["warning"] and "could narrow them" in new[0].evidence
    assert "webhook.matchConditions=true (hetsched install --kube-version 1.31.0)" in new[0].fix
    narrowed = admission_fail_open(ClusterFacts(objects=[], admission={
        "hetsched-pods": "Fail (matchConditions), Ignore (matchConditions)",
        "hetsched-restrict": "Fail (matchConditions)"}, server_version="v1.31.0"))
    assert [f.severity for f in narrowed] == ["ok"] and "fail closed" in narrowed[0].evidence
    # the conditions dropped (an API server before 1.28 took the registration): every pod create would wait
    dropped = admission_fail_open(ClusterFacts(objects=[], admission={"hetsched-pods": "Fail, Ignore"},
                                               server_version="v1.20.2"))
    assert [f.severity for f in dropped] == ["error"] and "no pod can be created anywhere" in dropped[0].evidence
    missing = admission_fail_open(ClusterFacts(objects=[], admission={"hetsched-pods": ""}, server_version="v1.20.2"))
    assert [f.severity for f in missing] == ["warning"] and missing[0].object.endswith("hetsched-pods")
