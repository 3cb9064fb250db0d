"""Typed API objects: the Kubernetes core kinds the scheduler reads and Volcano's batch CRDs.

Who calls it: the manifest loader (``api.manifest``) validates YAML into these models; the in-memory
store, the controllers and the scheduler cache pass them around.

Invariants:
- Objects are values. Nothing mutates one in place after validation; an update is a ``model_copy``
  with the changed fields, stored under a new resourceVersion (the store enforces this).
- Quantities are already parsed into integer milli-units (see ``api.quantity``).
- Only the fields hetsched acts on are modelled strictly; the rest of a PodSpec (images, volumes, env …)
  is kept as given (``extra="allow"``) so real manifests load unchanged. Volcano's own CRD specs forbid
  unknown keys, so a typo such as ``minAvaliable`` is reported instead of silently ignored.
"""

from __future__ import annotations

import json
import re
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_validator,
)

from hetsched import cron, periods
from hetsched.api import fault_labels, job_plugins
from hetsched.api.annotations import go_duration
from hetsched.api.quantity import QuantityError, format_quantity, parse_quantity
from hetsched.api.regex import MAX_PATTERN, compile_pattern

# --------------------------------------------------------------------------------------------- helpers


def _string_map(value: object) -> object:
    """Kubernetes label, annotation and nodeSelector maps are string → string.

    YAML turns ``true``, ``8`` or ``on`` into booleans and numbers; Kubernetes then rejects the object
    with a terse decode error. We say exactly what to do instead.
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"must be a map of strings, got {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str):
            raise ValueError(f"key {key!r} must be a string; quote it")
        if not isinstance(item, str):
            shown = json.dumps(item) if isinstance(item, bool | int | float) or item is None else repr(item)
            raise ValueError(
                f"value of {key!r} must be a string, got {type(item).__name__} {shown}; "
                f'YAML reads unquoted {shown} as a {type(item).__name__}, quote it: {key}: "{shown}"'
            )
    return value


def _quantity_map(value: object) -> object:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"must be a map of resource name to quantity, got {type(value).__name__}")
    parsed: dict[str, int] = {}
    for name, amount in value.items():
        try:
            parsed[str(name)] = parse_quantity(amount)
        except QuantityError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return parsed


StringMap = Annotated[dict[str, str], BeforeValidator(_string_map)]
def quantity_strings(value: dict[str, int]) -> dict[str, str]:
    """Serialise milli-units back to quantities that parse to the same value (``1500`` → ``"1500m"``)."""
    return {k: (str(v // 1000) if v % 1000 == 0 else f"{v}m") for k, v in value.items()}


ResourceList = Annotated[
    dict[str, int], BeforeValidator(_quantity_map), PlainSerializer(quantity_strings, return_type=dict[str, str])
]
"""Resource name → amount in milli-units; serialised as quantity strings so a dump re-validates unchanged."""

NATIVE_RESOURCES = frozenset({"cpu", "memory", "pods", "ephemeral-storage", "storage"})


def is_extended_resource(name: str) -> bool:
    """Extended resources (``huawei.com/Ascend910``, ``nvidia.com/gpu`` …) are counted, not overcommitted:
    their requests must equal their limits, and limits are what device plugins read."""
    if name in NATIVE_RESOURCES or name.startswith(("hugepages-", "requests.", "limits.")):
        return False
    return "/" in name and not name.split("/", 1)[0].endswith("kubernetes.io")


GIB = float(1 << 30)


def hourly_cost(name: str, milli: int) -> float:
    """What an hour of ``milli`` (thousandths) of resource ``name`` costs in a budget's units (``QueueUsage``):
    chips of an extended resource, cores of ``cpu``, GiB of ``memory``; 0 for anything else."""
    if milli <= 0:
        return 0.0
    if name == "cpu":
        return milli / 1000.0
    if name == "memory":
        return milli / 1000.0 / GIB
    return milli / 1000.0 if is_extended_resource(name) else 0.0


INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
Int32 = Annotated[int, Field(ge=-(2**31), le=INT32_MAX)]
"""Kubernetes' and Volcano's ``int32`` fields (counts, priorities, exit codes, seconds): a value outside is
refused by their API server, so it is refused here, naming the field, before any arithmetic sees it."""
Count32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
Int64 = Annotated[int, Field(ge=-(2**63), le=INT64_MAX)]
MAX_REPLICAS = 100_000
"""Pods of one task (hetsched's bound, far below int32: the simulator and the webhook size work by it)."""


class _Model(BaseModel):
    # Frozen, and never changed in place either: a change is model_copy(update=...), never a write into a
    # model's dict or list. The informers hold equal parts once, shared between objects (cluster.interning).
    # Every number finite (no inf or NaN from '.inf' or 1e400), as JSON and the API server allow.
    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True, allow_inf_nan=False)


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, allow_inf_nan=False)


# --------------------------------------------------------------------------------------------- metadata


class OwnerReference(_Model):
    apiVersion: str = ""
    kind: str
    name: str
    uid: str = ""
    controller: bool = False


DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def dns1123_label(value: str, what: str = "name") -> str:
    """Kubernetes' DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and ending with a
    letter or digit; ValueError saying so otherwise."""
    if len(value) > 63 or not DNS1123_LABEL.fullmatch(value):
        raise ValueError(f"{what} {value[:80]!r} is not a DNS-1123 label (at most 63 lowercase letters, digits "
                         f"and '-', starting and ending with a letter or digit)")
    return value


_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def label_key_ok(key: str) -> bool:
    """Is ``key`` a Kubernetes label key: an optional DNS-1123 subdomain prefix and '/', then a name of at
    most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit?"""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and _LABEL_NAME.fullmatch(name) is not None


def dns1123_subdomain(value: str, what: str = "name") -> str:
    if len(value) > 253 or not DNS1123_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"{what} {value[:80]!r} is not a DNS-1123 subdomain (lowercase letters, digits, '-' "
                         f"and '.', starting and ending with a letter or digit, at most 253)")
    return value


class ObjectMeta(_Model):
    name: str = Field(default="", max_length=253)
    generateName: str = Field(default="", max_length=248)
    """A prefix: the store names the object ``<generateName><5 characters>`` on creation (as Kubernetes)."""
    namespace: str | None = None
    uid: str = ""
    labels: StringMap = Field(default_factory=dict)
    annotations: StringMap = Field(default_factory=dict)
    resourceVersion: str = ""
    creationTimestamp: float | None = None
    """Seconds on the injected clock (simulated or real); set by the store on create."""
    deletionTimestamp: float | None = None
    ownerReferences: list[OwnerReference] = Field(default_factory=list)

    @model_validator(mode="after")
    def _named(self) -> ObjectMeta:
        if not self.name and not self.generateName:
            raise ValueError("name: required field is missing (or give metadata.generateName)")
        if self.name:
            dns1123_subdomain(self.name)
        elif not DNS1123_SUBDOMAIN.fullmatch(self.generateName + "x"):
            raise ValueError(f"generateName {self.generateName[:80]!r} is not the start of a DNS-1123 subdomain")
        if self.namespace:
            dns1123_label(self.namespace, "namespace")
        return self


class TemplateMeta(_Model):
    """Metadata of a pod template: no name required."""

    name: str | None = None
    labels: StringMap = Field(default_factory=dict)
    annotations: StringMap = Field(default_factory=dict)


