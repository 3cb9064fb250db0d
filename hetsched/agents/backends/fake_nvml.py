"""NVML's MIG calls for a fake NVIDIA node whose GPUs are in MIG mode (``like: nvidia``, ``partitioning: mig``
in the fake chips file): the calls ``agents.mig.MigTool`` makes, answering as NVML does, with the instances
kept in ``migs.json`` beside the chips file.

Who calls it: ``FakeBackend.mig_tool`` (the device plugin's MIG path on fake nodes: unit tests and the
real-node suite). A create the GPU could not hold — a placement the profile does not allow, slices taken,
too many instances — fails as the driver fails it; a GI with a compute instance cannot be destroyed (NVML's
"in use"). ``migOutput: garbage`` in the chips file makes the listing answer nonsense (a profile name with
markup, a placement past the GPU's slices), as a broken driver might.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hetsched.agents.backends import fake_state
from hetsched.devices.partitions import Geometry, geometry_for

INVALID_ARGUMENT, NOT_SUPPORTED, NOT_FOUND, INSUFFICIENT_RESOURCES, IN_USE = 2, 3, 6, 7, 19
PROFILE_IDS = (19, 15, 14, 9, 5, 0)
"""NVML ids of the geometry's profiles, in its order (as on an A100: 1g.5gb is 19): never equal to the
profile constants, so a caller that mixes the two fails here as it would on a GPU."""


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class c_nvmlGpuInstancePlacement_t(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class FakeNvml:
    """The MIG subset of ``pynvml`` over the GPUs of a fake chips file (``backend``: a ``FakeBackend``)."""

    c_nvmlGpuInstancePlacement_t = c_nvmlGpuInstancePlacement_t

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.state = Path(backend.config).parent / "migs.json"

    # ------------------------------------------------------------------------------------- state

    def _load(self) -> dict[str, list[list[Any]]]:
        return fake_state.load(self.state)

    def _save(self, data: dict[str, list[list[Any]]]) -> None:
        fake_state.save(self.state, data)

    def _geometry(self) -> Geometry:
        geometry = geometry_for("mig", self.backend.model)
        if geometry is None:
            raise NVMLError(NOT_SUPPORTED)
        return geometry

    def _held(self, gpu: int) -> list[list[Any]]:
        """[gi, profile, start, size, has compute instance] of each GI on ``gpu``."""
        return self._load().get(str(gpu), [])

    def _garbage(self) -> bool:
        return bool(self.backend.mig_output() == "garbage")

    # ------------------------------------------------------------------------------------- NVML

    def nvmlInit(self) -> None:
        return None

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, int]:
        if index not in {c.id for c in self.backend.chips()}:
            raise NVMLError(INVALID_ARGUMENT)
        return ("gpu", index)

    def nvmlDeviceGetMigMode(self, handle: tuple[str, int]) -> list[int]:
        return [1, 1]

    def nvmlDeviceGetGpuInstanceById(self, handle: tuple[str, int], gi: int) -> tuple[str, int, int]:
        if not any(entry[0] == gi for entry in self._held(handle[1])):
            raise NVMLError(NOT_FOUND)
        return ("gi", handle[1], gi)

    def nvmlGpuInstanceGetInfo(self, instance: tuple[str, int, int]) -> SimpleNamespace:
        _, gpu, gi = instance
        entry = next(e for e in self._held(gpu) if e[0] == gi)
        names = [p.name for p in self._geometry().profiles]
        start = 9 if self._garbage() else entry[2]
        return SimpleNamespace(id=gi, profileId=PROFILE_IDS[names.index(entry[1])],
                               placement=SimpleNamespace(start=start, size=entry[3]))

    def nvmlDeviceGetGpuInstanceProfileInfoById(self, handle: tuple[str, int], profile_id: int
                                                ) -> SimpleNamespace:
        profiles = self._geometry().profiles
        if profile_id not in PROFILE_IDS[:len(profiles)]:
            raise NVMLError(INVALID_ARGUMENT)
        profile = profiles[PROFILE_IDS.index(profile_id)]
        name = f"MIG {profile.name}" + ("<script>" if self._garbage() else "")
        return SimpleNamespace(id=profile_id, name=name.encode(), sliceCount=profile.cores)

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: tuple[str, int], constant: int
                                            ) -> SimpleNamespace:
        profiles = self._geometry().profiles
        if constant >= len(profiles):
            raise NVMLError(NOT_SUPPORTED)
        return self.nvmlDeviceGetGpuInstanceProfileInfoById(handle, PROFILE_IDS[constant])

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, handle: tuple[str, int], profile_id: int,
                                                 placement: Any) -> tuple[str, int, int]:
        geometry = self._geometry()
        if profile_id not in PROFILE_IDS[:len(geometry.profiles)]:
            raise NVMLError(INVALID_ARGUMENT)
        profile = geometry.profiles[PROFILE_IDS.index(profile_id)]
        where = placement._obj  # ctypes.byref(...) of the placement structure
        start, size = int(where.start), int(where.size)
        mask = ((1 << size) - 1) << start if 0 < size <= 8 else 0
        data = self._load()
        held = data.get(str(handle[1]), [])
        taken = 0
        for entry in held:
            taken |= ((1 << entry[3]) - 1) << entry[2]
        if mask not in profile.placements or taken & mask or len(held) >= geometry.instances:
            raise NVMLError(INSUFFICIENT_RESOURCES)
        gi = next(i for i in range(1, 64) if not any(e[0] == i for e in held))
        data[str(handle[1])] = [*held, [gi, profile.name, start, size, False]]
        self._save(data)
        return ("gi", handle[1], gi)

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, instance: tuple[str, int, int], profile: int,
                                                     engine: int) -> SimpleNamespace:
        return SimpleNamespace(id=profile)

    def _set_compute(self, instance: tuple[str, int, int], present: bool) -> None:
        data = self._load()
        for entry in data.get(str(instance[1]), []):
            if entry[0] == instance[2]:
                entry[4] = present
        self._save(data)

    def nvmlGpuInstanceCreateComputeInstance(self, instance: tuple[str, int, int], profile_id: int
                                             ) -> tuple[str, int, int, int]:
        self._set_compute(instance, True)
        return ("ci", instance[1], instance[2], 0)

    def nvmlGpuInstanceGetComputeInstanceById(self, instance: tuple[str, int, int], ci: int
                                              ) -> tuple[str, int, int, int]:
        if ci != 0 or not any(e[0] == instance[2] and e[4] for e in self._held(instance[1])):
            raise NVMLError(NOT_FOUND)
        return ("ci", instance[1], instance[2], 0)

    def nvmlComputeInstanceDestroy(self, compute: tuple[str, int, int, int]) -> None:
        self._set_compute(("gi", compute[1], compute[2]), False)

    def nvmlGpuInstanceDestroy(self, instance: tuple[str, int, int]) -> None:
        data = self._load()
        held = data.get(str(instance[1]), [])
        if any(e[0] == instance[2] and e[4] for e in held):
            raise NVMLError(IN_USE)
        data[str(instance[1])] = [e for e in held if e[0] != instance[2]]
        self._save(data)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: tuple[str, int]) -> int:
        return self._geometry().instances

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: tuple[str, int], index: int
                                            ) -> tuple[str, int, int]:
        devices = sorted(e[0] for e in self._held(handle[1]) if e[4])
        if index >= len(devices):
            raise NVMLError(NOT_FOUND)
        return ("mig", handle[1], devices[index])

    def nvmlDeviceGetGpuInstanceId(self, device: tuple[str, int, int]) -> int:
        return device[2]

    def nvmlDeviceGetUUID(self, device: tuple[str, int, int]) -> str:
        return f"MIG-fa4e0000-{device[1]:04d}-{device[2]:04d}"
