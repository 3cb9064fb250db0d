"""The chip-partition study of docs/devices.md: A100 40GB servers under an inference-heavy mixed workload,
each inference pod given a whole GPU, a milli share, or a MIG partition (``hetsched.sim.partition_study``).
Prints the Markdown tables and writes the figures as JSON.

    .venv/bin/python bench/partition_study.py [--servers 16] [--hours 12] [--load 0.8] [--seeds 1 2 3]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from hetsched.sim.partition_study import MODES, StudySetup, combine, run, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=16)
    parser.add_argument("--hours", type=float, default=12.0)
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--out", type=Path, default=Path("bench/out/partition-study.json"))
    args = parser.parse_args()
    started = time.perf_counter()
    combined = []
    for mode in MODES:
        runs = [run(StudySetup(servers=args.servers, hours=args.hours, load=args.load, seed=seed), mode)
                for seed in args.seeds]
        combined.append(combine(runs))
    print(table(combined))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    setup = asdict(StudySetup(servers=args.servers, hours=args.hours, load=args.load))
    args.out.write_text(json.dumps({"setup": {**setup, "seeds": args.seeds}, "modes": combined}, indent=2),
                        encoding="utf-8")
    print(f"\n{len(MODES) * len(args.seeds)} runs in {time.perf_counter() - started:.0f} s; figures in {args.out}")


if __name__ == "__main__":
    main()
