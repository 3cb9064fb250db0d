"""The node side of HAMi-core vGPUs (issue 34): the device plugin's ``volcano.sh/vgpu-number`` slots healthy
only when their GPU is; Allocate giving the pod being admitted exactly the GPUs the scheduler carved its vGPUs
on, with HAMi-core's caps (memory per GPU, compute) — never for a forged hand-off, another request's
hand-off or an unhealthy GPU; the node agent publishing vGPU memory and compute as node-level extended
resources. The GPUs are the fake backend's (``like: nvidia``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
import yaml

from hetsched.agents.backends import make_backend
from hetsched.agents.backends.fake import FakeBackend
from hetsched.agents.deviceplugin import api_pb2
from hetsched.agents.deviceplugin.partitions import PartitionRefused
from hetsched.agents.deviceplugin.vgpu import VgpuBackend
from hetsched.agents.node_agent import NodeAgent
from hetsched.agents.tables import ToolOutputError
from hetsched.api.objects import Node, Pod
from hetsched.cluster.memory import MemoryCluster
from hetsched.devices.inventory import HANDOFF_FOR, PARTITIONS_ANNOTATION, PREDICATE_TIME
from hetsched.sim.kernel import SimClock
from tests.test_device_plugin import serving

pytestmark = pytest.mark.timeout(120)
NODE = "gpu-0"
GPU = "nvidia.com/gpu"


def write_config(folder: Path, health: dict[int, str] | None = None, like: str = "nvidia") -> Path:
    path = folder / "chips.yaml"
    partial = folder / "chips.yaml.new"
    partial.write_text(yaml.safe_dump({
        "resource": GPU, "model": "Tesla-V100-SXM2-32GB", "like": like, "partitioning": "vgpu",
        "chips": [{"id": i, "health": (health or {}).get(i, "OK"), "memoryMiB": 32768} for i in range(2)]}))
    partial.replace(path)
    return path


def handed(name: str, uid: str, entries: list[list[Any]], *, vgpus: int = 1, memory: int | None = 8000,
           cores: int | None = 30, node: str = NODE, bound_at: int = 1, stamp: str | None = None,
           limits: dict[str, str] | None = None) -> Pod:
    """A pod asking ``vgpus`` vGPUs the Volcano way (or ``limits``), bound to ``node`` with a partition hand-off."""
    if limits is None:
        limits = {"volcano.sh/vgpu-number": str(vgpus)}
        if memory is not None:
            limits["volcano.sh/vgpu-memory"] = str(memory)
        if cores is not None:
            limits["volcano.sh/vgpu-cores"] = str(cores)
    return Pod.model_validate({
        "metadata": {"name": name, "namespace": "default", "uid": uid,
                     "annotations": {PARTITIONS_ANNOTATION: json.dumps(entries), PREDICATE_TIME: str(bound_at),
                                     HANDOFF_FOR: stamp if stamp is not None else f"{uid}/{node}"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"}})


@pytest.fixture
def vgpus(tmp_path: Path) -> SimpleNamespace:
    config = write_config(tmp_path)
    backend = FakeBackend(config)
    slots = VgpuBackend(backend, NODE, library=str(tmp_path / "absent" / "libvgpu.so"), state_dir=str(tmp_path))
    return SimpleNamespace(config=config, backend=backend, slots=slots, folder=tmp_path)


def test_slots_are_ten_per_gpu_and_healthy_only_when_their_gpu_is(vgpus: SimpleNamespace) -> None:
    slots = vgpus.slots.chips()
    assert len(slots) == 20 and all(s.healthy for s in slots)
    write_config(vgpus.folder, health={1: "Critical"})
    slots = vgpus.slots.chips()
    assert [s.id // 16 for s in slots if not s.healthy] == [1] * 10


def test_allocate_gives_the_pod_being_admitted_its_gpus_with_hami_cores_caps(vgpus: SimpleNamespace) -> None:
    """The pod first in bind order gets the GPU its hand-off names, its memory cap (MiB) and compute cap
    (percent) in HAMi-core's variables; a two-vGPU pod gets both GPUs, a cap per GPU; a pod asking no memory
    is capped at its GPU's memory."""
    vgpus.slots.chips()
    pods = [handed("second", "u2", [[GPU, 0, "30%-8000MiB", 0]], bound_at=20),
            handed("first", "u1", [[GPU, 1, "30%-8000MiB", 0]], bound_at=10)]
    pod, devices = vgpus.slots.admit(pods, 1, set())
    assert pod.metadata.name == "first"
    assert devices.envs == {"NVIDIA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_MEMORY_LIMIT_0": "8000m",
                            "CUDA_DEVICE_SM_LIMIT": "30", "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/vgpu/u1.cache"}
    assert devices.devices == [] and devices.mounts == []  # no library on this node: caps are environment only
    assert vgpus.slots.admit(pods, 1, {"u1"})[0].metadata.name == "second"
    with pytest.raises(PartitionRefused, match="no pod being admitted"):
        vgpus.slots.admit(pods, 1, {"u1", "u2"})
    two = handed("two", "u3", [[GPU, 1, "0%-all", 0], [GPU, 0, "0%-all", 0]], vgpus=2, memory=None, cores=None)
    _, devices = vgpus.slots.admit([two], 2, set())
    assert devices.envs["NVIDIA_VISIBLE_DEVICES"] == "1,0"
    assert devices.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == devices.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "32768m"
    assert "CUDA_DEVICE_SM_LIMIT" not in devices.envs  # compute not capped


