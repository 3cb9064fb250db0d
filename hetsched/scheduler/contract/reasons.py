"""Why something could not be scheduled, as data: a closed set of reason codes with structured arguments.

Who calls it: every plugin and action that says why (``node_filter`` masks, ``job_enqueueable``,
``job_valid``, the placement explanation), and every reader of those answers — the PodGroup conditions
(``gang``), ``hetsched explain`` and the doctor (``scheduler.engine.why``), the
``hetsched_pods_unschedulable_total{reason}`` label (:func:`label`) and the simulation results
(:func:`fragments`). Readers look at codes and arguments, never at wording: the English text is rendered
here, in one place (:func:`render`), and may change without breaking any of them.

A :class:`Reason` is a hashable value (code plus named arguments), so per-node reasons can be counted
with a ``Counter``. Amounts are integers in milli-units and are formatted only when rendered.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hetsched.api.quantity import format_quantity


class ReasonCode(enum.Enum):
    """Every reason hetsched gives; the value is the stable identifier shown in JSON output."""

    # -- per node (counted over nodes, like kube-scheduler's "0/120 nodes are available: …")
    NODE_NOT_READY = "NodeNotReady"
    NODE_UNSCHEDULABLE = "NodeUnschedulable"
    NODE_SELECTOR = "NodeSelectorMismatch"
    NODE_AFFINITY = "NodeAffinityMismatch"
    UNTOLERATED_TAINT = "UntoleratedTaint"
    SCHEDULING_GATED = "SchedulingGated"
    POD_AFFINITY = "PodAffinity"
    POD_ANTI_AFFINITY = "PodAntiAffinity"
    EXISTING_ANTI_AFFINITY = "ExistingPodsAntiAffinity"
    TOPOLOGY_SPREAD = "PodTopologySpread"
    HOST_PORTS = "HostPorts"
    INSUFFICIENT = "InsufficientResource"
    TOO_MANY_PODS = "TooManyPods"
    DEVICE_TOPOLOGY = "DeviceTopology"
    CHIPS_SHORT = "HealthyChipsShort"
    LINK_FRAGMENTATION = "LinkFragmentation"
    INVALID_DEVICE_ANNOTATION = "InvalidDeviceAnnotation"
    MEMORY_WITHOUT_SHARE = "MemoryWithoutShare"
    SHARE_OUT_OF_RANGE = "ShareOutOfRange"
    CHIP_MEMORY_UNSTATED = "ChipMemoryUnstated"
    PARTITION_REQUEST = "PartitionRequestInvalid"
    """The pod's chip-partition request can never be served (``devices.partition_requests``)."""
    NOT_PARTITIONED = "ChipsNotPartitioned"
    """The node's chips are not carved in the mode the partition asks for (or no template fits the model)."""
    NO_PARTITION_ROOM = "NoPartitionRoom"
    """The node's chips are carved in the right mode, but none has room left for the template."""
    EXCLUSIVE_GPUS = "ExclusiveGPUsTaken"
    """The node's GPUs with room for the vGPU each hold one of a pod matching the same
    ``deviceshare.GPUExclusiveRules`` rule."""
    ACCELERATOR_MODEL = "AcceleratorModel"
    CANN_DRIVER = "CannDriverMismatch"
    """The pod's declared CANN (``hetsched.io/cann-version``) is not supported by the node's Ascend driver."""
    ILLEGAL_CHIP_COUNT = "IllegalChipCount"
    NODE_GROUP_REQUIRED = "NodeGroupRequired"
    NODE_GROUP_AVOIDED = "NodeGroupAvoided"
    NODE_GROUP_UNLABELLED = "NodeGroupUnlabelled"
    NODE_GROUP_NO_AFFINITY = "NodeGroupNoAffinity"
    NODE_GROUP_LIMITS_UNREADABLE = "NodeGroupLimitsUnreadable"
    NODE_GROUP_LIMIT = "NodeGroupLimit"
    ACCELERATOR_RESERVE = "AcceleratorReserve"
    """``resource-strategy-fit``'s proportional rule: CPU and memory kept for a node's idle accelerators."""
    PLUGIN_RULE = "PluginRule"
    """An out-of-tree plugin's own node rule: its name and what the nodes lack (docs/plugins.md)."""
    FITS = "Fits"
    """Not a failure: ``explain`` counts the nodes that can take a pod now under it."""

    # -- per job
    NODES_UNAVAILABLE = "NodesUnavailable"
    GANG_UNSCHEDULABLE = "GangUnschedulable"
    GANG_INCOMPLETE = "GangIncomplete"
    GANG_FAILED_PODS = "GangHasFailedPods"
    LARGER_THAN_CLUSTER = "LargerThanCluster"
    LARGER_THAN_QUEUE = "LargerThanQueueCapability"
    QUEUE_MISSING = "QueueMissing"
    RESOURCE_QUOTA = "ResourceQuotaInsufficient"
    """The job's minResources do not fit what its namespace's ResourceQuota leaves (``resourcequota``)."""
    QUEUE_FORBIDDEN = "QueueForbidden"
    """The job's namespace may not submit to its queue (``api.queue_access``)."""
    BUDGET_EXHAUSTED = "BudgetExhausted"
    """The queue's budget (``QueueUsage``, ``whenExhausted: Wait``) is used up for a resource the job asks."""
    BUDGET_SHORT = "BudgetShort"
    """A hard budget (``whenExhausted: Stop``) has less left this period than the job's pods commit (their
    requests × ``activeDeadlineSeconds``)."""
    BUDGET_IDLE = "BudgetIdle"
    """The queue's budget is used up (``whenExhausted: Idle``): the job runs only on capacity nobody asks for."""
    QUEUE_NOT_OPEN = "QueueNotOpen"
    QUEUE_NOT_LEAF = "QueueNotLeaf"
    QUEUE_AT_LIMIT = "QueueAtLimit"
    QUEUE_OVERUSED = "QueueOverused"
    QUEUE_CAPABILITY_EXCEEDED = "QueueCapabilityExceeded"
    QUEUE_REAL_CAPABILITY_EXCEEDED = "QueueRealCapabilityExceeded"
    """``capacity``: the queue's capability less what other queues' guarantees reserve."""
    CLUSTER_HEADROOM = "ClusterHeadroom"
    PIPELINED = "Pipelined"
    RESERVED = "Reserved"
    NO_HYPERNODE = "NoHyperNode"
    NO_HYPERNODE_ROOM = "NoHyperNodeRoom"
    HYPERNODE_SPLIT = "HyperNodeSplit"
    SUBGROUP_NO_ROOM = "SubGroupNoRoom"
    SET_ASIDE = "SchedulingError"
    """Handling the job raised (a bug, or input no check caught): it is set aside with back-off."""
    PLUGIN_FAILED = "PluginError"
    EXTENDER = "Extender"
    """The HTTP extender refused the job (``jobEnqueueable``), or could not be reached and is not ignorable."""
    """A plugin that guards placements raised opening or closing the session: nothing is scheduled until it works."""


