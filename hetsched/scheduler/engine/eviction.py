"""Choosing eviction victims for a starving gang: shared by the ``preempt`` and ``reclaim`` actions.

Who calls it: those two actions, with the victims each may take (same queue and lower priority for
``preempt``; reclaimable queues above their deserved share, and guests, for ``reclaim``), and
``engine.budgets`` (:func:`release` and :func:`record` for what a hard budget stops).

How victims are chosen (hetsched's rule, gang- and topology-aware by construction):

1. Victim *units*: a job's pods above its minMember may go one at a time (newest first); otherwise the
   job goes only as a whole (every running pod of it) — a victim gang is never cut below minMember. When
   a whole job is chosen, single pods of it chosen before are folded into it. Units are tried cheapest first:
   guests first (jobs of a queue whose ``Idle`` budget is used up, ``Session.guests``), then lowest *job*
   priority (the PodGroup's priorityClassName), then lowest pod priority (as Volcano orders
   victims), then single pods before whole gangs, then newest. Pods labelled or annotated
   ``volcano.sh/preemptable: "false"`` are never victims (nor, then, is their job as a whole).
2. Units are released in the session one by one (their resources, chips, chip shares and NUMA pins
   become free) until the preemptor's gang can be placed — checked by a dry run of the same placement the
   ``allocate`` action uses, so a freed set counts only when it is a *legal* chip set under the device
   policy (an HCCS ring, an MLU-Link group …).
3. Then units are put back, last chosen first, whenever the gang still fits without them, so nothing is
   evicted that the gang does not need; and when several units remain, a single cheaper unit that is
   enough on its own replaces them (one pod freeing a whole HCCS ring beats three pods on the other).
4. If the gang cannot fit even with every allowed unit gone, nothing is evicted.
   A gang with a ``hard`` ``networkTopology`` bound (Volcano does not preempt for these) is planned per
   HyperNode of tier ≤ its bound: victims only inside one HyperNode, the one whose plan costs least, and
   only where the evictions leave it able to hold the whole gang.
5. A unit is never taken past its job's disruption budget (``hetsched.io/max-unavailable``, pods already
   missing included), so a job that allows one missing pod loses at most one — and a gang that would have
   to go whole under a smaller budget is not a victim at all — nor past a PodDisruptionBudget covering
   its pods (``api.disruption``: the Eviction API would refuse it).

A job waiting for best-effort pods only (no requests: an MPI launcher whose workers run, a sidecar job)
may evict best-effort pods only — pod slots for pod slots, as Volcano rules — and only when its pods do not
fit as things are (otherwise ``backfill`` places them and nothing goes).

The chosen victims stay released in the session (a later preemptor in the same cycle cannot count them
twice) and become evictions in the decisions; the preemptor's gang is then placed in the same session and
its binds follow the evictions (the runner evicts first). Against the embedded cluster an eviction is
immediate; the Kubernetes adapter must wait for the victims to terminate before those binds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np

from hetsched.api.objects import NetworkTopology
from hetsched.scheduler.contract.arrays import IntArray
from hetsched.scheduler.contract.decisions import Eviction
from hetsched.scheduler.contract.snapshot import JobInfo, RunningPod, TaskGroup
from hetsched.scheduler.engine.placement import Domain, held_rows, place_job, tier_bound
from hetsched.scheduler.engine.session import Session

Unit = list[RunningPod]


def units(session: Session, allowed: list[RunningPod]) -> list[Unit]:
    """Group allowed victims into units (see the module docstring), cheapest first."""
    by_job: dict[str, list[RunningPod]] = defaultdict(list)
    for pod in allowed:
        by_job[pod.job].append(pod)
    running: dict[str, list[RunningPod]] = defaultdict(list)
    for pod in session.snapshot.running:
        if pod.job in by_job:
            running[pod.job].append(pod)
    guests = session.guests()
    result: list[tuple[tuple[bool, float, float, int, float], Unit]] = []
    for job_key, pods in by_job.items():
        job = session.snapshot.jobs[job_key]
        # pods an earlier action of this session bound for the job count toward its gang: they are decided
        spare = max(session.occupied(job) - job.min_member, 0)
        pods.sort(key=lambda p: -p.created)
        singles = pods[:spare]
        whole = running[job_key]
        allowed_keys = {p.key for p in pods}
        for pod in singles:
            result.append(((job_key not in guests, job.priority, pod.priority, 0, -pod.created), [pod]))
        # the whole job only when all of it may go, and none of it was bound in this session (taking the rest
        # would leave those binds a gang below its minimum)
        attempt = session.attempts.get(job_key)
        if whole and not (attempt is not None and attempt.allocated) and all(p.key in allowed_keys for p in whole):
            result.append(((job_key not in guests, job.priority, max(p.priority for p in whole), 1,
                            -max(p.created for p in whole)), whole))
    result.sort(key=lambda item: item[0])
    return [unit for _, unit in result]


def release(session: Session, unit: Unit, sign: int) -> None:
    """Take the unit's holdings out of the session (sign 1) or put them back (sign -1): resources, chips,
    NUMA pins, disruption budgets, and what its pods count for pod (anti-)affinity, spread and host ports."""
    snapshot = session.snapshot
    session.pod_topology.release([pod.key for pod in unit], sign)
    for pod in unit:
        session.nodes.used[:, pod.node] -= sign * pod.request
        job = snapshot.own(pod.job)
        job.allocated = job.allocated - sign * pod.request
        job.ready -= sign
        job.ready_by_task[pod.task] = job.ready_by_task.get(pod.task, 0) - sign
        queue = snapshot.queues[job.queue]
        queue.allocated = queue.allocated - sign * pod.request
        for resource, mask in pod.chips.items():
            devices = snapshot.devices.get(resource)
            if devices is not None:
                if sign > 0:
                    devices.used[pod.node] &= ~mask
                else:
                    devices.used[pod.node] |= mask
        for resource, (chip, milli, memory) in pod.shares.items():
            devices = snapshot.devices.get(resource)
            if devices is not None:
                devices.share(pod.node, chip, -sign * milli, -sign * memory)
        for resource, chip, profile, memory, placement in pod.partitions:
            devices = snapshot.devices.get(resource)
            if devices is not None and devices.carving is not None:
                devices.carving.add(pod.node, chip, profile, memory, placement, -sign, owner=pod.labels)
        if pod.numa >= 0 and snapshot.numa is not None:
            column = snapshot.resources.columns["cpu"]
            snapshot.numa.used[pod.node, pod.numa] -= sign * int(pod.request[column])
        for budget in pod.budgets:
            snapshot.budget_spent[budget] = snapshot.budget_spent.get(budget, 0) + sign


def record(session: Session, victims: list[RunningPod], action: str, reason: str, preemptor: str) -> None:
    """Evict ``victims`` (released in the session already): gone from its running pods, into its decisions."""
    session.snapshot.drop_running({pod.key for pod in victims})
    for pod in victims:
        session.decisions.evictions.append(Eviction(pod.key, pod.job, action, reason, preemptor))


def within_budget(session: Session, unit: Unit) -> bool:
    """Would evicting ``unit`` keep its job within its disruption budget (``hetsched.io/max-unavailable``)
    and every PodDisruptionBudget covering its pods within what it allows? Pods already missing count: a
    job with a budget of 1 and one pod pending gives nothing more; victims chosen earlier in the session
    have spent their budgets' disruptions."""
    snapshot = session.snapshot
    spend: dict[int, int] = defaultdict(int)
    for pod in unit:
        for budget in pod.budgets:
            spend[budget] += 1
    for budget, count in spend.items():
        if snapshot.budget_spent.get(budget, 0) + count > snapshot.disruption_allowed[budget]:
            return False
    job = snapshot.jobs[unit[0].job]
    if job.max_unavailable is None:
        return True
    missing = max(job.total_pods - job.ready, 0)
    return missing + len(unit) <= job.max_unavailable


