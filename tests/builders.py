"""Test builders: small nodes, pods, PodGroups and a harness that runs scheduler cycles on the embedded
cluster (the same code path the simulator and, later, the live scheduler use)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetsched.api.objects import AnyObject, Node, Pod, PodGroup, PriorityClass, Queue
from hetsched.cluster.memory import MemoryCluster
from hetsched.scheduler.defaults import SchedulerConf, default_conf, parse_conf
from hetsched.scheduler.engine.runner import CycleResult, Scheduler
from hetsched.sim.kernel import SimClock


def node(name: str, cpu: str = "8", memory: str = "32Gi", pods: int = 110, *, labels: dict[str, str] | None = None,
         taints: list[dict[str, str]] | None = None, unschedulable: bool = False, ready: bool = True,
         **extended: int) -> Node:
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    for key, count in extended.items():
        allocatable[key.replace("__", "/").replace("_", ".")] = str(count)
    return Node.model_validate({
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": allocatable, "capacity": allocatable,
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    })


def pod(name: str, group: str | None = None, *, cpu: str = "1", memory: str = "1Gi",
        limits: dict[str, Any] | None = None,
        selector: dict[str, str] | None = None, tolerations: list[dict[str, Any]] | None = None,
        affinity: dict[str, Any] | None = None, priority: int | None = None, task: str = "worker",
        namespace: str = "default", best_effort: bool = False, scheduler: str = "volcano",
        annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> Pod:
    annotations = {"volcano.sh/task-spec": task, **(annotations or {})}
    if group:
        annotations["scheduling.k8s.io/group-name"] = group
    resources: dict[str, Any] = {} if best_effort else {"requests": {"cpu": cpu, "memory": memory}}
    if limits:
        resources["limits"] = limits
    spec: dict[str, Any] = {"schedulerName": scheduler, "nodeSelector": selector or {},
                            "tolerations": tolerations or [],
                            "containers": [{"name": "main", "resources": resources}]}
    if affinity:
        spec["affinity"] = affinity
    if priority is not None:
        spec["priority"] = priority
    return Pod.model_validate({"metadata": {"name": name, "namespace": namespace, "annotations": annotations,
                                            "labels": labels or {}}, "spec": spec})


def running_on(made: Pod, node_name: str) -> Pod:
    """``made`` as a pod bound to ``node_name`` and Running (what the kubelet would report)."""
    return made.model_copy(update={"spec": made.spec.model_copy(update={"nodeName": node_name}),
                                   "status": made.status.model_copy(update={"phase": "Running"})})


def podgroup(name: str, min_member: int, *, queue: str = "default", phase: str = "Inqueue",
             min_task_member: dict[str, int] | None = None, priority_class: str = "",
             min_resources: dict[str, str] | None = None, namespace: str = "default") -> PodGroup:
    return PodGroup.model_validate({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member, "queue": queue, "minTaskMember": min_task_member or {},
                 "priorityClassName": priority_class, "minResources": min_resources or {}},
        "status": {"phase": phase},
    })


def gang(name: str, size: int, *, min_member: int | None = None, queue: str = "default", phase: str = "Inqueue",
         priority_class: str = "", **pod_args: Any) -> list[AnyObject]:
    objects: list[AnyObject] = [podgroup(name, size if min_member is None else min_member, queue=queue, phase=phase,
                                         priority_class=priority_class)]
    objects += [pod(f"{name}-{i}", name, **pod_args) for i in range(size)]
    return objects


def queue(name: str, weight: int = 1, capability: dict[str, str] | None = None,
          guarantee: dict[str, str] | None = None, state: str = "Open") -> Queue:
    return Queue.model_validate({"metadata": {"name": name},
                                 "spec": {"weight": weight, "capability": capability or {},
                                          "guarantee": {"resource": guarantee or {}}},
                                 "status": {"state": state}})


def priority_class(name: str, value: int) -> PriorityClass:
    return PriorityClass.model_validate({"metadata": {"name": name}, "value": value})


@dataclass
class Harness:
    cluster: MemoryCluster
    scheduler: Scheduler
    clock: SimClock

    def cycle(self) -> CycleResult:
        result = self.scheduler.run_once()
        self.clock.advance_to(self.clock.now() + 1)
        return result

    def bindings(self) -> dict[str, str]:
        return {p.metadata.name: p.spec.nodeName for p in self.cluster.list("Pod") if isinstance(p, Pod)
                and p.spec.nodeName}

    def podgroup(self, name: str, namespace: str = "default") -> PodGroup:
        found = self.cluster.get("PodGroup", f"{namespace}/{name}")
        assert isinstance(found, PodGroup)
        return found

    def condition(self, name: str, type_: str = "Unschedulable", namespace: str = "default") -> str:
        for condition in self.podgroup(name, namespace).status.conditions:
            if condition.type == type_:
                return f"{condition.reason}: {condition.message}"
        return ""


def harness(objects: list[AnyObject], conf: str | SchedulerConf | None = None) -> Harness:
    clock = SimClock()
    cluster = MemoryCluster(clock)
    if not any(isinstance(o, Queue) and o.metadata.name == "default" for o in objects):
        cluster.create(queue("default"))
    kinds = ["Namespace", "PriorityClass", "Queue", "Node", "PodGroup", "Pod"]
    ordered = sorted(objects, key=lambda o: kinds.index(o.kind))
    for obj in ordered:
        cluster.create(obj)
    parsed = parse_conf(conf) if isinstance(conf, str) else conf or default_conf()
    return Harness(cluster, Scheduler(cluster, cluster, cluster, clock, parsed, evictor=cluster), clock)


def accel_node(name: str, resource: str = "huawei.com/Ascend910", topology: str = "ascend910-8", chips: int = 8,
               *, unhealthy: tuple[int, ...] = (), network: tuple[int, ...] = (), advertise: int | None = None,
               labels: dict[str, str] | None = None, cpu: str = "192", memory: str = "1Ti",
               share: str | None = None, chip_memory: int = 0, numa_nodes: int = 1) -> Node:
    """A node with a chip inventory (``hetsched.io/devices``); allocatable = healthy chips unless ``advertise``;
    with ``share`` also the fractional capacity, and with ``chip_memory`` (MiB per chip) the memory shares;
    chips split evenly over ``numa_nodes`` NUMA nodes in id order."""
    from hetsched.devices.inventory import MEMORY_OF, NODE_ANNOTATION, Chip, DeviceSet, NodeDevices

    chip_list = [Chip(id=i, health="Unhealthy" if i in unhealthy else "NetworkUnhealthy" if i in network
                      else "Healthy", memoryMiB=chip_memory, numa=i * numa_nodes // chips) for i in range(chips)]
    inventory = NodeDevices(devices=[DeviceSet(resource=resource, model=topology, topology=topology,
                                               chips=chip_list)])
    count = advertise if advertise is not None else chips - len(unhealthy)
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", resource: str(count)}
    if share:
        allocatable[share] = str(1000 * count)
        if chip_memory:
            allocatable[MEMORY_OF[resource]] = str(chip_memory * count)
    return Node.model_validate({
        "metadata": {"name": name, "labels": labels or {}, "annotations": {NODE_ANNOTATION: inventory.to_annotation()}},
        "status": {"allocatable": allocatable, "capacity": allocatable},
    })


def ascend_cluster_spec(path: Path, count: int = 2) -> Path:
    """Write a cluster spec of ``count`` Ascend 910 x8 servers (pool ``ascend``, nodes ascend-00 …) to ``path``."""
    path.write_text(f"""apiVersion: hetsched.io/v1alpha1
