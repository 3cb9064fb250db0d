"""How the long-running processes log: a level and a format, the same flags on each.

Who calls it: ``cli.serve`` (scheduler, controller, webhook) and ``cli.agents`` (node agent, device plugin),
first thing. ``--log-level`` (``HETSCHED_LOG_LEVEL``: debug, info, warning, error) and ``--log-format``
(``HETSCHED_LOG_FORMAT``): ``text`` (time, logger, level, message) or ``json`` — one object per line with
``time`` (RFC 3339, UTC), ``level``, ``logger``, ``message`` and, for a record logged with ``extra=``, its
fields — for log collectors. A message is user text (names, reasons): JSON escapes it, so a newline or a
quote in a Job's name never splits or forges a line.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Annotated, Any

import typer

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
"""The attributes every record has; any other attribute came from ``extra=`` and is written as a field."""

LogLevel = Annotated[str, typer.Option(envvar="HETSCHED_LOG_LEVEL", help="debug, info, warning or error")]
LogFormat = Annotated[str, typer.Option(envvar="HETSCHED_LOG_FORMAT", help="text, or json (one object per line)")]


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        for key, value in record.__dict__.items():
            if key not in STANDARD and not key.startswith("_"):
                entry[key] = value if isinstance(value, str | int | float | bool) or value is None else str(value)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(level: str, fmt: str) -> None:
    """Set the root logger's level and format; a bad value is a usage error naming the option."""
    chosen = LEVELS.get(level.strip().lower())
    if chosen is None:
        raise typer.BadParameter(f"--log-level: expected one of {', '.join(LEVELS)}, got {level[:40]!r}")
    kind = fmt.strip().lower()
    if kind not in ("text", "json"):
        raise typer.BadParameter(f"--log-format: expected text or json, got {fmt[:40]!r}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if kind == "json" else
                         logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(chosen)
