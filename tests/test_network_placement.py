"""Gangs with a ``networkTopology`` are placed inside one HyperNode (issue 20, placement): the lowest tier
that fits, the fullest HyperNode first; ``hard`` never crosses its bound (and says how close it came),
``soft`` prefers one domain and falls back to any; pods already running keep the job in their domain."""

from __future__ import annotations

from typing import Any

from hetsched.api.objects import AnyObject, HyperNode, NetworkTopology, Pod, PodGroup
from tests.builders import Harness, accel_node, gang, harness, running_on

CHIPS = "huawei.com/Ascend910"


def leaf(name: str, *servers: str) -> HyperNode:
    return HyperNode.model_validate({"metadata": {"name": name}, "spec": {"tier": 1, "members": [
        {"type": "Node", "selector": {"exactMatch": {"name": s}}} for s in servers]}})


def spine(name: str, *leaves: str) -> HyperNode:
    return HyperNode.model_validate({"metadata": {"name": name}, "spec": {"tier": 2, "tierName": "spine", "members": [
        {"type": "HyperNode", "selector": {"exactMatch": {"name": n}}} for n in leaves]}})


def bounded(name: str, size: int, topology: dict[str, Any] | None, chips: int = 8) -> list[AnyObject]:
    objects = gang(name, size, limits={CHIPS: chips})
    group = objects[0]
    assert isinstance(group, PodGroup)
    if topology is not None:
        bound = NetworkTopology.model_validate(topology)
        objects[0] = group.model_copy(update={"spec": group.spec.model_copy(update={"networkTopology": bound})})
    return objects


def busy(name: str, node: str) -> list[AnyObject]:
    """A running 8-chip pod of its own one-pod gang on ``node``."""
    objects = gang(name, 1, limits={CHIPS: 8})
    pod = objects[1]
    assert isinstance(pod, Pod)
    objects[1] = running_on(pod, node)
    return objects


def fabric(*objects: AnyObject) -> Harness:
    """4 servers interleaved over two ToRs (leaf-a: s0, s2; leaf-b: s1, s3) under one spine: placement by index
    alone would put a 2-server gang on s0 and s1, across the spine."""
    h = harness([accel_node(f"s{i}") for i in range(4)] + list(objects))
    for hypernode in (leaf("leaf-a", "s0", "s2"), leaf("leaf-b", "s1", "s3"), spine("spine", "leaf-a", "leaf-b")):
        h.cluster.create(hypernode)
    return h


def nodes_of(h: Harness, job: str) -> list[str]:
    return sorted(node for pod, node in h.bindings().items() if pod.startswith(f"{job}-"))


def test_without_a_bound_a_gang_spreads_by_index_across_the_spine() -> None:
    h = fabric(*bounded("free", 2, None))
    h.cycle()
    assert nodes_of(h, "free") == ["s0", "s1"]  # the baseline the bound changes


def test_a_hard_tier_1_gang_lands_inside_one_tor() -> None:
    h = fabric(*bounded("tight", 2, {"mode": "hard", "highestTierAllowed": 1}))
    h.cycle()
    assert nodes_of(h, "tight") in (["s0", "s2"], ["s1", "s3"])


def test_hard_never_crosses_its_bound_and_says_how_close_it_came() -> None:
    h = fabric(*busy("b0", "s0"), *busy("b1", "s1"), *bounded("tight", 2, {"mode": "hard", "highestTierAllowed": 1}))
    h.cycle()
    assert nodes_of(h, "tight") == []
    assert ("no HyperNode of tier ≤ 1 has room for the gang's 2 pod(s): the best takes 1"
            in h.condition("tight")), h.condition("tight")


def test_a_tier_named_by_tier_name_allows_the_spine() -> None:
    h = fabric(*busy("b0", "s0"), *busy("b1", "s1"), *bounded("wide", 2, {"mode": "hard", "highestTierName": "spine"}))
    h.cycle()
    assert nodes_of(h, "wide") == ["s2", "s3"]


