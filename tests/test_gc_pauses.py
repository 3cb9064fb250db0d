"""The collector's pauses (hetsched.metrics.gc_pauses): the scheduler's steady state makes no cyclic garbage
— which is what makes freezing old objects safe — collections happen between cycles once the young
generations are big enough, and every pause is measured."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from hetsched.benchmark.latency import LatencyRun
from hetsched.metrics.gc_pauses import MAX_SKIP, CollectionSchedule, PauseMeter


@pytest.fixture
def thawed() -> Iterator[None]:
    """Whatever a test freezes is given back to the collector afterwards."""
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_debug(0)
        gc.enable()


@pytest.mark.timeout(300)
def test_the_schedulers_steady_state_makes_no_cyclic_garbage(thawed: None) -> None:
    """Jobs arrive, are placed and finish for 20 simulated seconds on 300 nodes: afterwards, a full
    collection over everything (frozen objects too) finds no unreachable hetsched object. A task group used to
    hold its job strongly: every waiting job's record was a cycle, one per job per cycle (2,946 objects in a
    5,000-pod run), which only a full collection freed — and which, frozen, would never be."""
    run = LatencyRun(300, 3000, 150, 20, seed=7)
    run.fill()
    gc.disable()  # nothing is collected behind the census's back
    run.run()
    assert run.jobs and any(job.decided is not None for job in run.jobs)  # the run placed work
    gc.unfreeze()
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    ours = sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage
                   if type(o).__module__.startswith("hetsched")})
    gc.garbage.clear()
    assert ours == []


def cycles_until_settled(schedule: CollectionSchedule) -> int | None:
    """How many calls between cycles it takes the schedule to settle (None: more than it may skip)."""
    for calls in range(1, MAX_SKIP + 2):
        if schedule.between_cycles():
            return calls
    return None


def test_collections_happen_between_cycles_once_enough_was_allocated(thawed: None) -> None:
    schedule = CollectionSchedule(young_limit=20_000)
    assert schedule.between_cycles() and schedule.settlings == 1  # the first call settles: a full collection
    frozen = gc.get_freeze_count()
    assert cycles_until_settled(schedule) is None  # nothing allocated since
    kept = [[i] for i in range(50_000)]  # lists: always tracked by the collector (a dict of atoms is not)
    assert cycles_until_settled(schedule) is not None and schedule.settlings == 2
    assert gc.get_freeze_count() >= frozen + len(kept)  # the survivors are old now: never rescanned
    del kept
    assert gc.get_freeze_count() < frozen + 50_000  # frozen objects are still freed by reference counting


def test_young_objects_are_counted_even_when_old_ones_die_as_fast(thawed: None) -> None:
    """The scheduler's steady state: every new pod's objects are balanced by a finished pod's old, frozen ones
    being freed. The collector's own count is net of those frees and stays near zero, so a schedule that
    trusted it let the young generations grow for 30 s, then paused 259 ms; counting them settles in time."""
    schedule = CollectionSchedule(young_limit=20_000)
    old = [[i] for i in range(60_000)]
    schedule.settle()  # old is frozen now
    new = []
    for i in range(30_000):
        new.append([i])
        old.pop()  # an old object freed for each new one
    young, middle, _ = gc.get_count()
    assert young + middle * gc.get_threshold()[0] < 20_000  # what the collector counts: little
    assert cycles_until_settled(schedule) is not None and schedule.settlings == 2
    assert cycles_until_settled(schedule) is None  # the survivors are old now
    del new, old


def test_counting_less_often_never_lets_steady_growth_pass_the_limit(thawed: None) -> None:
    """Counting costs time, so the schedule counts less often when objects grow slowly — but never so
    seldom that steady growth overshoots the limit by more than one call's worth."""
    from hetsched.metrics.gc_pauses import unfrozen_objects

    schedule = CollectionSchedule(young_limit=20_000)
    schedule.settle()
    kept: list[list[int]] = []
    peak = 0
    for _ in range(300):
        kept.extend([i] for i in range(300))  # a cycle's lasting objects
        peak = max(peak, unfrozen_objects())
        schedule.between_cycles()
    assert schedule.settlings >= 1 + 300 * 300 // 21_000  # about every 20,000 objects
    assert peak <= 20_000 + 2 * 300
    del kept


def test_every_pause_is_measured_and_exported() -> None:
    registry = CollectorRegistry()
    meter = PauseMeter(registry).install()
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        meter.uninstall()
    figures = meter.figures()
    assert figures["by_generation"][0]["count"] >= 1 and figures["by_generation"][2]["count"] >= 1
    assert figures["max_ms"] > 0
    assert registry.get_sample_value("hetsched_gc_pause_seconds_count", {"generation": "2"}) >= 1
    gc.collect(1)
    assert meter.figures()["by_generation"][1]["count"] == 0  # uninstalled: no longer called
