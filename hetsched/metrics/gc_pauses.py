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
- between cycles (:meth:`between_cycles`): once ``young_limit`` objects have been allocated since the last
  settling, collect the young generations (cyclic garbage made since then: a dropped connection, a
  traceback) and freeze the survivors. What a collection scans is thus bounded by ``young_limit``, not by
  the cluster's size, and it happens between cycles, not inside one;
- CPython's automatic collections stay on (a cycle that allocates millions still gets its young
  collections), at thresholds for which the young generations stay small.

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

YOUNG_LIMIT = 200_000
"""Allocations (net of deallocations) since the last settling that make :meth:`between_cycles` settle."""
PAUSE_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def allocated_since_collection() -> int:
    """About how many objects were allocated (net) since the last full or young collection: gen0's count is
    net allocations since gen0 was last collected, gen1's the gen0 collections since gen1 was, gen2's the gen1
    collections since gen2 was."""
    young, middle, old = gc.get_count()
    first, second, _ = gc.get_threshold()
    return young + middle * first + old * first * second


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

    def settle(self) -> None:
        """After the initial sync: everything alive now is old."""
        gc.collect()
        gc.freeze()
        self.settled = True
        self.settlings += 1

    def between_cycles(self) -> bool:
        """Collect the young generations and freeze their survivors once enough was allocated; True when it
        did. The first call settles (a loop that calls only this still gets its initial full collection)."""
        if not self.settled:
            self.settle()
            return True
        if allocated_since_collection() < self.young_limit:
            return False
        gc.collect(1)
        gc.freeze()
        self.settlings += 1
        return True
