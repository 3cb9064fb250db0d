"""Held-out workload families made from the openb trace: what a placement rule is judged on after it was chosen.

Who calls it: ``hetsched families`` (the CLI), then ``hetsched sweep --trace-dir OUT`` replays what it wrote.

A rule chosen on the trace's published pod lists can be fitted to them. These families are workloads nobody
tuned on, made from the same pods the way operators' workloads differ from the published ones:

- ``mix-uniform-K``: each pod drawn from one of the source lists chosen uniformly, then from that list
  uniformly (as many pods as the ``default`` list);
- ``mix-random-K``: the same with the lists' weights drawn at random (a flat Dirichlet);
- ``share-K``: the ``default`` list with every GPU-sharing pod's share perturbed (× a log-normal factor,
  σ 0.3, rounded to 10 milli within 10–990);
- ``nodes-K``: the ``default`` list on a random subset of the GPU nodes (25, 50 or 75 % of them; the replay
  inflates the workload to the subset's capacity);
- ``cpu-K``: the ``default`` list asking for more CPU (× 1.2, 1.35, 1.5, 1.65: past 1.0 of the cluster's CPU
  when its GPU demand meets the GPUs, so CPU runs out first), capped at the largest node's CPU.

Each family has ``members`` members, each from its own random stream (``seed`` and the member's number), so
the same command writes the same files. They are written as a trace folder (``OUT/csv/openb_pod_list_*.csv``
and the node list; a ``nodes-K`` member's own node list beside it), which ``hetsched sweep`` reads as it
reads the trace. Nothing here is copied into the repository: ``OUT`` is the caller's.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Sequence
from pathlib import Path

from hetsched.replay.openb import TraceError, TraceNode, TracePod, load_nodes, load_pods

SOURCES = ("cpu050", "cpu100", "cpu200", "default", "gpuspec10", "gpushare40", "gpushare80", "multigpu20")
"""The pod lists a rule may be chosen on (``../shared/traces``): the families are made from these only."""
NODE_LIST = "openb_node_list_gpu_node.csv"
FAMILIES = ("mix-uniform", "mix-random", "share", "nodes", "cpu")
CPU_FACTORS = (1.2, 1.35, 1.5, 1.65)
NODE_SHARES = (0.25, 0.5, 0.75)
SHARE_SIGMA = 0.3
MAX_MEMBERS = 20


def _mixture(rng: random.Random, lists: Sequence[list[TracePod]], weights: Sequence[float],
             count: int) -> list[TracePod]:
    return [rng.choice(lists[rng.choices(range(len(lists)), weights)[0]]) for _ in range(count)]


def _perturbed_shares(rng: random.Random, pods: list[TracePod]) -> list[TracePod]:
    made = []
    for pod in pods:
        if pod.num_gpu == 1 and pod.gpu_milli < 1000:
            milli = round(pod.gpu_milli * math.exp(rng.gauss(0.0, SHARE_SIGMA)) / 10) * 10
            pod = TracePod(pod.name, pod.cpu_milli, pod.memory_mib, 1, min(990, max(10, milli)), pod.gpu_spec)
        made.append(pod)
    return made


def _cpu_heavier(pods: list[TracePod], factor: float, largest: int) -> list[TracePod]:
    return [TracePod(p.name, min(largest, round(p.cpu_milli * factor / 100) * 100), p.memory_mib, p.num_gpu,
                     p.gpu_milli, p.gpu_spec) for p in pods]


def member(family: str, index: int, seed: int, sources: dict[str, list[TracePod]],
           nodes: list[TraceNode]) -> tuple[list[TracePod], list[TraceNode] | None]:
    """Member ``index`` (from 1) of ``family``: its pods, and its own node list where it has one."""
    rng = random.Random(f"{family}/{index}/{seed}")
    default = sources["default"]
    lists = [sources[name] for name in SOURCES]
    if family == "mix-uniform":
        return _mixture(rng, lists, [1.0] * len(lists), len(default)), None
    if family == "mix-random":
        weights = [rng.gammavariate(1.0, 1.0) for _ in lists]
        return _mixture(rng, lists, weights, len(default)), None
    if family == "share":
        return _perturbed_shares(rng, default), None
    if family == "nodes":
        share = NODE_SHARES[(index - 1) % len(NODE_SHARES)]
        subset = sorted(rng.sample(range(len(nodes)), max(1, round(share * len(nodes)))))
        return default, [nodes[i] for i in subset]
    if family == "cpu":
        factor = CPU_FACTORS[(index - 1) % len(CPU_FACTORS)]
        return _cpu_heavier(default, factor, max(n.cpu_milli for n in nodes)), None
    raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")


def _write_pods(path: Path, pods: list[TracePod]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"))
        for number, pod in enumerate(pods):
            writer.writerow((f"pod-{number:05d}", pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli,
                             "|".join(pod.gpu_spec)))


def _write_nodes(path: Path, nodes: list[TraceNode]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(("sn", "cpu_milli", "memory_mib", "gpu", "model"))
        writer.writerows((n.name, n.cpu_milli, n.memory_mib, n.gpus, n.model) for n in nodes)


def generate(trace_dir: Path, out: Path, members: int, seed: int,
             families: Sequence[str] = FAMILIES) -> list[str]:
    """Write every member of ``families`` under ``out/csv``; returns the pod lists' names, in order. The
    source lists are read (and checked) first; ``out`` must not be the trace itself."""
    if not 1 <= members <= MAX_MEMBERS:
        raise ValueError(f"--members must be between 1 and {MAX_MEMBERS}, not {members}")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown or not families:
        raise ValueError(f"--family: unknown {', '.join(repr(f[:40]) for f in unknown[:5]) or 'none given'}; "
                         f"known: {', '.join(FAMILIES)}")
    folder = trace_dir / "csv"
    for name in (NODE_LIST, *(f"openb_pod_list_{s}.csv" for s in SOURCES)):
        if not (folder / name).exists():
            raise TraceError(f"{folder / name}: not found (--trace-dir {trace_dir}: the families are made from "
                             f"the {len(SOURCES)} shared pod lists)")
    nodes = load_nodes(folder / NODE_LIST)
    sources = {name: load_pods(folder / f"openb_pod_list_{name}.csv") for name in SOURCES}
    target = out / "csv"
    if target.resolve() == folder.resolve():
        raise ValueError(f"--out {out}: that is the trace itself; give another folder")
    target.mkdir(parents=True, exist_ok=True)
    _write_nodes(target / NODE_LIST, nodes)
    written = []
    for family in families:
        for index in range(1, members + 1):
            name = f"{family}-{index}"
            pods, own_nodes = member(family, index, seed, sources, nodes)
            _write_pods(target / f"openb_pod_list_{name}.csv", pods)
            if own_nodes is not None:
                _write_nodes(target / f"openb_node_list_{name}.csv", own_nodes)
            written.append(name)
    return written
