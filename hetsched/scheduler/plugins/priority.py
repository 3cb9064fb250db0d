"""``priority``: order jobs and tasks by PriorityClass value, highest first (Volcano's priority plugin).

Who calls it: the session, for ``job_order_key`` and ``task_order_key``. Arguments: none.
"""

from __future__ import annotations

from hetsched.scheduler.contract.framework import JobOrder, Plugin, TaskOrder
from hetsched.scheduler.contract.snapshot import JobInfo, TaskGroup

NAME = "priority"


class Priority(Plugin, JobOrder, TaskOrder):
    NAME = NAME

    def job_order_key(self, job: JobInfo) -> float:
        return -job.priority

    def task_order_key(self, group: TaskGroup) -> float:
        return -group.priority
