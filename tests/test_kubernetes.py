"""Against a real kube-apiserver and etcd (tests/kubeapi.py): the Volcano-compatible CRDs apply; the
Kubernetes adapter lists and watches, writes with optimistic concurrency; and the same scheduler and
controllers that run in the simulator run the seed's 8-worker Ascend Job there — every pod bound once, the
gang whole, the chips handed off in the pods' annotations."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hetsched.api.manifest import load_files, load_text
from hetsched.api.objects import CronJob, HyperNode, Job, JobFlow, JobTemplate, Node, Pod, PodGroup, Queue
from hetsched.benchmark.apiserver import ApiServer, _free_port, missing, real_apiserver
from hetsched.cluster.kubernetes import ApiError, KubeClient, KubeCluster, WallClock, from_api
from hetsched.controllers.cronjob import CronJobController
from hetsched.controllers.job import JobController
from hetsched.controllers.jobflow import JobFlowController
from hetsched.controllers.podgroup import PodGroupController
from hetsched.controllers.queue import QueueController
from hetsched.devices.inventory import pod_allocation
from hetsched.ports import Conflict, Invalid, NotFound, PodGroupStatusUpdate
from hetsched.scheduler.cache import KINDS
from hetsched.scheduler.defaults import default_conf
from hetsched.scheduler.engine.runner import Scheduler
from tests.builders import accel_node, node, table

ROOT = Path(__file__).resolve().parents[1]
SCHEDULER_TOKEN = "hetsched-scheduler-token"
SCHEDULER_USER = "system:serviceaccount:hetsched:hetsched-scheduler"
"""The scheduler's ServiceAccount, as the API server authenticates its token."""
pytestmark = pytest.mark.skipif(bool(missing()), reason=missing() or "available")


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with real_apiserver(tmp_path_factory.mktemp("apiserver"), users={SCHEDULER_TOKEN: SCHEDULER_USER}) as server:
        install_crds(KubeClient.from_token(server.url, server.token, ca_file=server.ca))
        yield server


def install_crds(client: KubeClient) -> None:
    for path in sorted((ROOT / "deploy" / "crds").glob("*.yaml")):
        client.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                       body=yaml.safe_load(path.read_text()))
    deadline = time.monotonic() + 30
    while True:  # the CRDs are served once established
        try:
            for path in ("/apis/batch.volcano.sh/v1alpha1/jobs", "/apis/scheduling.volcano.sh/v1beta1/queues",
                         "/apis/scheduling.volcano.sh/v1beta1/podgroups", "/apis/bus.volcano.sh/v1alpha1/commands",
                         "/apis/topology.volcano.sh/v1alpha1/hypernodes", "/apis/batch.volcano.sh/v1alpha1/cronjobs",
                         "/apis/flow.volcano.sh/v1alpha1/jobflows", "/apis/flow.volcano.sh/v1alpha1/jobtemplates",
                         "/apis/hetsched.io/v1alpha1/queueusages"):
                client.request("GET", path)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def cluster_for(api: ApiServer) -> KubeCluster:
    return KubeCluster(KubeClient.from_token(api.url, api.token, ca_file=api.ca))


