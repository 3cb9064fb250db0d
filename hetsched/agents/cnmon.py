"""Parse ``cnmon`` (Cambricon MLU) into chips, by column headers.

Who calls it: the Cambricon backend (``agents.backends``) with the tool's live output, and
``hetsched devices parse --vendor cambricon FILE``.

Layouts handled: CNMON v4 (``Inited  Driver`` and ``vMemory-Usage`` columns, no bus id) and v5 (``Bus-Id``,
``SR-IOV  Compute-Mode``); columns are found by name, and cnmon's right-aligned cells read the same as
left-aligned ones. Each card is two rows (name, firmware, …; then fan, temperature, power, memory). Health:
a non-zero ``Ecc-Error`` count is Alarm (the chip is unhealthy, the count is the reason), a card whose
``Inited`` reads anything but On is UNKNOWN; otherwise OK. The process table is ignored.

Bad output is a :class:`~hetsched.agents.tables.ToolOutputError` naming the line.
"""

from __future__ import annotations

from hetsched.agents.chips import Level, ToolChip
from hetsched.agents.tables import Row, ToolOutputError, columns, rows, used_total

TOOL = "cnmon"


def parse(text: str) -> list[ToolChip]:
    table = rows(text)
    header = next((i for i, r in enumerate(table) if "Card" in r.cells[0] and "Name" in r.cells[0]), None)
    if header is None or header + 1 >= len(table):
        raise ToolOutputError(f"{TOOL}: line 1: no 'Card  VF  Name' header; is this cnmon output?")
    card_head, detail_head = table[header].cells, table[header + 1].cells
    if "Memory-Usage" not in "|".join(detail_head):
        raise ToolOutputError(f"{TOOL}: line {table[header + 1].number}: expected the 'Fan  Temp … Memory-Usage' "
                              f"header under the card header")
    result: list[ToolChip] = []
    pending: tuple[Row, dict[str, str]] | None = None
    for row in table[header + 2:]:
        joined = "|".join(row.cells)
        if "Processes" in joined or "PID" in joined:
            break
        if len(row.cells) != len(card_head):
            continue
        if pending is None:
            values = columns(card_head, row.cells)
            if not (values.get("Card") or "").isdigit():
                raise ToolOutputError(f"{TOOL}: line {row.number}: expected a card row, got {joined.strip()!r}")
            pending = (row, values)
            continue
        card_row, card = pending
        pending = None
        detail = columns(detail_head, row.cells)
        _, total = used_total(detail.get("Memory-Usage"), TOOL, row, "Memory-Usage")
        level: Level = "OK"
        reason = ""
        ecc = (card.get("Ecc-Error") or "N/A").strip()
        if ecc not in ("N/A", "0"):
            if not ecc.isdigit():
                raise ToolOutputError(f"{TOOL}: line {card_row.number}: Ecc-Error should be a count or N/A, "
                                      f"got {ecc!r}")
            level, reason = "Alarm", f"{ecc} ECC errors"
        inited = card.get("Inited")
        if inited is not None and inited.strip() != "On":
            level, reason = "UNKNOWN", f"card not initialised (Inited {inited.strip()})"
        result.append(ToolChip(id=int(card["Card"]), model=card.get("Name", ""), level=level,
                               memory_mib=int(total), bus_id=card.get("Bus-Id", ""), card=int(card["Card"]),
                               reason=reason))
    if pending is not None:
        raise ToolOutputError(f"{TOOL}: line {pending[0].number}: card row without its second row (truncated "
                              f"output?)")
    if not result:
        raise ToolOutputError(f"{TOOL}: line {table[header].number}: the header is followed by no card")
    ids = [c.id for c in result]
    if len(set(ids)) != len(ids):
        raise ToolOutputError(f"{TOOL}: line {table[header].number}: card ids repeat: {ids}")
    return result
