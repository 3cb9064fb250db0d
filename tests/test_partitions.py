"""Chip partitions (issue 34): MIG profiles, Ascend vNPU templates, Cambricon sMLU and HAMi-core vGPU carved
per chip by the scheduler — placement rules, fragmentation-aware choice, the resource names users write,
hand-offs the cache trusts only from the scheduler, and no chip ever over-carved."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsched.api.objects import AnyObject, Node, Pod
from hetsched.devices.inventory import (
    HANDOFF_FOR,
    NODE_ANNOTATION,
    PARTITIONS_ANNOTATION,
    Chip,
    DeviceSet,
    NodeDevices,
)
from hetsched.devices.partition_requests import (
    PartitionRequestError,
    advertised,
    partition_request,
)
from hetsched.devices.partitions import WHOLE_MEMORY, fits, geometry_for, loss, pack_table
from tests.builders import gang, harness

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "partitions" / "volcano-guide-pods.yaml"
GPU, P310, MLU = "nvidia.com/gpu", "huawei.com/Ascend310P", "cambricon.com/mlu"
VNPU_LABELS = {"ring-controller.atlas": "ascend-310P"}


def part_node(name: str, resource: str, model: str, mode: str, chips: int = 1, chip_memory: int = 0,
              unhealthy: tuple[int, ...] = ()) -> Node:
    """A node whose chips are carved in ``mode``, advertising what the vendor's device plugin would."""
    inventory = NodeDevices(devices=[DeviceSet(
        resource=resource, model=model, topology="generic", partitioning=mode,  # type: ignore[arg-type]
        chips=[Chip(id=i, memoryMiB=chip_memory, health="Unhealthy" if i in unhealthy else "Healthy")
               for i in range(chips)])])
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110", resource: str(chips)}
    for key, per_chip in advertised(mode, model, chip_memory).items():
        allocatable[key] = str(per_chip * chips)
    return Node.model_validate({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                                             "annotations": {NODE_ANNOTATION: inventory.to_annotation()}},
                                "status": {"allocatable": allocatable, "capacity": allocatable}})


def carved(h: Any) -> dict[str, tuple[str, list[list[Any]]]]:
    """pod → (node, its partition hand-off entries)."""
    out = {}
    for pod in h.cluster.list("Pod"):
        if isinstance(pod, Pod) and pod.spec.nodeName:
            out[pod.metadata.name] = (pod.spec.nodeName,
                                      json.loads(pod.metadata.annotations.get(PARTITIONS_ANNOTATION, "[]")))
    return out


def zeros(*shape: int) -> Any:
    return np.zeros(shape or (1,), dtype=np.int64)


# ------------------------------------------------------------------------------------------ geometries


def test_mig_profiles_follow_nvidias_placement_table() -> None:
    """A100 40GB: seven 1g.5gb, four 1g.10gb, three 2g.10gb, two 3g.20gb, one 4g.20gb or one 7g.40gb per GPU;
    a 3g.20gb and a 4g.20gb share one GPU, two 4g.20gb never do (NVIDIA's MIG user guide)."""
    a100 = geometry_for("mig", "A100-SXM4-40GB")
    assert a100 is not None and a100.name == "A100-40GB"
    memory = np.full(1, 40960)
    counts = {p.name: int(fits(a100, p, zeros(), zeros(), zeros(), zeros(), zeros(), memory)[0]) for p in a100.profiles}
    assert counts == {"1g.5gb": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1}
    four = a100.profile("4g.20gb")
    three = a100.profile("3g.20gb")
    assert four is not None and three is not None
    after_four = np.array([four.placements[0]])
    assert fits(a100, three, np.array([4]), np.array([20480]), zeros(), np.array([1]), after_four, memory)[0] == 1
    assert fits(a100, four, np.array([4]), np.array([20480]), zeros(), np.array([1]), after_four, memory)[0] == 0
    names = {model: getattr(geometry_for("mig", model), "name", None) for model in (
        "H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-40GB", "Tesla-V100",
        "NVIDIA H100 NVL", "A100")}  # NVML's names and the node labels' alike; a model not known is no geometry
    assert names == {"H100-SXM5-80GB": "H100-80GB", "NVIDIA H100 80GB HBM3": "H100-80GB",
                     "NVIDIA A100 80GB PCIe": "A100-80GB", "NVIDIA A100-SXM4-40GB": "A100-40GB", "Tesla-V100": None,
                     "NVIDIA H100 NVL": None, "A100": None}


