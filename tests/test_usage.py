"""The usage accountant (issue 35, ``controllers.usage``): chip-, core- and GiB-hours per queue and namespace from
real pod run times, split at period boundaries, kept across restarts, decayed for fair share, and budgets
marked used up — on the embedded cluster with a simulated clock, so every figure is exact."""

from __future__ import annotations

import calendar
import math
from typing import Any

import pytest

from hetsched.api.manifest import ManifestError, load_text
from hetsched.api.objects import Pod, Queue, QueueUsage
from hetsched.cluster.memory import MemoryCluster
from hetsched.controllers.usage import UsageController
from hetsched.sim.kernel import SimClock
from tests.builders import pod, podgroup, queue

pytestmark = pytest.mark.timeout(120)
CHIPS = "huawei.com/Ascend910"
NOV_30_22H = float(calendar.timegm((2026, 11, 30, 22, 0, 0)))


class Bench:
    def __init__(self, start: float = NOV_30_22H, **options: Any) -> None:
        self.clock = SimClock(start)
        self.cluster = MemoryCluster(self.clock)
        self.accountant = UsageController(self.cluster, self.clock, **options)

    def at(self, when: float) -> None:
        self.clock.advance_to(when)
        self.accountant.process()

    def usage(self, name: str = "search") -> QueueUsage:
        found = self.cluster.get("QueueUsage", name)
        assert isinstance(found, QueueUsage)
        return found

    def run(self, name: str, chips: int, namespace: str = "ranking", queue_name: str = "search") -> None:
        self.cluster.create(podgroup(name, 1, queue=queue_name, namespace=namespace))
        made = pod(f"{name}-0", name, namespace=namespace, cpu="4", memory="8Gi", limits={CHIPS: chips})
        made = self.cluster.create(made)
        self.cluster.update(made.model_copy(update={
            "spec": made.spec.model_copy(update={"nodeName": "n1"}),
            "status": made.status.model_copy(update={"phase": "Running", "startTime": self.clock.now()})}))

    def finish(self, name: str, namespace: str = "ranking") -> None:
        found = self.cluster.get("Pod", f"{namespace}/{name}-0")
        assert isinstance(found, Pod)
        self.cluster.update(found.model_copy(update={"status": found.status.model_copy(update={"phase": "Succeeded"})}))

    def set_spec(self, name: str = "search", **spec: Any) -> None:
        usage = self.usage(name)
        self.cluster.update(usage.model_copy(update={"spec": usage.spec.model_copy(update=spec)}))


def with_queue(bench: Bench, name: str = "search") -> Bench:
    bench.cluster.create(queue(name))
    bench.accountant.process()
    return bench


def test_every_queue_gets_its_usage_object_owned_by_the_queue() -> None:
    bench = with_queue(Bench())
    usage = bench.usage()
    assert usage.metadata.ownerReferences[0].kind == "Queue" and usage.metadata.ownerReferences[0].name == "search"
    assert usage.spec.period == "Month" and usage.status.used == {}


def test_run_time_is_charged_per_resource_and_namespace_and_split_at_the_month() -> None:
    """A 2-chip pod runs 22:00 Nov 30 → 01:00 Dec 1 (UTC): November gets 2 h, December 1 h; each hour
    costs 2 chip-hours, 4 core-hours and 8 GiB-hours; a second namespace's pod is charged to it."""
    bench = with_queue(Bench())
    bench.run("train", 2)
    bench.at(NOV_30_22H + 1)  # the books opened with the QueueUsage, at 22:00
    bench.accountant.tick()
    bench.at(NOV_30_22H + 1 + 3 * 3600)
    bench.finish("train")
    bench.accountant.tick()
    usage = bench.usage().status
    (november,) = usage.history
    assert november.periodEnd == calendar.timegm((2026, 12, 1, 0, 0, 0))
    assert november.used == pytest.approx({CHIPS: 2 * 2.0, "cpu": 4 * 2.0, "memory": 8 * 2.0})
    assert usage.used == pytest.approx({CHIPS: 2.0 + 2 / 3600, "cpu": 4.0 + 4 / 3600, "memory": 8.0 + 8 / 3600})
    assert set(usage.byNamespace) == {"ranking"} and usage.periodStart == november.periodEnd
    bench.run("ads", 1, namespace="ads")
    bench.at(bench.clock.now() + 3600)
    bench.accountant.tick()
    status = bench.usage().status
    assert status.byNamespace["ads"][CHIPS] == pytest.approx(1.0)
    assert status.byNamespace["ranking"][CHIPS] == pytest.approx(2.0 + 2 / 3600)  # it ended: no more


