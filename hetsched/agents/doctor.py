"""``hetsched doctor --node``: the seed's node-side checklist (000 §4.1, §4.2, §4.4) as checks.

Who calls it: ``cli.doctor`` on a node (a debug pod or SSH), with :class:`NodeFacts`. Checks:

- ``driver-tool``: the vendor tool is there and answers (``npu-smi info``, ``cnmon``, NVML), with every chip
  healthy; garbage or a missing tool is an error naming the tool;
- ``device-nodes``: the device files a container will be given exist (``/dev/davinciN`` and Ascend's
  management devices, ``/dev/cambricon_devN``, ``/dev/nvidiaN``) — when they do not, pods schedule and
  the container sees no chip;
- ``device-plugin-registered``: kubelet's device-plugin socket exists, a plugin socket is there, and
  kubelet's checkpoint lists the vendor's resource (kubelet writes it when a plugin registers);
- ``allocatable-matches-chips``: with the node's object from the API, its allocatable equals the healthy
  chips the tool reports;
- ``numaaware-topology-policy``: the kubelet configuration's topology manager and CPU manager policies
  (``none`` makes the scheduler's ``numaaware`` placement a no-op on this node).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from hetsched.agents.backends import Backend
from hetsched.agents.chips import ToolChip
from hetsched.agents.kubelet_config import read_policies
from hetsched.agents.tables import ToolOutputError
from hetsched.agents.tools import ToolError
from hetsched.api.objects import Node
from hetsched.devices.partition_requests import advertised as partition_advertised
from hetsched.diagnose.findings import Finding, Severity, passed

CHECKPOINT = "kubelet_internal_checkpoint"


@dataclass
class NodeFacts:
    backends: list[Backend]
    """One per vendor present (or asked for); empty when no vendor tool was found."""
    plugin_dir: Path = Path("/var/lib/kubelet/device-plugins")
    kubelet_config: Path = Path("/var/lib/kubelet/config.yaml")
    dev_root: Path = Path("/")
    """Prefix for device files (tests point it at a folder)."""
    node: Node | None = None
    """The node's object from the API server, when reachable."""
    numaaware: bool | None = None
    """Whether the scheduler configuration enables numaaware (None: not known)."""
    chips: dict[str, list[ToolChip]] = field(default_factory=dict)


def driver_tool(facts: NodeFacts) -> list[Finding]:
    check = "driver-tool"
    if not facts.backends:
        return [Finding(check, "error", "node", "no vendor tool found: npu-smi, cnmon and NVML are all absent",
                        "install the driver (and CANN's npu-smi for Ascend) on the host; in a debug pod, mount "
                        "the host's driver and tools, or pass --vendor")]
    findings = []
    for backend in facts.backends:
        try:
            chips = backend.chips()
        except (ToolError, ToolOutputError) as exc:
            findings.append(Finding(check, "error", f"vendor/{backend.vendor}", str(exc),
                                    "check the driver is loaded (`lsmod`, dmesg) and the tool runs by hand; for "
                                    "Ascend set ASCEND_HOME and PATH in the device plugin's DaemonSet env, not only "
                                    "in the host's shell profile (seed 000 §4.1)"))
            continue
        facts.chips[backend.vendor] = chips
        bad = [c for c in chips if not c.healthy]
        if bad:
            findings.append(Finding(check, "warning", f"vendor/{backend.vendor}",
                                    f"{len(chips)} chip(s), unhealthy: " + ", ".join(
                                        f"{c.id} ({c.level}{': ' + c.reason if c.reason else ''})" for c in bad),
                                    "read the chip's error codes (`npu-smi info -t health -i <npu>`, `cnmon info`, "
                                    "XIDs in dmesg) and reset or replace it"))
        else:
            findings.append(passed(check, f"{len(chips)} {chips[0].model if chips else ''} chip(s), all healthy",
                                   f"vendor/{backend.vendor}"))
    return findings


def device_nodes(facts: NodeFacts) -> list[Finding]:
    check = "device-nodes"
    findings = []
    for backend in facts.backends:
        chips = facts.chips.get(backend.vendor)
        if not chips:
            continue
        wanted = [host for _, host, _ in backend.container_devices(chips).devices]
        missing = [p for p in wanted if not (facts.dev_root / p.lstrip("/")).exists()]
        if missing:
            findings.append(Finding(check, "error", f"vendor/{backend.vendor}",
                                    f"device file(s) missing: {', '.join(missing)}",
                                    "the driver did not create them (reload it) or this debug pod does not mount "
                                    "/dev; containers given these chips would see no device"))
        elif wanted:
            findings.append(passed(check, f"{len(wanted)} device file(s) present", f"vendor/{backend.vendor}"))
    return findings or [passed(check, "no device files to check", "node")]


