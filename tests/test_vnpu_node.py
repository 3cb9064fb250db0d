"""The node side of Ascend vNPUs (issue 34): ``npu-smi``'s vNPU output read garbage-safe, the device plugin's
``huawei.com/npu-core`` slots healthy only when their chip is and its vNPUs list cleanly, Allocate creating
exactly the vNPU the scheduler chose for the pod being admitted (never one for a forged hand-off), and
vNPUs destroyed once their pod is gone. The vendor tool is the fake backend's emulation of ``npu-smi``,
which prints the real tool's format."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.agents.backends.fake import FakeBackend
from hetsched.agents.deviceplugin import api_pb2
from hetsched.agents.deviceplugin.partitions import PartitionRefused, VnpuBackend
from hetsched.agents.tables import ToolOutputError
from hetsched.agents.vnpu import check_status, id_range, parse_info
from hetsched.api.objects import Pod
from hetsched.devices.inventory import HANDOFF_FOR, PARTITIONS_ANNOTATION, PREDICATE_TIME
from tests.test_device_plugin import serving

pytestmark = pytest.mark.timeout(120)
NODE = "npu-0"
P310 = "huawei.com/Ascend310P"
INFO = """Format:Free/Total                   NA: Currently, query is not supported.    |
 AICORE    Memory    AICPU    VPC    VENC    VDEC    JPEGD    JPEGE    PNGD    |
            GB
 0/8       0/21      0/7      1/12   1/3     1/12    0/16     0/8      NA/NA
Total number of vnpu: 4
Vnpu ID  |  Vgroup ID     |  Container ID  |  Status  |  Template Name
100      |  0             |  000000000000  |  0       |  vir04
104      |  2             |  000000000000  |  0       |  vir02_1c
106      |  3             |  000000000000  |  0       |  vir01
107      |  3             |  000000000000  |  0       |  vir01
"""
"""``npu-smi info -t info-vnpu -i 0 -c 0`` of a 310P carved vir04 + vir02_1c + 2 × vir01, in the layout Ascend's
virtual-instance guide shows (written for these tests)."""


def test_the_vnpu_listing_is_read_as_the_tool_prints_it() -> None:
    vnpus = parse_info(INFO, phy=0)
    assert [(v.id, v.vgroup, v.template) for v in vnpus] == [(100, 0, "vir04"), (104, 2, "vir02_1c"),
                                                              (106, 3, "vir01"), (107, 3, "vir01")]
    assert parse_info(INFO.replace("Total number of vnpu: 4", "Total number of vnpu: 0").split("Vnpu ID")[0]) == []
    assert list(id_range(2)) == list(range(132, 140))
    assert check_status("Status                         : OK\nMessage                        : Create vnpu success\n",
                        "create") == "Create vnpu success"


@pytest.mark.parametrize(("text", "message"), [
    (INFO.replace("107      |  3", "107      |  3 |  x").rsplit("\n", 2)[0], "3 vNPU row(s) where the output says 4"),
    (INFO.replace("Total number of vnpu: 4", "Total number of vnpu: <b>4</b>"), "the number of vNPUs should be a"),
    (INFO.replace("Total number of vnpu: 4", "Total number of vnpu: 4000"), "4000 vNPUs on one chip"),
    (INFO.replace("Total number of vnpu: 4\n", ""), "no 'Total number of vnpu' line"),
    (INFO.replace("Vnpu ID  |", "Vnpu  |"), "header is missing"),
    (INFO.replace("104      |  2", "١٠٤      |  2"), "Vnpu ID should be a number"),
    (INFO.replace("106      |  3", "150      |  3"), "vNPU 150 is not one of chip 0's (100–107)"),
    (INFO.replace("106      |  3", "107      |  3"), "a vNPU id is listed twice"),
    (INFO.replace("vir02_1c", "vir02_1c<script>"), "is not a template"),
    (INFO.replace("104      |  2             |", "104      |  2   |  |"), "6 cell(s) where a vNPU row has 5"),
])
def test_hostile_vnpu_listings_are_errors_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(ToolOutputError) as error:
        parse_info(text, phy=0)
    assert message in str(error.value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400) | st.sampled_from([INFO[:n] for n in range(0, len(INFO), 7)]))
def test_any_text_is_a_listing_or_a_tool_output_error(text: str) -> None:
    try:
        vnpus = parse_info(text, phy=0)
    except ToolOutputError:
        return
    assert all(v.id in id_range(0) for v in vnpus)


def test_a_create_or_destroy_that_did_not_say_ok_is_an_error() -> None:
    for text in ("Status : FAIL\nMessage : Create vnpu failed\n", "", "<html>500</html>", "Status: ok-ish"):
        with pytest.raises(ToolOutputError):
            check_status(text, "npu-smi set -t create-vnpu")


# ------------------------------------------------------------------------------------- the slots and Allocate


def write_config(folder: Path, health: dict[int, str] | None = None, output: str = "ok") -> Path:
    path = folder / "chips.yaml"
    partial = folder / "chips.yaml.new"
    partial.write_text(yaml.safe_dump({
        "resource": P310, "model": "Ascend310P3", "like": "ascend", "partitioning": "vnpu", "vnpuOutput": output,
        "chips": [{"id": i, "health": (health or {}).get(i, "OK")} for i in range(2)]}))
    partial.replace(path)
    return path


def handed(name: str, uid: str, entries: list[list[Any]], cores: int = 2, *, node: str = NODE, bound_at: int = 1,
           stamp: str | None = None, phase: str = "Pending") -> Pod:
    """A pod asking ``cores`` AI cores (MindCluster's vNPU request) bound to ``node`` with a partition hand-off."""
    return Pod.model_validate({
        "metadata": {"name": name, "namespace": "default", "uid": uid,
                     "labels": {"ring-controller.atlas": "ascend-310P"},
                     "annotations": {PARTITIONS_ANNOTATION: json.dumps(entries), PREDICATE_TIME: str(bound_at),
                                     HANDOFF_FOR: stamp if stamp is not None else f"{uid}/{node}"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"huawei.com/npu-core":
                                                                                          str(cores)}}}]},
        "status": {"phase": phase}})