def test_a_restarted_accountant_resumes_where_the_status_says_and_counts_nothing_twice() -> None:
    bench = with_queue(Bench())
    bench.run("train", 4)
    bench.at(NOV_30_22H + 10)
    bench.accountant.tick()
    bench.at(NOV_30_22H + 10 + 1800)
    bench.accountant.tick()
    bench.accountant.close()
    after = UsageController(bench.cluster, bench.clock)  # a new leader: it lists the pods again
    bench.clock.advance_to(NOV_30_22H + 10 + 3600)
    after.tick()
    assert bench.usage().status.used[CHIPS] == pytest.approx(4 * 3610 / 3600)  # 22:00 to 23:00:10, once


def test_a_budget_is_used_up_when_predicted_and_a_new_period_renews_it() -> None:
    """4 chip-hours a day for a 2-chip pod: the accountant wakes exactly when they run out (not at the next
    hourly tick), marks the chips exhausted, and wakes again when the day ends, with nothing running."""
    start = float(calendar.timegm((2026, 12, 7, 8, 0, 0)))
    bench = with_queue(Bench(start, interval=3600.0))
    bench.set_spec(period="Day", budget={CHIPS: 4.0})
    bench.run("train", 2)
    bench.accountant.tick()
    bench.at(start + 3600)
    bench.accountant.wake()
    assert bench.accountant.next_deadline() == pytest.approx(start + 2 * 3600)
    bench.at(start + 2 * 3600)
    bench.accountant.wake()
    status = bench.usage().status
    assert status.used[CHIPS] == pytest.approx(4.0) and status.exhausted == [CHIPS]
    bench.finish("train")
    bench.accountant.tick()
    midnight = float(calendar.timegm((2026, 12, 8, 0, 0, 0)))
    assert bench.accountant.next_deadline() == midnight
    bench.at(midnight)
    bench.accountant.wake()
    status = bench.usage().status
    assert status.exhausted == [] and status.used == {} and status.history[-1].used[CHIPS] == pytest.approx(4.0)


def test_a_rolling_window_keeps_its_days_and_forgets_what_falls_out() -> None:
    start = float(calendar.timegm((2026, 12, 1, 12, 0, 0)))
    bench = with_queue(Bench(start, interval=3600.0))
    bench.set_spec(period="Rolling", window="48h")
    bench.run("serve", 1)
    bench.accountant.tick()
    for hour in range(1, 73):
        bench.at(start + hour * 3600)
        bench.accountant.tick()
    status = bench.usage().status
    assert [d.periodStart for d in status.days] == [calendar.timegm((2026, 12, d, 0, 0, 0)) for d in (3, 4)]
    assert status.used[CHIPS] == pytest.approx(24 + 12)  # Dec 3 whole, Dec 4 to noon


def test_decayed_usage_halves_every_half_life() -> None:
    bench = with_queue(Bench(half_life=3600.0))
    bench.run("train", 1)
    bench.accountant.tick()
    bench.at(NOV_30_22H + 60)
    bench.accountant.tick()
    bench.finish("train")
    bench.accountant.tick()
    bench.run("other", 1, namespace="ads")  # keeps the books going for the hour after
    bench.at(NOV_30_22H + 60 + 3600)
    bench.accountant.tick()
    decayed = bench.usage().status.decayed[CHIPS]
    # the first minute, an hour later, halved (about); the hour just run, each moment weighed by its age
    first = (0.5 ** (3600 / 3600) - 0.5 ** (3660 / 3600)) / math.log(2)
    assert decayed == pytest.approx(first + (1 - 0.5) / math.log(2), rel=1e-9)
    ticked = with_queue(Bench(half_life=3600.0))  # the same run ticked every minute: the same figure
    ticked.run("train", 1)
    ticked.accountant.tick()
    for minute in range(1, 62):
        ticked.at(NOV_30_22H + minute * 60)
        if minute == 1:
            ticked.finish("train")
            ticked.accountant.tick()
            ticked.run("other", 1, namespace="ads")
        ticked.accountant.tick()
    assert ticked.usage().status.decayed[CHIPS] == pytest.approx(decayed, rel=1e-9)


