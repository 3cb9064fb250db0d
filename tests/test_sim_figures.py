"""Figures a user can trust (issue 16): what ``hetsched simulate`` reports, checked against what happened.

- Allocation never exceeds 100 %: over random runs with preemption, reclaim, chip faults, NotReady nodes
  and drains, at no instant do the recorded runs of one accelerator kind hold more chips than the cluster
  has; so chip-seconds held ≤ chips × time, per kind and per queue, and the summary's ratio is ≤ 1.
- A queue's share of the cluster never goes above 1 (a draining node's pods still count against it).
- Every eviction (preempt, reclaim, drain) is in the evictions table with its cost, and a drain is
  charged with the jobs it hit.
- Pods and jobs ended by CompleteJob, AbortJob or eviction have their end time.
- A run that ends with jobs still waiting says so: exit 3, the jobs named with why, results.json lists them.
- Tables are whole when stdout is a pipe; ``--json`` prints results.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.api.manifest import load_text
from hetsched.scheduler.defaults import parse_conf
from hetsched.sim.faults import Fault
from hetsched.sim.results import Results
from hetsched.sim.simulator import Simulation
from tests.test_work_conservation import CONFS, KINDS, Case, cases, manifests, nodes, one_server_job

EXAMPLES = int(os.environ.get("HETSCHED_FIGURES_EXAMPLES", "100"))
SCENARIOS = Path(__file__).resolve().parent.parent / "examples" / "scenarios"
HEAL_AT = 3000.0


def most_held(results: Results, case: Case) -> dict[str, float]:
    """Per accelerator kind, the most chips the recorded runs hold at any one instant."""
    asks = {job["name"]: (job["kind"], job["chips"]) for job in case.jobs}
    events: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for record in results.jobs:
        kind, chips = asks[record["name"]]
        for pod in record["pods"]:
            for run in pod["runs"]:
                end = run[1] if len(run) == 2 else results.summary["simulatedSeconds"]
                events[kind] += [(run[0], chips), (end, -chips)]
    peak: dict[str, float] = {}
    for kind, changes in events.items():
        held = 0.0
        peak[kind] = 0.0
        for _, change in sorted(changes):  # at one instant, ends (negative) before starts
            held += change
            peak[kind] = max(peak[kind], held)
    return peak


@st.composite
def fault_schedules(draw: st.DrawFn, case: Case) -> list[Fault]:
    names = [f"{kind}-{i:02d}" for kind, count in case.servers.items() for i in range(count)]
    faults = []
    for _ in range(draw(st.integers(0, 4))):
        node = draw(st.sampled_from(names))
        kind = draw(st.sampled_from(["ChipUnhealthy", "NodeNotReady", "Drain"]))
        chips = [draw(st.integers(0, KINDS[node.rsplit("-", 1)[0]][2] - 1))] if kind == "ChipUnhealthy" else []
        faults.append(Fault(at=10 * draw(st.integers(0, 60)), node=node, kind=kind, chips=chips))  # type: ignore[arg-type]
    for node in names:  # everything repaired later, so every fitting job can end
        chips = list(range(KINDS[node.rsplit("-", 1)[0]][2]))
        faults += [Fault(at=HEAL_AT, node=node, kind="ChipRecovered", chips=chips),
                   Fault(at=HEAL_AT, node=node, kind="NodeReady"), Fault(at=HEAL_AT, node=node, kind="Uncordon")]
    return faults


@settings(max_examples=EXAMPLES)
@given(data=st.data(), case=cases())
def test_allocation_never_exceeds_what_the_cluster_has_and_every_eviction_is_charged(
        data: st.DataObject, case: Case) -> None:
    faults = data.draw(fault_schedules(case))
    conf = parse_conf(CONFS["evictions"] if case.conf in ("evictions", "default") else CONFS[case.conf])
    simulation = Simulation(nodes(case), load_text(manifests(case)), conf, faults=faults, until=50_000)
    results = simulation.run()
    end = results.summary["simulatedSeconds"]
    peak = most_held(results, case)
    for kind, count in case.servers.items():
        chips = count * KINDS[kind][2]
        assert peak.get(kind, 0.0) <= chips, (kind, peak, chips)
        assert results.summary["allocationRatio"][kind] <= 1.0 + 1e-9
    for queue in case.queues:  # chip-seconds held by one queue ≤ chips × time
        for kind, count in case.servers.items():
            held = sum(job["chips"] * sum((r[1] if len(r) == 2 else end) - r[0] for p in record["pods"]
                                          for r in p["runs"])
                       for job in case.jobs if job["queue"] == queue and job["kind"] == kind
                       for record in results.jobs if record["name"] == job["name"])
            assert held <= count * KINDS[kind][2] * end + 1e-6
    for name, queue in results.queues.items():  # the share plot: never above the whole cluster, drains included
        assert all(point[1] <= 1.0 + 1e-9 for point in queue["series"]), (name, queue["series"])
    for eviction in results.evictions:
        assert eviction["lostChipSeconds"] >= 0
        if eviction["action"] == "drain":
            assert any(f["kind"] == "Drain" and f["target"] == eviction["node"] and eviction["job"] in f["jobs"]
                       for f in results.faults), eviction
    lost = sum(e["lostChipSeconds"] for e in results.evictions)
    assert sum(results.summary["evictions"]["lostChipSecondsByAction"].values()) == pytest.approx(lost, abs=1e-3)
    for record in results.jobs:  # a job that ended has its end, and so has each of its pods that ran
        if record["phase"] in ("Completed", "Failed", "Aborted", "Terminated"):
            assert record["end"] is not None, record
            assert all(p["end"] is not None for p in record["pods"] if p["start"] is not None), record


def job(name: str, replicas: int, chips: int, duration: int, at: int = 0, queue: str = "default") -> str:
    return one_server_job(name, queue, chips, replicas, at, duration)


def command(name: str, action: str, at: int) -> str:
    return f"""apiVersion: bus.volcano.sh/v1alpha1
