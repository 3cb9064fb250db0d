"""Volcano's job plugins as the job controller runs them (``controllers.jobplugins``, ``api.job_plugins``).

Each case is translated from Volcano's own tests (volcano-sh/volcano, ``pkg/controllers/job/plugins/``):
the file and test are named in each docstring. The pods are made by the real job controller on the embedded
cluster, so what is checked is what a kubelet would be handed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hetsched.api.job_plugins import effective, parse
from hetsched.api.manifest import ManifestError, load_text
from hetsched.api.objects import AnyObject, ConfigMap, Job, NetworkPolicy, Pod, Service
from hetsched.cluster.memory import MemoryCluster
from hetsched.controllers.job import JobController
from hetsched.sim.kernel import SimClock

pytestmark = pytest.mark.timeout(120)


def job_text(name: str, plugins: str, *tasks: tuple[str, int], template: str = "") -> str:
    """A Job ``name`` with ``plugins`` (flow YAML) and one task per (name, replicas), each with one
    container named after its task."""
    lines = ["apiVersion: batch.volcano.sh/v1alpha1", "kind: Job", f"metadata: {{name: {name}, namespace: default}}",
             "spec:", "  minAvailable: 1", f"  plugins: {plugins}", "  tasks:"]
    for task, replicas in tasks:
        lines += [f"  - name: {task}", f"    replicas: {replicas}",
                  f"    template: {{spec: {{{template}containers: [{{name: {task}, image: busybox}}]}}}}"]
    return "\n".join(lines) + "\n"


def run(text: str, *existing: AnyObject) -> tuple[MemoryCluster, JobController, dict[str, Pod]]:
    """The Job admitted (its PodGroup Inqueue), beside ``existing``, and its pods made by the controller,
    by name."""
    clock = SimClock()
    cluster = MemoryCluster(clock)
    controller = JobController(cluster, clock, events=cluster)
    for obj in existing:
        cluster.create(obj)
    (job,) = load_text(text)
    cluster.create(job)
    controller.process()
    name = job.metadata.name
    cluster.update_podgroup_status(f"default/{name}", "Inqueue", None)
    controller.process()
    return cluster, controller, {p.metadata.name: p for p in cluster.list("Pod") if isinstance(p, Pod)}


def env(pod: Pod, container: int = 0, init: bool = False) -> dict[str, Any]:
    extra = pod.spec.initContainers[container] if init else pod.spec.containers[container]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in (extra.model_extra or {}).get("env", [])}


def ports(pod: Pod, container: int = 0) -> list[tuple[str, int]]:
    return [(p.model_extra.get("name", "") if p.model_extra else "", p.containerPort)
            for p in pod.spec.containers[container].ports]


# ------------------------------------------------------------------------------------------------- pytorch

def test_pytorch_hands_every_pod_the_rendezvous_and_its_rank() -> None:
    """``pytorch/pytorch_test.go`` TestPytorchPodEnvAndPort ("test master pod env", "test worker-1 pod env",
    "test master pod with port"): MASTER_ADDR is the master's first pod's DNS name, WORLD_SIZE counts the
    master and worker tasks only, RANK 0 for the master and index + 1 for the workers; the port is opened
    once, named ``pytorchjob-port``."""
    text = job_text("test-pytorch", "{pytorch: []}", ("master", 1), ("worker", 2), ("extra", 1))
    _, _, pods = run(text)
    master, worker0, worker1, extra = (pods[f"test-pytorch-{n}"] for n in ("master-0", "worker-0", "worker-1",
                                                                              "extra-0"))
    rendezvous = {"MASTER_ADDR": "test-pytorch-master-0.test-pytorch", "MASTER_PORT": "23456", "WORLD_SIZE": "3"}
    assert env(master).items() >= {**rendezvous, "RANK": "0"}.items()
    assert env(worker0).items() >= {**rendezvous, "RANK": "1"}.items()
    assert env(worker1)["RANK"] == "2"
    assert env(extra).items() >= rendezvous.items() and "RANK" not in env(extra)
    assert ports(master) == [("pytorchjob-port", 23456)]
    assert not master.spec.initContainers and not worker0.spec.initContainers  # wait-master is off by default
    # the template already opens the port: not twice
    opened = text.replace("containers: [{name: master, image: busybox}]",
                          "containers: [{name: master, image: busybox, ports: [{containerPort: 5000}]}]")
    _, _, pods = run(opened.replace("{pytorch: []}", '{pytorch: ["--port=5000"]}'))
    assert [p for _, p in ports(pods["test-pytorch-master-0"])] == [5000]
    assert env(pods["test-pytorch-worker-0"])["MASTER_PORT"] == "5000"


def test_pytorch_wait_for_master_init_container_only_on_workers() -> None:
    """Volcano's pytorch plugin guide (``--wait-master-enabled``): the workers wait for the master's port."""
    text = job_text("pt", '{pytorch: ["--wait-master-enabled", "--wait-master-timeout=600", '
                    '"--wait-master-image=busybox:1.36.1"]}', ("master", 1), ("worker", 1))
    _, _, pods = run(text)
    assert not pods["pt-master-0"].spec.initContainers
    (wait,) = pods["pt-worker-0"].spec.initContainers
    assert wait.name == "wait-for-master" and (wait.model_extra or {})["image"] == "busybox:1.36.1"
    script = (wait.model_extra or {})["command"][2]
    assert "nc -z pt-master-0.pt 23456" in script and "-ge 600" in script


def test_pytorch_without_its_master_task_is_refused_not_silently_ignored() -> None:
    """``pytorch_test.go`` "test pod without master": Volcano's plugin then does nothing; hetsched refuses
    the Job at admission, naming the task and the argument that names it."""
    with pytest.raises(ManifestError, match=r"plugins.pytorch: the master task 'master' is not one of the job's "
                                            r"tasks \(worker\); name it with --master=<task>"):
        load_text(job_text("p", "{pytorch: []}", ("worker", 2)))
    load_text(job_text("p", '{pytorch: ["--master=chief"]}', ("chief", 1), ("worker", 2)))


# ----------------------------------------------------------------------------------------------------- mpi

def test_mpi_master_gets_the_worker_hosts_and_every_pod_the_port() -> None:
    """``mpi/mpi_test.go`` TestMpi ("add 5000 port") and TestMpiWithEmptyWorker ("master pod with valid
    worker task", "worker pod should not have MPI_HOST env var", "master pod with worker task having 0
    replicas"); and Volcano's webhook turns ``svc`` and ``ssh`` on with ``mpi``."""
    text = job_text("test-mpi", '{mpi: ["--master=fake-master", "--worker=fake-worker", "--port=5000"]}',
                    ("fake-master", 1), ("fake-worker", 2))
    cluster, _, pods = run(text)
    master, worker = pods["test-mpi-fake-master-0"], pods["test-mpi-fake-worker-0"]
    assert env(master)["MPI_HOST"] == "test-mpi-fake-worker-0.test-mpi,test-mpi-fake-worker-1.test-mpi"
    assert "MPI_HOST" not in env(worker)
    assert ports(master) == ports(worker) == [("mpijob-port", 5000)]
    assert cluster.count("Secret") == 1 and isinstance(cluster.get("Service", "default/test-mpi"), Service)
    assert {v.get("name") for v in (master.spec.model_extra or {})["volumes"]} == {"test-mpi-ssh", "test-mpi-svc"}
    _, _, pods = run(job_text("zero", "{mpi: []}", ("master", 1), ("worker", 0)))
    assert env(pods["zero-master-0"])["MPI_HOST"] == ""


def test_mpi_without_its_master_task_is_refused_as_volcanos_webhook_does() -> None:
    """``pkg/webhooks/admission/jobs/validate/admit_job.go``: "The specified mpi master task was not found"."""
    with pytest.raises(ManifestError, match=r"plugins.mpi: the master task 'master' is not one of the job's tasks"):
        load_text(job_text("m", "{mpi: []}", ("launcher", 1), ("worker", 2)))


# ---------------------------------------------------------------------------------------------- tensorflow

def test_tensorflow_config_names_every_role_and_the_pods_own_task() -> None:
    """``tensorflow/tensorflow_test.go`` TestTensorflow ("ps case", "worker case", "chief case"): the same
    TF_CONFIG strings, byte for byte."""
    _, _, pods = run(job_text("train-123", '{tensorflow: ["--port=5000"]}', ("ps", 2), ("worker", 2), ("chief", 1)))
    cluster = ('{"cluster":{"ps":["train-123-ps-0.train-123:5000","train-123-ps-1.train-123:5000"],"worker":'
               '["train-123-worker-0.train-123:5000","train-123-worker-1.train-123:5000"],"chief":'
               '["train-123-chief-0.train-123:5000"]},')
    for pod, kind in (("ps-0", "ps"), ("worker-0", "worker"), ("chief-0", "chief")):
        assert env(pods[f"train-123-{pod}"])["TF_CONFIG"] == cluster + f'"task":{{"type":"{kind}","index":0}}}}'
    assert json.loads(env(pods["train-123-ps-1"])["TF_CONFIG"])["task"] == {"type": "ps", "index": 1}
    _, _, pods = run(job_text("single", "{tensorflow: []}", ("worker", 1)))
    assert "TF_CONFIG" not in env(pods["single-worker-0"])  # one pod: not distributed


# ----------------------------------------------------------------------------------------------------- ray

def test_ray_starts_the_head_and_points_the_workers_at_it() -> None:
    """``ray/ray_test.go`` TestRayPlugin ("ray cluster test with only head task", "ray cluster test with
    worker task", the head Service with three ports, and it goes with the Job)."""
    cluster, _, pods = run(job_text("ray-cluster-worker", "{ray: []}", ("head", 1), ("worker", 2)))
    head, worker = pods["ray-cluster-worker-head-0"], pods["ray-cluster-worker-worker-1"]
    assert (head.spec.containers[0].model_extra or {})["command"] == [
        "sh", "-c", "ray start --head --block --dashboard-host=0.0.0.0 --port=6379 --dashboard-port=8265 "
                    "--ray-client-server-port=10001"]
    assert ports(head) == [("gcs", 6379), ("dashboard", 8265), ("client-server", 10001)]
    assert (worker.spec.containers[0].model_extra or {})["command"] == [
        "sh", "-c", "ray start --block --address=ray-cluster-worker-head-0.ray-cluster-worker:6379"]
    service = cluster.get("Service", "default/ray-cluster-worker-head-svc")
    assert isinstance(service, Service)
    assert [(p.name, p.port, p.targetPort) for p in service.spec.ports] == [
        ("gcs", 6379, "gcs"), ("dashboard", 8265, "dashboard"), ("client-server", 10001, "client-server")]
    assert service.spec.selector["volcano.sh/task-spec"] == "head"
    assert service.spec.selector["volcano.sh/job-name"] == "ray-cluster-worker"
    assert head.metadata.labels["volcano.sh/job-namespace"] == "default"  # the selector finds the pods
    job = cluster.get("Job", "default/ray-cluster-worker")
    assert isinstance(job, Job) and job.status.controlledResources["plugin-ray"] == "ray"
    custom = '{ray: ["--head=test-head", "--headContainer=test-head", "--port=7000"]}'
    _, _, pods = run(job_text("custom", custom, ("test-head", 1)))
    assert "--port=7000" in (pods["custom-test-head-0"].spec.containers[0].model_extra or {})["command"][2]
    with pytest.raises(ManifestError, match=r"plugins.ray: the head task 'head' is not one of the job's tasks"):
        load_text(job_text("nohead", "{ray: []}", ("worker", 2)))


# ------------------------------------------------------------------------------------------------ hcclrank

def test_hcclrank_annotates_each_pods_rank() -> None:
    """``hcclrank/hcclrank_test.go`` TestHcclrankPlugin_OnPodCreate ("Pod already has HCCL rank
    annotation", "Pod has RANK environment variable", "Master pod with valid task index", worker = master
    replicas + index)."""
    _, _, pods = run(job_text("h", "{hcclrank: []}", ("master", 2), ("worker", 2), ("other", 1)))
    ranks = {name: pod.metadata.annotations.get("hccl/rankIndex") for name, pod in pods.items()}
    assert ranks == {"h-master-0": "0", "h-master-1": "1", "h-worker-0": "2", "h-worker-1": "3", "h-other-0": None}
    _, _, pods = run(job_text("hp", "{hcclrank: [], pytorch: []}", ("master", 1), ("worker", 2)))
    assert pods["hp-worker-1"].metadata.annotations["hccl/rankIndex"] == "2"  # pytorch's RANK
    given = job_text("ha", "{hcclrank: []}", ("master", 1)).replace(
        "template: {spec:", "template: {metadata: {annotations: {hccl/rankIndex: '7'}}, spec:")
    _, _, pods = run(given)
    assert pods["ha-master-0"].metadata.annotations["hccl/rankIndex"] == "7"
    _, _, pods = run(job_text("he", "{hcclrank: []}", ("master", 1)).replace(
        "image: busybox}", "image: busybox, env: [{name: RANK, value: '5'}]}"))
    assert pods["he-master-0"].metadata.annotations["hccl/rankIndex"] == "5"


# ----------------------------------------------------------------------------------------------------- svc

def test_svc_makes_the_headless_service_host_lists_and_network_policy() -> None:
    """``svc/svc.go`` (``GenerateHosts``, ``OnJobAdd``, ``OnPodCreate``): the ConfigMap ``<job>-svc`` with
    ``<task>.host`` and ``VC_<TASK>_HOSTS``/``_NUM`` (a task's ``-`` written ``_``), read by every
    container as env and as files under /etc/volcano; the headless Service and the NetworkPolicy."""
    cluster, _, pods = run(job_text("web", "{svc: []}", ("front-end", 2), ("db", 1)))
    hosts = cluster.get("ConfigMap", "default/web-svc")
    assert isinstance(hosts, ConfigMap)
    assert hosts.data == {"front_end.host": "web-front-end-0.web\nweb-front-end-1.web",
                          "VC_FRONT_END_HOSTS": "web-front-end-0.web,web-front-end-1.web", "VC_FRONT_END_NUM": "2",
                          "db.host": "web-db-0.web", "VC_DB_HOSTS": "web-db-0.web", "VC_DB_NUM": "1"}
    pod = pods["web-db-0"]
    assert env(pod)["VC_FRONT_END_NUM"] == {"configMapKeyRef": {"name": "web-svc", "key": "VC_FRONT_END_NUM"}}
    assert (pod.spec.model_extra or {})["hostname"] == "web-db-0"
    assert (pod.spec.model_extra or {})["subdomain"] == "web"
    assert {"name": "web-svc", "mountPath": "/etc/volcano"} in (pod.spec.containers[0].model_extra or {})[
        "volumeMounts"]
    service = cluster.get("Service", "default/web")
    assert isinstance(service, Service) and service.spec.clusterIP == "None"
    assert service.spec.selector == {"volcano.sh/job-name": "web", "volcano.sh/job-namespace": "default"}
    assert service.spec.publishNotReadyAddresses is False
    assert service.metadata.ownerReferences[0].kind == "Job"
    policy = cluster.get("NetworkPolicy", "default/web")
    assert isinstance(policy, NetworkPolicy)
    assert policy.spec["ingress"] == [{"from": [{"podSelector": {"matchLabels": service.spec.selector}}]}]


def test_svc_arguments_and_a_template_hostname() -> None:
    """``svc.go`` flags (Volcano's guide: ``--publish-not-ready-addresses``, ``--disable-network-policy``,
    ``--inject-hosts-env``) and ``GenerateHosts`` with a template ``hostname``: one shared name."""
    text = job_text("db", '{svc: ["--publish-not-ready-addresses=true", "--disable-network-policy=true", '
                    '"--inject-hosts-env=false"]}', ("primary", 2), template="hostname: main, subdomain: dbs, ")
    cluster, _, pods = run(text)
    service = cluster.get("Service", "default/db")
    assert isinstance(service, Service) and service.spec.publishNotReadyAddresses is True
    assert cluster.count("NetworkPolicy") == 0
    assert not any(k.startswith("VC_PRIMARY") for k in env(pods["db-primary-1"]))
    assert (pods["db-primary-1"].spec.model_extra or {})["hostname"] == "main"  # the template's own
    hosts = cluster.get("ConfigMap", "default/db-svc")
    assert isinstance(hosts, ConfigMap) and hosts.data["VC_PRIMARY_HOSTS"] == "main.dbs"


def test_scaling_rewrites_the_host_lists_and_the_objects_go_with_the_job() -> None:
    """``svc.go`` OnJobUpdate (the host lists follow the replicas) and OnJobDelete (the ConfigMap, Service
    and NetworkPolicy go; a Service of that name made by someone else before the Job stays)."""
    text = job_text("s", "{svc: []}", ("w", 2)).replace("  minAvailable: 1", "  minAvailable: 1\n"
                                                        "  ttlSecondsAfterFinished: 0")
    cluster, controller, _ = run(text)
    job = cluster.get("Job", "default/s")
    assert isinstance(job, Job)
    tasks = [job.spec.tasks[0].model_copy(update={"replicas": 3})]
    cluster.update(job.model_copy(update={"spec": job.spec.model_copy(update={"tasks": tasks})}))
    controller.process()
    hosts = cluster.get("ConfigMap", "default/s-svc")
    assert isinstance(hosts, ConfigMap) and hosts.data["VC_W_NUM"] == "3" and hosts.data["w.host"].count("\n") == 2
    for pod in cluster.list("Pod"):
        cluster.update(pod.model_copy(update={"status": pod.status.model_copy(update={"phase": "Succeeded"})}))
    controller.process()
    controller.process()
    assert cluster.count("Job") == 0
    assert cluster.count("ConfigMap") == cluster.count("Service") == cluster.count("NetworkPolicy") == 0
    theirs = Service.model_validate({"metadata": {"name": "s", "namespace": "default"}, "spec": {"clusterIP": "None"}})
    cluster, controller, pods = run(text, theirs)
    assert len(pods) == 2  # the existing Service is used as it is
    for pod in cluster.list("Pod"):
        cluster.update(pod.model_copy(update={"status": pod.status.model_copy(update={"phase": "Succeeded"})}))
    controller.process()
    controller.process()
    assert cluster.count("Job") == 0 and cluster.count("ConfigMap") == 0
    kept = cluster.get("Service", "default/s")
    assert kept.metadata.ownerReferences == []  # someone else's: neither taken over nor deleted


# ----------------------------------------------------------------------------------------------- arguments

@pytest.mark.parametrize(("plugin", "arguments", "expected"), [
    ("pytorch", ["--port=5000"], {"port": 5000}),
    ("pytorch", ["-port", "5000", "--wait-master-enabled"], {"port": 5000, "wait-master-enabled": True}),
    ("pytorch", ["--wait-master-enabled=false"], {"wait-master-enabled": False}),
    ("svc", ["--inject-hosts-env=F"], {"inject-hosts-env": False}),
    ("ray", ["--headContainer=main", "--clientPort=20001"], {"headContainer": "main", "clientPort": 20001}),
    ("tensorflow", ["--ps=ps", "--"], {"ps": "ps", "port": 2222}),
])
def test_arguments_parse_as_gos_flag_package(plugin: str, arguments: list[str], expected: dict[str, Any]) -> None:
    assert parse(plugin, arguments).items() >= expected.items()


@pytest.mark.parametrize(("plugins", "message"), [
    ('{pytorch: ["--mater=main"]}', "plugins.pytorch: unknown argument '--mater=main' (the plugin's flags: --master"),
    ('{mpi: ["--port=70000"]}', "plugins.mpi: --port=70000 is outside 1..65535"),
    ('{mpi: ["--port=22a"]}', "plugins.mpi: --port='22a' is not an integer"),
    ('{svc: ["--disable-network-policy=maybe"]}', "plugins.svc: --disable-network-policy='maybe' is not a boolean"),
    ('{tensorflow: ["--port"]}', "plugins.tensorflow: --port needs a value"),
    ('{env: ["VC_X=1"]}', "plugins.env: 'VC_X=1' is not a flag (flags: none)"),
    ('{ssh: ["--ssh-private-key=abc"]}', "plugins.ssh: give both --ssh-private-key and --ssh-public-key"),
    ('{ssh: ["--ssh-key-file-path=home/.ssh"]}', "must be an absolute path"),
    ("{horovod: []}", "plugins.horovod: unknown job plugin"),
])
def test_a_bad_argument_is_refused_naming_the_plugin_and_the_argument(plugins: str, message: str) -> None:
    with pytest.raises(ManifestError) as info:
        load_text(job_text("bad", plugins, ("master", 1), ("worker", 1)))
    assert message in str(info.value)


def test_huge_or_many_arguments_are_refused_not_parsed_forever() -> None:
    with pytest.raises(ManifestError, match="at most 4,096"):
        load_text(job_text("big", '{pytorch: ["--master=' + "m" * 10_000 + '"]}', ("master", 1)))
    with pytest.raises(ManifestError, match="plugins"):
        load_text(job_text("many", "{pytorch: [" + ", ".join(['"--port=1"'] * 100) + "]}", ("master", 1)))


def test_the_webhook_turns_on_what_volcanos_webhook_turns_on() -> None:
    """``pkg/webhooks/admission/jobs/mutate/mutate_job.go`` patchDefaultPlugins (and its test
    TestCreatePatchExecution's plugin cases): svc with mpi, pytorch, tensorflow, ray; ssh with mpi."""
    from hetsched.cluster.webhook import defaults

    assert effective({"mpi": []}) == {"mpi": [], "svc": [], "ssh": []}
    assert effective({"pytorch": ["--port=1"], "svc": ["--disable-network-policy"]}) == {
        "pytorch": ["--port=1"], "svc": ["--disable-network-policy"]}
    assert effective({"env": []}) == {"env": []}
    raw = {"kind": "Job", "metadata": {"name": "j"}, "spec": {"minAvailable": 1, "plugins": {"ray": []},
                                                              "tasks": [{"name": "head", "replicas": 1}]}}
    assert {"op": "replace", "path": "/spec/plugins", "value": {"ray": [], "svc": []}} in defaults(raw)
    raw["spec"]["plugins"] = {"ray": [], "svc": []}
    assert not any(op["path"] == "/spec/plugins" for op in defaults(raw))


def test_names_that_cannot_be_host_names_are_refused_as_volcanos_webhook_does() -> None:
    """``admit_job.go`` validateJobName and validateK8sPodNameLength: the Job's name and each pod's
    ``<job>-<task>-<index>`` at most 63 characters (the svc plugin makes them host names)."""
    with pytest.raises(ManifestError, match=r"metadata.name: 64 characters; a Job's name may have at most 63"):
        load_text(job_text("j" * 64, "{}", ("w", 1)))
    with pytest.raises(ManifestError, match=r"spec.tasks\[0\]: pod name 'jjj.*-worker-99' would have 64 characters"):
        load_text(job_text("j" * 54, "{}", ("worker", 100)))
    load_text(job_text("j" * 54, "{}", ("worker", 10)))  # -worker-9: 63, allowed


def test_a_job_sent_again_without_the_plugins_the_webhook_added_is_no_change() -> None:
    """``kubectl replace`` of the manifest a user wrote (``pytorch`` only) against the stored Job (``svc``
    added by the webhook) scales it; changing a plugin's arguments is still refused."""
    from hetsched.api.job_update import update_problem

    (stored,) = load_text(job_text("t", "{pytorch: [], svc: []}", ("master", 1), ("worker", 2)))
    (scaled,) = load_text(job_text("t", "{pytorch: []}", ("master", 1), ("worker", 3)))
    (changed,) = load_text(job_text("t", '{pytorch: ["--port=1234"]}', ("master", 1), ("worker", 2)))
    assert isinstance(stored, Job) and isinstance(scaled, Job) and isinstance(changed, Job)
    assert update_problem(stored, scaled) is None
    found = update_problem(stored, changed)
    assert found is not None and found[0] == "spec.plugins"
