"""Where a chip partition fits on each node, and what carving it there costs, over many nodes at once.

Who calls it: ``devicetopology`` (filter, capacity, score and the choice at allocation) and
``scheduler.engine.why`` (why a node cannot take a partition). It joins a snapshot's chip arrays
(``DeviceArrays`` with its ``Carving``) to the vendor geometries (``devices.partitions``).
"""

from __future__ import annotations

import numpy as np

from hetsched.devices.partitions import Geometry, Profile, chip_memory, fits, geometry_for, loss, memory_needed
from hetsched.devices.policy import popcounts
from hetsched.scheduler.contract.arrays import BoolArray, FloatArray, IntArray
from hetsched.scheduler.contract.snapshot import DeviceArrays


def geometry_rows(devices: DeviceArrays, mode: str) -> list[tuple[Geometry, IntArray]]:
    """Node rows whose chips of this resource are partitioned in ``mode``, grouped by chip geometry (rows of a
    model no geometry describes are left out: nothing can be carved there)."""
    carving = devices.carving
    if carving is None:
        return []
    found = carving.grouped.get(mode)
    if found is None:
        groups: dict[str, tuple[Geometry, list[int]]] = {}
        for row, row_mode in enumerate(carving.modes):
            if row_mode == mode and devices.topology[row]:
                geometry = geometry_for(mode, devices.models[row])
                if geometry is not None:
                    groups.setdefault(geometry.name, (geometry, []))[1].append(row)
        found = carving.grouped[mode] = [(geometry, np.asarray(rows, dtype=np.int64))
                                         for geometry, rows in groups.values()]
    return found

State = tuple[IntArray, IntArray, IntArray, IntArray, IntArray, IntArray]


def _state(devices: DeviceArrays, geometry: Geometry, rows: IntArray) -> State:
    """(cores, memory, AI CPUs, partitions, slice masks held, memory capacity) of the chips of ``rows``."""
    carving = devices.carving
    assert carving is not None
    slots = carving.cores.shape[1]
    stated = devices.memory[rows][:, :slots] if devices.memory is not None else np.zeros((len(rows), slots),
                                                                                           dtype=np.int64)
    cores, memory, aicpu, count, slices = carving.state(rows)
    return cores, memory, aicpu, count, slices, chip_memory(geometry, stated)


def chip_fits(devices: DeviceArrays, geometry: Geometry, profile: Profile, rows: IntArray, *,
              exclude_network: bool, avoid: BoolArray | None = None) -> IntArray:
    """rows × chip slot: how many more ``profile`` partitions each chip takes (0 on chips that are absent,
    unhealthy, held whole, shared by ``…-milli`` pods, network-unhealthy for a multi-pod job, or ``avoid``)."""
    cores, memory, aicpu, count, slices, capacity = _state(devices, geometry, rows)
    counts = fits(geometry, profile, cores, memory, aicpu, count, slices, capacity)
    usable = devices.carvable(rows, exclude_network=exclude_network)[:, :counts.shape[1]]
    if avoid is not None:
        usable = usable & ~avoid[:, :counts.shape[1]]
    result: IntArray = np.where(usable, counts, 0)
    return result


def cheapest(devices: DeviceArrays, geometry: Geometry, profile: Profile, rows: IntArray, *,
             exclude_network: bool, avoid: BoolArray | None = None) -> tuple[FloatArray, IntArray, IntArray, IntArray]:
    """Per row: the fragmentation cost of the cheapest chip to carve ``profile`` on (``inf`` where none fits),
    that chip (-1 where none), its slice mask, and the MiB it takes. Ties go to the chip already carved most
    (partitions gather on few chips, whole chips stay whole), then the lowest id. ``avoid``: rows × slot chips
    not to use (a pod's earlier vGPUs)."""
    cores, memory, aicpu, count, slices, capacity = _state(devices, geometry, rows)
    cost, placement = loss(geometry, profile, cores, memory, aicpu, count, slices, capacity)
    usable = devices.carvable(rows, exclude_network=exclude_network)[:, :cost.shape[1]]
    if avoid is not None:
        usable = usable & ~avoid[:, :cost.shape[1]]
    cost = np.where(usable, cost, np.inf)
    carved = cores / max(geometry.cores, 1)
    ranked = np.where(np.isfinite(cost), cost - 1e-3 * carved, np.inf)
    chip = np.argmin(ranked, axis=1)
    at = np.arange(len(rows))
    found = np.isfinite(ranked[at, chip])
    need = memory_needed(profile, capacity)
    return (np.where(found, cost[at, chip], np.inf), np.where(found, chip, -1),
            np.where(found, placement[at, chip], 0), np.where(found, need[at, chip], 0))


def busy_fraction(devices: DeviceArrays, rows: IntArray) -> FloatArray:
    """Per row: the share of the node's chips holding anything (whole pods, ``…-milli`` shares, partitions)."""
    held = devices.used[rows] | devices.sharing()[rows]
    if devices.carving is not None:
        held = held | devices.carving.mask()[rows]
    chips = devices.chips[rows]
    fraction: FloatArray = popcounts(held & chips) / np.maximum(popcounts(chips), 1)
    return fraction

