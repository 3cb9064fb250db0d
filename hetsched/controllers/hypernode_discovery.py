"""HyperNode discovery: keep the HyperNodes that node labels describe in step with the nodes (Volcano's
label-based network-topology discovery).

Who calls it: the ``hetsched controller`` process (``--discover-hypernodes``), via :meth:`process` after
watch events, and the tests. The node agent labels each Ascend A3 server with its supernode
(``topology.hetsched.io/tier-1``); operators or their provisioning label ToRs and spines the same way at
higher tiers. From those labels this controller makes one HyperNode per label value and tier
(``api.hypernodes.discover``: the lowest tier selects its nodes by label, each higher tier names the
lower-tier HyperNodes of its nodes), so the scheduler sees the tree without anyone writing HyperNodes.

Invariants: it writes only HyperNodes it owns (label ``hetsched.io/discovered-from: node-labels``) — a
hand-written HyperNode of the same name is left alone and reported; children are created before their
parents and parents deleted before their children, so no HyperNode ever names one that is missing; a
label value that is not a valid name is hashed into one (``api.hypernodes``), never dropped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from hetsched.api.hypernodes import TIER_LABEL, discover
from hetsched.api.objects import HyperNode, Node
from hetsched.ports import Conflict, Invalid, NotFound, ObjectStore, WatchEvent

log = logging.getLogger("hetsched.hypernode-discovery")
OWNER_LABEL = "hetsched.io/discovered-from"
OWNER_VALUE = "node-labels"
DEFAULT_LABELS = {tier: TIER_LABEL.format(tier=tier) for tier in (1, 2, 3)}
"""Tier → the node label that names a node's HyperNode at that tier (what cluster specs and the node agent
write)."""


@dataclass
class DiscoveryResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    """Discovered names held by a HyperNode someone else wrote (left alone)."""


def parse_labels(text: str) -> dict[int, str]:
    """``1=topology.hetsched.io/tier-1,2=example.com/spine`` → {tier: label}; ValueError naming the bad entry."""
    from hetsched.api.objects import label_key_ok

    labels: dict[int, str] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        tier, sep, label = entry.partition("=")
        if not sep or not tier.strip().isascii() or not tier.strip().isdigit() or not 1 <= int(tier) <= 16:
            raise ValueError(f"{entry[:80]!r}: expected TIER=LABEL with TIER 1–16")
        if not label_key_ok(label.strip()):
            raise ValueError(f"{entry[:80]!r}: {label.strip()[:80]!r} is not a label key")
        if int(tier) in labels:
            raise ValueError(f"tier {int(tier)} is given twice")
        labels[int(tier)] = label.strip()
    return labels


class HyperNodeDiscovery:
    def __init__(self, store: ObjectStore, labels: dict[int, str] | None = None) -> None:
        self.store = store
        self.labels = dict(DEFAULT_LABELS if labels is None else labels)
        self._keys = frozenset(self.labels.values())
        self.dirty = True
        self._unwatch = store.watch(("Node", "HyperNode"), self._on_event)

    def close(self) -> None:
        self._unwatch()

    def _on_event(self, event: WatchEvent) -> None:
        if isinstance(event.object, HyperNode):
            self.dirty = True  # ours changed or deleted by someone: put it back
            return
        old = event.old
        if event.type != "MODIFIED" or not isinstance(old, Node) or not isinstance(event.object, Node):
            self.dirty = True
            return
        before, after = old.metadata.labels, event.object.metadata.labels
        if any(before.get(key) != after.get(key) for key in self._keys):
            self.dirty = True  # only the topology labels matter: a heartbeat changes nothing here

    def process(self) -> int:
        """Reconcile once if anything relevant changed; returns 1 when it did."""
        if not self.dirty:
            return 0
        self.dirty = False
        self.sync()
        return 1

    def sync(self) -> DiscoveryResult:
        result = DiscoveryResult()
        nodes = [n for n in self.store.list("Node") if isinstance(n, Node)]
        wanted = {h.metadata.name: h for h in discover(nodes, self.labels)}
        existing = {h.metadata.name: h for h in self.store.list("HyperNode") if isinstance(h, HyperNode)}
        for name, made in sorted(wanted.items(), key=lambda item: (item[1].spec.tier, item[0])):
            found = existing.get(name)
            owned = made.model_copy(update={"metadata": made.metadata.model_copy(
                update={"labels": {OWNER_LABEL: OWNER_VALUE}})})
            if found is None:
                try:
                    self.store.create(owned)
                    result.created.append(name)
                except Conflict:
                    self.dirty = True  # made meanwhile: look again next round
                except Invalid as exc:  # the API server or the webhook refused it: say why, go on
                    log.warning("HyperNode discovery: %s refused: %s", name, exc)
            elif found.metadata.labels.get(OWNER_LABEL) != OWNER_VALUE:
                result.conflicts.append(name)
            elif found.spec != made.spec:
                try:
                    self.store.update(found.model_copy(update={"spec": made.spec}))
                    result.updated.append(name)
                except (Conflict, NotFound):
                    self.dirty = True
        stale = [h for name, h in existing.items()
                 if name not in wanted and h.metadata.labels.get(OWNER_LABEL) == OWNER_VALUE]
        for hypernode in sorted(stale, key=lambda h: (-h.spec.tier, h.metadata.name)):
            try:
                self.store.delete("HyperNode", hypernode.metadata.name)
                result.deleted.append(hypernode.metadata.name)
            except NotFound:
                pass
        if result.conflicts:
            log.warning("HyperNode discovery: %d discovered name(s) are taken by HyperNodes it does not own, left "
                        "alone: %s", len(result.conflicts), ", ".join(result.conflicts[:10]))
        return result