def test_the_cheapest_placement_keeps_the_big_profiles_possible() -> None:
    """A lone 1g.5gb goes to slice 6 (the 4g.20gb at 0–3 and a 2g.10gb at 4–5 stay possible); a 3g.20gb to
    slices 4–7, leaving room for the 4g.20gb."""
    a100 = geometry_for("mig", "A100-SXM4-40GB")
    assert a100 is not None
    memory = np.full(1, 40960)
    for name, mask in (("1g.5gb", 1 << 6), ("3g.20gb", 0b11110000), ("2g.10gb", 0b00110000)):
        profile = a100.profile(name)
        assert profile is not None
        _, chosen = loss(a100, profile, zeros(), zeros(), zeros(), zeros(), zeros(), memory)
        assert int(chosen[0]) == mask, name


def test_ascend_310p_combinations_follow_ascends_rules() -> None:
    """Ascend's guide: at most 7 vNPUs on a 310P (7 AI CPUs); after six vir01 only one vir01 or one vir02_1c
    more; two vir04 do not fit (8 AI CPUs), a vir04 and a vir04_3c do; templates sit in whole core groups."""
    p310 = geometry_for("vnpu", "Ascend310P3")
    assert p310 is not None

    def more(name: str, held: list[str]) -> int:
        cores = memory = aicpu = slices = 0
        for template in held:
            profile = p310.profile(template)
            assert profile is not None
            placement = next(p for p in profile.placements if not slices & p)
            cores, memory, aicpu, slices = (cores + profile.cores, memory + profile.memory, aicpu + profile.aicpu,
                                            slices | placement)
        profile = p310.profile(name)
        assert profile is not None
        return int(fits(p310, profile, np.array([cores]), np.array([memory]), np.array([aicpu]),
                        np.array([len(held)]), np.array([slices]), np.full(1, 24576))[0])

    assert more("vir01", ["vir01"] * 6) == 1 and more("vir02_1c", ["vir01"] * 6) == 1
    assert more("vir02", ["vir01"] * 6) == 0 and more("vir01", ["vir01"] * 7) == 0
    assert more("vir04", ["vir04"]) == 0 and more("vir04_3c", ["vir04"]) == 1
    # Volcano's MindCluster rule: no 4-core vNPU once 3 core groups are in use, no 2-core once all 4 are
    assert more("vir04_3c", ["vir01", "vir02_1c"]) == 1  # groups 0 and 1 in use: the upper two are whole
    all_groups = ["vir01", "vir02_1c", "vir02_1c", "vir02_1c"]  # every group in use, one core left in the first
    assert more("vir02_1c", all_groups) == 0 and more("vir01", all_groups) == 1


def test_pack_table_counts_disjoint_placements() -> None:
    table = pack_table(8, tuple(0b11 << s for s in (0, 2, 4, 6)))
    assert table[0] == 4 and table[0b00000001] == 3 and table[0b11111111] == 0


# ------------------------------------------------------------------------------------------ requests


@pytest.mark.parametrize(("limits", "annotations", "labels", "expected"), [
    ({"nvidia.com/mig-1g.10gb": 2}, {}, {}, [("mig", 2, "1g.10gb", False)]),
    ({"volcano.sh/vgpu-number": 2, "volcano.sh/vgpu-memory": 3000, "volcano.sh/vgpu-cores": 50}, {}, {},
     [("vgpu", 2, "", True)]),
    ({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 3000}, {"volcano.sh/vgpu-mode": "mig"}, {},
     [("mig", 1, "", False)]),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000}, {}, {}, [("vgpu", 1, "", True)]),
    ({"huawei.com/npu-core": 4}, {}, {**VNPU_LABELS, "vnpu-level": "high"}, [("vnpu", 1, "vir04", False)]),
    ({"huawei.com/npu-core": 4}, {}, {**VNPU_LABELS, "vnpu-dvpp": "yes"}, [("vnpu", 1, "vir04_4c_dvpp", False)]),
    ({"huawei.com/npu-core": 2}, {}, VNPU_LABELS, [("vnpu", 1, "vir02_1c", False)]),  # level defaults to low
    ({"huawei.com/Ascend310P": 1, "huawei.com/Ascend310P-memory": 4096}, {}, {}, [("vnpu", 1, "", False)]),
    ({"huawei.com/Ascend910B3": 2}, {}, {}, [("vnpu", 2, "", True)]),
    ({"cambricon.com/mlu.smlu.vcore": 20, "cambricon.com/mlu.smlu.vmemory": 1000, "cambricon.com/vmlu": 1}, {}, {},
     [("smlu", 1, "", False)]),
])
def test_the_names_users_write_become_partition_asks(limits: dict[str, int], annotations: dict[str, str],
                                                     labels: dict[str, str],
                                                     expected: list[tuple[str, int, str, bool]]) -> None:
    request = partition_request({k: v * 1000 for k, v in limits.items()}, annotations, labels)
    assert [(a.mode, a.count, a.template, a.distinct) for a in request.asks] == expected


