"""The Kubernetes backend: the same ports as the embedded cluster (``hetsched.ports``), against a real API
server through the official ``kubernetes`` client (its configuration, authentication, TLS and HTTP).

Who calls it: the ``hetsched scheduler`` and ``hetsched controller`` processes, and the integration tests
against a real kube-apiserver.

How it works:
- **Informers**: one thread per watched kind lists the collection, then watches from the list's
  resourceVersion; a watch that ends is resumed from the last resourceVersion seen, a ``410 Gone``
  (the version is too old) re-lists, and errors back off (0.5 s doubling to 30 s) before reconnecting.
  Threads only queue what they see: :meth:`KubeCluster.pump`, called by the process's main loop, applies the
  queued changes to the local cache and delivers them to the watch handlers, in order, on the caller's
  thread — so the scheduler and the controllers see one consistent, single-threaded view, exactly as with
  the embedded cluster. :meth:`KubeCluster.stop` cuts the open watch streams (:class:`OpenStreams`) and joins
  the threads within one shared deadline: a process stops at once, however idle its watches.
- **Reads** (``get``, ``list``) come from that cache for watched kinds, from the API server otherwise.
- **Writes**: ``create``/``update``/``patch``/``delete`` go to the API server. ``update`` sends the object's
  resourceVersion (optimistic concurrency): a ``409`` is a :class:`~hetsched.ports.Conflict` for the caller
  to retry from fresh state — never an overwrite. A change to ``status`` goes through the status
  subresource, a change to the rest through the object.
- **Binder**: the ``pods/binding`` subresource (its annotations are the scheduler's chip hand-off), at most
  ``qps`` requests per second with bursts of ``burst``, from up to ``bind_workers`` threads, each node's
  pods with chips in order and stamped with their bind order (:meth:`bind_all`).
- **Evictor**: the Eviction API (``policy/v1``, falling back to ``policy/v1beta1`` on servers before 1.21); a
  ``429`` (a PodDisruptionBudget forbids it now) is :class:`~hetsched.ports.TooManyRequests`.
- **Status**: PodGroup status through its subresource (re-read and retried on conflict), nominated nodes
  on the pod status, Events as ``core/v1`` Events.
- **Fencing**: every write asks ``fence`` (the leader elector's ``holds``) and ``cancel`` (the process's
  shutdown) just before it is sent; a refused write is :class:`Fenced`. So a replica that lost its Lease
  (or was frozen past its renew deadline) sends nothing more, and a batch of binds under way when SIGTERM
  comes stops starting new requests at once.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kubernetes.client
import kubernetes.config
from pydantic import ValidationError

from hetsched.api.manifest import parse_document
from hetsched.api.objects import KINDS, AnyObject, Condition, object_key
from hetsched.api.times import convert_times, to_epoch
from hetsched.cluster.backoff import Backoff
from hetsched.cluster.events import EventSink
from hetsched.cluster.interning import Interner
from hetsched.devices.inventory import PARTITIONS_ANNOTATION, POD_ANNOTATION, PREDICATE_TIME
from hetsched.ports import (
    BindRequest,
    Conflict,
    Failure,
    Invalid,
    NotFound,
    PodGroupStatusUpdate,
    TooManyRequests,
    WatchEvent,
    WatchHandler,
)

log = logging.getLogger("hetsched.kubernetes")
_MODELS = {kind: model for (_, kind), model in KINDS.items()}


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if sub:
            base += f"/{sub}"
        return base


RESOURCES: dict[str, Resource] = {
    "Pod": Resource("", "v1", "pods", True),
    "Node": Resource("", "v1", "nodes", False),
    "Secret": Resource("", "v1", "secrets", True),
    "ConfigMap": Resource("", "v1", "configmaps", True),
    "Service": Resource("", "v1", "services", True),
    "NetworkPolicy": Resource("networking.k8s.io", "v1", "networkpolicies", True),
    "PriorityClass": Resource("scheduling.k8s.io", "v1", "priorityclasses", False),
    "PodDisruptionBudget": Resource("policy", "v1", "poddisruptionbudgets", True),
    "Job": Resource("batch.volcano.sh", "v1alpha1", "jobs", True),
    "PodGroup": Resource("scheduling.volcano.sh", "v1beta1", "podgroups", True),
    "Queue": Resource("scheduling.volcano.sh", "v1beta1", "queues", False),
    "HyperNode": Resource("topology.volcano.sh", "v1alpha1", "hypernodes", False),
    "QueueUsage": Resource("hetsched.io", "v1alpha1", "queueusages", False),
    "ResourceQuota": Resource("", "v1", "resourcequotas", True),
    "Namespace": Resource("", "v1", "namespaces", False),
    "Command": Resource("bus.volcano.sh", "v1alpha1", "commands", True),
    "CronJob": Resource("batch.volcano.sh", "v1alpha1", "cronjobs", True),
    "JobFlow": Resource("flow.volcano.sh", "v1alpha1", "jobflows", True),
    "JobTemplate": Resource("flow.volcano.sh", "v1alpha1", "jobtemplates", True),
}
FALLBACK_VERSIONS = {"PodDisruptionBudget": "v1beta1"}
"""Kinds served at an older version by older servers (policy/v1 arrived in Kubernetes 1.21)."""


class WallClock:
    """The ``Clock`` port on real time, for processes running against an API server."""

    def now(self) -> float:
        return time.time()


class ApiError(RuntimeError):
    """An API server answer other than the ones the ports name (404, 409, 422, 429)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