Amounts = tuple[tuple[str, int, int], ...]
"""(resource, amount, limit) in milli-units, per resource a reason names."""


@dataclass(frozen=True, slots=True)
class Reason:
    """A reason code with its arguments (sorted by name; every value hashable)."""

    code: ReasonCode
    args: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, code: ReasonCode, **args: Any) -> Reason:
        """Build a reason, checking that exactly the code's arguments are given."""
        expected = SPECS[code].args
        if set(args) != set(expected):
            raise TypeError(f"reason {code.value} takes ({', '.join(expected)}), got ({', '.join(sorted(args))})")
        return cls(code, tuple(sorted(args.items())))

    def __getitem__(self, name: str) -> Any:
        for key, value in self.args:
            if key == name:
                return value
        raise KeyError(f"reason {self.code.value} has no argument {name!r}")

    def __str__(self) -> str:
        return render(self)


@dataclass(frozen=True)
class Spec:
    """How one code is rendered and labelled: its argument names, its text (a ``str.format`` template over
    the arguments, or a function of the reason) and its bounded metric label."""

    args: tuple[str, ...]
    text: str | Callable[[Reason], str]
    label: str | Callable[[Reason], str]


def _amounts(form: str) -> Callable[[tuple[str, int, int]], str]:
    def one(item: tuple[str, int, int]) -> str:
        resource, amount, limit = item
        return form.format(resource=resource, amount=format_quantity(amount, resource),
                           limit=format_quantity(max(limit, 0), resource))
    return one


