"""HyperNode ``regexMatch`` patterns, with the semantics Volcano has (Go's RE2) and in linear time.

Who calls it: ``api.objects`` (a member's pattern is checked when the HyperNode is validated: the CLI, the
webhook) and ``api.hypernodes`` (selecting the nodes a pattern names when the tree is built).

Volcano compiles these patterns with Go's ``regexp``, which is RE2: no backreferences or look-around, and a
match takes time linear in the name whatever the pattern. Python's ``re`` backtracks — ``.*.*.*…x`` or
``[a-z0-9-]*`` repeated 25 times runs for minutes on one node name while holding the GIL — so patterns are
compiled by RE2 itself (the ``google-re2`` package): a pattern Volcano refuses is refused here too, and no
accepted pattern can stall the scheduler, the controller or the webhook. A node matches when the whole
name matches (as hetsched has always read ``regexMatch``).
"""

from __future__ import annotations

from typing import Any, Protocol

import re2

MAX_PATTERN = 256
"""Characters of a member's ``regexMatch.pattern``."""
MAX_PROGRAM = 1 << 20
"""Bytes of memory RE2 may use for one compiled pattern (its default is 8 MiB; ``a{1000}{1000}`` asks more)."""


class Pattern(Protocol):
    def fullmatch(self, text: str) -> Any: ...


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # the error is ours to report, once, naming the field: not on stderr
    options.max_mem = MAX_PROGRAM
    return options


def compile_pattern(pattern: str) -> Pattern:
    """The compiled ``pattern``; a ValueError saying why RE2 refuses it."""
    if len(pattern) > MAX_PATTERN:
        raise ValueError(f"a pattern is at most {MAX_PATTERN} characters, got {len(pattern):,}")
    try:
        compiled: Pattern = re2.compile(pattern, _options())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        raise ValueError(f"not a regular expression (RE2, as Volcano reads it): {text[:200]}") from None
    return compiled
