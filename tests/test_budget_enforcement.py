"""What a used-up budget does in the simulator: ``Stop`` (a hard budget) evicts, a parent queue's budget binds
its subtree, an ``Idle`` queue's jobs are the first reclaimed — and, as a property over random workloads, no
queue ever exceeds a hard budget by more than one job's chip-hours (issue 35)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsched.api.manifest import load_text
from hetsched.api.objects import QueueUsage
from hetsched.cluster.spec import parse_cluster_spec
from hetsched.scheduler.defaults import DEFAULT_CONF_YAML, parse_conf
from hetsched.sim.simulator import Simulation

EXAMPLES = int(os.environ.get("HETSCHED_BUDGET_EXAMPLES", "25"))
pytestmark = pytest.mark.timeout(max(300, 10 * EXAMPLES))  # a longer property run gets the time it needs
CHIPS = "huawei.com/Ascend910"
DAY = 86400.0
RECLAIM = parse_conf(DEFAULT_CONF_YAML.replace('actions: "enqueue, allocate, backfill"',
                                               'actions: "enqueue, allocate, reclaim, backfill"'))


def servers(count: int) -> list[Any]:
    spec = parse_cluster_spec({"apiVersion": "hetsched.io/v1alpha1", "kind": "ClusterSpec",
                               "metadata": {"name": "budgets"},
                               "pools": [{"name": "a", "count": count, "cpu": "64", "memory": "256Gi",
                                          "accelerators": [{"kind": "ascend", "model": "Ascend910", "count": 8}]}]})
    return spec.nodes()


def queue(name: str, parent: str = "", weight: int = 1) -> str:
    spec = f"{{weight: {weight}" + (f", parent: {parent}" if parent else "") + "}"
    return f"apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: {name}}}\nspec: {spec}"


def budget(name: str, hours: float, when: str, period: str = "Day") -> str:
    return (f"apiVersion: hetsched.io/v1alpha1\nkind: QueueUsage\nmetadata: {{name: {name}}}\n"
            f"spec: {{period: {period}, budget: {{{CHIPS}: {hours}}}, whenExhausted: {when}}}")


def job(name: str, queue_name: str, chips: int, duration: float, at: float = 0.0, namespace: str = "team",
        deadline: float | None = None) -> str:
    limit = f"\n        activeDeadlineSeconds: {deadline:g}" if deadline is not None else ""
    return f"""apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: {name}, namespace: {namespace}, annotations: {{hetsched.io/submit-at: "{at:g}"}}}}
