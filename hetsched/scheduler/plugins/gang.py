"""``gang``: all-or-nothing scheduling of a job's minAvailable pods (Volcano's gang plugin).

Who calls it: the session. Extension points:
- ``job_valid``: enough pods exist (not failed) to ever reach minMember;
- ``job_ready``: bound + succeeded + tentatively allocated pods reach minMember, and every task reaches
  its own minAvailable (``minTaskMember``); pending best-effort pods (no requests: an MPI or MindSpore
  master beside accelerator workers) count too, as Volcano's ``IsReady`` counts them — they need only a
  pod slot, and ``backfill`` places them once the rest of the gang is in;
- ``job_pipelined``: the same counting pipelined pods too;
- ``job_starving``: the gang is not met yet (counting pipelined pods): such a job may evict (``preempt``,
  ``reclaim``) — ``enableJobStarving: false`` turns that off;
- ``job_order_key``: jobs not yet ready go first, partly running gangs before untouched ones;
- at session close, writes the PodGroup conditions: ``Unschedulable`` with "x/y tasks in gang
  unschedulable: <reasons>" for a job that could not be placed, ``Scheduled`` once it is ready.

Arguments: none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetsched.scheduler.contract.framework import JobOrder, JobPipelined, JobReady, JobStarving, JobValid, Plugin
from hetsched.scheduler.contract.reasons import Reason, ReasonCode, render
from hetsched.scheduler.contract.snapshot import JobInfo
from hetsched.scheduler.contract.status import Code, Status

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "gang"


class Gang(Plugin, JobValid, JobReady, JobPipelined, JobStarving, JobOrder):
    """Counts what each job holds through the session (``SessionView.occupied`` …), kept from session open
    to close."""

    NAME = NAME
    _session: SessionView

    def on_session_open(self, session: SessionView) -> None:
        self._session = session

    def _tasks_ready(self, job: JobInfo) -> bool:
        session = self._session
        return all(session.occupied_by_task(job, task) + session.pending_best_effort(job, task) >= need
                   for task, need in job.min_task_member.items())

    def job_valid(self, job: JobInfo) -> Status:
        valid = job.total_pods - job.failed  # Volcano's ValidTaskNum: a failed pod never completes a gang
        if valid < job.min_member:
            reason = Reason.of(ReasonCode.GANG_INCOMPLETE, pods=valid, min_member=job.min_member) if not job.failed \
                else Reason.of(ReasonCode.GANG_FAILED_PODS, valid=valid, failed=job.failed, min_member=job.min_member)
            return Status(Code.UNSCHEDULABLE, (reason,), NAME)
        return Status(Code.SUCCESS)

    def job_ready(self, job: JobInfo) -> bool:
        session = self._session
        return (session.occupied(job) + session.pending_best_effort(job) >= job.min_member
                and self._tasks_ready(job))

    def job_pipelined(self, job: JobInfo) -> bool:
        session = self._session
        pipelined = session.pipelined_pods(job)
        # without pods waiting on releasing resources, what is held must already satisfy every task's
        # minimum (Volcano's CheckTaskPipelined): a gang short of one task keeps no reservation
        return (session.occupied(job) + pipelined + session.pending_best_effort(job) >= job.min_member
                and (pipelined > 0 or self._tasks_ready(job)))

    def job_starving(self, job: JobInfo) -> bool:
        return self._session.occupied(job) + self._session.pipelined_pods(job) < job.min_member

    def job_order_key(self, job: JobInfo) -> float:
        if self.job_ready(job):
            return 2.0
        # a gang that already runs part of itself (a pod lost to a node failure, say) holds resources it
        # cannot use: it goes before gangs that hold nothing, or freed capacity is taken by a job with a
        # smaller share and the gang never heals (Volcano #5805)
        return 0.0 if job.ready > 0 else 1.0

    def on_session_close(self, session: SessionView) -> None:
        for job in session.snapshot.active.values():  # a settled job has no status to change
            current = {c.type: c for c in job.podgroup.status.conditions}
            status = session.unschedulable(job.key)
            occupied = session.occupied(job)
            # at close, pending best-effort pods no longer count: backfill had its turn to place them
            placed = occupied >= job.min_member and all(
                session.occupied_by_task(job, task) >= need for task, need in job.min_task_member.items())
            if status is not None and not placed:
                short = session.short(job)
                missing = short if short is not None else max(job.min_member - occupied, 0)
                message = render(Reason.of(ReasonCode.GANG_UNSCHEDULABLE, missing=missing,
                                           min_member=job.min_member, cause=status.reasons[0]))
                reason = {Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "Unresolvable", Code.WAIT: "Pipelined"}.get(
                    status.code, "NotEnoughResources")
                old = current.get("Unschedulable")
                if old is None or old.message != message or old.reason != reason:
                    conditions = [c for c in job.podgroup.status.conditions if c.type not in ("Unschedulable",
                                                                                            "Scheduled")]
                    conditions.append(session.condition("Unschedulable", reason, message))
                    session.set_conditions(job.key, conditions)
            elif occupied >= job.min_member and occupied > 0 and "Scheduled" not in current:
                conditions = [c for c in job.podgroup.status.conditions if c.type != "Unschedulable"]
                conditions.append(session.condition(
                    "Scheduled", "tasks in gang are ready to be scheduled",
                    f"{occupied}/{job.total_pods} pods bound or finished"))
                session.set_conditions(job.key, conditions)
        del self._session  # the session holds its plugins: let go of it (``Plugin.on_session_close``)
