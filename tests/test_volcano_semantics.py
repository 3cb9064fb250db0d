"""Volcano's semantics where hetsched used to differ (issue 16), each case as Volcano's own scheduler
tests and docs state it:

- a gang counts its pending best-effort pods (no requests: an MPI/MindSpore master beside accelerator
  workers) toward minAvailable, as ``JobInfo.IsReady`` does, and ``backfill`` then places them;
- preempt and reclaim order victims by the *job's* priority (the PodGroup's priorityClassName) before the
  pod's, and never take a pod marked ``volcano.sh/preemptable: "false"``;
- a Queue's ``spec.priority`` orders queues before their share;
- ``enableReclaimable`` / ``enableJobStarving`` switch reclaim and eviction off; ``configurations:`` is
  checked instead of silently ignored;
- duplicate events or exit codes across a job's policies are refused, as Volcano's webhook refuses them.
"""

from __future__ import annotations

import re

import pytest

from hetsched.api.manifest import ManifestError, load_text
from hetsched.api.objects import AnyObject, Pod
from hetsched.cluster.spec import parse_cluster_spec
from hetsched.scheduler.defaults import DEFAULT_CONF_YAML, ConfError, parse_conf
from hetsched.sim.simulator import Simulation
from tests.builders import accel_node, gang, harness, node, pod, podgroup, priority_class, queue
from tests.builders import running_on as running_on_node
from tests.test_preemption import ASCEND, CONF, evicted, pods_of, running

GPU = "nvidia.com/gpu"


def test_a_gang_with_a_master_that_requests_nothing_schedules_whole() -> None:
    """An MPI job: a launcher with no requests and two 8-GPU workers, minAvailable 3. Before, the two
    workers were never enough for the gang (the launcher was left to backfill) and the job waited forever
    without a reason."""
    nodes = [accel_node(f"g{i}", GPU, "nvlink-8") for i in range(2)]
    objects: list[AnyObject] = [*nodes, podgroup("mpi", 3), pod("mpi-launcher", "mpi", best_effort=True,
                                                                task="launcher"),
                                *[pod(f"mpi-worker-{i}", "mpi", limits={GPU: 8}) for i in range(2)]]
    h = harness(objects)
    h.cycle()
    bound = h.bindings()
    assert sorted(bound) == ["mpi-launcher", "mpi-worker-0", "mpi-worker-1"]
    assert {bound["mpi-worker-0"], bound["mpi-worker-1"]} == {"g0", "g1"}


def test_the_best_effort_master_does_not_make_a_gang_whose_workers_do_not_fit_ready() -> None:
    nodes = [accel_node("g0", GPU, "nvlink-8")]  # room for one 8-GPU worker, the gang needs two
    objects: list[AnyObject] = [*nodes, podgroup("mpi", 3), pod("mpi-launcher", "mpi", best_effort=True,
                                                                task="launcher"),
                                *[pod(f"mpi-worker-{i}", "mpi", limits={GPU: 8}) for i in range(2)]]
    h = harness(objects)
    h.cycle()
    assert h.bindings() == {}
    assert h.condition("mpi").startswith("NotEnoughResources: ")
    assert h.condition("mpi").endswith("tasks in gang unschedulable: 0/1 nodes are available: 1 Insufficient "
                                       "nvidia.com/gpu")


def test_a_gang_of_best_effort_pods_only_is_still_all_or_nothing() -> None:
    """Counting pending best-effort pods must not let backfill place part of a gang made only of them."""
    objects: list[AnyObject] = [accel_node("n0").model_copy(update={"status": accel_node("n0").status.model_copy(
        update={"allocatable": {**accel_node("n0").status.allocatable, "pods": 2}})}),
        *gang("be", 3, best_effort=True)]
    h = harness(objects)
    h.cycle()
    assert h.bindings() == {}  # two pod slots, three pods: none placed


