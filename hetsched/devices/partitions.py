"""Chip partitions: the templates each vendor carves one chip into, the rules that place them on the chip,
and the resource names pods ask for them with.

Who calls it: the scheduler's ``devicetopology`` plugin (which chip and which place on it a pod's
partition takes, and what that costs the templates still possible there), the scheduler cache (what a
bound pod's partitions hold, ``cache.devicestate``), the cluster-spec expander (what a pool with
``partitioning`` advertises), ``hetsched validate`` and the admission webhook (a partition request that
can never be served is refused naming the resource).

Four partitioning modes, chosen per node device set (``DeviceSet.partitioning`` in the inventory):

- ``mig`` — NVIDIA Multi-Instance GPU: fixed profiles per GPU model (``1g.5gb`` … ``7g.40gb`` on an A100
  40GB) that occupy memory slices at fixed start positions (NVIDIA's placement table: ``nvidia-smi mig
  -lgipp``). Asked as ``nvidia.com/mig-<profile>: N`` (the device plugin's "mixed" strategy), or as a
  Volcano/HAMi vGPU with ``volcano.sh/vgpu-mode: mig`` (the smallest profile holding the memory asked).
- ``vnpu`` — Ascend virtual NPUs: fixed templates per chip (``vir01`` … ``vir04_3c`` on a 310P,
  ``vir05_1c_16g``/``vir10_3c_32g`` on a 910B3) that sum AI cores, AI CPUs and memory, at most 7 per 310P.
  On a 310P the 8 AI cores form 4 groups of 2, and a template takes whole aligned groups (a ``vir04`` 2
  groups, a ``vir02`` one): this keeps every carving inside what Ascend's scheduler accepts (Volcano's
  MindCluster vNPU code refuses a 4-core vNPU once 3 groups are in use, a 2-core one once 4 are). Asked the
  MindCluster way (``huawei.com/npu-core: 1|2|4`` with the pod labels ``vnpu-level`` and ``vnpu-dvpp``) or the
  HAMi way (``huawei.com/Ascend310P: 1`` with ``huawei.com/Ascend310P-memory``: the smallest template holding
  that memory).
- ``smlu`` — Cambricon dynamic sMLU: any share of a chip's compute (``cambricon.com/mlu.smlu.vcore``, percent)
  and memory (``cambricon.com/mlu.smlu.vmemory``, MiB, rounded up to 256 MiB units as the device plugin's
  ``--min-dsmlu-unit``), with HAMi's ``cambricon.com/vmlu: 1``.
- ``vgpu`` — NVIDIA vGPU by HAMi-core: percent of compute and MiB of memory per vGPU, at most 10 vGPUs per
  GPU (HAMi's ``deviceSplitCount``), each vGPU of a pod on its own GPU. Asked as ``volcano.sh/vgpu-number`` /
  ``-memory`` / ``-cores`` or HAMi's ``nvidia.com/gpu`` with ``nvidia.com/gpumem`` / ``gpumem-percentage`` /
  ``gpucores``.

Invariants: a chip holds partitions of one mode only, and either partitions or ``hetsched.io/<kind>-milli``
shares or whole-chip pods, never two of these (the scheduler's arrays enforce it); a partition is placed
only where every constraint of its geometry holds after it (compute units, memory, AI CPUs, instance count,
slice placement), so no sequence of placements can over-carve a chip.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Literal

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

Mode = Literal["mig", "vnpu", "smlu", "vgpu"]
MAX_SLOTS = 16
"""Instance slots per chip of a ``slotted`` geometry: a 910's vNPU ids span 16 per chip."""
WHOLE_MEMORY = -1
"""A profile's ``memory`` meaning "all of the chip's memory" (a vGPU asked without a memory size)."""
PERCENT_MEMORY = -1000
"""A profile's ``memory`` of ``PERCENT_MEMORY - p`` means p % of the chip's memory (HAMi's
``nvidia.com/gpumem-percentage``): :func:`percent_memory`, read by :func:`memory_needed`."""


