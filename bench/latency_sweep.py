"""Run ``hetsched bench latency`` at 1k, 3k and 10k nodes (10 running pods per node, 1,000 pods/s arriving),
one process per size so each peak RSS is its own, and print a Markdown table with the cost growth.

    .venv/bin/python bench/latency_sweep.py [--sizes 1000 3000 10000] [--out bench/out/latency.json]
    .venv/bin/python bench/latency_sweep.py --sizes 10000 --against REV

``--against REV``: the same steady state on the scheduler at git revision REV (checked out into a temporary
worktree), in this one run; the benchmark's own modules (``benchmark/latency.py``, ``workload.py``, and
``metrics/gc_pauses.py``, whose collection schedule the benchmark runs as the scheduler process does) are
this tree's, so only the scheduler differs. Prints this / REV for the latencies and the cycle time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from engine_sweep import worktree

BENCH_MODULES = ("hetsched/benchmark/latency.py", "hetsched/benchmark/workload.py", "hetsched/metrics/gc_pauses.py")


def bench(nodes: int, per_node: int, rate: float, seconds: float, env: dict[str, str],
          root: Path | None = None) -> dict[str, Any]:
    """One run in its own process (of the scheduler under ``root`` when given)."""
    run_env = {**env, "PYTHONPATH": str(root)} if root is not None else env
    code = ("import gc, json, sys; gc.set_threshold(50_000, 20, 20); "
            "from hetsched.benchmark.latency import run_latency_benchmark as run; "
            "a = sys.argv; print(json.dumps(run(int(a[1]), int(a[2]), float(a[3]), seconds=float(a[4]))))")
    done = subprocess.run([sys.executable, "-c", code, str(nodes), str(nodes * per_node), str(rate), str(seconds)],
                          check=False, env=run_env, capture_output=True, text=True, cwd=root)
    if done.returncode != 0:
        raise SystemExit(f"the run at {nodes} nodes{f' of {root}' if root else ''} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _row(row: dict[str, Any], base: dict[str, Any]) -> str:
    lat, gang, cycle, snap = row["latency_ms"], row["latency_8_pod_gangs_ms"], row["cycle_ms"], row["snapshot_ms"]
    growth = cycle["p50"] / base["cycle_ms"]["p50"]
    return (f"| {row['nodes']:,} | {row['running_target']:,} | {lat['count']:,} | {lat['p50']:.1f} | {lat['p99']:.1f} "
            f"| {gang['p99']:.1f} | {row['jobs_that_waited_for_capacity']} | {cycle['p50']:.1f} | {cycle['p99']:.1f} "
            f"| {snap['p50']:.2f} | {row['busy_share']:.2f} | {row.get('steady_peak_rss_mb', 0):,.0f} "
            f"| {row['peak_rss_mb']:,.0f} | {growth:.2f}× |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 10000])
    parser.add_argument("--running-per-node", type=int, default=10)
    parser.add_argument("--arrival-rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=Path("bench/out/latency.json"))
    parser.add_argument("--against", help="git revision whose scheduler to compare with, in the same run")
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    rows: list[dict[str, Any]] = []
    for nodes in args.sizes:
        rows.append(bench(nodes, args.running_per_node, args.arrival_rate, args.seconds, env))
    if args.against:
        with worktree(args.against) as baseline:
            for module in BENCH_MODULES:
                (baseline / module).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(module, baseline / module)
            for row in list(rows):
                old = bench(row["nodes"], args.running_per_node, args.arrival_rate, args.seconds, env, baseline)
                row["against"] = {"revision": args.against, **old}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print("| nodes | running | jobs | latency p50 ms | p99 | 8-pod p99 | waited for capacity | cycle p50 ms | p99 "
          "| snapshot p50 ms | busy | steady-state peak RSS MB | peak RSS with the fill MB | cycle vs smallest |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(_row(row, rows[0]))
    for row in rows:
        if "against" in row:
            old = row["against"]
            print(f"\n{row['nodes']:,} nodes, {args.against}: " + _row(old, old))
            print(f"this / {args.against}: latency p50 {row['latency_ms']['p50'] / old['latency_ms']['p50']:.3f}, "
                  f"p99 {row['latency_ms']['p99'] / old['latency_ms']['p99']:.3f}, "
                  f"cycle p50 {row['cycle_ms']['p50'] / old['cycle_ms']['p50']:.3f}")
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
