"""The openb arrival-only placement experiment (FGD paper, ATC'23), and its placement policies.

Who calls it: ``hetsched replay-openb``. Method (the published simulator's, read from its source, see
docs/replay.md): the GPU nodes only (``openb_node_list_gpu_node.csv``); per seed the pod list is shuffled
and pods sampled from it are appended until GPU demand reaches 130 % of capacity (:func:`tune`); pods are
placed one by one, arrival only (pods never leave). A pod fits a node when CPU, memory, the GPU model
(``gpu_spec``) and GPUs fit: a sharing pod needs one GPU with at least its ``gpu_milli`` free, a k-GPU pod k
entirely free GPUs. The policy scores feasible nodes 0–100 (integers, as Kubernetes score plugins do); the
highest wins and equal scores go to the node first in a seeded random node order; the GPU index is chosen
by the policy too. After each arrival the GPU allocation ratio is sampled against arrived demand; the
headline is the share of GPUs left unallocated when arrived demand is 100 % (:meth:`ReplayResult.unallocated_at`).

Policies (definitions from the published simulator, traces.md §A2): ``fgd``, ``bestfit``, ``dotprod``,
``gpupacking``, ``gpuclustering``, ``random``; hetsched's ``fgd-adaptive`` (recommended, ``best``), ``fgd-blend``,
``fgd-full`` and ``fgd-cpufit``.
"""

from __future__ import annotations

import bisect
import functools
import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hetsched.replay.openb import TraceNode, TracePod
from hetsched.scheduler.contract.typical import COMMON, typical_shares

IntArray = npt.NDArray[np.int64]
AFFINITIES = 9
"""GPU affinities: 0 for a sharing pod, else the pod's GPU count (1–8)."""
State = tuple[int, str, tuple[int, ...]]
"""A node as the scores see it: free CPU milli, GPU model, free milli of each of its GPUs."""
FULL = 1000


@dataclass
class Cluster:
    """Per node: free CPU and memory, and free milli-GPU per GPU slot (-1 where the node has no such GPU)."""

    names: list[str]
    models: list[str]
    cpu_cap: IntArray
    cpu_free: IntArray
    mem_free: IntArray
    gpu_free: IntArray
    gpu_count: IntArray
    affinity: IntArray = field(default_factory=lambda: np.zeros((0, AFFINITIES), dtype=np.int64))
    """node × affinity (:func:`affinity`, 0–8): how many GPU pods of each it hosts (for GpuClustering)."""
    rank: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per node: its place in the run's random node order; equal scores go to the lowest rank. The
    published simulator prefixes node names with a seeded random permutation and its scheduler breaks ties
    by the smallest name, so a tie is not a coin toss: it always favours the same nodes, which packs."""
    state_id: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per node: the id of its scoring state — (free CPU, model, free milli per GPU) — in :attr:`states`.
    Nodes in one state score alike for every pod, so a policy scores each state once (kept by
    :meth:`place`: one node changes per placement)."""
    states: list[State] = field(default_factory=list)
    _state_ids: dict[State, int] = field(default_factory=dict)

    def _state(self, row: int) -> int:
        gpus = tuple(self.gpu_free[row, : int(self.gpu_count[row])].tolist())
        key = (int(self.cpu_free[row]), self.models[row], gpus)
        found = self._state_ids.get(key)
        if found is None:
            found = self._state_ids[key] = len(self.states)
            self.states.append(key)
        return found

    @classmethod
    def from_nodes(cls, nodes: list[TraceNode]) -> Cluster:
        gpu = np.full((len(nodes), 8), -1, dtype=np.int64)
        for row, node in enumerate(nodes):
            gpu[row, : node.gpus] = FULL
        cluster = cls(
            names=[n.name for n in nodes], models=[n.model for n in nodes],
            cpu_cap=np.array([n.cpu_milli for n in nodes], dtype=np.int64),
            cpu_free=np.array([n.cpu_milli for n in nodes], dtype=np.int64),
            mem_free=np.array([n.memory_mib for n in nodes], dtype=np.int64),
            gpu_free=gpu, gpu_count=np.array([n.gpus for n in nodes], dtype=np.int64),
            affinity=np.zeros((len(nodes), AFFINITIES), dtype=np.int64), rank=np.arange(len(nodes), dtype=np.int64),
        )
        cluster.state_id = np.array([cluster._state(row) for row in range(len(nodes))], dtype=np.int64)
        return cluster

    @property
    def gpu_capacity(self) -> int:
        return int(self.gpu_count.sum()) * FULL

    def allocated(self) -> int:
        return self.gpu_capacity - int(np.where(self.gpu_free > 0, self.gpu_free, 0).sum())

    def feasible(self, pod: TracePod) -> IntArray:
        ok = (self.cpu_free >= pod.cpu_milli) & (self.mem_free >= pod.memory_mib)
        if pod.num_gpu:
            if pod.gpu_spec:
                ok &= np.isin(np.array(self.models, dtype=object), pod.gpu_spec)
            if pod.gpu_milli < FULL:
                ok &= (self.gpu_free >= pod.gpu_milli).any(axis=1)
            else:
                ok &= (self.gpu_free == FULL).sum(axis=1) >= pod.num_gpu
        return np.flatnonzero(ok)

    def place(self, row: int, pod: TracePod, gpus: list[int]) -> None:
        self.cpu_free[row] -= pod.cpu_milli
        self.mem_free[row] -= pod.memory_mib
        for gpu in gpus:
            self.gpu_free[row, gpu] -= pod.gpu_milli
            assert self.gpu_free[row, gpu] >= 0
        if pod.num_gpu:
            self.affinity[row, affinity(pod)] += 1
        self.state_id[row] = self._state(row)