def percent_memory(percent: int) -> int:
    return PERCENT_MEMORY - percent


def memory_percent(memory: int) -> int | None:
    """The percent a profile's ``memory`` stands for (100 for ``WHOLE_MEMORY``), None for MiB."""
    if memory == WHOLE_MEMORY:
        return 100
    return PERCENT_MEMORY - memory if memory <= PERCENT_MEMORY else None
BIG = 1 << 40


def _placements(starts: tuple[int, ...], size: int) -> tuple[int, ...]:
    return tuple(((1 << size) - 1) << start for start in starts)


@dataclass(frozen=True)
class Profile:
    """One template: what it takes of a chip, and where on the chip it may sit."""

    name: str
    cores: int
    """Compute units of its geometry (MIG: GPU slices; vNPU: AI cores; sMLU and vGPU: percent)."""
    memory: int
    """MiB (``WHOLE_MEMORY``: all of the chip's; :func:`percent_memory`: a share of it)."""
    aicpu: int = 0
    placements: tuple[int, ...] = ()
    """Slice masks it may occupy (empty: no placement rule, only the sums)."""


@dataclass(frozen=True)
class Geometry:
    """How one chip model is carved in one mode."""

    mode: Mode
    name: str
    """The model family it describes (``A100-40GB``, ``Ascend310P``) — shown in ``explain`` and metrics."""
    prefixes: tuple[str, ...]
    """Inventory model names (lower case, without ``-``/``_``/spaces and a leading ``NVIDIA``/``Tesla``) it applies
    to, by prefix. A model no geometry names (an H100 NVL, an A100 whose name gives no memory size) cannot be
    carved in that mode: refused when a node says it is, never carved by a neighbour's table."""
    cores: int
    memory: int
    """MiB per chip (0: the chip's own ``memoryMiB`` from the inventory)."""
    aicpu: int = 0
    """AI CPUs per chip (0: not a constraint)."""
    instances: int = 0
    """Partitions per chip at most (0: no limit beyond the sums)."""
    slices: int = 0
    """Placement slices per chip (0: no placement rule)."""
    memory_unit: int = 1
    """A dynamic ask's memory is rounded up to a multiple of this (MiB)."""
    profiles: tuple[Profile, ...] = ()
    """Named templates; a dynamic geometry (sMLU, vGPU) has none and takes any cores + memory ask."""
    dynamic: bool = False
    slotted: bool = False
    """Each partition takes an instance slot: the lowest free bit of the chip's slice mask (at most
    :data:`MAX_SLOTS`). For Ascend 910 vNPUs, whose templates take AI cores in no fixed place, so the node
    derives a vNPU's id from its slot (``100 + 16·phy + slot``) where a 310P's follows from its cores."""
    reference: tuple[Profile, ...] = field(default=())
    """For a dynamic geometry: the shapes whose loss measures fragmentation (quarter, half, whole chip)."""

    def profile(self, name: str) -> Profile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def shapes(self) -> tuple[Profile, ...]:
        """The templates fragmentation is measured against (named ones, or the reference shapes)."""
        return self.profiles or self.reference


def _mig(name: str, prefixes: tuple[str, ...], gb: tuple[int, int, int, int, int, int], small: str,
         total: int) -> Geometry:
    """An A100/H100-class MIG geometry: 7 compute slices over 8 memory slices; ``gb`` are the memory sizes of
    1g, 1g (double memory), 2g, 3g, 4g and 7g profiles; ``small`` names the single-slice profile."""
    one, one_double, two, three, four, seven = gb
    return Geometry("mig", name, prefixes, cores=7, memory=total, slices=8, instances=7, profiles=(
        Profile(small, 1, one * 1024, placements=_placements(tuple(range(7)), 1)),
        Profile(f"1g.{one_double}gb", 1, one_double * 1024, placements=_placements((0, 2, 4, 6), 2)),
        Profile(f"2g.{two}gb", 2, two * 1024, placements=_placements((0, 2, 4), 2)),
        Profile(f"3g.{three}gb", 3, three * 1024, placements=_placements((0, 4), 4)),
        Profile(f"4g.{four}gb", 4, four * 1024, placements=_placements((0,), 4)),
        Profile(f"7g.{seven}gb", 7, seven * 1024, placements=_placements((0,), 8)),
    ))


