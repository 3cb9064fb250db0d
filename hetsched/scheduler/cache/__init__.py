"""The scheduler cache, in small modules: event routing and the ``SchedulerCache`` (``routing``), node rows and
usage (``nodes``), pod records and PodGroup counts (``pods``), chip and NUMA state (``devicestate``), and
snapshot building (``build``). Who calls it: the scheduler runner, the benchmarks, the doctor's checks and
the metrics (read-only lookups). The single-thread contract and the snapshot-as-a-value rule are in
``routing``.
"""

from hetsched.scheduler.cache.routing import KINDS, SCOPES, SchedulerCache

__all__ = ["KINDS", "SCOPES", "SchedulerCache"]