def add_node(cluster: KubeCluster, node: Node) -> None:
    """A node as a kubelet would present it: allocatable and capacity, Ready, and without the not-ready
    taint the API server puts on new nodes (there is no kubelet here: tests patch what it would)."""
    created = cluster.create(node)
    quantities = {k: str(v // 1000) if v % 1000 == 0 else f"{v}m" for k, v in node.status.allocatable.items()}
    name = created.metadata.name
    cluster.client.request("PATCH", f"/api/v1/nodes/{name}/status", content_type="application/merge-patch+json",
                           body={"status": {"allocatable": quantities, "capacity": quantities,
                                            "conditions": [{"type": "Ready", "status": "True", "reason": "Test"}]}})
    cluster.client.request("PATCH", f"/api/v1/nodes/{name}", content_type="application/merge-patch+json",
                           body={"spec": {"taints": None}})


def test_optimistic_concurrency_is_a_conflict_not_an_overwrite(api: ApiServer) -> None:
    cluster = cluster_for(api)
    queue = cluster.create(Queue.model_validate({"metadata": {"name": "occ"}, "spec": {"weight": 2}}))
    assert isinstance(queue, Queue) and queue.metadata.resourceVersion
    first = cluster.update(queue.model_copy(update={"spec": queue.spec.model_copy(update={"weight": 3})}))
    with pytest.raises(Conflict):  # the same old version again: refused
        cluster.update(queue.model_copy(update={"spec": queue.spec.model_copy(update={"weight": 4})}))
    assert isinstance(first, Queue) and first.spec.weight == 3


def test_podgroup_statuses_are_written_together_and_a_gone_one_is_a_failure(api: ApiServer) -> None:
    """A cycle that enqueues many jobs writes their phases from the bind workers; a PodGroup deleted
    meanwhile is reported, the others are written; the server keeps its managedFields though the cache
    trims them."""
    cluster = cluster_for(api)
    cluster.start(["PodGroup"])
    try:
        assert cluster.wait_synced(30)
        names = [f"statuses-{i}" for i in range(40)]
        for name in names:
            cluster.create(PodGroup.model_validate({"metadata": {"name": name, "namespace": "default"},
                                                    "spec": {"minMember": 1}}))
        cluster.client.request("DELETE", "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups/statuses-7")
        deadline = time.monotonic() + 30
        while len([k for k in cluster._cache["PodGroup"] if "/statuses-" in k]) != 39 and time.monotonic() < deadline:
            cluster.pump()
            time.sleep(0.05)
        failures = cluster.update_podgroup_statuses([PodGroupStatusUpdate(f"default/{n}", "Inqueue") for n in names])
        assert [f.pod for f in failures] == ["default/statuses-7"]
        for name in names:
            if name == "statuses-7":
                continue
            path = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups/{name}"
            raw = cluster.client.request("GET", path)
            assert raw["status"]["phase"] == "Inqueue", name
            assert raw["metadata"]["managedFields"], name  # the PUT without them kept the server's
    finally:
        cluster.stop()


def test_hypernodes_round_trip_through_the_crd(api: ApiServer) -> None:
    """Volcano's HyperNode manifests apply to our CRD unchanged and read back as they were; the CRD's schema
    refuses a tier below 1 (the API server's 422 Invalid)."""
    cluster = cluster_for(api)
    spine = HyperNode.model_validate({"metadata": {"name": "spine-x"}, "spec": {"tier": 2, "tierName": "spine",
        "members": [{"type": "HyperNode", "selector": {"exactMatch": {"name": "leaf-x"}}}]}})
    leaf = HyperNode.model_validate({"metadata": {"name": "leaf-x"}, "spec": {"tier": 1, "members": [
        {"type": "Node", "selector": {"regexMatch": {"pattern": "rack-x-.*"}}},
        {"type": "Node", "selector": {"labelMatch": {"matchLabels": {"rack": "x"}}}}]}})
    for obj in (spine, leaf):
        cluster.create(obj)
    stored = cluster.get("HyperNode", "leaf-x")
    assert isinstance(stored, HyperNode) and stored.spec == leaf.spec
    with pytest.raises(Invalid, match=r"spec\.tier in body should be greater than or equal to 1"):
        cluster.client.request("POST", "/apis/topology.volcano.sh/v1alpha1/hypernodes", body={
            "apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "zero"},
            "spec": {"tier": 0, "members": [{"type": "Node", "selector": {"exactMatch": {"name": "n"}}}]}})


def test_hypernodes_are_discovered_from_node_labels_on_a_real_apiserver(api: ApiServer) -> None:
    """The controller's label discovery against the real API server: one HyperNode per label value and tier,
    kept in step as labels change (made, rewritten, deleted), owned by a label — and a hand-written HyperNode
    that holds a discovered name is left exactly as it was."""
    from hetsched.controllers.hypernode_discovery import OWNER_LABEL, HyperNodeDiscovery

    cluster = cluster_for(api)
    t1, t2 = "disc.example.com/pod", "disc.example.com/spine"
    for i, pod_id in enumerate(("sp-0", "sp-0", "sp-1", "sp-1")):
        add_node(cluster, node(f"disc-{i}", labels={t1: pod_id, t2: "a"}))
    theirs = HyperNode.model_validate({"metadata": {"name": "tier1-sp-1"}, "spec": {"tier": 1, "members": [
        {"type": "Node", "selector": {"exactMatch": {"name": "disc-3"}}}]}})
    cluster.create(theirs)
    cluster.start(["Node", "HyperNode"])
    assert cluster.wait_synced(30)
    cluster.pump()
    discovery = HyperNodeDiscovery(cluster, {1: t1, 2: t2})

    def settle() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            cluster.pump()
            if not discovery.process():
                time.sleep(0.2)
                cluster.pump()
                if not discovery.dirty:
                    return
        raise AssertionError("discovery kept finding changes")

    settle()

    def mine() -> dict[str, HyperNode]:
        return {h.metadata.name: h for h in cluster.list("HyperNode")
                if isinstance(h, HyperNode) and h.metadata.labels.get(OWNER_LABEL)}

    assert sorted(mine()) == ["tier1-sp-0", "tier2-a"]
    assert [m.selector.exactMatch.name for m in mine()["tier2-a"].spec.members
            if m.selector.exactMatch is not None] == ["tier1-sp-0", "tier1-sp-1"]
    stored = cluster.get("HyperNode", "tier1-sp-1")
    assert isinstance(stored, HyperNode) and stored.spec == theirs.spec and not stored.metadata.labels
    for name in ("disc-0", "disc-1"):  # both servers of sp-0 move to sp-2: sp-0 goes, sp-2 comes
        found = cluster.get("Node", name)
        assert isinstance(found, Node)
        cluster.update(found.model_copy(update={"metadata": found.metadata.model_copy(
            update={"labels": {**found.metadata.labels, t1: "sp-2"}})}))
    deadline = time.monotonic() + 30
    while "tier1-sp-2" not in mine() or "tier1-sp-0" in mine():
        assert time.monotonic() < deadline, sorted(mine())
        settle()
    assert sorted(mine()) == ["tier1-sp-2", "tier2-a"]


class HandClock:
    """A clock the test moves (the controllers read no other)."""

    def __init__(self, now: float) -> None:
        self.moment = now

    def now(self) -> float:
        return self.moment


def test_cronjob_and_jobflow_controllers_on_a_real_apiserver(api: ApiServer) -> None:
    """Issue 31: Volcano's CronJob and JobFlow/JobTemplate kinds round-trip through their CRDs (RFC 3339
    times included), and the controllers make their Jobs in the API server — the CronJob's on its schedule
    (the clock moved by hand: no wall-clock wait), the flow's second Job once the first completed."""
    cluster = cluster_for(api)
    tasks = [{"name": "t", "replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}]
    created = cluster.create(CronJob.model_validate({
        "metadata": {"name": "every-5", "namespace": "default"},
        "spec": {"schedule": "*/5 * * * *", "concurrencyPolicy": "Forbid", "jobTemplate": {"spec": {"tasks": tasks}}}}))
    assert isinstance(created, CronJob) and created.metadata.creationTimestamp is not None
    start = created.metadata.creationTimestamp
    for name in ("prep", "train"):
        cluster.create(JobTemplate.model_validate({"metadata": {"name": name, "namespace": "default"},
                                                   "spec": {"tasks": tasks}}))
    cluster.create(JobFlow.model_validate({"metadata": {"name": "pipeline", "namespace": "default"}, "spec": {
        "flows": [{"name": "prep"}, {"name": "train", "dependsOn": {"targets": ["prep"]}}]}}))
    clock = HandClock(start)
    crons = CronJobController(cluster, clock, events=cluster)
    flows = JobFlowController(cluster, clock, events=cluster)
    cluster.start(["CronJob", "JobFlow", "JobTemplate", "Job"])
    assert cluster.wait_synced(30)

    def settle() -> None:
        for _ in range(20):
            cluster.pump()
            if crons.process() + flows.process() == 0:
                time.sleep(0.05)
                cluster.pump()
                if crons.process() + flows.process() == 0:
                    return

    settle()
    due = crons.next_deadline()
    assert due is not None and 0 < due - start <= 300
    clock.moment = due
    crons.wake()
    settle()
    names = sorted(j.metadata.name for j in cluster.list("Job") if isinstance(j, Job))
    assert f"every-5-{int(due // 60)}" in names and "pipeline-prep" in names and "pipeline-train" not in names
    fresh = cluster.client.request("GET", "/apis/batch.volcano.sh/v1alpha1/namespaces/default/cronjobs/every-5")
    assert str(fresh["status"]["lastScheduleTime"]).endswith("Z")  # written back as RFC 3339
    prep = cluster.get("Job", "default/pipeline-prep")
    assert isinstance(prep, Job)
    state = prep.status.state.model_copy(update={"phase": "Completed"})
    cluster.update(prep.model_copy(update={"status": prep.status.model_copy(update={"state": state})}))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "pipeline-train" not in {
            j.metadata.name for j in cluster.list("Job") if isinstance(j, Job)}:
        settle()
    assert "pipeline-train" in {j.metadata.name for j in cluster.list("Job") if isinstance(j, Job)}
    # leave the shared API server as found: later tests count every Job and pod there
    for job in cluster.list("Job"):
        if isinstance(job, Job) and job.metadata.name.startswith(("every-5-", "pipeline-")):
            cluster.delete("Job", f"default/{job.metadata.name}")
    for kind, name in (("CronJob", "every-5"), ("JobFlow", "pipeline"), ("JobTemplate", "prep"),
                       ("JobTemplate", "train")):
        cluster.delete(kind, f"default/{name}")
    cluster.stop()


def test_job_plugins_make_their_objects_on_a_real_apiserver_and_take_them_away(api: ApiServer) -> None:
    """Issue 31, Volcano's job plugins live: an ``mpi`` Job (which turns on ``svc`` and ``ssh``) gets its
    headless Service, host-list ConfigMap, NetworkPolicy and key Secret in the API server (their kinds round-
    trip), its pods the env and mounts; once finished (``ttlSecondsAfterFinished: 0``) the controller
    deletes them with the Job — a Secret and ConfigMap without reading them first."""
    cluster = cluster_for(api)
    (job,) = load_text("""
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: mpi-live, namespace: default}
spec:
  minAvailable: 2
  ttlSecondsAfterFinished: 0
  plugins: {mpi: ["--port=2222"]}
  tasks:
  - {name: master, replicas: 1, template: {spec: {containers: [{name: m, image: busybox}]}}}
  - {name: worker, replicas: 1, template: {spec: {containers: [{name: w, image: busybox}]}}}
""")
    cluster.create(job)
    jobs = JobController(cluster, WallClock(), events=cluster)
    cluster.start(["Job", "Pod", "PodGroup", "Command"])
    assert cluster.wait_synced(30)

    def settle_until(what: str, done: Any) -> None:
        deadline = time.monotonic() + 30
        while not done():
            assert time.monotonic() < deadline, what
            cluster.pump()
            jobs.process()
            time.sleep(0.05)

    settle_until("the PodGroup", lambda: any(g.metadata.name == "mpi-live" for g in cluster.list("PodGroup")))
    cluster.update_podgroup_status("default/mpi-live", "Inqueue", None)
    settle_until("the job's 2 pods", lambda: len([p for p in cluster.list("Pod") if p.metadata.name.startswith(
        "mpi-live-")]) == 2)
    raw = cluster.client
    service = raw.request("GET", "/api/v1/namespaces/default/services/mpi-live")
    assert service["spec"]["clusterIP"] == "None" and service["metadata"]["ownerReferences"][0]["kind"] == "Job"
    hosts = raw.request("GET", "/api/v1/namespaces/default/configmaps/mpi-live-svc")["data"]
    assert hosts["VC_WORKER_HOSTS"] == "mpi-live-worker-0.mpi-live"
    assert hosts["master.host"] == "mpi-live-master-0.mpi-live"
    raw.request("GET", "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/mpi-live")
    assert set(raw.request("GET", "/api/v1/namespaces/default/secrets/mpi-live-ssh")["data"]) == {
        "id_rsa", "id_rsa.pub", "authorized_keys", "config"}
    master = raw.request("GET", "/api/v1/namespaces/default/pods/mpi-live-master-0")
    container = master["spec"]["containers"][0]
    assert {"name": "MPI_HOST", "value": "mpi-live-worker-0.mpi-live"} in container["env"]
    assert {"name": "mpijob-port", "containerPort": 2222, "protocol": "TCP"} in container["ports"]
    assert master["spec"]["hostname"] == "mpi-live-master-0" and master["spec"]["subdomain"] == "mpi-live"
    stored = cluster.get("Job", "default/mpi-live")
    assert isinstance(stored, Job) and stored.spec.plugins == {"mpi": ["--port=2222"]}  # no webhook here
    assert stored.status.controlledResources == {"plugin-ssh": "ssh", "plugin-svc": "svc"}
    for pod in [p for p in cluster.list("Pod") if p.metadata.name.startswith("mpi-live-")]:
        cluster.update(pod.model_copy(update={"status": pod.status.model_copy(update={"phase": "Succeeded"})}))

    def gone(path: str) -> bool:
        try:
            raw.request("GET", path)
        except NotFound:
            return True
        return False

    paths = ("/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/mpi-live",
             "/api/v1/namespaces/default/services/mpi-live", "/api/v1/namespaces/default/configmaps/mpi-live-svc",
             "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/mpi-live",
             "/api/v1/namespaces/default/secrets/mpi-live-ssh")
    settle_until("the Job and its plugins' objects deleted", lambda: all(gone(p) for p in paths))
    cluster.stop()


def test_queues_made_and_counted_and_kubectl_columns_on_a_real_apiserver(api: ApiServer) -> None:
    """Issue 32: the controller makes the ``default`` and ``root`` Queues a Volcano Job without a queue needs,
    keeps each Queue's status counts, and ``kubectl get queue,podgroup,vcjob`` prints Volcano's columns."""
    cluster = cluster_for(api)
    queues = QueueController(cluster)
    cluster.start(["Queue", "PodGroup"])
    assert cluster.wait_synced(30)
    before = {q.metadata.name for q in cluster.list("Queue")}
    cluster.create(PodGroup.model_validate({"metadata": {"name": "columns-pg", "namespace": "default"},
                                            "spec": {"minMember": 2}}))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        cluster.pump()
        queues.process()
        found = {q.metadata.name: q for q in cluster.list("Queue") if isinstance(q, Queue)}
        if "root" in found and "default" in found and found["default"].status.pending >= 1:
            break
        time.sleep(0.1)
    assert {"default", "root"} <= set(found) and found["default"].status.pending >= 1
    columns = {c["name"] for c in table(api, "/apis/scheduling.volcano.sh/v1beta1/queues")["columnDefinitions"]}
    assert {"STATE", "WEIGHT", "PENDING", "INQUEUE", "RUNNING"} <= columns
    listing = table(api, "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups")
    names = [c["name"] for c in listing["columnDefinitions"]]
    row = next(r["cells"] for r in listing["rows"] if r["cells"][0] == "columns-pg")
    assert row[names.index("MINMEMBER")] == 2 and row[names.index("QUEUE")] == "default"
    jobs = {c["name"] for c in table(api, "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs")[
        "columnDefinitions"]}
    assert {"STATUS", "MINAVAILABLE", "RUNNINGS", "QUEUE"} <= jobs
    # leave the shared API server as found: later tests make their own queues
    cluster.delete("PodGroup", "default/columns-pg")
    for name in {"default", "root"} - before:
        cluster.delete("Queue", name)
    cluster.stop()


def test_a_pod_that_cannot_fit_says_podscheduled_false_and_events_on_a_real_apiserver(api: ApiServer) -> None:
    """Issue 32: what cluster-autoscaler and Karpenter read — ``PodScheduled=False`` with reason
    ``Unschedulable`` — on a pod no node can hold, written as a status patch that keeps the pod's other
    conditions, and ``FailedScheduling`` / ``Unschedulable`` Warning Events a user sees with kubectl."""
    from tests.builders import pod as make_pod

    cluster = cluster_for(api)
    made_queue = False
    with contextlib.suppress(Conflict):
        cluster.create(Queue.model_validate({"metadata": {"name": "default"}}))
        made_queue = True
    made = make_pod("too-big", cpu="4096", scheduler="hetsched")
    containers = [c.model_copy(update={"image": "busybox"}) for c in made.spec.containers]
    cluster.create(made.model_copy(update={"spec": made.spec.model_copy(update={"containers": containers})}))
    scheduler = Scheduler(cluster, cluster, cluster, WallClock(), default_conf(), evictor=cluster)
    groups = PodGroupController(cluster, ("hetsched", "volcano"))
    cluster.start(list(KINDS))
    assert cluster.wait_synced(30)
    deadline = time.monotonic() + 60
    condition: dict[str, Any] = {}
    while time.monotonic() < deadline and not condition:
        cluster.pump()
        groups.process()
        scheduler.run_once()
        time.sleep(0.2)
        raw = cluster.client.request("GET", "/api/v1/namespaces/default/pods/too-big")
        condition = next((c for c in raw["status"].get("conditions", []) if c["type"] == "PodScheduled"), {})
    assert (condition.get("status"), condition.get("reason")) == ("False", "Unschedulable"), condition
    assert "cpu 4096 >" in condition["message"] and condition.get("lastTransitionTime")
    assert cluster.events.flush(30)
    items = cluster.client.request("GET", "/api/v1/namespaces/default/events")["items"]
    told = {(e["involvedObject"]["kind"], e["reason"]) for e in items
            if e["involvedObject"].get("name") == "too-big" or e["involvedObject"]["kind"] == "PodGroup"}
    assert ("Pod", "FailedScheduling") in told and ("PodGroup", "Unschedulable") in told, told
    # leave the shared API server as found
    uid = from_api("Pod", raw).metadata.uid
    cluster.delete("Pod", "default/too-big")
    with contextlib.suppress(NotFound):
        cluster.delete("PodGroup", f"default/podgroup-{uid}")
    if made_queue:
        cluster.delete("Queue", "default")
    cluster.stop()


DAY2_JOB = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: day2-train, namespace: default}
spec:
  minAvailable: 2
  queue: day2
  tasks:
  - name: w
    replicas: 2
    template: {spec: {containers: [{name: w, image: busybox, resources: {requests: {cpu: "1"}}}]}}
"""


def test_day_two_cli_jobs_queues_and_pending_on_a_real_apiserver(api: ApiServer, tmp_path: Path) -> None:
    """Issue 32: Volcano's verbs (vcctl job / queue) and Kueue's pending view, as an operator types them,
    against a real API server with the job and queue controllers running."""
    import json

    from hetsched.api.manifest import load_text

    cluster = cluster_for(api)
    jobs = JobController(cluster, WallClock(), events=cluster)
    queues = QueueController(cluster, events=cluster)
    cluster.start(["Job", "PodGroup", "Pod", "Command", "Queue"])
    assert cluster.wait_synced(30)
    before = {q.metadata.name for q in cluster.list("Queue")}
    stop = threading.Event()

    def controllers() -> None:
        while not stop.is_set():
            cluster.pump()
            jobs.process()
            queues.process()
            stop.wait(0.1)

    loop = threading.Thread(target=controllers, daemon=True)
    loop.start()
    token = tmp_path / "token"
    token.write_text(api.token)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hetsched.cli.main", *args, "--server", api.url,
                               "--token-file", str(token), "--ca-file", api.ca],
                              capture_output=True, text=True, timeout=120, check=False)

    def job_phase() -> str:
        raw = cluster.client.request("GET", "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/day2-train")
        return str(((raw.get("status") or {}).get("state") or {}).get("phase") or "")

    def eventually(check: Any, timeout: float = 30) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return True
            time.sleep(0.2)
        return False

    try:
        made = cli("queue", "create", "day2", "--weight", "2", "--capability", "cpu=4")
        assert made.returncode == 0, made.stderr
        bad = cli("queue", "create", "day2-bad", "--capability", "cpu=lots")
        assert bad.returncode == 2 and "capability" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
        listed = {q["name"]: q for q in json.loads(cli("queue", "list", "--json").stdout)}
        assert listed["day2"]["weight"] == 2 and listed["day2"]["capability"] == {"cpu": "4"}
        (job,) = load_text(DAY2_JOB)
        cluster.create(job)
        assert eventually(lambda: job_phase() == "Pending")
        rows = json.loads(cli("job", "list", "-n", "default", "--json").stdout)
        assert {"name": "day2-train", "queue": "day2", "minAvailable": 2, "replicas": 2} .items() <= next(
            r for r in rows if r["name"] == "day2-train").items()
        view = cli("job", "view", "day2-train")
        assert view.returncode == 0 and "Job default/day2-train" in view.stdout and "minAvailable 2 of 2" in view.stdout
        waiting = json.loads(cli("pending", "-n", "default", "--json").stdout)["waiting"]
        assert [w["queue"] for w in waiting if w["job"] == "default/day2-train"] == ["day2"]

        suspended = cli("job", "suspend", "day2-train")
        assert suspended.returncode == 0, suspended.stderr
        assert eventually(lambda: job_phase() == "Aborted"), job_phase()
        assert cli("job", "resume", "day2-train").returncode == 0
        assert eventually(lambda: job_phase() not in ("Aborted", "Aborting")), job_phase()
        missing_job = cli("job", "suspend", "no-such-job")
        assert missing_job.returncode == 2 and "Job default/no-such-job not found" in missing_job.stderr

        closing = cli("queue", "close", "day2", "--wait", "30")
        assert closing.returncode == 0 and "Queue day2 is Closing" in closing.stdout, closing.stderr
        refused = cli("queue", "delete", "day2")
        assert refused.returncode == 2 and "close it first" in refused.stderr
        assert cli("queue", "open", "day2", "--wait", "30").returncode == 0
        assert cli("queue", "delete", "default").returncode == 2
        assert cli("job", "delete", "day2-train").returncode == 0
        with contextlib.suppress(NotFound):  # no garbage collector runs beside this API server
            cluster.delete("PodGroup", "default/day2-train")
        closed = cli("queue", "close", "day2", "--wait", "30")
        assert closed.returncode == 0 and "Queue day2 is Closed" in closed.stdout, closed.stderr
        assert cli("queue", "delete", "day2").returncode == 0
        assert eventually(lambda: "day2" not in {q.metadata.name for q in cluster.list("Queue")})
    finally:
        stop.set()
        loop.join(5)
        for leftover in ("day2",):
            with contextlib.suppress(NotFound):
                cluster.delete("Queue", leftover)
        with contextlib.suppress(NotFound):
            cluster.delete("Job", "default/day2-train")
        for name in {"default", "root"} - before:
            with contextlib.suppress(NotFound):
                cluster.delete("Queue", name)
        cluster.stop()


def test_the_seed_job_runs_on_a_real_apiserver(api: ApiServer) -> None:
    cluster = cluster_for(api)
    cluster.create(Queue.model_validate({"metadata": {"name": "training"}}))
    cluster.create(Queue.model_validate({"metadata": {"name": "default"}}))
    for i in range(2):
        add_node(cluster, accel_node(f"ascend-{i}", labels={"huawei.com/Ascend910": "true"}))
    (job,) = [o for o in load_files([ROOT / "examples" / "workloads" / "seeds.yaml"]) if o.kind == "Job"
              and o.metadata.name == "ascend-bert-pretrain"]
    assert isinstance(job, Job)
    cluster.create(job.model_copy(update={"metadata": job.metadata.model_copy(update={"namespace": "default"})}))
    clock = WallClock()
    scheduler = Scheduler(cluster, cluster, cluster, clock, default_conf(), evictor=cluster)
    jobs = JobController(cluster, clock, events=cluster)
    groups = PodGroupController(cluster, ("hetsched", "volcano"))
    cluster.start([*KINDS, "Job", "Command"])
    assert cluster.wait_synced(30)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        cluster.pump()
        jobs.process()
        groups.process()
        scheduler.run_once()
        time.sleep(0.1)
        cluster.pump()
        pods = [p for p in cluster.list("Pod") if isinstance(p, Pod)]
        if len(pods) == 8 and all(p.spec.nodeName for p in pods):
            break
    pods = [p for p in cluster.list("Pod") if isinstance(p, Pod)]
    assert len(pods) == 8 and all(p.spec.nodeName for p in pods), [(p.metadata.name, p.spec.nodeName) for p in pods]
    held = [(p.spec.nodeName, chip) for p in pods for chip in pod_allocation(p.metadata.annotations)[
        "huawei.com/Ascend910"]]
    assert len(held) == 8 and len(set(held)) == 8  # every pod bound once, its chip handed off, none shared
    assert {n for n, _ in held} == {"ascend-0"}  # the gang whole, on one server's 8 chips
    cluster.stop()


# ----------------------------------------------------------------------------- the processes


def start_process(api: ApiServer, tmp: Path, command: str, identity: str, *extra: str,
                  token_text: str | None = None, lease_namespace: str = "default") -> subprocess.Popen[bytes]:
    token = tmp / f"token-{identity}"
    token.write_text(token_text or api.token)
    with (tmp / f"{command}-{identity}.log").open("ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen([sys.executable, "-m", "hetsched.cli.main", command, "--server", api.url,
                                 "--token-file", str(token), "--ca-file", api.ca, "--lease-namespace", lease_namespace,
                                 "--id", identity, "--metrics-address", "127.0.0.1:0", *extra], stdout=log, stderr=log)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()


def gangs(cluster: KubeCluster, prefix: str, groups: int, size: int, cpu: str = "1") -> None:
    """``groups`` PodGroups of ``size`` pods each, created from 16 threads (a burst of submissions)."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.builders import pod, podgroup

    def submit(index: int) -> None:
        name = f"{prefix}{index}"
        cluster.create(podgroup(name, size))
        for member in range(size):
            made = pod(f"{name}-{member}", name, cpu=cpu, memory="1Gi")
            containers = [c.model_copy(update={"image": "busybox"}) for c in made.spec.containers]
            cluster.create(made.model_copy(update={"spec": made.spec.model_copy(update={"containers": containers})}))

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(submit, range(groups)))


def bound_pods(cluster: KubeCluster, prefix: str) -> list[Pod]:
    data = cluster.client.request("GET", "/api/v1/namespaces/default/pods")
    pods = [from_api("Pod", item) for item in data.get("items", [])]
    return [p for p in pods if isinstance(p, Pod) and p.metadata.name.startswith(prefix)]


def test_kill_9_mid_submission_then_restart_binds_every_pod_once(api: ApiServer, tmp_path: Path) -> None:
    cluster = cluster_for(api)
    with contextlib.suppress(Conflict):
        cluster.create(Queue.model_validate({"metadata": {"name": "default"}}))
    for i in range(100):
        add_node(cluster, node(f"cpu-{i}", cpu="32", memory="256Gi"))
    first = start_process(api, tmp_path, "scheduler", "first", "--period", "0.2")
    submitter = threading.Thread(target=gangs, args=(cluster, "k", 250, 8))
    submitter.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if sum(1 for p in bound_pods(cluster, "k") if p.spec.nodeName) >= 400:
                break
            time.sleep(0.2)
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed_at = sum(1 for p in bound_pods(cluster, "k") if p.spec.nodeName)
        second = start_process(api, tmp_path, "scheduler", "second", "--period", "0.2")
        submitter.join()
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                pods = bound_pods(cluster, "k")
                if len(pods) == 2000 and all(p.spec.nodeName for p in pods):
                    break
                time.sleep(0.5)
        finally:
            stop_process(second)
    finally:
        stop_process(first)
    pods = bound_pods(cluster, "k")
    assert 400 <= killed_at < 2000, killed_at
    assert len(pods) == 2000 and all(p.spec.nodeName for p in pods), sum(1 for p in pods if p.spec.nodeName)
    used: dict[str, int] = {}
    per_group: dict[str, int] = {}
    for p in pods:
        used[p.spec.nodeName] = used.get(p.spec.nodeName, 0) + 1
        group = p.metadata.annotations["scheduling.k8s.io/group-name"]
        per_group[group] = per_group.get(group, 0) + 1
    capacity = {n.metadata.name: n.status.allocatable["cpu"] // 1000 for n in (
        from_api("Node", item) for item in cluster.client.request("GET", "/api/v1/nodes")["items"])
        if isinstance(n, Node)}
    assert all(count <= capacity[name] for name, count in used.items())  # no node over its CPUs: no double bind
    assert set(per_group.values()) == {8}  # every gang whole


def test_a_cycle_its_budget_cut_short_is_followed_at_once_not_after_a_period(api: ApiServer,
                                                                            tmp_path: Path) -> None:
    """A budget of a nanosecond lets each cycle place one gang; with a ten-minute period, six gangs bound
    within the test's minute show that the process ran each next cycle at once, as it must for the jobs a
    cut cycle deferred (``Scheduler.cycle_budget``)."""
    cluster = cluster_for(api)
    with contextlib.suppress(Conflict):
        cluster.create(Queue.model_validate({"metadata": {"name": "default"}}))
    for i in range(3):
        add_node(cluster, node(f"budget-{i}", cpu="16", memory="64Gi"))
    gangs(cluster, "budget", 6, 2)
    process = start_process(api, tmp_path, "scheduler", "budget", "--period", "600", "--cycle-budget", "0.000001",
                            "--no-leader-elect", "--log-format", "json")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(p.spec.nodeName for p in bound_pods(cluster, "budget")):
            time.sleep(0.2)
    finally:
        stop_process(process)
    log = (tmp_path / "scheduler-budget.log").read_text()
    pods = bound_pods(cluster, "budget")
    assert len(pods) == 12 and all(p.spec.nodeName for p in pods), log
    assert '"deferred": 5' in log  # the first cycle placed one gang and said it left five


def test_two_schedulers_one_leads_and_the_other_takes_over_once_the_lease_expires(api: ApiServer,
                                                                                  tmp_path: Path) -> None:
    """A 3 s Lease renewed every 0.5 s: after the leader's kill -9 the standby holds the Lease once it has
    expired (a takeover takes the Lease's duration plus at most a retry period; the 15 s bound leaves room
    for a loaded machine), and schedules. A clean stop gives the Lease up at once."""
    from hetsched.cluster.leader import LeaderElector

    client = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
    lease = LeaderElector(client, "default", "hetsched-scheduler", "observer")
    processes = {name: start_process(api, tmp_path, "scheduler", name, "--period", "0.5", "--lease-duration", "3",
                                     "--retry-period", "0.5")
                 for name in ("alpha", "beta")}
    try:
        deadline = time.monotonic() + 60
        while lease.holder().rsplit("_", 1)[0] not in processes and time.monotonic() < deadline:
            time.sleep(0.2)
        leader = lease.holder().rsplit("_", 1)[0]  # the replica's --id, then its start's own suffix
        assert leader in processes
        processes[leader].send_signal(signal.SIGKILL)
        processes[leader].wait()
        killed = time.monotonic()
        other = next(n for n in processes if n != leader)
        while lease.holder().rsplit("_", 1)[0] != other and time.monotonic() - killed < 30:
            time.sleep(0.1)
        takeover = time.monotonic() - killed
        print(f"leader killed → the other holds the Lease after {takeover:.1f} s")
        assert lease.holder().rsplit("_", 1)[0] == other and takeover < 15, takeover
        cluster = cluster_for(api)
        with contextlib.suppress(Conflict):
            cluster.create(Queue.model_validate({"metadata": {"name": "default"}}))
        add_node(cluster, node("failover-node", cpu="8"))
        gangs(cluster, "f", 1, 2)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(p.spec.nodeName for p in bound_pods(cluster, "f")):
            time.sleep(0.2)
        assert all(p.spec.nodeName for p in bound_pods(cluster, "f"))  # the new leader schedules
        processes[other].send_signal(signal.SIGTERM)  # a clean stop releases the Lease
        assert processes[other].wait(timeout=30) == 0
        assert lease.holder() == ""
    finally:
        for process in processes.values():
            stop_process(process)


def test_usage_survives_a_controller_kill_and_the_leader_change_counting_each_second_once(api: ApiServer,
                                                                                          tmp_path: Path) -> None:
    """Issue 35: a pod of queue "books" requesting 2 CPUs runs; the leading controller charges it to the
    queue's QueueUsage every second; it is killed (-9) and the standby takes the Lease and goes on from the
    books' ``accountedUntil``: the core-hours are exactly 2 × the seconds run since the books opened (the
    QueueUsage's creation), never reset, nothing twice."""
    from hetsched.api.objects import QueueUsage
    from hetsched.cluster.leader import LeaderElector
    from tests.builders import pod, podgroup

    cluster = cluster_for(api)
    with contextlib.suppress(Conflict):
        cluster.create(Queue.model_validate({"metadata": {"name": "books"}}))
    add_node(cluster, node("books-node", cpu="8"))
    cluster.create(podgroup("ledger", 1, queue="books"))
    made = pod("ledger-0", "ledger", cpu="2", memory="1Gi")
    cluster.create(made.model_copy(update={"spec": made.spec.model_copy(update={"containers": [
        c.model_copy(update={"image": "busybox"}) for c in made.spec.containers]})}))
    cluster.bind("default/ledger-0", "books-node")
    started = int(time.time())
    cluster.client.request("PATCH", "/api/v1/namespaces/default/pods/ledger-0/status",
                           content_type="application/merge-patch+json", body={"status": {
                               "phase": "Running", "startTime": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                              time.gmtime(started))}})
    lease = LeaderElector(cluster.client, "default", "hetsched-controller", "observer")
    processes = {name: start_process(api, tmp_path, "controller", name, "--lease-duration", "3", "--retry-period",
                                     "0.5", "--usage-interval", "1") for name in ("ledger-a", "ledger-b")}

    def books() -> QueueUsage | None:
        try:
            found = cluster_for(api).client.request("GET", "/apis/hetsched.io/v1alpha1/queueusages/books")
        except NotFound:
            return None
        usage = from_api("QueueUsage", found)
        assert isinstance(usage, QueueUsage)
        return usage

    def charged(after: float) -> QueueUsage | None:
        usage = books()
        return usage if usage is not None and "cpu" in usage.status.used and (
            usage.status.accountedUntil or 0) > after else None

    try:
        first = wait_until(lambda: charged(started + 2), 60, "the leader charges the pod", books)
        leader = lease.holder().rsplit("_", 1)[0]
        processes[leader].send_signal(signal.SIGKILL)
        processes[leader].wait()
        killed_at = first.status.accountedUntil or 0
        later = wait_until(lambda: charged(killed_at + 5), 60, "the new leader goes on charging")
        assert lease.holder().rsplit("_", 1)[0] != leader
    finally:
        for process in processes.values():
            stop_process(process)
    opened = max(started, first.metadata.creationTimestamp or 0)  # the books open with the QueueUsage
    assert first.status.used["cpu"] == pytest.approx(2 * (killed_at - opened) / 3600, rel=1e-9)
    until = later.status.accountedUntil or 0
    assert later.status.used["cpu"] == pytest.approx(2 * (until - opened) / 3600, rel=1e-9)  # once each
    assert later.status.byNamespace["default"]["cpu"] == pytest.approx(later.status.used["cpu"], rel=1e-9)


