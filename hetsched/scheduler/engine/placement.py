"""Placing groups of identical pods on nodes, vectorised over nodes, and explaining failures.

Who calls it: the allocate and backfill actions (:func:`place_job`), and the eviction actions' dry runs.

How a group of k identical pods is placed (:func:`place_group`), equivalent to placing them one by one,
each on the best-scoring feasible node (ties to the lowest node index), as a per-pod scheduler would:

1. feasibility for all nodes at once: static predicates (cached per placement key) and resource fit;
   per node, how many of these pods fit (``capacity``);
2. one vectorised score of every feasible node;
3. only the k best nodes can receive any of the k pods: a node outside the top k is never better than an
   untouched node inside it, because scores are node-local (see ``scheduler.contract.framework``);
4. for those k candidates, a table of the score each would have after 0, 1, … of these pods, computed in one
   vectorised call; then a heap merge picks the k placements.

Cost per group: O(nodes × requested resources) vector work plus O(k log k) Python work, instead of
O(k × nodes) Python work for the per-pod loop.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from hetsched.api.objects import NetworkTopology
from hetsched.scheduler.contract.arrays import BoolArray, FloatArray, IntArray
from hetsched.scheduler.contract.reasons import Reason, ReasonCode, nodes_unavailable
from hetsched.scheduler.contract.snapshot import JobInfo, NetworkArrays, QueueInfo, TaskGroup
from hetsched.scheduler.contract.status import Code, Status
from hetsched.scheduler.engine.attempt import Attempt, Outcome
from hetsched.scheduler.engine.session import Session
from hetsched.scheduler.engine.statement import Statement

_EMPTY = np.zeros(0, dtype=np.int64)
CAPACITY_REASON = Reason.of(ReasonCode.DEVICE_TOPOLOGY)
TOO_MANY_PODS = Reason.of(ReasonCode.TOO_MANY_PODS)


Domain = BoolArray | None
"""The nodes a placement may use: one HyperNode's, for a network-bounded gang or sub-group; None: every node.
Passed down explicitly (never kept on the session), so what a placement may use is in its signature."""


def capacity(session: Session, group: TaskGroup, *, future: bool = False, domain: Domain = None) -> IntArray:
    """How many more pods of ``group`` each node of ``domain`` can take now (0 where a static predicate fails,
    and outside the domain), or, with ``future``, once its terminating pods are gone (nodes with nothing
    terminating offer nothing more). Device rules (``node_capacity``) apply to the chips free now in both
    cases."""
    ok, _ = session.static_checks(group)
    nodes = session.nodes
    columns = group.columns
    fits: IntArray | None = None
    releasing = np.zeros(len(nodes), dtype=bool)
    for column in columns.tolist():
        idle = nodes.alloc[column] - nodes.used[column]
        if future:
            idle += nodes.releasing[column]
            releasing |= nodes.releasing[column] > 0
        room = idle // group.request[column]
        fits = room if fits is None else np.minimum(fits, room, out=fits)
    assert fits is not None, "every group requests a pod slot"
    if future:  # only what terminating pods will free counts as future room
        fits = np.where(releasing, fits, 0)
    limit = session.capacity_limit(group)
    if limit is not None:
        fits = np.minimum(fits, limit, out=fits)
    if domain is not None:
        ok = ok & domain
    return np.where(ok, np.maximum(fits, 0), 0)


def place_group(session: Session, group: TaskGroup, count: int, *, future: bool = False,
                domain: Domain = None) -> IntArray:
    """Node rows for up to ``count`` pods of ``group``, best first; fewer when capacity runs out.

    Does not change the session; the caller records the result in a statement.
    """
    if count <= 0:
        return _EMPTY
    cap = capacity(session, group, future=future, domain=domain)
    feasible = np.flatnonzero(cap)
    if feasible.size == 0:
        return _EMPTY
    if not session.scoring:
        # No score plugin: every node ties, so the per-pod loop fills the lowest-indexed nodes first.
        taken = np.minimum(cap[feasible], count)
        ends = np.cumsum(taken)
        keep = int(np.searchsorted(ends, count)) + 1
        return np.repeat(feasible[:keep], taken[:keep])[:count]
    scores = session.score(group, feasible, np.zeros(feasible.size, dtype=np.int64))
    if count == 1:
        return feasible[int(np.argmax(scores)):][:1]  # argmax is the first maximum: the lowest index on ties
    k = min(count, feasible.size)
    if feasible.size > k:
        threshold = np.partition(scores, feasible.size - k)[feasible.size - k]
        above = scores > threshold
        ties = np.flatnonzero(scores == threshold)[: k - int(above.sum())]
        chosen = np.sort(np.concatenate([np.flatnonzero(above), ties]))
        candidates = feasible[chosen]
    else:
        candidates = feasible
    depth = np.minimum(cap[candidates], count)
    starts = np.concatenate([[0], np.cumsum(depth)[:-1]])
    rows = np.repeat(candidates, depth)
    placed = np.arange(rows.size, dtype=np.int64) - np.repeat(starts, depth)
    table = session.score(group, rows, placed).tolist()
    start_list = starts.tolist()
    depth_list = depth.tolist()
    heap = [(-table[s], int(node), i) for i, (s, node) in enumerate(zip(start_list, candidates.tolist(), strict=True))]
    heapq.heapify(heap)
    used_depth = [0] * len(depth_list)
    result: list[int] = []
    while heap and len(result) < count:
        _, node, i = heapq.heappop(heap)
        result.append(node)
        used_depth[i] += 1
        if used_depth[i] < depth_list[i]:
            heapq.heappush(heap, (-table[start_list[i] + used_depth[i]], node, i))
    return np.asarray(result, dtype=np.int64)


def static_failures(session: Session, group: TaskGroup) -> tuple[Counter[Reason], BoolArray]:
    """Existing nodes counted by the first static predicate that rules each out, and the nodes left."""
    _, failures = session.static_checks(group)
    remaining: BoolArray = session.nodes.exists.copy()
    counts: Counter[Reason] = Counter()
    for reason, failing in failures:
        hit = remaining & failing
        if hit.any():
            counts[reason] += int(hit.sum())
            remaining &= ~failing
    return counts, remaining


def shortages(session: Session, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
    """Per requested resource, the nodes whose free amount is below one pod's request (``Too many pods``
    for the pod slot, ``Insufficient <resource>`` for the rest)."""
    nodes = session.nodes
    names = session.snapshot.resources.names
    return [(TOO_MANY_PODS if names[column] == "pods" else Reason.of(ReasonCode.INSUFFICIENT, resource=names[column]),
             nodes.alloc[column] - nodes.used[column] < group.request[column])
            for column in group.columns.tolist()]


def explain(session: Session, group: TaskGroup) -> Status:
    """Why pods of ``group`` do not fit: node counts per reason, like kube-scheduler's
    ``0/120 nodes are available: 100 Insufficient huawei.com/Ascend910, 20 node(s) didn't match …``.

    Unresolvable when every node fails a static predicate (more free resources would not help).
    """
    total = int(session.nodes.exists.sum())
    counts, remaining = static_failures(session, group)
    resolvable = int(remaining.sum())
    fits = remaining.copy()
    for reason, below in shortages(session, group):
        short = remaining & below
        if short.any():
            counts[reason] += int(short.sum())
            fits &= ~short
    limit = session.capacity_limit(group)
    if limit is not None:
        blocked = fits & (limit <= 0)
        for reason, failing in session.capacity_reasons(group):  # pod affinity, spread: named
            hit = blocked & failing
            if hit.any():
                counts[reason] += int(hit.sum())
                blocked &= ~failing
        if blocked.any():
            counts[CAPACITY_REASON] += int(blocked.sum())
    code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if resolvable == 0 else Code.UNSCHEDULABLE
    return Status(code, (nodes_unavailable(total, counts),), "allocate")


def _fail(attempt: Attempt, status: Status) -> None:
    if attempt.failure is None:
        attempt.failure = status.reasons[0]
        attempt.unresolvable = status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def place_job(session: Session, job: JobInfo, groups: list[TaskGroup], *, gang: bool = True,
              dry_run: bool = False, domain: Domain = None) -> bool:
    """Allocate ``job``'s pods from ``groups`` within ``domain`` (see :func:`_place`); a job with a
    ``networkTopology`` and no domain given is placed inside one HyperNode (:func:`_place_in_network`)."""
    bound = job.podgroup.spec.networkTopology
    if bound is None or domain is not None:
        return _place(session, job, groups, gang=gang, dry_run=dry_run, domain=domain)
    return _place_in_network(session, job, groups, bound, gang=gang, dry_run=dry_run)


MAX_DOMAIN_TRIES = 8
"""HyperNodes of one tier tried with a dry run per job and cycle, best first, among those whose free room
could take the gang (the rest are ruled out by one vectorised count)."""


def tier_bound(network: NetworkArrays | None, bound: NetworkTopology) -> int | None:
    """The highest tier the pods may span (None: the tier name is unknown, or no bound is given)."""
    if bound.highestTierAllowed is not None:
        return bound.highestTierAllowed
    if bound.highestTierName is not None and network is not None:
        return network.tier_names.get(bound.highestTierName)
    return None


def _unknown_tier(bound: NetworkTopology) -> Reason:
    what = (f"tier {bound.highestTierName!r}" if bound.highestTierAllowed is None else
            f"tier ≤ {bound.highestTierAllowed}")
    return Reason.of(ReasonCode.NO_HYPERNODE, bound=what)


def held_rows(session: Session, job: JobInfo) -> IntArray:
    """Node rows the job's pods already hold (bound in earlier cycles, or placed in this session)."""
    rows = [pod.node for pod in session.snapshot.running if pod.job == job.key] if job.ready else []
    attempt = session.attempts.get(job.key)
    placed = np.concatenate(attempt.placed) if attempt is not None and attempt.placed else np.zeros(0, dtype=np.int64)
    return np.unique(np.concatenate([np.asarray(rows, dtype=np.int64), placed]))


