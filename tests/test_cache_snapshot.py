"""A snapshot is a value: what the scheduler cache does after ``snapshot()`` cannot change a decision taken on
it. Arrays, node facts, chips, jobs and queues are copies; the lazily built pod lists refuse to be built
once the cache changed (``StaleSnapshot``), rather than read a later state."""

from __future__ import annotations

import gc
import random
import weakref

import pytest

from hetsched.api.objects import AnyObject, Node
from hetsched.cluster.memory import MemoryCluster
from hetsched.ports import WatchEvent
from hetsched.scheduler.cache import SchedulerCache
from hetsched.scheduler.contract.decisions import Decisions
from hetsched.scheduler.contract.snapshot import Snapshot, StaleSnapshot
from hetsched.scheduler.defaults import default_conf, parse_conf
from hetsched.scheduler.engine.actions.registry import ACTIONS
from hetsched.scheduler.engine.session import Session
from tests.builders import accel_node, gang, harness, node, pod, priority_class, queue, running_on

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


# --------------------------------------------------------------------------- settled jobs, reused records

def _job_facts(snapshot: Snapshot) -> dict[str, tuple[object, ...]]:
    return {key: (job.phase, job.ready, dict(job.ready_by_task), job.allocated.tolist(), job.pending_count,
                  job.total_pods, job.priority, job.min_member, job.preempts, job.max_unavailable,
                  sorted((g.task, len(g.pending)) for g in job.groups))
            for key, job in snapshot.jobs.items()}


def _queue_facts(snapshot: Snapshot) -> dict[str, tuple[object, ...]]:
    return {name: (q.allocated.tolist(), q.request.tolist(), q.inqueue.tolist()) for name, q in snapshot.queues.items()}


def _from_scratch(cluster: MemoryCluster) -> Snapshot:
    order = ("PriorityClass", "Queue", "Node", "PodGroup", "Pod")
    return cache_of([obj for kind in order for obj in cluster.list(kind)]).snapshot()


def test_a_settled_job_is_reused_until_one_of_its_pods_changes() -> None:
    run = harness([node("a", cpu="8"), node("b", cpu="8"), *gang("steady", 2, cpu="2"), *gang("other", 1, cpu="2")])
    for _ in range(3):  # bind, then the gang's Scheduled condition and Running phase come back as events
        run.cycle()
    cache = run.scheduler.cache
    first = cache.snapshot()
    record = first.jobs["default/steady"]
    second = cache.snapshot()
    assert second.job("default/steady") is record and second.jobs["default/steady"] is record
    assert "default/steady" not in second.active and record.shared
    assert first.jobs["default/steady"] is record  # built while it was the latest: a value from then on
    unread = cache.snapshot()
    cache.snapshot()
    with pytest.raises(StaleSnapshot, match="later snapshot"):  # never read, and a later one was taken
        _ = unread.jobs
    assert _job_facts(second) == _job_facts(_from_scratch(run.cluster))
    assert _queue_facts(second) == _queue_facts(_from_scratch(run.cluster))
    run.cluster.delete("Pod", "default/steady-1")  # its gang is broken: no longer settled, rebuilt
    third = cache.snapshot()
    assert third.jobs["default/steady"] is not second.jobs["default/steady"]
    assert third.jobs["default/steady"].ready == 1 and "default/steady" in third.active
    assert _job_facts(third) == _job_facts(_from_scratch(run.cluster))
    assert _queue_facts(third) == _queue_facts(_from_scratch(run.cluster))


def test_a_confirmed_bind_is_accounted_once_and_wakes_nothing() -> None:
    """The store confirming a bind the cache assumed (the same pod, on the node it was assumed on, with the
    bind's chip hand-off) replaces the record's pod and changes nothing else: node usage, chips and job
    counts equal a cache built from the store's objects, and a gang parked for want of chips stays parked
    (the confirmation freed no room). A pod that lands elsewhere than assumed is accounted anew."""
    run = harness([accel_node("n0"), *gang("train", 2, limits={"huawei.com/Ascend910": 4}),
                   *gang("big", 1, limits={"huawei.com/Ascend910": 8})])
    cache = run.scheduler.cache
    assumed: dict[str, object] = {}
    bind_all = run.cluster.bind_all

    def confirm_later(binds: list[object]) -> list[object]:  # the store's answer arrives after the cycle
        assumed.update({b.pod: b for b in binds})  # type: ignore[attr-defined]
        return []

    run.cluster.bind_all = confirm_later  # type: ignore[method-assign]
    run.cycle()  # one gang takes the 8 chips; the other waits, parked
    placed = {key.rsplit("-", 1)[0] for key in assumed}
    assert placed in ({"default/train"}, {"default/big"})
    waiting = ({"default/train", "default/big"} - placed).pop()
    assert waiting in cache.parked.since
    generation = cache.generation
    run.cluster.bind_all = bind_all  # type: ignore[method-assign]
    bind_all(list(assumed.values()))  # type: ignore[arg-type]
    assert cache.generation == generation + len(assumed)  # one event per bind
    record = cache._pods[next(iter(assumed))]
    assert record.pod.spec.nodeName == "n0" and record.state == "bound"
    assert waiting in cache.parked.since  # nothing freed: still parked
    incremental, scratch = cache.snapshot(), _from_scratch(run.cluster)
    assert _job_facts(incremental) == _job_facts(scratch)
    assert incremental.nodes.used.tolist() == scratch.nodes.used.tolist()
    chips = "huawei.com/Ascend910"
    assert incremental.devices[chips].used.tolist() == scratch.devices[chips].used.tolist() == [255]
    # assumed on n0 but bound on n1 (another writer won): accounted where it is, freed where it was assumed
    run2 = harness([accel_node("n0"), accel_node("n1"), *gang("one", 1, limits={chips: 8})])
    run2.cluster.bind_all = confirm_later  # type: ignore[method-assign]
    assumed.clear()
    run2.cycle()
    (request,) = assumed.values()
    elsewhere = "n1" if request.node == "n0" else "n0"  # type: ignore[attr-defined]
    run2.cluster.bind(request.pod, elsewhere, request.annotations)  # type: ignore[attr-defined]
    cache2 = run2.scheduler.cache
    assert cache2._pods["default/one-0"].node == cache2.snapshot().nodes.index[elsewhere]
    assert cache2.snapshot().nodes.used.tolist() == _from_scratch(run2.cluster).nodes.used.tolist()


