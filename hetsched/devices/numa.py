"""NUMA alignment of chips and exclusive CPUs: which NUMA node of each server can hold a pod whole.

Who calls it: the ``numaaware`` scheduler plugin (filter, capacity, score, CPU pinning) and the
``devicetopology`` plugin (it takes the chips of a NUMA-aligned pod inside the NUMA node chosen here), so
both decide from the same rule on the same session state. Pure NumPy over node rows.

Rule: a pod fits NUMA node n of a server when n's free CPU covers the pod's exclusive CPUs and, for every
chip resource the pod asks, the free chips on n alone hold a legal set. Among fitting NUMA nodes the one
with the least free CPU wins (binpack, so whole NUMA nodes stay free for large pods); ties go to the lower
id. Invariant: :func:`pick` returns -1 exactly where :func:`capacity` is 0 for every NUMA node.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hetsched.devices.policy import bit_weights

IntArray = npt.NDArray[np.int64]
UNLIMITED = np.iinfo(np.int64).max


def masks(chip_numa: IntArray, chips: IntArray, nodes: int) -> IntArray:
    """rows × ``nodes``: bitmask of the chips (present in ``chips``) that sit on each NUMA node."""
    slots = chip_numa.shape[1]
    bits = bit_weights(slots)
    present = (chips[:, None] & bits[None, :]) != 0
    result = np.zeros((len(chips), nodes), dtype=bits.dtype)
    for numa in range(nodes):
        result[:, numa] = ((chip_numa == numa) & present).astype(bits.dtype) @ bits
    return result


def capacity(cpu_free: IntArray, cpu: int, device_capacity: list[IntArray]) -> IntArray:
    """rows × NUMA nodes: how many pods each NUMA node can hold whole — by its free CPU (``cpu`` milli
    exclusive CPUs per pod, 0 = none) and by each ``device_capacity`` (rows × NUMA nodes, legal chip sets
    left inside that NUMA node for one chip resource)."""
    result = np.full(cpu_free.shape, UNLIMITED, dtype=np.int64)
    if cpu > 0:
        result = np.maximum(cpu_free, 0) // cpu
    for per_numa in device_capacity:
        result = np.minimum(result, per_numa)
    return result


def pick(per_numa: IntArray, cpu_free: IntArray) -> IntArray:
    """Per row, the NUMA node a pod goes to: among those with ``per_numa`` capacity ≥ 1 the one with the
    least free CPU (lowest id on ties); -1 where none can hold it."""
    candidates = np.where(per_numa >= 1, cpu_free, UNLIMITED)
    chosen = np.argmin(candidates, axis=1)
    ok = candidates[np.arange(len(candidates)), chosen] < UNLIMITED
    return np.where(ok, chosen, -1).astype(np.int64)