def _room(session: Session, groups: list[TaskGroup], ids: IntArray, count: int, domain: Domain) -> FloatArray:
    """Per HyperNode id (``ids``: each node row's HyperNode at one tier), how many of the groups' pending pods
    its nodes in ``domain`` could take now, each group counted up to its pending pods (an upper bound:
    placing one pod may take room another group counted)."""
    room = np.zeros(count, dtype=np.float64)
    inside = ids >= 0
    for group in groups:
        if not group.pending or group.best_effort:
            continue
        per_node = capacity(session, group, domain=domain)
        per_domain = np.bincount(ids[inside], weights=per_node[inside], minlength=count)
        room += np.minimum(per_domain, len(group.pending))
    return room


@dataclass
class _Search:
    """The most pods any HyperNode tried could take (for the reason when none could take enough)."""

    best: float = 0.0


def _hypernodes(session: Session, job: JobInfo, groups: list[TaskGroup], tiers: list[int], held: IntArray,
                needed: int, base: Domain, search: _Search) -> Iterator[BoolArray]:
    """The HyperNodes to try for ``needed`` pods of ``groups``, as node masks (within ``base``): tier by tier,
    lowest first; within a tier those whose free room could take them, in the ``HyperNodeOrder`` plugins'
    order, at most :data:`MAX_DOMAIN_TRIES`. Pods already ``held`` keep the search to the HyperNode holding
    them (a tier where they span several is skipped: a higher one must hold them)."""
    network = session.snapshot.network
    assert network is not None
    for tier in tiers:
        ids = network.domain[tier]
        count = len(network.names[tier])
        allowed = np.ones(count, dtype=bool)
        if held.size:
            holding = np.unique(ids[held])
            if holding.size != 1 or holding[0] < 0:
                continue
            allowed[:] = False
            allowed[holding[0]] = True
        room = _room(session, groups, ids, count, base)
        room[~allowed] = -1
        search.best = max(search.best, float(room.max(initial=0)))
        candidates = np.flatnonzero(room >= needed)
        order = np.argsort(-session.hypernode_scores(job, tier, candidates), kind="stable")
        for chosen in candidates[order][:MAX_DOMAIN_TRIES].tolist():
            inside = ids == chosen
            yield inside if base is None else base & inside


