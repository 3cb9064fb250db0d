"""The cycle's time budget (``Scheduler.cycle_budget``, ``Session.out_of_time``): once a cycle has run that
long, ``allocate`` starts no new job and defers the rest to the next cycle, which the caller runs at once.

What users rely on: the same jobs end up in the same places as without a budget, every cycle makes progress,
a deferred job keeps its status (no verdict it never got, no parking on it), and nothing is evicted or lent
for a job whose turn has not come. The stopwatch here is a counter that each placement moves on by one
second, so which job a cycle stops at follows from the placements alone, never from the machine's speed.
"""

from __future__ import annotations

from typing import Any

import pytest

from hetsched.api.objects import AnyObject, Pod
from hetsched.metrics.scheduler import SchedulerMetrics
from hetsched.scheduler.engine.actions import allocate
from hetsched.scheduler.engine.runner import Scheduler
from tests.builders import Harness, accel_node, gang, harness, node, priority_class, queue
from tests.test_metrics import families, value
from tests.test_preemption import ASCEND, CONF, evicted, pods_of, running


class Placements:
    """A stopwatch reading one second per ``allocate`` placement so far, and the jobs placed, in order."""

    def __init__(self) -> None:
        self.tried: list[str] = []

    def __call__(self) -> float:
        return float(len(self.tried))


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> Placements:
    placements = Placements()
    original = allocate.place_job

    def counted(session: Any, job: Any, groups: Any, **kwargs: Any) -> bool:
        placements.tried.append(job.key.split("/", 1)[1])
        return original(session, job, groups, **kwargs)

    monkeypatch.setattr(allocate, "place_job", counted)
    return placements


def budgeted(objects: list[AnyObject], watch: Placements, seconds: float, conf: str | None = None) -> Harness:
    h = harness(objects, conf)
    h.scheduler = Scheduler(h.cluster, h.cluster, h.cluster, h.clock, h.scheduler.conf, evictor=h.cluster,
                            stopwatch=watch, cycle_budget=seconds)
    return h


def five_jobs() -> list[AnyObject]:
    """Five 1-pod jobs of 2 CPUs on two 4-CPU nodes: four fit, the last waits for room."""
    return [node("n1", cpu="4"), node("n2", cpu="4"), *[o for i in range(5) for o in gang(f"j{i}", 1, cpu="2")]]


def test_a_cut_cycle_defers_the_rest_and_the_next_places_them_where_an_unbounded_cycle_would(
        watch: Placements) -> None:
    unbounded = harness(five_jobs())
    unbounded.cycle()
    watch.tried.clear()
    h = budgeted(five_jobs(), watch, 2.5)
    metrics = SchedulerMetrics()
    h.scheduler.observers.append(metrics)
    first = h.cycle()
    assert watch.tried == ["j0", "j1", "j2"]  # the third placement ends at 3 s, past 2.5: the budget is spent
    assert first.deferred and sorted(first.decisions.deferred) == ["default/j3", "default/j4"]
    assert all(h.condition(f"j{i}") == "" for i in (3, 4))  # no verdict for a job the cycle never came to
    assert "default/j3" not in first.decisions.unschedulable
    assert value(families(metrics.registry), "hetsched_scheduler_deferred_jobs",
                 "hetsched_scheduler_deferred_jobs_total") == 2
    second = h.cycle()
    assert list(dict.fromkeys(watch.tried[3:])) == ["j3", "j4"] and not second.deferred
    assert h.bindings() == unbounded.bindings() and len(h.bindings()) == 4
    assert h.condition("j4").startswith("NotEnoughResources")  # tried now: it has its verdict


def test_every_cycle_places_at_least_one_job_however_small_the_budget(watch: Placements) -> None:
    h = budgeted(five_jobs(), watch, 1e-9)
    for cycle in range(1, 5):
        result = h.cycle()
        assert len(h.bindings()) == cycle and result.deferred
    last = h.cycle()
    assert not last.deferred and h.condition("j4").startswith("NotEnoughResources")


