"""Parked jobs (``scheduler.cache.parked``): a gang that found no room is not tried again until something
could have made room — a pod that held room leaving, a node changing, the job itself changing — and while
parked its condition stays as it was. Checked on the embedded store through the real scheduler loop."""

from __future__ import annotations

from typing import Any

import pytest

from hetsched.scheduler.engine.actions import allocate
from tests.builders import gang, harness, node, pod, running_on


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