def running_with(name: str, where: str, job_class: str, pod_class: str) -> list[AnyObject]:
    objects = running(name, [where], min_member=1, klass=job_class)
    made = objects[1]
    assert isinstance(made, Pod)
    objects[1] = made.model_copy(update={"spec": made.spec.model_copy(update={"priorityClassName": pod_class})})
    return objects


def test_victims_are_chosen_by_job_priority_before_pod_priority() -> None:
    """Job a's PodGroup is low priority though its pod is high; job b's is the reverse. Volcano orders
    victims by the job's priority: a goes, although its pod outranks b's."""
    objects = [priority_class("low", 10), priority_class("mid", 500), priority_class("high", 1000),
               accel_node("n0"), accel_node("n1"),
               *running_with("a", "n0", job_class="low", pod_class="mid"),
               *running_with("b", "n1", job_class="mid", pod_class="low"),
               *gang("urgent", 1, limits={ASCEND: 8}, priority_class="high")]
    h = harness(objects, CONF)
    h.cycle()
    assert evicted(h) == ["a-0"]
    assert pods_of(h, "urgent") == {"urgent-0": "n0"}


@pytest.mark.parametrize("where", ["labels", "annotations"])
def test_a_pod_marked_not_preemptable_is_never_a_victim(where: str) -> None:
    objects = [priority_class("low", 10), priority_class("high", 1000), accel_node("n0"), accel_node("n1"),
               *running("keep", ["n0"], min_member=1), *running("spare", ["n1"], min_member=1, created=100),
               *gang("urgent", 1, limits={ASCEND: 8}, priority_class="high")]
    for index, obj in enumerate(objects):
        if isinstance(obj, Pod) and obj.metadata.name == "spare-0":  # the cheaper (newer) victim is protected
            meta = obj.metadata.model_copy(update={where: {**getattr(obj.metadata, where),
                                                           "volcano.sh/preemptable": "false"}})
            objects[index] = obj.model_copy(update={"metadata": meta})
    h = harness(objects, CONF)
    h.cycle()
    assert evicted(h) == ["keep-0"]
    # and when every candidate is protected, nothing is evicted and the urgent job waits
    protected = [o.model_copy(update={"metadata": o.metadata.model_copy(
        update={"labels": {"volcano.sh/preemptable": "no"}})}) if isinstance(o, Pod) and o.spec.nodeName else o
        for o in objects]
    h = harness(protected, CONF)
    h.cycle()
    assert evicted(h) == [] and not any(pods_of(h, "urgent").values())


def test_queue_priority_orders_queues_before_their_share() -> None:
    """Queue vip (priority 10) already holds a node, queue plain holds nothing; two nodes are free and both
    jobs fit within their queues' deserved shares (vip deserves 16 chips, plain 8). By share plain would go
    first; by priority vip's job takes the first free node."""
    vip = queue("vip")
    vip = vip.model_copy(update={"spec": vip.spec.model_copy(update={"priority": 10})})
    objects = [vip, queue("plain"), accel_node("n0"), accel_node("n1"), accel_node("n2"),
               *running("held", ["n0"], min_member=1, queue_name="vip", klass=""),
               *gang("vip-job", 1, limits={ASCEND: 8}, queue="vip"),
               *gang("plain-job", 1, limits={ASCEND: 8}, queue="plain")]
    h = harness(objects)
    h.cycle()
    assert pods_of(h, "vip-job") == {"vip-job-0": "n1"} and pods_of(h, "plain-job") == {"plain-job-0": "n2"}
    objects[0] = queue("vip")  # without the priority, the queue with the lower share goes first
    h = harness(objects)
    h.cycle()
    assert pods_of(h, "plain-job") == {"plain-job-0": "n1"}


