"""Vectorised label, affinity and taint matching over all nodes of a snapshot.

Who calls it: the ``predicates`` plugin (required terms, NoSchedule taints) and the ``nodeorder`` plugin
(preferred terms, PreferNoSchedule taints). Uses ``NodeArrays.label_codes`` so each comparison is an
integer array operation, not a loop over nodes.
"""

from __future__ import annotations

import numpy as np

from hetsched.api.objects import NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration
from hetsched.scheduler.contract.arrays import BoolArray, FloatArray
from hetsched.scheduler.contract.snapshot import NodeArrays

MAX_SCORE = 100.0


def requirement_matches(nodes: NodeArrays, requirement: NodeSelectorRequirement) -> BoolArray:
    """Nodes whose labels satisfy one ``matchExpressions`` entry (``labels.Selector`` semantics)."""
    codes, vocab = nodes.label_codes(requirement.key)
    present = codes >= 0
    operator = requirement.operator
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return ~present
    if operator in ("In", "NotIn"):
        wanted = [vocab[v] for v in requirement.values if v in vocab]
        inside = np.isin(codes, wanted) if wanted else np.zeros(len(codes), dtype=bool)
        return inside if operator == "In" else ~inside
    bound = int(requirement.values[0])
    by_code = {code: int(v) for v, code in vocab.items() if v.lstrip("-").isdigit()}
    satisfied = [c for c, v in by_code.items() if (v > bound if operator == "Gt" else v < bound)]
    return np.isin(codes, satisfied) if satisfied else np.zeros(len(codes), dtype=bool)


def term_matches(nodes: NodeArrays, term: NodeSelectorTerm) -> BoolArray:
    """All requirements of one term (an empty term matches nothing, as in Kubernetes)."""
    if not term.matchExpressions and not term.matchFields:
        return np.zeros(len(nodes), dtype=bool)
    ok = np.ones(len(nodes), dtype=bool)
    for requirement in term.matchExpressions:
        ok &= requirement_matches(nodes, requirement)
    for field in term.matchFields:
        if field.key == "metadata.name":
            inside = np.isin(np.array(nodes.names, dtype=object), field.values)
            ok &= inside if field.operator == "In" else ~inside
        else:
            ok &= False
    return ok


def required_affinity_matches(nodes: NodeArrays, spec: PodSpec) -> BoolArray | None:
    """Nodes that meet the pod's required node affinity (any of its terms); None when it has none."""
    affinity = spec.affinity.nodeAffinity if spec.affinity else None
    required = affinity.requiredDuringSchedulingIgnoredDuringExecution if affinity else None
    if required is None:
        return None
    matched = np.zeros(len(nodes), dtype=bool)
    for term in required.nodeSelectorTerms:
        matched |= term_matches(nodes, term)
    return matched


def selector_matches(nodes: NodeArrays, selector: dict[str, str]) -> BoolArray:
    ok = np.ones(len(nodes), dtype=bool)
    for key, value in selector.items():
        codes, vocab = nodes.label_codes(key)
        ok &= codes == vocab.get(value, -2)
    return ok


def taint_text(taint: Taint) -> str:
    return f"{{{taint.key}: {taint.value}}}" if taint.value else f"{{{taint.key}}}"


def untolerated(nodes: NodeArrays, tolerations: list[Toleration], effects: tuple[str, ...]) -> dict[Taint, BoolArray]:
    """For every distinct taint with one of ``effects`` that no toleration covers: the nodes carrying it
    (read-only: the masks are the snapshot's, shared by every group)."""
    return {taint: mask for taint, mask in nodes.taint_masks().items()
            if taint.effect in effects and not any(t.tolerates(taint) for t in tolerations)}


def preferred_affinity_scores(nodes: NodeArrays, spec: PodSpec) -> FloatArray:
    """kube-scheduler's NodeAffinity score: sum of matching preferred-term weights, normalised to 0–100."""
    affinity = spec.affinity.nodeAffinity if spec.affinity else None
    terms = affinity.preferredDuringSchedulingIgnoredDuringExecution if affinity else []
    total = np.zeros(len(nodes), dtype=np.float64)
    for term in terms:
        total += term.weight * term_matches(nodes, term.preference)
    peak = total.max(initial=0.0)
    return total * (MAX_SCORE / peak) if peak > 0 else total


def prefer_no_schedule_scores(nodes: NodeArrays, spec: PodSpec) -> FloatArray:
    """kube-scheduler's TaintToleration score: fewer intolerable PreferNoSchedule taints is better."""
    counts = np.zeros(len(nodes), dtype=np.float64)
    for mask in untolerated(nodes, spec.tolerations, ("PreferNoSchedule",)).values():
        counts += mask
    peak = counts.max(initial=0.0)
    return (1.0 - counts / peak) * MAX_SCORE if peak > 0 else np.full(len(nodes), MAX_SCORE)