class Condition(_Model):
    type: str
    status: Literal["True", "False", "Unknown"] = "True"
    reason: str = ""
    message: str = ""
    lastTransitionTime: float | None = None


# --------------------------------------------------------------------------------------------- pods


class ResourceRequirements(_Model):
    requests: ResourceList = Field(default_factory=dict)
    limits: ResourceList = Field(default_factory=dict)

    @model_validator(mode="after")
    def _extended_resources_in_limits(self) -> ResourceRequirements:
        for name, amount in (*self.limits.items(), *self.requests.items()):
            if is_extended_resource(name) and amount % 1000:
                raise ValueError(f"{name}: {format_quantity(amount, name)} is not a whole number; extended resources "
                                 f"(accelerators) are counted in whole units, as Kubernetes requires")
        for name, amount in self.requests.items():
            if not is_extended_resource(name):
                continue
            if name not in self.limits:
                raise ValueError(
                    f"{name} is set only in requests; accelerators and other extended resources must be set "
                    f"in limits (the device plugin mounts chips from limits, a request alone schedules the pod "
                    f"but gives the container no device): move it to limits"
                )
            if self.limits[name] != amount:
                raise ValueError(f"{name}: requests must equal limits for an extended resource")
        return self

    @cached_property
    def effective_requests(self) -> dict[str, int]:
        """Requests with Kubernetes defaulting: a resource given only in limits requests its limit."""
        merged = dict(self.limits)
        merged.update(self.requests)
        return {k: v for k, v in merged.items() if v}


class ContainerPort(_Model):
    containerPort: int = Field(ge=1, le=65535)
    hostPort: int | None = Field(default=None, ge=0, le=65535)
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    hostIP: str = ""


class Container(_Model):
    name: str = Field(min_length=1)
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    ports: list[ContainerPort] = Field(default_factory=list)


class SchedulingGate(_Strict):
    name: str = Field(min_length=1)


class Toleration(_Model):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""
    tolerationSeconds: Int64 | None = None

    def tolerates(self, taint: Taint) -> bool:
        """``v1helper.TolerationsTolerateTaint`` semantics."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


class Taint(_Model):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class NodeSelectorRequirement(_Strict):
    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_match_operator(self) -> NodeSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        if self.operator in ("Gt", "Lt") and (len(self.values) != 1 or not self.values[0].lstrip("-").isdigit()):
                raise ValueError(f"operator {self.operator} needs exactly one integer value")
        return self


class NodeSelectorTerm(_Model):
    matchExpressions: list[NodeSelectorRequirement] = Field(default_factory=list)
    matchFields: list[NodeSelectorRequirement] = Field(default_factory=list)


class NodeSelector(_Model):
    nodeSelectorTerms: list[NodeSelectorTerm] = Field(min_length=1)


class PreferredSchedulingTerm(_Model):
    weight: int = Field(ge=1, le=100)
    preference: NodeSelectorTerm


class NodeAffinity(_Model):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector | None = None
    preferredDuringSchedulingIgnoredDuringExecution: list[PreferredSchedulingTerm] = Field(default_factory=list)


class LabelSelectorRequirement(_Strict):
    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self

    def matches(self, labels: dict[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels


class LabelSelector(_Strict):
    matchLabels: StringMap = Field(default_factory=dict)
    matchExpressions: list[LabelSelectorRequirement] = Field(default_factory=list)

    def matches(self, labels: dict[str, str]) -> bool:
        """Kubernetes semantics: every label and every expression must hold (an empty selector matches all)."""
        return (all(labels.get(k) == v for k, v in self.matchLabels.items())
                and all(e.matches(labels) for e in self.matchExpressions))


class PodAffinityTerm(_Strict):
    """Kubernetes' ``PodAffinityTerm``: the pods ``labelSelector`` matches, in ``namespaces`` (default: the
    pod's own) and those ``namespaceSelector`` selects by their labels (``{}`` = every namespace), counted per
    ``topologyKey`` domain."""

    labelSelector: LabelSelector | None = None
    namespaces: list[str] = Field(default_factory=list)
    namespaceSelector: LabelSelector | None = None
    topologyKey: str = Field(min_length=1)
    matchLabelKeys: list[str] = Field(default_factory=list)
    mismatchLabelKeys: list[str] = Field(default_factory=list)


class WeightedPodAffinityTerm(_Strict):
    weight: int = Field(ge=1, le=100)
    podAffinityTerm: PodAffinityTerm


class PodAffinity(_Strict):
    requiredDuringSchedulingIgnoredDuringExecution: list[PodAffinityTerm] = Field(default_factory=list)
    preferredDuringSchedulingIgnoredDuringExecution: list[WeightedPodAffinityTerm] = Field(default_factory=list)


class Affinity(_Model):
    nodeAffinity: NodeAffinity | None = None
    podAffinity: PodAffinity | None = None
    podAntiAffinity: PodAffinity | None = None


class TopologySpreadConstraint(_Strict):
    """Kubernetes' ``TopologySpreadConstraint``: matching pods per ``topologyKey`` domain may differ by at
    most ``maxSkew``."""

    maxSkew: int = Field(ge=1, le=INT32_MAX)
    topologyKey: str = Field(min_length=1)
    whenUnsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    labelSelector: LabelSelector | None = None
    minDomains: int | None = Field(default=None, ge=1, le=INT32_MAX)
    nodeAffinityPolicy: Literal["Honor", "Ignore"] | None = None
    nodeTaintsPolicy: Literal["Honor", "Ignore"] | None = None
    matchLabelKeys: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _min_domains(self) -> TopologySpreadConstraint:
        if self.minDomains is not None and self.whenUnsatisfiable != "DoNotSchedule":
            raise ValueError("minDomains needs whenUnsatisfiable: DoNotSchedule")
        return self


class PodSpec(_Model):
    containers: list[Container] = Field(min_length=1)
    initContainers: list[Container] = Field(default_factory=list)
    overhead: ResourceList = Field(default_factory=dict)
    nodeSelector: StringMap = Field(default_factory=dict)
    affinity: Affinity | None = None
    tolerations: list[Toleration] = Field(default_factory=list)
    priorityClassName: str = ""
    priority: Int32 | None = None
    preemptionPolicy: Literal["PreemptLowerPriority", "Never"] | None = None
    schedulerName: str = "default-scheduler"
    nodeName: str = ""
    restartPolicy: Literal["Always", "OnFailure", "Never"] | None = None
    activeDeadlineSeconds: int | None = Field(default=None, ge=1, le=10 * 366 * 86400)
    """The kubelet ends the pod (Failed, ``DeadlineExceeded``) this long after it started: what a hard budget
    counts the pod as committing (``Session.budget_exhausted``)."""
    topologySpreadConstraints: list[TopologySpreadConstraint] = Field(default_factory=list)
    schedulingGates: list[SchedulingGate] = Field(default_factory=list)
    """While any gate is listed the pod is not scheduled (kube-scheduler's SchedulingGates)."""
    hostNetwork: bool = False

    @cached_property
    def requests(self) -> dict[str, int]:
        """The pod's effective request: per resource, max(sum over containers, largest init container),
        plus overhead (``resourcehelper.PodRequests``). Always counts one ``pods`` slot."""
        total: dict[str, int] = {}
        for container in self.containers:
            for name, amount in container.resources.effective_requests.items():
                total[name] = total.get(name, 0) + amount
        for container in self.initContainers:
            for name, amount in container.resources.effective_requests.items():
                total[name] = max(total.get(name, 0), amount)
        for name, amount in self.overhead.items():
            total[name] = total.get(name, 0) + amount
        total["pods"] = 1000
        return total

    @cached_property
    def host_ports(self) -> frozenset[tuple[str, int]]:
        """(protocol, port) it takes on its node: each container's hostPort (with ``hostNetwork``, its
        containerPort), as kube-scheduler's NodePorts counts them."""
        return frozenset((port.protocol, port.hostPort or (port.containerPort if self.hostNetwork else 0))
                         for container in (*self.initContainers, *self.containers) for port in container.ports
                         if port.hostPort or self.hostNetwork)

    @cached_property
    def pod_topology(self) -> bool:
        """Does the pod place itself relative to other pods (pod affinity, anti-affinity, spread, host
        ports)?"""
        affinity = self.affinity
        return bool(self.topologySpreadConstraints or self.host_ports or (affinity is not None and (
            affinity.podAffinity is not None or affinity.podAntiAffinity is not None)))

    @cached_property
    def placement_key(self) -> str:
        """Everything that decides where this pod may go and how nodes are scored.

        Pods of one task share it, so the scheduler evaluates the nodes once per group, not per pod.
        """
        parts = {
            "r": sorted(self.requests.items()),
            "s": sorted(self.nodeSelector.items()),
            "a": self.affinity.model_dump(mode="json") if self.affinity else None,
            "t": [t.model_dump(mode="json") for t in self.tolerations],
            "ts": [c.model_dump(mode="json") for c in self.topologySpreadConstraints],
            "g": [g.name for g in self.schedulingGates],
            "p": sorted(self.host_ports),
        }
        return json.dumps(parts, sort_keys=True, separators=(",", ":"))


class ContainerStateTerminated(_Model):
    exitCode: Int32
    reason: str = ""
    message: str = ""
    finishedAt: float | None = None


class ContainerState(_Model):
    terminated: ContainerStateTerminated | None = None
    running: dict[str, Any] | None = None
    waiting: dict[str, Any] | None = None


class ContainerStatus(_Model):
    name: str
    ready: bool = False
    restartCount: Count32 = 0
    state: ContainerState = Field(default_factory=ContainerState)


class PodStatus(_Model):
    phase: Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"] = "Pending"
    conditions: list[Condition] = Field(default_factory=list)
    nominatedNodeName: str = ""
    startTime: float | None = None
    reason: str = ""
    message: str = ""
    containerStatuses: list[ContainerStatus] = Field(default_factory=list)

    @property
    def exit_code(self) -> int | None:
        """The first container's exit code once it terminated (what Volcano's exitCode policies match)."""
        if self.containerStatuses and self.containerStatuses[0].state.terminated is not None:
            return self.containerStatuses[0].state.terminated.exitCode
        return None

    @property
    def restarts(self) -> int:
        """In-place container restarts (kubelet's ``restartPolicy: OnFailure``/``Always``)."""
        return sum(c.restartCount for c in self.containerStatuses)


class PodTemplateSpec(_Model):
    metadata: TemplateMeta = Field(default_factory=TemplateMeta)
    spec: PodSpec


class Pod(_Model):
    apiVersion: Literal["v1"] = "v1"
    kind: Literal["Pod"] = "Pod"
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus = Field(default_factory=PodStatus)


# --------------------------------------------------------------------------------------------- nodes


class NodeSpec(_Model):
    unschedulable: bool = False
    taints: list[Taint] = Field(default_factory=list)


class NodeStatus(_Model):
    capacity: ResourceList = Field(default_factory=dict)
    allocatable: ResourceList = Field(default_factory=dict)
    conditions: list[Condition] = Field(default_factory=list)

    @property
    def ready(self) -> bool:
        for condition in self.conditions:
            if condition.type == "Ready":
                return condition.status == "True"
        return True


class Node(_Model):
    apiVersion: Literal["v1"] = "v1"
    kind: Literal["Node"] = "Node"
    metadata: ObjectMeta
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)


