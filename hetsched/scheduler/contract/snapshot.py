"""The per-cycle snapshot: node arrays, jobs with their groups of identical pending pods, queues.

Who calls it: the cache builds one per cycle (``SchedulerCache.snapshot``); the session, actions and
plugins read it. All resource amounts are int64 milli-units in columns named by ``resources``.

Invariants:
- ``alloc``, ``used`` and ``releasing`` are copies taken at cycle start; the session mutates ``used`` as it
  tentatively places pods (and reverts on discard), never ``alloc``.
- A :class:`TaskGroup` holds pending pods of one job that are interchangeable for placement (same task,
  same placement key, same priority), so nodes are evaluated once per group, not once per pod.
- A shared (settled) :class:`JobInfo` is never changed in place: ``Snapshot.own`` gives the session a copy.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from hetsched.api.objects import NetworkTopology, PodAffinityTerm, PodGroup, PodSpec, QueueAffinity, Taint
from hetsched.api.queue_access import Admits
from hetsched.devices.policy import bit_weights

if TYPE_CHECKING:
    from hetsched.scheduler.contract.arrays import BoolArray, FloatArray, IntArray
    from hetsched.scheduler.contract.carving import Carving, Holding
    from hetsched.scheduler.contract.status import Status

CORE_RESOURCES = ("cpu", "memory", "pods")
MODELS_ANNOTATION = "hetsched.io/accelerator-models"
"""Pod annotation: accelerator models the pod accepts, ``|``-separated."""
MLU_LINK_ANNOTATION = "hetsched.io/mlu-link-policy"
"""Pod annotation: the MLU-Link policy for this pod's MLUs, overriding the cluster-wide one."""
NUMA_ANNOTATION = "hetsched.io/numa-node"
"""Pod annotation written at bind: the NUMA node the pod's exclusive CPUs and chips were placed on."""


class ResourceIndex:
    """Resource name ↔ column. Grows when a new resource name appears; never shrinks."""

    def __init__(self, names: tuple[str, ...] = CORE_RESOURCES) -> None:
        self.names: list[str] = list(names)
        self.columns: dict[str, int] = {n: i for i, n in enumerate(self.names)}

    def __len__(self) -> int:
        return len(self.names)

    def add(self, name: str) -> bool:
        """Register ``name``; return True when it is new (vectors must then be rebuilt)."""
        if name in self.columns:
            return False
        self.columns[name] = len(self.names)
        self.names.append(name)
        return True

    def vector(self, amounts: dict[str, int]) -> IntArray:
        vec = np.zeros(len(self.names), dtype=np.int64)
        for name, amount in amounts.items():
            vec[self.columns[name]] = amount
        return vec

    def as_dict(self, vec: IntArray | FloatArray) -> dict[str, float]:
        return {n: float(vec[i]) for i, n in enumerate(self.names) if vec[i]}


@dataclass
class NodeArrays:
    """Every known node as an index. ``alloc``, ``used`` and ``releasing`` are resource × node matrices (one
    contiguous row per resource). Deleted nodes keep their index (``schedulable`` False) so indices are stable."""

    names: list[str]
    alloc: IntArray
    used: IntArray
    releasing: IntArray
    schedulable: BoolArray
    """Exists, is Ready and is not cordoned."""
    labels: list[dict[str, str]]
    taints: list[tuple[Taint, ...]]
    cordoned: BoolArray
    ready: BoolArray
    exists: BoolArray
    version: int
    """Changes whenever a node's labels, taints or flags change; keys caches of static predicates."""
    index: dict[str, int] = field(default_factory=dict)
    _label_codes: dict[str, tuple[IntArray, dict[str, int]]] = field(default_factory=dict)
    _taint_masks: list[dict[Taint, BoolArray]] = field(default_factory=list)
    """Holds :meth:`taint_masks` once built: once per node version, shared (like ``_label_codes``) by every
    snapshot of that version."""
    _totals: list[IntArray] = field(default_factory=list)
    """Holds :meth:`schedulable_total` once summed, shared the same way."""

    def __len__(self) -> int:
        return len(self.names)

    def schedulable_total(self) -> IntArray:
        """Allocatable summed over schedulable nodes (read-only)."""
        if not self._totals:
            alloc = self.alloc[:, self.schedulable]
            total = alloc.sum(axis=1) if alloc.shape[1] else np.zeros(self.alloc.shape[0], dtype=np.int64)
            total.flags.writeable = False
            self._totals.append(total)
        return self._totals[0]

    def taint_masks(self) -> dict[Taint, BoolArray]:
        """Every distinct taint → the nodes carrying it, in order of first appearance (read-only arrays)."""
        if not self._taint_masks:
            masks: dict[Taint, BoolArray] = {}
            for row, taints in enumerate(self.taints):
                for taint in taints:
                    mask = masks.get(taint)
                    if mask is None:
                        mask = masks[taint] = np.zeros(len(self.names), dtype=bool)
                    mask[row] = True
            for mask in masks.values():
                mask.flags.writeable = False
            self._taint_masks.append(masks)
        return self._taint_masks[0]

    def label_codes(self, key: str) -> tuple[IntArray, dict[str, int]]:
        """Integer codes of label ``key`` per node (-1 where absent) and the value → code vocabulary."""
        cached = self._label_codes.get(key)
        if cached is None:
            vocab: dict[str, int] = {}
            codes = np.full(len(self.names), -1, dtype=np.int64)
            for row, labels in enumerate(self.labels):
                value = labels.get(key)
                if value is not None:
                    codes[row] = vocab.setdefault(value, len(vocab))
            cached = (codes, vocab)
            self._label_codes[key] = cached
        return cached


