"""Equal parts of the objects an informer holds, held once: what keeps a 100,000-pod cache small.

Who calls it: the Kubernetes adapter's informers (``KubeCluster``), on every object they read from a LIST or a
watch, before the object is cached or delivered; and ``hetsched bench memory``, which measures the result.

The pods of one task differ in a few fields (name, uid, resourceVersion, node, times) and share the rest:
containers, tolerations, affinity, labels, the server's defaults, conditions written in the same second. A
freshly read pod is a new tree of pydantic models, dicts, lists and sets for all of it (about 10 KB).
``Interner`` keeps the object's own ``metadata``, ``spec`` and ``status`` and replaces each part they hold
with the first equal part it saw, found by the part's JSON; a part never seen before is walked bottom-up, so
what it holds is shared too (hash-consing). Every model's bookkeeping (its set of fields given and its dict of
extra fields) is replaced by a shared equal one as well.

Invariants this relies on, written where they live:

- hetsched's models are frozen (``api.objects._Model``) and nothing mutates a model's dicts or lists in place;
  a change is ``model_copy(update=…)``, which copies ``__dict__``, ``__pydantic_extra__`` and
  ``__pydantic_fields_set__`` before it writes. So a shared part is never written through one of its owners.
- A table key names a shared child by ``id``: the child is the table's own canonical object, alive as long as
  any key naming it is (its parent holds it), so an id in a live key is never reused.
- Parts nobody holds any more are dropped from the table when it has doubled since the last sweep (held only
  by the table: reference count), so the table is bounded by what the cache holds, amortised O(1) per object.
"""

from __future__ import annotations

import sys
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_json

M = TypeVar("M", bound=BaseModel)

OWN_PARTS = frozenset({"metadata", "spec", "status"})
"""An object's own parts: unique to it (its name, node, times), so never looked up — only what they hold."""

SHARED_STRINGS = frozenset({"apiVersion", "kind", "namespace", "nodeName", "schedulerName", "priorityClassName",
                            "phase", "qosClass", "hostIP", "serviceAccountName", "preemptionPolicy",
                            "restartPolicy", "dnsPolicy"})
"""Fields of the own parts whose strings repeat across objects (a node's name on its 10 pods): one string each."""

_ATOMS = (str, int, float, bool, type(None))


class Interner:
    """Shares equal parts between the objects passed to :meth:`share` (not thread-safe: one caller thread)."""

    def __init__(self) -> None:
        self._table: dict[Any, Any] = {}
        """key → the one object held for it; each object is the value of one key only (see :meth:`_sweep`)."""
        self._swept_at = 1024

    def __len__(self) -> int:
        return len(self._table)

    def share(self, obj: M) -> M:
        """``obj`` (fresh from validation, not yet seen by anyone) with its parts replaced by shared equal ones;
        the object itself is returned, changed in place."""
        self._own(obj, root=True)
        if len(self._table) >= 2 * self._swept_at:
            self._sweep()
        return obj

    def _own(self, model: BaseModel, root: bool) -> None:
        """A model that stays this object's own: its fields are shared, it is not. A field that holds a part is
        looked up by its JSON (pydantic-core's serialiser: a few microseconds, where walking it is tens), so the
        second pod of a task takes its containers whole; only a part never seen before is walked."""
        values = model.__dict__
        for name, value in values.items():
            if isinstance(value, str):
                if name in SHARED_STRINGS:
                    values[name] = self._atom(value)
            elif isinstance(value, _ATOMS):
                continue
            elif root and name in OWN_PARTS and isinstance(value, BaseModel):
                self._own(value, root=False)
            elif not value and value.__class__ in (list, dict):  # most fields of most pods: no JSON needed
                values[name] = self._table.setdefault((model.__class__, name, value.__class__), value)
            else:
                values[name] = self._by_json((model.__class__, name), value)
        self._bookkeeping(model)

    def _by_json(self, where: tuple[Any, ...], value: Any) -> Any:
        try:
            key = (*where, to_json(value))
        except PydanticSerializationError:  # nothing read from JSON is such, but never fail a read for it
            return self._shared(value)
        found = self._table.get(key)
        if found is None:
            self._walk(value)
            found = self._table[key] = value
        return found

    def _bookkeeping(self, model: BaseModel) -> None:
        fields = model.__pydantic_fields_set__
        canonical = self._table.setdefault(("fields", frozenset(fields)), fields)
        if canonical is not fields:
            object.__setattr__(model, "__pydantic_fields_set__", canonical)
        extra = model.__pydantic_extra__
        if extra:
            object.__setattr__(model, "__pydantic_extra__", self._by_json(("extra", model.__class__), extra))
        elif extra is not None:
            object.__setattr__(model, "__pydantic_extra__", self._table.setdefault("no extra", extra))

    def _atom(self, value: Any) -> Any:
        return self._table.setdefault((value.__class__, value), value)

    @staticmethod
    def _key(value: Any) -> Any:
        """How a (shared) child appears in its parent's key: atoms by value, the rest by identity."""
        return (value.__class__, value) if isinstance(value, _ATOMS) else id(value)

    def _walk(self, value: Any) -> Any:
        """Share ``value``'s children (in place); its key by content, or None for what is not walked."""
        if isinstance(value, BaseModel):
            values = value.__dict__
            for name, child in values.items():
                values[name] = self._shared(child)
            self._bookkeeping(value)
            extra = value.__pydantic_extra__
            key = self._key
            return (value.__class__, tuple((name, key(child)) for name, child in values.items()),
                    None if extra is None else id(extra))
        if isinstance(value, list):
            value[:] = [self._shared(child) for child in value]
            return (list, tuple(self._key(child) for child in value))
        if isinstance(value, dict):
            for name, child in value.items():
                value[name] = self._shared(child)
            return (dict, tuple((name, self._key(child)) for name, child in value.items()))
        return None  # a tuple, set or anything else a validator made: left as it is

    def _shared(self, value: Any) -> Any:
        """The table's object equal to ``value`` (``value`` itself, after its children, the first time)."""
        if isinstance(value, _ATOMS):
            return self._atom(value) if isinstance(value, str) else value
        key = self._walk(value)
        return value if key is None else self._table.setdefault(key, value)

    def _sweep(self) -> None:
        """Drop what only the table holds, parents before children (newest first: a child is entered before
        its parent), so a parent dropped frees its children in the same sweep."""
        table = self._table
        value = None
        for key in reversed(list(table)):
            value = table[key]
            # held by: the table, ``value``, getrefcount's argument — and an atom's key
            if sys.getrefcount(value) <= (4 if isinstance(value, _ATOMS) else 3):
                del table[key]
        del value  # the last one looked at, so that it too can go
        self._swept_at = max(1024, len(table))
