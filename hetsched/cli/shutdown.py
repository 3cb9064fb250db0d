"""Stopping a long-running process on SIGTERM or SIGINT within a bound.

Who calls it: every long-running command — ``scheduler``, ``controller`` and ``webhook`` (``cli.serve``),
``node-agent`` and ``device-plugin`` (``cli.agents``).

Invariant: a component is gone within ``BOUND`` seconds of the first signal, whatever it was doing. Its
own stop (give the Lease up, cut the watch streams, stop the gRPC or HTTPS server, join the threads) shares
one deadline, ``GRACE`` seconds after the signal (:meth:`Shutdown.remaining`). Should a step still hang
``WATCHDOG`` seconds after the signal (a request to an API server that stopped answering), a watchdog says
so and ends the process with status 1: a rolling upgrade never waits on a stuck request, and a Lease not
given up simply expires. A finished stop ends the process with :meth:`Shutdown.exit` (no interpreter
teardown, whose cost grows with the heap).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import NoReturn

BOUND = 2.0
GRACE = 1.2
WATCHDOG = 1.7
log = logging.getLogger("hetsched")


class Shutdown:
    """Installs the SIGTERM/SIGINT handlers; ``event`` is set by the first signal (a second one changes
    nothing: the stop is already under way, and the watchdog bounds it)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._deadline: float | None = None
        signal.signal(signal.SIGTERM, self._signalled)
        signal.signal(signal.SIGINT, self._signalled)

    def _signalled(self, signum: int, frame: FrameType | None) -> None:
        if self._deadline is None:
            self._deadline = time.monotonic() + GRACE
            threading.Thread(target=self._watchdog, daemon=True, name="shutdown-watchdog").start()
        self.event.set()

    def wait(self, seconds: float | None = None) -> bool:
        """Sleep ``seconds`` (forever with None) unless a signal comes first; True once signalled."""
        return self.event.wait(seconds)

    def remaining(self) -> float:
        """Seconds left for the graceful stop's steps (the whole ``GRACE`` when the process stops for
        another reason, e.g. a lost Lease)."""
        if self._deadline is None:
            return GRACE
        return max(0.0, self._deadline - time.monotonic())

    @staticmethod
    def exit(code: int = 0) -> NoReturn:
        """End the process once its orderly stop is done: flush the logs and standard streams, then leave
        without tearing the interpreter down. Freeing a scheduler's heap object by object takes longer than
        the whole stop (0.5 s of 0.55 s with 1,200 pods cached, measured) and grows with the cluster;
        nothing in it needs to outlive the process."""
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    @staticmethod
    def _watchdog() -> None:
        time.sleep(WATCHDOG)
        log.error("still stopping %.1f s after the signal (a request that does not return); exiting now", WATCHDOG)
        sys.stderr.flush()
        os._exit(1)
