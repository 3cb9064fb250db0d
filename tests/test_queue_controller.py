"""The Queue controller on the in-memory cluster: the ``default`` and ``root`` Queues exist after start (as
after Volcano's install), and each Queue's status counts its PodGroups by phase as they move, change queue
and go away. The same controller against a real kube-apiserver: ``tests/test_kubernetes.py``."""

from __future__ import annotations

import pytest

from hetsched.api.objects import Command, PodGroup, Queue
from hetsched.cluster.memory import MemoryCluster
from hetsched.controllers.job import JobController
from hetsched.controllers.queue import QueueController
from hetsched.sim.kernel import SimClock

pytestmark = pytest.mark.timeout(60)


def group(name: str, queue: str | None, phase: str = "Pending") -> PodGroup:
    spec = {"minMember": 1} | ({"queue": queue} if queue else {})
    return PodGroup.model_validate({"metadata": {"name": name, "namespace": "team"}, "spec": spec,
                                    "status": {"phase": phase}})


def status(cluster: MemoryCluster, name: str) -> tuple[int, int, int, int]:
    q = cluster.get("Queue", name)
    assert isinstance(q, Queue)
    return q.status.pending, q.status.inqueue, q.status.running, q.status.completed


def test_default_and_root_are_made_once_and_an_existing_one_is_left_as_it_is() -> None:
    cluster = MemoryCluster(SimClock())
    cluster.create(Queue.model_validate({"metadata": {"name": "default"}, "spec": {"weight": 7}}))
    controller = QueueController(cluster)
    controller.process()
    names = {q.metadata.name for q in cluster.list("Queue")}
    assert names == {"default", "root"}
    default = cluster.get("Queue", "default")
    assert isinstance(default, Queue) and default.spec.weight == 7  # the operator's queue, untouched
    cluster.delete("Queue", "root")
    controller.process()  # made at start only: an operator may delete root on purpose
    assert {q.metadata.name for q in cluster.list("Queue")} == {"default"}


def test_status_counts_follow_podgroups_through_phases_queue_moves_and_deletion() -> None:
    cluster = MemoryCluster(SimClock())
    controller = QueueController(cluster)
    cluster.create(Queue.model_validate({"metadata": {"name": "research"}}))
    cluster.create(group("a", None))
    cluster.create(group("b", "research"))
    cluster.create(group("c", "research", "Running"))
    controller.process()
    assert status(cluster, "default") == (1, 0, 0, 0)  # a PodGroup without a queue is counted in default
    assert status(cluster, "research") == (1, 0, 1, 0)

    b = cluster.get("PodGroup", "team/b")
    assert isinstance(b, PodGroup)
    cluster.update(b.model_copy(update={"status": b.status.model_copy(update={"phase": "Inqueue"})}))
    c = cluster.get("PodGroup", "team/c")
    assert isinstance(c, PodGroup)
    cluster.update(c.model_copy(update={"spec": c.spec.model_copy(update={"queue": "default"}),
                                        "status": c.status.model_copy(update={"phase": "Completed"})}))
    controller.process()
    assert status(cluster, "research") == (0, 1, 0, 0)
    assert status(cluster, "default") == (1, 0, 0, 1)

    cluster.delete("PodGroup", "team/a")
    cluster.delete("PodGroup", "team/c")
    controller.process()
    assert status(cluster, "default") == (0, 0, 0, 0)
    assert controller.process() == 0  # nothing changed: nothing synced, nothing written


def command(cluster: MemoryCluster, action: str, queue: str, namespace: str = "default", name: str = "") -> None:
    cluster.create(Command.model_validate({
        "metadata": {"name": name or f"{queue}-{action.lower()}", "namespace": namespace}, "action": action,
        "target": {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "name": queue}}))


def test_close_and_open_commands_set_the_state_closing_until_the_last_podgroup_finishes() -> None:
    cluster = MemoryCluster(SimClock())
    controller = QueueController(cluster, events=cluster)
    cluster.create(Queue.model_validate({"metadata": {"name": "research"}}))
    cluster.create(group("running", "research", "Running"))
    controller.process()
    jobs = JobController(cluster, SimClock(), events=cluster)  # Job Commands are its; a Queue's are not
    command(cluster, "CloseQueue", "research")
    jobs.process()
    assert len(cluster.list("Command")) == 1
    controller.process()
    research = cluster.get("Queue", "research")
    assert isinstance(research, Queue) and research.status.state == "Closing"  # its job runs on
    assert not cluster.list("Command")  # one-shot: deleted once applied
    running = cluster.get("PodGroup", "team/running")
    assert isinstance(running, PodGroup)
    cluster.update(running.model_copy(update={"status": running.status.model_copy(update={"phase": "Completed"})}))
    controller.process()
    research = cluster.get("Queue", "research")
    assert isinstance(research, Queue) and research.status.state == "Closed"
    command(cluster, "OpenQueue", "research")
    controller.process()
    research = cluster.get("Queue", "research")
    assert isinstance(research, Queue) and research.status.state == "Open"
    assert [e.reason for e in cluster.events] == ["CloseQueue", "OpenQueue"]


def test_a_queue_command_outside_the_admin_namespace_or_for_a_missing_queue_is_refused() -> None:
    """A tenant who may create Commands in its own namespace cannot close a queue other teams share."""
    cluster = MemoryCluster(SimClock())
    controller = QueueController(cluster, events=cluster)
    controller.process()
    command(cluster, "CloseQueue", "default", namespace="team-a")
    command(cluster, "CloseQueue", "nope")
    controller.process()
    default = cluster.get("Queue", "default")
    assert isinstance(default, Queue) and default.status.state == "Open"
    assert not cluster.list("Command")
    said = {(e.reason, e.key) for e in cluster.events}
    assert ("CommandRefused", "team-a/default-closequeue") in said
    assert ("CommandFailed", "default/nope-closequeue") in said


def test_a_command_whose_action_does_not_fit_its_target_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"action CloseQueue acts on a Queue, but target\.kind is Job"):
        Command.model_validate({"metadata": {"name": "x", "namespace": "default"}, "action": "CloseQueue",
                                "target": {"kind": "Job", "name": "train"}})
    with pytest.raises(ValueError, match=r"action AbortJob acts on a Job, but target\.kind is Queue"):
        Command.model_validate({"metadata": {"name": "x", "namespace": "default"}, "action": "AbortJob",
                                "target": {"kind": "Queue", "name": "default"}})