def _place_in_network(session: Session, job: JobInfo, groups: list[TaskGroup], bound: NetworkTopology, *,
                      gang: bool, dry_run: bool) -> bool:
    """Place the job inside one HyperNode of tier ≤ its bound: the lowest tier first, and within a tier the
    HyperNodes that can take the gang in the order the ``HyperNodeOrder`` plugins give
    (``network-topology-aware``: the fullest, so whole domains stay free for the next big job); with mode
    ``hard`` nowhere else (Unschedulable, with how close the best came), with ``soft`` anywhere if no
    HyperNode can. Pods already placed keep the job in the HyperNode that holds them."""
    network = session.snapshot.network
    highest = tier_bound(network, bound)
    soft = bound.mode == "soft"
    if network is None or (highest is None and not soft):
        if soft:
            return _place(session, job, groups, gang=gang, dry_run=dry_run)
        attempt = session.attempt(job)
        if attempt.failure is None and not dry_run:
            attempt.failure, attempt.unresolvable = _unknown_tier(bound), True
        return False
    tiers = [t for t in network.tiers if highest is None or t <= highest]
    held = held_rows(session, job)
    needed = max(job.min_member - session.occupied(job), 1) if gang else 1
    search = _Search()
    for inside in _hypernodes(session, job, groups, tiers, held, needed, None, search):
        if not gang or _place(session, job, groups, gang=gang, dry_run=True, domain=inside):
            if dry_run:
                return True
            placed = _place(session, job, groups, gang=gang, dry_run=False, domain=inside)
            if placed:
                session.attempt(job).failure = None
            return placed
    if soft and not held.size:
        return _place(session, job, groups, gang=gang, dry_run=dry_run)
    if not dry_run and gang:
        top = highest if highest is not None else max(network.tiers, default=1)
        attempt = session.attempt(job)
        attempt.failure = Reason.of(ReasonCode.NO_HYPERNODE_ROOM, tier=top, needed=needed, best=int(search.best))
        attempt.unresolvable = False
        attempt.short = needed
    return False