class PriorityClass(_Model):
    apiVersion: Literal["scheduling.k8s.io/v1"] = "scheduling.k8s.io/v1"
    kind: Literal["PriorityClass"] = "PriorityClass"
    metadata: ObjectMeta
    value: int = Field(ge=-(2**31), le=2_000_001_000)
    globalDefault: bool = False
    preemptionPolicy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"
    description: str = ""


# --------------------------------------------------------------------------------------------- Volcano


JobEvent = Literal["*", "PodFailed", "PodEvicted", "PodPending", "PodRunning", "Unknown", "TaskCompleted",
                   "TaskFailed", "OutOfSync", "CommandIssued", "JobUpdated"]
"""Volcano's job lifecycle events (``bus/v1alpha1/events.go``)."""
JobAction = Literal["AbortJob", "RestartJob", "RestartTask", "RestartPod", "RestartPartition", "TerminateJob",
                    "CompleteJob", "ResumeJob", "SyncJob", "EnqueueJob", "SyncQueue", "OpenQueue", "CloseQueue"]
"""Volcano's job actions (``bus/v1alpha1/actions.go``)."""


class LifecyclePolicy(_Strict):
    event: JobEvent | None = None
    events: list[JobEvent] = Field(default_factory=list)
    exitCode: Int32 | None = None
    action: JobAction
    timeout: str | None = None
    """A Go duration ("90s", "10m", "1h30m"): the action waits that long (Volcano's delayed action)."""

    @model_validator(mode="after")
    def _one_trigger(self) -> LifecyclePolicy:
        if self.exitCode is not None and (self.event or self.events):
            raise ValueError("a policy has either an exitCode or events, not both")
        if self.exitCode is None and not self.event and not self.events:
            raise ValueError("a policy needs an event, events or an exitCode")
        if self.exitCode == 0:
            raise ValueError("exitCode 0 is not an error code; a policy needs a non-zero exitCode")
        if self.timeout is not None:
            parse_duration(self.timeout)
        return self

    @property
    def timeout_seconds(self) -> float | None:
        return None if self.timeout is None else parse_duration(self.timeout)


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string ("1h30m", "90s", "500ms"); ValueError naming the text otherwise."""
    try:
        return go_duration(text)
    except ValueError:
        raise ValueError(f"timeout {text[:80]!r} is not a duration such as \"90s\", \"10m\" or \"1h30m\"") from None


MAX_UNAVAILABLE_ANNOTATION = "hetsched.io/max-unavailable"
"""Job (and its PodGroup) annotation: how many of its pods voluntary evictions — preemption, reclaim, node
drain — may take away at once: a count (``"1"``) or a share of the job's pods (``"25%"``, rounded down,
at least 1)."""


def max_unavailable(annotations: dict[str, str], pods: int, where: str) -> int | None:
    """The disruption budget in pods from ``hetsched.io/max-unavailable`` (None: no budget). A value that
    is neither a count nor a percentage is an error naming ``where`` and the annotation."""
    raw = annotations.get(MAX_UNAVAILABLE_ANNOTATION)
    if raw is None:
        return None
    text = raw.strip()
    try:
        if text.endswith("%"):
            share = float(text[:-1])
            if not 0 <= share <= 100:
                raise ValueError
            return max(1, int(pods * share / 100))
        count = int(text)
        if count < 0:
            raise ValueError
        return count
    except ValueError:
        raise ValueError(f"{where}: annotation {MAX_UNAVAILABLE_ANNOTATION} must be a count or a percentage "
                         f"(\"1\", \"25%\"), got {raw!r}") from None


NUMA_POLICY_ANNOTATION = "volcano.sh/numa-topology-policy"
"""Pod annotation the job controller sets from its task's ``topologyPolicy`` (as Volcano's does); the
scheduler's ``numaaware`` plugin reads it."""


