"""Network-topology figures of a simulation: how far apart each gang's pods ran over the HyperNode tree,
jobs started and their waits per kind of bound, and whole free HyperNodes over time.

Who calls it: the simulator's :class:`~hetsched.sim.results.Recorder` after every cycle (only when the
cluster has HyperNodes: nothing is recorded or reported otherwise) and ``build_results``, which puts
:meth:`NetworkRecorder.summary` under ``summary.network`` in results.json; the topology study
(``bench/hypernode_study.py``) compares those figures across policies.

A job's *span* is the lowest tier at which one HyperNode holds every node its pods were bound to, over
the whole run (replacements included); a job "crosses tier t" when no HyperNode of tier t holds them all
(with a 3-tier tree, crossing tier 2 means its traffic went over the spine).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetsched.scheduler.contract import network_fragmentation
from hetsched.scheduler.engine.runner import CycleResult


def bound_class(spec: Any) -> str:
    """``hard ≤ tier 1``, ``soft ≤ tier 2``, ``hard ≤ tier 'spine'`` …, or ``none``."""
    bound = spec.networkTopology
    if bound is None:
        return "none"
    tier = bound.highestTierAllowed if bound.highestTierAllowed is not None else repr(bound.highestTierName)
    return f"{bound.mode} ≤ tier {tier}" if tier is not None else bound.mode


class NetworkRecorder:
    def __init__(self) -> None:
        self.tiers: list[int] = []
        self.whole: list[tuple[float, dict[int, int], dict[int, int]]] = []
        """(time, whole free HyperNodes per tier, free servers per tier) whenever either changes."""
        self.domains: dict[str, dict[int, set[int]]] = {}
        """Job key → tier → the HyperNodes (ids) its pods were bound in."""
        self.bounds: dict[str, str] = {}
        """Job key → its bound class (:func:`bound_class`)."""
        self.pods: dict[str, int] = {}
        """Job key → pods bound (over the whole run)."""

    def on_cycle(self, result: CycleResult, now: float) -> None:
        snapshot = result.snapshot
        network = snapshot.network
        if network is None:
            return
        self.tiers = network.tiers
        for key, job in snapshot.active.items():  # every job is active while it has pods to bind
            if key not in self.bounds:
                self.bounds[key] = bound_class(job.podgroup.spec)
        index = snapshot.nodes.index
        for bind in result.decisions.binds:
            row = index.get(bind.node)
            if row is None:
                continue
            self.pods[bind.job] = self.pods.get(bind.job, 0) + 1
            domains = self.domains.setdefault(bind.job, {})
            for tier in network.tiers:
                domains.setdefault(tier, set()).add(int(network.domain[tier][row]))
        tiers = network_fragmentation.by_tier(snapshot, needed=0)
        whole = {t.tier: t.whole for t in tiers}
        free = {t.tier: t.free for t in tiers}
        if not self.whole or self.whole[-1][1:] != (whole, free):
            self.whole.append((now, whole, free))

    def span(self, job: str) -> int | None:
        """The lowest tier one HyperNode of which held all the job's pods (top tier + 1: none did; None:
        nothing of it was bound)."""
        domains = self.domains.get(job)
        if not domains:
            return None
        for tier in self.tiers:
            held = domains.get(tier, set())
            if len(held) == 1 and -1 not in held:
                return tier
        return max(self.tiers, default=0) + 1

    def summary(self, jobs: list[dict[str, Any]], end: float) -> dict[str, Any] | None:
        if not self.tiers:
            return None
        by_class: dict[str, list[dict[str, Any]]] = {}
        for record in jobs:
            key = f"{record['namespace']}/{record['name']}"
            by_class.setdefault(self.bounds.get(key, "none"), []).append(record)
        classes = {}
        for name, records in sorted(by_class.items()):
            started = [r for r in records if r["start"] is not None]
            waits = np.asarray([r["start"] - r["submit"] for r in started], dtype=np.float64)
            classes[name] = {
                "jobs": len(records), "started": len(started),
                "startedShare": round(len(started) / len(records), 4) if records else None,
                "meanWaitSeconds": round(float(waits.mean()), 1) if waits.size else None,
                "p95WaitSeconds": round(float(np.percentile(waits, 95)), 1) if waits.size else None,
            }
        multi = [key for key, pods in self.pods.items() if pods > 1]
        spans = [self.span(key) for key in multi]
        crossing = {f"tier{t}": sum(1 for s in spans if s is not None and s > t) for t in self.tiers}
        return {
            "tiers": self.tiers,
            "byBound": classes,
            "multiPodJobsBound": len(multi),
            "jobsCrossing": crossing,
            "wholeFreeHyperNodes": {f"tier{t}": round(self._mean(1, t, end), 2) for t in self.tiers},
            "freeServers": {f"tier{t}": round(self._mean(2, t, end), 1) for t in self.tiers},
        }

    def _mean(self, column: int, tier: int, end: float) -> float:
        """Time-weighted mean of a per-tier series up to ``end``."""
        series = self.whole
        if not series:
            return 0.0
        def value(entry: tuple[float, dict[int, int], dict[int, int]]) -> int:
            return (entry[1] if column == 1 else entry[2]).get(tier, 0)

        if end <= series[0][0]:
            return float(value(series[-1]))
        total = 0.0
        for entry, nxt in zip(series, [*series[1:], (end, {}, {})], strict=True):
            total += value(entry) * (min(nxt[0], end) - entry[0])
        return total / (end - series[0][0])