def test_a_queue_at_its_deserved_share_yields_the_last_node_whatever_its_priority() -> None:
    """proportion_test.go's rule (allocatable: allocated + request ≤ deserved): vip (priority 10) holds 8 of
    16 chips, its deserved half; plain asks for 8 and deserves them. The one free node goes to plain; vip's job
    waits — nothing is left to lend it once plain had its share."""
    vip = queue("vip")
    vip = vip.model_copy(update={"spec": vip.spec.model_copy(update={"priority": 10})})
    objects = [vip, queue("plain"), accel_node("n0"), accel_node("n1"),
               *running("held", ["n0"], min_member=1, queue_name="vip", klass=""),
               *gang("vip-job", 1, limits={ASCEND: 8}, queue="vip"),
               *gang("plain-job", 1, limits={ASCEND: 8}, queue="plain")]
    h = harness(objects)
    h.cycle()
    assert pods_of(h, "plain-job") == {"plain-job-0": "n1"} and not any(pods_of(h, "vip-job").values())
    assert "0/2 nodes are available: 2 Insufficient huawei.com/Ascend910" in h.condition("vip-job")


def reclaim_case() -> list[AnyObject]:
    """Queue research holds both nodes; production (same weight) deserves one and asks for it."""
    return [queue("research"), queue("production"), accel_node("n0"), accel_node("n1"),
            *running("research-job", ["n0", "n1"], min_member=1, queue_name="research", klass=""),
            *gang("production-job", 1, limits={ASCEND: 8}, queue="production")]


def test_enable_reclaimable_false_turns_reclaim_off() -> None:
    h = harness(reclaim_case(), CONF)
    h.cycle()
    assert evicted(h) == ["research-job-1"]  # reclaim works with the switch on (its default)
    off = CONF.replace("  - name: proportion\n", "  - name: proportion\n    enableReclaimable: false\n")
    h = harness(reclaim_case(), off)
    h.cycle()
    assert evicted(h) == []


def test_enable_job_starving_false_stops_evictions_for_gangs() -> None:
    objects = [priority_class("low", 10), priority_class("high", 1000), accel_node("n0"),
               *running("low", ["n0"], min_member=1), *gang("high", 1, limits={ASCEND: 8}, priority_class="high")]
    h = harness(objects, CONF)
    h.cycle()
    assert evicted(h) == ["low-0"]
    off = CONF.replace("  - name: gang\n", "  - name: gang\n    enableJobStarving: false\n")
    h = harness(objects, off)
    h.cycle()
    assert evicted(h) == []


@pytest.mark.parametrize(("configurations", "message"), [
    ("- {name: preempt, arguments: {enableTopologyAwarePreemption: true}}",
     "configurations[0].arguments: hetsched's preempt action takes no arguments "
     "(got: enableTopologyAwarePreemption)"),
    ("- {name: reclaim}", "configurations[0].name: 'reclaim' is not one of the actions"),
])
def test_configurations_are_checked_not_silently_ignored(configurations: str, message: str) -> None:
    text = DEFAULT_CONF_YAML.replace('actions: "enqueue, allocate, backfill"',
                                     'actions: "enqueue, allocate, preempt, backfill"')
    with pytest.raises(ConfError, match=re.escape(message)):
        parse_conf(text + "configurations:\n" + configurations + "\n")
    parse_conf(text + "configurations:\n- {name: preempt}\n")  # naming a listed action, no arguments: fine


JOB = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: dup}
spec:
  policies: POLICIES
  tasks:
  - name: w
    replicas: 1
    template: {spec: {containers: [{name: w, image: x}]}}
"""


@pytest.mark.parametrize(("policies", "message"), [
    ("[{event: PodEvicted, action: RestartJob}, {events: [PodFailed, PodEvicted], action: AbortJob}]",
     "policies[1]: duplicate event PodEvicted across policies"),
    ("[{exitCode: 3, action: RestartJob}, {exitCode: 3, action: AbortJob}]",
     "policies[1]: duplicate exitCode 3 across policies"),
    ("[{event: '*', action: RestartJob}, {event: PodFailed, action: AbortJob}]",
     "with event * (any event) no other event may have a policy"),
])
def test_duplicate_policy_events_are_refused_as_volcanos_webhook_does(policies: str, message: str) -> None:
    with pytest.raises(ManifestError) as error:
        load_text(JOB.replace("POLICIES", policies))
    assert message in str(error.value.problems)
    load_text(JOB.replace("POLICIES", "[{event: PodEvicted, action: RestartJob}, {event: PodFailed, action: "
                                      "AbortJob}]"))  # distinct events: fine


GENERATED = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {generateName: train-}
spec:
  tasks:
  - name: w
    replicas: 1
    template:
      metadata: {annotations: {hetsched.io/duration: "100"}}
      spec:
        nodeSelector: {kubernetes.io/arch: arm64, kubernetes.io/os: linux}
        containers:
        - name: w
          resources:
            limits: {huawei.com/Ascend910: "8"}
            requests: {cpu: "4", ephemeral-storage: 200Gi}
"""


