"""Reading the box tables vendor tools print (``npu-smi info``, ``cnmon``) by their headers, not by offsets.

Who calls it: the vendor parsers (``agents.npu_smi``, ``agents.cnmon``).

A table is a run of lines between ``+---+`` rules; cells are separated by ``|``. A header row names the
columns of each cell (``NPU   Name | Health | Power(W)   Temp(C) …``); a data row below it holds values
in the same cells. Inside a cell each value belongs to the header it overlaps most, or else the nearest
one, so left- and right-aligned columns (cnmon right-aligns some) and changed widths between driver
versions read the same. Values of several words (``3318 / 65536``, ``27 W/ 150 W``) are joined with one
space.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_WORD = re.compile(r"\S+")


class ToolOutputError(ValueError):
    """Output of a vendor tool that cannot be read; the message names the tool and the line."""


@dataclass(frozen=True)
class Row:
    number: int
    """1-based line number in the tool's output."""
    cells: list[str]
    after_rule: bool = False
    """The line just above is a ``+---+`` rule: the row opens a block (in ``npu-smi info`` an NPU row does)."""


def rows(text: str) -> list[Row]:
    """Every ``|``-delimited line as its cells (without the outer bars); rules and other lines dropped."""
    found = []
    ruled = False
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.rstrip()
        if stripped and set(stripped) <= set("|+-=: ") and ("-" in stripped or "=" in stripped):
            ruled = True
            continue
        if not stripped.startswith("|") or set(stripped) <= set("|+-=: "):
            ruled = False
            continue
        body = stripped[1:-1] if stripped.endswith("|") else stripped[1:]
        found.append(Row(number, body.split("|"), ruled))
        ruled = False
    return found


def _spans(cell: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group()) for m in _WORD.finditer(cell)]


def columns(header: list[str], data: list[str]) -> dict[str, str]:
    """Values of a data row under a header row with the same number of cells: header name → value."""
    values: dict[str, list[str]] = {}
    for head, cell in zip(header, data, strict=False):
        names = _spans(head)
        if not names:
            continue
        for start, end, word in _spans(cell):
            def fit(name: tuple[int, int, str], start: int = start, end: int = end) -> tuple[int, int]:
                overlap = min(end, name[1]) - max(start, name[0])
                gap = max(name[0] - end, start - name[1], 0)
                return (-overlap, gap) if overlap > 0 else (1, gap)
            best = min(names, key=fit)
            values.setdefault(best[2], []).append(word)
    return {name: " ".join(words) for name, words in values.items()}


def number(value: str | None, tool: str, row: Row, what: str) -> float:
    """A number from a cell value, or a :class:`ToolOutputError` naming the tool, line and column."""
    try:
        return float(value) if value is not None else float("nan")
    except ValueError:
        raise ToolOutputError(f"{tool}: line {row.number}: {what} is not a number: {value!r}") from None


def used_total(value: str | None, tool: str, row: Row, what: str) -> tuple[float, float]:
    """``"3318 / 65536"`` or ``"0 MiB/ 23308 MiB"`` → (used, total)."""
    numbers = re.findall(r"\d+(?:\.\d+)?", value or "")
    if len(numbers) != 2:
        raise ToolOutputError(f"{tool}: line {row.number}: {what} should read 'used / total', got {value!r}")
    return float(numbers[0]), float(numbers[1])