def wait_until(check: Any, seconds: float, what: str, show: Any = None) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out: {what}" + (f"; now: {show()}" if show is not None else ""))


def test_the_webhook_is_registered_and_refuses_a_bad_job_with_our_message(api: ApiServer, tmp_path: Path) -> None:
    """The API server calls hetsched's webhook (HTTPS on loopback, our CA in the registration): a Job with a
    misspelt policy event is refused with the message ``hetsched validate`` prints; a Job without
    queue, maxRetry and minAvailable is stored with Volcano's defaults."""
    server, client = register_webhook(api, tmp_path)
    try:
        job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "typo"},
               "spec": {"policies": [{"event": "PodFailure", "action": "RestartJob"}],
                        "tasks": [{"name": "w", "replicas": 2, "template": {"spec": {"containers": [
                            {"name": "c", "image": "busybox"}]}}}]}}
        deadline = time.monotonic() + 20
        while True:  # the registration takes effect within a moment
            try:
                client.request("POST", "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs", body=job)
            except Exception as exc:
                message = str(exc)
                break
            client.request("DELETE", "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/typo")
            assert time.monotonic() < deadline, "the webhook was never called"
            time.sleep(0.5)
        assert "admission: document 1 (Job/typo): spec.policies[0].event: Input should be" in message
        assert "got 'PodFailure'" in message
        job["spec"]["policies"] = [{"event": "PodFailed", "action": "RestartJob"}]
        stored = client.request("POST", "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs", body=job)
        spec = stored["spec"]
        assert (spec["queue"], spec["maxRetry"], spec["minAvailable"], spec["schedulerName"]) == (
            "default", 3, 2, "volcano")
    finally:
        unregister_webhook(client, server)


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A fresh self-signed certificate for 127.0.0.1 and its key (the webhook's TLS)."""
    cert, key = directory / "webhook.crt", directory / "webhook.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def register_webhook(api: ApiServer, tmp_path: Path, admission: Any = None) -> tuple[Any, KubeClient]:
    """hetsched's webhook on loopback (a fresh self-signed certificate), registered for Volcano Jobs."""
    import base64

    from hetsched.cluster.webhook import WebhookServer

    cert, key = self_signed(tmp_path)
    server = WebhookServer(str(cert), str(key), port=0, admission=admission)
    server.start()
    client = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
    bundle = base64.b64encode(cert.read_bytes()).decode()
    rules = [{"apiGroups": ["batch.volcano.sh"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"],
              "resources": ["jobs"]}]
    for kind, path in (("ValidatingWebhookConfiguration", "validate"), ("MutatingWebhookConfiguration", "mutate")):
        plural = kind.lower() + "s"
        client.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", body={
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": f"hetsched-{path}"},
            "webhooks": [{"name": f"{path}.hetsched.io", "rules": rules, "sideEffects": "None",
                          "admissionReviewVersions": ["v1"], "failurePolicy": "Fail",
                          "clientConfig": {"url": f"https://127.0.0.1:{server.port}/{path}", "caBundle": bundle}}]})
    return server, client


