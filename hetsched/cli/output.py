"""The consoles the commands print to, and how they say an error.

Who calls it: every CLI module (``cli.main``, ``cli.doctor``, ``cli.devices``, ``cli.agents``,
``cli.install``).

- Markup is off on every console: names, reasons and tool output are user text, and ``[/x]`` in a Job's
  name must print as itself, not crash rich's markup parser or vanish (styles go through ``Text``).
- Tables get the terminal's width on a terminal, and are never cut when stdout is a pipe or a file (rich
  would assume 80 columns and truncate cells with "…").
"""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.text import Text

PIPE_WIDTH = 400
"""Columns when stdout is not a terminal (and ``COLUMNS`` is not set): tables keep their natural width."""


def stdout_console() -> Console:
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console(markup=False)
    return Console(width=PIPE_WIDTH, markup=False)


def stderr_console() -> Console:
    return Console(stderr=True, markup=False)


STYLES = {"error": "red", "warning": "yellow", "stuck": "red"}


def say(console: Console, level: str, message: object) -> None:
    """``error: <message>`` (or warning, …) with the level styled and the message printed as plain text."""
    console.print(Text.assemble((f"{level}: ", STYLES.get(level, "")), str(message)), highlight=False,
                  soft_wrap=True)