def test_whole_chips_under_other_names_and_hamis_counts() -> None:
    number = partition_request({"volcano.sh/gpu-number": 2000}, {}, {})
    assert number.whole == {GPU: 2} and not number.asks
    hami = partition_request({GPU: 1000, "nvidia.com/gpucores": 30000}, {}, {})
    assert GPU in hami.counted  # nvidia.com/gpu counts vGPUs here, not whole GPUs
    assert partition_request({"huawei.com/npu-core": 16000}, {}, VNPU_LABELS).whole == {P310: 2}


@pytest.mark.parametrize(("limits", "annotations", "labels", "message"), [
    ({"nvidia.com/mig-9g.99gb": 1}, {}, {}, "resource nvidia.com/mig-9g.99gb: no GPU has MIG profile '9g.99gb'"),
    ({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-cores": 150}, {}, {}, "volcano.sh/vgpu-cores: 150 is over 100"),
    ({"volcano.sh/vgpu-memory": 100}, {}, {}, "volcano.sh/vgpu-memory: asked without volcano.sh/vgpu-number"),
    ({"volcano.sh/vgpu-number": 1}, {"volcano.sh/vgpu-mode": "<b>x</b>"}, {}, "annotation volcano.sh/vgpu-mode"),
    ({"huawei.com/npu-core": 3}, {}, VNPU_LABELS, "huawei.com/npu-core: 3 AI cores is no vNPU template"),
    ({"huawei.com/npu-core": 1}, {}, {}, "needs the pod label ring-controller.atlas: ascend-310P"),
    ({"huawei.com/npu-core": 1}, {}, {**VNPU_LABELS, "vnpu-dvpp": "maybe"}, "label vnpu-dvpp: must be yes, no or null"),
    ({"huawei.com/Ascend910B3-memory": 10}, {}, {}, "asked without huawei.com/Ascend910B3"),
    ({"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 10}, {"huawei.com/vnpu-mode": "hami-core"}, {},
     "hami-core (soft vNPU slicing) is not supported"),
    ({"cambricon.com/mlu.smlu.vcore": 101}, {}, {}, "cambricon.com/mlu.smlu.vcore: 101 is over 100"),
    ({"nvidia.com/mig-1g.5gb": 10**9}, {}, {}, "1000000000 partitions for one pod (at most 128)"),
    ({"nvidia.com/mig-1g.5gb": 1, "nvidia.com/mig-4g.20gb": 1}, {}, {},
     "one kind of partition of nvidia.com/gpu per pod is supported"),
    ({GPU: 1, "nvidia.com/gpumem-percentage": 50}, {"nvidia.com/vgpu-mode": "mig"}, {},
     "nvidia.com/gpumem-percentage: a MIG instance is chosen by MiB"),
    ({GPU: 1, "nvidia.com/gpumem-percentage": 50, "nvidia.com/gpumem": 1000}, {}, {},
     "nvidia.com/gpumem and nvidia.com/gpumem-percentage: ask the vGPU's memory one way"),
    ({GPU: 1, "nvidia.com/gpumem-percentage": 150}, {}, {}, "150 is over 100 (percent of one GPU's memory)"),
])
def test_requests_that_can_never_be_served_name_the_field(limits: dict[str, int], annotations: dict[str, str],
                                                          labels: dict[str, str], message: str) -> None:
    with pytest.raises(PartitionRequestError) as error:
        partition_request({k: v * 1000 for k, v in limits.items()}, annotations, labels)
    assert message in str(error.value)


def test_validate_refuses_a_bad_partition_request_and_passes_the_guides_pods(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("""apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: infer}
spec:
  minAvailable: 1
  tasks:
  - name: worker
    replicas: 1
    template:
      spec:
        containers:
        - name: c
          image: x
          resources: {limits: {volcano.sh/vgpu-number: 1, volcano.sh/vgpu-cores: 400}}
""")
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "validate", str(bad)], capture_output=True,
                         text=True, timeout=100, check=False)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert ("(Job/infer): spec.tasks[0].template.spec.containers: resource volcano.sh/vgpu-cores: 400 is over 100"
            in run.stderr)
    good = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "validate", str(FIXTURE),
                           str(ROOT / "hetsched/examples/clusters/partitioned.yaml")],
                          capture_output=True, text=True, timeout=100, check=False)
    assert good.returncode == 0, good.stderr


