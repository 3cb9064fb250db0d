"""Parked jobs (``scheduler.cache.parked``): a gang that found no room is not tried again until something
could have made room for it — a pod that held room it could use leaving, a node changing, the job itself
changing — and while parked its condition stays as it was. Checked on the embedded store through the real
scheduler loop, and the bookkeeping between a cycle's snapshot and the parking on ``ParkedJobs`` itself."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from hetsched.scheduler.cache.parked import MAX_LOG, ParkedJobs
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.status import Code, Status
from hetsched.scheduler.engine.actions import allocate
from tests.builders import accel_node, gang, harness, node, pod, podgroup, running_on


@pytest.fixture
def tried(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The job keys ``allocate`` tries to place, in order."""
    keys: list[str] = []
    original = allocate.place_job

    def spy(session: Any, job: Any, groups: Any, **kwargs: Any) -> bool:
        keys.append(job.key)
        return original(session, job, groups, **kwargs)

    monkeypatch.setattr(allocate, "place_job", spy)
    return keys


def blocked() -> list[Any]:
    """One 4-CPU node, 3 CPUs held by a running pod, and a 2-pod gang of 1 CPU each: it does not fit."""
    holder = running_on(pod("holder", cpu="3"), "n1")
    return [node("n1", cpu="4"), holder, *gang("wait", 2, cpu="1")]


def test_a_gang_without_room_is_not_tried_again_until_a_pod_leaves(tried: list[str]) -> None:
    """Parked through its own condition write and another pod's update; released when the pod leaves."""
    h = harness(blocked())
    h.cycle()
    message = h.condition("wait")
    assert tried == ["default/wait"] and message.startswith("NotEnoughResources")
    for _ in range(3):
        h.cycle()
    assert tried == ["default/wait"]  # parked: its own status write released nothing
    assert h.condition("wait") == message and not h.bindings().get("wait-0")
    holder = h.cluster.get("Pod", "default/holder")
    labelled = holder.metadata.model_copy(update={"labels": {"seen": "yes"}})
    h.cluster.update(holder.model_copy(update={"metadata": labelled}))  # an update that frees nothing
    h.cycle()
    assert tried == ["default/wait"]
    h.cluster.delete("Pod", "default/holder")
    h.cycle()
    assert len(tried) > 1  # tried again (and placed: the second pass looks at its elastic pods too)
    assert h.bindings().get("wait-0") == h.bindings().get("wait-1") == "n1"


def test_a_new_node_or_a_changed_job_releases_a_parked_gang(tried: list[str]) -> None:
    h = harness(blocked())
    h.cycle()
    h.cycle()
    assert tried == ["default/wait"]
    h.cluster.create(node("n2", cpu="500m"))  # too small for a pod: tried, and still short
    h.cycle()
    assert tried.count("default/wait") == 2 and not h.bindings().get("wait-0")
    h.cycle()
    assert tried.count("default/wait") == 2  # parked again
    group = h.podgroup("wait")
    h.cluster.update(group.model_copy(update={"spec": group.spec.model_copy(update={"minMember": 1})}))
    h.cycle()  # its spec changed: tried, and one pod now makes the gang
    assert tried.count("default/wait") > 2
    assert sum(1 for name in h.bindings() if name.startswith("wait-")) >= 1


def test_gangs_placed_by_other_pods_are_never_parked(tried: list[str]) -> None:
    """Pod anti-affinity: whether it fits depends on other pods' binds, which free no room."""
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    objects = [node("n1", cpu="4"), running_on(pod("holder", cpu="3"), "n1"), *gang("wait", 2, cpu="1", affinity=anti)]
    h = harness(objects)
    for _ in range(3):
        h.cycle()
    assert tried.count("default/wait") == 3


