"""Which namespaces may submit to a queue: the ``hetsched.io/namespaces`` annotation of a Queue.

Who calls it: ``api.manifest.parse_document`` (``hetsched validate`` and the admission webhook refuse a
malformed list, naming the field), the scheduler cache (``scheduler.cache.build``: each ``QueueInfo`` carries
the namespaces it admits) and the session's queue gate (``Session.queue_forbidden``), which keeps a job in a
queue its namespace may not use from being admitted or placed.

The rule: a Queue without the annotation admits every namespace (Volcano's behaviour, and every queue that
existed before); with it, only the namespaces listed — comma-separated namespace names, ``*`` for all — and,
with ``hetsched.io/namespace-selector`` (a label selector as JSON), those whose labels it matches (a
namespace's own name is always its ``kubernetes.io/metadata.name`` label). A
queue's tree counts too: a namespace may use a queue only when the queue and each of its ancestors
(``spec.parent``) admit it, so a business line's parent queue bounds every child queue under it. An
annotation the API server let through malformed (no webhook) admits nobody: a typo never opens a queue to
everyone.

Kept as an annotation, not a spec field, so Volcano's own Queue CRD keeps it too. A Namespace's
``hetsched.io/default-queue`` names the queue its Jobs that name none go to (the webhook's ``/mutate``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import ValidationError

from hetsched.api.objects import LabelSelector, label_key_ok

NAMESPACES = "hetsched.io/namespaces"
DEFAULT_QUEUE = "hetsched.io/default-queue"
"""A Namespace's annotation: the queue its Jobs that name none go to (set at admission, ``/mutate``)."""
MAX_NAMESPACES = 1000
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_QUEUE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


SELECTOR = "hetsched.io/namespace-selector"
"""A Queue's annotation: a Kubernetes label selector (JSON: ``matchLabels``, ``matchExpressions``) over the
labels of the namespaces that may submit to it."""
NAME_LABEL = "kubernetes.io/metadata.name"
"""The label every Namespace carries with its own name (set by the API server from Kubernetes 1.21; added here
for older servers and for namespaces the simulator has no object for)."""
MAX_SELECTOR = 16 * 1024


@dataclass(frozen=True)
class Admits:
    """Who may use a queue: the namespaces listed, and those whose labels the selector matches."""

    names: frozenset[str] = frozenset()
    selector: LabelSelector | None = None

    def allows(self, namespace: str, labels: Callable[[], Mapping[str, str]]) -> bool:
        """May ``namespace`` (its labels read only when the selector needs them) use the queue?"""
        if namespace in self.names:
            return True
        return self.selector is not None and self.selector.matches({**labels(), NAME_LABEL: namespace})


def admitted(annotations: Mapping[str, str]) -> Admits | None:
    """Who a Queue admits: None for every namespace (neither annotation, or ``*``); a ValueError naming the
    annotation when one is malformed."""
    raw = annotations.get(NAMESPACES)
    selector = _selector(annotations.get(SELECTOR))
    if raw is None:
        return Admits(selector=selector) if selector is not None else None
    if len(raw) > MAX_NAMESPACES * 64:
        raise ValueError(f"{NAMESPACES}: longer than {MAX_NAMESPACES} namespace names")
    names = [part.strip() for part in raw.split(",")]
    if names == ["*"]:
        return None
    if len(names) > MAX_NAMESPACES:
        raise ValueError(f"{NAMESPACES}: {len(names)} namespaces; at most {MAX_NAMESPACES}")
    bad = next((n for n in names if not _NAME.fullmatch(n)), None)
    if bad is not None:
        shown = repr(bad[:64]) if bad else "an empty name"
        raise ValueError(f"{NAMESPACES}: {shown} is not a namespace name (comma-separated names, or * for all)")
    return Admits(frozenset(names), selector)


def _selector(raw: str | None) -> LabelSelector | None:
    if raw is None:
        return None
    if len(raw) > MAX_SELECTOR:
        raise ValueError(f"{SELECTOR}: longer than {MAX_SELECTOR} characters")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError(f"{SELECTOR}: not JSON (a label selector such as "
                         '{"matchLabels": {"business-line": "search"}})') from None
    if not isinstance(value, dict):
        raise ValueError(f"{SELECTOR}: must be a label selector object (matchLabels, matchExpressions)")
    try:
        selector = LabelSelector.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"{SELECTOR}: {where + ': ' if where else ''}{first['msg']}"[:300]) from None
    pairs = [*selector.matchLabels.items(), *((e.key, v) for e in selector.matchExpressions for v in e.values),
             *((e.key, "") for e in selector.matchExpressions)]
    for key, label in pairs:  # as the API server checks a selector: a bad one matches nothing, silently
        if not label_key_ok(key):
            raise ValueError(f"{SELECTOR}: {key[:80]!r} is not a label key")
        if label and (len(label) > 63 or not _LABEL_VALUE.fullmatch(label)):
            raise ValueError(f"{SELECTOR}: {label[:80]!r} is not a label value (at most 63 letters, digits, "
                             "'-', '_' and '.', starting and ending with a letter or digit)")
    return selector


def problems(kind: str, annotations: Mapping[str, str]) -> list[tuple[str, str]]:
    """(field, message) when a Queue's namespace list or selector is malformed."""
    if kind != "Queue":
        return []
    try:
        admitted(annotations)
    except ValueError as exc:
        field = SELECTOR if str(exc).startswith(SELECTOR) else NAMESPACES
        return [(f'metadata.annotations["{field}"]', str(exc))]
    return []


def read(annotations: Mapping[str, str]) -> Admits | None:
    """:func:`admitted`, with a malformed annotation admitting nobody (fail closed)."""
    try:
        return admitted(annotations)
    except ValueError:
        return Admits()


def default_queue(annotations: Mapping[str, str]) -> str | None:
    """A Namespace's default queue (:data:`DEFAULT_QUEUE`), None when it names none or not a queue name."""
    value = annotations.get(DEFAULT_QUEUE, "").strip()
    return value if value and len(value) <= 253 and _QUEUE.fullmatch(value) else None


Tree = Callable[[str], tuple[Admits | None, str] | None]
"""Queue name → (who it admits, None for all; its parent), or None when it is unknown."""
Labels = Callable[[], Mapping[str, str]]
"""The submitting namespace's labels, read only when a selector needs them."""


def refusing(queue: str, namespace: str, tree: Tree, labels: Labels = dict) -> str | None:
    """The queue — ``queue`` or one of its ancestors — that does not admit ``namespace``, or None when all of
    them do (an unknown queue ends the walk: who may use it is not known here)."""
    seen: set[str] = set()
    name = queue
    while name and name not in seen and len(seen) < 64:
        seen.add(name)
        found = tree(name)
        if found is None:
            return None
        admits, parent = found
        if admits is not None and not admits.allows(namespace, labels):
            return name
        name = parent
    return None


def refusal(namespace: str, queue: str) -> str:
    """What a refused submission is told."""
    return (f"namespace {namespace} may not submit to queue {queue} (not in its {NAMESPACES} annotation, "
            f"nor matched by its {SELECTOR})")
