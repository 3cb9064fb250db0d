"""Every object of a hetsched installation, built once from the values: the CRDs, the namespace, one
ServiceAccount and least-privilege role per component, the scheduler's configuration, the scheduler,
controller and webhook Deployments, the webhook's Service and registrations, one node agent and one device
plugin DaemonSet per enabled vendor, and the metrics Service.

Who calls it: ``install.render`` writes these as plain manifests (``hetsched install --print``,
``deploy/hetsched.yaml``) and as the Helm chart's templates (``install.chart``); the real-node tests apply
the plain manifests to a cluster of real kubelets.

Invariants (each holds for every reader, so for the chart too):
- no component can do more than its role: the scheduler reads what it schedules and binds, evicts and
  reports — it cannot create, delete or change pods or nodes, and reads ConfigMaps only in kube-system
  (Ascend's device-info); scheduler and controller each renew only their own Lease, in the installation's
  namespace; the node agent writes Nodes and kube-system ConfigMaps (reading none there) and the controller
  creates and deletes Secrets (reading none), each narrowed by the webhook's ``/restrict``
  (``cluster.restriction``) to its own Node and ConfigMap, and to Secrets a Volcano Job owns — what RBAC
  cannot say for a DaemonSet;
- every pod runs with the runtime's default seccomp profile, requests and limits; every container drops
  all capabilities except the privileged vendor agents (Ascend, Cambricon: their tools open the driver's
  devices) and the fake vendor's MKNOD; metrics listen on the pod's address (``metrics.address``, for
  Prometheus: they say nothing a tenant may not know) unless set to loopback or off;
- the webhook runs two replicas, kept apart and kept up (a PodDisruptionBudget), since with
  ``failurePolicy: Fail`` the Volcano objects cannot be written without it;
- the webhook's TLS is made by the webhook itself (``hetsched webhook --tls-secret``): no private key is
  ever written into a manifest;
- scheduler, controller and webhook run as the image's non-root user with a read-only root file system; the
  node agent and the device plugin run as root (kubelet's device-plugin directory is root's) with the
  vendor's ``securityContext`` (``install.values``);
- every component finds the API server the same way: ``apiServer`` with its ServiceAccount token, else the
  in-cluster Service.
"""

from __future__ import annotations

import copy
from importlib import resources
from typing import Any

import yaml

from hetsched.agents.deviceplugin import VGPU_LIBRARY, VGPU_STATE
from hetsched.api.priority_policy import SYSTEM_CLASSES
from hetsched.devices.inventory import HANDOFF_KEYS
from hetsched.install.render import Doc, Reader
from hetsched.install.values import VENDORS

LABEL = {"app.kubernetes.io/name": "hetsched"}
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
COMPONENTS = ("scheduler", "controller", "webhook", "node-agent", "device-plugin")
TLS_SECRET = "hetsched-webhook-tls"
WEBHOOKS = {"ValidatingWebhookConfiguration": "validate", "MutatingWebhookConfiguration": "mutate"}
TAINT_KEY = "hetsched.io/accelerator-unhealthy"
VENDOR_MOUNTS: dict[str, list[tuple[str, str]]] = {
    "ascend": [("/usr/local/Ascend/driver", "Directory"), ("/usr/local/sbin/npu-smi", "File")],
    "cambricon": [("/usr/bin/cnmon", "File")],
    "nvidia": [],  # NVML comes with the NVIDIA container runtime, as for NVIDIA's own plugin
    "fake": [],
}
"""Host paths each vendor's tools need in the node agent and device plugin (mounted read-only at the same
path)."""


def crds() -> list[dict[str, Any]]:
    """The Volcano-compatible CRDs (package data, also ``deploy/crds/``)."""
    folder = resources.files("hetsched.install") / "crds"
    return [yaml.safe_load(entry.read_text(encoding="utf-8"))
            for entry in sorted(folder.iterdir(), key=lambda e: e.name) if entry.name.endswith(".yaml")]


def _meta(name: str, v: Reader, component: str | None = None, namespaced: bool = True) -> dict[str, Any]:
    labels = dict(LABEL)
    if component:
        labels["app.kubernetes.io/component"] = component
    meta: dict[str, Any] = {"name": name}
    if namespaced:
        meta["namespace"] = v.namespace
    meta["labels"] = labels
    return meta


