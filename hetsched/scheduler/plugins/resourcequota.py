"""``resourcequota``: a job is admitted only while its minResources fit what its namespace's ResourceQuotas leave
(Volcano's resourcequota plugin) — so the quotas teams already keep bound what the scheduler admits, and a gang
is never admitted only to have the API server refuse some of its pods.

Who calls it: the session, for ``job_enqueueable`` and ``job_enqueued`` (the ``enqueue`` action).

For each ResourceQuota of the job's namespace (``Snapshot.quotas``: the quota controller's ``status.hard``
and ``status.used``): the job's PodGroup ``minResources``, restricted to the resource names the quota limits
(Volcano's mask: a quota on ``cpu``, ``memory``, ``pods`` or an extended resource's own name counts;
``requests.cpu``-style names do not match minResources' names, as in Volcano), plus what jobs of the namespace
admitted earlier in this cycle asked, plus ``used``, must stay within ``hard``; otherwise the job stays
Pending with ``ResourceQuotaInsufficient`` naming the quota and each resource. A job without minResources,
or in a namespace without quotas, is admitted (Volcano's Permit). Which wins between a quota and a queue: both
bind — a job is admitted only when its queue's capability (``proportion``/``capacity``) and every quota of
its namespace allow it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetsched.scheduler.contract.framework import Arguments, JobEnqueue, Plugin
from hetsched.scheduler.contract.reasons import Reason, ReasonCode
from hetsched.scheduler.contract.snapshot import JobInfo
from hetsched.scheduler.contract.status import Code, Status

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "resourcequota"


class ResourceQuotaPlugin(Plugin, JobEnqueue):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known(set())
        self._quotas: dict[str, tuple[tuple[str, dict[str, int], dict[str, int]], ...]] = {}
        self._pending: dict[str, dict[str, int]] = {}

    def on_session_open(self, session: SessionView) -> None:
        self._quotas = session.snapshot.quotas
        self._pending = {}

    def on_session_close(self, session: SessionView) -> None:
        self._quotas, self._pending = {}, {}

    @staticmethod
    def _namespace(job: JobInfo) -> str:
        return job.key.split("/", 1)[0]

    def job_enqueueable(self, job: JobInfo) -> Status:
        asked = job.podgroup.spec.minResources
        quotas = self._quotas.get(self._namespace(job), ())
        if not asked or not quotas:
            return Status(Code.PERMIT)
        pending = self._pending.get(self._namespace(job), {})
        for name, hard, used in quotas:
            over = tuple((resource, used.get(resource, 0) + pending.get(resource, 0) + amount, hard[resource])
                         for resource, amount in sorted(asked.items())
                         if resource in hard and used.get(resource, 0) + pending.get(resource, 0) + amount
                         > hard[resource])
            if over:
                return Status(Code.UNSCHEDULABLE, (Reason.of(ReasonCode.RESOURCE_QUOTA, quota=name, amounts=over),),
                              NAME)
        return Status(Code.PERMIT)

    def job_enqueued(self, job: JobInfo) -> None:
        asked = job.podgroup.spec.minResources
        namespace = self._namespace(job)
        if not asked or namespace not in self._quotas:
            return
        pending = self._pending.setdefault(namespace, {})
        for resource, amount in asked.items():
            pending[resource] = pending.get(resource, 0) + amount
