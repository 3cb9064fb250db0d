"""Cluster checks: what an operator would otherwise walk through with kubectl, one function per check.

Who calls it: ``cli.doctor`` (cluster mode, embedded or on a real API server) with :class:`ClusterFacts`.
Every check returns at least one finding — an ``ok`` one when nothing is wrong — so the report shows what
was checked. The checks, in the order they run (``CHECKS``):

- ``components-running``: the scheduler, controller and webhook are up (Leases renewed, the webhook refuses
  an invalid Job), and no pending pod names a schedulerName nobody serves;
- ``device-plugin-registered``: every node whose chips are known (inventory, Ascend device-info ConfigMap,
  or the ``accelerator`` label) advertises the chips' resource (seed 000 §4.1), and has some allocatable
  while it has healthy chips (kubelet keeps the capacity of a plugin that went away, allocatable 0);
- ``allocatable-matches-chips``: the advertised count equals the healthy physical chips (the seed's "fake
  resources": more advertised than healthy means the kubelet hands out a broken chip);
- ``chip-health``: unhealthy chips, and whether the node is tainted or still takes work;
- ``accelerator-limits``: Job templates and pods with an accelerator only in ``requests`` (seed 000 §4.2:
  the pod schedules but the container sees no device);
- ``queue-capability``: queues over their capability, Jobs whose minResources exceed their queue's
  capability (never admitted), pending jobs in Closed queues, jobs waiting for a queue that does not exist,
  no ``default`` Queue;
- ``stuck-gangs``: PodGroups Pending or Inqueue for longer than ``stuck_after`` with why and what would
  unblock them (``scheduler.engine.why``);
- ``numaaware-topology-policy``: ``numaaware`` enabled while a node's kubelet topology manager policy is
  ``none`` or unknown — the plugin is then a silent no-op there (seed 000 §4.4);
- ``cann-driver-match``: on Ascend nodes, the host's CANN toolkit and the CANN pods declare for their images
  against the node's driver, by Huawei's published pairs (``devices.cann``; the seed's first war story);
- ``admission-fail-open``: the admission checks on every pod, Node, ConfigMap and Secret write fail open —
  said, with whether the API server could narrow them; a missing ``hetsched-pods`` registration warns.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hetsched.api.accelerators import accelerator_kind
from hetsched.api.objects import AnyObject, Node, Pod, PodGroup, Queue
from hetsched.api.quantity import format_quantity, parse_quantity
from hetsched.devices.cann import CANN_ANNOTATION, DRIVER_ANNOTATION
from hetsched.devices.cann import verdict as cann_verdict
from hetsched.devices.catalog import PolicySettings
from hetsched.devices.inventory import TOPOLOGY_ANNOTATION
from hetsched.diagnose.findings import Finding, passed
from hetsched.ports import WatchEvent
from hetsched.scheduler.cache import SchedulerCache
from hetsched.scheduler.contract.chips import ChipAccounts
from hetsched.scheduler.contract.snapshot import Snapshot
from hetsched.scheduler.engine.conf import SchedulerConf
from hetsched.scheduler.engine.why import explain_job, settings_of

ACCELERATOR_LABELS = {"huawei-ascend": "ascend", "cambricon-mlu": "cambricon", "nvidia-gpu": "nvidia"}
SEED_41_FIX = ("walk the seed's table: `npu-smi info` / `cnmon` / `nvidia-smi` on the host (driver up?), the device "
               "plugin pod's logs (gRPC registration errors?), `journalctl -u kubelet` (plugin seen?), the "
               "DaemonSet Running on this node; `hetsched doctor --node` on the node runs these")


@dataclass
class ComponentStatus:
    name: str
    running: bool
    evidence: str
    fix: str = ""


@dataclass
class ClusterFacts:
    """Everything the cluster checks read."""

    objects: list[AnyObject]
    """Nodes, Pods, PodGroups, Queues, Jobs, ConfigMaps, PriorityClasses, PodDisruptionBudgets."""
    raw: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(where, manifest as submitted) of Jobs and Pods: templates are checked before validation would
    reject them, because a Job created while the webhook was down never met it."""
    components: list[ComponentStatus] = field(default_factory=list)
    conf: SchedulerConf | None = None
    now: float = 0.0
    stuck_after: float = 300.0
    final: bool = False
    """Nothing more will happen (an embedded run that ended): every waiting gang is stuck."""
    scheduler_names: tuple[str, ...] = ("hetsched", "volcano")
    admission: dict[str, str] | None = None
    """Live clusters: hetsched's registrations on every pod, Node, ConfigMap and Secret write
    (``hetsched-pods``, ``hetsched-restrict``) → each entry's failurePolicy, `` (matchConditions)`` after it
    where the API server narrows the calls, comma-separated ("" when not registered); None on the embedded
    cluster."""
    server_version: str = ""
    """The API server's ``gitVersion`` (live clusters)."""
    _snapshot: Snapshot | None = None

    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            cache = SchedulerCache(self.scheduler_names)
            if self.conf is not None:  # the labels its plugins read (GPU exclusivity rules) stay on each group
                cache.read_labels = self.conf.read_labels()
            for kind in ("PriorityClass", "Queue", "ConfigMap", "Node", "PodGroup", "Pod", "PodDisruptionBudget"):
                for obj in self.objects:
                    if obj.kind == kind:
                        cache.handle(WatchEvent("ADDED", obj))
            self._snapshot = cache.snapshot()
        return self._snapshot

    def of(self, kind: str) -> list[Any]:
        return [o for o in self.objects if o.kind == kind]

    @property
    def settings(self) -> PolicySettings:
        return settings_of(self.conf) if self.conf is not None else PolicySettings()


