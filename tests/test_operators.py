"""Gangs handed over by the operators users run on Volcano (issue 18), from fixtures under
``tests/fixtures/operators`` that hold the PodGroup and pods *as each operator creates them* (each fixture
says which source it follows). Each is valid for ``hetsched validate``, and in the simulator is placed all
or nothing, in its PodGroup's queue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hetsched.cli.main import app

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "operators"
GPU_CLUSTER = """apiVersion: hetsched.io/v1alpha1
kind: ClusterSpec
metadata: {{name: gpu-{count}}}
pools:
- name: gpu
  count: {count}
  cpu: "64"
  memory: 512Gi
  accelerators: [{{kind: nvidia, model: A100-SXM4-80GB, count: 8}}]
"""


def gpu_cluster(tmp_path: Path, count: int) -> Path:
    path = tmp_path / f"gpu-{count}.yaml"
    path.write_text(GPU_CLUSTER.format(count=count))
    return path


def simulate_json(cluster: str, fixture: str, code: int = 0) -> tuple[list[dict[str, Any]], str]:
    """``hetsched simulate --json`` of one fixture: the jobs it reports and the whole output, after checking
    the exit code (3: some job still waits)."""
    result = CliRunner().invoke(app, ["simulate", "--cluster", cluster, fixture, "--json"])
    assert result.exit_code == code, result.output
    jobs: list[dict[str, Any]] = json.loads(result.output[result.output.index("{"):])["jobs"]
    return jobs, result.output


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.yaml")))
def test_every_operator_fixture_is_valid(fixture: str) -> None:
    result = CliRunner().invoke(app, ["validate", str(FIXTURES / fixture)])
    assert result.exit_code == 0, result.output


def test_a_kubeflow_pytorchjob_runs_all_or_nothing(tmp_path: Path) -> None:
    """Master + 2 workers of 8 GPUs: on 2 servers none of them runs (the PodGroup says why); on 3 all
    three start at once and complete, as one job in the PodGroup's queue."""
    fixture = str(FIXTURES / "kubeflow-pytorchjob.yaml")
    _, short = simulate_json(str(gpu_cluster(tmp_path, 2)), fixture, 3)
    assert "default/bert" in short and "nvidia.com/gpu" in short
    (job,), _ = simulate_json(str(gpu_cluster(tmp_path, 3)), fixture)
    assert (job["kind"], job["name"], job["queue"], job["phase"]) == ("PyTorchJob", "bert", "default", "Completed")
    assert len(job["pods"]) == 3 and len({p["start"] for p in job["pods"]}) == 1
    assert len({p["node"] for p in job["pods"]}) == 3


def test_an_mpijob_with_a_launcher_that_requests_nothing_runs_whole_in_its_queue(tmp_path: Path) -> None:
    """The MPI operator's launcher asks for no resources (a best-effort pod) beside 2 workers of 8 GPUs:
    it counts toward the gang (minMember 3) and the three start together, in the queue the MPIJob named."""
    fixture = str(FIXTURES / "mpi-operator-mpijob.yaml")
    (job,), _ = simulate_json(str(gpu_cluster(tmp_path, 2)), fixture)
    assert (job["kind"], job["name"], job["queue"], job["phase"]) == ("MPIJob", "allreduce", "research", "Completed")
    assert len(job["pods"]) == 3 and len({p["start"] for p in job["pods"]}) == 1


CPU_CLUSTER = """apiVersion: hetsched.io/v1alpha1
kind: ClusterSpec
metadata: {{name: cpu}}
pools:
- {{name: cpu, count: 1, cpu: "{cpu}", memory: 64Gi}}
"""


