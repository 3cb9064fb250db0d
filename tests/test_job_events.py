"""The rest of Volcano's event → action table: exit codes, TaskFailed, PodPending and policy timeouts,
internal and outdated events, Commands (abort, resume, restart, terminate, complete) and Job updates
(scaling, JobUpdated). Driven through the job controller on the embedded store, and end to end in the
simulator where the simulated kubelet produces exit codes and in-place restarts."""

from __future__ import annotations

from typing import Any

import pytest

from hetsched.api.manifest import ManifestError, load_text
from hetsched.api.objects import (
    Command,
    ContainerState,
    ContainerStateTerminated,
    ContainerStatus,
    Job,
    PodGroup,
)
from hetsched.controllers.lifecycle import Event, decide
from tests.test_job_lifecycle import JOB, World


def fail(world: World, name: str, code: int) -> None:
    pod = world.pods()[name]
    status = ContainerStatus(name="w", state=ContainerState(terminated=ContainerStateTerminated(exitCode=code)))
    world.cluster.update(pod.model_copy(update={"status": pod.status.model_copy(
        update={"phase": "Failed", "containerStatuses": [status]})}))
    world.controller.process()


def restarted_in_place(world: World, name: str, restarts: int) -> None:
    pod = world.pods()[name]
    status = ContainerStatus(name="w", restartCount=restarts, state=ContainerState(running={}))
    world.cluster.update(pod.model_copy(update={"status": pod.status.model_copy(
        update={"containerStatuses": [status]})}))
    world.controller.process()


def later(world: World, seconds: float) -> None:
    world.clock.advance_to(world.clock.now() + seconds)
    world.controller.wake()
    world.controller.process()


def command(world: World, action: str, target: str = "train", name: str = "cmd") -> None:
    world.cluster.create(Command.model_validate({"metadata": {"name": name, "namespace": "default"},
                                                 "action": action, "target": {"kind": "Job", "name": target}}))
    world.controller.process()


def admit(world: World) -> None:
    """The scheduler's enqueue: the PodGroup leaves Pending, the controller creates the pods."""
    group = world.cluster.get("PodGroup", "default/train")
    assert isinstance(group, PodGroup)
    if group.status.phase == "Pending":
        world.cluster.update_podgroup_status("default/train", "Inqueue", None)
        world.controller.process()


@pytest.mark.parametrize(("code", "phase", "retries"), [
    (137, "Pending", 1),    # exitCode 137 → RestartJob
    (1, "Aborted", 0),      # exitCode 1 → AbortJob
    (2, "Running", 0),      # no policy for 2: the pod stays failed, the job runs on
])
def test_exit_code_policies(code: int, phase: str, retries: int) -> None:
    world = World(job_policies=[{"exitCode": 137, "action": "RestartJob"}, {"exitCode": 1, "action": "AbortJob"}])
    world.run_all()
    fail(world, "train-worker-0", code)
    job = world.job()
    assert (job.status.state.phase, job.status.retryCount) == (phase, retries)


def test_task_failed_after_more_in_place_restarts_than_the_task_allows() -> None:
    world = World(master_policies=[{"event": "TaskFailed", "action": "AbortJob"}])
    world.run_all()
    restarted_in_place(world, "train-master-0", 3)  # the default maxRetry is 3: not yet
    assert world.job().status.state.phase == "Running"
    restarted_in_place(world, "train-master-0", 4)
    assert world.job().status.state.phase == "Aborted"


def test_pod_pending_fires_only_after_its_timeout_and_only_if_still_pending() -> None:
    world = World(job_policies=[{"event": "PodPending", "action": "RestartJob", "timeout": "1m"}])
    later(world, 59)
    assert world.job().status.retryCount == 0
    later(world, 1)
    job = world.job()
    assert job.status.retryCount == 1 and job.status.state.reason == "RestartJob"

    running = World(job_policies=[{"event": "PodPending", "action": "RestartJob", "timeout": "1m"}])
    running.run_all()
    later(running, 120)
    assert running.job().status.retryCount == 0 and running.job().status.state.phase == "Running"


def test_pod_pending_without_a_timeout_never_fires() -> None:
    world = World(job_policies=[{"event": "PodPending", "action": "AbortJob"}])
    later(world, 3600)
    assert world.job().status.state.phase == "Pending"


