"""A snapshot is a value: what the scheduler cache does after ``snapshot()`` cannot change a decision taken on
it. Arrays, node facts, chips, jobs and queues are copies; the lazily built pod lists refuse to be built
once the cache changed (``StaleSnapshot``), rather than read a later state."""

from __future__ import annotations

import pytest

from hetsched.api.objects import AnyObject, Node
from hetsched.ports import WatchEvent
from hetsched.scheduler.actions.registry import ACTIONS
from hetsched.scheduler.cache import SchedulerCache
from hetsched.scheduler.conf import default_conf, parse_conf
from hetsched.scheduler.decisions import Decisions
from hetsched.scheduler.session import Session
from hetsched.scheduler.snapshot import Snapshot, StaleSnapshot
from tests.builders import accel_node, gang, node, pod, queue, running_on

PREEMPT = parse_conf("""actions: "enqueue, allocate, preempt, backfill"
tiers:
- plugins: [{name: priority}, {name: gang}, {name: conformance}]
- plugins: [{name: drf}, {name: predicates}, {name: proportion}, {name: nodeorder}, {name: devicetopology}]
""")


def cache_of(objects: list[AnyObject]) -> SchedulerCache:
    cache = SchedulerCache()
    for obj in objects:
        cache.handle(WatchEvent("ADDED", obj))
    return cache


def decide(snapshot: Snapshot) -> Decisions:
    conf = default_conf()
    session = Session(snapshot, conf)
    for action in conf.action_names:
        ACTIONS[action](session)
    return session.close()


def world() -> list[AnyObject]:
    return [queue("default"), node("a", labels={"zone": "x"}), node("b", labels={"zone": "x"}), accel_node("n0"),
            *gang("web", 2, selector={"zone": "x"}, cpu="4"), *gang("train", 1, limits={"huawei.com/Ascend910": 4})]


def relabelled(name: str) -> Node:
    moved = node(name, labels={"zone": "y"}, taints=[{"key": "gone", "effect": "NoSchedule"}])
    return moved


def test_changes_after_the_snapshot_do_not_change_its_decision() -> None:
    """Two caches fed the same events; one then sees its nodes relabelled and tainted, a node deleted, a pod
    bound and a new gang — the decision on its earlier snapshot is the other's, bind for bind."""
    untouched, mutated = cache_of(world()), cache_of(world())
    expected, snapshot = decide(untouched.snapshot()), mutated.snapshot()
    for name in ("a", "b"):
        mutated.handle(WatchEvent("MODIFIED", relabelled(name)))
    mutated.handle(WatchEvent("DELETED", accel_node("n0")))
    mutated.handle(WatchEvent("ADDED", running_on(pod("other", cpu="8"), "a")))
    for obj in gang("late", 1, cpu="1"):
        mutated.handle(WatchEvent("ADDED", obj))
    mutated.assume("default/web-0", "b")
    got = decide(snapshot)
    assert [(b.pod, b.node, b.annotations) for b in got.binds] == \
        [(b.pod, b.node, b.annotations) for b in expected.binds]
    assert len(got.binds) == 3  # both web pods and the training pod, as before the changes
    assert snapshot.nodes.labels[snapshot.nodes.index["a"]] == {"zone": "x"}
    assert snapshot.nodes.taints[snapshot.nodes.index["a"]] == ()
    assert bool(snapshot.nodes.exists[snapshot.nodes.index["n0"]])
    assert "default/late" not in snapshot.jobs
    # the cache itself moved on
    fresh = mutated.snapshot()
    assert fresh.nodes.labels[fresh.nodes.index["a"]] == {"zone": "y"} and "default/late" in fresh.jobs


def test_lazy_pod_lists_refuse_a_changed_cache() -> None:
    running = [queue("default"), node("a", cpu="4"), *gang("low", 1, cpu="4")]
    cache = cache_of(running)
    low = running_on(pod("low-0", "low", cpu="4"), "a")
    cache.handle(WatchEvent("MODIFIED", low))
    snapshot = cache.snapshot()
    assert [p.key for p in snapshot.running] == ["default/low-0"]  # built while fresh: kept
    later = cache.snapshot()
    cache.handle(WatchEvent("ADDED", node("b")))
    assert [p.key for p in snapshot.running] == ["default/low-0"]  # already built: still the same value
    with pytest.raises(StaleSnapshot, match="cache changed after this snapshot"):
        _ = later.running
    with pytest.raises(StaleSnapshot):
        _ = later.placed
    # a session that needs the running pods (preemption) on a stale snapshot fails loudly, never decides on
    # a state it did not see
    full = cache_of(running)
    full.handle(WatchEvent("MODIFIED", low))
    for obj in gang("high", 1, cpu="4", priority=100):
        full.handle(WatchEvent("ADDED", obj))
    stale = full.snapshot()
    full.handle(WatchEvent("ADDED", node("c")))
    session = Session(stale, PREEMPT)
    with pytest.raises(StaleSnapshot):
        for action in PREEMPT.action_names:
            ACTIONS[action](session)
