"""What partitions hold of each chip (node row × chip slot) of one accelerator resource.

Who calls it: the scheduler cache keeps one :class:`Carving` per resource (``cache.devicestate``) and gives
each snapshot a read-only copy; ``devicetopology`` changes a session's copy as it places and removes
partitions (:meth:`Carving.add`), and reads it to find where a template fits
(``devices.partitions.fits``/``loss``); ``explain`` and the metrics read the per-chip holdings.

Invariant: the arrays are the sums over the partitions placed on each chip — compute units, MiB, AI CPUs,
partitions, and the union of their slice masks (placements never overlap, so add and remove are exact);
:attr:`Carving.holders` lists, per chip, the labels of each pod holding a partition there when the partition
was added with its owner (the cache, the sessions' placements and evictions always give it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from hetsched.devices.partitions import Geometry, Profile, geometry_for
from hetsched.devices.policy import bit_weights
from hetsched.scheduler.contract.arrays import IntArray

FIELDS = ("cores", "memory", "aicpu", "count", "slices")
Holding = tuple[str, int, Profile, int, int]
"""One partition a pod holds: (device resource, chip id, template, MiB taken, slice mask)."""
Labels = Mapping[str, str]


@dataclass
class Carving:
    cores: IntArray
    memory: IntArray
    aicpu: IntArray
    count: IntArray
    slices: IntArray
    modes: list[str]
    """Per node row, the partitioning mode its chips of this resource are in ("" = not partitioned)."""
    _mask: IntArray | None = None
    grouped: dict[str, list[tuple[Geometry, IntArray]]] = field(default_factory=dict)
    """Mode → its rows grouped by chip geometry (``partition_fit.geometry_rows``), once per snapshot: every
    plugin's every scoring round reads it, and a session changes holdings, never modes or models."""
    holders: dict[tuple[int, int], tuple[Labels, ...]] = field(default_factory=dict)
    """(node row, chip) → the labels of each pod holding a partition of it: what ``deviceshare``'s
    GPUExclusiveRules match (``contract.gpu_exclusive``). Shared with the snapshot it came from until
    :meth:`add` changes it (copy on write)."""
    _own_holders: bool = True
    version: int = 0
    """Counts :meth:`add` calls on this object (keys per-session caches of what it holds)."""

    @classmethod
    def empty(cls, rows: int, slots: int) -> Carving:
        def zeros() -> IntArray:
            return np.zeros((rows, slots), dtype=np.int64)
        return cls(zeros(), zeros(), zeros(), zeros(), zeros(), modes=[""] * rows)

    def grow(self, rows: int) -> None:
        extra = rows - len(self.modes)
        if extra > 0:
            slots = self.cores.shape[1]
            for name in FIELDS:
                setattr(self, name, np.vstack([getattr(self, name), np.zeros((extra, slots), dtype=np.int64)]))
            self.modes += [""] * extra
            self._mask = None

    def widen(self, slots: int) -> None:
        extra = slots - self.cores.shape[1]
        if extra > 0:
            rows = self.cores.shape[0]
            for name in FIELDS:
                setattr(self, name, np.hstack([getattr(self, name), np.zeros((rows, extra), dtype=np.int64)]))
            self._mask = None

    def frozen(self, rows: int) -> Carving:
        """A read-only copy of the first ``rows`` rows (a snapshot's)."""
        parts = []
        for name in FIELDS:
            array = getattr(self, name)[:rows].copy()
            array.flags.writeable = False
            parts.append(array)
        carving = Carving(parts[0], parts[1], parts[2], parts[3], parts[4], modes=list(self.modes[:rows]),
                          holders={key: owners for key, owners in self.holders.items() if key[0] < rows})
        mask = carving.mask()
        mask.flags.writeable = False
        return carving

    def view(self) -> Carving:
        """Another object over the same (read-only) arrays: a session writes through :meth:`add`, which copies
        an array before changing it, so snapshots sharing the arrays never see each other's changes."""
        return Carving(self.cores, self.memory, self.aicpu, self.count, self.slices, modes=self.modes,
                       _mask=self._mask, holders=self.holders, _own_holders=False)

    def add(self, row: int, chip: int, profile: Profile, memory: int, placement: int, sign: int = 1,
            owner: Labels | None = None) -> None:
        """Place (``sign`` 1) or remove (-1) one partition of ``profile`` taking ``memory`` MiB and slice
        mask ``placement`` on ``chip`` of node ``row`` (copies a read-only array before writing); ``owner``:
        the labels of the pod holding it (None: a trial placement undone at once)."""
        for name in FIELDS:
            if not getattr(self, name).flags.writeable:
                setattr(self, name, getattr(self, name).copy())
        if owner is not None:
            if not self._own_holders:
                self.holders, self._own_holders = dict(self.holders), True
            owners = self.holders.get((row, chip), ())
            if sign > 0:
                self.holders[(row, chip)] = (*owners, owner)
            else:
                at = next((i for i, o in enumerate(owners) if o is owner), None)
                if at is None:
                    at = next((i for i, o in enumerate(owners) if o == owner), None)
                if at is not None:
                    owners = owners[:at] + owners[at + 1:]
                    if owners:
                        self.holders[(row, chip)] = owners
                    else:
                        del self.holders[(row, chip)]
        self.version += 1
        self.cores[row, chip] += sign * profile.cores
        self.memory[row, chip] += sign * memory
        self.aicpu[row, chip] += sign * profile.aicpu
        self.count[row, chip] += sign
        if sign > 0:
            self.slices[row, chip] |= placement
        else:
            self.slices[row, chip] &= ~placement
        self._mask = None

    def mask(self) -> IntArray:
        """Per node row, the bitmask of chips holding at least one partition (cached)."""
        if self._mask is None:
            weights = bit_weights(self.count.shape[1])
            self._mask = ((self.count > 0) * weights).sum(axis=1).astype(weights.dtype)
        return self._mask

    def geometry(self, row: int, model: str) -> Geometry | None:
        mode = self.modes[row] if row < len(self.modes) else ""
        return geometry_for(mode, model) if mode else None

    def state(self, rows: IntArray) -> tuple[IntArray, IntArray, IntArray, IntArray, IntArray]:
        return self.cores[rows], self.memory[rows], self.aicpu[rows], self.count[rows], self.slices[rows]
