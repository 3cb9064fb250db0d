"""Fractional device sharing: pods asking thousandths of one chip (``hetsched.io/gpu-milli``) share chips,
no chip ever exceeds 1000, shared and whole use never mix on a chip, and the tightest chip is filled first."""

from __future__ import annotations

import json
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsched.api.objects import AnyObject, Node, Pod
from hetsched.devices.inventory import pod_allocation
from tests.builders import accel_node, gang, harness

GPU = "nvidia.com/gpu"
MILLI = "hetsched.io/gpu-milli"


MEMORY = "hetsched.io/gpu-memory"


def gpu_node(name: str, chips: int = 2, chip_memory: int = 0) -> Node:
    return accel_node(name, GPU, "generic", chips, share=MILLI, chip_memory=chip_memory)


def chips_of(h: object) -> dict[str, tuple[str, list[int]]]:
    out = {}
    for pod in h.cluster.list("Pod"):  # type: ignore[attr-defined]
        if isinstance(pod, Pod) and pod.spec.nodeName:
            out[pod.metadata.name] = (pod.spec.nodeName, pod_allocation(pod.metadata.annotations).get(GPU, []))
    return out


def test_fractional_pods_share_a_chip_up_to_1000() -> None:
    objects = [gpu_node("g", chips=1)]
    for name, milli in (("a", 300), ("b", 300), ("c", 400), ("d", 100)):
        objects += gang(name, 1, limits={MILLI: milli}, cpu="1")
    h = harness(objects)
    h.cycle()
    placed = chips_of(h)
    assert sorted(placed) == ["a-0", "b-0", "c-0"]
    assert all(chips == [0] for _, chips in placed.values())
    assert "Insufficient hetsched.io/gpu-milli" in h.condition("d")


def test_whole_and_shared_use_never_mix_on_a_chip() -> None:
    objects = [gpu_node("g", chips=2), *gang("share", 1, limits={MILLI: 500}, cpu="1"),
               *gang("whole", 2, min_member=1, limits={GPU: 1}, cpu="1")]
    h = harness(objects)
    h.cycle()
    placed = chips_of(h)
    shared_chip = placed["share-0"][1][0]
    whole = [chips for name, (_, chips) in placed.items() if name.startswith("whole")]
    assert whole == [[1 - shared_chip]]  # the second whole-GPU pod finds no entirely free chip


def test_the_tightest_chip_is_filled_first() -> None:
    objects = [gpu_node("g", chips=2), *gang("big", 1, limits={MILLI: 600}, cpu="1")]
    h = harness(objects)
    h.cycle()
    for pod in gang("small", 1, limits={MILLI: 300}, cpu="1"):
        h.cluster.create(pod)
    h.cycle()
    placed = chips_of(h)
    assert placed["small-0"][1] == placed["big-0"][1]


def test_memory_shares_keep_pods_apart_when_a_chip_memory_is_spoken_for() -> None:
    """16 GiB chips: two 300-milli pods asking 10 GiB each cannot share a chip although the milli would fit;
    a third finds no chip; a memory ask without a share of the chip, or on chips that state no memory, is
    refused with a reason naming it."""
    objects: list[AnyObject] = [gpu_node("g", chips=2, chip_memory=16384)]
    for name in ("a", "b", "c"):
        objects += gang(name, 1, limits={MILLI: 300, MEMORY: 10240}, cpu="1")
    objects += gang("small", 1, limits={MILLI: 300, MEMORY: 4096}, cpu="1")
    objects += gang("nomilli", 1, limits={MEMORY: 1024}, cpu="1")
    h = harness(objects)
    h.cycle()
    placed = chips_of(h)
    assert {placed["a-0"][1][0], placed["b-0"][1][0]} == {0, 1}
    assert "c-0" not in placed
    assert "small-0" in placed  # 10 + 4 GiB fit in 16
    assert "needs a share of the chip (hetsched.io/gpu-milli)" in h.condition("nomilli")
    node = gpu_node("g2", chips=1)  # advertises memory shares but its inventory states no chip memory
    status = node.status.model_copy(update={"allocatable": {**node.status.allocatable, MEMORY: 1_000_000}})
    bare = harness([node.model_copy(update={"status": status}),
                    *gang("m", 1, limits={MILLI: 100, MEMORY: 1}, cpu="1")])
    bare.cycle()
    assert "didn't state the memory of their nvidia.com/gpu chips" in bare.condition("m")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(st.tuples(st.sampled_from(["share", "whole"]), st.integers(1, 1000), st.integers(1, 3),
                                   st.sampled_from([0, 0, 2048, 6000, 9000])),
                         min_size=1, max_size=8), nodes=st.integers(1, 3))
def test_no_shared_chip_ever_exceeds_1000_or_its_memory(requests: list[tuple[str, int, int, int]], nodes: int) -> None:
    objects: list[AnyObject] = [gpu_node(f"g{i}", chips=2, chip_memory=16384) for i in range(nodes)]
    for j, (kind, milli, size, memory) in enumerate(requests):
        limits = ({MILLI: milli, MEMORY: memory} if memory else {MILLI: milli}) if kind == "share" else {GPU: 1}
        objects += gang(f"j{j}", size, limits=limits, cpu="1")
    h = harness(objects)
    for _ in range(2):
        h.cycle()
    load: dict[tuple[str, int], int] = defaultdict(int)
    memory_load: dict[tuple[str, int], int] = defaultdict(int)
    whole: set[tuple[str, int]] = set()
    for pod in h.cluster.list("Pod"):
        if not pod.spec.nodeName:
            continue
        allocation = json.loads(pod.metadata.annotations["hetsched.io/allocation"])[GPU]
        share = pod.spec.requests.get(MILLI, 0) // 1000
        for chip in allocation:
            if share:
                load[(pod.spec.nodeName, chip)] += share
                memory_load[(pod.spec.nodeName, chip)] += pod.spec.requests.get(MEMORY, 0) // 1000
            else:
                assert (pod.spec.nodeName, chip) not in whole
                whole.add((pod.spec.nodeName, chip))
    assert all(v <= 1000 for v in load.values())
    assert all(v <= 16384 for v in memory_load.values())
    assert not set(load) & whole
