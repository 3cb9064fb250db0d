"""The node side of NVIDIA MIG (issue 34): instances listed through NVML garbage-safe, the device plugin's
``nvidia.com/mig-<profile>`` slots healthy only when their GPU is and its instances list cleanly, Allocate
creating exactly the instance the scheduler carved (its profile at its placement) for the pod being admitted
— never for a forged hand-off or on an unhealthy GPU — and instances destroyed once their pod is gone. NVML
is the fake backend's emulation of its MIG calls (``agents.backends.fake_nvml``), which refuses what a GPU
could not hold as the driver does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
import yaml

from hetsched.agents.backends.fake import FakeBackend
from hetsched.agents.backends.fake_nvml import FakeNvml
from hetsched.agents.deviceplugin import api_pb2
from hetsched.agents.deviceplugin.mig import MigBackend, MigState
from hetsched.agents.deviceplugin.partitions import PartitionRefused
from hetsched.agents.mig import MigTool
from hetsched.agents.tables import ToolOutputError
from hetsched.agents.tools import ToolError
from hetsched.api.objects import Pod
from hetsched.devices.inventory import HANDOFF_FOR, PARTITIONS_ANNOTATION, PREDICATE_TIME
from tests.test_device_plugin import serving

pytestmark = pytest.mark.timeout(120)
NODE = "gpu-1"
GPU = "nvidia.com/gpu"


def write_config(folder: Path, health: dict[int, str] | None = None, output: str = "ok") -> Path:
    path = folder / "chips.yaml"
    partial = folder / "chips.yaml.new"
    partial.write_text(yaml.safe_dump({
        "resource": GPU, "model": "NVIDIA A100-SXM4-40GB", "like": "nvidia", "partitioning": "mig",
        "migOutput": output, "chips": [{"id": i, "health": (health or {}).get(i, "OK")} for i in range(2)]}))
    partial.replace(path)
    return path


def handed(name: str, uid: str, entries: list[list[Any]], profile: str = "3g.20gb", count: int = 1, *,
           node: str = NODE, bound_at: int = 1, stamp: str | None = None) -> Pod:
    """A pod asking ``count`` instances of ``profile`` (NVIDIA's mixed-strategy name), bound with a hand-off."""
    return Pod.model_validate({
        "metadata": {"name": name, "namespace": "default", "uid": uid,
                     "annotations": {PARTITIONS_ANNOTATION: json.dumps(entries), PREDICATE_TIME: str(bound_at),
                                     HANDOFF_FOR: stamp if stamp is not None else f"{uid}/{node}"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {
            f"nvidia.com/mig-{profile}": str(count)}}}]},
        "status": {"phase": "Pending"}})


@pytest.fixture
def mig(tmp_path: Path) -> SimpleNamespace:
    config = write_config(tmp_path)
    backend = FakeBackend(config)
    state = MigState(backend, NODE, backend.mig_tool())
    state.refresh()
    assert state.geometry is not None
    plugins = {p.name: MigBackend(state, p, primary=i == 0) for i, p in enumerate(state.geometry.profiles)}
    return SimpleNamespace(config=config, backend=backend, state=state, plugins=plugins, tool=backend.mig_tool(),
                           file=tmp_path / "migs.json", folder=tmp_path)


def instances(file: Path) -> dict[str, list[list[Any]]]:
    return json.loads(file.read_text()) if file.exists() else {}


