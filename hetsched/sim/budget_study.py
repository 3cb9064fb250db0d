"""The business-line budget study (issue 35): three business lines share a GPU cluster for 30 simulated days of
an openb-like mixed workload, with queue shares only, or with weekly GPU-hour budgets that wait, stop or go
idle when used up — and, with fair share by decayed usage, what the half-life changes.

Who calls it: ``bench/budget_study.py`` (the table in docs/queues.md) and ``tests/test_budget_study.py`` (a
short run). It reads the openb pod list (``../shared/traces``) and never copies it.

Workload (seeded): pods drawn with replacement from an openb pod list — a GPU pod asks its GPUs whole (a
sharing pod one whole GPU, as on a cluster without sharing), a CPU pod its cores; both their memory and
their lifetime in the trace (deletion − creation; pods that lived under ``min_minutes`` left out, the rest
cut at ``max_hours``) — each one a single-pod Volcano Job. Arrivals are Poisson at the rate that offers
``load`` × the cluster's GPU-hours over the horizon, and each job goes to a line by its share of the demand
(search 50 %, ads 30 %, research 20 %); research adds a burst of as much again on the first ``burst_days``.
The run starts on a Monday (1970-01-05) so the weeks are whole.

Lines: queue weights 8 : 5 : 3, and budgets (GPU-hours a week) of 40 %, 25 % and 15 % of the cluster's
weekly GPU-hours (80 % in all), so every line asks for more than its budget. Modes:

- ``shares``: weights only (``proportion``), no budgets — the baseline;
- ``wait``, ``stop``, ``idle``: the same budgets with ``whenExhausted`` Wait, Stop (hard: evicted at once)
  and Idle (only capacity nobody asks for, the first reclaimed; ``reclaim`` on);
- ``fair-1d``, ``fair-7d``, ``fair-30d``: weights and ``fairshare`` (queues ordered by decayed usage) with
  that half-life, no budgets.

Per run: GPU utilisation (GPU-hours used ÷ GPUs × horizon), per line the GPU-hours, share, jobs started and
mean wait, its share in week 1 (the burst) and in weeks 2–4; per week used against the budget: the worst
overshoot (GPU-hours and % of the budget) and how many weeks went over.
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hetsched.api.manifest import load_text
from hetsched.api.objects import AnyObject, QueueUsage
from hetsched.cluster.spec import parse_cluster_spec
from hetsched.scheduler.defaults import DEFAULT_CONF_YAML, parse_conf
from hetsched.sim.simulator import Simulation

GPU = "nvidia.com/gpu"
DAY = 86400.0
WEEK = 7 * DAY
MONDAY = 4 * DAY
"""1970-01-05, the first Monday after the simulator's epoch: the run starts there so its weeks are whole."""
LINES: tuple[tuple[str, float, int, float], ...] = (
    ("search", 0.5, 8, 0.40), ("ads", 0.3, 5, 0.25), ("research", 0.2, 3, 0.15))
"""(line, share of the demand, queue weight, weekly budget as a share of the cluster's weekly GPU-hours)."""
MODES = ("shares", "wait", "stop", "idle", "fair-1d", "fair-7d", "fair-30d")
OVER = 0.5
"""GPU-hours over a week's budget that count the week as over (less than any job's: a Stop budget's seconds
between its tick and the eviction stay below it)."""
HALF_LIVES = {"fair-1d": DAY, "fair-7d": 7 * DAY, "fair-30d": 30 * DAY}


@dataclass(frozen=True)
class StudySetup:
    servers: int = 4
    days: float = 30.0
    load: float = 1.1
    """Offered load: GPU-hours the jobs ask ÷ the cluster's GPU-hours over the horizon (burst not counted)."""
    burst_days: float = 3.0
    min_minutes: float = 120.0
    """Pods that lived less in the trace are left out (most of its pods are short; the GPU-hours are in the
    long ones), which keeps 30 days to a few thousand jobs."""
    max_hours: float = 24.0
    seed: int = 1


@dataclass
class TracePod:
    gpus: int
    cpu_milli: int
    memory_mib: int
    seconds: float


def read_pods(path: Path, setup: StudySetup) -> list[TracePod]:
    """The pod list's rows as study pods (lifetimes clamped); a ValueError naming the file when unusable."""
    pods: list[TracePod] = []
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            for line, row in enumerate(csv.DictReader(handle), start=2):
                try:
                    gpus, milli = int(row["num_gpu"]), int(row["gpu_milli"])
                    life = float(row["deletion_time"]) - float(row["creation_time"])
                    pod = TracePod(max(gpus, 1) if milli > 0 else 0, int(row["cpu_milli"]), int(row["memory_mib"]),
                                   min(life, setup.max_hours * 3600))
                except (KeyError, TypeError, ValueError) as exc:
                    raise ValueError(f"{path}:{line}: not an openb pod row ({exc})") from None
                if pod.gpus > 8 or pod.cpu_milli < 0 or pod.memory_mib < 0 or not math.isfinite(pod.seconds):
                    raise ValueError(f"{path}:{line}: not an openb pod row (out of range)")
                if pod.seconds >= setup.min_minutes * 60:
                    pods.append(pod)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror})") from None
    if not any(p.gpus for p in pods):
        raise ValueError(f"{path}: no GPU pods")
    return pods


