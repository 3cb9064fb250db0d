"""Run ``hetsched bench engine`` at 1k, 5k and 10k nodes (10 pending pods per node), one process per size so
each peak RSS is its own, and print a Markdown table with the per-pod cost growth.

    .venv/bin/python bench/engine_sweep.py [--sizes 1000 5000 10000] [--out bench/out/engine.json]
    .venv/bin/python bench/engine_sweep.py --sizes 10000 --against REV [--rounds 3]

``--against REV``: the same bench on the code at git revision REV (checked out into a temporary worktree),
alternating this code and REV ``--rounds`` times in this one run, best of each; prints the throughput
ratio (this / REV), so a change's cost is measured on the same machine at the same moment.

Single core: numpy's elementwise kernels used here are single-threaded; BLAS threads are pinned to 1 anyway.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def _flags(args: argparse.Namespace) -> list[str]:
    return [*(["--topology"] if args.topology else []), *(["--network"] if args.network else [])]


def bench(nodes: int, pods_per_node: int, naive_seconds: float, flags: list[str], env: dict[str, str],
          root: Path | None = None) -> dict[str, float]:
    """One ``hetsched bench engine`` run, in its own process (of the code under ``root`` when given)."""
    run_env = {**env, "PYTHONPATH": str(root)} if root is not None else env
    with tempfile.NamedTemporaryFile(suffix=".json") as handle:
        subprocess.run([sys.executable, "-m", "hetsched.cli.main", "bench", "engine", "--nodes", str(nodes),
                        "--pods", str(nodes * pods_per_node), "--naive-seconds", str(naive_seconds),
                        "--json", handle.name, *flags],
                       check=True, env=run_env, stdout=subprocess.DEVNULL, cwd=root)
        result: dict[str, float] = json.loads(Path(handle.name).read_text())
        return result


@contextlib.contextmanager
def worktree(revision: str):  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as parent:
        path = Path(parent) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(path), revision], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # generated modules (the device-plugin protobuf stubs) are not in git: take this tree's
        generated = subprocess.run(["git", "ls-files", "--others", "--ignored", "--exclude-standard", "hetsched"],
                                   check=True, capture_output=True, text=True).stdout.split()
        for name in generated:
            if name.endswith(".py") and not (path / name).exists():
                shutil.copyfile(name, path / name)
        try:
            yield path
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(path)], check=False)


def against(args: argparse.Namespace, env: dict[str, str]) -> int:
    rows: list[dict[str, Any]] = []
    with worktree(args.against) as baseline:
        for nodes in args.sizes:
            best: dict[str, dict[str, float]] = {}
            for _ in range(args.rounds):
                for name, root in (("this", None), ("baseline", baseline)):
                    result = bench(nodes, args.pods_per_node, 1.0, _flags(args), env, root)
                    if name not in best or result["pods_per_second"] > best[name]["pods_per_second"]:
                        best[name] = result
            rows.append({"nodes": nodes, "pods": nodes * args.pods_per_node, "against": args.against,
                         "this": best["this"], "baseline": best["baseline"],
                         "ratio": best["this"]["pods_per_second"] / best["baseline"]["pods_per_second"],
                         "end_to_end_ratio": best["this"]["end_to_end_pods_per_second"]
                         / best["baseline"]["end_to_end_pods_per_second"]})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"| nodes | pods | engine pods/s (this) | engine pods/s ({args.against}) | ratio | end-to-end ratio |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['nodes']:,} | {row['pods']:,} | {row['this']['pods_per_second']:,.0f} "
              f"| {row['baseline']['pods_per_second']:,.0f} | {row['ratio']:.2f} | {row['end_to_end_ratio']:.2f} |")
    print(f"\nbest of {args.rounds} alternating runs each; written to {args.out}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--pods-per-node", type=int, default=10)
    parser.add_argument("--naive-seconds", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=Path("bench/out/engine.json"))
    parser.add_argument("--topology", action="store_true", help="chip inventories with server topology")
    parser.add_argument("--network", action="store_true", help="a 3-tier HyperNode tree and bounded gangs")
    parser.add_argument("--against", help="git revision to compare with, in the same run (see the docstring)")
    parser.add_argument("--rounds", type=int, default=3, help="with --against: alternating runs of each")
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if args.against:
        return against(args, env)
    rows = [bench(nodes, args.pods_per_node, args.naive_seconds, _flags(args), env) for nodes in args.sizes]
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