def components_running(facts: ClusterFacts) -> list[Finding]:
    check = "components-running"
    findings = [Finding(check, "ok" if c.running else "error", f"component/{c.name}", c.evidence,
                        "" if c.running else c.fix) for c in facts.components]
    served = set(facts.scheduler_names) | {"default-scheduler"}
    orphans: dict[str, list[str]] = {}
    for pod in facts.of("Pod"):
        assert isinstance(pod, Pod)
        if not pod.spec.nodeName and pod.status.phase in ("", "Pending") and pod.spec.schedulerName not in served:
            orphans.setdefault(pod.spec.schedulerName, []).append(f"{pod.metadata.namespace}/{pod.metadata.name}")
    for name, pods in sorted(orphans.items()):
        findings.append(Finding(
            check, "error", f"schedulerName/{name}",
            f"{len(pods)} pending pod(s) name schedulerName {name!r}, which no running scheduler serves "
            f"(served: {', '.join(sorted(facts.scheduler_names))}): {', '.join(pods[:5])}",
            f"set schedulerName to one of {', '.join(sorted(facts.scheduler_names))} (the webhook defaults "
            f"Jobs to volcano), or run hetsched with --scheduler-name {name}"))
    return findings


def device_plugin_registered(facts: ClusterFacts) -> list[Finding]:
    check = "device-plugin-registered"
    snapshot = facts.snapshot()
    findings = []
    known: set[str] = set()
    for resource, devices in snapshot.devices.items():
        for row in np.flatnonzero(devices.chips).tolist():
            name = snapshot.nodes.names[row]
            if not snapshot.nodes.exists[row]:
                continue
            known.add(name)
            node = _node(facts, name)
            if node is None:
                continue
            chips = int(devices.chips[row]).bit_count()
            healthy = int(devices.chips[row] & ~devices.unhealthy[row]).bit_count()
            if node.status.allocatable.get(resource, 0) > 0:
                continue
            if node.status.capacity.get(resource, 0) <= 0:
                findings.append(Finding(check, "error", f"Node/{name}",
                                        f"{chips} {resource} chip(s) known from the node's inventory, but the node "
                                        f"advertises no {resource} (allocatable and capacity lack it): the device "
                                        "plugin has not registered with kubelet", SEED_41_FIX))
            elif healthy:  # kubelet keeps the capacity of a plugin that went away, with nothing allocatable
                capacity = format_quantity(node.status.capacity[resource], resource)
                findings.append(Finding(check, "error", f"Node/{name}",
                                        f"{healthy} healthy {resource} chip(s) in the node's inventory, but "
                                        f"allocatable {resource} is 0 (capacity {capacity}): the device plugin "
                                        "stopped or lost its registration with kubelet", SEED_41_FIX))
    for node in facts.of("Node"):
        assert isinstance(node, Node)
        kind = ACCELERATOR_LABELS.get(node.metadata.labels.get("accelerator", ""))
        if kind is None or node.metadata.name in known:
            continue
        if not any(accelerator_kind(r) == kind and v > 0 for r, v in node.status.allocatable.items()):
            findings.append(Finding(check, "error", f"Node/{node.metadata.name}",
                                    f"labelled accelerator={node.metadata.labels['accelerator']} but advertises no "
                                    f"{kind} resource and publishes no chip inventory", SEED_41_FIX))
    return findings or [passed(check, "every node with known chips advertises them")]


