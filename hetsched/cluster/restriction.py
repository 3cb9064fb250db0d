"""What RBAC cannot say, said at admission (the webhook's ``/restrict`` path): the node agent — one
ServiceAccount for a DaemonSet on every accelerator node — may write only its *own* Node and its own node's
Ascend device-info ConfigMap; the controller may write Secrets, ConfigMaps, Services and NetworkPolicies
only when they are owned by a Volcano Job (what the job plugins make: ``controllers.jobplugins``).

Who calls it: ``cluster.webhook`` for reviews on ``/restrict`` (registered as ``hetsched-restrict`` by the
install manifests, for Node and ConfigMap writes and Secret, Service and NetworkPolicy creates and deletes);
the tests.

How the node agent's node is known (Kubernetes' NodeRestriction pattern, for a ServiceAccount rather than a
kubelet): its token is a projected ServiceAccount token bound to its pod, so the API server puts the pod's
name and uid in the request's ``userInfo.extra``; the pod (looked up by name, its uid checked) says which
node it runs on. A request that cannot be tied to a running pod of the agent's is refused.

Invariants: requests by any other identity are allowed at once, without a lookup (the webhook must never
slow the cluster's other writers down); a refusal is HTTP 403 ``Forbidden`` naming the identity, the object
and the rule; what cannot be read is refused, never allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hetsched.devices.inventory import ASCEND_NAMESPACE, ascend_info_name

NODE_AGENT = "hetsched-node-agent"
CONTROLLER = "hetsched-controller"
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
OWNER_GROUP = "batch.volcano.sh/"
JOB_OWNED = {"secrets": "Secret", "configmaps": "ConfigMap", "services": "Service",
             "networkpolicies": "NetworkPolicy"}
"""What the controller writes only for a Volcano Job (the job plugins' objects), by resource."""
CACHE = 10_000
"""Pods remembered (name, uid → node): an agent's pod never moves, so each is looked up once."""


def _map(value: Any) -> Mapping[str, Any]:
    """A field of the review that should be a mapping: itself, or empty when it is anything else."""
    return value if isinstance(value, dict) else {}


def _single(extra: Mapping[str, Any], key: str) -> str:
    values = extra.get(key)
    if isinstance(values, list) and len(values) == 1 and isinstance(values[0], str):
        return values[0]
    return ""


def _owned_by_a_job(obj: Any) -> bool:
    refs = _map(_map(obj).get("metadata")).get("ownerReferences")
    return isinstance(refs, list) and any(
        isinstance(ref, dict) and ref.get("kind") == "Job" and str(ref.get("apiVersion", "")).startswith(OWNER_GROUP)
        and ref.get("uid") for ref in refs)


@dataclass
class Restriction:
    """``namespace``: the installation's (its ServiceAccounts'); ``pod_node``: (namespace, pod name, pod
    uid) → the node the pod runs on, "" when there is no such pod (or it has another uid, or no node)."""

    namespace: str
    pod_node: Callable[[str, str, str], str]
    _nodes: dict[tuple[str, str], str] = field(default_factory=dict)

    def check(self, request: Mapping[str, Any]) -> str:
        """"" when the request may go on, else why it is refused."""
        user = _map(request.get("userInfo"))
        username = user.get("username")
        if username == f"system:serviceaccount:{self.namespace}:{NODE_AGENT}":
            return self._node_agent(request, user)
        if username == f"system:serviceaccount:{self.namespace}:{CONTROLLER}":
            return self._controller(request)
        return ""

    def _node_of(self, user: Mapping[str, Any]) -> str:
        extra = _map(user.get("extra"))
        name, uid = _single(extra, POD_NAME), _single(extra, POD_UID)
        if not name or not uid:
            return ""
        if (name, uid) not in self._nodes:
            node = self.pod_node(self.namespace, name, uid)
            if not node:
                return ""  # not remembered: the pod may yet be scheduled
            if len(self._nodes) >= CACHE:
                self._nodes.clear()
            self._nodes[(name, uid)] = node
        return self._nodes[(name, uid)]

    def _node_agent(self, request: Mapping[str, Any], user: Mapping[str, Any]) -> str:
        who = f"{NODE_AGENT} ({user.get('username')})"
        plural = _map(request.get("resource")).get("resource")
        name, namespace = str(request.get("name") or ""), str(request.get("namespace") or "")
        node = self._node_of(user)
        if not node:
            return (f"{who}: its credentials are not bound to one of its running pods (a projected "
                    "ServiceAccount token); it may write nothing")
        if plural == "nodes":
            if name != node:
                return f"{who} on node {node} may write only Node {node}, not Node {name}"
            return ""
        if plural == "configmaps":
            mine = ascend_info_name(node)
            if (namespace, name) != (ASCEND_NAMESPACE, mine):
                return (f"{who} on node {node} may write only ConfigMap {ASCEND_NAMESPACE}/{mine}, "
                        f"not {namespace}/{name}")
            return ""
        return f"{who} may not write {plural}"

    def _controller(self, request: Mapping[str, Any]) -> str:
        plural = _map(request.get("resource")).get("resource")
        kind = JOB_OWNED.get(str(plural))
        if kind is None:
            return ""
        operation = request.get("operation")
        obj = request.get("oldObject") if operation == "DELETE" else request.get("object")
        if _owned_by_a_job(obj):
            return ""
        meta = _map(_map(obj).get("metadata"))
        return (f"{CONTROLLER} may {str(operation).lower()} only {kind}s owned by a Volcano Job, not {kind} "
                f"{request.get('namespace')}/{request.get('name') or meta.get('name')}")
