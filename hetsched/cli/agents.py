"""``hetsched device-plugin`` and ``hetsched node-agent``: the per-node processes (DaemonSets).

Who calls it: ``cli.main`` registers both commands. Both stop cleanly on SIGTERM or SIGINT, within 2 s
(``cli.shutdown``).

``device-plugin`` talks to kubelet (its Registration socket) and, with ``--node`` and a cluster
connection (kubeconfig, in-cluster account, or ``--server`` + ``--token-file``), reads the pods bound to
its node for the scheduler's hand-off; without one it mounts kubelet's pick.
``node-agent`` publishes to the cluster through the Kubernetes adapter; ``--dry-run`` runs it against an
embedded cluster holding this one node and prints what it would publish (labels, taints, the
AcceleratorHealthy condition, the chips) — with ``--once`` a single check, as an operator's check.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from hetsched.agents.backends import make_backend
from hetsched.agents.deviceplugin import DEFAULT_DIR, VGPU_LIBRARY
from hetsched.agents.kubelet_config import DEFAULT_PATH as DEFAULT_KUBELET_CONFIG
from hetsched.agents.node_agent import CONDITION, SUPERNODE_LABEL, NodeAgent
from hetsched.agents.tables import ToolOutputError
from hetsched.agents.tools import ToolError
from hetsched.api.objects import Node, Pod, label_key_ok
from hetsched.cli.extras import need
from hetsched.cli.logs import LogFormat, LogLevel, configure
from hetsched.cli.output import say, stderr_console
from hetsched.cli.serve import HealthAddress, serve_health, serve_metrics
from hetsched.cli.shutdown import Shutdown
from hetsched.devices.inventory import NODE_ANNOTATION
from hetsched.metrics.agents import DevicePluginMetrics, NodeAgentMetrics
from hetsched.metrics.serve import PORTS
from hetsched.ports import ObjectStore

errors = stderr_console()
Vendor = Literal["ascend", "cambricon", "nvidia", "fake"]


if TYPE_CHECKING:  # imported where they run: `hetsched --help` never loads the Kubernetes client
    from hetsched.cluster.kubernetes import KubeClient


def _connect(kubeconfig: str | None, server: str | None, token_file: Path | None,
             ca_file: Path | None, insecure: bool = False) -> KubeClient:
    from hetsched.cluster.kubernetes import KubeClient

    return KubeClient.connect(kubeconfig, server, str(token_file) if token_file else None,
                              str(ca_file) if ca_file else None, insecure)


Partitioning = Annotated[str, typer.Option(
    help="Ascend: 'vnpu' — the chips are carved into vNPUs on demand (the node's inventory says so; the device "
         "plugin also serves huawei.com/npu-core); NVIDIA: 'vgpu' — the GPUs are shared as HAMi-core vGPUs (the "
         "device plugin also serves volcano.sh/vgpu-number), 'mig' — the GPUs are in MIG mode, instances made on "
         "demand (it also serves nvidia.com/mig-<profile>); a fake node says it in its chips file")]


def device_plugin(
    vendor: Annotated[Vendor, typer.Option(help="which chips to serve")],
    node: Annotated[str | None, typer.Option(envvar="NODE_NAME", help="this node (enables the hand-off)")] = None,
    kubeconfig: Annotated[str | None, typer.Option(envvar="KUBECONFIG")] = None,
    server: Annotated[str | None, typer.Option(envvar="HETSCHED_SERVER")] = None,
    token_file: Annotated[Path | None, typer.Option(envvar="HETSCHED_TOKEN_FILE")] = None,
    ca_file: Annotated[Path | None, typer.Option(envvar="HETSCHED_CA_FILE")] = None,
    insecure: Annotated[bool, typer.Option("--insecure", envvar="HETSCHED_INSECURE",
                                           help="do not verify the API server's certificate")] = False,
    directory: Annotated[Path, typer.Option("--dir", help="kubelet's device-plugin directory")] = DEFAULT_DIR,
    period: Annotated[float, typer.Option(help="seconds between health checks")] = 5.0,
    config: Annotated[Path | None, typer.Option(help="fake vendor: the chips file (health can be edited live)")]
    = None,
    resource: Annotated[str | None, typer.Option(help="extended resource name (default: the vendor's)")] = None,
    ascend_runtime: Annotated[bool, typer.Option(help="Ascend: hand chips over as ASCEND_VISIBLE_DEVICES for "
                                                      "the Ascend container runtime, not as device nodes")]
    = False,
    partitioning: Partitioning = "",
    vgpu_library: Annotated[str, typer.Option(help="vGPU: HAMi-core's library on this node, mounted with an "
                                                   "/etc/ld.so.preload into vGPU containers (absent: the caps "
                                                   "are environment only)")] = VGPU_LIBRARY,
    metrics_address: Annotated[str, typer.Option(envvar="HETSCHED_METRICS_ADDRESS",
                                                 help="serve Prometheus /metrics on HOST:PORT (off or empty: none)")]
    = f"127.0.0.1:{PORTS['device-plugin']}",
    log_level: LogLevel = "info", log_format: LogFormat = "text", health_address: HealthAddress = "off",
) -> None:
    """Serve one vendor's chips to kubelet (Device Plugin API v1beta1) until SIGTERM."""
    need("agents", "the device plugin")
    from hetsched.agents.deviceplugin.mig import MigBackend, MigState
    from hetsched.agents.deviceplugin.partitions import VnpuBackend
    from hetsched.agents.deviceplugin.server import DevicePlugin
    from hetsched.agents.deviceplugin.vgpu import VgpuBackend
    from hetsched.cluster.kubernetes import KubeCluster, from_api

    configure(log_level, log_format)
    try:
        backend = make_backend(vendor, config=config, ascend_runtime=ascend_runtime, resource=resource,
                               partitioning=partitioning)
    except (ValueError, ToolError) as exc:
        say(errors, "error", f"{exc}")
        raise typer.Exit(2) from None
    pods = None
    events = None
    if node:
        try:
            client = _connect(kubeconfig, server, token_file, ca_file, insecure)
        except Exception as exc:  # no cluster: kubelet's pick still works
            say(errors, "warning", f"no cluster connection ({exc}); mounting kubelet's pick")
        else:
            def pods() -> list[Pod]:
                data = client.request("GET", "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={node}"})
                return [p for p in (from_api("Pod", item) for item in data.get("items", [])) if isinstance(p, Pod)]

            recorder = KubeCluster(client)

            def events(pod: Pod, reason: str, message: str) -> None:  # a refused or unfollowed hand-off
                recorder.record_event(pod, reason, message, "Warning")
    metrics = DevicePluginMetrics()
    serve_metrics(metrics.registry, metrics_address)
    health = serve_health(health_address, period)
    plugins = [DevicePlugin(backend, directory=directory, period=period, pods=pods, metrics=metrics, events=events,
                            beat=health.beat)]
    mode = getattr(backend, "partitioning", "")
    if mode:  # a second resource: the partitions (vNPUs carved on demand, HAMi-core vGPUs)
        if pods is None or not node:
            say(errors, "error", f"--partitioning {mode} needs --node and a cluster connection (which partition a "
                                 "pod gets is read from its hand-off)")
            raise typer.Exit(2)
        served: list[VnpuBackend | VgpuBackend | MigBackend]
        if mode == "vnpu":  # MindCluster's npu-core slots on a 310P, HAMi's per-chip name on a 910
            try:
                served = [VnpuBackend(backend, node, backend.vnpu_tool(),  # type: ignore[attr-defined]
                                      str(getattr(backend, "device_dir", "/dev")))]
            except ToolError as exc:
                say(errors, "error", f"--partitioning vnpu: {exc}")
                raise typer.Exit(1) from None
        elif mode == "vgpu":  # the GPUs' own name counts vGPUs too (HAMi's): it replaces the whole-GPU plugin
            plugins = [DevicePlugin(VgpuBackend(backend, node, vgpu_library, resource=backend.resource),
                                    directory=directory, period=period, pods=pods, metrics=metrics, events=events,
                                    beat=health.beat)]
            served = [VgpuBackend(backend, node, vgpu_library)]
        else:  # one resource per MIG profile of the GPUs' model, over one shared state
            state = MigState(backend, node, backend.mig_tool())  # type: ignore[attr-defined]
            try:
                state.refresh()
            except (ToolError, ToolOutputError) as exc:
                say(errors, "error", f"--partitioning mig: {exc}")
                raise typer.Exit(1) from None
            assert state.geometry is not None
            served = [MigBackend(state, profile, primary=i == 0) for i, profile in enumerate(state.geometry.profiles)]
            served.append(MigBackend(state, None))  # Volcano's vGPUs in MIG mode: each its own instance
        plugins += [DevicePlugin(each, directory=directory, period=period, pods=pods, metrics=metrics, events=events)
                    for each in served]
    shutdown = Shutdown()
    try:
        for plugin in plugins:
            plugin.start()
    except Exception as exc:  # kubelet not there yet: say so; the DaemonSet restarts us
        say(errors, "error", f"cannot register with kubelet at {directory}: {exc}")
        for plugin in plugins:
            plugin.stop(timeout=shutdown.remaining() / len(plugins))
        raise typer.Exit(1) from None
    health.beat()
    shutdown.wait()
    health.stopping()
    for plugin in plugins:  # /metrics is a daemon thread: it ends with the process
        plugin.stop(timeout=shutdown.remaining() / len(plugins))
    shutdown.exit(0)