def test_hami_cores_library_is_preloaded_where_the_node_has_it(tmp_path: Path) -> None:
    library = tmp_path / "vgpu" / "libvgpu.so"
    library.parent.mkdir()
    library.write_bytes(b"\x7fELF")
    backend = FakeBackend(write_config(tmp_path))
    slots = VgpuBackend(backend, NODE, library=str(library), state_dir=str(tmp_path / "state"))
    slots.chips()
    _, devices = slots.admit([handed("p", "u-p", [[GPU, 0, "30%-8000MiB", 0]])], 1, set())
    preload = tmp_path / "state" / "ld.so.preload"
    assert devices.mounts == [(str(library), str(library), True), ("/etc/ld.so.preload", str(preload), True)]
    assert preload.read_text() == f"{library}\n"


def test_a_forged_mismatched_or_unhealthy_hand_off_gets_no_gpu(vgpus: SimpleNamespace) -> None:
    vgpus.slots.chips()
    cases = [handed("forged", "u-f", [[GPU, 0, "30%-8000MiB", 0]], stamp="u-victim/gpu-0"),
             handed("elsewhere", "u-e", [[GPU, 0, "30%-8000MiB", 0]], node="gpu-9"),
             handed("bigger", "u-b", [[GPU, 0, "100%-32768MiB", 0]]),  # not this pod's request: refused
             handed("twice", "u-t", [[GPU, 0, "30%-8000MiB", 0], [GPU, 0, "30%-8000MiB", 0]], vgpus=2),
             handed("mig", "u-m", [["nvidia.com/gpu", 0, "1g.5gb", 1]])]
    for pod in cases:
        slots = 2 if pod.metadata.name == "twice" else 1
        with pytest.raises(PartitionRefused):
            vgpus.slots.admit([pod], slots, set())
    write_config(vgpus.folder, health={0: "Critical"})
    vgpus.slots.chips()
    with pytest.raises(PartitionRefused, match="GPU 0: not on this node or not healthy now"):
        vgpus.slots.admit([handed("p", "u-p", [[GPU, 0, "30%-8000MiB", 0]])], 1, set())


def test_partitioning_is_refused_where_it_is_not_served(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="HAMi-core vGPUs"):
        make_backend("cambricon", partitioning="vgpu")
    with pytest.raises(ValueError):
        make_backend("ascend", partitioning="vgpu")
    with pytest.raises(ToolOutputError, match="partitioning: vgpu needs like: nvidia"):
        FakeBackend(write_config(tmp_path, like="ascend"))
    assert make_backend("nvidia", partitioning="vgpu").partitioning == "vgpu"  # type: ignore[attr-defined]


def test_the_node_agent_publishes_vgpu_memory_and_compute_of_the_healthy_gpus(vgpus: SimpleNamespace) -> None:
    cluster = MemoryCluster(SimClock())
    cluster.create(Node.model_validate({"metadata": {"name": NODE}, "status": {
        "capacity": {"cpu": "8", "volcano.sh/vgpu-number": "20"}, "allocatable": {"cpu": "8"}}}))
    agent = NodeAgent(cluster, NODE, vgpus.backend)
    node = agent.sync()
    assert node.status.allocatable["volcano.sh/vgpu-memory"] == 2 * 32768 * 1000
    assert node.status.allocatable["volcano.sh/vgpu-cores"] == 200 * 1000
    assert node.status.capacity["volcano.sh/vgpu-number"] == 20 * 1000  # the device plugin's, left alone
    write_config(vgpus.folder, health={1: "Critical"})
    node = agent.sync()
    assert node.status.capacity["volcano.sh/vgpu-memory"] == 32768 * 1000
    assert node.status.allocatable["volcano.sh/vgpu-cores"] == 100 * 1000


@pytest.fixture
def plugin(vgpus: SimpleNamespace) -> Iterator[SimpleNamespace]:
    with serving(vgpus.slots, "vg") as served:
        yield served