def test_a_spark_driver_runs_first_and_its_executors_join_its_podgroup(tmp_path: Path) -> None:
    """Spark's PodGroup (minMember 1, minResources for the whole application) exists before the driver;
    the driver runs alone, and the executors it creates 20 s later join its group and run. On a server too
    small for the whole application, nothing starts: the PodGroup is not admitted (its minResources)."""
    fixture = str(FIXTURES / "spark-volcano.yaml")
    cluster = tmp_path / "cpu.yaml"
    cluster.write_text(CPU_CLUSTER.format(cpu=8))
    (job,), _ = simulate_json(str(cluster), fixture)
    starts = {p["name"].rsplit("-", 1)[-1]: p["start"] for p in job["pods"]}
    assert starts["driver"] < 20 <= starts["1"] and starts["1"] == starts["2"] and job["phase"] == "Completed"
    cluster.write_text(CPU_CLUSTER.format(cpu=4))
    _, small = simulate_json(str(cluster), fixture, 3)
    assert "the gang is larger than the whole cluster: cpu 5 > 4" in small


def test_a_ray_cluster_head_and_workers_start_together_in_their_queue(tmp_path: Path) -> None:
    """KubeRay's head and two 8-GPU workers are one gang (minMember 3) in the queue the RayCluster's label
    names: too big for one server, nothing starts; on two, all three start at once."""
    fixture = str(FIXTURES / "kuberay-raycluster.yaml")
    _, short = simulate_json(str(gpu_cluster(tmp_path, 1)), fixture, 3)  # 16 GPUs on one server of 8: none starts
    assert "default/rc: the gang is larger than the whole cluster" in short  # named after its owner
    (job,), _ = simulate_json(str(gpu_cluster(tmp_path, 2)), fixture)
    assert (job["kind"], job["name"], job["queue"]) == ("RayCluster", "rc", "research")
    assert len(job["pods"]) == 3 and len({p["start"] for p in job["pods"]}) == 1


def test_a_trainer_v2_trainjob_whose_pods_name_their_group_by_label_is_one_gang(tmp_path: Path) -> None:
    """Trainer v2 names the PodGroup only in a *label* (scheduling.volcano.sh/group-name): the two 8-GPU
    nodes still form one gang — on one server neither runs, nor is a group of their own made for them; on
    two they start together, in the TrainJob's queue."""
    fixture = str(FIXTURES / "kubeflow-trainer-v2-trainjob.yaml")
    (waiting,), _ = simulate_json(str(gpu_cluster(tmp_path, 1)), fixture, 3)
    assert waiting["name"] == "llama-ft" and not any(p["start"] is not None for p in waiting["pods"])
    (job,), _ = simulate_json(str(gpu_cluster(tmp_path, 2)), fixture)
    assert (job["kind"], job["name"], job["queue"]) == ("TrainJob", "llama-ft", "research")
    assert len(job["pods"]) == 2 and len({p["start"] for p in job["pods"]}) == 1


def test_an_argo_step_creates_a_volcano_job_that_completes(tmp_path: Path) -> None:
    """Argo hands Volcano Jobs over as they are (a generated name, the Workflow as owner, the ssh/env/svc
    plugins): the Job runs and reaches Completed, the phase Argo's successCondition waits for."""
    fixture = str(FIXTURES / "argo-workflow-volcano-job.yaml")
    cluster = tmp_path / "cpu.yaml"
    cluster.write_text(CPU_CLUSTER.format(cpu=8))
    (job,), _ = simulate_json(str(cluster), fixture)
    assert job["kind"] == "Job" and job["name"].startswith("step-job-hello1-") and job["phase"] == "Completed"
    assert len(job["pods"]) == 2


def test_explain_names_an_operators_gang_by_its_owner_and_says_why_it_waits(tmp_path: Path) -> None:
    """``hetsched explain bert`` finds the PodGroup the training operator made for PyTorchJob bert (by its
    owner) and says why it waits: two servers of 8 GPUs for three 8-GPU pods."""
    fixture = str(FIXTURES / "kubeflow-pytorchjob.yaml")
    result = CliRunner().invoke(app, ["explain", "bert", "--cluster", str(gpu_cluster(tmp_path, 2)), fixture,
                                      "--until", "10", "--json"])
    assert result.exit_code == 0, result.output
    explained = json.loads(result.output)
    assert explained["job"].endswith("bert") and explained["minMember"] == 3 and explained["ready"] == 0
    said = " ".join(explained["schedulerSays"]) + json.dumps(explained["tasks"])
    assert "nvidia.com/gpu" in said, explained