def _allocate(session: Session, job: JobInfo, statement: Statement, group: TaskGroup, wanted: int, *,
              future: bool = False, explain_failures: bool = True, domain: Domain = None) -> int:
    """Place up to ``wanted`` pods of ``group`` within ``domain`` into ``statement`` (as many as fit and the
    queue allows); with ``explain_failures``, a shortfall records why on the job. Returns how many were
    placed."""
    if wanted <= 0:
        return 0
    queue = session.snapshot.queues[job.queue]
    allowed = session.allocatable(queue, group, wanted)
    if group.spec.pod_topology:  # each pod counts for the next (affinity, spread): one at a time
        placed = 0
        for _ in range(min(wanted, allowed)):
            one = place_group(session, group, 1, future=future, domain=domain)
            if not len(one):
                break
            statement.allocate(group, one, pipelined=future)
            placed += 1
        if placed < wanted and not future and explain_failures:
            _fail(session.attempt(job), explain(session, group) if placed < allowed else Status(
                Code.UNSCHEDULABLE, (_queue_limit(session, queue, group),)))
        return placed
    # Placement is greedy: the first ``allowed`` placements are what placing ``wanted`` would give first. When
    # the queue allows fewer, only those are placed, and if the nodes took them all the queue is blamed —
    # nothing is placed (and undone) that the queue could not hold: ``allocate`` tries such a job again
    # when it lends, and the work is done once.
    nodes = place_group(session, group, min(wanted, allowed), future=future, domain=domain) if allowed else \
        np.zeros(0, dtype=np.int64)
    if allowed < wanted and len(nodes) == allowed and explain_failures:
        _fail(session.attempt(job), Status(Code.UNSCHEDULABLE, (_queue_limit(session, queue, group),)))
    statement.allocate(group, nodes, pipelined=future)
    if len(nodes) < wanted and not future and explain_failures:
        _fail(session.attempt(job), explain(session, group))  # after the placed ones: why the next pod does not fit
    return len(nodes)


