"""``fgd``: fragmentation gradient descent — put a pod where it fragments shared chips least.

Who calls it: the session's ``node_score``, vectorised over candidate nodes; enabled by adding
``- name: fgd`` to a tier (it is off in the default configuration, where device-level binpack rules).

Idea (Weng et al., ATC'23, "Beware of Fragmentation"): free capacity is only useful if the pods that will
come can use it. A node's *fragmentation* F is the free milli of its chips that a typical pod could not
use, averaged over the typical pods: for each typical shape k (milli per chip m_k, chips c_k, CPU cpu_k,
share p_k) the node's free chips count as usable only when at least c_k chips have m_k free and the node
has cpu_k CPU left; then ``F = Σ_k p_k × (free milli − usable milli for k)``. A pod is scored by how much
F grows when it lands: ``score = 100 × sigmoid(−ΔF / 1000) × fgd.weight`` (ΔF in milli of a chip, as
published). The default weight, 10, lets a fragmentation change of a quarter chip outweigh
``devicetopology``'s device-level binpack, whose scores for fractional pods span about 100 points.

Typical pods: the shapes waiting in this session — every pending pod of every job that asks for chips of
the same resource, by count — so capacity is kept usable for the work that is queued. By default every
queued shape counts at its frequency (the full distribution). ``fgd.common`` blends in the published cut
(the most frequent shapes covering 95 %, ``contract.typical``) while the queue would run out of chips
before CPU — ``fgd.common: 0.5`` is the openb replay's ``fgd-adaptive``, its best rule. It is not the
default because in the simulator (``hetsched bench fgd``, docs/replay.md) the blend of a queue's shapes did
better than the full distribution on one pod list and worse on two: a queue is a small sample of the
workload, and cutting it drops shapes that are really there. A CPU-only pod is
scored by the CPU it takes from nodes with free chips (it fragments them when GPU pods then lack CPU).

Chips: the plugin scores exactly the chips ``devicetopology`` will take (the tightest fitting chip for a
fractional pod, entirely free chips for a whole-chip pod); with ``placed`` pods of the group already put on
a node in this session, those are taken first.

Arguments::

    - name: fgd
      arguments:
        fgd.weight: 10
        fgd.common: 0     # the published cut's weight against the full distribution (1: published FGD)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hetsched.devices.inventory import SHARE_RESOURCES
from hetsched.scheduler.contract.arrays import FloatArray, IntArray
from hetsched.scheduler.contract.framework import Arguments, NodeScore, Plugin
from hetsched.scheduler.contract.snapshot import TaskGroup, tightest_chip
from hetsched.scheduler.contract.typical import typical_shares

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "fgd"
FULL = 1000


@dataclass(frozen=True)
class Shape:
    """What one pod asks of one device resource: ``chips`` chips with ``milli`` free each, and CPU."""

    resource: str
    milli: int
    chips: int
    cpu: int


def typical(counts: dict[Shape, int], common: float) -> dict[str, list[tuple[Shape, float]]]:
    """Per device resource, the queued shapes with their shares (``contract.typical``: the published cut at
    95 % blended with the full distribution), in a fixed order; ties in count ranked as the replay ranks them
    (CPU, milli, chips)."""
    result: dict[str, list[tuple[Shape, float]]] = {}
    for resource in sorted({shape.resource for shape in counts}):
        mine = {shape: n for shape, n in counts.items() if shape.resource == resource}
        shares = typical_shares(mine, common=common, rank=lambda shape: (shape.cpu, shape.milli, shape.chips))
        result[resource] = sorted(shares.items(), key=lambda kv: (kv[0].milli, kv[0].cpu, kv[0].chips))
    return result


def cpu_asked(session: SessionView, resource: str, counts: dict[Shape, int], cpu_only: int) -> float:
    """The CPU the queue asks for when its ``resource`` demand equals the nodes' chips of it, over those
    nodes' CPU (``replay.engine.cpu_asked`` for a session): above 1 it runs out of CPU first. The CPU-only
    pods queued count too: they take CPU on the same nodes."""
    milli = sum(n * shape.milli * shape.chips for shape, n in counts.items())
    cpu = cpu_only + sum(n * shape.cpu for shape, n in counts.items())
    chips = session.snapshot.devices[resource].chips
    rows = np.flatnonzero(chips > 0)
    capacity = int(np.unpackbits(chips[rows].astype(np.uint64).view(np.uint8)).sum()) * FULL
    node_cpu = int(session.nodes.alloc[session.snapshot.resources.columns["cpu"]][rows].sum())
    if not milli or not node_cpu:
        return 0.0
    return cpu * capacity / milli / node_cpu


class FGD(Plugin, NodeScore):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({"fgd.weight", "fgd.common"})
        self.weight = arguments.number("fgd.weight", 10)
        self.common = arguments.number("fgd.common", 0.0)
        """Weight of the published 95 % cut against the full distribution of the queued shapes (0–1): 0, every
        queued shape at its frequency, unless configured (see the module docstring)."""
        if self.common > 1:
            raise ValueError(f"plugin {NAME}: argument fgd.common must be between 0 and 1, got {self.common:g}")
        self.typical: dict[str, list[tuple[Shape, float]]] = {}
        """Device resource → typical shapes with their shares (summing to 1)."""

    def _shape(self, session: SessionView, group: TaskGroup) -> tuple[Shape | None, int]:
        """The group's device ask (None for a CPU-only pod) and its CPU in milli."""
        names = session.snapshot.resources.names
        cpu = int(group.request[session.snapshot.resources.columns["cpu"]])
        for column in group.columns.tolist():
            name = names[column]
            amount = int(group.request[column])
            if name in session.snapshot.devices:
                return Shape(name, FULL, amount // FULL, cpu), cpu
            device = SHARE_RESOURCES.get(name)
            if device is not None and device in session.snapshot.devices:
                return Shape(device, amount // FULL, 1, cpu), cpu
        return None, cpu

    def on_session_open(self, session: SessionView) -> None:
        counts: dict[Shape, int] = {}
        cpu_only = 0
        for job in session.snapshot.active.values():  # settled jobs have no pending pods
            for group in job.groups:
                shape, cpu = self._shape(session, group)
                pods = max(group.size, len(group.pending))
                if shape is None:
                    cpu_only += cpu * pods
                elif 1 <= shape.milli <= FULL and shape.chips >= 1:
                    counts[shape] = counts.get(shape, 0) + pods
        self.typical = {}
        for resource in sorted({shape.resource for shape in counts}):
            mine = {shape: n for shape, n in counts.items() if shape.resource == resource}
            # the blend while the queue would run out of chips first; the full distribution once it would run
            # out of CPU first (replay.engine.AdaptiveFGD: the CPU-heavy shapes the cut leaves out decide then)
            common = self.common if self.common and cpu_asked(session, resource, mine, cpu_only) < 1.0 else 0.0
            self.typical |= typical(mine, common)

    def _fragmentation(self, resource: str, free: IntArray, cpu: IntArray) -> FloatArray:
        """Per row of ``free`` (rows × chip slots, milli free per chip) with ``cpu`` milli CPU left: the
        expected milli that typical pods of ``resource`` could not use."""
        total = free.sum(axis=1).astype(np.float64)
        usable = np.zeros(len(free), dtype=np.float64)
        for shape, share in self.typical.get(resource, []):
            fits = free >= shape.milli
            ok = (fits.sum(axis=1) >= shape.chips) & (cpu >= shape.cpu)
            usable += share * np.where(ok, (free * fits).sum(axis=1), 0)
        result: FloatArray = total - usable
        return result

    @staticmethod
    def _take(free: IntArray, shape: Shape, rows: IntArray) -> None:
        """Take ``shape`` in place from ``free[rows]`` the way devicetopology does: the tightest fitting chip
        for a fractional pod, the first entirely free chips for a whole-chip pod. Rows where it does not fit
        are left as they are."""
        if not len(rows):
            return
        sub = free[rows]
        if shape.milli < FULL:
            chip = tightest_chip(sub, shape.milli)
            ok = chip >= 0
            sub[np.flatnonzero(ok), chip[ok]] -= shape.milli
        else:
            whole = sub == FULL
            order = np.cumsum(whole, axis=1)
            taking = whole & (order <= shape.chips) & (whole.sum(axis=1) >= shape.chips)[:, None]
            sub[taking] = 0
        free[rows] = sub

    def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        score = np.zeros(len(nodes), dtype=np.float64)
        if not self.weight or not self.typical:
            return score
        shape, cpu_ask = self._shape(session, group)
        column = session.snapshot.resources.columns["cpu"]
        cpu = (session.nodes.alloc[column][nodes] - session.nodes.used[column][nodes]
               - placed * cpu_ask).astype(np.int64)
        delta = np.zeros(len(nodes), dtype=np.float64)
        for resource in self.typical if shape is None else [shape.resource]:
            devices = session.snapshot.devices[resource]
            free = devices.free_milli(nodes, exclude_network=False).copy()
            if shape is not None:
                for step in range(int(placed.max(initial=0))):
                    self._take(free, shape, np.flatnonzero(placed > step))
            before = self._fragmentation(resource, free, cpu)
            if shape is not None:
                self._take(free, shape, np.arange(len(nodes)))
            delta += self._fragmentation(resource, free, cpu - cpu_ask) - before
        score = 100.0 / (1.0 + np.exp(np.clip(delta / 1000.0, -50.0, 50.0)))
        result: FloatArray = score * self.weight
        return result
