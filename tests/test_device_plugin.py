"""The kubelet device plugin end to end over real gRPC: a fake kubelet Registration server on a temporary
unix socket; the plugin registers, streams ListAndWatch, answers Allocate with the scheduler's chips,
refuses ids it does not own, reports a health flip within one period, and registers again after a kubelet
restart. Plus each vendor backend: the tools run as real processes (fake npu-smi/cnmon on PATH printing
the fixtures), NVML through a thin fake of the pynvml calls used."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from hetsched.agents.backends.fake import FakeBackend
from hetsched.agents.chips import InventoryGuard
from hetsched.agents.deviceplugin import api_pb2, api_pb2_grpc
from hetsched.agents.deviceplugin.server import DevicePlugin
from hetsched.api.objects import Pod
from hetsched.metrics.agents import DevicePluginMetrics
from tests.builders import pod

PERIOD = 0.2


class FakeKubelet(api_pb2_grpc.RegistrationServicer):  # type: ignore[misc]
    def __init__(self, directory: Path) -> None:
        self.requests: list[Any] = []
        self.registered = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{directory / 'kubelet.sock'}")
        self.server.start()

    def Register(self, request: Any, context: Any) -> Any:
        self.requests.append(request)
        self.registered.set()
        return api_pb2.Empty()

    def stop(self) -> None:
        self.server.stop(grace=0).wait()


def write_chips(path: Path, health: dict[int, str] | None = None) -> None:
    """The fake tool's chips file, replaced whole (a poll never reads it half written)."""
    chips = [{"id": i, "health": (health or {}).get(i, "OK")} for i in range(4)]
    partial = path.with_name(path.name + ".new")
    partial.write_text(json.dumps({"resource": "hetsched.io/fake", "model": "FakeChip", "chips": chips}))
    os.replace(partial, path)


class CountingBackend(FakeBackend):
    """The fake tool, counting how often the plugin read it."""

    reads = 0

    def chips(self) -> Any:
        self.reads += 1
        return super().chips()


