"""Ascend virtual NPUs with ``npu-smi``: list, create and destroy the vNPUs carved out of one chip.

Who calls it: the vNPU partition backend of the device plugin (``agents.deviceplugin.partitions``), with the
tool's live output (or the fake backend's emulation of it, which prints the same text); the tests with
hostile output.

Commands (Ascend's virtual-instance guide; ``-i`` is the NPU id of ``npu-smi info -l``, ``-c`` the chip's
index on that card)::

    npu-smi info -t info-vnpu -i <npu> -c <chip>
    npu-smi set -t create-vnpu -i <npu> -c <chip> -f <template> -v <vnpu id> [-g <vgroup>]
    npu-smi set -t destroy-vnpu -i <npu> -c <chip> -v <vnpu id>

``create``/``destroy`` print ``Status : OK`` and a ``Message`` line when they succeed. ``info-vnpu`` prints
the chip's free/total resources, ``Total number of vnpu: N`` and an ``N``-row table
``Vnpu ID | Vgroup ID | Container ID | Status | Template Name``. A vNPU's id is in ``[100 + 16·phy,
100 + 16·phy + 7]`` on a 310P (``+ 15`` on a 910), phy being the chip's device id; its device node is
``/dev/vdavinci<vnpu id>``, mounted into a container as ``/dev/davinci<vnpu id>``.

Bad output is a :class:`~hetsched.agents.tables.ToolOutputError` naming the line: no ``Total number`` line,
a count that is not a small number, fewer or more rows than it says (truncated or garbled), a missing
header, an id or status that is not ASCII digits, an id outside the chip's range, a template that is not a
template name, an id listed twice; a ``create``/``destroy`` answer without ``Status : OK``. Nothing is ever
inferred from a partial table: the caller treats the chip's partitions as unknown (Unhealthy).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hetsched.agents.tables import ToolOutputError
from hetsched.agents.tools import DEFAULT_TIMEOUT, run_tool

TOOL = "npu-smi info -t info-vnpu"
BASE = 100
STRIDE = 16
_DIGITS = re.compile(r"[0-9]{1,10}")
_TEMPLATE = re.compile(r"vir[0-9]{2}(_[0-9a-z]{1,8}){0,3}")
_CONTAINER = re.compile(r"[0-9A-Za-z]{1,64}")
_TOTAL = re.compile(r"^\s*Total number of vnpu\s*:\s*(\S*)\s*$", re.IGNORECASE)
MAX_VNPUS = 16


@dataclass(frozen=True)
class VNpu:
    id: int
    vgroup: int
    container: str
    status: int
    template: str


def id_range(phy: int, per_chip: int = 8) -> range:
    """The vNPU ids a chip of device id ``phy`` may hold (``per_chip``: 8 on a 310P, 16 on a 910)."""
    return range(BASE + STRIDE * phy, BASE + STRIDE * phy + per_chip)


def _int(value: str, line: int, what: str) -> int:
    text = value.strip()
    if not _DIGITS.fullmatch(text):
        raise ToolOutputError(f"{TOOL}: line {line}: {what} should be a number, got {text[:40]!r}")
    return int(text)


def parse_info(text: str, phy: int | None = None, per_chip: int = 8) -> list[VNpu]:
    """The vNPUs ``npu-smi info -t info-vnpu`` lists (with ``phy``: each id checked to be that chip's)."""
    lines = text.splitlines()
    total_at = next((i for i, line in enumerate(lines) if _TOTAL.match(line)), None)
    if total_at is None:
        raise ToolOutputError(f"{TOOL}: no 'Total number of vnpu' line (not info-vnpu output, or cut short)")
    match = _TOTAL.match(lines[total_at])
    assert match is not None
    count = _int(match.group(1), total_at + 1, "the number of vNPUs")
    if count > MAX_VNPUS:
        raise ToolOutputError(f"{TOOL}: line {total_at + 1}: {count} vNPUs on one chip (at most {MAX_VNPUS})")
    rest = [(i + 1, line) for i, line in enumerate(lines[total_at + 1:], start=total_at + 1) if line.strip()]
    if count == 0:
        return []
    if not rest or "vnpu id" not in rest[0][1].lower() or "template" not in rest[0][1].lower():
        raise ToolOutputError(f"{TOOL}: line {total_at + 2}: the 'Vnpu ID | … | Template Name' header is missing")
    rows = [(number, line) for number, line in rest[1:] if "|" in line]
    if len(rows) != count:
        raise ToolOutputError(f"{TOOL}: {len(rows)} vNPU row(s) where the output says {count} (truncated or garbled)")
    allowed = id_range(phy, per_chip) if phy is not None else None
    found: list[VNpu] = []
    for number, line in rows:
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) != 5:
            raise ToolOutputError(f"{TOOL}: line {number}: {len(cells)} cell(s) where a vNPU row has 5")
        vnpu = _int(cells[0], number, "Vnpu ID")
        if allowed is not None and vnpu not in allowed:
            raise ToolOutputError(f"{TOOL}: line {number}: vNPU {vnpu} is not one of chip {phy}'s "
                                  f"({allowed.start}–{allowed.stop - 1})")
        if not _CONTAINER.fullmatch(cells[2]):
            raise ToolOutputError(f"{TOOL}: line {number}: Container ID {cells[2][:40]!r} is not an id")
        if not _TEMPLATE.fullmatch(cells[4]):
            raise ToolOutputError(f"{TOOL}: line {number}: Template Name {cells[4][:40]!r} is not a template")
        found.append(VNpu(vnpu, _int(cells[1], number, "Vgroup ID"), cells[2], _int(cells[3], number, "Status"),
                          cells[4]))
    if len({v.id for v in found}) != len(found):
        raise ToolOutputError(f"{TOOL}: a vNPU id is listed twice")
    return found


