"""A minimal discrete-event kernel: a heap of (time, priority, sequence, callback) and a simulated clock.

Who calls it: ``sim.simulator``. Events at the same time run in priority order, then in the order they
were scheduled (the sequence number), so a run is fully deterministic (SimPy's ``core.py`` model).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

# priorities for events at the same instant: arrivals first, then pod completions, then the scheduler
ARRIVAL, COMPLETION, SCHEDULE = 0, 1, 2


class SimClock:
    """Implements ``hetsched.ports.Clock`` on simulated seconds."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance_to(self, when: float) -> None:
        if when < self._now:
            raise ValueError(f"time cannot go backwards: {when} < {self._now}")
        self._now = when


@dataclass(order=True)
class _Entry:
    time: float
    priority: int
    sequence: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


class EventLoop:
    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self._heap: list[_Entry] = []
        self._sequence = 0
        self.processed = 0

    def schedule(self, when: float, callback: Callable[[], None], priority: int = ARRIVAL) -> _Entry:
        entry = _Entry(max(when, self.clock.now()), priority, self._sequence, callback)
        self._sequence += 1
        heapq.heappush(self._heap, entry)
        return entry

    def peek(self) -> float | None:
        while self._heap and self._heap[0].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0].time if self._heap else None

    def step(self) -> bool:
        """Run the next event; False when none is left."""
        if self.peek() is None:
            return False
        entry = heapq.heappop(self._heap)
        self.clock.advance_to(entry.time)
        entry.callback()
        self.processed += 1
        return True

    def __len__(self) -> int:
        return sum(1 for e in self._heap if not e.cancelled)
