"""NVIDIA MIG instances through NVML: list a GPU's instances, create one of a profile at a placement, destroy
one — what the device plugin's MIG path (``agents.deviceplugin.mig``) calls to give a pod the instance the
scheduler carved for it.

Who calls it: ``agents.deviceplugin.mig.MigBackend`` (through :class:`MigTool`), with NVML (``nvidia-ml-py``)
on a real node and the fake backend's emulation of the same NVML calls (``agents.backends.fake_nvml``) on a
fake one.

What is read, garbage-safe: a GPU instance (GI) is (id, profile, placement start and size) from
``nvmlGpuInstanceGetInfo`` and its profile's name (``MIG 1g.5gb``) from
``nvmlDeviceGetGpuInstanceProfileInfoById``; the MIG device's UUID (what ``NVIDIA_VISIBLE_DEVICES`` names) from
the GPU's MIG device handles. A name that is not a MIG profile name, a placement outside the GPU's memory
slices, two instances on one slice, an id or UUID that is not one — any of them is a ``ToolOutputError``
naming the GPU and the field, and the caller then treats the GPU's instances as unknown (its MIG slots
Unhealthy), never as a listing it trusts. NVML failing (no driver, MIG mode off) is a ``ToolError``.

Created the way ``nvidia-smi mig -cgi <profile> -C`` does, but at the scheduler's placement: the GI with
``nvmlDeviceCreateGpuInstanceWithPlacement``, then its one compute instance spanning the GI.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from typing import Any

from hetsched.agents.tables import ToolOutputError
from hetsched.agents.tools import ToolError

MAX_GI = 32
"""GPU instance ids are small (A100/H100: at most 14); ids up to this are looked up."""
MAX_SLICES = 8
_NAME = re.compile(r"(?:MIG )?([1-8]g\.[0-9]{1,3}gb(?:\+[a-z]{1,8})?)")
_UUID = re.compile(r"MIG-[0-9A-Za-z/-]{8,80}")
CI_PROFILES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}
"""A compute instance spanning a GI of n slices: NVML's ``NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE``."""
PROFILE_COUNT = 0x12
"""NVML's ``NVML_GPU_INSTANCE_PROFILE_COUNT``: GI profile constants are 0 … this − 1."""


@dataclass(frozen=True)
class MigInstance:
    """One GPU instance: its id, profile (``1g.5gb``), placement (start, size in memory slices) and MIG device
    UUID ("" while it has no compute instance)."""

    gi: int
    profile: str
    start: int
    size: int
    uuid: str = ""

    @property
    def mask(self) -> int:
        return ((1 << self.size) - 1) << self.start


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


NOT_FOUND = (2, 6)
"""NVML's "invalid argument" and "not found": on a lookup by id or index, no such instance."""


def _found(call: Any, *args: Any) -> Any:
    """``call(*args)``, or None when NVML says there is no such instance (other errors raise)."""
    try:
        return call(*args)
    except Exception as exc:
        if int(getattr(exc, "value", -1)) in NOT_FOUND:
            return None
        raise


