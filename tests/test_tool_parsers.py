"""Vendor-tool parsers on every real fixture in ../shared/fixtures, plus synthetic variants derived from
them here (labelled synthetic): each health level, a missing card, truncated output, layout variants
(a '-' power cell, tighter spacing, two chips per NPU with a Phy-ID column) and garbage."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hetsched.agents import cnmon, npu_smi
from hetsched.agents.tables import ToolOutputError

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
if not FIXTURES.is_dir():
    pytest.skip(f"vendor-tool fixtures not found at {FIXTURES} (../shared/fixtures); parser tests skipped",
                allow_module_level=True)

NPU_SMI = {"ascend-910b3-8chip.txt": (8, "910B3", 65536), "ascend-910prob-8chip.txt": (8, "910ProB", 32768),
           "ascend-310p3-2chip.txt": (2, "310P3", 21534)}
CNMON = {"mlu370-x4-cnmon-v5.10.10.txt": (2, True), "mlu370-x4-cnmon-v4.20.11.txt": (3, False)}


def read(kind: str, name: str) -> str:
    return (FIXTURES / kind / name).read_text(encoding="utf-8")


def test_every_fixture_file_is_covered() -> None:
    assert {p.name for p in (FIXTURES / "npu-smi").glob("*.txt")} == set(NPU_SMI)
    assert {p.name for p in (FIXTURES / "cnmon").glob("*.txt")} == set(CNMON)


@pytest.mark.parametrize("name", sorted(NPU_SMI))
def test_npu_smi_fixtures(name: str) -> None:
    count, model, memory = NPU_SMI[name]
    chips = npu_smi.parse(read("npu-smi", name))
    assert [c.id for c in chips] == list(range(count))
    assert {c.model for c in chips} == {model} and {c.memory_mib for c in chips} == {memory}
    assert all(c.level == "OK" and c.healthy for c in chips)
    assert all(re.fullmatch(r"0000:[0-9A-F]{2}:00\.0", c.bus_id) for c in chips)
    assert len({c.bus_id for c in chips}) == count


@pytest.mark.parametrize("name", sorted(CNMON))
def test_cnmon_fixtures(name: str) -> None:
    count, has_bus = CNMON[name]
    chips = cnmon.parse(read("cnmon", name))
    assert [c.id for c in chips] == list(range(count))
    assert {c.model for c in chips} == {"MLU370-X4"} and {c.memory_mib for c in chips} == {23308}
    assert all(c.healthy for c in chips)
    assert all(bool(c.bus_id) == has_bus for c in chips)


def _health(text: str, npu: int, level: str) -> str:
    """Synthetic: NPU ``npu``'s health cell reads ``level`` (same cell width)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = line.split("|")
        if len(cells) > 3 and cells[1].split()[:1] == [str(npu)] and cells[2].strip() == "OK":
            cells[2] = cells[2].replace("OK", level.ljust(2), 1)
            if len(cells[2]) > len(line.split("|")[2]):
                cells[2] = cells[2][:len(line.split("|")[2])]
            lines[i] = "|".join(cells)
            return "\n".join(lines)
    raise AssertionError(f"NPU {npu} not found")


@pytest.mark.parametrize(("level", "healthy"), [("Warning", True), ("Alarm", False), ("Critical", False),
                                                ("UNKNOWN", False)])
@pytest.mark.parametrize("name", sorted(NPU_SMI))
def test_npu_smi_health_levels_synthetic(name: str, level: str, healthy: bool) -> None:
    chips = npu_smi.parse(_health(read("npu-smi", name), 1, level))
    assert chips[1].level == level and chips[1].healthy is healthy
    assert all(c.level == "OK" for c in chips if c.id != 1)


def test_npu_smi_missing_card_synthetic() -> None:
    """Synthetic: NPU 3's two rows gone (a card the driver no longer sees) — the others keep their ids."""
    lines = read("npu-smi", "ascend-910b3-8chip.txt").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| 3 "))
    del lines[start:start + 3]
    chips = npu_smi.parse("\n".join(lines))
    assert [c.id for c in chips] == [0, 1, 2, 4, 5, 6, 7]