def check_policies(policies: list[LifecyclePolicy]) -> None:
    """Volcano's webhook rules across one list of policies (a job's, or one task's): an event may appear
    in only one policy, an exit code in only one, and ``*`` (any event) only alone."""
    events: set[str] = set()
    codes: set[int] = set()
    for index, policy in enumerate(policies):
        for event in ([policy.event] if policy.event else []) + list(policy.events):
            if event in events:
                raise ValueError(f"policies[{index}]: duplicate event {event} across policies")
            events.add(event)
        if policy.exitCode is not None:
            if policy.exitCode in codes:
                raise ValueError(f"policies[{index}]: duplicate exitCode {policy.exitCode} across policies")
            codes.add(policy.exitCode)
    if "*" in events and len(events) > 1:
        raise ValueError("policies: with event * (any event) no other event may have a policy")


class DependsOn(_Strict):
    """Create this task's pods only once the named tasks are up (Volcano's ``dependsOn``)."""

    name: list[str] = Field(min_length=1)
    iteration: Literal["any", "all"] = "all"


MAX_TIER = 16
"""HyperNode tiers: a data-centre network has a handful (ToR, spine, core); beyond this is a typo."""


class NetworkTopology(_Strict):
    """Volcano's ``networkTopology`` on a Job, a PodGroup or a task's partition: keep the pods inside one
    HyperNode of tier ≤ ``highestTierAllowed`` (``hard``: or not at all; ``soft``: the lowest tier that fits
    is preferred). ``highestTierName`` names the tier by its HyperNodes' ``tierName`` instead."""

    mode: Literal["hard", "soft"] = "hard"
    highestTierAllowed: int | None = Field(default=None, ge=1, le=MAX_TIER)
    highestTierName: str | None = Field(default=None, min_length=1, max_length=253)

    @model_validator(mode="after")
    def _one_bound(self) -> NetworkTopology:
        if self.highestTierAllowed is not None and self.highestTierName is not None:
            raise ValueError("give highestTierAllowed or highestTierName, not both")
        if self.mode == "hard" and self.highestTierAllowed is None and self.highestTierName is None:
            raise ValueError("mode hard needs highestTierAllowed (or highestTierName): the tier the pods must "
                             "stay within")
        return self


MAX_JOB_PODS = 100_000
"""Pods of one Job (all tasks): more than a 10,000-server cluster runs at once; beyond it is a typo."""


class PartitionPolicy(_Strict):
    """Volcano's ``partitionPolicy`` on a task: its replicas in ``totalPartitions`` partitions of
    ``partitionSize`` pods, each partition kept inside one HyperNode as its ``networkTopology`` says (a
    model-parallel shard per domain while the job spans several)."""

    totalPartitions: int = Field(ge=1, le=100_000)
    partitionSize: int = Field(ge=1, le=100_000)
    minPartitions: Count32 | None = None
    networkTopology: NetworkTopology | None = None

    @model_validator(mode="after")
    def _min_within_total(self) -> PartitionPolicy:
        if self.minPartitions is not None and self.minPartitions > self.totalPartitions:
            raise ValueError(f"minPartitions ({self.minPartitions}) is greater than totalPartitions "
                             f"({self.totalPartitions})")
        return self


class TaskSpec(_Strict):
    name: Annotated[str, AfterValidator(lambda v: dns1123_label(v, "task name"))]
    replicas: int = Field(default=1, ge=0, le=MAX_REPLICAS)
    minAvailable: Count32 | None = None
    template: PodTemplateSpec
    policies: list[LifecyclePolicy] = Field(default_factory=list)
    topologyPolicy: Literal["none", "best-effort", "restricted", "single-numa-node"] | None = None
    maxRetry: Count32 | None = None
    dependsOn: DependsOn | None = None
    partitionPolicy: PartitionPolicy | None = None

    @model_validator(mode="after")
    def _min_within_replicas(self) -> TaskSpec:
        if self.minAvailable is not None and self.minAvailable > self.replicas:
            raise ValueError(f"minAvailable ({self.minAvailable}) is greater than replicas ({self.replicas})")
        partition = self.partitionPolicy
        if partition is not None and partition.totalPartitions * partition.partitionSize != self.replicas:
            raise ValueError(f"partitionPolicy: totalPartitions × partitionSize ({partition.totalPartitions} × "
                             f"{partition.partitionSize}) must equal replicas ({self.replicas})")
        check_policies(self.policies)
        return self


class JobSpec(_Strict):
    schedulerName: str = "volcano"
    minAvailable: Count32 | None = None
    queue: str = "default"
    priorityClassName: str = ""
    maxRetry: Count32 = 3
    tasks: list[TaskSpec] = Field(min_length=1)
    policies: list[LifecyclePolicy] = Field(default_factory=list)
    plugins: dict[str, Annotated[list[str], Field(max_length=64)]] = Field(default_factory=dict,
                                                                           max_length=len(job_plugins.PLUGINS))
    """Volcano's job plugins by name, each with its arguments (``api.job_plugins``)."""
    ttlSecondsAfterFinished: Count32 | None = None
    minSuccess: int | None = Field(default=None, ge=1, le=INT32_MAX)
    volumes: list[dict[str, Any]] = Field(default_factory=list)
    runningEstimate: str | None = None
    networkTopology: NetworkTopology | None = None

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        names = [t.name for t in self.tasks]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"task names must be unique; repeated: {', '.join(duplicates)}")
        total = self.total_replicas
        if total > MAX_JOB_PODS:
            raise ValueError(f"the tasks ask for {total:,} pods in all; a Job may have at most {MAX_JOB_PODS:,}")
        if self.minAvailable is not None and self.minAvailable > total:
            raise ValueError(f"minAvailable ({self.minAvailable}) is greater than the total replicas ({total})")
        if self.minSuccess is not None and self.minSuccess > total:
            raise ValueError(f"minSuccess ({self.minSuccess}) is greater than the total replicas ({total})")
        check_policies(self.policies)
        job_plugins.check(self.plugins, names)
        for task in self.tasks:
            if task.dependsOn is None:
                continue
            unknown = [n for n in task.dependsOn.name if n not in names]
            if unknown or task.name in task.dependsOn.name:
                what = f"unknown task(s) {', '.join(unknown)}" if unknown else "itself"
                raise ValueError(f"task {task.name}: dependsOn names {what} (tasks: {', '.join(names)})")
        return self

    @property
    def total_replicas(self) -> int:
        return sum(t.replicas for t in self.tasks)

    @property
    def min_available(self) -> int:
        """Volcano's webhook default: minAvailable = total replicas when not given."""
        return self.total_replicas if self.minAvailable is None else self.minAvailable