class Deadlines:
    """A gRPC stub whose every call carries a deadline (``seconds``; a stream's whole life): a plugin that
    stops answering fails the test with DEADLINE_EXCEEDED, never hangs it."""

    def __init__(self, stub: Any, seconds: float = 60.0) -> None:
        self._stub, self._seconds = stub, seconds

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)

        def call(request: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", self._seconds)
            return method(request, **kwargs)

        return call


@contextmanager
def serving(backend: Any, prefix: str) -> Iterator[SimpleNamespace]:
    """``backend`` served by a real gRPC device plugin registered with a :class:`FakeKubelet`, its pods read from
    ``bound`` (append the pods kubelet would admit); torn down after."""
    directory = Path(os.environ.get("TMPDIR", "/tmp")) / f"{prefix}-{os.getpid()}-{time.monotonic_ns()}"
    directory.mkdir()
    kubelet = FakeKubelet(directory)
    bound: list[Pod] = []
    served = DevicePlugin(backend, directory=directory, period=0.2, pods=lambda: list(bound))
    served.start()
    channel = grpc.insecure_channel(f"unix://{served.socket}")
    try:
        yield SimpleNamespace(kubelet=kubelet, plugin=served, bound=bound, stub=plugin_stub(channel))
    finally:
        channel.close()
        served.stop()
        kubelet.stop()
        for leftover in directory.iterdir():
            leftover.unlink()
        directory.rmdir()


def plugin_stub(channel: Any) -> Any:
    return Deadlines(api_pb2_grpc.DevicePluginStub(channel))  # type: ignore[no-untyped-call]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[SimpleNamespace]:
    directory = Path(os.environ.get("TMPDIR", "/tmp")) / f"dp-{os.getpid()}-{time.monotonic_ns()}"  # short path
    directory.mkdir()
    config = tmp_path / "chips.yaml"
    write_chips(config)
    kubelet = FakeKubelet(directory)
    bound: list[Pod] = []
    told: list[tuple[str, str, str]] = []
    metrics = DevicePluginMetrics()
    backend = CountingBackend(config)
    plugin = DevicePlugin(backend, directory=directory, period=PERIOD, pods=lambda: list(bound), metrics=metrics,
                          events=lambda pod, reason, message: told.append((pod.metadata.name, reason, message)))
    plugin.start()
    channel = grpc.insecure_channel(f"unix://{plugin.socket}")
    yield SimpleNamespace(directory=directory, config=config, kubelet=kubelet, plugin=plugin, bound=bound,
                          stub=plugin_stub(channel), metrics=metrics, backend=backend, told=told)
    channel.close()
    plugin.stop()
    kubelet.stop()
    for leftover in directory.iterdir():
        leftover.unlink()
    directory.rmdir()


def test_registers_with_kubelet_on_a_private_socket(world: SimpleNamespace) -> None:
    assert world.kubelet.registered.wait(5)
    request = world.kubelet.requests[0]
    assert (request.version, request.endpoint, request.resource_name) == (
        "v1beta1", "hetsched-fake.sock", "hetsched.io/fake")
    assert request.options.get_preferred_allocation_available
    assert stat.S_IMODE(world.plugin.socket.stat().st_mode) == 0o600
    options = world.stub.GetDevicePluginOptions(api_pb2.Empty())
    assert options.get_preferred_allocation_available and not options.pre_start_required


def test_a_health_flip_reaches_list_and_watch_within_one_period(world: SimpleNamespace) -> None:
    """The new list is streamed by the first poll that reads the changed tool output — the poll under way
    when it changed, or the next one, a period later — counted in polls, not timed (the delay is printed)."""
    stream = world.stub.ListAndWatch(api_pb2.Empty())
    first = next(stream)
    assert [(d.ID, d.health) for d in first.devices] == [(f"fake-{i}", "Healthy") for i in range(4)]
    flipped, reads = time.monotonic(), world.backend.reads
    write_chips(world.config, {2: "Critical"})
    update = next(stream)
    delay, polls = time.monotonic() - flipped, world.backend.reads - reads
    assert {d.ID: d.health for d in update.devices}["fake-2"] == "Unhealthy"
    assert polls <= 2, polls
    print(f"health change → ListAndWatch update: {delay * 1000:.0f} ms (period {PERIOD * 1000:.0f} ms)")
    write_chips(world.config)
    assert {d.ID: d.health for d in next(stream).devices}["fake-2"] == "Healthy"
    stream.cancel()


def test_a_failing_tool_reports_every_chip_unhealthy_not_an_empty_list(world: SimpleNamespace) -> None:
    stream = world.stub.ListAndWatch(api_pb2.Empty())
    next(stream)
    world.config.write_text("chips: [{id: zero}]")  # garbage from the "tool"
    update = next(stream)
    assert [d.health for d in update.devices] == ["Unhealthy"] * 4
    assert "fake device config" in world.plugin.last_error
    sample = world.metrics.registry.get_sample_value
    fake = {"resource": "hetsched.io/fake"}
    assert sample("hetsched_device_plugin_devices", {**fake, "health": "Unhealthy"}) == 4
    assert sample("hetsched_device_plugin_devices", {**fake, "health": "Healthy"}) == 0
    assert (sample("hetsched_device_plugin_tool_failures_total", fake) or 0) >= 1
    assert sample("hetsched_device_plugin_registrations_total", fake) == 1
    stream.cancel()


NODE = "npu-node-0"
"""The node the plugin under test serves (the pods it reads are bound there)."""


def bound_pod(name: str, uid: str, chips: list[int], created: float, bound_at: int | None,
              started: bool = False, stamp: str | None = None, asks: int | None = None) -> Pod:
    """A pod on this node as the scheduler bound it: its chips (it asks for as many unless ``asks``), the
    provenance stamp (its uid and this node, unless ``stamp`` says otherwise), and its place in the bind
    order."""
    annotations = {"hetsched.io/allocation": json.dumps({"hetsched.io/fake": chips}),
                   "hetsched.io/allocation-for": stamp if stamp is not None else f"{uid}/{NODE}"}
    if bound_at is not None:
        annotations["predicate-time"] = str(bound_at)
    made = pod(name, annotations=annotations, limits={"hetsched.io/fake": len(chips) if asks is None else asks})
    status = made.status.model_copy(update={"startTime": 5.0, "phase": "Running"}) if started else made.status
    return made.model_copy(update={"metadata": made.metadata.model_copy(update={"uid": uid, "creationTimestamp":
                                                                                created}), "status": status,
                                   "spec": made.spec.model_copy(update={"nodeName": NODE})})


def preferred(world: SimpleNamespace, available: list[str], size: int) -> list[str]:
    request = api_pb2.PreferredAllocationRequest(container_requests=[api_pb2.ContainerPreferredAllocationRequest(
        available_deviceIDs=available, allocation_size=size)])
    return list(world.stub.GetPreferredAllocation(request).container_responses[0].deviceIDs)


def allocate(world: SimpleNamespace, ids: list[str]) -> dict[str, str]:
    request = api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids)])
    return dict(world.stub.Allocate(request).container_responses[0].envs)