def test_the_webhook_refuses_a_job_naming_a_queue_its_namespace_may_not_use(api: ApiServer, tmp_path: Path) -> None:
    """Issue 35: queue "line" lists namespace ranking only; a Job of namespace "intruders" naming it is refused
    by the API server with the webhook's message (the webhook reads the Queue through the API server, as
    ``hetsched webhook`` does); one of ranking is stored. Namespace ranking's default queue is "line": its Job
    naming no queue is stored in it; elsewhere such a Job goes to "default". Queue "labelled" selects namespaces
    labelled business-line=search: ranking is, intruders is not."""
    from hetsched.cli.serve import namespace_lookup, queue_lookup
    from hetsched.cluster.webhook import PodAdmission

    client = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
    cluster_for(api).create(Queue.model_validate({"metadata": {"name": "line", "annotations": {
        "hetsched.io/namespaces": "ranking"}}}))
    cluster_for(api).create(Queue.model_validate({"metadata": {"name": "labelled", "annotations": {
        "hetsched.io/namespace-selector": '{"matchLabels": {"business-line": "search"}}'}}}))
    for namespace in ("ranking", "intruders"):
        annotations = {"hetsched.io/default-queue": "line"} if namespace == "ranking" else {}
        labels = {"business-line": "search"} if namespace == "ranking" else {}
        with contextlib.suppress(Conflict):
            client.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                                "metadata": {"name": namespace, "labels": labels,
                                                                             "annotations": annotations}})
    server, client = register_webhook(api, tmp_path, PodAdmission(queues=queue_lookup(client),
                                                                  namespaces=namespace_lookup(client)))
    try:
        job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "rank"},
               "spec": {"queue": "line", "minAvailable": 1, "tasks": [{"name": "w", "replicas": 1, "template": {
                   "spec": {"containers": [{"name": "w", "image": "busybox"}]}}}]}}
        with pytest.raises(Invalid) as refused:
            client.request("POST", "/apis/batch.volcano.sh/v1alpha1/namespaces/intruders/jobs", body=job)
        assert "namespace intruders may not submit to queue line" in str(refused.value)
        client.request("POST", "/apis/batch.volcano.sh/v1alpha1/namespaces/ranking/jobs", body=job)
        unnamed = {**job, "metadata": {"name": "no-queue"}, "spec": {k: v for k, v in job["spec"].items()
                                                                     if k != "queue"}}
        stored = client.request("POST", "/apis/batch.volcano.sh/v1alpha1/namespaces/ranking/jobs", body=unnamed)
        assert stored["spec"]["queue"] == "line"  # the namespace's default queue, set at admission
        elsewhere = client.request("POST", "/apis/batch.volcano.sh/v1alpha1/namespaces/intruders/jobs", body=unnamed)
        assert elsewhere["spec"]["queue"] == "default"
        selected = {**job, "metadata": {"name": "selected"}, "spec": {**job["spec"], "queue": "labelled"}}
        client.request("POST", "/apis/batch.volcano.sh/v1alpha1/namespaces/ranking/jobs", body=selected)
        with pytest.raises(Invalid) as unlabelled:  # the namespace's labels, read through the API server
            client.request("POST", "/apis/batch.volcano.sh/v1alpha1/namespaces/intruders/jobs", body=selected)
        assert "may not submit to queue labelled" in str(unlabelled.value)
    finally:
        unregister_webhook(client, server)


