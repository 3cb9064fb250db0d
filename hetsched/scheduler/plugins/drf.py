"""``drf``: Dominant Resource Fairness job order — the job with the smallest dominant share goes first.

Who calls it: the session, for ``job_order_key``; the statement keeps ``job.allocated`` current, so
shares reflect this cycle's allocations.
A job's dominant share is ``max over resources of allocated / cluster allocatable``; accelerators count
per kind (each extended resource is its own dimension). Arguments: none (Volcano's ``enableHierarchy``,
hierarchical DRF, is not implemented: hierarchical queues are ``proportion``'s; the key is refused).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsched.scheduler.contract.arrays import FloatArray
from hetsched.scheduler.contract.framework import JobOrder, Plugin
from hetsched.scheduler.contract.snapshot import JobInfo

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "drf"


def dominant_share(allocated: FloatArray, total: FloatArray) -> float:
    mask = total > 0
    if not mask.any():
        return 0.0
    return float(np.max(allocated[mask] / total[mask], initial=0.0))


class DRF(Plugin, JobOrder):
    NAME = NAME

    def on_session_open(self, session: SessionView) -> None:
        self.total = session.snapshot.total_capacity().astype(np.float64)

    def job_order_key(self, job: JobInfo) -> float:
        return dominant_share(job.allocated, self.total)
