"""PodDisruptionBudget arithmetic, as Kubernetes' disruption controller and Eviction API do it.

Who calls it: the embedded cluster's evictor (``cluster.memory``: an eviction that would break a budget is
refused with :class:`~hetsched.ports.TooManyRequests`, HTTP 429, as the API server refuses it), the
scheduler cache (``preempt``/``reclaim`` plan within the budgets instead of asking for evictions that
would be refused) and the simulator's drain.

Rules (``policy/v1``): a budget covers the pods of its namespace its selector matches (an empty selector
matches all of them, a missing one none). Expected pods: for pods a Job owns, the Job's replicas (its
scale, as the disruption controller reads a controller's scale: a pod just evicted and not yet created
again still counts as expected) less those that already succeeded (finished work is not unavailable);
other matching pods that exist and have not finished count one each.
Healthy: matching pods Running. ``minAvailable`` N (or N % of expected, rounded up) pods must stay
healthy; ``maxUnavailable`` M (or M %, rounded up) pods may be missing from expected. Disruptions allowed =
healthy − desired healthy, never below 0. Evicting a pod that is not Running costs nothing. A pod covered
by several budgets may go only when each of them allows it (Kubernetes refuses such evictions outright;
hetsched is less strict but never breaks a budget).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from hetsched.api.objects import Pod, PodDisruptionBudget


def covers(pdb: PodDisruptionBudget, pod: Pod) -> bool:
    selector = pdb.spec.selector
    return (selector is not None and (pod.metadata.namespace or "default") == (pdb.metadata.namespace or "default")
            and selector.matches(pod.metadata.labels))


def _scaled(value: int | str, expected: int) -> int:
    if isinstance(value, int):
        return value
    return math.ceil(expected * int(value[:-1]) / 100)


def desired_healthy(pdb: PodDisruptionBudget, expected: int) -> int:
    spec = pdb.spec
    if spec.minAvailable is not None:
        return _scaled(spec.minAvailable, expected)
    if spec.maxUnavailable is not None:
        return max(0, expected - _scaled(spec.maxUnavailable, expected))
    return 0


def owner_job(pod: Pod) -> str:
    """``namespace/name`` of the Job owning ``pod``, or ""."""
    for ref in pod.metadata.ownerReferences:
        if ref.kind == "Job":
            return f"{pod.metadata.namespace or 'default'}/{ref.name}"
    return ""


def disruptions_allowed(pdb: PodDisruptionBudget, pods: Iterable[Pod], replicas: Mapping[str, int]) -> int:
    """How many healthy pods ``pdb`` lets voluntary evictions take now (``pods``: any pods, the budget's own
    are picked out; ``replicas``: Job key → its total replicas)."""
    covered = [p for p in pods if covers(pdb, p)]
    mine = [p for p in covered if p.status.phase in ("Pending", "Running", "Unknown")]
    healthy = sum(1 for p in mine if p.status.phase == "Running")
    jobs = {owner_job(p) for p in mine} - {""}
    done: dict[str, int] = {}
    for pod in covered:
        if pod.status.phase == "Succeeded":
            done[owner_job(pod)] = done.get(owner_job(pod), 0) + 1
    expected = sum(1 for p in mine if owner_job(p) not in replicas) + sum(
        max(replicas[j] - done.get(j, 0), 0) for j in jobs if j in replicas)
    return max(0, healthy - desired_healthy(pdb, expected))


def refusal(pod: Pod, budgets: Iterable[PodDisruptionBudget], pods: Iterable[Pod], replicas: Mapping[str, int]) -> str:
    """Why evicting ``pod`` now would break a budget, or "" when it may go."""
    if pod.status.phase != "Running":
        return ""
    candidates = list(pods)
    for pdb in budgets:
        if covers(pdb, pod) and disruptions_allowed(pdb, candidates, replicas) < 1:
            return (f"Cannot evict pod as it would violate the pod's disruption budget "
                    f"{pdb.metadata.namespace or 'default'}/{pdb.metadata.name}")
    return ""
