"""The Volcano Job lifecycle: policy event → action pairs as a table, task-level policies before job-level,
the retry budget, and evicted pods coming back. Driven through the job controller on the embedded store."""

from __future__ import annotations

from typing import Any

import pytest

from hetsched.api.manifest import load_text
from hetsched.api.objects import AnyObject, ConfigMap, Job, Pod
from hetsched.cluster.memory import MemoryCluster
from hetsched.controllers.job import JobController
from hetsched.sim.kernel import SimClock

JOB = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: train, namespace: default}}
spec:
  minAvailable: 3
  maxRetry: {max_retry}
  policies: {job_policies}
  tasks:
  - name: master
    replicas: 1
    policies: {master_policies}
    template:
      spec:
        containers: [{{name: m, resources: {{requests: {{cpu: "1"}}}}}}]
  - name: worker
    replicas: 2
    template:
      spec:
        containers: [{{name: w, resources: {{requests: {{cpu: "1"}}}}}}]
"""


class World:
    def __init__(self, job_policies: list[dict[str, Any]] | None = None,
                 master_policies: list[dict[str, Any]] | None = None, max_retry: int = 3) -> None:
        self.clock = SimClock()
        self.cluster = MemoryCluster(self.clock)
        self.controller = JobController(self.cluster, self.clock)
        (job,) = load_text(JOB.format(job_policies=job_policies or [], master_policies=master_policies or [],
                                      max_retry=max_retry).replace("'", '"'))
        self.cluster.create(job)
        self.controller.process()
        self.cluster.update_podgroup_status("default/train", "Inqueue", None)
        self.controller.process()

    def job(self) -> Job:
        job = self.cluster.get("Job", "default/train")
        assert isinstance(job, Job)
        return job

    def pods(self) -> dict[str, Pod]:
        return {p.metadata.name: p for p in self.cluster.list("Pod") if isinstance(p, Pod)}

    def set_phase(self, name: str, phase: str) -> None:
        pod = self.pods()[name]
        self.cluster.update(pod.model_copy(update={"status": pod.status.model_copy(update={"phase": phase})}))
        self.controller.process()

    def run_all(self) -> None:
        for name in list(self.pods()):
            self.set_phase(name, "Running")

    def evict(self, name: str) -> None:
        self.cluster.evict(f"default/{name}", "test")
        self.controller.process()


@pytest.mark.parametrize(("event", "action", "phase", "pods_after", "retries"), [
    ("PodFailed", "RestartJob", "Pending", 3, 1),
    ("PodFailed", "AbortJob", "Aborted", 0, 0),
    ("PodFailed", "TerminateJob", "Terminated", 0, 0),
    ("PodFailed", "CompleteJob", "Completed", 0, 0),
    ("PodEvicted", "RestartJob", "Pending", 3, 1),
    ("PodEvicted", "AbortJob", "Aborted", 0, 0),
    ("Unknown", "RestartJob", "Pending", 3, 1),
    ("*", "TerminateJob", "Terminated", 0, 0),
    ("PodFailed", "RestartTask", "Pending", 3, 1),
    ("PodFailed", "RestartPod", "Pending", 3, 1),
    ("PodEvicted", "RestartTask", "Pending", 3, 1),
    ("PodEvicted", "CompleteJob", "Completed", 0, 0),
])
def test_job_policy_event_to_action(event: str, action: str, phase: str, pods_after: int, retries: int) -> None:
    world = World(job_policies=[{"event": event, "action": action}])
    world.run_all()
    assert world.job().status.state.phase == "Running"
    if event == "PodEvicted":
        world.evict("train-worker-1")
    else:
        world.set_phase("train-worker-1", "Unknown" if event == "Unknown" else "Failed")
    job = world.job()
    assert job.status.state.phase == phase
    assert len(world.pods()) == pods_after
    assert job.status.retryCount == retries
    restarted = {"RestartJob": {"train-master-0", "train-worker-0", "train-worker-1"},
                 "RestartTask": {"train-worker-0", "train-worker-1"},
                 "RestartPod": {"train-worker-1"}}.get(action, set())
    for name, pod in world.pods().items():
        assert pod.metadata.annotations["volcano.sh/job-version"] == ("1" if name in restarted else "0")


def test_task_completed_completes_the_job_and_stops_the_rest() -> None:
    world = World(master_policies=[{"event": "TaskCompleted", "action": "CompleteJob"}])
    world.run_all()
    world.set_phase("train-master-0", "Succeeded")
    assert world.job().status.state.phase == "Completed"
    assert world.pods() == {}


def test_task_policies_come_before_job_policies() -> None:
    """The master's own policy restarts only the master task; the job-level policy (abort) is not used."""
    world = World(job_policies=[{"event": "PodFailed", "action": "AbortJob"}],
                  master_policies=[{"event": "PodFailed", "action": "RestartTask"}])
    world.run_all()
    workers = {n: p.metadata.uid for n, p in world.pods().items() if "worker" in n}
    world.set_phase("train-master-0", "Failed")
    job = world.job()
    assert job.status.state.phase in ("Pending", "Running") and job.status.retryCount == 1
    pods = world.pods()
    assert pods["train-master-0"].status.phase == "Pending"  # created again
    assert {n: p.metadata.uid for n, p in pods.items() if "worker" in n} == workers  # untouched


