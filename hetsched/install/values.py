"""The settings of an installation — the Helm chart's ``values.yaml`` and ``hetsched install``'s
``--values``/``--set`` — as one validated model.

Who calls it: ``install.manifests`` (what each value does to the objects), ``install.chart`` (writes the
chart's ``values.yaml`` from these defaults and descriptions) and ``cli.install`` (reads the user's files and
``--set`` pairs). An unknown key or a wrong type is a ValueError naming the key.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from hetsched.api.objects import INT32_MAX
from hetsched.api.validation import first_problem
from hetsched.api.yamlsafe import YamlLimitError, safe_load
from hetsched.scheduler.engine.conf import DEFAULT_CONF_YAML

VENDORS = ("ascend", "cambricon", "nvidia", "fake")
"""One node agent and one device plugin DaemonSet per vendor; a mixed cluster enables several."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


class Image(_Model):
    repository: str = Field("hetsched", description="image name; scripts/build-image.sh builds hetsched:VERSION "
                                                    "(scheduler, controller, webhook: the core only)")
    tag: str = Field("0.1.0", description="image tag")
    pullPolicy: Literal["Always", "IfNotPresent", "Never"] = Field("IfNotPresent", description="imagePullPolicy")


class NodeImage(Image):
    repository: str = Field("hetsched-node", description="image name; scripts/build-image.sh hetsched-node builds "
                                                         "hetsched-node:VERSION (the core with the agents and "
                                                         "nvidia extras: gRPC, NVML)")


def _resources(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> Any:
    return Field(default_factory=lambda: {"requests": {"cpu": cpu, "memory": memory},
                                          "limits": {"cpu": cpu_limit, "memory": memory_limit}},
                 description="the container's resources (requests and limits)")


def _apart(component: str) -> Any:
    """Replicas on different nodes where there are enough (one node's loss leaves the others)."""
    return Field(default_factory=lambda: {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {
            "matchLabels": {"app.kubernetes.io/name": "hetsched", "app.kubernetes.io/component": component}}}}]}},
        description="the pods' affinity (default: replicas on different nodes where there are enough; {}: none)")


class _Placed(_Model):
    """Where and how a Deployment's pods run, as every chart lets users say."""

    nodeSelector: dict[str, str] = Field(default_factory=dict, description="the pods' nodeSelector")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="the pods' tolerations")
    priorityClassName: str = Field("", description="the pods' PriorityClass (\"\": none)")


class Scheduler(_Placed):
    replicas: int = Field(2, ge=1, le=INT32_MAX, description="one active (Lease), the others standby")
    affinity: dict[str, Any] = _apart("scheduler")
    resources: dict[str, Any] = _resources("500m", "512Mi", "4", "4Gi")
    period: float = Field(1.0, gt=0, le=3600, description="seconds between scheduling cycles")
    qps: float = Field(1000, gt=0, le=1e6, description="API requests per second for binds")
    burst: int = Field(2000, ge=1, le=INT32_MAX, description="burst of API requests for binds")
    conf: str = Field(DEFAULT_CONF_YAML, description="the Volcano scheduler configuration (actions, tiers); "
                                                     "kept in the ConfigMap hetsched-scheduler-conf")


class Controller(_Placed):
    replicas: int = Field(2, ge=1, le=INT32_MAX, description="one active (Lease), the others standby")
    affinity: dict[str, Any] = _apart("controller")
    resources: dict[str, Any] = _resources("200m", "256Mi", "2", "2Gi")


class Restrict(_Model):
    enabled: bool = Field(True, description="register /restrict: the node agent may write only its own Node "
                                            "and ConfigMap, the controller only Secrets a Volcano Job owns")
    failurePolicy: Literal["Fail", "Ignore"] = Field(
        "Ignore", description="Ignore: a webhook outage never stops the cluster's Node, ConfigMap and Secret "
                              "writes (the checks lapse meanwhile); Fail: they wait for the webhook")