def test_npu_smi_truncated_output_names_the_line() -> None:
    lines = read("npu-smi", "ascend-910b3-8chip.txt").splitlines()
    cut = next(i for i, line in enumerate(lines) if line.startswith("| 7 "))
    with pytest.raises(ToolOutputError, match=rf"npu-smi info: line {cut + 1}: NPU row without its chip row"):
        npu_smi.parse("\n".join(lines[:cut + 1]))


def test_npu_smi_layout_variants_synthetic() -> None:
    """Synthetic, from the 910ProB file: '-' in the power cell, '26838/ 32768' spacing, and two chips per
    NPU with a Phy-ID column."""
    text = read("npu-smi", "ascend-910prob-8chip.txt")
    text = text.replace("| 78.0        38 ", "| -           38 ", 1).replace("18   / 32768", "18/ 32768   ", 1)
    chips = npu_smi.parse(text)
    assert len(chips) == 8 and chips[0].memory_mib == 32768
    duo = """
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)                       |
+===========================+===============+====================================================+
| 0     310P3               | OK            | NA          44                0    / 0             |
| 0     0                   | 0000:01:00.0  | 0           1524 / 44280                           |
| 1     1                   | 0000:01:00.0  | 0           1270 / 43693                           |
+===========================+===============+====================================================+
| 1     310P3               | Alarm         | NA          45                0    / 0             |
| 0     2                   | 0000:02:00.0  | 0           1500 / 44280                           |
| 1     3                   | 0000:02:00.0  | 0           1262 / 43693                           |
+===========================+===============+====================================================+
"""
    chips = npu_smi.parse(duo)
    assert [(c.id, c.card, c.memory_mib, c.healthy) for c in chips] == [
        (0, 0, 44280, True), (1, 0, 43693, True), (2, 1, 44280, False), (3, 1, 43693, False)]


@pytest.mark.parametrize(("text", "message"), [
    ("", "no 'NPU  Name | Health' header"),
    ("command not found: npu-smi\n", "no 'NPU  Name | Health' header"),
    ("+---+\n| NPU   Name | Health |\n| Chip | Bus-Id |\n+===+\n", "followed by no NPU row"),
    ("\x00\x01garbage|||\n| NPU Name | Health | x |\n| Chip | Bus-Id | y |\n| zz  910B | OK | 1 |\n"
     "| 0 | 0000:01:00.0 | 0 1 / 2 |\n", "line 4: the NPU id should be a number"),
])
def test_npu_smi_garbage_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ToolOutputError, match=re.escape(message)):
        npu_smi.parse(text)


def test_cnmon_health_and_damage_synthetic() -> None:
    v5 = read("cnmon", "mlu370-x4-cnmon-v5.10.10.txt")
    ecc = v5.replace("| 0%                N/A |", "| 0%                 12 |", 1)
    chips = cnmon.parse(ecc)
    assert (chips[0].level, chips[0].healthy, chips[0].reason) == ("Alarm", False, "12 ECC errors")
    v4 = read("cnmon", "mlu370-x4-cnmon-v4.20.11.txt")
    off = v4.replace("| On          v4.20.11 |", "| Off         v4.20.11 |", 1)
    assert cnmon.parse(off)[0].level == "UNKNOWN" and not cnmon.parse(off)[0].healthy
    lines = v4.splitlines()
    missing = "\n".join(line for i, line in enumerate(lines) if not (8 <= i <= 10))  # card 1's rows and rule
    assert [c.id for c in cnmon.parse(missing)] == [0, 2]
    card_row = next(i for i, line in enumerate(lines) if line.startswith("| 2 "))
    with pytest.raises(ToolOutputError, match=rf"cnmon: line {card_row + 1}: card row without its second row"):
        cnmon.parse("\n".join(lines[:card_row + 1]))
    with pytest.raises(ToolOutputError, match="no 'Card  VF  Name' header"):
        cnmon.parse("cnmon: error while loading shared libraries\n")


@pytest.mark.parametrize(("vendor", "kind", "name"), [("ascend", "npu-smi", n) for n in sorted(NPU_SMI)]
                         + [("cambricon", "cnmon", n) for n in sorted(CNMON)])
