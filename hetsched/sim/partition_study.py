"""The chip-partition study (issue 34): an inference-heavy mixed workload on A100 40GB servers — where giving
each inference pod a whole GPU strands most of it — simulated three ways with the same jobs.

Who calls it: ``bench/partition_study.py`` (the docs' table) and the tests (a small cluster).

Modes (the same jobs; only how an inference pod asks, and how the servers are set up, differ):
- ``whole``: every inference pod asks a whole GPU (``nvidia.com/gpu: 1``), as on a cluster without sharing;
- ``milli``: it asks its share as thousandths of one GPU plus the memory (``hetsched.io/gpu-milli`` +
  ``hetsched.io/gpu-memory``) on shareable servers — soft sharing, no isolation;
- ``mig``: it asks the MIG profile that holds it (``nvidia.com/mig-1g.5gb`` …) on servers in MIG mode,
  carved on demand with NVIDIA's placement rules (``devices.partitions``).
Training jobs (gangs of whole 8-GPU servers) are the same in all three.

Per mode: jobs started within the horizon and waiting at its end (per class), mean and p95 queue wait; the
GPU-hours the pods *use* (an inference pod uses its profile's compute: a ``1g.5gb`` one seventh of a GPU) and
*hold* (a whole GPU, under ``whole``) over the GPUs × horizon, the difference being what whole-GPU allocation
strands; and, sampled at every scheduling cycle, GPUs in use (held whole, shared or carved) and the
fragmentation — free compute left on partly used GPUs, as a share of all compute — plus the partitions
carved. Every run is the real scheduler and controllers on the embedded cluster (``sim.simulator``), seeded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hetsched.api.objects import AnyObject, Job
from hetsched.cluster.spec import parse_cluster_spec
from hetsched.devices.policy import popcounts
from hetsched.scheduler.cache import SchedulerCache
from hetsched.scheduler.defaults import default_conf
from hetsched.scheduler.engine.runner import CycleResult
from hetsched.sim.simulator import Simulation

GPU = "nvidia.com/gpu"
MODES = ("whole", "milli", "mig")
INFERENCE: tuple[tuple[str, int, int, float], ...] = (
    ("1g.5gb", 1, 5, 0.55), ("2g.10gb", 2, 10, 0.27), ("3g.20gb", 3, 20, 0.15))
"""(MIG profile, compute sevenths, GB, share of jobs); the rest (3 %) are training gangs — about half the
GPU-hours each (inference-heavy: most pods need a fraction of a GPU)."""
TRAINING_SHARE = 0.03


@dataclass(frozen=True)
class StudySetup:
    servers: int = 16
    load: float = 0.8
    """Offered load: GPU-hours the jobs use ÷ GPU-hours in the arrival window."""
    hours: float = 12.0
    inference_minutes: float = 120.0
    training_minutes: float = 60.0
    seed: int = 1


def cluster(setup: StudySetup, mode: str) -> list[Any]:
    accelerator: dict[str, Any] = {"kind": "nvidia", "model": "A100-SXM4-40GB", "count": 8}
    if mode == "milli":
        accelerator.update(shareable=True, memoryMiB=40960)
    elif mode == "mig":
        accelerator.update(partitioning="mig")
    spec = parse_cluster_spec({"kind": "ClusterSpec", "metadata": {"name": "partitions"}, "pools": [{
        "name": "a100", "count": setup.servers, "cpu": "128", "memory": "1Ti", "accelerators": [accelerator]}]})
    return spec.nodes()


def _limits(mode: str, profile: str, sevenths: int, gigabytes: int) -> dict[str, Any]:
    if mode == "whole":
        return {GPU: 1}
    if mode == "milli":
        return {"hetsched.io/gpu-milli": -(-1000 * sevenths // 7), "hetsched.io/gpu-memory": gigabytes * 1024}
    return {f"nvidia.com/mig-{profile}": 1}


def workload(setup: StudySetup, mode: str) -> list[Job]:
    """Seeded jobs (the same for every mode): single-pod inference services and whole-server training gangs;
    the class (``infer-1g.5gb`` …, ``train``) is in the name."""
    rng = random.Random(setup.seed)
    horizon = setup.hours * 3600
    budget = setup.load * setup.servers * 8 * horizon * 0.9  # GPU-seconds used while jobs arrive
    kinds = [*(k[0] for k in INFERENCE), "train"]
    weights = [*(k[3] for k in INFERENCE), TRAINING_SHARE]
    jobs = []
    index = 0
    while budget > 0:
        kind = rng.choices(kinds, weights)[0]
        submit = round(rng.uniform(0, horizon * 0.9))
        if kind == "train":
            servers = rng.randint(1, 2)
            duration = max(600, round(rng.expovariate(1 / (setup.training_minutes * 60))))
            limits: dict[str, Any] = {GPU: 8}
            pods, used = servers, float(servers * 8 * duration)
            name = f"train-{index:04d}"
        else:
            profile, sevenths, gigabytes, _ = next(k for k in INFERENCE if k[0] == kind)
            duration = max(120, round(rng.expovariate(1 / (setup.inference_minutes * 60))))
            limits = _limits(mode, profile, sevenths, gigabytes)
            pods, used = 1, sevenths / 7 * duration
            name = f"infer-{profile}-{index:04d}"
        jobs.append(Job.model_validate({
            "metadata": {"name": name, "namespace": "default", "annotations": {"hetsched.io/submit-at": str(submit)}},
            "spec": {"minAvailable": pods, "schedulerName": "hetsched", "tasks": [{
                "name": "main", "replicas": pods, "template": {
                    "metadata": {"annotations": {"hetsched.io/duration": str(duration)}},
                    "spec": {"containers": [{"name": "c", "resources": {"limits": limits,
                                                                        "requests": {"cpu": "2"}}}]}}}]}}))
        budget -= used
        index += 1
    return jobs


@dataclass
class Sampler:
    """Per scheduling cycle: GPUs in use, free compute on partly used GPUs, partitions carved."""

    in_use: list[int] = field(default_factory=list)
    fragmented: list[float] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)

    def __call__(self, cache: SchedulerCache, result: CycleResult) -> None:
        devices = result.snapshot.devices.get(GPU)
        if devices is None:
            return
        held = devices.used | devices.sharing()
        shared = devices.shared > 0
        free_share = np.where(shared, (1000 - devices.shared) / 1000.0, 0.0)
        count = 0
        if devices.carving is not None:
            held = held | devices.carving.mask()
            carved = devices.carving.count > 0
            free_share = free_share + np.where(carved, (7 - devices.carving.cores) / 7.0, 0.0)
            count = int(devices.carving.count.sum())
        chips = int(popcounts(devices.chips).sum())
        self.in_use.append(int(popcounts(held & devices.chips).sum()))
        self.fragmented.append(float(free_share.sum()) / max(chips, 1))
        self.partitions.append(count)


def run(setup: StudySetup, mode: str) -> dict[str, Any]:
    """One mode over the setup's jobs: figures per class and overall."""
    nodes = cluster(setup, mode)
    jobs = workload(setup, mode)
    objects: list[AnyObject] = list(jobs)
    horizon = setup.hours * 3600
    simulation = Simulation(nodes, objects, default_conf(), period=10.0, until=horizon)
    sampler = Sampler()
    simulation.scheduler.observers.append(sampler)
    results = simulation.run()
    gpus = setup.servers * 8
    used = held = 0.0
    classes: dict[str, Any] = {}
    for kind in [*(k[0] for k in INFERENCE), "train"]:
        records = [r for r in results.jobs if r["name"].startswith("train-" if kind == "train" else f"infer-{kind}-")]
        started = [r for r in records if r["start"] is not None]
        waits = np.asarray([r["start"] - r["submit"] for r in started], dtype=np.float64)
        classes[kind] = {"jobs": len(records), "started": len(started), "waiting": len(records) - len(started),
                         "meanWaitMinutes": round(float(waits.mean()) / 60, 1) if waits.size else None,
                         "p95WaitMinutes": round(float(np.percentile(waits, 95)) / 60, 1) if waits.size else None}
        sevenths = 7 if kind == "train" else next(k[1] for k in INFERENCE if k[0] == kind)
        for record in started:
            for pod in record["pods"]:
                if pod["start"] is None:
                    continue
                seconds = min(pod["end"] if pod["end"] is not None else horizon, horizon) - pod["start"]
                chips = 8 if kind == "train" else 1
                used += seconds * chips * sevenths / 7
                held += seconds * chips * (1 if kind == "train" or mode == "whole" else sevenths / 7)
    return {"mode": mode, "classes": classes,
            "usedShare": round(used / (gpus * horizon), 4), "heldShare": round(held / (gpus * horizon), 4),
            "gpusInUse": round(float(np.mean(sampler.in_use)), 1) if sampler.in_use else 0.0,
            "fragmentedShare": round(float(np.mean(sampler.fragmented)), 4) if sampler.fragmented else 0.0,
            "partitions": round(float(np.mean(sampler.partitions)), 1) if sampler.partitions else 0.0,
            "gpus": gpus}