def test_a_timeout_delays_the_action_and_a_restart_meanwhile_cancels_it() -> None:
    world = World(job_policies=[{"event": "PodFailed", "action": "AbortJob", "timeout": "30s"},
                                {"event": "PodEvicted", "action": "RestartJob"}])
    world.run_all()
    world.set_phase("train-worker-0", "Failed")
    assert world.job().status.state.phase == "Running"
    later(world, 30)
    assert world.job().status.state.phase == "Aborted"

    cancelled = World(job_policies=[{"event": "PodFailed", "action": "AbortJob", "timeout": "30s"},
                                    {"event": "PodEvicted", "action": "RestartJob"}])
    cancelled.run_all()
    cancelled.set_phase("train-worker-0", "Failed")
    cancelled.evict("train-worker-1")  # restarts the job: the delayed abort belongs to the old version
    later(cancelled, 30)
    assert cancelled.job().status.state.phase == "Pending" and cancelled.job().status.retryCount == 1


def test_internal_events_fire_no_policy() -> None:
    world = World(job_policies=[{"events": ["PodRunning", "OutOfSync", "CommandIssued"], "action": "AbortJob"}])
    world.run_all()
    assert world.job().status.state.phase == "Running"


def test_events_from_an_older_job_version_fire_nothing() -> None:
    world = World(job_policies=[{"event": "PodFailed", "action": "RestartJob"}])
    job = world.job()
    restarted = job.model_copy(update={"status": job.status.model_copy(update={"retryCount": 2})})
    assert decide(restarted, [Event("PodFailed", "worker", "train-worker-0", version=1)], 0.0) == (None, [])
    action, _ = decide(restarted, [Event("PodFailed", "worker", "train-worker-0", version=2)], 0.0)
    assert action is not None and action[0] == "RestartJob"


@pytest.mark.parametrize(("action", "phase", "pods"), [
    ("AbortJob", "Aborted", 0),
    ("TerminateJob", "Terminated", 0),
    ("CompleteJob", "Completed", 0),
    ("RestartJob", "Pending", 3),
])
def test_commands_apply_their_action_and_are_deleted(action: str, phase: str, pods: int) -> None:
    world = World(job_policies=[{"event": "*", "action": "AbortJob"}])  # a Command needs no policy
    world.run_all()
    command(world, action)
    job = world.job()
    assert job.status.state.phase == phase and len(world.pods()) == pods
    assert job.status.retryCount == (1 if action == "RestartJob" else 0)
    assert world.cluster.count("Command") == 0


def test_suspend_and_resume_through_commands() -> None:
    world = World(max_retry=1)
    world.run_all()
    command(world, "AbortJob")
    assert world.job().status.state.phase == "Aborted" and world.pods() == {}
    group = world.cluster.get("PodGroup", "default/train")
    assert isinstance(group, PodGroup) and group.status.phase == "Completed"  # the scheduler forgets it
    command(world, "ResumeJob", name="resume")
    job = world.job()
    assert job.status.state.phase == "Pending" and job.status.retryCount == 1
    group = world.cluster.get("PodGroup", "default/train")
    assert isinstance(group, PodGroup) and group.status.phase == "Pending"  # to be admitted again
    admit(world)
    world.run_all()
    assert world.job().status.state.phase == "Running" and len(world.pods()) == 3
    command(world, "AbortJob", name="again")
    command(world, "ResumeJob", name="resume-again")  # maxRetry 1 is spent
    job = world.job()
    assert job.status.state.phase == "Failed" and job.status.state.reason == "MaxRetryExceeded"


def test_a_command_for_a_missing_job_is_reported_and_removed() -> None:
    world = World()
    world.controller.events = world.cluster
    command(world, "AbortJob", target="nope")
    assert world.cluster.count("Command") == 0 and world.job().status.state.phase == "Pending"
    assert any(e.reason == "CommandFailed" and "default/nope" in e.message for e in world.cluster.events)


def _scaled(world: World, workers: int, min_available: int = 3) -> None:
    job = world.job()
    tasks = [t.model_copy(update={"replicas": workers}) if t.name == "worker" else t for t in job.spec.tasks]
    spec = job.spec.model_copy(update={"tasks": tasks, "minAvailable": min_available})
    world.cluster.update(job.model_copy(update={"spec": spec}))
    world.controller.process()


