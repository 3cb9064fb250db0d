"""What ``hetsched doctor`` and ``hetsched explain`` read from a real API server, in one pass.

Who calls it: ``cli.doctor`` in Kubernetes mode. It lists the kinds the scheduler watches plus Jobs (raw,
for the template checks), reads the scheduler's and controller's Leases, and proves the admission webhook
answers by a server-side dry run of a Job it must refuse (``dryRun=All``: nothing is stored). Objects that
fail validation are skipped here; the controllers already mark them with an ``Invalid`` condition.
"""

from __future__ import annotations

import contextlib
import time
from datetime import datetime
from typing import Any

from hetsched.api.objects import AnyObject
from hetsched.cluster.kubernetes import RESOURCES, ApiError, KubeClient, from_api
from hetsched.diagnose.checks import ClusterFacts, ComponentStatus
from hetsched.ports import Invalid, NotFound

LISTED = ("Node", "Pod", "PodGroup", "Queue", "Job", "ConfigMap", "PriorityClass", "PodDisruptionBudget")
PROBE_JOB = {
    "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
    "metadata": {"generateName": "hetsched-doctor-probe-"},
    "spec": {"minAvailable": 1, "policies": [{"event": "HetschedDoctorProbe", "action": "RestartJob"}],
             "tasks": [{"name": "probe", "replicas": 1, "template": {"spec": {"containers": [
                 {"name": "probe", "image": "probe"}]}}}]},
}
"""A Job the webhook refuses (an unknown policy event) and the CRD's schema accepts."""


def _list(client: KubeClient, kind: str) -> list[dict[str, Any]]:
    resource = RESOURCES[kind]
    path = resource.path()
    if kind == "ConfigMap":  # only Ascend's device-info ConfigMaps matter, and they live in kube-system
        path = resource.path("kube-system")
    try:
        items: list[dict[str, Any]] = client.request("GET", path).get("items", [])
    except NotFound:
        if kind == "PodDisruptionBudget":
            items = client.request("GET", path.replace("/policy/v1/", "/policy/v1beta1/")).get("items", [])
        else:
            return []  # a CRD not installed: the checks see none of that kind
    return items


LEASE_NAMESPACES = ("hetsched", "kube-system")
"""Where the Leases are looked for when no namespace is given and listing across namespaces is not allowed:
the plain manifests' namespace, then the processes' own default (``--lease-namespace``)."""


def _find_lease(client: KubeClient, name: str) -> tuple[str, dict[str, Any]] | None:
    """The Lease ``name`` in whichever namespace holds it (the chart installs into its release namespace):
    listed across namespaces by name, the most recently renewed first; where that is forbidden, looked up in
    :data:`LEASE_NAMESPACES`."""
    try:
        items = client.request("GET", "/apis/coordination.k8s.io/v1/leases",
                               query={"fieldSelector": f"metadata.name={name}"}).get("items") or []
    except (ApiError, Invalid, NotFound):
        items = []
        for namespace in LEASE_NAMESPACES:
            with contextlib.suppress(ApiError, Invalid, NotFound):
                items.append(client.request(
                    "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"))
    found = [i for i in items if isinstance(i, dict)]
    if not found:
        return None
    best = max(found, key=lambda i: str((i.get("spec") or {}).get("renewTime") or ""))
    return str((best.get("metadata") or {}).get("namespace") or ""), best


def _lease(client: KubeClient, namespace: str | None, name: str, now: float) -> ComponentStatus:
    component = name.removeprefix("hetsched-")
    try:
        if namespace is None:
            located = _find_lease(client, name)
            if located is None:
                raise NotFound(name)
            namespace, lease = located
        else:
            lease = client.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")
    except NotFound:
        where = f"Lease {namespace}/{name}" if namespace else f"no Lease {name} in any namespace"
        return ComponentStatus(component, False, f"{where}: no {component} has run",
                               f"install the chart (helm install hetsched deploy/helm/hetsched) or start "
                               f"`hetsched {component}`; check `kubectl -n <ns> get pods`")
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    duration = float(spec.get("leaseDurationSeconds") or 15)
    renewed = spec.get("renewTime")
    age = None
    if renewed:
        with contextlib.suppress(ValueError):
            age = now - datetime.fromisoformat(str(renewed).replace("Z", "+00:00")).timestamp()
    if holder and age is not None and age <= duration:
        return ComponentStatus(component, True, f"Lease {namespace}/{name} held by {holder}, renewed {age:.1f}s ago")
    seen = f"last renewed {age:.0f}s ago" if age is not None else "never renewed"
    return ComponentStatus(component, False, f"Lease {namespace}/{name}: holder {holder or '(none)'}, {seen} "
                           f"(lease duration {duration:g}s): no active {component}",
                           f"check the {component} pods (kubectl -n <ns> logs deploy/hetsched-{component}); a "
                           "replica that cannot reach the API server backs off and retries")


