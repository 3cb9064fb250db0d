"""A synthetic heterogeneous cluster and pending backlog for the engine benchmark.

Who calls it: ``benchmark.engine``. Deterministic for a seed. Shape (scaled with ``nodes``):
- nodes: 30 % Ascend 910 (8 chips), 20 % Cambricon MLU370 (8), 20 % NVIDIA A100 (8), 30 % CPU-only;
- jobs: gang sizes 1–128 (mean ≈ 17 pods), until ``pods`` pods exist; 20 % of jobs ask for 1/2/4/8 chips
  per pod of one accelerator kind (selected by the ``accelerator`` label), the rest are CPU-only; four
  queues of different weights; minAvailable = replicas (every job a gang);
- with ``network``: every pool in a 3-tier switch tree (16 servers per tier-1 HyperNode, 4 of those per
  tier-2, 8 per tier-3), and of the multi-pod accelerator jobs one in five each asks for ``hard`` tier 1,
  ``hard`` tier 2 or ``soft`` tier 1 (the rest unbounded).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hetsched.api.hypernodes import TIER_LABEL, discover
from hetsched.api.objects import HyperNode, Node, Pod, PodGroup, Queue
from hetsched.cluster.spec import parse_cluster_spec

ACCELERATORS = (
    ("ascend", "huawei-ascend", "huawei.com/Ascend910", 0.30),
    ("cambricon", "cambricon-mlu", "cambricon.com/mlu", 0.20),
    ("nvidia", "nvidia-gpu", "nvidia.com/gpu", 0.20),
)
MODELS = {"ascend": "Ascend910", "cambricon": "MLU370-X8", "nvidia": "V100-SXM2-32GB"}
"""Models whose server shapes carry topology: HCCS rings, MLU-Link, NVLink cube-mesh."""
GANG_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
GANG_WEIGHTS = (20, 15, 15, 15, 15, 10, 6, 4)
QUEUES = (("prod", 4), ("train", 3), ("dev", 2), ("batch", 1))


NETWORK_TIERS = ((1, 16), (2, 4), (3, 8))
"""(tier, units of the level below per HyperNode) of the benchmark's switch tree."""
NETWORK_BOUNDS = ({"mode": "hard", "highestTierAllowed": 1}, {"mode": "hard", "highestTierAllowed": 2},
                  {"mode": "soft", "highestTierAllowed": 1}, None, None)


@dataclass
class BenchWorkload:
    nodes: list[Node]
    queues: list[Queue]
    podgroups: list[PodGroup]
    pods: list[Pod]
    hypernodes: list[HyperNode] = field(default_factory=list)


def synthetic_cluster(nodes: int, topology: bool = False, network: bool = False) -> list[Node]:
    """Without ``topology`` nodes advertise chip counts only (no inventory); with it every accelerator node
    carries a chip inventory with its server shape, and one pool in ten has a dead chip (allocatable
    reflects it)."""
    pools = []
    assigned = 0
    for kind, label, _, share in ACCELERATORS:
        count = int(nodes * share)
        assigned += count
        degraded = count // 10 if topology else 0
        for name, size, unhealthy in ((kind, count - degraded, []), (f"{kind}-degraded", degraded, [7])):
            if size:
                pools.append({"name": name, "count": size, "namePrefix": f"{name}-", "labels": {"accelerator": label},
                              "cpu": "128", "memory": "1Ti", "pods": 110,
                              "accelerators": [{"kind": kind, "model": MODELS[kind], "count": 8,
                                                "unhealthy": unhealthy}]})
    pools.append({"name": "cpu", "count": nodes - assigned, "labels": {"accelerator": "none"}, "cpu": "96",
                  "memory": "384Gi", "pods": 110})
    if network:
        for pool in pools:
            pool["topology"] = [{"tier": tier, "size": size} for tier, size in NETWORK_TIERS]
    expanded = parse_cluster_spec({"pools": pools}, "<bench>").nodes()
    if topology:
        return expanded
    return [n.model_copy(update={"metadata": n.metadata.model_copy(update={"annotations": {}})}) for n in expanded]


def gang(name: str, size: int, queue: str, requests: dict[str, str], limits: dict[str, str],
         selector: dict[str, str], bound: dict[str, object] | None = None) -> tuple[PodGroup, list[Pod]]:
    """One job of the benchmarks: a PodGroup (minMember = ``size``, its minResources the pods' requests) and
    its ``size`` identical pods in namespace ``bench``."""
    template = Pod.model_validate({
        "metadata": {"name": f"{name}-0", "namespace": "bench",
                     "annotations": {"scheduling.k8s.io/group-name": name, "volcano.sh/task-spec": "worker"}},
        "spec": {"schedulerName": "volcano", "nodeSelector": selector,
                 "containers": [{"name": "main", "resources": {"requests": requests, "limits": limits}}]},
    })
    total = {k: v * size for k, v in template.spec.requests.items() if k != "pods"}
    spec: dict[str, object] = {"minMember": size, "queue": queue,
                               "minResources": {k: f"{v}m" for k, v in total.items()}}
    if bound is not None:
        spec["networkTopology"] = bound
    podgroup = PodGroup.model_validate({"metadata": {"name": name, "namespace": "bench"}, "spec": spec})
    pods = [template.model_copy(update={"metadata": template.metadata.model_copy(update={"name": f"{name}-{i}"})})
            for i in range(size)]
    return podgroup, pods


def synthetic_workload(nodes: int, pods: int, seed: int = 1, topology: bool = False,
                       network: bool = False) -> BenchWorkload:
    rng = random.Random(seed)
    cluster = synthetic_cluster(nodes, topology, network)
    bounds = random.Random(seed + 1)  # its own stream: without ``network`` the workload is what it always was
    queues = [Queue.model_validate({"metadata": {"name": n}, "spec": {"weight": w}}) for n, w in QUEUES]
    podgroups: list[PodGroup] = []
    all_pods: list[Pod] = []
    index = 0
    while len(all_pods) < pods:
        size = min(rng.choices(GANG_SIZES, GANG_WEIGHTS)[0], pods - len(all_pods))
        queue = rng.choice(QUEUES)[0]
        name = f"job-{index:05d}"
        index += 1
        if rng.random() < 0.2:
            _, label, resource, _ = rng.choice(ACCELERATORS)
            chips = rng.choice((1, 1, 1, 2, 2, 4, 8))
            limits = {resource: str(chips)}
            requests = {"cpu": str(2 * chips), "memory": f"{16 * chips}Gi"}
            selector = {"accelerator": label}
        else:
            limits = {}
            requests = {"cpu": str(rng.choice((1, 2, 4))), "memory": f"{rng.choice((2, 4, 8))}Gi"}
            selector = {}
        bound = bounds.choice(NETWORK_BOUNDS) if network and limits and size > 1 else None
        podgroup, members = gang(name, size, queue, requests, limits, selector, bound)
        podgroups.append(podgroup)
        all_pods.extend(members)
    made: list[HyperNode] = []
    if network:
        tiers = [tier for tier, _ in NETWORK_TIERS]
        made = discover(cluster, {tier: TIER_LABEL.format(tier=tier) for tier in tiers})
    return BenchWorkload(cluster, queues, podgroups, all_pods, made)
