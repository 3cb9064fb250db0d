"""Run the openb comparison used in docs/replay.md and print its Markdown tables.

    .venv/bin/python bench/openb_table.py            # runs the replays (about 30 min on 2 cores)
    .venv/bin/python bench/openb_table.py --no-run   # only re-reads bench/out/openb/*.json

`default` runs every policy; the other pod lists run FGD and hetsched's recommended policy (`best`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

OUT = Path("bench/out/openb")
LISTS = ("default", "cpu050", "cpu100", "cpu200", "gpushare40", "gpushare80", "gpuspec10", "multigpu20")
PUBLISHED_FGD = {"default": 4.77, "cpu050": 5.00, "cpu100": 4.79, "cpu200": 5.18, "gpushare40": 6.04,
                 "gpushare80": 10.92, "gpuspec10": 5.34, "multigpu20": 4.47}
"""FGD's unallocated GPU % at 100 % arrived per pod list, mean of seeds 42–51 (traces.md §A2)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-run", action="store_true")
    parser.add_argument("--seeds", default="42-51")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if not args.no_run:
        for pods in LISTS:
            policy, target = ("all", f"{pods}-all.json") if pods == "default" else ("fgd,best", f"{pods}-fgd-best.json")
            extra = ["--plot", str(OUT / "default.png")] if pods == "default" else []
            subprocess.run([sys.executable, "-m", "hetsched.cli.main", "replay-openb", "--pods", pods, "--policy",
                            policy, "--seeds", args.seeds, "--json", str(OUT / target), *extra],
                           check=True, stdout=subprocess.DEVNULL)
    default = json.loads((OUT / "default-all.json").read_text())
    print("| policy | ours, unallocated GPU % at 100 % arrived (mean ± std) | published | difference |")
    print("|---|---|---|---|")
    for name, values in sorted(default["policies"].items(),
                               key=lambda kv: kv[1]["unallocated_gpu_pct_at_100"]["mean"]):
        stats = values["unallocated_gpu_pct_at_100"]
        published = values.get("published_default")
        diff = "–" if published is None else f"{stats['mean'] - published:+.2f}"
        shown = "–" if published is None else f"{published:.2f}"
        print(f"| {name} | {stats['mean']:.2f} ± {stats['std']:.2f} | {shown} | {diff} |")
    print()
    print("| pod list | fgd (published) | fgd (ours) | fgd-cpufit (best) | best − fgd |")
    print("|---|---|---|---|---|")
    for pods in LISTS:
        path = OUT / (f"{pods}-all.json" if pods == "default" else f"{pods}-fgd-best.json")
        report = json.loads(path.read_text())["policies"]
        fgd = report["fgd"]["unallocated_gpu_pct_at_100"]
        best = report["fgd-cpufit"]["unallocated_gpu_pct_at_100"]
        print(f"| {pods} | {PUBLISHED_FGD[pods]:.2f} | {fgd['mean']:.2f} ± {fgd['std']:.2f} "
              f"| {best['mean']:.2f} ± {best['std']:.2f} | {best['mean'] - fgd['mean']:+.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