def _evicting_groups(job: JobInfo) -> list[TaskGroup]:
    """The groups an eviction makes room for: those with requests, or — for a job waiting for best-effort
    pods only (:func:`best_effort_only`) — its best-effort ones."""
    if best_effort_only(job):
        return [g for g in job.groups if g.best_effort]
    return [g for g in job.groups if not g.best_effort]


def gang_fits(session: Session, job: JobInfo, domain: Domain = None) -> bool:
    """Dry run of ``allocate``'s gang placement (within ``domain``): would the job's gang be placed now?"""
    return _place_for(session, job, dry_run=True, domain=domain)


def _place_for(session: Session, job: JobInfo, *, dry_run: bool, domain: Domain = None) -> bool:
    """Place (or dry-run) the groups an eviction serves; best-effort pods then count only once placed."""
    groups = _evicting_groups(job)
    attempt = session.attempt(job)
    best_effort = any(g.best_effort for g in groups)
    attempt.best_effort_counts = not best_effort
    try:
        return place_job(session, job, groups, dry_run=dry_run, domain=domain)
    finally:
        attempt.best_effort_counts = True


def plan(session: Session, job: JobInfo, candidates: list[RunningPod],
         still_allowed: Callable[[Unit], bool] = lambda unit: True) -> list[RunningPod] | None:
    """Victims whose eviction lets ``job``'s gang be placed, or None (see the module docstring).
    ``still_allowed`` is asked before each unit is released (e.g. reclaim stops taking from a queue
    once it is down to its deserved share). A gang with a ``hard`` network-topology bound evicts inside
    one HyperNode only (:func:`_plan_in_one_hypernode`)."""
    if best_effort_only(job):
        if gang_fits(session, job):
            return None  # its best-effort pods fit as things are: backfill places them, nothing goes
        candidates = [pod for pod in candidates if int(np.count_nonzero(pod.request)) <= 1]  # pod slots only
    bound = job.podgroup.spec.networkTopology
    if bound is not None and bound.mode == "hard" and session.snapshot.network is not None:
        return _plan_in_one_hypernode(session, job, bound, candidates, still_allowed)
    return _plan(session, job, candidates, still_allowed, None)


