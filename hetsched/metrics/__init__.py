"""Prometheus metrics of every hetsched component, and serving them.

Who calls it: the processes (``cli.serve``, ``cli.agents``), the simulator (``hetsched simulate --metrics``) and
the webhook. Each component owns a ``CollectorRegistry`` (never the process-global one, so tests and an
embedded run can hold several); :mod:`hetsched.metrics.serve` exposes one on ``/metrics``.

Names follow Prometheus conventions: ``hetsched_`` prefix, base units in the name (``_seconds``), counters end
in ``_total``; accelerator series are vendor-neutral, labelled ``kind`` (ascend, cambricon, nvidia) and
``model``. See docs/observability.md for the full list.
"""

from prometheus_client import disable_created_metrics

disable_created_metrics()  # type: ignore[no-untyped-call]  # the ``*_created`` companion series only add noise to every counter and histogram
