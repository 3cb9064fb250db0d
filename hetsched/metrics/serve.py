"""Serve a registry on ``/metrics``, or write it to a file.

Who calls it: every long-running process (``--metrics-address``, default ``127.0.0.1:<component port>``;
the Helm chart sets ``0.0.0.0`` so Prometheus can scrape the pod) and ``hetsched simulate --metrics FILE``.
Uses prometheus_client's own HTTP server (a daemon thread), so content negotiation (text or OpenMetrics)
and ``gzip`` are the library's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest, start_http_server

PORTS = {"scheduler": 8080, "controller": 8081, "webhook": 8082, "node-agent": 9101, "device-plugin": 9102}
"""Default metrics port per component (the Helm chart's Service and annotations use the same)."""


def parse_address(address: str, what: str = "--metrics-address") -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) → (host, port); ValueError naming the option otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{what}: expected HOST:PORT (e.g. 127.0.0.1:8080), got {address!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


class MetricsServer:
    """A running ``/metrics`` endpoint; ``port`` is the bound one (useful with port 0)."""

    def __init__(self, registry: CollectorRegistry, address: str) -> None:
        host, port = parse_address(address)
        self._server: Any
        self._server, self._thread = start_http_server(port, host, registry)
        self.host = host
        self.port: int = self._server.server_port

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def write(registry: CollectorRegistry, path: Path) -> None:
    """The registry's current exposition (Prometheus text format) to ``path``."""
    path.write_bytes(generate_latest(registry))


def leader_gauge(registry: CollectorRegistry) -> Gauge:
    """``hetsched_leader``: 1 while this replica holds its component's Lease (set by ``cli.serve``)."""
    return Gauge("hetsched_leader", "1 while this replica leads (holds the Lease)", registry=registry)
