"""A fake accelerator for tests, demos and the simulator: chips listed in a YAML file that is read again on
every poll, so flipping a chip's health in the file is a health change the agent sees.

File::

    resource: example.com/fake      # the extended resource (default hetsched.io/fake)
    model: FakeChip
    chips:
    - {id: 0, health: OK}
    - {id: 1, health: Critical, memoryMiB: 16384}

Who calls it: ``agents.backends.make_backend("fake", config=FILE)``. A missing or unreadable file is a
``ToolError``; a file that does not follow the format is a ``ToolOutputError`` naming the field.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hetsched.agents.backends import ContainerDevices
from hetsched.agents.chips import Level, ToolChip
from hetsched.agents.tables import ToolOutputError
from hetsched.agents.tools import ToolError


class _Chip(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: int = Field(ge=0, le=63)
    health: Level = "OK"
    memoryMiB: int = Field(default=16384, ge=0)
    numa: int = -1


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    resource: str = "hetsched.io/fake"
    model: str = "FakeChip"
    chips: list[_Chip] = Field(min_length=1)


class FakeBackend:
    vendor = "fake"
    label = "fake-accelerator"
    topology = "generic"

    def __init__(self, config: Path) -> None:
        self.config = config
        self.resource = self._read().resource

    def _read(self) -> _File:
        try:
            data = yaml.safe_load(self.config.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ToolError(f"fake device config {self.config}: cannot read: {exc}") from None
        except yaml.YAMLError as exc:
            raise ToolOutputError(f"fake device config {self.config}: not YAML: {exc}") from None
        try:
            return _File.model_validate(data)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ToolOutputError(f"fake device config {self.config}: {where}: {first['msg']}") from None

    def chips(self) -> list[ToolChip]:
        spec = self._read()
        return [ToolChip(id=c.id, model=spec.model, level=c.health, memory_mib=c.memoryMiB, bus_id="", card=c.id,
                         numa=c.numa) for c in spec.chips]

    def container_devices(self, chips: list[ToolChip]) -> ContainerDevices:
        return ContainerDevices(envs={"FAKE_VISIBLE_DEVICES": ",".join(str(c.id) for c in chips)})
