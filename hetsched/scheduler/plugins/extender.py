"""``extender``: ask an HTTP service at each extension point (Volcano's extender plugin and its protocol).

Who calls it: the session, at the points whose verb the configuration names. Each call is a JSON POST to
``<urlPrefix>/<verb>``; the body and the answer have the fields of Volcano's extender protocol
(``pkg/scheduler/plugins/extender/argument.go``)::

    predicate       {"task", "node"}            → {"status": "<why not>" (empty: fits), "code"}
    prioritize      {"task", "nodes": [...]}    → {"nodeScore": {"<node>": score}, "errorMessage"}
    preemptable     {"evictor", "evictees"}     → {"status": 1 permit | 0 abstain | -1 reject, "victims"}
    reclaimable     (the same)
    jobEnqueueable  {"job"}                     → {"status": 1 | 0 | -1}
    jobEnqueued     {"job"}                     (answer ignored)
    queueOverused   {"queue"}                   → {"overused": bool}
    jobReady        {"job"}                     → {"status": bool}
    onSessionOpen   {"Jobs", "Nodes", "Queues"}; onSessionClose {}; allocateFunc / deallocateFunc {"task"}

A task is sent as Volcano's ``TaskInfo`` fields (``UID``, ``Job``, ``Name``, ``Namespace``, ``TaskRole``,
``Priority``, ``NodeName``, ``Status``, ``Resreq`` with ``MilliCPU``, ``Memory`` in bytes and
``ScalarResources`` in milli-units, ``InitResreq`` (the same: hetsched keeps one effective request, init
containers and overhead included), ``VolumeReady``, ``Preemptable``, ``BestEffort``, ``SchGated``,
``HasRestartableInitContainer``, ``RevocableZone``, ``NumaInfo`` (null) and ``Pod``: its metadata and
spec); a node as ``Name``, ``Node`` (metadata), ``State`` (``Phase`` Ready or NotReady, ``Reason``),
``Allocatable``, ``Capacity`` (the allocatable: the cache keeps no other), ``Used``, ``Idle``,
``Releasing``, ``Pipelined``, ``RevocableZone``, ``Others`` — not ``Tasks`` (the pods on the node), which
Volcano also sends; a job as ``UID``, ``PgUID``, ``Name``, ``Namespace``, ``Queue``, ``MinAvailable``,
``TaskMinAvailableTotal``, ``Priority``, ``Preemptable``, ``Allocated``, ``TotalRequest``,
``CreationTimestamp`` (RFC 3339), ``NetworkTopology``, ``PodGroup``; a queue as ``UID``, ``Name``,
``Weight``, ``Weights``, ``Hierarchy``, ``State``, ``Reclaimable``, ``Parent``.

Failure mode: a call that fails (refused connection, timeout after ``extender.httpTimeout``, a status other
than 200, an answer that is not such JSON or is over 10 MiB) counts as the extender being down for the rest
of the session — no further call is made, so a dead extender costs at most one timeout per cycle. While it
is down, with ``extender.ignorable: true`` every point answers as if the extender agreed (fits, no score,
permit, not overused, ready); without, it answers no (every node fails, naming the error; victims,
admission and readiness refused; queues overused), and an ``onSessionOpen`` that fails raises, so the
cycle stops with ``PluginError`` for every job, as the scheduler's fault isolation does for a guarding
plugin. With ``extender.managedResources`` the task points ask only about pods that request one of them.

``predicate`` is one call per node (Volcano's protocol; nodes not Ready or cordoned are not asked), made
once per placement key per cycle; ``prioritize`` one call per group of identical pods per cycle.

Arguments (Volcano's keys): ``extender.urlPrefix`` (http or https; required), ``extender.httpTimeout``
(a Go duration, default 1s), ``extender.<point>Verb`` for the points above, ``extender.ignorable``
(default false), ``extender.managedResources`` (a list of resource names).
"""

from __future__ import annotations

import http.client
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import numpy as np