def _vnpu_310p() -> Geometry:
    any_core = _placements(tuple(range(8)), 1)
    group = _placements((0, 2, 4, 6), 2)
    two_groups = _placements((0, 4), 4)
    return Geometry("vnpu", "Ascend310P", ("ascend310p", "310p"), cores=8, memory=24576, aicpu=7, instances=7,
                    slices=8, profiles=(
                        Profile("vir01", 1, 3072, 1, any_core),
                        Profile("vir02", 2, 6144, 2, group),
                        Profile("vir02_1c", 2, 6144, 1, group),
                        Profile("vir04", 4, 12288, 4, two_groups),
                        Profile("vir04_3c", 4, 12288, 3, two_groups),
                        Profile("vir04_3c_ndvpp", 4, 12288, 3, two_groups),
                        Profile("vir04_4c_dvpp", 4, 12288, 4, two_groups),
                    ))


def _vnpu_910(name: str, prefixes: tuple[str, ...], cores: int, aicpu: int, memory: int,
              templates: tuple[tuple[str, int, int, int], ...]) -> Geometry:
    return Geometry("vnpu", name, prefixes, cores=cores, memory=memory, aicpu=aicpu, instances=MAX_SLOTS,
                    slotted=True, profiles=tuple(Profile(n, c, m, a) for n, c, a, m in templates))


def _dynamic(mode: Mode, name: str, prefixes: tuple[str, ...], instances: int, unit: int) -> Geometry:
    return Geometry(mode, name, prefixes, cores=100, memory=0, instances=instances, memory_unit=unit, dynamic=True,
                    reference=(Profile("quarter", 25, 0), Profile("half", 50, 0), Profile("whole", 100, 0)))


GEOMETRIES: tuple[Geometry, ...] = (
    # NVIDIA MIG (profiles and placements: NVIDIA's MIG user guide, "A100 MIG profiles" and the H100/H200 tables)
    _mig("A100-40GB", ("a100sxm440gb", "a100pcie40gb", "a10040gb"), (5, 10, 10, 20, 20, 40), "1g.5gb", 40960),
    _mig("A100-80GB", ("a100sxm480gb", "a100pcie80gb", "a10080gb"), (10, 20, 20, 40, 40, 80), "1g.10gb", 81920),
    _mig("H100-80GB", ("h100sxm580gb", "h100sxm80gb", "h10080gb", "h100pcie", "h800"), (10, 20, 20, 40, 40, 80),
         "1g.10gb", 81920),
    _mig("H200-141GB", ("h200",), (18, 35, 35, 71, 71, 141), "1g.18gb", 144384),
    Geometry("mig", "A30-24GB", ("a30",), cores=4, memory=24576, slices=4, instances=4, profiles=(
        Profile("1g.6gb", 1, 6144, placements=_placements((0, 1, 2, 3), 1)),
        Profile("2g.12gb", 2, 12288, placements=_placements((0, 2), 2)),
        Profile("4g.24gb", 4, 24576, placements=_placements((0,), 4)),
    )),
    # Ascend vNPU (templates: Ascend's virtual-instance guide; HAMi's device ConfigMap for memory sizes)
    _vnpu_310p(),
    _vnpu_910("Ascend910B2", ("ascend910b2", "910b2"), 24, 6, 65536,
              (("vir03_1c_8g", 3, 1, 8192), ("vir06_1c_16g", 6, 1, 16384), ("vir12_3c_32g", 12, 3, 32768))),
    _vnpu_910("Ascend910B3", ("ascend910b3", "910b3"), 20, 7, 65536,
              (("vir05_1c_16g", 5, 1, 16384), ("vir10_3c_32g", 10, 3, 32768))),
    _vnpu_910("Ascend910B4", ("ascend910b4", "910b4"), 20, 7, 32768,
              (("vir05_1c_8g", 5, 1, 8192), ("vir10_3c_16g", 10, 3, 16384))),
    _vnpu_910("Ascend910A", ("ascend910a", "910a", "ascend910"), 30, 0, 32768,
              (("vir02", 2, 0, 2184), ("vir04", 4, 0, 4369), ("vir08", 8, 0, 8738), ("vir16", 16, 0, 17476))),
    # Cambricon dynamic sMLU and NVIDIA HAMi-core vGPU: any cores + memory, memory from the inventory
    _dynamic("smlu", "MLU-sMLU", ("",), 0, 256),
    _dynamic("vgpu", "GPU-vGPU", ("",), 10, 1),
)