ALL = ["fake-0", "fake-1", "fake-2", "fake-3"]


def test_kubelet_is_steered_to_the_schedulers_chips_and_only_its_ids_are_mounted(world: SimpleNamespace) -> None:
    """Kubelet asks which chips to prefer for the pod it admits — the first by bind order of those it has not
    admitted: the scheduler's chips for that pod, when kubelet offers them. Allocate mounts exactly the ids
    kubelet allocated; a pod kubelet admitted before (this plugin restarted since) is never served again."""
    world.bound.extend([bound_pod("train-1", "u1", [0, 2], created=10.0, bound_at=2_000),
                        bound_pod("train-0", "u0", [1, 3], created=20.0, bound_at=1_000),  # bound first
                        bound_pod("running", "u2", [1, 3], created=1.0, bound_at=500, started=True)])
    assert preferred(world, ALL, 2) == ["fake-1", "fake-3"]
    assert allocate(world, ["fake-1", "fake-3"]) == {"FAKE_VISIBLE_DEVICES": "1,3"}
    assert preferred(world, ["fake-0", "fake-2"], 2) == ["fake-0", "fake-2"]
    assert allocate(world, ["fake-0", "fake-2"]) == {"FAKE_VISIBLE_DEVICES": "0,2"}
    assert allocate(world, ["fake-0", "fake-1"]) == {"FAKE_VISIBLE_DEVICES": "0,1"}  # no hand-off left: kubelet's
    assert world.told == []  # every hand-off followed, none refused: nothing to tell
    sample = world.metrics.registry.get_sample_value
    name = "hetsched_device_plugin_allocations_total"
    assert sample(name, {"resource": "hetsched.io/fake", "source": "scheduler"}) == 2
    assert sample(name, {"resource": "hetsched.io/fake", "source": "kubelet"}) == 1


def test_a_forged_or_squatting_hand_off_never_gets_another_pods_chips(world: SimpleNamespace) -> None:
    """Issue 29: a tenant pod whose annotations name chips 0 and 1 (held by a running pod of another team)
    while kubelet allocated 2 and 3 gets 2 and 3 — kubelet's ids, never the annotation's. Hand-offs that
    are not the scheduler's for that very pod are not even a preference: a copied one (another pod's uid), one
    without the stamp, and a squatter naming 4 chips for a 2-chip request."""
    world.bound.extend([
        bound_pod("copied", "u-tenant", [0, 1], created=1.0, bound_at=1, stamp="u-victim/" + NODE),
        bound_pod("unstamped", "u-other", [0, 1], created=1.0, bound_at=2, stamp=""),
        bound_pod("squatter", "u-squat", [0, 1, 2, 3], created=1.0, bound_at=3, asks=2)])
    assert allocate(world, ["fake-2", "fake-3"]) == {"FAKE_VISIBLE_DEVICES": "2,3"}
    assert set(preferred(world, ["fake-2", "fake-3"], 2)) == {"fake-2", "fake-3"}  # the policy's, from those offered
    # the scheduler's own hand-off for a pod is preferred only where kubelet offers every chip of it
    world.bound.append(bound_pod("legit", "u-legit", [0, 1], created=2.0, bound_at=4))
    assert set(preferred(world, ["fake-1", "fake-2", "fake-3"], 2)) <= {"fake-1", "fake-2", "fake-3"}
    assert allocate(world, ["fake-2", "fake-3"]) == {"FAKE_VISIBLE_DEVICES": "2,3"}
    with pytest.raises(grpc.RpcError) as info:  # and ids that are not this plugin's are refused
        allocate(world, ["fake-0", "Ascend910-9"])
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "Ascend910-9" in str(info.value.details())
    # each is told on the pod in a Warning Event, once: why its hand-off was refused, or not followed
    told = {(name, reason): message for name, reason, message in world.told}
    assert len(told) == len(world.told) and set(told) == {
        ("copied", "HandOffRefused"), ("unstamped", "HandOffRefused"), ("squatter", "HandOffRefused"),
        ("legit", "HandOffNotFollowed")}, world.told
    assert "names 'u-victim/npu-node-0', not this pod on this node (u-tenant/npu-node-0): copied or stale" \
        in told[("copied", "HandOffRefused")]
    assert "carries no provenance stamp (hetsched.io/allocation-for)" in told[("unstamped", "HandOffRefused")]
    assert "names 4 chip id(s) of hetsched.io/fake (4 distinct) where the pod asks for 2" \
        in told[("squatter", "HandOffRefused")]
    assert "kubelet allocated fake-2, fake-3 of hetsched.io/fake where the scheduler chose fake-0, fake-1" \
        in told[("legit", "HandOffNotFollowed")]