def test_the_guides_pods_all_run_in_the_simulator(tmp_path: Path) -> None:
    """Volcano's GPU-number, GPU-sharing, vGPU (HAMi-core and MIG) and vNPU (HAMi and MindCluster) pods, a MIG
    and an sMLU pod: each runs on the partitioned example cluster with the partition its request implies."""
    out = tmp_path / "results.json"
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "simulate", "-c",
                          str(ROOT / "hetsched/examples/clusters/partitioned.yaml"), str(FIXTURE), "-o", str(out),
                          "--until", "30", "-q"], capture_output=True, text=True, timeout=200, check=False)
    assert run.returncode == 0, run.stderr
    summary = json.loads(out.read_text())["summary"]
    assert summary["phases"] == {"Running": 10} and summary["binds"] == 10
    # chips held per kind: whole chips, and each partition as its share of one chip's compute (gpu-number 1,
    # hami-core 50 %, 1g.10gb 1/7, 3g.40gb 3/7 of 32 GPUs; vir02_1c twice 2/8, vir10_3c_32g 10/20 of 32 NPUs;
    # an sMLU of 25 % of 16 MLUs); the names partitions advertise are not counted as chips
    ratio = summary["allocationRatio"]
    assert ratio["nvidia"] == pytest.approx((1 + 0.5 + 1 / 7 + 3 / 7) / 32)
    assert ratio["ascend"] == pytest.approx((0.25 + 0.25 + 0.5) / 32)
    assert ratio["cambricon"] == pytest.approx(0.25 / 16)


# ------------------------------------------------------------------------------------------ scheduling


def test_mig_carving_is_order_aware_and_the_rest_waits_with_a_reason() -> None:
    """A 3g.20gb then a 4g.20gb fill one A100 40GB (the 3g.20gb took slices 4–7); a 1g.5gb after them finds
    no room and says so."""
    objects: list[AnyObject] = [part_node("g", GPU, "A100-SXM4-40GB", "mig")]
    for name, profile in (("a", "3g.20gb"), ("b", "4g.20gb"), ("c", "1g.5gb")):
        objects += gang(name, 1, limits={f"nvidia.com/mig-{profile}": 1}, cpu="1")
    h = harness(objects)
    h.cycle()
    placed = carved(h)
    assert placed["a-0"] == ("g", [[GPU, 0, "3g.20gb", 0b11110000]])
    assert placed["b-0"] == ("g", [[GPU, 0, "4g.20gb", 0b00001111]])
    assert "c-0" not in placed
    assert "had no nvidia.com/gpu chip with room for a 1g.5gb partition" in h.condition("c")


def test_partitions_whole_chips_and_unpartitioned_nodes_never_mix() -> None:
    """A carved GPU is not free for a whole-GPU pod; a whole-held GPU takes no partition; a node whose GPUs
    are not in MIG mode takes no MIG pod (the reason names the mode); an unhealthy chip is never carved."""
    objects: list[AnyObject] = [part_node("g", GPU, "A100-SXM4-40GB", "mig", chips=3, unhealthy=(2,)),
                                part_node("plain", GPU, "A100-SXM4-40GB", "vgpu", chips=1, chip_memory=40960)]
    objects += gang("small", 1, limits={"nvidia.com/mig-1g.5gb": 1}, cpu="1", selector={"kubernetes.io/hostname": "g"})
    h = harness(objects)
    h.cycle()
    assert carved(h)["small-0"][1][0][1] in (0, 1)
    for obj in gang("whole", 2, min_member=1, limits={GPU: 1}, cpu="1", selector={"kubernetes.io/hostname": "g"}):
        h.cluster.create(obj)
    h.cycle()
    whole = [p for p in h.cluster.list("Pod") if isinstance(p, Pod) and p.metadata.name.startswith("whole")
             and p.spec.nodeName]
    assert len(whole) == 1  # the other healthy GPU is carved, the third unhealthy
    for obj in gang("mig7", 1, limits={"nvidia.com/mig-7g.40gb": 1}, cpu="1"):
        h.cluster.create(obj)
    h.cycle()
    assert "mig7-0" not in carved(h)
    condition = h.condition("mig7")
    assert "didn't carve their nvidia.com/gpu chips into mig partitions" in condition
    assert "room for a 7g.40gb partition" in condition


def test_vgpus_of_one_pod_sit_on_distinct_gpus_within_cores_and_memory() -> None:
    objects: list[AnyObject] = [part_node("g", GPU, "Tesla-V100", "vgpu", chips=2, chip_memory=16384)]
    objects += gang("two", 1, limits={"volcano.sh/vgpu-number": 2, "volcano.sh/vgpu-memory": 8000,
                                      "volcano.sh/vgpu-cores": 60}, cpu="1")
    h = harness(objects)
    h.cycle()
    for obj in gang("hami", 1, limits={GPU: 1, "nvidia.com/gpumem": 8000, "nvidia.com/gpucores": 40}, cpu="1"):
        h.cluster.create(obj)
    h.cycle()
    for obj in gang("more", 1, limits={"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 8400,
                                       "volcano.sh/vgpu-cores": 1}, cpu="1"):
        h.cluster.create(obj)
    h.cycle()
    placed = carved(h)
    assert sorted(entry[1] for entry in placed["two-0"][1]) == [0, 1]
    assert len(placed["hami-0"][1]) == 1
    assert "more-0" not in placed  # GPU 0: 100 % of cores held; GPU 1: 8000 + 8400 MiB > 16384
    assert "had no nvidia.com/gpu chip with room" in h.condition("more")


