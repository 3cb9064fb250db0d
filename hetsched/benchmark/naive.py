"""The baseline: a straightforward per-pod, per-node scheduler loop, as kube-scheduler works.

Who calls it: ``benchmark.engine``, to report the engine's speed as a ratio. For every pod it walks every
node in Python: node selector, resource fit, then the same default scores as ``nodeorder`` (least
requested + balanced allocation on CPU and memory), and takes the best node. A job's pods are placed
tentatively and rolled back unless the whole gang fits. Node state is plain dicts: no vectorisation.
"""

from __future__ import annotations

from collections.abc import Callable

from hetsched.api.objects import Node, Pod, PodGroup


class NaiveScheduler:
    def __init__(self, nodes: list[Node]) -> None:
        self.names = [n.metadata.name for n in nodes]
        self.labels = [dict(n.metadata.labels) for n in nodes]
        self.alloc = [dict(n.status.allocatable) for n in nodes]
        self.used: list[dict[str, int]] = [{} for _ in nodes]

    def _fits(self, row: int, pod: Pod) -> bool:
        for key, value in pod.spec.nodeSelector.items():
            if self.labels[row].get(key) != value:
                return False
        alloc = self.alloc[row]
        used = self.used[row]
        return all(used.get(r, 0) + amount <= alloc.get(r, 0) for r, amount in pod.spec.requests.items())

    def _score(self, row: int, pod: Pod) -> float:
        requests = pod.spec.requests
        fractions = []
        for resource in ("cpu", "memory"):
            capacity = self.alloc[row].get(resource, 0)
            total = self.used[row].get(resource, 0) + requests.get(resource, 0)
            fractions.append(min(total / capacity, 1.0) if capacity else 1.0)
        least = ((1 - fractions[0]) + (1 - fractions[1])) * 50
        balanced = (1 - abs(fractions[0] - fractions[1]) / 2) * 100
        return least + balanced

    def _place(self, row: int, pod: Pod, sign: int) -> None:
        used = self.used[row]
        for resource, amount in pod.spec.requests.items():
            used[resource] = used.get(resource, 0) + sign * amount

    def schedule_job(self, group: PodGroup, pods: list[Pod]) -> int:
        placed: list[tuple[int, Pod]] = []
        for pod in pods:
            best, best_score = -1, -1.0
            for row in range(len(self.names)):
                if self._fits(row, pod):
                    score = self._score(row, pod)
                    if score > best_score:
                        best, best_score = row, score
            if best < 0:
                break
            self._place(best, pod, 1)
            placed.append((best, pod))
        if len(placed) < group.spec.minMember:
            for row, pod in placed:
                self._place(row, pod, -1)
            return 0
        return len(placed)

    def run(self, jobs: list[tuple[PodGroup, list[Pod]]], budget: float,
            clock: Callable[[], float]) -> tuple[int, float]:
        """Schedule jobs in order until ``budget`` seconds pass; return (pods attempted, seconds)."""
        start = clock()
        attempted = 0
        for group, pods in jobs:
            self.schedule_job(group, pods)
            attempted += len(pods)
            if clock() - start >= budget:
                break
        return attempted, clock() - start