def _join(reason: Reason, name: str, form: str) -> str:
    return ", ".join(map(_amounts(form), reason[name]))


def _nodes_unavailable(reason: Reason) -> str:
    parts = [f"{count} {render(node)}" for count, node in reason["nodes"]]
    return f"0/{reason['total']} nodes are available: {', '.join(parts) or 'no nodes'}"


def _chips_short(reason: Reason) -> str:
    unhealthy = reason["unhealthy"]
    return (f"{reason['resource']}: {reason['free']} free healthy chip(s) for {reason['want']}"
            + (f" ({unhealthy} unhealthy)" if unhealthy else ""))


def _first_node_label(reason: Reason) -> str:
    nodes = reason["nodes"]
    return label(nodes[0][1]) if nodes else "other"


_REJECTED = "node(s) rejected the request: "

SPECS: dict[ReasonCode, Spec] = {
    ReasonCode.NODE_NOT_READY: Spec((), "node(s) were not ready", "node not ready"),
    ReasonCode.NODE_UNSCHEDULABLE: Spec((), "node(s) were unschedulable", "node unschedulable"),
    ReasonCode.NODE_SELECTOR: Spec((), "node(s) didn't match Pod's node selector", "node selector"),
    ReasonCode.NODE_AFFINITY: Spec((), "node(s) didn't match Pod's node affinity", "node affinity"),
    ReasonCode.UNTOLERATED_TAINT: Spec(("taint",), "node(s) had untolerated taint {taint}", "taint"),
    ReasonCode.SCHEDULING_GATED: Spec(
        ("gates",), lambda r: f"the pod has scheduling gates ({', '.join(r['gates'])}); it is scheduled once they "
                              "are removed", "scheduling gates"),
    ReasonCode.POD_AFFINITY: Spec((), "node(s) didn't match pod affinity rules", "pod affinity"),
    ReasonCode.POD_ANTI_AFFINITY: Spec((), "node(s) didn't match pod anti-affinity rules", "pod anti-affinity"),
    ReasonCode.EXISTING_ANTI_AFFINITY: Spec((), "node(s) didn't satisfy existing pods anti-affinity rules",
                                            "pod anti-affinity"),
    ReasonCode.TOPOLOGY_SPREAD: Spec((), "node(s) didn't match pod topology spread constraints", "topology spread"),
    ReasonCode.HOST_PORTS: Spec((), "node(s) didn't have free ports for the requested pod ports", "host ports"),
    ReasonCode.INSUFFICIENT: Spec(("resource",), "Insufficient {resource}", lambda r: f"insufficient {r['resource']}"),
    ReasonCode.TOO_MANY_PODS: Spec((), "Too many pods", "too many pods"),
    ReasonCode.DEVICE_TOPOLOGY: Spec(
        (), "node(s) had no free chip set that meets the device topology (fragmented or unhealthy chips)",
        "device topology"),
    ReasonCode.CHIPS_SHORT: Spec(("resource", "free", "want", "unhealthy"), _chips_short, "unhealthy chips"),
    ReasonCode.LINK_FRAGMENTATION: Spec(("link", "split"), "{link} fragmentation, {split}", "device topology"),
    ReasonCode.INVALID_DEVICE_ANNOTATION: Spec(
        ("annotation", "allowed", "got"),
        lambda r: f"{_REJECTED}annotation {r['annotation']} must be one of {', '.join(r['allowed'])}, got {r['got']!r}",
        "device request rejected"),
    ReasonCode.MEMORY_WITHOUT_SHARE: Spec(
        ("memory", "share"), _REJECTED + "a memory share ({memory}) needs a share of the chip ({share})",
        "device request rejected"),
    ReasonCode.SHARE_OUT_OF_RANGE: Spec(
        ("resource", "milli"), _REJECTED + "a share of one {resource} must be 1–1000 thousandths, got {milli}",
        "device request rejected"),
    ReasonCode.CHIP_MEMORY_UNSTATED: Spec(
        ("resource", "memory"), "node(s) didn't state the memory of their {resource} chips (needed by {memory})",
        "chip memory unstated"),
    ReasonCode.PARTITION_REQUEST: Spec(("problem",), _REJECTED + "{problem}", "device request rejected"),
    ReasonCode.NOT_PARTITIONED: Spec(
        ("resource", "mode", "source"), "node(s) didn't carve their {resource} chips into {mode} partitions "
                                        "(asked by {source})", "chips not partitioned"),
    ReasonCode.NO_PARTITION_ROOM: Spec(
        ("resource", "template"), "node(s) had no {resource} chip with room for a {template} partition",
        "no partition room"),
    ReasonCode.EXCLUSIVE_GPUS: Spec(
        ("resource", "rule"), "node(s) had no {resource} chip with room that no pod of the same exclusivity rule "
                              "({rule}) shares", "exclusive GPUs taken"),
    ReasonCode.ACCELERATOR_MODEL: Spec(
        ("models",), lambda r: f"node(s) didn't have an accepted accelerator model ({'|'.join(r['models'])})",
        "accelerator model"),
    ReasonCode.CANN_DRIVER: Spec(
        ("cann",), "node(s) had an Ascend driver that CANN {cann} does not support", "CANN driver"),
    ReasonCode.ILLEGAL_CHIP_COUNT: Spec(("rule",), _REJECTED + "{rule}", "device request rejected"),
    ReasonCode.NODE_GROUP_REQUIRED: Spec(
        ("queue", "groups"), lambda r: f"node(s) not in queue {r['queue']}'s node group(s) ({', '.join(r['groups'])})",
        "node group"),
    ReasonCode.NODE_GROUP_AVOIDED: Spec(
        ("queue", "groups"), lambda r: f"node(s) in a node group queue {r['queue']} avoids ({', '.join(r['groups'])})",
        "node group"),
    ReasonCode.NODE_GROUP_UNLABELLED: Spec(
        (), "node(s) had no volcano.sh/nodegroup-name label (the queue names node groups, or nodegroup is strict)",
        "node group"),
    ReasonCode.NODE_GROUP_NO_AFFINITY: Spec(
        ("queue",), "node(s) in a node group, and queue {queue} names none (spec.affinity)", "node group"),
    ReasonCode.NODE_GROUP_LIMITS_UNREADABLE: Spec(
        ("queue",), "node(s) in a node group, and queue {queue}'s volcano.sh/nodegroup-resource-limits cannot be "
        "read", "node group"),
    ReasonCode.NODE_GROUP_LIMIT: Spec(
        ("queue",), "node(s) in a node group where queue {queue} is at its volcano.sh/nodegroup-resource-limits",
        "node group"),
    ReasonCode.ACCELERATOR_RESERVE: Spec(
        ("resource",), "node(s) keep CPU and memory in proportion to their idle {resource} for pods that use it",
        "accelerator reserve"),
    ReasonCode.PLUGIN_RULE: Spec(("plugin", "rule"), "node(s) {rule} ({plugin})", lambda r: f"plugin {r['plugin']}"),
    ReasonCode.FITS: Spec((), "fits", "fits"),
    ReasonCode.NODES_UNAVAILABLE: Spec(("total", "nodes"), _nodes_unavailable, _first_node_label),
    ReasonCode.GANG_UNSCHEDULABLE: Spec(
        ("missing", "min_member", "cause"),
        lambda r: f"{r['missing']}/{r['min_member']} tasks in gang unschedulable: {render(r['cause'])}",
        lambda r: label(r["cause"])),
    ReasonCode.GANG_INCOMPLETE: Spec(
        ("pods", "min_member"), "{pods}/{min_member} pods exist; the gang needs minMember={min_member}",
        "gang incomplete"),
    ReasonCode.GANG_FAILED_PODS: Spec(
        ("valid", "failed", "min_member"),
        "{failed} pod(s) of the gang failed: {valid} valid pod(s), the gang needs minMember={min_member} (the job's "
        "policies decide: restart the job, or a controller replaces the failed pods)", "gang has failed pods"),
    ReasonCode.LARGER_THAN_CLUSTER: Spec(
        ("amounts",), lambda r: "the gang is larger than the whole cluster: "
                                + _join(r, "amounts", "{resource} {amount} > {limit}"), "larger than cluster"),
    ReasonCode.LARGER_THAN_QUEUE: Spec(
        ("queue", "amounts"),
        lambda r: f"the gang is larger than queue {r['queue']}'s capability: "
                  + _join(r, "amounts", "{resource} (minResources {amount} > capability {limit})"),
        "queue capability"),
    ReasonCode.QUEUE_MISSING: Spec(("queue",), "queue {queue} does not exist", "queue missing"),
    ReasonCode.RESOURCE_QUOTA: Spec(
        ("quota", "amounts"), lambda r: f"resource quota {r['quota']} insufficient: "
        + _join(r, "amounts", "{resource} (used + minResources {amount} > hard {limit})"), "resource quota"),
    ReasonCode.BUDGET_EXHAUSTED: Spec(
        ("queue", "resources", "renewal"), lambda r: f"queue {r['queue']} has used its budget of "
        f"{', '.join(r['resources'])} for this period; its jobs asking for them wait until the period ends "
        f"({r['renewal']})", "budget exhausted"),
    ReasonCode.BUDGET_SHORT: Spec(
        ("queue", "resource", "budget", "commits", "left", "renewal"), lambda r: f"queue {r['queue']} has "
        f"{r['left']:g} {r['resource']} hours left this period (its running pods' commitments counted) and this "
        f"job's pods commit {r['commits']:g} (requests × activeDeadlineSeconds); " + (
            f"that is more than the whole budget ({r['budget']:g} a period): it never starts under it — shorten "
            "activeDeadlineSeconds or raise the budget" if r["commits"] > r["budget"] else
            f"it waits until what is left holds it, at the latest until the period ends ({r['renewal']})"),
        "budget short"),
    ReasonCode.BUDGET_IDLE: Spec(
        ("queue", "resources"), lambda r: f"queue {r['queue']} has used its budget of {', '.join(r['resources'])} "
        "for this period; its jobs run only on capacity no other queue is asking for", "budget used up"),
    ReasonCode.QUEUE_FORBIDDEN: Spec(
        ("namespace", "queue"), "namespace {namespace} may not submit to queue {queue} (not in its "
        "hetsched.io/namespaces annotation, nor matched by its hetsched.io/namespace-selector); ask the queue's "
        "owner, or use a queue your namespace may use",
        "queue forbidden"),
    ReasonCode.SET_ASIDE: Spec(
        ("error", "backoff"), "scheduling this job raised an error ({error}); it is set aside for {backoff:g} s "
        "and retried then, while every other job is scheduled", "scheduling error"),
    ReasonCode.PLUGIN_FAILED: Spec(
        ("plugin", "error"), "plugin {plugin} raised an error opening or closing the scheduling session ({error}); "
        "it guards every placement, so no job is scheduled or evicted until it works again (retried every cycle)",
        "plugin error"),
    ReasonCode.EXTENDER: Spec(("verb", "message"), "extender {verb}: {message}", "extender"),
    ReasonCode.QUEUE_NOT_OPEN: Spec(("queue", "state"), "queue {queue} is {state}", "queue closed"),
    ReasonCode.QUEUE_NOT_LEAF: Spec(("queue",), "queue {queue} has child queues; jobs go to leaf queues",
                                    "queue not leaf"),
    ReasonCode.QUEUE_AT_LIMIT: Spec(("queue",), "queue {queue} is at its deserved share or capability (or at what "
                                    "other queues' guarantees leave it)", "queue capability"),
    ReasonCode.QUEUE_OVERUSED: Spec(("queue",), "queue {queue} is overused (allocated ≥ capability)",
                                    "queue overused"),
    ReasonCode.QUEUE_CAPABILITY_EXCEEDED: Spec(
        ("queue", "child", "amounts"),
        lambda r: (f"queue {r['queue']}" + (f" (parent of {r['child']})" if r["child"] else "")
                   + " capability would be exceeded for "
                   + _join(r, "amounts", "{resource} (allocated + admitted + minResources = {amount} > {limit})")),
        "queue capability"),
    ReasonCode.QUEUE_REAL_CAPABILITY_EXCEEDED: Spec(
        ("queue", "child", "amounts"),
        lambda r: (f"queue {r['queue']}" + (f" (parent of {r['child']})" if r["child"] else "")
                   + " real capability (its capability, less what other queues' guarantees reserve) would be "
                   "exceeded for " + _join(r, "amounts", "{resource} (needs {amount} > {limit})")),
        "queue capability"),
    ReasonCode.CLUSTER_HEADROOM: Spec(
        ("amounts", "factor"),
        lambda r: "minResources exceed the cluster's headroom for " + _join(
            r, "amounts", "{resource} (needs {amount}, headroom {limit} = allocatable × overcommit-factor "
            + f"{r['factor']:g} − admitted)"),
        "cluster headroom"),
    ReasonCode.NO_HYPERNODE: Spec(
        ("bound",), "the job must stay within one HyperNode of {bound}, and the cluster has none",
        "network topology"),
    ReasonCode.NO_HYPERNODE_ROOM: Spec(
        ("tier", "needed", "best"), "no HyperNode of tier ≤ {tier} has room for the gang's {needed} pod(s): the best "
        "takes {best}", "network topology"),
    ReasonCode.SUBGROUP_NO_ROOM: Spec(
        ("subgroup", "tier", "needed", "best"), "sub-group {subgroup}: no HyperNode of tier ≤ {tier} has room for its "
        "{needed} pod(s): the best takes {best}", "network topology"),
    ReasonCode.HYPERNODE_SPLIT: Spec(
        ("free", "split", "domains", "tier", "needed"),
        "{free} free server(s), split {split} over {domains} tier-{tier} HyperNode(s): the gang needs {needed} in one",
        "network topology"),
    ReasonCode.PIPELINED: Spec(
        ("pods",), "pipelined: {pods} pod(s) wait for resources being released; the gang binds once they are free",
        "pipelined"),
    ReasonCode.RESERVED: Spec(
        ("pods", "missing"), "reserving room for {pods} pod(s) this cycle while {missing} more are missing "
        "(a plugin lets the gang hold resources before it can bind: sla, once the job waited past its SLA)",
        "reserved"),
}
"""Code → how it renders; every code has exactly one entry (checked by the tests)."""