# ----------------------------------------------------------------------------------- conversion


def to_rfc3339(value: Any) -> Any:
    """Seconds since the epoch as the API server's RFC 3339 form; anything else unchanged."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return value


def from_api(kind: str, data: Mapping[str, Any]) -> AnyObject:
    """An API server object (JSON) as hetsched's model (timestamps as seconds); Invalid names the field.

    ``metadata.managedFields`` is left out, as kube-scheduler's informers trim it: nothing here reads it, a
    PUT without it keeps the server's, and it is a large part of a small pod's bytes and of the time to read
    it."""
    data = dict(data)
    metadata = data.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        data["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
    converted = convert_times(data, to_epoch)
    converted["kind"] = kind
    converted["apiVersion"] = RESOURCES[kind].api_version if kind != "PodDisruptionBudget" else "policy/v1"
    try:
        return _MODELS[kind].model_validate(converted)
    except ValidationError:
        parsed = parse_document(converted, kind, 1)  # the messages `hetsched validate` prints
        name = (data.get("metadata") or {}).get("name", "?")
        problems = parsed if isinstance(parsed, list) else []
        text = "; ".join(f"{p.path}: {p.message}" if p.path else p.message for p in problems) or "invalid"
        raise Invalid(f"{kind} {name}: {text}") from None


MAPS = frozenset({"labels", "annotations", "data", "nodeSelector", "matchLabels", "envs"})
"""String maps whose empty values are values, not "unset"."""


def _omit_empty(data: Any) -> Any:
    """Drop empty strings, maps and lists (hetsched's "unset"), as Go's ``omitempty`` does: the API server
    reads ``""`` in a typed string field of a CRD as null and refuses it, and an empty ``overhead`` as set."""
    if isinstance(data, dict):
        kept = {k: (v if k in MAPS else _omit_empty(v)) for k, v in data.items()}
        return {k: v for k, v in kept.items() if v not in ("", {}, [])}
    if isinstance(data, list):
        return [_omit_empty(v) for v in data]
    return data


def to_api(obj: AnyObject, resource: Resource) -> dict[str, Any]:
    """hetsched's model as the JSON the API server takes (empty server-owned metadata left out)."""
    data = _omit_empty(obj.model_dump(mode="json", exclude_none=True, by_alias=True))
    data["apiVersion"] = resource.api_version
    metadata = data.get("metadata", {})
    for key in ("uid", "resourceVersion"):
        if not metadata.get(key):
            metadata.pop(key, None)
    metadata.pop("creationTimestamp", None)
    return convert_times(data, to_rfc3339)  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------------- client


TOKEN_REREAD = 60.0
"""Seconds between reads of a token file: kubelet renews a projected ServiceAccount token in place (at 80 % of
its life, an hour at the least), so a client re-reads it well within that."""


def _reread(path: str) -> Callable[[Any], None]:
    """The client configuration's ``refresh_api_key_hook`` (called before each request): the token file read
    again once ``TOKEN_REREAD`` seconds have passed; an unreadable or empty file keeps the last token."""
    last = [time.monotonic()]

    def refresh(configuration: Any) -> None:
        now = time.monotonic()
        if now - last[0] < TOKEN_REREAD:
            return
        last[0] = now
        try:
            with open(path, encoding="utf-8") as file:
                token = file.read().strip()
        except OSError as exc:
            log.warning("token file %s: %s; keeping the last token", path, exc)
            return
        if token:
            configuration.api_key["BearerToken"] = token

    return refresh


class KubeClient:
    """JSON requests over the official client's configured connection (auth, TLS, server)."""

    def __init__(self, api_client: kubernetes.client.ApiClient, *, timeout: float = 30.0) -> None:
        self.api = api_client
        self.timeout = timeout

    POOL = 64
    """HTTP connections kept per server: enough for the binder's workers and every informer's watch."""

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None) -> KubeClient:
        configuration = kubernetes.client.Configuration()
        configuration.connection_pool_maxsize = cls.POOL
        try:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, context=context, client_configuration=configuration)
        except Exception as outside:  # ConfigException, or YAML that does not parse
            if path is not None or not isinstance(outside, kubernetes.config.ConfigException):
                raise ValueError(f"kubeconfig {path or '(default)'}: {' '.join(str(outside).split())[:300]}") \
                    from None
            try:
                kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration)
            except kubernetes.config.ConfigException:
                raise ValueError("no cluster to connect to: no kubeconfig ($KUBECONFIG or ~/.kube/config) and "
                                 "not in a pod; pass --kubeconfig FILE or --server URL --token-file FILE") from None
        return cls(kubernetes.client.ApiClient(configuration))

    @classmethod
    def connect(cls, kubeconfig: str | None = None, server: str | None = None, token_file: str | None = None,
                ca_file: str | None = None, insecure: bool = False, context: str | None = None) -> KubeClient:
        """What the processes' connection flags say: ``server`` + ``token_file`` (+ ``ca_file``), else a
        kubeconfig, else the in-cluster ServiceAccount. A ValueError names a missing flag. The API server's
        certificate is verified (against ``ca_file``, else the system's CAs) unless ``insecure`` is asked
        for explicitly: a token is never sent over unverified TLS by default."""
        if server:
            if token_file is None:
                raise ValueError("--server needs --token-file")
            with open(token_file, encoding="utf-8") as token:
                client = cls.from_token(server, token.read().strip(), ca_file=ca_file, insecure=insecure)
            client.api.configuration.refresh_api_key_hook = _reread(token_file)
            return client
        return cls.from_kubeconfig(kubeconfig, context)

    @classmethod
    def from_token(cls, host: str, token: str, *, ca_file: str | None = None, insecure: bool = False) -> KubeClient:
        configuration = kubernetes.client.Configuration()
        configuration.connection_pool_maxsize = cls.POOL
        configuration.host = host
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        configuration.verify_ssl = not insecure  # no CA file: the system's CAs
        configuration.ssl_ca_cert = ca_file
        return cls(kubernetes.client.ApiClient(configuration))

    def _send(self, method: str, path: str, query: Mapping[str, Any] | None, body: Any, content_type: str | None,
              timeout: float | tuple[float, float] | None) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        serialized = self.api.param_serialize(method, path, query_params=list((query or {}).items()),
                                              header_params=headers, body=body, auth_settings=["BearerToken"])
        return self.api.call_api(*serialized[:4], _request_timeout=timeout)

    def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None,
                content_type: str | None = None, timeout: float | None = None) -> dict[str, Any]:
        """One request; ``timeout`` (seconds, default the client's) bounds the connect and each read."""
        response = self._send(method, path, query, body, content_type, self.timeout if timeout is None else timeout)
        data = response.read()
        if response.status >= 400:
            raise _error(response.status, data, f"{method} {path}")
        return json.loads(data) if data else {}

    def stream(self, path: str, query: Mapping[str, Any], timeout: float,
               streams: OpenStreams | None = None) -> Iterator[dict[str, Any]]:
        """The lines of a watch, as JSON objects; ends when the server closes the watch, or at once when
        ``streams`` (where the open response is kept meanwhile) is closed."""
        response = self._send("GET", path, query, None, None, (10.0, timeout))
        if response.status >= 400:
            raise _error(response.status, response.read(), f"watch {path}")
        raw = response.response
        buffer = b""
        if streams is not None:
            streams.add(raw)
        try:
            for chunk in raw.stream(4096, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            if streams is not None and streams.discard(raw):
                raw.close()  # cut: its socket is half shut, never to be pooled again
            else:
                raw.release_conn()


class OpenStreams:
    """The watch responses being read, so that :meth:`close` can end them from another thread.

    Invariant: a reading thread blocks in ``recv`` for as long as its watch is idle (minutes, up to the
    watch's timeout); shutting the response's socket down for reading ends that read at once (it sees the
    end of the stream). After :meth:`close`, a response added (a watch opened while stopping) is cut at once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[Any] = set()
        self._cut: set[Any] = set()
        self.closed = False

    def add(self, response: Any) -> None:
        with self._lock:
            if not self.closed:
                self._open.add(response)
                return
            self._cut.add(response)
        _shut_down(response)

    def discard(self, response: Any) -> bool:
        """Forget a finished response; True when it was cut."""
        with self._lock:
            self._open.discard(response)
            if response in self._cut:
                self._cut.discard(response)
                return True
            return False

    def close(self) -> None:
        with self._lock:
            self.closed = True
            cut, self._open = self._open, set()
            self._cut |= cut
        for response in cut:
            _shut_down(response)


def _shut_down(response: Any) -> None:
    """End a blocked read on ``response`` (urllib3's ``HTTPResponse.shutdown``: its socket, for reading)."""
    with contextlib.suppress(OSError, ValueError, RuntimeError):  # already closed or released: nothing to end
        response.shutdown()


def _error(status: int, data: bytes, what: str) -> Exception:
    try:
        message = json.loads(data).get("message", "")
    except (ValueError, AttributeError):
        message = data[:200].decode(errors="replace") if data else ""
    text = f"{what}: {message}"
    if status == 404:
        return NotFound(text)
    if status == 409:
        return Conflict(text)
    if status in (400, 422):
        return Invalid(text)
    if status == 429:
        return TooManyRequests(text)
    return ApiError(status, text)


# ----------------------------------------------------------------------------------- the cluster


class Fenced(RuntimeError):
    """A write refused before it was sent: this replica is not (or no longer surely) the leader, or it is
    stopping."""


class _TokenBucket:
    """At most ``qps`` acquisitions per second, ``burst`` at once (client-go's flowcontrol)."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps, self.burst = qps, burst
        self.tokens = float(burst)
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def take(self, cancel: threading.Event | None = None) -> None:
        """Wait for a token; returns at once (without one) when ``cancel`` is set meanwhile."""
        while True:
            with self.lock:
                now = time.monotonic()
                self.tokens = min(self.burst, self.tokens + (now - self.last) * self.qps)
                self.last = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                wait = (1 - self.tokens) / self.qps
            if cancel is None:
                time.sleep(wait)
            elif cancel.wait(wait):
                return


class KubeCluster:
    """Implements ``ObjectStore``, ``Binder``, ``Evictor`` and ``StatusUpdater`` against an API server."""

    def __init__(self, client: KubeClient, *, qps: float = 1000.0, burst: int = 2000, bind_workers: int = 16,
                 watch_timeout: float = 300.0, scopes: Mapping[str, str] | None = None) -> None:
        """``scopes``: kinds to list and watch in one namespace only (kind → namespace); the others
        cluster-wide."""
        self.client = client
        self.scopes = dict(scopes or {})
        self.watch_timeout = watch_timeout
        self.bind_workers = bind_workers
        self._bucket = _TokenBucket(qps, burst)
        self._cache: dict[str, dict[str, AnyObject]] = {}
        self._interner = Interner()
        """Equal parts of the cached objects held once (a pod's containers, tolerations, defaults): used only on
        :meth:`pump`'s thread, as the cache is."""
        self._synced: dict[str, threading.Event] = {}
        self._resources: dict[str, Resource] = {}
        """Kinds this server serves at another version than :data:`RESOURCES` says (found by listing)."""
        self._events: queue.Queue[tuple[str, str, dict[str, Any] | None]] = queue.Queue()
        self._watchers: list[tuple[frozenset[str], WatchHandler]] = []
        self._stopping = threading.Event()
        self._streams = OpenStreams()
        self._threads: list[threading.Thread] = []
        self._versions: dict[str, str] = {}
        self.relists = 0
        self.version = 0
        self._reported: set[tuple[str, str]] = set()
        self.events = EventSink(self._write)
        """Where :meth:`record_event` sends: aggregated and rate-limited as client-go's recorder."""
        self.fence: Callable[[], bool] | None = None
        """Asked before every write: False refuses it (:class:`Fenced`). The processes set the elector's
        ``holds``."""
        self.cancel: threading.Event | None = None
        """Once set (SIGTERM), every write is refused and a bind waiting for its QPS token gives up."""

    # ------------------------------------------------------------------------------ informers

    def _resource(self, kind: str) -> Resource:
        return self._resources.get(kind) or RESOURCES[kind]

    def start(self, kinds: Sequence[str]) -> None:
        """Start an informer per kind (idempotent per kind)."""
        for kind in kinds:
            if kind in self._synced:
                continue
            self._cache[kind] = {}
            self._synced[kind] = threading.Event()
            thread = threading.Thread(target=self._inform, args=(kind,), daemon=True, name=f"informer-{kind}")
            thread.start()
            self._threads.append(thread)

    def wait_synced(self, timeout: float = 60.0, cancel: threading.Event | None = None) -> bool:
        """True once every informer listed once (then :meth:`pump` to deliver); False after ``timeout``
        seconds, or as soon as ``cancel`` is set (a process told to stop while it syncs)."""
        deadline = time.monotonic() + timeout
        for synced in list(self._synced.values()):
            while not synced.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
                if (cancel is not None and cancel.is_set()) or time.monotonic() >= deadline:
                    return False
        return True

    PAGE = 500
    """Objects per LIST page (``limit``/``continue``): a 100,000-pod cluster is read in bounded pieces."""

    def _list(self, kind: str) -> tuple[list[dict[str, Any]], str]:
        """Every object of ``kind``, page by page, and the list's resourceVersion (the first page's: the
        pages are one consistent snapshot). An expired ``continue`` (410) starts the list again."""
        resource = self._resource(kind)
        while True:
            items: list[dict[str, Any]] = []
            version, token = "", ""
            try:
                while True:
                    query = {"limit": self.PAGE, **({"continue": token} if token else {})}
                    try:
                        data = self.client.request("GET", resource.path(self.scopes.get(kind)), query=query)
                    except NotFound:
                        fallback = FALLBACK_VERSIONS.get(kind)
                        if fallback is None or resource.version == fallback:
                            raise
                        resource = Resource(resource.group, fallback, resource.plural, resource.namespaced)
                        self._resources[kind] = resource
                        continue
                    items += data.get("items") or []
                    metadata = data.get("metadata") or {}
                    version = version or str(metadata.get("resourceVersion", ""))
                    token = str(metadata.get("continue") or "")
                    if not token:
                        return items, version
            except ApiError as exc:
                if exc.status != 410:  # Gone: the continue token expired; list again from the start
                    raise

    def _inform(self, kind: str) -> None:
        backoff = Backoff()
        version = ""
        while not self._stopping.is_set():
            try:
                if not version:
                    items, version = self._list(kind)
                    self._events.put((kind, "SYNC", {"items": items}))
                    self._synced[kind].set()
                for event in self.client.stream(self._resource(kind).path(self.scopes.get(kind)),
                                                {"watch": "true", "resourceVersion": version,
                                                 "allowWatchBookmarks": "true",
                                                 "timeoutSeconds": int(self.watch_timeout)},
                                                self.watch_timeout + 10, self._streams):
                    kind_of_event = event.get("type", "")
                    obj = event.get("object") or {}
                    if kind_of_event == "ERROR":
                        if obj.get("code") == 410:  # too old: list again
                            self.relists += 1
                            version = ""
                            break
                        raise ApiError(int(obj.get("code", 500)), str(obj.get("message", "")))
                    version = str(obj.get("metadata", {}).get("resourceVersion", version))
                    if kind_of_event != "BOOKMARK":
                        self._events.put((kind, kind_of_event, obj))
                backoff.reset()
            except Exception as exc:  # connection refused, reset, timeouts: wait, then resume or re-list
                if self._stopping.is_set():
                    return
                delay = backoff.next()
                log.warning("%s informer: %s; retrying in %.1fs", kind, exc, delay)
                if isinstance(exc, ApiError) and exc.status == 410:
                    version = ""
                self._stopping.wait(delay)

    def pump(self, limit: int | None = None) -> int:
        """Apply what the informers saw to the cache and deliver it to the watch handlers, in order, on the
        caller's thread; returns how many changes were delivered."""
        delivered = 0
        while limit is None or delivered < limit:
            try:
                kind, type_, raw = self._events.get_nowait()
            except queue.Empty:
                break
            if type_ == "SYNC":
                delivered += self._resync(kind, (raw or {}).get("items", []))
                continue
            try:
                obj = self._interner.share(from_api(kind, raw or {}))
            except Invalid as exc:  # the webhook refuses such objects; one that got in is reported, not fatal
                self._report_invalid(kind, raw or {}, exc)
                continue
            key = object_key(obj)
            cache = self._cache[kind]
            old = cache.get(key)
            if type_ == "DELETED":
                cache.pop(key, None)
                self._deliver(WatchEvent("DELETED", obj, old or obj))
            else:
                if old is not None and old.metadata.resourceVersion == obj.metadata.resourceVersion:
                    continue
                cache[key] = obj
                self._deliver(WatchEvent("MODIFIED" if old is not None else "ADDED", obj, old))
            delivered += 1
        return delivered

    def _resync(self, kind: str, items: list[dict[str, Any]]) -> int:
        """A (re-)list: deliver what changed against the cache, including deletions missed meanwhile."""
        fresh: dict[str, AnyObject] = {}
        for raw in items:
            try:
                obj = self._interner.share(from_api(kind, raw))
            except Invalid as exc:
                self._report_invalid(kind, raw, exc)
                continue
            fresh[object_key(obj)] = obj
        cache = self._cache[kind]
        changes = 0
        for key, gone in list(cache.items()):
            if key not in fresh:
                del cache[key]
                self._deliver(WatchEvent("DELETED", gone, gone))
                changes += 1
        for key, obj in fresh.items():
            previous = cache.get(key)
            if previous is None or previous.metadata.resourceVersion != obj.metadata.resourceVersion:
                cache[key] = obj
                self._deliver(WatchEvent("MODIFIED" if previous is not None else "ADDED", obj, previous))
                changes += 1
        return changes

    def _report_invalid(self, kind: str, raw: Mapping[str, Any], exc: Exception) -> None:
        """A Warning Event ``InvalidObject`` and, for Jobs, PodGroups and Queues, a status condition ``Invalid``
        on an object hetsched cannot read (once per problem); the object is left out of the cache and every
        component keeps running."""
        metadata = raw.get("metadata") or {}
        seen = (metadata.get("uid", ""), str(exc))
        if seen in self._reported:  # by message: the condition written below makes a new version
            return
        self._reported.add(seen)
        log.error("ignoring %s", exc)
        self._post_event(kind, metadata, "InvalidObject", str(exc), "Warning")
        if kind in ("Job", "PodGroup", "Queue") and metadata.get("name"):  # and a condition on the object itself
            condition = {"type": "Invalid", "status": "True", "reason": "ValidationFailed",
                         "message": str(exc)[:1024], "lastTransitionTime": to_rfc3339(time.time())}
            path = self._resource(kind).path(metadata.get("namespace"), metadata["name"], "status")
            with contextlib.suppress(ApiError, Invalid, NotFound, Conflict, TooManyRequests, Fenced):
                self._write("PATCH", path, body={"status": {"conditions": [condition]}},
                            content_type="application/merge-patch+json")

    def _deliver(self, event: WatchEvent) -> None:
        self.version += 1
        for kinds, handler in list(self._watchers):
            if event.object.kind in kinds:
                handler(event)

    def stop(self, timeout: float = 1.0) -> bool:
        """Stop the informers: cut their watch streams (an idle watch holds its thread for minutes) and
        join every thread within one shared ``timeout``; True when all ended. The threads are daemons, so
        one still inside a request (a list from a server that stopped answering) never holds the process.
        Queued Events are sent first, within half the ``timeout`` (none once SIGTERM cancelled writes)."""
        deadline = time.monotonic() + timeout
        self.events.stop(timeout / 2, send=not (self.cancel is not None and self.cancel.is_set()))
        self._stopping.set()
        self._streams.close()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    def _write(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """Every write goes through here: refused (:class:`Fenced`) unless ``fence`` holds and nothing
        cancelled it, checked just before the request is sent."""
        if self._stopping.is_set() or (self.cancel is not None and self.cancel.is_set()):
            raise Fenced(f"{method} {path}: not sent, stopping")
        if self.fence is not None and not self.fence():
            raise Fenced(f"{method} {path}: not sent, this replica does not hold the Lease (or could not renew "
                         "it within the renew deadline)")
        return self.client.request(method, path, **kwargs)

    # ------------------------------------------------------------------------------ ObjectStore

    def watch(self, kinds: tuple[str, ...], handler: WatchHandler, *, replay: bool = True) -> Callable[[], None]:
        self.start([k for k in kinds if k in RESOURCES])
        entry = (frozenset(kinds), handler)
        self._watchers.append(entry)
        if replay:
            for kind in kinds:
                for obj in list(self._cache.get(kind, {}).values()):
                    handler(WatchEvent("ADDED", obj))

        def stop() -> None:
            if entry in self._watchers:
                self._watchers.remove(entry)

        return stop

    def get(self, kind: str, key: str) -> AnyObject:
        cache = self._cache.get(kind)
        if cache is not None and self._synced[kind].is_set():
            try:
                return cache[key]
            except KeyError:
                raise NotFound(f"{kind} {key} not found") from None
        namespace, _, name = key.rpartition("/")
        return from_api(kind, self.client.request("GET", self._resource(kind).path(namespace or None, name)))

    def list(self, kind: str) -> list[AnyObject]:
        cache = self._cache.get(kind)
        if cache is not None and self._synced[kind].is_set():
            return list(cache.values())
        items, _ = self._list(kind)
        return [from_api(kind, item) for item in items]

    def create(self, obj: AnyObject) -> AnyObject:
        resource = self._resource(obj.kind)
        namespace = obj.metadata.namespace or ("default" if resource.namespaced else None)
        if resource.namespaced and obj.metadata.namespace is None:
            obj = obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"namespace": namespace})})
        data = self._write("POST", resource.path(namespace), body=to_api(obj, resource))
        return from_api(obj.kind, data)

    def update(self, obj: AnyObject) -> AnyObject:
        """PUT the object (metadata and spec) and, when its status changed, its status subresource; both
        carry the resourceVersion, so a stale write is a Conflict."""
        resource = self._resource(obj.kind)
        namespace, _, name = object_key(obj).rpartition("/")
        body = to_api(obj, resource)
        current = self._cache.get(obj.kind, {}).get(object_key(obj))
        status_changed = current is None or getattr(current, "status", None) != getattr(obj, "status", None)
        rest_changed = current is None or (current.model_dump(exclude={"status"}) != obj.model_dump(
            exclude={"status"}))
        stored: dict[str, Any] | None = None
        if rest_changed:
            stored = self._write("PUT", resource.path(namespace or None, name), body=body)
            body["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        if status_changed and "status" in body:
            with contextlib.suppress(NotFound):  # a kind without a status subresource: the PUT above took it
                stored = self._write("PUT", resource.path(namespace or None, name, "status"), body=body)
        return from_api(obj.kind, stored) if stored is not None else obj

    def patch(self, kind: str, key: str, patch: Mapping[str, Any]) -> AnyObject:
        namespace, _, name = key.rpartition("/")
        data = self._write("PATCH", self._resource(kind).path(namespace or None, name),
                                   body=convert_times(dict(patch), to_rfc3339),
                                   content_type="application/merge-patch+json")
        return from_api(kind, data)

    def delete(self, kind: str, key: str) -> AnyObject:
        """DELETE; the object as it was (from the informer) or as the answer gives it. A kind not watched is
        not read first: the controller may delete the job plugins' Secrets and ConfigMaps, never read them."""
        namespace, _, name = key.rpartition("/")
        synced = self._synced.get(kind)
        current = self.get(kind, key) if synced is not None and synced.is_set() else None
        data = self._write("DELETE", self._resource(kind).path(namespace or None, name))
        if current is not None:
            return current
        if data.get("kind") == kind:
            return from_api(kind, data)
        return self.get(kind, key)  # a Status answer (rare): what is left, or NotFound

    # ------------------------------------------------------------------------------ Binder, Evictor

    def bind(self, pod_key: str, node: str, annotations: Mapping[str, str] | None = None) -> None:
        """Bind through the Binding subresource; its annotations land on the pod. A pod given chips is
        stamped ``predicate-time`` (nanoseconds, now): its place in its node's bind order (:meth:`bind_all`)."""
        namespace, _, name = pod_key.rpartition("/")
        self._bucket.take(self.cancel)
        stamped = dict(annotations or {})
        if POD_ANNOTATION in stamped or PARTITIONS_ANNOTATION in stamped:
            stamped[PREDICATE_TIME] = str(time.time_ns())
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace, "annotations": stamped},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        self._write("POST", RESOURCES["Pod"].path(namespace, name, "binding"), body=body)

    def bind_all(self, binds: Sequence[BindRequest]) -> builtins.list[Failure]:
        """Bind many pods within the QPS budget from ``bind_workers`` threads; each node's pods with chips
        one after the other in the order given (other pods all in parallel); returns the failures.

        Invariant: on one node, ``predicate-time`` order is the order the binds of pods with chips reach
        kubelet — the order it admits them and asks the device plugin for their chips — so a device plugin
        can tell which pod an ``Allocate`` is for (the kubelet API does not say): the first unadmitted one by
        that stamp."""
        by_node: dict[str, builtins.list[tuple[str, Mapping[str, str] | None]]] = {}
        for pod, node, handoff in binds:  # a BindRequest, or any (pod, node, annotations) triple
            chain = node if handoff and POD_ANNOTATION in handoff else f"{node}\0{pod}"  # no chips: no order
            by_node.setdefault(chain, []).append((pod, handoff))

        def bind_node(item: tuple[str, builtins.list[tuple[str, Mapping[str, str] | None]]]) -> builtins.list[Failure]:
            chain, pods = item
            node = chain.split("\0", 1)[0]
            failed: builtins.list[Failure] = []
            for pod, handoff in pods:
                try:
                    self.bind(pod, node, handoff)
                except Exception as exc:  # this pod stays unbound; the node's next pods still go
                    failed.append(Failure(pod, str(exc)))
            return failed

        return self._from_workers(bind_node, list(by_node.items()))

    def _from_workers(self, work: Callable[[Any], builtins.list[Failure]],
                      items: Sequence[Any]) -> builtins.list[Failure]:
        """``work`` on each item from ``bind_workers`` threads (on this one for a single item); the failures
        it returned, together. An exception it raised is raised here once all have ended."""
        if len(items) <= 1:
            return [failure for item in items for failure in work(item)]
        with futures.ThreadPoolExecutor(max_workers=self.bind_workers) as pool:
            return [failure for failed in pool.map(work, items) for failure in failed]

    def evict(self, pod_key: str, reason: str) -> None:
        namespace, _, name = pod_key.rpartition("/")
        path = RESOURCES["Pod"].path(namespace, name, "eviction")
        for version in ("policy/v1", "policy/v1beta1"):
            body = {"apiVersion": version, "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
            try:
                self._write("POST", path, body=body)
                return
            except (NotFound, Invalid) as exc:  # an older server: no policy/v1 Eviction kind
                if version == "policy/v1beta1" or ("not found" in str(exc).lower() and "pods" in str(exc).lower()):
                    raise
        raise NotFound(f"pod {pod_key}: eviction not accepted")

    # ------------------------------------------------------------------------------ StatusUpdater

    def update_podgroup_status(self, key: str, phase: str | None, conditions: Sequence[Condition] | None) -> None:
        for _ in range(5):
            group = self.get("PodGroup", key)
            update: dict[str, Any] = {}
            if phase is not None:
                update["phase"] = phase
            if conditions is not None:
                update["conditions"] = list(conditions)
            changed = group.model_copy(update={"status": group.status.model_copy(update=update)})  # type: ignore[union-attr]
            try:
                self.update(changed)
                return
            except Conflict:
                fresh = from_api("PodGroup", self.client.request(
                    "GET", RESOURCES["PodGroup"].path(*key.split("/", 1))))
                self._cache["PodGroup"][key] = fresh
        raise Conflict(f"PodGroup {key}: status kept changing; the next cycle writes it again")

    def update_podgroup_statuses(self, updates: Sequence[PodGroupStatusUpdate]) -> builtins.list[Failure]:
        """From ``bind_workers`` threads within the QPS budget; a PodGroup gone or changing under us is a
        failure (the next cycle writes it again), any other error is raised once all have ended."""

        def write(update: PodGroupStatusUpdate) -> builtins.list[Failure]:
            self._bucket.take(self.cancel)
            try:
                self.update_podgroup_status(update.key, update.phase, update.conditions)
            except (Conflict, NotFound) as exc:
                return [Failure(update.key, str(exc))]
            return []

        return self._from_workers(write, updates)

    def nominate(self, pod_key: str, node: str) -> None:
        namespace, _, name = pod_key.rpartition("/")
        self._write("PATCH", RESOURCES["Pod"].path(namespace, name, "status"),
                    body={"status": {"nominatedNodeName": node}}, content_type="application/merge-patch+json")

    def set_pod_conditions(self, updates: Sequence[tuple[str, Condition]]) -> builtins.list[Failure]:
        """A strategic-merge patch of each pod's status — its conditions merge by ``type``, so the kubelet's
        own stay as they are — from ``bind_workers`` threads within the QPS budget."""

        def patch(update: tuple[str, Condition]) -> builtins.list[Failure]:
            pod_key, condition = update
            namespace, _, name = pod_key.rpartition("/")
            stamped = {"type": condition.type, "status": condition.status, "reason": condition.reason,
                       "message": condition.message, "lastProbeTime": None,
                       "lastTransitionTime": to_rfc3339(time.time())}
            try:
                self._bucket.take(self.cancel)
                self._write("PATCH", RESOURCES["Pod"].path(namespace, name, "status"),
                            body={"status": {"conditions": [stamped]}},
                            content_type="application/strategic-merge-patch+json")
            except Exception as exc:  # gone, or fenced: the next cycle that finds it pending writes it again
                return [Failure(pod_key, str(exc))]
            return []

        return self._from_workers(patch, updates)

    def record_event(self, obj: AnyObject, reason: str, message: str, type_: str = "Normal") -> None:
        self._post_event(obj.kind, obj.metadata.model_dump(), reason, message, type_)

    def _post_event(self, kind: str, metadata: Mapping[str, Any], reason: str, message: str, type_: str) -> None:
        """A ``core/v1`` Event about the object ``metadata`` describes, queued for :mod:`cluster.events`
        (aggregated, spam-filtered, sent by its own thread: a cycle never waits for one)."""
        resource = self._resource(kind)
        namespace = metadata.get("namespace") or "default"
        self.events.record({"apiVersion": resource.api_version, "kind": kind, "name": metadata.get("name"),
                            "namespace": namespace if resource.namespaced else None,
                            "uid": metadata.get("uid") or None}, reason, message, type_)
