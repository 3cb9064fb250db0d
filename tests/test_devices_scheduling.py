"""The node and the chips as one decision: hand-off annotations, health, locality, fake-resource reports,
and properties over random inventories (no illegal set, no unhealthy chip, no chip given twice, the
vectorised placement equal to one-pod-at-a-time placement).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsched.api.objects import AnyObject, Pod
from hetsched.devices.catalog import PolicySettings, policy_for
from hetsched.devices.inventory import (
    InventoryError,
    from_ascend_device_info,
    parse_node_devices,
    pod_allocation,
)
from hetsched.scheduler.engine.placement import capacity, place_group
from hetsched.scheduler.engine.session import Session
from hetsched.scheduler.engine.statement import Statement
from tests.builders import accel_node, gang, harness, node, podgroup

ASCEND = "huawei.com/Ascend910"
REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "volcano-ascend.md"


def allocations(h: object) -> dict[str, tuple[str, dict[str, list[int]]]]:
    result = {}
    for pod in h.cluster.list("Pod"):  # type: ignore[attr-defined]
        assert isinstance(pod, Pod)
        if pod.spec.nodeName:
            result[pod.metadata.name] = (pod.spec.nodeName, pod_allocation(pod.metadata.annotations))
    return result


def test_bind_writes_the_ascend_compatible_hand_off() -> None:
    h = harness([accel_node("npu-0"), *gang("train", 2, limits={ASCEND: 2}, cpu="1")])
    h.clock.advance_to(12.5)
    h.cycle()
    pod = h.cluster.get("Pod", "default/train-0")
    assert isinstance(pod, Pod)
    annotations = pod.metadata.annotations
    chips = json.loads(annotations["hetsched.io/allocation"])[ASCEND]
    assert len(chips) == 2 and len({c // 4 for c in chips}) == 1  # one HCCS ring
    assert annotations[ASCEND] == ",".join(f"Ascend910-{c}" for c in chips)
    assert annotations["predicate-time"] == str(int(12.5e9))
    other = h.cluster.get("Pod", "default/train-1")
    assert set(json.loads(other.metadata.annotations["hetsched.io/allocation"])[ASCEND]).isdisjoint(chips)


def test_seed_job_lands_on_one_whole_node_when_one_is_free() -> None:
    nodes = [accel_node("npu-0"), accel_node("npu-1"), accel_node("npu-2")]
    busy = gang("busy", 1, limits={ASCEND: 1}, cpu="1")
    h = harness([*nodes, *busy])
    h.cycle()  # "busy" takes one chip somewhere
    h.cluster.create(podgroup("bert", 8))
    for pod in gang("bert", 8, limits={ASCEND: 1}, cpu="1")[1:]:
        h.cluster.create(pod)
    h.cycle()
    placed = Counter(node for name, (node, _) in allocations(h).items() if name.startswith("bert"))
    assert list(placed.values()) == [8]
    assert next(iter(placed)) != allocations(h)["busy-0"][0]


def test_compat_policy_rejects_one_chip_pods_in_a_multi_pod_job() -> None:
    conf = ("actions: allocate\ntiers:\n- plugins:\n  - name: gang\n  - name: predicates\n  - name: devicetopology\n"
            "    arguments: {ascend910.policy: ascend-volcano-compat}\n")
    h = harness([accel_node("npu-0"), *gang("bert", 8, limits={ASCEND: 1}, cpu="1")], conf)
    result = h.cycle()
    assert result.decisions.binds == []
    status = result.decisions.unschedulable["default/bert"]
    assert status.code.name == "UNSCHEDULABLE_AND_UNRESOLVABLE"
    assert "requires 8 chips per pod in a multi-pod job" in status.message


def test_unhealthy_chips_are_never_chosen_and_network_faults_only_for_single_pod_jobs() -> None:
    node_ = accel_node("npu-0", unhealthy=(0, 1, 2), network=(4, 5, 6, 7))
    h = harness([node_, *gang("dist", 2, limits={ASCEND: 1}, cpu="1")])
    h.cycle()
    assert allocations(h) == {}  # only chip 3 is healthy and network-healthy: a 2-pod job cannot run
    assert "no free chip set that meets the device topology" in h.condition("dist")
    h.cluster.create(podgroup("solo", 1))
    for pod in gang("solo", 1, limits={ASCEND: 4}, cpu="1")[1:]:
        h.cluster.create(pod)
    h.cycle()
    assert allocations(h)["solo-0"][1][ASCEND] == [4, 5, 6, 7]  # single-pod job may use them


def test_nodes_with_faulty_chips_rank_below_healthy_ones() -> None:
    h = harness([accel_node("faulty", unhealthy=(7,)), accel_node("healthy"), *gang("one", 1, limits={ASCEND: 1})])
    h.cycle()
    assert allocations(h)["one-0"][0] == "healthy"


def test_fake_resources_are_reported() -> None:
    h = harness([accel_node("liar", unhealthy=(3,), advertise=8), accel_node("honest", unhealthy=(3,))])
    assert h.scheduler.cache.mismatches() == {
        "liar": "huawei.com/Ascend910: allocatable 8 but 7 healthy chip(s) of 8"}
    h.cluster.create(podgroup("all", 1))
    for pod in gang("all", 1, limits={ASCEND: 8})[1:]:
        h.cluster.create(pod)
    h.cycle()
    assert allocations(h) == {}  # allocatable says 8 free, but chip 3 is dead: never placed there


def test_inventory_annotation_errors_name_the_node() -> None:
    with pytest.raises(InventoryError) as info:
        parse_node_devices('{"version": "hetsched.io/v1", "devices": [{"resource": "x", "chips": []}]}', "n7")
    assert "node n7: annotation hetsched.io/devices: devices[0].chips" in str(info.value)
    with pytest.raises(InventoryError) as info:  # 128 chips (ids 0–127) is the most one resource may have
        parse_node_devices('{"devices": [{"resource": "x", "chips": [{"id": 128}]}]}', "n9")
    assert "node n9: annotation hetsched.io/devices: devices[0].chips[0].id" in str(info.value)
    assert "127" in str(info.value)
    broken = accel_node("n8").model_copy(update={"metadata": accel_node("n8").metadata.model_copy(
        update={"annotations": {"hetsched.io/devices": "{not json"}})})
    h = harness([broken])
    assert "n8" in h.scheduler.cache.inventory_errors


def ascend_configmap(healthy: str, unhealthy: str, network: str) -> dict[str, str]:
    info = {"DeviceList": {ASCEND: healthy, f"{ASCEND}-Unhealthy": unhealthy,
                           f"{ASCEND}-NetworkUnhealthy": network}, "UpdateTime": 1}
    code = hashlib.sha256(json.dumps(info, separators=(",", ":")).encode()).hexdigest()
    return {"DeviceInfoCfg": json.dumps({"DeviceInfo": info, "CheckCode": code})}


def test_ascend_device_info_configmap_is_accepted() -> None:
    data = ascend_configmap("Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3,Ascend910-5,Ascend910-6,Ascend910-7",
                            "Ascend910-4", "Ascend910-0")
    (devices,) = from_ascend_device_info(data, "n1", topology="ascend910-8")
    health = {c.id: c.health for c in devices.chips}
    assert health[4] == "Unhealthy" and health[0] == "NetworkUnhealthy" and health[7] == "Healthy"
    tampered = dict(data)
    tampered["DeviceInfoCfg"] = data["DeviceInfoCfg"].replace("Ascend910-7", "Ascend910-9")
    with pytest.raises(InventoryError, match="CheckCode"):
        from_ascend_device_info(tampered, "n1", topology="ascend910-8")


def test_the_real_published_device_info_sample_parses_and_verifies() -> None:
    if not REFERENCE.exists():
        pytest.skip(f"{REFERENCE} not present")
    text = REFERENCE.read_text()
    start = text.index('{"DeviceInfo"')
    sample = text[start:text.index("\n", start)]
    (devices,) = from_ascend_device_info({"DeviceInfoCfg": sample}, "a3", topology="ascend910-8", chips=8)
    assert [c.id for c in devices.chips if c.health == "Unhealthy"] == [4]
    assert [c.id for c in devices.chips if c.health == "NetworkUnhealthy"] == [0]


# ------------------------------------------------------------------------------------------ properties

TOPOLOGIES = [("huawei.com/Ascend910", "ascend910-8", 8, (1, 2, 4, 8)),
              ("huawei.com/Ascend910", "ascend910b-16", 16, (1, 2, 3, 8, 10, 16)),
              ("huawei.com/Ascend310P", "ascend310p-duo", 8, (1, 2, 4)),
              ("cambricon.com/mlu", "mlu370-x8", 8, (1, 2, 3, 4, 8)),
              ("nvidia.com/gpu", "cube-mesh-8", 8, (1, 2, 3, 4, 8)),
              ("nvidia.com/gpu", "pcie-8", 8, (1, 2, 4))]


@st.composite
def device_clusters(draw: st.DrawFn) -> list[AnyObject]:
    objects: list[AnyObject] = []
    kinds = draw(st.lists(st.sampled_from(TOPOLOGIES), min_size=1, max_size=3, unique=True))
    for i in range(draw(st.integers(1, 6))):
        resource, topology, chips, _ = draw(st.sampled_from(kinds))
        bad = tuple(sorted(draw(st.sets(st.integers(0, chips - 1), max_size=3))))
        network = tuple(c for c in sorted(draw(st.sets(st.integers(0, chips - 1), max_size=3))) if c not in bad)
        objects.append(accel_node(f"n{i}", resource, topology, chips, unhealthy=bad, network=network))
    objects.append(node("cpu-only"))
    for j in range(draw(st.integers(1, 6))):
        resource, _, _, sizes = draw(st.sampled_from(kinds))
        size = draw(st.integers(1, 4))
        objects += gang(f"j{j}", size, min_member=draw(st.integers(1, size)), cpu="1",
                        limits={resource: draw(st.sampled_from(sizes))})
    return objects


def check_allocations(h: object) -> None:
    snapshot = h.scheduler.cache.snapshot()  # type: ignore[attr-defined]
    held: dict[tuple[str, str], int] = {}
    for pod in h.cluster.list("Pod"):  # type: ignore[attr-defined]
        if not pod.spec.nodeName:
            continue
        row = snapshot.nodes.index[pod.spec.nodeName]
        allocation = pod_allocation(pod.metadata.annotations)
        job_pods = sum(1 for p in h.cluster.list("Pod")  # type: ignore[attr-defined]
                       if p.metadata.annotations["scheduling.k8s.io/group-name"]
                       == pod.metadata.annotations["scheduling.k8s.io/group-name"])
        for resource, chips in allocation.items():
            devices = snapshot.devices[resource]
            mask = sum(1 << c for c in chips)
            assert len(chips) * 1000 == pod.spec.requests[resource]
            assert mask & int(devices.unhealthy[row]) == 0, "an unhealthy chip was chosen"
            if job_pods > 1:
                assert mask & int(devices.network[row]) == 0, "a network-unhealthy chip went to a multi-pod job"
            topology = devices.topology[row]
            policy = policy_for(topology, int(devices.chips[row]).bit_length(), PolicySettings())
            assert policy.legal(len(chips), job_pods > 1)
            assert mask & held.get((pod.spec.nodeName, resource), 0) == 0, "a chip was given twice"
            held[(pod.spec.nodeName, resource)] = held.get((pod.spec.nodeName, resource), 0) | mask


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=device_clusters())
def test_no_illegal_unhealthy_or_double_booked_chip_ever(objects: list[AnyObject]) -> None:
    h = harness(objects)
    for _ in range(3):
        h.cycle()
        check_allocations(h)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=device_clusters(), data=st.data())
def test_group_placement_with_devices_equals_one_pod_at_a_time(objects: list[AnyObject], data: st.DataObject) -> None:
    h = harness(objects)
    snapshot = h.scheduler.cache.snapshot()
    groups = [g for job in snapshot.jobs.values() for g in job.groups]
    group_index = data.draw(st.integers(0, len(groups) - 1))
    count = min(data.draw(st.integers(1, 8)), len(groups[group_index].pending))
    fast = place_group(Session(snapshot, h.scheduler.conf), groups[group_index], count).tolist()

    snapshot = h.scheduler.cache.snapshot()
    group = [g for job in snapshot.jobs.values() for g in job.groups][group_index]
    session = Session(snapshot, h.scheduler.conf)
    statement = Statement(session)
    slow: list[int] = []
    for _ in range(count):
        if not group.pending:
            break
        feasible = np.flatnonzero(capacity(session, group))
        if feasible.size == 0:
            break
        scores = [float(session.score(group, np.array([n]), np.array([0]))[0]) for n in feasible]
        best = int(feasible[int(np.argmax(scores))])
        slow.append(best)
        statement.allocate(group, np.array([best]))
    assert fast == slow[: len(fast)] and len(fast) == len(slow)


def test_pods_constrain_accelerator_models_by_annotation() -> None:
    v100 = accel_node("v100", "nvidia.com/gpu", "cube-mesh-8", labels={"hetsched.io/accelerator-model": "V100M32"})
    t4 = accel_node("t4", "nvidia.com/gpu", "pcie-8", labels={"hetsched.io/accelerator-model": "T4"})
    objects = [v100, t4, podgroup("train", 1), podgroup("p100", 1)]
    train = gang("train", 1, limits={"nvidia.com/gpu": 1})[1]
    objects.append(train.model_copy(update={"metadata": train.metadata.model_copy(update={"annotations": {
        **train.metadata.annotations, "hetsched.io/accelerator-models": "V100M16|V100M32"}})}))
    p100 = gang("p100", 1, limits={"nvidia.com/gpu": 1})[1]
    objects.append(p100.model_copy(update={"metadata": p100.metadata.model_copy(update={"annotations": {
        **p100.metadata.annotations, "hetsched.io/accelerator-models": "P100"}})}))
    h = harness(objects)
    h.cycle()
    assert allocations(h)["train-0"][0] == "v100"
    assert "p100-0" not in allocations(h)
    assert "didn't have an accepted accelerator model (P100)" in h.condition("p100")


def test_legality_is_judged_per_job_even_for_identical_pod_specs() -> None:
    conf = ("actions: allocate\ntiers:\n- plugins:\n  - name: gang\n  - name: predicates\n  - name: devicetopology\n"
            "    arguments: {ascend910.policy: ascend-volcano-compat}\n")
    objects = [accel_node("npu-0"), *gang("dist", 2, limits={ASCEND: 1}, cpu="1"),
               *gang("solo", 1, limits={ASCEND: 1}, cpu="1")]
    h = harness(objects, conf)
    result = h.cycle()
    assert [b.pod for b in result.decisions.binds] == ["default/solo-0"]
    assert "requires 8 chips per pod" in result.decisions.unschedulable["default/dist"].message


def test_same_shape_with_different_chip_counts() -> None:
    nodes = [accel_node("g4", "nvidia.com/gpu", "generic", 4), accel_node("g8", "nvidia.com/gpu", "generic", 8)]
    h = harness([*nodes, *gang("train", 3, limits={"nvidia.com/gpu": 4}, cpu="1")])
    h.cycle()
    placed = Counter(node for node, _ in allocations(h).values())
    assert placed == {"g8": 2, "g4": 1}


def test_fake_resources_raise_a_warning_event_once() -> None:
    h = harness([accel_node("liar", unhealthy=(3,), advertise=8)])
    h.cycle()
    h.cycle()
    warnings = [e for e in h.cluster.events if e.reason == "AllocatableMismatch"]
    assert len(warnings) == 1 and warnings[0].key == "liar" and warnings[0].type == "Warning"


def test_a_pod_chooses_its_own_mlu_link_policy() -> None:
    """Free MLUs 0, 2, 4, 6 (the others faulty): two of them share a bridge, so best-effort and guaranteed
    pods get two each, but no card pair is whole, so a pod asking ``restricted`` waits; an unknown policy is
    named in the reason."""
    mlu = "cambricon.com/mlu"
    h = harness([accel_node("mlu", mlu, "mlu370-x8", unhealthy=(1, 3, 5, 7))])
    for name, policy in (("restricted", "restricted"), ("default", ""), ("guaranteed", "guaranteed"),
                         ("typo", "strict")):
        annotations = {"hetsched.io/mlu-link-policy": policy} if policy else {}
        for obj in gang(name, 1, limits={mlu: 2}, cpu="1", annotations=annotations):
            h.cluster.create(obj)
            h.clock.advance_to(h.clock.now() + 1)
    h.cycle()
    placed = allocations(h)
    assert sorted(placed) == ["default-0", "guaranteed-0"]
    for _, chips in placed.values():
        assert len(chips[mlu]) == 2 and not set(chips[mlu]) & {1, 3, 5, 7}
    assert {c // 4 for c in placed["guaranteed-0"][1][mlu]} in ({0}, {1})  # inside one bridged quad
    assert "no free chip set that meets the device topology" in h.condition("restricted")
    assert "annotation hetsched.io/mlu-link-policy must be one of best-effort, guaranteed, restricted, " \
           "got 'strict'" in h.condition("typo")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("chips", [32, 48, 63, 64, 128])
def test_a_node_with_many_chips_schedules_every_chip_once(chips: int) -> None:
    """Issue 29: a 32-chip node built a 2^32-entry lookup table (a 32 GiB MemoryError inside the cycle) and
    chips 16 and up were never charged to the pods holding them. Now nodes up to 128 chips of a kind are
    answered per free mask on demand (past 63 chips with Python-integer masks): four-chip pods fill the
    node exactly, every chip given once, chips above 15 (and 63) included, and the next pod waits for room."""
    pods = chips // 4
    objects: list[AnyObject] = [accel_node("big", topology="generic", chips=chips, cpu="512"),
                                *gang("fill", pods, limits={ASCEND: 4}, cpu="1"), *gang("late", 1, limits={ASCEND: 4},
                                                                                        cpu="1")]
    h = harness(objects)
    h.cycle()
    h.cycle()
    given = allocations(h)
    held = [chip for name, (_, chosen) in given.items() if name.startswith("fill") for chip in chosen[ASCEND]]
    assert len(given) == pods and sorted(held) == list(range(4 * pods)), given
    assert "late-0" not in given  # no room left: it is not given a chip someone holds
    # the cache charged what the pods hold, ids above 15 included: the last pod freed lets "late" in
    h.cluster.delete("Pod", "default/fill-0")
    h.cycle()
    late = allocations(h).get("late-0")
    assert late is not None and sorted(late[1][ASCEND]) == sorted(given["fill-0"][1][ASCEND])


@pytest.mark.timeout(300)
def test_a_128_chip_node_beside_8_chip_servers_of_the_same_resource() -> None:
    """Issue 29: one resource with 8-chip HCCS servers and a 128-chip node (its masks wider than int64).
    Every pod gets legal, distinct, healthy chips on both shapes (the unhealthy chip 127 never, the network-
    unhealthy chip 64 never to a multi-pod gang), ``explain``, the chip map, the chip accounting and the
    metrics read the wide node, and a finished pod's chips (above 63 too) are free again."""
    from prometheus_client import generate_latest

    from hetsched.metrics.scheduler import SchedulerMetrics
    from hetsched.scheduler.contract.chips import ChipAccounts, chip_map
    from hetsched.scheduler.engine.why import explain_job

    big = accel_node("big", topology="generic", chips=128, cpu="512", unhealthy=(127,), network=(64,))
    objects: list[AnyObject] = [accel_node("n0"), accel_node("n1"), big,
                                *gang("ring", 2, limits={ASCEND: 4}, cpu="1"),
                                *gang("huge", 1, limits={ASCEND: 100}, cpu="1"),
                                *gang("wide", 4, limits={ASCEND: 6}, cpu="1"),
                                *gang("toomuch", 1, limits={ASCEND: 127}, cpu="1")]
    h = harness(objects)
    metrics = SchedulerMetrics()
    h.scheduler.observers.append(metrics)
    h.cycle()
    h.cycle()
    given = allocations(h)
    sizes = {"ring": 4, "huge": 100, "wide": 6}
    assert set(given) == {"ring-0", "ring-1", "huge-0", "wide-0", "wide-1", "wide-2", "wide-3"}, given
    per_node: dict[str, list[int]] = {}
    for name, (node_name, chosen) in given.items():
        chips = chosen[ASCEND]
        assert len(chips) == sizes[name.split("-")[0]] and 127 not in chips, (name, chips)
        assert not (node_name == "big" and name.startswith(("wide", "ring")) and 64 in chips), (name, chips)
        per_node.setdefault(node_name, []).extend(chips)
    for node_name, chips in per_node.items():
        assert len(chips) == len(set(chips)), (node_name, chips)  # no chip given twice
    assert given["huge-0"][0] == "big" and max(given["huge-0"][1][ASCEND]) > 63
    snapshot = h.scheduler.cache.snapshot()
    explanation = explain_job(snapshot, h.scheduler.conf, "default/toomuch", h.clock.now())
    assert any("Ascend910" in str(reason) for group in explanation.groups for _, reason in group.nodes)
    (resource, cells, _), = chip_map(snapshot, "big")
    assert resource == ASCEND and cells.count("#") == len(per_node["big"]) and cells.count("X") == 1
    table = next(t for t in ChipAccounts().tables(snapshot) if t.resource == ASCEND)
    at = table.nodes.index("big")
    assert (table.physical[at], table.healthy[at], table.held[at]) == (128, 127, len(per_node["big"]))
    exposition = generate_latest(metrics.registry).decode()
    assert 'hetsched_node_chips_physical{kind="ascend",model="generic",node="big"} 128.0' in exposition
    assert 'hetsched_node_chips_allocated{kind="ascend",model="generic",node="big"} 124.0' in exposition
    # the 100-chip pod ends: its chips (above 63 too) are free again, and the next 100-chip pod takes them
    h.cluster.delete("Pod", "default/huge-0")
    for obj in gang("again", 1, limits={ASCEND: 100}, cpu="1"):
        h.cluster.create(obj)
    h.cycle()
    again = allocations(h)["again-0"]
    assert again[0] == "big" and sorted(again[1][ASCEND]) == sorted(given["huge-0"][1][ASCEND])