def test_the_fullest_hypernode_that_fits_is_chosen_so_whole_domains_stay_free() -> None:
    h = fabric(*busy("b1", "s1"), *bounded("one", 1, {"mode": "hard", "highestTierAllowed": 1}))
    h.cycle()
    assert nodes_of(h, "one") == ["s3"]  # leaf-b already holds b1: leaf-a stays whole


def test_soft_prefers_one_domain_and_falls_back_to_any() -> None:
    h = fabric(*bounded("soft", 2, {"mode": "soft", "highestTierAllowed": 1}))
    h.cycle()
    assert nodes_of(h, "soft") in (["s0", "s2"], ["s1", "s3"])
    crowded = fabric(*busy("b0", "s0"), *busy("b1", "s1"), *bounded("soft", 2, {"mode": "soft",
                                                                                 "highestTierAllowed": 1}))
    crowded.cycle()
    assert nodes_of(crowded, "soft") == ["s2", "s3"]  # no ToR can take it: placed anyway


def test_a_hard_bound_without_any_hypernode_is_unschedulable_not_ignored() -> None:
    h = harness([accel_node("s0"), accel_node("s1"), *bounded("tight", 2, {"mode": "hard", "highestTierAllowed": 1})])
    h.cycle()
    assert nodes_of(h, "tight") == []
    assert "must stay within one HyperNode of tier ≤ 1, and the cluster has none" in h.condition("tight")


def test_a_job_with_a_pod_running_stays_in_that_pods_domain() -> None:
    """One of two pods runs on s0 (leaf-a); its replacement goes to s2, in leaf-a, although leaf-b is empty."""
    objects = bounded("half", 2, {"mode": "hard", "highestTierAllowed": 1})
    running = objects[1]
    assert isinstance(running, Pod)
    objects[1] = running_on(running, "s0")
    h = fabric(*objects)
    h.cycle()
    assert nodes_of(h, "half") == ["s0", "s2"]


def test_every_hard_bounded_gang_of_a_busy_cluster_stays_inside_its_bound() -> None:
    """The engine benchmark's workload at 320 servers in a 3-tier tree: every hard-bounded gang that was
    placed sits inside one HyperNode of its tier, and most of them were placed."""
    from hetsched.api.hypernodes import build
    from hetsched.benchmark.workload import synthetic_workload
    from hetsched.cluster.memory import MemoryCluster
    from hetsched.scheduler.runner import Scheduler
    from hetsched.sim.kernel import SimClock

    workload = synthetic_workload(320, 4000, seed=3, network=True)
    clock = SimClock()
    cluster = MemoryCluster(clock)
    scheduler = Scheduler(cluster, cluster, cluster, clock)
    for obj in [*workload.nodes, *workload.hypernodes, *workload.queues, *workload.podgroups, *workload.pods]:
        cluster.create(obj)
    for _ in range(6):
        scheduler.run_once()
    topology, problems = build(workload.hypernodes, workload.nodes)
    assert problems == []
    placed: dict[str, set[str]] = {}
    for pod in cluster.list("Pod"):
        assert isinstance(pod, Pod)
        if pod.spec.nodeName:
            placed.setdefault(pod.metadata.annotations["scheduling.k8s.io/group-name"], set()).add(pod.spec.nodeName)
    hard = [g for g in workload.podgroups if g.spec.networkTopology is not None
            and g.spec.networkTopology.mode == "hard"]
    assert len(hard) >= 10
    ran = 0
    for group in hard:
        nodes = placed.get(group.metadata.name, set())
        if not nodes:
            continue
        ran += 1
        tier = group.spec.networkTopology.highestTierAllowed  # type: ignore[union-attr]
        assert len({topology.domain[tier][n] for n in nodes}) == 1, (group.metadata.name, tier, sorted(nodes))
    assert ran >= len(hard) // 2, (ran, len(hard))