def unregister_webhook(client: KubeClient, server: Any) -> None:
    for plural, path in (("validatingwebhookconfigurations", "validate"), ("mutatingwebhookconfigurations", "mutate")):
        client.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/hetsched-{path}")
    server.stop()


RBAC_PATHS = {"ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts",
              "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
              "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
              "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
              "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings"}


def apply_chart_rbac(admin: KubeClient) -> None:
    """The chart's ServiceAccounts and RBAC (templates/serviceaccounts.yaml and rbac.yaml, rendered for
    namespace hetsched — their only template value), applied once."""
    for template in ("serviceaccounts.yaml", "rbac.yaml"):
        rendered = (ROOT / "deploy/helm/hetsched/templates" / template).read_text().replace(
            "{{ .Release.Namespace }}", "hetsched")
        assert "{{" not in rendered
        for document in yaml.safe_load_all(rendered):
            namespace = document["metadata"].get("namespace", "")
            with contextlib.suppress(Conflict):
                admin.request("POST", RBAC_PATHS[document["kind"]].format(namespace=namespace), body=document)


def test_the_scheduler_runs_under_its_own_service_account_and_nothing_more(api: ApiServer, tmp_path: Path) -> None:
    """The chart's RBAC (templates/rbac.yaml, rendered for namespace hetsched — its only template value)
    is applied; the scheduler process, authenticated as its ServiceAccount, schedules a gang; the same
    identity is refused what its ClusterRole does not grant (deleting a node, creating a pod)."""
    admin = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
    with contextlib.suppress(Conflict):
        admin.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": "hetsched"}})
    apply_chart_rbac(admin)
    cluster = cluster_for(api)
    with contextlib.suppress(Conflict):
        cluster.create(Queue.model_validate({"metadata": {"name": "default"}}))
    add_node(cluster, node("rbac-node", cpu="8"))
    gangs(cluster, "r", 1, 3)
    process = start_process(api, tmp_path, "scheduler", "rbac", "--period", "0.3", token_text=SCHEDULER_TOKEN,
                            lease_namespace="hetsched")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(p.spec.nodeName for p in bound_pods(cluster, "r")):
            time.sleep(0.3)
        assert all(p.spec.nodeName for p in bound_pods(cluster, "r")), (tmp_path / "scheduler-rbac.log").read_text()
    finally:
        stop_process(process)
    limited = KubeClient.from_token(api.url, SCHEDULER_TOKEN, ca_file=api.ca)
    for method, path, body in (("DELETE", "/api/v1/nodes/rbac-node", None),
                               ("POST", "/api/v1/namespaces/default/pods", {"apiVersion": "v1", "kind": "Pod",
                                "metadata": {"name": "sneaky"}, "spec": {"containers": [
                                    {"name": "c", "image": "busybox"}]}})):
        with pytest.raises(ApiError) as info:
            limited.request(method, path, body=body)
        assert info.value.status == 403 and SCHEDULER_USER in str(info.value)


def test_the_node_agent_publishes_to_a_real_apiserver(api: ApiServer, tmp_path: Path) -> None:
    import json

    from hetsched.agents.backends.fake import FakeBackend
    from hetsched.agents.node_agent import CONDITION, TAINT, NodeAgent
    from hetsched.devices.inventory import NODE_ANNOTATION, parse_node_devices

    cluster = cluster_for(api)
    add_node(cluster, node("agent-node", cpu="8"))
    config = tmp_path / "chips.yaml"
    config.write_text(json.dumps({"chips": [{"id": 0, "health": "OK"}, {"id": 1, "health": "Critical"}]}))
    agent = NodeAgent(KubeCluster(KubeClient.from_token(api.url, api.token, ca_file=api.ca)), "agent-node",
                      FakeBackend(config))
    agent.sync()
    stored = from_api("Node", cluster.client.request("GET", "/api/v1/nodes/agent-node"))
    assert isinstance(stored, Node)
    chips = parse_node_devices(stored.metadata.annotations[NODE_ANNOTATION], "agent-node").devices[0].chips
    assert [c.health for c in chips] == ["Healthy", "Unhealthy"]
    condition = next(c for c in stored.status.conditions if c.type == CONDITION)
    assert (condition.status, condition.reason) == ("False", "ChipsUnhealthy")
    assert stored.metadata.labels["accelerator"] == "fake-accelerator" and TAINT not in stored.spec.taints
    config.write_text(json.dumps({"chips": [{"id": 0, "health": "Alarm"}, {"id": 1, "health": "Critical"}]}))
    agent.sync()
    stored = from_api("Node", cluster.client.request("GET", "/api/v1/nodes/agent-node"))
    assert isinstance(stored, Node) and TAINT in stored.spec.taints
    assert any(c.type == "Ready" for c in stored.status.conditions)  # the kubelet's conditions are kept


def test_an_object_that_fails_validation_is_reported_as_an_event_not_a_crash(api: ApiServer) -> None:
    """With no webhook in the way, a Job with a misspelt event reaches the store: the adapter leaves it out,
    says why in a Warning Event and an ``Invalid`` condition on it, and keeps delivering everything else."""
    client = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
    client.request("POST", "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs", body={
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "broken"},
        "spec": {"policies": [{"event": "PodFailure", "action": "RestartJob"}],
                 "tasks": [{"name": "w", "replicas": 1, "template": {"spec": {"containers": [
                     {"name": "c", "image": "busybox"}]}}}]}})
    cluster = cluster_for(api)
    seen: list[str] = []
    cluster.watch(("Job",), lambda event: seen.append(event.object.metadata.name))
    assert cluster.wait_synced(30)
    cluster.pump()
    cluster.stop()
    assert "broken" not in seen
    events = client.request("GET", "/api/v1/namespaces/default/events")["items"]
    found = [e for e in events if e["involvedObject"].get("name") == "broken" and e["reason"] == "InvalidObject"]
    assert found and "spec.policies[0].event" in found[0]["message"] and found[0]["type"] == "Warning"
    job = client.request("GET", "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/broken")
    (condition,) = [c for c in job["status"]["conditions"] if c["type"] == "Invalid"]
    assert condition["reason"] == "ValidationFailed" and "PodFailure" in condition["message"]


def test_an_api_server_outage_makes_the_scheduler_wait_and_resume(tmp_path: Path) -> None:
    """The scheduler binds a gang; kube-apiserver goes away and comes back (same etcd); the scheduler
    process backs off instead of dying, then binds the next gang — nothing bound twice."""
    with real_apiserver(tmp_path) as api:
        install_crds(KubeClient.from_token(api.url, api.token, ca_file=api.ca))
        cluster = cluster_for(api)
        cluster.create(Queue.model_validate({"metadata": {"name": "default"}}))
        for i in range(4):
            add_node(cluster, node(f"o-{i}", cpu="4"))
        process = start_process(api, tmp_path, "scheduler", "outage", "--period", "0.2", "--no-leader-elect")
        try:
            gangs(cluster, "before", 2, 4)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not all(p.spec.nodeName for p in bound_pods(cluster, "before")):
                time.sleep(0.2)
            api.restart()
            assert process.poll() is None  # still running through the outage
            gangs(cluster, "after", 2, 4)
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and not all(p.spec.nodeName for p in bound_pods(cluster, "after")):
                time.sleep(0.3)
            pods = bound_pods(cluster, "before") + bound_pods(cluster, "after")
            log = (tmp_path / "scheduler-outage.log").read_text()
            assert len(pods) == 16 and all(p.spec.nodeName for p in pods), log
            per_node: dict[str, int] = {}
            for p in pods:
                per_node[p.spec.nodeName] = per_node.get(p.spec.nodeName, 0) + 1
            assert max(per_node.values()) <= 4  # 4 CPUs each: nothing bound twice
            assert process.poll() is None
        finally:
            stop_process(process)


def test_evictions_go_through_the_eviction_api_and_respect_disruption_budgets(api: ApiServer) -> None:
    """Kubernetes 1.20 has no policy/v1 Eviction: the adapter falls back to policy/v1beta1 there. A budget
    that allows nothing makes the API server answer 429, which is TooManyRequests; without it the pod goes; a
    pod that does not exist is NotFound. The budget is made in the policy API this server serves."""
    from hetsched.benchmark.apiserver import policy_version, server_version
    from hetsched.ports import NotFound, TooManyRequests

    cluster = cluster_for(api)
    with contextlib.suppress(Conflict):
        cluster.create(Queue.model_validate({"metadata": {"name": "default"}}))
    add_node(cluster, node("evict-node", cpu="8"))
    gangs(cluster, "e", 1, 2)
    for name in ("e0-0", "e0-1"):
        cluster.client.request("PATCH", f"/api/v1/namespaces/default/pods/{name}",
                               content_type="application/merge-patch+json", body={"metadata": {"labels": {"app": "e"}}})
        cluster.bind(f"default/{name}", "evict-node")
        cluster.client.request("PATCH", f"/api/v1/namespaces/default/pods/{name}/status",
                               content_type="application/merge-patch+json",
                               body={"status": {"phase": "Running", "conditions": [
                                   {"type": "Ready", "status": "True"}]}})
    policy = policy_version(server_version(cluster.client.request("GET", "/version")))
    cluster.client.request("POST", f"/apis/{policy}/namespaces/default/poddisruptionbudgets", body={
        "apiVersion": policy, "kind": "PodDisruptionBudget", "metadata": {"name": "e0"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "e"}}}})
    with pytest.raises(TooManyRequests):  # no disruption controller here: the budget allows nothing → 429
        cluster.evict("default/e0-0", "test")
    cluster.client.request("GET", "/api/v1/namespaces/default/pods/e0-0")  # still there
    cluster.client.request("DELETE", f"/apis/{policy}/namespaces/default/poddisruptionbudgets/e0")
    cluster.evict("default/e0-0", "test")
    # no kubelet here to confirm: the evicted pod is terminating (its deletion stamped), not yet gone
    assert cluster.client.request("GET", "/api/v1/namespaces/default/pods/e0-0")["metadata"]["deletionTimestamp"]
    with pytest.raises(NotFound):
        cluster.evict("default/nope", "test")


# ----------------------------------------------------------------------------- doctor and explain


