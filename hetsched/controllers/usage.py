"""The usage accountant: how many chip-, core- and GiB-hours each queue's pods ran, per period, into the
queue's ``QueueUsage`` status — where budgets are checked, fair share reads its decayed usage, and
``hetsched usage`` reads the chargeback.

Who calls it: ``hetsched controller`` (``cli.serve``, leader-elected, on the wall clock: :meth:`wake` every
round, ticking at :meth:`next_deadline`) and the simulator (``sim.simulator``, on simulated time: a tick
after every event, and a timer at :meth:`renewal`). It watches Pods, Queues and QueueUsages.

Rules:

- Every Queue gets a ``QueueUsage`` of its name (created empty, owned by the Queue so it goes with it): an
  operator sets its ``spec`` (budget, period, what happens when it is used up); the accountant owns its
  ``status``.
- A pod is charged from its start (``status.startTime``, else when it was first seen running) to its end
  (when it was first seen Succeeded or Failed, or deleted), for what it requests: each extended resource
  (chips) per unit, ``cpu`` per core, ``memory`` per GiB — to the queue of its PodGroup (else the queue its
  own annotation names, else ``default``) and to its namespace within it — and to each ancestor queue
  (``spec.parent``), so a business line's parent queue has books, and a budget, for its whole subtree.
- Every ``interval`` seconds (and at the moment a budget is predicted to run out at the current rate) the
  run time since ``status.accountedUntil`` is added, split at period boundaries: a closed period goes to
  ``status.history``; a ``Rolling`` period of N days is today and the N−1 days before it, kept day by day.
  ``decayed`` halves every ``half_life``.
  ``exhausted`` lists the resources whose budget the period has used up — for a hard budget
  (``whenExhausted: Stop``) counting as used what its running pods with ``activeDeadlineSeconds`` will still
  run this period: they were started only when that fitted, and are let finish.
- The status is durable: after a restart or a leader change the new accountant resumes from
  ``accountedUntil`` for the pods still there; a pod that ended and was deleted while no accountant ran is
  charged to ``accountedUntil`` only (documented: at most the downtime is lost, never counted twice).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from dataclasses import dataclass

from hetsched import periods
from hetsched.api import membership
from hetsched.api.objects import (
    MAX_USAGE_HISTORY,
    OwnerReference,
    Pod,
    PodGroup,
    Queue,
    QueueUsage,
    QueueUsageStatus,
    UsagePeriod,
    hourly_cost,
)
from hetsched.controllers.workqueue import WorkQueue
from hetsched.ports import Clock, Conflict, NotFound, ObjectStore, WatchEvent

HOUR = 3600.0
INTERVAL = 60.0
HALF_LIFE = 7 * 86400.0
TERMINAL = ("Succeeded", "Failed")


def charge(pod: Pod) -> dict[str, float]:
    """What one hour of the pod costs, per resource: chips (each extended resource), cores, GiB."""
    return {name: cost for name, milli in pod.spec.requests.items() if (cost := hourly_cost(name, milli)) > 0}


@dataclass
class _Run:
    """A pod that holds resources: its PodGroup (or the queue it names without one), namespace, rates and
    start (and end once it ended). The queue is looked up at each tick: a PodGroup seen after its pod (the
    informers sync kind by kind) still gets its pods' hours."""

    group: str
    own_queue: str
    namespace: str
    rates: dict[str, float]
    start: float
    end: float | None = None
    ends_by: float | None = None
    """Its start plus ``activeDeadlineSeconds``: the latest it runs to, what a hard budget counts it as
    committing (None without a deadline)."""


def _decay(amounts: Mapping[str, float], factor: float) -> dict[str, float]:
    """``amounts`` weighed down by ``factor``; what falls below a second's worth of a chip is dropped."""
    return {name: value * factor for name, value in amounts.items() if value * factor > 1e-9}


def _add(into: dict[str, float], rates: Mapping[str, float], hours: float) -> None:
    for name, rate in rates.items():
        into[name] = into.get(name, 0.0) + rate * hours