RESOURCE_SHORTAGES = frozenset({ReasonCode.INSUFFICIENT, ReasonCode.TOO_MANY_PODS})


def render(reason: Reason) -> str:
    """The English text of ``reason`` — the only place wording is decided."""
    text = SPECS[reason.code].text
    return text(reason) if callable(text) else text.format(**dict(reason.args))


def label(reason: Reason) -> str:
    """A short, bounded metric label: per code, plus the resource for a shortage (resources are the
    cluster's, a bounded set); a job-level reason is labelled by the first node reason it counts."""
    value = SPECS[reason.code].label
    return value(reason) if callable(value) else value


_DETAIL = re.compile(r"\s*\([^()]*\)")


def fragments(reason: Reason) -> list[str]:
    """What blocked a job, without per-node counts or amounts (the simulation results count jobs per
    fragment): the resource shortages of a node count when there are any (nodes that fail a static
    predicate are not what blocks a job some nodes could take), else every node reason; any other reason
    is its text without parenthesised detail."""
    if reason.code is ReasonCode.GANG_UNSCHEDULABLE:
        return fragments(reason["cause"])
    if reason.code is not ReasonCode.NODES_UNAVAILABLE:
        return [_DETAIL.sub("", render(reason))]
    nodes = [node for _, node in reason["nodes"]]
    shortages = [node for node in nodes if node.code in RESOURCE_SHORTAGES]
    return [render(node) for node in shortages or nodes]


_GANG_PREFIX = re.compile(r"^\d+/\d+ tasks in gang unschedulable: ")


def without_gang_prefix(message: str) -> str:
    """A PodGroup condition's message — read back from the API server, so text — without the
    ``x/y tasks in gang unschedulable:`` that :data:`SPECS` puts before the cause (``explain`` shows a cause
    once even when the condition and its own analysis both name it)."""
    return _GANG_PREFIX.sub("", message)


def queue_state_reason(queue: str, state: str) -> Reason:
    """Why a job of a queue that is not Open waits: the queue does not exist, or is Closed/Closing."""
    if state == "NotFound":
        return Reason.of(ReasonCode.QUEUE_MISSING, queue=queue)
    return Reason.of(ReasonCode.QUEUE_NOT_OPEN, queue=queue, state=state)


def nodes_unavailable(total: int, counts: dict[Reason, int]) -> Reason:
    """``0/N nodes are available: …`` from per-reason node counts, most nodes first, then by text."""
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], render(kv[0])))
    return Reason.of(ReasonCode.NODES_UNAVAILABLE, total=total, nodes=tuple((n, r) for r, n in ordered))