def doctor_findings(api: ApiServer, conf: Any = None, stuck_after: float = 300.0) -> dict[str, dict[str, str]]:
    """check → {object: severity} of ``hetsched doctor``'s cluster checks on the real API server."""
    from hetsched.cluster.facts import kube_facts
    from hetsched.diagnose.checks import run_checks

    facts = kube_facts(KubeClient.from_token(api.url, api.token, ca_file=api.ca), lease_namespace="kube-system")
    facts.conf, facts.stuck_after = conf, stuck_after
    result: dict[str, dict[str, str]] = {}
    for finding in run_checks(facts):
        result.setdefault(finding.check, {})[finding.object] = finding.severity
    return result


def scrape_process_metrics(log: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Scrape the /metrics a process announced in its log: (sample name, sorted labels) → value."""
    import re
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    deadline = time.monotonic() + 20
    while not (found := re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", log.read_text())):
        assert time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.2)
    with urllib.request.urlopen(f"http://127.0.0.1:{found.group(1)}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_doctor_checks_on_a_real_apiserver(api: ApiServer, tmp_path: Path) -> None:
    """Each cluster check flags what it must (and passes what it must) on the real API server: components by
    their Leases and a webhook dry run, nodes as a device plugin leaves them, Job templates stored while no
    webhook guarded them, queues, stuck gangs, numaaware without a topology manager policy."""
    from hetsched.api.objects import PodGroup
    from hetsched.devices.inventory import TOPOLOGY_ANNOTATION
    from hetsched.scheduler.defaults import DEFAULT_CONF_YAML, parse_conf
    from tests.builders import pod, podgroup, queue

    cluster = cluster_for(api)
    client = cluster.client
    good = accel_node("doc-good", labels={"accelerator": "huawei-ascend"})
    good.metadata.annotations[TOPOLOGY_ANNOTATION] = "single-numa-node/static"
    add_node(cluster, good)
    add_node(cluster, accel_node("doc-fake", unhealthy=(2,), advertise=8))  # "fake resources"
    add_node(cluster, accel_node("doc-degraded", unhealthy=(3,)))
    add_node(cluster, accel_node("doc-silent", advertise=0))  # inventory, but the plugin advertises nothing
    add_node(cluster, node("doc-label", labels={"accelerator": "huawei-ascend"}))
    cluster.create(queue("doc-q", capability={"huawei.com/Ascend910": "4"}))
    cluster.create(podgroup("doc-never", 1, queue="doc-q", phase="Pending",
                            min_resources={"huawei.com/Ascend910": "16"}))
    cluster.create(podgroup("doc-fits", 1, queue="doc-q", phase="Pending",
                            min_resources={"huawei.com/Ascend910": "2"}))
    cluster.create(podgroup("doc-stuck", 2, phase="Inqueue"))
    for i in range(2):
        made = pod(f"doc-stuck-{i}", "doc-stuck", cpu="1", limits={"huawei.com/Ascend910": 8},
                   scheduler="nobody-serves-this" if i else "volcano")
        containers = [c.model_copy(update={"image": "busybox"}) for c in made.spec.containers]
        cluster.create(made.model_copy(update={"spec": made.spec.model_copy(update={"containers": containers})}))
    jobs = "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs"
    container = {"name": "c", "image": "x"}
    for name, resources in (("doc-requests", {"requests": {"huawei.com/Ascend910": "1"}}),
                            ("doc-limits", {"limits": {"huawei.com/Ascend910": "1"}})):
        client.request("POST", jobs, body={"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                           "metadata": {"name": name}, "spec": {"minAvailable": 1, "tasks": [
                                               {"name": "w", "replicas": 1, "template": {"spec": {"containers": [
                                                   {**container, "resources": resources}]}}}]}})
    numa = parse_conf(DEFAULT_CONF_YAML + "  - name: numaaware\n")
    found = doctor_findings(api, numa)

    def mine(check: str) -> dict[str, str]:
        return {o: s for o, s in found[check].items() if "doc-" in o or o.startswith(("component/", "schedulerName/"))}

    # nothing runs yet: no Lease, no webhook (an invalid Job passes a dry run)
    assert mine("components-running") == {"component/scheduler": "error", "component/controller": "error",
                                          "component/webhook": "error", "schedulerName/nobody-serves-this": "error"}
    assert mine("device-plugin-registered") == {"Node/doc-silent": "error", "Node/doc-label": "error"}
    assert mine("allocatable-matches-chips") == {"Node/doc-fake": "error"}
    assert mine("chip-health") == {"Node/doc-fake": "warning", "Node/doc-degraded": "warning"}
    assert mine("accelerator-limits") == {"Job/doc-requests": "error"}
    assert mine("queue-capability") == {"PodGroup/default/doc-never": "error"}
    assert mine("stuck-gangs") == {}  # created a moment ago
    assert doctor_findings(api, numa, stuck_after=0)["stuck-gangs"].get("PodGroup/default/doc-stuck") == "warning"
    numa_nodes = mine("numaaware-topology-policy")
    assert "Node/doc-good" not in numa_nodes and numa_nodes.get("Node/doc-fake") == "warning"
    assert "Node/doc-good" not in found.get("numaaware-topology-policy", {})
    assert not {o for c in found.values() for o in c if "doc-good" in o}  # the healthy node passes everything

    # start the components: the scheduler and controller take their Leases, the webhook answers
    server, admin = register_webhook(api, tmp_path)
    processes = [start_process(api, tmp_path, "scheduler", "doc-s", lease_namespace="kube-system"),
                 start_process(api, tmp_path, "controller", "doc-c", lease_namespace="kube-system")]
    try:
        deadline = time.monotonic() + 30
        while True:
            components = mine_components = {o: s for o, s in doctor_findings(api)["components-running"].items()
                                            if o.startswith("component/")}
            if all(s == "ok" for s in mine_components.values()) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert components == {"component/scheduler": "ok", "component/controller": "ok", "component/webhook": "ok"}
        # both processes serve /metrics: the leader says so, and the scheduler sees doc-fake's broken chip
        # (its Lease is taken before its first cycle ends: scraped again until that cycle is counted)
        deadline = time.monotonic() + 60
        while True:
            scraped = {name: scrape_process_metrics(tmp_path / f"{name}-doc-{name[0]}.log")
                       for name in ("scheduler", "controller")}
            if scraped["scheduler"].get(("hetsched_scheduling_cycles_total", ()), 0) > 0 \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert scraped["scheduler"][("hetsched_leader", ())] == 1
        assert scraped["controller"][("hetsched_leader", ())] == 1
        assert scraped["scheduler"][("hetsched_scheduling_cycles_total", ())] > 0
        labels = (("kind", "ascend"), ("model", "ascend910-8"), ("node", "doc-fake"))
        mismatch = ("hetsched_node_chips_mismatch", labels)
        assert scraped["scheduler"][mismatch] == 1
        assert any(name == "hetsched_jobs" for name, _ in scraped["controller"])
        # the CLI on the same cluster: JSON, and exit code 2 for the errors above
        token = tmp_path / "doctor-token"
        token.write_text(api.token)
        run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "doctor", "--server", api.url, "--token-file",
                              str(token), "--ca-file", api.ca, "--json"],  # Leases found by name
                             capture_output=True, text=True, timeout=120, check=False)
        assert run.returncode == 2, run.stderr
        report = {(f["check"], f["object"]): f for f in __import__("json").loads(run.stdout)["findings"]}
        fake = report[("allocatable-matches-chips", "Node/doc-fake")]
        assert "allocatable 8 but 7 healthy of 8" in fake["evidence"] and fake["fix"]
        # explain on the real API server
        explained = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "explain", "doc-never", "--server",
                                    api.url, "--token-file", str(token), "--ca-file", api.ca, "--json"],
                                   capture_output=True, text=True, timeout=120, check=False)
        assert explained.returncode == 0, explained.stderr
        data = __import__("json").loads(explained.stdout)
        assert data["queueStatus"]["capability"] == {"huawei.com/Ascend910": "4"}
        assert any("capability" in hint for hint in data["unblock"]), data
        stored = cluster.get("PodGroup", "default/doc-never")
        assert isinstance(stored, PodGroup)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=15)
            stop_process(process)
        unregister_webhook(admin, server)


# ----------------------------------------------------------------------------- stopping


def test_every_component_stops_within_2s_of_sigterm_with_its_watches_idle(api: ApiServer, tmp_path: Path) -> None:
    """All five long-running processes, connected to the real API server and settled (watches open and
    idle, Leases held, kubelet's ListAndWatch stream open, an idle TCP connection on the webhook's port):
    each exits with status 0 within ``cli.shutdown.BOUND`` of SIGTERM, and the leaders give their Leases up."""
    import json
    import os
    import socket
    import ssl

    from hetsched.agents.deviceplugin import api_pb2
    from hetsched.cli.shutdown import BOUND
    from hetsched.cluster.leader import LeaderElector
    from tests.test_device_plugin import FakeKubelet, plugin_stub, write_chips

    client = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
    with contextlib.suppress(Conflict):
        client.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": "stop-bound"}})
    add_node(cluster_for(api), node("stop-node", cpu="8"))
    token = tmp_path / "token"
    token.write_text(api.token)
    connection = ["--server", api.url, "--token-file", str(token), "--ca-file", api.ca]
    chips = tmp_path / "chips.json"
    write_chips(chips)
    cert, key = self_signed(tmp_path)
    webhook_port = _free_port()  # outside the ephemeral range: no outgoing connection takes it meanwhile
    plugin_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"stop-{os.getpid()}-{time.monotonic_ns()}"  # short path
    plugin_dir.mkdir()
    kubelet = FakeKubelet(plugin_dir)
    metrics = ["--metrics-address", "127.0.0.1:0"]
    commands = {
        "scheduler": ["scheduler", *connection, "--lease-namespace", "stop-bound", "--id", "stop-s", "--period", "0.5"],
        "controller": ["controller", *connection, "--lease-namespace", "stop-bound", "--id", "stop-c"],
        "webhook": ["webhook", "--cert", str(cert), "--key", str(key), "--port", str(webhook_port)],
        "node-agent": ["node-agent", "--vendor", "fake", "--config", str(chips), "--node", "stop-node", *connection,
                       "--period", "0.5"],
        "device-plugin": ["device-plugin", "--vendor", "fake", "--config", str(chips), "--dir", str(plugin_dir),
                          "--node", "stop-node", *connection, "--period", "0.5"],
    }
    processes: dict[str, subprocess.Popen[bytes]] = {}
    for name, command in commands.items():
        with (tmp_path / f"{name}.log").open("ab") as log:
            processes[name] = subprocess.Popen([sys.executable, "-m", "hetsched.cli.main", *command, *metrics],
                                               stdout=log, stderr=log)
    idle: socket.socket | None = None
    channel = None
    try:
        def settled() -> bool:
            logs = {name: (tmp_path / f"{name}.log").read_text() for name in processes}
            if any(p.poll() is not None for p in processes.values()):
                raise AssertionError(f"a process exited early: {logs}")
            leases = [LeaderElector(client, "stop-bound", f"hetsched-{name}", "observer").holder().rsplit("_", 1)[0]
                      for name in ("scheduler", "controller")]
            return (leases == ["stop-s", "stop-c"] and kubelet.registered.is_set()
                    and '"node": "stop-node"' in logs["node-agent"] and "webhook serving" in logs["webhook"]
                    and scrape_process_metrics(tmp_path / "scheduler.log")[
                        ("hetsched_scheduling_cycles_total", ())] > 0
                    and scrape_process_metrics(tmp_path / "controller.log")[("hetsched_leader", ())] == 1)

        deadline = time.monotonic() + 120
        while not settled():
            assert time.monotonic() < deadline, "the processes did not settle within 120 s"
            time.sleep(0.5)
        idle = socket.create_connection(("127.0.0.1", webhook_port), timeout=30)  # connects and says nothing
        context = ssl.create_default_context(cafile=str(cert))
        with socket.create_connection(("127.0.0.1", webhook_port), timeout=30) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:  # answered despite the idle one
            tls.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            assert tls.recv(64).split(b" ")[1] == b"200"
        channel = __import__("grpc").insecure_channel(f"unix://{plugin_dir / 'hetsched-fake.sock'}")
        watch = plugin_stub(channel).ListAndWatch(api_pb2.Empty())
        assert len(next(watch).devices) == 4  # kubelet's stream is open, and stays open while it stops
        time.sleep(2)  # every watch is open and idle (nothing changes in the cluster)
        took: dict[str, float] = {}
        for name, process in processes.items():
            sent = time.monotonic()
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=30)
            took[name] = time.monotonic() - sent
            log_text = (tmp_path / f"{name}.log").read_text()
            assert code == 0, (name, log_text[-3000:])
            assert "still inside a request" not in log_text, log_text[-3000:]  # the watches were cut, not waited
        print("SIGTERM → exit: " + json.dumps({name: round(seconds, 3) for name, seconds in took.items()}))
        assert all(seconds < BOUND for seconds in took.values()), took
        assert [LeaderElector(client, "stop-bound", f"hetsched-{name}", "observer").holder()
                for name in ("scheduler", "controller")] == ["", ""]  # both Leases given up
        assert not (plugin_dir / "hetsched-fake.sock").exists()
    finally:
        if idle is not None:
            idle.close()
        if channel is not None:
            channel.close()
        for process in processes.values():
            stop_process(process)
        kubelet.stop()
        for leftover in plugin_dir.iterdir():
            leftover.unlink()
        plugin_dir.rmdir()


def test_the_api_servers_certificate_is_verified_unless_insecure_is_asked_for(api: ApiServer, tmp_path: Path) -> None:
    """--server + --token-file without --ca-file checks the certificate against the system's CAs (this test
    server's self-signed one fails there) instead of sending the token over unverified TLS; --insecure is the
    explicit way to skip it."""
    token = tmp_path / "token"
    token.write_text(api.token)
    with pytest.raises(Exception, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        KubeClient.connect(server=api.url, token_file=str(token)).request("GET", "/version")
    import urllib3

    with pytest.warns(urllib3.exceptions.InsecureRequestWarning):  # and urllib3 says so, every time
        assert KubeClient.connect(server=api.url, token_file=str(token), insecure=True).request("GET", "/version")
    assert KubeClient.connect(server=api.url, token_file=str(token), ca_file=api.ca).request("GET", "/version")


def test_lists_are_read_page_by_page(api: ApiServer) -> None:
    """LIST with limit/continue: with a page of 2, seven Queues come back whole, and the informer built on it
    syncs with all of them."""
    cluster = cluster_for(api)
    cluster.PAGE = 2
    client = cluster.client
    names = [f"paged-{i}" for i in range(7)]
    for name in names:
        client.request("POST", "/apis/scheduling.volcano.sh/v1beta1/queues", body={
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
            "spec": {"weight": 1}})
    pages: list[int] = []
    request = client.request

    def counting(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        answer = request(method, path, **kwargs)
        if method == "GET" and path.endswith("/queues"):
            assert (kwargs.get("query") or {}).get("limit") == 2
            pages.append(len(answer.get("items") or []))
        return answer

    client.request = counting  # type: ignore[method-assign]
    try:
        items, version = cluster._list("Queue")
        assert set(names) <= {item["metadata"]["name"] for item in items} and version
        assert len(pages) >= 4 and max(pages) <= 2, pages
        cluster.start(["Queue"])
        assert cluster.wait_synced(60)
        cluster.pump()
        assert set(names) <= {q.metadata.name for q in cluster.list("Queue")}
    finally:
        cluster.stop(2.0)
        for name in names:
            client.request("DELETE", f"/apis/scheduling.volcano.sh/v1beta1/queues/{name}")


def test_lease_expiry_is_judged_by_locally_observed_time_not_the_holders_clock(api: ApiServer) -> None:
    """A holder whose clock is an hour behind is not robbed while it renews; one whose clock is years ahead
    loses the Lease once nobody has seen it change for its duration (client-go's observedTime)."""
    from hetsched.cluster.leader import LeaderElector

    client = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
    path = "/apis/coordination.k8s.io/v1/namespaces/default/leases"

    def lease(name: str, renew: str) -> None:
        client.request("POST", path, body={"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                           "metadata": {"name": name}, "spec": {
                                               "holderIdentity": "other", "leaseDurationSeconds": 1,
                                               "renewTime": renew, "acquireTime": renew}})

    def renew(name: str, when: str) -> None:
        current = client.request("GET", f"{path}/{name}")
        client.request("PUT", f"{path}/{name}", body={**current, "spec": {**current["spec"], "renewTime": when}})

    lease("skew-behind", "2026-01-01T00:00:00.000000Z")  # an hour (or a year) behind: old, but renewed
    behind = LeaderElector(client, "default", "skew-behind", "me", duration=1, retry=0.2)
    for second in range(3):
        assert not behind.try_acquire_or_renew()  # it changed since we last looked: the holder is alive
        renew("skew-behind", f"2026-01-01T00:00:0{second + 1}.000000Z")
        time.sleep(0.5)
    lease("skew-ahead", "2100-01-01T00:00:00.000000Z")  # the holder's clock is far ahead, and it died
    ahead = LeaderElector(client, "default", "skew-ahead", "me", duration=1, retry=0.2)
    assert not ahead.try_acquire_or_renew()  # first seen now: give it its duration
    time.sleep(1.5)  # no change seen for longer than its duration (1 s) on this process's monotonic clock
    assert ahead.try_acquire_or_renew() and ahead.holder() == "me"


def test_a_squatter_with_an_absurd_lease_duration_loses_the_lease_after_a_bounded_time(api: ApiServer) -> None:
    """Issue 29: a Lease rewritten to holder "squatter" with ``leaseDurationSeconds: 2147483647`` and never
    renewed again is taken over after at most ten of our own durations (here 0.5 s × 10), not in 68 years."""
    from hetsched.cluster.leader import MAX_DURATION_FACTOR, LeaderElector

    client = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
    client.request("POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", body={
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "squatted"},
        "spec": {"holderIdentity": "squatter", "leaseDurationSeconds": 2147483647,
                 "renewTime": "2026-01-01T00:00:00.000000Z"}})
    elector = LeaderElector(client, "default", "squatted", "me", duration=0.5, retry=0.1)
    assert not elector.try_acquire_or_renew()  # first seen now
    time.sleep(MAX_DURATION_FACTOR * 0.5 + 0.5)
    assert elector.try_acquire_or_renew() and elector.holder() == "me"