def test_a_parked_gang_is_tried_again_after_five_minutes_whatever_happened(tried: list[str]) -> None:
    """Issue 30: should an event that frees room ever go unrecognised, a parked gang would wait forever. As
    kube-scheduler flushes its unschedulable queue, a gang parked for 300 s (the injected clock) is tried
    again with no event at all; still without room, it is parked again, for another 300 s."""
    from hetsched.scheduler.cache.parked import MAX_PARKED

    h = harness(blocked())
    h.cycle()
    assert tried == ["default/wait"]
    h.clock.advance_to(MAX_PARKED - 1)
    h.cycle()
    assert tried == ["default/wait"]  # not yet
    h.clock.advance_to(MAX_PARKED)
    h.cycle()
    assert tried == ["default/wait"] * 2  # five minutes parked: tried again, with nothing changed
    h.clock.advance_to(2 * MAX_PARKED - 1)
    h.cycle()
    assert tried == ["default/wait"] * 2  # parked again from its retry
    h.clock.advance_to(2 * MAX_PARKED)
    h.cycle()
    assert tried == ["default/wait"] * 3


ASCEND = "huawei.com/Ascend910"


def labelled(made: Any, **labels: str) -> Any:
    return made.model_copy(update={"metadata": made.metadata.model_copy(update={"labels": labels})})


def test_room_freed_where_none_of_its_pods_could_go_leaves_a_parked_gang_parked(tried: list[str]) -> None:
    """Queueing hints (issue 33): a CPU pod finishing on a CPU-only node, or a 1-chip pod finishing where 7
    chips stay held, cannot make room for an 8-chip pod, so the parked job is not tried again and keeps its
    condition; the 7-chip holder finishing frees the whole server and releases it."""
    objects = [accel_node("npu-0"), node("c1", cpu="4"),
               running_on(pod("seven", cpu="1", limits={ASCEND: 7}), "npu-0"),
               running_on(pod("one", cpu="1", limits={ASCEND: 1}), "npu-0"),
               running_on(pod("etl", cpu="2"), "c1"), *gang("train", 1, cpu="1", limits={ASCEND: 8})]
    h = harness(objects)
    h.cycle()
    message = h.condition("train")
    assert tried == ["default/train"] and message.startswith("NotEnoughResources")
    h.cluster.delete("Pod", "default/etl")
    h.cycle()
    h.cluster.delete("Pod", "default/one")
    h.cycle()
    h.cycle()
    assert tried == ["default/train"] and h.condition("train") == message  # still parked, same condition
    h.cluster.delete("Pod", "default/seven")
    h.cycle()
    assert tried.count("default/train") == 2 and h.bindings().get("train-0") == "npu-0"


def test_a_pod_whose_anti_affinity_kept_a_gang_away_releases_it_wherever_it_ran(tried: list[str]) -> None:
    """The guard's zone-wide anti-affinity kept the gang off both nodes; the guard ran on a node too small for
    the gang's pods, yet its leaving frees the whole zone, so the parked gang is tried and placed."""
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "zone"}]}}
    objects = [node("small", cpu="1", labels={"zone": "a"}), node("big", cpu="8", labels={"zone": "a"}),
               running_on(pod("guard", cpu="1", affinity=anti), "small"),
               podgroup("wait", 2), *[labelled(pod(f"wait-{i}", "wait", cpu="2"), app="x") for i in range(2)]]
    h = harness(objects)
    h.cycle()
    h.cycle()
    assert tried == ["default/wait"] and not h.bindings().get("wait-0")
    h.cluster.delete("Pod", "default/guard")
    h.cycle()
    assert tried.count("default/wait") == 2
    assert h.bindings().get("wait-0") == h.bindings().get("wait-1") == "big"


