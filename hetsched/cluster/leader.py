"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it: of the
replicas of the scheduler (or the controller), the one holding the Lease works; the others wait and take
over when the holder stops renewing.

Who calls it: the ``hetsched scheduler`` and ``hetsched controller`` processes (``cli.serve``): the
elector's own thread tries to take or renew the Lease every ``retry`` seconds, whatever the main loop is
doing, and the process's writes ask :meth:`LeaderElector.holds` first (``KubeCluster.fence``).

Rules: the Lease names its holder and when it last renewed; a holder renews every ``retry`` seconds; the
Lease is free when it has no holder, or when this replica has seen no change to it for ``duration``
seconds of its *own* monotonic clock (as client-go's ``observedTime``): the holder's ``renewTime`` is
never compared with the local clock, so a holder whose clock is hours behind is not robbed while it
renews, and one whose clock is ahead does not hold the Lease forever after it dies. Taking it is a write
with the resourceVersion read, so of two replicas racing only one wins (the other's write is a 409). On
SIGTERM the holder releases the Lease (empty holder) so another replica takes over at once. The holder's
``leaseDurationSeconds`` is read within ``[duration, MAX_DURATION_FACTOR × duration]``: a squatter that
writes itself in with ``leaseDurationSeconds: 2147483647`` (or 0, or garbage) holds the Lease no longer
than ten of our own durations without renewing it — and while it does renew, its writes are what a
replica sees as the holder being alive, as with any holder.

Fencing invariant: :meth:`holds` is true only while the last successful take-or-renew *began* less than
``renew_deadline`` seconds ago (this process's monotonic clock, which keeps running while the process is
stopped), and ``renew_deadline < duration``. A standby takes over only ``duration`` seconds after it saw the
last change, and that change was written after our renewal began: so while :meth:`holds` is true no other
replica can hold the Lease, and a replica that was frozen (SIGSTOP, a long pause) past its deadline writes
nothing when it wakes — it finds :meth:`holds` false before its first request.

Why not the official client's ``kubernetes.leaderelection``: it judges expiry by the wall clock, its
``acquire`` loop sleeps and cannot be stopped (SIGTERM within 2 s), it never releases the Lease, its
``LeaseLock`` talks through the client's global default configuration rather than the process's
connection, and it offers no fence to ask before a write.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

from hetsched.cluster.kubernetes import KubeClient
from hetsched.ports import Conflict, NotFound

log = logging.getLogger("hetsched.leader")
_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
MAX_DURATION_FACTOR = 10
"""A holder's stated lease duration counts for at most this many of our own durations."""


def _micro(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime(_FORMAT)


class LeaderElector:
    def __init__(self, client: KubeClient, namespace: str, name: str, identity: str, *,
                 duration: float = 15.0, renew_deadline: float | None = None, retry: float = 2.0) -> None:
        """Defaults are client-go's (15 s, 10 s, 2 s). ``renew_deadline`` (default two thirds of
        ``duration``) must be shorter than ``duration`` and longer than ``retry``; a ValueError says which."""
        deadline = duration * 2 / 3 if renew_deadline is None else renew_deadline
        if not 0 < deadline < duration:
            raise ValueError(f"the renew deadline ({deadline:g} s) must be shorter than the lease duration "
                             f"({duration:g} s)")
        if retry <= 0 or retry >= deadline:
            raise ValueError(f"the retry period ({retry:g} s) must be shorter than the renew deadline "
                             f"({deadline:g} s)")
        self.client = client
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.namespace, self.name, self.identity, self.duration = namespace, name, identity, duration
        self.renew_deadline, self.retry = deadline, retry
        self.leading = False
        self._renewed_at: float | None = None
        """When (monotonic) the last successful take-or-renew began."""
        self._observed: tuple[Any, ...] | None = None
        """The Lease's holder, renewTime and resourceVersion when last read ..."""
        self._observed_at = 0.0
        """... and when (this process's monotonic clock) that record was first seen."""
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def holds(self) -> bool:
        """True while this replica may write (the fencing invariant in the module's docstring)."""
        renewed = self._renewed_at
        return self.leading and renewed is not None and time.monotonic() - renewed < self.renew_deadline

    def _duration_of(self, spec: dict[str, Any]) -> float:
        """The holder's stated duration, bounded: at least ours, at most ``MAX_DURATION_FACTOR`` times ours."""
        stated = spec.get("leaseDurationSeconds")
        if isinstance(stated, bool) or not isinstance(stated, int | float) or stated != stated:
            return self.duration
        return min(max(float(stated), self.duration), MAX_DURATION_FACTOR * self.duration)

    def _spec(self, now: float, transitions: int) -> dict[str, Any]:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": max(1, round(self.duration)),
                "acquireTime": _micro(now), "renewTime": _micro(now), "leaseTransitions": transitions}

    def _timeout(self) -> float:
        """How long a request of this round may wait: a holder, until its renew deadline (a slow but
        answering server still renews it in time; one that stops answering cannot hold a round past the
        deadline); a standby, one renew deadline."""
        renewed = self._renewed_at
        if self.leading and renewed is not None:
            return max(0.2, renewed + self.renew_deadline - time.monotonic())
        return self.renew_deadline

    def try_acquire_or_renew(self) -> bool:
        """One round: True while this replica holds the Lease (each request bounded by :meth:`_timeout`)."""
        began = time.monotonic()
        now = time.time()
        timeout = self._timeout()
        try:
            lease = self.client.request("GET", self.path, timeout=timeout)
        except NotFound:
            try:
                self.client.request("POST", self.collection, timeout=timeout, body={
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace}, "spec": self._spec(now, 0)})
                return self._took(began)
            except Conflict:
                return self._lost()
        spec = lease.get("spec", {})
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), (lease.get("metadata") or {}).get("resourceVersion"))
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        expired = time.monotonic() - self._observed_at > self._duration_of(spec)
        if holder and holder != self.identity and not expired:
            return self._lost()
        if holder == self.identity:
            spec = {**spec, "renewTime": _micro(now)}
        else:
            spec = self._spec(now, int(spec.get("leaseTransitions") or 0) + 1)
        try:  # carries the resourceVersion read: a write in between is a Conflict, never an overwrite
            self.client.request("PUT", self.path, body={**lease, "spec": spec}, timeout=self._timeout())
        except Conflict:
            return self._lost()  # another replica renewed or took it first
        return self._took(began)

    @property
    def last_holder(self) -> str:
        """The holder this replica last read (no request: for a message when the API server is away)."""
        return str(self._observed[0]) if self._observed else ""

    def _took(self, began: float) -> bool:
        self.leading, self._renewed_at = True, began
        return True

    def _lost(self) -> bool:
        self.leading = False
        return False

    def start(self) -> None:
        """Take and renew the Lease every ``retry`` seconds on a thread of its own (a daemon), until
        :meth:`stop`. A round that fails (the API server away) is logged; :meth:`holds` lapses on its own
        once the renew deadline passes without a successful round."""
        def rounds() -> None:
            while not self._stop.is_set():
                try:
                    self.try_acquire_or_renew()
                except Exception as exc:
                    log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
                self._stop.wait(self.retry)

        self._thread = threading.Thread(target=rounds, daemon=True, name="lease")
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        """End the renewals (the round under way may finish within ``timeout``); the Lease is not released."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def release(self, timeout: float = 1.0) -> bool:
        """Give the Lease up (on shutdown) so another replica need not wait for it to expire; each request
        waits at most ``timeout`` seconds (a process stopping cannot wait long). True when released (or not
        held); False when the API server did not take it, and the Lease then expires as usual."""
        if not self.leading:
            return True
        self.leading = False
        try:
            lease = self.client.request("GET", self.path, timeout=timeout)
            if lease.get("spec", {}).get("holderIdentity") == self.identity:
                spec = {**lease["spec"], "holderIdentity": "", "renewTime": _micro(0)}
                self.client.request("PUT", self.path, body={**lease, "spec": spec}, timeout=timeout)
        except (Conflict, NotFound):
            pass
        except Exception as exc:  # the API server away or slow: the Lease expires after its duration instead
            log.warning("lease %s/%s not released: %s", self.namespace, self.name, exc)
            return False
        return True

    def holder(self) -> str:
        try:
            return str(self.client.request("GET", self.path).get("spec", {}).get("holderIdentity") or "")
        except NotFound:
            return ""
