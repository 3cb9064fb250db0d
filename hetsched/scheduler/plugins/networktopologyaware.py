"""``network-topology-aware``: binpack over the HyperNode tree, so that whole network domains stay free for
the next big gang (Volcano's plugin of that name and its ``fading`` argument).

Who calls it: the session, at two points.
- ``HyperNodeOrder``, when placement (``scheduler.engine.placement``) chooses the HyperNode of a tier that will
  hold a gang with a ``networkTopology`` bound: the fuller HyperNode first, its ancestors' fullness counting
  too, each tier up weighted ``fading`` times less — so a gang goes next to running work, under the spine
  that is already busiest, and leaves empty domains whole.
- ``NodeScore``, for the pods of bounded gangs inside their HyperNode and for single-pod jobs
  (``hypernode.binpack.normal-pod.enable``): a node scores by how full its HyperNodes are, tier 1 with
  weight 1, tier 2 with ``fading``, tier 3 ``fading²``…; a lone pod thus fills the domains already in use
  instead of taking one server out of an empty one. Unbounded gangs of several pods are not scored: pulled
  towards the fullest domains their pods scatter over the leftover servers of many (measured in the
  HyperNode study, docs/scheduler.md: 190 of 242 such gangs crossed a spine, against 69 without the score).

Fullness of a HyperNode: per weighted resource r that the job requests, ``Σ used_r / Σ allocatable_r``
over its servers, averaged with the weights (Volcano's ``hypernode.binpack.*`` keys). It is kept per tier
and domain for the session and updated on every tentative allocation (``on_allocate``/``on_deallocate``),
not recomputed per call. Invariant: a pod's node score reads its domains' fullness as of the start of its
group's placement — pods of the same group do not raise their own domain's score (scores stay node-local
for one placement, as ``scheduler.contract.framework`` requires); the next group sees them.

Without HyperNodes every score is 0 and nothing is kept: the plugin costs nothing on a flat cluster.

Arguments::

    - name: network-topology-aware
      arguments:
        weight: 1
        hypernode.binpack.cpu: 1
        hypernode.binpack.memory: 1
        hypernode.binpack.resources: huawei.com/Ascend910     # default: every accelerator in the cluster
        hypernode.binpack.resources.huawei.com/Ascend910: 2
        hypernode.binpack.normal-pod.enable: true
        hypernode.binpack.normal-pod.fading: 0.8
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.api.accelerators import accelerator_kind
from hetsched.scheduler.contract.arrays import FloatArray, IntArray
from hetsched.scheduler.contract.framework import Arguments, HyperNodeOrder, NodeScore, Plugin
from hetsched.scheduler.contract.snapshot import JobInfo, NetworkArrays, TaskGroup

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "network-topology-aware"
MAX_SCORE = 100.0
PREFIX = "hypernode.binpack."


class NetworkTopologyAware(Plugin, HyperNodeOrder, NodeScore):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({"weight", f"{PREFIX}cpu", f"{PREFIX}memory", f"{PREFIX}resources",
                               f"{PREFIX}normal-pod.enable", f"{PREFIX}normal-pod.fading"},
                              prefixes=(f"{PREFIX}resources.",))
        self.weight = arguments.number("weight", 1)
        self.fading = arguments.number(f"{PREFIX}normal-pod.fading", 0.8)
        if self.fading > 1:
            raise ValueError(f"plugin {NAME}: argument {PREFIX}normal-pod.fading must be ≤ 1 (a higher tier "
                             f"never weighs more than a lower one), got {self.fading:g}")
        self.normal_pods = arguments.flag(f"{PREFIX}normal-pod.enable", True)
        self.resource_weights: dict[str, float] = {"cpu": arguments.number(f"{PREFIX}cpu", 1),
                                                   "memory": arguments.number(f"{PREFIX}memory", 1)}
        raw = arguments.values.get(f"{PREFIX}resources")
        self.listed: list[str] | None = None
        if raw is not None:
            self.listed = [r.strip() for r in arguments.text(f"{PREFIX}resources", "").split(",") if r.strip()]
            for resource in self.listed:
                self.resource_weights[resource] = arguments.number(f"{PREFIX}resources.{resource}", 1)
        for key in arguments.values:
            name = key[len(f"{PREFIX}resources."):]
            if key.startswith(f"{PREFIX}resources.") and (self.listed is None or name not in self.listed):
                raise ValueError(f"plugin {NAME}: {key} is set but {name} is not listed in {PREFIX}resources")
        self._network: NetworkArrays | None = None
        self._columns = np.zeros(0, dtype=np.int64)
        self._weights = np.zeros(0, dtype=np.float64)
        self._used: dict[int, FloatArray] = {}
        """Tier → (domain, weighted column) resources held, updated as pods are tentatively placed."""
        self._alloc: dict[int, FloatArray] = {}
        self._parents: dict[tuple[int, int], IntArray] = {}
        self._fullness_cache: dict[tuple[int, bytes], FloatArray] = {}
        """(tier, which weighted resources are requested) → fullness per domain; emptied on every change."""

    def on_session_open(self, session: SessionView) -> None:
        network = session.snapshot.network
        self._network = network
        if network is None or not self.weight:
            return
        resources = session.snapshot.resources
        weights = dict(self.resource_weights)
        if self.listed is None:  # by default every accelerator in the cluster counts, with weight 1
            for name in resources.names:
                if accelerator_kind(name) is not None:
                    weights.setdefault(name, 1.0)
        chosen = [(resources.columns[name], w) for name, w in weights.items() if w and name in resources.columns]
        self._columns = np.asarray([c for c, _ in chosen], dtype=np.int64)
        self._weights = np.asarray([w for _, w in chosen], dtype=np.float64)
        nodes = session.nodes
        exists = nodes.exists
        for tier in network.tiers:
            domain = network.domain[tier]
            inside = (domain >= 0) & exists
            count = len(network.names[tier])
            used = np.zeros((count, len(chosen)), dtype=np.float64)
            alloc = np.zeros((count, len(chosen)), dtype=np.float64)
            for i, column in enumerate(self._columns.tolist()):
                used[:, i] = np.bincount(domain[inside], weights=nodes.used[column][inside], minlength=count)
                alloc[:, i] = np.bincount(domain[inside], weights=nodes.alloc[column][inside], minlength=count)
            self._used[tier] = used
            self._alloc[tier] = alloc

    def _account(self, group: TaskGroup, nodes: IntArray, sign: float) -> None:
        if self._network is None or not self._used or not len(nodes):
            return
        self._fullness_cache.clear()
        request = group.request[self._columns].astype(np.float64) * sign
        for tier, used in self._used.items():
            ids = self._network.domain[tier][nodes]
            ids = ids[ids >= 0]
            if ids.size:
                np.add.at(used, ids, request)

    def on_allocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        self._account(group, nodes, 1.0)

    def on_deallocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        self._account(group, nodes, -1.0)

    def _fullness(self, tier: int, requested: FloatArray) -> FloatArray:
        """Per domain of ``tier``: the weighted mean of used/allocatable over the resources requested."""
        asked = requested[self._columns] > 0
        key = (tier, asked.tobytes())
        cached = self._fullness_cache.get(key)
        if cached is not None:
            return cached
        alloc = self._alloc[tier]
        weights = np.where(asked, self._weights, 0.0)
        total = weights.sum()
        if total == 0:
            fullness: FloatArray = np.zeros(alloc.shape[0], dtype=np.float64)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                share = np.where(alloc > 0, self._used[tier] / np.where(alloc > 0, alloc, 1), 0.0)
            fullness = np.minimum(share, 1.0) @ weights / total
        self._fullness_cache[key] = fullness
        return fullness

    def _parent(self, tier: int, above: int) -> IntArray:
        """Per domain of ``tier``, its ancestor's id at tier ``above`` (-1: none)."""
        cached = self._parents.get((tier, above))
        if cached is None:
            assert self._network is not None
            domain = self._network.domain[tier]
            count = len(self._network.names[tier])
            cached = np.full(count, -1, dtype=np.int64)
            rows = np.flatnonzero(domain >= 0)
            cached[domain[rows]] = self._network.domain[above][rows]  # a domain's servers share its ancestors
            self._parents[(tier, above)] = cached
        return cached

    def hypernode_score(self, session: SessionView, job: JobInfo, tier: int, domains: IntArray) -> FloatArray:
        if self._network is None or tier not in self._used or not self.weight:
            return np.zeros(len(domains), dtype=np.float64)
        requested = np.zeros(len(session.snapshot.resources.names), dtype=np.float64)
        for group in job.groups:
            if group.pending:
                requested = np.maximum(requested, group.request)
        score = self._fullness(tier, requested)[domains]
        norm = 1.0
        for above in self._network.tiers:
            if above <= tier:
                continue
            factor = self.fading ** (above - tier)
            parents = self._parent(tier, above)[domains]
            fullness = self._fullness(above, requested)
            score = score + factor * np.where(parents >= 0, fullness[np.maximum(parents, 0)], 0.0)
            norm += factor
        return score / norm * MAX_SCORE * self.weight

    def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        score = np.zeros(len(nodes), dtype=np.float64)
        unbounded = group.job.podgroup.spec.networkTopology is None
        if (self._network is None or not self._used or not self.weight
                or (unbounded and (not self.normal_pods or group.job.total_pods > 1))):
            return score
        requested = group.request.astype(np.float64)
        norm = 0.0
        for tier in self._network.tiers:
            factor = self.fading ** (tier - self._network.tiers[0])
            ids = self._network.domain[tier][nodes]
            fullness = self._fullness(tier, requested)
            score += factor * np.where(ids >= 0, fullness[np.maximum(ids, 0)], 0.0)
            norm += factor
        return score / norm * MAX_SCORE * self.weight