def node_agent(
    vendor: Annotated[Vendor, typer.Option(help="which vendor tool to read")],
    node: Annotated[str, typer.Option(envvar="NODE_NAME", help="this node's name")] = socket.gethostname(),
    dry_run: Annotated[bool, typer.Option(help="publish to an embedded one-node cluster and print, not to "
                                               "the cluster")] = False,
    kubeconfig: Annotated[str | None, typer.Option(envvar="KUBECONFIG")] = None,
    server: Annotated[str | None, typer.Option(envvar="HETSCHED_SERVER")] = None,
    token_file: Annotated[Path | None, typer.Option(envvar="HETSCHED_TOKEN_FILE")] = None,
    ca_file: Annotated[Path | None, typer.Option(envvar="HETSCHED_CA_FILE")] = None,
    insecure: Annotated[bool, typer.Option("--insecure", envvar="HETSCHED_INSECURE",
                                           help="do not verify the API server's certificate")] = False,
    period: Annotated[float, typer.Option(help="seconds between checks")] = 10.0,
    once: Annotated[bool, typer.Option(help="check once, print, exit (exit 1 when the node is unusable)")] = False,
    config: Annotated[Path | None, typer.Option(help="fake vendor: the chips file")] = None,
    resource: Annotated[str | None, typer.Option(help="extended resource name (default: the vendor's)")] = None,
    partitioning: Partitioning = "",
    kubelet_config: Annotated[Path, typer.Option(help="the kubelet's configuration (its topology manager "
                                                      "policy is published for hetsched doctor)")]
    = DEFAULT_KUBELET_CONFIG,
    metrics_address: Annotated[str, typer.Option(envvar="HETSCHED_METRICS_ADDRESS",
                                                 help="serve Prometheus /metrics on HOST:PORT (off or empty: none)")]
    = f"127.0.0.1:{PORTS['node-agent']}",
    supernode_label: Annotated[str, typer.Option(envvar="HETSCHED_SUPERNODE_LABEL",
                                                 help="node label for the supernode the hardware reports (Ascend "
                                                      "A3), read by HyperNode discovery; empty: none")]
    = SUPERNODE_LABEL,
    log_level: LogLevel = "info", log_format: LogFormat = "text", health_address: HealthAddress = "off",
) -> None:
    """Check the chips every PERIOD and publish health, the AcceleratorHealthy condition, the taint and labels."""
    from hetsched.cluster.kubernetes import KubeCluster, WallClock
    from hetsched.cluster.memory import MemoryCluster

    configure(log_level, log_format)
    if supernode_label and not label_key_ok(supernode_label):
        say(errors, "error", f"--supernode-label: {supernode_label[:80]!r} is not a label key (prefix/name, "
                             "name ≤ 63 characters of letters, digits, '-', '_', '.')")
        raise typer.Exit(2)
    try:
        backend = make_backend(vendor, config=config, resource=resource, partitioning=partitioning)
    except (ValueError, ToolError) as exc:
        say(errors, "error", f"{exc}")
        raise typer.Exit(2) from None
    store: ObjectStore
    if dry_run:
        memory = MemoryCluster(clock=WallClock())
        memory.create(Node.model_validate({"metadata": {"name": node}}))
        store = memory
    else:
        try:
            store = KubeCluster(_connect(kubeconfig, server, token_file, ca_file, insecure))
        except Exception as exc:
            say(errors, "error", f"cannot connect to the cluster: {exc} (use --dry-run to check the "
                         f"node without one)")
            raise typer.Exit(2) from None
    agent = NodeAgent(store, node, backend, kubelet_config=kubelet_config, supernode_label=supernode_label)
    metrics = NodeAgentMetrics()
    health = None
    if not once and not dry_run:
        serve_metrics(metrics.registry, metrics_address)
        health = serve_health(health_address, period)
    shutdown = Shutdown()
    while True:
        if health is not None:
            health.beat()  # the loop came round (/healthz), whether or not this check reaches the API server
        try:
            started = time.perf_counter()
            published = agent.sync()
            metrics.observe(backend, agent.last_chips, agent.last_error or None, time.perf_counter() - started)
        except Exception as exc:  # the API server away: say so, try again next period
            say(errors, "warning", f"{exc}")
            if once:
                raise typer.Exit(1) from None
            if shutdown.wait(period):  # SIGTERM while waiting to retry: a clean stop like any other
                shutdown.exit(0)
            continue
        condition = next(c for c in published.status.conditions if c.type == CONDITION)
        print(json.dumps({
            "node": node, "labels": published.metadata.labels,
            "taints": [t.model_dump(mode="json", exclude_defaults=True) for t in published.spec.taints],
            "condition": condition.model_dump(mode="json", exclude_none=True),
            "devices": json.loads(published.metadata.annotations.get(NODE_ANNOTATION, "null")),
        }), flush=True)
        if once:
            raise typer.Exit(0 if not published.spec.taints else 1)
        if shutdown.wait(period):
            shutdown.exit(0)
