"""Health never lies (issue 17): over mutated ``npu-smi info`` outputs — a line dropped, duplicated,
truncated, or a cell replaced by garbage, on every real fixture in ../shared/fixtures — the parser either
refuses the output or reports each chip from its own rows: no chip is ever Healthy unless its own NPU row
says so (its level is exactly its own NPU row's), and no chip row inherits another NPU's health."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.agents.chips import LEVELS
from hetsched.agents.npu_smi import parse
from hetsched.agents.tables import ToolOutputError

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "npu-smi"
if not FIXTURES.is_dir():
    pytest.skip(f"vendor-tool fixtures not found at {FIXTURES} (../shared/fixtures); skipped",
                allow_module_level=True)
OUTPUTS = [*sorted(FIXTURES.glob("*.txt")),  # and the layouts documented but not in ../shared (synthetic)
           *sorted((Path(__file__).resolve().parent / "fixtures" / "npu-smi").glob("*.txt"))]
CASES = int(os.environ.get("HETSCHED_HEALTH_EXAMPLES", "300"))
GARBAGE = ["Critical", "OK", "Warning", "\u0663", "²", "9" * 30, "", "0000:C1:00.0", "|", "NaN", "-1", "ＯＫ"]
_NPU = re.compile(r"^\|\s*(\S+)[^|]*\|\s*([^|]*?)\s*\|")
_BUS = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")


@st.composite
def mutated(draw: st.DrawFn) -> str:
    lines = draw(st.sampled_from(OUTPUTS)).read_text(encoding="utf-8").splitlines()
    for _ in range(draw(st.integers(1, 3))):
        index = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["drop", "duplicate", "truncate", "garbage"]))
        if action == "drop":
            del lines[index]
        elif action == "duplicate":
            lines.insert(index, lines[index])
        elif action == "truncate":
            lines = lines[:index]
        else:
            words = list(re.finditer(r"[^\s|]+", lines[index]))
            if words:
                word = words[draw(st.integers(0, len(words) - 1))]
                lines[index] = lines[index][:word.start()] + draw(st.sampled_from(GARBAGE)) + lines[index][word.end():]
        if not lines:
            break
    return "\n".join(lines)


def own_rows(text: str) -> dict[str, tuple[str, str]]:
    """Bus id → (the NPU id and the Health cell of the NPU row just above its chip row)."""
    found: dict[str, tuple[str, str]] = {}
    npu: tuple[str, str] | None = None
    for line in text.splitlines():
        cells = line.split("|")
        bus = _BUS.fullmatch(cells[2].strip()) if len(cells) > 2 and line.startswith("|") else None
        if bus:  # a chip row: its bus id in the second cell
            if npu is not None:
                found.setdefault(bus.group(), npu)
            continue
        match = _NPU.match(line)
        if match and match.group(1).isascii() and match.group(1).isdigit():
            npu = (match.group(1), match.group(2))
    return found


@settings(max_examples=CASES)
@given(text=mutated())
def test_no_chip_is_healthy_unless_its_own_row_says_so(text: str) -> None:
    try:
        chips = parse(text)
    except ToolOutputError:
        return  # refused, with the line: the agent reports every chip Unhealthy
    rows = own_rows(text)
    for chip in chips:  # its level is what its own NPU row says (so Healthy only when that row says so)
        card, health = rows[chip.bus_id]
        assert card == str(chip.card), (chip, card)
        assert chip.level == (health if health in LEVELS else "UNKNOWN"), (chip, health)


def test_a_missing_npu_row_or_a_duplicated_block_is_refused() -> None:
    text = (FIXTURES / "ascend-910b3-8chip.txt").read_text(encoding="utf-8")
    lines = text.splitlines()
    npu1 = next(i for i, line in enumerate(lines) if line.startswith("| 1     910B3"))
    with pytest.raises(ToolOutputError, match="a chip row opens a block"):
        parse("\n".join(lines[:npu1] + lines[npu1 + 1:]))  # chip 1's row would have inherited NPU 0's OK
    with pytest.raises(ToolOutputError, match="NPU 0 chip '0' appears twice"):  # the rule above it gone too
        parse("\n".join(lines[:npu1 - 1] + lines[npu1 + 1:]))
    with pytest.raises(ToolOutputError, match="NPU 1 chip '0' appears twice"):
        parse("\n".join(lines[:npu1 + 3] + lines[npu1:npu1 + 3] + lines[npu1 + 3:]))
    with pytest.raises(ToolOutputError, match="the NPU id should be a number"):
        parse(text.replace("| 1     910B3", "| \u0663     910B3"))
