"""Free servers over the HyperNode tree: how many are free per tier, how many HyperNodes are wholly free,
and how many free servers are stranded — in HyperNodes too small for the largest hard-bounded gang waiting.

Who calls it: the scheduler's metrics (``metrics.scheduler``, per tier at scrape time from the last
snapshot), ``hetsched explain`` for a job with a ``networkTopology`` (``scheduler.engine.why``: "12 free servers,
split 4+4+4 over three tier-1 HyperNodes") and the topology study (``bench/hypernode_study.py``).

A *free server* is a schedulable, Ready node none of whose accelerator chips is held (a node without
accelerators: none of whose CPU is requested) — the unit a whole-server training pod needs. Everything
here is read from one snapshot with a few vectorised counts; nothing is changed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hetsched.api.accelerators import accelerator_kind
from hetsched.scheduler.contract.arrays import BoolArray, IntArray
from hetsched.scheduler.contract.snapshot import JobInfo, Snapshot


@dataclass(frozen=True)
class TierFree:
    tier: int
    free: int
    """Free servers inside HyperNodes of this tier."""
    whole: int
    """HyperNodes of this tier every server of which is free."""
    per_domain: IntArray
    """Free servers per HyperNode of the tier (indexed by domain id)."""
    fragmented: int
    """Free servers in HyperNodes with fewer than ``needed`` free (0 when no hard-bounded gang waits)."""
    needed: int

    def split(self, limit: int = 8) -> str:
        """How the free servers lie, largest first: ``4+4+4``, or ``8+2+1+… (12 more)`` past ``limit``."""
        counts = sorted((int(c) for c in self.per_domain.tolist() if c), reverse=True)
        text = "+".join(map(str, counts[:limit]))
        return text + (f"+… ({len(counts) - limit} more)" if len(counts) > limit else "")

    @property
    def domains_with_free(self) -> int:
        return int(np.count_nonzero(self.per_domain))


def free_servers(snapshot: Snapshot) -> BoolArray:
    """Per node row: is it a free server (see the module docstring)?"""
    nodes = snapshot.nodes
    names = snapshot.resources.names
    chips = [c for c, name in enumerate(names) if accelerator_kind(name) is not None]
    has_chips = np.zeros(len(nodes), dtype=bool)
    held = np.zeros(len(nodes), dtype=bool)
    for column in chips:
        has_chips |= nodes.alloc[column] > 0
        held |= nodes.used[column] > 0
    cpu = snapshot.resources.columns.get("cpu")
    cpu_held = nodes.used[cpu] > 0 if cpu is not None else np.zeros(len(nodes), dtype=bool)
    busy = np.where(has_chips, held, cpu_held)
    result: BoolArray = nodes.exists & nodes.ready & ~nodes.cordoned & ~busy
    return result


def servers_needed(snapshot: Snapshot, job: JobInfo) -> int:
    """Servers the job's missing gang members need, at the most pods of its pending groups one server of the
    cluster can hold (a whole-server pod: one per server)."""
    missing = max(job.min_member - job.ready, 0)
    if not missing:
        return 0
    nodes = snapshot.nodes
    per_server = math.inf
    for group in job.groups:
        if not group.pending:
            continue
        fit = math.inf
        for column in group.columns.tolist():
            largest = int(nodes.alloc[column][nodes.exists].max(initial=0))
            fit = min(fit, largest // int(group.request[column]))
        per_server = min(per_server, fit)
    if per_server in (0, math.inf):
        return missing
    return math.ceil(missing / per_server)


def hard_bounded_waiting(snapshot: Snapshot) -> list[JobInfo]:
    """Jobs with a ``hard`` network-topology bound whose gang still lacks pods."""
    return [job for job in snapshot.active.values()
            if job.podgroup.spec.networkTopology is not None and job.podgroup.spec.networkTopology.mode == "hard"
            and job.ready < job.min_member and any(g.pending for g in job.groups)]


def by_tier(snapshot: Snapshot, needed: int | None = None) -> list[TierFree]:
    """Free servers per tier; ``needed`` (default: the largest hard-bounded gang waiting, in servers) sets
    what counts as stranded."""
    network = snapshot.network
    if network is None:
        return []
    if needed is None:
        needed = max((servers_needed(snapshot, job) for job in hard_bounded_waiting(snapshot)), default=0)
    free = free_servers(snapshot)
    result = []
    for tier in network.tiers:
        domain = network.domain[tier]
        count = len(network.names[tier])
        inside = domain >= 0
        per_domain = np.bincount(domain[inside & free], minlength=count).astype(np.int64)
        servers = np.bincount(domain[inside & snapshot.nodes.exists], minlength=count)
        whole = int(np.count_nonzero((per_domain == servers) & (servers > 0)))
        fragmented = int(per_domain[per_domain < needed].sum()) if needed else 0
        result.append(TierFree(tier, int(per_domain.sum()), whole, per_domain, fragmented, needed))
    return result