def _node(facts: ClusterFacts, name: str) -> Node | None:
    for node in facts.of("Node"):
        if node.metadata.name == name:
            assert isinstance(node, Node)
            return node
    return None


def allocatable_matches_chips(facts: ClusterFacts) -> list[Finding]:
    check = "allocatable-matches-chips"
    findings = []
    checked = 0
    for table in ChipAccounts(facts.settings).tables(facts.snapshot()):
        for i, name in enumerate(table.nodes):
            physical, healthy, advertised = int(table.physical[i]), int(table.healthy[i]), int(table.advertised[i])
            if not physical or not advertised:
                continue  # no inventory (nothing to compare) or not advertised (device-plugin-registered)
            checked += 1
            if advertised > healthy:
                findings.append(Finding(
                    check, "error", f"Node/{name}",
                    f"{table.resource}: allocatable {advertised} but {healthy} healthy of {physical} physical "
                    f"chip(s): the kubelet will hand out {advertised - healthy} broken chip(s) (\"fake resources\")",
                    "the device plugin must report unhealthy chips as Unhealthy in ListAndWatch (hetsched's does); "
                    "restart or fix the vendor device plugin, then check `kubectl describe node` again"))
            elif advertised < healthy:
                findings.append(Finding(
                    check, "warning", f"Node/{name}",
                    f"{table.resource}: allocatable {advertised} but {healthy} healthy chip(s): "
                    f"{healthy - advertised} chip(s) are idle and unschedulable",
                    "a stale device-plugin registration or ASCEND_VISIBLE_DEVICES/visible-devices list too short: "
                    "restart the device plugin on the node; check its env in the DaemonSet"))
    return findings or [passed(check, f"allocatable equals healthy chips on {checked} node(s)")]


def chip_health(facts: ClusterFacts) -> list[Finding]:
    check = "chip-health"
    snapshot = facts.snapshot()
    findings = []
    for resource, devices in sorted(snapshot.devices.items()):
        for row in np.flatnonzero(devices.unhealthy & devices.chips).tolist():
            name = snapshot.nodes.names[row]
            bad = int(devices.unhealthy[row] & devices.chips[row])
            ids = [i for i in range(bad.bit_length()) if bad >> i & 1]
            total = int(devices.chips[row]).bit_count()
            node = _node(facts, name)
            tainted = node is not None and any(t.key == "hetsched.io/accelerator-unhealthy" for t in node.spec.taints)
            usable = len(ids) < total
            state = ("tainted hetsched.io/accelerator-unhealthy" if tainted else
                     "still takes work on its healthy chips" if usable else "NOT tainted although no chip is usable")
            findings.append(Finding(
                check, "error" if not usable and not tainted else "warning", f"Node/{name}",
                f"{resource}: chip(s) {', '.join(map(str, ids))} of {total} Unhealthy; node {state}",
                "read the chip's error codes (`npu-smi info -t health -i <npu>`, `cnmon info`, the XID in dmesg); "
                "reset or replace it; the node agent clears the state when the tool reports it healthy"))
    return findings or [passed(check, "no unhealthy chip")]


