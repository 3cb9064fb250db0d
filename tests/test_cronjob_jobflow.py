"""Volcano's CronJob and JobFlow/JobTemplate (issue 31): their controllers on the embedded cluster with an
injected clock, and whole simulations — cases after Volcano's ``example/cronjob``, ``example/jobflow`` and
its controllers' tests (``pkg/controllers/cronjob``, ``pkg/controllers/jobflow``), and Kubernetes'
CronJob rules Volcano's follows (concurrency policies, starting deadline, history limits, suspend, time
zone).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hetsched.api.manifest import ManifestError, load_text
from hetsched.api.objects import CronJob, Job, JobFlow, JobTemplate
from hetsched.cluster.memory import MemoryCluster
from hetsched.controllers.cronjob import CronJobController
from hetsched.controllers.jobflow import JobFlowController
from hetsched.sim.kernel import SimClock
from hetsched.sim.simulator import Simulation
from tests.builders import node, queue

pytestmark = pytest.mark.timeout(300)

TASKS = '[{name: t, replicas: 1, template: {metadata: {annotations: {hetsched.io/duration: "60"}}, ' \
        'spec: {containers: [{name: c, image: busybox, resources: {requests: {cpu: "1"}}}]}}}]'


def cronjob(schedule: str = "*/5 * * * *", **spec: Any) -> CronJob:
    extra = "".join(f"  {k}: {v}\n" for k, v in spec.items())
    (made,) = load_text(f"""\
apiVersion: batch.volcano.sh/v1alpha1
kind: CronJob
metadata: {{name: nightly, namespace: default}}
spec:
  schedule: "{schedule}"
{extra}  jobTemplate:
    metadata: {{labels: {{team: search}}}}
    spec: {{minAvailable: 1, tasks: {TASKS}}}
""", "cronjob.yaml")
    assert isinstance(made, CronJob)
    return made


class Cron:
    """The controller on the embedded cluster, its clock moved by hand."""

    def __init__(self, made: CronJob) -> None:
        self.clock = SimClock()
        self.cluster = MemoryCluster(self.clock)
        self.controller = CronJobController(self.cluster, self.clock, events=self.cluster)
        self.cluster.create(made)
        self.controller.process()

    def at(self, moment: float) -> None:
        self.clock.advance_to(moment)
        self.controller.wake()
        self.controller.process()

    def jobs(self) -> list[str]:
        return sorted(j.metadata.name for j in self.cluster.list("Job"))

    def finish(self, name: str, phase: str = "Completed") -> None:
        job = self.cluster.get("Job", f"default/{name}")
        assert isinstance(job, Job)
        state = job.status.state.model_copy(update={"phase": phase, "lastTransitionTime": self.clock.now()})
        self.cluster.update(job.model_copy(update={"status": job.status.model_copy(update={"state": state})}))
        self.controller.process()

    def status(self) -> Any:
        found = self.cluster.get("CronJob", "default/nightly")
        assert isinstance(found, CronJob)
        return found.status

    def events(self, reason: str) -> list[str]:
        return [e.message for e in self.cluster.events if e.reason == reason]


def test_a_job_on_each_scheduled_time_named_by_it() -> None:
    cron = Cron(cronjob())
    assert cron.jobs() == [] and cron.controller.next_deadline() == 300
    cron.at(300)
    assert cron.jobs() == ["nightly-5"]  # minutes since the epoch of the scheduled time, as Kubernetes names it
    job = cron.cluster.get("Job", "default/nightly-5")
    assert isinstance(job, Job) and job.metadata.labels["team"] == "search"
    assert job.metadata.ownerReferences[0].kind == "CronJob"
    assert cron.status().lastScheduleTime == 300 and [r.name for r in cron.status().active] == ["nightly-5"]
    cron.finish("nightly-5")
    assert cron.status().active == [] and cron.status().lastSuccessfulTime == 300


def test_allow_runs_jobs_side_by_side_forbid_skips_replace_replaces() -> None:
    allow = Cron(cronjob(concurrencyPolicy="Allow"))
    allow.at(300)
    allow.at(600)
    assert allow.jobs() == ["nightly-10", "nightly-5"]
    forbid = Cron(cronjob(concurrencyPolicy="Forbid"))
    forbid.at(300)
    forbid.at(600)
    assert forbid.jobs() == ["nightly-5"] and forbid.events("JobAlreadyActive")
    forbid.finish("nightly-5")  # the skipped run starts once the active one finished (no deadline set)
    assert forbid.jobs() == ["nightly-10", "nightly-5"]
    replace = Cron(cronjob(concurrencyPolicy="Replace"))
    replace.at(300)
    replace.at(600)
    assert replace.jobs() == ["nightly-10"] and replace.events("SuccessfulDelete")


def test_a_run_past_its_starting_deadline_is_missed_and_said() -> None:
    cron = Cron(cronjob(startingDeadlineSeconds=60))
    cron.clock.advance_to(400)  # the controller slept through the 300 s run
    cron.controller.wake()
    cron.controller.process()
    assert cron.jobs() == [] and cron.events("MissSchedule")
    cron.at(600)
    assert cron.jobs() == ["nightly-10"]


def test_history_limits_keep_the_newest_finished_jobs() -> None:
    cron = Cron(cronjob(successfulJobsHistoryLimit=1, failedJobsHistoryLimit=0))
    for minute, phase in ((5, "Completed"), (10, "Completed"), (15, "Failed")):
        cron.at(minute * 60)
        cron.finish(f"nightly-{minute}", phase)
    assert cron.jobs() == ["nightly-10"]


def test_suspend_makes_nothing_and_a_time_zone_moves_the_schedule() -> None:
    suspended = Cron(cronjob(suspend="true"))
    suspended.at(3600)
    assert suspended.jobs() == [] and suspended.controller.next_deadline() is None
    shanghai = Cron(cronjob("0 9 * * *", timeZone="Asia/Shanghai"))
    assert shanghai.controller.next_deadline() == 3600  # 09:00 in Shanghai is 01:00 UTC


@pytest.mark.parametrize(("line", "message"), [
    ('schedule: "61 * * * *"', "schedule: must be five cron fields"),
    ('schedule: "TZ=UTC */5 * * * *"', "give spec.timeZone"),
    ('schedule: "*/5 * * * *"\n  timeZone: Mars/Base', "timeZone: unknown time zone 'Mars/Base'"),
    ('schedule: "*/5 * * * *"\n  concurrencyPolicy: Sometimes', "concurrencyPolicy"),
])
def test_a_bad_cronjob_is_refused_naming_the_field(line: str, message: str) -> None:
    with pytest.raises(ManifestError) as error:
        load_text(f"""\