@dataclass
class QueueInfo:
    name: str
    weight: float
    capability: FloatArray
    """Per resource; +inf where not limited."""
    guarantee: FloatArray
    state: str
    """Open, Closed, Closing, Unknown — or NotFound when jobs name a queue that does not exist."""
    reclaimable: bool
    allocated: FloatArray
    """Requests of this queue's pods that hold resources now, updated as the session allocates."""
    inqueue: FloatArray
    """minResources of Inqueue jobs not yet running (admitted but not placed)."""
    request: FloatArray
    """Allocated plus everything its jobs still ask for (pending pods; a Pending job's minResources)."""
    deserved: FloatArray | None = None
    share: float = 0.0
    affinity: QueueAffinity | None = None
    """Node groups the queue's pods must/should use or avoid (``nodegroup`` plugin)."""
    parent: str = ""
    """Parent queue (``spec.parent``); empty or ``root`` = top level."""
    fixed_deserved: FloatArray | None = None
    """``spec.deserved`` per resource (NaN where not set): an entitlement that replaces the weighted one."""
    priority: int = 0
    """``spec.priority``: higher-priority queues are served first, before the plugins' order (share)."""
    annotations: dict[str, str] = field(default_factory=dict)
    """The Queue's annotations (``nodegroup`` reads its per-node-group limits there)."""
    namespaces: Admits | None = None
    """Who may submit to it (``api.queue_access``: names listed, a namespace selector); None: every one."""
    exhausted: tuple[str, ...] = ()
    """Resources whose budget its ``QueueUsage`` says this period has used up (``controllers.usage``)."""
    when_exhausted: str = "Wait"
    """``Wait`` (its jobs asking those resources are not admitted or placed), ``Stop`` (and its running pods
    holding them are evicted) or ``Idle`` (they are placed only on capacity no other queue asks for, when
    ``allocate`` lends)."""
    renewal: float | None = None
    """When its ``QueueUsage``'s current period ends (a fresh budget)."""
    decayed: dict[str, float] = field(default_factory=dict)
    """Its ``QueueUsage``'s decayed hours per resource (``controllers.usage``; ``fairshare`` orders by them)."""
    decayed_by_namespace: dict[str, dict[str, float]] = field(default_factory=dict)
    used: dict[str, float] = field(default_factory=dict)
    """Hours its pods used this budget period, per resource (its ``QueueUsage``; for metrics)."""
    budget: dict[str, float] = field(default_factory=dict)
    """Hours per period it may use, per resource (its ``QueueUsage``'s ``spec.budget``)."""
    accounted_until: float | None = None
    """Run time up to this moment is in :attr:`used` (``status.accountedUntil``)."""


