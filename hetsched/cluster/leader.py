"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it: of the
replicas of the scheduler (or the controller), the one holding the Lease works; the others wait and take
over when the holder stops renewing.

Who calls it: the ``hetsched scheduler`` and ``hetsched controller`` processes, every ``retry`` seconds.

Rules: the Lease names its holder and when it last renewed; a holder renews every ``retry`` seconds; the
Lease is free when it has no holder, or when this replica has seen no change to it for ``duration``
seconds of its *own* monotonic clock (as client-go's ``observedTime``): the holder's ``renewTime`` is
never compared with the local clock, so a holder whose clock is hours behind is not robbed while it
renews, and one whose clock is ahead does not hold the Lease forever after it dies. Taking it is a write
with the resourceVersion read, so of two replicas racing only one wins (the other's write is a 409). On
SIGTERM the holder releases the Lease (empty holder) so another replica takes over at once.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from hetsched.cluster.kubernetes import KubeClient
from hetsched.ports import Conflict, NotFound

log = logging.getLogger("hetsched.leader")
_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def _micro(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime(_FORMAT)


class LeaderElector:
    def __init__(self, client: KubeClient, namespace: str, name: str, identity: str, *,
                 duration: float = 10.0) -> None:
        self.client = client
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.namespace, self.name, self.identity, self.duration = namespace, name, identity, duration
        self.leading = False
        self._observed: tuple[Any, ...] | None = None
        """The Lease's holder, renewTime and resourceVersion when last read ..."""
        self._observed_at = 0.0
        """... and when (this process's monotonic clock) that record was first seen."""

    def _spec(self, now: float, transitions: int) -> dict[str, Any]:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration),
                "acquireTime": _micro(now), "renewTime": _micro(now), "leaseTransitions": transitions}

    def try_acquire_or_renew(self) -> bool:
        """One round: True while this replica holds the Lease."""
        now = time.time()
        try:
            lease = self.client.request("GET", self.path)
        except NotFound:
            try:
                self.client.request("POST", self.collection, body={
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace}, "spec": self._spec(now, 0)})
                self.leading = True
            except Conflict:
                self.leading = False
            return self.leading
        spec = lease.get("spec", {})
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), (lease.get("metadata") or {}).get("resourceVersion"))
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        expired = time.monotonic() - self._observed_at > float(spec.get("leaseDurationSeconds") or self.duration)
        if holder and holder != self.identity and not expired:
            self.leading = False
            return False
        if holder == self.identity:
            spec = {**spec, "renewTime": _micro(now)}
        else:
            spec = self._spec(now, int(spec.get("leaseTransitions") or 0) + 1)
        try:
            self.client.request("PUT", self.path, body={**lease, "spec": spec})  # carries the resourceVersion
            self.leading = True
        except Conflict:
            self.leading = False  # another replica renewed or took it first
        return self.leading

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
