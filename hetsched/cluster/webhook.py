"""``hetsched webhook``: the validating and mutating admission webhook for Volcano's objects.

Who calls it: the API server (``ValidatingWebhookConfiguration`` → ``/validate``,
``MutatingWebhookConfiguration`` → ``/mutate``, over HTTPS with the chart's certificate), and the tests.

- **Validate** (Jobs, Queues, PodGroups, Commands, PodDisruptionBudgets, HyperNodes — each on its own; the
  HyperNode tree as a whole is checked where it is built): the checks ``hetsched validate``
  runs, with the same messages (``admission: document 1 (Job/train): spec.policies[0].event: …``); an
  update of a Job may change only what Volcano's webhook lets change (``spec.minAvailable`` and task
  replicas). A refused object gets HTTP-style code 400 and the message; the API server shows it to the user.
  A Queue deletion is refused (403) for ``default`` and ``root`` and for a queue that is not Closed, as
  Volcano's webhook refuses it (``deletion_problem``).
- **Mutate** (Jobs): Volcano's defaults — ``schedulerName: volcano``, ``queue: default``, ``maxRetry: 3``,
  ``minAvailable`` = the sum of the tasks' replicas, each task's ``name`` when missing (``task-<i>``) — as a
  JSON Patch. (PodGroups for plain pods are made by the controller.)
- **Restrict** (Node and ConfigMap writes, Secret creates and deletes): what RBAC cannot say — the node
  agent writes only its own Node and its node's Ascend ConfigMap, the controller only Secrets a Volcano Job
  owns (``cluster.restriction``); a refusal is a 403. Without a restriction configured (no API access to
  look pods up) every review on this path is refused: it never allows what it could not check.
- It cannot be tricked or blocked: a body that is not an AdmissionReview with a request and a uid gets
  HTTP 400; a review it cannot read (no object for a create or an update) is denied, never allowed; an
  odd value where a number belongs (``replicas: null``, ``[1]``, ``{}``, ``1e400``) is denied naming the
  field, and any other error while judging one review is a denial (``code`` 500), never a dropped
  connection or a traceback; an unknown path is 404; a body over ``MAX_BODY`` is refused (413) before it is
  read; JSON nested too deep is a 400; metric labels are bounded (known paths and kinds, else ``other``).
- It cannot be starved or blown past its memory limit: each connection has its own thread (HTTP/1.1
  keep-alive, so the API server reuses it), at most ``MAX_CONNECTIONS`` at once (more are closed at once);
  each recv waits at most ``TIMEOUT`` and a whole request — line, headers and body — must arrive within
  ``DEADLINE`` (a client trickling a byte at a time is cut off); the bodies being read and judged at once
  hold at most ``BODY_BUDGET`` bytes (a review waits for room, or gets 503 at its deadline), so 40
  concurrent 7 MB reviews are judged a few at a time within the pod's 512 Mi.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hetsched.api import job_plugins, membership, queue_access
from hetsched.api.job_update import update_problem
from hetsched.api.manifest import parse_document
from hetsched.api.objects import MAX_REPLICAS, Job, PodGroup
from hetsched.api.priority_policy import DEFAULT as DEFAULT_PRIORITY
from hetsched.api.priority_policy import PriorityPolicy, job_class_names
from hetsched.api.times import epoch_times
from hetsched.cluster.restriction import Restriction
from hetsched.devices.inventory import is_handoff_key
from hetsched.devices.partition_requests import problems as partition_problems
from hetsched.metrics.agents import WebhookMetrics

log = logging.getLogger("hetsched.webhook")
SOURCE = "admission"
PATHS = ("/validate", "/mutate", "/restrict", "/pods")
KINDS = frozenset({"Job", "Queue", "PodGroup", "Command", "PodDisruptionBudget", "Node", "ConfigMap", "Secret",
                   "HyperNode", "QueueUsage"})
MAX_BODY = 8 * 2**20
"""Bytes of one review: an object and its old version, each within etcd's 1.5 MiB, with room to spare."""
BODY_BUDGET = 24 * 2**20
"""Bytes of review bodies read and judged at once (a 7 MB review becomes ~10× that as objects)."""
MAX_CONNECTIONS = 128
"""Connections served at once (each a thread); the API server keeps a few per replica."""
DEADLINE = 15.0
"""Seconds for one whole request to arrive and be judged (the API server's own webhook timeout is 10 s)."""