@pytest.fixture
def vnpus(tmp_path: Path) -> SimpleNamespace:
    config = write_config(tmp_path)
    backend = FakeBackend(config)
    return SimpleNamespace(config=config, backend=backend, slots=VnpuBackend(backend, NODE, backend.vnpu_tool(),
                                                                             str(backend.device_dir)),
                           state=tmp_path / "vnpus.json", dev=tmp_path / "dev")


def listed(state: Path) -> dict[str, list[list[Any]]]:
    return json.loads(state.read_text()) if state.exists() else {}


def test_slots_are_healthy_only_when_the_chip_is_and_its_vnpus_list_cleanly(vnpus: SimpleNamespace,
                                                                            tmp_path: Path) -> None:
    slots = vnpus.slots.chips()
    assert len(slots) == 16 and all(s.healthy for s in slots)
    write_config(tmp_path, health={1: "Critical"})
    assert sum(s.healthy for s in vnpus.slots.chips()) == 8
    for output in ("truncated", "garbage"):
        write_config(tmp_path, output=output)
        vnpus.slots.listed.clear()
        vnpus.backend.vnpu_tool().create(0, 0, "vir01", 100)  # something to list (a truncated listing drops it)
        slots = vnpus.slots.chips()
        assert not any(s.healthy for s in slots), output  # every slot: the listing cannot vouch for any vNPU
        assert "vNPUs cannot be listed" in slots[0].reason
        with pytest.raises(PartitionRefused, match="cannot be listed now"):
            vnpus.slots.admit([handed("p", "u-p", [[P310, 0, "vir02_1c", 0b1100]])], 2, set())
        vnpus.backend.vnpu_tool().destroy(0, 0, 100)