def check_status(text: str, tool: str) -> str:
    """The ``Message`` of a ``create-vnpu``/``destroy-vnpu`` answer that says ``Status : OK``; else a
    :class:`ToolOutputError` with what the tool said."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    if fields.get("status", "").upper() != "OK":
        said = fields.get("message") or fields.get("status") or text.strip()[:120]
        raise ToolOutputError(f"{tool}: did not succeed: {said[:200]!r}")
    return fields.get("message", "")


Runner = Callable[[Sequence[str], float], str]


class VnpuTool:
    """``npu-smi``'s vNPU commands, run with fixed argument lists (``agents.tools.run_tool``)."""

    def __init__(self, run: Runner = run_tool, timeout: float = DEFAULT_TIMEOUT, binary: str = "npu-smi") -> None:
        self.run = run
        self.timeout = timeout
        self.binary = binary

    def list(self, card: int, chip: int, phy: int, per_chip: int = 8) -> list[VNpu]:
        text = self.run([self.binary, "info", "-t", "info-vnpu", "-i", str(card), "-c", str(chip)], self.timeout)
        return parse_info(text, phy, per_chip)

    def create(self, card: int, chip: int, template: str, vnpu: int, vgroup: int | None = None) -> None:
        if not _TEMPLATE.fullmatch(template):
            raise ValueError(f"{template[:40]!r} is not a vNPU template name")
        argv = [self.binary, "set", "-t", "create-vnpu", "-i", str(card), "-c", str(chip), "-f", template,
                "-v", str(vnpu)]
        if vgroup is not None:
            argv += ["-g", str(vgroup)]
        check_status(self.run(argv, self.timeout), "npu-smi set -t create-vnpu")

    def destroy(self, card: int, chip: int, vnpu: int) -> None:
        check_status(self.run([self.binary, "set", "-t", "destroy-vnpu", "-i", str(card), "-c", str(chip),
                               "-v", str(vnpu)], self.timeout), "npu-smi set -t destroy-vnpu")