class _Budget:
    """Bytes that may be in flight; :meth:`take` waits until they are free, or until its deadline."""

    def __init__(self, size: int) -> None:
        self.free = size
        self._changed = threading.Condition()

    def take(self, amount: int, deadline: float) -> bool:
        with self._changed:
            while self.free < amount:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            self.free -= amount
            return True

    def give(self, amount: int) -> None:
        with self._changed:
            self.free += amount
            self._changed.notify_all()


class MalformedReview(ValueError):
    """Not an AdmissionReview this webhook can answer (HTTP 400)."""


SCHEDULERS = ("hetsched", "volcano")
"""Pods these schedulers place go through the queue rule (a pod without a PodGroup names its queue)."""
QueueLookup = Callable[[str], tuple[dict[str, str], str] | None]
"""Queue name → (its annotations, its parent), or None when it is not there or cannot be read now."""


@dataclass(frozen=True)
class PodAdmission:
    """What ``/pods`` enforces: only ``scheduler`` (its ServiceAccount's username) writes hand-off annotations,
    and each namespace uses only the PriorityClasses ``policy`` lets it; with ``queues``, what ``/validate``
    and ``/pods`` also enforce: a Job, PodGroup or pod names only a queue its namespace may use
    (``api.queue_access``; a queue that cannot be read is let through — the scheduler holds the rule too)."""

    scheduler: str = "system:serviceaccount:hetsched:hetsched-scheduler"
    policy: PriorityPolicy = DEFAULT_PRIORITY
    queues: QueueLookup | None = None
    namespaces: NamespaceLookup | None = None
    """What ``/mutate`` gives a Job that names no queue (the Namespace's ``hetsched.io/default-queue``), and the
    labels a queue's namespace selector matches."""


NamespaceLookup = Callable[[str], tuple[dict[str, str], dict[str, str]] | None]
"""Namespace name → (its annotations, its labels), or None when it is not there or cannot be read now."""


def queue_problem(queue: str, namespace: str, lookup: QueueLookup | None,
                  namespaces: NamespaceLookup | None = None) -> str:
    """Why ``namespace`` may not submit to ``queue`` ("" when it may, or when the queues cannot be read). A
    namespace that cannot be read has no labels but its name (a selector then admits it by name only)."""
    if lookup is None:
        return ""

    def tree(name: str) -> tuple[queue_access.Admits | None, str] | None:
        found = lookup(name)
        return (queue_access.read(found[0]), found[1]) if found is not None else None

    def labels() -> dict[str, str]:
        found = namespaces(namespace) if namespaces is not None else None
        return found[1] if found is not None else {}

    refused = queue_access.refusing(queue, namespace, tree, labels)
    return queue_access.refusal(namespace, refused) if refused is not None else ""


def _annotations(obj: Any) -> dict[str, Any]:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    found = metadata.get("annotations") if isinstance(metadata, dict) else None
    return found if isinstance(found, dict) else {}


def check_pod(request: dict[str, Any], admission: PodAdmission) -> str:
    """Why a Pod create or update is refused ("" when it is not): a hand-off annotation set or changed by anyone
    but the scheduler, or a PriorityClass its namespace may not use."""
    raw = request.get("object")
    user = request.get("userInfo")
    username = user.get("username") if isinstance(user, dict) else None
    namespace = str(request.get("namespace") or "default")
    name = str(_map_get(raw, "metadata", "name") or request.get("name") or "")[:253]
    if username != admission.scheduler:
        old = _annotations(request.get("oldObject")) if request.get("operation") == "UPDATE" else {}
        new = _annotations(raw)
        changed = sorted(str(k)[:100] for k, v in new.items() if is_handoff_key(str(k)) and v != old.get(k))
        if changed:
            return (f"Pod {namespace}/{name}: metadata.annotations[{changed[0]}]: written only by the scheduler "
                    f"({admission.scheduler}), which decides which chips a pod gets; remove it")
    klass = _map_get(raw, "spec", "priorityClassName")
    if isinstance(klass, str):
        problem = admission.policy.problem(klass, namespace)
        if problem:
            return f"Pod {namespace}/{name}: spec.priorityClassName: {problem}"
    annotations, labels = _annotations(raw), _map_get(raw, "metadata", "labels")
    labels = labels if isinstance(labels, dict) else {}
    ours = _map_get(raw, "spec", "schedulerName") in SCHEDULERS
    if ours and request.get("operation") == "CREATE" and not membership.group_name(annotations, labels):
        queue = membership.queue_name({k: str(v) for k, v in annotations.items()},
                                      {k: str(v) for k, v in labels.items()})
        problem = queue_problem(queue, namespace, admission.queues, admission.namespaces)
        if problem:
            return f"Pod {namespace}/{name}: metadata.annotations[{membership.QUEUE_KEY}]: {problem}"
    return ""