def test_scaling_a_job_creates_or_deletes_pods_and_resizes_its_podgroup() -> None:
    world = World()
    world.run_all()
    _scaled(world, 4, min_available=5)
    assert sorted(world.pods()) == ["train-master-0", *(f"train-worker-{i}" for i in range(4))]
    group = world.cluster.get("PodGroup", "default/train")
    assert isinstance(group, PodGroup) and group.spec.minMember == 5
    assert group.spec.minResources["cpu"] == 5000
    _scaled(world, 1, min_available=2)
    assert sorted(world.pods()) == ["train-master-0", "train-worker-0"]
    job = world.job()
    assert job.status.retryCount == 0 and job.status.state.phase == "Running"  # scaling is not an eviction


def test_job_updated_policy() -> None:
    world = World(job_policies=[{"event": "JobUpdated", "action": "RestartJob"}])
    world.run_all()
    _scaled(world, 3, min_available=4)
    job = world.job()
    assert job.status.retryCount == 1 and job.status.state.reason == "RestartJob"


@pytest.mark.parametrize(("policy", "message"), [
    ({"exitCode": 0, "action": "RestartJob"}, "exitCode 0 is not an error code"),
    ({"event": "PodPending", "action": "RestartJob", "timeout": "ten minutes"}, "timeout 'ten minutes'"),
])
def test_bad_policies_are_refused(policy: dict[str, Any], message: str) -> None:
    bad = JOB.format(job_policies=[policy], master_policies=[], max_retry=3).replace("'", '"')
    with pytest.raises(ManifestError) as info:
        load_text(bad)
    assert message in str(info.value) and "spec.policies[0]" in str(info.value)


SIM_JOB = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: train, namespace: default, annotations: {{hetsched.io/submit-at: "{at}"}}}}
spec:
  minAvailable: 2
  policies: {policies}
  tasks:
  - name: worker
    replicas: {replicas}
    template:
      metadata: {{annotations: {{hetsched.io/duration: "100", hetsched.io/exit-code: "{codes}"}}}}
      spec:
        restartPolicy: {restart}
        containers: [{{name: w, resources: {{requests: {{cpu: "1"}}}}}}]