def test_instances_are_made_where_asked_and_only_where_the_gpu_allows(mig: SimpleNamespace) -> None:
    """NVIDIA's A100 placement rules, as the driver enforces them: a 3g.20gb starts at slice 0 or 4, a 4g.20gb
    only at 0, nothing overlaps; the listing gives each instance's profile, place and MIG device UUID."""
    tool: MigTool = mig.tool
    made = tool.create(0, "3g.20gb", 4, 4)
    assert (made.profile, made.start, made.size) == ("3g.20gb", 4, 4) and made.uuid.startswith("MIG-")
    for profile, start, size in (("3g.20gb", 2, 4), ("4g.20gb", 4, 4), ("1g.5gb", 5, 1), ("9g.99gb", 0, 1)):
        with pytest.raises(ToolError):  # not a 3g.20gb place; not a 4g.20gb place; slice 5 taken; no such profile
            tool.create(0, profile, start, size)
    assert [(m.profile, m.start) for m in tool.list(0)] == [("3g.20gb", 4)]
    tool.create(0, "4g.20gb", 0, 4)
    assert sorted((m.profile, m.start) for m in tool.list(0)) == [("3g.20gb", 4), ("4g.20gb", 0)]
    tool.destroy(0, made.gi)
    assert [(m.profile, m.start) for m in tool.list(0)] == [("4g.20gb", 0)]


class Hostile(FakeNvml):
    """NVML answering one field wrong."""

    def __init__(self, backend: Any, field: str) -> None:
        super().__init__(backend)
        self.field = field

    def nvmlGpuInstanceGetInfo(self, instance: Any) -> SimpleNamespace:
        info = super().nvmlGpuInstanceGetInfo(instance)
        if self.field == "size":
            info.placement.size = 12
        if self.field == "gi":
            info.id = 10**9
        return info

    def nvmlDeviceGetUUID(self, device: Any) -> str:
        return "<script>alert(1)</script>" if self.field == "uuid" else super().nvmlDeviceGetUUID(device)


@pytest.mark.parametrize(("field", "message"), [("size", "outside the GPU's 8 memory slices"),
                                                ("gi", "is not a GPU instance id"),
                                                ("uuid", "is not a MIG device UUID")])
def test_hostile_nvml_answers_are_errors_naming_the_gpu(mig: SimpleNamespace, field: str, message: str) -> None:
    mig.tool.create(1, "2g.10gb", 2, 2)
    with pytest.raises(ToolOutputError) as error:
        MigTool(Hostile(mig.backend, field)).list(1)
    assert message in str(error.value) and "GPU 1" in str(error.value)


def test_slots_are_healthy_only_when_the_gpu_is_and_its_instances_list_cleanly(mig: SimpleNamespace) -> None:
    slots = mig.plugins["1g.5gb"].chips()
    assert len(slots) == 14 and all(s.healthy for s in slots)  # seven 1g.5gb per A100 40GB
    assert len(mig.plugins["3g.20gb"].chips()) == 4 and len(mig.plugins["7g.40gb"].chips()) == 2
    write_config(mig.folder, health={1: "Critical"})
    assert sum(s.healthy for s in mig.plugins["1g.5gb"].chips()) == 7
    mig.tool.create(0, "1g.5gb", 0, 1)
    write_config(mig.folder, output="garbage")
    slots = mig.plugins["1g.5gb"].chips()
    assert not any(s.healthy for s in slots[:7]) and "MIG instances cannot be listed" in slots[0].reason
    with pytest.raises(PartitionRefused, match="cannot be listed now"):
        mig.plugins["3g.20gb"].admit([handed("p", "u-p", [[GPU, 0, "3g.20gb", 0b11110000]])], 1, set())


def test_allocate_creates_exactly_the_schedulers_instance_for_the_pod_being_admitted(mig: SimpleNamespace) -> None:
    """The pod first in bind order gets the instance its hand-off names — a 3g.20gb on GPU 1's slices 4–7 —
    created now; the container sees that instance's UUID only. Then the second pod."""
    plugin = mig.plugins["3g.20gb"]
    pods = [handed("second", "u2", [[GPU, 1, "3g.20gb", 0b1111]], bound_at=20),
            handed("first", "u1", [[GPU, 1, "3g.20gb", 0b11110000]], bound_at=10)]
    pod, devices = plugin.admit(pods, 1, set())
    assert pod.metadata.name == "first"
    (made,) = [m for m in mig.tool.list(1) if m.start == 4]
    assert devices.envs == {"NVIDIA_VISIBLE_DEVICES": made.uuid} and made.profile == "3g.20gb"
    pod, devices = plugin.admit(pods, 1, {"u1"})
    assert pod.metadata.name == "second" and len(mig.tool.list(1)) == 2
    assert devices.envs["NVIDIA_VISIBLE_DEVICES"] != made.uuid
    with pytest.raises(PartitionRefused, match="no pod being admitted"):
        plugin.admit(pods, 1, {"u1", "u2"})