@dataclass
class TaskGroup:
    job_ref: weakref.ReferenceType[JobInfo] = field(repr=False)
    """Its job, weakly: a job lists its groups, and a strong reference back would make every waiting job a
    reference cycle that only the cyclic collector frees — one per waiting job per cycle, and its pauses
    (docs/performance.md). The snapshot holds the job for as long as its groups are used."""
    task: str
    spec: PodSpec
    placement_key: object
    request: IntArray
    columns: IntArray
    """Columns with a non-zero request (always includes ``pods``)."""
    priority: int
    pending: list[str]
    """Keys of the pending pods, in creation order; placement takes them from the front."""
    size: int = 0
    """Pending pods at snapshot time (``pending`` shrinks as the session places them)."""
    models: tuple[str, ...] = ()
    """Accelerator models the pods accept (``hetsched.io/accelerator-models``); empty = any."""
    mlu_link: str = ""
    """The pods' own MLU-Link policy (``hetsched.io/mlu-link-policy``); empty = the cluster-wide one."""
    numa_policy: str = ""
    """The pods' NUMA topology policy (``volcano.sh/numa-topology-policy``); empty = none."""
    labels: dict[str, str] = field(default_factory=dict)
    """The pods' labels (pods of a group share them: what pod affinity and spread selectors match)."""
    namespace: str = "default"
    subgroup: str = ""
    """The network-bounded sub-group the pods are in (``PodGroupSpec.subgroup_of``; "" = none)."""
    annotations: dict[str, str] = field(default_factory=dict)
    """The pods' annotations plugins read (``cache.build.READ``): those that change how nodes are scored for
    them (``api.volcano_annotations.SCORING``: ``resource-strategy-fit``'s per-pod strategy) and the CANN
    their image declares (``devices.cann.CANN_ANNOTATION``: ``devicetopology`` filters drivers by it); pods of
    a group share them."""

    def __post_init__(self) -> None:
        self.size = self.size or len(self.pending)

    @property
    def job(self) -> JobInfo:
        job = self.job_ref()
        assert job is not None, f"task group {self.task} outlived its job's snapshot"
        return job

    @property
    def best_effort(self) -> bool:
        """Requests nothing but a pod slot (Volcano's BestEffort tasks, placed by ``backfill``)."""
        return len(self.columns) <= 1


@dataclass
class NetworkArrays:
    """The HyperNode tree over the snapshot's node rows (``api.hypernodes``): per tier, the HyperNodes of that
    tier and, per node row, which one it is in."""

    names: dict[int, list[str]]
    """Tier → its HyperNodes' names (a domain id indexes this list)."""
    domain: dict[int, IntArray]
    """Tier → per node row, its domain id at that tier (-1: in none)."""
    tier_names: dict[str, int]
    """A HyperNode ``tierName`` → its tier."""

    @property
    def tiers(self) -> list[int]:
        return sorted(self.domain)


@dataclass
class JobInfo:
    """A PodGroup and its pods, as the scheduler sees them in one cycle."""

    key: str
    podgroup: PodGroup
    queue: str
    priority: int
    min_member: int
    min_task_member: dict[str, int]
    phase: str
    created: float
    groups: list[TaskGroup]
    ready: int
    """Pods bound or running, plus succeeded ones (Volcano's ReadyTaskNum)."""
    ready_by_task: dict[str, int]
    pending_count: int
    total_pods: int
    allocated: FloatArray
    min_resources: FloatArray
    failed: int = 0
    """Pods that failed (or are being deleted while pending): counted in ``total_pods``, but not valid for the
    gang (Volcano's ValidTaskNum leaves them out)."""
    preempts: bool = True
    """May evict others: False under ``preemptionPolicy: Never`` on its PriorityClass, or on every pending pod
    (Volcano decides per task: one task that never preempts does not stop the others)."""
    max_unavailable: int | None = None
    """Disruption budget: how many of its pods may be missing at once through voluntary evictions."""
    subgroups: dict[str, NetworkTopology] = field(default_factory=dict)
    """Network-bounded sub-groups with pending pods → the bound each must stay within."""
    shared: bool = False
    """A settled job (no pending pod, Running, its gang Scheduled) whose record the cache reuses across
    snapshots until one of its pods or its PodGroup changes: a session never changes it in place, it
    changes its own copy (:meth:`Snapshot.own`)."""

    def copy(self) -> JobInfo:
        """This job's record, for one session to change (only settled, shared ones are ever copied: they
        have no task groups)."""
        assert not self.groups, "only a settled job is copied"
        return replace(self, ready_by_task=dict(self.ready_by_task), shared=False)

    def pending_best_effort(self, task: str | None = None) -> int:
        """Pending pods that request nothing but a pod slot (of ``task``, or of every task) and are not
        placed yet: Volcano's ``PendingBestEffortTaskNum``, which counts toward a ready gang (the session
        leaves them out while ``backfill`` places those very pods: ``SessionView.pending_best_effort``)."""
        return sum(len(g.pending) for g in self.groups if g.best_effort and (task is None or g.task == task))