def test_preferred_allocation_and_pre_start(world: SimpleNamespace) -> None:
    request = api_pb2.PreferredAllocationRequest(container_requests=[api_pb2.ContainerPreferredAllocationRequest(
        available_deviceIDs=["fake-1", "fake-2", "fake-3"], allocation_size=2)])
    ids = list(world.stub.GetPreferredAllocation(request).container_responses[0].deviceIDs)
    assert len(ids) == 2 and set(ids) <= {"fake-1", "fake-2", "fake-3"}
    world.stub.PreStartContainer(api_pb2.PreStartContainerRequest(devices_ids=ids))


def test_kubelet_restart_leads_to_registering_again(world: SimpleNamespace) -> None:
    assert world.kubelet.registered.wait(5)
    world.kubelet.stop()
    for name in ("kubelet.sock", "hetsched-fake.sock"):  # a restarting kubelet removes the plugin sockets
        (world.directory / name).unlink(missing_ok=True)
    restarted = time.monotonic()
    world.kubelet = FakeKubelet(world.directory)
    assert world.kubelet.registered.wait(5)
    print(f"kubelet restart → registered again: {(time.monotonic() - restarted) * 1000:.0f} ms")
    deadline = time.monotonic() + 2
    while world.plugin.registrations < 2 and time.monotonic() < deadline:  # the Register call returns after
        time.sleep(0.01)
    assert world.plugin.registrations == 2 and world.plugin.socket.exists()
    channel = grpc.insecure_channel(f"unix://{world.plugin.socket}")
    stub = plugin_stub(channel)
    assert len(next(stub.ListAndWatch(api_pb2.Empty())).devices) == 4
    channel.close()


def test_the_device_plugin_command_registers_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    directory = Path(os.environ.get("TMPDIR", "/tmp")) / f"dpc-{os.getpid()}-{time.monotonic_ns()}"
    directory.mkdir()
    config = tmp_path / "chips.yaml"
    write_chips(config)
    kubelet = FakeKubelet(directory)
    log = tmp_path / "plugin.log"
    with log.open("w") as output:
        process = subprocess.Popen([sys.executable, "-m", "hetsched.cli.main", "device-plugin", "--vendor", "fake",
                                    "--config", str(config), "--dir", str(directory), "--period", "0.2",
                                    "--metrics-address", "127.0.0.1:0"],
                                   stdout=output, stderr=subprocess.STDOUT)
    try:
        assert kubelet.registered.wait(20), log.read_text()
        assert kubelet.requests[0].resource_name == "hetsched.io/fake"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert not (directory / "hetsched-fake.sock").exists()  # its socket is gone with it
    finally:
        if process.poll() is None:
            process.kill()
        kubelet.stop()
        for leftover in directory.iterdir():
            leftover.unlink()
        directory.rmdir()


def test_the_device_plugin_command_refuses_bad_input(tmp_path: Path) -> None:
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "device-plugin", "--vendor", "fake"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 2 and "--vendor fake needs --config FILE" in run.stderr


