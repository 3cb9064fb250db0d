"""Run the openb comparison used in docs/replay.md and print its Markdown tables.

    .venv/bin/python bench/openb_table.py                       # the 8 shared pod lists (about 5 min on 2 cores)
    .venv/bin/python bench/openb_table.py --trace-dir DIR       # every pod list in DIR/csv (23 lists: 11 min)
    .venv/bin/python bench/openb_table.py --no-run              # only re-reads bench/out/openb/*.json

Two parts. `default` with every policy, against the published figures. Then `hetsched sweep` over every pod
list in the trace folder with FGD, `fgd-full` (hetsched's recommended policy when the table was made; now
`fgd-adaptive`, docs/replay.md "Held-out families") and the earlier `fgd-cpufit`: per pod list the mean,
the paired wins and losses against FGD and the sign test's p; pooled
over the pod lists `fgd-cpufit` was tuned on, over the others, and over all, with Wilcoxon's signed-rank p.
"CPU asked" is the CPU a pod list asks for when its GPU demand equals the cluster's GPUs, over the
cluster's CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from hetsched.replay.openb import TraceError, TraceNode, load_nodes, load_pods
from hetsched.replay.paired import sign_test, signed_rank_test

OUT = Path("bench/out/openb")
TUNED_ON = ("cpu050", "cpu100", "cpu200", "default", "gpushare40", "gpushare80", "gpuspec10", "multigpu20")
"""The eight pod lists in ../shared/traces: the ones fgd-cpufit was tuned on and fgd-full was chosen on."""
PUBLISHED_FGD = {"cpu050": 5.00, "cpu100": 4.79, "cpu200": 5.18, "cpu250": 6.80, "default": 4.77,
                 "gpushare100": 13.36, "gpushare40": 6.04, "gpushare60": 8.75, "gpushare80": 10.92,
                 "gpuspec10": 5.34, "gpuspec20": 5.34, "gpuspec25": 6.09, "gpuspec33": 12.16, "multigpu20": 4.47,
                 "multigpu30": 3.64, "multigpu40": 3.09, "multigpu50": 2.91}
"""FGD's unallocated GPU % at 100 % arrived per pod list, mean of seeds 42–51: the published simulator's
``analysis_allo_discrete.csv`` (traces.md §A2); it has no runs of cpu037, cpu072, cpu235, cpu300,
gpushare20 and gpuspec05."""
POLICIES = ("fgd", "fgd-full", "fgd-cpufit")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-run", action="store_true")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--trace-dir", default="../shared/traces/alibaba-gpu-v2023")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    hetsched = [sys.executable, "-m", "hetsched.cli.main"]
    if not args.no_run:
        subprocess.run([*hetsched, "replay-openb", "--trace-dir", args.trace_dir, "--pods", "default", "--policy",
                        "fgd,bestfit,gpupacking,gpuclustering,dotprod,random,fgd-full", "--seeds", args.seeds,
                        "--json", str(OUT / "default-all.json"), "--plot", str(OUT / "default.png")],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([*hetsched, "sweep", "--trace-dir", args.trace_dir, "--pods", "all", "--policy",
                        ",".join(POLICIES), "--seeds", args.seeds, "--json", str(OUT / "sweep.json"), "--csv",
                        str(OUT / "sweep.csv"), "--plot", str(OUT / "sweep.png")],
                       check=True, stdout=subprocess.DEVNULL)
    default_table()
    print()
    sweep_tables(json.loads((OUT / "sweep.json").read_text())["cells"], Path(args.trace_dir))
    return 0


def default_table() -> None:
    default = json.loads((OUT / "default-all.json").read_text())
    print("| policy (`default`) | ours, unallocated GPU % at 100 % arrived (mean ± std) | published | difference |")
    print("|---|---|---|---|")
    for name, values in sorted(default["policies"].items(),
                               key=lambda kv: kv[1]["unallocated_gpu_pct_at_100"]["mean"]):
        stats = values["unallocated_gpu_pct_at_100"]
        published = values.get("published_default")
        diff = "–" if published is None else f"{stats['mean'] - published:+.2f}"
        shown = "–" if published is None else f"{published:.2f}"
        print(f"| {name} | {stats['mean']:.2f} ± {stats['std']:.2f} | {shown} | {diff} |")


def cpu_asked(trace_dir: Path, nodes: list[TraceNode] | None, pods: str) -> str:
    """The CPU the pod list asks for when its GPU demand equals the cluster's GPUs (``nodes``), as a
    multiple of the cluster's CPU: above 1, CPU runs out before GPUs do."""
    try:
        listed = load_pods(trace_dir / "csv" / f"openb_pod_list_{pods}.csv")
    except TraceError:
        return "–"
    if nodes is None:
        return "–"
    gpus = sum(n.gpus for n in nodes) * 1000
    scale = gpus / sum(p.gpu_request for p in listed)
    return f"{sum(p.cpu_milli for p in listed) * scale / sum(n.cpu_milli for n in nodes):.2f}"


