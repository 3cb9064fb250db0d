"""One scheduling cycle: a snapshot, the configured plugins and the statements that change it.

Who calls it: the runner opens a session per cycle, runs the configured actions on it and closes it to
get the :class:`~hetsched.scheduler.contract.decisions.Decisions`. Actions call the combined extension points
here (``job_ready``, ``allocatable``, ``score`` …); plugins are built fresh for every session, from the
classes the configuration resolved through its caller's registry (the session imports no plugin), and see
the session only as a ``contract.view.SessionView``. What the session did for each job is its
``Attempt`` (``engine.attempt``), never a field of the snapshot's records.

The combination rules are documented in ``scheduler.contract.framework``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from hetsched import periods
from hetsched.api import queue_access
from hetsched.api.objects import Condition, hourly_cost
from hetsched.ports import Stopwatch
from hetsched.scheduler.contract.arrays import BoolArray, FloatArray, IntArray
from hetsched.scheduler.contract.decisions import Decisions, PodGroupUpdate
from hetsched.scheduler.contract.framework import (
    Allocatable,
    Evictable,
    HyperNodeOrder,
    JobEnqueue,
    JobOrder,
    JobPipelined,
    JobReady,
    JobStarving,
    JobValid,
    NodeCapacity,
    NodeFilter,
    NodeScore,
    Overused,
    Plugin,
    PreemptableVictims,
    Preemptive,
    QueueOrder,
    Reclaimable,
    ReclaimableVictims,
    TaskOrder,
    declared_points,
)
from hetsched.scheduler.contract.podtopology import PodTopology
from hetsched.scheduler.contract.reasons import Reason, ReasonCode, render
from hetsched.scheduler.contract.snapshot import JobInfo, QueueInfo, RunningPod, Snapshot, TaskGroup
from hetsched.scheduler.contract.status import Code, Status
from hetsched.scheduler.engine.attempt import Attempt
from hetsched.scheduler.engine.conf import SchedulerConf


class PluginSessionError(Exception):
    """A plugin raised in its session open or close (``point``); ``error`` is what it raised."""

    def __init__(self, plugin: Plugin, point: str, error: Exception) -> None:
        super().__init__(f"plugin {plugin.NAME} {point}: {type(error).__name__}: {error}")
        self.plugin = plugin
        self.point = point
        self.error = error


class Session:
    def __init__(self, snapshot: Snapshot, conf: SchedulerConf, now: float = 0.0,
                 stopwatch: Stopwatch | None = None, set_aside: Mapping[str, Reason] | None = None,
                 without: Collection[str] = (), halted: Reason | None = None,
                 deadline: float | None = None) -> None:
        self.snapshot = snapshot
        self.nodes = snapshot.nodes
        self.conf = conf
        self.now = now
        self.decisions = Decisions()
        self.pod_topology = PodTopology(snapshot, snapshot.nodes)
        """Placed pods per topology domain, for pod (anti-)affinity and spread (``predicates``, ``nodeorder``)."""
        self.handling: str | None = None
        """The job an action is working on (its key), None between jobs: when something raises, the runner
        sets this job aside and runs the cycle again without it (``scheduler.engine.runner``)."""
        self._lines: dict[tuple[str, str], tuple[QueueInfo, ...]] = {}
        self._guests: dict[str, str] | None = None
        self._in_flight: dict[str, dict[str, float]] = {}
        """Queue → hours its subtree's running pods use beyond its books (:meth:`_running_spend`)."""
        self._commitments: dict[str, dict[str, dict[str, float]]] = {}
        """Job key → queue → resource → hours the job was approved to commit this session (hard budgets)."""
        self.lending = False
        """Set by ``allocate`` while it lends capacity beyond deserved shares (``SessionView.lending``)."""
        self.halted = halted
        """Why nothing is scheduled in this session (a guarding plugin cannot open), or None."""
        self.attempts: dict[str, Attempt] = {}
        """Job key → what this session did for the job (``engine.attempt``): never on the snapshot's records."""
        held = dict(set_aside or {})
        if halted is not None:  # a plugin that guards every placement cannot open: no job is touched
            held.update({key: halted for key in snapshot.active if key not in held})
        for key, why in held.items():  # raised in an earlier attempt: no action touches them
            job = snapshot.job(key)
            if job is not None and not job.shared:
                self.attempt(job).set_aside = True
                self.decisions.unschedulable[key] = Status(Code.UNSCHEDULABLE, (why,), "isolation")
        self.bind_annotations: dict[str, dict[str, str]] = {}
        """Pod key → annotations to write at bind (device hand-off), filled by plugins on allocation."""
        self.plugins: list[Plugin] = []
        enabled: dict[type, list[Plugin]] = {}
        self._tier: dict[int, int] = {}
        """id(plugin) → its tier (the tiered votes: ``JobEnqueue``, ``JobPipelined``)."""
        for number, tier in enumerate(conf.tiers if halted is None else ()):
            for option in tier.plugins:
                cls = conf.plugin_class(option.name)
                if cls.NAME in without:  # set aside: it raised opening or closing an earlier session
                    continue
                plugin = cls(conf.arguments_for(option, cls))
                self.plugins.append(plugin)
                self._tier[id(plugin)] = number
                for point in declared_points(type(plugin)):
                    if option.enabled(point.switch):
                        enabled.setdefault(point.protocol, []).append(plugin)

        def asked(protocol: type[Any]) -> list[Any]:
            return enabled.get(protocol, [])

        # per point, the plugins that answer it, in tier order (typed by the point's protocol)
        self._queue_order: list[QueueOrder] = asked(QueueOrder)
        self._job_order: list[JobOrder] = asked(JobOrder)
        self._task_order: list[TaskOrder] = asked(TaskOrder)
        self._job_valid: list[JobValid] = asked(JobValid)
        self._job_enqueue: list[JobEnqueue] = asked(JobEnqueue)
        self._job_ready: list[JobReady] = asked(JobReady)
        self._job_pipelined: list[JobPipelined] = asked(JobPipelined)
        self._overused: list[Overused] = asked(Overused)
        self._allocatable: list[Allocatable] = asked(Allocatable)
        self._evictable: list[Evictable] = asked(Evictable)
        self._job_starving: list[JobStarving] = asked(JobStarving)
        self._reclaimable: list[Reclaimable] = asked(Reclaimable)
        self._reclaimable_victims: list[ReclaimableVictims] = asked(ReclaimableVictims)
        self._preemptable_victims: list[PreemptableVictims] = asked(PreemptableVictims)
        self._preemptive: list[Preemptive] = asked(Preemptive)
        self._node_filter: list[NodeFilter] = asked(NodeFilter)
        self._node_capacity: list[NodeCapacity] = asked(NodeCapacity)
        self._node_score: list[NodeScore] = asked(NodeScore)
        self._hypernode_order: list[HyperNodeOrder] = asked(HyperNodeOrder)
        self._static: dict[tuple[int, object, bool, str], tuple[BoolArray, list[tuple[Reason, BoolArray]]]] = {}
        self.stopwatch = stopwatch
        self.deadline = deadline if stopwatch is not None else None
        """The stopwatch reading after which ``allocate`` starts no new job (the cycle's time budget), or None."""
        self.plugin_seconds: dict[tuple[str, str], float] = {}
        """(plugin, ``OnSessionOpen``/``OnSessionClose``) → seconds, when a stopwatch is given (Volcano's
        plugin latency metric measures the same two points; the per-node extension points are vectorised
        calls inside actions and are covered by the action's duration)."""
        self._each_plugin("OnSessionOpen", lambda plugin: plugin.on_session_open(self))

    def _each_plugin(self, point: str, call: Callable[[Plugin], None]) -> None:
        watch = self.stopwatch
        for plugin in self.plugins:
            started = watch() if watch is not None else 0.0
            try:
                call(plugin)
            except Exception as exc:  # the runner sets this plugin aside (``scheduler.engine.runner``)
                raise PluginSessionError(plugin, point, exc) from exc
            if watch is not None:
                key = (plugin.NAME, point)
                self.plugin_seconds[key] = self.plugin_seconds.get(key, 0.0) + watch() - started

    # ------------------------------------------------------------------------------ ordering

    def queue_order_key(self, queue: QueueInfo) -> tuple[Any, ...]:
        """Queue ``spec.priority`` first (higher first, as Volcano's queue priority), then the plugins' keys
        (``proportion``: share, lowest first), then the name."""
        return (-queue.priority, *(p.queue_order_key(queue) for p in self._queue_order), queue.name)

    def job_order_key(self, job: JobInfo) -> tuple[Any, ...]:
        with self.working_on(job):  # a plugin raising on this job's key blames this job
            return (*(p.job_order_key(job) for p in self._job_order), job.created, job.key)

    @contextmanager
    def working_on(self, job: JobInfo) -> Iterator[None]:
        """Around an action's work on one job: :attr:`handling` names it, and stays naming it when the work
        raises (the runner reads it to set the job aside)."""
        previous, self.handling = self.handling, job.key
        yield
        self.handling = previous

    def attempt(self, job: JobInfo) -> Attempt:
        """This session's record for ``job`` (made on first use)."""
        found = self.attempts.get(job.key)
        if found is None:
            found = self.attempts[job.key] = Attempt()
        return found

    def jobs(self) -> list[JobInfo]:
        """The active jobs actions may act on: every one not set aside (``Attempt.set_aside``) nor deferred
        to the next cycle (``Attempt.deferred``)."""
        attempts = self.attempts
        return [job for job in self.snapshot.active.values()
                if job.key not in attempts or not (attempts[job.key].set_aside or attempts[job.key].deferred)]

    def out_of_time(self) -> bool:
        """Whether the cycle's time budget is spent (never without a deadline)."""
        return self.deadline is not None and self.stopwatch is not None and self.stopwatch() >= self.deadline

    def defer(self, job: JobInfo) -> None:
        """Leave ``job`` to the next cycle: no later action touches it, it gets no status and is not parked.
        Sound because the caller runs the next cycle at once (``Decisions.deferred`` says so)."""
        attempt = self.attempt(job)
        attempt.deferred = True
        attempt.failure = None
        self.decisions.unschedulable.pop(job.key, None)
        self.decisions.deferred.append(job.key)

    def queue_forbidden(self, job: JobInfo) -> Reason | None:
        """Why ``job``'s namespace may not submit to its queue (``api.queue_access``: the queue, or one of its
        ancestors, lists namespaces or selects them by label, and not this one), or None when it may."""
        namespace = job.key.split("/", 1)[0]
        queues = self.snapshot.queues

        def tree(name: str) -> tuple[queue_access.Admits | None, str] | None:
            info = queues.get(name)
            return (info.namespaces, info.parent) if info is not None else None

        refused = queue_access.refusing(job.queue, namespace, tree,
                                        lambda: self.snapshot.namespace_labels.get(namespace, {}))
        return Reason.of(ReasonCode.QUEUE_FORBIDDEN, namespace=namespace, queue=refused) if refused else None

    def _asked(self, names: tuple[str, ...], groups: list[TaskGroup],
               minimum: FloatArray | None = None) -> tuple[str, ...]:
        """Which of ``names`` (resources) the groups' pods or ``minimum`` ask for."""
        columns = self.snapshot.resources.columns
        return tuple(name for name in names if name in columns and (
            any(g.request[columns[name]] > 0 for g in groups)
            or (minimum is not None and minimum[columns[name]] > 0)))

    def _line(self, queue: QueueInfo, kind: str) -> tuple[QueueInfo, ...]:
        """The queue and its ancestors (``spec.parent``, up to the top; a parent's budget counts its whole
        subtree, ``controllers.usage``) that have ``kind``: ``spent`` — a resource used up — or ``hard`` — a
        ``Stop`` budget, used up or not. Kept for the session: budgets change only between cycles."""
        found = self._lines.get((kind, queue.name))
        if found is None:
            queues, line, info = self.snapshot.queues, [], queue
            for _ in range(64):
                if (info.exhausted if kind == "spent" else info.when_exhausted == "Stop" and bool(info.budget)):
                    line.append(info)
                parent = queues.get(info.parent) if info.parent and info.parent != "root" else None
                if parent is None or parent is queue:
                    break
                info = parent
            found = self._lines[(kind, queue.name)] = tuple(line)
        return found

    def budget_exhausted(self, job: JobInfo) -> Reason | None:
        """Why ``job`` waits for a budget's next period (its queue's, or an ancestor's, with ``whenExhausted:
        Wait`` or ``Stop``, and it asks a resource the period has used up; or a ``Stop`` budget has less left
        than its pods commit, :meth:`_budget_short`), or None."""
        for queue in self._line(self.snapshot.queues[job.queue], "spent"):
            if queue.when_exhausted == "Idle":
                continue
            asked = self._asked(queue.exhausted, [g for g in job.groups if g.pending], job.min_resources)
            if asked:
                renewal = periods.iso(queue.renewal) if queue.renewal is not None else "unknown"
                return Reason.of(ReasonCode.BUDGET_EXHAUSTED, queue=queue.name, resources=asked, renewal=renewal)
        return self._budget_short(job)

    def _budget_short(self, job: JobInfo) -> Reason | None:
        """A hard budget starts a job whose pods all declare ``activeDeadlineSeconds`` only when what they
        commit — each resource's hours × the whole deadline — fits what the period has left once the running
        pods' commitments are counted (a running pod with a deadline commits to its end within the period,
        one without it to now; it is stopped when the budget runs out). Committing the whole deadline here
        keeps a job that runs into the next period within that period's budget too (it is never more than
        this one's). Approved jobs commit for the rest of the session. A job without deadlines is started
        while anything is left, and stopped with the rest."""
        pending = [g for g in job.groups if g.pending]
        if not pending or any(g.spec.activeDeadlineSeconds is None for g in pending):
            return None
        line = self._line(self.snapshot.queues[job.queue], "hard")
        if not line:
            return None
        columns = self.snapshot.resources.columns
        commits: dict[str, dict[str, float]] = {}
        for queue in line:
            wants = commits[queue.name] = {}
            for name, budget in queue.budget.items():
                column = columns.get(name)
                if column is None:
                    continue
                hours = sum(hourly_cost(name, int(g.request[column])) * len(g.pending)
                            * float(g.spec.activeDeadlineSeconds or 0) for g in pending) / 3600
                if hours <= 0:
                    continue
                left = self._budget_left(queue, name, job.key)
                if hours > left + 1e-9:
                    renewal = periods.iso(queue.renewal) if queue.renewal is not None else "unknown"
                    return Reason.of(ReasonCode.BUDGET_SHORT, queue=queue.name, resource=name, budget=budget,
                                     commits=round(hours, 3), left=round(max(left, 0.0), 3), renewal=renewal)
                wants[name] = hours
        self._commitments[job.key] = commits
        return None

    def _budget_left(self, queue: QueueInfo, name: str, job: str) -> float:
        """Hours of ``name`` the queue's period has left for ``job``: the budget, less what is used (the books,
        then the running pods of its subtree since they were written, to their deadline or to now), less
        what jobs approved earlier in the session commit."""
        spent = self._in_flight.get(queue.name)
        if spent is None:
            spent = self._in_flight[queue.name] = self._running_spend(queue)
        approved = sum(c.get(queue.name, {}).get(name, 0.0) for key, c in self._commitments.items() if key != job)
        return queue.budget[name] - queue.used.get(name, 0.0) - spent.get(name, 0.0) - approved

    def _running_spend(self, queue: QueueInfo) -> dict[str, float]:
        """Hours the running pods of the queue's subtree use beyond its books, up to the period's end."""
        snapshot = self.snapshot
        spend: dict[str, float] = {}
        since = queue.accounted_until if queue.accounted_until is not None else self.now
        end_of_period = queue.renewal if queue.renewal is not None else math.inf
        columns = [(name, column) for name in queue.budget if (column := snapshot.resources.columns.get(name))
                   is not None]
        for pod in snapshot.running:
            if not any(q is queue for q in self._line(snapshot.queues[snapshot.jobs[pod.job].queue], "hard")):
                continue
            begin = max(pod.started if pod.started is not None else self.now, since)
            end = min(pod.ends_by if pod.ends_by is not None else self.now, end_of_period)
            if end > begin:
                for name, column in columns:
                    spend[name] = spend.get(name, 0.0) + hourly_cost(name, int(pod.request[column])) * (
                        end - begin) / 3600
        return spend

    def budget_idle(self, queue: QueueInfo, group: TaskGroup) -> Reason | None:
        """Why ``group`` may take only what no queue asks for (``whenExhausted: Idle`` on its queue or an
        ancestor: placed when ``allocate`` lends), or None."""
        for spent in self._line(queue, "spent"):
            if spent.when_exhausted == "Idle" and (asked := self._asked(spent.exhausted, [group])):
                return Reason.of(ReasonCode.BUDGET_IDLE, queue=spent.name, resources=asked)
        return None

    def guests(self) -> Mapping[str, str]:
        """Job key → the queue whose used-up ``Idle`` budget makes the job a guest (one of its running pods
        holds such a resource): it runs on capacity nobody asked for, so ``reclaim`` takes it first, for any
        queue, and victims are chosen among guests before anyone else (``engine.eviction.units``)."""
        if self._guests is None:
            self._guests = {}
            if any(q.exhausted and q.when_exhausted == "Idle" for q in self.snapshot.queues.values()):
                for pod in self.snapshot.running:
                    if pod.job not in self._guests and (queue := self.budget_holder(pod, "Idle")) is not None:
                        self._guests[pod.job] = queue
        return self._guests

    def budget_holder(self, pod: RunningPod, mode: str) -> str | None:
        """The queue (the pod's job's, or an ancestor) whose budget with ``whenExhausted: mode`` is used up for
        a resource the pod holds, or None: an ``Idle`` one makes the pod a guest, the first reclaimed
        (``reclaim``); a ``Stop`` one has its job evicted (``engine.budgets``)."""
        columns = self.snapshot.resources.columns
        for queue in self._line(self.snapshot.queues[self.snapshot.jobs[pod.job].queue], "spent"):
            if queue.when_exhausted == mode and any(
                    name in columns and pod.request[columns[name]] > 0 for name in queue.exhausted):
                return queue.name
        return None

    def task_order_key(self, group: TaskGroup) -> tuple[Any, ...]:
        return (*(p.task_order_key(group) for p in self._task_order), group.pending[0])

    # ------------------------------------------------------------------------------ job gates

    def job_valid(self, job: JobInfo) -> Status:
        for plugin in self._job_valid:
            status = plugin.job_valid(job)
            if not status.ok:
                return status
        return Status(Code.SUCCESS)

    def job_enqueueable(self, job: JobInfo) -> Status:
        """Volcano's tiered vote (``contract.framework``): a rejection is the answer; a permit decides once
        the rest of its tier has not rejected; all abstaining is yes."""
        permit: Status | None = None
        permit_tier = -1
        for plugin in self._job_enqueue:
            tier = self._tier[id(plugin)]
            if permit is not None and tier != permit_tier:
                break
            status = plugin.job_enqueueable(job)
            if not status.ok:
                return status
            if status.code is Code.PERMIT and permit is None:
                permit, permit_tier = status, tier
        return permit if permit is not None else Status(Code.SUCCESS)

    def job_enqueued(self, job: JobInfo) -> None:
        for plugin in self._job_enqueue:
            plugin.job_enqueued(job)

    def job_ready(self, job: JobInfo) -> bool:
        return all(p.job_ready(job) for p in self._job_ready)

    def job_pipelined(self, job: JobInfo) -> bool:
        """Volcano's tiered vote, as :meth:`job_enqueueable` (True permits, False rejects, None abstains)."""
        permit_tier = -1
        for plugin in self._job_pipelined:
            tier = self._tier[id(plugin)]
            if permit_tier >= 0 and tier != permit_tier:
                break
            vote = plugin.job_pipelined(job)
            if vote is None:
                continue
            if not vote:
                return False
            if permit_tier < 0:
                permit_tier = tier
        return True

    # ------------------------------------------------------------------------------ queues

    def overused(self, queue: QueueInfo) -> bool:
        return any(p.overused(queue) for p in self._overused)

    def evictable(self, victim: RunningPod) -> bool:
        return all(p.evictable(victim) for p in self._evictable)

    def job_starving(self, job: JobInfo) -> bool:
        points = self._job_starving
        return bool(points) and all(p.job_starving(job) for p in points)

    def reclaimable(self, queue: QueueInfo, reclaimer: QueueInfo) -> bool:
        points = self._reclaimable
        return bool(points) and all(p.reclaimable(queue, reclaimer) for p in points)

    def reclaimable_victims(self, victims: list[RunningPod], reclaimer: JobInfo) -> bool:
        return all(p.reclaimable_victims(victims, reclaimer) for p in self._reclaimable_victims)

    def preemptable_victims(self, victims: list[RunningPod], preemptor: JobInfo) -> bool:
        return all(p.preemptable_victims(victims, preemptor) for p in self._preemptable_victims)

    def preemptive(self, queue: QueueInfo, job: JobInfo) -> bool:
        return all(p.preemptive(queue, job) for p in self._preemptive)

    def allocatable(self, queue: QueueInfo, group: TaskGroup, wanted: int) -> int:
        if not self.lending and self.budget_idle(queue, group) is not None:
            return 0  # its budget is used up: only what is lent (``allocate``'s last pass)
        for plugin in self._allocatable:
            wanted = min(wanted, plugin.allocatable(queue, group, wanted))
            if wanted <= 0:
                return 0
        return wanted

    # ------------------------------------------------------------------------------ nodes

    def static_checks(self, group: TaskGroup) -> tuple[BoolArray, list[tuple[Reason, BoolArray]]]:
        """Nodes that pass every static predicate, and each predicate's (reason, failing mask).

        Cached per placement key, priority, queue when it is bound to node groups (or may inherit a bound from
        a parent queue), and whether the job
        has several pods (device rules differ for distributed jobs) for the session: node labels, taints and
        flags do not change inside a cycle.
        """
        queue = self.snapshot.queues.get(group.job.queue)
        bound = group.job.queue if queue is not None and (queue.affinity is not None or queue.parent) else ""
        key = (group.priority, group.placement_key, group.job.total_pods > 1, bound)
        cached = self._static.get(key)
        if cached is None:
            failures: list[tuple[Reason, BoolArray]] = []
            ok = self.nodes.exists.copy()
            for plugin in self._node_filter:
                for reason, failing in plugin.node_filter(self, group):
                    failures.append((reason, failing))
                    ok &= ~failing
            cached = (ok, failures)
            self._static[key] = cached
        return cached

    def capacity_limit(self, group: TaskGroup) -> IntArray | None:
        """Per node, the fewest pods of ``group`` any ``node_capacity`` plugin allows (None: no limit)."""
        limit: IntArray | None = None
        for plugin in self._node_capacity:
            cap = plugin.node_capacity(self, group)
            if cap is not None:
                limit = cap if limit is None else np.minimum(limit, cap)
        return limit

    def capacity_reasons(self, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        """Why ``node_capacity`` plugins rule nodes out for ``group``: (reason, nodes) pairs, for ``explain``."""
        return [reason for plugin in self._node_capacity
                for reason in plugin.node_capacity_reasons(self, group)]

    def score(self, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        total = np.zeros(len(nodes), dtype=np.float64)
        for plugin in self._node_score:
            total += plugin.node_score(self, group, nodes, placed)
        return total

    @property
    def scoring(self) -> bool:
        return bool(self._node_score)

    def hypernode_scores(self, job: JobInfo, tier: int, domains: IntArray) -> FloatArray:
        """The plugins' summed score of each HyperNode ``domains[i]`` of ``tier`` for ``job`` (zeros when
        no plugin orders HyperNodes: the lowest id is tried first)."""
        total = np.zeros(len(domains), dtype=np.float64)
        for plugin in self._hypernode_order:
            total += plugin.hypernode_score(self, job, tier, domains)
        return total

    # ------------------------------------------------------------------------------ events

    def on_allocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        for plugin in self.plugins:
            plugin.on_allocate(group, pods, nodes)
        self.pod_topology.on_allocate(group, nodes)

    def on_deallocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        for plugin in self.plugins:
            plugin.on_deallocate(group, pods, nodes)
        self.pod_topology.on_deallocate(group, nodes)

    # ------------------------------------------------------------------------------ close

    def close(self) -> Decisions:
        """Let plugins contribute status, derive every PodGroup's phase, return the decisions.

        PodGroup phase (Volcano's ``jobStatus``): Running once bound plus succeeded pods reach minMember;
        otherwise Inqueue stays Inqueue and anything else Pending. Only changes are emitted.
        """
        self._each_plugin("OnSessionClose", lambda plugin: plugin.on_session_close(self))
        if self.halted is not None:  # no gang plugin ran to say why: every job waiting says it here
            message = render(self.halted)
            for job in self.snapshot.active.values():
                old = next((c for c in job.podgroup.status.conditions if c.type == "Unschedulable"), None)
                if self.occupied(job) >= job.min_member > 0 or (old is not None and old.message == message):
                    continue
                kept = [c for c in job.podgroup.status.conditions if c.type not in ("Unschedulable", "Scheduled")]
                self.decisions.podgroups[job.key] = PodGroupUpdate(
                    None, [*kept, self.condition("Unschedulable", self.halted.code.value, message)])
        for job in self.snapshot.active.values():  # a settled job is Running and stays so
            update = self.decisions.podgroups.get(job.key)
            phase = job.phase
            occupied = self.occupied(job)
            if occupied >= job.min_member and occupied > 0 and phase in ("Pending", "Inqueue"):
                phase = "Running"
            conditions = update.conditions if update else None
            new_phase = phase if phase != job.podgroup.status.phase else None
            if new_phase is not None or conditions is not None:
                self.decisions.podgroups[job.key] = PodGroupUpdate(new_phase, conditions)
        for key in self.decisions.unschedulable:  # how many pods each was short (its parked condition says it)
            attempt = self.attempts.get(key)
            self.decisions.shortfalls[key] = attempt.short if attempt is not None else None
        return self.decisions

    # ------------------------------------------------------------------------------ the plugins' view

    @property
    def action_names(self) -> list[str]:
        return self.conf.action_names

    def occupied(self, job: JobInfo) -> int:
        attempt = self.attempts.get(job.key)
        return job.ready + (attempt.allocated if attempt is not None else 0)

    def occupied_by_task(self, job: JobInfo, task: str) -> int:
        attempt = self.attempts.get(job.key)
        return job.ready_by_task.get(task, 0) + (attempt.by_task.get(task, 0) if attempt is not None else 0)

    def pending_best_effort(self, job: JobInfo, task: str | None = None) -> int:
        attempt = self.attempts.get(job.key)
        return 0 if attempt is not None and not attempt.best_effort_counts else job.pending_best_effort(task)

    def pipelined_pods(self, job: JobInfo) -> int:
        attempt = self.attempts.get(job.key)
        return attempt.pipelined_pods if attempt is not None else 0

    def short(self, job: JobInfo) -> int | None:
        attempt = self.attempts.get(job.key)
        return attempt.short if attempt is not None else None

    def unschedulable(self, job: str) -> Status | None:
        return self.decisions.unschedulable.get(job)

    def set_conditions(self, job: str, conditions: list[Condition]) -> None:
        previous = self.decisions.podgroups.get(job)
        self.decisions.podgroups[job] = PodGroupUpdate(previous.phase if previous else None, conditions)

    def condition(self, type_: str, reason: str, message: str) -> Condition:
        return Condition(type=type_, status="True", reason=reason, message=message, lastTransitionTime=self.now)
