"""``devicetopology``: the node and the chips are one decision, for every accelerator family.

Who calls it: the session — ``node_filter`` (is this chip count legal on this server shape?),
``node_capacity`` (how many pods still find a legal, healthy, free chip set on each node),
``node_score`` (the family policy's fit for the chips the pod would take) and ``on_allocate`` (take the
chips, write the hand-off annotations). Each server shape's rules live in one ``hetsched.devices`` module;
all of them are evaluated for every node at once through their per-free-mask lookup tables.

Locality: while a node can still take every remaining pod of the group, it scores higher, so a gang
lands on as few nodes as the cluster allows (except under ``ascend-volcano-compat``, which scores pods one
by one as Ascend-for-Volcano does).

Models: a pod annotated ``hetsched.io/accelerator-models: "V100M16|V100M32"`` only goes to nodes whose
``hetsched.io/accelerator-model`` label is one of them (nodeSelector and node affinity work as usual).

MLU-Link: the cluster-wide policy is the argument below; a pod may choose its own with the annotation
``hetsched.io/mlu-link-policy: guaranteed`` (``best-effort`` | ``guaranteed`` | ``restricted``), as a job
that must have its MLUs on one ring does; any other value fails the pod with a message naming it.

Health: unhealthy chips are never free; network-unhealthy chips are free only for single-pod jobs; a node
with faulty chips ranks below healthy nodes. The chips chosen are written on the pod at bind
(``hetsched.io/allocation``, plus Ascend's ``huawei.com/Ascend910`` and ``predicate-time``).

Exclusive GPUs: with ``deviceshare.GPUExclusiveRules`` configured (borrowed from ``deviceshare``), a pod
matching a rule never takes a vGPU on a GPU where a pod matching the same rule holds one
(``contract.gpu_exclusive``).

Arguments::

    - name: devicetopology
      arguments:
        ascend910.policy: ascend-hccs        # or ascend-volcano-compat (Ascend-for-Volcano's exact rules)
        cambricon.mluLinkPolicy: best-effort # guaranteed | restricted
        weight: 1                            # multiplies the topology score
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hetsched.devices import numa
from hetsched.devices.cambricon import MODES as MLU_LINK_MODES
from hetsched.devices.cann import CANN_ANNOTATION, DRIVER_LABEL
from hetsched.devices.cann import verdict as cann_verdict
from hetsched.devices.catalog import MODEL_LABEL, PolicySettings, policy_for
from hetsched.devices.inventory import (
    MEMORY_OF,
    PARTITIONS_ANNOTATION,
    SHARE_MEMORY_RESOURCES,
    SHARE_OF,
    SHARE_RESOURCES,
    PartitionEntry,
    dsmlu_handoff,
    handoff_annotations,
    partitions_handoff,
)
from hetsched.devices.partition_requests import NONE as NO_PARTITIONS
from hetsched.devices.partition_requests import (
    PartitionAsk,
    PartitionRequest,
    PartitionRequestError,
    partition_request,
    whole_milli,
)
from hetsched.devices.partitions import Geometry, Profile
from hetsched.devices.policy import TopologyPolicy, bits, popcounts
from hetsched.scheduler.contract import numa_fit
from hetsched.scheduler.contract.arrays import BoolArray, FloatArray, IntArray
from hetsched.scheduler.contract.carving import Holding
from hetsched.scheduler.contract.framework import Arguments, NodeCapacity, NodeFilter, NodeScore, Plugin
from hetsched.scheduler.contract.gpu_exclusive import KEY as EXCLUSIVE_RULES
from hetsched.scheduler.contract.gpu_exclusive import describe, matching, parse_rules, reserved
from hetsched.scheduler.contract.partition_fit import busy_fraction, cheapest, chip_fits, geometry_rows
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.snapshot import (
    MLU_LINK_ANNOTATION,
    NUMA_ANNOTATION,
    DeviceArrays,
    TaskGroup,
    tightest_chip,
)

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "devicetopology"
Asks = tuple[list[tuple[str, int]], list[tuple[str, int, int]], list[str], PartitionRequest | str]


def policy_settings(arguments: Arguments) -> PolicySettings:
    """The topology-policy settings this plugin's arguments give (also read by ``scheduler.engine.why``)."""
    return PolicySettings(ascend910=arguments.text("ascend910.policy", "ascend-hccs"),
                          mlulink=arguments.text("cambricon.mluLinkPolicy", "best-effort"))