def _rule(groups: list[str], resources_: list[str], verbs: list[str], names: list[str] | None = None) -> Any:
    rule: dict[str, Any] = {"apiGroups": groups, "resources": resources_, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


READ = ["get", "list", "watch"]
CLUSTER_RULES: dict[str, list[dict[str, Any]]] = {
    "scheduler": [
        _rule([""], ["pods", "nodes"], READ),
        _rule([""], ["pods/binding", "pods/eviction"], ["create"]),
        _rule([""], ["pods/status"], ["patch"]),
        _rule([""], ["events"], ["create", "patch"]),
        _rule(["scheduling.volcano.sh"], ["podgroups", "queues"], READ),
        _rule(["scheduling.volcano.sh"], ["podgroups", "podgroups/status"], ["update"]),
        _rule(["topology.volcano.sh"], ["hypernodes"], READ),
        _rule(["hetsched.io"], ["queueusages"], READ),  # budgets: what is used up
        _rule([""], ["resourcequotas"], READ),  # the resourcequota plugin
        _rule([""], ["namespaces"], READ),  # their labels: what a queue's namespace selector matches
        _rule(["scheduling.k8s.io"], ["priorityclasses"], READ),
        _rule(["policy"], ["poddisruptionbudgets"], READ),
    ],
    "controller": [
        _rule(["batch.volcano.sh"], ["jobs"], [*READ, "create", "update", "delete"]),  # create: CronJob, JobFlow
        _rule(["batch.volcano.sh"], ["jobs/status"], ["update"]),
        _rule(["batch.volcano.sh"], ["cronjobs"], [*READ, "update"]),
        _rule(["batch.volcano.sh"], ["cronjobs/status"], ["update"]),
        _rule(["flow.volcano.sh"], ["jobflows", "jobtemplates"], [*READ, "update"]),
        _rule(["flow.volcano.sh"], ["jobflows/status", "jobtemplates/status"], ["update"]),
        _rule(["bus.volcano.sh"], ["commands"], [*READ, "delete"]),
        _rule(["scheduling.volcano.sh"], ["podgroups"], [*READ, "create", "update", "delete"]),
        _rule(["scheduling.volcano.sh"], ["podgroups/status"], ["update"]),
        _rule(["scheduling.volcano.sh"], ["queues"], [*READ, "create", "update"]),  # default and root; status
        _rule(["scheduling.volcano.sh"], ["queues/status"], ["update"]),
        _rule([""], ["pods"], [*READ, "create", "update", "delete"]),
        _rule([""], ["pods/eviction"], ["create"]),
        _rule([""], ["nodes"], READ),
        _rule(["topology.volcano.sh"], ["hypernodes"], [*READ, "create", "update", "delete"]),  # label discovery
        _rule(["hetsched.io"], ["queueusages"], [*READ, "create"]),  # one per Queue (the usage accountant)
        _rule(["hetsched.io"], ["queueusages/status"], ["update"]),  # its books
        _rule([""], ["secrets"], ["create", "delete"]),  # the ssh plugin's keys: never read (jobplugins.ssh)
        _rule([""], ["configmaps"], ["create", "update", "delete"]),  # the svc plugin's host lists: never read
        _rule([""], ["services"], ["get", "create", "delete"]),  # the svc and ray plugins' Services
        _rule(["networking.k8s.io"], ["networkpolicies"], ["get", "create", "delete"]),  # the svc plugin's
        _rule([""], ["events"], ["create", "patch"]),
        _rule(["scheduling.k8s.io"], ["priorityclasses"], READ),
        _rule(["policy"], ["poddisruptionbudgets"], READ),
    ],
    "webhook": [
        _rule(["admissionregistration.k8s.io"], ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
              ["get", "update"], ["hetsched-validate", "hetsched-mutate", "hetsched-restrict", "hetsched-pods"]),
        # its CA bundle
        _rule(["scheduling.volcano.sh"], ["queues"], ["get"]),  # which namespaces may use a queue
        _rule([""], ["namespaces"], ["get"]),  # a namespace's default queue, and its labels (queue selectors)
    ],
    "node-agent": [  # its own Node only: the webhook's /restrict
        _rule([""], ["nodes"], ["get", "update", "patch"]),
        _rule([""], ["nodes/status"], ["update", "patch"]),
        _rule([""], ["events"], ["create", "patch"]),
    ],
    "device-plugin": [
        _rule([""], ["pods"], READ),  # the scheduler's chips for the pods on its node
        _rule([""], ["events"], ["create", "patch"]),  # a hand-off refused or not followed, told on the pod
    ],
}


def rbac(v: Reader) -> list[Doc]:
    docs = []
    for component in COMPONENTS:
        name = f"hetsched-{component}"
        docs.append(Doc({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, v, component)},
                        "serviceaccounts.yaml"))
    group = "rbac.authorization.k8s.io"
    for component, rules in CLUSTER_RULES.items():
        name = f"hetsched-{component}"
        docs.append(Doc({"apiVersion": f"{group}/v1", "kind": "ClusterRole",
                         "metadata": _meta(name, v, component, namespaced=False), "rules": rules}, "rbac.yaml"))
        docs.append(Doc({"apiVersion": f"{group}/v1", "kind": "ClusterRoleBinding",
                         "metadata": _meta(name, v, component, namespaced=False),
                         "roleRef": {"apiGroup": group, "kind": "ClusterRole", "name": name},
                         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": v.namespace}]},
                        "rbac.yaml"))
    roles: list[tuple[str, str | None, list[dict[str, Any]], list[str]]] = [
        # each component reads and renews only its own Lease (``cluster.leader``): the controller cannot take
        # the scheduler's, nor the scheduler the controller's (create cannot be narrowed by name in RBAC;
        # a Lease created under another's name is renewed over by its owner, ``leader.MAX_DURATION_FACTOR``)
        *((f"hetsched-{component}-lease", None,
           [_rule(["coordination.k8s.io"], ["leases"], ["get", "update"], [f"hetsched-{component}"]),
            _rule(["coordination.k8s.io"], ["leases"], ["create"])], [component])
          for component in ("scheduler", "controller")),
        ("hetsched-webhook-tls", None, [_rule([""], ["secrets"], ["get", "update"], [TLS_SECRET]),
                                        _rule([""], ["secrets"], ["create"])], ["webhook"]),
        # Ascend's device-info ConfigMaps live in kube-system: the agent writes its node's (the webhook's
        # /restrict) without reading any; the scheduler reads them (health from Huawei's plugin)
        ("hetsched-node-agent", "kube-system", [_rule([""], ["configmaps"], ["create", "update"])], ["node-agent"]),
        ("hetsched-scheduler-ascend-info", "kube-system", [_rule([""], ["configmaps"], READ)], ["scheduler"]),
        ("hetsched-webhook-pods", None, [_rule([""], ["pods"], ["get"])], ["webhook"]),  # /restrict: agent's node
    ]
    for name, namespace, rules, subjects in roles:
        meta = _meta(name, v)
        if namespace:
            meta["namespace"] = namespace
        docs.append(Doc({"apiVersion": f"{group}/v1", "kind": "Role", "metadata": meta, "rules": rules}, "rbac.yaml"))
        docs.append(Doc({"apiVersion": f"{group}/v1", "kind": "RoleBinding", "metadata": dict(meta),
                         "roleRef": {"apiGroup": group, "kind": "Role", "name": name},
                         "subjects": [{"kind": "ServiceAccount", "name": f"hetsched-{s}", "namespace": v.namespace}
                                      for s in subjects]}, "rbac.yaml"))
    return docs


def _metrics_address(v: Reader, port_key: str) -> Any:
    return v.expr("off" if not v.get("metrics.address") else f"{v.get('metrics.address')}:{v.num(port_key)}",
                  f"{{{{ if .Values.metrics.address }}}}{{{{ .Values.metrics.address }}}}:"
                  f"{{{{ .Values.{port_key} }}}}{{{{ else }}}}off{{{{ end }}}}")


def _env(v: Reader, port_key: str, extra: list[dict[str, Any]] | None = None,
         token: str = f"{TOKEN_DIR}/token") -> list[dict[str, Any]]:
    """What every component's container gets: the API server (``apiServer`` and its ServiceAccount token,
    else in-cluster), the metrics address and how to log."""
    return [*(extra or []),
            {"name": "HETSCHED_SERVER", "value": v.get("apiServer")},
            {"name": "HETSCHED_TOKEN_FILE", "value": token},
            {"name": "HETSCHED_CA_FILE", "value": f"{TOKEN_DIR}/ca.crt"},
            {"name": "HETSCHED_METRICS_ADDRESS", "value": _metrics_address(v, port_key)},
            {"name": "HETSCHED_LOG_LEVEL", "value": v.get("logLevel")},
            {"name": "HETSCHED_LOG_FORMAT", "value": v.get("logFormat")}]


def _health(v: Reader, component: str) -> dict[str, Any]:
    """The health endpoint (``--health-address``) and the probes that read it, where ``probes.enabled``
    (``component``: the key of its port under ``probes``)."""
    port = f"probes.{component}"
    address = v.expr(f"0.0.0.0:{v.num(port)}" if v.num("probes.enabled") is True else "off",
                     f"{{{{ if .Values.probes.enabled }}}}0.0.0.0:{{{{ .Values.{port} }}}}{{{{ else }}}}off"
                     "{{ end }}")
    probe = {"httpGet": {"path": "/healthz", "port": "health"}, "periodSeconds": 10, "timeoutSeconds": 5,
             "failureThreshold": 6}
    return {"env": [{"name": "HETSCHED_HEALTH_ADDRESS", "value": address}],
            "ports": [{"name": "health", "containerPort": v.num(port)}],
            "livenessProbe": v.optional("probes.enabled", probe),
            "readinessProbe": v.optional("probes.enabled", {**probe, "httpGet": {"path": "/readyz",
                                                                                "port": "health"}})}


POD_TOKEN_DIR = "/var/run/secrets/hetsched"
POD_TOKEN_VOLUME = {"name": "pod-token", "projected": {"sources": [{"serviceAccountToken": {
    "path": "token", "expirationSeconds": 3607}}]}}
"""The node agent's token: a projected ServiceAccount token, bound to its pod, so its requests carry the
pod's name and the webhook's /restrict knows its node (the automounted token is not pod-bound before
Kubernetes 1.21). kubelet renews the file; the client re-reads it (``cluster.kubernetes``)."""
NON_ROOT = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
            "runAsUser": 65532, "runAsGroup": 65532, "capabilities": {"drop": ["ALL"]}}


