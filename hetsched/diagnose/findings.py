"""A doctor finding (severity, object, evidence, fix) and the exit code a set of findings gives.

Who calls it: every check (``diagnose.checks``, ``agents.doctor``) and ``cli.doctor``.

Exit codes follow the monitoring-plugin convention, so ``hetsched doctor`` can run from cron or a probe:
0 nothing worse than ``info``, 1 a ``warning``, 2 an ``error``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Severity = Literal["ok", "info", "warning", "error"]
RANK: dict[str, int] = {"ok": 0, "info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class Finding:
    check: str
    """The check's name (``allocatable-matches-chips`` …)."""
    severity: Severity
    object: str
    """``Kind/name`` (``Node/ascend-03``, ``Queue/research``), or ``cluster``/``node`` for a whole."""
    evidence: str
    """What was seen, with the numbers."""
    fix: str = ""
    """What to do about it (empty for ``ok``)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def exit_code(findings: list[Finding]) -> int:
    return max((RANK[f.severity] for f in findings), default=0)


def passed(check: str, evidence: str, obj: str = "cluster") -> Finding:
    """The finding a check returns when it found nothing wrong (so the output shows it ran)."""
    return Finding(check, "ok", obj, evidence)