@pytest.mark.timeout(300)
def test_numa_alignment_and_chip_shares_on_a_128_chip_node() -> None:
    """Issue 29: past chip 63 the per-chip paths work too — a NUMA-aligned pod's chips all come from the NUMA
    node its CPUs are pinned to (the upper half: chips 64–127), and fractional pods share chips above 63
    once the lower ones are held whole."""
    from tests.test_numaaware import CONF, GPU, POLICY

    milli = "hetsched.io/gpu-milli"
    wide = accel_node("wide", GPU, "generic", 128, cpu="64", numa_nodes=2, share=milli)
    objects: list[AnyObject] = [wide, *gang("low", 1, cpu="31", limits={GPU: 64}),
                                *gang("numa", 1, cpu="8", limits={GPU: 32}, annotations={POLICY: "single-numa-node"})]
    h = harness(objects, CONF)
    h.cycle()
    given = allocations(h)
    assert sorted(given["low-0"][1][GPU]) == list(range(64))
    numa_chips = given["numa-0"][1][GPU]
    assert len(numa_chips) == 32 and min(numa_chips) >= 64, numa_chips  # NUMA 1: chips 64–127
    for obj in gang("share", 3, limits={milli: 400}, cpu="1"):
        h.cluster.create(obj)
    h.cycle()
    shared = [allocations(h)[f"share-{i}"][1][GPU] for i in range(3)]
    assert all(len(c) == 1 and 64 <= c[0] < 128 and c[0] not in numa_chips for c in shared), shared
