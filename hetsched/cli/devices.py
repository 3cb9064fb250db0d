"""``hetsched devices …``: look at what a node's vendor tools report, the way the node agent reads them.

Who calls it: operators and the tests. ``devices parse`` reads a saved tool output (``npu-smi info`` or
``cnmon``) and prints the chips the agent would see, or exits 2 with the tool, line and problem.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.table import Table

from hetsched.agents import cnmon, npu_smi
from hetsched.agents.tables import ToolOutputError
from hetsched.api.yamlsafe import read_text
from hetsched.cli.output import say, stderr_console, stdout_console

devices_app = typer.Typer(no_args_is_help=True, help="Inspect accelerator tools' output as the node agent reads it.")
console = stdout_console()
errors = stderr_console()
PARSERS = {"ascend": npu_smi.parse, "cambricon": cnmon.parse}

MAX_TOOL_OUTPUT = 16 * 2**20
"""Bytes of saved tool output `devices parse` reads (a 16-chip server prints a few KB)."""


@devices_app.command("parse")
def parse(
    file: Annotated[Path, typer.Argument(help="saved output of `npu-smi info` (ascend) or `cnmon` (cambricon)")],
    vendor: Annotated[Literal["ascend", "cambricon"], typer.Option(help="which tool printed it")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Print the chips found in FILE (id, model, health, memory, bus id); exit 2 on unreadable output."""
    try:
        text = read_text(file, MAX_TOOL_OUTPUT, errors="replace")
        chips = PARSERS[vendor](text)
    except (OSError, ToolOutputError) as exc:
        say(errors, "error", f"{file}: {exc}")
        raise typer.Exit(2) from None
    if as_json:
        print(json.dumps({"vendor": vendor, "file": str(file), "chips": [c.to_json() for c in chips]}, indent=1))
        return
    table = Table(title=f"{len(chips)} chip(s) in {file}")
    for column in ("id", "model", "health", "level", "memory MiB", "bus id", "card", "reason"):
        table.add_column(column)
    for chip in chips:
        data = chip.to_json()
        table.add_row(str(chip.id), chip.model, data["health"], chip.level, str(chip.memory_mib), chip.bus_id,
                      str(chip.card), chip.reason)
    console.print(table)