apiVersion: batch.volcano.sh/v1alpha1
kind: CronJob
metadata: {{name: bad}}
spec:
  {line}
  jobTemplate: {{spec: {{tasks: {TASKS}}}}}
""", "cronjob.yaml")
    assert message in "; ".join(map(str, error.value.problems))


def test_a_cronjob_in_a_simulation_runs_every_schedule_until_the_end(tmp_path: Path) -> None:
    """Every 10 minutes for an hour: six one-minute Jobs run and complete; without ``--until`` the run
    would never end, and saying so is an input error (exit 2)."""
    made = cronjob("*/10 * * * *")
    results = Simulation([node("n0", cpu="4")], [made], until=3700).run()
    jobs = {j["name"]: j for j in results.jobs}
    assert sorted(jobs) == [f"nightly-{m}" for m in (10, 20, 30, 40, 50, 60)]
    assert all(j["phase"] == "Completed" for j in jobs.values())
    with pytest.raises(ValueError, match="--until"):
        Simulation([node("n0", cpu="4")], [made])
    manifest = tmp_path / "cron.yaml"
    manifest.write_text(f"""\
apiVersion: batch.volcano.sh/v1alpha1
kind: CronJob
metadata: {{name: nightly}}
spec: {{schedule: "*/10 * * * *", jobTemplate: {{spec: {{tasks: {TASKS}}}}}}}
""")
    spec = tmp_path / "cluster.yaml"
    spec.write_text("apiVersion: hetsched.io/v1alpha1\nkind: ClusterSpec\npools:\n- {name: cpu, count: 1, cpu: '8'}\n")
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "simulate", "-c", str(spec), str(manifest),
                          "-q"], capture_output=True, text=True, timeout=200, check=False)
    assert run.returncode == 2 and "--until" in run.stderr and "Traceback" not in run.stderr


# ------------------------------------------------------------------------------------------------ JobFlow

def template(name: str, queue_name: str = "default") -> str:
    return f"""\
apiVersion: flow.volcano.sh/v1alpha1
kind: JobTemplate
metadata: {{name: {name}, namespace: default}}
spec: {{minAvailable: 1, queue: {queue_name}, tasks: {TASKS}}}
"""


FLOW = """\
apiVersion: flow.volcano.sh/v1alpha1
kind: JobFlow
metadata: {name: test, namespace: default}
spec:
  jobRetainPolicy: %s
  flows:
  - name: a
  - name: b
    dependsOn: {targets: [a]}
  - name: c
    dependsOn: {targets: [b]}
  - name: d
    dependsOn: {targets: [b]}
  - name: e
    dependsOn: {targets: [c, d]}
"""


def test_the_example_jobflow_runs_its_jobs_in_dependency_order() -> None:
    """Volcano's ``example/jobflow``: a → b → (c, d) → e, each job a one-minute job from its JobTemplate."""
    objects = load_text("---\n".join([*(template(n) for n in "abcde"), FLOW % "retain"]))
    simulation = Simulation([node("n0", cpu="8")], objects)
    results = simulation.run()
    start = {j["name"]: j["start"] for j in results.jobs}
    end = {j["name"]: j["end"] for j in results.jobs}
    assert sorted(start) == [f"test-{n}" for n in "abcde"]
    assert start["test-b"] >= end["test-a"] and start["test-c"] >= end["test-b"] and start["test-d"] >= end["test-b"]
    assert start["test-e"] >= max(end["test-c"], end["test-d"])
    flow = simulation.cluster.get("JobFlow", "default/test")
    assert isinstance(flow, JobFlow) and flow.status.state.phase == "Succeed"
    assert flow.status.completedJobs == [f"test-{n}" for n in "abcde"]
    made = simulation.cluster.get("JobTemplate", "default/b")
    assert isinstance(made, JobTemplate) and made.status.jobDependsOnList == ["test-b"]


