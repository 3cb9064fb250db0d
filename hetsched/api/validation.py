"""Pydantic validation errors as a person reads them: ``spec.tasks[0].replicas: must not be negative, got -1``.

Who calls it: every loader that validates input with pydantic — manifests (``api.manifest``), cluster specs,
fault files, scheduler configurations, install values, device inventories, the embedded cluster's patches,
the fake device backend. One place decides how a location is written and how pydantic's messages are
reworded, so every command names the field the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError


def format_location(loc: Iterable[int | str]) -> str:
    """``('spec', 'tasks', 0, 'replicas')`` → ``spec.tasks[0].replicas``; keys with dots or slashes are quoted;
    pydantic's validator markers (``function-after[...]``) are left out."""
    out = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker for a bad mapping key: the key itself is the previous part
            out += " (key)"
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith("function-"):
            continue
        elif any(c in part for c in "./ ") or not part:
            out += f'["{part}"]'
        else:
            out += f".{part}" if out else part
    return out


def message(error: Any, *, unknown: str = "unknown field") -> str:
    """Pydantic's message for one error, reworded: no "Value error, " prefix, a missing field and an unknown
    one (``unknown``: what to call it) said plainly, the rejected value shown where pydantic omits it."""
    text = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        text = text.removeprefix(prefix)
    kind = error["type"]
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return unknown
    if kind == "literal_error":
        return f"{text}, got {error.get('input')!r}"
    if kind == "greater_than_equal" and error.get("ctx", {}).get("ge") == 0:
        return f"must not be negative, got {error.get('input')!r}"
    return text


def problems(exc: ValidationError, *, unknown: str = "unknown field") -> list[tuple[str, str]]:
    """Every error as (location, message)."""
    return [(format_location(e["loc"]), message(e, unknown=unknown)) for e in exc.errors(include_url=False)]


def first_problem(exc: ValidationError, *, unknown: str = "unknown field") -> str:
    """The first error as ``location: message`` (just the message when it is about the whole document)."""
    where, text = problems(exc, unknown=unknown)[0]
    return f"{where}: {text}" if where else text