def best_effort_only(job: JobInfo) -> bool:
    """Does the job wait for best-effort pods only (no pending pod with requests)? Such a preemptor may
    evict only best-effort pods — pod slots for pod slots (Volcano's rule)."""
    return not any(g.pending for g in job.groups if not g.best_effort)


MAX_PREEMPT_DOMAINS = 16
"""HyperNodes of one tier planned in full (each a greedy plan with dry runs) for a bounded gang, among
those whose free plus evictable resources could hold it, the freest first."""


def _victim_cost(victims: list[RunningPod]) -> tuple[int, int, int, float]:
    """Lowest victim job priority, then pod priority, then fewest pods, then the newest (least work lost)."""
    return (max(p.job_priority for p in victims), max(p.priority for p in victims), len(victims),
            -min(p.created for p in victims))


def _plan_in_one_hypernode(session: Session, job: JobInfo, bound: NetworkTopology, candidates: list[RunningPod],
                           still_allowed: Callable[[Unit], bool]) -> list[RunningPod] | None:
    """For a gang that must stay inside one HyperNode of tier ≤ its bound: plan victims within each
    HyperNode that could hold the gang once its own evictable pods were gone (one vectorised resource
    count per tier rules the rest out), and take the plan that costs least — lowest victim job priority,
    then pod priority, then fewest pods, then the newest victims; ties to the lower tier, then the
    HyperNode tried first. Every
    victim is inside that HyperNode, and a victim gang is taken only whole inside it (its pods elsewhere
    would be evicted for nothing). A job with pods running stays in their HyperNode."""
    network = session.snapshot.network
    assert network is not None
    highest = tier_bound(network, bound)
    if highest is None:
        return None
    allowed = [p for p in candidates if p.preemptable and session.evictable(p)]
    if not allowed:
        return None
    held = held_rows(session, job)
    need = _gang_need(session, job)
    asked = np.flatnonzero(need)
    free = session.nodes.alloc - session.nodes.used
    best: tuple[tuple[int, int, int, float], int, list[RunningPod]] | None = None
    victim_rows = np.asarray([p.node for p in allowed], dtype=np.int64)
    victim_requests = np.stack([p.request for p in allowed])
    for tier in (t for t in network.tiers if t <= highest):
        domain = network.domain[tier]
        count = len(network.names[tier])
        inside = (domain >= 0) & session.nodes.schedulable
        by_domain = domain[victim_rows]
        possible = np.ones(count, dtype=bool)
        for column in asked.tolist():
            room = np.bincount(domain[inside], weights=free[column][inside], minlength=count)
            room += np.bincount(by_domain[by_domain >= 0], weights=victim_requests[by_domain >= 0, column],
                                minlength=count)
            possible &= room >= need[column]
        if held.size:
            holding = np.unique(domain[held])
            if holding.size != 1 or holding[0] < 0:
                continue
            possible &= np.arange(count) == holding[0]
        possible &= np.bincount(by_domain[by_domain >= 0], minlength=count) > 0
        ids = np.flatnonzero(possible)
        if not ids.size:
            continue
        freest = np.bincount(domain[inside], weights=free[asked[0]][inside] if asked.size else None,
                             minlength=count)[ids]
        for chosen in ids[np.argsort(-freest, kind="stable")][:MAX_PREEMPT_DOMAINS].tolist():
            within = [p for p, d in zip(allowed, by_domain.tolist(), strict=True) if d == chosen]
            victims = _plan(session, job, within, still_allowed, domain == chosen)
            if victims is None:
                continue
            release(session, victims, -1)  # put back: the next HyperNode is planned from the same state
            cost = _victim_cost(victims)
            if best is None or cost < best[0]:
                best = (cost, tier, victims)
    if best is None:
        return None
    release(session, best[2], 1)
    return best[2]


