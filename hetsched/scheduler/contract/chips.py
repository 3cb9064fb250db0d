"""Chip accounting per node, read off a snapshot: physical, healthy, advertised, held, free and stranded.

Who calls it: the scheduler's metrics (``metrics.scheduler``), ``hetsched explain`` (chip maps, topology
fragmentation), ``hetsched doctor`` (allocatable vs healthy chips) and the simulation report (occupancy).
It only reads; vectorised over nodes except for the per-topology policy lookups.

Definitions (per accelerator resource and node):
- *physical*: chips in the node's inventory; *healthy*: not Unhealthy (a NetworkUnhealthy chip is healthy
  for single-node work); *advertised*: the node's allocatable, what the kubelet's device plugin reports;
- *accounted*: what the scheduler places on: healthy chips (never more than advertised);
- *held*: chips held whole by bound pods, plus chips partly held by fractional pods;
- *free*: healthy, not held; *stranded*: free chips that cannot serve a request of the largest size the
  node's topology allows when empty (fragmentation: ``free − size × pods of that size that still fit``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsched.api.accelerators import accelerator_kind
from hetsched.devices.catalog import PolicySettings, policy_for
from hetsched.devices.partition_requests import advertised
from hetsched.devices.policy import TopologyPolicy, popcounts
from hetsched.scheduler.contract.arrays import IntArray
from hetsched.scheduler.contract.snapshot import DeviceArrays, Snapshot


@dataclass
class ChipTable:
    """One accelerator resource over the snapshot's nodes (rows with no chips and no allocatable dropped)."""

    resource: str
    kind: str
    nodes: list[str]
    models: list[str]
    physical: IntArray
    healthy: IntArray
    network_unhealthy: IntArray
    advertised: IntArray
    held: IntArray
    free: IntArray
    stranded: IntArray

    @property
    def accounted(self) -> IntArray:
        accounted: IntArray = np.minimum(self.healthy, self.advertised)
        return accounted

    @property
    def mismatch(self) -> IntArray:
        """Advertised minus healthy physical chips: > 0 is the seed's "fake resources", < 0 chips the device
        plugin does not report (not registered, or a stale count)."""
        mismatch: IntArray = self.advertised - self.healthy
        return mismatch


class ChipAccounts:
    """Policies per server shape, cached across calls (their lookup tables are built once per process)."""

    def __init__(self, settings: PolicySettings | None = None) -> None:
        self.settings = settings or PolicySettings()
        self._policies: dict[tuple[str, int], TopologyPolicy] = {}

    def policy(self, topology: str, chips: int) -> TopologyPolicy:
        key = (topology, chips)
        policy = self._policies.get(key)
        if policy is None:
            policy = self._policies[key] = policy_for(topology or "generic", max(chips, 1), self.settings)
        return policy

    def tables(self, snapshot: Snapshot) -> list[ChipTable]:
        return [table for resource, devices in sorted(snapshot.devices.items())
                if (table := self.table(snapshot, resource, devices)) is not None]

    def table(self, snapshot: Snapshot, resource: str, devices: DeviceArrays) -> ChipTable | None:
        nodes = snapshot.nodes
        column = snapshot.resources.columns.get(resource)
        advertised_all = (nodes.alloc[column] // 1000 if column is not None
                          else np.zeros(len(nodes), dtype=np.int64))
        present = nodes.exists & ((devices.chips != 0) | (advertised_all > 0))
        rows = np.flatnonzero(present).astype(np.int64)
        if not len(rows):
            return None
        advertised_chips = advertised_all[rows].copy()
        if devices.carving is not None:  # a vGPU node counts its GPUs' own name in vGPUs (HAMi's): back to chips
            for position, row in enumerate(rows.tolist()):
                mode = devices.carving.modes[row]
                per_chip = advertised(mode, devices.models[row], 0).get(resource, 1) if mode else 1
                advertised_chips[position] //= max(per_chip, 1)
        chips = devices.chips[rows]
        unhealthy = devices.unhealthy[rows]
        sharing = devices.sharing()[rows]
        if devices.carving is not None:
            sharing = sharing | devices.carving.mask()[rows]  # a carved chip is held (in part) like a shared one
        held_masks = (devices.used[rows] | sharing) & chips
        free_masks = chips & ~unhealthy & ~held_masks
        stranded = np.zeros(len(rows), dtype=np.int64)
        shapes: dict[tuple[str, int], list[int]] = {}
        for position, row in enumerate(rows.tolist()):
            mask = int(chips[position])
            if mask:
                shapes.setdefault((devices.topology[row], mask), []).append(position)
        for (topology, mask), positions in shapes.items():  # one vectorised lookup per server shape
            policy = self.policy(topology, mask.bit_length())
            at = np.asarray(positions, dtype=np.int64)
            free = free_masks[at]
            whole = policy.largest(mask)
            if whole:
                stranded[at] = popcounts(free) - whole * policy.tables(whole).capacity(free)
        kind = accelerator_kind(resource) or "other"
        return ChipTable(
            resource=resource, kind=kind, nodes=[nodes.names[r] for r in rows.tolist()],
            models=[devices.models[r] or resource.rsplit("/", 1)[-1] for r in rows.tolist()],
            physical=popcounts(chips), healthy=popcounts(chips & ~unhealthy),
            network_unhealthy=popcounts(devices.network[rows] & chips), advertised=advertised_chips,
            held=popcounts(held_masks), free=popcounts(free_masks), stranded=stranded)


