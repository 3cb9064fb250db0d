"""The business-line budget study of docs/queues.md: three business lines over 30 simulated days of an
openb-like workload, with shares only, weekly GPU-hour budgets (Wait, Stop, Idle), and fair share at three
half-lives (``hetsched.sim.budget_study``). Prints the Markdown table and writes the figures as JSON.

    .venv/bin/python bench/budget_study.py [--servers 4] [--days 30] [--load 1.1] [--seeds 1] [--modes …]

Reads ``../shared/traces/alibaba-gpu-v2023/csv/openb_pod_list_default.csv`` (``--trace``); exits with a
clear message when it is absent.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from hetsched.sim.budget_study import MODES, StudySetup, combine, read_pods, run, table

TRACE = Path(__file__).resolve().parents[2] / "shared/traces/alibaba-gpu-v2023/csv/openb_pod_list_default.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--load", type=float, default=1.1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--out", type=Path, default=Path("bench/out/budget-study.json"))
    args = parser.parse_args()
    setup = StudySetup(servers=args.servers, days=args.days, load=args.load)
    if not args.trace.is_file():
        sys.exit(f"budget study: the openb pod list is not at {args.trace} (give --trace)")
    try:
        pods = read_pods(args.trace, setup)
    except ValueError as exc:
        sys.exit(f"budget study: {exc}")
    started = time.perf_counter()
    combined = []
    for mode in args.modes:
        began = time.perf_counter()
        runs = [run(StudySetup(servers=args.servers, days=args.days, load=args.load, seed=seed), mode, pods)
                for seed in args.seeds]
        combined.append(combine(runs))
        print(f"{mode}: {time.perf_counter() - began:.0f} s", file=sys.stderr)
    print(table(combined))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"setup": {**asdict(setup), "seeds": args.seeds}, "modes": combined}, indent=2),
                        encoding="utf-8")
    print(f"\n{len(args.modes) * len(args.seeds)} runs in {time.perf_counter() - started:.0f} s; figures in {args.out}")


if __name__ == "__main__":
    main()