def test_generate_name_is_named_on_creation_and_nodes_carry_every_kubelets_labels() -> None:
    """Two Jobs with the same generateName get distinct names (as the API server gives them); a selector on
    the labels every real kubelet sets, and an ephemeral-storage request, work on simulated nodes."""
    spec = {"apiVersion": "hetsched.io/v1alpha1", "kind": "ClusterSpec", "pools": [
        {"name": "kunpeng", "count": 2, "cpu": "192", "arch": "arm64", "ephemeralStorage": "300Gi",
         "accelerators": [{"kind": "ascend", "model": "Ascend910", "count": 8}]},
        {"name": "x86", "count": 2, "accelerators": [{"kind": "ascend", "model": "Ascend910", "count": 8}]}]}
    nodes = parse_cluster_spec(spec).nodes()
    assert nodes[0].metadata.labels["kubernetes.io/hostname"] == "kunpeng-00"
    assert nodes[0].metadata.labels["kubernetes.io/arch"] == "arm64" and nodes[2].metadata.labels[
        "kubernetes.io/arch"] == "amd64"
    assert nodes[0].status.allocatable["ephemeral-storage"] == 300 * 2**30 * 1000
    simulation = Simulation(nodes, load_text(GENERATED + "---\n" + GENERATED))
    jobs = simulation.run().jobs
    names = [j["name"] for j in jobs]
    assert len(set(names)) == 2 and all(re.fullmatch(r"train-[bcdfghjklmnpqrstvwxz2456789]{5}", n) for n in names)
    assert all(j["phase"] == "Completed" for j in jobs)
    assert {j["pods"][0]["node"] for j in jobs} == {"kunpeng-00", "kunpeng-01"}  # one each: 200Gi + 200Gi > 300Gi
    with pytest.raises(ManifestError, match=r"metadata: name: required field is missing \(or give "
                                            r"metadata.generateName\)"):
        load_text(GENERATED.replace("{generateName: train-}", "{namespace: x}"))


def test_a_gang_with_a_failed_pod_is_not_valid_and_says_why() -> None:
    """Volcano's ValidTaskNum leaves failed pods out: a 2-pod gang (minMember 2) whose pod failed is not
    placed half, and its PodGroup says a pod failed, not nothing (issue 29)."""
    h = harness([node("n1", cpu="4"), *gang("g", 2)])
    failed = h.cluster.get("Pod", "default/g-1")
    assert isinstance(failed, Pod)
    h.cluster.update(failed.model_copy(update={"status": failed.status.model_copy(update={"phase": "Failed"})}))
    h.cycle()
    assert h.bindings() == {}
    assert "1 pod(s) of the gang failed: 1 valid pod(s), the gang needs minMember=2" in h.condition("g")


def test_a_best_effort_job_that_cannot_be_placed_says_why() -> None:
    """Issue 31: a job of best-effort pods only (no requests) on a node whose pod slots are all taken waited
    with no reason at all; backfill now gives the one it found."""
    full = node("n0", pods=1)
    objects: list[AnyObject] = [full, podgroup("busy", 1, phase="Running"),
                                running_on_node(pod("busy-0", "busy"), "n0"),
                                podgroup("be", 1), pod("be-0", "be", best_effort=True)]
    h = harness(objects)
    h.cycle()
    assert "be-0" not in h.bindings()
    assert h.condition("be").endswith("0/1 nodes are available: 1 Too many pods")