class JobState(_Model):
    phase: str = "Pending"
    reason: str = ""
    message: str = ""
    lastTransitionTime: float | None = None


class JobStatus(_Model):
    state: JobState = Field(default_factory=JobState)
    minAvailable: Count32 = 0
    pending: Count32 = 0
    running: Count32 = 0
    succeeded: Count32 = 0
    failed: Count32 = 0
    terminating: Count32 = 0
    unknown: Count32 = 0
    retryCount: Count32 = 0
    runningDuration: float | None = None
    conditions: list[Condition] = Field(default_factory=list)
    controlledResources: dict[str, str] = Field(default_factory=dict)
    """What the controller made for the Job's plugins (Volcano's field: ``plugin-ssh: ssh`` once the ssh
    plugin's Secret was created by the controller itself)."""


class Job(_Model):
    apiVersion: Literal["batch.volcano.sh/v1alpha1"] = "batch.volcano.sh/v1alpha1"
    kind: Literal["Job"] = "Job"
    metadata: ObjectMeta
    spec: JobSpec
    status: JobStatus = Field(default_factory=JobStatus)

    @model_validator(mode="after")
    def _budget_and_fault_labels(self) -> Job:
        name = self.metadata.name
        if name and len(name) > 63:  # Volcano's webhook: the name, and every pod's, a qualified name
            raise ValueError(f"metadata.name: {len(name)} characters; a Job's name may have at most 63 (its "
                             f"pods are named <job>-<task>-<index> and the svc plugin makes them host names)")
        for index, task in enumerate(self.spec.tasks):
            longest = f"{name}-{task.name}-{max(task.replicas - 1, 0)}"
            if name and len(longest) > 63:
                raise ValueError(f"spec.tasks[{index}]: pod name {longest[:80]!r} would have {len(longest)} "
                                 "characters; at most 63 (shorten the Job's or the task's name)")
        max_unavailable(self.metadata.annotations, self.spec.total_replicas, "metadata.annotations")
        try:
            fault_labels.parse(self.metadata.labels, self.metadata.annotations, self.spec.maxRetry)
        except ValueError as exc:
            raise ValueError(f"metadata.{exc}") from None
        return self


PARTITION_LABEL = "volcano.sh/partition-id"
"""Pod label the job controller writes on the pods of a task with a ``partitionPolicy``: which partition
the pod is in (its index ÷ ``partitionSize``)."""


class SubGroupPolicy(_Strict):
    """Volcano's ``subGroupPolicy`` entry on a PodGroup: the pods its ``labelSelector`` selects (all, without
    one), grouped by the values of ``matchLabelKeys``, form sub-groups of ``subGroupSize`` pods, each kept
    inside one HyperNode as ``networkTopology`` says. The job controller writes one per task with a
    ``partitionPolicy``; ``matchPolicy`` (``[{labelKey: …}]``) is Volcano's older spelling of
    ``matchLabelKeys``."""

    name: str = Field(min_length=1, max_length=253)
    subGroupSize: int | None = Field(default=None, ge=1, le=100_000)
    minSubGroups: int | None = Field(default=None, ge=0, le=100_000)
    labelSelector: LabelSelector | None = None
    matchLabelKeys: list[Annotated[str, Field(min_length=1, max_length=317)]] = Field(default_factory=list,
                                                                                      max_length=8)
    matchPolicy: list[dict[str, str]] | None = Field(default=None, max_length=8)
    networkTopology: NetworkTopology | None = None

    @property
    def keys(self) -> list[str]:
        return self.matchLabelKeys or [m["labelKey"] for m in self.matchPolicy or [] if m.get("labelKey")]

    def subgroup_of(self, labels: dict[str, str]) -> str | None:
        """The sub-group a pod with ``labels`` is in (``<name>/<value>,…``), or None when not selected."""
        if self.labelSelector is not None and not self.labelSelector.matches(labels):
            return None
        return f"{self.name}/" + ",".join(labels.get(key, "") for key in self.keys)


class PodGroupSpec(_Strict):
    minMember: Count32 = 1
    minTaskMember: dict[str, Count32] = Field(default_factory=dict)
    queue: str = "default"
    priorityClassName: str = ""
    minResources: ResourceList = Field(default_factory=dict)
    networkTopology: NetworkTopology | None = None
    subGroupPolicy: list[SubGroupPolicy] | None = Field(default=None, max_length=64)

    def subgroup_of(self, labels: dict[str, str]) -> tuple[str, NetworkTopology] | None:
        """The first network-bounded sub-group policy that selects a pod with ``labels``: (sub-group, bound)."""
        for policy in self.subGroupPolicy or ():
            if policy.networkTopology is None:
                continue
            found = policy.subgroup_of(labels)
            if found is not None:
                return found, policy.networkTopology
        return None


class PodGroupStatus(_Model):
    phase: Literal["Pending", "Inqueue", "Running", "Unknown", "Completed"] = "Pending"
    conditions: list[Condition] = Field(default_factory=list)
    running: Count32 = 0
    succeeded: Count32 = 0
    failed: Count32 = 0


class PodGroup(_Model):
    apiVersion: Literal["scheduling.volcano.sh/v1beta1"] = "scheduling.volcano.sh/v1beta1"
    kind: Literal["PodGroup"] = "PodGroup"
    metadata: ObjectMeta
    spec: PodGroupSpec = Field(default_factory=PodGroupSpec)
    status: PodGroupStatus = Field(default_factory=PodGroupStatus)


class Guarantee(_Strict):
    resource: ResourceList = Field(default_factory=dict)


class NodeGroupTerms(_Strict):
    requiredDuringSchedulingIgnoredDuringExecution: list[str] = Field(default_factory=list)
    preferredDuringSchedulingIgnoredDuringExecution: list[str] = Field(default_factory=list)


class QueueAffinity(_Strict):
    """Volcano's queue affinity: node groups (nodes labelled ``volcano.sh/nodegroup-name``) the queue's pods
    must or should use, and must or should avoid."""

    nodeGroupAffinity: NodeGroupTerms | None = None
    nodeGroupAntiAffinity: NodeGroupTerms | None = None


class QueueSpec(_Strict):
    weight: int = Field(default=1, ge=1, le=65535)
    capability: ResourceList = Field(default_factory=dict)
    deserved: ResourceList = Field(default_factory=dict)
    guarantee: Guarantee = Field(default_factory=Guarantee)
    reclaimable: bool = True
    parent: str = ""
    priority: Int32 = 0
    affinity: QueueAffinity | None = None
    type: str | None = None
    extendClusters: list[dict[str, Any]] | None = None
    dequeueStrategy: str | None = None


class QueueStatus(_Model):
    state: Literal["Open", "Closed", "Closing", "Unknown"] = "Open"
    pending: Count32 = 0
    running: Count32 = 0
    inqueue: Count32 = 0
    completed: Count32 = 0
    allocated: ResourceList = Field(default_factory=dict)


class Queue(_Model):
    apiVersion: Literal["scheduling.volcano.sh/v1beta1"] = "scheduling.volcano.sh/v1beta1"
    kind: Literal["Queue"] = "Queue"
    metadata: ObjectMeta
    spec: QueueSpec = Field(default_factory=QueueSpec)
    status: QueueStatus = Field(default_factory=QueueStatus)


