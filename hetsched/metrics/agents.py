"""Node-side metrics: the node agent's per-chip health and tool runs, the device plugin's registrations,
allocations and advertised devices, and the admission webhook's reviews.

Who calls it: ``hetsched node-agent`` (:class:`NodeAgentMetrics`, after every check), ``hetsched
device-plugin`` (:class:`DevicePluginMetrics`, hooked into the plugin's poll, register and Allocate) and
``hetsched webhook`` (:class:`WebhookMetrics`). Labels are vendor-neutral: ``vendor`` (ascend, cambricon,
nvidia), ``model``, ``chip`` (the device index), ``resource`` (the extended resource).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hetsched.metrics.scheduler import DURATION_BUCKETS


class NodeAgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.healthy = Gauge("hetsched_agent_chip_healthy", "1 when the vendor tool reports the chip healthy",
                             ["vendor", "model", "chip"], registry=r)
        self.chips = Gauge("hetsched_agent_chips", "Chips the vendor tool reports, by health",
                           ["vendor", "state"], registry=r)
        self.failures = Counter("hetsched_agent_tool_failures", "Vendor tool runs that failed or printed garbage",
                                ["vendor"], registry=r)
        self.duration = Histogram("hetsched_agent_check_duration_seconds", "One check: tool run and publishing",
                                  ["vendor"], registry=r, buckets=DURATION_BUCKETS)
        self.usable = Gauge("hetsched_agent_node_usable", "1 when the node has a healthy chip and the tool works",
                            ["vendor"], registry=r)
        self._known: set[tuple[str, str, str]] = set()

    def observe(self, backend: Any, chips: list[Any] | None, error: str | None, seconds: float) -> None:
        """One check: ``chips`` as the tool reported them (None when it failed with ``error``)."""
        vendor = backend.vendor
        self.duration.labels(vendor).observe(seconds)
        if chips is None:
            self.failures.labels(vendor).inc()
            for labels in self._known:  # the tool cannot vouch for any chip now
                self.healthy.labels(*labels).set(0)
            self.usable.labels(vendor).set(0)
            return
        current = {(vendor, chip.model, str(chip.id)): chip.healthy for chip in chips}
        for labels in self._known - current.keys():
            self.healthy.remove(*labels)
        for labels, healthy in current.items():
            self.healthy.labels(*labels).set(1 if healthy else 0)
        self._known = set(current)
        good = sum(current.values())
        self.chips.labels(vendor, "Healthy").set(good)
        self.chips.labels(vendor, "Unhealthy").set(len(current) - good)
        self.usable.labels(vendor).set(1 if good else 0)


class DevicePluginMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.devices = Gauge("hetsched_device_plugin_devices", "Devices advertised to kubelet, by health",
                             ["resource", "health"], registry=r)
        self.registrations = Counter("hetsched_device_plugin_registrations", "Registrations with kubelet",
                                     ["resource"], registry=r)
        self.updates = Counter("hetsched_device_plugin_list_and_watch_updates",
                               "Device list or health changes sent to kubelet", ["resource"], registry=r)
        self.allocations = Counter("hetsched_device_plugin_allocations",
                                   "Containers given chips, by whose choice (scheduler hand-off or kubelet's)",
                                   ["resource", "source"], registry=r)
        self.tool_failures = Counter("hetsched_device_plugin_tool_failures", "Vendor tool runs that failed",
                                     ["resource"], registry=r)

    def health(self, resource: str, health: dict[str, str], changed: bool) -> None:
        good = sum(1 for h in health.values() if h == "Healthy")
        self.devices.labels(resource, "Healthy").set(good)
        self.devices.labels(resource, "Unhealthy").set(len(health) - good)
        if changed:
            self.updates.labels(resource).inc()


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.reviews = Counter("hetsched_webhook_reviews", "Admission reviews answered",
                               ["path", "kind", "allowed"], registry=r)
        self.duration = Histogram("hetsched_webhook_review_duration_seconds", "Time to answer one review",
                                  ["path"], registry=r, buckets=DURATION_BUCKETS)