def make_namespace(client: KubeClient, name: str) -> None:
    with contextlib.suppress(Conflict):
        client.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": name}})


def test_a_leader_frozen_past_its_lease_binds_nothing_when_it_wakes(api: ApiServer, tmp_path: Path) -> None:
    """Fencing: a leading scheduler is SIGSTOPped (idle, its cache current); a standby elector waits out the
    Lease and takes it; new pods arrive; the frozen leader is SIGCONTed and its informers show it the new
    pods — it binds none of them (every write asks the Lease first, and its last renewal began more than the
    renew deadline ago), says it lost the Lease, and exits 1."""
    from hetsched.cluster.leader import LeaderElector

    client = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
    make_namespace(client, "fence")
    cluster = cluster_for(api)
    with contextlib.suppress(Conflict):
        cluster.create(Queue.model_validate({"metadata": {"name": "default"}}))
    add_node(cluster, node("fence-node", cpu="64"))
    frozen = start_process(api, tmp_path, "scheduler", "frozen", "--period", "0.3", "--lease-duration", "3",
                           "--retry-period", "0.5", lease_namespace="fence")
    standby = LeaderElector(client, "fence", "hetsched-scheduler", "standby", duration=3, retry=0.5)
    try:
        gangs(cluster, "before-", 1, 2)
        deadline = time.monotonic() + 60
        while not all(p.spec.nodeName for p in bound_pods(cluster, "before-")):
            assert time.monotonic() < deadline and frozen.poll() is None, (
                tmp_path / "scheduler-frozen.log").read_text()
            time.sleep(0.2)
        frozen.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 60
        while not standby.try_acquire_or_renew():  # a standby's rounds: it takes over once the Lease expired
            assert time.monotonic() < deadline, standby.holder()
            time.sleep(0.5)
        standby.start()  # and keeps it
        gangs(cluster, "after-", 1, 2)
        frozen.send_signal(signal.SIGCONT)
        code = frozen.wait(timeout=60)
        log_text = (tmp_path / "scheduler-frozen.log").read_text()
        assert code == 1 and "lost the lease" in log_text, log_text[-3000:]
        assert not any(p.spec.nodeName for p in bound_pods(cluster, "after-"))  # the frozen leader bound nothing
        assert standby.holder() == "standby"
    finally:
        if frozen.poll() is None:
            frozen.send_signal(signal.SIGCONT)
        stop_process(frozen)
        standby.stop()
        standby.release()


def test_sigterm_mid_bind_batch_stops_within_2s_and_gives_the_lease_up(api: ApiServer, tmp_path: Path) -> None:
    """A batch of 300 binds at 10 per second (30 s of work): SIGTERM after a few binds ends the process
    with status 0 within ``cli.shutdown.BOUND`` — no new bind is started, the Lease is released — and the
    pods not bound are left for the next leader."""
    from hetsched.cli.shutdown import BOUND
    from hetsched.cluster.leader import LeaderElector

    client = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
    make_namespace(client, "midbatch")
    cluster = cluster_for(api)
    with contextlib.suppress(Conflict):
        cluster.create(Queue.model_validate({"metadata": {"name": "default"}}))
    add_node(cluster, node("batch-node", cpu="1000", memory="4000Gi", pods=1000))
    gangs(cluster, "batch-", 1, 300)
    process = start_process(api, tmp_path, "scheduler", "batch", "--period", "0.3", "--qps", "10", "--burst", "1",
                            lease_namespace="midbatch")
    try:
        deadline = time.monotonic() + 120
        while sum(1 for p in bound_pods(cluster, "batch-") if p.spec.nodeName) < 5:
            assert time.monotonic() < deadline and process.poll() is None, (
                tmp_path / "scheduler-batch.log").read_text()[-3000:]
            time.sleep(0.2)
        standby = start_process(api, tmp_path, "scheduler", "standby", "--period", "0.3",
                                lease_namespace="midbatch")
        deadline = time.monotonic() + 60
        while "metrics on" not in (tmp_path / "scheduler-standby.log").read_text():
            assert time.monotonic() < deadline and standby.poll() is None, (
                tmp_path / "scheduler-standby.log").read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(1)  # a standby, waiting on its elector
        sent = time.monotonic()
        standby.send_signal(signal.SIGTERM)
        code = standby.wait(timeout=30)
        took = time.monotonic() - sent
        print(f"SIGTERM to a standby → exit in {took:.3f} s")
        assert code == 0 and took < BOUND, (took, (tmp_path / "scheduler-standby.log").read_text()[-3000:])
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
        took = time.monotonic() - sent
        log_text = (tmp_path / "scheduler-batch.log").read_text()
        print(f"SIGTERM mid-batch → exit in {took:.3f} s")
        assert code == 0 and took < BOUND, (took, log_text[-3000:])
        bound = sum(1 for p in bound_pods(cluster, "batch-") if p.spec.nodeName)
        assert 5 <= bound < 300, bound
        assert LeaderElector(client, "midbatch", "hetsched-scheduler", "observer").holder() == ""
    finally:
        stop_process(process)