def _scrape(v: Reader) -> Any:
    """Prometheus' scrape annotation: only where metrics listen beyond the pod's loopback."""
    address = v.get("metrics.address")
    return v.expr("true" if address not in ("", "127.0.0.1") else "false",
                  '{{ if and (.Values.metrics.address) (ne .Values.metrics.address "127.0.0.1") }}true'
                  "{{ else }}false{{ end }}")


def _pod(v: Reader, component: str, container: dict[str, Any], *, volumes: list[dict[str, Any]] | None = None,
         port_key: str, extra: dict[str, Any] | None = None, image: str = "image") -> dict[str, Any]:
    """A component's pod template, from ``image`` (``image``: the core image; ``nodeImage``: the node
    agents', with gRPC and NVML)."""
    labels = {**LABEL, "app.kubernetes.io/component": component}
    spec: dict[str, Any] = {
        "serviceAccountName": f"hetsched-{component}",
        "hostNetwork": v.num("hostNetwork"),
        "terminationGracePeriodSeconds": 30,  # each component stops within 2 s of SIGTERM (cli.shutdown)
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "imagePullSecrets": v.map("imagePullSecrets"),
        **(extra or {}),
        "containers": [{"name": container["name"],
                        "image": v.expr(f"{v.get(image + '.repository')}:{v.get(image + '.tag')}",
                                        f"{{{{ .Values.{image}.repository }}}}:{{{{ .Values.{image}.tag }}}}"),
                        "imagePullPolicy": v.get(f"{image}.pullPolicy"), **container}],
    }
    if volumes:
        spec["volumes"] = volumes
    return {"metadata": {"labels": labels, "annotations": {"prometheus.io/scrape": _scrape(v),
                                                          "prometheus.io/port": v.get(port_key)}},
            "spec": spec}


