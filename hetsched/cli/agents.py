"""``hetsched device-plugin`` and ``hetsched node-agent``: the per-node processes (DaemonSets).

Who calls it: ``cli.main`` registers both commands. Both stop cleanly on SIGTERM or SIGINT.

``device-plugin`` talks to kubelet only (its Registration socket); it mounts kubelet's pick until it can
read the scheduler's hand-off from the cluster, which comes with the Kubernetes adapter.
``node-agent`` needs the cluster to publish to; until the Kubernetes adapter exists it runs against an
embedded cluster holding this one node and prints what it would publish (labels, taints, the
AcceleratorHealthy condition, the chips) — ``--once`` for a single check, as an operator's dry run.
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated, Literal

import typer
from rich.console import Console

from hetsched.agents.backends import make_backend
from hetsched.agents.deviceplugin.server import DEFAULT_DIR, DevicePlugin
from hetsched.agents.node_agent import CONDITION, NodeAgent
from hetsched.agents.tools import ToolError
from hetsched.api.objects import Node
from hetsched.cluster.memory import MemoryCluster
from hetsched.devices.inventory import NODE_ANNOTATION

errors = Console(stderr=True)
Vendor = Literal["ascend", "cambricon", "nvidia", "fake"]


def _on_signals(stop: threading.Event) -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def device_plugin(
    vendor: Annotated[Vendor, typer.Option(help="which chips to serve")],
    directory: Annotated[Path, typer.Option("--dir", help="kubelet's device-plugin directory")] = DEFAULT_DIR,
    period: Annotated[float, typer.Option(help="seconds between health checks")] = 5.0,
    config: Annotated[Path | None, typer.Option(help="fake vendor: the chips file (health can be edited live)")]
    = None,
    resource: Annotated[str | None, typer.Option(help="extended resource name (default: the vendor's)")] = None,
    ascend_runtime: Annotated[bool, typer.Option(help="Ascend: hand chips over as ASCEND_VISIBLE_DEVICES for "
                                                      "the Ascend container runtime, not as device nodes")]
    = False,
) -> None:
    """Serve one vendor's chips to kubelet (Device Plugin API v1beta1) until SIGTERM."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        backend = make_backend(vendor, config=config, ascend_runtime=ascend_runtime, resource=resource)
    except (ValueError, ToolError) as exc:
        errors.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    plugin = DevicePlugin(backend, directory=directory, period=period)
    stop = threading.Event()
    _on_signals(stop)
    try:
        plugin.start()
    except Exception as exc:  # kubelet not there yet: say so; the DaemonSet restarts us
        errors.print(f"[red]error:[/red] cannot register with kubelet at {directory}: {exc}", highlight=False)
        plugin.stop()
        raise typer.Exit(1) from None
    stop.wait()
    plugin.stop()


def node_agent(
    vendor: Annotated[Vendor, typer.Option(help="which vendor tool to read")],
    node: Annotated[str, typer.Option(help="this node's name")] = socket.gethostname(),
    period: Annotated[float, typer.Option(help="seconds between checks")] = 10.0,
    once: Annotated[bool, typer.Option(help="check once, print, exit (exit 1 when the node is unusable)")] = False,
    config: Annotated[Path | None, typer.Option(help="fake vendor: the chips file")] = None,
    resource: Annotated[str | None, typer.Option(help="extended resource name (default: the vendor's)")] = None,
) -> None:
    """Check the chips every PERIOD and publish health, the AcceleratorHealthy condition, the taint and labels."""
    try:
        backend = make_backend(vendor, config=config, resource=resource)
    except (ValueError, ToolError) as exc:
        errors.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    cluster = MemoryCluster(clock=_WallClock())
    cluster.create(Node.model_validate({"metadata": {"name": node}}))
    agent = NodeAgent(cluster, node, backend)
    stop = threading.Event()
    _on_signals(stop)
    while True:
        published = agent.sync()
        condition = next(c for c in published.status.conditions if c.type == CONDITION)
        print(json.dumps({
            "node": node, "labels": published.metadata.labels,
            "taints": [t.model_dump(mode="json", exclude_defaults=True) for t in published.spec.taints],
            "condition": condition.model_dump(mode="json", exclude_none=True),
            "devices": json.loads(published.metadata.annotations.get(NODE_ANNOTATION, "null")),
        }), flush=True)
        if once:
            raise typer.Exit(0 if not published.spec.taints else 1)
        if stop.wait(period):
            return


class _WallClock:
    def now(self) -> float:
        import time

        return time.time()