def table(all_figures: list[dict[str, Any]]) -> str:
    """The Markdown tables of the docs: per mode and class, then per mode overall."""
    lines = ["| mode | class (jobs) | started | waiting at the end | mean wait (min) | p95 wait (min) |",
             "|---|---|---|---|---|---|"]
    for figures in all_figures:
        for kind, c in figures["classes"].items():
            lines.append(f"| {figures['mode']} | {kind} ({c['jobs']}) | {c['started']} | {c['waiting']} | "
                         f"{c['meanWaitMinutes']} | {c['p95WaitMinutes']} |")
    lines += ["", "| mode | GPU-hours used | GPU-hours held | stranded by whole-GPU allocation | GPUs in use "
              "(mean) | free compute on partly used GPUs | partitions (mean) |", "|---|---|---|---|---|---|---|"]
    for figures in all_figures:
        lines.append(f"| {figures['mode']} | {figures['usedShare']:.1%} | {figures['heldShare']:.1%} | "
                     f"{figures['heldShare'] - figures['usedShare']:.1%} | {figures['gpusInUse']} of "
                     f"{figures['gpus']} | {figures['fragmentedShare']:.1%} | {figures['partitions']} |")
    return "\n".join(lines)


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's figures over several seeds: counts summed, waits and shares averaged over seeds."""
    def mean(values: list[Any]) -> float | None:
        present = [v for v in values if v is not None]
        return round(sum(present) / len(present), 4) if present else None

    classes = {kind: {"jobs": sum(r["classes"][kind]["jobs"] for r in runs),
                      "started": sum(r["classes"][kind]["started"] for r in runs),
                      "waiting": sum(r["classes"][kind]["waiting"] for r in runs),
                      "meanWaitMinutes": mean([r["classes"][kind]["meanWaitMinutes"] for r in runs]),
                      "p95WaitMinutes": mean([r["classes"][kind]["p95WaitMinutes"] for r in runs])}
               for kind in runs[0]["classes"]}
    for figures in classes.values():
        for key in ("meanWaitMinutes", "p95WaitMinutes"):
            figures[key] = round(figures[key], 1) if figures[key] is not None else None
    return {"mode": runs[0]["mode"], "seeds": len(runs), "classes": classes, "gpus": runs[0]["gpus"],
            **{key: mean([r[key] for r in runs]) for key in ("usedShare", "heldShare", "fragmentedShare")},
            **{key: round(float(np.mean([r[key] for r in runs])), 1) for key in ("gpusInUse", "partitions")}}