def test_the_retry_budget_ends_in_failed_with_the_reason() -> None:
    world = World(job_policies=[{"event": "PodFailed", "action": "RestartJob"}], max_retry=2)
    for _ in range(2):
        world.run_all()
        world.set_phase("train-worker-0", "Failed")
        assert world.job().status.state.phase == "Pending"
    world.run_all()
    world.set_phase("train-worker-0", "Failed")
    job = world.job()
    assert job.status.state.phase == "Failed" and job.status.retryCount == 2
    assert job.status.state.reason == "MaxRetryExceeded" and "maxRetry 2" in job.status.state.message
    assert world.pods() == {}


def test_an_evicted_pod_without_a_policy_comes_back_and_the_job_keeps_running() -> None:
    world = World()
    world.run_all()
    old = world.pods()["train-worker-1"].metadata.uid
    world.evict("train-worker-1")
    pods = world.pods()
    assert pods["train-worker-1"].metadata.uid != old and pods["train-worker-1"].status.phase == "Pending"
    assert world.job().status.state.phase == "Running" and world.job().status.retryCount == 0


def test_a_failed_pod_without_a_policy_fails_the_job_when_all_have_finished() -> None:
    world = World()
    world.run_all()
    world.set_phase("train-worker-0", "Failed")
    world.set_phase("train-worker-1", "Succeeded")
    assert world.job().status.state.phase == "Running"
    world.set_phase("train-master-0", "Succeeded")
    job = world.job()
    assert job.status.state.phase == "Failed" and "2 of 3 pods succeeded, 3 needed" in job.status.state.message


def test_policies_with_unknown_events_or_actions_are_refused_by_name() -> None:
    from hetsched.api.manifest import ManifestError

    bad = JOB.format(job_policies='[{"event": "PodFailure", "action": "RestartJob"}, {"action": "AbortJob"}]',
                     master_policies="[]", max_retry=3)
    with pytest.raises(ManifestError) as info:
        load_text(bad)
    text = str(info.value)
    assert "spec.policies[0].event: Input should be '*', 'PodFailed'" in text and "got 'PodFailure'" in text
    assert "spec.policies[1]: a policy needs an event, events or an exitCode" in text


DEPENDS = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: mpi, namespace: default}
spec:
  minAvailable: 1
  plugins: {svc: [], ssh: []}
  ttlSecondsAfterFinished: 100
  tasks:
  - name: master
    replicas: 1
    template: {spec: {containers: [{name: m}]}}
  - name: worker
    replicas: 2
    dependsOn: {name: [master]}
    template: {spec: {containers: [{name: w}]}}
