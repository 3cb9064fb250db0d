"""The built-in demo scenario: the seed articles' workloads plus a background mix of gangs across queues,
on the mixed example cluster (Ascend 910, Cambricon MLU370, NVIDIA A100 and CPU pools).

Who calls it: ``hetsched demo`` and the end-to-end test. The background is generated from a seed, so a
given seed always gives the same scenario; ``hetsched demo --export DIR`` writes it out as YAML that
``hetsched simulate`` reads back.
"""

from __future__ import annotations

import random
from importlib import resources
from typing import Any

import yaml

from hetsched.api.manifest import load_text
from hetsched.api.objects import AnyObject, Node
from hetsched.cluster.spec import ClusterSpec, parse_cluster_spec

QUEUES = (("training", 3), ("inference", 2), ("research", 1))


def _example(path: str) -> str:
    return resources.files("hetsched").joinpath("examples", path).read_text(encoding="utf-8")


def demo_cluster() -> ClusterSpec:
    return parse_cluster_spec(yaml.safe_load(_example("clusters/mixed.yaml")), "examples/clusters/mixed.yaml")


def seed_workloads() -> list[AnyObject]:
    return load_text(_example("workloads/seeds.yaml"), "examples/workloads/seeds.yaml")


def _job(name: str, queue: str, submit: float, tasks: list[dict[str, Any]], min_available: int,
         priority: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"minAvailable": min_available, "schedulerName": "volcano", "queue": queue,
                            "tasks": tasks}
    if priority:
        spec["priorityClassName"] = priority
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "annotations": {"hetsched.io/submit-at": f"{submit:.0f}"}}, "spec": spec}


def _task(name: str, replicas: int, duration: float, selector: dict[str, str], limits: dict[str, str],
          requests: dict[str, str]) -> dict[str, Any]:
    resources_: dict[str, Any] = {"requests": requests}
    if limits:
        resources_["limits"] = limits
    return {"name": name, "replicas": replicas, "template": {
        "metadata": {"annotations": {"hetsched.io/duration": f"{duration:.0f}"}},
        "spec": {"nodeSelector": selector, "containers": [{"name": name, "image": f"{name}:latest",
                                                           "resources": resources_}]}}}


def background_documents(seed: int = 7, jobs: int = 60, horizon: float = 3600.0) -> list[dict[str, Any]]:
    """Queues, priority classes and ``jobs`` gangs arriving over ``horizon`` seconds."""
    rng = random.Random(seed)
    docs: list[dict[str, Any]] = [
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
         "spec": {"weight": weight, "reclaimable": True}} for name, weight in QUEUES
    ]
    docs += [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"},
         "value": 1000},
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "low"},
         "value": 10},
    ]
    for index in range(jobs):
        submit = rng.uniform(0, horizon)
        kind = rng.choices(["ascend", "mlu", "gpu", "cpu"], weights=[4, 3, 3, 2])[0]
        duration = rng.uniform(300, 2400)
        priority = rng.choice(["", "high", "low"])
        if kind == "ascend":
            chips = rng.choice([1, 2, 4, 8])
            replicas = rng.choice([1, 2, 4]) if chips == 8 else rng.choice([1, 2])
            task = _task("worker", replicas, duration, {"accelerator": "huawei-ascend"},
                         {"huawei.com/Ascend910": str(chips)}, {"cpu": str(8 * chips), "memory": f"{64 * chips}Gi"})
            docs.append(_job(f"ascend-train-{index:03d}", "training", submit, [task], replicas, priority))
        elif kind == "mlu":
            replicas = rng.randint(1, 6)
            task = _task("server", replicas, duration, {"accelerator": "cambricon-mlu"},
                         {"cambricon.com/mlu": str(rng.choice([1, 1, 2]))}, {"cpu": "4", "memory": "16Gi"})
            docs.append(_job(f"mlu-infer-{index:03d}", "inference", submit, [task], 1, priority))
        elif kind == "gpu":
            gpus = rng.choice([1, 2, 4, 8])
            replicas = rng.choice([1, 2])
            task = _task("trainer", replicas, duration, {"accelerator": "nvidia-gpu"},
                         {"nvidia.com/gpu": str(gpus)}, {"cpu": str(4 * gpus), "memory": f"{32 * gpus}Gi"})
            docs.append(_job(f"gpu-train-{index:03d}", "research", submit, [task], replicas, priority))
        else:
            ps = _task("ps", 1, duration, {"node-role": "cpu"}, {}, {"cpu": "8", "memory": "32Gi"})
            workers = rng.randint(2, 12)
            worker = _task("worker", workers, duration, {"node-role": "cpu"}, {}, {"cpu": "16", "memory": "64Gi"})
            docs.append(_job(f"cpu-etl-{index:03d}", "research", submit, [ps, worker], 1 + workers, priority))
    return docs


def demo_workloads(seed: int = 7) -> list[AnyObject]:
    background = yaml.safe_dump_all(background_documents(seed), sort_keys=False)
    return seed_workloads() + load_text(background, f"<demo background, seed {seed}>")


def demo_nodes() -> list[Node]:
    return demo_cluster().nodes()
