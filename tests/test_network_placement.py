"""Gangs with a ``networkTopology`` are placed inside one HyperNode (issue 20, placement): the lowest tier
that fits, the fullest HyperNode first (``network-topology-aware``, with its ``fading`` over the tiers above);
``hard`` never crosses its bound (and says how close it came), ``soft`` prefers one domain and falls back
to any; pods already running keep the job in their domain."""

from __future__ import annotations

from typing import Any

import pytest

from hetsched.api.objects import AnyObject, HyperNode, NetworkTopology, Pod, PodGroup
from hetsched.scheduler.defaults import DEFAULT_CONF_YAML, default_conf, parse_conf
from tests.builders import Harness, accel_node, gang, harness, priority_class, running_on

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
    from hetsched.scheduler.engine.runner import Scheduler
    from hetsched.sim.kernel import SimClock

    workload = synthetic_workload(320, 4000, seed=3, network=True)
    clock = SimClock()
    cluster = MemoryCluster(clock)
    scheduler = Scheduler(cluster, cluster, cluster, clock, default_conf())
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


WITHOUT_NETWORK_BINPACK = DEFAULT_CONF_YAML.replace("  - name: network-topology-aware\n", "")


def test_without_the_network_binpack_plugin_the_first_hypernode_that_fits_is_taken() -> None:
    """The same cluster as above without ``network-topology-aware``: leaf-a is first by name and fits, so the
    gang breaks the only whole ToR although leaf-b has room."""
    objects = [*busy("b1", "s1"), *bounded("one", 1, {"mode": "hard", "highestTierAllowed": 1})]
    h = harness([accel_node(f"s{i}") for i in range(4)] + objects, WITHOUT_NETWORK_BINPACK)
    for hypernode in (leaf("leaf-a", "s0", "s2"), leaf("leaf-b", "s1", "s3"), spine("spine", "leaf-a", "leaf-b")):
        h.cluster.create(hypernode)
    h.cycle()
    assert nodes_of(h, "one") == ["s0"]


def two_spines(*objects: AnyObject, conf: str | None = None) -> Harness:
    """8 servers, 4 ToRs of 2, 2 spines: spine-x = {tor-0: s0 s1, tor-1: s2 s3}, spine-y = {tor-2, tor-3}."""
    h = harness([accel_node(f"s{i}") for i in range(8)] + list(objects), conf)
    for t in range(4):
        h.cluster.create(leaf(f"tor-{t}", f"s{2 * t}", f"s{2 * t + 1}"))
    h.cluster.create(spine("spine-x", "tor-0", "tor-1"))
    h.cluster.create(spine("spine-y", "tor-2", "tor-3"))
    return h


def test_between_equally_full_tors_the_one_under_the_busier_spine_is_taken() -> None:
    """tor-0 and tor-2 hold one busy server each (equally full at tier 1); spine-y also holds a busy tor-3, so
    the gang goes under spine-y (its parent's fullness counts, ``fading`` times less) and spine-x keeps a
    whole ToR and a whole spine-half free."""
    h = two_spines(*busy("b0", "s0"), *busy("b4", "s4"), *busy("b6", "s6"),
                   *bounded("one", 1, {"mode": "hard", "highestTierAllowed": 1}))
    h.cycle()
    assert nodes_of(h, "one") in (["s5"], ["s7"])


def test_pods_without_a_bound_fill_the_busier_domains() -> None:
    """An unbounded one-pod job goes next to running work (the busier ToR) instead of opening an empty one;
    without the plugin the lowest index would win."""
    h = two_spines(*busy("b2", "s2"), *gang("free", 1, limits={CHIPS: 8}))
    h.cycle()
    assert nodes_of(h, "free") == ["s3"]
    off = "  - name: network-topology-aware\n    arguments: {hypernode.binpack.normal-pod.enable: false}\n"
    h = two_spines(*busy("b2", "s2"), *gang("free", 1, limits={CHIPS: 8}),
                   conf=WITHOUT_NETWORK_BINPACK + off)
    h.cycle()
    assert nodes_of(h, "free") == ["s0"]


@pytest.mark.parametrize(("arguments", "message"), [
    ({"hypernode.binpack.normal-pod.fading": 1.5}, "fading must be ≤ 1"),
    ({"hypernode.binpack.normal-pod.fading": "x"}, "fading must be a number"),
    ({"hypernode.binpack.resources.nvidia.com/gpu": 2}, "nvidia.com/gpu is not listed"),
    ({"hypernode.binpack.gpu": 1}, "unknown argument 'hypernode.binpack.gpu'"),
])
def test_bad_arguments_name_the_plugin_and_the_key(arguments: dict[str, Any], message: str) -> None:
    import json
    text = WITHOUT_NETWORK_BINPACK + f"  - name: network-topology-aware\n    arguments: {json.dumps(arguments)}\n"
    with pytest.raises(ValueError, match="network-topology-aware") as error:
        parse_conf(text)
    assert message in str(error.value)