"""


def test_depends_on_waits_for_the_named_task_and_svc_hands_out_host_lists() -> None:
    clock = SimClock()
    cluster = MemoryCluster(clock)
    controller = JobController(cluster, clock, events=cluster)
    (job,) = load_text(DEPENDS)
    cluster.create(job)
    controller.process()
    cluster.update_podgroup_status("default/mpi", "Inqueue", None)
    controller.process()
    names = sorted(p.metadata.name for p in cluster.list("Pod"))
    assert names == ["mpi-master-0"]  # workers wait for the master
    master = cluster.get("Pod", "default/mpi-master-0")
    assert isinstance(master, Pod)
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in master.spec.containers[0].model_extra["env"]}  # type: ignore[index]
    assert env["VC_WORKER_HOSTS"] == {"configMapKeyRef": {"name": "mpi-svc", "key": "VC_WORKER_HOSTS"}}
    hosts = cluster.get("ConfigMap", "default/mpi-svc")
    assert isinstance(hosts, ConfigMap)
    assert hosts.data["VC_WORKER_HOSTS"] == "mpi-worker-0.mpi,mpi-worker-1.mpi" and hosts.data["VC_MASTER_NUM"] == "1"
    assert hosts.data["worker.host"] == "mpi-worker-0.mpi\nmpi-worker-1.mpi"
    assert master.spec.model_extra["hostname"] == "mpi-master-0"  # type: ignore[index]
    assert master.spec.model_extra["subdomain"] == "mpi"  # type: ignore[index]
    cluster.update(master.model_copy(update={"status": master.status.model_copy(update={"phase": "Running"})}))
    controller.process()
    assert sorted(p.metadata.name for p in cluster.list("Pod")) == ["mpi-master-0", "mpi-worker-0", "mpi-worker-1"]


def _admitted(text: str, *existing: AnyObject) -> tuple[MemoryCluster, JobController]:
    """An embedded cluster holding ``existing`` and the one Job in ``text``, its PodGroup admitted (Inqueue)
    and the controller run after each step."""
    clock = SimClock()
    cluster = MemoryCluster(clock)
    controller = JobController(cluster, clock, events=cluster)
    for obj in existing:
        cluster.create(obj)
    (job,) = load_text(text)
    cluster.create(job)
    controller.process()
    cluster.update_podgroup_status("default/mpi", "Inqueue", None)
    controller.process()
    return cluster, controller


def test_the_ssh_plugin_hands_every_pod_the_same_key_pair_and_host_list() -> None:
    import base64

    from cryptography.hazmat.primitives import serialization

    from hetsched.api.objects import Secret

    cluster, controller = _admitted(DEPENDS.replace("plugins: {svc: [], ssh: []}",
                                                    'plugins: {svc: [], ssh: ["--ssh-key-file-path=/home/mpi/.ssh"]}'))
    secret = cluster.get("Secret", "default/mpi-ssh")
    assert isinstance(secret, Secret)
    files = {name: base64.b64decode(value) for name, value in secret.data.items()}
    private = serialization.load_ssh_private_key(files["id_rsa"], password=None)
    public = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    assert files["authorized_keys"].strip() == files["id_rsa.pub"].strip() == public
    assert b"Host mpi-worker-1\n  HostName mpi-worker-1.mpi\n  Port 22\n" in files["config"]
    master = cluster.get("Pod", "default/mpi-master-0")
    assert isinstance(master, Pod)
    extra = master.spec.model_extra or {}
    assert {"name": "mpi-ssh", "secret": {"secretName": "mpi-ssh", "defaultMode": 0o600}} in extra["volumes"]
    mounts = master.spec.containers[0].model_extra["volumeMounts"]  # type: ignore[index]
    assert {"name": "mpi-ssh", "mountPath": "/home/mpi/.ssh", "readOnly": True} in mounts
    # a restart keeps the key: the other ranks must still trust the new pod
    cluster.evict("default/mpi-master-0", "test")
    controller.process()
    again = cluster.get("Secret", "default/mpi-ssh")
    assert isinstance(again, Secret) and again.data == secret.data
    bad = DEPENDS.replace("plugins: {svc: [], ssh: []}", 'plugins: {ssh: ["--no-root"]}')
    from hetsched.api.manifest import ManifestError

    with pytest.raises(ManifestError, match=r"plugins.ssh: unknown argument '--no-root' \(the plugin's flags: "):
        load_text(bad)


def test_the_ssh_plugin_neither_uses_nor_deletes_a_secret_it_does_not_own() -> None:
    """A ``<job>-ssh`` Secret made by someone else (its key could be an attacker's) is not mounted into the
    Job's pods: the Job waits, saying why; and deleting the Job leaves that Secret alone."""
    from hetsched.api.objects import Secret

    planted = Secret.model_validate({"metadata": {"name": "mpi-ssh", "namespace": "default"},
                                     "data": {"id_rsa": "YXR0YWNrZXI="}})
    cluster, controller = _admitted(DEPENDS, planted)
    stored = cluster.get("Job", "default/mpi")
    assert isinstance(stored, Job)
    assert stored.status.state.reason == "PodCreationFailed"
    assert "Secret default/mpi-ssh exists and was not created for Job mpi" in stored.status.state.message
    assert cluster.count("Pod") == 0
    cluster.delete("Job", "default/mpi")
    controller.process()
    kept = cluster.get("Secret", "default/mpi-ssh")
    assert isinstance(kept, Secret) and kept.data == planted.data


def test_ttl_after_finished_deletes_the_job_in_the_simulator() -> None:
    from hetsched.sim.simulator import Simulation
    from tests.builders import node

    text = DEPENDS.replace(
        "metadata: {name: mpi, namespace: default}",
        "metadata: {name: mpi, namespace: default, annotations: {hetsched.io/submit-at: '0'}}").replace(
        "template: {spec:", "template: {metadata: {annotations: {hetsched.io/duration: '50'}}, spec:")
    simulation = Simulation([node("n0", cpu="8")], load_text(text), None)
    results = simulation.run()
    assert results.jobs[0]["phase"] == "Completed"
    assert simulation.cluster.count("Job") == 0 and simulation.cluster.count("Pod") == 0
    assert simulation.cluster.count("Secret") == 0  # the ssh plugin's key pair went with the Job
    assert simulation.cluster.count("ConfigMap") == simulation.cluster.count("Service") == 0  # and svc's objects
    assert results.summary["simulatedSeconds"] >= 100


@pytest.mark.parametrize(("change", "message"), [
    ("dependsOn: {name: [master]}", "task worker: dependsOn names unknown task(s) chief"),
    ("plugins: {svc: [], ssh: []}", "plugins.horovod: unknown job plugin (Volcano's: env, svc, ssh, mpi"),
])
def test_depends_on_and_plugins_are_checked_by_name(change: str, message: str) -> None:
    from hetsched.api.manifest import ManifestError

    bad = DEPENDS.replace("dependsOn: {name: [master]}", "dependsOn: {name: [chief]}") if "depends" in change \
        else DEPENDS.replace("plugins: {svc: [], ssh: []}", "plugins: {svc: [], horovod: []}")
    with pytest.raises(ManifestError) as info:
        load_text(bad)
    assert message in str(info.value)