def _cycle_on(parked: ParkedJobs) -> tuple[Any, Status]:
    """A snapshot taken now holding one active 2-pod gang of one task group (1 CPU, 8 chips a pod), and the
    allocate status its cycle found it with (no room)."""
    group = SimpleNamespace(spec=SimpleNamespace(pod_topology=False), request=np.array([1000, 8], dtype=np.int64),
                            best_effort=False)
    job = SimpleNamespace(groups=[group], min_member=2, ready=0, min_task_member={}, subgroups={},
                          podgroup=SimpleNamespace(spec=SimpleNamespace(networkTopology=None)))
    status = Status(Code.UNSCHEDULABLE, (Reason.of(ReasonCode.NODES_UNAVAILABLE, total=1, nodes={}),), "allocate")
    snapshot = SimpleNamespace(room=parked.room, active={"ns/job": job})
    parked.for_snapshot()
    return snapshot, status


@pytest.mark.parametrize(("freed_node", "parks"), [([4000, 7], True), ([1000, 8], False)])
def test_room_freed_during_the_cycle_keeps_a_job_unparked_only_if_it_could_use_it(freed_node: list[int],
                                                                                    parks: bool) -> None:
    """A pod that leaves while the cycle runs (after its snapshot) frees room the cycle did not see: the jobs
    that room could serve must be tried next cycle, not parked; the others are parked as usual."""
    parked = ParkedJobs()
    snapshot, status = _cycle_on(parked)
    parked.freed_on(0, np.array(freed_node, dtype=np.int64), np.array([1000, 1], dtype=np.int64))  # mid-cycle
    parked.park(snapshot, {"ns/job": status}, {"ns/job": 1}, now=0.0)
    assert ("ns/job" in parked.jobs) is parks


def test_too_many_events_during_a_cycle_park_nothing() -> None:
    """The log of room events is bounded: past ``MAX_LOG`` events it forgets where room was freed and
    treats them as room freed everywhere, so nothing the cycle decided on a stale snapshot is parked."""
    parked = ParkedJobs()
    snapshot, status = _cycle_on(parked)
    for _ in range(MAX_LOG + 1):
        parked.freed_on(0, np.array([4000, 7], dtype=np.int64), np.array([1000, 1], dtype=np.int64))  # irrelevant
    parked.park(snapshot, {"ns/job": status}, {"ns/job": 1}, now=0.0)
    assert parked.jobs == {}
    assert len(parked.log) <= MAX_LOG


def test_a_gang_waits_until_freed_room_could_hold_all_the_pods_it_lacks(tried: list[str]) -> None:
    """The gang bound (issue 33): a 2-pod gang of 8-chip pods on two full 8-chip servers. The first server
    coming free could hold one of its pods, not two: it stays parked, its condition as it was; the second
    releases it, and it runs on both."""
    objects = [accel_node("npu-0"), accel_node("npu-1"),
               *[running_on(pod(f"hog-{i}", cpu="1", limits={ASCEND: 8}), f"npu-{i}") for i in range(2)],
               *gang("train", 2, cpu="1", limits={ASCEND: 8})]
    h = harness(objects)
    h.cycle()
    message = h.condition("train")
    assert tried == ["default/train"] and message.startswith("NotEnoughResources")
    h.cluster.delete("Pod", "default/hog-0")
    h.cycle()
    h.cycle()
    assert tried == ["default/train"] and h.condition("train") == message
    h.cluster.delete("Pod", "default/hog-1")
    h.cycle()
    assert tried.count("default/train") == 2
    assert {h.bindings().get("train-0"), h.bindings().get("train-1")} == {"npu-0", "npu-1"}