def test_hamis_memory_percentage_is_a_share_of_each_gpus_own_memory() -> None:
    """``nvidia.com/gpumem-percentage: 50`` takes half of whichever GPU it lands on: two fit on a 16 GiB GPU, a
    third does not (the GPUs' memory differs by node, so the MiB are worked out per chip)."""
    objects: list[AnyObject] = [part_node("g", GPU, "Tesla-V100", "vgpu", chips=1, chip_memory=16384)]
    for name in ("a", "b", "c"):
        objects += gang(name, 1, limits={GPU: 1, "nvidia.com/gpumem-percentage": 50}, cpu="1")
    h = harness(objects)
    h.cycle()
    placed = carved(h)
    assert sorted(placed) == ["a-0", "b-0"] and placed["a-0"][1][0][2] == "0%-50%mem"
    assert "c-0" not in placed and "nvidia.com/gpumem-percentage" in h.condition("c")
    # on a 32 GiB GPU the same ask is 16 GiB: a vGPU of 20000 MiB still fits beside one of them
    objects = [part_node("big", GPU, "Tesla-V100", "vgpu", chips=1, chip_memory=32768),
               *gang("half", 1, limits={GPU: 1, "nvidia.com/gpumem-percentage": 50}, cpu="1"),
               *gang("more", 1, limits={GPU: 1, "nvidia.com/gpumem": 16384}, cpu="1")]
    h = harness(objects)
    h.cycle()
    assert sorted(carved(h)) == ["half-0", "more-0"]
    for obj in gang("over", 1, limits={GPU: 1, "nvidia.com/gpumem": 1}, cpu="1"):
        h.cluster.create(obj)
    h.cycle()
    assert "over-0" not in carved(h)  # 16384 + 16384 MiB: the GPU's memory is all held


def test_smlu_memory_is_rounded_to_256_mib_units() -> None:
    objects: list[AnyObject] = [part_node("m", MLU, "MLU370-X8", "smlu", chips=1, chip_memory=2048)]
    for name in ("a", "b", "c"):
        objects += gang(name, 1, limits={"cambricon.com/mlu.smlu.vcore": 10, "cambricon.com/mlu.smlu.vmemory": 600,
                                         "cambricon.com/vmlu": 1}, cpu="1")
    h = harness(objects)
    h.cycle()
    placed = carved(h)
    assert placed["a-0"][1][0][2] == "10%-768MiB"
    assert len(placed) == 2  # 768 × 3 > 2048
    # Cambricon's device plugin (dynamic-smlu mode) makes the instance from its own hand-off: chip, vcore
    # percent, memory in 256 MiB units, and the "not assigned yet" flag in both spellings
    annotations = h.cluster.get("Pod", "default/a-0").metadata.annotations
    assert (annotations["CAMBRICON_DSMLU_PROFILE"], annotations["CAMBRICON_DSMLU_ASSIGHED"],
            annotations["CAMBRICON_DSMLU_ASSIGNED"]) == ("0_10_3", "false", "false")


def test_mindcluster_vnpu_levels_choose_the_template() -> None:
    objects: list[AnyObject] = [part_node("n", P310, "Ascend310P3", "vnpu", chips=2)]
    objects += gang("high", 2, limits={"huawei.com/npu-core": 4}, cpu="1", labels={**VNPU_LABELS, "vnpu-level": "high"})
    objects += gang("hami", 1, limits={P310: 1, "huawei.com/Ascend310P-memory": 5000}, cpu="1")
    h = harness(objects)
    h.cycle()
    placed = carved(h)
    assert [placed[f"high-{i}"][1][0][2] for i in range(2)] == ["vir04", "vir04"]
    assert placed["high-0"][1][0][1] != placed["high-1"][1][0][1]  # two vir04 need 8 AI CPUs: two chips
    assert placed["hami-0"][1][0][2] == "vir02_1c"  # the smallest 310P template holding 5000 MiB


def test_910_vnpus_take_distinct_instance_slots_that_a_fresh_scheduler_reads_back() -> None:
    """A 910's vNPU templates take AI cores in no fixed place, so each takes the lowest free instance slot,
    from which the node derives its vNPU id; the slots survive a restart, and a fourth vNPU takes the slot
    left free."""
    b3 = "huawei.com/Ascend910B3"
    objects: list[AnyObject] = [part_node("a", "huawei.com/Ascend910", "Ascend910B3", "vnpu", chips=1)]
    objects += [o for i in range(3) for o in gang(f"v{i}", 1, limits={b3: 1, f"{b3}-memory": 16384}, cpu="1")]
    h = harness(objects)
    h.cycle()
    placed = carved(h)
    assert sorted(placed[f"v{i}-0"][1][0][3] for i in range(3)) == [0b1, 0b10, 0b100]
    assert {placed[f"v{i}-0"][1][0][2] for i in range(3)} == {"vir05_1c_16g"}
    bound = [p for p in h.cluster.list("Pod") if isinstance(p, Pod) and p.metadata.name != "v1-0"]
    fresh = harness([part_node("a", "huawei.com/Ascend910", "Ascend910B3", "vnpu", chips=1), *bound,
                     *gang("w", 1, limits={b3: 1, f"{b3}-memory": 16384}, cpu="1")])
    fresh.cycle()
    again = carved(fresh)
    assert again["w-0"][1][0][3] == placed["v1-0"][1][0][3]  # the slot v1 no longer holds


