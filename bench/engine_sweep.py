"""Run ``hetsched bench engine`` at 1k, 5k and 10k nodes (10 pending pods per node), one process per size so
each peak RSS is its own, and print a Markdown table with the per-pod cost growth.

    .venv/bin/python bench/engine_sweep.py [--sizes 1000 5000 10000] [--out bench/out/engine.json]

Single core: numpy's elementwise kernels used here are single-threaded; BLAS threads are pinned to 1 anyway.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--pods-per-node", type=int, default=10)
    parser.add_argument("--naive-seconds", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=Path("bench/out/engine.json"))
    parser.add_argument("--topology", action="store_true", help="chip inventories with server topology")
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    rows = []
    for nodes in args.sizes:
        with tempfile.NamedTemporaryFile(suffix=".json") as handle:
            subprocess.run([sys.executable, "-m", "hetsched.cli.main", "bench", "engine", "--nodes", str(nodes),
                            "--pods", str(nodes * args.pods_per_node), "--naive-seconds", str(args.naive_seconds),
                            "--json", handle.name, *(["--topology"] if args.topology else [])],
                           check=True, env=env, stdout=subprocess.DEVNULL)
            rows.append(json.loads(Path(handle.name).read_text()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    base = rows[0]
    print("| nodes | pods | jobs | bound | engine pods/s | end-to-end pods/s | naive pods/s | speed-up "
          "| µs/pod | µs/pod vs smallest | nodes vs smallest | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        growth = row["microseconds_per_pod"] / base["microseconds_per_pod"]
        print(f"| {row['nodes']:,} | {row['pods']:,} | {row['jobs']:,} | {row['pods_bound']:,} "
              f"| {row['pods_per_second']:,.0f} | {row['end_to_end_pods_per_second']:,.0f} "
              f"| {row['naive_pods_per_second']:,.1f} | {row['speedup_vs_naive']:,.0f}× "
              f"| {row['microseconds_per_pod']:.1f} | {growth:.2f}× | {row['nodes'] / base['nodes']:.0f}× "
              f"| {row['peak_rss_mb']:,.0f} |")
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