def _plan(session: Session, job: JobInfo, candidates: list[RunningPod], still_allowed: Callable[[Unit], bool],
          domain: Domain) -> list[RunningPod] | None:
    """The greedy plan of the module docstring over ``candidates``, for the gang placed within ``domain``;
    the victims stay released."""
    allowed = [p for p in candidates if p.preemptable and session.evictable(p)]
    counts: dict[str, int] = defaultdict(int)
    for pod in session.snapshot.running:
        counts[pod.job] += 1
    chosen: list[Unit] = []
    for unit in units(session, allowed):
        if not still_allowed(unit) or not within_budget(session, unit):
            continue
        job_key = unit[0].job
        if len(unit) == counts[job_key]:  # the whole job
            for earlier in [u for u in chosen if u[0].job == job_key]:  # fold its single pods into the whole
                release(session, earlier, -1)
                chosen.remove(earlier)
        release(session, unit, 1)
        chosen.append(unit)
        if _enough(session, job, domain) and gang_fits(session, job, domain):
            break
    else:
        for unit in reversed(chosen):
            release(session, unit, -1)
        return None
    for unit in reversed(chosen[:-1]):  # drop units the gang does not need after all
        release(session, unit, -1)
        if gang_fits(session, job, domain):
            chosen.remove(unit)
        else:
            release(session, unit, 1)
    if len(chosen) > 1:
        chosen = _single_unit_instead(session, job, chosen, domain, candidates=[
            u for u in units(session, allowed) if u not in chosen and still_allowed(u) and within_budget(session, u)])
    return [pod for unit in chosen for pod in unit]


SINGLE_UNIT_TRIES = 64
"""How many single units :func:`_single_unit_instead` tries (each try is one dry run)."""


def _cost(chosen: list[Unit]) -> tuple[int, int]:
    return max(p.priority for unit in chosen for p in unit), sum(len(unit) for unit in chosen)


def _single_unit_instead(session: Session, job: JobInfo, chosen: list[Unit], domain: Domain,
                         candidates: list[Unit]) -> list[Unit]:
    """Greedy-by-cost can take several small units where one other unit would do (three pods on one HCCS
    ring where a single pod frees the other ring). Try single units no costlier than the current set, in
    cost order, and keep the first that suffices alone. ``chosen`` is released on entry and on return."""
    best = _cost(chosen)
    for unit in candidates[:SINGLE_UNIT_TRIES]:
        if _cost([unit]) >= best:
            continue
        for taken in chosen:
            release(session, taken, -1)
        release(session, unit, 1)
        if gang_fits(session, job, domain):
            return [unit]
        release(session, unit, -1)
        for taken in chosen:
            release(session, taken, 1)
    return chosen


def _gang_need(session: Session, job: JobInfo) -> IntArray:
    """Resources the gang's missing pods ask for, in total."""
    need = np.zeros(len(job.allocated), dtype=np.int64)
    missing = job.min_member - session.occupied(job)
    for group in job.groups:
        if group.pending and not group.best_effort and missing > 0:
            take = min(missing, len(group.pending))
            need += group.request * take
            missing -= take
    return need


def _enough(session: Session, job: JobInfo, domain: Domain) -> bool:
    """Cheap necessary condition before a dry run: the free resources (of the HyperNode being planned, when
    there is one) cover the gang's need."""
    need = _gang_need(session, job)
    usable = session.nodes.schedulable if domain is None else session.nodes.schedulable & domain
    free = (session.nodes.alloc - session.nodes.used)[:, usable].sum(axis=1)
    return bool((free >= need).all())


def starving(session: Session) -> list[JobInfo]:
    """Jobs whose gang is not met and that may evict: pending pods, not placed this cycle, not blocked by
    a static predicate on every node, in an open queue their namespace may use, not waiting for a budget's
    next period; highest priority first, then oldest."""
    jobs = []
    for job in session.jobs():
        with session.working_on(job):
            attempt = session.attempts.get(job.key)
            if (job.phase in ("Inqueue", "Running") and job.preempts
                    and not (attempt is not None and attempt.unresolvable)
                    and session.job_starving(job)
                    and any(g.pending for g in job.groups)
                    and session.snapshot.queues[job.queue].state == "Open"
                    and session.queue_forbidden(job) is None
                    and session.budget_exhausted(job) is None):
                jobs.append(job)
    return sorted(jobs, key=lambda j: (-j.priority, j.created, j.key))


def evict_for(session: Session, action: str, job: JobInfo, candidates: list[RunningPod], reason: str,
              still_allowed: Callable[[Unit], bool] = lambda unit: True) -> bool:
    """Plan victims for ``job`` among ``candidates``; on success record the evictions (``reason`` names
    why) and place the gang. Returns whether victims were found."""
    victims = plan(session, job, candidates, still_allowed)
    if victims is None:
        return False
    record(session, victims, action, reason, job.key)
    session.attempt(job).failure = None
    _place_for(session, job, dry_run=False)
    return True