def chip_map(snapshot: Snapshot, node: str, accounts: ChipAccounts | None = None) -> list[tuple[str, str, str]]:
    """Per accelerator resource on ``node``: (resource, one character per chip, legend-free summary).

    Characters: ``#`` held whole, ``%`` shared by fractional pods, ``+`` carved into partitions, ``.`` free,
    ``X`` unhealthy, ``N`` network unhealthy (usable inside the node), `` `` no chip in that slot; link domains
    separated by ``|``. A node whose chips are partitioned lists each carved chip's partitions (template and
    slice mask) and the compute and memory left on it.
    """
    accounts = accounts or ChipAccounts()
    row = snapshot.nodes.index.get(node)
    if row is None:
        return []
    result = []
    for resource, devices in sorted(snapshot.devices.items()):
        mask = int(devices.chips[row])
        if not mask:
            continue
        policy = accounts.policy(devices.topology[row], mask.bit_length())
        used, unhealthy, network = int(devices.used[row]), int(devices.unhealthy[row]), int(devices.network[row])
        sharing = int(devices.sharing()[row])
        carved = int(devices.carving.mask()[row]) if devices.carving is not None else 0
        cells = []
        for chip in range(mask.bit_length()):
            bit = 1 << chip
            if not mask & bit:
                cells.append(" ")
            elif unhealthy & bit:
                cells.append("X")
            elif used & bit:
                cells.append("#")
            elif sharing & bit:
                cells.append("%")
            elif carved & bit:
                cells.append("+")
            elif network & bit:
                cells.append("N")
            else:
                cells.append(".")
        groups = [g for g in policy.LINK_GROUPS if g & mask]
        if groups:
            text = "|".join("".join(cells[c] for c in range(len(cells)) if g >> c & 1) for g in groups)
        else:
            text = "".join(cells)
        free = mask & ~unhealthy & ~used & ~sharing & ~carved
        summary = (f"{devices.models[row] or resource} ({devices.topology[row] or 'generic'}): "
                   f"{policy.split(free)}; largest request that fits: {policy.largest(free)}")
        result.append((resource, text, summary + carving_summary(snapshot, resource, row)))
    return result


def carving_summary(snapshot: Snapshot, resource: str, row: int) -> str:
    """``; carved (mig, A100-40GB): chip 0: 3g.20gb@11110000 4g.20gb@00001111, 7/7 cores, 40960/40960 MiB``
    (what ``hetsched explain --node`` prints), from the bound pods' partitions; "" for chips that are not
    partitioned."""
    devices = snapshot.devices[resource]
    carving = devices.carving
    geometry = carving.geometry(row, devices.models[row]) if carving is not None else None
    if carving is None or geometry is None:
        return ""
    held: dict[int, list[str]] = {}
    for pod in snapshot.running:
        if pod.node == row:
            for holding_resource, chip, profile, _memory, placement in pod.partitions:
                if holding_resource == resource:
                    where = f"@{placement:0{geometry.slices}b}" if geometry.slices else ""
                    held.setdefault(chip, []).append(f"{profile.name}{where}")
    capacity = devices.memory[row] if devices.memory is not None else None
    chips = []
    for chip in sorted(held):
        total = geometry.memory or (int(capacity[chip]) if capacity is not None else 0)
        chips.append(f"chip {chip}: {' '.join(sorted(held[chip]))}, {int(carving.cores[row, chip])}/{geometry.cores} "
                     f"cores, {int(carving.memory[row, chip])}/{total} MiB")
    return f"; carved ({geometry.mode}, {geometry.name}): " + ("; ".join(chips) if chips else "nothing yet")