def test_jobretainpolicy_delete_removes_the_jobs_once_the_flow_succeeded() -> None:
    objects = load_text("---\n".join([*(template(n) for n in "abcde"), FLOW % "delete"]))
    simulation = Simulation([node("n0", cpu="8")], objects)
    simulation.run()
    assert simulation.cluster.list("Job") == [] and simulation.cluster.list("Pod") == []


class Flows:
    def __init__(self, text: str) -> None:
        self.clock = SimClock()
        self.cluster = MemoryCluster(self.clock)
        self.cluster.create(queue("default"))
        self.controller = JobFlowController(self.cluster, self.clock, events=self.cluster)
        for obj in load_text(text):
            self.cluster.create(obj)
        self.controller.process()

    def jobs(self) -> dict[str, Job]:
        return {j.metadata.name: j for j in self.cluster.list("Job") if isinstance(j, Job)}

    def set_phase(self, name: str, phase: str) -> None:
        job = self.jobs()[name]
        state = job.status.state.model_copy(update={"phase": phase})
        self.cluster.update(job.model_copy(update={"status": job.status.model_copy(update={"state": state})}))
        self.controller.process()

    def flow(self) -> JobFlow:
        found = self.cluster.get("JobFlow", "default/test")
        assert isinstance(found, JobFlow)
        return found


def test_a_missing_template_holds_its_flow_and_says_so_until_it_arrives() -> None:
    flows = Flows("---\n".join([template("a"), FLOW.replace("  - name: c\n    dependsOn: {targets: [b]}\n", "")
                                .replace("  - name: d\n    dependsOn: {targets: [b]}\n", "")
                                .replace("targets: [c, d]", "targets: [b]") % "retain"]))
    assert sorted(flows.jobs()) == ["test-a"]
    flows.set_phase("test-a", "Completed")
    assert sorted(flows.jobs()) == ["test-a"]
    assert any("JobTemplate default/b does not exist" in e.message for e in flows.cluster.events)
    (b,) = load_text(template("b"))
    flows.cluster.create(b)
    flows.controller.process()
    assert sorted(flows.jobs()) == ["test-a", "test-b"] and flows.flow().status.state.phase == "Running"


def test_a_failed_job_fails_the_flow_and_a_patch_overrides_the_template() -> None:
    text = "---\n".join([template("a"), template("b", "research"), """\
apiVersion: flow.volcano.sh/v1alpha1
kind: JobFlow
metadata: {name: test, namespace: default}
spec:
  flows:
  - name: a
  - name: b
    dependsOn: {targets: [a]}
    patch: {jobSpec: {queue: training, minAvailable: 1}}
"""])
    flows = Flows(text)
    flows.set_phase("test-a", "Completed")
    assert flows.jobs()["test-b"].spec.queue == "training"
    flows.set_phase("test-b", "Failed")
    assert flows.flow().status.state.phase == "Failed" and flows.flow().status.failedJobs == ["test-b"]


@pytest.mark.parametrize(("flows", "message"), [
    ("  - {name: a, dependsOn: {targets: [b]}}\n  - {name: b, dependsOn: {targets: [a]}}\n",
     "dependencies form a cycle (a → b → a)"),
    ("  - {name: a, dependsOn: {targets: [z]}}\n", "'a' depends on 'z', which is not a flow of this JobFlow"),
    ("  - {name: a}\n  - {name: a}\n", "'a' is listed twice"),
    ("  - {name: a, dependsOn: {targets: [], probe: {tcpSocketList: [{taskName: t, port: 80}]}}}\n",
     "probes (httpGetList, tcpSocketList, taskStatusList) are not evaluated"),
])
def test_a_bad_jobflow_is_refused_naming_the_field(flows: str, message: str) -> None:
    with pytest.raises(ManifestError) as error:
        load_text("apiVersion: flow.volcano.sh/v1alpha1\nkind: JobFlow\nmetadata: {name: f}\nspec:\n  flows:\n"
                  + flows, "flow.yaml")
    assert message in "; ".join(map(str, error.value.problems))


def test_after_more_than_100_missed_starts_only_the_latest_runs() -> None:
    """Kubernetes' rule, which Volcano's controller follows: a CronJob that slept through more than 100
    scheduled times says so and starts the most recent one only."""
    cron = Cron(cronjob("* * * * *"))
    cron.clock.advance_to(100_000)
    cron.controller.wake()
    cron.controller.process()
    assert cron.jobs() == [f"nightly-{100_000 // 60}"] and cron.events("TooManyMissedTimes")
