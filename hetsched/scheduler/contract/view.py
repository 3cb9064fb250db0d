"""What a plugin may read or ask of the scheduling session: the :class:`SessionView` (contract version 1).

Who calls it: every plugin takes a ``SessionView`` in its session hooks and node-level extension points
(``contract.framework``); the engine's ``Session`` (``scheduler.engine.session``) is the one
implementation. A plugin never sees the session itself — its placements, statements, the other plugins or
the configuration — so the engine can change without breaking plugins written against this view. A
change here that removes or changes a member bumps ``CONTRACT_VERSION`` (``scheduler.contract``).

Invariants: a plugin only answers. What it may write is said member by member below: bind annotations for
the pods it was told about (``on_allocate``/``on_deallocate``), and PodGroup conditions at session close.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from hetsched.api.objects import Condition
from hetsched.scheduler.contract.podtopology import PodTopology
from hetsched.scheduler.contract.snapshot import JobInfo, NodeArrays, Snapshot
from hetsched.scheduler.contract.status import Status


class SessionView(Protocol):
    """The session as a plugin sees it."""

    @property
    def snapshot(self) -> Snapshot:
        """The cycle's snapshot: nodes, jobs, queues, running pods (read only, except through the session's
        own placements)."""
        ...

    @property
    def nodes(self) -> NodeArrays:
        """The snapshot's node arrays (``snapshot.nodes``): every per-node array a plugin answers over is
        indexed by these rows."""
        ...

    @property
    def now(self) -> float:
        """The injected clock's reading at session open (seconds)."""
        ...

    @property
    def action_names(self) -> Sequence[str]:
        """The configured actions, in order (a plugin may behave differently when, say, ``enqueue`` runs)."""
        ...

    @property
    def lending(self) -> bool:
        """True while ``allocate`` lends capacity: it places work beyond the queues' deserved shares, on what
        no queue could use within its own share this cycle (a plugin bounding a queue by its share —
        ``proportion`` — lifts that bound then, keeping the capability bound)."""
        ...

    @property
    def pod_topology(self) -> PodTopology:
        """Pods placed per topology domain, updated as the session places pods: for pod (anti-)affinity and
        topology spread."""
        ...

    @property
    def bind_annotations(self) -> dict[str, dict[str, str]]:
        """Pod key → annotations written on the pod at bind. A plugin adds its own for the pods
        ``on_allocate`` names and removes them in ``on_deallocate``; it never touches another plugin's."""
        ...

    def occupied(self, job: JobInfo) -> int:
        """The job's pods bound or running (and succeeded), plus those placed for it this session."""
        ...

    def occupied_by_task(self, job: JobInfo, task: str) -> int:
        """:meth:`occupied`, counting only task ``task``'s pods."""
        ...

    def pending_best_effort(self, job: JobInfo, task: str | None = None) -> int:
        """Pending pods that request nothing but a pod slot (of ``task``, or of every task): Volcano's
        ``PendingBestEffortTaskNum``, which counts toward a ready gang — except while ``backfill`` places
        those very pods for the gang, which must then really fit (0 then)."""
        ...

    def pipelined_pods(self, job: JobInfo) -> int:
        """The job's pods reserved this session on resources being released (Volcano's pipelined tasks)."""
        ...

    def guests(self) -> Mapping[str, str]:
        """Job key → the queue whose used-up ``Idle`` budget makes the job's running pods guests: they hold
        capacity no other queue asked for, and ``reclaim`` takes them first, for any queue."""
        ...

    def short(self, job: JobInfo) -> int | None:
        """How many pods the job's gang lacked at its last attempt this session (None: not attempted)."""
        ...

    def unschedulable(self, job: str) -> Status | None:
        """Why job ``job`` (its key) could not be placed this session, or None."""
        ...

    def set_conditions(self, job: str, conditions: list[Condition]) -> None:
        """At session close: the PodGroup conditions job ``job`` should carry (replacing them)."""
        ...

    def condition(self, type_: str, reason: str, message: str) -> Condition:
        """A PodGroup condition stamped with the session's time."""
        ...