# --------------------------------------------------------------------------------------------- QueueUsage

MAX_BUDGET_HOURS = 1e12
MAX_USAGE_HISTORY = 36
"""Closed periods a QueueUsage keeps (three years of months)."""


def _hours(value: dict[str, float], what: str) -> dict[str, float]:
    if len(value) > 64:
        raise ValueError(f"{what}: at most 64 resources")
    for name, amount in value.items():
        if not name or len(name) > 253 or not re.fullmatch(r"[A-Za-z0-9][-A-Za-z0-9_.]*(/[-A-Za-z0-9_.]+)?", name):
            raise ValueError(f"{what}: {name[:80]!r} is not a resource name")
        if not 0 <= amount <= MAX_BUDGET_HOURS:
            raise ValueError(f"{what}[{name}]: must be hours from 0 to {MAX_BUDGET_HOURS:g}, got {amount!r}")
    return value


class QueueUsageSpec(_Strict):
    """What a queue may consume over a period (hetsched's ``QueueUsage``, one per Queue, named after it).

    ``budget``: resource name → hours per period — chip-hours for an accelerator (``huawei.com/Ascend910``,
    ``nvidia.com/gpu`` …), core-hours for ``cpu``, GiB-hours for ``memory``; a resource not named is not
    limited. ``period``: ``Month``, ``Week``, ``Day`` (calendar, in ``timeZone``) or ``Rolling`` (the last
    ``window``, whole days). ``whenExhausted``: ``Wait`` — the queue's jobs are not admitted or placed until
    the period ends (running ones finish) — ``Stop`` — as ``Wait``, and its running pods that hold a used-up
    resource are evicted at once (a hard budget) — or ``Idle`` — they run only on capacity no other queue is
    asking for, and are the first reclaimed. A budget binds the queue's whole subtree: a parent queue's
    ``QueueUsage`` counts the pods of every queue under it."""

    period: Literal["Month", "Week", "Day", "Rolling"] = "Month"
    window: str = Field(default="", max_length=64)
    timeZone: str = Field(default="UTC", max_length=64)
    budget: dict[str, float] = Field(default_factory=dict)
    whenExhausted: Literal["Wait", "Stop", "Idle"] = "Wait"

    @field_validator("budget")
    @classmethod
    def _budget(cls, value: dict[str, float]) -> dict[str, float]:
        return _hours(value, "budget")

    @model_validator(mode="after")
    def _period(self) -> QueueUsageSpec:
        try:
            periods.window_seconds(self.period, self.window)
            periods.zone(self.timeZone)
        except periods.PeriodError as exc:
            where = "timeZone" if "time zone" in str(exc) else "window"
            raise ValueError(f"{where}: {exc}") from None
        return self


class UsagePeriod(_Model):
    """What a queue used in one period (``periodStart`` … ``periodEnd``), in hours per resource."""

    periodStart: float
    periodEnd: float
    used: dict[str, float] = Field(default_factory=dict)
    byNamespace: dict[str, dict[str, float]] = Field(default_factory=dict)


class QueueUsageStatus(_Model):
    """Written by the usage accountant (``controllers.usage``); survives restarts and leader changes."""

    periodStart: float | None = None
    periodEnd: float | None = None
    accountedUntil: float | None = None
    """Run time up to this moment is counted (the accountant resumes here after a restart)."""
    used: dict[str, float] = Field(default_factory=dict)
    """Hours used in the current period (for ``Rolling``: in the window)."""
    byNamespace: dict[str, dict[str, float]] = Field(default_factory=dict)
    decayed: dict[str, float] = Field(default_factory=dict)
    """Hours used, each hour weighed down by half every half-life since (the fair-share usage)."""
    decayedByNamespace: dict[str, dict[str, float]] = Field(default_factory=dict)
    """The same, per namespace (the ``fairshare`` plugin orders a queue's jobs by it)."""
    exhausted: list[str] = Field(default_factory=list)
    """Resources whose budget the current period has used up."""
    days: list[UsagePeriod] = Field(default_factory=list)
    """``Rolling``: the window's days, oldest first."""
    history: list[UsagePeriod] = Field(default_factory=list)
    """Closed periods, oldest first (at most ``MAX_USAGE_HISTORY``)."""


class QueueUsage(_Model):
    apiVersion: Literal["hetsched.io/v1alpha1"] = "hetsched.io/v1alpha1"
    kind: Literal["QueueUsage"] = "QueueUsage"
    metadata: ObjectMeta
    spec: QueueUsageSpec = Field(default_factory=QueueUsageSpec)
    status: QueueUsageStatus = Field(default_factory=QueueUsageStatus)

    def budget_state(self) -> tuple[object, ...]:
        """What placement reads of the budget — what is used up, what that means, and for a hard budget the
        period (a new one may hold a job that waited for it): only its change wakes the scheduler, not the
        accountant's periodic writes."""
        hard = self.spec.whenExhausted == "Stop" and bool(self.spec.budget)
        return (tuple(self.status.exhausted), self.spec.whenExhausted, self.status.periodStart if hard else None)


class ExactMatch(_Strict):
    name: Annotated[str, AfterValidator(lambda v: dns1123_subdomain(v, "member name"))]


class RegexMatch(_Strict):
    pattern: str = Field(min_length=1, max_length=MAX_PATTERN)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        compile_pattern(value)  # RE2, as Volcano: linear time, so no pattern needs refusing for its shape
        return value