class DeviceTopology(Plugin, NodeFilter, NodeCapacity, NodeScore):
    NAME = NAME
    BORROWS: ClassVar[Mapping[str, frozenset[str]]] = MappingProxyType({"deviceshare": frozenset({EXCLUSIVE_RULES})})

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({"ascend910.policy", "cambricon.mluLinkPolicy", "weight", EXCLUSIVE_RULES})
        self.rules = parse_rules(arguments.values.get(EXCLUSIVE_RULES), "deviceshare")
        self.reserved: dict[tuple[str, tuple[int, ...]], tuple[tuple[int, int], BoolArray | None]] = {}
        """(resource, matched rules) → ((the carving, its version), GPUs those rules' pods hold a vGPU on)."""
        self.settings = policy_settings(arguments)
        self.weight = arguments.number("weight", 1)
        self.devices: dict[str, DeviceArrays] = {}
        self.policies: dict[tuple[str, int, str], TopologyPolicy] = {}
        self.rows_by_topology: dict[str, dict[tuple[str, int], IntArray]] = {}
        """resource → (server shape, chip slots) → node rows: one policy and one table set per entry."""
        self.session: SessionView | None = None
        self.taken: dict[str, tuple[int, dict[str, int]]] = {}
        self.shared_taken: dict[str, list[tuple[str, int, int, int]]] = {}
        self.held: dict[int, IntArray] = {}
        """id(group) → pods of that group placed on each node in this session."""
        self.asks: dict[int, Asks] = {}
        """id(group) → its device asks (:meth:`_asks`)."""
        self.carved_taken: dict[str, list[Holding]] = {}
        """pod → the partitions it was given in this session."""
        self.ask_rows: dict[PartitionAsk, list[tuple[Geometry, Profile | str, IntArray]]] = {}
        """A partition ask → per chip geometry among the nodes: its template there (or why none) and the rows."""

    @classmethod
    def read_labels(cls, arguments: Arguments) -> frozenset[str]:
        """The labels ``deviceshare.GPUExclusiveRules`` match."""
        rules = parse_rules(arguments.values.get(EXCLUSIVE_RULES), "deviceshare")
        return frozenset(label for rule in rules for label, _value in rule)

    def _held(self, group: TaskGroup, size: int) -> IntArray:
        held = self.held.get(id(group))
        if held is None:
            held = self.held[id(group)] = np.zeros(size, dtype=np.int64)
        return held

    def on_session_open(self, session: SessionView) -> None:
        self.session = session
        self.devices = session.snapshot.devices
        for resource, devices in self.devices.items():
            self.rows_by_topology[resource] = devices.rows_by_shape()

    def on_session_close(self, session: SessionView) -> None:
        self.session = None  # kept only while the session is open (framework.Plugin)
        self.ask_rows.clear()
        self.reserved.clear()

    # ------------------------------------------------------------------------------ helpers

    def _policy(self, topology: str, chips: int, group: TaskGroup) -> TopologyPolicy:
        """The policy for a server shape, with the group's own MLU-Link policy when its pods name one."""
        mlulink = group.mlu_link if group.mlu_link in MLU_LINK_MODES else self.settings.mlulink  # else: filtered
        key = (topology, chips, mlulink)
        policy = self.policies.get(key)
        if policy is None:
            settings = PolicySettings(ascend910=self.settings.ascend910, mlulink=mlulink)
            policy = self.policies[key] = policy_for(topology, chips, settings)
        return policy

    def _asks(self, group: TaskGroup) -> Asks:
        """What a pod of ``group`` asks of devices with an inventory, worked out once per group and session:
        (resource, whole chips) pairs, (device resource, milli of one chip, MiB of its memory) fractional
        asks, and memory asks that came without a share of the chip (an error)."""
        cached = self.asks.get(id(group))
        if cached is None:
            assert self.session is not None
            names = self.session.snapshot.resources.names
            whole: list[tuple[str, int]] = []
            milli: dict[str, int] = {}
            memory: dict[str, int] = {}
            by_name = {names[column]: int(group.request[column]) for column in group.columns.tolist()}
            partitions: PartitionRequest | str
            try:
                partitions = partition_request(by_name, group.annotations, group.labels)
            except PartitionRequestError as exc:
                partitions = str(exc)
            request = partitions if isinstance(partitions, PartitionRequest) else NO_PARTITIONS
            for resource in self.devices:
                asked = whole_milli(by_name, resource, request)
                if asked > 0:
                    whole.append((resource, asked // 1000))
            for column in group.columns.tolist():
                amount = int(group.request[column]) // 1000
                if names[column] in self.devices:
                    continue
                elif names[column] in SHARE_RESOURCES:
                    milli[SHARE_RESOURCES[names[column]]] = amount
                elif names[column] in SHARE_MEMORY_RESOURCES:
                    memory[SHARE_MEMORY_RESOURCES[names[column]]] = amount
            shares = [(device, amount, memory.get(device, 0)) for device, amount in milli.items()
                      if device in self.devices]
            cached = self.asks[id(group)] = (whole, shares, sorted(set(memory) - set(milli)), partitions)
        return cached

    def _partitions(self, group: TaskGroup) -> tuple[PartitionAsk, ...] | str:
        partitions = self._asks(group)[3]
        return partitions if isinstance(partitions, str) else partitions.asks

    def _ask_rows(self, ask: PartitionAsk) -> list[tuple[Geometry, Profile | str, IntArray]]:
        """Per chip geometry of the nodes partitioned in the ask's mode: the template it gets there, and the rows."""
        found = self.ask_rows.get(ask)
        if found is None:
            devices = self.devices.get(ask.resource)
            groups = geometry_rows(devices, ask.mode) if devices is not None else []
            found = self.ask_rows[ask] = [(geometry, ask.profile(geometry), rows) for geometry, rows in groups]
        return found

    def _exclusive(self, group: TaskGroup, ask: PartitionAsk) -> tuple[tuple[int, ...], BoolArray | None]:
        """The exclusivity rules a pod of ``group`` matches, and node row × chip: the GPUs it may not take a
        vGPU of ``ask`` on (None: none)."""
        if not self.rules or ask.mode != "vgpu":
            return (), None
        matched = matching(group.labels, self.rules)
        devices = self.devices.get(ask.resource)
        if not matched or devices is None or devices.carving is None:
            return matched, None
        key = (ask.resource, matched)
        stamp = (id(devices.carving), devices.carving.version)
        cached = self.reserved.get(key)
        if cached is None or cached[0] != stamp:
            cached = self.reserved[key] = (stamp, reserved(devices.carving, self.rules, matched))
        return matched, cached[1]

    def _requests(self, group: TaskGroup) -> list[tuple[str, int]]:
        return self._asks(group)[0]

    def _shares(self, group: TaskGroup) -> list[tuple[str, int, int]]:
        return self._asks(group)[1]

    def _share_rows(self, resource: str) -> IntArray:
        groups = self.rows_by_topology.get(resource, {})
        return np.sort(np.concatenate(list(groups.values()))) if groups else np.zeros(0, dtype=np.int64)

    @staticmethod
    def _multi_pod(group: TaskGroup) -> bool:
        return group.job.total_pods > 1

    def _policies_for(self, resource: str, rows: IntArray,
                      group: TaskGroup) -> list[tuple[TopologyPolicy, IntArray, IntArray]]:
        """(policy, positions in ``rows``, node rows) per server shape among ``rows``."""
        result = []
        for (topology, chips), topo_rows in self.rows_by_topology.get(resource, {}).items():
            inside = np.isin(rows, topo_rows)
            if inside.any():
                positions = np.flatnonzero(inside)
                result.append((self._policy(topology, chips, group), positions, rows[positions]))
        return result

    # ------------------------------------------------------------------------------ extension points

    def node_filter(self, session: SessionView, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        failures: list[tuple[Reason, BoolArray]] = []
        if group.mlu_link and group.mlu_link not in MLU_LINK_MODES:
            failures.append((Reason.of(ReasonCode.INVALID_DEVICE_ANNOTATION, annotation=MLU_LINK_ANNOTATION,
                                       allowed=tuple(MLU_LINK_MODES), got=group.mlu_link),
                             np.ones(len(session.nodes), dtype=bool)))
            return failures
        everywhere = np.ones(len(session.nodes), dtype=bool)
        for resource in self._asks(group)[2]:
            failures.append((Reason.of(ReasonCode.MEMORY_WITHOUT_SHARE, memory=MEMORY_OF[resource],
                                       share=SHARE_OF[resource]), everywhere))
        for resource, milli, memory in self._shares(group):
            if not 1 <= milli <= 1000:
                failures.append((Reason.of(ReasonCode.SHARE_OUT_OF_RANGE, resource=resource, milli=milli), everywhere))
            if memory:
                stated = self.devices[resource].memory
                rows = self._share_rows(resource)  # nodes with these chips; the rest fail on resource fit
                unknown = np.zeros(len(session.nodes), dtype=bool)
                unknown[rows] = True if stated is None else stated[rows].sum(axis=1) == 0
                failures.append((Reason.of(ReasonCode.CHIP_MEMORY_UNSTATED, resource=resource,
                                           memory=MEMORY_OF[resource]), unknown))
        partitions = self._partitions(group)
        if isinstance(partitions, str):
            failures.append((Reason.of(ReasonCode.PARTITION_REQUEST, problem=partitions[:200]), everywhere))
        else:
            for ask in partitions:
                servable = np.zeros(len(session.nodes), dtype=bool)
                for _geometry, profile, rows in self._ask_rows(ask):
                    if isinstance(profile, str):
                        mask = np.zeros(len(session.nodes), dtype=bool)
                        mask[rows] = True
                        failures.append((Reason.of(ReasonCode.PARTITION_REQUEST, problem=profile[:200]), mask))
                    servable[rows] = True
                failures.append((Reason.of(ReasonCode.NOT_PARTITIONED, resource=ask.resource, mode=ask.mode,
                                           source=ask.source), ~servable))
        cann = group.annotations.get(CANN_ANNOTATION, "")
        if cann:  # the image's CANN: never onto a driver it does not support (unknown pairs are not refused)
            codes, vocab = session.nodes.label_codes(DRIVER_LABEL)
            refused = [code for driver, code in vocab.items() if cann_verdict(cann, driver)[0] is False]
            if refused:
                failures.append((Reason.of(ReasonCode.CANN_DRIVER, cann=cann[:40]), np.isin(codes, refused)))
        if group.models:
            codes, vocab = session.nodes.label_codes(MODEL_LABEL)
            accepted = [vocab[m] for m in group.models if m in vocab]
            failures.append((Reason.of(ReasonCode.ACCELERATOR_MODEL, models=tuple(group.models)),
                             ~np.isin(codes, accepted)))
        for resource, n in self._requests(group):
            for (topology, chips), rows in self.rows_by_topology.get(resource, {}).items():
                policy = self._policy(topology, chips, group)
                if not policy.legal(n, self._multi_pod(group)):
                    mask = np.zeros(len(session.nodes), dtype=bool)
                    mask[rows] = True
                    rule = policy.illegal_reason(n, self._multi_pod(group))
                    failures.append((Reason.of(ReasonCode.ILLEGAL_CHIP_COUNT, rule=rule), mask))
        return failures

    def node_capacity(self, session: SessionView, group: TaskGroup) -> IntArray:
        size = len(session.nodes)
        capacity = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
        for resource, n in self._requests(group):
            devices = self.devices[resource]
            free = devices.free(exclude_network=self._multi_pod(group))
            per_resource = np.zeros(size, dtype=np.int64)
            for (topology, chips), rows in self.rows_by_topology.get(resource, {}).items():
                policy = self._policy(topology, chips, group)
                if n >= 1 and policy.legal(n, self._multi_pod(group)):
                    per_resource[rows] = policy.tables(n).capacity(free[rows])
            capacity = np.minimum(capacity, per_resource)
        for resource, milli, memory in self._shares(group):
            per_resource = np.zeros(size, dtype=np.int64)
            rows = self._share_rows(resource)
            if len(rows) and 1 <= milli <= 1000:
                free = self.devices[resource].free_milli(rows, exclude_network=self._multi_pod(group))
                pods = free // milli
                if memory:
                    pods = np.minimum(pods, self.devices[resource].free_memory(rows) // memory)
                per_resource[rows] = pods.sum(axis=1)
            capacity = np.minimum(capacity, per_resource)
        partitions = self._partitions(group)
        if not isinstance(partitions, str):
            for ask in partitions:
                avoid = self._exclusive(group, ask)[1]
                capacity = np.minimum(capacity, self._partition_capacity(ask, size, self._multi_pod(group), avoid))
        return capacity

    def _partition_capacity(self, ask: PartitionAsk, size: int, multi_pod: bool,
                            avoid: BoolArray | None = None) -> IntArray:
        """Per node, how many pods' worth of this ask its chips still take (never on the ``avoid`` chips)."""
        per_node = np.zeros(size, dtype=np.int64)
        for geometry, profile, rows in self._ask_rows(ask):
            if isinstance(profile, Profile):
                counts = chip_fits(self.devices[ask.resource], geometry, profile, rows, exclude_network=multi_pod,
                                   avoid=avoid[rows] if avoid is not None else None)
                held = (counts > 0).sum(axis=1) if ask.distinct else counts.sum(axis=1)
                per_node[rows] = held // ask.count
        return per_node

    def node_capacity_reasons(self, session: SessionView, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        # nodes without a legal chip set are explained chip by chip (``scheduler.engine.why``); a node whose
        # chips are carved in the right mode but have no room for the template says so
        partitions = self._partitions(group)
        reasons: list[tuple[Reason, BoolArray]] = []
        if isinstance(partitions, str):
            return reasons
        size = len(session.nodes)
        for ask in partitions:
            full, template = np.zeros(size, dtype=bool), ask.template or ask.source
            capacity = self._partition_capacity(ask, size, self._multi_pod(group))
            matched, avoid = self._exclusive(group, ask)
            kept_off = np.zeros(size, dtype=bool)
            if avoid is not None:  # room there, but only on GPUs the pod's rules keep it off
                kept_off = (self._partition_capacity(ask, size, self._multi_pod(group), avoid) == 0) & (capacity > 0)
            for _geometry, profile, rows in self._ask_rows(ask):
                if isinstance(profile, Profile):
                    full[rows] = capacity[rows] == 0
                    template = profile.name
            if full.any():
                reasons.append((Reason.of(ReasonCode.NO_PARTITION_ROOM, resource=ask.resource, template=template),
                                full))
            if kept_off.any():
                reasons.append((Reason.of(ReasonCode.EXCLUSIVE_GPUS, resource=ask.resource,
                                          rule=describe(self.rules, matched)), kept_off))
        return reasons

    def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        score = np.zeros(len(nodes), dtype=np.float64)
        for resource, n in self._requests(group):
            devices = self.devices[resource]
            free = devices.free(exclude_network=self._multi_pod(group), rows=nodes)
            for policy, positions, rows in self._policies_for(resource, nodes, group):
                if not policy.legal(n, self._multi_pod(group)):
                    continue
                tables = policy.tables(n)
                after = tables.after(free[positions], placed[positions])
                healthy = popcounts(devices.chips[rows] & ~devices.unhealthy[rows])
                score[positions] += tables.score[after] + policy.health_score(healthy, policy.CHIPS)
                if policy.LOCALITY_BONUS and group.size > 1:
                    # node-local: could this node hold the whole group, counting the pods it already holds?
                    holds = self._held(group, len(session.nodes))[rows] + placed[positions]
                    whole = tables.capacity(after) + holds >= group.size
                    score[positions] += np.where(whole, policy.LOCALITY_BONUS, 0.0)
        for resource, milli, memory in self._shares(group):
            score += self._share_score(resource, milli, memory, nodes, placed, self._multi_pod(group))
        partitions = self._partitions(group)
        if not isinstance(partitions, str):
            for ask in partitions:
                score += self._partition_score(ask, nodes, self._multi_pod(group), self._exclusive(group, ask)[1])
        return self.weight * score

    def _partition_score(self, ask: PartitionAsk, nodes: IntArray, multi_pod: bool,
                         avoid: BoolArray | None = None) -> FloatArray:
        """Fragmentation-aware: the node whose cheapest chip loses the fewest future templates when carved
        (0–100), and the node whose chips are busiest (0–100, by the share of its chips holding anything):
        partitions gather on few servers and keep whole servers free for gangs of whole chips (without that
        term nodeorder's least-requested spreads them, and 8-GPU gangs starve: docs/devices.md, the study)."""
        score = np.zeros(len(nodes), dtype=np.float64)
        for geometry, profile, rows in self._ask_rows(ask):
            if not isinstance(profile, Profile):
                continue
            positions = np.flatnonzero(np.isin(nodes, rows))
            if not len(positions):
                continue
            here = nodes[positions]
            devices = self.devices[ask.resource]
            cost, _chip, _placement, _memory = cheapest(devices, geometry, profile, here, exclude_network=multi_pod,
                                                        avoid=avoid[here] if avoid is not None else None)
            scale = float(max(geometry.cores, 1) * len(geometry.shapes()))
            fullness = busy_fraction(devices, here)
            score[positions] = np.where(np.isfinite(cost), 100.0 - 100.0 * np.minimum(cost, scale) / scale
                                        + 100.0 * fullness, 0.0)
        return score

    def _share_score(self, resource: str, milli: int, memory: int, nodes: IntArray, placed: IntArray,
                     multi_pod: bool) -> FloatArray:
        """Device-level binpack: after the ``placed`` earlier pods took the tightest chips, the tighter the
        chip this pod takes (less left on it) the better (0–100); and the fuller node (0–100 by the share of
        its chips' compute held): shares gather on few servers, keeping whole servers free for gangs of whole
        chips (with a 0–10 term, nodeorder's least-requested spread them and 8-GPU gangs starved:
        docs/devices.md, the partition study)."""
        devices = self.devices[resource]
        free = devices.free_milli(nodes, exclude_network=multi_pod).copy()
        free_memory = devices.free_memory(nodes).copy()
        rows = np.arange(len(nodes))
        for step in range(int(placed.max(initial=0))):
            taking = rows[placed > step]
            chips = tightest_chip(free[taking], milli, free_memory[taking], memory)
            ok = chips >= 0
            free[taking[ok], chips[ok]] -= milli
            free_memory[taking[ok], chips[ok]] -= memory
        chip = tightest_chip(free, milli, free_memory, memory)
        left = np.where(chip >= 0, free[rows, np.maximum(chip, 0)] - milli, 1000)
        slots = np.maximum(popcounts(devices.chips[nodes]), 1)
        fullness = 1.0 - free.sum(axis=1) / (slots * 1000.0)
        healthy = popcounts(devices.chips[nodes] & ~devices.unhealthy[nodes])
        penalty = np.where(healthy < popcounts(devices.chips[nodes]), -1000.0, 0.0)
        score: FloatArray = 100.0 - left / 10.0 + 100.0 * fullness + penalty
        return score

    def on_allocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        requests = self._requests(group)
        shares = self._shares(group)
        partitions = self._partitions(group)
        asks = () if isinstance(partitions, str) else partitions
        if not requests and not shares and not asks:
            return
        assert self.session is not None
        multi_pod = self._multi_pod(group)
        snapshot = self.session.snapshot
        for pod, row in zip(pods, nodes.tolist(), strict=True):
            allocation: dict[str, list[int]] = {}
            taken: dict[str, int] = {}
            # a NUMA-aligned pod takes its chips inside the NUMA node its CPUs are pinned to: numaaware's pin
            # when it ran first, else the same rule numaaware applies
            numa_node = -1
            if requests and numa_fit.aligned(snapshot, group):
                pinned = self.session.bind_annotations.get(pod, {}).get(NUMA_ANNOTATION)
                numa_node = int(pinned) if pinned is not None else numa_fit.choose(snapshot, group, row)
            for resource, n in requests:
                devices = self.devices[resource]
                topology = devices.topology[row]
                policy = self._policy(topology, int(devices.chips[row]).bit_length(), group)
                free = int(devices.free(exclude_network=multi_pod, rows=np.array([row]))[0])
                chosen = 0
                if numa_node >= 0 and devices.numa is not None and snapshot.numa is not None:
                    inside = numa.masks(devices.numa[[row]], devices.chips[[row]], snapshot.numa.cpu.shape[1])
                    chosen = int(policy.tables(n).choice[free & int(inside[0, numa_node])])
                chosen = chosen or int(policy.tables(n).choice[free])
                assert chosen, f"{NAME}: no legal chip set left on node row {row} for {pod}"
                devices.used[row] |= chosen
                taken[resource] = chosen
                allocation[resource] = bits(chosen)
            for resource, milli, memory in shares:
                devices = self.devices[resource]
                here = np.array([row])
                room = devices.free_milli(here, exclude_network=multi_pod)
                chip = int(tightest_chip(room, milli, devices.free_memory(here), memory)[0])
                assert chip >= 0, f"{NAME}: no chip with {milli} milli free on node row {row} for {pod}"
                devices.share(row, chip, milli, memory)
                self.shared_taken.setdefault(pod, []).append((resource, chip, milli, memory))
                allocation[resource] = [chip]
            entries = [self._carve(pod, group, ask, row, multi_pod) for ask in asks for _ in range(ask.count)]
            self.taken[pod] = (row, taken)
            self._held(group, len(self.session.nodes))[row] += 1
            annotations = self.session.bind_annotations.setdefault(pod, {})
            annotations.update(handoff_annotations(allocation, self.session.now))
            if entries:
                annotations[PARTITIONS_ANNOTATION] = partitions_handoff(entries)
            for ask in asks:  # an sMLU: Cambricon's plugin makes the instance from its own hand-off
                held = [h for h in self.carved_taken.get(pod, []) if h[0] == ask.resource]
                if ask.mode == "smlu" and not ask.whole and held:
                    _resource, chip, profile, memory, _placement = held[-1]
                    annotations.update(dsmlu_handoff(chip, profile.cores, memory))

    def _carve(self, pod: str, group: TaskGroup, ask: PartitionAsk, row: int, multi_pod: bool) -> PartitionEntry:
        """Carve one partition of ``ask`` for ``pod`` on node ``row``: the cheapest chip and placement (never
        a GPU its exclusivity rules keep it off)."""
        devices = self.devices[ask.resource]
        here = np.array([row])
        for geometry, profile, rows in self._ask_rows(ask):
            if not isinstance(profile, Profile) or not bool((rows == row).any()):
                continue
            avoid = None
            reserved_here = self._exclusive(group, ask)[1]
            if ask.distinct or reserved_here is not None:
                mine = [h[1] for h in self.carved_taken.get(pod, []) if h[0] == ask.resource]
                avoid = np.zeros((1, devices.shared.shape[1]), dtype=bool)
                avoid[0, mine] = True
                if reserved_here is not None:
                    width = min(avoid.shape[1], reserved_here.shape[1])
                    avoid[0, :width] |= reserved_here[row, :width]
            _cost, chips, placements, memory = cheapest(devices, geometry, profile, here, exclude_network=multi_pod,
                                                        avoid=avoid)
            chip = int(chips[0])
            assert chip >= 0, f"{NAME}: no chip with room for {profile.name} on node row {row} for {pod}"
            assert devices.carving is not None
            devices.carving.add(row, chip, profile, int(memory[0]), int(placements[0]), owner=group.labels)
            self.carved_taken.setdefault(pod, []).append((ask.resource, chip, profile, int(memory[0]),
                                                          int(placements[0])))
            return ask.resource, chip, profile.name, int(placements[0])
        raise AssertionError(f"{NAME}: node row {row} does not carve {ask.resource} in {ask.mode} for {pod}")

    def on_deallocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        assert self.session is not None
        for pod in pods:
            entry = self.taken.pop(pod, None)
            if entry is None:
                continue
            row, taken = entry
            for resource, chosen in taken.items():
                self.devices[resource].used[row] &= ~chosen
            for resource, chip, milli, memory in self.shared_taken.pop(pod, []):
                self.devices[resource].share(row, chip, -milli, -memory)
            for resource, chip, profile, memory, placement in self.carved_taken.pop(pod, []):
                carving = self.devices[resource].carving
                assert carving is not None
                carving.add(row, chip, profile, memory, placement, -1, owner=group.labels)
            self._held(group, len(self.session.nodes))[row] -= 1
            self.session.bind_annotations.pop(pod, None)
