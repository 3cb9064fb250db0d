"""Exponential back-off between retries of a live loop, reset by a success.

Who calls it: the informers of the Kubernetes adapter (``cluster.kubernetes``: a watch that failed is
re-opened after 0.5 s, 1 s, 2 s … at most 30 s) and the main loop of the long-running commands
(``cli.serve``: a cycle that failed because the API server is away). Time is not read here: the caller
waits the returned delay on its own stop event, so a SIGTERM still ends the wait at once.
"""

from __future__ import annotations


class Backoff:
    """Delays 0.5 s, 1 s, 2 s … capped at 30 s (client-go's informer back-off is of this shape)."""

    def __init__(self, first: float = 0.5, cap: float = 30.0) -> None:
        if not 0 < first <= cap:
            raise ValueError(f"back-off: first delay {first:g} s must be positive and at most the cap {cap:g} s")
        self.first, self.cap = first, cap
        self.delay = first

    def next(self) -> float:
        """The delay to wait before this retry; the one after is twice as long, up to the cap."""
        delay = self.delay
        self.delay = min(self.delay * 2, self.cap)
        return delay

    def reset(self) -> None:
        """A success: the next failure waits the first delay again."""
        self.delay = self.first
