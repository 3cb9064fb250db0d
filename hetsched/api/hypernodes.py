"""The HyperNode tree: which servers share a network domain at each tier, checked as a whole.

Who calls it: manifest loading (``hetsched validate`` and ``simulate`` check the HyperNodes they are given,
and against the nodes when there are any) and cluster specs (``cluster.spec``: a pool's ``topology`` becomes
node labels, and HyperNodes are discovered from them with :func:`discover`).

Volcano's rules, made checks: a HyperNode's members are Nodes (by exact name, a regular expression over
names, or a label selector) or lower-tier HyperNodes (by exact name); a HyperNode has at most one parent;
a child's tier is below its parent's (so there are no cycles); a server is in at most one HyperNode of each
tier. Each problem names the HyperNode and the field, like every other validation error.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from hetsched.api.objects import HyperNode, Node
from hetsched.api.regex import compile_pattern


@dataclass(frozen=True)
class TopologyProblem:
    hypernode: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"HyperNode {self.hypernode}: {self.path}: {self.message}"


@dataclass
class Topology:
    """The checked tree. Tiers are Volcano's: 1 is the closest (a ToR, a supernode), higher tiers above."""

    tier: dict[str, int] = field(default_factory=dict)
    """HyperNode → its tier."""
    tier_name: dict[str, str] = field(default_factory=dict)
    parent: dict[str, str] = field(default_factory=dict)
    """HyperNode → the HyperNode it is a member of (absent for a root)."""
    children: dict[str, list[str]] = field(default_factory=dict)
    servers: dict[str, list[str]] = field(default_factory=dict)
    """HyperNode → every node under it (its own Node members and its children's), sorted."""
    domain: dict[int, dict[str, str]] = field(default_factory=dict)
    """Tier → node → the HyperNode of that tier it is in."""

    @property
    def tiers(self) -> list[int]:
        return sorted(set(self.tier.values()))

    def tier_named(self, name: str) -> int | None:
        """The tier whose HyperNodes carry ``tierName`` ``name`` (None: no such tier)."""
        tiers = {self.tier[h] for h, n in self.tier_name.items() if n == name}
        return min(tiers) if tiers else None