def _normal(model: str) -> str:
    """``NVIDIA A100-SXM4-40GB`` (NVML's name) and ``A100-SXM4-40GB`` alike → ``a100sxm440gb``."""
    lowered = model.lower().replace("-", "").replace("_", "").replace(" ", "")
    for vendor in ("nvidia", "tesla"):
        lowered = lowered.removeprefix(vendor)
    return lowered


@cache
def geometry_for(mode: str, model: str) -> Geometry | None:
    """The geometry of ``model`` chips carved in ``mode`` (longest matching model prefix), or None."""
    lowered = _normal(model)
    best: tuple[int, Geometry] | None = None
    for geometry in GEOMETRIES:
        if geometry.mode != mode:
            continue
        for prefix in geometry.prefixes:
            if lowered.startswith(prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), geometry)
    return best[1] if best else None


@cache
def pack_table(slices: int, placements: tuple[int, ...]) -> IntArray:
    """For every slice mask (``2**slices`` entries), how many more partitions with these placements fit
    (greedy over placements in order: exact for the nested, aligned placements of MIG and the 310P groups)."""
    table = np.zeros(1 << slices, dtype=np.int64)
    for mask in range(1 << slices):
        taken, count = mask, 0
        for placement in placements:
            if not taken & placement:
                taken |= placement
                count += 1
        table[mask] = count
    table.flags.writeable = False
    return table


def memory_needed(profile: Profile, capacity: IntArray) -> IntArray:
    """MiB the profile takes on chips of ``capacity`` MiB."""
    percent = memory_percent(profile.memory)
    if percent is not None:
        return capacity if percent == 100 else capacity * percent // 100
    return np.full_like(capacity, profile.memory)


