"""The HyperNode tree the cache keeps, as arrays over node rows for the snapshot.

Who calls it: the cache's event routing (``cache.routing``) on HyperNode events and for every snapshot.
The tree is built with ``api.hypernodes.build`` — the same checks ``hetsched validate`` runs — and rebuilt
only when a HyperNode or a node changed (node labels decide ``labelMatch`` members). Parts of a tree with
problems are kept as far as they are consistent (a node in two HyperNodes of one tier stays in the first,
a member that does not exist is left out); the problems of the last build are in
:attr:`NetworkState.problems`. The arrays are never changed once built: snapshots share them.
"""

from __future__ import annotations

import numpy as np

from hetsched.api import hypernodes
from hetsched.api.objects import HyperNode
from hetsched.scheduler.cache.nodes import NodeTable
from hetsched.scheduler.contract.snapshot import NetworkArrays


class NetworkState:
    def __init__(self) -> None:
        self.objects: dict[str, HyperNode] = {}
        self.version = 0
        self.problems: list[str] = []
        self._built: tuple[tuple[int, int], NetworkArrays | None] | None = None

    def on_hypernode(self, type_: str, hypernode: HyperNode) -> None:
        self.version += 1
        if type_ == "DELETED":
            self.objects.pop(hypernode.metadata.name, None)
        else:
            self.objects[hypernode.metadata.name] = hypernode

    def arrays(self, nodes: NodeTable) -> NetworkArrays | None:
        """The tree over ``nodes``' rows (None without HyperNodes); cached until a HyperNode or a node changes."""
        key = (self.version, nodes.version)
        if self._built is not None and self._built[0] == key:
            return self._built[1]
        built: NetworkArrays | None = None
        if self.objects:
            topology, problems = hypernodes.build(self.objects.values(), nodes.objects.values())
            self.problems = [str(p) for p in problems]
            names: dict[int, list[str]] = {}
            domain: dict[int, np.ndarray] = {}
            for tier in topology.tiers:
                members = sorted(h for h, t in topology.tier.items() if t == tier)
                names[tier] = members
                ids = {name: i for i, name in enumerate(members)}
                rows = np.full(nodes.rows, -1, dtype=np.int64)
                for server, hypernode in topology.domain.get(tier, {}).items():
                    row = nodes.index.get(server)
                    if row is not None:
                        rows[row] = ids[hypernode]
                domain[tier] = rows
            tier_names = {name: topology.tier[h] for h, name in topology.tier_name.items() if name}
            built = NetworkArrays(names=names, domain=domain, tier_names=tier_names)
        else:
            self.problems = []
        self._built = (key, built)
        return built