class _Nodes:
    """The known nodes, with an index per label key built on first use (10,000 nodes × hundreds of
    HyperNodes selecting by one label must not be a scan each)."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.by_name = {n.metadata.name: n for n in nodes}
        self._by_label: dict[str, dict[str, list[str]]] = {}

    def labelled(self, key: str, value: str) -> list[str]:
        index = self._by_label.get(key)
        if index is None:
            index = self._by_label[key] = {}
            for name, node in self.by_name.items():
                found = node.metadata.labels.get(key)
                if found is not None:
                    index.setdefault(found, []).append(name)
        return index.get(value, [])

    def selected(self, hypernode: HyperNode, member_index: int) -> list[str]:
        selector = hypernode.spec.members[member_index].selector
        if selector.exactMatch is not None:
            return [selector.exactMatch.name] if selector.exactMatch.name in self.by_name else []
        if selector.regexMatch is not None:
            pattern = compile_pattern(selector.regexMatch.pattern)
            return [name for name in self.by_name if pattern.fullmatch(name)]
        assert selector.labelMatch is not None
        label_match = selector.labelMatch
        candidates: Iterable[str] = self.by_name
        if label_match.matchLabels:
            key, value = next(iter(label_match.matchLabels.items()))
            candidates = self.labelled(key, value)
        return [name for name in candidates if label_match.matches(self.by_name[name].metadata.labels)]


def build(hypernodes: Iterable[HyperNode],
          nodes: Iterable[Node] | None = None) -> tuple[Topology, list[TopologyProblem]]:
    """The tree of ``hypernodes`` and every problem found. Without ``nodes``, only the HyperNodes are checked
    against each other (a file of HyperNodes alone); with them, Node members are resolved too and a Node
    member naming no node is a problem."""
    by_name = {h.metadata.name: h for h in hypernodes}
    known = _Nodes(nodes) if nodes is not None else None
    topology = Topology()
    problems: list[TopologyProblem] = []
    own: dict[str, list[str]] = {}
    for name, hypernode in sorted(by_name.items()):
        topology.tier[name] = hypernode.spec.tier
        topology.tier_name[name] = hypernode.spec.tierName
        topology.children.setdefault(name, [])
        own[name] = []
        for index, member in enumerate(hypernode.spec.members):
            where = f"spec.members[{index}]"
            if member.type == "HyperNode":
                assert member.selector.exactMatch is not None
                child = member.selector.exactMatch.name
                found = by_name.get(child)
                if found is None:
                    problems.append(TopologyProblem(name, f"{where}.selector.exactMatch.name",
                                                    f"no HyperNode named {child}"))
                elif found.spec.tier >= hypernode.spec.tier:
                    problems.append(TopologyProblem(name, where, f"HyperNode {child} is tier {found.spec.tier}: a "
                                                                 f"member must be of a lower tier than "
                                                                 f"{hypernode.spec.tier}"))
                elif child in topology.parent:
                    problems.append(TopologyProblem(name, where, f"HyperNode {child} is already a member of "
                                                                 f"{topology.parent[child]}"))
                else:
                    topology.parent[child] = name
                    topology.children[name].append(child)
            elif known is not None:
                chosen = known.selected(hypernode, index)
                if not chosen and member.selector.exactMatch is not None:
                    problems.append(TopologyProblem(name, f"{where}.selector.exactMatch.name",
                                                    f"no node named {member.selector.exactMatch.name}"))
                own[name].extend(chosen)
    if known is None:
        return topology, problems
    for name in sorted(by_name, key=lambda n: (topology.tier[n], n)):  # children (lower tiers) first
        servers = set(own[name])
        for child in topology.children[name]:
            servers.update(topology.servers.get(child, []))
        topology.servers[name] = sorted(servers)
        domain = topology.domain.setdefault(topology.tier[name], {})
        shared: dict[str, list[str]] = {}
        for server in topology.servers[name]:
            other = domain.get(server)
            if other is not None:
                shared.setdefault(other, []).append(server)
            else:
                domain[server] = name
        for other, servers_ in sorted(shared.items()):
            listed = ", ".join(servers_[:3]) + (f" … ({len(servers_)} in all)" if len(servers_) > 3 else "")
            problems.append(TopologyProblem(name, "spec.members", f"node(s) {listed} also in HyperNode {other}; a "
                                                                  f"node is in one HyperNode per tier (tier "
                                                                  f"{topology.tier[name]})"))
    return topology, problems


TIER_LABEL = "topology.hetsched.io/tier-{tier}"
"""Node label naming a node's HyperNode at one tier, as cluster specs write it (``topology:`` of a pool)."""


def _name(tier: int, value: str) -> str:
    """A HyperNode name for a label value: ``tier<N>-<value>``, made a DNS subdomain (lower case, other
    characters as ``-``; a changed value gets a short hash, so two values never share a name)."""
    clean = re.sub(r"[^a-z0-9.-]", "-", value.lower()).strip("-.")[:200] or "x"
    if clean != value:
        clean += "-" + hashlib.sha256(value.encode()).hexdigest()[:8]
    return f"tier{tier}-{clean}"


def discover(nodes: Iterable[Node], labels: dict[int, str]) -> list[HyperNode]:
    """HyperNodes from node labels, as Volcano's label discovery builds them: for each tier, one HyperNode per
    value of that tier's label; the lowest tier's members are the Nodes carrying the value (a label
    selector), a higher tier's are the lower-tier HyperNodes of its nodes (and, by name, any of its nodes
    without the lower tier's label)."""
    servers = list(nodes)
    made: list[HyperNode] = []
    tiers = sorted(labels)
    for position, tier in enumerate(tiers):
        key = labels[tier]
        lower = labels[tiers[position - 1]] if position else None
        by_value: dict[str, list[Node]] = {}
        for server in servers:
            value = server.metadata.labels.get(key)
            if value is not None:
                by_value.setdefault(value, []).append(server)
        for value, members in sorted(by_value.items()):
            if lower is None:
                selected: list[dict[str, object]] = [
                    {"type": "Node", "selector": {"labelMatch": {"matchLabels": {key: value}}}}]
            else:
                below = sorted({m.metadata.labels[lower] for m in members if lower in m.metadata.labels})
                selected = [{"type": "HyperNode", "selector": {"exactMatch": {"name": _name(tiers[position - 1], v)}}}
                            for v in below]
                selected += [{"type": "Node", "selector": {"exactMatch": {"name": m.metadata.name}}}
                             for m in members if lower not in m.metadata.labels]
            made.append(HyperNode.model_validate({"metadata": {"name": _name(tier, value)},
                                                  "spec": {"tier": tier, "members": selected}}))
    return made
