"""End to end: the simulator, the demo and the CLI's simulate command.

Covers: arrivals and durations in simulated time, gang start/end times, results.json shape, determinism,
the seed BERT job landing on Ascend nodes, and bad simulator annotations reported as input errors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hetsched.api.manifest import ManifestError, load_text
from hetsched.sim.demo import demo_nodes, demo_workloads
from hetsched.sim.simulator import Simulation
from tests.builders import node

REPO = Path(__file__).resolve().parent.parent
TWO_JOBS = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: first, annotations: {hetsched.io/submit-at: "0"}}
spec:
  tasks:
  - name: w
    replicas: 2
    template:
      metadata: {annotations: {hetsched.io/duration: "100"}}
      spec: {containers: [{name: c, resources: {requests: {cpu: "2"}}}]}
---
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: second, annotations: {hetsched.io/submit-at: "10"}}
spec:
  tasks:
  - name: w
    replicas: 2
    template:
      metadata: {annotations: {hetsched.io/duration: "50"}}
      spec: {containers: [{name: c, resources: {requests: {cpu: "2"}}}]}
"""


def test_second_gang_waits_for_the_first_to_finish() -> None:
    results = Simulation([node("n1", cpu="4")], load_text(TWO_JOBS)).run()
    jobs = {j["name"]: j for j in results.jobs}
    assert jobs["first"]["phase"] == "Completed" and jobs["second"]["phase"] == "Completed"
    assert jobs["first"]["start"] == 1.0  # admitted in the cycle at t=0, placed in the next
    assert jobs["first"]["end"] == 101.0
    assert jobs["second"]["start"] >= 101.0 and jobs["second"]["end"] == jobs["second"]["start"] + 50
    assert results.summary["phases"] == {"Completed": 2}
    assert results.summary["queueWaitSeconds"]["count"] == 2
    reasons = results.summary["unschedulableReasons"]
    assert "minResources exceed the cluster's headroom for cpu" in reasons
    second = next(j for j in results.jobs if j["name"] == "second")
    assert any("needs 4, headroom 800m" in r for r in second["unschedulableReasons"])


def test_bad_simulator_annotation_is_an_input_error() -> None:
    """Caught where the file is read (``validate`` names file, document and field), and by the simulator for
    objects built in code."""
    with pytest.raises(ManifestError) as info:
        load_text(TWO_JOBS.replace('submit-at: "10"', 'submit-at: "soon"'), "jobs.yaml")
    assert str(info.value) == ('jobs.yaml: document 2 (Job/second): metadata.annotations["hetsched.io/submit-at"]: '
                               "must be a number of seconds from 0 to 31,536,000, got 'soon'")
    objects = load_text(TWO_JOBS)
    second = objects[1]
    bad = second.model_copy(update={"metadata": second.metadata.model_copy(
        update={"annotations": {**second.metadata.annotations, "hetsched.io/submit-at": "soon"}})})
    with pytest.raises(ManifestError) as info:
        Simulation([node("n1")], [objects[0], bad])
    assert "(Job/second)" in str(info.value) and "hetsched.io/submit-at" in str(info.value)


def test_demo_runs_and_the_bert_job_lands_on_ascend_nodes() -> None:
    nodes = demo_nodes()
    results = Simulation(nodes, demo_workloads(seed=7)).run()
    ascend = {n.metadata.name for n in nodes if n.metadata.labels.get("accelerator") == "huawei-ascend"}
    bert = next(j for j in results.jobs if j["name"] == "ascend-bert-pretrain")
    assert bert["phase"] == "Completed"
    assert len(bert["pods"]) == 8 and all(p["node"] in ascend for p in bert["pods"])
    assert len({p["node"] for p in bert["pods"]}) == 1, "8 × 1 chip on one node's 8 chips when one is free"
    mixed = next(j for j in results.jobs if j["name"] == "train-ascend-serve-mlu")
    pools = {p["name"].split("-")[-2]: p["node"].split("-")[0] for p in mixed["pods"]}
    assert pools == {"train": "ascend910", "serve": "mlu370"}
    assert len({p["start"] for p in mixed["pods"]}) == 1, "one gang across both pools"
    mlu = next(j for j in results.jobs if j["name"] == "mlu-inference-job")
    assert mlu["pods"][0]["node"].startswith("mlu370-")
    assert results.summary["jobs"] == len(results.jobs) > 50
    assert set(results.summary["allocationRatio"]) == {"ascend", "cambricon", "nvidia"}
    again = Simulation(demo_nodes(), demo_workloads(seed=7)).run()
    assert again.to_json() == results.to_json()  # deterministic


def test_simulate_command_writes_results(tmp_path: Path) -> None:
    workload = tmp_path / "jobs.yaml"
    workload.write_text(TWO_JOBS)
    out = tmp_path / "results.json"
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "simulate", "--cluster",
                          str(REPO / "examples/clusters/mixed.yaml"), str(workload), "--output", str(out), "-q"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    data = json.loads(out.read_text())
    assert {"jobs", "summary", "cluster"} <= set(data)
    job = data["jobs"][0]
    assert {"name", "namespace", "queue", "phase", "submit", "start", "end", "pods"} <= set(job)
    assert all(p["node"] for p in job["pods"])
    bad = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "simulate", "--cluster",
                          str(workload), str(workload), "-q"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "ClusterSpec" in bad.stderr


def test_workload_naming_an_undefined_queue_is_an_input_error() -> None:
    objects = load_text(TWO_JOBS.replace("spec:\n  tasks:", "spec:\n  queue: gpu-team\n  tasks:", 1))
    with pytest.raises(ManifestError) as info:
        Simulation([node("n1")], objects)
    assert "document 1 (Job/first): spec.queue: queue 'gpu-team' does not exist (defined: default)" in str(info.value)


def test_a_job_whose_pods_cannot_be_created_says_why_in_the_waiting_table() -> None:
    """Issue 31: a Job naming a PriorityClass that does not exist never gets pods, so the scheduler never
    says anything about it; the waiting table said "no reason" while the Job's own message had it."""
    orphan = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: orphan, namespace: default}
spec:
  minAvailable: 1
  schedulerName: volcano
  priorityClassName: does-not-exist
  tasks:
  - name: w
    replicas: 1
    template:
      metadata: {annotations: {hetsched.io/duration: "60"}}
      spec:
        containers: [{name: c, image: busybox, resources: {requests: {cpu: "1"}}}]
"""
    results = Simulation([node("n1", cpu="4")], load_text(orphan)).run()
    (waiting,) = results.summary["waiting"]
    assert waiting["name"] == "orphan" and not waiting["ran"]
    assert "spec.priorityClassName: no PriorityClass with name does-not-exist was found" in waiting["reason"]
