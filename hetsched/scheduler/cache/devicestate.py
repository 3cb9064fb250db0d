"""Chip and NUMA state per node: which chips each node has, their health, which are held (whole or shared),
and the CPU pinned per NUMA node.

Who calls it: the cache's event routing (``cache.routing``) — on Node events (:meth:`DeviceLedger.on_node`:
the node's inventory, from the ``hetsched.io/devices`` annotation or else Ascend's device-info ConfigMap),
on those ConfigMaps, and for every pod accounted on a node (:meth:`DeviceLedger.account`); the snapshot
builder copies it with :meth:`DeviceLedger.arrays`.

Invariants: per resource and node row, ``used`` is the union of the chip masks held whole by placed pods
and ``shared[row, chip]`` the thousandths of a chip held by sharing pods; a pod's chips are fixed when it
is first accounted on a node (from its hand-off annotation, else the lowest free healthy chips) so its
un-accounting frees exactly what it took. Chips in use survive inventory updates.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetsched.api.objects import ConfigMap, Node
from hetsched.devices.catalog import default_topology
from hetsched.devices.inventory import (
    ASCEND_INFO_PREFIX,
    ASCEND_NAMESPACE,
    MEMORY_OF,
    NODE_ANNOTATION,
    SHARE_OF,
    DeviceSet,
    InventoryError,
    PartitionEntry,
    chips_asked,
    from_ascend_device_info,
    parse_node_devices,
    trusted_allocation,
    trusted_partitions,
)
from hetsched.devices.partition_requests import PartitionAsk, PartitionRequest, read_request, whole_milli
from hetsched.devices.partitions import Geometry, Profile, chip_memory, fits, legal_placement, loss, memory_needed
from hetsched.devices.policy import INT_CHIPS, MAX_CHIPS, lowest
from hetsched.scheduler.cache.pods import PodRecord
from hetsched.scheduler.contract.arrays import IntArray
from hetsched.scheduler.contract.carving import Carving, Holding
from hetsched.scheduler.contract.snapshot import NUMA_ANNOTATION, DeviceArrays, NumaArrays, sharing_mask

CHIP_SLOTS = 16
"""Columns of the per-chip arrays (shares, memory, NUMA) to start with: a resource's arrays widen to its
highest chip id when a node with more chips arrives (up to ``devices.policy.MAX_CHIPS``)."""
MAX_NUMA = 8


class ChipState:
    """Chip state of one accelerator resource across node rows (bitmasks; row = node index)."""

    def __init__(self, rows: int) -> None:
        self.topology: list[str] = [""] * rows
        self.chips = np.zeros(rows, dtype=np.int64)
        self.used = np.zeros(rows, dtype=np.int64)
        self.unhealthy = np.zeros(rows, dtype=np.int64)
        self.network = np.zeros(rows, dtype=np.int64)
        self.shared = np.zeros((rows, CHIP_SLOTS), dtype=np.int64)
        self.memory = np.zeros((rows, CHIP_SLOTS), dtype=np.int64)
        """MiB of device memory per chip (0 = not stated)."""
        self.shared_memory = np.zeros((rows, CHIP_SLOTS), dtype=np.int64)
        self.numa = np.zeros((rows, CHIP_SLOTS), dtype=np.int64)
        """NUMA node of each chip."""
        self.models: list[str] = [""] * rows
        self.version = 0
        """Bumped whenever the inventory facts change (topology, models, chips, health, memory, NUMA)."""
        self.share_version = 0
        """Bumped whenever a fractional holding changes (``shared``, ``shared_memory``)."""
        self._facts: tuple[tuple[int, int], dict[str, Any]] | None = None
        self._shares: tuple[tuple[int, int], IntArray, IntArray, IntArray] | None = None
        self.carving: Carving | None = None
        """Partitions per chip; created when the first node says its chips of this resource are partitioned."""
        self.carve_version = 0
        self._carved: tuple[tuple[int, int], Carving] | None = None

    def carve(self) -> Carving:
        if self.carving is None:
            self.carving = Carving.empty(len(self.topology), self.shared.shape[1])
        return self.carving

    def grow(self, rows: int) -> None:
        extra = rows - len(self.topology)
        if extra > 0:
            self.version += 1
            self.share_version += 1
            self.topology += [""] * extra
            self.models += [""] * extra
            zeros = np.zeros(extra, dtype=self.chips.dtype)
            self.chips = np.concatenate([self.chips, zeros])
            self.used = np.concatenate([self.used, zeros])
            self.unhealthy = np.concatenate([self.unhealthy, zeros])
            self.network = np.concatenate([self.network, zeros])
            slots = self.shared.shape[1]
            self.shared = np.vstack([self.shared, np.zeros((extra, slots), dtype=np.int64)])
            self.memory = np.vstack([self.memory, np.zeros((extra, slots), dtype=np.int64)])
            self.numa = np.vstack([self.numa, np.zeros((extra, slots), dtype=np.int64)])
            self.shared_memory = np.vstack([self.shared_memory, np.zeros((extra, slots), dtype=np.int64)])
            if self.carving is not None:
                self.carving.grow(rows)
                self.carve_version += 1

    def widen(self, slots: int) -> None:
        """Give the per-chip arrays at least ``slots`` columns (chip ids ``0 … slots - 1``); past
        ``INT_CHIPS`` the masks become Python integers (``devices.policy.mask_dtype``) for good."""
        extra = slots - self.shared.shape[1]
        if slots > INT_CHIPS and self.chips.dtype != object:
            self.version += 1
            self.chips, self.used = self.chips.astype(object), self.used.astype(object)
            self.unhealthy, self.network = self.unhealthy.astype(object), self.network.astype(object)
        if extra > 0:
            self.version += 1
            self.share_version += 1
            rows = self.shared.shape[0]
            pad = np.zeros((rows, extra), dtype=np.int64)
            self.shared = np.hstack([self.shared, pad])
            self.memory = np.hstack([self.memory, pad])
            self.numa = np.hstack([self.numa, pad])
            self.shared_memory = np.hstack([self.shared_memory, pad])
            if self.carving is not None:
                self.carving.widen(slots)
                self.carve_version += 1

    def copy(self, rows: int) -> DeviceArrays:
        """A snapshot's view: ``used`` copied every time; the inventory facts and the fractional holdings
        copied once per version and shared, read-only, by every snapshot until they change (at 10,000
        nodes the node × chip-slot matrices are most of a snapshot's copying). ``DeviceArrays.share``
        copies the holdings before a session changes them."""
        key = (self.version, rows)
        if self._facts is None or self._facts[0] != key:
            memory = self.memory[:rows]
            self._facts = (key, {
                "topology": list(self.topology[:rows]), "models": list(self.models[:rows]),
                "chips": _frozen(self.chips[:rows]), "unhealthy": _frozen(self.unhealthy[:rows]),
                "network": _frozen(self.network[:rows]), "memory": _frozen(memory) if memory.any() else None,
                "numa": _frozen(self.numa[:rows]), "_by_shape": {}})
        shares = (self.share_version, rows)
        if self._shares is None or self._shares[0] != shares:
            held = _frozen(self.shared[:rows])
            self._shares = (shares, held, _frozen(self.shared_memory[:rows]), _frozen(sharing_mask(held)))
        carving = None
        if self.carving is not None:
            if self._carved is None or self._carved[0] != (self.carve_version, rows):
                self._carved = ((self.carve_version, rows), self.carving.frozen(rows))
            carving = self._carved[1].view()
        return DeviceArrays(**self._facts[1], used=self.used[:rows].copy(), shared=self._shares[1],
                            shared_memory=self._shares[2], _sharing=self._shares[3], carving=carving)


def _frozen(array: IntArray) -> IntArray:
    copied = array.copy()
    copied.flags.writeable = False
    return copied


class DeviceLedger:
    """Every accelerator resource's :class:`ChipState`, the NUMA usage, and what could not be read."""

    def __init__(self) -> None:
        self.devices: dict[str, ChipState] = {}
        self.numa_count = np.ones(0, dtype=np.int64)
        """Per node row: NUMA nodes (the highest chip ``numa`` in its inventory + 1; 1 without chips)."""
        self.numa_used = np.zeros((0, MAX_NUMA), dtype=np.int64)
        """node row × NUMA node: milli CPU pinned there by bound pods."""
        self.ascend_info: dict[str, dict[str, str]] = {}
        """Node name → the data of its Ascend device-info ConfigMap."""
        self.errors: dict[str, str] = {}
        """Node → why its device inventory could not be read (its chips are then untracked)."""
        self.templates: dict[tuple[str, str, str], int] = {}
        """(device resource, geometry name, template — ``dynamic`` for sMLU/vGPU shares) → partitions held by
        accounted pods (the metrics)."""
        self.names: dict[int, str] = {}
        """Node row → its name (a hand-off is trusted only for the node it names)."""
        self._numa_cpu: tuple[tuple[int, int], IntArray] | None = None
        """((node table version, rows), the per-NUMA-node CPU matrix) — rebuilt only when a node or an
        inventory changes (``numa_count`` is set only with a node event)."""

    def grow(self, capacity: int) -> None:
        """The node table grew to ``capacity`` rows."""
        extra = capacity - len(self.numa_count)
        if extra > 0:
            self.numa_count = np.concatenate([self.numa_count, np.ones(extra, dtype=np.int64)])
            self.numa_used = np.vstack([self.numa_used, np.zeros((extra, MAX_NUMA), dtype=np.int64)])

    # ----------------------------------------------------------------------------- inventories

    def on_config_map(self, type_: str, config_map: ConfigMap) -> str | None:
        """Track Ascend's device-info ConfigMaps; the node whose inventory may have changed, if any."""
        name = config_map.metadata.name
        if config_map.metadata.namespace != ASCEND_NAMESPACE or not name.startswith(ASCEND_INFO_PREFIX):
            return None
        node = name[len(ASCEND_INFO_PREFIX):]
        if type_ == "DELETED":
            self.ascend_info.pop(node, None)
        else:
            self.ascend_info[node] = dict(config_map.data)
        return node

    def _ascend_sets(self, node: Node) -> list[DeviceSet]:
        """The node's chips from Ascend's device-info ConfigMap (CheckCode verified), topology from its
        model label and chip count."""
        name = node.metadata.name
        data = self.ascend_info[name]
        sets = from_ascend_device_info(data, name, topology="generic")
        model = node.metadata.labels.get("node.kubernetes.io/npu.chip.name", "")
        return [s.model_copy(update={"model": model, "topology": default_topology(
            "ascend", f"Ascend{model}" if model else s.resource.rsplit("/", 1)[-1], len(s.chips))}) for s in sets]

    def on_node(self, row: int, rows: int, node: Node) -> None:
        """Read node ``row``'s chip inventory (``hetsched.io/devices``, else Ascend's device-info ConfigMap);
        ``rows`` nodes are known. Chips in use stay in use."""
        name = node.metadata.name
        self.names[row] = name
        raw = node.metadata.annotations.get(NODE_ANNOTATION)
        self.errors.pop(name, None)
        sets = []
        if raw is not None:
            try:
                sets = parse_node_devices(raw, name).devices
            except InventoryError as exc:
                self.errors[name] = str(exc)
        elif name in self.ascend_info:
            try:
                sets = self._ascend_sets(node)
            except InventoryError as exc:
                self.errors[name] = str(exc)
        for devices in self.devices.values():
            devices.grow(rows)
            devices.version += 1
            devices.topology[row] = ""
            devices.chips[row] = devices.unhealthy[row] = devices.network[row] = 0
            devices.memory[row] = devices.numa[row] = 0
            if devices.carving is not None and devices.carving.modes[row]:
                devices.carving.modes[row] = ""
                devices.carve_version += 1
        self.numa_count[row] = min(MAX_NUMA, 1 + max((c.numa for d in sets for c in d.chips), default=0))
        for device_set in sets:
            state = self.devices.get(device_set.resource)
            if state is None:
                state = self.devices[device_set.resource] = ChipState(rows)
            state.widen(max(chip.id for chip in device_set.chips) + 1)  # first: a wide mask needs wide arrays
            state.topology[row] = device_set.topology
            state.models[row] = device_set.model
            state.chips[row] = device_set.mask()
            state.unhealthy[row] = device_set.mask("Unhealthy")
            state.network[row] = device_set.mask("NetworkUnhealthy")
            for chip in device_set.chips:
                state.memory[row, chip.id] = chip.memoryMiB
                state.numa[row, chip.id] = min(chip.numa, MAX_NUMA - 1)
            if device_set.partitioning:
                state.carve().modes[row] = device_set.partitioning
                state.carve_version += 1

    # ----------------------------------------------------------------------------- pods

    def account(self, record: PodRecord, sign: int, cpu: int) -> None:
        """Charge (``sign`` 1) or free (-1) a placed pod's chips and its pinned ``cpu`` (milli)."""
        if self.devices:
            self._account_chips(record, sign)
        if record.numa is None:
            raw = record.pod.metadata.annotations.get(NUMA_ANNOTATION)
            record.numa = int(raw) if raw is not None and raw.isdigit() and int(raw) < MAX_NUMA else -1
        if record.numa >= 0 and record.node < len(self.numa_used):
            self.numa_used[record.node, record.numa] += sign * cpu

    def _account_chips(self, record: PodRecord, sign: int) -> None:
        """Mark the pod's chips used (or free). The chips come from its hand-off annotation; a pod bound
        without one (another scheduler, a plain device plugin) is charged the lowest free healthy chips."""
        row = record.node
        if record.chips is None:
            record.chips, record.shares = self._holdings(record, row)
        for resource, chip, profile, memory, placement in record.partitions or ():
            state = self.devices.get(resource)
            if state is not None and state.carving is not None:
                state.carving.add(row, chip, profile, memory, placement, sign, owner=record.pod.metadata.labels)
                state.carve_version += 1
                geometry = state.carving.geometry(row, state.models[row])
                # a dynamic share's name carries its size: one label value for them all (bounded cardinality)
                name = "dynamic" if geometry is None or geometry.dynamic else profile.name
                key = (resource, geometry.name if geometry is not None else "", name)
                self.templates[key] = self.templates.get(key, 0) + sign
        for resource, (chip, share, memory) in (record.shares or {}).items():
            state = self.devices.get(resource)
            if state is not None:
                state.shared[row, chip] += sign * share
                state.shared_memory[row, chip] += sign * memory
                state.share_version += 1
        for resource, mask in record.chips.items():
            state = self.devices.get(resource)
            if state is None:
                continue
            if sign > 0:
                state.used[row] |= mask
            else:
                state.used[row] &= ~mask

    def _holdings(self, record: PodRecord, row: int) -> tuple[dict[str, int], dict[str, tuple[int, int, int]]]:
        """What the pod holds on node ``row``, fixed once: whole chips per resource, and a share of one."""
        chips: dict[str, int] = {}
        shares: dict[str, tuple[int, int, int]] = {}
        requests = record.pod.spec.requests
        meta = record.pod.metadata
        request = read_request(requests, meta.annotations, meta.labels)
        record.partitions = self._carved(record, row, request) if request.asks else []
        wanted = {resource: chips_asked(requests, resource) if not request.whole and not request.counted
                  else -(-whole_milli(requests, resource, request) // 1000) for resource in self.devices}
        # only a hand-off the scheduler wrote for this very pod on this node counts: a forged, copied or
        # squatting one (anyone who creates a pod can write annotations) never blocks anyone's chips
        named = trusted_allocation(record.pod.metadata.annotations, record.pod.metadata.uid,
                                   self.names.get(row, ""), wanted)
        for resource, devices in self.devices.items():
            if not devices.topology[row]:
                continue
            share = requests.get(SHARE_OF.get(resource, ""), 0) // 1000
            memory = requests.get(MEMORY_OF.get(resource, ""), 0) // 1000
            on_node = int(devices.chips[row])
            if share > 0:
                taken = [c for c in named.get(resource, []) if 0 <= c < MAX_CHIPS and on_node >> c & 1] or self._room(
                    devices, row, share, memory)[:1]  # bound without a hand-off: the first chip with room
                if taken:
                    shares[resource] = (taken[0], share, memory)
            amount = whole_milli(requests, resource, request)
            if amount <= 0:
                continue
            if resource in named:  # every chip id the node has is charged (a 32-chip node's 16–31 too)
                mask = sum(1 << c for c in set(named[resource]) if 0 <= c < MAX_CHIPS) & on_node
            else:
                free = int(devices.chips[row] & ~devices.used[row] & ~devices.unhealthy[row])
                mask = lowest(free, -(-amount // 1000)) or free
            chips[resource] = mask
        return chips, shares

    def _carved(self, record: PodRecord, row: int, request: PartitionRequest) -> list[Holding]:
        """The partitions the pod holds on node ``row``: those its trusted hand-off names (each checked against
        what the pod asks and what the chip allows), else where the scheduler would have carved each."""
        meta = record.pod.metadata
        wanted = sum(ask.count for ask in request.asks)
        named = trusted_partitions(meta.annotations, meta.uid, self.names.get(row, ""), wanted)
        holdings: list[Holding] = []
        index = 0
        for ask in request.asks:
            state = self.devices.get(ask.resource)
            carving = state.carving if state is not None else None
            if state is None or carving is None or not state.topology[row]:
                index += ask.count
                continue
            geometry = carving.geometry(row, state.models[row])
            profile = ask.profile(geometry) if geometry is not None else "not partitioned"
            for _ in range(ask.count):
                entry = named[index] if index < len(named) else None
                index += 1
                if geometry is None or isinstance(profile, str):
                    continue
                chosen = self._carve_at(state, carving, geometry, profile, row, entry, ask,
                                        {h[1] for h in holdings if h[0] == ask.resource})
                if chosen is not None:
                    holdings.append(chosen)
                    carving.add(row, chosen[1], profile, chosen[3], chosen[4])  # later asks see it
        for resource, chip, profile, memory, placement in holdings:
            self.devices[resource].carve().add(row, chip, profile, memory, placement, -1)
        return holdings

    @staticmethod
    def _carve_at(state: ChipState, carving: Carving, geometry: Geometry, profile: Profile, row: int,
                  entry: PartitionEntry | None, ask: PartitionAsk, taken: set[int]) -> Holding | None:
        """Where one partition sits: the hand-off's chip and placement when they are legal there, else the chip
        (not in ``taken`` for a ``distinct`` ask) and placement the scheduler would choose — the one that costs the
        fewest future templates (``devices.partitions.loss``); None if nowhere."""
        present = int(state.chips[row])
        usable = present & ~int(state.unhealthy[row]) & ~int(state.used[row])
        slots = carving.cores.shape[1]
        capacity = chip_memory(geometry, state.memory[row, :slots])
        room = fits(geometry, profile, carving.cores[row], carving.memory[row], carving.aicpu[row], carving.count[row],
                    carving.slices[row], capacity)
        if entry is not None and entry[0] == ask.resource and entry[2] == profile.name and 0 <= entry[1] < slots:
            chip, placement = entry[1], entry[3]
            legal = legal_placement(geometry, profile, placement)
            # the partition exists where the hand-off says, even on a chip that has turned unhealthy since
            if (legal and present >> chip & 1 and room[chip] > 0 and not int(carving.slices[row, chip]) & placement
                    and not (ask.distinct and chip in taken)):
                return ask.resource, chip, profile, int(memory_needed(profile, capacity)[chip]), placement
        candidates = [c for c in range(slots) if usable >> c & 1 and not state.shared[row, c] and room[c] > 0
                      and not (ask.distinct and c in taken)]
        if not candidates:
            return None
        cost, placements = loss(geometry, profile, carving.cores[row], carving.memory[row], carving.aicpu[row],
                                carving.count[row], carving.slices[row], capacity)
        chip = min(candidates, key=lambda c: (cost[c], c))
        return ask.resource, chip, profile, int(memory_needed(profile, capacity)[chip]), int(placements[chip])

    @staticmethod
    def _room(devices: ChipState, row: int, share: int, memory: int) -> list[int]:
        return [c for c in range(devices.shared.shape[1])
                if devices.chips[row] >> c & 1 and not devices.used[row] >> c & 1
                and devices.shared[row, c] + share <= 1000
                and (not memory or devices.shared_memory[row, c] + memory <= devices.memory[row, c])]

    # ----------------------------------------------------------------------------- reads

    def mismatches(self, alloc: IntArray, columns: dict[str, int], names: list[str],
                   exists: list[bool]) -> dict[str, str]:
        """Nodes whose allocatable disagrees with their healthy chip count (the seed's "fake resources")."""
        found: dict[str, str] = {}
        for resource, devices in self.devices.items():
            column = columns.get(resource)
            if column is None:
                continue
            for row in np.flatnonzero(devices.chips[: len(names)]).tolist():
                if not exists[row]:
                    continue
                healthy = (int(devices.chips[row]) & ~int(devices.unhealthy[row])).bit_count()
                advertised = int(alloc[column, row]) // 1000
                if advertised != healthy:
                    found[names[row]] = (f"{resource}: allocatable {advertised} but {healthy} healthy "
                                         f"chip(s) of {int(devices.chips[row]).bit_count()}")
        return found

    def arrays(self, rows: int, cpu: IntArray, version: int) -> tuple[dict[str, DeviceArrays], NumaArrays]:
        """Copies for a snapshot of ``rows`` nodes whose allocatable CPU is ``cpu`` (split evenly over each
        node's NUMA nodes) at node table ``version``; the NUMA CPU matrix is shared, read-only, per version."""
        devices = {resource: state.copy(rows) for resource, state in self.devices.items()}
        if self._numa_cpu is None or self._numa_cpu[0] != (version, rows):
            count = self.numa_count[:rows]
            numa_cpu = np.where(np.arange(MAX_NUMA)[None, :] < count[:, None], (cpu // count)[:, None], 0)
            self._numa_cpu = ((version, rows), _frozen(numa_cpu.astype(np.int64)))
        return devices, NumaArrays(cpu=self._numa_cpu[1], used=self.numa_used[:rows].copy())