def sharing_mask(shared: IntArray) -> IntArray:
    """Per node, the bitmask of chips partly held (``shared`` is node × chip slot, milli held)."""
    weights = bit_weights(shared.shape[1])
    mask: IntArray = ((shared > 0) * weights).sum(axis=1).astype(weights.dtype)
    return mask


@dataclass
class DeviceArrays:
    """Chips of one accelerator resource per node, as bitmasks (bit i = chip i). ``topology`` is the node's
    server shape ("" where the node has none of these chips). The session mutates ``used`` only."""

    topology: list[str]
    models: list[str]
    chips: IntArray
    used: IntArray
    """Chips held whole (bitmask)."""
    unhealthy: IntArray
    network: IntArray
    shared: IntArray
    """node × chip slot: milli of the chip held by fractional pods (a shared chip is not free for whole use).
    Change it only through :meth:`share`, which keeps the cached :meth:`sharing` mask current."""
    memory: IntArray | None = None
    """node × chip slot: device memory in MiB (0 where unknown); None = no chip states any."""
    numa: IntArray | None = None
    """node × chip slot: the chip's NUMA node."""
    shared_memory: IntArray | None = None
    """node × chip slot: MiB held by fractional pods."""
    carving: Carving | None = None
    """What partitions hold of each chip (``devices.partitions``); None where no node partitions these chips."""
    _sharing: IntArray | None = None
    _by_shape: dict[tuple[str, int], IntArray] = field(default_factory=dict)
    """Cache of :meth:`rows_by_shape`, shared by the snapshots of one inventory version."""

    def rows_by_shape(self) -> dict[tuple[str, int], IntArray]:
        """(server topology, chip slots) → the node rows of that shape (rows without chips left out)."""
        if not self._by_shape:
            shapes: dict[tuple[str, int], list[int]] = {}
            slots = self.chips.tolist()
            for row, topology in enumerate(self.topology):
                if topology:
                    shapes.setdefault((topology, int(slots[row]).bit_length()), []).append(row)
            self._by_shape.update({shape: np.asarray(rows, dtype=np.int64) for shape, rows in shapes.items()})
        return self._by_shape

    def sharing(self) -> IntArray:
        """Bitmask of chips partly held by fractional pods (cached; see :meth:`share`)."""
        if self._sharing is None:
            self._sharing = sharing_mask(self.shared)
        return self._sharing

    def share(self, row: int, chip: int, milli: int, memory: int = 0) -> None:
        """Add (or with negative amounts remove) a fractional holding of ``milli`` and ``memory`` MiB (on this
        session's own copy: a snapshot's holdings are shared read-only until then)."""
        if not self.shared.flags.writeable:
            self.shared = self.shared.copy()
        if memory and self.shared_memory is not None and not self.shared_memory.flags.writeable:
            self.shared_memory = self.shared_memory.copy()
        self.shared[row, chip] += milli
        if memory:
            assert self.shared_memory is not None, "memory shares need chips that state their memory"
            self.shared_memory[row, chip] += memory
        self._sharing = None

    def free_memory(self, rows: IntArray) -> IntArray:
        """rows × chip slot: MiB still free for memory shares (0 where the chip states no memory)."""
        if self.memory is None or self.shared_memory is None:
            return np.zeros((len(rows), self.shared.shape[1]), dtype=np.int64)
        free: IntArray = self.memory[rows] - self.shared_memory[rows]
        return free

    def free(self, *, exclude_network: bool, rows: IntArray | None = None) -> IntArray:
        """Bitmask of chips free for whole use, for every node or only ``rows`` (scoring needs a few)."""
        pick = slice(None) if rows is None else rows
        free = self.chips[pick] & ~self.used[pick] & ~self.unhealthy[pick] & ~self.sharing()[pick]
        if self.carving is not None:
            free &= ~self.carving.mask()[pick]
        return free & ~self.network[pick] if exclude_network else free

    def free_milli(self, rows: IntArray, *, exclude_network: bool) -> IntArray:
        """rows × chip slot: milli still free for fractional pods (0 on absent, whole-held or bad chips)."""
        slots = self.shared.shape[1]
        bits = bit_weights(slots)
        usable = self.chips[rows] & ~self.used[rows] & ~self.unhealthy[rows]
        if self.carving is not None:
            usable &= ~self.carving.mask()[rows]
        if exclude_network:
            usable &= ~self.network[rows]
        present = (usable[:, None] & bits[None, :]) != 0
        return np.where(present, 1000 - self.shared[rows], 0)

    def carvable(self, rows: IntArray, *, exclude_network: bool) -> IntArray:
        """rows × chip slot: chips partitions may be carved on — present, healthy, not held whole and not
        shared by ``…-milli`` pods (a chip holds one kind of tenant)."""
        bits = bit_weights(self.shared.shape[1])
        usable = self.chips[rows] & ~self.used[rows] & ~self.unhealthy[rows] & ~self.sharing()[rows]
        if exclude_network:
            usable &= ~self.network[rows]
        present: IntArray = (usable[:, None] & bits[None, :]) != 0
        return present


