"""The node agent on the embedded cluster: per-chip health into the inventory annotation (and Ascend's
device-info ConfigMap), the AcceleratorHealthy condition, a NoSchedule taint only when the node is
unusable and its removal on recovery, the accelerator labels; a failing tool never empties the inventory.
And the scheduler, reading what the agent published, never places a pod on a chip the tool calls bad."""

from __future__ import annotations

import json
import os
import shlex
import stat
import threading
import time
from pathlib import Path

import pytest

from hetsched.agents.backends.ascend import AscendBackend
from hetsched.agents.backends.fake import FakeBackend
from hetsched.agents.node_agent import ASCEND_REWRITE, CONDITION, TAINT, NodeAgent
from hetsched.api.objects import ConfigMap, Node, Pod
from hetsched.cluster.memory import MemoryCluster
from hetsched.devices.inventory import NODE_ANNOTATION, from_ascend_device_info, parse_node_devices
from hetsched.ports import NotFound
from hetsched.sim.kernel import SimClock
from tests.builders import node

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def write_chips(path: Path, health: dict[int, str] | None = None, count: int = 4) -> None:
    """The fake tool's chips file, replaced whole (a check never reads it half written)."""
    chips = [{"id": i, "health": (health or {}).get(i, "OK"), "memoryMiB": 32768} for i in range(count)]
    partial = path.with_name(path.name + ".new")
    partial.write_text(json.dumps({"resource": "hetsched.io/fake", "model": "FakeChip", "chips": chips}))
    partial.replace(path)


def setup(tmp_path: Path) -> tuple[MemoryCluster, NodeAgent, Path]:
    cluster = MemoryCluster(SimClock())
    cluster.create(node("n0", cpu="64"))
    config = tmp_path / "chips.yaml"
    write_chips(config)
    return cluster, NodeAgent(cluster, "n0", FakeBackend(config), now=lambda: 100.0), config


def state(cluster: MemoryCluster) -> tuple[Node, dict[int, str]]:
    found = cluster.get("Node", "n0")
    assert isinstance(found, Node)
    inventory = parse_node_devices(found.metadata.annotations[NODE_ANNOTATION], "n0")
    return found, {c.id: c.health for d in inventory.devices for c in d.chips}


def condition(found: Node) -> tuple[str, str, str]:
    c = next(c for c in found.status.conditions if c.type == CONDITION)
    return c.status, c.reason, c.message


def test_health_condition_taint_and_labels_follow_the_tool(tmp_path: Path) -> None:
    cluster, agent, config = setup(tmp_path)
    agent.sync()
    found, health = state(cluster)
    assert health == dict.fromkeys(range(4), "Healthy")
    assert condition(found)[0] == "True" and TAINT not in found.spec.taints
    assert found.metadata.labels["accelerator"] == "fake-accelerator"
    assert found.metadata.labels["hetsched.io/accelerator-model"] == "FakeChip"

    write_chips(config, {1: "Critical", 2: "Warning"})  # a Warning chip stays usable
    agent.sync()
    found, health = state(cluster)
    assert health == {0: "Healthy", 1: "Unhealthy", 2: "Healthy", 3: "Healthy"}
    assert condition(found) == ("False", "ChipsUnhealthy", "unhealthy chip(s): 1 (Critical)")
    assert TAINT not in found.spec.taints  # some chips still serve: no taint

    write_chips(config, dict.fromkeys(range(4), "Alarm"))
    agent.sync()
    found, _ = state(cluster)
    assert condition(found)[1] == "NoHealthyChips" and TAINT in found.spec.taints

    write_chips(config)
    agent.sync()
    found, health = state(cluster)
    assert condition(found)[0] == "True" and TAINT not in found.spec.taints and set(health.values()) == {"Healthy"}


def test_a_failing_tool_taints_the_node_and_keeps_its_chips_unhealthy(tmp_path: Path) -> None:
    cluster, agent, config = setup(tmp_path)
    agent.sync()
    config.unlink()
    agent.sync()
    found, health = state(cluster)
    assert health == dict.fromkeys(range(4), "Unhealthy")  # never an empty inventory
    status, reason, message = condition(found)
    assert (status, reason) == ("False", "ToolFailed") and "cannot read" in message
    assert TAINT in found.spec.taints
    write_chips(config)
    agent.sync()
    found, _ = state(cluster)
    assert TAINT not in found.spec.taints and condition(found)[0] == "True"