def _map_get(obj: Any, *path: str) -> Any:
    for step in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(step)
    return obj


def review(body: Any, path: str, restriction: Restriction | None = None,
           admission: PodAdmission | None = None) -> dict[str, Any]:
    """The AdmissionReview answer for one request (``path``: ``/validate``, ``/mutate``, ``/restrict`` or
    ``/pods``)."""
    if not isinstance(body, dict) or not isinstance(body.get("request"), dict):
        raise MalformedReview("expected an AdmissionReview with a request")
    request = body["request"]
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("the request has no uid")
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    raw = request.get("object")
    if path.startswith("/restrict"):
        refused = restriction.check(request) if restriction is not None else (
            "this webhook was started without --restrict-namespace: it cannot check the request")
        if refused:
            response = {"uid": uid, "allowed": False, "status": {"code": 403, "reason": "Forbidden",
                                                                 "message": refused}}
    elif path.startswith("/pods"):
        refused = check_pod(request, admission or PodAdmission()) if isinstance(raw, dict) else (
            "" if request.get("operation") == "DELETE" else "the review carries no object to check")
        if refused:
            response = {"uid": uid, "allowed": False, "status": {"code": 403, "reason": "Forbidden",
                                                                 "message": refused}}
    elif path.startswith("/validate") and request.get("operation") == "DELETE":
        refused = deletion_problem(request.get("oldObject"))
        if refused:
            response = {"uid": uid, "allowed": False, "status": {"code": 403, "reason": "Forbidden",
                                                                 "message": refused}}
    elif not isinstance(raw, dict):
        if request.get("operation") != "DELETE":  # nothing to judge only for a deletion
            response = {"uid": uid, "allowed": False, "status": {
                "code": 400, "reason": "BadRequest", "message": "the review carries no object to check"}}
    elif path.startswith("/validate"):
        chosen = admission or PodAdmission()
        problem = validate(raw, request.get("oldObject") if request.get("operation") == "UPDATE" else None,
                           str(request.get("namespace") or "default"), chosen.policy, chosen.queues,
                           chosen.namespaces)
        if problem:
            response = {"uid": uid, "allowed": False, "status": {"code": 400, "reason": "Invalid", "message": problem}}
    else:
        try:
            namespaces = (admission or PodAdmission()).namespaces
            spec = raw.get("spec")
            unnamed = raw.get("kind") == "Job" and isinstance(spec, dict) and spec.get("queue") in ("", None)
            found = namespaces(str(request.get("namespace") or "default")) \
                if namespaces is not None and unnamed else None  # read only for a Job that names none
            queue = queue_access.default_queue(found[0]) if found is not None else None
            patch = defaults(raw, queue or "default")
        except BadValue as exc:
            patch = []
            response = {"uid": uid, "allowed": False, "status": {"code": 400, "reason": "Invalid",
                                                                 "message": str(exc)}}
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": body.get("apiVersion", "admission.k8s.io/v1"), "kind": "AdmissionReview",
            "response": response}


ESSENTIAL_QUEUES = ("default", "root")


def deletion_problem(old: Any) -> str:
    """Why a deletion is refused ("" when it is not), as Volcano's webhook refuses it: the ``default`` and
    ``root`` Queues are never deleted (every Job without a queue, and every queue tree, need them), and a
    Queue is deleted only once Closed (jobs still in it would wait forever). Other kinds: allowed."""
    if not isinstance(old, dict) or old.get("kind") != "Queue":
        return ""
    name = str((old.get("metadata") or {}).get("name") or "")
    if name in ESSENTIAL_QUEUES:
        return f"Queue {name} cannot be deleted: every Job without a queue and every queue tree need it"
    state = str((old.get("status") or {}).get("state") or "Open")
    if state != "Closed":
        return (f"Queue {name} is {state}: only a Closed queue can be deleted (hetsched queue close {name}, "
                "then delete it once its jobs are done)")
    return ""


