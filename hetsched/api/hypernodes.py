"""The HyperNode tree: which servers share a network domain at each tier, checked as a whole.

Who calls it: manifest loading (``hetsched validate`` and ``simulate`` check the HyperNodes they are given,
and against the nodes when there are any) and the scheduler's cache (the tree it places gangs in).

Volcano's rules, made checks: a HyperNode's members are Nodes (by exact name, a regular expression over
names, or a label selector) or lower-tier HyperNodes (by exact name); a HyperNode has at most one parent;
a child's tier is below its parent's (so there are no cycles); a server is in at most one HyperNode of each
tier. Each problem names the HyperNode and the field, like every other validation error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from hetsched.api.objects import HyperNode, Node


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


def _selected(member_index: int, hypernode: HyperNode, nodes: dict[str, Node]) -> list[str]:
    selector = hypernode.spec.members[member_index].selector
    if selector.exactMatch is not None:
        return [selector.exactMatch.name] if selector.exactMatch.name in nodes else []
    if selector.regexMatch is not None:
        pattern = re.compile(selector.regexMatch.pattern)
        return [name for name in nodes if pattern.fullmatch(name)]
    assert selector.labelMatch is not None
    label_match = selector.labelMatch
    return [name for name, node in nodes.items() if label_match.matches(node.metadata.labels)]


def build(hypernodes: Iterable[HyperNode],
          nodes: Iterable[Node] | None = None) -> tuple[Topology, list[TopologyProblem]]:
    """The tree of ``hypernodes`` and every problem found. Without ``nodes``, only the HyperNodes are checked
    against each other (a file of HyperNodes alone); with them, Node members are resolved too and a Node
    member naming no node is a problem."""
    by_name = {h.metadata.name: h for h in hypernodes}
    known = {n.metadata.name: n for n in nodes} if nodes is not None else None
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
                chosen = _selected(index, hypernode, known)
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