def test_a_forged_mismatched_or_unhealthy_hand_off_gets_no_instance(mig: SimpleNamespace) -> None:
    plugin = mig.plugins["3g.20gb"]
    for pod in (handed("forged", "u-f", [[GPU, 0, "3g.20gb", 0b1111]], stamp="u-victim/gpu-1"),
                handed("elsewhere", "u-e", [[GPU, 0, "3g.20gb", 0b1111]], node="gpu-9"),
                handed("other", "u-o", [[GPU, 0, "4g.20gb", 0b1111]]),  # a hand-off for another profile
                handed("split", "u-s", [[GPU, 0, "3g.20gb", 0b10110000]])):  # not one run of slices
        with pytest.raises(PartitionRefused):
            plugin.admit([pod], 1, set())
    assert instances(mig.file) in ({}, {"0": []}, {"1": []})
    mig.tool.create(0, "4g.20gb", 0, 4)  # someone else's instance where the hand-off says 3g.20gb
    mig.state.refresh()
    with pytest.raises(PartitionRefused, match=r"is a 4g\.20gb, not the 3g\.20gb"):
        plugin.admit([handed("p", "u-p", [[GPU, 0, "3g.20gb", 0b1111]])], 1, set())
    write_config(mig.folder, health={1: "Critical"})
    mig.state.refresh()
    with pytest.raises(PartitionRefused, match="GPU 1 is Unhealthy: no MIG instance is created on it"):
        plugin.admit([handed("p", "u-p", [[GPU, 1, "3g.20gb", 0b1111]])], 1, set())


def test_an_instance_is_destroyed_once_its_pod_is_gone(mig: SimpleNamespace) -> None:
    plugin, primary = mig.plugins["1g.5gb"], mig.plugins[next(iter(mig.plugins))]
    pod = handed("p", "u-p", [[GPU, 0, "1g.5gb", 0b100]], profile="1g.5gb")
    plugin.admit([pod], 1, set())
    running = pod.model_copy(update={"status": pod.status.model_copy(update={"phase": "Running"})})
    assert primary.reconcile([running]) == [] and mig.plugins["3g.20gb"].reconcile([]) == []  # not primary
    assert primary.reconcile([]) == []  # orphaned once: kept (a pod bound between two listings)
    (instance,) = mig.tool.list(0)
    assert primary.reconcile([]) == [(0, instance.gi)]
    assert mig.tool.list(0) == []


@pytest.fixture
def plugin(mig: SimpleNamespace) -> Iterator[SimpleNamespace]:
    with serving(mig.plugins["1g.5gb"], "mg") as served:
        served.mig = mig
        yield served


def test_the_plugin_registers_the_profile_and_allocate_serves_or_refuses(plugin: SimpleNamespace) -> None:
    assert plugin.kubelet.registered.wait(10)
    assert plugin.kubelet.requests[0].resource_name == "nvidia.com/mig-1g.5gb"
    stream = plugin.stub.ListAndWatch(api_pb2.Empty(), timeout=10)
    first = next(iter(stream))
    assert len(first.devices) == 14 and {d.health for d in first.devices} == {"Healthy"}
    stream.cancel()
    request = api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(
        devices_ids=[first.devices[0].ID])])
    with pytest.raises(grpc.RpcError) as error:
        plugin.stub.Allocate(request, timeout=10)
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    plugin.bound.append(handed("infer", "u-i", [[GPU, 1, "1g.5gb", 0b1000000]], profile="1g.5gb"))
    answer = plugin.stub.Allocate(request, timeout=10).container_responses[0]
    (made,) = plugin.mig.tool.list(1)
    assert dict(answer.envs) == {"NVIDIA_VISIBLE_DEVICES": made.uuid} and made.start == 6