def validate(raw: dict[str, Any], old: dict[str, Any] | None, namespace: str = "default",
             policy: PriorityPolicy = DEFAULT_PRIORITY, queues: QueueLookup | None = None,
             namespaces: NamespaceLookup | None = None) -> str:
    """"" when the object is valid, else the messages ``hetsched validate`` prints (one per line), and those
    of the rules that need the request (a PriorityClass the namespace may not use, a hand-off annotation
    in a Job's pod template, a queue the namespace may not submit to)."""
    parsed = parse_document(epoch_times(raw), SOURCE, 1)
    if isinstance(parsed, list):
        return "\n".join(str(p) for p in parsed)
    kind, name = parsed.kind, parsed.metadata.name
    if isinstance(parsed, (Job, PodGroup)):
        previous = (old or {}).get("spec") if isinstance(old, dict) else None
        moved = not isinstance(previous, dict) or previous.get("queue") != parsed.spec.queue
        problem = queue_problem(parsed.spec.queue or "default", namespace, queues, namespaces) if moved else ""
        if problem:
            return f"{SOURCE}: {kind}/{name}: spec.queue: {problem}"
    for field_path, klass in job_class_names(raw):
        problem = policy.problem(klass, namespace)
        if problem:
            return f"{SOURCE}: {kind}/{name}: {field_path}: {problem}"
    for where, message in partition_problems(parsed):
        return f"{SOURCE}: {kind}/{name}: {where}: {message}"
    if isinstance(parsed, Job):
        for index, task in enumerate(parsed.spec.tasks):
            forged = sorted(k for k in task.template.metadata.annotations if is_handoff_key(k))
            if forged:
                return (f"{SOURCE}: Job/{name}: spec.tasks[{index}].template.metadata.annotations[{forged[0]}]: "
                        f"written only by the scheduler, which decides which chips a pod gets; remove it")
    if isinstance(parsed, Job) and old is not None:
        previous = parse_document(epoch_times(old), SOURCE, 1)
        if isinstance(previous, Job):
            found = update_problem(previous, parsed)
            if found is not None:
                return f"{SOURCE}: Job/{parsed.metadata.name}: {found[0]}: {found[1]}"
    return ""


class BadValue(ValueError):
    """A field of the object under review that cannot be defaulted (denied, naming the field)."""


def _replicas(task: dict[str, Any], index: int, name: str) -> int:
    value = task.get("replicas", 1)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPLICAS:
        raise BadValue(f"{SOURCE}: Job/{name}: spec.tasks[{index}].replicas: must be an integer from 0 to "
                       f"{MAX_REPLICAS:,}, got {json.dumps(value)[:40] if _jsonable(value) else type(value).__name__}")
    return value


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return False
    return True