kind: Command
metadata: {{name: {name}-{action.lower()}, annotations: {{hetsched.io/submit-at: "{at}"}}}}
action: {action}
target: {{apiVersion: batch.volcano.sh/v1alpha1, kind: Job, name: {name}}}"""


def test_jobs_ended_by_complete_job_abort_or_eviction_have_their_end_time() -> None:
    documents = [job("completed", 2, 8, 5000), command("completed", "CompleteJob", 300),
                 job("aborted", 1, 8, 5000), command("aborted", "AbortJob", 400)]
    simulation = Simulation(nodes(Case({"ascend": 4}, {}, [], "default")), load_text("\n---\n".join(documents)))
    records = {j["name"]: j for j in simulation.run().jobs}
    assert records["completed"]["phase"] == "Completed" and records["completed"]["end"] == 300
    assert [p["end"] for p in records["completed"]["pods"]] == [300, 300]
    assert records["aborted"]["phase"] == "Aborted" and records["aborted"]["end"] == 400
    assert [p["runs"] for p in records["aborted"]["pods"]] == [[[1, 400]]]


def simulate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hetsched.cli.main", "simulate", *args], capture_output=True,
                          text=True, check=False, cwd=tmp_path, timeout=300, env={**os.environ, "COLUMNS": ""})


def test_a_run_that_ends_with_jobs_waiting_exits_3_and_names_them(tmp_path: Path) -> None:
    workload = tmp_path / "jobs.yaml"
    workload.write_text("\n---\n".join([
        job("fits", 2, 8, 100),
        job("too-big", 5, 8, 100),  # 40 chips on a 32-chip cluster
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: shut}\nstatus: {state: Closed}",
        job("closed-queue", 1, 1, 100, queue="shut"),
    ]))
    run = simulate(tmp_path, "--cluster", str(SCENARIOS / "ascend-4.yaml"), str(workload), "-o", "out.json")
    assert run.returncode == 3, run.stderr
    assert "the run ended with 2 job(s) still waiting (2 never ran)" in run.stderr
    assert "default/too-big: the gang is larger than the whole cluster: huawei.com/Ascend910 40 > 32" in run.stderr
    assert "default/closed-queue: queue shut is Closed" in run.stderr
    assert "Traceback" not in run.stderr
    summary = json.loads((tmp_path / "out.json").read_text())["summary"]
    assert summary["endedBy"] == "no more events"
    assert [(w["name"], w["ran"]) for w in summary["waiting"]] == [("closed-queue", False), ("too-big", False)]
    # the table names them too, whole although stdout is a pipe (no "…" at 80 columns)
    assert "Jobs that never got their gang (nothing left that could change that)" in run.stdout
    line = next(line for line in run.stdout.splitlines() if "default/too-big" in line)
    assert "the gang is larger than the whole cluster: huawei.com/Ascend910 40 > 32" in line
    assert "…" not in run.stdout
    # stopped by --until, the same jobs are waiting but nothing says the run is stuck
    until = simulate(tmp_path, "--cluster", str(SCENARIOS / "ascend-4.yaml"), str(workload), "--until", "50")
    assert until.returncode == 0, until.stderr
    assert "Jobs that never got their gang by t=50s" in until.stdout


def test_json_prints_results_json_to_stdout(tmp_path: Path) -> None:
    run = simulate(tmp_path, "--cluster", str(SCENARIOS / "ascend-4.yaml"), str(SCENARIOS / "two-queues.yaml"),
                   "--json")
    assert run.returncode == 0, run.stderr
    results = json.loads(run.stdout)
    assert results["summary"]["phases"] == {"Completed": 8}
    assert set(results) == {"cluster", "jobs", "summary", "queues", "evictions", "faults", "usage"}