def volcano_vgpu(name: str, uid: str, entries: list[list[Any]], count: int = 1, memory: int = 9000) -> Pod:
    """A pod asking Volcano's ``volcano.sh/vgpu-number`` in MIG mode, bound with a hand-off."""
    return Pod.model_validate({
        "metadata": {"name": name, "namespace": "default", "uid": uid,
                     "annotations": {PARTITIONS_ANNOTATION: json.dumps(entries), PREDICATE_TIME: "1",
                                     HANDOFF_FOR: f"{uid}/{NODE}", "volcano.sh/vgpu-mode": "mig"}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "resources": {"limits": {
            "volcano.sh/vgpu-number": str(count), "volcano.sh/vgpu-memory": str(memory)}}}]},
        "status": {"phase": "Pending"}})


def test_volcano_vgpus_in_mig_mode_get_the_instances_the_scheduler_chose(mig: SimpleNamespace) -> None:
    """``volcano.sh/vgpu-number`` slots (seven per GPU: the most instances one holds) serve a vGPU asked in MIG
    mode with the instance its hand-off names, of whatever profile held its memory; a pod asking the profile's
    own name is not served by them, nor a vGPU by the profile's plugin. The instance goes with the pod."""
    from hetsched.agents.deviceplugin.mig import MigBackend

    vgpus = MigBackend(mig.state, None)
    assert vgpus.resource == "volcano.sh/vgpu-number" and len(vgpus.chips()) == 14
    pod = volcano_vgpu("infer", "u-v", [[GPU, 0, "2g.10gb", 0b1100]])
    served, devices = vgpus.admit([pod], 1, set())
    (made,) = mig.tool.list(0)
    assert served.metadata.name == "infer" and (made.profile, made.start, made.size) == ("2g.10gb", 2, 2)
    assert devices.envs == {"NVIDIA_VISIBLE_DEVICES": made.uuid}
    with pytest.raises(PartitionRefused):
        mig.plugins["2g.10gb"].admit([pod], 1, set())
    with pytest.raises(PartitionRefused):
        vgpus.admit([handed("own", "u-o", [[GPU, 1, "3g.20gb", 0b1111]])], 1, set())
    primary = mig.plugins[next(iter(mig.plugins))]
    running = pod.model_copy(update={"status": pod.status.model_copy(update={"phase": "Running"})})
    assert primary.reconcile([running]) == [] and primary.reconcile([running]) == []  # held: kept
    primary.reconcile([])
    assert primary.reconcile([]) == [(0, made.gi)]


def test_the_node_agent_publishes_vgpu_memory_on_mig_gpus(mig: SimpleNamespace) -> None:
    """Volcano's vGPUs in MIG mode ask ``volcano.sh/vgpu-memory``: the healthy A100s' 40 GiB each."""
    from hetsched.agents.node_agent import NodeAgent
    from hetsched.api.objects import Node
    from hetsched.cluster.memory import MemoryCluster
    from hetsched.sim.kernel import SimClock

    cluster = MemoryCluster(SimClock())
    cluster.create(Node.model_validate({"metadata": {"name": NODE}, "status": {"capacity": {"cpu": "8"},
                                                                              "allocatable": {"cpu": "8"}}}))
    agent = NodeAgent(cluster, NODE, mig.backend)
    assert agent.sync().status.allocatable["volcano.sh/vgpu-memory"] == 2 * 40960 * 1000
    write_config(mig.folder, health={1: "Critical"})
    assert agent.sync().status.allocatable["volcano.sh/vgpu-memory"] == 40960 * 1000
