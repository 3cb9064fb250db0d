"""The Job controller: PodGroup from the Job, pods only after admission, names/annotations/env, phases."""

from __future__ import annotations

from hetsched.api.manifest import load_text
from hetsched.api.objects import Job, Pod, PodGroup
from hetsched.cluster.memory import MemoryCluster
from hetsched.controllers.job import JobController
from hetsched.sim.kernel import SimClock
from tests.builders import priority_class

JOB = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: mpi, namespace: team-a}
spec:
  minAvailable: 3
  queue: training
  priorityClassName: high
  tasks:
  - name: master
    replicas: 1
    minAvailable: 1
    template:
      spec:
        containers: [{name: m, resources: {requests: {cpu: "2"}}}]
  - name: worker
    replicas: 4
    topologyPolicy: single-numa-node
    template:
      spec:
        containers:
        - name: w
          env: [{name: A, value: "1"}]
          resources: {limits: {huawei.com/Ascend910: 8}, requests: {cpu: "1"}}
"""


def setup(with_class: bool = True) -> tuple[MemoryCluster, JobController, SimClock]:
    clock = SimClock()
    cluster = MemoryCluster(clock)
    if with_class:
        cluster.create(priority_class("high", 100))
    controller = JobController(cluster, clock)
    (job,) = load_text(JOB)
    cluster.create(job)
    controller.process()
    return cluster, controller, clock


def set_phase(cluster: MemoryCluster, key: str, phase: str) -> None:
    pod = cluster.get("Pod", key)
    assert isinstance(pod, Pod)
    cluster.update(pod.model_copy(update={"status": pod.status.model_copy(update={"phase": phase})}))


def test_podgroup_first_and_no_pods_until_inqueue() -> None:
    cluster, _, _ = setup()
    group = cluster.get("PodGroup", "team-a/mpi")
    assert isinstance(group, PodGroup)
    assert group.spec.minMember == 3 and group.spec.queue == "training" and group.spec.priorityClassName == "high"
    assert group.spec.minTaskMember == {"master": 1}
    assert group.spec.minResources == {"cpu": 4000, "huawei.com/Ascend910": 16000}  # master + 2 workers
    assert cluster.count("Pod") == 0


def test_pods_created_once_admitted_with_volcano_names_annotations_and_env() -> None:
    cluster, controller, _ = setup()
    cluster.update_podgroup_status("team-a/mpi", "Inqueue", None)
    controller.process()
    names = sorted(p.metadata.name for p in cluster.list("Pod"))
    assert names == ["mpi-master-0", "mpi-worker-0", "mpi-worker-1", "mpi-worker-2", "mpi-worker-3"]
    worker = cluster.get("Pod", "team-a/mpi-worker-2")
    assert isinstance(worker, Pod)
    assert worker.metadata.annotations["scheduling.k8s.io/group-name"] == "mpi"
    assert worker.metadata.annotations["volcano.sh/task-spec"] == "worker"
    assert worker.metadata.annotations["volcano.sh/task-index"] == "2"
    assert worker.metadata.annotations["volcano.sh/numa-topology-policy"] == "single-numa-node"
    master = cluster.get("Pod", "team-a/mpi-master-0")
    assert isinstance(master, Pod) and "volcano.sh/numa-topology-policy" not in master.metadata.annotations
    env = {e["name"]: e["value"] for e in worker.spec.containers[0].model_extra["env"]}  # type: ignore[index]
    assert env == {"A": "1", "VC_TASK_INDEX": "2", "VK_TASK_INDEX": "2"}
    assert worker.spec.schedulerName == "volcano" and worker.spec.priorityClassName == "high"
    assert worker.metadata.ownerReferences[0].kind == "Job"


def test_phases_pending_running_completed() -> None:
    cluster, controller, clock = setup()
    cluster.update_podgroup_status("team-a/mpi", "Inqueue", None)
    controller.process()
    for name in ("mpi-master-0", "mpi-worker-0", "mpi-worker-1"):
        set_phase(cluster, f"team-a/{name}", "Running")
    controller.process()
    job = cluster.get("Job", "team-a/mpi")
    assert isinstance(job, Job) and job.status.state.phase == "Running" and job.status.running == 3
    clock.advance_to(100)
    for pod in cluster.list("Pod"):
        set_phase(cluster, f"team-a/{pod.metadata.name}", "Succeeded")
    controller.process()
    job = cluster.get("Job", "team-a/mpi")
    assert isinstance(job, Job) and job.status.state.phase == "Completed" and job.status.succeeded == 5
    group = cluster.get("PodGroup", "team-a/mpi")
    assert isinstance(group, PodGroup) and group.status.phase == "Completed"


def test_too_many_failures_fail_the_job() -> None:
    cluster, controller, _ = setup()
    cluster.update_podgroup_status("team-a/mpi", "Inqueue", None)
    controller.process()
    pods = sorted(p.metadata.name for p in cluster.list("Pod"))
    for name in pods[:2]:
        set_phase(cluster, f"team-a/{name}", "Running")
    for name in pods[2:]:
        set_phase(cluster, f"team-a/{name}", "Failed")
    controller.process()
    for name in pods[:2]:
        set_phase(cluster, f"team-a/{name}", "Succeeded")
    controller.process()
    job = cluster.get("Job", "team-a/mpi")
    assert isinstance(job, Job) and job.status.state.phase == "Failed"


def test_missing_priority_class_is_reported_on_the_job_not_a_crash() -> None:
    cluster, controller, _ = setup(with_class=False)
    cluster.update_podgroup_status("team-a/mpi", "Inqueue", None)
    controller.process()
    job = cluster.get("Job", "team-a/mpi")
    assert isinstance(job, Job) and job.status.state.phase == "Pending"
    assert job.status.state.reason == "PodCreationFailed"
    assert "no PriorityClass with name high" in job.status.state.message
    cluster.create(priority_class("high", 100))
    cluster.update(job)  # any change to the Job retries
    controller.process()
    assert cluster.count("Pod") == 5


def test_a_controller_restarted_while_a_job_restarts_finishes_the_restart() -> None:
    """A RestartJob half done — the Job already Restarting, its old pods still there (the controller that
    began it died before deleting them: a lost Lease, a node drain) — is finished by the next controller: it
    deletes the old pods and creates the next version's, instead of waiting forever for pods nobody
    deletes (seen on real kubelets under load)."""
    cluster, _, clock = setup()
    cluster.update_podgroup_status("team-a/mpi", "Inqueue", None)
    JobController(cluster, clock).process()
    job = cluster.get("Job", "team-a/mpi")
    assert isinstance(job, Job)
    state = job.status.state.model_copy(update={"phase": "Restarting", "reason": "RestartJob"})
    cluster.update(job.model_copy(update={"status": job.status.model_copy(update={"state": state, "retryCount": 1})}))
    old = {p.metadata.uid for p in cluster.list("Pod")}
    assert len(old) == 5
    fresh = JobController(cluster, clock)  # the next leader: nothing in memory about the restart under way
    for _ in range(3):
        fresh.process()
    job = cluster.get("Job", "team-a/mpi")
    assert isinstance(job, Job) and job.status.state.phase == "Pending"
    pods = cluster.list("Pod")
    assert len(pods) == 5 and not old & {p.metadata.uid for p in pods}  # all new
    assert {p.metadata.annotations["volcano.sh/job-version"] for p in pods} == {"1"}
