"""Queue-then-job iteration order shared by actions (Volcano's queue and job priority queues).

Who calls it: ``enqueue`` and ``allocate``. The queue with the lowest order key (e.g. smallest share under
``proportion``) is served first; after each job its key is recomputed, since serving it changed its share.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from hetsched.scheduler.contract.snapshot import JobInfo
from hetsched.scheduler.engine.session import Session


def jobs_by_queue(session: Session, jobs: list[JobInfo], skip_queue: Callable[[str], bool] | None = None,
                  again: Callable[[JobInfo], bool] | None = None) -> Iterator[JobInfo]:
    """Yield jobs queue by queue in fair order; re-rank the queue after each job is handled. With ``again``,
    a job it holds true for once handled goes back into its queue (re-ranked) to be yielded again."""
    per_queue: dict[str, list[tuple[tuple[object, ...], str, JobInfo]]] = {}
    for job in jobs:
        per_queue.setdefault(job.queue, []).append((session.job_order_key(job), job.key, job))
    for heap in per_queue.values():
        heapq.heapify(heap)
    queues = session.snapshot.queues
    ready = [(session.queue_order_key(queues[name]), name) for name in per_queue]
    heapq.heapify(ready)
    while ready:
        _, name = heapq.heappop(ready)
        if skip_queue is not None and skip_queue(name):
            continue
        heap = per_queue[name]
        _, _, job = heapq.heappop(heap)
        yield job
        if again is not None and again(job):
            heapq.heappush(heap, (session.job_order_key(job), job.key, job))
        if heap:
            heapq.heappush(ready, (session.queue_order_key(queues[name]), name))