class UsageController:
    def __init__(self, store: ObjectStore, clock: Clock, *, interval: float = INTERVAL,
                 half_life: float = HALF_LIFE) -> None:
        if not (interval > 0 and half_life > 0 and math.isfinite(interval) and math.isfinite(half_life)):
            raise ValueError("usage: the interval and the half-life must be positive seconds")
        self.store = store
        self.clock = clock
        self.interval = interval
        self.half_life = half_life
        self.queue = WorkQueue()
        """Queue names whose QueueUsage may need making."""
        self.runs: dict[str, _Run] = {}
        """Pod key → its run, from when it was first seen running until it has been charged to its end."""
        self.last_tick: float | None = None
        self.predicted: float | None = None
        """When a budget runs out at the current rate (the next tick comes no later)."""
        self.changed = False
        """A run began or ended since the last tick: the rates changed, so :attr:`predicted` is stale (a tick
        comes within a second)."""
        self.renewals: dict[str, float] = {}
        """Queue → the end of the period in which its budget ran out: a tick then gives it a fresh period,
        also when nothing runs (an exhausted queue waiting runs nothing)."""
        self._unwatch = store.watch(("Pod", "Queue", "QueueUsage"), self._on_event)

    def close(self) -> None:
        self._unwatch()

    # ------------------------------------------------------------------------------------- events

    def _on_event(self, event: WatchEvent) -> None:
        obj = event.object
        if isinstance(obj, Queue):
            if event.type != "DELETED":
                self.queue.add(obj.metadata.name)
            return
        if isinstance(obj, QueueUsage):
            name = obj.metadata.name
            if event.type == "DELETED":  # made again (empty) while its Queue exists
                self.queue.add(name)
            if event.type != "DELETED" and obj.status.exhausted and obj.status.periodEnd is not None:
                self.renewals[name] = obj.status.periodEnd
            else:
                self.renewals.pop(name, None)
            return
        if isinstance(obj, Pod):
            self._on_pod(event.type, obj)

    def _on_pod(self, kind: str, pod: Pod) -> None:
        key = f"{pod.metadata.namespace or 'default'}/{pod.metadata.name}"
        now = self.clock.now()
        run = self.runs.get(key)
        if run is None:
            if kind == "DELETED" or not pod.spec.nodeName or pod.status.phase not in ("Running", *TERMINAL):
                return
            finished = [c.state.terminated.finishedAt for c in pod.status.containerStatuses
                        if c.state.terminated is not None and c.state.terminated.finishedAt is not None]
            if pod.status.phase in TERMINAL and (pod.status.startTime is None or not finished):
                return  # ended before it was seen, with no times to charge it by
            rates = charge(pod)
            if not rates:
                return
            started = pod.status.startTime if pod.status.startTime is not None else now
            if self.last_tick is None:  # the books start with the first run seen: an interval from now
                self.last_tick = now
            namespace = pod.metadata.namespace or "default"
            group = membership.group_name(pod.metadata.annotations, pod.metadata.labels)
            self.changed = True
            self.runs[key] = _Run(f"{namespace}/{group}" if group else "",
                                  membership.queue_name(pod.metadata.annotations, pod.metadata.labels), namespace,
                                  rates, min(started, now),
                                  min(max(finished), now) if finished and pod.status.phase in TERMINAL else None,
                                  started + pod.spec.activeDeadlineSeconds
                                  if pod.spec.activeDeadlineSeconds is not None else None)
            return
        if run.end is None and (kind == "DELETED" or pod.status.phase in TERMINAL):
            run.end = now
            self.changed = True

    def _queue_of(self, run: _Run) -> str:
        """The queue a run is charged to: its PodGroup's, else the one its pod names (``default``)."""
        if run.group:
            with contextlib.suppress(NotFound):
                found = self.store.get("PodGroup", run.group)
                if isinstance(found, PodGroup):
                    return found.spec.queue or "default"
        return run.own_queue

    def _line(self, queue: str, known: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
        """The queue and its ancestors (``spec.parent``, up to a top-level queue): a run is charged to each,
        so a parent's budget binds its whole subtree. ``root`` is the top, not a budget of its own."""
        if queue in known:
            return known[queue]
        line = [queue]
        name = queue
        while len(line) < 64:
            try:
                found = self.store.get("Queue", name)
            except NotFound:
                break
            parent = found.spec.parent if isinstance(found, Queue) else ""
            if not parent or parent == "root" or parent in line:
                break
            line.append(parent)
            name = parent
        known[queue] = tuple(line)
        return known[queue]

    # ------------------------------------------------------------------------------------- the loop

    def process(self) -> int:
        """Make the QueueUsage of each new Queue; returns how many were looked at."""
        return self.queue.drain(self._ensure)

    def _ensure(self, name: str) -> None:
        try:
            queue = self.store.get("Queue", name)
        except NotFound:
            return
        with contextlib.suppress(NotFound):
            self.store.get("QueueUsage", name)
            return
        owner = OwnerReference(apiVersion=queue.apiVersion, kind="Queue", name=name, uid=queue.metadata.uid,
                               controller=True)
        usage = QueueUsage.model_validate({"metadata": {"name": name, "ownerReferences": [owner.model_dump()]}})
        with contextlib.suppress(Conflict):  # made meanwhile (another replica before a leader change): theirs
            self.store.create(usage)

    def next_deadline(self) -> float | None:
        """When to account next: an interval after the last tick while pods run (a second after it when a run
        began or ended: the rates changed), or sooner where a budget runs out, or when an exhausted queue's
        period ends; None while nothing runs and no budget waits for a new period (what ended since is
        charged at the next tick)."""
        candidates = list(self.renewals.values())
        if self.last_tick is not None and any(run.end is None for run in self.runs.values()):
            candidates.append(self.last_tick + (1.0 if self.changed else self.interval))
            if self.predicted is not None:
                candidates.append(self.predicted)
        return min(candidates, default=None)

    def renewal(self) -> float | None:
        """When the first used-up budget gets a new period (the simulator's only timer for the accountant)."""
        return min(self.renewals.values(), default=None)

    def wake(self) -> None:
        """Account if due (the caller's timer, or the controller process's loop)."""
        due = self.next_deadline()
        if due is not None and due <= self.clock.now() + 1e-9:
            self.tick()

    def tick(self) -> None:
        """Charge every queue's run time since its ``accountedUntil`` up to now, in whole seconds (the API
        server keeps times to the second: a new leader resumes exactly where the books stop)."""
        now = float(math.floor(self.clock.now()))
        self.last_tick = now
        self.changed = False
        lines: dict[str, tuple[str, ...]] = {}
        queue_of = {key: self._line(self._queue_of(run), lines) for key, run in self.runs.items()}
        by_queue: dict[str, list[_Run]] = {}
        for key, run in self.runs.items():
            for name in queue_of[key]:
                by_queue.setdefault(name, []).append(run)
        predicted: list[float] = []
        unwritten: set[str] = set()
        for usage in list(self.store.list("QueueUsage")):
            assert isinstance(usage, QueueUsage)
            status = self._account(usage, by_queue.get(usage.metadata.name, []), now)
            if status != usage.status:
                try:
                    self.store.update(usage.model_copy(update={"status": status}))
                except (Conflict, NotFound):  # changed meanwhile (its spec edited): the next tick charges again
                    unwritten.add(usage.metadata.name)
                    continue
            when = self._runs_out(usage, status, by_queue.get(usage.metadata.name, []), now)
            if when is not None:
                predicted.append(when)
        self.predicted = min(predicted, default=None)
        # an ended run is forgotten once its queue's books hold it (kept while they could not be written)
        self.runs = {key: run for key, run in self.runs.items()
                     if run.end is None or not unwritten.isdisjoint(queue_of[key])}

    # ------------------------------------------------------------------------------------- accounting

    def _account(self, usage: QueueUsage, runs: list[_Run], now: float) -> QueueUsageStatus:
        spec, status = usage.spec, usage.status
        created = usage.metadata.creationTimestamp
        since = status.accountedUntil if status.accountedUntil is not None else min(
            created if created is not None else now, now)  # the books open when the QueueUsage was made
        if since >= now:
            return status.model_copy(update={"accountedUntil": now}) if status.accountedUntil is None else status
        start = status.periodStart
        used = dict(status.used) if spec.period != "Rolling" else {}
        by_namespace = {ns: dict(v) for ns, v in status.byNamespace.items()} if spec.period != "Rolling" else {}
        history = list(status.history)
        if start is not None and periods.start_of(start, spec.period, spec.timeZone) != start:
            # the period or time zone was changed: the books' period closes where they stop, a new one opens
            if used:
                history = [*history, UsagePeriod(periodStart=start, periodEnd=since, used=used,
                                                 byNamespace=by_namespace)][-MAX_USAGE_HISTORY:]
            start, used, by_namespace = None, {}, {}
        if start is None:
            start = periods.start_of(since, spec.period, spec.timeZone)
        days = list(status.days)
        decayed = dict(status.decayed)
        decayed_by = {ns: dict(v) for ns, v in status.decayedByNamespace.items()}
        moment = since
        while moment < now:
            end = periods.next_start(start, spec.period, spec.timeZone)
            upto = min(end, now)
            added: dict[str, float] = {}
            spent: dict[str, dict[str, float]] = {}
            factor = 0.5 ** ((upto - moment) / self.half_life)
            decayed = _decay(decayed, factor)
            decayed_by = {ns: kept for ns, amounts in decayed_by.items() if (kept := _decay(amounts, factor))}
            for run in runs:
                begin, finish = max(run.start, moment), min(run.end if run.end is not None else upto, upto)
                if finish > begin:
                    hours = (finish - begin) / HOUR
                    _add(added, run.rates, hours)
                    _add(spent.setdefault(run.namespace, {}), run.rates, hours)
                    weighed = self._decayed_hours(begin, finish, upto)
                    _add(decayed, run.rates, weighed)
                    _add(decayed_by.setdefault(run.namespace, {}), run.rates, weighed)
            if spec.period == "Rolling":
                days = self._add_day(days, start, end, added, spent)
            else:
                _add(used, added, 1.0)
                for namespace, amounts in spent.items():
                    _add(by_namespace.setdefault(namespace, {}), amounts, 1.0)
            if upto >= end:  # the period closed
                if spec.period != "Rolling":
                    history = [*history, UsagePeriod(periodStart=start, periodEnd=end, used=used,
                                                     byNamespace=by_namespace)][-MAX_USAGE_HISTORY:]
                    used, by_namespace = {}, {}
                start = end
            moment = upto
        if spec.period == "Rolling":
            window = periods.window_seconds(spec.period, spec.window)
            days = [d for d in days if d.periodStart > now - window]  # today and the days before it
            used, by_namespace = {}, {}
            for day in days:
                _add(used, day.used, 1.0)
                for namespace, amounts in day.byNamespace.items():
                    _add(by_namespace.setdefault(namespace, {}), amounts, 1.0)
        committed = self._committed(spec.whenExhausted, runs, now, periods.next_start(start, spec.period,
                                                                                       spec.timeZone))
        # within a millionth of an hour counts as used up: hours summed second by second round below the limit
        exhausted = sorted(name for name, limit in spec.budget.items()
                           if used.get(name, 0.0) + committed.get(name, 0.0) >= limit - 1e-6)
        return status.model_copy(update={
            "periodStart": start, "periodEnd": periods.next_start(start, spec.period, spec.timeZone),
            "accountedUntil": now, "used": used, "byNamespace": by_namespace, "decayed": decayed,
            "decayedByNamespace": decayed_by,
            "exhausted": exhausted, "days": days, "history": history})

    def _decayed_hours(self, begin: float, finish: float, at: float) -> float:
        """An hour of run time in ``[begin, finish]`` weighed at ``at``: each moment halved every half-life
        since (the integral of ``2^-(at - t)/half_life``, in hours): the same whatever the ticks were."""
        rate = math.log(2) / self.half_life
        return (math.exp(-rate * (at - finish)) - math.exp(-rate * (at - begin))) / rate / HOUR

    @staticmethod
    def _add_day(days: list[UsagePeriod], start: float, end: float, added: dict[str, float],
                 spent: dict[str, dict[str, float]]) -> list[UsagePeriod]:
        if days and days[-1].periodStart == start:
            last = days[-1]
            used = dict(last.used)
            _add(used, added, 1.0)
            by_namespace = {ns: dict(v) for ns, v in last.byNamespace.items()}
            for namespace, amounts in spent.items():
                _add(by_namespace.setdefault(namespace, {}), amounts, 1.0)
            return [*days[:-1], last.model_copy(update={"used": used, "byNamespace": by_namespace})]
        return [*days, UsagePeriod(periodStart=start, periodEnd=end, used=added, byNamespace=spent)]

    @staticmethod
    def _committed(when: str, runs: list[_Run], now: float, period_end: float) -> dict[str, float]:
        """For a hard budget (``Stop``): the hours its running pods with a deadline will still use this period —
        started within what was left, they are let finish, so the budget is used up when what is used plus
        this reaches it (and the pods without a deadline are stopped then)."""
        committed: dict[str, float] = {}
        if when == "Stop":
            for run in runs:
                if run.end is None and run.ends_by is not None and min(run.ends_by, period_end) > now:
                    _add(committed, run.rates, (min(run.ends_by, period_end) - now) / HOUR)
        return committed

    def _runs_out(self, usage: QueueUsage, status: QueueUsageStatus, runs: list[_Run], now: float) -> float | None:
        """When the first of the queue's budgets is used up at the rate its pods run now (None: never); for a
        hard budget, what its pods with a deadline commit counts as used and only the others' rate runs."""
        hard = usage.spec.whenExhausted == "Stop"
        rates: dict[str, float] = {}
        for run in runs:
            if run.end is None and not (hard and run.ends_by is not None):
                _add(rates, run.rates, 1.0)
        committed = self._committed(usage.spec.whenExhausted, runs, now, status.periodEnd or math.inf)
        times = [max(math.ceil(now + (limit - status.used.get(name, 0.0) - committed.get(name, 0.0))
                               / rates[name] * HOUR), now + 1)
                 for name, limit in usage.spec.budget.items()
                 if rates.get(name, 0.0) > 0 and name not in status.exhausted]
        return min(times, default=None)
