"""A fake accelerator for tests, demos, the simulator and the real-node tests: chips listed in a YAML file
that is read again on every poll, so flipping a chip's health in the file is a health change the agent sees.

File::

    resource: example.com/fake      # the extended resource (default hetsched.io/fake)
    model: FakeChip
    like: none                      # hand chips to containers as this vendor's plugin does: ascend,
                                    # cambricon, nvidia, or none (FAKE_VISIBLE_DEVICES only)
    chips:
    - {id: 0, health: OK}
    - {id: 1, health: Critical, memoryMiB: 16384}
    superPod: 3                     # optional: the supernode the server reports, as an Ascend A3 does
    driverVersion: 24.1.0           # optional: the driver and host CANN releases the node agent publishes
    cannVersion: 8.0.RC1
    partitioning: vnpu              # optional, with like: ascend: the chips are carved into vNPUs on demand;
                                    # vgpu, with like: nvidia: the GPUs are shared as HAMi-core vGPUs;
                                    # mig, with like: nvidia: the GPUs are in MIG mode, instances made on demand
    vnpuOutput: ok                  # ok | truncated | garbage: how the emulated npu-smi lists vNPUs
    migOutput: ok                   # ok | garbage: how the emulated NVML lists MIG instances

With ``like: ascend`` or ``cambricon``, containers get real device files: the backend makes them in
``dev/`` beside the file (character devices with /dev/null's numbers — reading gives nothing, writing
discards — named as the vendor's driver names them: ``davinci3``, ``davinci_manager``, ``cambricon_dev2`` …),
and ``container_devices`` hands them over under ``/dev`` with the vendor's environment, so a container
sees exactly its chips. The node agent labels and shapes the node as that vendor's (``huawei-ascend``,
``ascend910-8``).

With ``partitioning: vnpu`` the backend also emulates ``npu-smi``'s vNPU commands (:class:`FakeNpuSmi`: the
same text the real tool prints, state in ``vnpus.json`` beside the file, device files ``dev/vdavinci<id>``),
so the device plugin's vNPU path (``agents.deviceplugin.partitions``) runs unchanged on a fake node; the
emulation refuses what the chip could not hold, as the driver does, and ``vnpuOutput`` makes it print
truncated or garbled listings. With ``partitioning: mig`` it emulates NVML's MIG calls the same way
(``fake_nvml``: instances in ``migs.json``; ``migOutput: garbage`` for a broken listing).

Who calls it: ``agents.backends.make_backend("fake", config=FILE)``. A missing or unreadable file is a
``ToolError``; a file that does not follow the format is a ``ToolOutputError`` naming the field (the
device plugin then reports every chip Unhealthy, never an empty list); device files that cannot be made
(not root) are a ``ToolError``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hetsched.agents.backends import ascend, cambricon, fake_state
from hetsched.agents.backends.base import ContainerDevices
from hetsched.agents.backends.fake_nvml import FakeNvml
from hetsched.agents.chips import Level, ToolChip
from hetsched.agents.mig import MigTool
from hetsched.agents.tables import ToolOutputError
from hetsched.agents.tools import ToolError
from hetsched.agents.vnpu import STRIDE, VnpuTool, id_range
from hetsched.api.validation import first_problem
from hetsched.api.yamlsafe import YamlLimitError, read_text, safe_load
from hetsched.devices.catalog import default_topology
from hetsched.devices.partitions import geometry_for

MAX_BYTES = 1 << 20
LABELS = {"ascend": "huawei-ascend", "cambricon": "cambricon-mlu", "nvidia": "nvidia-gpu", "none": "fake-accelerator"}


class _Chip(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    id: int = Field(ge=0, le=63)
    health: Level = "OK"
    memoryMiB: int = Field(default=16384, ge=0)
    numa: int = -1


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    resource: str = "hetsched.io/fake"
    model: str = "FakeChip"
    like: Literal["ascend", "cambricon", "nvidia", "none"] = "none"
    chips: list[_Chip] = Field(min_length=1, max_length=64)
    driverVersion: str = Field("", max_length=40, description="with like: ascend, the driver release npu-smi "
                                                                 "would print")
    cannVersion: str = Field("", max_length=40, description="with like: ascend, the host's CANN toolkit release")
    superPod: int | None = Field(default=None, ge=-1, le=1_000_000)
    """The supernode the server reports, as an Ascend A3 does (-1: in none; absent: the hardware cannot tell)."""
    partitioning: Literal["", "vnpu", "vgpu", "mig"] = ""
    vnpuOutput: Literal["ok", "truncated", "garbage"] = "ok"
    migOutput: Literal["ok", "garbage"] = "ok"


class FakeBackend:
    vendor = "fake"

    def __init__(self, config: Path) -> None:
        self.config = config
        spec = self._read()
        self.resource = spec.resource
        self.like = spec.like
        self.label = LABELS[spec.like]
        self.topology = "generic"
        self.device_dir = config.parent / "dev"
        wants = {"vnpu": "ascend", "vgpu": "nvidia", "mig": "nvidia"}.get(spec.partitioning)
        if wants is not None and spec.like != wants:
            raise ToolOutputError(f"fake device config {self.config}: partitioning: {spec.partitioning} needs "
                                  f"like: {wants}")
        self.partitioning = spec.partitioning
        """The chips are carved into partitions of this mode (``vnpu`` with ``like: ascend``, ``vgpu`` and ``mig``
        with ``like: nvidia``)."""
        self.model = spec.model

    def _read(self) -> _File:
        try:
            data = safe_load(read_text(self.config, MAX_BYTES))
        except UnicodeDecodeError as exc:
            raise ToolOutputError(f"fake device config {self.config}: not text: {exc.reason}") from None
        except OSError as exc:
            raise ToolError(f"fake device config {self.config}: cannot read: {exc}") from None
        except (yaml.YAMLError, YamlLimitError) as exc:
            raise ToolOutputError(f"fake device config {self.config}: not YAML: {exc}") from None
        try:
            return _File.model_validate(data)
        except ValidationError as exc:
            raise ToolOutputError(f"fake device config {self.config}: {first_problem(exc)}") from None

    def chips(self) -> list[ToolChip]:
        spec = self._read()
        if len({c.id for c in spec.chips}) != len(spec.chips):
            raise ToolOutputError(f"fake device config {self.config}: chips: an id is listed twice")
        chips = [ToolChip(id=c.id, model=spec.model, level=c.health, memory_mib=c.memoryMiB, bus_id="", card=c.id,
                          numa=c.numa) for c in spec.chips]
        if self.like != "none":
            self.topology = default_topology(self.like, spec.model, len(chips))
        self._make_devices(chips)
        return chips

    def _hand_off(self, chips: list[ToolChip]) -> ContainerDevices:
        if self.like == "ascend":
            return ascend.hand_off(chips, host_dir=str(self.device_dir))
        if self.like == "cambricon":
            return cambricon.hand_off(chips, host_dir=str(self.device_dir))
        if self.like == "nvidia":
            return ContainerDevices(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(str(c.id) for c in chips)})
        return ContainerDevices(envs={"FAKE_VISIBLE_DEVICES": ",".join(str(c.id) for c in chips)})

    def _make_devices(self, chips: list[ToolChip]) -> None:
        """The device files the hand-off names, made once (character devices with /dev/null's numbers)."""
        wanted = [Path(host) for _, host, _ in self._hand_off(chips).devices]
        if all(path.exists() for path in wanted):
            return
        null = os.stat("/dev/null").st_rdev
        try:
            self.device_dir.mkdir(parents=True, exist_ok=True)
            for path in wanted:
                if not path.exists():
                    os.mknod(path, 0o666 | stat.S_IFCHR, null)
        except OSError as exc:
            raise ToolError(f"fake devices in {self.device_dir}: cannot make them: {exc.strerror or exc} "
                            f"(making device files needs root)") from None

    def versions(self) -> dict[str, str]:
        try:
            spec = self._read()
        except (ToolError, ToolOutputError):
            return {}
        return {k: v for k, v in (("driver", spec.driverVersion), ("cann", spec.cannVersion)) if v}

    def supernode(self) -> str | None:
        found = self._read().superPod
        return None if found is None else "" if found < 0 else str(found)

    def container_devices(self, chips: list[ToolChip]) -> ContainerDevices:
        return self._hand_off(chips)

    def vnpu_tool(self) -> VnpuTool:
        """``npu-smi``'s vNPU commands, emulated on this fake node (:class:`FakeNpuSmi`)."""
        return VnpuTool(run=FakeNpuSmi(self).run)

    def mig_tool(self) -> MigTool:
        """NVML's MIG calls, emulated on this fake node (``fake_nvml.FakeNvml``)."""
        return MigTool(FakeNvml(self))

    def mig_output(self) -> str:
        return self._read().migOutput


def _answer(status: str, message: str) -> str:
    """``npu-smi set``'s answer: ``Status`` and ``Message`` lines, aligned as the tool aligns them."""
    return f"{'Status':<31}: {status}\n{'Message':<31}: {message}\n"


class FakeNpuSmi:
    """The vNPU commands of ``npu-smi`` for a fake Ascend node: ``info -t info-vnpu``, ``set -t create-vnpu``
    and ``set -t destroy-vnpu``, answering in the real tool's format. A create the chip cannot hold (AI
    cores, AI CPUs, instances, an id outside its range or taken) is refused as the driver refuses it."""

    def __init__(self, backend: FakeBackend) -> None:
        self.backend = backend
        self.state = backend.config.parent / "vnpus.json"

    def _load(self) -> dict[str, list[list[Any]]]:
        return fake_state.load(self.state)

    def _save(self, data: dict[str, list[list[Any]]]) -> None:
        fake_state.save(self.state, data)

    def _phy(self, card: str, chip: str) -> int:
        """The chip's device id: the ``chip``-th chip of NPU ``card`` (a fake card holds one chip each)."""
        if chip != "0":
            raise ToolError(f"npu-smi: card {card} has no chip {chip}")
        ids = {c.id for c in self.backend.chips()}
        if not card.isdigit() or int(card) not in ids:
            raise ToolError(f"npu-smi: no NPU {card[:20]}")
        return int(card)

    def run(self, argv: Sequence[str], timeout: float) -> str:
        args = list(argv[1:])
        flags = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("-")}
        phy = self._phy(flags.get("-i", ""), flags.get("-c", ""))
        data = self._load()
        held = data.get(str(phy), [])
        if args[:3] == ["info", "-t", "info-vnpu"]:
            return self._info(held)
        geometry = geometry_for("vnpu", self.backend.model)
        if geometry is None:
            raise ToolError(f"npu-smi: {self.backend.model} does not support vNPUs")
        if args[:3] == ["set", "-t", "create-vnpu"]:
            template, vnpu = flags.get("-f", ""), int(flags.get("-v", "0"))
            profile = geometry.profile(template)
            taken = [geometry.profile(str(t)) for _, _, t in held]
            cores = sum(p.cores for p in taken if p) + (profile.cores if profile else 0)
            aicpu = sum(p.aicpu for p in taken if p) + (profile.aicpu if profile else 0)
            memory = sum(p.memory for p in taken if p) + (profile.memory if profile else 0)
            ids = id_range(phy, STRIDE if geometry.slotted else 8)
            if (profile is None or vnpu not in ids or any(v == vnpu for v, _, _ in held) or cores > geometry.cores
                    or aicpu > geometry.aicpu or memory > geometry.memory or len(held) >= geometry.instances):
                return _answer("FAIL", "Create vnpu failed")
            data[str(phy)] = [*held, [vnpu, int(flags.get("-g", "0")), template]]
            self._save(data)
            self._device(vnpu, make=True)
            return _answer("OK", "Create vnpu success")
        if args[:3] == ["set", "-t", "destroy-vnpu"]:
            vnpu = int(flags.get("-v", "-1"))
            if not any(v == vnpu for v, _, _ in held):
                return _answer("FAIL", f"vnpu {vnpu} not found")
            data[str(phy)] = [entry for entry in held if entry[0] != vnpu]
            self._save(data)
            self._device(vnpu, make=False)
            return _answer("OK", f"Destroy vnpu {vnpu} success")
        raise ToolError(f"npu-smi: unknown command {' '.join(args)[:80]}")

    def _info(self, held: list[list[Any]]) -> str:
        mode = self.backend._read().vnpuOutput
        if mode == "garbage":
            return "Total number of vnpu: <b>©</b>\n\x00\x1b[31m" + "|" * 400 + "\n"
        rows = [f"{v:<8} |  {g:<12} |  000000000000  |  0       |  {t}" for v, g, t in held]
        if mode == "truncated":
            rows = rows[:-1] if rows else []
            count = len(held) + (0 if held else 1)
        else:
            count = len(held)
        lines = ["Format:Free/Total                   NA: Currently, query is not supported.    |",
                 " AICORE    Memory    AICPU    VPC    VENC    VDEC    JPEGD    JPEGE    PNGD    |",
                 f"Total number of vnpu: {count}"]
        if count:
            lines.append("Vnpu ID  |  Vgroup ID     |  Container ID  |  Status  |  Template Name")
        return "\n".join([*lines, *rows]) + "\n"

    def _device(self, vnpu: int, *, make: bool) -> None:
        path = self.backend.device_dir / f"vdavinci{vnpu}"
        try:
            if make and not path.exists():
                self.backend.device_dir.mkdir(parents=True, exist_ok=True)
                os.mknod(path, 0o666 | stat.S_IFCHR, os.stat("/dev/null").st_rdev)
            elif not make:
                path.unlink(missing_ok=True)
        except OSError as exc:
            raise ToolError(f"npu-smi: cannot make /dev/vdavinci{vnpu}: {exc.strerror or exc}") from None