@pytest.mark.parametrize(("spec", "message"), [
    ("{budget: {huawei.com/Ascend910: -1}}", "must be hours from 0"),
    ("{budget: {'<b>x</b>': 1}}", "is not a resource name"),
    ("{period: Rolling}", "window must be whole days"),
    ("{period: Month, window: 720h}", "window is for period Rolling only"),
    ("{timeZone: Mars/Olympus}", "unknown time zone"),
    ("{whenExhausted: Sometimes}", "whenExhausted"),
])
def test_a_bad_spec_is_refused_naming_the_field(spec: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        load_text(f"apiVersion: hetsched.io/v1alpha1\nkind: QueueUsage\nmetadata: {{name: search}}\nspec: {spec}\n")


def test_a_queue_deleted_takes_nothing_else_with_it() -> None:
    bench = with_queue(Bench())
    bench.cluster.create(Queue.model_validate({"metadata": {"name": "ads"}}))
    bench.accountant.process()
    assert {u.metadata.name for u in bench.cluster.list("QueueUsage")} == {"search", "ads"}


# ------------------------------------------------------------------------------------- budgets in the simulator

SERVER = [{"kind": "ascend", "model": "Ascend910", "count": 8}]


def budget_case(when: str, extra_queue: bool = False) -> list[Any]:
    """One 8-chip server; queue search may use 16 chip-hours a day; three 1-hour jobs of 8 chips arrive at 0."""
    from hetsched.api.manifest import load_text as load

    jobs = "\n---\n".join(f"""apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: train-{i}, namespace: ranking}}
spec:
  minAvailable: 1
  queue: search
  tasks:
  - name: w
    replicas: 1
    template:
      metadata: {{annotations: {{hetsched.io/duration: "3600"}}}}
      spec:
        containers:
        - {{name: w, resources: {{limits: {{huawei.com/Ascend910: "8"}}, requests: {{cpu: "1"}}}}}}"""
        for i in range(3))
    return load(f"""apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {{name: search}}
---
apiVersion: hetsched.io/v1alpha1
kind: QueueUsage
metadata: {{name: search}}
spec: {{period: Day, budget: {{huawei.com/Ascend910: 16}}, whenExhausted: {when}}}
---
{jobs}
""")


def run_budget_case(when: str, until: float | None = None) -> Any:
    from hetsched.cluster.spec import parse_cluster_spec
    from hetsched.sim.simulator import Simulation

    spec = parse_cluster_spec({"apiVersion": "hetsched.io/v1alpha1", "kind": "ClusterSpec",
                               "metadata": {"name": "one"},
                               "pools": [{"name": "a", "count": 1, "cpu": "64", "memory": "256Gi",
                                          "accelerators": SERVER}]})
    simulation = Simulation(spec.nodes(), budget_case(when), until=until)
    return simulation, simulation.run()


def test_a_wait_budget_holds_the_third_job_until_the_next_day_and_is_never_exceeded() -> None:
    """16 chip-hours a day: the first two 8-chip hours run back to back, the third waits for midnight with
    the reason in its PodGroup, and the day's books show exactly 16."""
    simulation, results = run_budget_case("Wait")
    starts = sorted(j["start"] for j in results.jobs)
    assert starts[:2] == pytest.approx([0, 3600], abs=2) and starts[2] == pytest.approx(86400, abs=2)
    waiting, _ = run_budget_case("Wait", until=40000.0)
    group = waiting.cluster.get("PodGroup", "ranking/train-2")
    (condition,) = [c for c in group.status.conditions if c.type == "Unschedulable"]
    assert ("queue search has used its budget of huawei.com/Ascend910 for this period" in condition.message
            and "1970-01-02T00:00:00Z" in condition.message)
    usage = simulation.cluster.get("QueueUsage", "search")
    assert isinstance(usage, QueueUsage)
    first_day = usage.status.history[0]
    assert first_day.periodEnd == 86400 and first_day.used["huawei.com/Ascend910"] == pytest.approx(16.0, abs=0.01)
    assert usage.status.used["huawei.com/Ascend910"] == pytest.approx(8.0, abs=0.01)


def test_an_idle_budget_lets_the_third_job_run_on_capacity_nobody_else_asks_for() -> None:
    simulation, results = run_budget_case("Idle")
    starts = sorted(j["start"] for j in results.jobs)
    assert starts == pytest.approx([0, 3600, 7200], abs=2)  # the cluster is never idle while work waits
    usage = simulation.cluster.get("QueueUsage", "search")
    assert isinstance(usage, QueueUsage)
    assert usage.status.history[0].used["huawei.com/Ascend910"] == pytest.approx(24.0, abs=0.01)


def test_hetsched_usage_reads_a_simulations_books_as_a_table_csv_or_json(tmp_path: Any) -> None:
    """Chargeback from the simulated day: queue search used 16 Ascend chip-hours on Jan 1 (its budget), all
    in namespace ranking; the second day's 8 so far, with 8 left; bad input is a clear error."""
    import csv
    import io
    import json

    from typer.testing import CliRunner

    from hetsched.cli.main import app

    _, results = run_budget_case("Wait")
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results.to_json()))
    runner = CliRunner()
    shown = runner.invoke(app, ["usage", "--results", str(path), "--format", "json"])
    assert shown.exit_code == 0, shown.output
    rows = {(r["periodStart"], r["namespace"], r["resource"]): r for r in json.loads(shown.output)}
    first = rows[("1970-01-01T00:00:00Z", "*", "huawei.com/Ascend910")]
    assert first["hours"] == pytest.approx(16.0, abs=0.01) and first["budget"] is None  # a closed period
    assert rows[("1970-01-01T00:00:00Z", "ranking", "huawei.com/Ascend910")]["hours"] == pytest.approx(16.0, abs=0.01)
    now = rows[("1970-01-02T00:00:00Z", "*", "huawei.com/Ascend910")]
    assert (now["hours"], now["budget"], now["remaining"]) == pytest.approx((8.0, 16.0, 8.0), abs=0.01)
    as_csv = runner.invoke(app, ["usage", "--results", str(path), "--format", "csv", "--period", "1970-01-01"])
    table = list(csv.DictReader(io.StringIO(as_csv.output)))
    assert as_csv.exit_code == 0 and {r["periodStart"] for r in table} == {"1970-01-01T00:00:00Z"}
    assert runner.invoke(app, ["usage", "--results", str(path)]).exit_code == 0  # the table
    (tmp_path / "bad.json").write_text('{"usage": [{"queue": "x", "spec": {"budget": {"cpu": -1}}, "status": {}}]}')
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    for args, message in ((["--results", str(tmp_path / "bad.json")], "usage[0]"),
                          (["--results", str(tmp_path / "deep.json")], "cannot read it"),
                          (["--results", str(tmp_path / "missing.json")], "cannot read it"),
                          (["--results", str(path), "--period", "<b>"], "--period"),
                          (["--results", str(path), "--format", "xml"], "--format")):
        bad = runner.invoke(app, ["usage", *args])
        assert bad.exit_code == 2 and message in bad.output and "Traceback" not in bad.output, bad.output


