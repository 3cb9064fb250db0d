"""``fairshare``: queues and jobs ordered by the usage they had lately, as Slurm's fair-share and Kueue's
admission fair sharing do (hetsched's plugin; Volcano has none).

Who calls it: the session, for ``queue_order_key`` and ``job_order_key``.

Usage is each queue's ``QueueUsage`` ``status.decayed`` (``controllers.usage``: the hours its pods ran, each
weighed down by half every half-life since, per resource), and per namespace ``status.decayedByNamespace``.
A resource's hours are counted as a share of the cluster's capacity of it (a chip-hour on a 64-chip cluster
weighs four times one on 256 chips; a core-hour likewise against the cores), times its weight, and summed
— one figure in "cluster-hours", comparable across chips, cores and memory:

- ``queue_order_key``: that figure over the queue's weight, lowest first — the queue that used least lately,
  for its weight, is served first; a queue without a QueueUsage (or no usage yet) first of all;
- ``job_order_key``: within a queue, the jobs of the namespace that used least of it lately first.

Put it in an earlier tier than ``proportion``/``drf`` for usage over time to decide before the instant share,
or after them to break their ties. Arguments::

    - name: fairshare
      arguments:
        fairshare.weight.huawei.com/Ascend910: 4   # a resource's weight (default 1; 0 leaves it out)
        fairshare.weight.cpu: 0.5
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from hetsched.scheduler.contract.framework import Arguments, JobOrder, Plugin, QueueOrder
from hetsched.scheduler.contract.snapshot import JobInfo, QueueInfo

if TYPE_CHECKING:
    from hetsched.scheduler.contract.view import SessionView

NAME = "fairshare"
WEIGHT = "fairshare.weight."
GIB = float(1 << 30)


class FairShare(Plugin, QueueOrder, JobOrder):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known(set(), prefixes=(WEIGHT,))
        self.weights = {key[len(WEIGHT):]: arguments.number(key, 1.0) for key in arguments.values}
        for name, weight in self.weights.items():
            if not math.isfinite(weight):
                raise ValueError(f"plugin {NAME}: argument {WEIGHT}{name} must be a finite number, got {weight}")
        self._capacity: dict[str, float] = {}
        self._queues: dict[str, QueueInfo] = {}

    def on_session_open(self, session: SessionView) -> None:
        total = session.snapshot.total_capacity()
        names = session.snapshot.resources.names
        self._capacity = {}
        for column, name in enumerate(names):
            amount = float(total[column]) / 1000.0  # milli-units: chips, cores; memory in bytes
            if name == "memory":
                amount /= GIB
            if amount > 0:
                self._capacity[name] = amount
        self._queues = session.snapshot.queues

    def on_session_close(self, session: SessionView) -> None:
        self._queues = {}

    def _cluster_hours(self, hours: dict[str, float]) -> float:
        """Hours per resource as one figure: each a share of the cluster's capacity of it, weighed."""
        return sum(self.weights.get(name, 1.0) * amount / self._capacity[name]
                   for name, amount in hours.items() if name in self._capacity)

    def queue_order_key(self, queue: QueueInfo) -> Any:
        return self._cluster_hours(queue.decayed) / max(queue.weight, 1e-9)

    def job_order_key(self, job: JobInfo) -> Any:
        queue = self._queues.get(job.queue)
        if queue is None:
            return 0.0
        return self._cluster_hours(queue.decayed_by_namespace.get(job.key.split("/", 1)[0], {}))