def test_snapshots_under_churn_equal_snapshots_built_from_scratch() -> None:
    """Gangs arrive, bind, finish and are deleted, a priority class appears and a node joins; after every
    cycle the incremental snapshot (reused settled records, per-queue sums) equals one built from the
    store's objects by a fresh cache — every job and every queue figure."""
    rng = random.Random(7)
    run = harness([queue("a", 2), queue("b", 1), *[node(f"n{i}", cpu="16") for i in range(6)]])
    alive: list[str] = []
    for step in range(40):
        if rng.random() < 0.6:
            name = f"job{step}"
            for obj in gang(name, rng.choice((1, 2, 3)), queue=rng.choice(("a", "b")), cpu=str(rng.choice((1, 2, 4)))):
                run.cluster.create(obj)
            alive.append(name)
        if alive and rng.random() < 0.3:
            gone = alive.pop(rng.randrange(len(alive)))
            for obj in run.cluster.list("Pod"):
                if obj.metadata.name.startswith(f"{gone}-"):
                    run.cluster.delete("Pod", f"default/{obj.metadata.name}")
            run.cluster.delete("PodGroup", f"default/{gone}")
        if step == 20:
            run.cluster.create(priority_class("urgent", 50))
        if step == 30:
            run.cluster.create(node("late", cpu="16"))
        run.cycle()
        incremental, scratch = run.scheduler.cache.snapshot(), _from_scratch(run.cluster)
        assert _job_facts(incremental) == _job_facts(scratch), step
        assert _queue_facts(incremental) == _queue_facts(scratch), step
    assert run.scheduler.cache.settled.jobs  # the reuse was exercised


def test_preemption_changes_its_own_copy_of_a_settled_victim() -> None:
    run = harness([node("a", cpu="4"), priority_class("high", 100), *gang("low", 1, cpu="4")], PREEMPT)
    for _ in range(3):
        run.cycle()
    stored = run.scheduler.cache.settled.jobs["default/low"]
    for obj in gang("high", 1, cpu="4", priority_class="high"):
        run.cluster.create(obj)
    result = run.cycle()
    assert [e.pod for e in result.decisions.evictions] == ["default/low-0"]
    assert result.snapshot.jobs["default/low"].ready == 0  # the session's copy lost its pod ...
    assert stored.ready == 1 and stored.shared  # ... the record other snapshots share did not


ALL_PLUGINS = parse_conf("""actions: "enqueue, allocate, preempt, reclaim, backfill"
tiers:
- plugins: [{name: priority}, {name: gang}, {name: conformance}, {name: overcommit}]
- plugins: [{name: drf}, {name: predicates}, {name: proportion}, {name: nodeorder}, {name: binpack},
            {name: numaaware}, {name: devicetopology}, {name: network-topology-aware}]
""")


@pytest.mark.parametrize("conf", [None, ALL_PLUGINS], ids=["default", "every-plugin"])
def test_a_finished_cycle_frees_its_snapshot_without_the_cyclic_collector(conf: object) -> None:
    """A scheduler runs cycles back to back; if anything of a session kept a reference cycle through its
    snapshot, each cycle's arrays (megabytes at 10,000 nodes) would wait for the cyclic collector and the
    process would grow by gigabytes between its runs."""
    run = harness([accel_node("n0"), node("a"), *gang("train", 2, limits={"huawei.com/Ascend910": 2}),
                   *gang("web", 3, cpu="1")], conf)  # type: ignore[arg-type]
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            result = run.cycle()
            snapshot = weakref.ref(result.snapshot)
            del result
            assert snapshot() is None
    finally:
        gc.enable()
