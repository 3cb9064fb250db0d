"""Reading YAML that may be hostile: every file and request body hetsched reads goes through here.

Who calls it: ``api.manifest`` (workloads, ``validate``), ``cluster.spec`` and ``cluster.dump``
(``--cluster``), ``sim.faults``, ``scheduler.engine.conf``, the install values (``--values``, ``--set``), the node
agents' configuration files and every CLI command that reads a file (:func:`read_text`).

libyaml's C loader where present (PyYAML's pure-Python one otherwise), behind limits with clear errors:
- size: at most ``MAX_BYTES`` of text;
- depth: a pre-scan of the parser's events (no objects built) refuses nesting deeper than ``MAX_DEPTH``
  (Kubernetes objects are under 20 levels; 5,000 would exhaust the stack);
- aliases: an anchor may be reused, but the document as expanded may be at most ``MAX_EXPANSION`` nodes
  larger than as written (a "billion laughs" document is a few lines that expand to 10^9 nodes: validation,
  or an error message quoting it, would run out of time or memory);
- recursion: an alias to a collection that is still open (``&a [*a]``) is refused before any object is
  built — a self-containing value would send every reader (validation, printing, copying) into endless
  recursion.

Files are read by :func:`read_text`: regular files only (a device such as ``/dev/zero``, a FIFO or a
directory is refused before a byte is read, and a FIFO never blocks the open), their size checked against
the limit by ``fstat`` before reading, and never more than the limit read whatever the size says.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 16 * 2**20
"""Bytes of one file. At this size reading stays under 1 GB (``bench/input_memory.py``: 86,537 one-pod Jobs
peak at 826 MB, ``hetsched validate`` of them at about 0.9 GB; a ``kubectl get nodes -o yaml`` List of 9,653
Nodes at 727 MB)."""
MAX_DEPTH = 100
MAX_EXPANSION = 100_000
Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlLimitError(ValueError):
    """Input beyond a limit; the message says which."""


def read_text(path: str | Path, limit: int = MAX_BYTES, errors: str = "strict") -> str:
    """The UTF-8 text of the regular file ``path``; an ``OSError`` whose ``strerror`` says why otherwise (not a
    regular file, larger than ``limit`` bytes, unreadable), a ``UnicodeDecodeError`` for bytes that are not
    UTF-8 (unless ``errors`` is ``"replace"``). At most ``limit + 1`` bytes are ever read, so a file that
    grows while it is read is refused too."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "a device, FIFO or socket"
            raise OSError(errno.EINVAL, f"not a regular file ({kind})", str(path))
        if info.st_size > limit:
            raise OSError(errno.EFBIG, f"{info.st_size:,} bytes is more than the {limit:,} hetsched reads",
                          str(path))
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(descriptor, min(2**20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise OSError(errno.EFBIG, f"more than the {limit:,} bytes hetsched reads", str(path))
    finally:
        os.close(descriptor)
    return b"".join(chunks).decode("utf-8", errors)


def _prescan(text: str) -> None:
    depth = 0
    open_anchors: list[str | None] = []  # the anchor of each collection still open, outermost first
    for event in yaml.parse(text, Loader=Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlLimitError(f"nested more than {MAX_DEPTH} levels deep")
            open_anchors.append(event.anchor)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
            open_anchors.pop()
        elif isinstance(event, yaml.AliasEvent) and event.anchor in open_anchors:
            mark = event.start_mark
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            raise YamlLimitError(f"recursive alias *{event.anchor}{where}: a value may not contain itself")


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


def iter_load_all(text: str) -> Iterator[Any]:
    """Every document of ``text`` (empty ones left out), one at a time: a caller that turns each into an
    object and lets it go holds one raw document, not the whole file's (a 16 MiB file of small Jobs is
    300 MB as raw dicts). The whole text is checked first (syntax, depth, recursion), so a malformed or
    hostile document anywhere raises before the first is yielded: ``yaml.YAMLError`` for malformed YAML,
    :class:`YamlLimitError` past a limit (an alias expansion past its limit raises at its document)."""
    if len(text) > MAX_BYTES:
        raise YamlLimitError(f"{len(text):,} characters is more than the {MAX_BYTES:,} hetsched reads")
    _prescan(text)
    for document in yaml.load_all(text, Loader=Loader):
        if document is None:
            continue
        expanded, written = _sizes(document, {})  # an alias never crosses documents
        if expanded - written > MAX_EXPANSION:
            raise YamlLimitError(f"aliases expand the document by more than {MAX_EXPANSION:,} nodes")
        yield document


def safe_load_all(text: str) -> list[Any]:
    """Every document of ``text`` (empty ones left out), as :func:`iter_load_all`, in a list."""
    return list(iter_load_all(text))


def safe_load(text: str) -> Any:
    """The one document of ``text`` (None when empty), within the same limits."""
    documents = safe_load_all(text)
    if len(documents) > 1:
        raise YamlLimitError(f"expected one YAML document, found {len(documents)}")
    return documents[0] if documents else None