def test_devices_parse_cli(vendor: str, kind: str, name: str, tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "devices", "parse", "--vendor", vendor,
                          str(FIXTURES / kind / name), "--json"], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    chips = json.loads(run.stdout)["chips"]
    assert chips and all({"id", "model", "health", "memoryMiB", "busId"} <= set(c) for c in chips)
    bad = tmp_path / "garbage.txt"
    bad.write_text("Segmentation fault (core dumped)\n")
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "devices", "parse", "--vendor", vendor,
                          str(bad), "--json"], capture_output=True, text=True, check=False)
    assert run.returncode == 2 and "garbage.txt" in run.stderr and "header" in run.stderr


def test_spod_info_reads_the_supernode_and_refuses_garbage() -> None:
    """``npu-smi info -t spod-info`` (A3): pod id 0 is a real supernode, a negative one is none."""
    text = "        SDID                           : 16777216\n        Super Pod Size                 : 384\n" \
           "        Super Pod ID                   : 0\n        Server Index                   : 4\n"
    assert npu_smi.parse_spod_info(text) == npu_smi.SuperPod(0, 4, 384)
    assert npu_smi.parse_spod_info("Super Pod ID : -2\n") is None
    for bad, message in (("SDID : 1\n", "no 'Super Pod ID' line"),
                         ("Super Pod ID : 1e3\n", "line 1: Super Pod ID should be an integer, got '1e3'"),
                         ("Super Pod ID : 1\nSuper Pod ID : 2\n", "line 2: Super Pod ID given twice (1 and 2)"),
                         ("Super Pod ID : " + "9" * 5000 + "\n", "should be an integer"),
                         ("x\n" * 300 + "Super Pod ID : 1\n", "no 'Super Pod ID' line")):
        with pytest.raises(ToolOutputError, match=re.escape(message)):
            npu_smi.parse_spod_info(bad)


A3 = Path(__file__).resolve().parent / "fixtures" / "npu-smi" / "ascend-a3-910c-16chip.txt"


def test_npu_smi_atlas_a3_reads_each_chip_from_its_own_block_synthetic() -> None:
    """Atlas A3 (synthetic, in the documented layout): every NPU id printed twice, once per chip; 16 chips,
    device ids 0–15 from Phy-ID, two per card; a chip's health is its own block's (chip 9's Alarm does not
    spread to chip 8 of the same card)."""
    text = A3.read_text(encoding="utf-8")
    chips = npu_smi.parse(text)
    assert [(c.id, c.card) for c in chips] == [(i, i // 2) for i in range(16)]
    assert all(c.healthy and c.memory_mib == 65536 and c.model == "Ascend910" for c in chips)
    lines = text.splitlines()
    npu4 = [i for i, line in enumerate(lines) if line.startswith("| 4       Ascend910")]
    lines[npu4[1]] = lines[npu4[1]].replace("| OK   ", "| Alarm", 1)
    alarmed = npu_smi.parse("\n".join(lines))
    assert [c.id for c in alarmed if not c.healthy] == [9] and alarmed[8].healthy
    # the header may spell the column Phy-Id (seen in newer npu-smi)
    assert [c.id for c in npu_smi.parse(text.replace("Phy-ID  ", "Phy-Id  "))] == list(range(16))


def test_npu_smi_atlas_a3_refuses_a_lost_npu_row_synthetic() -> None:
    """An A3 block whose NPU row is lost (with or without the rule above it) is refused: chip 9 never
    inherits chip 8's health."""
    lines = A3.read_text(encoding="utf-8").splitlines()
    second = [i for i, line in enumerate(lines) if line.startswith("| 4       Ascend910")][1]
    with pytest.raises(ToolOutputError, match=rf"line {second + 1}: a chip row opens a block"):
        npu_smi.parse("\n".join(lines[:second] + lines[second + 1:]))
    with pytest.raises(ToolOutputError, match=rf"line {second}: NPU 4 prints one chip per block"):
        npu_smi.parse("\n".join(lines[:second - 1] + lines[second + 1:]))
    with pytest.raises(ToolOutputError, match="NPU 4 chip '1' appears twice"):  # a block printed twice
        npu_smi.parse("\n".join(lines[:second + 3] + lines[second:second + 3] + lines[second + 3:]))