def test_allocate_creates_exactly_the_schedulers_vnpu_for_the_pod_being_admitted(vnpus: SimpleNamespace) -> None:
    """The pod first in bind order gets the vNPU its placement implies (cores 2–3 of chip 1: id 118, vGroup
    1), created now; the device is its vNPU only. A second admission of the same size finds no pod left."""
    vnpus.slots.chips()
    pods = [handed("second", "u2", [[P310, 0, "vir02_1c", 0b11]], bound_at=20),
            handed("first", "u1", [[P310, 1, "vir02_1c", 0b1100]], bound_at=10)]
    served: set[str] = set()
    pod, devices = vnpus.slots.admit(pods, 2, served)
    assert pod.metadata.name == "first"
    assert devices.envs == {"ASCEND_VISIBLE_DEVICES": "118"}
    assert devices.devices[0] == ("/dev/davinci118", f"{vnpus.dev}/vdavinci118", "rw")
    assert [d[0] for d in devices.devices[1:]] == ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    assert listed(vnpus.state) == {"1": [[118, 1, "vir02_1c"]]} and (vnpus.dev / "vdavinci118").exists()
    served.add("u1")
    assert vnpus.slots.admit(pods, 2, served)[0].metadata.name == "second"
    served.add("u2")
    with pytest.raises(PartitionRefused, match="no pod being admitted"):
        vnpus.slots.admit(pods, 2, served)


def test_a_forged_copied_or_unhealthy_hand_off_gets_no_vnpu(vnpus: SimpleNamespace, tmp_path: Path) -> None:
    vnpus.slots.chips()
    forged = handed("tenant", "u-t", [[P310, 0, "vir04", 0b1111]], stamp="u-victim/npu-0")
    elsewhere = handed("other", "u-o", [[P310, 0, "vir04", 0b1111]], node="npu-9")
    with pytest.raises(PartitionRefused):
        vnpus.slots.admit([forged, elsewhere], 2, set())
    assert listed(vnpus.state) == {}
    write_config(tmp_path, health={0: "Critical"})
    vnpus.slots.chips()
    with pytest.raises(PartitionRefused, match="chip 0 is Unhealthy: no vNPU is created on it"):
        vnpus.slots.admit([handed("p", "u-p", [[P310, 0, "vir02_1c", 0b11]])], 2, set())
    assert listed(vnpus.state) == {}


def test_a_vnpu_is_destroyed_once_its_pod_is_gone(vnpus: SimpleNamespace) -> None:
    vnpus.slots.chips()
    pod = handed("p", "u-p", [[P310, 0, "vir02_1c", 0b110000]])
    vnpus.slots.admit([pod], 2, set())
    assert listed(vnpus.state) == {"0": [[104, 2, "vir02_1c"]]}
    running = pod.model_copy(update={"status": pod.status.model_copy(update={"phase": "Running"})})
    assert vnpus.slots.reconcile([running]) == []
    assert vnpus.slots.reconcile([]) == []  # orphaned once: kept (a pod bound between two listings)
    vnpus.slots.chips()
    assert vnpus.slots.reconcile([]) == [104]
    assert listed(vnpus.state) == {"0": []} and not (vnpus.dev / "vdavinci104").exists()


@pytest.fixture
def plugin(vnpus: SimpleNamespace) -> Iterator[SimpleNamespace]:
    with serving(vnpus.slots, "vn") as served:
        served.vnpus = vnpus
        yield served


