"""Fault injection for simulations: chip faults, node NotReady, cordon and drain at given times.

Who calls it: ``hetsched simulate --faults FILE`` (through ``sim.simulator``) loads a fault file and applies
each fault to the embedded cluster at its time, the way the real sources would show it: a chip fault
rewrites the node's device inventory (``hetsched.io/devices``, what the node agent publishes) and its
allocatable; NotReady sets the node's Ready condition; a drain cordons the node and then evicts its pods
within their jobs' disruption budgets (:func:`drain_step`, run until the node is empty).

File format (YAML)::

    faults:
    - {at: 600, node: ascend-03, kind: ChipUnhealthy, chips: [3]}
    - {at: 900, node: ascend-03, kind: ChipRecovered, chips: [3]}
    - {at: 1200, node: ascend-05, kind: NodeNotReady}
    - {at: 1500, node: ascend-05, kind: NodeReady}
    - {at: 1800, node: ascend-06, kind: Drain}

Kinds: ChipUnhealthy, ChipNetworkUnhealthy, ChipRecovered (``chips`` required; ``resource`` defaults to
the node's first device set), NodeNotReady, NodeReady, Cordon, Uncordon (also ends a drain in progress),
Drain. A bad file is an error naming the file, the fault's index and the field; a fault naming a node or
chip that does not exist is an error when it is applied, naming the fault.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hetsched.api.disruption import owner_job
from hetsched.api.objects import Condition, Job, Node, Pod, max_unavailable
from hetsched.api.validation import first_problem
from hetsched.api.yamlsafe import YamlLimitError, read_text, safe_load
from hetsched.cluster.memory import MemoryCluster
from hetsched.devices.inventory import MEMORY_OF, NODE_ANNOTATION, SHARE_OF, DeviceSet, parse_node_devices
from hetsched.ports import NotFound, TooManyRequests

FaultKind = Literal["ChipUnhealthy", "ChipNetworkUnhealthy", "ChipRecovered", "NodeNotReady", "NodeReady",
                    "Cordon", "Uncordon", "Drain"]
CHIP_KINDS = ("ChipUnhealthy", "ChipNetworkUnhealthy", "ChipRecovered")
RECOVERIES = ("ChipRecovered", "NodeReady", "Uncordon")
"""Kinds that end a fault rather than make one (the report draws them as recoveries)."""
HEALTH = {"ChipUnhealthy": "Unhealthy", "ChipNetworkUnhealthy": "NetworkUnhealthy", "ChipRecovered": "Healthy"}


class Fault(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    at: float = Field(ge=0, le=365 * 24 * 3600, allow_inf_nan=False)
    node: str = Field(min_length=1)
    kind: FaultKind
    chips: list[int] = Field(default_factory=list)
    resource: str | None = None

    @property
    def target(self) -> str:
        return f"{self.node}:{','.join(map(str, self.chips))}" if self.chips else self.node


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    faults: list[Fault] = Field(default_factory=list)


class FaultError(ValueError):
    """A fault file or fault that cannot be used; the message names the file or fault and the field."""


def load_faults(path: Path) -> list[Fault]:
    try:
        data = safe_load(read_text(path))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, YamlLimitError) as exc:
        raise FaultError(f"{path}: cannot read: {exc}") from None
    try:
        faults = _File.model_validate(data if data is not None else {}).faults
    except ValidationError as exc:
        raise FaultError(f"{path}: {first_problem(exc)}") from None
    for index, fault in enumerate(faults):
        if fault.kind in CHIP_KINDS and not fault.chips:
            raise FaultError(f"{path}: faults[{index}].chips: {fault.kind} needs the chip ids")
    return sorted(faults, key=lambda f: f.at)


def apply(cluster: MemoryCluster, fault: Fault, now: float) -> None:
    """Make ``fault`` visible in ``cluster`` (see the module docstring)."""
    try:
        node = cluster.get("Node", fault.node)
    except NotFound:
        raise FaultError(f"fault {fault.kind} at {fault.at:g}s: node {fault.node} does not exist") from None
    assert isinstance(node, Node)
    if fault.kind in CHIP_KINDS:
        cluster.update(_chip_health(node, fault))
    elif fault.kind in ("NodeNotReady", "NodeReady"):
        ready = "True" if fault.kind == "NodeReady" else "False"
        others = [c for c in node.status.conditions if c.type != "Ready"]
        condition = Condition(type="Ready", status=ready, reason=fault.kind, message="fault injection",
                              lastTransitionTime=now)
        cluster.update(node.model_copy(update={"status": node.status.model_copy(
            update={"conditions": [*others, condition]})}))
    elif fault.kind in ("Cordon", "Uncordon", "Drain"):
        cluster.update(node.model_copy(update={"spec": node.spec.model_copy(
            update={"unschedulable": fault.kind != "Uncordon"})}))



def _chip_health(node: Node, fault: Fault) -> Node:
    raw = node.metadata.annotations.get(NODE_ANNOTATION)
    if raw is None:
        raise FaultError(f"fault {fault.kind} at {fault.at:g}s: node {fault.node} has no device inventory")
    inventory = parse_node_devices(raw, fault.node)
    sets = list(inventory.devices)
    index = next((i for i, d in enumerate(sets) if fault.resource in (None, d.resource)), None)
    if index is None:
        raise FaultError(f"fault {fault.kind} at {fault.at:g}s: node {fault.node} has no {fault.resource} chips")
    device_set = sets[index]
    ids = {c.id for c in device_set.chips}
    missing = [c for c in fault.chips if c not in ids]
    if missing:
        raise FaultError(f"fault {fault.kind} at {fault.at:g}s: node {fault.node} has no chip(s) "
                         f"{', '.join(map(str, missing))} of {device_set.resource}")
    health = HEALTH[fault.kind]
    chips = [c.model_copy(update={"health": health}) if c.id in fault.chips else c for c in device_set.chips]
    sets[index] = DeviceSet(resource=device_set.resource, model=device_set.model, topology=device_set.topology,
                            chips=chips)
    updated = inventory.model_copy(update={"devices": sets})
    healthy = sum(1 for c in chips if c.health != "Unhealthy")
    allocatable = dict(node.status.allocatable)
    allocatable[device_set.resource] = healthy * 1000  # what the device plugin now advertises
    for share_map, per_chip in ((SHARE_OF, 1000 * 1000), (MEMORY_OF, None)):
        name = share_map.get(device_set.resource)
        if name is not None and name in allocatable:
            chip_memory = max((c.memoryMiB for c in chips), default=0) * 1000
            allocatable[name] = healthy * (per_chip if per_chip is not None else chip_memory)
    return node.model_copy(update={
        "metadata": node.metadata.model_copy(update={"annotations": {**node.metadata.annotations,
                                                                     NODE_ANNOTATION: updated.to_annotation()}}),
        "status": node.status.model_copy(update={"allocatable": allocatable}),
    })


def drain_step(cluster: MemoryCluster, node: str) -> tuple[list[tuple[str, str]], bool]:
    """Evict what may go from a draining ``node`` now: per job, no more pods than its disruption budget
    (``hetsched.io/max-unavailable``) minus the pods it is already missing, and only what the Eviction API
    accepts (PodDisruptionBudgets, ``api.disruption``). Returns the evicted (pod, job) pairs and whether the
    node is empty of live pods."""
    pods_now = [p for p in cluster.list("Pod") if isinstance(p, Pod)]
    live = [p for p in pods_now if p.status.phase in ("Pending", "Running")]
    up: dict[str, int] = {}  # per job: pods running or done (finished work is not missing)
    for pod in pods_now:
        if pod.status.phase in ("Running", "Succeeded") and (key := owner_job(pod)):
            up[key] = up.get(key, 0) + 1
    here = [p for p in live if p.spec.nodeName == node]
    evicted: list[tuple[str, str]] = []
    by_job: dict[str, list[Pod]] = {}
    for pod in here:
        by_job.setdefault(owner_job(pod), []).append(pod)
    for job_key, pods in by_job.items():
        allowed = len(pods)
        if job_key:
            with contextlib.suppress(NotFound):
                job = cluster.get("Job", job_key)
                assert isinstance(job, Job)
                budget = max_unavailable(job.metadata.annotations, job.spec.total_replicas, f"Job {job_key}")
                if budget is not None:
                    allowed = max(0, budget - (job.spec.total_replicas - up.get(job_key, 0)))
        for pod in pods[:allowed]:
            key = f"{pod.metadata.namespace}/{pod.metadata.name}"
            try:
                cluster.evict(key, f"node {node} drained")
            except TooManyRequests:  # a PodDisruptionBudget says not now: wait for replacements
                break
            evicted.append((key, job_key))
    return evicted, len(here) == len(evicted)