def _template_problems(where: str, doc: dict[str, Any]) -> list[Finding]:
    check = "accelerator-limits"
    kind = doc.get("kind", "?")
    name = (doc.get("metadata") or {}).get("name", "?")
    specs: list[tuple[str, Any]] = []
    if kind == "Job":
        for i, task in enumerate((doc.get("spec") or {}).get("tasks") or []):
            if isinstance(task, dict):
                spec = ((task.get("template") or {}).get("spec")) or {}
                specs.append((f"spec.tasks[{task.get('name', i)}].template.spec", spec))
    elif kind == "Pod":
        specs.append(("spec", doc.get("spec") or {}))
    findings = []
    for path, spec in specs:
        if not isinstance(spec, dict):
            continue
        for c, container in enumerate(spec.get("containers") or []):
            if not isinstance(container, dict):
                continue
            resources = container.get("resources") or {}
            requests = resources.get("requests") or {}
            limits = resources.get("limits") or {}
            for resource, amount in requests.items():
                if accelerator_kind(str(resource)) is None and "/" not in str(resource):
                    continue
                if resource not in limits:
                    findings.append(Finding(
                        check, "error", f"{kind}/{name}",
                        f"{where}: {path}.containers[{container.get('name', c)}].resources: {resource}: {amount} "
                        "is only in requests: the pod schedules, but the device plugin's Allocate reads limits, "
                        "so the container sees no device",
                        f"move {resource} to resources.limits (requests may stay, equal to limits)"))
                elif _quantity(limits[resource]) != _quantity(amount):
                    findings.append(Finding(
                        check, "error", f"{kind}/{name}",
                        f"{where}: {path}.containers[{container.get('name', c)}].resources: {resource} requests "
                        f"{amount} but limits {limits[resource]}", "set requests equal to limits"))
    return findings


def _quantity(value: object) -> int | None:
    try:
        return parse_quantity(str(value))
    except ValueError:
        return None


def accelerator_limits(facts: ClusterFacts) -> list[Finding]:
    check = "accelerator-limits"
    findings = [f for where, doc in facts.raw for f in _template_problems(where, doc)]
    return findings or [passed(check, f"{len(facts.raw)} Job/Pod manifest(s): accelerators are set in limits")]


def _missing_queues(facts: ClusterFacts) -> list[Finding]:
    """PodGroups that name a queue that does not exist wait forever (Volcano admits none of them); without the
    ``default`` Queue every Job that names none does."""
    check = "queue-capability"
    queues = {q.metadata.name for q in facts.of("Queue")}
    waiting: dict[str, list[str]] = {}
    for group in facts.of("PodGroup"):
        if isinstance(group, PodGroup) and group.status.phase in ("", "Pending") and \
                (group.spec.queue or "default") not in queues:
            waiting.setdefault(group.spec.queue or "default", []).append(
                f"{group.metadata.namespace}/{group.metadata.name}")
    findings = [Finding(check, "error", f"Queue/{name}",
                        f"queue {name} does not exist and {len(groups)} PodGroup(s) wait for it forever: "
                        + ", ".join(groups[:5]) + (f" and {len(groups) - 5} more" if len(groups) > 5 else ""),
                        "hetsched controller creates default and root at start (is it running?)" if name in
                        ("default", "root") else f"hetsched queue create {name}, or change the jobs' spec.queue")
                for name, groups in sorted(waiting.items())]
    if "default" not in queues and "default" not in waiting:
        findings.append(Finding(check, "warning", "Queue/default",
                                "the default Queue does not exist: a Job or PodGroup that names no queue would "
                                "wait forever", "hetsched controller creates default and root at start (is it "
                                                "running?), or hetsched queue create default"))
    return findings


