"""Running the openb replay over policies and seeds, and reporting it (table, JSON, plot).

Who calls it: ``hetsched replay-openb``. Seeds run in parallel processes (one per core); each run is
deterministic for its seed. The JSON holds, per policy, ``unallocated_gpu_pct_at_100`` (mean, std, per
seed) and the allocation curve (mean over seeds) sampled at every 1 % of arrived demand.
"""

from __future__ import annotations

import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from hetsched.replay.engine import POLICIES, replay
from hetsched.replay.openb import TraceError, load_nodes, load_pods

BEST = "fgd-adaptive"
"""hetsched's recommended policy for the replay (``--policy best``)."""
PUBLISHED_DEFAULT = {"fgd": 4.77, "bestfit": 7.14, "gpupacking": 8.22, "gpuclustering": 8.35, "dotprod": 9.38,
                     "random": 13.70}
"""Unallocated GPU % at 100 % arrived on ``default``, mean of seeds 42–51 (traces.md §A2)."""


def resolve_policies(policy: str) -> list[str]:
    if policy == "all":
        return [*PUBLISHED_DEFAULT, BEST]
    names = [BEST if p.strip() == "best" else p.strip() for p in policy.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        raise ValueError(f"--policy: unknown policy {', '.join(unknown) or policy!r}; known: "
                         f"{', '.join(POLICIES)}, best, all")
    return names


def _one(args: tuple[Path, Path, str, int]) -> tuple[str, int, float, list[float]]:
    node_file, pod_file, policy, seed = args
    result = replay(load_nodes(node_file), load_pods(pod_file), policy, seed)
    curve = [100.0 - result.unallocated_at(float(p)) for p in range(0, 131)]
    return policy, seed, result.unallocated_at(100.0), curve


def run_replay(trace_dir: Path, pods: str, policies: list[str], seeds: list[int],
               workers: int | None = None) -> dict[str, Any]:
    node_file = trace_dir / "csv" / "openb_node_list_gpu_node.csv"
    pod_file = trace_dir / "csv" / f"openb_pod_list_{pods}.csv"
    for path in (node_file, pod_file):
        if not path.exists():
            raise TraceError(f"{path}: not found (--trace-dir {trace_dir}, --pods {pods})")
    load_nodes(node_file), load_pods(pod_file)  # fail fast, with line numbers, before forking
    jobs = [(node_file, pod_file, policy, seed) for policy in policies for seed in seeds]
    # one replay per process; map keeps the submission order, so the report is the same for any worker count
    width = min(workers or os.cpu_count() or 1, len(jobs))
    if width == 1:  # nothing to run beside it: no process to start
        results = [_one(job) for job in jobs]
    else:
        with ProcessPoolExecutor(max_workers=width) as pool:
            results = list(pool.map(_one, jobs))
    report: dict[str, Any] = {"trace_dir": str(trace_dir), "pods": pods, "seeds": seeds, "inflation": 1.3,
                              "policies": {}}
    for policy in policies:
        mine = [r for r in results if r[0] == policy]
        values = [r[2] for r in mine]
        curve = [statistics.fmean(r[3][i] for r in mine) for i in range(131)]
        report["policies"][policy] = {
            "unallocated_gpu_pct_at_100": {"mean": statistics.fmean(values), "std": statistics.pstdev(values),
                                           "per_seed": dict(zip([r[1] for r in mine], values, strict=True))},
            "allocation_curve": {"arrived_pct": list(range(0, 131)), "allocated_pct": curve},
        }
        if pods == "default" and policy in PUBLISHED_DEFAULT:
            report["policies"][policy]["published_default"] = PUBLISHED_DEFAULT[policy]
    return report


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    for policy, values in report["policies"].items():
        curve = values["allocation_curve"]
        mean = values["unallocated_gpu_pct_at_100"]["mean"]
        axes.plot(curve["arrived_pct"], curve["allocated_pct"], label=f"{policy} ({mean:.2f}% unallocated at 100%)")
    axes.plot([0, 130], [0, 130], color="grey", linestyle=":", linewidth=0.8)
    axes.set_xlim(60, 130)
    axes.set_ylim(60, 100)
    axes.set_xlabel("arrived GPU demand (% of capacity)")
    axes.set_ylabel("GPU allocation ratio (%)")
    axes.set_title(f"openb {report['pods']}: allocation vs arrived demand, seeds "
                   f"{report['seeds'][0]}–{report['seeds'][-1]}")
    axes.legend(loc="lower right", fontsize=8)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
