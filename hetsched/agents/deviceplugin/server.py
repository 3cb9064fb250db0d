"""``hetsched device-plugin``: serve one vendor's chips to kubelet through the Device Plugin API v1beta1.

Who calls it: the ``hetsched device-plugin`` command (a DaemonSet on each accelerator node) and the tests
(against a fake kubelet on a temporary socket).

What it does:
- serves ``DevicePlugin`` on ``<dir>/hetsched-<vendor>.sock`` (created 0600) and registers it with
  kubelet's ``Registration`` service on ``<dir>/kubelet.sock``; when kubelet restarts (its socket is
  recreated, and it removes plugin sockets) the plugin serves again and re-registers;
- polls the backend every ``period`` seconds and streams a new device list on ``ListAndWatch`` whenever
  a chip's health changes. If the vendor tool is missing, fails or prints garbage, every known chip is
  reported Unhealthy — never a crash loop, never a silently empty list;
- ``GetPreferredAllocation`` prefers the chips the scheduler chose: when the hand-off is readable (``pods``:
  the pods bound to this node, through the cluster ports), those of the first pod by bind order that
  kubelet has not admitted yet, asking for as many chips of this resource (``_handoff``), if kubelet offers
  them all (they are free in its own accounting); otherwise the device family's topology policy
  (``devices``) picks a legal set (an HCCS ring, an MLU-Link group, NVLink peers) among those offered;
- ``Allocate`` refuses device ids it does not own (INVALID_ARGUMENT) and mounts exactly the ids kubelet
  allocated — never others: kubelet's accounting of which chips each admitted pod holds is the one that
  keeps containers apart, so no annotation (forged, copied, stale) can put another pod's chip into a
  container. A hand-off is only a preference, and only a trusted one counts
  (``devices.inventory.trusted_allocation``: stamped for that pod's uid and node, as many chips as it
  asks). The response carries the vendor's env, device nodes and mounts (``agents.backends``);
- ``PreStartContainer`` has nothing to do.

Device ids: NVIDIA GPUs by UUID (as NVIDIA's plugin); others ``<resource type>-<id>`` (``Ascend910-3``,
as Huawei's plugin names them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from hetsched.agents.backends import Backend, ContainerDevices
from hetsched.agents.chips import InventoryGuard, ToolChip
from hetsched.agents.deviceplugin import DEFAULT_DIR, api_pb2, api_pb2_grpc
from hetsched.agents.deviceplugin.partitions import PartitionRefused
from hetsched.agents.tables import ToolOutputError
from hetsched.agents.tools import ToolError
from hetsched.api.objects import Pod
from hetsched.devices.catalog import PolicySettings, policy_for
from hetsched.devices.inventory import (
    PREDICATE_TIME,
    chips_asked,
    handoff_problem,
    pod_allocation,
    trusted_allocation,
)
from hetsched.devices.partition_requests import read_request, whole_milli
from hetsched.devices.policy import MAX_CHIPS
from hetsched.metrics.agents import DevicePluginMetrics

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
log = logging.getLogger("hetsched.device-plugin")


class DevicePlugin(api_pb2_grpc.DevicePluginServicer):
    def __init__(self, backend: Backend, *, directory: Path = DEFAULT_DIR, period: float = 5.0,
                 pods: Callable[[], list[Pod]] | None = None, metrics: DevicePluginMetrics | None = None,
                 events: Callable[[Pod, str, str], None] | None = None,
                 beat: Callable[[], None] | None = None) -> None:
        self.backend = backend
        self.beat = beat
        """Called after every health poll (the process's /healthz: its polling came round lately)."""
        self.metrics = metrics
        self.directory = directory
        self.period = period
        self.pods = pods
        self.socket = directory / f"hetsched-{backend.vendor}.sock"
        self._chips: dict[str, ToolChip] = {}
        self._health: dict[str, str] = {}
        self._version = 0
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._server: Any = None
        self._served: set[str] = set()
        """Pod uids whose hand-off chips were already mounted."""
        self.events = events
        """Records a Warning Event (pod, reason, message) where a hand-off is not followed; None: log only."""
        self._told: set[tuple[str, str]] = set()
        """(pod uid, reason) already told in an Event: once per pod and reason."""
        self._threads: list[threading.Thread] = []
        self.registrations = 0
        self.last_error = ""
        self.guard = InventoryGuard()

    # ------------------------------------------------------------------------------------- health

    def device_id(self, chip: ToolChip) -> str:
        if self.backend.vendor == "nvidia" and chip.uuid:
            return chip.uuid
        return f"{self.backend.resource.rsplit('/', 1)[-1]}-{chip.id}"

    def poll(self) -> bool:
        """Read the backend once; True when the device list or a health changed (streams are woken)."""
        try:
            chips = self.guard.check(self.backend.chips(), self.backend.resource)
            self.last_error = ""
            found = {self.device_id(c): c for c in chips}
            health = {key: "Healthy" if chip.healthy else "Unhealthy" for key, chip in found.items()}
        except Exception as exc:  # whatever the tool or a parser does, health never freezes
            message = str(exc) if isinstance(exc, ToolError | ToolOutputError) else \
                f"{self.backend.resource}: reading the chips failed ({type(exc).__name__}: {exc})"
            if message != self.last_error:
                log.error("%s: reporting every chip Unhealthy", message)
            self.last_error = message
            found = dict(self._chips)
            health = dict.fromkeys(found, "Unhealthy")
            if self.metrics is not None:
                self.metrics.tool_failures.labels(self.backend.resource).inc()
        with self._changed:
            changed = health != self._health or found.keys() != self._chips.keys()
            if self.metrics is not None:
                self.metrics.health(self.backend.resource, health, changed)
            if not changed:
                return False
            self._chips, self._health = found, health
            self._version += 1
            self._changed.notify_all()
            return True

    def _poll_loop(self) -> None:
        while not self._stopping.wait(self.period):
            self.poll()
            self._reconcile()
            if self.beat is not None:
                self.beat()

    def _reconcile(self) -> None:
        """Partitions whose pods are gone are destroyed (``VnpuBackend.reconcile``); a failure is logged and
        tried again at the next poll."""
        reconcile = getattr(self.backend, "reconcile", None)
        if reconcile is None or self.pods is None:
            return
        try:
            destroyed = reconcile(self.pods())
        except Exception as exc:
            log.warning("%s: partitions not reconciled this round: %s", self.backend.resource, exc)
            return
        if destroyed:
            log.info("%s: destroyed partition(s) %s: their pods are gone", self.backend.resource, destroyed)

    # ------------------------------------------------------------------------------------- gRPC

    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def _response(self) -> Any:
        devices = []
        for key in sorted(self._health, key=lambda k: self._chips[k].id):
            chip = self._chips[key]
            topology = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=chip.numa)]) if chip.numa >= 0 else None
            devices.append(api_pb2.Device(ID=key, health=self._health[key], topology=topology))
        return api_pb2.ListAndWatchResponse(devices=devices)

    def ListAndWatch(self, request: Any, context: Any) -> Iterator[Any]:
        seen = -1
        while not self._stopping.is_set() and context.is_active():
            with self._changed:
                if self._version == seen:
                    self._changed.wait(timeout=0.5)
                if self._version == seen:
                    continue
                seen = self._version
                response = self._response()
            yield response

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        responses = []
        for wanted in request.container_requests:
            available = [k for k in wanted.available_deviceIDs if k in self._chips]
            must = [k for k in wanted.must_include_deviceIDs if k in self._chips]
            size = wanted.allocation_size
            responses.append(api_pb2.ContainerPreferredAllocationResponse(
                deviceIDs=self._preferred(available, must, size)))
        return api_pb2.PreferredAllocationResponse(container_responses=responses)

    def _preferred(self, available: list[str], must: list[str], size: int) -> list[str]:
        """The scheduler's chips for the pod being admitted when kubelet offers them all; else a legal chip set
        of ``size`` from the topology policy, keeping ``must``; else the first ones."""
        handed = self._handoff(size, consume=False)
        if handed and not must and set(handed) <= set(available):
            return handed
        by_id = {self._chips[k].id: k for k in available}
        if not must and by_id and max(by_id) < MAX_CHIPS:
            policy = policy_for(self.backend.topology, max(len(self._chips), max(by_id) + 1), PolicySettings())
            free = 0
            for chip in by_id:
                free |= 1 << chip
            with contextlib.suppress(ValueError, KeyError, IndexError):
                mask = policy.choose(free, size)
                if mask:
                    return [by_id[i] for i in sorted(by_id) if mask >> i & 1]
        rest = [k for k in available if k not in must]
        return (must + rest)[:size]

    def Allocate(self, request: Any, context: Any) -> Any:
        responses = []
        for wanted in request.container_requests:
            ids = list(wanted.devices_ids)
            problem = self._refused(ids)
            if problem:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{self.backend.resource}: {problem}")
            admit = getattr(self.backend, "admit", None)
            if admit is not None:  # partitions (agents.deviceplugin.partitions): the admitted pod's own
                found = self._partitions(admit, len(ids), context)
                responses.append(api_pb2.ContainerAllocateResponse(
                    envs=found.envs, devices=[api_pb2.DeviceSpec(container_path=c, host_path=h, permissions=p)
                                              for c, h, p in found.devices]))
                continue
            admitting = self._admitting(len(ids))  # the pod kubelet is admitting: served now, whichever ids it got
            handed = admitting[1] if admitting is not None else None
            followed = handed is not None and set(handed) == set(ids)
            if admitting is not None and handed and not followed:
                self._tell(admitting[0], "HandOffNotFollowed",
                           f"kubelet allocated {', '.join(ids)} of {self.backend.resource} where the scheduler chose "
                           f"{', '.join(handed)} (not all free in kubelet's accounting): kubelet's chips are mounted")
            if self.metrics is not None:
                self.metrics.allocations.labels(self.backend.resource, "scheduler" if followed else "kubelet").inc()
            found = self.backend.container_devices([self._chips[k] for k in ids])  # kubelet's, never others
            responses.append(api_pb2.ContainerAllocateResponse(
                envs=found.envs,
                devices=[api_pb2.DeviceSpec(container_path=c, host_path=h, permissions=p) for c, h, p in found.devices],
                mounts=[api_pb2.Mount(container_path=c, host_path=h, read_only=r) for c, h, r in found.mounts]))
        return api_pb2.AllocateResponse(container_responses=responses)

    def _partitions(self, admit: Callable[[list[Pod], int, set[str]], tuple[Pod, ContainerDevices]], slots: int,
                    context: Any) -> ContainerDevices:
        """The partitions of the pod kubelet is admitting (``VnpuBackend.admit``); the allocation is refused
        (FAILED_PRECONDITION, naming why) when no pod's trusted hand-off says which."""
        listing = self.pods
        if listing is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{self.backend.resource}: no cluster connection: "
                                                               "which partitions the pod gets is unknown")
            raise AssertionError("unreachable: abort raises")
        try:
            pod, found = admit(listing(), slots, self._served)
        except PartitionRefused as exc:
            log.warning("%s: %s", self.backend.resource, exc)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{self.backend.resource}: {str(exc)[:400]}")
        except Exception as exc:  # the cluster unreachable, a tool failing: refused, never a guess
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{self.backend.resource}: {type(exc).__name__}: "
                                                               f"{str(exc)[:300]}")
        self._served.add(pod.metadata.uid)
        if self.metrics is not None:
            self.metrics.allocations.labels(self.backend.resource, "scheduler").inc()
        return found

    def _refused(self, ids: list[str]) -> str:
        """Why kubelet's request cannot be served ("" when it can): no ids, an empty or repeated id, an id that
        is not this plugin's, or a chip that is Unhealthy now. Short (gRPC metadata is small): ids are
        counted, only the first few named."""
        def few(keys: list[str]) -> str:
            shown = ", ".join(k[:64] for k in keys[:5])
            return shown + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")

        if not ids:
            return "no device ids requested"
        if any(not k for k in ids):
            return "an empty device id was requested"
        repeated = sorted({k for k in ids if ids.count(k) > 1}) if len(set(ids)) != len(ids) else []
        if repeated:
            return f"device id(s) requested twice: {few(repeated)}"
        unknown = [k for k in ids if k not in self._chips]
        if unknown:
            return f"{len(unknown)} device id(s) are not this plugin's: {few(unknown)}"
        sick = [k for k in ids if self._health.get(k) != "Healthy"]
        if sick:
            return f"{len(sick)} device(s) are Unhealthy now: {few(sick)}"
        return ""

    def _handoff(self, count: int, consume: bool = True) -> list[str] | None:
        admitting = self._admitting(count, consume)
        return admitting[1] if admitting is not None else None

    def _tell(self, pod: Pod, reason: str, message: str) -> None:
        """Log, and a Warning Event on the pod once per pod and reason (an Event never fails an allocation)."""
        log.warning("pod %s/%s: %s", pod.metadata.namespace, pod.metadata.name, message)
        told = (pod.metadata.uid, reason)
        if self.events is None or told in self._told:
            return
        self._told.add(told)
        try:
            self.events(pod, reason, message)
        except Exception as exc:
            log.warning("could not record Event %s on pod %s: %s", reason, pod.metadata.name, exc)

    def _admitting(self, count: int, consume: bool = True) -> tuple[Pod, list[str] | None] | None:
        """The chips the scheduler chose for the pod kubelet is admitting — the first by bind order
        (``predicate-time``, then creation) of the pods on this node that kubelet has not admitted yet (no
        start time, no container status) and this plugin has not served, whose trusted hand-off names
        ``count`` chips of this resource. None: no such pod, or its chips are not all ours and healthy.
        ``consume``: count that pod as served.

        Why bind order: kubelet asks for a pod's devices while admitting it, one pod at a time, in the order
        the pods reach it, and the scheduler binds each node's pods one after the other, stamping that order
        (``cluster.kubernetes.KubeCluster.bind_all``)."""
        if self.pods is None:
            return None
        try:
            pods = self.pods()
        except Exception as exc:  # the cluster is unreachable: kubelet's pick is better than no container
            log.warning("hand-off unavailable (%s): using kubelet's choice", exc)
            return None
        present = {p.metadata.uid for p in pods}
        self._served &= present  # forget pods that are gone
        self._told = {told for told in self._told if told[0] in present}
        candidates = []
        resource = self.backend.resource
        for pod in pods:
            admitted = pod.status.startTime is not None or bool(pod.status.containerStatuses)
            if admitted or pod.status.phase != "Pending" or pod.metadata.uid in self._served:
                continue
            annotations = pod.metadata.annotations
            if resource in pod_allocation(annotations):  # forged, copied, stale, squatting: said, never followed
                asked = chips_asked(pod.spec.requests, resource)  # a fractional pod's hand-off names its one chip
                request = read_request(pod.spec.requests, annotations, pod.metadata.labels)
                if request.whole or request.counted:  # whole chips under another name (npu-core: 8, gpu-number)
                    asked = -(-whole_milli(pod.spec.requests, resource, request) // 1000)
                problem = handoff_problem(annotations, pod.metadata.uid, pod.spec.nodeName, {resource: asked})
                if problem:
                    self._tell(pod, "HandOffRefused", f"{problem}; ignored: kubelet's chips are mounted")
            trusted = trusted_allocation(annotations, pod.metadata.uid, pod.spec.nodeName, {resource: count})
            chips = trusted.get(resource)
            if chips and len(chips) == count:
                stamp = annotations.get(PREDICATE_TIME, "")
                order = int(stamp) if stamp.isdigit() else 1 << 62
                candidates.append((order, pod.metadata.creationTimestamp or 0.0, pod.metadata.name, pod, chips))
        for _, _, _, pod, chips in sorted(candidates, key=lambda c: c[:3]):
            by_id = {c.id: k for k, c in self._chips.items()}
            keys = [by_id.get(c) for c in chips]
            if consume:
                self._served.add(pod.metadata.uid)
            if any(k is None or self._health.get(k) != "Healthy" for k in keys):
                self._tell(pod, "HandOffUnhealthy", f"the scheduler's chips {chips} of {resource} are not all "
                                                    "healthy here: kubelet's chips are mounted")
                return pod, None
            return pod, [k for k in keys if k is not None]
        return None

    def PreStartContainer(self, request: Any, context: Any) -> Any:
        return api_pb2.PreStartContainerResponse()

    # ------------------------------------------------------------------------------------- lifecycle

    def serve(self) -> None:
        """Start serving on the socket (0600) and register with kubelet."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        api_pb2_grpc.add_DevicePluginServicer_to_server(self, server)  # type: ignore[no-untyped-call]
        old = os.umask(0o177)  # the socket file is created 0600: only root (kubelet) may connect
        try:
            server.add_insecure_port(f"unix://{self.socket}")
            server.start()
        finally:
            os.umask(old)
        self.socket.chmod(0o600)
        self._server = server
        self.register()

    def register(self) -> None:
        kubelet = self.directory / KUBELET_SOCKET
        with grpc.insecure_channel(f"unix://{kubelet}") as channel:
            stub = api_pb2_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            stub.Register(api_pb2.RegisterRequest(
                version=API_VERSION, endpoint=self.socket.name, resource_name=self.backend.resource,
                options=api_pb2.DevicePluginOptions(pre_start_required=False,
                                                    get_preferred_allocation_available=True)), timeout=5)
        self.registrations += 1
        if self.metrics is not None:
            self.metrics.registrations.labels(self.backend.resource).inc()
        log.info("registered %s with kubelet (%s)", self.backend.resource, self.socket)

    def _kubelet_identity(self) -> tuple[int, int] | None:
        try:
            stat = (self.directory / KUBELET_SOCKET).stat()
        except FileNotFoundError:
            return None
        return stat.st_ino, stat.st_mtime_ns

    def _watch_loop(self) -> None:
        """Serve and register again when kubelet restarts (new kubelet socket, or ours removed)."""
        known = self._kubelet_identity()
        while not self._stopping.wait(min(self.period, 0.2)):
            current = self._kubelet_identity()
            if current is None:
                continue
            if current != known or not self.socket.exists():
                try:
                    if not self.socket.exists():
                        self._stop_server()
                        self.serve()
                    else:
                        self.register()
                    known = current
                except grpc.RpcError as exc:  # kubelet not answering yet: try again next round
                    log.warning("re-registration failed: %s", exc.details() if hasattr(exc, "details") else exc)

    def start(self) -> None:
        """Poll once, serve, register, and start the health and kubelet-watch threads."""
        self.poll()
        self.serve()
        for target in (self._poll_loop, self._watch_loop):
            thread = threading.Thread(target=target, daemon=True, name=f"device-plugin-{target.__name__}")
            thread.start()
            self._threads.append(thread)

    def _stop_server(self, grace: float = 0.5) -> None:
        if self._server is not None:
            self._server.stop(grace=grace).wait(grace + 0.5)
            self._server = None

    def stop(self, timeout: float = 1.0) -> None:
        """Stop serving within ``timeout`` seconds shared by every step: ListAndWatch streams end (they
        see ``_stopping``), calls under way get half of it to finish, the threads are joined with what is
        left, and the socket is removed so kubelet stops dialling it."""
        deadline = time.monotonic() + timeout
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()
        self._stop_server(grace=timeout / 2)
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()


    def wait(self) -> None:
        """Block until :meth:`stop` (the command's SIGTERM/SIGINT handler calls it)."""
        self._stopping.wait()