def test_the_plugin_registers_npu_core_and_allocate_serves_or_refuses(plugin: SimpleNamespace) -> None:
    """Over real gRPC: ``huawei.com/npu-core`` registered with 16 slots; Allocate for the admitted pod gives its
    vNPU; with no pod to serve, Allocate is refused (FAILED_PRECONDITION) rather than guessing."""
    assert plugin.kubelet.registered.wait(10)
    assert plugin.kubelet.requests[0].resource_name == "huawei.com/npu-core"
    stream = plugin.stub.ListAndWatch(api_pb2.Empty(), timeout=10)
    first = next(iter(stream))
    assert len(first.devices) == 16 and {d.health for d in first.devices} == {"Healthy"}
    stream.cancel()
    ids = [first.devices[0].ID, first.devices[1].ID]
    request = api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids)])
    with pytest.raises(grpc.RpcError) as error:
        plugin.stub.Allocate(request, timeout=10)
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no pod being admitted" in (error.value.details() or "")
    plugin.bound.append(handed("infer", "u-i", [[P310, 0, "vir02_1c", 0b11000000]]))
    answer = plugin.stub.Allocate(request, timeout=10).container_responses[0]
    assert dict(answer.envs) == {"ASCEND_VISIBLE_DEVICES": "106"}
    assert answer.devices[0].container_path == "/dev/davinci106"


def test_a_multiple_of_a_chips_ai_cores_gets_the_whole_chips_the_scheduler_chose(vnpus: SimpleNamespace) -> None:
    """MindCluster's ``huawei.com/npu-core: 8`` is a whole 310P: the pod gets the chip its trusted
    ``hetsched.io/allocation`` names (``/dev/davinci<phy>``), no vNPU is created; a chip already carved into
    vNPUs is refused, never shared."""
    from hetsched.devices.inventory import POD_ANNOTATION

    vnpus.slots.chips()
    whole = handed("whole", "u-w", [], cores=8)
    whole.metadata.annotations[POD_ANNOTATION] = json.dumps({P310: [1]})
    del whole.metadata.annotations[PARTITIONS_ANNOTATION]
    pod, devices = vnpus.slots.admit([whole], 8, set())
    assert pod.metadata.name == "whole" and devices.envs == {"ASCEND_VISIBLE_DEVICES": "1"}
    assert devices.devices[0] == ("/dev/davinci1", f"{vnpus.dev}/davinci1", "rw")
    assert listed(vnpus.state) == {}
    vnpus.slots.admit([handed("p", "u-p", [[P310, 0, "vir01", 0b1]], cores=1)], 1, set())
    whole.metadata.annotations[POD_ANNOTATION] = json.dumps({P310: [0]})
    with pytest.raises(PartitionRefused, match="free of vNPUs"):
        vnpus.slots.admit([whole], 8, set())


# ------------------------------------------------------------------------------------- Ascend 910: HAMi's names


A910, B3 = "huawei.com/Ascend910", "huawei.com/Ascend910B3"


