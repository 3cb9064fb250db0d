"""Node rows: allocatable, usage and the static facts of every node the cache has seen.

Who calls it: the cache's event routing (``cache.routing``) on Node events and on every pod accounted on
a node; the snapshot builder reads it through :meth:`NodeTable.arrays`.

A node keeps its row for the cache's lifetime (a deleted node's row stays, marked not existing), so rows
index every per-node array of a snapshot. Usage lives in resource × node int64 matrices (milli-units; one
contiguous row per resource: the hot loops read a few resources of many nodes).

Invariants: ``used[:, n]`` is the sum of requests of unfinished pods bound to node ``n``, terminating ones
included; ``releasing[:, n]`` is the part of it held by terminating pods (free once they are gone:
Volcano's FutureIdle = idle + releasing).
"""

from __future__ import annotations

import numpy as np

from hetsched.api.objects import Node, Taint
from hetsched.scheduler.contract.arrays import IntArray
from hetsched.scheduler.contract.snapshot import NodeArrays, ResourceIndex


class NodeTable:
    def __init__(self, resources: ResourceIndex) -> None:
        self.resources = resources
        self.rows = 0
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.alloc = np.zeros((len(resources), 0), dtype=np.int64)
        self.used = np.zeros((len(resources), 0), dtype=np.int64)
        self.releasing = np.zeros((len(resources), 0), dtype=np.int64)
        self.labels: list[dict[str, str]] = []
        self.taints: list[tuple[Taint, ...]] = []
        self.cordoned: list[bool] = []
        self.ready: list[bool] = []
        self.exists: list[bool] = []
        self.objects: dict[str, Node] = {}
        self.version = 0
        """Changes whenever any node changes."""
        self._static: NodeArrays | None = None

    @property
    def capacity(self) -> int:
        """Rows the matrices have room for (they grow by doubling)."""
        return int(self.alloc.shape[1])

    def pad(self, extra: int) -> None:
        """New resources were registered: add ``extra`` zero rows to the matrices."""
        self._static = None
        self.alloc = np.pad(self.alloc, ((0, extra), (0, 0)))
        self.used = np.pad(self.used, ((0, extra), (0, 0)))
        self.releasing = np.pad(self.releasing, ((0, extra), (0, 0)))

    def upsert(self, node: Node) -> tuple[int, bool]:
        """Record an added or changed node (its resources already registered); its row, and whether the
        matrices grew to hold it."""
        name = node.metadata.name
        self.version += 1
        self._static = None
        row = self.index.get(name)
        grew = False
        if row is None:
            row = self.rows
            self.rows += 1
            if row >= self.capacity:
                grow = np.zeros((len(self.resources), max(16, self.capacity)), dtype=np.int64)
                self.alloc = np.hstack([self.alloc, grow])
                self.used = np.hstack([self.used, grow])
                self.releasing = np.hstack([self.releasing, grow])
                grew = True
            self.index[name] = row
            self.names.append(name)
            self.labels.append({})
            self.taints.append(())
            self.cordoned.append(False)
            self.ready.append(True)
            self.exists.append(True)
        self.objects[name] = node
        self.alloc[:, row] = self.resources.vector(node.status.allocatable)
        self.labels[row] = dict(node.metadata.labels)
        self.taints[row] = tuple(node.spec.taints)
        self.cordoned[row] = node.spec.unschedulable
        self.ready[row] = node.status.ready
        self.exists[row] = True
        return row, grew

    def delete(self, name: str) -> None:
        self.version += 1
        self._static = None
        row = self.index.get(name)
        if row is not None:
            self.exists[row] = False
            self.alloc[:, row] = 0
            self.objects.pop(name, None)

    def charge(self, row: int, request: IntArray, sign: int, releasing: bool) -> None:
        """Add (``sign`` 1) or remove (-1) a placed pod's request on node ``row``."""
        self.used[:, row] += sign * request
        if releasing:
            self.releasing[:, row] += sign * request

    def rooms(self) -> IntArray:
        """Resource × node: each node's room now, a terminating pod's share counted as free (the bound on
        parked gangs, ``cache.parked``)."""
        rows = self.rows
        return self.alloc[:, :rows] - self.used[:, :rows] + self.releasing[:, :rows]

    def room_on(self, row: int) -> IntArray:
        """Node ``row``'s column of :meth:`rooms` (a vector of its own)."""
        return self.alloc[:, row] - self.used[:, row] + self.releasing[:, row]

    def used_by_node(self) -> dict[str, dict[str, float]]:
        return {self.names[r]: self.resources.as_dict(self.used[:, r]) for r in range(self.rows) if self.exists[r]}

    def arrays(self) -> NodeArrays:
        """The snapshot's node arrays: usage copied every call; the static facts (names, labels, taints,
        flags, allocatable — read-only) built once per node version, from copies of the table's — a node
        event afterwards replaces the table's entries, never the snapshot's. Every change to ``alloc``
        (``upsert``, ``delete``, ``pad``) drops the static facts."""
        rows = self.rows
        if self._static is None or len(self._static.names) != rows:
            cordoned = np.array(self.cordoned, dtype=bool)
            ready = np.array(self.ready, dtype=bool)
            exists = np.array(self.exists, dtype=bool)
            alloc = self.alloc[:, :rows].copy()
            alloc.flags.writeable = False
            self._static = NodeArrays(
                names=list(self.names), alloc=alloc, used=self.used[:, :rows],
                releasing=self.releasing[:, :rows], schedulable=exists & ready & ~cordoned,
                labels=list(self.labels), taints=list(self.taints), cordoned=cordoned, ready=ready, exists=exists,
                version=self.version, index=dict(self.index),
            )
        static = self._static
        return NodeArrays(
            names=static.names, alloc=static.alloc, used=self.used[:, :rows].copy(),
            releasing=self.releasing[:, :rows].copy(), schedulable=static.schedulable, labels=static.labels,
            taints=static.taints, cordoned=static.cordoned, ready=static.ready, exists=static.exists,
            version=static.version, index=static.index, _label_codes=static._label_codes,
            _taint_masks=static._taint_masks, _totals=static._totals,
        )
