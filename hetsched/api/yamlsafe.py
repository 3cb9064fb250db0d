"""Reading YAML that may be hostile: every file and request body hetsched reads goes through here.

Who calls it: ``api.manifest`` (workloads, ``validate``), ``cluster.spec`` and ``cluster.dump``
(``--cluster``), ``sim.faults`` and ``scheduler.conf``.

libyaml's C loader where present (PyYAML's pure-Python one otherwise), behind limits with clear errors:
- size: at most ``MAX_BYTES`` of text;
- depth: a pre-scan of the parser's events (no objects built) refuses nesting deeper than ``MAX_DEPTH``
  (Kubernetes objects are under 20 levels; 5,000 would exhaust the stack);
- aliases: an anchor may be reused, but the document as expanded may be at most ``MAX_EXPANSION`` nodes
  larger than as written (a "billion laughs" document is a few lines that expand to 10^9 nodes: validation,
  or an error message quoting it, would run out of time or memory).
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_BYTES = 64 * 2**20
MAX_DEPTH = 100
MAX_EXPANSION = 100_000
Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlLimitError(ValueError):
    """Input beyond a limit; the message says which."""


def _prescan(text: str) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlLimitError(f"nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _sizes(value: Any, unique: dict[int, int]) -> tuple[int, int]:
    """(nodes as expanded, nodes as written) of ``value``; containers seen before count once as written."""
    if isinstance(value, dict):
        items: list[Any] = [*value.keys(), *value.values()]
    elif isinstance(value, list):
        items = value
    else:
        return 1, 1
    known = unique.get(id(value))
    if known is not None:
        return known, 0
    expanded, written = 1, 1
    for item in items:
        grown, new = _sizes(item, unique)
        expanded += grown
        written += new
        if expanded - written > MAX_EXPANSION:
            raise YamlLimitError(f"aliases expand the document by more than {MAX_EXPANSION:,} nodes")
    unique[id(value)] = expanded
    return expanded, written


def safe_load_all(text: str) -> list[Any]:
    """Every document of ``text`` (empty ones left out); ``yaml.YAMLError`` for malformed YAML,
    :class:`YamlLimitError` past a limit."""
    if len(text) > MAX_BYTES:
        raise YamlLimitError(f"{len(text):,} characters is more than the {MAX_BYTES:,} hetsched reads")
    _prescan(text)
    documents = [document for document in yaml.load_all(text, Loader=Loader) if document is not None]
    unique: dict[int, int] = {}
    for document in documents:
        expanded, written = _sizes(document, unique)
        if expanded - written > MAX_EXPANSION:
            raise YamlLimitError(f"aliases expand the document by more than {MAX_EXPANSION:,} nodes")
    return documents


def safe_load(text: str) -> Any:
    """The one document of ``text`` (None when empty), within the same limits."""
    documents = safe_load_all(text)
    if len(documents) > 1:
        raise YamlLimitError(f"expected one YAML document, found {len(documents)}")
    return documents[0] if documents else None
