"""NUMA fit of a task group on the session's nodes: shared by the ``numaaware`` and ``devicetopology``
plugins, so the NUMA node the chips are taken from and the one the CPUs are pinned to come from one rule.

Who calls it: those two plugins (scheduler plugins may not import each other; both import this). The rule
itself — CPU and legal chip sets per NUMA node, binpack among NUMA nodes — is ``hetsched.devices.numa``.
"""

from __future__ import annotations

import numpy as np

from hetsched.devices import numa
from hetsched.devices.cambricon import MODES as MLU_LINK_MODES
from hetsched.devices.catalog import PolicySettings, policy_for
from hetsched.scheduler.contract.arrays import IntArray
from hetsched.scheduler.contract.snapshot import Snapshot, TaskGroup

NUMA_POLICIES = ("best-effort", "restricted", "single-numa-node")
"""Volcano's task ``topologyPolicy`` values that ask for alignment (``none`` does not)."""


def exclusive_cpu(snapshot: Snapshot, group: TaskGroup) -> int:
    """Exclusive CPUs of one pod in milli: an integer CPU request (what the CPU manager pins), else 0."""
    cpu = int(group.request[snapshot.resources.columns["cpu"]])
    return cpu if cpu % 1000 == 0 else 0


def aligned(snapshot: Snapshot, group: TaskGroup) -> bool:
    """Does the group ask for NUMA alignment and does the snapshot know the NUMA layout?"""
    return group.numa_policy in NUMA_POLICIES and snapshot.numa is not None


def per_numa(snapshot: Snapshot, group: TaskGroup, rows: IntArray) -> IntArray:
    """rows × NUMA nodes: how many pods of ``group`` each NUMA node of each row can still hold whole (its
    exclusive CPUs and a legal set of every whole-chip resource it asks, inside that NUMA node)."""
    assert snapshot.numa is not None
    cpu_free = snapshot.numa.free(rows)
    width = cpu_free.shape[1]
    names = snapshot.resources.names
    multi_pod = group.job.total_pods > 1
    settings = PolicySettings(mlulink=group.mlu_link if group.mlu_link in MLU_LINK_MODES else "best-effort")
    device_capacity = []
    for column in group.columns.tolist():
        devices = snapshot.devices.get(names[column])
        if devices is None or devices.numa is None:
            continue
        chips = int(group.request[column]) // 1000
        free = devices.free(exclude_network=multi_pod, rows=rows)
        by_numa = numa.masks(devices.numa[rows], devices.chips[rows], width)
        per = np.zeros((len(rows), width), dtype=np.int64)
        shapes: dict[tuple[str, int], list[int]] = {}
        for i, row in enumerate(rows.tolist()):
            if devices.topology[row]:
                shapes.setdefault((devices.topology[row], int(devices.chips[row]).bit_length()), []).append(i)
        for (topology, slots), positions in shapes.items():
            policy = policy_for(topology, slots, settings)
            if chips < 1 or not policy.legal(chips, multi_pod):
                continue
            tables = policy.tables(chips)
            at = np.asarray(positions, dtype=np.int64)
            for n in range(width):
                per[at, n] = tables.capacity(free[at] & by_numa[at, n])
        device_capacity.append(per)
    return numa.capacity(cpu_free, exclusive_cpu(snapshot, group), device_capacity)


def choose(snapshot: Snapshot, group: TaskGroup, row: int) -> int:
    """The NUMA node one more pod of ``group`` goes to on node ``row`` (-1: none holds it whole)."""
    assert snapshot.numa is not None
    here = np.array([row])
    return int(numa.pick(per_numa(snapshot, group, here), snapshot.numa.free(here))[0])