"""


def _simulate(text: str) -> tuple[dict[str, Any], Job | None]:
    from hetsched.sim.simulator import Simulation
    from tests.builders import node

    simulation = Simulation([node("n0", cpu="8")], load_text(text), None)
    results = simulation.run()
    job = next((j for j in simulation.cluster.list("Job") if isinstance(j, Job)), None)
    return results.jobs[0], job


def test_simulated_exit_codes_drive_the_policies_end_to_end() -> None:
    text = SIM_JOB.format(at=0, policies='[{exitCode: 3, action: RestartJob}]', replicas=2, codes="3,0",
                          restart="Never")
    record, job = _simulate(text)
    assert record["phase"] == "Completed" and record["retryCount"] == 1
    assert job is not None and job.status.succeeded == 2


def test_simulated_in_place_restarts_raise_task_failed() -> None:
    text = SIM_JOB.format(at=0, policies='[{event: TaskFailed, action: AbortJob}]', replicas=2, codes="1",
                          restart="OnFailure")
    record, job = _simulate(text)
    assert record["phase"] == "Aborted" and job is not None
    assert job.status.state.reason == "AbortJob"


def test_a_workload_listing_a_job_again_scales_it_and_bad_updates_are_refused() -> None:
    first = SIM_JOB.format(at=0, policies="[]", replicas=2, codes="0", restart="Never")
    second = SIM_JOB.format(at=50, policies="[]", replicas=4, codes="0", restart="Never")
    record, job = _simulate(first + "---" + second)
    assert record["phase"] == "Completed" and job is not None and job.status.succeeded == 4
    bad = second.replace("minAvailable: 2", "minAvailable: 2\n  queue: other")
    with pytest.raises(ManifestError) as info:
        _simulate(first + "---" + bad + "---\napiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
                  "metadata: {name: other}\n")
    assert "spec.queue: may not change once the Job exists" in str(info.value)


def test_bad_exit_code_annotation_is_refused_before_the_run() -> None:
    text = SIM_JOB.format(at=0, policies="[]", replicas=2, codes="oops", restart="Never")
    with pytest.raises(ManifestError) as info:
        _simulate(text)
    assert 'hetsched.io/exit-code"]: must be exit codes 0–255' in str(info.value)


EVENTS = ["PodFailed", "PodEvicted", "Unknown", "TaskCompleted", "TaskFailed", "PodPending", "JobUpdated", "*"]
ACTIONS = ["AbortJob", "TerminateJob", "CompleteJob", "RestartJob", "RestartTask", "RestartPod"]
ALL = {"train-master-0", "train-worker-0", "train-worker-1"}


def _trigger(world: World, event: str) -> None:
    """Make ``event`` happen to the running job (worker-1 is the pod concerned where there is one)."""
    if event in ("PodFailed", "*"):
        world.set_phase("train-worker-1", "Failed")
    elif event == "PodEvicted":
        world.evict("train-worker-1")
    elif event == "Unknown":
        world.set_phase("train-worker-1", "Unknown")
    elif event == "TaskCompleted":
        world.set_phase("train-master-0", "Succeeded")
    elif event == "TaskFailed":
        restarted_in_place(world, "train-worker-1", 4)
    elif event == "PodPending":
        later(world, 60)
    elif event == "JobUpdated":
        _scaled(world, 2, min_available=2)


def _restarted(event: str, action: str) -> set[str]:
    """The pods an action recreates (job version 1) for an event."""
    if action == "RestartJob":
        return ALL
    task = {"TaskCompleted": "master", "JobUpdated": ""}.get(event, "worker")
    pod = "train-worker-1" if event in ("PodFailed", "PodEvicted", "Unknown", "PodPending", "*") else ""
    if action == "RestartTask":
        return {n for n in ALL if f"-{task}-" in n} if task else ALL
    return {pod} if pod else ALL


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("event", EVENTS)
def test_every_event_action_pair(event: str, action: str) -> None:
    """Volcano's table, every event against every action: the job ends where the action says (Aborted,
    Terminated, Completed with no pod left; a restart recreates exactly the job, task or pod concerned as
    the next job version and counts one retry)."""
    policy: dict[str, Any] = {"event": event, "action": action}
    if event == "PodPending":
        policy["timeout"] = "1m"
    world = World(job_policies=[policy])
    if event == "PodPending":
        for name in ("train-master-0", "train-worker-0"):  # worker-1 stays pending
            world.set_phase(name, "Running")
    else:
        world.run_all()
        assert world.job().status.state.phase == "Running"
    _trigger(world, event)
    job = world.job()
    if action in ("AbortJob", "TerminateJob", "CompleteJob"):
        finished = {"AbortJob": "Aborted", "TerminateJob": "Terminated", "CompleteJob": "Completed"}[action]
        assert (job.status.state.phase, job.status.retryCount, world.pods()) == (finished, 0, {})
        return
    assert job.status.retryCount == 1 and job.status.state.reason == action
    versions = {n: p.metadata.annotations["volcano.sh/job-version"] for n, p in world.pods().items()}
    assert set(versions) == ALL  # every task index exists again
    assert {n for n, v in versions.items() if v == "1"} == _restarted(event, action)


def test_suspend_and_resume_in_a_simulation() -> None:
    """Commands in a workload file: the job is suspended at t=100 (its chips are freed) and resumed at
    t=200; the scheduler admits it again and it runs its whole duration (no checkpoints) to completion."""
    commands = """
---
apiVersion: bus.volcano.sh/v1alpha1
kind: Command
metadata: {name: suspend, namespace: default, annotations: {hetsched.io/submit-at: "100"}}
action: AbortJob
target: {kind: Job, name: train}
---
apiVersion: bus.volcano.sh/v1alpha1
kind: Command
metadata: {name: resume, namespace: default, annotations: {hetsched.io/submit-at: "200"}}
action: ResumeJob
target: {kind: Job, name: train}
"""
    text = SIM_JOB.format(at=0, policies="[]", replicas=2, codes="0", restart="Never")
    record, job = _simulate(text + commands)
    assert record["phase"] == "Completed" and record["retryCount"] == 1
    assert job is not None and job.status.succeeded == 2
    assert min(p["end"] for p in record["pods"]) >= 200 + 100