def _deployment(v: Reader, component: str, replicas: Any, template: dict[str, Any]) -> list[Doc]:
    """The Deployment — where its pods run from the component's values (replicas kept apart by default) —
    and its PodDisruptionBudget (at most one replica down; its apiVersion the cluster's, ``auto``)."""
    selector = {"matchLabels": {**LABEL, "app.kubernetes.io/component": component}}
    for field in ("nodeSelector", "tolerations", "affinity"):
        template["spec"][field] = v.map(f"{component}.{field}")
    template["spec"]["priorityClassName"] = v.get(f"{component}.priorityClassName")
    name = f"hetsched-{component}"
    chosen = v.get("disruptionBudget.apiVersion")
    api = v.expr("policy/v1" if chosen == "auto" else chosen,
                 '{{ if eq .Values.disruptionBudget.apiVersion "auto" }}{{ if semverCompare ">=1.21-0" '
                 ".Capabilities.KubeVersion.Version }}policy/v1{{ else }}policy/v1beta1{{ end }}{{ else }}"
                 "{{ .Values.disruptionBudget.apiVersion }}{{ end }}")
    return [Doc({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name, v, component),
                 "spec": {"replicas": replicas, "selector": selector, "template": template}}, f"{component}.yaml"),
            Doc({"apiVersion": api, "kind": "PodDisruptionBudget",
                 "metadata": _meta(name, v, component), "spec": {"maxUnavailable": 1, "selector": selector}},
                f"{component}.yaml", when=("disruptionBudget.enabled",))]