def hami_pod(name: str, uid: str, entries: list[list[Any]], count: int = 1, memory: int = 16384,
             bound_at: int = 1, stamp: str | None = None) -> Pod:
    """A pod asking HAMi's ``huawei.com/Ascend910B3`` (with ``-memory``: one vNPU; without: whole chips) bound
    to the node with a partition hand-off."""
    limits = {B3: str(count), **({f"{B3}-memory": str(memory)} if memory else {})}
    return Pod.model_validate({
        "metadata": {"name": name, "namespace": "default", "uid": uid,
                     "annotations": {PARTITIONS_ANNOTATION: json.dumps(entries), PREDICATE_TIME: str(bound_at),
                                     HANDOFF_FOR: stamp if stamp is not None else f"{uid}/{NODE}"}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"}})


@pytest.fixture
def b3(tmp_path: Path) -> SimpleNamespace:
    config = tmp_path / "chips.yaml"
    config.write_text(yaml.safe_dump({
        "resource": A910, "model": "Ascend910B3", "like": "ascend", "partitioning": "vnpu",
        "chips": [{"id": i, "health": "Critical" if i == 1 else "OK"} for i in range(2)]}))
    backend = FakeBackend(config)
    return SimpleNamespace(slots=VnpuBackend(backend, NODE, backend.vnpu_tool(), str(backend.device_dir)),
                           state=tmp_path / "vnpus.json", dev=tmp_path / "dev")


def test_a_910_serves_hamis_name_with_a_slot_per_vnpu_it_can_hold(b3: SimpleNamespace) -> None:
    """A 910B3 holds at most four vNPUs (four vir05_1c_16g fill its 20 AI cores and 64 GiB): four slots per chip,
    under HAMi's per-chip name; the Critical chip's slots are Unhealthy."""
    slots = b3.slots.chips()
    assert b3.slots.resource == B3 and len(slots) == 8
    assert [s.healthy for s in slots] == [True] * 4 + [False] * 4


def test_a_910_vnpu_is_created_with_the_id_of_its_instance_slot(b3: SimpleNamespace) -> None:
    """The scheduler gave the pod instance slot 2 of chip 0: its vNPU is 100 + 16·0 + 2 = 102, created with
    the template (no vGroup on a 910), and the container sees that vNPU only."""
    b3.slots.chips()
    pod, devices = b3.slots.admit([hami_pod("infer", "u-i", [[A910, 0, "vir05_1c_16g", 0b100]])], 1, set())
    assert pod.metadata.name == "infer" and devices.envs == {"ASCEND_VISIBLE_DEVICES": "102"}
    assert devices.devices[0] == ("/dev/davinci102", f"{b3.dev}/vdavinci102", "rw")
    assert listed(b3.state) == {"0": [[102, 0, "vir05_1c_16g"]]}
    with pytest.raises(PartitionRefused, match="chip 1 is Unhealthy"):
        b3.slots.admit([hami_pod("late", "u-l", [[A910, 1, "vir05_1c_16g", 0b1]])], 1, set())


@pytest.mark.parametrize("mask", [0b11, 1 << 16, 0])
def test_a_910_hand_off_naming_no_single_slot_gets_no_vnpu(b3: SimpleNamespace, mask: int) -> None:
    """Two slots, a slot past the chip's 16 ids (it would be the next chip's vNPU), or none: refused."""
    b3.slots.chips()
    with pytest.raises(PartitionRefused, match="no pod being admitted"):
        b3.slots.admit([hami_pod("odd", "u-o", [[A910, 0, "vir05_1c_16g", mask]])], 1, set())
    assert listed(b3.state) == {}


def test_hamis_whole_910_is_the_chip_itself_never_one_holding_vnpus(b3: SimpleNamespace) -> None:
    b3.slots.chips()
    whole = hami_pod("train", "u-t", [[A910, 0, "whole", 0b1]], memory=0)
    pod, devices = b3.slots.admit([whole], 1, set())
    assert pod.metadata.name == "train"
    assert devices.envs == {"ASCEND_VISIBLE_DEVICES": "0"}
    assert devices.devices[0] == ("/dev/davinci0", f"{b3.dev}/davinci0", "rw") and listed(b3.state) == {}
    b3.slots.admit([hami_pod("infer", "u-i", [[A910, 0, "vir10_3c_32g", 0b10]])], 1, set())
    with pytest.raises(PartitionRefused, match="free of vNPUs"):
        b3.slots.admit([whole], 1, set())


def test_the_node_agent_publishes_hamis_910_memory_of_the_healthy_chips(b3: SimpleNamespace) -> None:
    """kubelet checks a pod's ``huawei.com/Ascend910B3-memory`` against the node: the healthy chip's 64 GiB
    (chip 1 is Critical). The vNPU count is the device plugin's, left alone."""
    from hetsched.agents.node_agent import NodeAgent
    from hetsched.api.objects import Node
    from hetsched.cluster.memory import MemoryCluster
    from hetsched.sim.kernel import SimClock

    cluster = MemoryCluster(SimClock())
    cluster.create(Node.model_validate({"metadata": {"name": NODE}, "status": {
        "capacity": {"cpu": "8", B3: "8"}, "allocatable": {"cpu": "8", B3: "8"}}}))
    node = NodeAgent(cluster, NODE, b3.slots.base).sync()
    assert node.status.allocatable[f"{B3}-memory"] == node.status.capacity[f"{B3}-memory"] == 65536 * 1000
    assert node.status.allocatable[B3] == 8 * 1000
