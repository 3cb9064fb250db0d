"""The network-topology study (issue 20): a 3-tier Ascend cluster under a mixed workload of hard-bounded,
soft-bounded and unconstrained gangs, simulated under three policies with the same jobs.

Who calls it: ``bench/hypernode_study.py`` (the docs' table and report) and the tests (a small cluster).

Policies:
- ``binpack``: hetsched's default configuration (``network-topology-aware`` on: bounded gangs go to the
  fullest HyperNode that fits, other pods fill busy domains);
- ``no-binpack``: the same without ``network-topology-aware`` (the first HyperNode that fits);
- ``blind``: the same jobs with their ``networkTopology`` removed and no network plugin — what a
  topology-blind scheduler does; its gangs' spans show how many would have crossed a spine.

Per policy and job class (by the bound the job asked for, kept in the job's name): jobs started within
the horizon, mean and p95 queue wait, how many multi-server gangs crossed tier 1 (more than one ToR /
supernode) and tier 2 (more than one spine domain), and the time-mean of wholly free HyperNodes per tier.
Every run is the real scheduler and controllers on the embedded cluster (``sim.simulator``), seeded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetsched.api.objects import AnyObject, Job
from hetsched.cluster.spec import parse_cluster_spec
from hetsched.scheduler.defaults import DEFAULT_CONF_YAML, parse_conf
from hetsched.sim.simulator import Simulation

CHIPS = "huawei.com/Ascend910"
CLASSES: tuple[tuple[str, dict[str, Any] | None, tuple[float, float], float], ...] = (
    ("hard1", {"mode": "hard", "highestTierAllowed": 1}, (0.25, 1.0), 0.35),
    ("hard2", {"mode": "hard", "highestTierAllowed": 2}, (1.5, 3.0), 0.10),
    ("soft1", {"mode": "soft", "highestTierAllowed": 1}, (0.125, 0.75), 0.20),
    ("free", None, (0.0625, 0.5), 0.35),
)
"""(class, networkTopology, servers per gang as a range of tier-1 HyperNode sizes — with 16 servers per
ToR: 4–16, 24–48, 2–12 and 1–8 servers —, share of jobs)."""
POLICIES = ("binpack", "no-binpack", "blind")


@dataclass(frozen=True)
class StudySetup:
    servers: int = 512
    tiers: tuple[int, ...] = (16, 4, 8)
    """Units of the level below per HyperNode, tier 1 up (16 servers per ToR, 4 ToRs per spine, …)."""
    load: float = 0.8
    """Offered load: server-hours the jobs ask for ÷ server-hours in the arrival window."""
    hours: float = 12.0
    """Arrivals spread over this many simulated hours; the run stops there (the horizon)."""
    mean_minutes: float = 90.0
    seed: int = 1


def cluster(setup: StudySetup) -> tuple[list[Any], list[Any]]:
    """The servers (8 Ascend 910 chips each, HCCS topology) and the HyperNodes discovered from their labels."""
    spec = parse_cluster_spec({"kind": "ClusterSpec", "metadata": {"name": "study"}, "pools": [{
        "name": "a3", "count": setup.servers, "cpu": "192", "memory": "1536Gi",
        "accelerators": [{"kind": "ascend", "model": "Ascend910", "count": 8}],
        "topology": [{"tier": tier, "size": size} for tier, size in enumerate(setup.tiers, start=1)]}]})
    nodes = spec.nodes()
    return nodes, spec.hypernodes(nodes)


def workload(setup: StudySetup) -> list[Job]:
    """Seeded jobs: each a Volcano Job of whole-server pods (8 chips), its class in its name."""
    rng = random.Random(setup.seed)
    classes = [c[0] for c in CLASSES]
    weights = [c[3] for c in CLASSES]
    jobs = []
    horizon = setup.hours * 3600
    budget = setup.load * setup.servers * horizon * 0.9  # server-seconds offered while jobs arrive
    index = 0
    while budget > 0:
        name = rng.choices(classes, weights)[0]
        _, bound, (low, high), _ = next(c for c in CLASSES if c[0] == name)
        size = setup.tiers[0]
        servers = rng.randint(max(1, round(low * size)), max(1, round(high * size)))
        submit = round(rng.uniform(0, horizon * 0.9))
        duration = max(300, round(rng.expovariate(1 / (setup.mean_minutes * 60))))
        spec: dict[str, Any] = {"minAvailable": servers, "schedulerName": "hetsched", "tasks": [{
            "name": "worker", "replicas": servers, "template": {
                "metadata": {"annotations": {"hetsched.io/duration": str(duration)}},
                "spec": {"containers": [{"name": "w", "resources": {"limits": {CHIPS: 8},
                                                                    "requests": {"cpu": "16"}}}]}}}]}
        if bound is not None:
            spec["networkTopology"] = bound
        jobs.append(Job.model_validate({"metadata": {"name": f"{name}-{index:04d}", "namespace": "default",
                                                     "annotations": {"hetsched.io/submit-at": str(submit)}},
                                        "spec": spec}))
        budget -= servers * duration
        index += 1
    return jobs


def _conf(policy: str) -> Any:
    text = DEFAULT_CONF_YAML if policy == "binpack" else DEFAULT_CONF_YAML.replace("  - name: network-topology-aware\n",
                                                                                   "")
    return parse_conf(text, f"<{policy}>")


def run(setup: StudySetup, policy: str, *, timeline: bool = False) -> tuple[dict[str, Any], Any]:
    """One policy over the setup's jobs: (figures per class and overall, the simulation's Results)."""
    nodes, hypernodes = cluster(setup)
    jobs = workload(setup)
    if policy == "blind":
        jobs = [j.model_copy(update={"spec": j.spec.model_copy(update={"networkTopology": None})}) for j in jobs]
    objects: list[AnyObject] = [*hypernodes, *jobs]
    simulation = Simulation(nodes, objects, _conf(policy), period=10.0, until=setup.hours * 3600, timeline=timeline)
    results = simulation.run()
    network = simulation.recorder.network
    figures: dict[str, Any] = {"policy": policy, "classes": {}}
    for name, *_ in CLASSES:
        records = [r for r in results.jobs if r["name"].startswith(f"{name}-")]
        started = [r for r in records if r["start"] is not None]
        waits = np.asarray([r["start"] - r["submit"] for r in started], dtype=np.float64)
        spans = [network.span(f"default/{r['name']}") for r in started if r["minMember"] > 1]
        figures["classes"][name] = {
            "jobs": len(records), "started": len(started),
            "startedShare": round(len(started) / len(records), 4) if records else None,
            "meanWaitMinutes": round(float(waits.mean()) / 60, 1) if waits.size else None,
            "p95WaitMinutes": round(float(np.percentile(waits, 95)) / 60, 1) if waits.size else None,
            "gangs": len(spans),
            "crossedTier1": sum(1 for s in spans if s is not None and s > 1),
            "crossedTier2": sum(1 for s in spans if s is not None and s > 2),
        }
    summary = results.summary.get("network") or {}
    figures["wholeFreeHyperNodes"] = summary.get("wholeFreeHyperNodes", {})
    figures["allocation"] = results.summary["allocationRatio"].get("ascend")
    return figures, results


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One policy's figures over several seeds: counts summed, waits and the rest averaged over seeds."""
    def mean(values: list[Any]) -> float | None:
        present = [v for v in values if v is not None]
        return round(sum(present) / len(present), 2) if present else None

    classes: dict[str, Any] = {}
    for name in runs[0]["classes"]:
        per = [r["classes"][name] for r in runs]
        jobs, started = sum(c["jobs"] for c in per), sum(c["started"] for c in per)
        classes[name] = {"jobs": jobs, "started": started, "startedShare": round(started / jobs, 4) if jobs else None,
                         "meanWaitMinutes": mean([c["meanWaitMinutes"] for c in per]),
                         "p95WaitMinutes": mean([c["p95WaitMinutes"] for c in per]),
                         **{key: sum(c[key] for c in per) for key in ("gangs", "crossedTier1", "crossedTier2")}}
    tiers = sorted({t for r in runs for t in r["wholeFreeHyperNodes"]})
    return {"policy": runs[0]["policy"], "seeds": len(runs), "classes": classes,
            "wholeFreeHyperNodes": {t: mean([r["wholeFreeHyperNodes"].get(t) for r in runs]) for t in tiers},
            "allocation": mean([r["allocation"] for r in runs])}