def queue_capability(facts: ClusterFacts) -> list[Finding]:
    check = "queue-capability"
    snapshot = facts.snapshot()
    names = snapshot.resources.names
    findings = []
    for queue in snapshot.queues.values():
        over = [c for c, cap in enumerate(queue.capability.tolist())
                if np.isfinite(cap) and queue.allocated[c] > cap + 1e-6]
        if over:
            detail = ", ".join(f"{names[c]} {format_quantity(int(queue.allocated[c]), names[c])} > "
                               f"{format_quantity(int(queue.capability[c]), names[c])}" for c in over)
            findings.append(Finding(check, "warning", f"Queue/{queue.name}",
                                    f"allocated over capability: {detail}",
                                    "the capability was lowered under running work: reclaim returns the excess "
                                    "as jobs finish; raise the capability if that is not what you meant"))
    for group in facts.of("PodGroup"):
        assert isinstance(group, PodGroup)
        queue_info = snapshot.queues.get(group.spec.queue or "default")
        if queue_info is None or group.status.phase not in ("", "Pending"):
            continue
        columns = snapshot.resources.columns
        too_big = [(r, a, int(queue_info.capability[columns[r]])) for r, a in group.spec.minResources.items()
                   if r in columns and r != "pods" and a > queue_info.capability[columns[r]] + 1e-6]
        if too_big:
            findings.append(Finding(
                check, "error", f"PodGroup/{group.metadata.namespace}/{group.metadata.name}",
                f"minResources exceed queue {queue_info.name}'s capability, so the gang is never admitted: "
                + ", ".join(f"{r} {format_quantity(a, r)} > {format_quantity(cap, r)}" for r, a, cap in too_big),
                f"raise queue {queue_info.name}'s capability, lower minAvailable, or use a larger queue"))
    for queue in facts.of("Queue"):
        assert isinstance(queue, Queue)
        if queue.status.state in ("Closed", "Closing"):
            waiting = [g for g in facts.of("PodGroup") if isinstance(g, PodGroup)
                       and (g.spec.queue or "default") == queue.metadata.name and g.status.phase in ("Pending", "")]
            if waiting:
                findings.append(Finding(check, "warning", f"Queue/{queue.metadata.name}",
                                        f"queue is {queue.status.state} with {len(waiting)} pending PodGroup(s)",
                                        f"open it (hetsched queue open {queue.metadata.name}) or move the jobs"))
    findings += _missing_queues(facts)
    return findings or [passed(check, f"{len(snapshot.queues)} queue(s) within capability")]


def stuck_gangs(facts: ClusterFacts) -> list[Finding]:
    check = "stuck-gangs"
    snapshot = facts.snapshot()
    conf = facts.conf
    if conf is None:
        from hetsched.scheduler.defaults import default_conf

        conf = default_conf()
    findings = []
    for key, job in sorted(snapshot.jobs.items()):
        if job.phase not in ("Pending", "Inqueue") or job.ready >= job.min_member > 0:
            continue
        age = facts.now - job.created
        if age < facts.stuck_after and not facts.final:
            continue
        explanation = explain_job(snapshot, conf, key, facts.now)
        reasons = list(explanation.scheduler_says)
        for group in explanation.groups:
            top = [f"{n} node(s): {reason}" for n, reason in group.nodes[:3]]
            reasons.append(f"task {group.task} ({group.pending} pending): {'; '.join(top)}")
        findings.append(Finding(
            check, "warning", f"PodGroup/{key}",
            f"{job.phase} for {age:,.0f}s with {job.ready}/{job.min_member} pods placed: "
            + (" | ".join(reasons) or "no reason recorded yet"),
            "; ".join(explanation.unblock) or f"run `hetsched explain {key}` for the per-node reasons"))
    return findings or [passed(check, f"no gang waiting longer than {facts.stuck_after:g}s")]


