"""The network-topology study of docs/scheduler.md: a 3-tier Ascend cluster (512 servers, 16 per tier-1
HyperNode, 4 of those per tier-2, 8 of those under one tier-3) under hard-bounded, soft-bounded and
unconstrained gangs, with ``network-topology-aware``, without it, and topology-blind
(``hetsched.sim.network_study``). Prints the Markdown tables, writes the figures as JSON and the
simulation report (with the per-domain occupancy plot) of the default policy's first seed.

    .venv/bin/python bench/hypernode_study.py [--servers 512] [--load 0.8] [--seeds 1 2 3]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from hetsched.sim.network_study import POLICIES, StudySetup, combine, run, table
from hetsched.sim.report import render


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=512)
    parser.add_argument("--tiers", type=int, nargs="+", default=[16, 4, 8])
    parser.add_argument("--hours", type=float, default=12.0)
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--out", type=Path, default=Path("bench/out/hypernode-study.json"))
    parser.add_argument("--report", type=Path, default=Path("bench/out/hypernode-study.html"))
    args = parser.parse_args()
    combined = []
    started = time.perf_counter()
    for policy in POLICIES:
        runs = []
        for seed in args.seeds:
            setup = StudySetup(servers=args.servers, tiers=tuple(args.tiers), hours=args.hours, load=args.load,
                               seed=seed)
            figures, results = run(setup, policy, timeline=policy == "binpack" and seed == args.seeds[0])
            if results.timeline is not None:
                args.report.parent.mkdir(parents=True, exist_ok=True)
                args.report.write_text(render(results, f"HyperNode study: {policy}, seed {seed}"), encoding="utf-8")
            runs.append(figures)
        combined.append(combine(runs))
    print(table(combined))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"setup": vars(args) | {"out": str(args.out), "report": str(args.report)},
                                    "policies": combined}, indent=2), encoding="utf-8")
    print(f"\n{len(POLICIES) * len(args.seeds)} runs in {time.perf_counter() - started:.0f} s; figures in {args.out}, "
          f"report in {args.report}")


if __name__ == "__main__":
    main()