def affinity(pod: TracePod) -> int:
    """The published simulator's GPU affinity of a pod: 0 for every sharing pod ("share-gpu"), else its
    GPU count ("1-gpu", "2-gpu", …)."""
    return 0 if pod.gpu_milli < FULL else pod.num_gpu


def default_gpus(cluster: Cluster, row: int, pod: TracePod) -> list[int]:
    """Whole-GPU pods take the lowest free GPUs; sharing pods the tightest fitting GPU ("best" selection)."""
    free = cluster.gpu_free[row]
    if not pod.num_gpu:
        return []
    if pod.gpu_milli >= FULL:
        return [int(g) for g in np.flatnonzero(free == FULL)[: pod.num_gpu]]
    fitting = np.flatnonzero(free >= pod.gpu_milli)
    return [int(fitting[np.argmin(free[fitting])])]


Choice = tuple[int, list[int]]
Policy = Callable[[Cluster, TracePod, IntArray, random.Random], Choice]


def _pick(cluster: Cluster, rows: IntArray, scores: npt.NDArray[np.int64]) -> int:
    """The highest score wins; among equals, the node first in the run's node order."""
    best = rows[scores == scores.max()]
    return int(best[np.argmin(cluster.rank[best])])


def random_policy(cluster: Cluster, pod: TracePod, rows: IntArray, rng: random.Random) -> Choice:
    row = int(rows[rng.randrange(len(rows))])
    free = cluster.gpu_free[row]
    if pod.num_gpu and pod.gpu_milli < FULL:
        fitting = np.flatnonzero(free >= pod.gpu_milli)
        return row, [int(fitting[rng.randrange(len(fitting))])]
    return row, default_gpus(cluster, row, pod)


def _gpu_free_total(cluster: Cluster, rows: IntArray) -> npt.NDArray[np.float64]:
    free = cluster.gpu_free[rows]
    total: npt.NDArray[np.float64] = np.where(free > 0, free, 0).sum(axis=1).astype(np.float64)
    return total


def bestfit(cluster: Cluster, pod: TracePod, rows: IntArray, rng: random.Random) -> Choice:
    max_cpu = float(cluster.cpu_cap.max())
    max_gpu = float(cluster.gpu_count.max() * FULL) or 1.0
    cpu_left = (cluster.cpu_free[rows] - pod.cpu_milli) / max_cpu
    gpu_left = (_gpu_free_total(cluster, rows) - pod.gpu_request) / max_gpu
    scores = ((1 - 0.5 * cpu_left - 0.5 * gpu_left) * 100).astype(np.int64)
    row = _pick(cluster, rows, scores)
    return row, default_gpus(cluster, row, pod)


def dotprod(cluster: Cluster, pod: TracePod, rows: IntArray, rng: random.Random) -> Choice:
    max_cpu = float(cluster.cpu_cap.max())
    max_gpu = float(cluster.gpu_count.max() * FULL) or 1.0
    dot = (cluster.cpu_free[rows] / max_cpu) * (pod.cpu_milli / max_cpu) + \
        (_gpu_free_total(cluster, rows) / max_gpu) * (pod.gpu_request / max_gpu)
    scores = ((1 - dot / 2) * 100).astype(np.int64)
    row = _pick(cluster, rows, scores)
    return row, default_gpus(cluster, row, pod)