def table(all_figures: list[dict[str, Any]]) -> str:
    """The Markdown table of the docs: one row per policy and class."""
    lines = ["| policy | jobs | started | mean wait (min) | p95 wait (min) | gangs crossing tier 1 | "
             "gangs crossing tier 2 (a spine) |", "|---|---|---|---|---|---|---|"]
    for figures in all_figures:
        for name, c in figures["classes"].items():
            share = f"{c['startedShare']:.0%}" if c["startedShare"] is not None else "–"
            lines.append(f"| {figures['policy']} | {name} ({c['jobs']}) | {c['started']} ({share}) | "
                         f"{c['meanWaitMinutes']} | {c['p95WaitMinutes']} | {c['crossedTier1']}/{c['gangs']} | "
                         f"{c['crossedTier2']}/{c['gangs']} |")
    lines += ["", "| policy | chip allocation | wholly free tier-1 HyperNodes (time mean) | tier 2 | tier 3 |",
              "|---|---|---|---|---|"]
    for figures in all_figures:
        whole = figures["wholeFreeHyperNodes"]
        allocation = f"{figures['allocation']:.1%}" if figures["allocation"] is not None else "–"
        lines.append(f"| {figures['policy']} | {allocation} | {whole.get('tier1', 0)} | "
                     f"{whole.get('tier2', 0)} | {whole.get('tier3', 0)} |")
    return "\n".join(lines)
