"""``hetsched sweep``: the openb replay over a grid — placement policies × pod lists × seeds — written as one
table (CSV and JSON) and one plot.

Who calls it: the CLI. Each cell (pod list, policy, seed) is one replay (``replay.engine``) run by an
executor: a local process pool (``--jobs``), or a Dask cluster (``--dask ADDRESS``, or ``--dask local`` for
a LocalCluster on this machine; the optional ``distributed`` extra) when one machine is not enough. Cells
are collected in the order they were submitted, so the table is the same byte for byte whatever runs them.
"""

from __future__ import annotations

import csv
import re
import statistics
from concurrent.futures import Executor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hetsched.replay.engine import replay
from hetsched.replay.openb import TraceError, load_nodes, load_pods
from hetsched.replay.paired import sign_test, signed_rank_test

NODE_LIST = "openb_node_list_gpu_node.csv"
POD_LIST = re.compile(r"openb_pod_list_([A-Za-z0-9_.-]+)\.csv")
MAX_CELLS = 100_000


@dataclass(frozen=True)
class Cell:
    pods: str
    policy: str
    seed: int


@dataclass(frozen=True)
class Row:
    pods: str
    policy: str
    seed: int
    unallocated_gpu_pct_at_100: float
    failed_pods: int


def pod_lists(trace_dir: Path, wanted: str) -> list[str]:
    """The pod lists ``wanted`` names (a comma list, or ``all``: every ``openb_pod_list_*.csv``), checked."""
    folder = trace_dir / "csv"
    found = sorted(m.group(1) for p in folder.glob("openb_pod_list_*.csv") if (m := POD_LIST.fullmatch(p.name)))
    if wanted.strip() == "all":
        if not found:
            raise TraceError(f"{folder}: no openb_pod_list_*.csv (--trace-dir {trace_dir})")
        return found
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    bad = [n for n in names if n not in found]
    if not names or bad:
        shown = ", ".join(repr(n[:40]) for n in bad[:5]) or repr(wanted[:40])
        raise TraceError(f"--pods: no such pod list {shown} in {folder} (known: {', '.join(found[:30]) or 'none'})")
    return names


def cells(lists: list[str], policies: list[str], seeds: list[int]) -> list[Cell]:
    grid = [Cell(pods, policy, seed) for pods in lists for policy in policies for seed in seeds]
    if len(grid) > MAX_CELLS:
        raise ValueError(f"the sweep has {len(grid):,} cells (pod lists × policies × seeds); at most {MAX_CELLS:,}")
    return grid


def node_list(folder: Path, pods: str) -> Path:
    """The nodes a pod list is replayed on: its own ``openb_node_list_<pods>.csv`` where there is one (a
    held-out family's node subset, ``replay.families``), else the trace's GPU nodes."""
    own = folder / f"openb_node_list_{pods}.csv"
    return own if own.exists() else folder / NODE_LIST


def run_cell(trace_dir: str, cell: Cell) -> Row:
    """One replay (in a worker process, local or on a Dask worker)."""
    folder = Path(trace_dir) / "csv"
    result = replay(load_nodes(node_list(folder, cell.pods)), load_pods(folder / f"openb_pod_list_{cell.pods}.csv"),
                    cell.policy, cell.seed)
    return Row(cell.pods, cell.policy, cell.seed, result.unallocated_at(100.0), result.failed)


def run_sweep(trace_dir: Path, grid: list[Cell], executor: Executor) -> list[Row]:
    folder = trace_dir / "csv"
    load_nodes(folder / NODE_LIST)  # fail fast, with line numbers, before anything is sent out
    for name in sorted({c.pods for c in grid}):
        load_nodes(node_list(folder, name))
        load_pods(folder / f"openb_pod_list_{name}.csv")
    return list(executor.map(run_cell, [str(trace_dir)] * len(grid), grid))


MEMBER = re.compile(r"(.+)-\d+")
"""A pod list named ``<family>-<n>`` is member n of a family (``replay.families``)."""


