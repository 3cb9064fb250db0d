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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
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


@contextmanager
def writing(path: Path, what: str) -> Iterator[None]:
    """Around writing an output file, its folder made when missing (``--json bench/out/x.json`` on a fresh
    checkout): an ``OSError`` (a full device, a file where a folder should be, no permission) is ``error:
    cannot write the <what> to <path>: <reason>`` and exit 2, never a traceback."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # a folder not made yet is made, as users expect
        yield
    except OSError as exc:
        say(stderr_console(), "error", f"cannot write the {what} to {path}: {exc.strerror or exc}")
        raise typer.Exit(2) from None


def write_file(path: Path, text: str, what: str) -> None:
    """``text`` to ``path`` (UTF-8), as :func:`writing` says."""
    with writing(path, what):
        path.write_text(text, encoding="utf-8")