def _numaaware_enabled(conf: SchedulerConf | None) -> bool:
    if conf is None:
        return False
    return any(option.name == "numaaware" and option.enabled("enablePredicate")
               for tier in conf.tiers for option in tier.plugins)


def cann_driver_match(facts: ClusterFacts) -> list[Finding]:
    """The seed's first war story (000 §2.1): CANN upgraded without the driver — ``npu-smi`` healthy, every
    container's ``aclrtSetDevice`` failing. Per Ascend node, the host's CANN against its driver; per pod
    that declares its image's CANN (``hetsched.io/cann-version``), that against its node's driver
    (``devices.cann``: the table and its sources)."""
    check = "cann-driver-match"
    findings: list[Finding] = []
    drivers: dict[str, str] = {}
    for node in facts.of("Node"):
        assert isinstance(node, Node)
        driver = node.metadata.annotations.get(DRIVER_ANNOTATION, "")
        if not driver:
            continue
        drivers[node.metadata.name] = driver
        host = node.metadata.annotations.get(CANN_ANNOTATION, "")
        if host:
            fits, why = cann_verdict(host, driver)
            if fits is False:
                findings.append(Finding(check, "error", f"Node/{node.metadata.name}", f"host toolkit: {why}",
                                        "upgrade the driver and firmware with CANN (or go back to the CANN "
                                        "the driver supports): npu-smi stays healthy while containers fail "
                                        "aclrtSetDevice"))
            elif fits is None:
                findings.append(Finding(check, "info", f"Node/{node.metadata.name}", why))
    for pod in facts.of("Pod"):
        assert isinstance(pod, Pod)
        declared = pod.metadata.annotations.get(CANN_ANNOTATION, "")
        driver = drivers.get(pod.spec.nodeName, "")
        if not declared or not driver or pod.status.phase in ("Succeeded", "Failed"):
            continue
        fits, why = cann_verdict(declared, driver)
        if fits is False:
            findings.append(Finding(
                check, "error", f"Pod/{pod.metadata.namespace}/{pod.metadata.name}",
                f"image's {why} (node {pod.spec.nodeName})",
                "it ran before the node's driver was known or changed: the scheduler now keeps it off such "
                "nodes; recreate it, or rebuild the image on the CANN this driver supports"))
        elif fits is None:
            findings.append(Finding(check, "info", f"Pod/{pod.metadata.namespace}/{pod.metadata.name}", why))
    if findings:
        return findings
    if not drivers:
        return [passed(check, "no node publishes an Ascend driver release (the node agent does, on Ascend nodes)")]
    return [passed(check, f"{len(drivers)} Ascend node(s): every declared CANN matches its driver")]


def numaaware_topology_policy(facts: ClusterFacts) -> list[Finding]:
    check = "numaaware-topology-policy"
    if not _numaaware_enabled(facts.conf):
        return [passed(check, "numaaware is not enabled in the scheduler configuration: nothing to check")]
    findings = []
    nodes = [n for n in facts.of("Node") if isinstance(n, Node) and any(
        accelerator_kind(r) is not None for r in n.status.allocatable)]
    for node in nodes:
        policy = node.metadata.annotations.get(TOPOLOGY_ANNOTATION, "")
        topology, _, cpu = policy.partition("/")
        if topology in ("", "none") or cpu not in ("static", ""):
            findings.append(Finding(
                check, "warning", f"Node/{node.metadata.name}",
                "numaaware is enabled but the node's kubelet topology manager policy is "
                + (f"{topology!r} (cpu manager {cpu or 'unknown'})" if policy else
                   f"unknown (no {TOPOLOGY_ANNOTATION} annotation from the node agent)")
                + ": the kubelet will not align CPUs and chips, so numaaware's choice is a silent no-op here",
                "set topologyManagerPolicy: single-numa-node (or best-effort/restricted) and cpuManagerPolicy: "
                "static in the kubelet configuration, restart kubelet; the node agent publishes the policy"))
    return findings or [passed(check, f"{len(nodes)} accelerator node(s) run a topology manager policy")]