def fits(geometry: Geometry, profile: Profile, cores: IntArray, memory: IntArray, aicpu: IntArray,
         count: IntArray, slices: IntArray, capacity: IntArray) -> IntArray:
    """How many more ``profile`` partitions each chip can take, given what it holds (arrays of one shape:
    compute units, MiB, AI CPUs, partitions and slice masks held; ``capacity`` its memory in MiB)."""
    result = np.full(cores.shape, BIG, dtype=np.int64)
    if profile.cores:
        result = np.minimum(result, (geometry.cores - cores) // profile.cores)
    need = memory_needed(profile, capacity)
    with np.errstate(divide="ignore", invalid="ignore"):
        by_memory = np.where(need > 0, (capacity - memory) // np.maximum(need, 1), BIG)
    result = np.minimum(result, np.where((need > 0) & (capacity <= 0), 0, by_memory))
    if geometry.aicpu and profile.aicpu:
        result = np.minimum(result, (geometry.aicpu - aicpu) // profile.aicpu)
    if geometry.instances:
        result = np.minimum(result, geometry.instances - count)
    if profile.placements:
        result = np.minimum(result, pack_table(geometry.slices, profile.placements)[slices])
    return np.maximum(result, 0)


def _capped(counts: IntArray, profile: Profile, geometry: Geometry) -> IntArray:
    """Counts bounded by what a whole chip holds (an unbounded shape counts as 1: it fits or not)."""
    limit = geometry.cores // profile.cores if profile.cores else 1
    return np.minimum(counts, max(limit, 1))


def loss(geometry: Geometry, profile: Profile, cores: IntArray, memory: IntArray, aicpu: IntArray,
         count: IntArray, slices: IntArray, capacity: IntArray) -> tuple[FloatArray, IntArray]:
    """Fragmentation cost of carving ``profile`` on each chip, and the slice mask it would take there.

    The cost is the compute (in the geometry's units) of the templates that fit before and no longer fit
    after, summed over the geometry's shapes (``Geometry.shapes``): the carving that keeps the most future
    templates possible costs least. Chips where the profile does not fit cost ``inf`` (slice mask 0).
    For profiles with a placement rule every placement is tried and the cheapest kept."""
    shapes = geometry.shapes()
    before = np.zeros(cores.shape, dtype=np.float64)
    for shape in shapes:
        before += _capped(fits(geometry, shape, cores, memory, aicpu, count, slices, capacity), shape,
                          geometry) * max(shape.cores, 1)
    need = memory_needed(profile, capacity)
    after_cores, after_memory = cores + profile.cores, memory + need
    after_aicpu, after_count = aicpu + profile.aicpu, count + 1
    best = np.full(cores.shape, np.inf)
    chosen = np.zeros(cores.shape, dtype=np.int64)
    ok = fits(geometry, profile, cores, memory, aicpu, count, slices, capacity) > 0
    for placement in profile.placements or (0,):
        free_here = ok & ((slices & placement) == 0)
        if not free_here.any():
            continue
        after_slices = slices | placement
        after = np.zeros(cores.shape, dtype=np.float64)
        for shape in shapes:
            after += _capped(fits(geometry, shape, after_cores, after_memory, after_aicpu, after_count, after_slices,
                                  capacity), shape, geometry) * max(shape.cores, 1)
        cost = np.where(free_here, before - after, np.inf)
        better = cost < best
        best = np.where(better, cost, best)
        chosen = np.where(better, placement, chosen)
    if geometry.slotted:  # the lowest free instance slot (``instances`` keeps one free while the chip fits)
        chosen = np.where(np.isfinite(best), ~slices & (slices + 1), 0)
    return best, chosen


def legal_placement(geometry: Geometry, profile: Profile, placement: int) -> bool:
    """May a partition of ``profile`` sit at ``placement`` (a hand-off's slice mask)? One of the profile's
    placements; one instance slot of a slotted geometry (or none: written before slots existed); else none."""
    if profile.placements:
        return placement in profile.placements
    if geometry.slotted:
        slot = slot_of(placement)
        return placement == 0 or (slot is not None and slot < MAX_SLOTS)
    return placement == 0


def most_partitions(geometry: Geometry) -> int:
    """The most partitions of one named template an empty chip of a fixed-memory geometry holds: how many
    slots a device plugin counts the chip as (HAMi's per-chip vNPU count)."""
    zero = np.zeros(1, dtype=np.int64)
    capacity = np.full(1, geometry.memory, dtype=np.int64)
    return max((int(fits(geometry, p, zero, zero, zero, zero, zero, capacity)[0]) for p in geometry.profiles),
               default=0)


def slot_of(placement: int) -> int | None:
    """The instance slot a slotted partition's mask names (None for no slot)."""
    return placement.bit_length() - 1 if placement > 0 and placement & (placement - 1) == 0 else None


def chip_memory(geometry: Geometry, stated: IntArray) -> IntArray:
    """MiB per chip: the geometry's, else what the inventory states for each chip."""
    if geometry.memory:
        return np.full_like(stated, geometry.memory)
    return stated