class ExplodingBackend(CountingBackend):
    """A tool or parser that fails in a way nobody planned for (not a ToolError)."""

    explode = False

    def chips(self) -> Any:
        if self.explode:
            raise IndexError("list index out of range")
        return super().chips()


def test_any_exception_in_a_poll_marks_every_chip_unhealthy_and_polling_goes_on(tmp_path: Path) -> None:
    config = tmp_path / "chips.yaml"
    write_chips(config)
    backend = ExplodingBackend(config)
    plugin = DevicePlugin(backend, directory=tmp_path, period=PERIOD)
    plugin.poll()
    assert set(plugin._health.values()) == {"Healthy"}
    backend.explode = True
    plugin.poll()  # no exception escapes: the poll thread would die and the last health stay forever
    assert set(plugin._health.values()) == {"Unhealthy"} and len(plugin._health) == 4
    assert "IndexError" in plugin.last_error
    backend.explode = False
    plugin.poll()
    assert set(plugin._health.values()) == {"Healthy"}


def test_allocate_refuses_duplicate_empty_unknown_and_unhealthy_ids_shortly(world: SimpleNamespace) -> None:
    def allocate(ids: list[str]) -> str:
        request = api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids)])
        with pytest.raises(grpc.RpcError) as info:
            world.stub.Allocate(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        return str(info.value.details())

    assert "requested twice: fake-1" in allocate(["fake-1", "fake-1"])
    assert "an empty device id" in allocate(["fake-0", ""])
    assert "no device ids" in allocate([])
    many = allocate([f"unknown-{i}" for i in range(10_000)])  # gRPC's metadata limit would refuse a long list
    assert "10000 device id(s) are not this plugin's" in many and len(many) < 600
    write_chips(world.config, {3: "Critical"})
    world.plugin.poll()
    assert "1 device(s) are Unhealthy now: fake-3" in allocate(["fake-2", "fake-3"])


def test_fewer_chips_than_before_is_an_error_not_a_shrink_until_it_holds(tmp_path: Path) -> None:
    """A table cut short (3 chips where there were 4) makes every chip Unhealthy, with the reason; a count
    that holds for InventoryGuard.CONFIRM reads in a row is the new inventory (a chip really removed)."""
    config = tmp_path / "chips.yaml"
    write_chips(config)
    plugin = DevicePlugin(CountingBackend(config), directory=tmp_path, period=PERIOD)
    plugin.poll()
    assert len(plugin._health) == 4
    three = [{"id": i, "health": "OK"} for i in range(3)]
    config.write_text(json.dumps({"resource": "hetsched.io/fake", "model": "FakeChip", "chips": three}))
    for _ in range(InventoryGuard.CONFIRM - 1):
        plugin.poll()
        assert plugin._health == dict.fromkeys((f"fake-{i}" for i in range(4)), "Unhealthy")
        assert "3 chip(s) ([0, 1, 2]) where there were 4" in plugin.last_error
    plugin.poll()
    assert plugin._health == dict.fromkeys((f"fake-{i}" for i in range(3)), "Healthy")


def test_a_fractional_pods_stamped_hand_off_is_not_told_as_refused(world: SimpleNamespace,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod sharing one chip (``hetsched.io/<kind>-milli``) asks for none of the chip resource itself, and its
    stamped hand-off names its one chip: that is the scheduler's own, never a ``HandOffRefused``."""
    from hetsched.devices import inventory

    monkeypatch.setattr(inventory, "SHARE_OF", {"hetsched.io/fake": "hetsched.io/fake-milli"})
    sharing = bound_pod("sharing", "u-share", [2], created=1.0, bound_at=1, asks=0)
    sharing = sharing.model_copy(update={"spec": sharing.spec.model_copy(update={"containers": [
        c.model_copy(update={"resources": c.resources.model_copy(update={
            "limits": {"hetsched.io/fake-milli": 500}, "requests": {"hetsched.io/fake-milli": 500}})})
        for c in sharing.spec.containers]})})
    assert sharing.spec.requests.get("hetsched.io/fake-milli", 0) > 0 and not sharing.spec.requests.get(
        "hetsched.io/fake")
    world.bound.append(sharing)
    allocate(world, ["fake-2"])  # kubelet followed the scheduler's chip
    assert world.told == []
