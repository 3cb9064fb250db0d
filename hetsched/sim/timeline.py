"""Chip occupancy over simulated time, per node and per accelerator kind, for the simulation report.

Who calls it: the simulator's :class:`~hetsched.sim.results.Recorder` after every scheduling cycle; the
report (``sim.report``) draws allocation curves and per-pool heatmaps from it.

With a HyperNode tree it also keeps, per sample, the occupancy of each tier-1 HyperNode and how many
HyperNodes of each tier are wholly free (the report's per-domain plot).

Recorded only when asked (``Simulation(timeline=True)``: ``--report``). A sample is taken at the first cycle
of each time bucket (chips held whole or shared, per node, from the
cycle's snapshot after its placements). Memory is bounded: past :data:`MAX_SAMPLES` samples, every other
one is dropped and the bucket doubles, so a week-long replay costs no more than a minute-long one.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hetsched.api.accelerators import accelerator_kind
from hetsched.devices.policy import popcounts
from hetsched.scheduler.contract import network_fragmentation
from hetsched.scheduler.contract.arrays import IntArray
from hetsched.scheduler.contract.snapshot import Snapshot

MAX_SAMPLES = 1000
POOL_LABEL = "hetsched.io/pool"


class Timeline:
    def __init__(self, bucket: float = 1.0) -> None:
        self.bucket = bucket
        self.times: list[float] = []
        self.held: list[npt.NDArray[np.int16]] = []
        """Per sample: chips held per node (all accelerator kinds together)."""
        self.kind_held: list[dict[str, int]] = []
        self.nodes: list[str] = []
        self.pools: list[str] = []
        self.physical: IntArray = np.zeros(0, dtype=np.int64)
        self.kind_physical: dict[str, int] = {}
        self.domains: list[str] = []
        """The tier-1 HyperNodes (when the cluster has a network tree)."""
        self.domain_share: list[npt.NDArray[np.float32]] = []
        """Per sample: chips held / chips per tier-1 HyperNode."""
        self.whole: list[dict[int, int]] = []
        """Per sample: HyperNodes of each tier all of whose servers are free."""
        self._next = 0.0

    def sample(self, snapshot: Snapshot, now: float) -> None:
        if now < self._next and self.times:
            return
        self._next = (np.floor(now / self.bucket) + 1) * self.bucket
        nodes = snapshot.nodes
        if len(nodes.names) != len(self.nodes):
            self.nodes = list(nodes.names)
            self.pools = [labels.get(POOL_LABEL, "") for labels in nodes.labels]
        held = np.zeros(len(self.nodes), dtype=np.int16)  # ≤ 16 chips per resource: small, even at 10k nodes
        physical = np.zeros(len(self.nodes), dtype=np.int64)
        kinds: dict[str, int] = {}
        kind_physical: dict[str, int] = {}
        for resource, devices in snapshot.devices.items():
            kind = accelerator_kind(resource) or resource
            chips = devices.chips
            taken = popcounts((devices.used | devices.sharing()) & chips)
            held[: len(taken)] += taken
            count = popcounts(chips)
            physical[: len(count)] += count
            kinds[kind] = kinds.get(kind, 0) + int(taken.sum())
            kind_physical[kind] = kind_physical.get(kind, 0) + int(count.sum())
        self.physical = physical
        self.kind_physical = kind_physical
        self.times.append(now)
        self.held.append(held)
        self.kind_held.append(kinds)
        network = snapshot.network
        if network is not None and network.tiers:
            lowest = network.tiers[0]
            self.domains = list(network.names[lowest])
            domain = network.domain[lowest][: len(held)]
            inside = domain >= 0
            width = len(self.domains)
            chips = np.bincount(domain[inside], weights=physical[: len(domain)][inside], minlength=width)
            taken = np.bincount(domain[inside], weights=held[: len(domain)][inside], minlength=width)
            with np.errstate(divide="ignore", invalid="ignore"):
                self.domain_share.append(np.where(chips > 0, taken / np.where(chips > 0, chips, 1), 0.0)
                                         .astype(np.float32))
            self.whole.append({t.tier: t.whole for t in network_fragmentation.by_tier(snapshot, needed=0)})
        if len(self.times) > MAX_SAMPLES:
            self.times, self.held, self.kind_held = self.times[::2], self.held[::2], self.kind_held[::2]
            self.domain_share, self.whole = self.domain_share[::2], self.whole[::2]
            self.bucket *= 2

    def matrix(self) -> IntArray:
        """samples × nodes of chips held (nodes that appeared later are 0 before they did)."""
        width = len(self.nodes)
        out = np.zeros((len(self.held), width), dtype=np.int64)
        for i, row in enumerate(self.held):
            out[i, : len(row)] = row
        return out