def _minor(version: str) -> int | None:
    found = re.match(r"v?1\.(\d+)", version)
    return int(found.group(1)) if found else None


def admission_fail_open(facts: ClusterFacts) -> list[Finding]:
    """What the admission checks that sit on every pod, Node, ConfigMap and Secret write do when the webhook is
    down (issue 29): they fail open, and this says so — and whether the API server could narrow them."""
    check = "admission-fail-open"
    if facts.admission is None:
        return [passed(check, "embedded cluster: its own admission applies the hand-off and priority rules")]
    pods = facts.admission.get("hetsched-pods", "")
    if not pods:
        return [Finding(check, "warning", "ValidatingWebhookConfiguration/hetsched-pods",
                        "not registered: a pod's creator may write the chip hand-off and name a system "
                        "PriorityClass unchecked at admission (the scheduler and device plugin still ignore a "
                        "hand-off not stamped for its pod, and give a class its namespace may not use no weight)",
                        "install the chart's webhook (it registers hetsched-pods)")]
    minor = _minor(facts.server_version)
    version = facts.server_version or "version unknown"
    policies = "; ".join(f"{name}: {policy or 'not registered'}" for name, policy in sorted(facts.admission.items()))
    if "Fail" in pods.split(", "):  # Fail on every pod: its matchConditions were dropped (an older API server)
        return [Finding(check, "error", "ValidatingWebhookConfiguration/hetsched-pods",
                        f"fails closed on every pod create and update of the cluster ({policies}): while the webhook "
                        f"is down no pod can be created anywhere. Its matchConditions are missing — this API "
                        f"server ({version}) dropped them (they need 1.28+) or they were edited out",
                        f"reinstall with webhook.matchConditions=false (hetsched install --kube-version "
                        f"{version.lstrip('v')})")]
    if "(matchConditions)" in pods:
        return [passed(check, f"{policies}. The API server calls the hand-off check only for hand-off annotations "
                              "written by someone other than the scheduler, and /restrict only for hetsched's own "
                              "identities, so both fail closed without holding anyone else up; the PriorityClass "
                              "check stays open (the scheduler gives a class a namespace may not use no weight)",
                       "webhook")]
    if minor is not None and minor >= 28:
        return [Finding(check, "warning", "ValidatingWebhookConfiguration/hetsched-pods",
                        f"{policies}: the checks fail open — they lapse while the webhook is down — although this "
                        f"API server ({version}) could narrow them with matchConditions and fail closed",
                        f"reinstall with webhook.matchConditions=true (hetsched install --kube-version "
                        f"{version.lstrip('v')})")]
    return [passed(check, f"{policies}. Fail-open checks lapse while the webhook is down (pods and the node "
                          f"agent's writes are never held up); the scheduler and device plugin check hand-off "
                          f"provenance themselves; this API server ({version}) has no matchConditions (1.28+) to "
                          f"narrow them to what they check, so they stay open", "webhook")]


CHECKS: dict[str, Callable[[ClusterFacts], list[Finding]]] = {
    "components-running": components_running,
    "device-plugin-registered": device_plugin_registered,
    "allocatable-matches-chips": allocatable_matches_chips,
    "chip-health": chip_health,
    "accelerator-limits": accelerator_limits,
    "queue-capability": queue_capability,
    "stuck-gangs": stuck_gangs,
    "numaaware-topology-policy": numaaware_topology_policy,
    "cann-driver-match": cann_driver_match,
    "admission-fail-open": admission_fail_open,
}


def run_checks(facts: ClusterFacts, only: list[str] | None = None) -> list[Finding]:
    unknown = [name for name in only or [] if name not in CHECKS]
    if unknown:
        raise ValueError(f"--check: unknown check {', '.join(unknown)} (known: {', '.join(CHECKS)})")
    return [finding for name, check in CHECKS.items() if not only or name in only for finding in check(facts)]
