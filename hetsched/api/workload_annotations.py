"""The annotations that drive a simulation, checked where every manifest is read.

Who calls it: ``api.manifest.parse_document`` (so ``hetsched validate`` names the file, document and field
of a bad value), and the simulator (``sim.simulator``, ``sim.kubelet``) for objects built in code.

- ``hetsched.io/submit-at`` (any object): seconds after the start when it is created;
- ``hetsched.io/duration`` and ``hetsched.io/checkpoint-interval`` (a pod, or a Job's task template):
  seconds; both finite, ≥ 0 and at most ``MAX_SECONDS`` (a year: beyond it a run would never end);
- ``hetsched.io/exit-code``: exit codes 0–255, comma-separated, one per attempt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hetsched.api.annotations import MAX_SECONDS, seconds

__all__ = ["CHECKPOINT_INTERVAL", "DURATION", "EXIT_CODE", "MAX_SECONDS", "SUBMIT_AT", "exit_codes", "problems",
           "seconds"]

SUBMIT_AT = "hetsched.io/submit-at"
DURATION = "hetsched.io/duration"
CHECKPOINT_INTERVAL = "hetsched.io/checkpoint-interval"
EXIT_CODE = "hetsched.io/exit-code"


def exit_codes(raw: str, where: str) -> list[int]:
    """Parse ``hetsched.io/exit-code``; a ValueError names ``where`` and the annotation."""
    parts = raw.split(",")
    codes = [int(part) for part in parts if part.strip().isdigit() and len(part.strip()) <= 3] \
        if len(parts) <= 1000 else []
    if not codes or len(codes) != len(parts) or any(not 0 <= c <= 255 for c in codes):
        raise ValueError(f"{where}: {EXIT_CODE} must be exit codes 0–255, comma-separated, got {raw[:80]!r}")
    return codes


def problems(kind: str, annotations: Mapping[str, str],
             templates: Sequence[tuple[str, Mapping[str, str]]]) -> list[tuple[str, str]]:
    """(field, message) for each bad simulation annotation of an object: its own ``submit-at`` and, for pods
    (``annotations``) or a Job's task templates (``templates``: (field prefix, annotations)), the run ones."""
    found = []
    places = [("metadata.annotations", annotations)] if kind == "Pod" else []
    places += templates
    if SUBMIT_AT in annotations:
        try:
            seconds(annotations[SUBMIT_AT])
        except ValueError as exc:
            found.append((f'metadata.annotations["{SUBMIT_AT}"]', str(exc)))
    for where, values in places:
        for name in (DURATION, CHECKPOINT_INTERVAL):
            if name in values:
                try:
                    seconds(values[name])
                except ValueError as exc:
                    found.append((f'{where}["{name}"]', str(exc)))
        if EXIT_CODE in values:
            try:
                exit_codes(values[EXIT_CODE], "")
            except ValueError:
                found.append((f'{where}["{EXIT_CODE}"]',
                              f"must be exit codes 0–255, comma-separated, got {values[EXIT_CODE][:80]!r}"))
    return found
