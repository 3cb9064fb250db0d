"""``hetsched bench ascend``: ascend-volcano-compat vs ascend-hccs on a stream of mixed 1/2/4/8-chip jobs.

Who calls it: the CLI. Method: an Ascend 910 x8 cluster; jobs arrive one at a time in a seeded random order
until 130 % of the chips have been asked for (arrival only, nothing finishes, as in the FGD study); each
arrival gets one scheduling cycle with the full default configuration and the policy under test, and is
either placed whole or turned away. Measured per policy (mean and standard deviation over seeds):
jobs admitted, chips allocated at the end, chips *stranded* — free when the first job was turned away
although the cluster had at least as many free chips as it asked for (capacity lost to fragmentation) —
and the share of 4- and 8-chip jobs admitted. Job mix by count: single-pod jobs of 1 chip 40 %, 2 chips
25 %, 4 chips 20 %, 8 chips 15 %; one job in ten is instead distributed: 2 pods × 8 chips (legal under
both policies) or 4 pods × 1 chip / 2 pods × 2 chips (legal for ascend-hccs; Ascend-for-Volcano's rule
demands 8 chips per pod in a multi-pod job).
"""

from __future__ import annotations

import random
import statistics
from typing import Any

from hetsched.api.objects import Pod, PodGroup, Queue
from hetsched.cluster.memory import MemoryCluster
from hetsched.cluster.spec import parse_cluster_spec
from hetsched.ports import ManualClock
from hetsched.scheduler.defaults import DEFAULT_CONF_YAML, parse_conf
from hetsched.scheduler.engine.runner import Scheduler

ASCEND = "huawei.com/Ascend910"
SIZES = ((1, 40), (2, 25), (4, 20), (8, 15))
POLICIES = ("ascend-volcano-compat", "ascend-hccs")


def _jobs(nodes: int, seed: int, distributed_small: bool = True) -> list[tuple[int, int]]:
    """(pods, chips per pod) in arrival order until 130 % of the cluster's chips are asked for."""
    rng = random.Random(seed)
    budget = nodes * 8 * 1.3
    jobs: list[tuple[int, int]] = []
    asked = 0
    while asked < budget:
        if rng.random() < 0.1:
            shape = rng.choice([(2, 8), (4, 1), (2, 2)] if distributed_small else [(2, 8)])
        else:
            shape = (1, rng.choices([s for s, _ in SIZES], [w for _, w in SIZES])[0])
        jobs.append(shape)
        asked += shape[0] * shape[1]
    return jobs


def run_once(policy: str, nodes: int, seed: int) -> dict[str, float]:
    conf = parse_conf(DEFAULT_CONF_YAML.replace(
        "  - name: devicetopology\n",
        f"  - name: devicetopology\n    arguments: {{ascend910.policy: {policy}}}\n"))
    clock = ManualClock()
    cluster = MemoryCluster(clock)
    spec = parse_cluster_spec({"pools": [{"name": "ascend", "count": nodes, "cpu": "192", "memory": "1536Gi",
                                          "accelerators": [{"kind": "ascend", "model": "Ascend910", "count": 8}]}]})
    cluster.create(Queue.model_validate({"metadata": {"name": "default"}}))
    for node in spec.nodes():
        cluster.create(node)
    scheduler = Scheduler(cluster, cluster, cluster, clock, conf, evictor=cluster)
    admitted = 0
    offered = {4: 0, 8: 0}
    placed_by_size = {4: 0, 8: 0}
    stranded: float | None = None
    for index, (pods, chips) in enumerate(_jobs(nodes, seed)):
        name = f"job-{index:04d}"
        cluster.create(PodGroup.model_validate({"metadata": {"name": name}, "spec": {"minMember": pods},
                                                "status": {"phase": "Inqueue"}}))
        for i in range(pods):
            cluster.create(Pod.model_validate({
                "metadata": {"name": f"{name}-{i}", "annotations": {"scheduling.k8s.io/group-name": name}},
                "spec": {"schedulerName": "volcano", "containers": [
                    {"name": "main", "resources": {"requests": {"cpu": "1"}, "limits": {ASCEND: str(chips)}}}]}}))
        free_before = nodes * 8 - sum(v.get(ASCEND, 0.0) for v in scheduler.cache.used().values()) / 1000
        result = scheduler.run_once()
        placed = bool(result.decisions.binds)
        if chips in offered:
            offered[chips] += 1
            placed_by_size[chips] += placed
        if placed:
            admitted += 1
        else:  # turned away: withdraw it so it does not wait for capacity that never frees
            status = result.decisions.unschedulable.get(f"default/{name}")
            resolvable = status is not None and status.code.name != "UNSCHEDULABLE_AND_UNRESOLVABLE"
            if stranded is None and resolvable and free_before >= pods * chips:
                stranded = free_before
            for i in range(pods):
                cluster.delete("Pod", f"default/{name}-{i}")
            cluster.delete("PodGroup", f"default/{name}")
        clock.time += 1
    used = sum(v.get(ASCEND, 0.0) for v in scheduler.cache.used().values()) / 1000
    return {"jobs_admitted": admitted, "chips_allocated": used, "chips_stranded": stranded or 0.0,
            **{f"{size}_chip_admitted_pct": 100.0 * placed_by_size[size] / offered[size] if offered[size] else 100.0
               for size in (4, 8)}}


def run_ascend_benchmark(nodes: int, seeds: list[int]) -> dict[str, Any]:
    report: dict[str, Any] = {"nodes": nodes, "chips": nodes * 8, "seeds": seeds, "policies": {}}
    for policy in POLICIES:
        runs = [run_once(policy, nodes, seed) for seed in seeds]
        report["policies"][policy] = {
            metric: {"mean": statistics.fmean(r[metric] for r in runs),
                     "std": statistics.pstdev(r[metric] for r in runs)}
            for metric in runs[0]
        }
    return report
