"""Garbage-collector pauses: measured, and kept short by collecting between scheduling cycles.

Who calls it: the long-running processes' loop (``cli.serve._run``: the scheduler and the controller) and the
latency benchmark (``benchmark.latency``), which reports the pauses it saw.

Why: a scheduler holds hundreds of thousands of small, long-lived objects (pods, their specs, the cache's
records). CPython's cyclic collector rescans them: a full collection at 100,000 running pods stops the
process for about 100 ms, wherever it happens to fall — inside a cycle, delaying every waiting pod's bind.
The scheduler's own steady state makes no cyclic garbage (a task group refers to its job weakly:
``TaskGroup.job_ref``; ``tests/test_gc_pauses.py`` keeps it so), so what is old need never be rescanned.

:class:`CollectionSchedule` therefore:

- after the initial sync (:meth:`settle`): one full collection, then ``gc.freeze()`` — everything alive moves
  to the permanent generation, which no collection visits again (reference counting still frees it);
- between cycles (:meth:`between_cycles`): once ``young_limit`` objects are outside the permanent generation
  (made since the last settling and still alive), collect them (cyclic garbage made since then: a dropped
  connection, a traceback) and freeze the survivors. A collection, CPython's own automatic ones included,
  thus scans at most about ``young_limit`` objects, not the cluster's size, and the big ones fall between
  cycles, not inside one;
- CPython's automatic collections stay on (a cycle that allocates millions still gets collected).

What it gives up: a cyclic structure that was alive when frozen and dies later is never freed (reference
counting frees every acyclic one). Hence the rule above that the steady state makes no cycles; the latency
benchmark reports the frozen generation's size before and after, so a leak shows as growth.

:class:`PauseMeter` measures every collection (``gc.callbacks``): count, total and longest pause per
generation, and optionally a Prometheus histogram ``hetsched_gc_pause_seconds``.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, Histogram

YOUNG_LIMIT = 10_000
"""Objects outside the permanent generation that make :meth:`CollectionSchedule.between_cycles` settle. A
collection costs up to a microsecond per object it scans here (the scheduler's objects are pydantic models
with many fields), so this bounds its pause near 10 ms; at 10,000 nodes and 1,000 pods/s the scheduler keeps
some 8,000 new objects a second."""
MAX_SKIP = 50
"""At most this many calls to :meth:`CollectionSchedule.between_cycles` go by without a count."""
PAUSE_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def unfrozen_objects() -> int:
    """How many objects the collector's three generations hold — everything but the permanent (frozen) one —
    counted: O(those objects), some 10 µs per thousand. ``gc.get_count()`` cannot say: gen0's count is
    allocations *net of deallocations*, and in a steady state every new pod is balanced by a finished, frozen
    one being freed, so the count stays low while the generations grow without bound (30 s at 1,000 pods/s
    left 250,000 objects: a 259 ms collection). Gen2 counts too: an automatic young collection moves its
    survivors there, and a full collection scans them all."""
    return sum(len(gc.get_objects(generation)) for generation in range(3))


class PauseMeter:
    """Every collection's pause, from ``gc.callbacks`` (which run on the collecting thread, under the GIL)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._started = 0.0
        self._lock = threading.Lock()
        self.count = [0, 0, 0]
        self.total = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self.histogram = Histogram("hetsched_gc_pause_seconds", "Garbage-collector pauses", ["generation"],
                                   buckets=PAUSE_BUCKETS, registry=registry) if registry is not None else None
        self._installed = False

    def install(self) -> PauseMeter:
        if not self._installed:
            gc.callbacks.append(self._callback)
            self._installed = True
        return self

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._callback)
            self._installed = False

    def reset(self) -> None:
        with self._lock:
            self.count, self.total, self.longest = [0, 0, 0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        generation = min(int(info.get("generation", 0)), 2)
        with self._lock:
            self.count[generation] += 1
            self.total[generation] += pause
            self.longest[generation] = max(self.longest[generation], pause)
        if self.histogram is not None:
            self.histogram.labels(str(generation)).observe(pause)

    def figures(self) -> dict[str, Any]:
        """Counts and pauses (ms) per generation, and overall."""
        with self._lock:
            return {"count": sum(self.count), "max_ms": round(max(self.longest) * 1000, 2),
                    "total_ms": round(sum(self.total) * 1000, 1),
                    "by_generation": [{"generation": g, "count": self.count[g],
                                       "max_ms": round(self.longest[g] * 1000, 2),
                                       "total_ms": round(self.total[g] * 1000, 1)} for g in range(3)]}


class CollectionSchedule:
    """Collections between cycles, old objects frozen (see the module's docstring). Not thread-safe: one
    loop calls it."""

    def __init__(self, young_limit: int = YOUNG_LIMIT) -> None:
        self.young_limit = young_limit
        self.settled = False
        self.settlings = 0
        self._calls = 0
        self._due = 0
        """The call at which :meth:`between_cycles` next counts (counting costs about 0.1 ms per 10,000
        objects: not every cycle's price when they grow slowly)."""
        self._counted_at = (0, 0)
        """(call, objects) at the last count."""

    def settle(self) -> None:
        """After the initial sync, and whenever :meth:`between_cycles` says: everything alive now is old."""
        gc.collect()
        gc.freeze()
        self.settled = True
        self.settlings += 1

    def between_cycles(self) -> bool:
        """Settle again once ``young_limit`` objects are not frozen (a collection then scans only those: frozen
        objects are in no generation); True when it did. The first call settles (a loop that calls only this
        still gets its initial full collection)."""
        self._calls += 1
        if self.settled:
            if self._calls < self._due:
                return False
            objects = unfrozen_objects()
            if objects < self.young_limit:
                # count again when, growing as fast as since the last count, they would be half-way to the limit
                call, before = self._counted_at
                growth = max(objects - before, 1) / max(self._calls - call, 1)
                self._due = self._calls + min(MAX_SKIP, max(1, int((self.young_limit - objects) / growth / 2)))
                self._counted_at = (self._calls, objects)
                return False
        self.settle()
        self._counted_at, self._due = (self._calls, 0), self._calls + 1
        return True