def sweep_tables(cells: list[dict[str, Any]], trace_dir: Path) -> None:
    value = {(c["pods"], c["policy"], c["seed"]): c["unallocated_gpu_pct_at_100"] for c in cells}
    lists = sorted({c["pods"] for c in cells}, key=lambda name: (name not in TUNED_ON, name))
    seeds = sorted({c["seed"] for c in cells})
    try:
        nodes: list[TraceNode] | None = load_nodes(trace_dir / "csv" / "openb_node_list_gpu_node.csv")
    except TraceError:
        nodes = None

    def diffs(policy: str, names: list[str]) -> list[float]:
        return [value[(n, policy, s)] - value[(n, "fgd", s)] for n in names for s in seeds]

    print("| pod list | tuned on | CPU asked | fgd published | fgd ours | fgd-full (`best` then) | − fgd "
          "| wins / losses | sign p | fgd-cpufit − fgd | wins / losses |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in lists:
        fgd = [value[(name, "fgd", s)] for s in seeds]
        full = [value[(name, "fgd-full", s)] for s in seeds]
        new, old = diffs("fgd-full", [name]), diffs("fgd-cpufit", [name])
        published = PUBLISHED_FGD.get(name)
        print(f"| {name} | {'yes' if name in TUNED_ON else 'no'} | {cpu_asked(trace_dir, nodes, name)} "
              f"| {'–' if published is None else f'{published:.2f}'} "
              f"| {statistics.fmean(fgd):.2f} ± {statistics.pstdev(fgd):.2f} "
              f"| {statistics.fmean(full):.2f} ± {statistics.pstdev(full):.2f} | {statistics.fmean(new):+.2f} "
              f"| {_record(new)} | {sign_test(*_counts(new)):.3g} | {statistics.fmean(old):+.2f} | {_record(old)} |")
    print()
    print("| pod lists | policy | pairs (list × seed) | wins / losses | mean − fgd | sign p | signed-rank p "
          "| lists better / worse | sign p over lists |")
    print("|---|---|---|---|---|---|---|---|---|")
    groups = (("tuned on (8)", [n for n in lists if n in TUNED_ON]),
              (f"not tuned on ({sum(n not in TUNED_ON for n in lists)})", [n for n in lists if n not in TUNED_ON]),
              (f"all ({len(lists)})", lists))
    for title, names in groups:
        if not names:
            continue
        for policy in POLICIES[1:]:
            paired = diffs(policy, names)
            means = [statistics.fmean(diffs(policy, [n])) for n in names]
            print(f"| {title} | {policy} | {len(paired)} | {_record(paired)} | {statistics.fmean(paired):+.3f} "
                  f"| {sign_test(*_counts(paired)):.2g} | {signed_rank_test(paired):.2g} | {_record(means)} "
                  f"| {sign_test(*_counts(means)):.2g} |")


def _counts(paired: list[float]) -> tuple[int, int]:
    return sum(d < 0 for d in paired), sum(d > 0 for d in paired)


def _record(paired: list[float]) -> str:
    wins, losses = _counts(paired)
    return f"{wins} / {losses}"


if __name__ == "__main__":
    sys.exit(main())