def _job(name: str, line: str, pod: TracePod, at: float) -> str:
    limits = f"{{{GPU}: \"{pod.gpus}\"}}" if pod.gpus else "{}"
    return f"""apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: {name}, namespace: {line}, annotations: {{hetsched.io/submit-at: "{at:.0f}"}}}}
spec:
  minAvailable: 1
  queue: {line}
  tasks:
  - name: w
    replicas: 1
    template:
      metadata: {{annotations: {{hetsched.io/duration: "{pod.seconds:.0f}"}}}}
      spec:
        containers:
        - name: w
          resources: {{limits: {limits}, requests: {{cpu: "{pod.cpu_milli}m", memory: "{pod.memory_mib}Mi"}}}}"""


def jobs(pods: list[TracePod], setup: StudySetup) -> list[str]:
    """The study's jobs (the same for every mode of a seed)."""
    rng = random.Random(setup.seed)
    gpu_hours = setup.servers * 8 * setup.days * 24 * setup.load
    mean = float(np.mean([p.gpus * p.seconds / 3600 for p in pods]))
    rate = gpu_hours / mean / (setup.days * DAY)  # jobs a second
    documents: list[str] = []
    moment, index = 0.0, 0
    names, shares = [line for line, *_ in LINES], [share for _, share, *_ in LINES]
    while True:
        moment += rng.expovariate(rate)
        if moment >= setup.days * DAY:
            break
        documents.append(_job(f"j{index}", rng.choices(names, shares)[0], rng.choice(pods), MONDAY + moment))
        index += 1
    research = next(share for line, share, *_ in LINES if line == "research")
    moment = 0.0
    while True:  # research's burst: as much again of its demand on the first days
        moment += rng.expovariate(rate * research)
        if moment >= setup.burst_days * DAY:
            break
        documents.append(_job(f"burst{index}", "research", rng.choice(pods), MONDAY + moment))
        index += 1
    return documents


def _conf(mode: str) -> Any:
    text = DEFAULT_CONF_YAML
    if mode == "idle":
        text = text.replace('actions: "enqueue, allocate, backfill"', 'actions: "enqueue, allocate, reclaim, backfill"')
    if mode != "shares":  # fair share by decayed usage orders the queues before their instant share
        text = text.replace("  - name: conformance\n", "  - name: conformance\n  - name: fairshare\n")
    return parse_conf(text)


def manifests(mode: str, setup: StudySetup, pods: list[TracePod]) -> list[AnyObject]:
    weekly = setup.servers * 8 * 7 * 24
    documents: list[str] = []
    for line, _, weight, budget in LINES:
        documents.append(f"apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: {line}}}\n"
                         f"spec: {{weight: {weight}}}")
        limit = f"budget: {{{GPU}: {weekly * budget:g}}}, whenExhausted: {mode.title()}, " if mode in (
            "wait", "stop", "idle") else ""
        documents.append(f"apiVersion: hetsched.io/v1alpha1\nkind: QueueUsage\nmetadata: {{name: {line}}}\n"
                         f"spec: {{{limit}period: Week}}")  # books by the week in every mode
    return load_text("\n---\n".join(documents + jobs(pods, setup)), f"<budget study, seed {setup.seed}>")


def cluster(setup: StudySetup) -> list[Any]:
    spec = parse_cluster_spec({"apiVersion": "hetsched.io/v1alpha1", "kind": "ClusterSpec",
                               "metadata": {"name": "budget-study"},
                               "pools": [{"name": "gpu", "count": setup.servers, "cpu": "96", "memory": "768Gi",
                                          "accelerators": [{"kind": "nvidia", "model": "A100-SXM4-80GB",
                                                            "count": 8}]}]})
    return spec.nodes()


@dataclass
class LineFigures:
    gpu_hours: float = 0.0
    """From the accountant's books."""
    share: float = 0.0
    started: int = 0
    submitted: int = 0
    mean_wait_h: float = 0.0
    week1_share: float = 0.0
    later_share: float = 0.0
    budget: float = 0.0
    worst_over: float = 0.0
    """GPU-hours over the weekly budget in the worst week (negative: under in every week)."""
    weeks_over: int = 0
    """Weeks over the budget by more than :data:`OVER`."""


@dataclass
class RunFigures:
    mode: str
    seed: int
    utilisation: float = 0.0
    evictions: int = 0
    lines: dict[str, LineFigures] = field(default_factory=dict)


def _weeks(usage: QueueUsage) -> list[float]:
    """GPU-hours per week of the run from the accountant's books (closed weeks, then the current one); the books
    open at the epoch, a week before the run's Monday."""
    return [p.used.get(GPU, 0.0) for p in usage.status.history if p.periodStart >= MONDAY] + [
        usage.status.used.get(GPU, 0.0)]


