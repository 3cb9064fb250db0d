"""Vendor backends: the tools run as real processes with fixed argument lists (fake ``npu-smi`` and
``cnmon`` executables on PATH printing the real fixtures), a missing, failing or hanging tool is a clear
``ToolError``, and each vendor's Allocate content. NVML runs through a thin fake of the pynvml calls the
backend uses (this machine has no GPU)."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hetsched.agents.backends import make_backend
from hetsched.agents.backends.ascend import AscendBackend
from hetsched.agents.backends.cambricon import CambriconBackend
from hetsched.agents.backends.fake import FakeBackend
from hetsched.agents.backends.nvidia import NvidiaBackend
from hetsched.agents.tables import ToolOutputError
from hetsched.agents.tools import ToolError, run_tool

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def fake_tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def path_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="vendor-tool fixtures not found at ../shared/fixtures")
def test_ascend_backend_runs_npu_smi_and_mounts_davinci_devices(path_dir: Path) -> None:
    fixture = FIXTURES / "npu-smi" / "ascend-910b3-8chip.txt"
    fake_tool(path_dir, "npu-smi", f'[ "$1" = info ] && [ $# -eq 1 ] && exec cat {shlex.quote(str(fixture))}\nexit 3')
    backend = AscendBackend()
    chips = backend.chips()
    assert len(chips) == 8 and backend.topology == "ascend910b-8"
    found = backend.container_devices([chips[3], chips[1]])
    assert found.envs == {"ASCEND_VISIBLE_DEVICES": "1,3"}
    assert [d[0] for d in found.devices] == ["/dev/davinci1", "/dev/davinci3", "/dev/davinci_manager",
                                            "/dev/devmm_svm", "/dev/hisi_hdc"]
    runtime = AscendBackend(runtime=True).container_devices([chips[0]])
    assert runtime.envs == {"ASCEND_VISIBLE_DEVICES": "0"} and runtime.devices == []


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="vendor-tool fixtures not found at ../shared/fixtures")
def test_cambricon_backend_runs_cnmon_and_mounts_cambricon_devices(path_dir: Path) -> None:
    fixture = FIXTURES / "cnmon" / "mlu370-x4-cnmon-v5.10.10.txt"
    fake_tool(path_dir, "cnmon", f"exec cat {shlex.quote(str(fixture))}")
    backend = CambriconBackend()
    chips = backend.chips()
    assert [c.id for c in chips] == [0, 1]
    assert [d[0] for d in backend.container_devices(chips).devices] == [
        "/dev/cambricon_dev0", "/dev/cambricon_dev1", "/dev/cambricon_ctl"]


def test_missing_failing_and_hanging_tools_are_clear_errors(path_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(path_dir))  # nothing else on PATH: npu-smi is missing
    with pytest.raises(ToolError, match=r"npu-smi: not found \(is the driver installed"):
        AscendBackend().chips()
    fake_tool(path_dir, "cnmon", "echo 'dcmi module initialize failed. ret is -8005' >&2; exit 9")
    with pytest.raises(ToolError, match="cnmon: exit code 9: dcmi module initialize failed"):
        CambriconBackend().chips()
    fake_tool(path_dir, "npu-smi", "exec /bin/sleep 5")
    with pytest.raises(ToolError, match=r"npu-smi info: no answer within 0.3s"):
        AscendBackend(timeout=0.3).chips()


def test_tool_arguments_are_never_interpreted_by_a_shell(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    out = run_tool(["echo", f"; touch {marker}"])
    assert out.strip() == f"; touch {marker}" and not marker.exists()


class FakeNVML:
    """The pynvml calls NvidiaBackend uses, over two fake A100s; XID events queued by the test."""

    nvmlEventTypeXidCriticalError = 8

    def __init__(self) -> None:
        self.handles = ["h0", "h1"]
        self.events: list[Any] = []
        self.failing = False

    def nvmlInit(self) -> None:
        if self.failing:
            raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.handles)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return self.handles[index]

    def nvmlDeviceGetName(self, handle: str) -> bytes:
        return b"NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        return f"GPU-{handle}-uuid"

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Any:
        return SimpleNamespace(total=80 * 1024**3, used=0, free=80 * 1024**3)

    def nvmlDeviceGetPciInfo(self, handle: str) -> Any:
        return SimpleNamespace(busId=f"00000000:{7 + self.handles.index(handle):02X}:00.0".encode())

    def nvmlEventSetCreate(self) -> str:
        return "set"

    def nvmlDeviceRegisterEvents(self, handle: str, kinds: int, events: str) -> None:
        assert kinds == self.nvmlEventTypeXidCriticalError

    def nvmlEventSetWait(self, events: str, timeout_ms: int) -> Any:
        if not self.events:
            raise RuntimeError("NVML_ERROR_TIMEOUT")
        return self.events.pop(0)


def test_nvidia_backend_reads_nvml_and_marks_critical_xids_unhealthy() -> None:
    nvml = FakeNVML()
    backend = NvidiaBackend(nvml=nvml)
    chips = backend.chips()
    assert [(c.id, c.uuid, c.memory_mib, c.healthy) for c in chips] == [
        (0, "GPU-h0-uuid", 81920, True), (1, "GPU-h1-uuid", 81920, True)]
    assert chips[0].bus_id == "00000000:07:00.0" and chips[0].model == "NVIDIA A100-SXM4-80GB"
    nvml.events = [SimpleNamespace(eventData=13, device="h0"),   # an application error: ignored
                   SimpleNamespace(eventData=79, device="h1")]   # fallen off the bus
    chips = backend.chips()
    assert chips[0].healthy and not chips[1].healthy and chips[1].reason == "XID 79"
    assert backend.container_devices(chips).envs == {"NVIDIA_VISIBLE_DEVICES": "GPU-h0-uuid,GPU-h1-uuid"}
    nvml.failing = True
    with pytest.raises(ToolError, match="NVML: cannot initialise: NVML_ERROR_DRIVER_NOT_LOADED"):
        backend.chips()


def test_make_backend_names_bad_choices(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown vendor 'amd'"):
        make_backend("amd")
    with pytest.raises(ValueError, match="--vendor fake needs --config FILE"):
        make_backend("fake")


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="vendor-tool fixtures not found at ../shared/fixtures")
def test_ascend_backend_asks_npu_smi_for_the_error_codes_of_a_bad_chip(path_dir: Path, tmp_path: Path) -> None:
    """Synthetic: NPU 5 in Alarm in the table; ``npu-smi info -t health -i 5`` gives its error code."""
    table = tmp_path / "table.txt"
    table.write_text((FIXTURES / "npu-smi" / "ascend-910b3-8chip.txt").read_text().replace(
        "| 5     910B3               | OK   ", "| 5     910B3               | Alarm", 1))
    health = "        Health Status                  : Alarm\n        Error Code                     : 80E18005\n"
    fake_tool(path_dir, "npu-smi", f'if [ "$2" = "-t" ]; then [ "$5" = 5 ] && printf {shlex.quote(health)} && exit 0; '
                                   f'exit 4; fi\nexec cat {shlex.quote(str(table))}')
    chips = AscendBackend().chips()
    assert (chips[5].level, chips[5].reason, chips[5].healthy) == ("Alarm", "error code 80E18005", False)
    assert all(c.level == "OK" for c in chips if c.id != 5)


def fake_file(path: Path, like: str, count: int, **extra: Any) -> Path:
    chips = [{"id": i, "health": "OK"} for i in range(count)]
    path.write_text(json.dumps({"resource": "huawei.com/Ascend910" if like == "ascend" else "cambricon.com/mlu",
                                "model": "Ascend910" if like == "ascend" else "MLU370", "like": like,
                                "chips": chips, **extra}))
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="making device files needs root")
def test_the_fake_vendor_makes_real_device_files_named_as_the_vendor_names_them(tmp_path: Path) -> None:
    """What the real-node tests' containers see (tests/test_realnodes.py): character devices with /dev/null's
    numbers beside the chips file, handed over under /dev with the vendor's environment."""
    ascend = FakeBackend(fake_file(tmp_path / "chips.yaml", "ascend", 8))
    chips = ascend.chips()
    assert (ascend.label, ascend.topology) == ("huawei-ascend", "ascend910-8")
    handed = ascend.container_devices([chips[5], chips[2]])
    assert handed.envs == {"ASCEND_VISIBLE_DEVICES": "2,5"}
    assert [c for c, _, _ in handed.devices] == ["/dev/davinci2", "/dev/davinci5", "/dev/davinci_manager",
                                                 "/dev/devmm_svm", "/dev/hisi_hdc"]
    null = os.stat("/dev/null").st_rdev
    for _, host, _ in handed.devices:
        assert host.startswith(str(tmp_path / "dev")) and stat.S_ISCHR(os.stat(host).st_mode)
        assert os.stat(host).st_rdev == null
    (tmp_path / "mlu").mkdir()
    mlu = FakeBackend(fake_file(tmp_path / "mlu" / "chips.yaml", "cambricon", 4))
    handed = mlu.container_devices(mlu.chips()[:1])
    assert handed.envs == {"CAMBRICON_VISIBLE_DEVICES": "0"} and mlu.label == "cambricon-mlu"
    assert [c for c, _, _ in handed.devices] == ["/dev/cambricon_dev0", "/dev/cambricon_ctl"]