def _queue_limit(session: Session, queue: QueueInfo, group: TaskGroup) -> Reason:
    """Why the queue took fewer pods than wanted: its used-up budget (placed only when lending), or its
    deserved share or capability. Either way ``allocate`` tries the job again when it lends."""
    idle = session.budget_idle(queue, group) if not session.lending else None
    return idle if idle is not None else Reason.of(ReasonCode.QUEUE_AT_LIMIT, queue=queue.name)


def _fill(session: Session, job: JobInfo, statement: Statement, groups: list[TaskGroup], *, gang: bool,
          domain: Domain) -> None:
    """Allocate ``groups`` (in task order) into ``statement``: with ``gang``, first each task's
    ``minTaskMember``, then up to the job's ``minMember``; without, every pending pod that fits."""
    if not gang:
        for group in groups:
            _allocate(session, job, statement, group, len(group.pending), domain=domain)
        return
    for group in groups:
        need = job.min_task_member.get(group.task, 0) - session.occupied_by_task(job, group.task)
        _allocate(session, job, statement, group, min(need, len(group.pending)), domain=domain)
    for group in groups:
        _allocate(session, job, statement, group, min(job.min_member - session.occupied(job), len(group.pending)),
                  domain=domain)


def _place(session: Session, job: JobInfo, groups: list[TaskGroup], *, gang: bool = True,
           dry_run: bool = False, domain: Domain = None) -> bool:
    """Allocate ``job``'s pods from ``groups`` within ``domain`` in one statement.

    With ``gang``: first each task's ``minTaskMember``, then up to ``minMember``; commit when the job is
    ready, keep (nominate) when pipelined, else discard. Without: place every pending pod that fits and
    commit (elastic pods of a job that is already ready). Returns True when something was committed.
    With ``dry_run`` (gang only): answer whether the gang would be ready now, and leave the session and the
    job exactly as they were (the eviction actions ask this while choosing victims).
    A job with network-bounded sub-groups is placed by :func:`_place_partitioned`.
    """
    if job.subgroups and any(g.subgroup for g in groups if g.pending):
        return _place_partitioned(session, job, groups, gang=gang, dry_run=dry_run, domain=domain)
    attempt = session.attempt(job)
    outcome = Outcome.of(attempt)
    statement = Statement(session)
    ordered = sorted((g for g in groups if g.pending), key=session.task_order_key)
    _fill(session, job, statement, ordered, gang=gang, domain=domain)
    if not gang:
        statement.commit()
        return True
    if dry_run:
        ready = session.job_ready(job)
        statement.discard()
        outcome.restore(attempt)
        return ready
    if session.job_ready(job):
        statement.commit()
        attempt.failure = None
        return True
    for group in ordered:
        missing = job.min_member - session.occupied(job) - attempt.pipelined_pods
        _allocate(session, job, statement, group, min(missing, len(group.pending)), future=True, domain=domain)
    held = session.occupied(job) - job.ready  # placed this cycle, not bound
    if session.job_pipelined(job) and (attempt.pipelined_pods > 0 or held > 0):
        # kept as a reservation inside this cycle (Volcano keeps a statement its plugins let pipeline): on
        # resources being released, or — ``sla``, once a job waited past its SLA — on free ones
        statement.keep()
        attempt.failure = Reason.of(ReasonCode.PIPELINED, pods=attempt.pipelined_pods) if attempt.pipelined_pods \
            else Reason.of(ReasonCode.RESERVED, pods=held, missing=max(job.min_member - session.occupied(job), 0))
        attempt.pipelined = True
        return False
    attempt.short = max(job.min_member - session.occupied(job), 0)
    statement.discard()
    return False