from hetsched.api.annotations import go_duration
from hetsched.api.times import rfc3339
from hetsched.scheduler.contract.arrays import BoolArray, FloatArray, IntArray
from hetsched.scheduler.contract.framework import (
    Arguments,
    JobEnqueue,
    JobReady,
    NodeFilter,
    NodeScore,
    Overused,
    Plugin,
    PreemptableVictims,
    ReclaimableVictims,
)
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.snapshot import JobInfo, QueueInfo, ResourceIndex, RunningPod, TaskGroup
from hetsched.scheduler.contract.status import Code, Status

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "extender"
PREFIX = "extender."
VERBS = ("onSessionOpenVerb", "onSessionCloseVerb", "predicateVerb", "prioritizeVerb", "preemptableVerb",
         "reclaimableVerb", "queueOverusedVerb", "jobEnqueueableVerb", "jobEnqueuedVerb", "jobReadyVerb",
         "allocateFuncVerb", "deallocateFuncVerb")
MAX_BODY = 10 << 20
"""Bytes of an answer read at most (Volcano's limit)."""
MAX_MESSAGE = 200
"""Characters of an extender's reason kept in a PodGroup condition."""
PERMIT, ABSTAIN, REJECT = 1, 0, -1


class ExtenderError(RuntimeError):
    """The extender could not be asked (the verb and why); raised only where the failure mode says so."""


HIERARCHY = "volcano.sh/hierarchy"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _resources(vector: Any, index: ResourceIndex) -> dict[str, Any]:
    """A resource vector (milli-units) as Volcano's ``Resource`` JSON."""
    values = np.asarray(vector).tolist()
    scalar = {name: values[c] for c, name in enumerate(index.names) if name not in ("cpu", "memory", "pods")
              and values[c]}
    cpu, memory = index.columns.get("cpu"), index.columns.get("memory")
    return {"MilliCPU": values[cpu] if cpu is not None else 0,
            "Memory": values[memory] / 1000 if memory is not None else 0, "ScalarResources": scalar}