class Webhook(_Placed):
    replicas: int = Field(2, ge=1, le=INT32_MAX, description="admission webhook servers (on different nodes "
                                                             "where they can be; a PodDisruptionBudget keeps one up)")
    affinity: dict[str, Any] = _apart("webhook")
    resources: dict[str, Any] = _resources("100m", "128Mi", "1", "512Mi")
    restrict: Restrict = Field(default_factory=Restrict)
    port: int = Field(9443, ge=1, le=65535, description="HTTPS port of the webhook server")
    failurePolicy: Literal["Fail", "Ignore"] = Field("Fail", description="what the API server does when the "
                                                                         "webhook does not answer")
    matchConditions: bool | Literal["auto"] = Field("auto", description="auto: on where the API server is "
                                  "1.28+ (the chart asks the cluster; plain manifests: hetsched install "
                                  "--kube-version); Kubernetes 1.28+ only (older API servers drop the field): "
                                  "the API server calls /restrict only for hetsched's node agents and controller, "
                                  "and the pod hand-off check only for hand-off annotations written by someone "
                                  "other than the scheduler, so both fail closed without holding up anyone "
                                  "else's writes (hetsched install --kube-version sets it)")
    url: str = Field("", description="register the webhook by URL instead of through its Service (e.g. "
                                     "https://127.0.0.1:9443 with hostNetwork); the serving certificate "
                                     "covers the Service names, localhost and 127.0.0.1")


class DevicePlugin(_Model):
    enabled: bool = Field(True, description="serve this vendor's chips to kubelet")
    period: float = Field(5, gt=0, le=3600, description="seconds between health checks")
    ascendRuntime: bool = Field(False, description="Ascend: hand chips over as ASCEND_VISIBLE_DEVICES for the "
                                                   "Ascend container runtime, not as device nodes")
    resources: dict[str, Any] = _resources("50m", "64Mi", "500m", "512Mi")


class NodeAgent(_Model):
    enabled: bool = Field(True, description="publish chip health, the node condition, taint and labels")
    period: float = Field(10, gt=0, le=3600, description="seconds between checks")
    resources: dict[str, Any] = _resources("50m", "64Mi", "500m", "512Mi")


class Vendor(_Model):
    enabled: bool = Field(False, description="run this vendor's node agent and device plugin")
    nodeSelector: dict[str, str] = Field(default_factory=dict, description="the nodes with this vendor's chips")
    devicePlugin: DevicePlugin = Field(default_factory=DevicePlugin)
    nodeAgent: NodeAgent = Field(default_factory=NodeAgent)
    config: str = Field("", description="fake vendor only: the chips file on each node (its directory is "
                                        "mounted; the fake device files are made beside it)")
    partitioning: Literal["", "vnpu", "vgpu", "mig"] = Field(
        "", description="ascend: vnpu — the nodes' chips are carved into vNPUs on demand (npu-smi); the device "
                        "plugin then also serves huawei.com/npu-core; nvidia: vgpu — the GPUs are shared as HAMi-core "
                        "vGPUs; the device plugin then also serves volcano.sh/vgpu-number; nvidia: mig — the GPUs are "
                        "in MIG mode, instances made on demand (NVML); the device plugin then also serves "
                        "nvidia.com/mig-<profile> (docs/devices.md, chip partitions)")
    securityContext: dict[str, Any] = Field(default_factory=dict, description="the node agent's and device "
                                            "plugin's container securityContext")
    tolerations: list[dict[str, Any]] = Field(
        default_factory=lambda: [{"key": "hetsched.io/accelerator-unhealthy", "operator": "Exists",
                                  "effect": "NoSchedule"}],
        description="the node agent's and device plugin's tolerations (keep the first: they must run on the "
                    "nodes whose chips they mark unhealthy)")
    priorityClassName: str = Field("system-node-critical", description="the node agent's and device plugin's "
                                                                       "PriorityClass")


PRIVILEGED = {"privileged": True, "runAsUser": 0, "runAsGroup": 0}
"""Ascend's npu-smi and Cambricon's cnmon open the driver's device files, which a container reaches only
privileged (as the vendors' own device plugins run)."""
DROPPED = {"runAsUser": 0, "runAsGroup": 0, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
           "capabilities": {"drop": ["ALL"]}}