kind: ClusterSpec
metadata: {{name: ascend-{count}}}
pools:
- name: ascend
  count: {count}
  cpu: "192"
  memory: 1Ti
  accelerators: [{{kind: ascend, model: Ascend910, count: 8}}]
""")
    return path


def tiny_openb_trace(folder: Path) -> Path:
    """An openb-format trace in ``folder``: 12 GPU nodes (0–8 T4/V100 GPUs) and pod list ``tiny`` (60 pods:
    CPU-only, sharing, whole 1- and 2-GPU)."""
    (folder / "csv").mkdir(parents=True, exist_ok=True)
    (folder / "csv" / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},{32000 * (1 + i % 3)},262144,{(0, 2, 4, 8)[i % 4]},{('T4', 'V100')[i % 2]}\n"
                  for i in range(12)))
    (folder / "csv" / "openb_pod_list_tiny.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
        "scheduled_time\n"
        + "".join(f"p{i},{1000 * (1 + i % 7)},1024,{(0, 1, 1, 2)[i % 4]},{(0, 300, 1000, 1000)[i % 4]},,LS,"
                  "Running,0,1,0\n" for i in range(60)))
    return folder


def handed_off(made: Pod, node_name: str, chips: dict[str, list[int]]) -> Pod:
    """``made`` bound to ``node_name`` earlier by the scheduler, holding ``chips``: the hand-off with its
    provenance stamp (the pod's uid and the node), as the scheduler writes it at bind."""
    uid = f"uid-{made.metadata.namespace or 'default'}-{made.metadata.name}"
    annotations = {**made.metadata.annotations, "hetsched.io/allocation": json.dumps(chips),
                   "hetsched.io/allocation-for": f"{uid}/{node_name}"}
    metadata = made.metadata.model_copy(update={"uid": uid, "annotations": annotations})
    return made.model_copy(update={"metadata": metadata, "spec": made.spec.model_copy(update={"nodeName": node_name})})


def table(api: Any, path: str) -> dict[str, Any]:
    """What ``kubectl get`` reads: a real API server's Table rendering of a list (the CRDs' printer columns).
    ``api``: a ``benchmark.apiserver.ApiServer`` (its url, admin token and CA)."""
    import json
    import ssl
    import urllib.request

    request = urllib.request.Request(api.url + path, headers={
        "Authorization": f"Bearer {api.token}", "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    context = ssl.create_default_context(cafile=api.ca)
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        found: dict[str, Any] = json.loads(response.read())
    return found