def _place_partitioned(session: Session, job: JobInfo, groups: list[TaskGroup], *, gang: bool,
                       dry_run: bool, domain: Domain) -> bool:
    """A job with network-bounded sub-groups (``subGroupPolicy``; a task's ``partitionPolicy``), in one
    statement: each sub-group's pending pods together inside one HyperNode of tier ≤ its bound — the lowest
    tier first, HyperNodes in ``HyperNodeOrder``, up to :data:`MAX_DOMAIN_TRIES` tried and rolled back — or
    none of them (a ``soft`` bound falls back to anywhere); then the job's other pods up to its gang. The
    whole job binds only when the gang is ready, so a job never holds a half-placed shard. Sub-groups
    whose pods already run stay in their HyperNode. Within a job bound (``networkTopology``) everything
    stays inside the job's HyperNode (``domain``). No pipelining: a bounded shard needs its whole domain
    now."""
    attempt = session.attempt(job)
    outcome = Outcome.of(attempt)
    statement = Statement(session)
    ordered = sorted((g for g in groups if g.pending), key=session.task_order_key)
    shards: dict[str, list[TaskGroup]] = {}
    rest: list[TaskGroup] = []
    for group in ordered:
        (shards.setdefault(group.subgroup, []) if group.subgroup else rest).append(group)
    short: Reason | None = None
    for name in sorted(shards):
        if gang and session.occupied(job) >= job.min_member:
            break
        reason = _place_shard(session, job, statement, name, shards[name], domain)
        if reason is not None:  # the next shard may fit elsewhere (minSubGroups below the total)
            short = short or reason
    _fill(session, job, statement, rest, gang=gang, domain=domain)
    if not gang:
        statement.commit()
        return True
    ready = session.job_ready(job)
    if dry_run:
        statement.discard()
        outcome.restore(attempt)
        return ready
    if ready:
        statement.commit()
        attempt.failure = None
        return True
    if short is not None:
        attempt.failure, attempt.unresolvable = short, False
    attempt.short = max(job.min_member - session.occupied(job), 0)
    statement.discard()
    return False


def _place_shard(session: Session, job: JobInfo, statement: Statement, name: str, groups: list[TaskGroup],
                 base: Domain) -> Reason | None:
    """Place every pending pod of sub-group ``name`` inside one HyperNode of its bound, within ``base`` (see
    :func:`_place_partitioned`); None when placed, else why not (nothing of it is left placed)."""
    bound = job.subgroups[name]
    network = session.snapshot.network
    highest = tier_bound(network, bound)
    needed = sum(len(g.pending) for g in groups)
    soft = bound.mode == "soft"
    search = _Search()
    if network is not None and (highest is not None or soft):
        held = np.asarray(sorted({p.node for p in session.snapshot.running
                                  if p.job == job.key and p.subgroup == name}), dtype=np.int64)
        tiers = [t for t in network.tiers if highest is None or t <= highest]
        for inside in _hypernodes(session, job, groups, tiers, held, needed, base, search):
            mark = statement.mark()
            placed = sum(_allocate(session, job, statement, g, len(g.pending), explain_failures=False, domain=inside)
                         for g in groups)
            if placed == needed:
                return None
            statement.discard_to(mark)
    if soft:
        mark = statement.mark()
        if sum(_allocate(session, job, statement, g, len(g.pending), domain=base) for g in groups) == needed:
            return None
        statement.discard_to(mark)
        return session.attempt(job).failure
    if network is None or highest is None:
        return _unknown_tier(bound)
    return Reason.of(ReasonCode.SUBGROUP_NO_ROOM, subgroup=name, tier=highest, needed=needed, best=int(search.best))