"""NVIDIA (NVML through the NVIDIA container runtime, as NVIDIA's plugin runs) and the fake vendor need no
device access: root only for kubelet's device-plugin folder, every capability dropped."""


def _vendor(name: str, enabled: bool = False, config: str = "", context: dict[str, Any] = PRIVILEGED) -> Any:
    return Field(default_factory=lambda: Vendor(enabled=enabled, nodeSelector={"hetsched.io/vendor": name},
                                                config=config, securityContext=copy.deepcopy(context)),
                 description=f"label {name} nodes hetsched.io/vendor={name} (or set nodeSelector)")


class Vendors(_Model):
    ascend: Vendor = _vendor("ascend", enabled=True)
    cambricon: Vendor = _vendor("cambricon")
    nvidia: Vendor = _vendor("nvidia", context=DROPPED)
    fake: Vendor = _vendor("fake", config="/etc/hetsched/fake/chips.yaml",  # it makes its fake device files
                           context={**DROPPED, "capabilities": {"drop": ["ALL"], "add": ["MKNOD"]}})

    @model_validator(mode="after")
    def _partitioning_fits_the_vendor(self) -> Vendors:
        for name, mode in (("cambricon", self.cambricon.partitioning), ("fake", self.fake.partitioning),
                           ("ascend", "" if self.ascend.partitioning in ("", "vnpu") else self.ascend.partitioning),
                           ("nvidia", "" if self.nvidia.partitioning in ("", "vgpu", "mig")
                            else self.nvidia.partitioning)):
            if mode:
                raise ValueError(f"vendors.{name}.partitioning: {mode} is not served for {name} (ascend: vnpu, "
                                 f"nvidia: vgpu or mig; a fake node says it in its chips file)")
        return self


class ServiceMonitor(_Model):
    enabled: bool = Field(False, description="a ServiceMonitor (monitoring.coreos.com/v1) for the Prometheus "
                                             "Operator, scraping every component through hetsched-metrics")
    interval: str = Field("30s", pattern=r"^[0-9]+(ms|s|m|h)$", description="scrape interval")
    labels: dict[str, str] = Field(default_factory=lambda: {"app.kubernetes.io/name": "hetsched"},
                                   description="its labels (add what your Prometheus selects ServiceMonitors by)")


class Metrics(_Model):
    address: str = Field("0.0.0.0", description="every component serves /metrics on this address (0.0.0.0: "
                                                "the pod's, for Prometheus to scrape; 127.0.0.1: only from its "
                                                "own pod); \"\" turns metrics off")
    port: int = Field(8080, ge=1, le=65535, description="the hetsched-metrics Service's port")
    scheduler: int = Field(8080, ge=1, le=65535)
    controller: int = Field(8081, ge=1, le=65535)
    webhook: int = Field(8082, ge=1, le=65535)
    nodeAgent: int = Field(9101, ge=1, le=65535)
    devicePlugin: int = Field(9102, ge=1, le=65535)
    serviceMonitor: ServiceMonitor = Field(default_factory=ServiceMonitor)


class Probes(_Model):
    enabled: bool = Field(True, description="liveness and readiness probes on the scheduler, controller, node "
                                            "agents and device plugins: each serves /healthz (its loop ran "
                                            "lately) and /readyz on its health port; off where pods share a "
                                            "host's network and ports")
    scheduler: int = Field(8090, ge=1, le=65535, description="the scheduler's health port")
    controller: int = Field(8091, ge=1, le=65535, description="the controller's health port")
    nodeAgent: int = Field(9111, ge=1, le=65535, description="the node agents' health port")
    devicePlugin: int = Field(9112, ge=1, le=65535, description="the device plugins' health port")


class DisruptionBudget(_Model):
    enabled: bool = Field(True, description="a PodDisruptionBudget (maxUnavailable 1) for the scheduler, "
                                            "controller and webhook: a drain never takes all replicas at once")
    apiVersion: Literal["auto", "policy/v1", "policy/v1beta1"] = Field(
        "auto", description="auto: policy/v1 from Kubernetes 1.21, policy/v1beta1 before (the chart asks the "
                            "cluster; plain manifests: hetsched install --kube-version, else policy/v1)")