def test_a_fresh_scheduler_reads_the_carving_back_and_never_trusts_a_forged_hand_off() -> None:
    """The cache rebuilds each chip's carving from the bound pods' hand-offs (so a restart loses nothing); a
    hand-off stamped for another pod carves where the pod's own request fits, never what it names."""
    objects: list[AnyObject] = [part_node("g", GPU, "A100-SXM4-40GB", "mig", chips=1)]
    objects += gang("a", 1, limits={"nvidia.com/mig-4g.20gb": 1}, cpu="1")
    h = harness(objects)
    h.cycle()
    bound = [p for p in h.cluster.list("Pod") if isinstance(p, Pod)]
    assert bound[0].spec.nodeName == "g"
    fresh = harness([part_node("g", GPU, "A100-SXM4-40GB", "mig", chips=1), *bound,
                     *gang("b", 1, limits={"nvidia.com/mig-4g.20gb": 1}, cpu="1"),
                     *gang("c", 1, limits={"nvidia.com/mig-3g.20gb": 1}, cpu="1")])
    fresh.cycle()
    placed = carved(fresh)
    assert "b-0" not in placed and placed["c-0"][1][0][3] == 0b11110000
    # a pod claiming the 7g.40gb in a hand-off copied from another pod's is charged its own 1g.5gb only
    forged = Pod.model_validate({
        "metadata": {"name": "squatter", "namespace": "default", "uid": "u-squat", "annotations": {
            PARTITIONS_ANNOTATION: json.dumps([[GPU, 0, "7g.40gb", 255]]), HANDOFF_FOR: "someone-else/g"}},
        "spec": {"nodeName": "g", "containers": [{"name": "c", "resources": {
            "limits": {"nvidia.com/mig-1g.5gb": "1"}}}]},
        "status": {"phase": "Running"}})
    third = harness([part_node("g", GPU, "A100-SXM4-40GB", "mig", chips=1), forged,
                     *gang("d", 1, limits={"nvidia.com/mig-4g.20gb": 1}, cpu="1")])
    third.cycle()
    assert "d-0" in carved(third)


MODES = {"mig": (GPU, "A100-SXM4-40GB", 0, ["nvidia.com/mig-1g.5gb", "nvidia.com/mig-2g.10gb",
                                              "nvidia.com/mig-3g.20gb", "nvidia.com/mig-4g.20gb"]),
         "vnpu": (P310, "Ascend310P3", 0, ["npu-core-1", "npu-core-2", "npu-core-4"]),
         "smlu": (MLU, "MLU370-X8", 8192, ["smlu"])}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(sorted(MODES)), asks=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3),
                                                                     st.integers(1, 90), st.integers(1, 5000)),
                                                           min_size=1, max_size=10))
def test_no_chip_is_ever_over_carved(mode: str, asks: list[tuple[int, int, int, int]]) -> None:
    """Whatever the mix and order of asks, the partitions on each chip (read back from the hand-offs) never
    overlap and never sum past the chip's cores, memory, AI CPUs or partition count."""
    resource, model, memory, names = MODES[mode]
    objects: list[AnyObject] = [part_node(f"n{i}", resource, model, mode, chips=2, chip_memory=memory)
                                for i in range(2)]
    for j, (which, size, cores, mib) in enumerate(asks):
        name = names[which % len(names)]
        labels: dict[str, str] = {}
        if name.startswith("npu-core"):
            limits: dict[str, Any] = {"huawei.com/npu-core": int(name.rsplit("-", 1)[1])}
            labels = dict(VNPU_LABELS)
        elif name == "smlu":
            limits = {"cambricon.com/mlu.smlu.vcore": cores, "cambricon.com/mlu.smlu.vmemory": mib}
        else:
            limits = {name: 1}
        objects += gang(f"j{j}", size, min_member=1, limits=limits, cpu="1", labels=labels)
    h = harness(objects)
    h.cycle()
    h.cycle()
    geometry = geometry_for(mode, model)
    assert geometry is not None
    per_chip: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for node, entries in carved(h).values():
        for _resource, chip, template, placement in entries:
            per_chip.setdefault((node, chip), []).append((template, placement))
    for held in per_chip.values():
        union = 0
        cores = aicpu = mib_total = 0
        for template, placement in held:
            assert not union & placement
            union |= placement
            profile = geometry.profile(template)
            if profile is None:  # a dynamic share: "<cores>%-<MiB>MiB"
                percent, size_text = template.split("%-")
                cores += int(percent)
                mib_total += (memory if size_text == "all" else memory * int(size_text[:-4]) // 100
                              if size_text.endswith("%mem") else int(size_text.removesuffix("MiB")))
            else:
                cores, aicpu = cores + profile.cores, aicpu + profile.aicpu
                mib_total += profile.memory if profile.memory != WHOLE_MEMORY else memory
        assert cores <= geometry.cores and mib_total <= (geometry.memory or memory)
        assert not geometry.aicpu or aicpu <= geometry.aicpu
        assert not geometry.instances or len(held) <= geometry.instances