def gpupacking(cluster: Cluster, pod: TracePod, rows: IntArray, rng: random.Random) -> Choice:
    """Three tiers: fits on partly used GPUs (100 − their free ratio / 10, ≥ 50); needs whole GPUs on a used
    node (50 − whole GPUs taken, ≥ 33); an idle node (max(33 − free GPUs, free GPUs)); CPU-only pods 0."""
    scores = np.zeros(len(rows), dtype=np.int64)
    if pod.num_gpu:  # the score reads the node's GPUs only: once per distinct node state
        unique, inverse = np.unique(cluster.state_id[rows], return_inverse=True)
        per_state = [_packing(pod.num_gpu, pod.gpu_milli, cluster.states[state][2]) for state in unique.tolist()]
        scores = np.asarray(per_state, dtype=np.int64)[inverse]
    row = _pick(cluster, rows, scores)
    return row, default_gpus(cluster, row, pod)


@functools.lru_cache(maxsize=1 << 16)
def _packing(num_gpu: int, gpu_milli: int, free: tuple[int, ...]) -> int:
    """GpuPacking's score of a node whose GPUs have ``free`` milli for a pod of ``num_gpu`` × ``gpu_milli``."""
    whole = sum(1 for g in free if g == FULL)
    if whole == len(free):
        return max(33 - whole, whole)
    needed, taken_whole, ratio = num_gpu, 0, 0
    for g in sorted(free):
        if needed and g >= gpu_milli:
            needed -= 1
            taken_whole += g == FULL
            ratio += g * 100 // FULL
    return max(50 - taken_whole, 33) if taken_whole else max(100 - ratio // 10, 50)


def gpuclustering(cluster: Cluster, pod: TracePod, rows: IntArray, rng: random.Random) -> Choice:
    """Bands by the GPU request types a node already hosts: only this type (75, 100], this and others
    (50, 75], none (25, 50], only others (0, 25]; within a band the less free GPU (in absolute milli, against
    the largest node) the better; CPU-only pods 0."""
    scores = np.zeros(len(rows), dtype=np.int64)
    if pod.num_gpu:
        max_spec = int(cluster.gpu_count.max()) * FULL
        left = _gpu_free_total(cluster, rows).astype(np.int64)
        fullness = 25 * (max_spec - left) // max_spec
        held = cluster.affinity[rows]
        kinds = (held > 0).sum(axis=1)
        base = np.where(held[:, affinity(pod)] > 0, np.where(kinds == 1, 75, 50), np.where(kinds > 0, 0, 25))
        scores = base + fullness
    row = _pick(cluster, rows, scores)
    return row, default_gpus(cluster, row, pod)


@dataclass
class TypicalPods:
    """The workload's pod shapes for FGD, grouped by (GPU milli, GPU count, models) with, per group, the
    sorted CPU requests and cumulative probabilities (so P(cpu request ≤ x) is one bisect)."""

    groups: list[tuple[int, int, tuple[str, ...], list[int], list[float]]]
    cpu_only: tuple[list[int], list[float]]

    @classmethod
    def from_pods(cls, pods: list[TracePod], popularity: float = 95.0, keep_multi_gpu: int = 0,
                  common: float = 1.0) -> TypicalPods:
        """The published simulator's ``GetTypicalPods``: the most frequent exact shapes (CPU, GPU milli, GPU
        count, models), CPU-only pods included, until they cover ``popularity`` % of the pods (95 % in the
        published experiments), renormalised. ``keep_multi_gpu=k`` (hetsched's refinement) also keeps every
        shape asking for k or more whole GPUs however rare: one 8-GPU pod that finds no empty node strands
        eight GPUs, so FGD must see those shapes to keep such nodes whole. ``common`` < 1 blends that cut
        with the full distribution (``scheduler.contract.typical``: the rule the ``fgd`` plugin uses too)."""
        exact = Counter((p.cpu_milli, p.gpu_milli, p.num_gpu, p.gpu_spec) for p in pods)
        keep = (lambda shape: shape[2] >= keep_multi_gpu) if keep_multi_gpu else None
        shares = typical_shares(exact, cut=popularity, common=common, keep=keep)
        by_shape: dict[tuple[int, int, tuple[str, ...]], dict[int, float]] = {}
        for (cpu, milli, num, spec), share in shares.items():
            by_shape.setdefault((milli, num, spec), {})[cpu] = share
        groups = []
        cpu_only: tuple[list[int], list[float]] = ([], [])
        for (milli, num, spec), weights in sorted(by_shape.items()):
            cpus = sorted(weights)
            cumulative, running = [], 0.0
            for cpu in cpus:
                running += weights[cpu]
                cumulative.append(running)
            if num == 0:
                cpu_only = (cpus, cumulative)
            else:
                groups.append((milli, num, spec, cpus, cumulative))
        return cls(groups, cpu_only)

    def fragmentation(self, cpu_free: int, model: str, gpus: tuple[int, ...]) -> float:
        """Expected fragmented milli-GPUs: free GPU milli that typical pods cannot use (FGD's F(n))."""
        total = float(sum(gpus))
        usable = 0.0
        for milli, num, spec, cpus, cumulative in self.groups:
            if spec and model not in spec:
                continue
            fitting = [g for g in gpus if g >= milli]
            if len(fitting) < num:
                continue
            index = bisect.bisect_right(cpus, cpu_free)
            if index:
                usable += cumulative[index - 1] * sum(fitting)
        return total * self.mass - usable

    @property
    def mass(self) -> float:
        return sum(c[-1] for *_, c in self.groups) + (self.cpu_only[1][-1] if self.cpu_only[1] else 0.0)


Scored = tuple[tuple[int, int], list[int]]


class FGD:
    """Fragmentation gradient descent: place where the expected fragmentation F grows least (drops most).

    The score is the published plugin's, ``int(sigmoid(ΔF / 1000) × 100)``, so nodes whose ΔF differ by less
    than a few hundredths of a GPU tie, and a tie goes to the node first in the run's order (which packs).

    hetsched's ``fgd-full`` changes two things, both read off the measure itself rather than tuned per pod
    list:

    1. F is taken against the workload's full distribution of pod shapes (``TypicalPods`` at 100 %), the
       expectation FGD stands for, instead of the published code's cut at the most frequent shapes covering
       95 % of pods. The cut drops exactly the rare shapes that fragmentation hurts most: GPU-model
       constraints (``gpu_spec``), multi-GPU pods and CPU-heavy ones.
    2. A look-ahead for CPU-only pods (``cpu_pods_to_full_gpus``): their ΔF is zero on most nodes (they take
       no GPU), so they tie; the tie goes to the node with the least free GPU left, because the CPU that
       future GPU pods will ask of a node grows with the GPUs it has free. CPU is taken where no GPU pod
       will want it, and stays next to the free GPUs.

    ``fgd-blend`` keeps change 2 and takes F against the published cut and the full distribution half and
    half (``scheduler.contract.typical``): the cut's common shapes count more, the rare ones still count.
    Chosen on the eight shared pod lists (below FGD on each, where ``fgd-full`` ties it on two), it ties FGD
    on CPU-heavier workloads, where ``fgd-full`` wins; ``fgd-adaptive`` (``--policy best``) is the blend
    while the workload runs out of GPUs first and the full distribution once it runs out of CPU first
    (:class:`AdaptiveFGD`; docs/replay.md, "Held-out families").

    ``fgd-full`` was ``best`` before the held-out families; ``fgd-cpufit`` (``best`` until the pod lists it
    was tuned on were compared with the 15 it was not,
    docs/replay.md) is change 2 with typical pods cut at 95 % but keeping every multi-GPU shape
    (``keep_multi_gpu``); that rule did not generalise. Variants measured and found worse on the tuning
    lists (docs/replay.md): comparing ΔF as a real number, breaking GPU pods' ties by the tightest GPU or
    CPU fit or by node size, the full distribution without change 2, weighting shapes by their GPU demand
    or by how scarce room for them has become, and ordering the pods of a batch by size.
    """

    def __init__(self, typical: TypicalPods, cpu_pods_to_full_gpus: bool = False) -> None:
        self.typical = typical
        self.cpu_pods_to_full_gpus = cpu_pods_to_full_gpus
        self.memo: dict[tuple[int, str, tuple[int, ...]], float] = {}
        self.scored: dict[tuple[tuple[int, int, int], State], Scored] = {}
        """(pod CPU, GPU count, GPU milli), node state → :meth:`_node_score` (which reads nothing else)."""

    def _f(self, cpu_free: int, model: str, gpus: tuple[int, ...]) -> float:
        key = (cpu_free, model, tuple(sorted(gpus)))
        value = self.memo.get(key)
        if value is None:
            value = self.memo[key] = self.typical.fragmentation(cpu_free, model, key[2])
        return value

    @staticmethod
    def _options(pod: TracePod, gpus: tuple[int, ...]) -> list[list[int]]:
        """The GPU sets to try: none for a CPU-only pod, the lowest free GPUs for a whole-GPU pod, and for a
        sharing pod one GPU per distinct free amount (first index), as the published plugin tries each."""
        if pod.num_gpu == 0:
            return [[]]
        if pod.gpu_milli >= FULL:
            return [[i for i, g in enumerate(gpus) if g == FULL][: pod.num_gpu]]
        seen: set[int] = set()
        options = []
        for i, g in enumerate(gpus):
            if g >= pod.gpu_milli and g not in seen:
                seen.add(g)
                options.append([i])
        return options

    def _node_score(self, pod: TracePod, cpu: int, model: str, gpus: tuple[int, ...]) -> Scored:
        """The node's score (FGD's integer, then the tie-break) and the GPUs the pod would take there."""
        before = self._f(cpu, model, gpus)
        best: Scored | None = None
        for option in self._options(pod, gpus):
            after = list(gpus)
            for i in option:
                after[i] -= pod.gpu_milli
            delta = before - self._f(cpu - pod.cpu_milli, model, tuple(after))
            score = (int(100 / (1 + math.exp(-delta / 1000))), 0)
            if self.cpu_pods_to_full_gpus and pod.num_gpu == 0:
                score = (score[0], -sum(after))
            if best is None or score > best[0]:
                best = (score, option)
        assert best is not None
        return best

    def __call__(self, cluster: Cluster, pod: TracePod, rows: IntArray, rng: random.Random) -> Choice:
        """Score each distinct node state among ``rows`` once; the best score wins, equal scores go to the
        node first in the run's order (vectorised over the nodes; the same choice as scoring node by node)."""
        ids = cluster.state_id[rows]
        unique = np.unique(ids)
        keys = np.empty(len(unique), dtype=np.int64)
        choices: dict[int, list[int]] = {}
        shape = (pod.cpu_milli, pod.num_gpu, pod.gpu_milli)
        if len(self.scored) > MAX_SCORED:
            self.scored.clear()
        for index, state in enumerate(unique.tolist()):
            key = (shape, cluster.states[state])
            scored = self.scored.get(key)
            if scored is None:  # pods repeat shapes and nodes repeat states: ~95 % of scores are asked again
                scored = self.scored[key] = self._node_score(pod, *key[1])
            (score, tie), choice = scored
            keys[index] = score * _SCORE_RADIX + tie + _TIE_OFFSET  # (score, tie) compared as one integer
            choices[state] = choice
        best = unique[keys == keys.max()]
        candidates = rows[np.isin(ids, best)]
        row = int(candidates[np.argmin(cluster.rank[candidates])])
        return row, choices[int(cluster.state_id[row])]


def cpu_asked(pods: list[TracePod], cluster: Cluster) -> float:
    """The CPU ``pods`` ask for when their GPU demand equals the cluster's GPUs, over the cluster's CPU (the
    "CPU asked" column of docs/replay.md): above 1 the workload runs out of CPU before it runs out of GPUs."""
    gpu = sum(p.gpu_request for p in pods)
    cpu = sum(p.cpu_milli for p in pods)
    total_cpu = int(cluster.cpu_cap.sum())
    if not gpu or not total_cpu:
        return math.inf if cpu else 0.0
    return cpu * cluster.gpu_capacity / gpu / total_cpu


class AdaptiveFGD:
    """``fgd-adaptive``: ``fgd-blend`` while the workload runs out of GPUs first (CPU asked below 1), and
    ``fgd-full`` (the full distribution) once it runs out of CPU first: there the CPU-heavy shapes the cut
    leaves out are the ones whose fragmentation decides what fits. Decided once, on the first pod, from the
    pod list and the cluster."""

    def __init__(self, pods: list[TracePod]) -> None:
        self.pods = pods
        self.chosen: FGD | None = None

    def __call__(self, cluster: Cluster, pod: TracePod, rows: IntArray, rng: random.Random) -> Choice:
        if self.chosen is None:
            common = COMMON if cpu_asked(self.pods, cluster) < 1.0 else 0.0
            self.chosen = FGD(TypicalPods.from_pods(self.pods, common=common), cpu_pods_to_full_gpus=True)
        return self.chosen(cluster, pod, rows, rng)


MAX_SCORED = 1 << 20
"""Scores kept before the cache starts afresh (bounded memory on the longest pod lists)."""
_TIE_OFFSET = 1 << 24
"""The tie-break is 0 or minus the GPU milli left on a node (at most 8 × 1000): offset to non-negative."""
_SCORE_RADIX = 1 << 26


POLICIES: dict[str, Callable[[list[TracePod]], Policy]] = {
    "fgd": lambda pods: FGD(TypicalPods.from_pods(pods)),
    "fgd-full": lambda pods: FGD(TypicalPods.from_pods(pods, popularity=100.0), cpu_pods_to_full_gpus=True),
    "fgd-cpufit": lambda pods: FGD(TypicalPods.from_pods(pods, keep_multi_gpu=2), cpu_pods_to_full_gpus=True),
    "fgd-blend": lambda pods: FGD(TypicalPods.from_pods(pods, common=COMMON), cpu_pods_to_full_gpus=True),
    "fgd-adaptive": AdaptiveFGD,
    "bestfit": lambda pods: bestfit,
    "dotprod": lambda pods: dotprod,
    "gpupacking": lambda pods: gpupacking,
    "gpuclustering": lambda pods: gpuclustering,
    "random": lambda pods: random_policy,
}


def tune(pods: list[TracePod], capacity: int, ratio: float, rng: random.Random) -> list[TracePod]:
    """The published simulator's workload tuning (``SortClusterPods`` then ``tuneUpPods``): the pod list is
    shuffled with the run's ``rng``, then pods sampled from the list with the same ``rng`` are appended until
    one more would take the total GPU request past ``ratio`` × capacity. So the first arrivals are the list
    itself in a random order and only the tail is sampled."""
    stream = list(pods)
    rng.shuffle(stream)
    total = sum(p.gpu_request for p in pods)
    target = ratio * capacity
    while True:
        extra = pods[rng.randrange(len(pods))]
        if total + extra.gpu_milli > target:  # the published check adds gpu_milli, not the pod's total
            break
        stream.append(extra)
        total += extra.gpu_request
    return stream


@dataclass
class ReplayResult:
    arrived_pct: list[float]
    allocated_pct: list[float]
    failed: int
    cluster: Cluster

    def unallocated_at(self, arrived: float) -> float:
        """100 − allocation ratio when arrived demand is ``arrived`` % of GPU capacity, measured as the
        published analysis does: the mean over every arrival whose arrived % rounds to ``arrived``
        (half a point either side), else over ±1 point, else at the nearest arrival."""
        for half in (0.5, 1.5):
            low = bisect.bisect_left(self.arrived_pct, arrived - half)
            high = bisect.bisect_left(self.arrived_pct, arrived + half)
            if high > low:
                return 100.0 - sum(self.allocated_pct[low:high]) / (high - low)
        index = min(bisect.bisect_left(self.arrived_pct, arrived), len(self.allocated_pct) - 1)
        return 100.0 - self.allocated_pct[index]


def replay(nodes: list[TraceNode], pods: list[TracePod], policy: str, seed: int, ratio: float = 1.3) -> ReplayResult:
    rng = random.Random(seed)
    cluster = Cluster.from_nodes(nodes)
    capacity = cluster.gpu_capacity
    stream = tune(pods, capacity, ratio, rng)
    order = list(range(len(nodes)))
    rng.shuffle(order)
    cluster.rank = np.array(order, dtype=np.int64)
    choose = POLICIES[policy](pods)
    arrived = 0
    allocated = 0
    arrived_pct, allocated_pct = [], []
    failed = 0
    for pod in stream:
        arrived += pod.gpu_request
        rows = cluster.feasible(pod)
        if len(rows):
            row, gpus = choose(cluster, pod, rows, rng)
            cluster.place(row, pod, gpus)
            allocated += pod.gpu_request
        else:
            failed += 1
        arrived_pct.append(100.0 * arrived / capacity)
        allocated_pct.append(100.0 * allocated / capacity)
    return ReplayResult(arrived_pct, allocated_pct, failed, cluster)
