"""A de-duplicating work queue of object keys, as controllers use (client-go's workqueue, minus rate limits).

Who calls it: the job and podgroup controllers enqueue keys from watch events; their ``process`` drains
it. A key queued twice before it is processed is reconciled once.
"""

from __future__ import annotations


class WorkQueue:
    def __init__(self) -> None:
        self._keys: dict[str, None] = {}

    def add(self, key: str) -> None:
        self._keys[key] = None

    def pop(self) -> str | None:
        if not self._keys:
            return None
        key = next(iter(self._keys))
        del self._keys[key]
        return key

    def __len__(self) -> int:
        return len(self._keys)