class Extender(Plugin, NodeFilter, NodeScore, PreemptableVictims, ReclaimableVictims, JobEnqueue, Overused, JobReady):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({f"{PREFIX}{key}" for key in (*VERBS, "urlPrefix", "httpTimeout", "ignorable",
                                                            "managedResources")})
        self.verbs = {key: arguments.text(f"{PREFIX}{key}", "") for key in VERBS}
        for key, verb in self.verbs.items():
            if verb and ("/" in verb or "?" in verb or len(verb) > 128):
                raise ValueError(f"plugin {NAME}: argument {PREFIX}{key} must be a verb (a path segment), got {verb!r}")
        url = arguments.text(f"{PREFIX}urlPrefix", "")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"plugin {NAME}: argument {PREFIX}urlPrefix must be an http:// or https:// URL, "
                             f"got {url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path = parts.path.rstrip("/")
        try:
            self.timeout = go_duration(arguments.text(f"{PREFIX}httpTimeout", "1s"))
        except ValueError as exc:
            raise ValueError(f"plugin {NAME}: argument {PREFIX}httpTimeout {exc}") from None
        if self.timeout <= 0:
            raise ValueError(f"plugin {NAME}: argument {PREFIX}httpTimeout must be above 0")
        self.ignorable = arguments.flag(f"{PREFIX}ignorable", False)
        managed = arguments.values.get(f"{PREFIX}managedResources", [])
        if not isinstance(managed, list) or not all(isinstance(r, str) for r in managed):
            raise ValueError(f"plugin {NAME}: argument {PREFIX}managedResources must be a list of resource names")
        self.managed = frozenset(managed)
        self._down: str | None = None
        """Why the extender is taken as down for this session (None: it answers)."""
        self._connection: http.client.HTTPConnection | None = None
        self._scores: dict[int, dict[str, float]] = {}
        self._tasks: dict[int, dict[str, Any]] = {}
        self._answers: dict[tuple[str, str, tuple[float, ...]], bool] = {}
        """(verb, job or queue, what it holds) → the answer: asked again only when that changes."""

    # ------------------------------------------------------------------------------------- wire

    def _post(self, verb: str, body: dict[str, Any]) -> Any:
        """POST ``body`` to the verb; the decoded answer. ExtenderError (and the extender marked down for
        the session) on any failure."""
        if self._down is not None:
            raise ExtenderError(self._down)
        try:
            data = json.dumps(body, default=str).encode()
            if self._connection is None:
                kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
                self._connection = kind(self._host, self._port, timeout=self.timeout)
            self._connection.request("POST", f"{self._path}/{verb}", body=data,
                                     headers={"Content-Type": "application/json"})
            response = self._connection.getresponse()
            raw = response.read(MAX_BODY + 1)
            if response.status != 200:
                raise ExtenderError(f"{verb} answered HTTP {response.status}")
            if len(raw) > MAX_BODY:
                raise ExtenderError(f"{verb} answered more than {MAX_BODY >> 20} MiB")
            return json.loads(raw) if raw.strip() else {}
        except (OSError, http.client.HTTPException, ValueError, RecursionError, ExtenderError) as exc:
            self._close()
            reason = str(exc) if isinstance(exc, ExtenderError) else f"{verb}: {type(exc).__name__}: {exc}"
            self._down = reason[:MAX_MESSAGE]
            raise ExtenderError(self._down) from None

    def _ask(self, key: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """The verb's answer as a map; None when the extender failed (the caller applies the failure mode)."""
        try:
            answer = self._post(self.verbs[key], body)
        except ExtenderError:
            return None
        if not isinstance(answer, dict):
            self._down = f"{self.verbs[key]}: the answer is not a JSON object"
            return None
        return answer

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    # ------------------------------------------------------------------------------------ shapes

    def _interested(self, group: TaskGroup, names: list[str]) -> bool:
        return not self.managed or any(names[c] in self.managed for c in group.columns.tolist())

    def _task(self, group: TaskGroup, key: str | None = None) -> dict[str, Any]:
        found = self._tasks.get(id(group))
        if found is None:
            spec = group.spec.model_dump(mode="json", exclude_none=True)
            request = _resources(group.request, self._index)
            found = self._tasks[id(group)] = {
                "Job": group.job.key, "Namespace": group.namespace, "TaskRole": group.task,
                "Priority": group.priority, "Resreq": request, "InitResreq": request, "NodeName": "",
                "Status": "Pending", "VolumeReady": False, "Preemptable": group.job.preempts,
                "BestEffort": group.best_effort, "SchGated": bool(group.spec.schedulingGates),
                "HasRestartableInitContainer": any((c.model_extra or {}).get("restartPolicy") == "Always"
                                                   for c in group.spec.initContainers),
                "RevocableZone": "", "NumaInfo": None,
                "Pod": {"metadata": {"namespace": group.namespace, "labels": group.labels,
                                     "annotations": group.annotations}, "spec": spec}}
        pod = key or (group.pending[0] if group.pending else "")
        name = pod.rpartition("/")[2]
        return {**found, "UID": pod, "Name": name,
                "Pod": {**found["Pod"], "metadata": {**found["Pod"]["metadata"], "name": name}}}

    def _victim(self, pod: RunningPod) -> dict[str, Any]:
        name = pod.key.rpartition("/")[2]
        request = _resources(pod.request, self._index)
        return {"UID": pod.key, "Job": pod.job, "Name": name, "Namespace": pod.namespace, "TaskRole": pod.task,
                "Priority": pod.priority, "NodeName": self._session.nodes.names[pod.node], "Resreq": request,
                "InitResreq": request, "Status": "Running", "VolumeReady": True, "Preemptable": pod.preemptable,
                "BestEffort": not request["MilliCPU"] and not request["Memory"] and not request["ScalarResources"],
                "RevocableZone": "", "NumaInfo": None}

    def _node(self, row: int) -> dict[str, Any]:
        nodes = self._session.nodes
        allocatable = _resources(nodes.alloc[:, row], self._index)
        ready = bool(nodes.ready[row]) and not bool(nodes.cordoned[row])
        return {"Name": nodes.names[row], "Node": {"metadata": {"name": nodes.names[row], "labels": nodes.labels[row]}},
                "State": {"Phase": "Ready" if ready else "NotReady",
                          "Reason": "" if ready else ("Unschedulable" if nodes.cordoned[row] else "NotReady")},
                "Allocatable": allocatable, "Capacity": allocatable,
                "Used": _resources(nodes.used[:, row], self._index),
                "Idle": _resources(nodes.alloc[:, row] - nodes.used[:, row], self._index),
                "Releasing": _resources(nodes.releasing[:, row], self._index),
                "Pipelined": _resources(np.zeros_like(nodes.used[:, row]), self._index),
                "RevocableZone": "", "Others": {}}

    def _job(self, job: JobInfo) -> dict[str, Any]:
        pending = sum((group.request * len(group.pending) for group in job.groups), np.zeros_like(job.allocated))
        network = job.podgroup.spec.networkTopology
        return {"UID": job.key, "PgUID": job.podgroup.metadata.uid, "Name": job.key.rpartition("/")[2],
                "Namespace": job.key.rpartition("/")[0], "Queue": job.queue, "MinAvailable": job.min_member,
                "TaskMinAvailableTotal": sum(job.min_task_member.values()), "Priority": job.priority,
                "Preemptable": job.preempts, "Allocated": _resources(job.allocated, self._index),
                "TotalRequest": _resources(job.allocated + pending, self._index),
                "CreationTimestamp": rfc3339(job.created), "RevocableZone": "",
                "NetworkTopology": network.model_dump(mode="json", exclude_none=True) if network else None,
                "PodGroup": job.podgroup.model_dump(mode="json", exclude_none=True)}

    @staticmethod
    def _queue(queue: QueueInfo) -> dict[str, Any]:
        return {"UID": queue.name, "Name": queue.name, "Weight": queue.weight, "Weights": _number(queue.weight),
                "Hierarchy": queue.annotations.get(HIERARCHY, ""), "State": queue.state,
                "Reclaimable": queue.reclaimable, "Parent": queue.parent}

    # ---------------------------------------------------------------------------------- session

    def on_session_open(self, session: SessionView) -> None:
        self._session = session
        self._index = session.snapshot.resources
        if not self.verbs["onSessionOpenVerb"]:
            return
        snapshot = session.snapshot
        body = {"Jobs": {key: self._job(job) for key, job in snapshot.active.items()},
                "Nodes": {name: self._node(row) for row, name in enumerate(session.nodes.names)},
                "Queues": {name: self._queue(queue) for name, queue in snapshot.queues.items()}}
        if self._ask("onSessionOpenVerb", body) is None and not self.ignorable:
            raise ExtenderError(f"the extender is required (extender.ignorable: false) and {self._down}")

    def on_session_close(self, session: SessionView) -> None:
        if self.verbs["onSessionCloseVerb"]:
            self._ask("onSessionCloseVerb", {})  # its answer decides nothing
        self._close()
        self._tasks.clear()
        self._scores.clear()
        self._answers.clear()
        del self._session  # the session holds its plugins (``Plugin.on_session_close``)

    def _event(self, key: str, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        if not self.verbs[key] or not self._interested(group, self._index.names):
            return
        names = self._session.nodes.names
        for pod, row in zip(pods, nodes.tolist(), strict=True):
            task = {**self._task(group, pod), "NodeName": names[row]}
            self._ask(key, {"task": task})  # the answer decides nothing (Volcano logs it)

    def on_allocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        self._event("allocateFuncVerb", group, pods, nodes)

    def on_deallocate(self, group: TaskGroup, pods: list[str], nodes: IntArray) -> None:
        self._event("deallocateFuncVerb", group, pods, nodes)

    # ----------------------------------------------------------------------------------- points

    def node_filter(self, session: SessionView, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        if not self.verbs["predicateVerb"] or not self._interested(group, self._index.names):
            return []
        nodes = session.nodes
        refused: dict[Reason, BoolArray] = {}
        task = self._task(group)
        for row in np.flatnonzero(nodes.exists & nodes.ready & ~nodes.cordoned).tolist():
            answer = self._ask("predicateVerb", {"task": task, "node": self._node(row)})
            if answer is None:
                if self.ignorable:
                    break  # down, and ignorable: every node fits as far as the extender goes
                message = self._down or "unreachable"
            else:
                text = answer.get("status", "")
                message = str(text)[:MAX_MESSAGE] if text else ""
            if message:
                reason = Reason.of(ReasonCode.PLUGIN_RULE, plugin=NAME, rule=f"were refused by the extender: {message}")
                refused.setdefault(reason, np.zeros(len(nodes), dtype=bool))[row] = True
        return list(refused.items())

    def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        score = np.zeros(len(nodes), dtype=np.float64)
        if not self.verbs["prioritizeVerb"] or not self._interested(group, self._index.names):
            return score
        names = session.nodes.names
        known = self._scores.get(id(group))
        if known is None:
            answer = self._ask("prioritizeVerb", {"task": self._task(group),
                                                  "nodes": [self._node(row) for row in nodes.tolist()]})
            given = answer.get("nodeScore") if answer is not None else None
            known = {}
            if isinstance(given, dict):
                known = {str(k): float(v) for k, v in given.items()
                         if isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v)}
            self._scores[id(group)] = known
        score[:] = [known.get(names[row], 0.0) for row in nodes.tolist()]
        return score

    def _victims(self, key: str, victims: list[RunningPod], job: JobInfo) -> bool:
        if not self.verbs[key] or not victims:
            return True
        pending = next((g for g in job.groups if g.pending), None)
        if pending is None or not self._interested(pending, self._index.names):
            return True  # Volcano's Abstain
        answer = self._ask(key, {"evictor": self._task(pending),
                                 "evictees": [self._victim(pod) for pod in victims]})
        if answer is None:
            return self.ignorable
        status = answer.get("status", ABSTAIN)
        if status == REJECT:
            return False
        if status != PERMIT:
            return True
        chosen = answer.get("victims") or []
        named = {str(v.get("UID") or f"{v.get('Namespace', '')}/{v.get('Name', '')}") for v in chosen
                 if isinstance(v, dict)}
        return all(pod.key in named for pod in victims)

    def preemptable_victims(self, victims: list[RunningPod], preemptor: JobInfo) -> bool:
        return self._victims("preemptableVerb", victims, preemptor)

    def reclaimable_victims(self, victims: list[RunningPod], reclaimer: JobInfo) -> bool:
        return self._victims("reclaimableVerb", victims, reclaimer)

    def job_enqueueable(self, job: JobInfo) -> Status:
        if not self.verbs["jobEnqueueableVerb"]:
            return Status(Code.SUCCESS)
        answer = self._ask("jobEnqueueableVerb", {"job": self._job(job)})
        verb = self.verbs["jobEnqueueableVerb"]
        if answer is None:
            if self.ignorable:
                return Status(Code.PERMIT, (), NAME)
            return Status(Code.UNSCHEDULABLE, (Reason.of(ReasonCode.EXTENDER, verb=verb,
                                                         message=self._down or "unreachable"),), NAME)
        status = answer.get("status", ABSTAIN)
        if status == REJECT:
            return Status(Code.UNSCHEDULABLE, (Reason.of(ReasonCode.EXTENDER, verb=verb,
                                                         message="the extender refused to admit the job"),), NAME)
        return Status(Code.PERMIT, (), NAME) if status == PERMIT else Status(Code.SUCCESS)

    def job_enqueued(self, job: JobInfo) -> None:
        if self.verbs["jobEnqueuedVerb"]:
            self._ask("jobEnqueuedVerb", {"job": self._job(job)})  # the answer decides nothing

    def overused(self, queue: QueueInfo) -> bool:
        if not self.verbs["queueOverusedVerb"]:
            return False
        key = ("queueOverusedVerb", queue.name, tuple(queue.allocated.tolist()))
        if key not in self._answers:
            answer = self._ask("queueOverusedVerb", {"queue": self._queue(queue)})
            self._answers[key] = not self.ignorable if answer is None else answer.get("overused") is True
        return self._answers[key]

    def job_ready(self, job: JobInfo) -> bool:
        if not self.verbs["jobReadyVerb"]:
            return True
        key = ("jobReadyVerb", job.key, (float(self._session.occupied(job)),))
        if key not in self._answers:
            answer = self._ask("jobReadyVerb", {"job": self._job(job)})
            self._answers[key] = self.ignorable if answer is None else answer.get("status") is True
        return self._answers[key]