def _webhook(client: KubeClient, namespace: str) -> ComponentStatus:
    path = RESOURCES["Job"].path(namespace)
    try:
        client.request("POST", path, query={"dryRun": "All"}, body=PROBE_JOB)
    except NotFound:
        return ComponentStatus("webhook", False, "the Volcano Job CRD is not installed",
                               "kubectl apply -f deploy/crds/")
    except (ApiError, Invalid) as exc:
        text = str(exc)
        if "failed calling webhook" in text or "failed to call webhook" in text:
            return ComponentStatus("webhook", False, f"registered but not answering: {text[:300]}",
                                   "check the webhook pod and its Service endpoints; with failurePolicy Fail every "
                                   "Job create fails until it answers")
        if "HetschedDoctorProbe" in text or "admission webhook" in text:
            return ComponentStatus("webhook", True, "refused an invalid Job in a dry run (the webhook answers)")
        return ComponentStatus("webhook", False, f"unexpected answer to the dry-run probe: {text[:300]}",
                               "check the webhook's logs")
    return ComponentStatus("webhook", False, "an invalid Job was accepted in a dry run: no validating webhook is "
                           "registered for Volcano Jobs",
                           "install the chart's webhook (ValidatingWebhookConfiguration hetsched) — without it bad "
                           "Jobs (accelerators only in requests, unknown policy events) reach the controller")


FAIL_OPEN = ("hetsched-pods", "hetsched-restrict")
"""hetsched's registrations that fail open (``install.manifests``)."""


def _admission(client: KubeClient) -> dict[str, str]:
    found = {}
    for name in FAIL_OPEN:
        try:
            registration = client.request(
                "GET", f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}")
        except NotFound:
            found[name] = ""
            continue
        hooks = [h for h in registration.get("webhooks") or [{}] if isinstance(h, dict)] or [{}]
        found[name] = ", ".join(str(h.get("failurePolicy") or "Fail") + (" (matchConditions)" if h.get(
            "matchConditions") else "") for h in hooks)
    return found


def kube_facts(client: KubeClient, *, lease_namespace: str | None = None, probe_namespace: str = "default",
               now: float | None = None, probe: bool = True) -> ClusterFacts:
    """List everything once; with ``probe``, also read the Leases (in ``lease_namespace``, or wherever they
    are: :func:`_find_lease`) and dry-run the webhook probe."""
    now = time.time() if now is None else now
    objects: list[AnyObject] = []
    raw: list[tuple[str, dict[str, Any]]] = []
    for kind in LISTED:
        for item in _list(client, kind):
            if kind in ("Job", "Pod"):
                meta = item.get("metadata") or {}
                raw.append((f"{kind} {meta.get('namespace', '')}/{meta.get('name', '')}",
                            {**item, "kind": kind}))
            with contextlib.suppress(Invalid):
                objects.append(from_api(kind, item))
    components = [_lease(client, lease_namespace, "hetsched-scheduler", now),
                  _lease(client, lease_namespace, "hetsched-controller", now),
                  _webhook(client, probe_namespace)] if probe else []
    admission, version = None, ""
    if probe:
        admission = _admission(client)
        with contextlib.suppress(ApiError, Invalid, NotFound):
            version = str(client.request("GET", "/version").get("gitVersion") or "")
    return ClusterFacts(objects=objects, raw=raw, components=components, now=now, admission=admission,
                        server_version=version)
