"""Pod affinity, pod anti-affinity and topology spread constraints — kube-scheduler's InterPodAffinity and
PodTopologySpread, which Volcano runs inside its ``predicates`` and ``nodeorder`` plugins — vectorised
over nodes.

Who calls it: the ``predicates`` plugin (required terms and ``DoNotSchedule`` spread, as a node capacity
with the reasons ``explain`` prints) and ``nodeorder`` (preferred terms and ``ScheduleAnyway`` spread, as
scores), through the session's one :class:`PodTopology`. It is built on first use from the snapshot's
placed pods (any scheduler's) and follows the session's own placements and their undoing
(``on_allocate``/``on_deallocate``), so the pods of one gang count against each other: replicas with
anti-affinity to themselves land on different servers. Pods of a group with such constraints are placed
one at a time (``placement.place_job``); each choice is still one vectorised pass over the nodes.

Domains: the values of a ``topologyKey`` over the nodes (``NodeArrays.label_codes``); a node without
that label is in no domain. A term counts the placed pods its ``labelSelector`` matches (none when it
has no selector) in its ``namespaces`` (default: the pod's own; ``namespaceSelector: {}``: every
namespace), per domain, with ``np.bincount``. ``matchLabelKeys``/``mismatchLabelKeys`` add the pod's own
values of those labels to the selector (In / NotIn).

Rules (kube-scheduler's):
- required affinity: the node's domain holds a matching pod — or no pod matches anywhere and the pod
  matches its own term (the first pod of a group may go anywhere);
- required anti-affinity: the node's domain holds no matching pod; and, symmetrically, no placed pod
  whose own required anti-affinity matches this pod is in the node's domain (under that term's key);
- spread, ``DoNotSchedule``: matching pods of the pod's namespace in the node's domain, + 1 when the pod
  matches the selector itself, − the fewest in any eligible domain ≤ ``maxSkew``. Eligible: domains of
  nodes that pass the pod's nodeSelector and required node affinity (``nodeAffinityPolicy: Honor``, the
  default) and, with ``nodeTaintsPolicy: Honor``, tolerate their NoSchedule taints; with fewer eligible
  domains than ``minDomains`` the fewest is 0. A node without the key fails;
- host ports (``hostPort``, or ``containerPort`` with ``hostNetwork``): a node where a placed pod takes
  the same (protocol, port) fails, as kube-scheduler's NodePorts;
- preferred terms: Σ weight × matching pods in the node's domain (anti-affinity subtracts), and spread
  ``ScheduleAnyway``: fewer matching pods in the domain is better; both scaled to 0–100 over the
  candidate nodes, as kube-scheduler normalises them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from hetsched.api.objects import LabelSelector, LabelSelectorRequirement, PodAffinityTerm, TopologySpreadConstraint
from hetsched.api.queue_access import NAME_LABEL
from hetsched.scheduler.contract.arrays import BoolArray, FloatArray, IntArray
from hetsched.scheduler.contract.nodematch import required_affinity_matches, selector_matches, untolerated
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.snapshot import NodeArrays, PlacedPod, Snapshot, TaskGroup

AFFINITY_REASON = Reason.of(ReasonCode.POD_AFFINITY)
ANTI_AFFINITY_REASON = Reason.of(ReasonCode.POD_ANTI_AFFINITY)
EXISTING_ANTI_REASON = Reason.of(ReasonCode.EXISTING_ANTI_AFFINITY)
SPREAD_REASON = Reason.of(ReasonCode.TOPOLOGY_SPREAD)
PORTS_REASON = Reason.of(ReasonCode.HOST_PORTS)
MAX_SCORE = 100.0


@dataclass
class _Added:
    """Pods of one group the session placed (not committed yet, or committed this cycle)."""

    namespace: str
    labels: dict[str, str]
    anti: tuple[PodAffinityTerm, ...]
    ports: frozenset[tuple[str, int]]
    rows: list[int] = field(default_factory=list)


def _selector(selector: LabelSelector | None, group: TaskGroup, match: list[str],
              mismatch: list[str]) -> LabelSelector | None:
    if selector is None:
        return None
    extra = [LabelSelectorRequirement(key=k, operator="In", values=[group.labels[k]]) for k in match
             if k in group.labels]
    extra += [LabelSelectorRequirement(key=k, operator="NotIn", values=[group.labels[k]]) for k in mismatch
              if k in group.labels]
    if not extra:
        return selector
    return selector.model_copy(update={"matchExpressions": [*selector.matchExpressions, *extra]})


def _namespaces(term: PodAffinityTerm, own: str, known: Mapping[str, dict[str, str]]) -> frozenset[str] | None:
    """The namespaces a term looks in; None = every namespace. A ``namespaceSelector`` with labels selects
    among the Namespaces the cluster has (``known``: name → labels; a namespace's name is its
    ``kubernetes.io/metadata.name`` label), united with ``namespaces`` as kube-scheduler does."""
    selector = term.namespaceSelector
    if selector is None:
        return frozenset(term.namespaces) if term.namespaces else frozenset({own})
    if not selector.matchLabels and not selector.matchExpressions:
        return None
    return frozenset({name for name, labels in known.items() if selector.matches({**labels, NAME_LABEL: name})}
                     | set(term.namespaces))


class PodTopology:
    """The pods on nodes, per domain, for one session (see the module docstring)."""

    def __init__(self, snapshot: Snapshot, nodes: NodeArrays) -> None:
        self.snapshot = snapshot
        self.nodes = nodes
        self._added: dict[int, _Added] = {}
        """id(group) → its placements in this session."""
        self._anti: list[PlacedPod] | None = None
        self._repelling = 0
        """Pods placed this session that carry required anti-affinity."""
        self._base: dict[tuple[str, frozenset[str] | None], list[tuple[str, int]]] = {}
        """(selector, namespaces) → (key, row) of the snapshot's placed pods it matches (they do not change in
        a session; the session's own placements are added on top, its released victims left out)."""
        self._gone: set[str] = set()
        """Keys of placed pods released in the session (eviction victims, while an eviction plan is tried
        or once chosen): they count for no rule."""

    def repels(self) -> bool:
        """Does any placed pod (or one placed this session) keep matching pods out of its domain?"""
        if self._anti is None:
            self._anti = self.snapshot.placed_anti
        return bool(self._anti) or self._repelling > 0

    # ----------------------------------------------------------------------------------- session

    def on_allocate(self, group: TaskGroup, nodes: IntArray) -> None:
        if not (group.spec.pod_topology or group.labels):
            return  # nothing can match it, and it constrains nothing
        added = self._added.get(id(group))
        if added is None:
            affinity = group.spec.affinity
            anti = affinity.podAntiAffinity if affinity is not None else None
            added = self._added[id(group)] = _Added(
                group.namespace, group.labels, tuple(anti.requiredDuringSchedulingIgnoredDuringExecution) if anti
                else (), group.spec.host_ports)
        added.rows += nodes.tolist()
        if added.anti:
            self._repelling += len(nodes)

    def on_deallocate(self, group: TaskGroup, nodes: IntArray) -> None:
        added = self._added.get(id(group))
        if added is None:
            return
        for row in nodes.tolist():
            added.rows.remove(row)
        if added.anti:
            self._repelling -= len(nodes)

    def release(self, keys: list[str], sign: int) -> None:
        """Placed pods leave the session (sign 1: eviction victims) or come back (−1): a victim's labels stop
        attracting or repelling, its anti-affinity and host ports stop holding others out."""
        if sign > 0:
            self._gone.update(keys)
        else:
            self._gone.difference_update(keys)

    # ----------------------------------------------------------------------------------- counting

    def _rows(self, selector: LabelSelector | None, namespaces: frozenset[str] | None) -> IntArray:
        """Node rows of the placed pods (placed before the session, and by it) the selector matches."""
        if selector is None:
            return np.zeros(0, dtype=np.int64)
        key = (selector.model_dump_json(), namespaces)
        base = self._base.get(key)
        if base is None:
            base = self._base[key] = [(pod.key, pod.node) for pod in self.snapshot.placed if (
                namespaces is None or pod.namespace in namespaces) and selector.matches(pod.labels)]
        gone = self._gone
        rows = [row for pod, row in base if pod not in gone] if gone else [row for _, row in base]
        for added in self._added.values():
            if added.rows and (namespaces is None or added.namespace in namespaces) and selector.matches(added.labels):
                rows += added.rows
        return np.asarray(rows, dtype=np.int64)

    def _counts(self, key: str, rows: IntArray) -> tuple[IntArray, IntArray]:
        """Per node its domain code (-1: none), and per domain the matching pods."""
        codes, vocab = self.nodes.label_codes(key)
        domains = codes[rows] if rows.size else rows
        counts = np.bincount(domains[domains >= 0], minlength=len(vocab)) if len(vocab) else np.zeros(0, np.int64)
        return codes, counts.astype(np.int64)

    def _in_domain(self, key: str, rows: IntArray) -> BoolArray:
        """Nodes whose ``key`` domain holds any of ``rows``."""
        codes, counts = self._counts(key, rows)
        return (codes >= 0) & (counts[np.maximum(codes, 0)] > 0) if counts.size else np.zeros(len(codes), bool)

    # ----------------------------------------------------------------------------------- filter

    def failures(self, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        """(reason, failing-nodes mask) for every rule the group's pods must meet now."""
        result: list[tuple[Reason, BoolArray]] = []
        spec = group.spec
        affinity = spec.affinity
        if affinity is not None and affinity.podAffinity is not None:
            failing = np.zeros(len(self.nodes), dtype=bool)
            for term in affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution:
                selector = _selector(term.labelSelector, group, term.matchLabelKeys, term.mismatchLabelKeys)
                namespaces = self._looks_in(term, group.namespace)
                rows = self._rows(selector, namespaces)
                if rows.size == 0 and selector is not None and selector.matches(group.labels) and (
                        namespaces is None or group.namespace in namespaces):
                    continue  # the first pod of its kind: anywhere
                failing |= ~self._in_domain(term.topologyKey, rows)
            result.append((AFFINITY_REASON, failing))
        if affinity is not None and affinity.podAntiAffinity is not None:
            failing = np.zeros(len(self.nodes), dtype=bool)
            for term in affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution:
                selector = _selector(term.labelSelector, group, term.matchLabelKeys, term.mismatchLabelKeys)
                rows = self._rows(selector, self._looks_in(term, group.namespace))
                failing |= self._in_domain(term.topologyKey, rows)
            result.append((ANTI_AFFINITY_REASON, failing))
        if self.repels():
            result.append((EXISTING_ANTI_REASON, self._existing_anti(group)))
        if spec.host_ports:
            result.append((PORTS_REASON, self._ports_taken(spec.host_ports)))
        spread = [c for c in spec.topologySpreadConstraints if c.whenUnsatisfiable == "DoNotSchedule"]
        if spread:
            failing = np.zeros(len(self.nodes), dtype=bool)
            for constraint in spread:
                failing |= self._skewed(group, constraint)
            result.append((SPREAD_REASON, failing))
        return result

    def _looks_in(self, term: PodAffinityTerm, namespace: str) -> frozenset[str] | None:
        """The namespaces a term of a pod in ``namespace`` looks in (None: every one)."""
        return _namespaces(term, namespace, self.snapshot.namespace_labels)

    def _ports_taken(self, wanted: frozenset[tuple[str, int]]) -> BoolArray:
        """Nodes where a placed pod (or one placed this session) already takes one of ``wanted``."""
        taken = np.zeros(len(self.nodes), dtype=bool)
        rows = [pod.node for pod in self.snapshot.placed if pod.ports & wanted and pod.key not in self._gone]
        rows += [row for added in self._added.values() if added.ports & wanted for row in added.rows]
        taken[np.asarray(rows, dtype=np.int64)] = True
        return taken

    def _existing_anti(self, group: TaskGroup) -> BoolArray:
        """Nodes in the domain of a placed pod whose required anti-affinity matches this group's pods."""
        holders = [(pod.namespace, pod.anti, [pod.node]) for pod in self._anti or [] if pod.key not in self._gone]
        holders += [(a.namespace, a.anti, a.rows) for a in self._added.values() if a.anti and a.rows]
        failing = np.zeros(len(self.nodes), dtype=bool)
        for namespace, terms, rows in holders:
            for term in terms:
                namespaces = self._looks_in(term, namespace)
                if term.labelSelector is None or not term.labelSelector.matches(group.labels) or (
                        namespaces is not None and group.namespace not in namespaces):
                    continue
                failing |= self._in_domain(term.topologyKey, np.asarray(rows, dtype=np.int64))
        return failing

    def _eligible(self, group: TaskGroup, constraint: TopologySpreadConstraint) -> BoolArray:
        nodes = self.nodes
        eligible: BoolArray = nodes.exists.copy()
        if constraint.nodeAffinityPolicy != "Ignore":
            eligible &= selector_matches(nodes, group.spec.nodeSelector)
            matched = required_affinity_matches(nodes, group.spec)
            if matched is not None:
                eligible &= matched
        if constraint.nodeTaintsPolicy == "Honor":
            for mask in untolerated(nodes, group.spec.tolerations, ("NoSchedule", "NoExecute")).values():
                eligible &= ~mask
        return eligible

    def _spread_counts(self, group: TaskGroup, constraint: TopologySpreadConstraint) -> tuple[IntArray, IntArray,
                                                                                               BoolArray]:
        selector = _selector(constraint.labelSelector, group, constraint.matchLabelKeys, [])
        codes, counts = self._counts(constraint.topologyKey, self._rows(selector, frozenset({group.namespace})))
        domains = np.zeros(counts.size, dtype=bool)
        eligible = self._eligible(group, constraint) & (codes >= 0)
        domains[codes[eligible]] = True
        return codes, counts, domains

    def _skewed(self, group: TaskGroup, constraint: TopologySpreadConstraint) -> BoolArray:
        codes, counts, domains = self._spread_counts(group, constraint)
        if not domains.any():
            return np.ones(len(codes), dtype=bool)
        fewest = int(counts[domains].min())
        if constraint.minDomains is not None and int(domains.sum()) < constraint.minDomains:
            fewest = 0
        selector = _selector(constraint.labelSelector, group, constraint.matchLabelKeys, [])
        itself = int(selector is not None and selector.matches(group.labels))  # kube-scheduler's selfMatchNum
        mine = np.where(codes >= 0, counts[np.maximum(codes, 0)], 0)
        return (codes < 0) | (mine + itself - fewest > constraint.maxSkew)

    # ----------------------------------------------------------------------------------- scores

    def scores(self, group: TaskGroup, nodes: IntArray, affinity_weight: float = 1.0,
               spread_weight: float = 1.0) -> FloatArray:
        """Preferred affinity/anti-affinity and ScheduleAnyway spread for ``nodes``, each 0–100 times its
        weight."""
        total = np.zeros(len(nodes), dtype=np.float64)
        affinity = group.spec.affinity
        raw = np.zeros(len(nodes), dtype=np.float64)
        weighted = False
        for terms, sign in ((affinity.podAffinity if affinity else None, 1.0),
                            (affinity.podAntiAffinity if affinity else None, -1.0)):
            for weighted_term in terms.preferredDuringSchedulingIgnoredDuringExecution if terms else []:
                term = weighted_term.podAffinityTerm
                selector = _selector(term.labelSelector, group, term.matchLabelKeys, term.mismatchLabelKeys)
                rows = self._rows(selector, self._looks_in(term, group.namespace))
                codes, counts = self._counts(term.topologyKey, rows)
                mine = np.where(codes >= 0, counts[np.maximum(codes, 0)] if counts.size else 0, 0)[nodes]
                raw += sign * weighted_term.weight * mine
                weighted = True
        if weighted:
            total += affinity_weight * _normalised(raw)
        anyway = [c for c in group.spec.topologySpreadConstraints if c.whenUnsatisfiable == "ScheduleAnyway"]
        if anyway:
            crowd = np.zeros(len(nodes), dtype=np.float64)
            for constraint in anyway:
                codes, counts, _ = self._spread_counts(group, constraint)
                crowd += np.where(codes >= 0, counts[np.maximum(codes, 0)] if counts.size else 0, 0)[nodes]
            total += spread_weight * _normalised(-crowd)
        return total


def _normalised(raw: FloatArray) -> FloatArray:
    """Scale to 0–100 over the candidates (all equal: 0), higher raw is better."""
    if raw.size == 0:
        return raw
    low, high = float(raw.min()), float(raw.max())
    if high == low:
        return np.zeros(raw.size, dtype=np.float64)
    return (raw - low) / (high - low) * MAX_SCORE
