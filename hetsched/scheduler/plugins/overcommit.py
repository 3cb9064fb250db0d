"""``overcommit``: admit a PodGroup only while the cluster has headroom for its minResources.

Who calls it: the ``enqueue`` action through ``job_enqueueable``/``job_enqueued``. Headroom, per
resource: ``allocatable × overcommit-factor − allocated − inqueue`` (Volcano's overcommit plugin); a job is
admitted when its minResources fit in every resource it names.

Arguments::

    - name: overcommit
      arguments: {overcommit-factor: 1.2}   # ≥ 1.0; default 1.2
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.api.quantity import format_quantity
from hetsched.scheduler.framework import Arguments, Code, FloatArray, Plugin, Status
from hetsched.scheduler.snapshot import JobInfo

if TYPE_CHECKING:
    from hetsched.scheduler.session import Session

NAME = "overcommit"


class Overcommit(Plugin):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({"overcommit-factor"})
        self.factor = arguments.number("overcommit-factor", 1.2, minimum=1.0)
        self.headroom: FloatArray = np.zeros(0)

    def on_session_open(self, session: Session) -> None:
        total = session.snapshot.total_capacity().astype(np.float64) * self.factor
        used = np.zeros_like(total)
        for queue in session.snapshot.queues.values():
            used += queue.allocated + queue.inqueue
        self.headroom = total - used
        self.resources = session.snapshot.resources

    def job_enqueueable(self, job: JobInfo) -> Status:
        short = np.flatnonzero((job.min_resources > 0) & (job.min_resources > self.headroom + 1e-6))
        if short.size == 0:
            return Status(Code.SUCCESS)
        names = self.resources.names
        detail = ", ".join(f"{names[c]} (needs {format_quantity(int(job.min_resources[c]), names[c])}, headroom "
                           f"{format_quantity(max(int(self.headroom[c]), 0), names[c])} = allocatable × "
                           f"overcommit-factor {self.factor:g} − admitted)" for c in short)
        return Status(Code.UNSCHEDULABLE, (f"minResources exceed the cluster's headroom for {detail}",), NAME)

    def job_enqueued(self, job: JobInfo) -> None:
        self.headroom -= job.min_resources