@dataclass
class NumaArrays:
    """CPU per NUMA node: ``cpu`` (node × NUMA node, milli; the node's CPU split evenly over the NUMA nodes
    its chip inventory names, one NUMA node without one) and ``used`` (milli pinned by bound pods; the
    session adds the pods it places)."""

    cpu: IntArray
    used: IntArray

    def free(self, rows: IntArray) -> IntArray:
        free: IntArray = self.cpu[rows] - self.used[rows]
        return free


@dataclass(frozen=True)
class PlacedPod:
    """A bound pod as pod affinity and spread constraints see it."""

    namespace: str
    labels: dict[str, str]
    node: int
    anti: tuple[PodAffinityTerm, ...] = ()
    """Its own required anti-affinity terms (which keep matching pods out of its domain: symmetry)."""
    ports: frozenset[tuple[str, int]] = frozenset()
    """Host ports it takes on its node."""
    key: str = ""
    """``namespace/name``: a pod released in the session (an eviction victim) stops counting by it."""


@dataclass
class RunningPod:
    """A pod holding resources on a node (a possible eviction victim), as ``preempt`` and ``reclaim`` see it."""

    key: str
    job: str
    task: str
    node: int
    request: IntArray
    priority: int
    created: float
    namespace: str
    priority_class: str
    chips: dict[str, int] = field(default_factory=dict)
    """Whole chips held per accelerator resource (bitmask)."""
    shares: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """Fractional holdings per accelerator resource: (chip, milli, memory MiB)."""
    partitions: tuple[Holding, ...] = ()
    """Chip partitions it holds (``devices.partitions``)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Its labels (what ``deviceshare``'s GPU exclusivity rules match, on the chips it frees)."""
    numa: int = -1
    """NUMA node its CPUs are pinned to (-1: not pinned)."""
    budgets: tuple[int, ...] = ()
    """Indexes (into :attr:`Snapshot.disruption_allowed`) of the PodDisruptionBudgets covering it, when it is
    healthy (Running): evicting it spends one disruption of each."""
    job_priority: int = 0
    """Its job's priority (the PodGroup's priorityClassName): victims are ordered by it first, as Volcano."""
    preemptable: bool = True
    """False when the pod says ``volcano.sh/preemptable: "false"`` (annotation, else label): never a victim."""
    subgroup: str = ""
    """Its network-bounded sub-group ("" = none): a replacement joins this sub-group's HyperNode."""
    running_since: float | None = None
    """When it was scheduled (its ``PodScheduled`` condition), once it is Running; None before."""
    cooldown: float | None = None
    """Seconds after :attr:`running_since` it may not be a victim (``volcano.sh/cooldown-time``, for ``cdp``)."""
    started: float | None = None
    """``status.startTime``: from when its budget is charged (``controllers.usage``)."""
    ends_by: float | None = None
    """The latest it runs to (its start plus ``activeDeadlineSeconds``), None without a deadline: what a hard
    budget counts it as committing."""