spec:
  minAvailable: 1
  queue: {queue_name}
  tasks:
  - name: w
    replicas: 1
    template:
      metadata: {{annotations: {{hetsched.io/duration: "{duration:g}"}}}}
      spec:{limit}
        containers:
        - {{name: w, resources: {{limits: {{{CHIPS}: "{chips}"}}, requests: {{cpu: "1"}}}}}}"""


def simulate(documents: list[str], count: int = 1, until: float | None = None, conf: Any = None) -> Any:
    simulation = Simulation(servers(count), load_text("\n---\n".join(documents)), conf, until=until)
    return simulation, simulation.run()


def books(simulation: Simulation, name: str) -> QueueUsage:
    found = simulation.cluster.get("QueueUsage", name)
    assert isinstance(found, QueueUsage)
    return found


def periods_used(usage: QueueUsage) -> list[float]:
    """Chip-hours used in every period the books hold, closed and current."""
    return [p.used.get(CHIPS, 0.0) for p in usage.status.history] + [usage.status.used.get(CHIPS, 0.0)]


def test_a_stop_budget_evicts_the_running_job_the_second_it_is_used_up_and_it_reruns_next_period() -> None:
    """12 chip-hours a day, two 8-chip jobs of an hour: the first runs 8, the second is stopped after half an
    hour (12 used, not 16 as a Wait budget would let it finish) and runs whole after midnight."""
    simulation, results = simulate([queue("search"), budget("search", 12, "Stop"),
                                    job("a", "search", 8, 3600), job("b", "search", 8, 3600, at=1)])
    evictions = results.evictions
    assert [(e["action"], e["job"]) for e in evictions] == [("budget", "team/b")]
    assert evictions[0]["time"] == pytest.approx(5400, abs=2)
    assert "queue search has used its budget of huawei.com/Ascend910" in evictions[0]["reason"]
    first_day = books(simulation, "search").status.history[0]
    assert first_day.used[CHIPS] == pytest.approx(12.0, abs=0.01)
    b = next(j for j in results.jobs if j["name"] == "b")
    assert b["phase"] == "Completed" and b["end"] == pytest.approx(DAY + 3600, abs=2)


def test_with_deadlines_a_stop_budget_starts_only_what_it_can_finish_and_stops_nothing() -> None:
    """The same two jobs declaring ``activeDeadlineSeconds: 3600``: the first commits 8 of the 12 chip-hours,
    so the second (8 more) waits with the reason — not started to be stopped half-way — and runs whole after
    midnight, when a fresh 12 holds it. Nothing is evicted; the books never pass the budget."""
    simulation, results = simulate([queue("search"), budget("search", 12, "Stop"),
                                    job("a", "search", 8, 3600, deadline=3600),
                                    job("b", "search", 8, 3600, at=1, deadline=3600)])
    assert results.evictions == []
    starts = {j["name"]: j["start"] for j in results.jobs}
    assert starts["a"] == pytest.approx(1, abs=2) and starts["b"] == pytest.approx(DAY, abs=2)
    assert all(used <= 12 + 1e-6 for used in periods_used(books(simulation, "search")))
    waiting, _ = simulate([queue("search"), budget("search", 12, "Stop"),
                           job("a", "search", 8, 3600, deadline=3600),
                           job("b", "search", 8, 3600, at=1, deadline=3600)], until=1800)
    (condition,) = [c for c in waiting.cluster.get("PodGroup", "team/b").status.conditions
                    if c.type == "Unschedulable"]
    assert "queue search has 4 huawei.com/Ascend910 hours left this period" in condition.message
    assert "this job's pods commit 8" in condition.message


def test_a_pod_running_past_its_active_deadline_fails_deadline_exceeded() -> None:
    simulation, _ = simulate([queue("search"), job("long", "search", 1, 7200, deadline=600)], until=3000)
    pod = simulation.cluster.get("Pod", "team/long-w-0")
    assert pod.status.phase == "Failed" and pod.status.reason == "DeadlineExceeded"
    (status,) = pod.status.containerStatuses
    assert status.state.terminated is not None and status.state.terminated.finishedAt == pytest.approx(601, abs=2)


def test_a_parent_queues_budget_binds_every_queue_under_it_and_its_books_add_them_up() -> None:
    """Business line ``line`` may use 16 chip-hours a day across its two teams' queues; each team submits two
    8-chip hours at once on two servers: two jobs run (one per team), the other two wait for midnight with the
    parent named as the reason, and the parent's books hold both teams' hours."""
    simulation, results = simulate([
        queue("line"), queue("rank", parent="line"), queue("ads", parent="line"), budget("line", 16, "Wait"),
        job("r1", "rank", 8, 3600), job("r2", "rank", 8, 3600, at=1),
        job("a1", "ads", 8, 3600), job("a2", "ads", 8, 3600, at=1)], count=2)
    starts = sorted(j["start"] for j in results.jobs)
    assert starts[:2] == pytest.approx([0, 0], abs=2) and starts[2:] == pytest.approx([DAY, DAY], abs=2)
    parent_day = books(simulation, "line").status.history[0]
    assert parent_day.used[CHIPS] == pytest.approx(16.0, abs=0.01)
    for team in ("rank", "ads"):  # no budget of their own: the month's books, both days
        assert books(simulation, team).status.used[CHIPS] == pytest.approx(16.0, abs=0.01)
    waiting, _ = simulate([
        queue("line"), queue("rank", parent="line"), queue("ads", parent="line"), budget("line", 16, "Wait"),
        job("r1", "rank", 8, 3600), job("r2", "rank", 8, 3600, at=1),
        job("a1", "ads", 8, 3600), job("a2", "ads", 8, 3600, at=1)], count=2, until=20000)
    messages = [c.message for group in waiting.cluster.list("PodGroup") for c in group.status.conditions
                if c.type == "Unschedulable"]
    assert messages and all("queue line has used its budget" in m for m in messages)


def test_an_idle_budgets_jobs_are_guests_reclaimed_first_for_any_queue_that_asks() -> None:
    """``ads`` used its Idle budget and runs a long job on the idle server; when ``search`` (no deserved-share
    claim needed) asks for the server, ``ads``'s guest job is reclaimed at once, not the search job's peer."""
    _, results = simulate([
        queue("search"), queue("ads"), budget("ads", 1, "Idle"),
        job("warm", "ads", 8, 900), job("long", "ads", 8, 20000, at=1000),
        job("need", "search", 8, 3600, at=5000)], conf=RECLAIM)
    evicted = [(e["action"], e["job"]) for e in results.evictions]
    assert evicted == [("reclaim", "team/long")]
    assert results.evictions[0]["time"] == pytest.approx(5000, abs=2)
    assert "queue ads has used its budget and runs only on idle capacity" in results.evictions[0]["reason"]
    need = next(j for j in results.jobs if j["name"] == "need")
    assert need["start"] == pytest.approx(5000, abs=2)


def test_without_reclaim_a_guest_keeps_its_chips_and_the_other_queue_waits() -> None:
    """The default actions do not evict: the guest finishes first (docs/queues.md says reclaim is needed)."""
    _, results = simulate([
        queue("search"), queue("ads"), budget("ads", 1, "Idle"),
        job("warm", "ads", 8, 900), job("long", "ads", 8, 6000, at=1000),
        job("need", "search", 8, 3600, at=5000)])
    assert results.evictions == []
    need = next(j for j in results.jobs if j["name"] == "need")
    assert need["start"] == pytest.approx(7000, abs=2)


@st.composite
def workloads(draw: st.DrawFn) -> tuple[int, list[str], dict[str, float], dict[str, float]]:
    """1–2 servers; 1–3 queues (one maybe under a parent ``line`` with a budget of its own), each with a
    ``Stop`` budget of 1–40 chip-hours a day; up to 12 jobs of 1–8 chips, 10 minutes to 10 hours, arriving
    over two days, half of them declaring their duration as ``activeDeadlineSeconds``."""
    count = draw(st.integers(1, 2))
    names = [f"q{i}" for i in range(draw(st.integers(1, 3)))]
    with_parent = draw(st.booleans())
    documents = [queue("line")] if with_parent else []
    limits: dict[str, float] = {}
    for index, name in enumerate(names):
        documents.append(queue(name, parent="line" if with_parent and index < 2 else ""))
        limits[name] = float(draw(st.integers(1, 40)))
        documents.append(budget(name, limits[name], "Stop"))
    if with_parent:
        limits["line"] = float(draw(st.integers(1, 40)))
        documents.append(budget("line", limits["line"], "Stop"))
    biggest: dict[str, float] = dict.fromkeys(limits, 0.0)
    for index in range(draw(st.integers(1, 12))):
        name = draw(st.sampled_from(names))
        chips = draw(st.sampled_from([1, 2, 4, 8]))
        duration = float(draw(st.integers(600, 36000)))
        deadline = duration if draw(st.booleans()) else None
        documents.append(job(f"j{index}", name, chips, duration, at=float(draw(st.integers(0, 2 * 86400))),
                             deadline=deadline))
        for charged in ([name, "line"] if with_parent and names.index(name) < 2 else [name]):
            biggest[charged] = max(biggest[charged], chips * duration / 3600)
    return count, documents, limits, biggest


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_no_queue_ever_exceeds_its_hard_budget_by_more_than_one_jobs_chip_hours(
        case: tuple[int, list[str], dict[str, float], dict[str, float]]) -> None:
    count, documents, limits, biggest = case
    simulation, results = simulate(documents, count=count, until=3 * DAY)
    declared = {f"team/{d.split('name: ')[1].split(',')[0]}" for d in documents if "activeDeadlineSeconds" in d}
    assert not [e for e in results.evictions if e["job"] in declared]  # a job that commits is never stopped
    for name, limit in limits.items():
        for used in periods_used(books(simulation, name)):
            assert used <= limit + biggest[name] + 1e-6, (name, used, limit)
            # and in fact by no more than what two servers' chips run from the tick to the cycle that evicts
            # (a second or two) plus the pods' termination grace period (30 s)
            assert used <= limit + 16 * (30 + 2) / 3600 + 1e-6, (name, used, limit)