def test_a_deferred_job_is_not_parked_and_its_parked_neighbours_stay_parked(watch: Placements) -> None:
    """j3 and j4 are deferred, not parked; j4 waits for room in the cycle after the cut and is parked then,
    and the cycle after tries nobody."""
    h = budgeted(five_jobs(), watch, 2.5)
    h.cycle()
    assert "default/j3" not in h.scheduler.cache.parked.jobs
    h.cycle()
    tried = len(watch.tried)
    assert "default/j4" in h.scheduler.cache.parked.jobs
    h.cycle()
    assert len(watch.tried) == tried


def test_nothing_is_evicted_for_a_job_whose_turn_did_not_come(watch: Placements) -> None:
    """A high-priority job fits on a free node; a mid-priority one could run only by preempting a low one.
    When the cut comes after the first, preempt leaves the second alone: next cycle, tried and refused, it
    preempts as it would have without a budget."""
    objects: list[AnyObject] = [
        priority_class("low", 10), priority_class("mid", 500), priority_class("high", 1000),
        accel_node("n0"), accel_node("n1"), *running("low", ["n0"], min_member=1),
        *gang("high", 1, limits={ASCEND: 8}, cpu="1", priority_class="high"),
        *gang("mid", 1, limits={ASCEND: 8}, cpu="1", priority_class="mid")]
    h = budgeted(objects, watch, 0.5, CONF)
    first = h.cycle()
    assert first.decisions.deferred == ["default/mid"] and not first.decisions.evictions
    assert pods_of(h, "high") == {"high-0": "n1"}
    h.cycle()
    assert evicted(h) == ["low-0"]
    unbounded = harness(objects, CONF)
    unbounded.cycle()
    assert evicted(unbounded) == ["low-0"]


def lending_case() -> list[AnyObject]:
    """Queue vip holds n0 and n1, its deserved share of three nodes; plain deserves the third but asks for a
    node that is not there. Lending gives vip's waiting job n2, which no queue in the cycle can use."""
    nowhere = gang("plain-job", 1, limits={ASCEND: 8}, queue="plain")
    made = nowhere[1]
    assert isinstance(made, Pod)
    nowhere[1] = made.model_copy(update={"spec": made.spec.model_copy(update={"nodeSelector": {"pool": "none"}})})
    return [queue("vip"), queue("plain"), accel_node("n0"), accel_node("n1"), accel_node("n2"),
            *running("held", ["n0", "n1"], min_member=1, queue_name="vip", klass=""),
            *gang("vip-job", 1, limits={ASCEND: 8}, queue="vip"), *nowhere]


def test_a_job_at_its_queue_bound_is_deferred_not_parked_when_the_budget_ends_before_lending(
        watch: Placements) -> None:
    unbounded = harness(lending_case())
    unbounded.cycle()
    assert pods_of(unbounded, "vip-job") == {"vip-job-0": "n2"}  # lent in the same cycle
    watch.tried.clear()
    h = budgeted(lending_case(), watch, 0.5)
    first = h.cycle()
    assert "default/vip-job" in first.decisions.deferred and not any(pods_of(h, "vip-job").values())
    assert h.condition("vip-job") == ""  # no "queue at its limit" verdict, so not parked on it
    h.cycle()
    assert pods_of(h, "vip-job") == {"vip-job-0": "n2"}


def test_a_budget_needs_a_stopwatch_and_a_positive_length() -> None:
    h = harness(five_jobs())
    for stopwatch, seconds in ((None, 0.01), (lambda: 0.0, 0.0), (lambda: 0.0, float("nan"))):
        with pytest.raises(ValueError, match="cycle budget"):
            Scheduler(h.cluster, h.cluster, h.cluster, h.clock, h.scheduler.conf, stopwatch=stopwatch,
                      cycle_budget=seconds)