def run(setup: StudySetup, mode: str, pods: list[TracePod]) -> RunFigures:
    """One simulated run; the GPU-hours are the accountant's books (``QueueUsage``, what ``hetsched usage``
    shows), kept per week in every mode."""
    objects = manifests(mode, setup, pods)
    horizon = MONDAY + setup.days * DAY
    simulation = Simulation(cluster(setup), objects, _conf(mode), until=horizon,
                            usage_half_life=HALF_LIVES.get(mode, 7 * DAY))
    results = simulation.run()
    figures = RunFigures(mode, setup.seed, evictions=len(results.evictions))
    waits: dict[str, list[float]] = {line: [] for line, *_ in LINES}
    submitted: dict[str, int] = dict.fromkeys(waits, 0)
    for job in results.jobs:
        line = job["namespace"]
        if line in waits:
            submitted[line] += 1
            if job.get("start") is not None:
                waits[line].append((job["start"] - job["submit"]) / 3600)
    books = {u.metadata.name: _weeks(u) for u in simulation.cluster.list("QueueUsage") if isinstance(u, QueueUsage)}
    per_week = {line: books.get(line, [0.0]) for line in waits}
    weeks = max(len(w) for w in per_week.values())
    for line in per_week:
        per_week[line] = per_week[line] + [0.0] * (weeks - len(per_week[line]))
    week_totals = [sum(per_week[line][w] for line in per_week) or 1.0 for w in range(weeks)]
    used = sum(sum(w) for w in per_week.values())
    figures.utilisation = used / (setup.servers * 8 * setup.days * 24)
    full = max(int(setup.days // 7), 1)  # whole weeks: the last, partial one is left out of the shares
    weekly = setup.servers * 8 * 7 * 24
    for line, _, _, budget in LINES:
        limit = weekly * budget if mode in ("wait", "stop", "idle") else math.nan
        over = [per_week[line][w] - limit for w in range(weeks)]
        figures.lines[line] = LineFigures(
            gpu_hours=sum(per_week[line]), share=sum(per_week[line]) / used if used else 0.0,
            started=len(waits[line]), submitted=submitted[line],
            mean_wait_h=float(np.mean(waits[line])) if waits[line] else math.nan,
            week1_share=per_week[line][0] / week_totals[0],
            later_share=(sum(per_week[line][1:full]) / sum(week_totals[1:full]) if full > 1 else math.nan),
            budget=limit, worst_over=max(over) if not math.isnan(limit) else math.nan,
            weeks_over=sum(1 for o in over if o > OVER) if not math.isnan(limit) else 0)
    return figures


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None  # JSON has no NaN


def combine(runs: list[RunFigures]) -> dict[str, Any]:
    """Mean over seeds per figure; the worst overshoot is the worst of any seed."""
    out: dict[str, Any] = {"mode": runs[0].mode, "seeds": [r.seed for r in runs],
                           "utilisation": float(np.mean([r.utilisation for r in runs])),
                           "evictions": float(np.mean([r.evictions for r in runs])), "lines": {}}
    for line in runs[0].lines:
        rows = [r.lines[line] for r in runs]
        out["lines"][line] = {
            "gpu_hours": float(np.mean([x.gpu_hours for x in rows])),
            "share": float(np.mean([x.share for x in rows])),
            "started": float(np.mean([x.started for x in rows])),
            "submitted": float(np.mean([x.submitted for x in rows])),
            "mean_wait_h": _finite(float(np.mean([x.mean_wait_h for x in rows]))),
            "week1_share": float(np.mean([x.week1_share for x in rows])),
            "later_share": _finite(float(np.mean([x.later_share for x in rows]))),
            "budget": None if math.isnan(rows[0].budget) else rows[0].budget,
            "worst_over": None if math.isnan(rows[0].budget) else float(np.max([x.worst_over for x in rows])),
            "weeks_over": int(sum(x.weeks_over for x in rows))}
    return out


def _shown(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def table(combined: list[dict[str, Any]]) -> str:
    lines = ["| mode | GPU util | evictions | line | GPU-h | share | wk 1 share | wk 2–4 share | started/submitted "
             "| mean wait h | weekly budget | worst week over budget | weeks over |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for entry in combined:
        for index, (line, x) in enumerate(entry["lines"].items()):
            head = (f"| {entry['mode']} | {entry['utilisation']:.1%} | {entry['evictions']:.0f} "
                    if index == 0 else "| | | ")
            budget = "—" if x["budget"] is None else f"{x['budget']:,.0f}"
            over = "—" if x["worst_over"] is None else (
                f"{x['worst_over']:+,.2f} ({x['worst_over'] / x['budget']:+.2%})")
            lines.append(f"{head}| {line} | {x['gpu_hours']:,.0f} | {x['share']:.1%} | {x['week1_share']:.1%} | "
                         f"{_shown(x['later_share'], '.1%')} | {x['started']:.0f}/{x['submitted']:.0f} | "
                         f"{_shown(x['mean_wait_h'], '.1f')} | "
                         f"{budget} | {over} | {x['weeks_over']} |")
    return "\n".join(lines)