def service_account_token(admin: KubeClient, name: str, pod: dict[str, Any] | None = None) -> str:
    """A token for ServiceAccount hetsched/``name`` from the TokenRequest API — bound to ``pod`` when given,
    as the projected token kubelet mounts into the node agent's pod."""
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if pod is not None:
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                  "uid": pod["metadata"]["uid"]}
    answer = admin.request("POST", f"/api/v1/namespaces/hetsched/serviceaccounts/{name}/token", body={
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
    return str(answer["status"]["token"])


def refused(client: KubeClient, method: str, path: str, body: Any = None, **kwargs: Any) -> str:
    """The API server's 403 for this request (the test fails if it is anything else)."""
    with pytest.raises(ApiError) as info:
        client.request(method, path, body=body, **kwargs)
    assert info.value.status == 403, (method, path, info.value)
    return str(info.value)


def test_least_privilege_each_denial_is_a_real_403(api: ApiServer, tmp_path: Path) -> None:
    """The chart's RBAC and its /restrict registration (rendered by ``hetsched install``), our webhook behind
    it, and real ServiceAccount tokens (the node agent's bound to its pod on node agent-a): the node agent
    writes its own Node and ConfigMap, and is refused every other Node, every other ConfigMap, reading
    kube-system and deleting nodes; the controller is refused a Secret, Service, NetworkPolicy or ConfigMap no
    Volcano Job owns (creating and deleting); the scheduler is refused ConfigMaps outside kube-system. A real
    node agent syncs with exactly these rights."""
    import base64
    import json

    from hetsched.agents.backends.fake import FakeBackend
    from hetsched.agents.node_agent import NodeAgent
    from hetsched.cli.install import render
    from hetsched.cli.serve import pod_node_lookup
    from hetsched.cluster.restriction import Restriction
    from hetsched.cluster.webhook import WebhookServer
    from hetsched.install.values import load_values

    admin = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
    make_namespace(admin, "hetsched")
    apply_chart_rbac(admin)
    cluster = cluster_for(api)
    for name in ("agent-a", "agent-b"):
        add_node(cluster, node(name, cpu="8"))
    pod = admin.request("POST", "/api/v1/namespaces/hetsched/pods", body={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "node-agent-a"},
        "spec": {"serviceAccountName": "hetsched-node-agent", "nodeName": "agent-a",
                 "containers": [{"name": "agent", "image": "hetsched"}]}})
    cert, key = self_signed(tmp_path)
    server = WebhookServer(str(cert), str(key), port=0, restriction=Restriction("hetsched", pod_node_lookup(admin)))
    server.start()
    values = load_values([("test", {"webhook": {"url": f"https://127.0.0.1:{server.port}"}})], [])
    registration = next(d for d in yaml.safe_load_all(render(values)) if d and d["kind"] ==
                        "ValidatingWebhookConfiguration" and d["metadata"]["name"] == "hetsched-restrict")
    registration["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(cert.read_bytes()).decode()
    registration["webhooks"][0]["failurePolicy"] = "Fail"  # here: a webhook not called fails the test
    admin.request("POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", body=registration)
    agent = KubeClient.from_token(api.url, service_account_token(admin, "hetsched-node-agent", pod), ca_file=api.ca)
    controller = KubeClient.from_token(api.url, service_account_token(admin, "hetsched-controller"), ca_file=api.ca)
    scheduler = KubeClient.from_token(api.url, SCHEDULER_TOKEN, ca_file=api.ca)
    label = {"metadata": {"labels": {"probe": "1"}}}
    merge = "application/merge-patch+json"
    try:
        deadline = time.monotonic() + 30
        while True:  # the registration takes effect within a moment
            try:
                agent.request("PATCH", "/api/v1/nodes/agent-b", body=label, content_type=merge)
            except ApiError as exc:
                if exc.status == 403 and "may write only Node agent-a" in str(exc):
                    break
            assert time.monotonic() < deadline, "the /restrict webhook was never called"
            time.sleep(0.3)
        agent.request("PATCH", "/api/v1/nodes/agent-a", body=label, content_type=merge)  # its own: allowed
        assert "may write only Node agent-a, not Node agent-b" in refused(
            agent, "PATCH", "/api/v1/nodes/agent-b/status", {"status": {"conditions": [
                {"type": "AcceleratorHealthy", "status": "False"}]}}, content_type=merge)
        refused(agent, "DELETE", "/api/v1/nodes/agent-a")  # RBAC: no delete at all
        mine = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mindx-dl-deviceinfo-agent-a"},
                "data": {"DeviceInfoCfg": "{}"}}
        agent.request("POST", "/api/v1/namespaces/kube-system/configmaps", body=mine)
        theirs = {**mine, "metadata": {"name": "mindx-dl-deviceinfo-agent-b"}}
        assert "may write only ConfigMap kube-system/mindx-dl-deviceinfo-agent-a" in refused(
            agent, "POST", "/api/v1/namespaces/kube-system/configmaps", theirs)
        refused(agent, "GET", "/api/v1/namespaces/kube-system/configmaps/mindx-dl-deviceinfo-agent-a")  # no reads
        refused(agent, "POST", "/api/v1/namespaces/default/configmaps", mine)  # RBAC: kube-system only
        config = tmp_path / "chips.yaml"
        config.write_text(json.dumps({"chips": [{"id": 0, "health": "OK"}, {"id": 1, "health": "Critical"}]}))
        NodeAgent(KubeCluster(agent), "agent-a", FakeBackend(config)).sync()  # what the agent does: allowed
        stored = admin.request("GET", "/api/v1/nodes/agent-a")
        assert any(c["type"] == "AcceleratorHealthy" for c in stored["status"]["conditions"])
        with pytest.raises(ApiError) as info:  # and the same agent, on another node's behalf: refused
            NodeAgent(KubeCluster(agent), "agent-b", FakeBackend(config)).sync()
        assert info.value.status == 403
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "planted-ssh"},
                  "data": {"id_rsa": "YXR0YWNrZXI="}}
        assert "only Secrets owned by a Volcano Job" in refused(
            controller, "POST", "/api/v1/namespaces/default/secrets", secret)
        admin.request("POST", "/api/v1/namespaces/default/secrets", body=secret)
        assert "only Secrets owned by a Volcano Job" in refused(
            controller, "DELETE", "/api/v1/namespaces/default/secrets/planted-ssh")
        owned = {**secret, "metadata": {"name": "owned-ssh", "ownerReferences": [{
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "owner", "uid": "u-1",
            "controller": True}]}}
        controller.request("POST", "/api/v1/namespaces/default/secrets", body=owned)
        refused(controller, "GET", "/api/v1/namespaces/default/secrets/owned-ssh")  # never reads a Secret
        refused(controller, "GET", "/api/v1/namespaces/default/secrets/planted-ssh")
        controller.request("DELETE", "/api/v1/namespaces/default/secrets/owned-ssh")
        # the job plugins' Services, NetworkPolicies and ConfigMaps: only a Job's, and ConfigMaps never read
        job_owner = owned["metadata"]["ownerReferences"]
        for path, body in (
                ("/api/v1/namespaces/default/services", {"apiVersion": "v1", "kind": "Service", "spec": {
                    "clusterIP": "None", "selector": {"volcano.sh/job-name": "owner"}}}),
                ("/apis/networking.k8s.io/v1/namespaces/default/networkpolicies", {
                    "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "spec": {"podSelector": {}}}),
                ("/api/v1/namespaces/default/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                            "data": {"VC_W_NUM": "1"}})):
            kind = body["kind"]
            assert f"only {kind}s owned by a Volcano Job" in refused(
                controller, "POST", path, {**body, "metadata": {"name": "planted"}})
            controller.request("POST", path, body={**body, "metadata": {"name": "owner", "ownerReferences": job_owner}})
            if kind != "ConfigMap":
                controller.request("GET", f"{path}/owner")  # whose it is, before deleting it with its Job
            controller.request("DELETE", f"{path}/owner")
        refused(controller, "GET", "/api/v1/namespaces/default/configmaps")
        # each component renews only its own Lease: the controller cannot read or take the scheduler's
        leases = "/apis/coordination.k8s.io/v1/namespaces/hetsched/leases"
        with contextlib.suppress(Conflict):  # an earlier test's scheduler may have made it
            admin.request("POST", leases, body={"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                                "metadata": {"name": "hetsched-scheduler"},
                                                "spec": {"holderIdentity": "scheduler-0", "leaseDurationSeconds": 15}})
        refused(controller, "GET", f"{leases}/hetsched-scheduler")
        squat = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "hetsched-scheduler"},
                 "spec": {"holderIdentity": "squatter", "leaseDurationSeconds": 2147483647}}
        refused(controller, "PUT", f"{leases}/hetsched-scheduler", squat)
        theirs = {**squat, "metadata": {"name": "hetsched-controller"}}
        refused(scheduler, "PUT", f"{leases}/hetsched-controller", theirs)
        with contextlib.suppress(Conflict):
            controller.request("POST", leases, body={**squat, "metadata": {"name": "hetsched-controller"},
                                                     "spec": {"holderIdentity": "controller-0"}})
        own = controller.request("GET", f"{leases}/hetsched-controller")
        controller.request("PUT", f"{leases}/hetsched-controller", body={**own, "spec": {"holderIdentity": "c-1"}})
        # the device plugin tells a refused hand-off in an Event on the pod, and may change nothing else
        plugin = KubeClient.from_token(api.url, service_account_token(admin, "hetsched-device-plugin"), ca_file=api.ca)
        told = plugin.request("POST", "/api/v1/namespaces/hetsched/events", body={
            "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "node-agent-a."},
            "involvedObject": {"kind": "Pod", "name": "node-agent-a", "namespace": "hetsched"},
            "reason": "HandOffRefused", "message": "copied or stale", "type": "Warning"})
        assert told["reason"] == "HandOffRefused"
        refused(plugin, "PATCH", "/api/v1/namespaces/hetsched/pods/node-agent-a", label, content_type=merge)
        refused(plugin, "GET", "/api/v1/namespaces/default/secrets/planted-ssh")
        refused(scheduler, "GET", "/api/v1/namespaces/default/configmaps")
        refused(scheduler, "GET", "/api/v1/configmaps")
        scheduler.request("GET", "/api/v1/namespaces/kube-system/configmaps")  # Ascend's device-info: allowed
    finally:
        admin.request("DELETE", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
                                "hetsched-restrict")
        server.stop()
