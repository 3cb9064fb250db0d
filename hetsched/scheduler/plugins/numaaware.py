"""``numaaware``: pods with exclusive CPUs and chips go to a NUMA node that holds both.

Who calls it: the session — ``node_capacity`` (strict policies: how many pods each node can hold
NUMA-aligned), ``node_score`` (every policy: aligned nodes first) and ``on_allocate`` (pin the pod to its
NUMA node). Enable it by adding ``- name: numaaware`` to a tier. Either order with ``devicetopology`` works:
whichever allocates first decides the NUMA node by ``hetsched.scheduler.contract.numa_fit`` and the other follows
(numaaware reads the chips devicetopology took; devicetopology reads numaaware's pin).

Which pods: those whose task sets Volcano's ``topologyPolicy`` (the job controller writes it on the pod as
``volcano.sh/numa-topology-policy``), with the kubelet Topology Manager's meaning:

- ``best-effort``: prefer a node where one NUMA node holds the pod's exclusive CPUs and all its chips;
- ``restricted`` and ``single-numa-node``: only such nodes (a pod that fits no single NUMA node anywhere
  stays pending with the reason);
- ``none`` or absent: the plugin does nothing.

Exclusive CPUs are an integer CPU request (the CPU manager's static policy pins those); a fractional CPU
request only aligns the chips. Chips: whole-chip asks of resources with an inventory; a NUMA node holds
them when its free chips alone hold a legal set under the family policy (``hetsched.devices.numa``; with
the policies' default settings and the pod's own MLU-Link policy). Fractional chip shares are not aligned.

NUMA layout: each chip's ``numa`` from the node inventory; the node's CPU split evenly over the NUMA nodes
the inventory names. At bind the pod gets ``hetsched.io/numa-node: "<n>"``, and its CPU is charged to that
NUMA node from then on (the cache reads the annotation).

Arguments::

    - name: numaaware
      arguments:
        weight: 1     # multiplies the 0/100 alignment score
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.devices.inventory import pod_allocation
from hetsched.scheduler.contract import numa_fit
from hetsched.scheduler.contract.arrays import BoolArray, FloatArray, IntArray
from hetsched.scheduler.contract.framework import Arguments, NodeCapacity, NodeScore, Plugin
from hetsched.scheduler.contract.reasons import Reason
from hetsched.scheduler.contract.snapshot import NUMA_ANNOTATION, TaskGroup

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "numaaware"
STRICT = ("restricted", "single-numa-node")


class NumaAware(Plugin, NodeCapacity, NodeScore):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({"weight"})
        self.weight = arguments.number("weight", 1)
        self.session: SessionView | None = None
        self.pinned: dict[str, tuple[int, int, int]] = {}
        """Pod → (node row, NUMA node, CPU milli) pinned in this session."""

    def on_session_open(self, session: SessionView) -> None:
        self.session = session

    def on_session_close(self, session: SessionView) -> None:
        self.session = None  # kept only while the session is open (framework.Plugin)

    def _applies(self, group: TaskGroup) -> bool:
        return self.session is not None and numa_fit.aligned(self.session.snapshot, group)

    # ------------------------------------------------------------------------------ extension points

    def node_capacity(self, session: SessionView, group: TaskGroup) -> IntArray:
        size = len(session.nodes)
        if not self._applies(group) or group.numa_policy not in STRICT:
            return np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
        total: IntArray = numa_fit.per_numa(session.snapshot, group, np.arange(size)).sum(axis=1)
        return total

    def node_capacity_reasons(self, session: SessionView, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        return []  # nodes without a legal chip set are explained chip by chip (``scheduler.engine.why``)

    def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        if not self._applies(group) or not self.weight:
            return np.zeros(len(nodes), dtype=np.float64)
        aligned = numa_fit.per_numa(session.snapshot, group, nodes).sum(axis=1) > placed
        score: FloatArray = np.where(aligned, 100.0 * self.weight, 0.0)
        return score

    def on_allocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        if not self._applies(group):
            return
        session = self.session
        assert session is not None and session.snapshot.numa is not None
        numa_cpu = session.snapshot.numa
        cpu = numa_fit.exclusive_cpu(session.snapshot, group)
        for pod, row in zip(pods, nodes.tolist(), strict=True):
            cpu_free = numa_cpu.free(np.array([row]))[0]
            chosen = -1
            for resource, ids in pod_allocation(session.bind_annotations.get(pod, {})).items():
                devices = session.snapshot.devices.get(resource)
                if ids and devices is not None and devices.numa is not None:  # where devicetopology put the chips
                    places = devices.numa[row, ids].tolist()
                    chosen = max(set(places), key=places.count)
                    break
            else:
                chosen = numa_fit.choose(session.snapshot, group, row)
            if chosen < 0 or cpu_free[chosen] < cpu:
                fitting = np.flatnonzero(cpu_free >= max(cpu, 1))
                if not len(fitting):
                    continue  # best-effort and no NUMA node has the CPUs: not pinned
                chosen = int(fitting[np.argmin(cpu_free[fitting])])
            numa_cpu.used[row, chosen] += cpu
            self.pinned[pod] = (row, chosen, cpu)
            session.bind_annotations.setdefault(pod, {})[NUMA_ANNOTATION] = str(chosen)

    def on_deallocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        session = self.session
        for pod in pods:
            entry = self.pinned.pop(pod, None)
            if entry is None or session is None or session.snapshot.numa is None:
                continue
            row, chosen, cpu = entry
            session.snapshot.numa.used[row, chosen] -= cpu
            annotations = session.bind_annotations.get(pod)
            if annotations is not None:
                annotations.pop(NUMA_ANNOTATION, None)