class MemberSelector(_Strict):
    exactMatch: ExactMatch | None = None
    regexMatch: RegexMatch | None = None
    labelMatch: LabelSelector | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> MemberSelector:
        given = [n for n in ("exactMatch", "regexMatch", "labelMatch") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of exactMatch, regexMatch, labelMatch (got "
                             f"{', '.join(given) or 'none'})")
        return self


class HyperNodeMember(_Strict):
    type: Literal["Node", "HyperNode"]
    selector: MemberSelector

    @model_validator(mode="after")
    def _hypernodes_by_name(self) -> HyperNodeMember:
        if self.type == "HyperNode" and self.selector.exactMatch is None:
            raise ValueError("a HyperNode member is named with exactMatch (regexMatch and labelMatch select Nodes)")
        return self


MAX_MEMBERS = 10_000


class HyperNodeSpec(_Strict):
    tier: int = Field(ge=1, le=MAX_TIER)
    tierName: str = Field(default="", max_length=253)
    members: list[HyperNodeMember] = Field(min_length=1, max_length=MAX_MEMBERS)


class HyperNodeStatus(_Model):
    nodeCount: Count32 = 0
    conditions: list[Condition] = Field(default_factory=list)


class HyperNode(_Model):
    """Volcano's ``topology.volcano.sh/v1alpha1`` HyperNode: one network performance domain (tier 1: the
    servers under a ToR switch, or an Ascend supernode; higher tiers: the spine layers above), whose members
    are Nodes or lower-tier HyperNodes. The tree is checked as a whole in ``api.hypernodes``."""

    apiVersion: Literal["topology.volcano.sh/v1alpha1"] = "topology.volcano.sh/v1alpha1"
    kind: Literal["HyperNode"] = "HyperNode"
    metadata: ObjectMeta
    spec: HyperNodeSpec
    status: HyperNodeStatus = Field(default_factory=HyperNodeStatus)


class TargetReference(_Strict):
    apiVersion: str = "batch.volcano.sh/v1alpha1"
    kind: Literal["Job", "Queue"] = "Job"
    name: str = Field(min_length=1)
    uid: str = ""
    controller: bool | None = None
    blockOwnerDeletion: bool | None = None


COMMAND_ACTIONS = ("AbortJob", "RestartJob", "ResumeJob", "TerminateJob", "CompleteJob")
"""What a Command may ask of a Job (``vcctl job suspend`` is AbortJob, ``vcctl job resume`` ResumeJob)."""
QUEUE_ACTIONS = ("OpenQueue", "CloseQueue")
"""What a Command may ask of a Queue (``vcctl queue operate -a open|close``)."""


class Command(_Model):
    """Volcano's ``bus.volcano.sh/v1alpha1`` Command: a one-shot request to act on a Job (the job controller
    applies it) or a Queue (the queue controller does); either deletes the Command once applied."""

    apiVersion: Literal["bus.volcano.sh/v1alpha1"] = "bus.volcano.sh/v1alpha1"
    kind: Literal["Command"] = "Command"
    metadata: ObjectMeta
    action: Literal["AbortJob", "RestartJob", "ResumeJob", "TerminateJob", "CompleteJob", "OpenQueue", "CloseQueue"]
    target: TargetReference
    reason: str = ""
    message: str = ""

    @model_validator(mode="after")
    def _action_fits_target(self) -> Command:
        wanted = "Queue" if self.action in QUEUE_ACTIONS else "Job"
        if self.target.kind != wanted:
            raise ValueError(f"action {self.action} acts on a {wanted}, but target.kind is {self.target.kind}")
        return self


def _int_or_percent(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"must be a count or a percentage (1, \"25%\"), got {value!r}")
    if isinstance(value, str):
        if re.fullmatch(r"\d+", value):
            return int(value)
        if not re.fullmatch(r"\d+%", value) or int(value[:-1]) > 100:
            raise ValueError(f"must be a count or a percentage (1, \"25%\"), got {value!r}")
    return value


IntOrPercent = Annotated[int | str, BeforeValidator(_int_or_percent)]


class PodDisruptionBudgetSpec(_Strict):
    selector: LabelSelector | None = None
    minAvailable: IntOrPercent | None = None
    maxUnavailable: IntOrPercent | None = None
    unhealthyPodEvictionPolicy: Literal["IfHealthyBudget", "AlwaysAllow"] | None = None

    @model_validator(mode="after")
    def _one_bound(self) -> PodDisruptionBudgetSpec:
        if self.minAvailable is not None and self.maxUnavailable is not None:
            raise ValueError("minAvailable and maxUnavailable cannot both be set")
        for name in ("minAvailable", "maxUnavailable"):
            value = getattr(self, name)
            if isinstance(value, int) and value < 0:
                raise ValueError(f"{name} must be ≥ 0, got {value}")
        return self


class PodDisruptionBudget(_Model):
    """Kubernetes ``policy/v1`` PodDisruptionBudget: voluntary evictions (preemption, reclaim, drain) never
    leave fewer healthy (Running) matching pods than it allows (see ``api.disruption``)."""

    apiVersion: Literal["policy/v1"] = "policy/v1"
    kind: Literal["PodDisruptionBudget"] = "PodDisruptionBudget"
    metadata: ObjectMeta
    spec: PodDisruptionBudgetSpec = Field(default_factory=PodDisruptionBudgetSpec)
    status: dict[str, Any] = Field(default_factory=dict)


class ResourceQuotaSpec(_Model):
    hard: ResourceList = Field(default_factory=dict)


class ResourceQuotaStatus(_Model):
    hard: ResourceList = Field(default_factory=dict)
    used: ResourceList = Field(default_factory=dict)


class ResourceQuota(_Model):
    """Kubernetes' namespace quota (``v1``): the ``resourcequota`` plugin admits a job only while its
    minResources fit what the namespace's quotas leave (Volcano's plugin; ``status.used`` is the quota
    controller's)."""

    apiVersion: Literal["v1"] = "v1"
    kind: Literal["ResourceQuota"] = "ResourceQuota"
    metadata: ObjectMeta
    spec: ResourceQuotaSpec = Field(default_factory=ResourceQuotaSpec)
    status: ResourceQuotaStatus = Field(default_factory=ResourceQuotaStatus)


class Namespace(_Model):
    """Kubernetes' ``v1`` Namespace: its labels are what a Queue's ``hetsched.io/namespace-selector`` matches
    (``api.queue_access``), its annotations name its default queue."""

    apiVersion: Literal["v1"] = "v1"
    kind: Literal["Namespace"] = "Namespace"
    metadata: ObjectMeta


class Secret(_Model):
    apiVersion: Literal["v1"] = "v1"
    kind: Literal["Secret"] = "Secret"
    metadata: ObjectMeta
    type: str = "Opaque"
    data: StringMap = Field(default_factory=dict)
    """Base64-encoded values, as the API server stores them."""


class ConfigMap(_Model):
    apiVersion: Literal["v1"] = "v1"
    kind: Literal["ConfigMap"] = "ConfigMap"
    metadata: ObjectMeta
    data: StringMap = Field(default_factory=dict)


class ServicePort(_Model):
    name: str = ""
    port: int = Field(ge=1, le=65535)
    targetPort: int | str | None = None
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"


class ServiceSpec(_Model):
    clusterIP: str = ""
    selector: StringMap = Field(default_factory=dict)
    ports: list[ServicePort] = Field(default_factory=list)
    publishNotReadyAddresses: bool = False


class Service(_Model):
    """A Service: the job controller makes a job's headless one (``svc`` plugin) and its Ray head's."""

    apiVersion: Literal["v1"] = "v1"
    kind: Literal["Service"] = "Service"
    metadata: ObjectMeta
    spec: ServiceSpec = Field(default_factory=ServiceSpec)


class NetworkPolicy(_Model):
    """A NetworkPolicy: the ``svc`` plugin's lets a job's pods reach each other (held as given)."""

    apiVersion: Literal["networking.k8s.io/v1"] = "networking.k8s.io/v1"
    kind: Literal["NetworkPolicy"] = "NetworkPolicy"
    metadata: ObjectMeta
    spec: dict[str, Any] = Field(default_factory=dict)


# -------------------------------------------------------------------------- CronJob, JobFlow, JobTemplate


class ObjectRef(_Model):
    """A reference to an object the controller made (``kubectl``'s ObjectReference, the fields used)."""

    kind: str = "Job"
    name: str
    namespace: str = ""
    uid: str = ""
    apiVersion: str = "batch.volcano.sh/v1alpha1"


class CronJobTemplate(_Strict):
    metadata: TemplateMeta = Field(default_factory=TemplateMeta)
    spec: JobSpec


class CronJobSpec(_Strict):
    """Volcano's CronJob (``batch.volcano.sh/v1alpha1``): Kubernetes' CronJob with a Volcano Job template."""

    schedule: str = Field(min_length=1, max_length=256)
    timeZone: str | None = None
    startingDeadlineSeconds: Int64 | None = Field(default=None, ge=0)
    concurrencyPolicy: Literal["Allow", "Forbid", "Replace"] = "Allow"
    suspend: bool = False
    jobTemplate: CronJobTemplate
    successfulJobsHistoryLimit: Count32 = 3
    failedJobsHistoryLimit: Count32 = 1

    @model_validator(mode="after")
    def _schedule(self) -> CronJobSpec:
        try:
            cron.parse(self.schedule, self.timeZone)
        except cron.ScheduleError as exc:
            where = "timeZone" if "time zone" in str(exc) and "TZ=" not in str(exc) else "schedule"
            raise ValueError(f"{where}: {exc}") from None
        return self


class CronJobStatus(_Model):
    active: list[ObjectRef] = Field(default_factory=list)
    lastScheduleTime: float | None = None
    lastSuccessfulTime: float | None = None


class CronJob(_Model):
    apiVersion: Literal["batch.volcano.sh/v1alpha1"] = "batch.volcano.sh/v1alpha1"
    kind: Literal["CronJob"] = "CronJob"
    metadata: ObjectMeta
    spec: CronJobSpec
    status: CronJobStatus = Field(default_factory=CronJobStatus)


class JobTemplateStatus(_Model):
    jobDependsOnList: list[str] = Field(default_factory=list)


class JobTemplate(_Model):
    """Volcano's JobTemplate (``flow.volcano.sh/v1alpha1``): a Job spec a JobFlow instantiates, by name."""

    apiVersion: Literal["flow.volcano.sh/v1alpha1"] = "flow.volcano.sh/v1alpha1"
    kind: Literal["JobTemplate"] = "JobTemplate"
    metadata: ObjectMeta
    spec: JobSpec
    status: JobTemplateStatus = Field(default_factory=JobTemplateStatus)


class FlowDependsOn(_Strict):
    targets: list[str] = Field(default_factory=list, max_length=256)
    probe: dict[str, Any] | None = None

    @field_validator("probe")
    @classmethod
    def _no_probe(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value:
            raise ValueError("probes (httpGetList, tcpSocketList, taskStatusList) are not evaluated — Volcano's "
                             "controller does not evaluate them either: a flow starts once its targets completed")
        return value


class FlowPatch(_Strict):
    jobSpec: dict[str, Any] = Field(default_factory=dict)


class Flow(_Strict):
    name: str = Field(min_length=1, max_length=253)
    dependsOn: FlowDependsOn | None = None
    patch: FlowPatch | None = None


class JobFlowSpec(_Strict):
    flows: list[Flow] = Field(min_length=1, max_length=256)
    jobRetainPolicy: Literal["retain", "delete"] = "retain"

    @model_validator(mode="after")
    def _graph(self) -> JobFlowSpec:
        names = [flow.name for flow in self.flows]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})[0]
            raise ValueError(f"flows: {twice!r} is listed twice")
        depends = {flow.name: flow.dependsOn.targets if flow.dependsOn else [] for flow in self.flows}
        for flow, targets in depends.items():
            for target in targets:
                if target not in depends:
                    raise ValueError(f"flows: {flow!r} depends on {target!r}, which is not a flow of this JobFlow")
        state: dict[str, int] = {}

        def visit(name: str, path: list[str]) -> None:  # depth-first: 1 on the path, 2 done
            state[name] = 1
            for target in depends[name]:
                if state.get(target) == 1:
                    loop = [*path[path.index(target):], target] if target in path else [name, target]
                    raise ValueError(f"flows: dependencies form a cycle ({' → '.join(loop)})")
                if state.get(target) is None:
                    visit(target, [*path, target])
            state[name] = 2

        for name in depends:
            if state.get(name) is None:
                visit(name, [name])
        return self


