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

Health: unhealthy chips are never free; network-unhealthy chips are free only for single-pod jobs; a node
with faulty chips ranks below healthy nodes. The chips chosen are written on the pod at bind
(``hetsched.io/allocation``, plus Ascend's ``huawei.com/Ascend910`` and ``predicate-time``).

Arguments::

    - name: devicetopology
      arguments:
        ascend910.policy: ascend-hccs        # or ascend-volcano-compat (Ascend-for-Volcano's exact rules)
        cambricon.mluLinkPolicy: best-effort # guaranteed | restricted
        weight: 1                            # multiplies the topology score
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.devices.catalog import MODEL_LABEL, PolicySettings, policy_for
from hetsched.devices.inventory import SHARE_RESOURCES, handoff_annotations
from hetsched.devices.policy import TopologyPolicy, bits
from hetsched.scheduler.framework import Arguments, BoolArray, FloatArray, IntArray, Plugin
from hetsched.scheduler.snapshot import DeviceArrays, TaskGroup

if TYPE_CHECKING:
    from hetsched.scheduler.session import Session

NAME = "devicetopology"


class DeviceTopology(Plugin):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({"ascend910.policy", "cambricon.mluLinkPolicy", "weight"})
        self.settings = PolicySettings(
            ascend910=arguments.text("ascend910.policy", "ascend-hccs"),
            mlulink=arguments.text("cambricon.mluLinkPolicy", "best-effort"),
        )
        self.weight = arguments.number("weight", 1)
        self.devices: dict[str, DeviceArrays] = {}
        self.policies: dict[tuple[str, int], TopologyPolicy] = {}
        self.rows_by_topology: dict[str, dict[tuple[str, int], IntArray]] = {}
        """resource → (server shape, chip slots) → node rows: one policy and one table set per entry."""
        self.session: Session | None = None
        self.taken: dict[str, tuple[int, dict[str, int]]] = {}
        self.shared_taken: dict[str, list[tuple[str, int, int]]] = {}
        self.held: dict[int, IntArray] = {}
        self.asks: dict[int, tuple[list[tuple[str, int]], list[tuple[str, int]]]] = {}
        """id(group) → pods of that group placed on each node in this session."""

    def _held(self, group: TaskGroup, size: int) -> IntArray:
        held = self.held.get(id(group))
        if held is None:
            held = self.held[id(group)] = np.zeros(size, dtype=np.int64)
        return held

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self.devices = session.snapshot.devices
        for resource, devices in self.devices.items():
            groups: dict[tuple[str, int], list[int]] = {}
            slots = devices.chips.tolist()
            for row, topology in enumerate(devices.topology):
                if topology:
                    groups.setdefault((topology, int(slots[row]).bit_length()), []).append(row)
            self.rows_by_topology[resource] = {t: np.asarray(r, dtype=np.int64) for t, r in groups.items()}

    # ------------------------------------------------------------------------------ helpers

    def _policy(self, topology: str, chips: int) -> TopologyPolicy:
        key = (topology, chips)
        policy = self.policies.get(key)
        if policy is None:
            policy = self.policies[key] = policy_for(topology, chips, self.settings)
        return policy

    def _asks(self, group: TaskGroup) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        """What a pod of ``group`` asks of devices with an inventory, worked out once per group and session:
        (resource, whole chips) pairs and (device resource, milli of one chip) fractional pairs."""
        cached = self.asks.get(id(group))
        if cached is None:
            assert self.session is not None
            names = self.session.snapshot.resources.names
            whole: list[tuple[str, int]] = []
            shares: list[tuple[str, int]] = []
            for column in group.columns.tolist():
                amount = int(group.request[column]) // 1000
                device = SHARE_RESOURCES.get(names[column])
                if names[column] in self.devices:
                    whole.append((names[column], amount))
                elif device is not None and device in self.devices:
                    shares.append((device, amount))
            cached = self.asks[id(group)] = (whole, shares)
        return cached

    def _requests(self, group: TaskGroup) -> list[tuple[str, int]]:
        return self._asks(group)[0]

    def _shares(self, group: TaskGroup) -> list[tuple[str, int]]:
        return self._asks(group)[1]

    def _share_rows(self, resource: str) -> IntArray:
        groups = self.rows_by_topology.get(resource, {})
        return np.sort(np.concatenate(list(groups.values()))) if groups else np.zeros(0, dtype=np.int64)

    @staticmethod
    def _tightest(free_milli: IntArray, milli: int) -> IntArray:
        """Per row, the chip with the least free milli that still fits ``milli`` (-1 where none does)."""
        fits = np.where(free_milli >= milli, free_milli, np.iinfo(np.int64).max)
        chip = np.argmin(fits, axis=1)
        return np.where(fits[np.arange(len(fits)), chip] < np.iinfo(np.int64).max, chip, -1)

    @staticmethod
    def _multi_pod(group: TaskGroup) -> bool:
        return group.job.total_pods > 1

    def _policies_for(self, resource: str, rows: IntArray) -> list[tuple[TopologyPolicy, IntArray, IntArray]]:
        """(policy, positions in ``rows``, node rows) per server shape among ``rows``."""
        result = []
        for (topology, chips), topo_rows in self.rows_by_topology.get(resource, {}).items():
            inside = np.isin(rows, topo_rows)
            if inside.any():
                positions = np.flatnonzero(inside)
                result.append((self._policy(topology, chips), positions, rows[positions]))
        return result

    # ------------------------------------------------------------------------------ extension points

    def node_filter(self, session: Session, group: TaskGroup) -> list[tuple[str, BoolArray]]:
        failures = []
        for resource, milli in self._shares(group):
            if not 1 <= milli <= 1000:
                failures.append((f"node(s) rejected the request: a share of one {resource} must be 1–1000 "
                                 f"thousandths, got {milli}", np.ones(len(session.nodes), dtype=bool)))
        if group.models:
            codes, vocab = session.nodes.label_codes(MODEL_LABEL)
            accepted = [vocab[m] for m in group.models if m in vocab]
            failures.append((f"node(s) didn't have an accepted accelerator model ({'|'.join(group.models)})",
                             ~np.isin(codes, accepted)))
        for resource, n in self._requests(group):
            for (topology, chips), rows in self.rows_by_topology.get(resource, {}).items():
                policy = self._policy(topology, chips)
                if not policy.legal(n, self._multi_pod(group)):
                    mask = np.zeros(len(session.nodes), dtype=bool)
                    mask[rows] = True
                    reason = policy.illegal_reason(n, self._multi_pod(group))
                    failures.append((f"node(s) rejected the request: {reason}", mask))
        return failures

    def node_capacity(self, session: Session, group: TaskGroup) -> IntArray:
        size = len(session.nodes)
        capacity = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
        for resource, n in self._requests(group):
            devices = self.devices[resource]
            free = devices.free(exclude_network=self._multi_pod(group))
            per_resource = np.zeros(size, dtype=np.int64)
            for (topology, chips), rows in self.rows_by_topology.get(resource, {}).items():
                policy = self._policy(topology, chips)
                if n >= 1 and policy.legal(n, self._multi_pod(group)):
                    per_resource[rows] = policy.tables(n).capacity(free[rows])
            capacity = np.minimum(capacity, per_resource)
        for resource, milli in self._shares(group):
            per_resource = np.zeros(size, dtype=np.int64)
            rows = self._share_rows(resource)
            if len(rows) and 1 <= milli <= 1000:
                free = self.devices[resource].free_milli(rows, exclude_network=self._multi_pod(group))
                per_resource[rows] = (free // milli).sum(axis=1)
            capacity = np.minimum(capacity, per_resource)
        return capacity

    def node_score(self, session: Session, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        score = np.zeros(len(nodes), dtype=np.float64)
        for resource, n in self._requests(group):
            devices = self.devices[resource]
            free = devices.free(exclude_network=self._multi_pod(group), rows=nodes)
            for policy, positions, rows in self._policies_for(resource, nodes):
                if not policy.legal(n, self._multi_pod(group)):
                    continue
                tables = policy.tables(n)
                after = tables.after(free[positions], placed[positions])
                healthy = np.bitwise_count(devices.chips[rows] & ~devices.unhealthy[rows]).astype(np.int64)
                score[positions] += tables.score[after] + policy.health_score(healthy, policy.CHIPS)
                if policy.LOCALITY_BONUS and group.size > 1:
                    # node-local: could this node hold the whole group, counting the pods it already holds?
                    holds = self._held(group, len(session.nodes))[rows] + placed[positions]
                    whole = tables.capacity(after) + holds >= group.size
                    score[positions] += np.where(whole, policy.LOCALITY_BONUS, 0.0)
        for resource, milli in self._shares(group):
            score += self._share_score(resource, milli, nodes, placed, self._multi_pod(group))
        return self.weight * score

    def _share_score(self, resource: str, milli: int, nodes: IntArray, placed: IntArray,
                     multi_pod: bool) -> FloatArray:
        """Device-level binpack: after the ``placed`` earlier pods took the tightest chips, the tighter the
        chip this pod takes (less left on it) the better; then the fuller node."""
        devices = self.devices[resource]
        free = devices.free_milli(nodes, exclude_network=multi_pod).copy()
        rows = np.arange(len(nodes))
        for step in range(int(placed.max(initial=0))):
            taking = rows[placed > step]
            chips = self._tightest(free[taking], milli)
            ok = chips >= 0
            free[taking[ok], chips[ok]] -= milli
        chip = self._tightest(free, milli)
        left = np.where(chip >= 0, free[rows, np.maximum(chip, 0)] - milli, 1000)
        slots = np.maximum(np.bitwise_count(devices.chips[nodes]), 1)
        fullness = 1.0 - free.sum(axis=1) / (slots * 1000.0)
        healthy = np.bitwise_count(devices.chips[nodes] & ~devices.unhealthy[nodes]).astype(np.int64)
        penalty = np.where(healthy < np.bitwise_count(devices.chips[nodes]), -1000.0, 0.0)
        score: FloatArray = 100.0 - left / 10.0 + 10.0 * fullness + penalty
        return score

    def on_allocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        requests = self._requests(group)
        shares = self._shares(group)
        if not requests and not shares:
            return
        assert self.session is not None
        multi_pod = self._multi_pod(group)
        for pod, row in zip(pods, nodes.tolist(), strict=True):
            allocation: dict[str, list[int]] = {}
            taken: dict[str, int] = {}
            for resource, n in requests:
                devices = self.devices[resource]
                topology = devices.topology[row]
                policy = self._policy(topology, int(devices.chips[row]).bit_length())
                free = int(devices.free(exclude_network=multi_pod, rows=np.array([row]))[0])
                chosen = int(policy.tables(n).choice[free])
                assert chosen, f"{NAME}: no legal chip set left on node row {row} for {pod}"
                devices.used[row] |= chosen
                taken[resource] = chosen
                allocation[resource] = bits(chosen)
            for resource, milli in shares:
                devices = self.devices[resource]
                room = devices.free_milli(np.array([row]), exclude_network=multi_pod)
                chip = int(self._tightest(room, milli)[0])
                assert chip >= 0, f"{NAME}: no chip with {milli} milli free on node row {row} for {pod}"
                devices.share(row, chip, milli)
                self.shared_taken.setdefault(pod, []).append((resource, chip, milli))
                allocation[resource] = [chip]
            self.taken[pod] = (row, taken)
            self._held(group, len(self.session.nodes))[row] += 1
            self.session.bind_annotations[pod] = handoff_annotations(allocation, self.session.now)

    def on_deallocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        assert self.session is not None
        for pod in pods:
            entry = self.taken.pop(pod, None)
            if entry is None:
                continue
            row, taken = entry
            for resource, chosen in taken.items():
                self.devices[resource].used[row] &= ~chosen
            for resource, chip, milli in self.shared_taken.pop(pod, []):
                self.devices[resource].share(row, chip, -milli)
            self._held(group, len(self.session.nodes))[row] -= 1
            self.session.bind_annotations.pop(pod, None)