def tightest_chip(free_milli: IntArray, milli: int, free_memory: IntArray | None = None,
                  memory: int = 0) -> IntArray:
    """Per row, the chip with the least free milli that still fits ``milli`` (and ``memory`` MiB of
    ``free_memory``), -1 where none does: the chip a fractional pod takes (``devicetopology``), and the one
    ``fgd`` scores."""
    room = free_milli >= milli
    if memory:
        assert free_memory is not None
        room &= free_memory >= memory
    fits = np.where(room, free_milli, np.iinfo(np.int64).max)
    chip = np.argmin(fits, axis=1)
    result: IntArray = np.where(fits[np.arange(len(fits)), chip] < np.iinfo(np.int64).max, chip, -1)
    return result


DESERVED_EPS = 1e-6


def deserved_share(allocated: FloatArray, deserved: FloatArray) -> float:
    """A queue's share: max over resources of allocated / deserved (inf where something is allocated but
    nothing deserved). Below 1: under its deserved share; above 1: over it."""
    mask = deserved > DESERVED_EPS
    ratios = np.where(mask, allocated / np.where(mask, deserved, 1.0),
                      np.where(allocated > DESERVED_EPS, np.inf, 0.0))
    return float(ratios.max(initial=0.0))


class StaleSnapshot(RuntimeError):
    """A lazily built part of a snapshot was asked for after the cache it came from changed."""


