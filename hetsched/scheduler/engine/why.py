"""Why a job is pending: per-node reasons aggregated, the queue's state, and what would unblock it.

Who calls it: ``hetsched explain`` (and its kubectl plugin) and ``hetsched doctor``'s stuck-gang check. It
opens a read-only session on a snapshot — the same plugins and predicates as the scheduling cycle — and
never changes anything. Reasons are data (``scheduler.contract.reasons``): the hints below are chosen by reason
code, never by matching text.

Node reasons are counted like kube-scheduler's ``0/120 nodes are available`` message, one reason per node
(the first that rules it out, static predicates first, then resources, then device topology), and nodes
blocked by device topology are split further by how their free chips lie ("HCCS ring fragmentation, 2
free chip(s) split 1+1 across HCCS rings").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from hetsched.api.quantity import format_quantity
from hetsched.devices.catalog import PolicySettings
from hetsched.scheduler.contract.arrays import FloatArray
from hetsched.scheduler.contract.chips import ChipAccounts
from hetsched.scheduler.contract.framework import Arguments
from hetsched.scheduler.contract.network_fragmentation import TierFree, by_tier, servers_needed
from hetsched.scheduler.contract.reasons import Reason, ReasonCode, queue_state_reason, render, without_gang_prefix
from hetsched.scheduler.contract.snapshot import JobInfo, QueueInfo, Snapshot, TaskGroup
from hetsched.scheduler.engine.conf import SchedulerConf
from hetsched.scheduler.engine.placement import capacity, shortages, static_failures, tier_bound
from hetsched.scheduler.engine.session import PluginSessionError, Session
from hetsched.scheduler.plugins import devicetopology


@dataclass
class GroupExplanation:
    task: str
    pending: int
    request: dict[str, str]
    nodes: list[tuple[int, Reason]]
    """(node count, reason), most nodes first; ``ReasonCode.FITS`` counts nodes that can take a pod now
    (listed last)."""
    room: int = 0
    """How many of these pods the nodes could take now, in all."""


@dataclass
class Explanation:
    job: str
    phase: str
    queue: str
    min_member: int
    ready: int
    pending: int
    scheduler_says: list[str] = field(default_factory=list)
    """The PodGroup's Unschedulable condition (the last cycle's verdict), and what blocks it now, as text."""
    blockers: list[Reason] = field(default_factory=list)
    """What blocks the job now, job-wide: its queue's state, the admission gate, a gang short of pods, a
    queue at its limit."""
    groups: list[GroupExplanation] = field(default_factory=list)
    queue_status: dict[str, object] = field(default_factory=dict)
    unblock: list[str] = field(default_factory=list)
    """What would let the job run, derived from the reasons."""
    network: list[TierFree] = field(default_factory=list)
    """For a job with a ``networkTopology``: free servers at each tier it may span."""


def settings_of(conf: SchedulerConf) -> PolicySettings:
    """The device-topology settings the configuration gives the ``devicetopology`` plugin."""
    for tier in conf.tiers:
        for option in tier.plugins:
            if option.name == devicetopology.NAME:
                return devicetopology.policy_settings(Arguments(option.name, option.arguments))
    return PolicySettings()


_NOT_READY = Reason.of(ReasonCode.NODE_NOT_READY)
_CORDONED = Reason.of(ReasonCode.NODE_UNSCHEDULABLE)
_FITS = Reason.of(ReasonCode.FITS)


def _node_reasons(session: Session, group: TaskGroup, accounts: ChipAccounts) -> list[tuple[int, Reason]]:
    nodes = session.nodes
    counts: Counter[Reason]
    counts, remaining = static_failures(session, group)
    for reason, mask in ((_NOT_READY, ~nodes.ready), (_CORDONED, nodes.cordoned)):  # without ``predicates``
        hit = remaining & mask
        if hit.any():
            counts[reason] += int(hit.sum())
            remaining &= ~hit
    for reason, below in shortages(session, group):  # one reason per node: the first resource short
        short = remaining & below
        if short.any():
            counts[reason] += int(short.sum())
            remaining &= ~short
    limit = session.capacity_limit(group)
    if limit is not None:
        blocked = remaining & (limit <= 0)
        for reason, failing in session.capacity_reasons(group):  # pod affinity, anti-affinity, spread
            hit = blocked & failing
            if hit.any():
                counts[reason] += int(hit.sum())
                blocked &= ~failing
                remaining &= ~hit
        for row in np.flatnonzero(blocked).tolist():
            counts[_device_reason(session, group, row, accounts)] += 1
        remaining &= ~blocked
    if remaining.any():
        counts[_FITS] += int(remaining.sum())
    return sorted(((n, reason) for reason, n in counts.items()),
                  key=lambda item: (item[1] == _FITS, -item[0], render(item[1])))


def _device_reason(session: Session, group: TaskGroup, row: int, accounts: ChipAccounts) -> Reason:
    """Why a node with enough advertised chips has no legal set: unhealthy chips or topology fragmentation."""
    names = session.snapshot.resources.names
    for column in group.columns.tolist():
        devices = session.snapshot.devices.get(names[column])
        if devices is None:
            continue
        want = int(group.request[column]) // 1000
        mask = int(devices.chips[row])
        if not mask:
            continue
        policy = accounts.policy(devices.topology[row], mask.bit_length())
        unhealthy = int(devices.unhealthy[row])
        held = int(devices.used[row]) | int(devices.sharing()[row])
        free = mask & ~unhealthy & ~held
        if free.bit_count() < want:
            return Reason.of(ReasonCode.CHIPS_SHORT, resource=names[column], free=free.bit_count(), want=want,
                             unhealthy=(mask & unhealthy).bit_count())
        if policy.legal(want, group.job.total_pods > 1) and not policy.tables(want).choice[free]:
            return Reason.of(ReasonCode.LINK_FRAGMENTATION, link=policy.LINK_NAME, split=policy.split(free))
    return Reason.of(ReasonCode.DEVICE_TOPOLOGY)


def _quantities(snapshot: Snapshot, vector: FloatArray) -> dict[str, str]:
    names = snapshot.resources.names
    return {names[i]: format_quantity(int(v), names[i]) for i, v in enumerate(vector.tolist())
            if v and np.isfinite(v) and names[i] != "pods"}


def queue_status(snapshot: Snapshot, queue: QueueInfo, overused: bool) -> dict[str, object]:
    status: dict[str, object] = {"name": queue.name, "state": queue.state, "weight": queue.weight,
                                 "allocated": _quantities(snapshot, queue.allocated),
                                 "capability": _quantities(snapshot, queue.capability), "overused": overused}
    if queue.deserved is not None:
        status["deserved"] = _quantities(snapshot, queue.deserved)
    jobs = [j for j in snapshot.jobs.values() if j.queue == queue.name]
    status["pendingJobs"] = sum(1 for j in jobs if j.phase in ("Pending", "Inqueue") and j.ready < j.min_member)
    status["runningJobs"] = sum(1 for j in jobs if j.phase == "Running")
    return status


def explain_job(snapshot: Snapshot, conf: SchedulerConf, job_key: str, now: float = 0.0) -> Explanation:
    """Explain ``job_key`` (``namespace/podgroup``) against ``snapshot``; KeyError when the snapshot has no
    such PodGroup."""
    job = snapshot.jobs[job_key]
    accounts = ChipAccounts(settings_of(conf))
    explanation = Explanation(job=job_key, phase=job.phase, queue=job.queue, min_member=job.min_member,
                              ready=job.ready, pending=job.pending_count)
    without: set[str] = set()
    while True:  # a plugin that raises opening a session is left out, and said so (as the runner does)
        try:
            session = Session(snapshot, conf, now=now, without=without)
            break
        except PluginSessionError as exc:
            without.add(exc.plugin.NAME)
            explanation.scheduler_says.append(f"plugin {exc.plugin.NAME} raised an error opening the session "
                                              f"({type(exc.error).__name__}: {exc.error}); explained without it")
    for condition in job.podgroup.status.conditions:
        if condition.type == "Unschedulable" and condition.message:
            explanation.scheduler_says.append(condition.message)
    queue = snapshot.queues[job.queue]
    overused = bool(queue.allocated.any()) and session.overused(queue)  # an idle queue is not "over" anything
    explanation.queue_status = queue_status(snapshot, queue, overused)
    blockers = explanation.blockers
    if job.phase == "Pending":
        if queue.state != "Open":
            blockers.append(queue_state_reason(job.queue, queue.state))
        else:
            blockers.extend(session.job_enqueueable(job).reasons)
    elif queue.state == "NotFound":
        blockers.append(queue_state_reason(job.queue, queue.state))
    else:  # a Pending job has no pods yet by design: they come once it is Inqueue
        blockers.extend(session.job_valid(job).reasons)
        for group in job.groups:
            wanted = len(group.pending)
            if wanted and session.allocatable(queue, group, wanted) < wanted:
                blockers.append(Reason.of(ReasonCode.QUEUE_AT_LIMIT, queue=queue.name))
                break
        blockers.extend(_network_blockers(explanation, snapshot, job))
    explanation.scheduler_says.extend(render(reason) for reason in blockers)
    said = [without_gang_prefix(s) for s in explanation.scheduler_says]
    explanation.scheduler_says = [s for i, s in enumerate(explanation.scheduler_says) if said[i] not in said[:i]]
    for group in job.groups:
        names = snapshot.resources.names
        request = {names[c]: format_quantity(int(group.request[c]), names[c]) for c in group.columns.tolist()
                   if names[c] != "pods"}
        room = int(capacity(session, group).sum())
        explanation.groups.append(GroupExplanation(group.task, len(group.pending), request,
                                                   _node_reasons(session, group, accounts), room))
    explanation.unblock = _unblock(explanation, job, overused)
    return explanation


def _network_blockers(explanation: Explanation, snapshot: Snapshot, job: JobInfo) -> list[Reason]:
    """For a bounded job still short of its gang: free servers at each tier it may span, and, when no
    HyperNode of its highest tier has enough of them, how they are split."""
    bound = job.podgroup.spec.networkTopology
    if bound is None or snapshot.network is None or job.ready >= job.min_member:
        return []
    needed = servers_needed(snapshot, job)
    highest = tier_bound(snapshot.network, bound)
    explanation.network = [t for t in by_tier(snapshot, needed) if highest is None or t.tier <= highest]
    if not explanation.network:
        return []
    top = explanation.network[-1]
    if needed and int(top.per_domain.max(initial=0)) < needed:
        return [Reason.of(ReasonCode.HYPERNODE_SPLIT, free=top.free, split=top.split() or "0",
                          domains=top.domains_with_free, tier=top.tier, needed=needed)]
    return []


NODE_HINTS: dict[ReasonCode, str] = {
    ReasonCode.POD_AFFINITY: "have none of the pods the pod's required podAffinity wants in their topology domain: "
                             "start those first, or make the term preferred",
    ReasonCode.POD_ANTI_AFFINITY: "already hold (in their topology domain) pods its required podAntiAffinity "
                                  "avoids: add nodes or domains, lower the replicas, or make the term preferred",
    ReasonCode.EXISTING_ANTI_AFFINITY: "run pods whose own required podAntiAffinity keeps this pod out of their "
                                       "domain",
    ReasonCode.TOPOLOGY_SPREAD: "would break a DoNotSchedule topology spread constraint (maxSkew, or a node "
                                "without the topologyKey label): label the nodes, raise maxSkew, or use "
                                "ScheduleAnyway",
    ReasonCode.LINK_FRAGMENTATION: "have enough free chips but split across link domains: a smaller per-pod chip "
                                   "count, or jobs finishing on those nodes, would unblock it",
    ReasonCode.CHIPS_SHORT: "have unhealthy chips: repair them (see hetsched doctor)",
    ReasonCode.UNTOLERATED_TAINT: "are tainted: add a toleration, or clear the taint if it is stale",
    ReasonCode.NODE_SELECTOR: "do not match the pod's node selector/affinity: check the labels",
    ReasonCode.NODE_AFFINITY: "do not match the pod's node selector/affinity: check the labels",
}
"""Per-node reason code → what the operator can do about those nodes ("N node(s) …")."""

_QUEUE_LIMITS = frozenset({ReasonCode.QUEUE_AT_LIMIT, ReasonCode.LARGER_THAN_QUEUE,
                           ReasonCode.QUEUE_CAPABILITY_EXCEEDED, ReasonCode.QUEUE_REAL_CAPABILITY_EXCEEDED})


def _unblock(explanation: Explanation, job: JobInfo, overused: bool) -> list[str]:
    if job.phase not in ("Pending", "Inqueue") and not any(g.pending for g in explanation.groups):
        return []  # running with nothing left to place: nothing to unblock
    hints: list[str] = []
    codes = {reason.code for reason in explanation.blockers}
    if ReasonCode.QUEUE_MISSING in codes:
        hints.append(f"create queue {job.queue} or submit the job to an existing queue")
    if ReasonCode.QUEUE_NOT_OPEN in codes:
        hints.append(f"open queue {job.queue} (vcctl queue operate --action open --name {job.queue})")
    if codes & _QUEUE_LIMITS:
        hints.append(f"raise queue {job.queue}'s capability, or wait for its running jobs to finish")
    if ReasonCode.CLUSTER_HEADROOM in codes:
        hints.append("free or add the resources named above, or lower the job's minAvailable/minResources")
    if ReasonCode.HYPERNODE_SPLIT in codes:
        top = explanation.network[-1]
        hints.append(f"no tier-{top.tier} HyperNode has {top.needed} free servers: wait for work in the fullest ones "
                     "to finish, let preempt/reclaim free one HyperNode, or relax the job's networkTopology (mode: "
                     "soft, or a higher highestTierAllowed)")
    if ReasonCode.GANG_INCOMPLETE in codes:
        hints.append("the job has fewer pods than minAvailable: check the job controller and the pod template")
    if overused:
        hints.append(f"queue {job.queue} holds its whole capability: raise it, or wait for the queue's running "
                     "jobs to finish")
    for group in explanation.groups:
        fits = sum(n for n, reason in group.nodes if reason.code is ReasonCode.FITS)
        for n, reason in group.nodes:
            if reason.code is ReasonCode.INSUFFICIENT:
                hints.append(f"{reason['resource']}: free capacity on {n} node(s) is short; wait for running pods, "
                             "preempt lower-priority work, or add nodes")
            elif reason.code in NODE_HINTS:
                hints.append(f"{n} node(s) {NODE_HINTS[reason.code]}")
        if fits and group.room < group.pending:
            hints.append(f"only {group.room} of the {group.pending} pending {group.task} pod(s) fit now (on {fits} "
                         f"node(s)), and the gang needs minMember={job.min_member} placed at once: wait for running "
                         "pods, preempt lower-priority work, or add nodes")
    return list(dict.fromkeys(hints))

