"""The ``fgd`` scheduler plugin on the openb trace, in the simulator: ``hetsched bench fgd``.

Who calls it: the CLI and its test. The openb replay (``replay.engine``) judges placement rules one pod at a
time with the published harness; this runs the *scheduler* — the embedded cluster, the configured plugins,
cycles over a queue — on the same workload, so the rule the replay chose is checked where it is used. The
plugin's typical pods are the shapes queued in a session, so pods arrive in batches (``batch`` per cycle).

Method: a random subset of the trace's GPU nodes (``nodes``), each a node of its model with its GPUs shared
(``hetsched.io/gpu-milli``) and labelled with its model; the pod list tuned to 130 % of their GPUs as the
replay does (``replay.engine.tune``, the same seed), each pod one single-pod job (GPU-model constraints as
node affinity). Batches are created and scheduled (cycles until nothing more binds) until the GPU demand
that arrived reaches the nodes' GPUs; the figure is the share of GPU milli then left unallocated. Each
configuration runs the same nodes and stream per seed: the default plugins without ``fgd``, and with
``fgd`` as configured by default (every queued shape at its frequency), at ``fgd.common: 1`` (the published
cut) and at ``fgd.common: 0.5`` (the replay's ``fgd-adaptive``: the blend while chips run out first).
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from hetsched.api.objects import Pod, PodGroup, Queue
from hetsched.cluster.memory import MemoryCluster
from hetsched.cluster.spec import parse_cluster_spec
from hetsched.ports import ManualClock
from hetsched.replay.engine import FULL, tune
from hetsched.replay.openb import TraceNode, TracePod
from hetsched.scheduler.defaults import DEFAULT_CONF_YAML, parse_conf
from hetsched.scheduler.engine.runner import Scheduler

GPU = "nvidia.com/gpu"
MILLI = "hetsched.io/gpu-milli"
MODEL_LABEL = "hetsched.io/gpu-model"
CONFS = {
    "no fgd": DEFAULT_CONF_YAML,
    "fgd (default: full distribution)": DEFAULT_CONF_YAML + "  - name: fgd\n",
    "fgd.common 1 (published cut)": DEFAULT_CONF_YAML + "  - name: fgd\n    arguments:\n      fgd.common: 1\n",
    "fgd.common 0.5 (fgd-adaptive)": DEFAULT_CONF_YAML + "  - name: fgd\n    arguments:\n      fgd.common: 0.5\n",
}
BASE = "fgd (default: full distribution)"
MAX_NODES = 1213
MAX_SEEDS = 20


def cluster_nodes(nodes: list[TraceNode]) -> list[Any]:
    """The trace's nodes as hetsched nodes: one pool each, GPUs shared, the model as a label."""
    pools = []
    for index, node in enumerate(nodes):
        pool: dict[str, Any] = {"name": f"n{index:04d}", "count": 1, "cpu": f"{node.cpu_milli}m",
                                "memory": f"{node.memory_mib}Mi", "labels": {MODEL_LABEL: node.model or "none"}}
        if node.gpus:
            pool["accelerators"] = [{"kind": "nvidia", "model": node.model, "count": node.gpus, "shareable": True}]
        pools.append(pool)
    return parse_cluster_spec({"pools": pools}, "<openb>").nodes()