class JobFlowJobStatus(_Model):
    name: str
    state: str = ""
    startTimestamp: float | None = None
    endTimestamp: float | None = None
    restartCount: Count32 = 0


class JobFlowState(_Model):
    phase: str = "Pending"


class JobFlowStatus(_Model):
    pendingJobs: list[str] = Field(default_factory=list)
    runningJobs: list[str] = Field(default_factory=list)
    failedJobs: list[str] = Field(default_factory=list)
    completedJobs: list[str] = Field(default_factory=list)
    terminatedJobs: list[str] = Field(default_factory=list)
    unKnowJobs: list[str] = Field(default_factory=list)
    jobStatusList: list[JobFlowJobStatus] = Field(default_factory=list)
    state: JobFlowState = Field(default_factory=JobFlowState)


class JobFlow(_Model):
    """Volcano's JobFlow (``flow.volcano.sh/v1alpha1``): Jobs made from JobTemplates, each started once the
    flows it depends on completed."""

    apiVersion: Literal["flow.volcano.sh/v1alpha1"] = "flow.volcano.sh/v1alpha1"
    kind: Literal["JobFlow"] = "JobFlow"
    metadata: ObjectMeta
    spec: JobFlowSpec
    status: JobFlowStatus = Field(default_factory=JobFlowStatus)


AnyObject = (Pod | Node | PriorityClass | Job | PodGroup | Queue | Command | PodDisruptionBudget | Secret | ConfigMap
             | Service | NetworkPolicy | HyperNode | CronJob | JobFlow | JobTemplate | QueueUsage | ResourceQuota
             | Namespace)

KINDS: dict[tuple[str, str], type[AnyObject]] = {
    ("v1", "Pod"): Pod,
    ("v1", "Node"): Node,
    ("scheduling.k8s.io/v1", "PriorityClass"): PriorityClass,
    ("batch.volcano.sh/v1alpha1", "Job"): Job,
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): PodGroup,
    ("scheduling.volcano.sh/v1beta1", "Queue"): Queue,
    ("bus.volcano.sh/v1alpha1", "Command"): Command,
    ("policy/v1", "PodDisruptionBudget"): PodDisruptionBudget,
    ("v1", "Secret"): Secret,
    ("v1", "ConfigMap"): ConfigMap,
    ("v1", "Service"): Service,
    ("networking.k8s.io/v1", "NetworkPolicy"): NetworkPolicy,
    ("topology.volcano.sh/v1alpha1", "HyperNode"): HyperNode,
    ("batch.volcano.sh/v1alpha1", "CronJob"): CronJob,
    ("flow.volcano.sh/v1alpha1", "JobFlow"): JobFlow,
    ("flow.volcano.sh/v1alpha1", "JobTemplate"): JobTemplate,
    ("hetsched.io/v1alpha1", "QueueUsage"): QueueUsage,
    ("v1", "ResourceQuota"): ResourceQuota,
    ("v1", "Namespace"): Namespace,
}
CLUSTER_SCOPED = frozenset({"Node", "PriorityClass", "Queue", "HyperNode", "QueueUsage", "Namespace"})
TIME_KEYS = frozenset({"creationTimestamp", "deletionTimestamp", "lastTransitionTime", "startTime", "finishedAt",
                       "startedAt", "lastProbeTime", "lastHeartbeatTime", "lastUpdateTime", "lastScheduleTime",
                       "lastSuccessfulTime", "startTimestamp", "endTimestamp", "periodStart", "periodEnd",
                       "accountedUntil"})
"""Fields the API server writes as RFC 3339 times (hetsched's models hold seconds)."""


def object_key(obj: AnyObject) -> str:
    """``namespace/name`` for namespaced kinds, ``name`` for cluster-scoped ones."""
    if obj.kind in CLUSTER_SCOPED:
        return obj.metadata.name
    return f"{obj.metadata.namespace or 'default'}/{obj.metadata.name}"