def test_the_plugin_registers_vgpu_number_and_allocate_serves_or_refuses(plugin: SimpleNamespace) -> None:
    """Over real gRPC: ``volcano.sh/vgpu-number`` registered with 20 slots; Allocate for the admitted pod gives
    its GPU and caps; with no pod to serve, Allocate is refused (FAILED_PRECONDITION) rather than guessing."""
    assert plugin.kubelet.registered.wait(10)
    assert plugin.kubelet.requests[0].resource_name == "volcano.sh/vgpu-number"
    stream = plugin.stub.ListAndWatch(api_pb2.Empty(), timeout=10)
    first = next(iter(stream))
    assert len(first.devices) == 20 and {d.health for d in first.devices} == {"Healthy"}
    stream.cancel()
    request = api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(
        devices_ids=[first.devices[3].ID])])
    with pytest.raises(grpc.RpcError) as error:
        plugin.stub.Allocate(request, timeout=10)
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    plugin.bound.append(handed("infer", "u-i", [[GPU, 1, "30%-8000MiB", 0]]))
    answer = plugin.stub.Allocate(request, timeout=10).container_responses[0]
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == "1" and answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8000m"


def test_the_chart_refuses_a_partitioning_its_vendor_does_not_serve() -> None:
    from hetsched.install.values import load_values

    assert load_values([], ["vendors.nvidia.partitioning=vgpu"]).vendors.nvidia.partitioning == "vgpu"
    with pytest.raises(ValueError, match=r"vendors\.cambricon\.partitioning: vgpu is not served for cambricon"):
        load_values([], ["vendors.cambricon.partitioning=vgpu"])


def test_hamis_names_and_whole_gpus_are_served_under_the_gpus_own_name(vgpus: SimpleNamespace) -> None:
    """On a vGPU node ``nvidia.com/gpu`` counts vGPUs, 10 per GPU, as HAMi's plugin advertises it: a HAMi pod
    (``nvidia.com/gpu: 1`` + ``gpumem``/``gpucores``, or ``gpumem-percentage``) gets its GPU with its caps; a
    pod asking ``nvidia.com/gpu`` alone gets the whole GPUs its trusted allocation names, uncapped."""
    from hetsched.devices.inventory import POD_ANNOTATION

    slots = VgpuBackend(vgpus.backend, NODE, library=str(vgpus.folder / "absent"), state_dir=str(vgpus.folder),
                        resource=GPU)
    assert slots.resource == GPU and len(slots.chips()) == 20

    def hami(name: str, limits: dict[str, str], entries: list[list[Any]]) -> Pod:
        return handed(name, f"u-{name}", entries, limits=limits)

    capped = hami("capped", {GPU: "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "20"},
                  [[GPU, 1, "20%-4000MiB", 0]])
    _, devices = slots.admit([capped], 1, set())
    assert (devices.envs["NVIDIA_VISIBLE_DEVICES"], devices.envs["CUDA_DEVICE_MEMORY_LIMIT_0"],
            devices.envs["CUDA_DEVICE_SM_LIMIT"]) == ("1", "4000m", "20")
    share = hami("share", {GPU: "1", "nvidia.com/gpumem-percentage": "25"}, [[GPU, 0, "0%-25%mem", 0]])
    assert slots.admit([share], 1, set())[1].envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m"  # 25 % of 32768
    whole = hami("whole", {GPU: "2"}, [])
    whole.metadata.annotations[POD_ANNOTATION] = json.dumps({GPU: [0, 1]})
    _, devices = slots.admit([whole], 2, set())
    assert devices.envs == {"NVIDIA_VISIBLE_DEVICES": "0,1"} and devices.mounts == []
    whole.metadata.annotations[HANDOFF_FOR] = "u-other/gpu-0"  # a copied allocation: nothing
    with pytest.raises(PartitionRefused):
        slots.admit([whole], 2, set())


def test_a_vgpu_node_counts_as_its_chips_in_the_chip_accounts() -> None:
    """``nvidia.com/gpu`` is 10 per GPU on a vGPU node: the chip tables (``doctor``'s allocatable-matches-chips,
    ``explain``) count it back in GPUs, so a healthy vGPU node is not called one handing out broken chips."""
    from hetsched.scheduler.contract.chips import ChipAccounts
    from tests.builders import harness
    from tests.test_partitions import part_node

    h = harness([part_node("g", GPU, "Tesla-V100", "vgpu", chips=2, chip_memory=16384)])
    snapshot = h.scheduler.cache.snapshot()
    assert snapshot.nodes.alloc[snapshot.resources.columns[GPU]][0] == 20 * 1000
    (table,) = [t for t in ChipAccounts().tables(snapshot) if t.resource == GPU]
    assert int(table.advertised[0]) == int(table.healthy[0]) == 2
