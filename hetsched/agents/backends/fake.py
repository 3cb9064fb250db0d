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

With ``like: ascend`` or ``cambricon``, containers get real device files: the backend makes them in
``dev/`` beside the file (character devices with /dev/null's numbers — reading gives nothing, writing
discards — named as the vendor's driver names them: ``davinci3``, ``davinci_manager``, ``cambricon_dev2`` …),
and ``container_devices`` hands them over under ``/dev`` with the vendor's environment, so a container
sees exactly its chips. The node agent labels and shapes the node as that vendor's (``huawei-ascend``,
``ascend910-8``).

Who calls it: ``agents.backends.make_backend("fake", config=FILE)``. A missing or unreadable file is a
``ToolError``; a file that does not follow the format is a ``ToolOutputError`` naming the field (the
device plugin then reports every chip Unhealthy, never an empty list); device files that cannot be made
(not root) are a ``ToolError``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hetsched.agents.backends import ascend, cambricon
from hetsched.agents.backends.base import ContainerDevices
from hetsched.agents.chips import Level, ToolChip
from hetsched.agents.tables import ToolOutputError
from hetsched.agents.tools import ToolError
from hetsched.api.validation import first_problem
from hetsched.api.yamlsafe import YamlLimitError, read_text, safe_load
from hetsched.devices.catalog import default_topology

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
