"""Hard budgets: the running pods of a queue whose budget is used up with ``whenExhausted: Stop`` are
evicted in the first cycle that sees it.

Who calls it: the runner, at the start of every session, before the configured actions — a hard budget is
the operator's limit whatever the action list says.

Rules (``QueueUsage``, ``controllers.usage``): a job is stopped as a whole — every running pod of it, so no
gang is left cut below its minMember — when one of its running pods without ``activeDeadlineSeconds`` holds a
resource whose budget is used up with ``Stop``, its queue's or an ancestor's (``Session.budget_holder``: a
parent's budget binds its whole subtree). A pod with a deadline is never stopped: it was started only when
what it commits fitted (``Session.budget_exhausted``), and what it commits counts as used, so the budget is
used up — and the others stopped — while it can still finish. Disruption budgets do not hold a stop back
(the budget is the harder limit). What it held is released in the session, so the same cycle places other
queues' work there; its pods wait for the next period (``Session.budget_exhausted``). The accountant ticks
when a budget runs out at the current rate, so a queue overshoots by at most its pods' run time from that
tick to this cycle, plus their termination grace period.
"""

from __future__ import annotations

from hetsched.scheduler.contract.snapshot import RunningPod
from hetsched.scheduler.engine.eviction import record, release
from hetsched.scheduler.engine.session import Session

ACTION = "budget"


def enforce(session: Session) -> None:
    """Evict the jobs a used-up ``Stop`` budget stops (see the module docstring)."""
    snapshot = session.snapshot
    if not any(q.exhausted and q.when_exhausted == "Stop" for q in snapshot.queues.values()):
        return
    stopped: dict[str, str] = {}
    for pod in snapshot.running:
        if pod.job not in stopped and pod.ends_by is None and (holder := session.budget_holder(pod, "Stop")):
            stopped[pod.job] = holder
    if not stopped:
        return
    by_job: dict[str, list[RunningPod]] = {}
    for pod in snapshot.running:
        if pod.job in stopped:
            by_job.setdefault(pod.job, []).append(pod)
    for job, pods in sorted(by_job.items()):
        queue = snapshot.queues[stopped[job]]
        with session.working_on(snapshot.jobs[job]):
            release(session, pods, 1)
            record(session, pods, ACTION,
                   f"queue {queue.name} has used its budget of {', '.join(queue.exhausted)} for this period "
                   f"(whenExhausted: Stop)", "")