@dataclass
class Snapshot:
    """What one cycle sees: a value — usage arrays, active jobs and queues are copies the cache never touches
    again; node facts, chip inventories and fractional holdings are shared read-only with the other
    snapshots of their version (numpy refuses a write; ``DeviceArrays.share`` copies first); settled jobs'
    records are shared too and changed only through :meth:`own` — except the placed and running pod lists,
    built on first use and only while the cache is unchanged (:attr:`fresh`), and the full :attr:`jobs`
    map, built on first use while no later snapshot was taken. A session changes its own copies
    (statements allocate on them)."""

    resources: ResourceIndex
    nodes: NodeArrays
    queues: dict[str, QueueInfo]
    priority_classes: dict[str, int]
    _jobs: dict[str, JobInfo] | None = None
    """Every job (see :attr:`jobs`); None until first asked, in a snapshot the cache built."""
    devices: dict[str, DeviceArrays] = field(default_factory=dict)
    """Accelerator resource → per-node chip state (from node inventories)."""
    numa: NumaArrays | None = None
    """CPU per NUMA node (None in hand-built snapshots: no NUMA information)."""
    placed_source: Callable[[], list[PlacedPod]] | None = None
    """Builds :attr:`placed` on first use (only pods placing themselves relative to others need it)."""
    _placed: list[PlacedPod] | None = None
    anti_source: Callable[[], list[PlacedPod]] | None = None
    """Builds :attr:`placed_anti`: only the placed pods with required anti-affinity (None: there are none),
    which every placement must respect — cheap to ask about when there are none."""
    running_source: Callable[[], tuple[list[RunningPod], list[int]]] | None = None
    """Builds :attr:`running` and :attr:`disruption_allowed` on first use (only the eviction actions need
    them; at 100,000 bound pods they are not free)."""
    _running: list[RunningPod] | None = None
    _allowed: list[int] | None = None
    network: NetworkArrays | None = None
    """The HyperNode tree (None: the cluster has no HyperNodes)."""
    fresh: Callable[[], bool] | None = None
    """False once the cache this snapshot was taken from has changed: the lazy pod lists above are read from
    the cache, so they may be built only while it has not (see ``scheduler.cache``); None: a hand-built
    snapshot, always fresh."""
    quotas: dict[str, tuple[tuple[str, dict[str, int], dict[str, int]], ...]] = field(default_factory=dict)
    namespace_labels: Mapping[str, dict[str, str]] = field(default_factory=dict)
    """Namespace → its labels (``Namespace`` objects; what a queue's namespace selector matches)."""
    """Namespace → its ResourceQuotas: (name, ``status.hard`` else ``spec.hard``, ``status.used``), amounts in
    milli-units by resource name (the ``resourcequota`` plugin)."""
    missing_groups: dict[str, int] = field(default_factory=dict)
    """PodGroup key → pending pods that name it while it does not exist: they wait for it (an operator
    creates the PodGroup and the pods in either order) and are never placed alone."""
    budget_spent: dict[int, int] = field(default_factory=dict)
    """PodDisruptionBudget index → disruptions this session's chosen victims spend (kept by the eviction
    planner as it releases and restores victims)."""
    _active: dict[str, JobInfo] | None = None
    _settled: dict[str, JobInfo] | None = None
    """The cache's settled records (``cache.settled``), not copied: valid while :attr:`settled_fresh`."""
    settled_fresh: Callable[[], bool] | None = None
    """False once the cache took a later snapshot (the only time it changes its settled records)."""
    settled_by_queue: dict[str, int] = field(default_factory=dict)
    """Queue → its settled jobs (all Running, none pending), for counts that need not see each one."""
    parked: dict[str, tuple[Status, int | None]] = field(default_factory=dict)
    """PodGroup key → the status (and how many pods its gang was short) of a job ``allocate`` found no room
    for and will not try again until room may have been freed (``cache.parked``); empty in hand-built
    snapshots."""
    room: int = 0
    """The cache's count of events that may have freed room, when this snapshot was taken."""

    @property
    def active(self) -> dict[str, JobInfo]:
        """The jobs a session may act on — pending pods, a phase to move, a condition to set: every job but
        the settled, shared ones (:attr:`JobInfo.shared`), in the order of :attr:`jobs` (a hand-built
        snapshot: every job)."""
        return self.jobs if self._active is None else self._active

    def _check_settled(self) -> None:
        if self.settled_fresh is not None and not self.settled_fresh():
            raise StaleSnapshot("the scheduler cache took a later snapshot: this one's settled jobs can no longer "
                                "be read (take a new snapshot)")

    @property
    def jobs(self) -> dict[str, JobInfo]:
        """Every job: the settled ones, then the active ones. Built on first use (at 100,000 running pods
        merging the settled records is milliseconds, and most cycles never need them) — while no later
        snapshot was taken; a value from then on."""
        if self._jobs is None:
            self._check_settled()
            self._jobs = {**(self._settled or {}), **(self._active or {})}
        return self._jobs

    def job(self, key: str) -> JobInfo | None:
        """One job by key, without building :attr:`jobs`."""
        if self._jobs is not None:
            return self._jobs.get(key)
        found = (self._active or {}).get(key)
        if found is None and self._settled is not None:
            self._check_settled()
            found = self._settled.get(key)
        return found

    def own(self, key: str) -> JobInfo:
        """The job ``key``, safe for this session to change: a shared (settled) job is copied first."""
        job = self.jobs[key]
        if job.shared:
            job = self.jobs[key] = job.copy()
        return job

    def _check_fresh(self) -> None:
        if self.fresh is not None and not self.fresh():
            raise StaleSnapshot("the scheduler cache changed after this snapshot was taken: its pod lists can no "
                                "longer be read (take a new snapshot)")

    @property
    def placed(self) -> list[PlacedPod]:
        """Every pod bound to a node and not finished (any scheduler's): what pod affinity, anti-affinity and
        topology spread count."""
        if self._placed is None:
            self._check_fresh()
            self._placed = self.placed_source() if self.placed_source is not None else []
        return self._placed

    @property
    def placed_anti(self) -> list[PlacedPod]:
        """The placed pods with required pod anti-affinity."""
        if self._placed is not None:
            return [pod for pod in self._placed if pod.anti]
        if self.anti_source is None:
            return []
        self._check_fresh()
        return self.anti_source()

    def _build_running(self) -> None:
        self._check_fresh()
        self._check_settled()
        self._running, self._allowed = self.running_source() if self.running_source is not None else ([], [])

    @property
    def running(self) -> list[RunningPod]:
        """Bound pods of the jobs in this snapshot (not terminating), in no particular order."""
        if self._running is None:
            self._build_running()
            assert self._running is not None
        return self._running

    @property
    def disruption_allowed(self) -> list[int]:
        """Per PodDisruptionBudget (the index :attr:`RunningPod.budgets` names), the disruptions it allows."""
        if self._allowed is None:
            self._build_running()
            assert self._allowed is not None
        return self._allowed

    def drop_running(self, keys: set[str]) -> None:
        """Forget pods chosen for eviction in this session (they no longer hold anything here)."""
        self._running = [pod for pod in self.running if pod.key not in keys]
    default_queue: str = "default"

    def total_capacity(self) -> IntArray:
        """Allocatable summed over schedulable nodes (read-only; summed once per node version: no session
        changes it)."""
        return self.nodes.schedulable_total()