def defaults(raw: dict[str, Any], queue: str = "default") -> list[dict[str, Any]]:
    """Volcano's Job defaults as JSON Patch operations (none for other kinds): schedulerName, queue (``queue``:
    the namespace's default queue, else ``default``), maxRetry, minAvailable, task names, and the plugins
    that ``mpi``, ``pytorch``, ``tensorflow`` and ``ray`` turn on; :class:`BadValue` for a value the defaults
    would be computed from that is not one (``replicas: null``)."""
    if raw.get("kind") != "Job" or not isinstance(raw.get("spec"), dict):
        return []
    spec = raw["spec"]
    metadata = raw.get("metadata")
    name = str(metadata.get("name", ""))[:253] if isinstance(metadata, dict) else ""
    patch: list[dict[str, Any]] = []
    for field, value in (("schedulerName", "volcano"), ("queue", queue), ("maxRetry", 3)):
        if field not in spec or (field == "queue" and spec[field] in ("", None)):
            patch.append({"op": "add", "path": f"/spec/{field}", "value": value})
    tasks = spec.get("tasks") if isinstance(spec.get("tasks"), list) else []
    if "minAvailable" not in spec:
        total = sum(_replicas(t, i, name) for i, t in enumerate(tasks) if isinstance(t, dict))
        patch.append({"op": "add", "path": "/spec/minAvailable", "value": total})
    for index, task in enumerate(tasks):
        if isinstance(task, dict) and not task.get("name"):
            patch.append({"op": "add", "path": f"/spec/tasks/{index}/name", "value": f"task-{index}"})
    plugins = spec.get("plugins")
    if isinstance(plugins, dict) and all(isinstance(a, list) for a in plugins.values()):
        completed = job_plugins.effective(plugins)  # the svc (and ssh) plugins the others need
        if completed != plugins:
            patch.append({"op": "replace", "path": "/spec/plugins", "value": completed})
    return patch


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses its connections

    def _answer(self, code: int, answer: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def _error(self, code: int, message: str) -> None:
        log.warning("admission request refused (%d): %s", code, message)
        self._answer(code, json.dumps({"error": message}).encode())

    def handle_one_request(self) -> None:
        """One request, within one deadline from the moment the server starts waiting for it (the server's
        reaper cuts the connection when it passes: a trickling client cannot hold its thread)."""
        server: _TLSServer = self.server  # type: ignore[assignment]
        self.deadline = time.monotonic() + server.DEADLINE
        server.watch(self.request, self.deadline)
        try:
            super().handle_one_request()
        finally:
            server.unwatch(self.request)

    def do_POST(self) -> None:
        server: _TLSServer = self.server  # type: ignore[assignment]
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True
            return self._error(411, "a Content-Length is required")
        if length < 0 or length > MAX_BODY:
            self.close_connection = True  # the body is not read
            return self._error(413, f"the review is {length:,} bytes; at most {MAX_BODY:,} are read")
        if not server.budget.take(length, self.deadline):  # room for its bytes and what they become
            self.close_connection = True
            return self._error(503, "too many large reviews at once; retry")
        try:
            self._judge(length)
        finally:
            server.budget.give(length)

    def _judge(self, length: int) -> None:
        metrics: WebhookMetrics | None = getattr(self.server, "metrics", None)
        started = time.perf_counter()
        path = self.path.split("?", 1)[0]
        label = path if path in PATHS else "other"
        data = self.rfile.read(length)
        if len(data) < length:  # the client went away, or the deadline cut it off
            self.close_connection = True
            return
        if path not in PATHS:
            return self._error(404, f"unknown path {path[:100]!r}; the webhook serves {', '.join(PATHS)}")
        body: Any = None
        try:
            body = json.loads(data)
            del data
            result = review(body, path, getattr(self.server, "restriction", None),
                            getattr(self.server, "admission", None))
        except (ValueError, RecursionError, UnicodeDecodeError) as exc:  # MalformedReview, JSON errors
            if metrics is not None:
                metrics.reviews.labels(label, "other", "malformed").inc()
            return self._error(400, f"malformed AdmissionReview: {str(exc)[:200]}")
        except Exception as exc:  # a bug on one odd object: denied (never allowed), and the next review served
            log.warning("admission review failed: %s: %s", type(exc).__name__, str(exc)[:200])
            request = body.get("request") if isinstance(body, dict) else None
            uid = request.get("uid") if isinstance(request, dict) else None
            if not isinstance(uid, str):
                return self._error(400, "malformed AdmissionReview: the request has no uid")
            result = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
                "uid": uid, "allowed": False, "status": {"code": 500, "reason": "InternalError", "message": (
                    f"{SOURCE}: the webhook could not judge this object ({type(exc).__name__}); it is refused")}}}
        if metrics is not None:
            kind = ((body["request"].get("kind") or {}) if isinstance(body["request"].get("kind"), dict) else {})
            kind_label = kind.get("kind") if kind.get("kind") in KINDS else "other"
            allowed = str(bool(result["response"].get("allowed"))).lower()
            metrics.reviews.labels(label, kind_label, allowed).inc()
            metrics.duration.labels(label).observe(time.perf_counter() - started)
        self._answer(200, json.dumps(result).encode())

    def do_GET(self) -> None:
        self.send_response(200 if self.path in ("/healthz", "/readyz") else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)