def test_an_unchanged_node_is_not_rewritten(tmp_path: Path) -> None:
    cluster, agent, _ = setup(tmp_path)
    agent.sync()
    version = cluster.resource_version
    agent.sync()
    assert cluster.resource_version == version


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="vendor-tool fixtures not found at ../shared/fixtures")
def test_ascend_node_gets_labels_and_the_ascend_device_info_config_map(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    text = (FIXTURES / "npu-smi" / "ascend-910b3-8chip.txt").read_text().replace(
        "| 2     910B3               | OK   ", "| 2     910B3               | Alarm", 1)
    output = tmp_path / "npu-smi.txt"
    output.write_text(text)  # synthetic: NPU 2 in Alarm
    tool = bin_dir / "npu-smi"
    tool.write_text(f"#!/bin/sh\nexec cat {shlex.quote(str(output))}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cluster = MemoryCluster(SimClock())
    cluster.create(node("n0", cpu="64"))
    clock = [100.0]
    agent = NodeAgent(cluster, "n0", AscendBackend(), now=lambda: clock[0])
    agent.sync()
    found, health = state(cluster)
    assert found.metadata.labels["accelerator"] == "huawei-ascend"
    assert found.metadata.labels["hetsched.io/accelerator-model"] == "910B3"
    assert health[2] == "Unhealthy" and sum(h == "Healthy" for h in health.values()) == 7
    config_map = cluster.get("ConfigMap", "kube-system/mindx-dl-deviceinfo-n0")
    assert isinstance(config_map, ConfigMap)
    (read_back,) = from_ascend_device_info(config_map.data, "n0", topology="ascend910b-8")  # CheckCode verified
    assert [c.health for c in read_back.chips][:4] == ["Healthy", "Healthy", "Unhealthy", "Healthy"]
    # written blind (the agent may not read kube-system): not again while its chips are the same ...
    cluster.delete("ConfigMap", "kube-system/mindx-dl-deviceinfo-n0")
    clock[0] += ASCEND_REWRITE / 2
    agent.sync()
    with pytest.raises(NotFound):
        cluster.get("ConfigMap", "kube-system/mindx-dl-deviceinfo-n0")
    clock[0] += ASCEND_REWRITE  # ... until ASCEND_REWRITE has passed: one deleted meanwhile comes back
    agent.sync()
    again = cluster.get("ConfigMap", "kube-system/mindx-dl-deviceinfo-n0")
    assert isinstance(again, ConfigMap) and from_ascend_device_info(again.data, "n0", topology="ascend910b-8")


def test_the_scheduler_never_uses_a_chip_the_agent_reported_bad(tmp_path: Path) -> None:
    from hetsched.scheduler.defaults import default_conf
    from hetsched.scheduler.engine.runner import Scheduler
    from tests.builders import pod, podgroup, queue

    clock = SimClock()
    cluster = MemoryCluster(clock)
    cluster.create(queue("default"))
    cluster.create(node("n0", cpu="64").model_copy(update={"status": node("n0", cpu="64").status.model_copy(
        update={"allocatable": {**node("n0", cpu="64").status.allocatable, "hetsched.io/fake": 2000}})}))
    config = tmp_path / "chips.yaml"
    write_chips(config, {0: "Critical", 2: "UNKNOWN"})
    NodeAgent(cluster, "n0", FakeBackend(config)).sync()
    cluster.create(podgroup("job", 1, phase="Inqueue"))
    cluster.create(pod("job-0", "job", cpu="1", limits={"hetsched.io/fake": 2}))
    Scheduler(cluster, cluster, cluster, clock, default_conf(), evictor=cluster).run_once()
    placed = cluster.get("Pod", "default/job-0")
    assert isinstance(placed, Pod)
    chips = json.loads(placed.metadata.annotations["hetsched.io/allocation"])["hetsched.io/fake"]
    assert placed.spec.nodeName == "n0" and sorted(chips) == [1, 3]


def test_delay_from_a_health_change_to_the_node_taint(tmp_path: Path) -> None:
    """The agent's loop at a 0.2 s period: every chip goes Critical; the taint is on the node after at most
    two checks — the one under way when the tool's answer changed, or the next, a period later — counted in
    checks, not timed (the delay is measured and printed for the report)."""
    cluster, agent, config = setup(tmp_path)
    stop = threading.Event()
    checks = [0]

    def loop() -> None:
        while not stop.is_set():
            agent.sync()
            checks[0] += 1
            stop.wait(0.2)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        time.sleep(0.3)
        flipped, before = time.monotonic(), checks[0]
        write_chips(config, dict.fromkeys(range(4), "Critical"))
        while time.monotonic() - flipped < 60:
            found = cluster.get("Node", "n0")
            if isinstance(found, Node) and TAINT in found.spec.taints:
                break
            time.sleep(0.005)
        delay, after = time.monotonic() - flipped, checks[0]
    finally:
        stop.set()
        thread.join()
    assert isinstance(found, Node) and TAINT in found.spec.taints
    assert after - before <= 2, (before, after)  # ``after`` may lag by the check that tainted (not yet counted)
    print(f"health change → node taint: {delay * 1000:.0f} ms (period 200 ms)")


def test_model_names_become_valid_label_values() -> None:
    from hetsched.agents.node_agent import label_value

    assert label_value("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert label_value(" (MLU370-X4) ") == "MLU370-X4"
    assert len(label_value("x" * 100)) == 63


def test_the_scheduler_reads_ascends_device_info_config_map_when_there_is_no_annotation() -> None:
    """A cluster running Huawei's device plugin publishes chip health only in
    kube-system/mindx-dl-deviceinfo-<node>: chips 0 and 1 are unhealthy there, so a 2-chip pod gets two
    others; a ConfigMap whose CheckCode does not match is reported and gives no chips."""
    from hetsched.devices.inventory import Chip, DeviceSet, to_ascend_device_info
    from hetsched.scheduler.defaults import default_conf
    from hetsched.scheduler.engine.runner import Scheduler
    from tests.builders import pod, podgroup, queue

    clock = SimClock()
    cluster = MemoryCluster(clock)
    cluster.create(queue("default"))
    base = node("a0", cpu="64")
    cluster.create(base.model_copy(update={
        "metadata": base.metadata.model_copy(update={"labels": {"node.kubernetes.io/npu.chip.name": "910B3"}}),
        "status": base.status.model_copy(update={"allocatable": {**base.status.allocatable,
                                                                 "huawei.com/Ascend910": 6000}})}))
    chips = [Chip(id=i, health="Unhealthy" if i < 2 else "Healthy") for i in range(8)]
    data = to_ascend_device_info(DeviceSet(resource="huawei.com/Ascend910", chips=chips), 1)
    cluster.create(ConfigMap.model_validate({"metadata": {"name": "mindx-dl-deviceinfo-a0",
                                                          "namespace": "kube-system"}, "data": data}))
    scheduler = Scheduler(cluster, cluster, cluster, clock, default_conf(), evictor=cluster)
    cluster.create(podgroup("job", 1, phase="Inqueue"))
    cluster.create(pod("job-0", "job", cpu="1", limits={"huawei.com/Ascend910": 2}))
    scheduler.run_once()
    placed = cluster.get("Pod", "default/job-0")
    assert isinstance(placed, Pod) and placed.spec.nodeName == "a0"
    held = json.loads(placed.metadata.annotations["hetsched.io/allocation"])["huawei.com/Ascend910"]
    assert not set(held) & {0, 1}
    tampered = cluster.get("ConfigMap", "kube-system/mindx-dl-deviceinfo-a0")
    assert isinstance(tampered, ConfigMap)
    cluster.update(tampered.model_copy(update={"data": {"DeviceInfoCfg": data["DeviceInfoCfg"].replace(
        '"CheckCode":"', '"CheckCode":"0')}}))
    assert "CheckCode does not match" in scheduler.cache.inventory_errors["a0"]
