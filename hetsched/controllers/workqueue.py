"""A de-duplicating work queue of object keys, as controllers use (client-go's workqueue, minus rate limits).

Who calls it: the job and podgroup controllers enqueue keys from watch events and :meth:`WorkQueue.drain`
it with their sync function. A key queued twice before it is processed is reconciled once.
"""

from __future__ import annotations

from collections.abc import Callable

from hetsched.ports import Conflict


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

    def drain(self, sync: Callable[[str], None]) -> int:
        """Reconcile every queued key; a key whose sync lost an optimistic-concurrency race (409) is queued
        again for the next drain, when the caller's view is fresh (retrying it at once would meet the same
        stale state). Returns how many syncs ran."""
        done = 0
        lost: list[str] = []
        while (key := self.pop()) is not None:
            try:
                sync(key)
            except Conflict:
                lost.append(key)
            done += 1
        for key in lost:
            self.add(key)
        return done