def summary(rows: list[Row]) -> list[dict[str, Any]]:
    """Per pod list and policy: mean, standard deviation and count of the unallocated GPU %, and against
    the first policy of the sweep (same pod list, same seed: a paired comparison) the seeds it wins and
    loses, the mean paired difference and the sign test's p (``replay.paired``). Then one row per policy for
    each family of pod lists (``<family>-<n>``, two members or more: ``pods`` "<family>-*") and, when the
    sweep has more than one pod list, for ``pods`` "all": every pair pooled, with Wilcoxon's signed-rank p as
    well — the figures that say whether an advantage holds across workloads."""
    by_key: dict[tuple[str, str], dict[int, float]] = {}
    for row in rows:
        by_key.setdefault((row.pods, row.policy), {})[row.seed] = row.unallocated_gpu_pct_at_100
    first = rows[0].policy if rows else ""
    result = []
    for (pods, policy), values in by_key.items():
        base = by_key.get((pods, first), {})
        diffs = [values[s] - base[s] for s in values if s in base]
        result.append({"pods": pods, "policy": policy, **_figures(list(values.values()), diffs, first)})
    families: dict[str, set[str]] = {}
    for pods, _ in by_key:
        if (member := MEMBER.fullmatch(pods)) is not None:
            families.setdefault(member.group(1), set()).add(pods)
    groups = [(f"{family}-*", names) for family, names in families.items() if len(names) > 1]
    if len({pods for pods, _ in by_key}) > 1:
        groups.append(("all", {pods for pods, _ in by_key}))
    for label, names in groups:
        for policy in dict.fromkeys(policy for _, policy in by_key):
            every: list[float] = []
            paired: list[float] = []
            for pods in sorted(names):
                values, base = by_key.get((pods, policy), {}), by_key.get((pods, first), {})
                every.extend(values.values())
                paired.extend(values[s] - base[s] for s in values if s in base)
            figures = _figures(every, paired, first)
            figures[f"signed_rank_p_vs_{first}"] = signed_rank_test(paired)
            result.append({"pods": label, "policy": policy, **figures})
    return result


def _figures(values: list[float], diffs: list[float], first: str) -> dict[str, Any]:
    wins = sum(1 for d in diffs if d < 0)
    losses = sum(1 for d in diffs if d > 0)
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values), "seeds": len(values),
            f"wins_vs_{first}": wins, f"losses_vs_{first}": losses,
            f"mean_diff_vs_{first}": statistics.fmean(diffs) if diffs else 0.0,
            f"sign_p_vs_{first}": sign_test(wins, losses)}


def write_csv(rows: list[Row], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(Row.__dataclass_fields__))
        writer.writeheader()
        writer.writerows(asdict(row) for row in rows)


def as_json(rows: list[Row]) -> dict[str, Any]:
    return {"cells": [asdict(row) for row in rows], "summary": summary(rows)}


def plot(rows: list[Row], path: Path) -> None:
    """Grouped bars: per pod list, each policy's mean unallocated GPU % with its standard deviation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = [r for r in summary(rows) if r["pods"] != "all"]
    lists = list(dict.fromkeys(r["pods"] for r in table))
    policies = list(dict.fromkeys(r["policy"] for r in table))
    width = 0.8 / max(len(policies), 1)
    figure, axes = plt.subplots(figsize=(max(6.0, 1.2 * len(lists) * max(len(policies), 1) * 0.5 + 2), 4.5))
    for index, policy in enumerate(policies):
        mine = {r["pods"]: r for r in table if r["policy"] == policy}
        xs = [i + index * width for i, name in enumerate(lists) if name in mine]
        axes.bar(xs, [mine[n]["mean"] for n in lists if n in mine], width, yerr=[mine[n]["std"] for n in lists
                                                                              if n in mine], label=policy)
    axes.set_xticks([i + width * (len(policies) - 1) / 2 for i in range(len(lists))], lists, rotation=45, ha="right")
    axes.set_ylabel("unallocated GPU % at 100 % arrived")
    axes.set_title(f"openb sweep: {len(policies)} policies × {len(lists)} pod lists × "
                   f"{max((r['seeds'] for r in table), default=0)} seeds")
    axes.legend(fontsize=8)
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