def test_a_pod_that_ended_is_still_charged_when_the_books_could_not_be_written_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator edits the budget while the accountant writes: its status write conflicts (409). The pod that
    ended meanwhile is kept and charged at the next tick, not lost."""
    from hetsched.ports import Conflict

    bench = with_queue(Bench())
    bench.run("train", 2)
    bench.at(NOV_30_22H + 1800)
    bench.finish("train")
    original = bench.cluster.update
    refused: list[str] = []

    def conflicting(obj: Any) -> Any:
        if isinstance(obj, QueueUsage) and not refused:
            refused.append(obj.metadata.name)
            raise Conflict("QueueUsage search: the object has been modified")
        return original(obj)

    monkeypatch.setattr(bench.cluster, "update", conflicting)
    bench.accountant.tick()
    assert refused == ["search"] and bench.usage().status.used == {}
    bench.at(NOV_30_22H + 3600)
    bench.accountant.tick()
    assert bench.usage().status.used[CHIPS] == pytest.approx(1.0)  # 30 minutes of 2 chips, once


def test_changing_the_period_closes_the_books_where_they_stop_and_opens_the_new_kind() -> None:
    """Month → Week on Tuesday Dec 1: the month's hours so far go to history (Dec 1 → the change), and the
    week from Monday Nov 30 goes on from there."""
    start = float(calendar.timegm((2026, 12, 1, 6, 0, 0)))
    bench = with_queue(Bench(start))
    bench.run("serve", 1)
    bench.at(start + 3600)
    bench.accountant.tick()
    bench.set_spec(period="Week")
    bench.at(start + 7200)
    bench.accountant.tick()
    status = bench.usage().status
    (month,) = status.history
    assert month.periodStart == calendar.timegm((2026, 12, 1, 0, 0, 0)) and month.periodEnd == start + 3600
    assert month.used[CHIPS] == pytest.approx(1.0) and status.used[CHIPS] == pytest.approx(1.0)
    assert status.periodStart == calendar.timegm((2026, 11, 30, 0, 0, 0))
