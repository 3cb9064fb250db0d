"""``resourcequota`` (Volcano's plugin; issue 35's link to Kubernetes ResourceQuota): a job is admitted only
while its minResources fit what its namespace's quotas leave. The cases are translated from Volcano's
``pkg/scheduler/plugins/resourcequota/resourcequota_test.go`` (TestResourceQuotaPlugin,
TestJobEnqueuedOnOtherPluginsReject), with hetsched's own builders."""

from __future__ import annotations

from typing import Any

import pytest

from hetsched.api.objects import AnyObject, ResourceQuota
from hetsched.scheduler.defaults import parse_conf
from tests.builders import harness, node, pod, podgroup, queue

pytestmark = pytest.mark.timeout(120)
CONF = """actions: "enqueue, allocate"
tiers:
- plugins: [{name: priority}, {name: gang}, {name: resourcequota}]
- plugins: [{name: drf}, {name: predicates}, {name: proportion}, {name: nodeorder}]
"""
NORMAL = {"cpu": "2", "memory": "2G"}
HUGE = {"cpu": "20", "memory": "20G"}


def quota(name: str, namespace: str, hard: dict[str, str], used: dict[str, str] | None = None) -> ResourceQuota:
    return ResourceQuota.model_validate({"metadata": {"name": name, "namespace": namespace},
                                         "spec": {"hard": hard}, "status": {"hard": hard, "used": used or {}}})


def pending_job(name: str, namespace: str, minimum: dict[str, str] | None) -> list[AnyObject]:
    return [podgroup(name, 1, queue="c1", phase="Pending", namespace=namespace, min_resources=minimum),
            pod(f"{name}-0", name, namespace=namespace, cpu="1", memory="1G")]


def run(objects: list[Any], quotas: list[ResourceQuota]) -> Any:
    h = harness([queue("c1"), node("n1", cpu="64", memory="256Gi"), *objects], parse_conf(CONF))
    for made in quotas:
        h.cluster.create(made)
    h.cycle()
    return h


@pytest.mark.parametrize(("case", "minimum", "quotas", "admitted"), [
    ("ResourceQuota capacity can match the needs of this pg", NORMAL, [quota("test", "default", NORMAL)], True),
    ("ResourceQuota capacity can't match the needs of this pg", HUGE, [quota("test", "default", NORMAL)], False),
    ("No ResourceQuota resource object", HUGE, [], True),
    ("MinResources field of pg is not set", None, [quota("test", "default", NORMAL)], True),
])
def test_resource_quota_plugin(case: str, minimum: dict[str, str] | None, quotas: list[ResourceQuota],
                               admitted: bool) -> None:
    h = run(pending_job("pg", "default", minimum), quotas)
    assert (h.podgroup("pg").status.phase != "Pending") is admitted, case  # admitted: Inqueue, then placed
    if not admitted:
        message = h.condition("pg")
        assert "resource quota test insufficient: cpu (used + minResources 20 > hard 2)" in message, message


def test_what_jobs_admitted_earlier_in_the_cycle_asked_counts_against_the_quota() -> None:
    """Volcano's pending resources: two jobs of ns1 each asking 1 CPU against a quota of 1 CPU — the first is
    admitted and counted, the second waits (it would be admitted alone)."""
    one = {"cpu": "1", "memory": "1G"}
    h = run([*pending_job("pga", "ns1", one), *pending_job("pgb", "ns1", one)], [quota("rq1", "ns1", one)])
    phases = sorted(h.podgroup(n, "ns1").status.phase != "Pending" for n in ("pga", "pgb"))
    assert phases == [False, True]


def test_used_counts_and_another_namespaces_quota_does_not() -> None:
    h = run([*pending_job("mine", "team-a", NORMAL), *pending_job("theirs", "team-b", NORMAL)],
            [quota("rq", "team-a", {"cpu": "4"}, used={"cpu": "3"})])
    assert h.podgroup("mine", "team-a").status.phase == "Pending"  # 3 used + 2 > 4
    assert h.podgroup("theirs", "team-b").status.phase != "Pending"


def test_the_plugin_loads_where_volcano_configurations_name_it() -> None:
    conf = parse_conf(CONF)
    assert any(o.name == "resourcequota" for t in conf.tiers for o in t.plugins)


def test_a_quota_freed_by_the_quota_controller_admits_the_job_at_the_next_cycle() -> None:
    """The quota controller lowers ``status.used`` as pods finish: the scheduler sees the new figure (its view
    of the quotas is rebuilt on every quota event) and admits the waiting job."""
    h = run(pending_job("pg", "default", NORMAL), [quota("test", "default", NORMAL, used=NORMAL)])
    assert h.podgroup("pg").status.phase == "Pending"
    current = h.cluster.get("ResourceQuota", "default/test")
    h.cluster.update(current.model_copy(update={"status": current.status.model_copy(update={"used": {}})}))
    h.cycle()
    assert h.podgroup("pg").status.phase != "Pending"