class MigTool:
    """MIG operations on the GPUs NVML reports (``nvml``: the ``pynvml`` module the NVIDIA backend loaded, or
    an object with the same calls)."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml

    def _lib(self) -> Any:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:
            raise ToolError(f"NVML: cannot initialise: {exc}") from None
        return nvml

    def _gpu(self, nvml: Any, gpu: int) -> Any:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(gpu)
            current = nvml.nvmlDeviceGetMigMode(handle)[0]
        except Exception as exc:
            raise ToolError(f"GPU {gpu}: NVML: {exc}") from None
        if current != 1:
            raise ToolError(f"GPU {gpu}: MIG mode is not enabled (nvidia-smi -i {gpu} -mig 1)")
        return handle

    def list(self, gpu: int) -> list[MigInstance]:
        """The GPU's instances, checked (see the module docstring)."""
        nvml = self._lib()
        handle = self._gpu(nvml, gpu)
        found: list[MigInstance] = []
        try:
            uuids = self._uuids(nvml, handle, gpu)
            for gi_id in range(MAX_GI):
                instance = _found(nvml.nvmlDeviceGetGpuInstanceById, handle, gi_id)
                if instance is None:
                    continue
                info = nvml.nvmlGpuInstanceGetInfo(instance)
                profile = nvml.nvmlDeviceGetGpuInstanceProfileInfoById(handle, int(info.profileId))
                found.append(self._checked(gpu, int(info.id), _text(profile.name), int(info.placement.start),
                                           int(info.placement.size), uuids.get(int(info.id), "")))
        except (ToolOutputError, ToolError):
            raise
        except Exception as exc:
            raise ToolError(f"GPU {gpu}: NVML: {exc}") from None
        taken = 0
        for each in found:
            if taken & each.mask:
                raise ToolOutputError(f"GPU {gpu}: GPU instance {each.gi} overlaps another's memory slices")
            taken |= each.mask
        if len({each.gi for each in found}) != len(found):
            raise ToolOutputError(f"GPU {gpu}: a GPU instance id is listed twice")
        return found

    @staticmethod
    def _checked(gpu: int, gi: int, name: str, start: int, size: int, uuid: str) -> MigInstance:
        matched = _NAME.fullmatch(name.strip())
        if matched is None:
            raise ToolOutputError(f"GPU {gpu}: GPU instance {gi}: profile name {name[:40]!r} is not a MIG profile")
        if not 0 <= gi < MAX_GI:
            raise ToolOutputError(f"GPU {gpu}: {str(gi)[:12]} is not a GPU instance id")
        if not (0 <= start < MAX_SLICES and 1 <= size <= MAX_SLICES - start):
            raise ToolOutputError(f"GPU {gpu}: GPU instance {gi}: placement {start}:{size} is outside the GPU's "
                                  f"{MAX_SLICES} memory slices")
        if uuid and not _UUID.fullmatch(uuid):
            raise ToolOutputError(f"GPU {gpu}: GPU instance {gi}: {uuid[:40]!r} is not a MIG device UUID")
        return MigInstance(gi, matched.group(1), start, size, uuid)

    def _uuids(self, nvml: Any, handle: Any, gpu: int) -> dict[int, str]:
        """GI id → its MIG device's UUID (GIs with a compute instance have one)."""
        result: dict[int, str] = {}
        for index in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
            device = _found(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, index)
            if device is None:
                continue
            result[int(nvml.nvmlDeviceGetGpuInstanceId(device))] = _text(nvml.nvmlDeviceGetUUID(device))
        return result

    def create(self, gpu: int, profile: str, start: int, size: int) -> MigInstance:
        """A GI of ``profile`` at ``start``:``size`` with one compute instance spanning it; the instance as
        listed afterwards. ToolError when NVML refuses (the place taken, the profile unknown on this GPU)."""
        nvml = self._lib()
        handle = self._gpu(nvml, gpu)
        try:
            profile_id, slices = self._profile(nvml, handle, profile, gpu)
            placement = nvml.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = start, size
            instance = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, ctypes.byref(placement))
            ci = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(instance, CI_PROFILES[slices], 0)
            nvml.nvmlGpuInstanceCreateComputeInstance(instance, int(ci.id))
        except (ToolError, ToolOutputError):
            raise
        except Exception as exc:
            raise ToolError(f"GPU {gpu}: creating a {profile} instance at {start}:{size}: {exc}") from None
        made = [m for m in self.list(gpu) if (m.start, m.size, m.profile) == (start, size, profile)]
        if not made or not made[0].uuid:
            raise ToolError(f"GPU {gpu}: the {profile} instance at {start}:{size} is not listed after creating it")
        return made[0]

    @staticmethod
    def _profile(nvml: Any, handle: Any, profile: str, gpu: int) -> tuple[int, int]:
        """NVML's id and slice count for the GI profile named ``profile`` on this GPU."""
        for constant in range(PROFILE_COUNT):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant)
            except Exception:  # not supported on this GPU
                continue
            matched = _NAME.fullmatch(_text(info.name).strip())
            if matched is not None and matched.group(1) == profile and int(info.sliceCount) in CI_PROFILES:
                return int(info.id), int(info.sliceCount)
        raise ToolError(f"GPU {gpu}: NVML knows no MIG profile {profile[:20]} on this GPU")

    def destroy(self, gpu: int, gi: int) -> None:
        """Destroy GPU instance ``gi`` and its compute instances."""
        nvml = self._lib()
        handle = self._gpu(nvml, gpu)
        try:
            instance = nvml.nvmlDeviceGetGpuInstanceById(handle, gi)
            for ci_id in range(MAX_SLICES):
                compute = _found(nvml.nvmlGpuInstanceGetComputeInstanceById, instance, ci_id)
                if compute is not None:
                    nvml.nvmlComputeInstanceDestroy(compute)
            nvml.nvmlGpuInstanceDestroy(instance)
        except Exception as exc:
            raise ToolError(f"GPU {gpu}: destroying GPU instance {gi}: {exc}") from None