def test_a_bad_fake_vendor_file_is_a_clear_error_never_an_empty_list(tmp_path: Path) -> None:
    path = fake_file(tmp_path / "chips.yaml", "none", 2)
    backend = FakeBackend(path)
    for text, expected in (("chips: [{id: zero}]", "chips[0].id"), ("chips: []", "chips: List should have"),
                           ("like: huawei\nchips: [{id: 0}]", "like: Input should be"),
                           ("chips: [{id: 0}, {id: 0}]", "an id is listed twice"), ("{[", "not YAML"),
                           ("chips: [" + "{id: 1}, " * 70 + "]", "chips: List should have at most 64")):
        path.write_text(text)
        with pytest.raises(ToolOutputError, match=re.escape(expected)):
            backend.chips()
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ToolOutputError, match="not text"):
        backend.chips()
    path.unlink()
    with pytest.raises(ToolError, match="cannot read"):
        backend.chips()


A3_TABLE = """
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     Ascend910           | OK            | 170.0       38                0    / 0             |
| 0     0                   | 0000:9D:00.0  | 0           0    / 0          3395 / 65536         |
| 1     1                   | 0000:9F:00.0  | 0           0    / 0          3395 / 65536         |
+===========================+===============+====================================================+
| 1     Ascend910           | OK            | 168.0       37                0    / 0             |
| 0     2                   | 0000:99:00.0  | 0           0    / 0          3394 / 65536         |
| 1     3                   | 0000:9B:00.0  | 0           0    / 0          3394 / 65536         |
+===========================+===============+====================================================+
"""
"""Synthetic: an Atlas A3 layout (two chips per NPU card, a Phy-ID column), as public A3 output prints it."""
SPOD = "SDID : 16777216\nSuper Pod Size : 384\nSuper Pod ID : 7\nServer Index : 4\n"
"""``npu-smi info -t spod-info -i 0 -c 0`` on an A3 server (the layout public A3 guides print)."""