def three_tors(*objects: AnyObject) -> Harness:
    """12 servers, three ToRs of 4 (tor-0: s0–s3, …), one busy server in each."""
    h = harness([accel_node(f"s{i}") for i in range(12)] + [o for t in range(3) for o in busy(f"b{t}", f"s{4 * t}")]
                + list(objects))
    for t in range(3):
        h.cluster.create(leaf(f"tor-{t}", *(f"s{4 * t + i}" for i in range(4))))
    return h


def test_explain_and_metrics_say_how_the_free_servers_are_split_over_the_tree() -> None:
    """9 free servers, 3+3+3 over three ToRs, and a hard tier-1 gang of 4 whole-server pods: explain says
    so and what would help; the metrics count the stranded servers per tier."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from hetsched.metrics.scheduler import SchedulerMetrics
    from hetsched.scheduler.engine.why import explain_job

    h = three_tors(*bounded("wide", 4, {"mode": "hard", "highestTierAllowed": 1}))
    metrics = SchedulerMetrics()
    h.scheduler.observers.append(metrics)
    h.cycle()
    assert nodes_of(h, "wide") == []
    explanation = explain_job(h.scheduler.cache.snapshot(), h.scheduler.conf, "default/wide", h.clock.now())
    said = " | ".join(explanation.scheduler_says)
    assert "9 free server(s), split 3+3+3 over 3 tier-1 HyperNode(s): the gang needs 4 in one" in said, said
    assert any("no tier-1 HyperNode has 4 free servers" in hint for hint in explanation.unblock), explanation.unblock
    samples = {(s.name, s.labels.get("tier")): s.value
               for f in text_string_to_metric_families(generate_latest(metrics.registry).decode()) for s in f.samples}
    assert samples[("hetsched_hypernode_free_servers", "1")] == 9
    assert samples[("hetsched_hypernode_fragmented_servers", "1")] == 9
    assert samples[("hetsched_hypernode_whole_free", "1")] == 0
    assert samples[("hetsched_hypernode_largest_waiting_servers", None)] == 4


def test_a_gang_that_fits_one_hypernode_strands_nothing() -> None:
    """The same cluster with a gang of 3: it fits a ToR, nothing is stranded, explain adds no blocker."""
    from hetsched.scheduler.contract import network_fragmentation

    h = three_tors(*bounded("small", 3, {"mode": "hard", "highestTierAllowed": 1}))
    snapshot = h.scheduler.cache.snapshot()
    tiers = network_fragmentation.by_tier(snapshot)
    assert [(t.tier, t.free, t.fragmented, t.needed, t.split()) for t in tiers] == [(1, 9, 0, 3, "3+3+3")]
    h.cycle()
    assert len(nodes_of(h, "small")) == 3
    after = network_fragmentation.by_tier(h.scheduler.cache.snapshot())
    assert (after[0].free, after[0].needed, after[0].split()) == (6, 0, "3+3")


def sharded(name: str, shards: int, size: int, bound: dict[str, Any], min_member: int | None = None) -> list[AnyObject]:
    """A gang of ``shards`` × ``size`` whole-server pods whose PodGroup bounds each shard (pods labelled
    ``volcano.sh/partition-id``) as a task's ``partitionPolicy`` makes the job controller write it."""
    from hetsched.api.objects import PARTITION_LABEL

    objects = gang(name, shards * size, min_member=min_member, limits={CHIPS: 8})
    group = objects[0]
    assert isinstance(group, PodGroup)
    policy = {"name": "worker", "subGroupSize": size, "matchLabelKeys": [PARTITION_LABEL], "networkTopology": bound}
    objects[0] = group.model_validate({**group.model_dump(), "spec": {**group.spec.model_dump(exclude_none=True),
                                                                      "subGroupPolicy": [policy]}})
    for i, pod in enumerate(objects[1:], start=1):
        assert isinstance(pod, Pod)
        objects[i] = pod.model_copy(update={"metadata": pod.metadata.model_copy(update={
            "labels": {**pod.metadata.labels, PARTITION_LABEL: str((i - 1) // size)}})})
    return objects


def shard_nodes(h: Harness, job: str, size: int) -> list[list[str]]:
    placed = {pod: node for pod, node in h.bindings().items() if pod.startswith(f"{job}-")}
    shards: dict[int, list[str]] = {}
    for pod, node in placed.items():
        shards.setdefault(int(pod.rsplit("-", 1)[1]) // size, []).append(node)
    return [sorted(nodes) for _, nodes in sorted(shards.items())]


def test_each_shard_of_a_job_lands_in_one_tor_while_the_job_spans_several() -> None:
    """s0 and s2 are busy, so tor-0 and tor-1 have one free server each: by index the 4 pods would take s1,
    s3, s4, s5 — two shards across ToRs. Bounded per shard (tier 1), each shard takes a whole ToR."""
    h = two_spines(*busy("b0", "s0"), *busy("b2", "s2"), *sharded("tp", 2, 2, {"mode": "hard",
                                                                              "highestTierAllowed": 1}))
    h.cycle()
    shards = shard_nodes(h, "tp", 2)
    assert sorted(map(tuple, shards)) == [("s4", "s5"), ("s6", "s7")], shards


def test_a_shard_without_a_whole_domain_holds_back_the_gang_and_says_which() -> None:
    h = two_spines(*busy("b0", "s0"), *busy("b2", "s2"), *busy("b4", "s4"),
                   *sharded("tp", 2, 2, {"mode": "hard", "highestTierAllowed": 1}))
    h.cycle()
    assert shard_nodes(h, "tp", 2) == []  # shard 0 fits tor-3, shard 1 nowhere: no half-placed job
    assert "sub-group worker/1: no HyperNode of tier ≤ 1 has room for its 2 pod(s): the best takes 1" in (
        h.condition("tp")), h.condition("tp")


def test_a_gang_of_fewer_shards_than_it_has_binds_the_shards_that_fit() -> None:
    """minMember 2 (one shard of two, as minPartitions: 1 gives): the shard that fits a ToR binds."""
    h = two_spines(*busy("b0", "s0"), *busy("b2", "s2"), *busy("b4", "s4"),
                   *sharded("tp", 2, 2, {"mode": "hard", "highestTierAllowed": 1}, min_member=2))
    h.cycle()
    assert shard_nodes(h, "tp", 2) == [["s6", "s7"]]


def test_a_job_with_a_partition_policy_is_sharded_by_the_controller_and_the_scheduler() -> None:
    """The whole path: a Volcano Job with ``partitionPolicy`` → the job controller labels each pod with its
    partition and writes the PodGroup's ``subGroupPolicy`` → each partition lands in one ToR, and the job
    (bounded to tier 2) in one spine."""
    from hetsched.api.manifest import load_text
    from hetsched.api.objects import PARTITION_LABEL
    from hetsched.controllers.job import JobController

    (job,) = load_text("""
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: llm, namespace: default}
spec:
  minAvailable: 4
  schedulerName: hetsched
  networkTopology: {mode: hard, highestTierAllowed: 2}
  tasks:
  - name: worker
    replicas: 4
    partitionPolicy:
      totalPartitions: 2
      partitionSize: 2
      networkTopology: {mode: hard, highestTierAllowed: 1}
    template:
      spec:
        containers: [{name: w, resources: {limits: {huawei.com/Ascend910: 8}}}]
""")
    h = two_spines(*busy("b0", "s0"))  # spine-x has 3 free servers: the job goes under spine-y
    h.cluster.create(job)
    controller = JobController(h.cluster, h.clock)
    for _ in range(3):
        controller.process()
        h.cycle()
    group = h.cluster.get("PodGroup", "default/llm")
    assert isinstance(group, PodGroup) and group.spec.subGroupPolicy is not None
    (policy,) = group.spec.subGroupPolicy
    assert (policy.name, policy.subGroupSize, policy.matchLabelKeys) == ("worker", 2, [PARTITION_LABEL])
    labels = {p.metadata.name: p.metadata.labels[PARTITION_LABEL] for p in h.cluster.list("Pod")
              if isinstance(p, Pod) and p.metadata.name.startswith("llm-")}
    assert labels == {"llm-worker-0": "0", "llm-worker-1": "0", "llm-worker-2": "1", "llm-worker-3": "1"}
    placed = {pod: node for pod, node in h.bindings().items() if pod.startswith("llm-")}
    assert sorted(placed.values()) == ["s4", "s5", "s6", "s7"], placed
    assert {placed["llm-worker-0"], placed["llm-worker-1"]} in ({"s4", "s5"}, {"s6", "s7"})


def test_a_bounded_gang_preempts_only_inside_one_hypernode() -> None:
    """Three ToRs of 2 (tor-a: s0 s1, tor-b: s2 s3, tor-c: s4 s5), every server busy with lower-priority
    work: gang V (priority 1) has one pod in tor-a and one in tor-b, W (3) and X (3) fill the rest of those,
    Y and Z (priority 5) fill tor-c. A hard tier-1 gang of 2 (priority 10) must take a whole ToR. By cost
    alone V then W would go — V's pod in tor-b evicted for nothing; bounded to one HyperNode, only Y and Z
    (both inside tor-c) are evicted."""
    from tests.test_preemption import CONF, evicted, pods_of, running

    objects: list[AnyObject] = [priority_class(name, value) for name, value in (("p1", 1), ("p3", 3), ("p5", 5),
                                                                                ("p10", 10))]
    objects += [accel_node(f"s{i}") for i in range(6)]
    objects += running("v", ["s0", "s2"], min_member=2, klass="p1")
    objects += running("w", ["s1"], min_member=1, klass="p3") + running("x", ["s3"], min_member=1, klass="p3")
    objects += running("y", ["s4"], min_member=1, klass="p5") + running("z", ["s5"], min_member=1, klass="p5")
    preemptor = gang("tight", 2, limits={CHIPS: 8}, cpu="1", priority_class="p10")
    group = preemptor[0]
    assert isinstance(group, PodGroup)
    preemptor[0] = group.model_copy(update={"spec": group.spec.model_copy(update={
        "networkTopology": NetworkTopology(mode="hard", highestTierAllowed=1)})})
    h = harness(objects + preemptor, CONF)
    for name, servers in (("tor-a", ("s0", "s1")), ("tor-b", ("s2", "s3")), ("tor-c", ("s4", "s5"))):
        h.cluster.create(leaf(name, *servers))
    for _ in range(3):
        h.cycle()
    assert evicted(h) == ["y-0", "z-0"], evicted(h)
    assert sorted(pods_of(h, "tight").values()) == ["s4", "s5"]
    assert sorted(pods_of(h, "v").values()) == ["s0", "s2"]


def test_a_bounded_gang_evicts_nothing_when_no_hypernode_can_be_freed_whole() -> None:
    """Only V (whole, across tor-a and tor-b), W and X are lower priority; Y and Z are not. No ToR can be
    freed by evictions inside it alone, so nothing is evicted (a topology-blind plan would take V and W)."""
    from tests.test_preemption import CONF, evicted, running

    objects: list[AnyObject] = [priority_class(name, value) for name, value in (("p1", 1), ("p3", 3), ("p20", 20),
                                                                                ("p10", 10))]
    objects += [accel_node(f"s{i}") for i in range(6)]
    objects += running("v", ["s0", "s2"], min_member=2, klass="p1")
    objects += running("w", ["s1"], min_member=1, klass="p3") + running("x", ["s3"], min_member=1, klass="p3")
    objects += running("y", ["s4"], min_member=1, klass="p20") + running("z", ["s5"], min_member=1, klass="p20")
    preemptor = gang("tight", 2, limits={CHIPS: 8}, cpu="1", priority_class="p10")
    group = preemptor[0]
    assert isinstance(group, PodGroup)
    preemptor[0] = group.model_copy(update={"spec": group.spec.model_copy(update={
        "networkTopology": NetworkTopology(mode="hard", highestTierAllowed=1)})})
    h = harness(objects + preemptor, CONF)
    for name, servers in (("tor-a", ("s0", "s1")), ("tor-b", ("s2", "s3")), ("tor-c", ("s4", "s5"))):
        h.cluster.create(leaf(name, *servers))
    for _ in range(3):
        h.cycle()
    assert evicted(h) == []


def test_reclaim_for_a_bounded_gang_takes_back_inside_one_hypernode() -> None:
    """Queue a borrowed all four servers (an elastic gang, min 1); queue b's gang of 2 must sit in one ToR
    (tor-a: s0 s2, tor-b: s1 s3). Reclaim takes back two pods inside one ToR — the newest such pair (s1,
    s3) — and b's gang runs there."""
    from tests.test_preemption import CONF, classes, evicted, pods_of, queue, running

    objects: list[AnyObject] = [*classes(), queue("a"), queue("b"), *(accel_node(f"s{i}") for i in range(4)),
                                *running("borrower", [f"s{i}" for i in range(4)], min_member=1, queue_name="a")]
    owner = gang("owner", 2, limits={CHIPS: 8}, cpu="1", priority_class="low", queue="b")
    group = owner[0]
    assert isinstance(group, PodGroup)
    owner[0] = group.model_copy(update={"spec": group.spec.model_copy(update={
        "networkTopology": NetworkTopology(mode="hard", highestTierAllowed=1)})})
    h = harness(objects + owner, CONF)
    for hypernode in (leaf("tor-a", "s0", "s2"), leaf("tor-b", "s1", "s3")):
        h.cluster.create(hypernode)
    for _ in range(3):
        h.cycle()
    assert evicted(h) == ["borrower-1", "borrower-3"], evicted(h)
    assert sorted(pods_of(h, "owner").values()) == ["s1", "s3"]