def job_objects(index: int, pod: TracePod) -> list[Any]:
    """One single-pod job asking what ``pod`` asks: its PodGroup and its pod."""
    limits: dict[str, str] = {}
    if pod.num_gpu and pod.gpu_milli >= FULL:
        limits[GPU] = str(pod.num_gpu)
    elif pod.num_gpu:
        limits[MILLI] = str(pod.gpu_milli)
    name = f"p{index:05d}"
    spec: dict[str, Any] = {"schedulerName": "volcano", "containers": [{"name": "main", "resources": {
        "requests": {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"}, "limits": limits}}]}
    if pod.gpu_spec:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": MODEL_LABEL, "operator": "In", "values": list(pod.gpu_spec)}]}]}}}
    group = PodGroup.model_validate({"metadata": {"name": name, "namespace": "bench"},
                                     "spec": {"minMember": 1, "queue": "default"}})
    made = Pod.model_validate({"metadata": {"name": f"{name}-0", "namespace": "bench", "annotations": {
        "scheduling.k8s.io/group-name": name, "volcano.sh/task-spec": "worker"}}, "spec": spec})
    return [group, made]


def run_one(nodes: list[TraceNode], pods: list[TracePod], conf: str, seed: int, batch: int) -> float:
    """Unallocated GPU % when the arrived GPU demand reaches the nodes' GPUs, for one configuration."""
    rng = random.Random(seed)
    capacity = sum(n.gpus for n in nodes) * FULL
    stream = tune(pods, capacity, 1.3, rng)
    clock = ManualClock()
    cluster = MemoryCluster(clock)
    scheduler = Scheduler(cluster, cluster, cluster, clock, parse_conf(conf))
    cluster.create(Queue.model_validate({"metadata": {"name": "default"}, "spec": {"weight": 1}}))
    for node in cluster_nodes(nodes):
        cluster.create(node)
    arrived = 0
    demand: dict[str, int] = {}
    index = 0
    while arrived < capacity and index < len(stream):
        for pod in stream[index:index + batch]:
            for obj in job_objects(index, pod):
                cluster.create(obj)
            demand[f"bench/p{index:05d}-0"] = pod.gpu_request
            arrived += pod.gpu_request
            index += 1
        clock.time += 1.0
        while True:
            result = scheduler.run_once()
            if not result.decisions.binds:
                break
    allocated = sum(demand.get(f"{p.metadata.namespace}/{p.metadata.name}", 0)
                    for p in cluster.list("Pod") if isinstance(p, Pod) and p.spec.nodeName)
    return 100.0 * (1.0 - allocated / capacity)


def check_fgd_sizes(nodes: int, seeds: list[int], batch: int) -> None:
    if not 2 <= nodes <= MAX_NODES:
        raise ValueError(f"bench fgd: --nodes must be between 2 and {MAX_NODES}, not {nodes}")
    if not 1 <= len(seeds) <= MAX_SEEDS:
        raise ValueError(f"bench fgd: --seeds must name 1 to {MAX_SEEDS} seeds, not {len(seeds)}")
    if not 1 <= batch <= 1000:
        raise ValueError(f"bench fgd: --batch must be between 1 and 1000, not {batch}")


def run_fgd_benchmark(all_nodes: list[TraceNode], pods: list[TracePod], nodes: int, seeds: list[int],
                      batch: int = 50) -> dict[str, Any]:
    check_fgd_sizes(nodes, seeds, batch)
    started = time.perf_counter()
    gpu_nodes = [n for n in all_nodes if n.gpus]
    if len(gpu_nodes) < nodes:
        raise ValueError(f"bench fgd: --nodes {nodes}, but the node list has {len(gpu_nodes)} GPU nodes")
    per_seed: dict[str, dict[int, float]] = {name: {} for name in CONFS}
    for seed in seeds:
        subset = random.Random(f"nodes/{seed}").sample(gpu_nodes, nodes)
        for name, conf in CONFS.items():
            per_seed[name][seed] = run_one(subset, pods, conf, seed, batch)
    base = per_seed[BASE]
    figures: dict[str, Any] = {}
    for name, values in per_seed.items():
        diffs = [values[s] - base[s] for s in seeds]
        figures[name] = {"mean": round(statistics.fmean(values.values()), 3),
                         "std": round(statistics.pstdev(values.values()), 3),
                         "mean_diff_vs_default": round(statistics.fmean(diffs), 3),
                         "wins_vs_default": sum(d < 0 for d in diffs),
                         "losses_vs_default": sum(d > 0 for d in diffs),
                         "per_seed": {s: round(v, 3) for s, v in values.items()}}
    return {"nodes": nodes, "seeds": seeds, "batch": batch, "unallocated_gpu_pct_at_100": figures,
            "seconds": round(time.perf_counter() - started, 1)}