CLASS_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
NAMESPACE_OR_ALL = r"^(\*|[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$"


class Values(_Model):
    namespace: str = Field("hetsched", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
                           description="plain manifests only: the namespace they create and use (the chart "
                                       "uses the release's)")
    image: Image = Field(default_factory=Image)
    nodeImage: NodeImage = Field(default_factory=NodeImage, description="the node agents' and device plugins' "
                                                                        "image")
    apiServer: str = Field("", description="API server URL for every component (with its ServiceAccount "
                                           "token); \"\" uses the in-cluster Service")
    hostNetwork: bool = Field(False, description="run every pod on its node's network (clusters without a "
                                                 "pod network)")
    imagePullSecrets: list[dict[str, str]] = Field(default_factory=list, description="Secrets to pull the images "
                                                   "with, on every pod: [{name: regcred}]")
    logLevel: Literal["debug", "info", "warning", "error"] = Field("info", description="every component's log "
                                                                                      "level")
    logFormat: Literal["text", "json"] = Field("text", description="every component's log lines: text, or one "
                                                                   "JSON object per line")
    probes: Probes = Field(default_factory=Probes)
    kubeletConfig: str = Field("/var/lib/kubelet/config.yaml", description="the kubelet's configuration on "
                               "each node (its directory is mounted read-only; the node agent publishes its "
                               "topology manager policy for hetsched doctor)")
    scheduler: Scheduler = Field(default_factory=Scheduler)
    controller: Controller = Field(default_factory=Controller)
    webhook: Webhook = Field(default_factory=Webhook)
    vendors: Vendors = Field(default_factory=Vendors)
    metrics: Metrics = Field(default_factory=Metrics)
    disruptionBudget: DisruptionBudget = Field(default_factory=DisruptionBudget)
    priorityClasses: dict[Annotated[str, StringConstraints(pattern=CLASS_NAME)],
                          Annotated[list[Annotated[str, StringConstraints(pattern=NAMESPACE_OR_ALL)]],
                                    Field(min_length=1, max_length=1000)]] = Field(
        default_factory=dict, max_length=1000,
        description="PriorityClass → the namespaces that may use it (\"*\": every namespace), enforced by the "
                    "webhook and the scheduler; system-node-critical and system-cluster-critical are kube-system's "
                    "and the installation's unless listed here; a class not listed may be used everywhere")


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update`` over ``base`` as Helm merges values: maps key by key, a null value removes the key."""
    merged = dict(base)
    for key, value in update.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def parse_set(pair: str) -> dict[str, Any]:
    """``a.b.c=value`` → ``{"a": {"b": {"c": value}}}``; the value is read as YAML (``true``, ``3``, ``{}``)."""
    path, sep, text = pair.partition("=")
    if not sep or not path or any(not part for part in path.split(".")):
        raise ValueError(f"--set {pair!r}: expected KEY.PATH=VALUE")
    try:
        value: Any = safe_load(text) if text else ""
    except yaml.YAMLError:
        value = text
    except YamlLimitError as exc:
        raise ValueError(f"--set {path}: {exc}") from None
    for part in reversed(path.split(".")):
        value = {part: value}
    return value  # type: ignore[no-any-return]


def _validated(data: dict[str, Any], source: str) -> Values:
    try:
        return Values.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{source}: {first_problem(exc)}") from None
    except RecursionError:
        raise ValueError(f"{source}: nested too deeply") from None


def load_values(documents: list[tuple[str, Any]], sets: list[str]) -> Values:
    """The defaults, then (source name, parsed YAML) documents in order, then ``--set`` pairs; a ValueError
    names the source (the file, or ``values`` for the pairs) and the key."""
    data: dict[str, Any] = Values().model_dump()
    for source, document in documents:
        if document is None:
            continue
        if not isinstance(document, dict):
            raise ValueError(f"{source}: expected a mapping of values, got {type(document).__name__}")
        data = merge(data, document)
        _validated(data, source)
    for pair in sets:
        data = merge(data, parse_set(pair))
    return _validated(data, "values")
