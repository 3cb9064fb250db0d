"""Volcano's scheduling annotations hetsched reads, parsed in one place and checked where manifests are read.

Who calls it: ``api.manifest.parse_document`` (so ``hetsched validate`` and the admission webhook name the
object and the field of a bad value), the job controller (it hands a Job's cooldown to its pods, as
Volcano's does) and the ``sla`` and ``cdp`` plugins (they read the values).

- ``volcano.sh/sla-waiting-time``, and the older ``sla-waiting-time`` (a Job's, on its PodGroup): how long
  the job may wait before the ``sla`` plugin admits it and holds resources for it — a Go duration > 0;
- ``volcano.sh/cooldown-time`` (a pod's label, else annotation; a Job's annotation is handed to its pods):
  how long after it starts the ``cdp`` plugin keeps the pod from being a victim — a Go duration.

Volcano logs a bad value and ignores it; hetsched refuses it at admission and in ``validate``, and the
plugins treat a value that got past both (written around the webhook) as absent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hetsched.api.annotations import go_duration

SLA_WAITING_TIME = "volcano.sh/sla-waiting-time"
SLA_WAITING_TIME_OLD = "sla-waiting-time"
"""The key Volcano's scheduler reads when the ``volcano.sh/`` one is absent (its design document's spelling)."""
COOLDOWN_TIME = "volcano.sh/cooldown-time"


def sla_waiting_time(annotations: Mapping[str, str]) -> float | None:
    """Seconds the job may wait (``volcano.sh/sla-waiting-time``, else ``sla-waiting-time``); None when
    absent; ValueError when set and not a positive duration."""
    for key in (SLA_WAITING_TIME, SLA_WAITING_TIME_OLD):
        if key in annotations:
            value = go_duration(annotations[key])
            if value <= 0:
                raise ValueError(f"must be a duration above 0, got {annotations[key][:80]!r}")
            return value
    return None


def cooldown_time(labels: Mapping[str, str], annotations: Mapping[str, str]) -> float | None:
    """Seconds a pod is protected after it starts (the label, else the annotation); None when absent;
    ValueError when not a duration."""
    raw = labels.get(COOLDOWN_TIME, annotations.get(COOLDOWN_TIME))
    return None if raw is None else go_duration(raw)


def problems(kind: str, labels: Mapping[str, str], annotations: Mapping[str, str],
             templates: Sequence[tuple[str, Mapping[str, str], Mapping[str, str]]]) -> list[tuple[str, str]]:
    """(field, message) for each bad value: the object's own (``labels``, ``annotations``) and, for a Job,
    its task templates' (field prefix, labels, annotations)."""
    found = []
    if kind in ("Job", "PodGroup"):
        for key in (SLA_WAITING_TIME, SLA_WAITING_TIME_OLD):
            if key in annotations:
                try:
                    sla_waiting_time({key: annotations[key]})
                except ValueError as exc:
                    found.append((f'metadata.annotations["{key}"]', str(exc)))
    places = [("metadata", labels, annotations)] if kind in ("Job", "Pod") else []
    for prefix, place_labels, place_annotations in [*places, *templates]:
        for field, values in (("labels", place_labels), ("annotations", place_annotations)):
            if COOLDOWN_TIME in values:
                try:
                    go_duration(values[COOLDOWN_TIME])
                except ValueError as exc:
                    found.append((f'{prefix}.{field}["{COOLDOWN_TIME}"]', str(exc)))
    return found