def test_an_a3_server_reports_its_supernode_and_other_servers_cannot_tell(path_dir: Path, tmp_path: Path) -> None:
    table = tmp_path / "a3.txt"
    table.write_text(A3_TABLE)
    spod = tmp_path / "spod.txt"
    spod.write_text(SPOD)
    fake_tool(path_dir, "npu-smi", f'if [ "$2" = "-t" ] && [ "$3" = spod-info ] && [ "$5" = 0 ] && [ "$7" = 0 ]; '
                                   f'then exec cat {shlex.quote(str(spod))}; fi\n'
                                   f'[ $# -eq 1 ] && exec cat {shlex.quote(str(table))}\nexit 3')
    backend = AscendBackend()
    assert [(c.id, c.card) for c in backend.chips()] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert backend.supernode() == "7"
    spod.write_text(SPOD.replace("Super Pod ID : 7", "Super Pod ID : -1"))
    assert backend.supernode() == ""  # the driver says: in no supernode
    spod.write_text("Super Pod ID : ٧\n")
    with pytest.raises(ToolOutputError, match=r"spod-info: line 1: Super Pod ID should be an integer"):
        backend.supernode()


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="vendor-tool fixtures not found at ../shared/fixtures")
def test_one_chip_per_card_servers_are_not_asked_for_a_supernode(path_dir: Path) -> None:
    """A 910B3 server (one chip per NPU): no spod-info query at all (the fake tool fails it)."""
    fixture = FIXTURES / "npu-smi" / "ascend-910b3-8chip.txt"
    fake_tool(path_dir, "npu-smi", f'[ $# -eq 1 ] && exec cat {shlex.quote(str(fixture))}\nexit 3')
    backend = AscendBackend()
    backend.chips()
    assert backend.supernode() is None