class _TLSServer(ThreadingHTTPServer):
    """HTTPS where each connection's TLS handshake runs in that connection's own thread, bounded by
    ``TIMEOUT``: a client that connects and says nothing ties up only its own thread, never the accept
    loop (so neither other reviews nor :meth:`WebhookServer.stop` wait on it). At most
    ``MAX_CONNECTIONS`` connections (threads) at once; a reaper thread cuts any whose request passed its
    deadline (``DEADLINE``: the TLS handshake and each request, line to last byte)."""

    TIMEOUT = 10.0
    DEADLINE = DEADLINE
    REAP = 0.25
    """Seconds between the reaper's looks at the deadlines."""
    daemon_threads = True
    request_queue_size = 1024
    """The listen backlog (socketserver's default is 5: a burst of connections beyond it waits for the
    clients' SYN retries, 1 s and 3 s — measured as a 2.6 s p99 with 100 clients before this)."""

    def __init__(self, address: tuple[str, int], context: ssl.SSLContext,
                 max_connections: int = MAX_CONNECTIONS, budget: int = BODY_BUDGET) -> None:
        super().__init__(address, _Handler)
        self.context = context
        self.budget = _Budget(budget)
        self.slots = threading.BoundedSemaphore(max_connections)
        self._deadlines: dict[Any, float] = {}
        self._raw: dict[Any, Any] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._reaper = threading.Thread(target=self._reap, daemon=True, name="webhook-reaper")
        self._reaper.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):  # full: close at once rather than queue a thread
            log.warning("webhook: at its connection limit; refusing one from %s", client_address)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def watch(self, connection: Any, deadline: float) -> None:
        with self._lock:
            self._deadlines[connection] = deadline

    def unwatch(self, connection: Any) -> None:
        with self._lock:
            self._deadlines.pop(connection, None)

    def _reap(self) -> None:
        while not self._stopped.wait(self.REAP):
            now = time.monotonic()
            with self._lock:
                late = [c for c, deadline in self._deadlines.items() if deadline < now]
                for connection in late:
                    del self._deadlines[connection]
                    raw = self._raw.get(connection, connection)
                    with contextlib.suppress(OSError):
                        raw.shutdown(socket.SHUT_RDWR)  # its blocked read returns; its thread ends

    def server_close(self) -> None:
        self._stopped.set()
        super().server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed (cut at its deadline, reset by the client): one line, no traceback."""
        error = sys.exc_info()[1]
        log.debug("webhook connection from %s ended: %s: %s", client_address, type(error).__name__, error)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.TIMEOUT)
        self.watch(request, time.monotonic() + self.DEADLINE)
        try:
            secure = self.context.wrap_socket(request, server_side=True)  # the handshake, in this thread
        except (OSError, ssl.SSLError) as exc:
            log.debug("TLS handshake with %s failed: %s", client_address, exc)
            return
        finally:
            self.unwatch(request)
        # the TLS socket took the connection over; the reaper shuts it down through a second handle (a read
        # blocked in the handler's thread then returns, without touching the TLS state from another thread)
        handle = socket.socket(fileno=os.dup(secure.fileno()))
        with self._lock:
            self._raw[secure] = handle
        try:
            super().finish_request(secure, client_address)
        finally:
            with self._lock:
                self._raw.pop(secure, None)
            handle.close()
            secure.close()


class WebhookServer:
    def __init__(self, cert: str, key: str, host: str = "127.0.0.1", port: int = 9443,
                 metrics: WebhookMetrics | None = None, restriction: Restriction | None = None, *,
                 max_connections: int = MAX_CONNECTIONS, body_budget: int = BODY_BUDGET,
                 admission: PodAdmission | None = None) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server = _TLSServer((host, port), context, max_connections, max(body_budget, MAX_BODY))
        self.server.metrics = metrics  # type: ignore[attr-defined]  # read by the handler
        self.server.restriction = restriction  # type: ignore[attr-defined]
        self.server.admission = admission or PodAdmission()  # type: ignore[attr-defined]
        self.port = int(self.server.server_address[1])
        self._thread: threading.Thread | None = None

    POLL = 0.1
    """Seconds between the accept loop's checks for :meth:`stop`."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self.server.serve_forever, args=(self.POLL,), daemon=True,
                                        name="webhook")
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop accepting (within one poll) and close the listening socket; reviews under way run on in
        their daemon threads until they end or the process does."""
        self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join(timeout)
