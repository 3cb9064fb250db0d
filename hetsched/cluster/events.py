"""Events to the API server as client-go's EventRecorder sends them: aggregated, spam-filtered, never blocking.

Who calls it: :class:`hetsched.cluster.kubernetes.KubeCluster` (``record_event``), for the scheduler, the
controllers and the device plugin. What a user sees with ``kubectl describe`` / ``kubectl get events``:

- **Aggregated.** An Event equal to one sent in the last ``CORRELATE_SECONDS`` (same object, type, reason
  and message) is not posted again: the Event already there gets ``count`` + 1 and a new ``lastTimestamp``
  (``kubectl`` shows "x12 over 5m"), as client-go's correlator does.
- **Spam-filtered.** Each object may have ``BURST`` Events at once, then one per ``REFILL_SECONDS``
  (client-go's defaults: 25, then one per 5 minutes); the rest are dropped and counted (``dropped``) — a
  scheduler retrying a gang every second never floods etcd.
- **Never blocking.** ``record`` only queues (at most ``CAPACITY`` Events; beyond, dropped and counted);
  one thread, started on first use, sends. A scheduling cycle never waits for an Event. ``stop`` sends what
  is queued within its deadline. Invariant: an Event is never worth failing or delaying a cycle, so every
  error sending one is logged and forgotten.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

CAPACITY = 1000
BURST = 25
REFILL_SECONDS = 300.0
CORRELATE_SECONDS = 600.0
REMEMBERED = 4096
"""Sent Events remembered for aggregation (least recently used forgotten first), as client-go's LRU."""
MESSAGE_LIMIT = 1024

Send = Callable[..., dict[str, Any]]
"""``send(method, path, body=…, content_type=…)``: the cluster's write (fenced: a follower sends nothing)."""


@dataclass
class _Sent:
    namespace: str
    name: str
    count: int
    first: float


@dataclass(frozen=True)
class Pending:
    """One Event to send: who it is about (``involved``: apiVersion, kind, name, namespace, uid) and what."""

    involved: tuple[tuple[str, Any], ...]
    namespace: str
    reason: str
    message: str
    type: str

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.involved, self.type, self.reason, self.message)

    @property
    def subject(self) -> tuple[tuple[str, Any], ...]:
        return self.involved


def _rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


class EventSink:
    def __init__(self, send: Send, *, clock: Callable[[], float] = time.time, capacity: int = CAPACITY) -> None:
        self._send = send
        self._clock = clock
        self._queue: queue.Queue[Pending | None] = queue.Queue(maxsize=capacity)
        self._sent: OrderedDict[tuple[Any, ...], _Sent] = OrderedDict()
        self._buckets: OrderedDict[tuple[tuple[str, Any], ...], tuple[float, float]] = OrderedDict()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._idle = threading.Condition()
        self._busy = 0
        self._dropping = False
        self.dropped = 0
        """Events not sent: over an object's budget, or the queue full."""
        self.aggregated = 0
        """Events folded into one already sent (its count raised)."""

    def record(self, involved: Mapping[str, Any], reason: str, message: str, type_: str) -> None:
        """Queue an Event about ``involved`` (``involvedObject``: apiVersion, kind, name, namespace, uid)."""
        event = Pending(tuple(sorted((k, v) for k, v in involved.items() if v)),
                        str(involved.get("namespace") or "default"), reason, message[:MESSAGE_LIMIT], type_)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="events")
                self._thread.start()
        with self._idle:
            self._busy += 1
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1
            self._done()

    def flush(self, timeout: float) -> bool:
        """Wait until every queued Event was sent (or dropped); False when ``timeout`` seconds passed first."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def stop(self, timeout: float, send: bool = True) -> bool:
        """Send what is queued within ``timeout`` seconds (``send`` False: drop it, counted — writes are
        refused anyway once SIGTERM cancelled them), then end the thread."""
        if not send:
            self._dropping = True
        flushed = self.flush(timeout)
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            try:
                self._queue.put_nowait(None)
            except queue.Full:  # still sending: the daemon thread never holds the process
                return False
            thread.join(max(timeout, 0.05))
        return flushed

    def _done(self) -> None:
        with self._idle:
            self._busy -= 1
            if not self._busy:
                self._idle.notify_all()

    def _run(self) -> None:
        while (event := self._queue.get()) is not None:
            try:
                self._deliver(event)
            except Exception as exc:  # an Event is never worth failing anything
                log.warning("event %s on %s not recorded: %s", event.reason, dict(event.involved).get("name"), exc)
            finally:
                self._done()

    def _allowed(self, subject: tuple[tuple[str, Any], ...], now: float) -> bool:
        tokens, last = self._buckets.pop(subject, (float(BURST), now))
        tokens = min(float(BURST), tokens + (now - last) / REFILL_SECONDS)
        allowed = tokens >= 1
        self._buckets[subject] = (tokens - 1 if allowed else tokens, now)
        if len(self._buckets) > REMEMBERED:
            self._buckets.popitem(last=False)
        return allowed

    def _deliver(self, event: Pending) -> None:
        if self._dropping:
            self.dropped += 1
            return
        now = self._clock()
        sent = self._sent.get(event.key)
        if sent is not None and now - sent.first <= CORRELATE_SECONDS:
            self._sent.move_to_end(event.key)
            try:
                self._send("PATCH", f"/api/v1/namespaces/{sent.namespace}/events/{sent.name}",
                           body={"count": sent.count + 1, "lastTimestamp": _rfc3339(now)},
                           content_type="application/merge-patch+json")
            except Exception as exc:  # gone (an Event lives an hour): send it anew
                log.debug("event %s: aggregation failed (%s); sending a new one", sent.name, exc)
                del self._sent[event.key]
            else:
                sent.count += 1
                self.aggregated += 1
                return
        if not self._allowed(event.subject, now):
            self.dropped += 1
            return
        involved = dict(event.involved)
        stamp = _rfc3339(now)
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{involved.get('name') or 'object'}.", "namespace": event.namespace},
                "involvedObject": involved, "reason": event.reason, "message": event.message, "type": event.type,
                "source": {"component": "hetsched"}, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}
        created = self._send("POST", f"/api/v1/namespaces/{event.namespace}/events", body=body)
        name = (created.get("metadata") or {}).get("name") if isinstance(created, Mapping) else None
        if name:
            self._sent[event.key] = _Sent(event.namespace, str(name), 1, now)
            if len(self._sent) > REMEMBERED:
                self._sent.popitem(last=False)
