"""``sla``: a job that waited past its SLA is admitted and holds resources until its gang can run
(Volcano's sla plugin).

Who calls it: the session, for ``job_order_key``, ``job_enqueueable`` and ``job_pipelined``.

A job's waiting time is its PodGroup's ``volcano.sh/sla-waiting-time`` annotation (else ``sla-waiting-time``;
a Job's annotations reach its PodGroup), else the ``sla-waiting-time`` argument; a job with neither has no
SLA and this plugin abstains for it.
- ``job_order_key``: the job's deadline (created + waiting time), earliest first; jobs with no SLA after
  those with one;
- ``job_enqueueable``: once the deadline has passed, Permit — the job is admitted whatever later tiers'
  plugins (``proportion``'s capability, ``overcommit``'s headroom) say; before, abstain;
- ``job_pipelined``: once the deadline has passed, Permit — what the job was given this cycle is kept as
  a reservation though its gang is not complete, so smaller jobs do not take it, and, ordered first, the job
  gathers the rest as it frees up (with ``gang`` in the same tier, gang's rejection of a partial gang
  wins, as in Volcano; put ``sla`` in an earlier tier for the reservation to hold).

Arguments (Volcano's key)::

    - name: sla
      arguments:
        sla-waiting-time: 1h2m3s   # a Go duration > 0

An argument that is not such a duration is a configuration error (Volcano logs it and runs without one);
an annotation that is not is refused at admission (``api.volcano_annotations``) and treated as absent here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from hetsched.api.annotations import go_duration
from hetsched.api.volcano_annotations import sla_waiting_time
from hetsched.scheduler.contract.framework import Arguments, JobEnqueue, JobOrder, JobPipelined, Plugin
from hetsched.scheduler.contract.snapshot import JobInfo
from hetsched.scheduler.contract.status import Code, Status

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "sla"
ARGUMENT = "sla-waiting-time"


class SLA(Plugin, JobOrder, JobEnqueue, JobPipelined):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({ARGUMENT})
        raw = arguments.values.get(ARGUMENT)
        self.waiting: float | None = None
        """The cluster-wide waiting time in seconds (None: only jobs with the annotation have an SLA)."""
        if raw is not None:
            try:
                if not isinstance(raw, str):
                    raise ValueError(f"must be a duration such as \"90s\", \"10m\" or \"1h30m\", got {raw!r}")
                value = go_duration(raw)
                if value <= 0:
                    raise ValueError(f"must be a duration above 0, got {raw!r}")
            except ValueError as exc:
                raise ValueError(f"plugin {NAME}: argument {ARGUMENT} {exc}") from None
            self.waiting = value
        self._now = 0.0

    def on_session_open(self, session: SessionView) -> None:
        self._now = session.now

    def _waiting(self, job: JobInfo) -> float | None:
        try:
            own = sla_waiting_time(job.podgroup.metadata.annotations)
        except ValueError:  # refused at admission; one written around the webhook counts as absent
            own = None
        return own if own is not None else self.waiting

    def _overdue(self, job: JobInfo) -> bool:
        waiting = self._waiting(job)
        return waiting is not None and self._now - job.created >= waiting

    def job_order_key(self, job: JobInfo) -> float:
        waiting = self._waiting(job)
        return math.inf if waiting is None else job.created + waiting

    def job_enqueueable(self, job: JobInfo) -> Status:
        return Status(Code.PERMIT, (), NAME) if self._overdue(job) else Status(Code.SUCCESS)

    def job_enqueued(self, job: JobInfo) -> None:
        """Nothing to account: the plugin keeps no admission totals."""

    def job_pipelined(self, job: JobInfo) -> bool | None:
        return True if self._overdue(job) else None