def _registered(plugin_dir: Path) -> set[str] | None:
    try:
        data = json.loads((plugin_dir / CHECKPOINT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    devices = (data.get("Data") or {}).get("RegisteredDevices") if isinstance(data, dict) else None
    return set(devices) if isinstance(devices, dict) else None


def device_plugin_registered(facts: NodeFacts) -> list[Finding]:
    check = "device-plugin-registered"
    kubelet = facts.plugin_dir / "kubelet.sock"
    if not kubelet.exists():
        return [Finding(check, "error", "node", f"{kubelet} does not exist",
                        "kubelet is not running or uses another root dir (--root-dir); check `systemctl status "
                        "kubelet` and `journalctl -u kubelet -n 200`")]
    sockets = sorted(p.name for p in facts.plugin_dir.glob("*.sock") if p.name != "kubelet.sock")
    registered = _registered(facts.plugin_dir)
    findings = []
    for backend in facts.backends:
        if registered is not None and backend.resource not in registered:
            findings.append(Finding(check, "error", f"vendor/{backend.vendor}",
                                    f"kubelet's checkpoint lists {', '.join(sorted(registered)) or 'no resource'}, not "
                                    f"{backend.resource}; plugin sockets: {', '.join(sockets) or 'none'}",
                                    "the device plugin is not registered: check its pod is Running on this node and "
                                    "its logs for registration errors (seed 000 §4.1 steps 2–4)"))
        elif not sockets:
            findings.append(Finding(check, "error", f"vendor/{backend.vendor}",
                                    f"no device plugin socket in {facts.plugin_dir}",
                                    "start the device plugin DaemonSet on this node"))
        else:
            findings.append(passed(check, f"{backend.resource} registered (sockets: {', '.join(sockets)})",
                                   f"vendor/{backend.vendor}"))
    return findings or [passed(check, f"kubelet socket present; plugin sockets: {', '.join(sockets) or 'none'}",
                               "node")]


def allocatable_matches_chips(facts: NodeFacts) -> list[Finding]:
    check = "allocatable-matches-chips"
    if facts.node is None:
        return [Finding(check, "info", "node", "skipped: the node's object was not read (no API access or no "
                        "--node-name)", "run with a kubeconfig and --node-name, or use cluster mode")]
    findings = []
    for backend in facts.backends:
        chips = facts.chips.get(backend.vendor)
        if chips is None:
            continue
        healthy = sum(1 for c in chips if c.healthy)
        advertised = facts.node.status.allocatable.get(backend.resource, 0) // 1000
        mode = getattr(backend, "partitioning", "")
        if mode and chips:  # a vGPU node counts its GPUs' own name in vGPUs (HAMi's): back to chips
            advertised //= max(partition_advertised(mode, chips[0].model, 0).get(backend.resource, 1), 1)
        obj = f"Node/{facts.node.metadata.name}"
        if advertised > healthy:
            findings.append(Finding(check, "error", obj,
                                    f"{backend.resource}: allocatable {advertised}, the tool reports {healthy} healthy "
                                    f"of {len(chips)}: the kubelet will hand out broken chips",
                                    "restart the device plugin; it must mark unhealthy chips in ListAndWatch"))
        elif advertised < healthy:
            findings.append(Finding(check, "warning", obj,
                                    f"{backend.resource}: allocatable {advertised}, the tool reports {healthy} healthy",
                                    "the device plugin is not registered or reports a stale list: restart it"))
        else:
            findings.append(passed(check, f"{backend.resource}: allocatable {advertised} = healthy chips", obj))
    return findings or [passed(check, "no chips to compare", "node")]


def numaaware_topology_policy(facts: NodeFacts) -> list[Finding]:
    check = "numaaware-topology-policy"
    try:
        policies = read_policies(facts.kubelet_config)
    except ValueError as exc:
        return [Finding(check, "warning", "node", str(exc), "fix the kubelet configuration file")]
    if policies is None:
        return [Finding(check, "info", "node", f"{facts.kubelet_config} not found: the policies are not known",
                        "pass --kubelet-config with the kubelet's --config file")]
    topology, cpu = policies
    if topology in ("single-numa-node", "restricted", "best-effort") and cpu == "static":
        return [passed(check, f"topologyManagerPolicy {topology}, cpuManagerPolicy {cpu}", "node")]
    severity: Severity = "warning" if facts.numaaware is not False else "info"
    return [Finding(check, severity, "node",
                    f"topologyManagerPolicy {topology}, cpuManagerPolicy {cpu}: the kubelet does not align CPUs and "
                    "chips, so the scheduler's numaaware placement is a silent no-op on this node",
                    "set topologyManagerPolicy: single-numa-node and cpuManagerPolicy: static in the kubelet "
                    "configuration and restart kubelet (drain first: the CPU manager state file must be reset)")]


NODE_CHECKS = {
    "driver-tool": driver_tool,
    "device-nodes": device_nodes,
    "device-plugin-registered": device_plugin_registered,
    "allocatable-matches-chips": allocatable_matches_chips,
    "numaaware-topology-policy": numaaware_topology_policy,
}


def run_node_checks(facts: NodeFacts, only: list[str] | None = None) -> list[Finding]:
    unknown = [name for name in only or [] if name not in NODE_CHECKS]
    if unknown:
        raise ValueError(f"--check: unknown node check {', '.join(unknown)} (known: {', '.join(NODE_CHECKS)})")
    # driver-tool runs first even when not asked for: the others read the chips it found
    findings = driver_tool(facts)
    if only and "driver-tool" not in only:
        findings = []
    for name, check in NODE_CHECKS.items():
        if name != "driver-tool" and (not only or name in only):
            findings += check(facts)
    return findings
