"""The console commands print tables to: the terminal's width on a terminal, wide enough never to cut a
table when stdout is a pipe or a file (rich would assume 80 columns and truncate cells with "…").

Who calls it: the CLI modules (``cli.main``, ``cli.doctor``, ``cli.devices``) for their stdout console.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

PIPE_WIDTH = 400
"""Columns when stdout is not a terminal (and ``COLUMNS`` is not set): tables keep their natural width."""


def stdout_console() -> Console:
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=PIPE_WIDTH)