def test_deviceshare_spread_and_binpack_choose_the_node() -> None:
    from hetsched.scheduler.defaults import parse_conf

    def run(policy: str) -> str:
        conf = parse_conf(f"""actions: "enqueue, allocate"
tiers:
- plugins: [{{name: priority}}, {{name: gang}}]
- plugins:
  - {{name: predicates}}
  - {{name: devicetopology}}
  - name: deviceshare
    arguments: {{deviceshare.VGPUEnable: true, deviceshare.SchedulePolicy: {policy}, deviceshare.ScheduleWeight: 100}}
""", "conf")
        objects: list[AnyObject] = [part_node(n, GPU, "Tesla-V100", "vgpu", chips=1, chip_memory=16384)
                                    for n in ("a", "b")]
        objects += gang("first", 1, limits={"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 2000,
                                            "volcano.sh/vgpu-cores": 10}, cpu="1",
                        selector={"kubernetes.io/hostname": "a"})
        h = harness(objects, conf=conf)
        h.cycle()
        for obj in gang("second", 1, limits={"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 2000,
                                              "volcano.sh/vgpu-cores": 10}, cpu="1"):
            h.cluster.create(obj)
        h.cycle()
        return carved(h)["second-0"][0]

    assert run("binpack") == "a" and run("spread") == "b"


def test_the_chip_map_and_metrics_show_each_chips_carving() -> None:
    """``explain --node``'s chip map marks carved chips ``+`` and lists each one's partitions (template and slices) with
    what is left; the metrics count partitions per template and carved chips per geometry."""
    from prometheus_client import generate_latest

    from hetsched.metrics.scheduler import SchedulerMetrics
    from hetsched.scheduler.contract.chips import chip_map

    objects: list[AnyObject] = [part_node("g", GPU, "A100-SXM4-40GB", "mig", chips=2)]
    objects += gang("a", 1, limits={"nvidia.com/mig-3g.20gb": 1}, cpu="1")
    objects += gang("b", 2, limits={"nvidia.com/mig-1g.5gb": 1}, cpu="1")
    h = harness(objects)
    metrics = SchedulerMetrics()
    h.scheduler.observers.append(metrics)
    h.cycle()
    h.cycle()
    (resource, cells, summary), = chip_map(h.scheduler.cache.snapshot(), "g")
    assert resource == GPU and cells == "+."  # everything on one GPU, the other left whole
    assert "carved (mig, A100-40GB): chip 0: " in summary
    assert "chip 0: 1g.5gb@00000001 1g.5gb@00000010 3g.20gb@11110000, 5/7 cores, 30720/40960 MiB" in summary
    text = generate_latest(metrics.registry).decode()
    assert ('hetsched_partitions_allocated{geometry="A100-40GB",kind="nvidia",mode="mig",template="1g.5gb"} 2.0'
            in text)
    assert 'hetsched_partition_chips{geometry="A100-40GB",kind="nvidia",mode="mig",state="carved"} 1.0' in text


def test_a_high_priority_partition_preempts_the_partitions_in_its_way() -> None:
    """A full A100 (seven 1g.5gb of a low-priority job): a high-priority 7g.40gb pod evicts them — the victims'
    partitions are released in the eviction plan, so the chip is seen whole again."""
    from tests.builders import priority_class

    objects: list[AnyObject] = [part_node("g", GPU, "A100-SXM4-40GB", "mig", chips=1),
                                priority_class("low", 1), priority_class("high", 1000)]
    objects += gang("small", 7, min_member=1, limits={"nvidia.com/mig-1g.5gb": 1}, cpu="1", priority_class="low")
    h = harness(objects, conf="""actions: "enqueue, allocate, preempt"
tiers:
- plugins: [{name: priority}, {name: gang}, {name: conformance}]
- plugins: [{name: predicates}, {name: proportion}, {name: devicetopology}]
""")
    h.cycle()
    assert len(carved(h)) == 7
    for obj in gang("big", 1, limits={"nvidia.com/mig-7g.40gb": 1}, cpu="1", priority_class="high"):
        h.cluster.create(obj)
    for _ in range(6):
        h.cycle()
    assert "big-0" in carved(h) and carved(h)["big-0"][1][0][2] == "7g.40gb"