def controllers(v: Reader) -> list[Doc]:
    """The scheduler (with its configuration) and the controller."""
    conf = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta("hetsched-scheduler-conf", v, "scheduler"),
            "data": {"scheduler.conf": v.map("scheduler.conf")}}
    health = _health(v, "scheduler")
    scheduler = _pod(v, "scheduler", {
        "name": "scheduler",
        "args": ["scheduler", f"--lease-namespace={v.namespace}", f"--period={v.num('scheduler.period')}",
                 f"--qps={v.num('scheduler.qps')}", f"--burst={v.num('scheduler.burst')}",
                 "--scheduler-conf=/etc/hetsched/scheduler.conf", *_priority_classes(v)],
        "env": _env(v, "metrics.scheduler", [{"name": "HETSCHED_ID", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.name"}}}, *health["env"]]),
        "ports": [{"name": "metrics", "containerPort": v.num("metrics.scheduler")}, *health["ports"]],
        "livenessProbe": health["livenessProbe"], "readinessProbe": health["readinessProbe"],
        "resources": v.map("scheduler.resources"),
        "securityContext": NON_ROOT,
        "volumeMounts": [{"name": "conf", "mountPath": "/etc/hetsched", "readOnly": True}],
    }, volumes=[{"name": "conf", "configMap": {"name": "hetsched-scheduler-conf"}}], port_key="metrics.scheduler")
    health = _health(v, "controller")
    controller = _pod(v, "controller", {
        "name": "controller",
        "args": ["controller", f"--lease-namespace={v.namespace}"],
        "env": _env(v, "metrics.controller", [{"name": "HETSCHED_ID", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.name"}}}, *health["env"]]),
        "ports": [{"name": "metrics", "containerPort": v.num("metrics.controller")}, *health["ports"]],
        "livenessProbe": health["livenessProbe"], "readinessProbe": health["readinessProbe"],
        "resources": v.map("controller.resources"),
        "securityContext": NON_ROOT,
    }, port_key="metrics.controller")
    return [Doc(conf, "scheduler.yaml"), *_deployment(v, "scheduler", v.num("scheduler.replicas"), scheduler),
            *_deployment(v, "controller", v.num("controller.replicas"), controller)]


def _priority_classes(v: Reader) -> list[str]:
    """One argument of ``CLASS=NS,…;`` entries (later entries win): the system PriorityClasses stay
    kube-system's and the installation's own (its node agents and device plugins run as system-node-critical
    in it), then the ``priorityClasses`` value. The scheduler and the webhook's ``/pods`` apply the same."""
    def system(namespace: str) -> str:
        return "".join(f"{name}=kube-system,{namespace};" for name in SYSTEM_CLASSES)

    listed = v.map("priorityClasses")
    concrete = "".join(f"{name}={','.join(spaces)};" for name, spaces in sorted(listed.items())) \
        if isinstance(listed, dict) else ""
    template = ("{{ range $class, $spaces := .Values.priorityClasses }}{{ $class }}={{ join \",\" $spaces }};"
                "{{ end }}")
    return [v.expr(f"--priority-class={system(v.namespace)}{concrete}",
                   f"--priority-class={system('{{ .Release.Namespace }}')}{template}")]


def webhook(v: Reader) -> list[Doc]:
    """The webhook server (it makes its own TLS), its Service and the registrations (by Service, or by
    ``webhook.url``): validate and mutate for Volcano's objects, restrict for what RBAC cannot narrow."""
    names = ",".join(f"hetsched-{path}" for path in [*WEBHOOKS.values(), "pods"])
    registrations = v.expr(f"{names},hetsched-restrict" if v.num("webhook.restrict.enabled") is True else names,
                           f"{names}{{{{ if .Values.webhook.restrict.enabled }}}},hetsched-restrict{{{{ end }}}}")
    pod = _pod(v, "webhook", {
        "name": "webhook",
        "args": ["webhook", "--host=0.0.0.0", f"--port={v.num('webhook.port')}",
                 f"--tls-secret={v.namespace}/{TLS_SECRET}", "--service=hetsched-webhook",
                 f"--registration={registrations}", f"--restrict-namespace={v.namespace}",
                 f"--scheduler-identity=system:serviceaccount:{v.namespace}:hetsched-scheduler",
                 *_priority_classes(v)],
        "env": _env(v, "metrics.webhook"),
        "ports": [{"name": "https", "containerPort": v.num("webhook.port")},
                  {"name": "metrics", "containerPort": v.num("metrics.webhook")}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "https", "scheme": "HTTPS"}},
        "resources": v.map("webhook.resources"),
        "securityContext": NON_ROOT,
    }, port_key="metrics.webhook")
    docs = [*_deployment(v, "webhook", v.num("webhook.replicas"), pod),
            Doc({"apiVersion": "v1", "kind": "Service", "metadata": _meta("hetsched-webhook", v, "webhook"),
                 "spec": {"selector": {**LABEL, "app.kubernetes.io/component": "webhook"},
                          "ports": [{"name": "https", "port": 443, "targetPort": "https"}]}}, "webhook.yaml")]
    for by_url in (False, True):
        for kind, path in WEBHOOKS.items():
            rules = [{"apiGroups": ["batch.volcano.sh"], "apiVersions": ["v1alpha1"],
                      "operations": ["CREATE", "UPDATE"], "resources": ["jobs"]}]
            if path == "validate":
                rules += [{"apiGroups": ["batch.volcano.sh"], "apiVersions": ["v1alpha1"],
                           "operations": ["CREATE", "UPDATE"], "resources": ["cronjobs"]},
                          {"apiGroups": ["flow.volcano.sh"], "apiVersions": ["v1alpha1"],
                           "operations": ["CREATE", "UPDATE"], "resources": ["jobflows", "jobtemplates"]},
                          {"apiGroups": ["scheduling.volcano.sh"], "apiVersions": ["v1beta1"],
                           "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["queues"]},
                          {"apiGroups": ["scheduling.volcano.sh"], "apiVersions": ["v1beta1"],
                           "operations": ["CREATE", "UPDATE"], "resources": ["podgroups"]},
                          {"apiGroups": ["bus.volcano.sh"], "apiVersions": ["v1alpha1"], "operations": ["CREATE"],
                           "resources": ["commands"]},
                          {"apiGroups": ["topology.volcano.sh"], "apiVersions": ["v1alpha1"],
                           "operations": ["CREATE", "UPDATE"], "resources": ["hypernodes"]},
                          {"apiGroups": ["hetsched.io"], "apiVersions": ["v1alpha1"],
                           "operations": ["CREATE", "UPDATE"], "resources": ["queueusages"]},
                          {"apiGroups": ["policy"], "apiVersions": ["v1", "v1beta1"],
                           "operations": ["CREATE", "UPDATE"], "resources": ["poddisruptionbudgets"]}]
            client: dict[str, Any] = (
                {"url": v.expr(f"{v.get('webhook.url')}/{path}", f"{{{{ .Values.webhook.url }}}}/{path}")} if by_url
                else {"service": {"name": "hetsched-webhook", "namespace": v.namespace, "path": f"/{path}"}})
            # pods are not validated here (the API server refuses a requests-only accelerator itself): only
            # /pods sees them, for what nobody else may write, and it fails open (_pods_registration)
            entries = [{"name": f"{path}.hetsched.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                        "failurePolicy": v.get("webhook.failurePolicy"), "timeoutSeconds": 10,
                        "clientConfig": client, "rules": rules}]
            registration = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                            "metadata": _meta(f"hetsched-{path}", v, "webhook", namespaced=False), "webhooks": entries}
            docs.append(Doc(registration, "webhook.yaml", when=("webhook.url",) if by_url else ("!webhook.url",)))
        where = "webhook.url" if by_url else "!webhook.url"
        for narrowed in (False, True):  # matchConditions (Kubernetes 1.28+): fail closed for what is checked
            switch = "webhook.matchConditions" if narrowed else "!webhook.matchConditions"
            docs.append(Doc(_restrict_registration(v, by_url, narrowed), "webhook.yaml",
                            when=("webhook.restrict.enabled", where, switch)))
            docs.append(Doc(_pods_registration(v, by_url, narrowed), "webhook.yaml", when=(where, switch)))
    return docs


def _cel_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{item}"' for item in items) + "]"


def handoff_written_cel() -> str:
    """CEL, true exactly when a pod create or update sets or changes a hand-off annotation
    (``devices.inventory.is_handoff_key``; as ``cluster.webhook.check_pod`` compares them)."""
    keys = _cel_list(sorted(HANDOFF_KEYS))
    return ('has(object.metadata.annotations) && object.metadata.annotations.exists(k, '
            f'(k in {keys} || k.matches("^huawei[.]com/[^/]*$")) && (request.operation != "UPDATE" || '
            '!has(oldObject.metadata.annotations) || !(k in oldObject.metadata.annotations) || '
            'oldObject.metadata.annotations[k] != object.metadata.annotations[k]))')


def _identity(v: Reader, component: str) -> str:
    return f"system:serviceaccount:{v.namespace}:hetsched-{component}"


def _pods_registration(v: Reader, by_url: bool, narrowed: bool) -> dict[str, Any]:
    """``/pods`` (``cluster.webhook.check_pod``): only the scheduler writes the chip hand-off, and a namespace
    uses only the PriorityClasses it may.

    Without ``matchConditions`` one entry sees every pod of the cluster, so it fails open
    (``failurePolicy: Ignore``): a webhook outage must not stop pod creation. While it is down the
    scheduler's cache and the device plugin still ignore any hand-off the scheduler did not stamp for that
    pod (``devices.inventory.trusted_allocation``), and the scheduler gives a class a namespace may not use
    no weight. With ``matchConditions`` (``webhook.matchConditions``, Kubernetes 1.28+) the hand-off rule is
    its own entry, called only when someone other than the scheduler sets or changes a hand-off annotation
    — only a request the webhook refuses anyway — so it fails closed (``Fail``) without ever holding up
    anyone else's pods; the PriorityClass entry is called only for pods that name a class, and still fails
    open (kube-system's critical pods must be creatable while the webhook is down)."""
    client: dict[str, Any] = (
        {"url": v.expr(f"{v.get('webhook.url')}/pods", "{{ .Values.webhook.url }}/pods")} if by_url
        else {"service": {"name": "hetsched-webhook", "namespace": v.namespace, "path": "/pods"}})
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]
    def entry() -> dict[str, Any]:  # a fresh copy each time: shared lists would be YAML aliases
        return copy.deepcopy({"admissionReviewVersions": ["v1"], "sideEffects": "None", "timeoutSeconds": 5,
                              "clientConfig": client, "rules": rules})

    if narrowed:
        webhooks = [
            {"name": "pods-handoff.hetsched.io", **entry(), "failurePolicy": "Fail", "matchConditions": [
                {"name": "not-the-scheduler",
                 "expression": f'request.userInfo.username != "{_identity(v, "scheduler")}"'},
                {"name": "hand-off-written", "expression": handoff_written_cel()}]},
            {"name": "pods.hetsched.io", **entry(), "failurePolicy": "Ignore", "matchConditions": [
                {"name": "names-a-priority-class",
                 "expression": 'has(object.spec.priorityClassName) && object.spec.priorityClassName != ""'}]}]
    else:
        webhooks = [{"name": "pods.hetsched.io", **entry(), "failurePolicy": "Ignore"}]
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": _meta("hetsched-pods", v, "webhook", namespaced=False), "webhooks": webhooks}


def _restrict_registration(v: Reader, by_url: bool, narrowed: bool) -> dict[str, Any]:
    """``/restrict`` (``cluster.restriction``): Node and ConfigMap writes, Secret, Service and NetworkPolicy
    creates and deletes. The
    webhook answers other identities' requests at once; ``failurePolicy`` (default Ignore) decides whether a
    webhook outage holds those writes up. With ``matchConditions`` (Kubernetes 1.28+) the API server calls
    it only for the node agents' and the controller's writes, so it fails closed (``Fail``): an outage holds
    up only hetsched's own writes, never a kubelet's or anyone else's."""
    client: dict[str, Any] = (
        {"url": v.expr(f"{v.get('webhook.url')}/restrict", "{{ .Values.webhook.url }}/restrict")} if by_url
        else {"service": {"name": "hetsched-webhook", "namespace": v.namespace, "path": "/restrict"}})
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
              "resources": ["nodes", "nodes/status"]},
             {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"],
              "resources": ["configmaps"]},
             {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "DELETE"],
              "resources": ["secrets", "services"]},
             {"apiGroups": ["networking.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "DELETE"],
              "resources": ["networkpolicies"]}]
    entry: dict[str, Any] = {
        "name": "restrict.hetsched.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "failurePolicy": "Fail" if narrowed else v.get("webhook.restrict.failurePolicy"), "timeoutSeconds": 5,
        "clientConfig": client, "rules": rules}
    if narrowed:
        identities = _cel_list([_identity(v, "node-agent"), _identity(v, "controller")])
        entry["matchConditions"] = [{"name": "hetsched-identities",
                                     "expression": f"request.userInfo.username in {identities}"}]
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": _meta("hetsched-restrict", v, "webhook", namespaced=False), "webhooks": [entry]}


def _host_volume(name: str, path: str, kind: str, read_only: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    return ({"name": name, "hostPath": {"path": path, "type": kind}},
            {"name": name, "mountPath": path, "readOnly": read_only})


def agents(v: Reader) -> list[Doc]:
    """Per vendor: the node agent and the device plugin DaemonSets, on the vendor's nodes."""
    docs = []
    for vendor in VENDORS:
        key = f"vendors.{vendor}"
        mounts = [_host_volume(f"tool-{i}", path, kind) for i, (path, kind) in enumerate(VENDOR_MOUNTS[vendor])]
        args: list[Any] = [f"--vendor={vendor}"]
        if vendor == "fake":  # the chips file's folder, at the same path (the fake device files are made there)
            folder = v.expr(v.get(f"{key}.config").rsplit("/", 1)[0] or "/", f"{{{{ dir .Values.{key}.config }}}}")
            mounts.append(({"name": "fake", "hostPath": {"path": folder, "type": "DirectoryOrCreate"}},
                           {"name": "fake", "mountPath": folder}))
            args.append(f"--config={v.get(f'{key}.config')}")
        if vendor in ("ascend", "nvidia"):  # vNPUs, vGPUs (the fake vendor says it in its chips file)
            args.append(f"--partitioning={v.get(f'{key}.partitioning')}")
        kubelet_dir = v.expr(v.get("kubeletConfig").rsplit("/", 1)[0] or "/", "{{ dir .Values.kubeletConfig }}")
        kubelet_file = v.expr(v.get("kubeletConfig").rsplit("/", 1)[-1], "{{ base .Values.kubeletConfig }}")
        tolerations = v.map(f"{key}.tolerations")
        node_env = [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
        agent_health, plugin_health = _health(v, "nodeAgent"), _health(v, "devicePlugin")
        agent = _pod(v, "node-agent", {
            "name": "node-agent",
            "args": ["node-agent", *args, f"--period={v.num(f'{key}.nodeAgent.period')}",
                     f"--kubelet-config=/host/kubelet/{kubelet_file}"],
            "env": _env(v, "metrics.nodeAgent", [*node_env, *agent_health["env"]], token=f"{POD_TOKEN_DIR}/token"),
            "ports": [{"name": "metrics", "containerPort": v.num("metrics.nodeAgent")}, *agent_health["ports"]],
            "livenessProbe": agent_health["livenessProbe"], "readinessProbe": agent_health["readinessProbe"],
            "resources": v.map(f"{key}.nodeAgent.resources"),
            "securityContext": v.map(f"{key}.securityContext"),
            "volumeMounts": [{"name": "dev", "mountPath": "/dev"},
                             {"name": "kubelet-config", "mountPath": "/host/kubelet", "readOnly": True},
                             {"name": "pod-token", "mountPath": POD_TOKEN_DIR, "readOnly": True},
                             *(mount for _, mount in mounts)],
        }, volumes=[{"name": "dev", "hostPath": {"path": "/dev", "type": "Directory"}},
                    {"name": "kubelet-config", "hostPath": {"path": kubelet_dir, "type": "DirectoryOrCreate"}},
                    POD_TOKEN_VOLUME, *(volume for volume, _ in mounts)],
            port_key="metrics.nodeAgent", image="nodeImage",
            extra={"nodeSelector": v.map(f"{key}.nodeSelector"), "tolerations": tolerations,
                   "priorityClassName": v.get(f"{key}.priorityClassName")})
        runtime = v.expr("--ascend-runtime" if v.num(f"{key}.devicePlugin.ascendRuntime") is True
                         else "--no-ascend-runtime",
                         f"{{{{ if .Values.{key}.devicePlugin.ascendRuntime }}}}--ascend-runtime{{{{ else }}}}"
                         "--no-ascend-runtime{{ end }}")
        vgpu = []  # HAMi-core's library and the ld.so.preload naming it, mounted into vGPU containers from the host
        if vendor in ("nvidia", "fake"):
            vgpu = [_host_volume("vgpu-library", VGPU_LIBRARY.rsplit("/", 1)[0], "DirectoryOrCreate"),
                    _host_volume("vgpu-state", VGPU_STATE, "DirectoryOrCreate", read_only=False)]
        plugin = _pod(v, "device-plugin", {
            "name": "device-plugin",
            "args": ["device-plugin", *args, f"--period={v.num(f'{key}.devicePlugin.period')}", runtime],
            "env": _env(v, "metrics.devicePlugin", [*node_env, *plugin_health["env"]]),  # NODE_NAME: the hand-off
            "ports": [{"name": "metrics", "containerPort": v.num("metrics.devicePlugin")}, *plugin_health["ports"]],
            "livenessProbe": plugin_health["livenessProbe"], "readinessProbe": plugin_health["readinessProbe"],
            "resources": v.map(f"{key}.devicePlugin.resources"),
            "securityContext": v.map(f"{key}.securityContext"),
            "volumeMounts": [{"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"},
                             {"name": "dev", "mountPath": "/dev"}, *(mount for _, mount in [*mounts, *vgpu])],
        }, volumes=[{"name": "device-plugins", "hostPath": {"path": "/var/lib/kubelet/device-plugins",
                                                              "type": "Directory"}},
                    {"name": "dev", "hostPath": {"path": "/dev", "type": "Directory"}},
                    *(volume for volume, _ in [*mounts, *vgpu])],
            port_key="metrics.devicePlugin", image="nodeImage",
            extra={"nodeSelector": v.map(f"{key}.nodeSelector"), "tolerations": tolerations,
                   "priorityClassName": v.get(f"{key}.priorityClassName")})
        for component, template, switch in (("node-agent", agent, "nodeAgent"),
                                            ("device-plugin", plugin, "devicePlugin")):
            name = f"hetsched-{component}-{vendor}"
            daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta(name, v, component),
                         "spec": {"selector": {"matchLabels": {**LABEL, "app.kubernetes.io/component": component,
                                                               "hetsched.io/vendor": vendor}},
                                  "template": template}}
            template["metadata"] = {**template["metadata"], "labels": {
                **template["metadata"]["labels"], "hetsched.io/vendor": vendor}}
            docs.append(Doc(daemonset, f"{vendor}.yaml", when=(f"{key}.enabled", f"{key}.{switch}.enabled")))
    return docs


def metrics_service(v: Reader) -> list[Doc]:
    """The metrics Service over every component's pods, and (``metrics.serviceMonitor.enabled``) the
    Prometheus Operator's ServiceMonitor scraping through it."""
    monitor_meta = _meta("hetsched", v)
    monitor_meta["labels"] = v.map("metrics.serviceMonitor.labels")
    return [Doc({"apiVersion": "v1", "kind": "Service", "metadata": _meta("hetsched-metrics", v),
                 "spec": {"selector": dict(LABEL),
                          "ports": [{"name": "metrics", "port": v.num("metrics.port"), "targetPort": "metrics"}]}},
                "metrics.yaml"),
            Doc({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": monitor_meta,
                 "spec": {"selector": {"matchLabels": dict(LABEL)}, "namespaceSelector": {"matchNames": [v.namespace]},
                          "endpoints": [{"port": "metrics", "interval": v.get("metrics.serviceMonitor.interval")}]}},
                "metrics.yaml", when=("metrics.serviceMonitor.enabled",))]


def documents(v: Reader) -> list[Doc]:
    """The whole installation, in the order it can be applied (CRDs and namespace first)."""
    docs = [Doc(crd, "crds", plain_only=True) for crd in crds()]
    docs.append(Doc({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": v.namespace}}, "namespace",
                    plain_only=True))
    return docs + rbac(v) + controllers(v) + webhook(v) + agents(v) + metrics_service(v)
