"""Parse ``npu-smi info`` (Huawei Ascend) into chips, by column headers.

Who calls it: the Ascend backend (``agents.backends``) with the tool's live output, and
``hetsched devices parse --vendor ascend FILE``.

Layouts handled (all seen in public output): one chip per NPU (910B3, 910ProB: ``Chip | Bus-Id``), the
older 310P layout with a ``Device`` column and no HBM column, cards with several chips under one NPU row
(one ``Chip`` row each, optionally a ``Phy-ID`` column), and Atlas A3 (910C) servers, where each of the
card's two chips has its own block: the NPU row (the NPU id printed again, with that chip's own Health)
and its ``Chip Phy-ID`` row — 8 NPU ids, 16 chips, device ids 0–15. The device id is the
``Device``/``Phy-ID``/``Phy-Id`` value when the tool prints one, else the NPU id when every NPU has one
chip, else the chips' running order. Memory is
the HBM total when there is an HBM column, else the Memory-Usage total. Health levels: OK, Warning,
Alarm, Critical, UNKNOWN (anything else reads as UNKNOWN). The process table after the chips is ignored.

On an Atlas A3 server (two chips per NPU card), ``npu-smi info -t spod-info`` says which supernode the
server is in (:func:`parse_spod_info`), so the node agent can label it for HyperNode discovery.

Bad output is a :class:`~hetsched.agents.tables.ToolOutputError` naming the line: no header, an NPU row
without its chip row (truncated output), a chip row that opens a block (its NPU row is missing), a row
with neither a Health nor a Bus-Id, a cell that should be a number (ASCII digits: a '٣' is garbage), one
NPU's chip index twice (a duplicated row, or a missing NPU row), an NPU id printed again by a layout that
prints one chip per block while one of its NPU rows holds several chips (an NPU row is missing), repeated
device ids, a bus id under two NPUs (a duplicated or garbled row), or no NPU at all. Invariant: a chip's
health comes from its own NPU row, never from a neighbour's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hetsched.agents.chips import LEVELS, Level, ToolChip
from hetsched.agents.tables import Row, ToolOutputError, columns, rows, used_total

TOOL = "npu-smi info"
_BUS = re.compile(r"^\s*[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\s*$")


def _level(raw: str) -> Level:
    for level in LEVELS:
        if raw.strip().lower() == level.lower():
            return level
    return "UNKNOWN"


_DIGITS = re.compile(r"[0-9]{1,9}")


def _int(value: str | None, row: Row, what: str) -> int:
    """An id: ASCII digits only (a '٣' or '²' that ``str.isdigit`` accepts is garbage here), short."""
    if value is None or not _DIGITS.fullmatch(value.strip()):
        raise ToolOutputError(f"{TOOL}: line {row.number}: {what} should be a number, got {value[:40]!r}"
                              if value is not None else f"{TOOL}: line {row.number}: {what} is missing")
    return int(value.strip())


def _column(values: dict[str, str], *names: str) -> str:
    """The value under the first of ``names`` present, header case ignored (``Phy-ID`` and ``Phy-Id`` are both
    printed); '' when none is."""
    folded = {key.lower(): value for key, value in values.items()}
    return next((folded[name.lower()] for name in names if name.lower() in folded), "")


def parse(text: str) -> list[ToolChip]:
    table = rows(text)
    header = next((i for i, r in enumerate(table) if "Health" in r.cells[1 if len(r.cells) > 1 else 0]
                   and "NPU" in r.cells[0]), None)
    if header is None or header + 1 >= len(table):
        raise ToolOutputError(f"{TOOL}: line 1: no 'NPU  Name | Health' header; is this npu-smi info output?")
    npu_head, chip_head = table[header].cells, table[header + 1].cells
    if len(table[header + 1].cells) < 2 or "Bus-Id" not in table[header + 1].cells[1]:
        raise ToolOutputError(f"{TOOL}: line {table[header + 1].number}: expected the 'Chip | Bus-Id' header "
                              f"under the NPU header")
    found: list[tuple[Row, dict[str, str], list[tuple[Row, dict[str, str]]]]] = []
    for row in table[header + 2:]:
        text_row = "|".join(row.cells)
        if "Process" in text_row and ("id" in text_row or "name" in text_row):
            break  # the process table
        if len(row.cells) < 2:
            continue
        if _BUS.match(row.cells[1]):
            if not found:
                raise ToolOutputError(f"{TOOL}: line {row.number}: a chip row before any NPU row")
            if row.after_rule:  # every layout opens a block with its NPU row
                raise ToolOutputError(f"{TOOL}: line {row.number}: a chip row opens a block (its NPU row is "
                                      f"missing?)")
            found[-1][2].append((row, columns(chip_head, row.cells)))
        elif row.cells[1].strip():
            found.append((row, columns(npu_head, row.cells), []))
        elif row.cells[0].strip():  # an NPU row without its Health: never skip it (its chip would inherit)
            raise ToolOutputError(f"{TOOL}: line {row.number}: a row with neither a Health nor a Bus-Id cell")
    if not found:
        raise ToolOutputError(f"{TOOL}: line {table[header].number}: the header is followed by no NPU row")
    cards = [_int(npu.get("NPU"), row, "the NPU id") for row, npu, _ in found]
    per_block = len(set(cards)) != len(cards)  # Atlas A3: each chip its own block, its NPU id printed again
    seen: dict[tuple[int, str], int] = {}
    for card, (_, _, chips) in zip(cards, found, strict=True):  # never another NPU row's health
        if per_block and len(chips) > 1:
            raise ToolOutputError(f"{TOOL}: line {chips[1][0].number}: NPU {card} prints one chip per block, but "
                                  f"this chip row follows another (its NPU row is missing?)")
        for chip_row, chip in chips:
            index = _column(chip, "Chip").strip()
            if (card, index) in seen:
                raise ToolOutputError(f"{TOOL}: line {chip_row.number}: NPU {card} chip {index!r} appears twice "
                                      f"(first at line {seen[card, index]}: a duplicated row, or an NPU row is "
                                      f"missing?)")
            seen[card, index] = chip_row.number
    one_each = not per_block and all(len(chips) == 1 for _, _, chips in found)
    result: list[ToolChip] = []
    for npu_row, npu, chips in found:
        if not chips:
            raise ToolOutputError(f"{TOOL}: line {npu_row.number}: NPU row without its chip row (truncated output?)")
        card = _int(npu.get("NPU"), npu_row, "the NPU id")
        for chip_row, chip in chips:
            device = _column(chip, "Device", "Phy-ID") or None
            if device is not None:
                chip_id = _int(device, chip_row, "the device id")
            else:
                chip_id = card if one_each else len(result)
            memory = chip.get("HBM-Usage(MB)") or chip.get("Memory-Usage(MB)")
            _, total = used_total(memory, TOOL, chip_row, "the memory usage")
            result.append(ToolChip(id=chip_id, model=npu.get("Name", ""), level=_level(npu.get("Health", "")),
                                   memory_mib=int(total), bus_id=chip_row.cells[1].strip(), card=card))
    ids = [c.id for c in result]
    if len(set(ids)) != len(ids):
        raise ToolOutputError(f"{TOOL}: line {found[0][0].number}: device ids repeat: {ids}")
    cards_of: dict[str, set[int]] = {}
    for found_chip in result:
        cards_of.setdefault(found_chip.bus_id, set()).add(found_chip.card)
    shared = sorted(bus for bus, owners in cards_of.items() if len(owners) > 1)
    if shared:  # chips of one card may share its PCI address (a Duo card); two cards never do
        raise ToolOutputError(f"{TOOL}: line {found[0][0].number}: bus id {shared[0]} belongs to two NPUs "
                              f"(a garbled or duplicated row)")
    return result


def parse_health(text: str) -> tuple[Level, str]:
    """``npu-smi info -t health -i <npu>``: ``Health Status : Alarm`` and ``Error Code : 80E18005 …`` lines
    → (level, error codes). A ToolOutputError when there is no health line."""
    level: Level | None = None
    codes = ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key in ("health status", "health"):
            level = _level(value)
        elif key == "error code":
            codes = " ".join(c for c in value.split() if c.upper() not in ("NA", "0"))
    if level is None:
        raise ToolOutputError(f"{TOOL} -t health: line 1: no 'Health Status' line")
    return level, codes


@dataclass(frozen=True)
class SuperPod:
    """Where an Atlas A3 server sits in its supernode (``npu-smi info -t spod-info -i <npu> -c <chip>``)."""

    superpod_id: int
    server_index: int | None
    size: int | None


_SIGNED = re.compile(r"-?[0-9]{1,10}")
SPOD_KEYS = {"super pod id": "superpod_id", "server index": "server_index", "super pod size": "size", "sdid": "sdid"}


def parse_spod_info(text: str) -> SuperPod | None:
    """``SDID : 16777216``, ``Super Pod Size : 384``, ``Super Pod ID : 0``, ``Server Index : 4`` lines → the
    server's supernode; None when the driver says it is in none (a negative id: the device-info ConfigMap's
    ``SuperPodID: -2``). Pod id 0 is a real supernode. A ToolOutputError names the line for a value that is
    not an ASCII integer, a key given twice with two values, or no ``Super Pod ID`` line."""
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines()[:200], start=1):
        key, sep, value = line.partition(":")
        field = SPOD_KEYS.get(" ".join(key.split()).lower()) if sep else None
        if field is None:
            continue
        value = value.strip()
        if not _SIGNED.fullmatch(value):
            raise ToolOutputError(f"{TOOL} -t spod-info: line {number}: {key.strip()} should be an integer, "
                                  f"got {value[:40]!r}")
        if field in seen and seen[field] != int(value):
            raise ToolOutputError(f"{TOOL} -t spod-info: line {number}: {key.strip()} given twice "
                                  f"({seen[field]} and {int(value)})")
        seen[field] = int(value)
    if "superpod_id" not in seen:
        raise ToolOutputError(f"{TOOL} -t spod-info: line 1: no 'Super Pod ID' line")
    if seen["superpod_id"] < 0:
        return None

    def known(name: str) -> int | None:
        found = seen.get(name)
        return found if found is not None and found >= 0 else None

    return SuperPod(seen["superpod_id"], known("server_index"), known("size"))


_VERSION = re.compile(r"Version:\s*([0-9][0-9A-Za-z.]{0,39})")


def parse_version(text: str) -> str:
    """The driver release in ``npu-smi info``'s header (``| npu-smi 24.1.rc1.b030  Version: 24.1.rc1.b030 |``:
    the tool ships with the driver); "" when the header does not say."""
    for line in text.splitlines()[:5]:
        found = _VERSION.search(line)
        if found:
            return found.group(1)
    return ""