def test_the_partition_study_shows_whole_gpus_strand_what_partitions_keep() -> None:
    """The study's finding on a small cluster (docs/devices.md has the full run): with the same inference-heavy
    jobs, whole-GPU allocation holds far more GPU-hours than the pods use and leaves inference waiting; milli
    shares and MIG partitions hold what is used and run every inference job; MIG carves partitions."""
    from hetsched.sim.partition_study import MODES, StudySetup, run

    setup = StudySetup(servers=4, hours=4, seed=3)
    figures = {mode: run(setup, mode) for mode in MODES}
    whole, milli, mig = figures["whole"], figures["milli"], figures["mig"]
    assert whole["heldShare"] > 2 * whole["usedShare"]
    assert milli["heldShare"] == milli["usedShare"] and mig["heldShare"] == mig["usedShare"]
    for kind in ("1g.5gb", "2g.10gb", "3g.20gb"):
        assert mig["classes"][kind]["waiting"] == 0 and milli["classes"][kind]["waiting"] == 0
    assert sum(whole["classes"][k]["waiting"] for k in ("1g.5gb", "2g.10gb", "3g.20gb")) > 0
    assert mig["partitions"] > 0 and whole["partitions"] == 0 and mig["usedShare"] > whole["usedShare"]


def test_a_pod_bound_past_the_scheduler_with_an_absurd_partition_count_carves_nothing() -> None:
    """Anyone may create a pod with ``nodeName`` set: one asking a billion MIG instances is charged no partition
    (its request can never be served) and the cycle goes on for everyone else."""
    squatter = Pod.model_validate({
        "metadata": {"name": "squatter", "namespace": "default", "uid": "u-s"},
        "spec": {"nodeName": "g", "containers": [{"name": "c", "resources": {
            "limits": {"nvidia.com/mig-1g.5gb": str(10**9)}}}]},
        "status": {"phase": "Running"}})
    h = harness([part_node("g", GPU, "A100-SXM4-40GB", "mig", chips=1), squatter,
                 *gang("ok", 1, limits={"nvidia.com/mig-7g.40gb": 1}, cpu="1")])
    h.cycle()
    assert "ok-0" in carved(h)


def test_dynamic_shares_are_one_metric_label_whatever_their_size() -> None:
    """A tenant choosing a new vGPU size per pod must not mint a new series each time: sMLU and vGPU shares are
    counted under ``template="dynamic"``."""
    from prometheus_client import generate_latest

    from hetsched.metrics.scheduler import SchedulerMetrics

    objects: list[AnyObject] = [part_node("g", GPU, "Tesla-V100", "vgpu", chips=2, chip_memory=16384)]
    for i, (cores, memory) in enumerate(((10, 1000), (20, 1234), (30, 999))):
        objects += gang(f"v{i}", 1, limits={"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": memory,
                                            "volcano.sh/vgpu-cores": cores}, cpu="1")
    h = harness(objects)
    metrics = SchedulerMetrics()
    h.scheduler.observers.append(metrics)
    h.cycle()
    h.cycle()
    text = generate_latest(metrics.registry).decode()
    held = [line for line in text.splitlines() if line.startswith("hetsched_partitions_allocated{")]
    assert held == ['hetsched_partitions_allocated{geometry="GPU-vGPU",kind="nvidia",mode="vgpu",'
                    'template="dynamic"} 3.0']


def test_a_partition_pod_bound_without_a_hand_off_is_never_charged_to_a_whole_held_chip() -> None:
    """After a restart, a MIG pod bound by someone else (no hand-off) is charged where the scheduler would have
    carved it — never on the GPU a whole-GPU pod holds — so a third pod finds no GPU left."""
    h = harness([part_node("g", GPU, "A100-SXM4-40GB", "mig", chips=2), *gang("whole", 1, limits={GPU: 1}, cpu="1")])
    h.cycle()
    bound = [p for p in h.cluster.list("Pod") if isinstance(p, Pod)]
    bare = Pod.model_validate({
        "metadata": {"name": "bare", "namespace": "default", "uid": "u-bare"},
        "spec": {"nodeName": "g", "containers": [{"name": "c", "resources": {
            "limits": {"nvidia.com/mig-7g.40gb": "1"}}}]}, "status": {"phase": "Running"}})
    fresh = harness([part_node("g", GPU, "A100-SXM4-40GB", "mig", chips=2), *bound, bare,
                     *gang("third", 1, limits={"nvidia.com/mig-1g.5gb": 1}, cpu="1")])
    fresh.cycle()
    assert "third-0" not in carved(fresh)
    assert "room for a 1g.5gb partition" in fresh.condition("third")
