"""Ascend NPUs: chips and health from ``npu-smi info`` (and, for a chip not OK, its error codes from
``npu-smi info -t health -i <npu>``; on an Atlas A3, its supernode from ``npu-smi info -t spod-info``);
containers get the chips as ``/dev/davinci<N>``
plus the shared management devices, or — for the Ascend container runtime — ``ASCEND_VISIBLE_DEVICES``.

Who calls it: ``agents.backends.make_backend("ascend")``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

from hetsched.agents import npu_smi
from hetsched.agents.backends.base import ContainerDevices
from hetsched.agents.chips import ToolChip
from hetsched.agents.tables import ToolOutputError
from hetsched.agents.tools import ToolError, run_tool
from hetsched.agents.vnpu import VnpuTool
from hetsched.devices.catalog import default_topology

SHARED_DEVICES = ("davinci_manager", "devmm_svm", "hisi_hdc")
"""The management devices every container with a chip needs too (names under /dev)."""


def hand_off(chips: list[ToolChip], *, runtime: bool = False, host_dir: str = "/dev") -> ContainerDevices:
    """What a container with ``chips`` gets: ``/dev/davinci<N>`` and the management devices (from
    ``host_dir`` on the node), and ``ASCEND_VISIBLE_DEVICES``; only the env for the Ascend container
    runtime, which mounts them itself."""
    ordered = sorted(chips, key=lambda c: c.id)
    envs = {"ASCEND_VISIBLE_DEVICES": ",".join(str(c.id) for c in ordered)}
    if runtime:
        return ContainerDevices(envs=envs)
    names = [f"davinci{c.id}" for c in ordered] + list(SHARED_DEVICES)
    return ContainerDevices(envs=envs, devices=[(f"/dev/{name}", f"{host_dir}/{name}", "rw") for name in names])


TOOLKIT = Path("/usr/local/Ascend/ascend-toolkit/latest")
"""Where the CANN toolkit's install record lives on a host that has one (``<arch>-linux/ascend_toolkit_install.info``
or directly under it)."""


def toolkit_version(folder: Path) -> str:
    """The ``version=`` of the CANN toolkit's install record under ``folder``; "" when there is none or it is
    unreadable (at most 64 KiB read: a file is never trusted to be small)."""
    for record in (*sorted(folder.glob("*-linux/ascend_toolkit_install.info")), folder / "ascend_toolkit_install.info"):
        try:
            with record.open("rb") as handle:
                text = handle.read(1 << 16).decode("utf-8", "replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "version" and value.strip():
                return value.strip()[:40]
    return ""


class AscendBackend:
    vendor = "ascend"
    label = "huawei-ascend"

    def __init__(self, *, runtime: bool = False, resource: str | None = None, timeout: float = 10.0,
                 partitioning: str = "") -> None:
        self.runtime = runtime
        self.partitioning = partitioning
        """``vnpu``: the chips are carved into vNPUs on demand (the device plugin serves ``huawei.com/npu-core``)."""
        self.device_dir = Path("/dev")
        """True: hand chips over as ``ASCEND_VISIBLE_DEVICES`` (the Ascend docker runtime mounts them)."""
        self.resource = resource or "huawei.com/Ascend910"
        self.timeout = timeout
        self.topology = "generic"
        self._a3_card: int | None = None
        self._driver = ""
        self.toolkit = TOOLKIT
        """An NPU card of the last chips read when the server is an Atlas A3 (two chips per card)."""

    def chips(self) -> list[ToolChip]:
        text = run_tool(["npu-smi", "info"], self.timeout)
        chips = [self._detail(c) if c.level != "OK" else c for c in npu_smi.parse(text)]
        self._driver = npu_smi.parse_version(text)
        cards = Counter(c.card for c in chips)
        self._a3_card = min(cards) if max(cards.values()) >= 2 and "310" not in chips[0].model else None
        model = chips[0].model
        self.topology = default_topology("ascend", model if model.lower().startswith("ascend") else
                                         f"Ascend{model}", len(chips))
        return chips

    def _detail(self, chip: ToolChip) -> ToolChip:
        """For a chip not OK, the error codes ``npu-smi info -t health -i <npu>`` gives (best effort: the
        table's level stands if the query fails)."""
        try:
            level, codes = npu_smi.parse_health(
                run_tool(["npu-smi", "info", "-t", "health", "-i", str(chip.card)], self.timeout))
        except (ToolError, ToolOutputError):
            return chip
        return replace(chip, level=level if level != "OK" else chip.level,
                       reason=f"error code {codes}" if codes else chip.reason)

    def versions(self) -> dict[str, str]:
        """The driver (``npu-smi``'s header) and the host's CANN toolkit (its install record's ``version=``
        line, when the toolkit is installed on the host and mounted: containers usually bring their own)."""
        found = {"driver": self._driver} if self._driver else {}
        cann = toolkit_version(self.toolkit)
        if cann:
            found["cann"] = cann
        return found

    def supernode(self) -> str | None:
        """On an Atlas A3 (two chips per NPU card; a 310P Duo card has two as well and is no supernode
        member), ``npu-smi info -t spod-info`` of its first card: the Super Pod ID. None elsewhere."""
        if self._a3_card is None:
            return None
        found = npu_smi.parse_spod_info(run_tool(
            ["npu-smi", "info", "-t", "spod-info", "-i", str(self._a3_card), "-c", "0"], self.timeout))
        return "" if found is None else str(found.superpod_id)

    def container_devices(self, chips: list[ToolChip]) -> ContainerDevices:
        return hand_off(chips, runtime=self.runtime)

    def vnpu_tool(self) -> VnpuTool:
        """``npu-smi``'s vNPU commands on this node."""
        return VnpuTool(timeout=self.timeout)