@pytest.mark.parametrize(("pods_in_room", "short", "freed_meanwhile", "kept", "owing", "parks"), [
    (1, 2, True, False, (1, 1), True),  # the cache's room holds one of two; its attempt was short of two,
    #                                       one of which the room freed during the cycle could hold
    (2, None, True, False, None, False),  # room for both by count: unbounded, and room was freed: not parked
    (2, 2, False, False, (0, 2), True),  # room by count, but its attempt was 2 short (chips on the wrong rings)
    (2, 2, False, True, None, False),  # the same with a reservation kept in the cycle: shortfall not trusted,
    #                                    and the room it lacked may have been reserved: tried next cycle
    (1, 2, False, True, (1, None), True),  # short by the cache's count: parked even then
])
def test_the_gang_bound_owes_by_count_and_by_its_attempt(
        pods_in_room: int, short: int | None, freed_meanwhile: bool, kept: bool, owing: tuple[int, int] | None,
        parks: bool) -> None:
    """A 2-pod gang (1 CPU, 8 chips a pod) that found no room is parked owing pods by count (what it needs
    less what the cache's room holds when it parks) and by its attempt (its shortfall less what room freed
    after its snapshot holds — only when no reservation was kept in the cycle, which may have held the room
    it lacked: then only the count parks it)."""
    rooms = np.array([[1000] * pods_in_room + [0], [8] * pods_in_room + [8]], dtype=np.int64)  # resources × nodes
    parked = ParkedJobs(rooms=lambda: rooms)
    snapshot, status = _cycle_on(parked)
    if freed_meanwhile:
        parked.freed_on(0, np.array([1000, 8], dtype=np.int64), np.array([1000, 8], dtype=np.int64))  # mid-cycle
    unschedulable = {"ns/job": status}
    if kept:
        unschedulable["ns/other"] = Status(Code.WAIT, (Reason.of(ReasonCode.PIPELINED, pods=1),), "allocate")
    parked.park(snapshot, unschedulable, {"ns/job": short}, now=0.0)
    owed = parked.owed.get("ns/job")
    assert (None if owed is None else (owed.by_count, owed.by_attempt)) == owing
    assert ("ns/job" in parked.jobs) is parks


def test_room_freed_and_taken_again_does_not_release_a_gang() -> None:
    """Freed room is often taken at once by other jobs. Once freeings have paid what a gang owed by count, the
    count is checked against the cache's room when the next snapshot is taken: room taken again keeps it
    parked, owing the difference; room still there releases it."""
    rooms = np.array([[0, 0], [0, 0]], dtype=np.int64)  # (cpu, chips) × 2 nodes, both full
    parked = ParkedJobs(rooms=lambda: rooms)
    snapshot, status = _cycle_on(parked)
    parked.park(snapshot, {"ns/job": status}, {"ns/job": None}, now=0.0)
    assert parked.owed["ns/job"].by_count == 2
    whole = np.array([1000, 8], dtype=np.int64)
    for row in range(2):  # both servers come free, one after the other …
        parked.freed_on(row, whole.copy(), whole.copy())
    assert "ns/job" in parked.jobs and parked.check == {"ns/job"}
    rooms[:, 0] = whole  # … and another job took the second one again before the next snapshot
    assert "ns/job" in parked.for_snapshot()
    assert parked.owed["ns/job"].by_count == 1 and not parked.check
    parked.freed_on(1, whole.copy(), whole.copy())
    rooms[:, 1] = whole
    assert "ns/job" not in parked.for_snapshot()  # both free now: tried


def test_a_node_pays_what_a_gang_was_short_once_however_often_room_is_freed_there() -> None:
    """Room on one server freed again and again (small pods finishing there one after another, others taking
    their place) holds one more 8-chip pod at most: a gang whose attempt was two pods short is not owed
    nothing until a second server has room too."""
    rooms = np.array([[64000, 64000], [8, 8]], dtype=np.int64)  # by count there is room: the attempt decides
    parked = ParkedJobs(rooms=lambda: rooms)
    snapshot, status = _cycle_on(parked)
    parked.park(snapshot, {"ns/job": status}, {"ns/job": 2}, now=0.0)
    assert parked.owed["ns/job"].by_attempt == 2
    one = np.array([1000, 8], dtype=np.int64)
    for _ in range(5):
        parked.freed_on(0, one.copy(), np.array([1000, 1], dtype=np.int64))
    assert parked.owed["ns/job"].by_attempt == 1 and not parked.check
    parked.freed_on(1, one.copy(), np.array([1000, 1], dtype=np.int64))
    assert parked.check == {"ns/job"}
    assert "ns/job" not in parked.for_snapshot()
